//! Reading the store offline, in bounded memory: [`Scan`], and the `stats`, `lookup` and `dump`
//! answers.

use std::io::Write;

use super::report::{partition_stats, Holding, Incomplete, Lookup, Stats};
use super::InspectError;
use crate::fingerprint::Fingerprint;
use crate::store::{GenerationMeta, PartitionSnapshot, Store, StoreError, LIVE_FILE};
use crate::table::UNKNOWN_OFFSET;

/// Chunk bytes a [`Scan`] reads before it closes and reopens the store: 16 MiB.
pub const SCAN_BUDGET_BYTES: u64 = 16 * 1024 * 1024;

/// A store handle that reads chunks in bounded memory, for `lookup`, `dump` and `verify`.
///
/// sled 0.34 keeps every page a one-pass scan reads in its page cache, whatever the configured
/// capacity (its LRU evicts only after 64 accesses land in one of its 256 shards), so reading a
/// whole store through one handle would hold the whole store in memory. A `Scan` closes and
/// reopens the database ([`Store::reopened`]) each time it has read [`SCAN_BUDGET_BYTES`] of
/// chunks, so its memory does not grow with the store. Measured with the debug build: peak RSS
/// 55 MB for a dump of 1,000,000 fingerprints and 63 MB for 4,000,000 (122 MB without
/// reopening). Each reopen replays sled's log, which costs time roughly linear in the store's
/// size on disk.
pub struct Scan {
    /// The handle; `None` only while it is being reopened.
    store: Option<Store>,
    /// Chunk bytes between two reopens.
    pub(super) budget: u64,
    /// Chunk bytes read since the last (re)open.
    pub(super) read: u64,
    /// Reopens so far.
    reopens: u64,
}

impl Scan {
    /// A scan of `store` with the default budget. `store` must be the only handle (see
    /// [`Store::reopened`]).
    pub fn new(store: Store) -> Scan {
        Self::with_budget(store, SCAN_BUDGET_BYTES)
    }

    /// A scan that reopens after every `budget` bytes of chunks.
    pub fn with_budget(store: Store, budget: u64) -> Scan {
        Scan {
            store: Some(store),
            budget,
            read: 0,
            reopens: 0,
        }
    }

    /// The store.
    pub fn store(&self) -> &Store {
        self.store.as_ref().expect("a failed reopen ends the scan")
    }

    /// The store handle back.
    pub fn into_store(self) -> Store {
        self.store.expect("a failed reopen ends the scan")
    }

    /// Times the store was reopened.
    pub fn reopens(&self) -> u64 {
        self.reopens
    }

    /// Reopens the store if the budget is spent.
    pub(super) fn relieve(&mut self) -> Result<(), StoreError> {
        if self.read >= self.budget {
            let store = self.store.take().expect("a failed reopen ends the scan");
            self.store = Some(store.reopened()?);
            self.read = 0;
            self.reopens += 1;
        }
        Ok(())
    }

    /// Reads and checks chunk `c` of generation `meta` of partition `p` (see
    /// [`Store::read_chunk`]).
    pub fn chunk(&mut self, p: i32, meta: &GenerationMeta, c: u32) -> Result<Vec<(u128, u32)>, StoreError> {
        self.relieve()?;
        let (entries, bytes) = self.store().read_chunk(p, meta, c)?;
        self.read += bytes as u64;
        Ok(entries)
    }
}

/// The stored form of a fingerprint (the table keeps 0 as 1; see [`crate::table`]).
fn stored(fp: Fingerprint) -> u128 {
    if fp.0 == 0 {
        1
    } else {
        fp.0
    }
}

/// Computes `stats` from the store. Errors: a snapshot or stamp that does not parse, sled I/O.
pub fn stats(store: &Store) -> Result<Stats, StoreError> {
    let mut partitions = Vec::new();
    for p in store.partitions()? {
        if let Some(s) = store.snapshot(p)? {
            partitions.push(partition_stats(p, &s));
        }
    }
    Ok(Stats {
        format_version: store.format_version()?.unwrap_or(crate::store::FORMAT_VERSION),
        identity: store.identity()?,
        size_on_disk_bytes: store.size_on_disk(),
        partitions,
        live: None,
        live_unavailable: None,
    })
}

fn not_clean(p: i32, s: &PartitionSnapshot) -> Incomplete {
    Incomplete {
        partition: p,
        reason: format!(
            "the snapshot is from a periodic checkpoint, not a clean hand-over: records forwarded to the output at or \
             after {:?} (output partition: offset) are not in the store; the next start re-learns them from the \
             output topic",
            s.out_covered
        ),
    }
}

/// A partition whose snapshot is a clean hand-over, in a store that a run did not close cleanly
/// (its [`LIVE_FILE`] is still there: killed, or stopped on an error): that run may have
/// forwarded records after the snapshot, which only the output topic holds (issue 23).
fn not_closed(p: i32, s: &PartitionSnapshot) -> Incomplete {
    Incomplete {
        partition: p,
        reason: format!(
            "the store was not closed cleanly (the {LIVE_FILE} file of a run that was killed or stopped on an error \
             is still there): records that run forwarded to the output after this partition's snapshot (at or after \
             {:?}, output partition: offset) are not in the store; the next start re-learns them from the output \
             topic",
            s.out_covered
        ),
    }
}

/// Finds every generation of the store holding `fp`, and lists under `incomplete` the partitions
/// whose snapshot may lack records in the output (a periodic checkpoint's, or any in a store not
/// closed cleanly). Reads the chunks of each generation until it is found there: linear in the
/// store's size, in bounded memory ([`Scan`]). Errors: a chunk or snapshot that fails its checks
/// (run `verify`), sled I/O.
pub fn lookup(scan: &mut Scan, fp: Fingerprint) -> Result<Lookup, StoreError> {
    let key = stored(fp);
    let mut holdings = Vec::new();
    let mut incomplete = Vec::new();
    let unclosed = scan.store().path().join(LIVE_FILE).exists();
    for p in scan.store().partitions()? {
        let Some(s) = scan.store().snapshot(p)? else { continue };
        let n = s.generations.len();
        for (i, g) in s.generations.iter().enumerate().rev() {
            for c in 0..g.chunks {
                if let Some((_, rel)) = scan.chunk(p, g, c)?.into_iter().find(|(f, _)| *f == key) {
                    holdings.push(Holding {
                        partition: p,
                        generation: g.epoch,
                        age: n - 1 - i,
                        first_seen_offset: (rel != UNKNOWN_OFFSET).then(|| g.in_start + rel as i64),
                    });
                    break;
                }
            }
        }
        if !s.clean {
            incomplete.push(not_clean(p, &s));
        } else if unclosed {
            incomplete.push(not_closed(p, &s));
        }
    }
    Ok(Lookup {
        fingerprint: fp.to_string(),
        held: !holdings.is_empty(),
        holdings,
        incomplete,
    })
}

/// Writes the fingerprints of `partition` (all live generations, or only epoch `generation`)
/// to `out` as JSON lines `{"partition":P,"generation":E,"fingerprint":"HEX","first_seen_offset":O}`
/// (`null` when not known: re-learned from an output record without provenance), in bounded
/// memory ([`Scan`]). A closed output (`| head`) ends it quietly. Errors: no such partition or generation (usage), a chunk
/// that fails its checks, other write errors.
pub fn dump(
    scan: &mut Scan,
    partition: i32,
    generation: Option<u64>,
    out: &mut impl Write,
) -> Result<(), InspectError> {
    let snap = scan.store().snapshot(partition)?.ok_or_else(|| {
        InspectError::Usage(format!(
            "the store holds no partition {partition} (it holds {:?})",
            scan.store().partitions().unwrap_or_default()
        ))
    })?;
    let gens: Vec<GenerationMeta> = snap
        .generations
        .iter()
        .filter(|g| generation.is_none_or(|e| e == g.epoch))
        .cloned()
        .collect();
    if let (Some(e), true) = (generation, gens.is_empty()) {
        return Err(InspectError::Usage(format!(
            "partition {partition} has no generation {e} (live: {:?})",
            snap.generations.iter().map(|g| g.epoch).collect::<Vec<_>>()
        )));
    }
    let written = (|| -> std::io::Result<Result<(), StoreError>> {
        for g in &gens {
            for c in 0..g.chunks {
                let entries = match scan.chunk(partition, g, c) {
                    Ok(e) => e,
                    Err(e) => return Ok(Err(e)),
                };
                for (fp, rel) in entries {
                    write!(
                        out,
                        "{{\"partition\":{partition},\"generation\":{},\"fingerprint\":\"{fp:032x}\",\"first_seen_offset\":",
                        g.epoch
                    )?;
                    if rel == UNKNOWN_OFFSET {
                        writeln!(out, "null}}")?;
                    } else {
                        writeln!(out, "{}}}", g.in_start + rel as i64)?;
                    }
                }
            }
        }
        out.flush()?;
        Ok(Ok(()))
    })();
    match written {
        Ok(r) => r.map_err(InspectError::from),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        Err(e) => Err(e.into()),
    }
}

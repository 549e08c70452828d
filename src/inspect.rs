//! `kafka-dedup inspect` and the live `/store/*` routes: what kafka-dedup knows about an event.
//!
//! Offline, the CLI opens the store directory and answers from it:
//! - `stats`: format version, deployment, size on disk, and per partition the committed input
//!   offset and the generations (epoch, fingerprint count, input offset range, output start,
//!   creation time);
//! - `lookup`: which partition and generation hold a fingerprint, and the input offset where it
//!   was first seen, or "not held";
//! - `dump`: a partition's fingerprints as JSON lines, one chunk in memory at a time;
//! - `verify`: the store's internal consistency ([`verify`] lists what is checked); exit 1 when
//!   anything is wrong.
//!
//! A store in use by `kafka-dedup run` is refused ([`StoreError::InUse`]) with the HTTP address of
//! that process, which answers the same questions while it runs:
//! - `GET /store/lookup?value=TEXT` (or `key=`, repeated `header=NAME=VALUE`, `fingerprint=HEX`;
//!   URL-encoded): the same JSON as `inspect lookup --json`, answered **live** from the
//!   partitions' in-memory generations by the pipeline thread that owns them, so it includes
//!   everything forwarded up to the moment of the request, not only what the last checkpoint
//!   stored. It covers the partitions this process owns; a partition still recovering is listed
//!   under `incomplete`. After a clean stop and restart with no new input, the live answer equals
//!   the offline one.
//! - `GET /store/stats`: the same JSON as `inspect stats --json` (the store on disk, as of the
//!   last checkpoint), plus `live`: per owned partition its state and in-memory generations.
//!
//! The offline answers are as of the store's snapshot of each partition. After a clean hand-over
//! (SIGTERM, revocation) the snapshot holds every generation in full. A periodic checkpoint
//! stores the current generation empty: its fingerprints are in the output topic, from which the
//! next start re-learns them. Such a partition is listed under `incomplete` in a lookup.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use clap::Subcommand;
use serde::{Deserialize, Serialize};

use crate::config::Config;
use crate::fingerprint::{Fingerprint, Fingerprinter, OwnedRecord, Source};
use crate::generations::{Generation, Generations, Positions};
use crate::http::HttpState;
use crate::store::{
    format_file_version, GenerationMeta, Identity, PartitionSnapshot, Store, StoreError, StoreKey, CHUNK_ENTRIES,
    FORMAT_FILE,
};
use crate::table::UNKNOWN_OFFSET;

/// How long an HTTP request waits for the pipeline thread to answer (it answers between two
/// polls; a hand-over or a full producer queue can keep it busy longer).
pub const LIVE_TIMEOUT: Duration = Duration::from_secs(5);

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
    budget: u64,
    /// Chunk bytes read since the last (re)open.
    read: u64,
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
    fn relieve(&mut self) -> Result<(), StoreError> {
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

/// `inspect` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum InspectCommand {
    /// Format version, partitions, generations, committed positions, size on disk.
    Stats,
    /// Which partition and generation hold an event, and where it was first seen.
    ///
    /// The record given by --value, --key, --header and --json-file is fingerprinted with the
    /// store's fingerprint source (or the one of --config); parts not given are null.
    Lookup {
        /// Record value (UTF-8 text).
        #[arg(long, conflicts_with = "json_file")]
        value: Option<String>,
        /// Record key (UTF-8 text).
        #[arg(long)]
        key: Option<String>,
        /// A header `NAME=VALUE`; repeat for several headers or several values of one header.
        #[arg(long, value_name = "NAME=VALUE")]
        header: Vec<String>,
        /// Read the record value from this file (for example a JSON document), byte for byte.
        #[arg(long, value_name = "FILE")]
        json_file: Option<PathBuf>,
        /// A fingerprint as 32 hex digits (as printed by `dump`).
        #[arg(long, value_name = "HEX", conflicts_with_all = ["value", "key", "header", "json_file", "config"])]
        fingerprint: Option<String>,
        /// Configuration whose `fingerprint.source` to use (default: the source the store was
        /// written with). Refused when it differs from the store's.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Fingerprints of a partition as JSON lines, streamed one chunk at a time.
    Dump {
        /// Input partition.
        #[arg(long)]
        partition: i32,
        /// Only this generation epoch.
        #[arg(long, value_name = "EPOCH")]
        generation: Option<u64>,
    },
    /// Check the store's internal consistency; exit 1 if anything is wrong.
    Verify,
}

/// Why inspection failed. `main` maps `Store` refusals and `Usage` to exit 2, the rest to 1.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The store cannot be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// Output could not be written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// `stats` answer (`inspect stats --json`, `GET /store/stats`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Stats {
    /// Store format version (see `migrations/`).
    pub format_version: u32,
    /// Deployment the store belongs to; `None` for a store that was never written.
    pub identity: Option<Identity>,
    /// Bytes on disk (sled's own accounting).
    pub size_on_disk_bytes: u64,
    /// Per input partition with a snapshot, ascending.
    pub partitions: Vec<PartitionStats>,
    /// HTTP only: the partitions this process owns, from memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Vec<LivePartition>>,
    /// HTTP only: why `live` is missing (the pipeline did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_unavailable: Option<String>,
}

/// One partition's snapshot in `stats`.
#[derive(Debug, Serialize, Deserialize)]
pub struct PartitionStats {
    /// Input partition.
    pub partition: i32,
    /// Epoch of the current generation.
    pub epoch: u64,
    /// Checkpoint id of the snapshot.
    pub checkpoint: String,
    /// Input offset committed with the snapshot (the next record to consume).
    pub committed_offset: i64,
    /// Output positions up to which the snapshot holds every forwarded record's fingerprint;
    /// the next start re-learns the records from here on from the output topic.
    pub output_covered: Positions,
    /// When the snapshot was written, ms since the Unix epoch.
    pub written_at_ms: i64,
    /// True when written by a clean hand-over (every generation stored in full).
    pub clean: bool,
    /// Fingerprints held over all generations.
    pub fingerprints: u64,
    /// Generations, oldest first, the current one last.
    pub generations: Vec<GenerationStats>,
}

/// One generation in `stats`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GenerationStats {
    /// Epoch.
    pub epoch: u64,
    /// Fingerprints held.
    pub fingerprints: u64,
    /// First input offset of the generation: its records were first seen at input offsets in
    /// `[input_start, input_end)`.
    pub input_start: i64,
    /// End of its input range (exclusive): the next generation's start, or for the current one
    /// the committed offset (offline) or the next offset to consume (live).
    pub input_end: i64,
    /// Output offsets at or after which its forwarded records lie (per output partition; a lower
    /// bound: records in flight when it was frozen land after the next generation's start).
    pub output_start: Positions,
    /// Creation time, ms since the Unix epoch.
    pub created_at_ms: i64,
}

/// One partition owned by the running process, in `GET /store/stats`.
#[derive(Debug, Serialize, Deserialize)]
pub struct LivePartition {
    /// Input partition.
    pub partition: i32,
    /// `running` or `recovering`.
    pub state: String,
    /// Input offset of the next record to consume (running only).
    pub next_offset: Option<i64>,
    /// Output end known to the partition: last acknowledged offset + 1 per output partition.
    pub output_position: Positions,
    /// Fingerprints held in memory over all generations.
    pub fingerprints: u64,
    /// In-memory generations, oldest first (empty while recovering).
    pub generations: Vec<GenerationStats>,
}

/// Where a fingerprint is held.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Holding {
    /// Input partition.
    pub partition: i32,
    /// Generation epoch.
    pub generation: u64,
    /// Age: 0 current, 1 previous, ...
    pub age: usize,
    /// Input offset where it was first seen; `None` when re-learned from the output topic.
    pub first_seen_offset: Option<i64>,
}

/// A partition whose part of an answer is incomplete, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Incomplete {
    /// Input partition.
    pub partition: i32,
    /// Why.
    pub reason: String,
}

/// `lookup` answer (`inspect lookup --json`, `GET /store/lookup`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lookup {
    /// The fingerprint looked up, 32 hex digits.
    pub fingerprint: String,
    /// True when any generation holds it.
    pub held: bool,
    /// Where, by partition then age (newest first within a partition).
    pub holdings: Vec<Holding>,
    /// Partitions whose generations were not (entirely) available to the answer; omitted when
    /// none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incomplete: Vec<Incomplete>,
}

/// The stored form of a fingerprint (the table keeps 0 as 1; see [`crate::table`]).
fn stored(fp: Fingerprint) -> u128 {
    if fp.0 == 0 {
        1
    } else {
        fp.0
    }
}

/// Input ranges of generations given as `(epoch, count, in_start, out_start, created)`, oldest
/// first, the current one ending at `last_end`.
fn generation_stats<'a>(
    gens: impl Iterator<Item = (u64, u64, i64, &'a Positions, i64)>,
    last_end: i64,
) -> Vec<GenerationStats> {
    let mut out: Vec<GenerationStats> = gens
        .map(
            |(epoch, fingerprints, input_start, output_start, created_at_ms)| GenerationStats {
                epoch,
                fingerprints,
                input_start,
                input_end: last_end,
                output_start: output_start.clone(),
                created_at_ms,
            },
        )
        .collect();
    for i in 1..out.len() {
        out[i - 1].input_end = out[i].input_start;
    }
    out
}

fn partition_stats(p: i32, s: &PartitionSnapshot) -> PartitionStats {
    let generations = generation_stats(
        s.generations
            .iter()
            .map(|g| (g.epoch, g.count, g.in_start, &g.out_start, g.created_at_ms)),
        s.committed_offset,
    );
    PartitionStats {
        partition: p,
        epoch: s.epoch,
        checkpoint: s.ckpt.clone(),
        committed_offset: s.committed_offset,
        output_covered: s.out_covered.clone(),
        written_at_ms: s.written_at_ms,
        clean: s.clean,
        fingerprints: s.generations.iter().map(|g| g.count).sum(),
        generations,
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

/// Finds every generation of the store holding `fp`. Reads the chunks of each generation until
/// it is found there: linear in the store's size, in bounded memory ([`Scan`]). Errors: a chunk
/// or snapshot that fails its checks (run `verify`), sled I/O.
pub fn lookup(scan: &mut Scan, fp: Fingerprint) -> Result<Lookup, StoreError> {
    let key = stored(fp);
    let mut holdings = Vec::new();
    let mut incomplete = Vec::new();
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
        }
    }
    Ok(Lookup {
        fingerprint: fp.to_string(),
        held: !holdings.is_empty(),
        holdings,
        incomplete,
    })
}

/// Expected chunks of one stored generation, and what `verify` found of them.
struct Expected {
    meta: GenerationMeta,
    /// End of the generation's input range (exclusive).
    in_end: i64,
    /// Chunk index -> seen.
    seen: Vec<bool>,
    /// Entries in chunks that decoded.
    stored: u64,
    /// A chunk failed to decode (its entries are not counted).
    damaged: bool,
    /// Entries whose first-seen offset lies outside the input range, and the first of them.
    out_of_range: u64,
    first_out_of_range: Option<(u128, i64)>,
    /// Entries with fingerprint 0 (never stored: the table keeps 0 as 1).
    zero: u64,
}

/// Checks the store's internal consistency; returns the problems found, empty when consistent.
/// Reads every entry once, one at a time, in bounded memory ([`Scan`]). Checks:
/// - the format file and the database's `m:format` agree; the identity parses and names a valid
///   fingerprint source; no key outside the layout;
/// - per snapshot: it parses; at least one generation; epochs consecutive, the last equal to the
///   snapshot's epoch; input starts non-decreasing and at most the committed offset; output
///   starts non-decreasing and at most `out_covered`; `chunks = ceil(count / CHUNK_ENTRIES)`;
/// - per chunk: it belongs to a live generation of a stored partition (not an orphan of a dropped
///   generation or partition), its index is below the generation's chunk count, it decodes
///   (magic, length, xxh3 checksum), holds no fingerprint 0, and every known first-seen offset
///   lies in the generation's input range;
/// - per generation: no chunk is missing and the entries add up to its count.
///
/// Errors: sled I/O only; everything else is a problem in the list.
pub fn verify(scan: &mut Scan) -> Result<Vec<String>, StoreError> {
    let mut problems = Vec::new();
    let store = scan.store();

    // Stamps.
    let inside = match store.format_version() {
        Ok(v) => v,
        Err(e) => {
            problems.push(e.to_string());
            None
        }
    };
    match format_file_version(store.path()) {
        Ok(Some(f)) => {
            if let Some(i) = inside.filter(|i| *i != f) {
                problems.push(format!(
                    "`{FORMAT_FILE}` says format version {f}, the database (m:format) {i}"
                ));
            }
        }
        Ok(None) => problems.push(format!("`{FORMAT_FILE}` is missing")),
        Err(e) => problems.push(e),
    }
    let partitions = store.partitions()?;
    if inside.is_none() && !partitions.is_empty() {
        problems.push("the database holds no format version (m:format)".into());
    }
    match store.identity() {
        Ok(Some(id)) => {
            if let Err(e) = Source::try_from(id.source.clone()) {
                problems.push(format!("identity: fingerprint source: {e}"));
            }
        }
        Ok(None) if !partitions.is_empty() => {
            problems.push("the database holds no identity (m:identity) although partitions are stored".into())
        }
        Ok(None) => {}
        Err(e) => problems.push(e.to_string()),
    }

    // Snapshots.
    let mut expected: BTreeMap<(i32, u64), Expected> = BTreeMap::new();
    let mut live_epochs: BTreeMap<i32, Vec<u64>> = BTreeMap::new();
    for &p in &partitions {
        let s = match store.snapshot(p) {
            Ok(Some(s)) => s,
            Ok(None) => continue,
            Err(e) => {
                problems.push(e.to_string());
                live_epochs.insert(p, Vec::new());
                continue;
            }
        };
        let mut problem = |m: String| problems.push(format!("partition {p}: {m}"));
        if s.generations.is_empty() {
            problem("snapshot without generations".into());
        }
        for w in s.generations.windows(2) {
            if w[1].epoch != w[0].epoch + 1 {
                problem(format!(
                    "generation epochs are not consecutive ({} then {})",
                    w[0].epoch, w[1].epoch
                ));
            }
            if w[1].in_start < w[0].in_start {
                problem(format!(
                    "generation {} starts at input offset {}, before generation {} ({})",
                    w[1].epoch, w[1].in_start, w[0].epoch, w[0].in_start
                ));
            }
            for (q, start) in &w[1].out_start {
                if w[0].out_start.get(q).is_some_and(|prev| start < prev) {
                    problem(format!(
                        "generation {} starts at output {q}:{start}, before generation {}",
                        w[1].epoch, w[0].epoch
                    ));
                }
            }
        }
        if let Some(last) = s.generations.last() {
            if last.epoch != s.epoch {
                problem(format!(
                    "snapshot epoch {} is not the current generation's ({})",
                    s.epoch, last.epoch
                ));
            }
            if last.in_start > s.committed_offset {
                problem(format!(
                    "the current generation starts at input offset {}, after the committed offset {}",
                    last.in_start, s.committed_offset
                ));
            }
            for (q, start) in &last.out_start {
                if s.out_covered.get(q).is_some_and(|covered| covered < start) {
                    problem(format!(
                        "output covered up to {q}:{}, before the current generation's start {start}",
                        s.out_covered[q]
                    ));
                }
            }
        }
        let stats = partition_stats(p, &s);
        for (meta, g) in s.generations.iter().zip(&stats.generations) {
            let want = meta.count.div_ceil(CHUNK_ENTRIES as u64);
            if meta.chunks as u64 != want {
                problem(format!(
                    "generation {}: {} chunks recorded for {} fingerprints (expected {want})",
                    meta.epoch, meta.chunks, meta.count
                ));
            }
            expected.insert(
                (p, meta.epoch),
                Expected {
                    meta: meta.clone(),
                    in_end: g.input_end,
                    seen: vec![false; meta.chunks as usize],
                    stored: 0,
                    damaged: false,
                    out_of_range: 0,
                    first_out_of_range: None,
                    zero: 0,
                },
            );
        }
        live_epochs.insert(p, s.generations.iter().map(|g| g.epoch).collect());
    }

    // Every entry once.
    let mut orphans: BTreeMap<(i32, u64), u32> = BTreeMap::new();
    let mut unknown: Vec<Vec<u8>> = Vec::new();
    let mut unknown_count = 0u64;
    // The walk resumes from the key after the last one read when the scan reopens the store.
    let mut from: Vec<u8> = Vec::new();
    loop {
        scan.relieve()?;
        let store = scan.store();
        let mut read = 0u64;
        let mut resume = None;
        for entry in store.entries_from(&from) {
            let (raw, key, value) = entry?;
            // At least one entry per open, so any budget makes progress.
            if read > 0 && scan.read + read >= scan.budget {
                resume = Some(raw.to_vec());
                break;
            }
            read += value.len() as u64;
            let (p, epoch, c) = match key {
                StoreKey::Chunk {
                    partition,
                    epoch,
                    chunk,
                } => (partition, epoch, chunk),
                StoreKey::Unknown(k) => {
                    unknown_count += 1;
                    if unknown.len() < 3 {
                        unknown.push(k);
                    }
                    continue;
                }
                _ => continue,
            };
            let Some(x) = expected.get_mut(&(p, epoch)) else {
                *orphans.entry((p, epoch)).or_default() += 1;
                continue;
            };
            if c >= x.meta.chunks {
                problems.push(format!(
                    "partition {p} generation {epoch}: chunk {c} beyond its {} chunks",
                    x.meta.chunks
                ));
                continue;
            }
            x.seen[c as usize] = true;
            match crate::store::decode_chunk(&value) {
                Err(e) => {
                    x.damaged = true;
                    problems.push(format!("partition {p} generation {epoch} chunk {c}: {e}"));
                }
                Ok(entries) => {
                    x.stored += entries.len() as u64;
                    for (fp, rel) in entries {
                        if fp == 0 {
                            x.zero += 1;
                        }
                        if rel != UNKNOWN_OFFSET {
                            let offset = x.meta.in_start + rel as i64;
                            if offset >= x.in_end {
                                x.out_of_range += 1;
                                x.first_out_of_range.get_or_insert((fp, offset));
                            }
                        }
                    }
                }
            }
        }
        scan.read += read;
        match resume {
            // Unread: the entry at `k` is read again after the reopen.
            Some(k) => {
                scan.read = scan.read.max(scan.budget);
                from = k;
            }
            None => break,
        }
    }
    for ((p, epoch), x) in &expected {
        let missing: Vec<String> = x
            .seen
            .iter()
            .enumerate()
            .filter(|(_, s)| !**s)
            .map(|(c, _)| c.to_string())
            .collect();
        if !missing.is_empty() {
            problems.push(format!(
                "partition {p} generation {epoch}: chunk(s) {} of {} missing",
                missing.join(", "),
                x.meta.chunks
            ));
        } else if !x.damaged && x.stored != x.meta.count {
            problems.push(format!(
                "partition {p} generation {epoch}: {} fingerprints stored, the snapshot counts {}",
                x.stored, x.meta.count
            ));
        }
        if let Some((fp, offset)) = x.first_out_of_range {
            problems.push(format!(
                "partition {p} generation {epoch}: {} first-seen offset(s) outside its input range [{}, {}) \
                 (first: fingerprint {fp:032x} at {offset})",
                x.out_of_range, x.meta.in_start, x.in_end
            ));
        }
        if x.zero > 0 {
            problems.push(format!(
                "partition {p} generation {epoch}: {} entries with fingerprint 0 (never stored)",
                x.zero
            ));
        }
    }
    for ((p, epoch), chunks) in orphans {
        let why = match live_epochs.get(&p) {
            Some(live) => format!("no live generation (live: {live:?}): left over from a dropped generation"),
            None => "no snapshot of that partition".to_string(),
        };
        problems.push(format!(
            "partition {p} generation {epoch}: {chunks} orphan chunk(s), {why}"
        ));
    }
    if unknown_count > 0 {
        let shown: Vec<String> = unknown
            .iter()
            .map(|k| format!("{:?}", String::from_utf8_lossy(k)))
            .collect();
        problems.push(format!(
            "{unknown_count} key(s) outside the store layout (first: {})",
            shown.join(", ")
        ));
    }
    Ok(problems)
}

/// What to look up: a fingerprint, or a record to fingerprint with the configured source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupInput {
    /// A raw fingerprint.
    Fingerprint(Fingerprint),
    /// Key, value and headers (absent parts are null).
    Record(OwnedRecord),
}

impl LookupInput {
    /// The fingerprint to look up. Errors (as text): the record has no fingerprint with this
    /// source (for example `--key` alone with `source = "value"`).
    pub fn fingerprint(&self, f: &Fingerprinter) -> Result<Fingerprint, String> {
        match self {
            LookupInput::Fingerprint(fp) => Ok(*fp),
            LookupInput::Record(r) => f
                .fingerprint(r)
                .map_err(|e| format!("that record has no fingerprint with source {}: {e}", f.source())),
        }
    }

    /// From the CLI's arguments (see [`InspectCommand::Lookup`]). Errors: nothing given, a bad
    /// fingerprint or header, an unreadable file.
    pub fn from_args(
        fingerprint: Option<&str>,
        value: Option<String>,
        key: Option<String>,
        headers: &[String],
        json_file: Option<&Path>,
    ) -> Result<LookupInput, InspectError> {
        if let Some(hex) = fingerprint {
            return hex
                .parse::<Fingerprint>()
                .map(LookupInput::Fingerprint)
                .map_err(|e| InspectError::Usage(format!("--fingerprint: {e}")));
        }
        if value.is_none() && key.is_none() && headers.is_empty() && json_file.is_none() {
            return Err(InspectError::Usage(
                "give --value, --key, --header NAME=VALUE, --json-file FILE or --fingerprint HEX".into(),
            ));
        }
        let mut r = OwnedRecord {
            key: key.map(String::into_bytes),
            value: value.map(String::into_bytes),
            headers: Vec::new(),
        };
        if let Some(path) = json_file {
            r.value = Some(
                std::fs::read(path).map_err(|e| InspectError::Usage(format!("--json-file {}: {e}", path.display())))?,
            );
        }
        for h in headers {
            r.headers
                .push(parse_header(h).map_err(|e| InspectError::Usage(format!("--header {e}")))?);
        }
        Ok(LookupInput::Record(r))
    }

    /// From the query of `GET /store/lookup`: `fingerprint=HEX`, or any of `value=`, `key=` and
    /// repeated `header=NAME=VALUE`. Errors (as text): unknown parameters, nothing given, both a
    /// fingerprint and record parts.
    pub fn from_query(pairs: Vec<(String, String)>) -> Result<LookupInput, String> {
        let mut fingerprint = None;
        let mut r = OwnedRecord::default();
        let mut any_record = false;
        for (k, v) in pairs {
            match k.as_str() {
                "fingerprint" => fingerprint = Some(v),
                "value" => {
                    r.value = Some(v.into_bytes());
                    any_record = true;
                }
                "key" => {
                    r.key = Some(v.into_bytes());
                    any_record = true;
                }
                "header" => {
                    r.headers.push(parse_header(&v)?);
                    any_record = true;
                }
                other => {
                    return Err(format!(
                        "unknown parameter {other:?}; use fingerprint=HEX, or value=, key=, header=NAME=VALUE"
                    ))
                }
            }
        }
        match (fingerprint, any_record) {
            (Some(_), true) => Err("give either fingerprint= or the record (value=, key=, header=), not both".into()),
            (Some(hex), false) => hex
                .parse::<Fingerprint>()
                .map(LookupInput::Fingerprint)
                .map_err(|e| format!("fingerprint: {e}")),
            (None, true) => Ok(LookupInput::Record(r)),
            (None, false) => Err("give fingerprint=HEX, or value=, key=, header=NAME=VALUE (URL-encoded)".into()),
        }
    }
}

fn parse_header(h: &str) -> Result<(String, Option<Vec<u8>>), String> {
    let (name, v) = h.split_once('=').ok_or_else(|| format!("{h:?}: expected NAME=VALUE"))?;
    if name.is_empty() {
        return Err(format!("{h:?}: the header name is empty"));
    }
    Ok((name.to_string(), Some(v.as_bytes().to_vec())))
}

/// The fingerprint source for an offline lookup: the store's (its identity), or `--config`'s,
/// which must then be the same.
fn fingerprinter_for(store: &Store, config: Option<&Path>) -> Result<Fingerprinter, InspectError> {
    let stored = match store.identity()? {
        Some(id) => Some(Source::try_from(id.source).map_err(|e| {
            InspectError::Store(StoreError::Corrupt {
                path: store.path().to_path_buf(),
                reason: format!("identity: {e}"),
            })
        })?),
        None => None,
    };
    let source = match config {
        Some(path) => {
            let configured = Config::load(path)
                .map_err(|e| InspectError::Usage(format!("--config {}: {e}", path.display())))?
                .fingerprint
                .source;
            if let Some(s) = stored.as_ref().filter(|s| **s != configured) {
                return Err(InspectError::Usage(format!(
                    "--config {} fingerprints with source {configured}, but the store was written with source {s}: \
                     a lookup with {configured} cannot match; leave out --config to use the store's",
                    path.display()
                )));
            }
            configured
        }
        None => stored.unwrap_or(Source::Value),
    };
    Ok(Fingerprinter::new(source))
}

fn to_json(out: &mut impl Write, v: &impl Serialize) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v).map_err(std::io::Error::from)?;
    writeln!(out)
}

/// Runs an `inspect` subcommand against the store at `path`, printing to stdout (text, or JSON
/// with `json`). Returns exit code 1 when `verify` finds problems. Errors: see [`InspectError`].
pub fn run(path: &Path, json: bool, command: InspectCommand) -> Result<ExitCode, InspectError> {
    // Arguments first, so a usage error never opens the store.
    let lookup_input = match &command {
        InspectCommand::Lookup {
            value,
            key,
            header,
            json_file,
            fingerprint,
            ..
        } => Some(LookupInput::from_args(
            fingerprint.as_deref(),
            value.clone(),
            key.clone(),
            header,
            json_file.as_deref(),
        )?),
        _ => None,
    };
    let store = Store::open_existing(path)?;
    let mut out = std::io::stdout().lock();
    match command {
        InspectCommand::Stats => {
            let s = stats(&store)?;
            if json {
                to_json(&mut out, &s)?;
            } else {
                print_stats(&mut out, path, &s)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        InspectCommand::Lookup { config, .. } => {
            let input = lookup_input.expect("parsed above");
            let f = fingerprinter_for(&store, config.as_deref())?;
            let fp = input.fingerprint(&f).map_err(InspectError::Usage)?;
            let l = lookup(&mut Scan::new(store), fp)?;
            if json {
                to_json(&mut out, &l)?;
            } else {
                print_lookup(&mut out, &l)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        InspectCommand::Dump { partition, generation } => {
            dump(
                &mut Scan::new(store),
                partition,
                generation,
                &mut std::io::BufWriter::new(out),
            )?;
            Ok(ExitCode::SUCCESS)
        }
        InspectCommand::Verify => {
            let problems = verify(&mut Scan::new(store))?;
            if json {
                to_json(
                    &mut out,
                    &serde_json::json!({"ok": problems.is_empty(), "problems": problems}),
                )?;
            } else if problems.is_empty() {
                writeln!(out, "store {}: consistent", path.display())?;
            } else {
                for p in &problems {
                    writeln!(out, "problem: {p}")?;
                }
                writeln!(out, "store {}: {} problem(s)", path.display(), problems.len())?;
            }
            Ok(if problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

/// Writes the fingerprints of `partition` (all live generations, or only epoch `generation`)
/// to `out` as JSON lines `{"partition":P,"generation":E,"fingerprint":"HEX","first_seen_offset":O}`
/// (`null` when re-learned from the output topic), in bounded memory ([`Scan`]). A closed
/// output (`| head`) ends it quietly. Errors: no such partition or generation (usage), a chunk
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

fn time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

fn positions(p: &Positions) -> String {
    if p.is_empty() {
        return "-".into();
    }
    p.iter().map(|(q, o)| format!("{q}:{o}")).collect::<Vec<_>>().join(", ")
}

fn print_stats(out: &mut impl Write, path: &Path, s: &Stats) -> std::io::Result<()> {
    writeln!(
        out,
        "store {}: format version {}, {} bytes on disk",
        path.display(),
        s.format_version,
        s.size_on_disk_bytes
    )?;
    match &s.identity {
        Some(id) => writeln!(
            out,
            "deployment: group {}, {} -> {}, fingerprint source {}",
            id.group_id, id.input_topic, id.output_topic, id.source
        )?,
        None => writeln!(out, "deployment: none recorded (never written)")?,
    }
    writeln!(out, "partitions: {}", s.partitions.len())?;
    for p in &s.partitions {
        writeln!(
            out,
            "partition {}: committed input offset {}, {} fingerprints, checkpoint {} written {}{}",
            p.partition,
            p.committed_offset,
            p.fingerprints,
            p.checkpoint,
            time(p.written_at_ms),
            if p.clean { " (clean hand-over)" } else { "" }
        )?;
        let n = p.generations.len();
        for (i, g) in p.generations.iter().enumerate() {
            writeln!(
                out,
                "  generation {}{}: {} fingerprints, input offsets [{}, {}), output from {}, created {}",
                g.epoch,
                if i + 1 == n { " (current)" } else { "" },
                g.fingerprints,
                g.input_start,
                g.input_end,
                positions(&g.output_start),
                time(g.created_at_ms)
            )?;
        }
        if !p.clean {
            writeln!(
                out,
                "  not in the store: records forwarded at or after output {} (re-learned from the output topic at the next start)",
                positions(&p.output_covered)
            )?;
        }
    }
    Ok(())
}

fn print_lookup(out: &mut impl Write, l: &Lookup) -> std::io::Result<()> {
    if !l.held {
        writeln!(out, "fingerprint {}: not held", l.fingerprint)?;
    }
    for h in &l.holdings {
        writeln!(
            out,
            "fingerprint {}: held by partition {} generation {} ({}), first seen at input offset {}",
            l.fingerprint,
            h.partition,
            h.generation,
            match h.age {
                0 => "the current generation".to_string(),
                1 => "the previous generation".to_string(),
                a => format!("{a} generations old"),
            },
            h.first_seen_offset
                .map_or("unknown (re-learned from the output topic)".to_string(), |o| o
                    .to_string())
        )?;
    }
    for i in &l.incomplete {
        writeln!(out, "note: partition {}: {}", i.partition, i.reason)?;
    }
    Ok(())
}

/// A question for the pipeline thread, answered from its in-memory partition state by
/// [`LiveRequest::answer`] (called between two polls; see `pipeline::Filter::tick`).
pub enum LiveRequest {
    /// `GET /store/lookup`.
    Lookup {
        /// What to look up.
        input: LookupInput,
        /// The answer, or a bad-request message (the record has no fingerprint).
        reply: tokio::sync::oneshot::Sender<Result<Lookup, String>>,
    },
    /// The `live` part of `GET /store/stats`.
    Partitions {
        /// One entry per owned partition.
        reply: tokio::sync::oneshot::Sender<Vec<LivePartition>>,
    },
}

/// What the pipeline shows of one owned partition.
pub enum PartitionView<'a> {
    /// Assigned; its generations are being rebuilt.
    Recovering,
    /// Consuming and forwarding.
    Running {
        /// Its live generations.
        gens: &'a Generations,
        /// Input offset of the next record to consume.
        next_offset: i64,
        /// Output end known to the partition.
        output_position: &'a Positions,
    },
}

impl LiveRequest {
    /// Answers from `partitions` (every partition the process owns), fingerprinting records with
    /// the pipeline's `fingerprinter`. A requester that gave up is ignored.
    pub fn answer(self, partitions: &BTreeMap<i32, PartitionView<'_>>, fingerprinter: &Fingerprinter) {
        match self {
            LiveRequest::Lookup { input, reply } => {
                let _ = reply.send(input.fingerprint(fingerprinter).map(|fp| live_lookup(partitions, fp)));
            }
            LiveRequest::Partitions { reply } => {
                let _ = reply.send(live_partitions(partitions));
            }
        }
    }
}

/// [`lookup`] over in-memory generations.
pub fn live_lookup(partitions: &BTreeMap<i32, PartitionView<'_>>, fp: Fingerprint) -> Lookup {
    let mut holdings = Vec::new();
    let mut incomplete = Vec::new();
    for (p, view) in partitions {
        match view {
            PartitionView::Recovering => incomplete.push(Incomplete {
                partition: *p,
                reason: "recovering: its generations are being rebuilt; ask again when /readyz is ready".into(),
            }),
            PartitionView::Running { gens, .. } => {
                let all: Vec<&Generation> = gens.iter().collect();
                let n = all.len();
                for (i, g) in all.iter().enumerate().rev() {
                    if let Some(rel) = g.table.get(fp.0) {
                        holdings.push(Holding {
                            partition: *p,
                            generation: g.epoch,
                            age: n - 1 - i,
                            first_seen_offset: g.absolute_offset(rel),
                        });
                    }
                }
            }
        }
    }
    Lookup {
        fingerprint: fp.to_string(),
        held: !holdings.is_empty(),
        holdings,
        incomplete,
    }
}

/// The `live` part of `GET /store/stats`.
pub fn live_partitions(partitions: &BTreeMap<i32, PartitionView<'_>>) -> Vec<LivePartition> {
    partitions
        .iter()
        .map(|(p, view)| match view {
            PartitionView::Recovering => LivePartition {
                partition: *p,
                state: "recovering".into(),
                next_offset: None,
                output_position: Positions::new(),
                fingerprints: 0,
                generations: Vec::new(),
            },
            PartitionView::Running {
                gens,
                next_offset,
                output_position,
            } => LivePartition {
                partition: *p,
                state: "running".into(),
                next_offset: Some(*next_offset),
                output_position: (*output_position).clone(),
                fingerprints: gens.total_len() as u64,
                generations: generation_stats(
                    gens.iter()
                        .map(|g| (g.epoch, g.len() as u64, g.in_start, &g.out_start, g.created_at_ms)),
                    *next_offset,
                ),
            },
        })
        .collect()
}

/// Routes under `/store/` served while the filter runs (see the module documentation).
pub fn http_routes() -> Router<HttpState> {
    Router::new()
        .route("/store/stats", get(http_stats))
        .route("/store/lookup", get(http_lookup))
}

fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(serde_json::json!({"error": message.into()}))).into_response()
}

/// Sends `make(reply)` to the pipeline thread and waits up to [`LIVE_TIMEOUT`] for the answer.
async fn ask<T>(s: &HttpState, make: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> LiveRequest) -> Result<T, String> {
    let Some(tx) = s.status.live() else {
        return Err("the filter is not running".into());
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    tx.send(make(reply)).map_err(|_| "the filter has stopped".to_string())?;
    match tokio::time::timeout(LIVE_TIMEOUT, answer).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err("the filter has stopped".into()),
        Err(_) => Err(format!(
            "the pipeline did not answer within {LIVE_TIMEOUT:?} (a hand-over or a full producer queue keeps it busy); retry"
        )),
    }
}

async fn http_stats(State(s): State<HttpState>) -> Response {
    let Some(store) = s.status.store() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the store is not open yet");
    };
    let mut st = match tokio::task::spawn_blocking(move || stats(&store)).await {
        Ok(Ok(st)) => st,
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    match ask(&s, |reply| LiveRequest::Partitions { reply }).await {
        Ok(live) => st.live = Some(live),
        Err(why) => st.live_unavailable = Some(why),
    }
    (StatusCode::OK, Json(st)).into_response()
}

async fn http_lookup(State(s): State<HttpState>, Query(pairs): Query<Vec<(String, String)>>) -> Response {
    let input = match LookupInput::from_query(pairs) {
        Ok(i) => i,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    match ask(&s, |reply| LiveRequest::Lookup { input, reply }).await {
        Ok(Ok(l)) => (StatusCode::OK, Json(l)).into_response(),
        Ok(Err(bad)) => error(StatusCode::BAD_REQUEST, bad),
        Err(why) => error(StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{PartitionWrite, FORMAT_VERSION};
    use xxhash_rust::xxh3::xxh3_128;

    use crate::generations::pos;
    use crate::store::test_identity as identity;

    fn fp(i: u64) -> u128 {
        xxh3_128(&i.to_le_bytes())
    }

    /// Partition 2 with generations 4 (input 100.., CHUNK_ENTRIES + 5 fingerprints, so two
    /// chunks) and 5 (input 200.., 3 fingerprints), written by a clean hand-over.
    fn generations() -> Generations {
        let mut g4 = Generation::new(4, 100, pos(2, 50), 0);
        for i in 0..(CHUNK_ENTRIES as u64 + 5) {
            g4.table.insert(fp(i), (i % 100) as u32);
        }
        let mut gens = Generations::from_parts(vec![g4], 2);
        gens.rotate(200, pos(2, 150));
        for i in 0..3u64 {
            gens.insert(fp(1_000_000 + i), Some(200 + i as i64));
        }
        gens.insert(fp(2_000_000), None);
        gens
    }

    fn save(store: &Store, gens: &Generations, clean: bool) {
        store
            .save(&[PartitionWrite {
                partition: 2,
                epoch: 5,
                ckpt: "c".into(),
                committed_offset: 210,
                out_covered: pos(2, 160),
                generations: gens.iter().collect(),
                clean,
            }])
            .unwrap();
    }

    fn store_with(dir: &Path) -> (Store, Generations) {
        let (store, _) = Store::open_for_run(dir, &identity()).unwrap();
        let gens = generations();
        save(&store, &gens, true);
        (store, gens)
    }

    fn view(gens: &Generations) -> BTreeMap<i32, PartitionView<'_>> {
        static OUT: std::sync::OnceLock<Positions> = std::sync::OnceLock::new();
        [(
            2,
            PartitionView::Running {
                gens,
                next_offset: 210,
                output_position: OUT.get_or_init(|| pos(2, 160)),
            },
        )]
        .into_iter()
        .collect()
    }

    #[test]
    fn offline_and_live_answers_agree_after_a_clean_hand_over() {
        let dir = tempfile::tempdir().unwrap();
        let (store, gens) = store_with(dir.path());
        let v = view(&gens);
        // A budget of one byte reopens the store before every chunk: same answers.
        let mut tiny = Scan::with_budget(store, 1);
        for probe in [fp(7), fp(1_000_001), fp(2_000_000), fp(99_999_999), 0] {
            let offline = lookup(&mut tiny, Fingerprint(probe)).unwrap();
            let live = live_lookup(&v, Fingerprint(probe));
            assert_eq!(offline, live, "fingerprint {probe:032x}");
        }
        assert!(
            tiny.reopens() >= 5,
            "one per chunk read after the first: {}",
            tiny.reopens()
        );
        let mut scan = Scan::new(tiny.into_store());
        let l = lookup(&mut scan, Fingerprint(fp(7))).unwrap();
        assert_eq!(
            l.holdings,
            vec![Holding {
                partition: 2,
                generation: 4,
                age: 1,
                first_seen_offset: Some(107)
            }]
        );
        let l = lookup(&mut scan, Fingerprint(fp(1_000_001))).unwrap();
        assert_eq!((l.holdings[0].generation, l.holdings[0].age), (5, 0));
        assert_eq!(l.holdings[0].first_seen_offset, Some(201));
        assert_eq!(
            lookup(&mut scan, Fingerprint(fp(2_000_000))).unwrap().holdings[0].first_seen_offset,
            None,
            "an unknown first-seen offset stays unknown"
        );
        assert!(!lookup(&mut scan, Fingerprint(fp(99_999_999))).unwrap().held);

        let s = stats(scan.store()).unwrap();
        let live = live_partitions(&v);
        assert_eq!(s.partitions[0].generations, live[0].generations);
        assert_eq!(s.partitions[0].fingerprints, CHUNK_ENTRIES as u64 + 5 + 4);
        assert_eq!(
            (
                s.partitions[0].generations[0].input_start,
                s.partitions[0].generations[0].input_end
            ),
            (100, 200)
        );
        assert_eq!(s.partitions[0].generations[1].input_end, 210);
        assert_eq!(s.format_version, FORMAT_VERSION);
    }

    #[test]
    fn a_periodic_snapshot_makes_the_offline_answer_incomplete() {
        let dir = tempfile::tempdir().unwrap();
        let (store, gens) = store_with(dir.path());
        save(&store, &gens, false);
        let l = lookup(&mut Scan::new(store), Fingerprint(fp(7))).unwrap();
        assert!(l.held);
        assert_eq!(l.incomplete.len(), 1);
        assert!(l.incomplete[0].reason.contains("not in the store"), "{l:?}");
        let mut v = view(&gens);
        v.insert(3, PartitionView::Recovering);
        let live = live_lookup(&v, Fingerprint(fp(7)));
        assert_eq!(live.incomplete[0].partition, 3);
        assert!(live.incomplete[0].reason.starts_with("recovering"));
    }

    #[test]
    fn dump_streams_every_entry_and_stops_quietly_on_a_closed_pipe() {
        let dir = tempfile::tempdir().unwrap();
        let (store, gens) = store_with(dir.path());
        let mut scan = Scan::new(store);
        let mut out = Vec::new();
        dump(&mut scan, 2, None, &mut out).unwrap();
        let lines: Vec<serde_json::Value> = out
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty())
            .map(|l| serde_json::from_slice(l).unwrap())
            .collect();
        assert_eq!(lines.len(), gens.total_len());
        for l in &lines {
            let f = u128::from_str_radix(l["fingerprint"].as_str().unwrap(), 16).unwrap();
            let hit = gens.lookup(f).expect("dumped fingerprints are held");
            assert_eq!(l["generation"].as_u64(), Some(hit.epoch));
            assert_eq!(l["first_seen_offset"].as_i64(), hit.first_offset);
        }
        let mut only5 = Vec::new();
        dump(&mut scan, 2, Some(5), &mut only5).unwrap();
        assert_eq!(only5.split(|b| *b == b'\n').filter(|l| !l.is_empty()).count(), 4);
        assert!(matches!(
            dump(&mut scan, 2, Some(9), &mut Vec::new()),
            Err(InspectError::Usage(_))
        ));
        assert!(matches!(
            dump(&mut scan, 0, None, &mut Vec::new()),
            Err(InspectError::Usage(_))
        ));
        let mut tiny = Scan::with_budget(scan.into_store(), 1);
        let mut again = Vec::new();
        dump(&mut tiny, 2, None, &mut again).unwrap();
        assert_eq!(again, out, "reopening between chunks changes nothing");
        assert_eq!(tiny.reopens(), 2, "3 chunks");
        let mut scan = Scan::new(tiny.into_store());

        struct Closed(usize);
        impl Write for Closed {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                if self.0 == 0 {
                    return Err(std::io::ErrorKind::BrokenPipe.into());
                }
                self.0 -= 1;
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        dump(&mut scan, 2, None, &mut Closed(10)).unwrap();
    }

    /// Damages a clean store with `damage` and expects `verify` to report `expect`, the same
    /// with a scan that reopens the store before every entry.
    fn damaged(damage: impl FnOnce(&Store), expect: &str) {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = store_with(dir.path());
        let mut scan = Scan::new(store);
        assert_eq!(
            verify(&mut scan).unwrap(),
            Vec::<String>::new(),
            "clean before the damage"
        );
        damage(scan.store());
        let problems = verify(&mut scan).unwrap();
        assert!(
            problems.iter().any(|p| p.contains(expect)),
            "expected {expect:?} in {problems:#?}"
        );
        let mut tiny = Scan::with_budget(scan.into_store(), 1);
        assert_eq!(verify(&mut tiny).unwrap(), problems);
        assert!(tiny.reopens() >= 4, "one per entry after the first: {}", tiny.reopens());
    }

    fn chunk_key(p: u32, epoch: u64, c: u32) -> Vec<u8> {
        let mut k = b"g".to_vec();
        k.extend_from_slice(&p.to_be_bytes());
        k.extend_from_slice(&epoch.to_be_bytes());
        k.extend_from_slice(&c.to_be_bytes());
        k
    }

    fn edit_snapshot(store: &Store, f: impl FnOnce(&mut PartitionSnapshot)) {
        let mut s = store.snapshot(2).unwrap().unwrap();
        f(&mut s);
        let mut k = b"s".to_vec();
        k.extend_from_slice(&2u32.to_be_bytes());
        store.db().insert(k, serde_json::to_vec(&s).unwrap()).unwrap();
    }

    #[test]
    fn verify_finds_orphan_missing_and_damaged_chunks() {
        damaged(
            |s| {
                let v = s.db().get(chunk_key(2, 5, 0)).unwrap().unwrap();
                s.db().insert(chunk_key(2, 3, 0), v).unwrap();
            },
            "generation 3: 1 orphan chunk(s), no live generation",
        );
        damaged(
            |s| {
                let v = s.db().get(chunk_key(2, 5, 0)).unwrap().unwrap();
                s.db().insert(chunk_key(9, 1, 0), v).unwrap();
            },
            "partition 9 generation 1: 1 orphan chunk(s), no snapshot of that partition",
        );
        damaged(
            |s| {
                s.db().remove(chunk_key(2, 4, 1)).unwrap();
            },
            "partition 2 generation 4: chunk(s) 1 of 2 missing",
        );
        damaged(
            |s| {
                let mut v = s.db().get(chunk_key(2, 4, 0)).unwrap().unwrap().to_vec();
                v[100] ^= 1;
                s.db().insert(chunk_key(2, 4, 0), v).unwrap();
            },
            "partition 2 generation 4 chunk 0: chunk checksum mismatch",
        );
        damaged(
            |s| {
                let v = s.db().get(chunk_key(2, 5, 0)).unwrap().unwrap();
                s.db().insert(chunk_key(2, 5, 1), v).unwrap();
            },
            "chunk 1 beyond its 1 chunks",
        );
    }

    #[test]
    fn verify_finds_snapshots_that_disagree_with_their_chunks() {
        damaged(
            |s| edit_snapshot(s, |snap| snap.generations[1].count = 5),
            "generation 5: 4 fingerprints stored, the snapshot counts 5",
        );
        damaged(
            |s| edit_snapshot(s, |snap| snap.generations[0].chunks = 3),
            "3 chunks recorded for",
        );
        damaged(|s| edit_snapshot(s, |snap| snap.epoch = 6), "snapshot epoch 6");
        damaged(
            |s| edit_snapshot(s, |snap| snap.generations[0].epoch = 2),
            "not consecutive (2 then 5)",
        );
        damaged(
            |s| edit_snapshot(s, |snap| snap.committed_offset = 150),
            "after the committed offset 150",
        );
        damaged(
            |s| edit_snapshot(s, |snap| snap.generations[1].in_start = 150),
            "first-seen offset(s) outside its input range [100, 150)",
        );
        damaged(
            |s| edit_snapshot(s, |snap| snap.out_covered = pos(2, 10)),
            "output covered up to 2:10",
        );
        damaged(
            |s| {
                let mut k = b"s".to_vec();
                k.extend_from_slice(&2u32.to_be_bytes());
                s.db().insert(k, b"{not json".to_vec()).unwrap();
            },
            "snapshot of partition 2",
        );
    }

    #[test]
    fn verify_finds_bad_stamps_and_foreign_keys() {
        damaged(
            |s| {
                s.db().insert(b"zz:other", b"x".to_vec()).unwrap();
            },
            "1 key(s) outside the store layout",
        );
        damaged(
            |s| {
                s.db().insert(b"m:format", &7u32.to_be_bytes()).unwrap();
            },
            "says format version 1, the database (m:format) 7",
        );
        damaged(
            |s| std::fs::remove_file(s.path().join(FORMAT_FILE)).unwrap(),
            "kafka-dedup.format` is missing",
        );
        damaged(
            |s| {
                s.db().insert(b"m:identity", b"[]".to_vec()).unwrap();
            },
            "identity",
        );
    }

    #[test]
    fn lookup_inputs_from_the_cli_and_the_query() {
        assert!(matches!(
            LookupInput::from_args(None, None, None, &[], None),
            Err(InspectError::Usage(_))
        ));
        assert!(matches!(
            LookupInput::from_args(Some("xyz"), None, None, &[], None),
            Err(InspectError::Usage(_))
        ));
        let cli = LookupInput::from_args(
            None,
            Some("v".into()),
            Some("k".into()),
            &["h=1".into(), "h=2".into()],
            None,
        )
        .unwrap();
        let q = LookupInput::from_query(vec![
            ("key".into(), "k".into()),
            ("header".into(), "h=1".into()),
            ("value".into(), "v".into()),
            ("header".into(), "h=2".into()),
        ])
        .unwrap();
        assert_eq!(cli, q);
        let f = Fingerprinter::new(Source::Header("h".into()));
        assert_eq!(cli.fingerprint(&f), q.fingerprint(&f));
        let key_only = LookupInput::from_query(vec![("key".into(), "k".into())]).unwrap();
        assert!(key_only.fingerprint(&Fingerprinter::new(Source::Value)).is_err());
        assert!(LookupInput::from_query(vec![]).is_err());
        assert!(LookupInput::from_query(vec![("valu".into(), "x".into())]).is_err());
        assert!(LookupInput::from_query(vec![
            ("fingerprint".into(), "0".repeat(32)),
            ("value".into(), "x".into())
        ])
        .is_err());
        assert_eq!(
            LookupInput::from_query(vec![("fingerprint".into(), format!("{:032x}", 5u128))]).unwrap(),
            LookupInput::Fingerprint(Fingerprint(5))
        );
    }
}

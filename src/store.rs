//! The local fingerprint store: a sled database that caches each owned partition's generations
//! as of its last checkpoint, so a restart need not re-read two intervals of the output topic.
//!
//! It is a cache of the output topic (shared/DESIGN.md, principle 1): a snapshot is used only when
//! its checkpoint id equals the one in the committed offset's metadata; anything else (missing,
//! behind, ahead, from another deployment, corrupt) is rebuilt from the output topic.
//!
//! Layout (format version [`FORMAT_VERSION`]; one sled tree, so a checkpoint is one atomic batch):
//!
//! | key                                              | value                                   |
//! |--------------------------------------------------|-----------------------------------------|
//! | `m:format`                                       | format version, u32 big-endian          |
//! | `m:identity`                                     | JSON [`Identity`]                       |
//! | `s` partition:u32-be                             | JSON [`PartitionSnapshot`]              |
//! | `g` partition:u32-be epoch:u64-be chunk:u32-be   | chunk: `KDG1` count:u32-le, count x (fingerprint:u128-le, first-seen:u32-le), xxh3-64:u64-le of what precedes |
//!
//! Chunks hold up to [`CHUNK_ENTRIES`] fingerprints (1.3 MB), so a generation of millions is
//! written and read in bounded pieces and `inspect dump` can stream it.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::xxh3_64;

use crate::generations::{now_ms, Generation, Positions};
use crate::table::FingerprintTable;

/// The store format this build reads and writes. See `migrations/`.
pub const FORMAT_VERSION: u32 = 1;

/// Fingerprints per chunk value.
pub const CHUNK_ENTRIES: usize = 65_536;

const KEY_FORMAT: &[u8] = b"m:format";
const KEY_IDENTITY: &[u8] = b"m:identity";
const CHUNK_MAGIC: &[u8; 4] = b"KDG1";
const ENTRY_BYTES: usize = 20;
/// File in the store directory naming the HTTP address of the process that has it open.
pub const LIVE_FILE: &str = "kafka-dedup.live";

/// What the store belongs to. A store whose identity differs from the configuration's is from
/// another deployment and is cleared before use.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Identity {
    /// `input.group_id`.
    pub group_id: String,
    /// `input.topic`.
    pub input_topic: String,
    /// `output.topic`.
    pub output_topic: String,
    /// `fingerprint.source`: fingerprints of another source are meaningless here.
    pub source: String,
}

/// A partition's state as of one checkpoint.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionSnapshot {
    /// Epoch of the current generation.
    pub epoch: u64,
    /// Checkpoint id; equals the `ckpt` of the committed metadata when the store is current.
    pub ckpt: String,
    /// The input offset committed with this checkpoint (the next record to consume).
    pub committed_offset: i64,
    /// Output positions up to which every forwarded record's fingerprint is in this snapshot;
    /// recovery re-reads the output from here.
    pub out_covered: Positions,
    /// Live generations, oldest first, the current one last.
    pub generations: Vec<GenerationMeta>,
    /// When it was written, ms since the Unix epoch.
    pub written_at_ms: i64,
    /// True when written by a clean hand-over (nothing in flight) and no owner has produced for
    /// the partition since: [`Store::mark_dirty`] clears it when an owner starts. Used when the
    /// broker does not return offset commit metadata.
    #[serde(default)]
    pub clean: bool,
}

/// Description of one stored generation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GenerationMeta {
    /// Generation epoch.
    pub epoch: u64,
    /// Creation time, ms since the Unix epoch.
    pub created_at_ms: i64,
    /// First input offset of the generation.
    pub in_start: i64,
    /// Output positions where its records begin.
    pub out_start: Positions,
    /// Fingerprints stored.
    pub count: u64,
    /// Chunks stored (`ceil(count / CHUNK_ENTRIES)`).
    pub chunks: u32,
}

/// Why a store cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// Another process holds sled's lock on the directory.
    #[error("store {path} is in use by a running kafka-dedup{hint}")]
    InUse { path: PathBuf, hint: String },
    /// The directory exists but is not a kafka-dedup store.
    #[error("{path} is not a kafka-dedup store: {reason}; nothing was modified")]
    NotAStore { path: PathBuf, reason: String },
    /// Written by a newer kafka-dedup.
    #[error("store {path} has format version {found}, newer than this build supports ({supported}); use a newer kafka-dedup; nothing was modified")]
    NewerFormat { path: PathBuf, found: u32, supported: u32 },
    /// Written by an older kafka-dedup; `kafka-dedup migrate` upgrades it.
    #[error("store {path} has format version {found}, this build uses {supported}; run `kafka-dedup migrate --store {path}`")]
    OlderFormat { path: PathBuf, found: u32, supported: u32 },
    /// Data that fails a checksum or does not parse.
    #[error("store {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// sled or the file system failed.
    #[error("store {path}: {source}")]
    Sled { path: PathBuf, source: sled::Error },
}

/// How [`Store::open_for_run`] found the directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Opened {
    /// A store of this deployment, as left by the previous run.
    Existing,
    /// A new, empty store (no directory, or an empty one).
    Created,
    /// The previous store could not be used and was replaced by an empty one; its generations
    /// are re-learned from the output topic. The string says why (metric label: see `reason`).
    Replaced { reason: &'static str, detail: String },
}

/// The open store. Cheap to clone (sled handles are shared).
#[derive(Clone)]
pub struct Store {
    db: sled::Db,
    path: Arc<PathBuf>,
}

/// One partition's part of a checkpoint: the snapshot fields plus the live generations.
pub struct PartitionWrite<'a> {
    /// Input partition.
    pub partition: i32,
    /// Epoch of the current generation.
    pub epoch: u64,
    /// Checkpoint id (also committed in the offset metadata).
    pub ckpt: String,
    /// Input offset committed with this checkpoint.
    pub committed_offset: i64,
    /// See [`PartitionSnapshot::out_covered`].
    pub out_covered: Positions,
    /// Live generations, oldest first. Those already stored with the same count are not rewritten.
    pub generations: Vec<&'a Generation>,
    /// See [`PartitionSnapshot::clean`].
    pub clean: bool,
}

fn snapshot_key(p: i32) -> Vec<u8> {
    let mut k = b"s".to_vec();
    k.extend_from_slice(&(p as u32).to_be_bytes());
    k
}

fn chunk_key(p: i32, epoch: u64, chunk: u32) -> Vec<u8> {
    let mut k = b"g".to_vec();
    k.extend_from_slice(&(p as u32).to_be_bytes());
    k.extend_from_slice(&epoch.to_be_bytes());
    k.extend_from_slice(&chunk.to_be_bytes());
    k
}

fn chunk_prefix(p: i32) -> Vec<u8> {
    let mut k = b"g".to_vec();
    k.extend_from_slice(&(p as u32).to_be_bytes());
    k
}

/// Encodes entries as one chunk value.
pub fn encode_chunk(entries: &[(u128, u32)]) -> Vec<u8> {
    let mut v = Vec::with_capacity(8 + entries.len() * ENTRY_BYTES + 8);
    v.extend_from_slice(CHUNK_MAGIC);
    v.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    for (fp, off) in entries {
        v.extend_from_slice(&fp.to_le_bytes());
        v.extend_from_slice(&off.to_le_bytes());
    }
    let sum = xxh3_64(&v);
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

/// Decodes a chunk value, verifying its magic, length and checksum.
pub fn decode_chunk(v: &[u8]) -> Result<Vec<(u128, u32)>, String> {
    if v.len() < 16 || &v[..4] != CHUNK_MAGIC {
        return Err("chunk header missing".into());
    }
    let (body, sum) = v.split_at(v.len() - 8);
    if xxh3_64(body).to_le_bytes() != sum {
        return Err("chunk checksum mismatch".into());
    }
    let count = u32::from_le_bytes(body[4..8].try_into().expect("4 bytes")) as usize;
    if body.len() != 8 + count * ENTRY_BYTES {
        return Err(format!("chunk length {} does not fit {count} entries", body.len()));
    }
    Ok(body[8..]
        .chunks_exact(ENTRY_BYTES)
        .map(|e| {
            (
                u128::from_le_bytes(e[..16].try_into().expect("16 bytes")),
                u32::from_le_bytes(e[16..].try_into().expect("4 bytes")),
            )
        })
        .collect())
}

/// True if `dir` holds files that sled creates (`conf`, `db`, `blobs/`, `snap.*`).
fn looks_like_sled(dir: &Path) -> bool {
    dir.join("conf").exists() || dir.join("db").exists()
}

fn is_empty_dir(dir: &Path) -> std::io::Result<bool> {
    Ok(std::fs::read_dir(dir)?.next().is_none())
}

/// Opens sled, turning sled's panics on mangled files into errors.
fn open_sled(path: &Path) -> Result<sled::Db, String> {
    let path = path.to_path_buf();
    let result = std::panic::catch_unwind(move || {
        sled::Config::new()
            .path(&path)
            .cache_capacity(64 * 1024 * 1024)
            .flush_every_ms(None)
            .open()
    });
    match result {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(e.to_string()),
        Err(panic) => Err(format!(
            "sled panicked while opening: {}",
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("?")
        )),
    }
}

fn in_use_hint(path: &Path) -> String {
    match std::fs::read_to_string(path.join(LIVE_FILE)) {
        Ok(addr) if !addr.trim().is_empty() => format!(
            "; ask it over HTTP instead: http://{}/store/stats, http://{}/store/lookup?fingerprint=HEX",
            addr.trim(),
            addr.trim()
        ),
        _ => "; ask it over HTTP instead (GET /store/stats, /store/lookup on its http.listen address)".to_string(),
    }
}

impl Store {
    /// Opens the store of a deployment for `kafka-dedup run`, creating it if needed.
    ///
    /// - no directory or an empty one: a new store ([`Opened::Created`]);
    /// - a store of another deployment (different [`Identity`]): cleared ([`Opened::Replaced`]);
    /// - sled fails to open it (truncated or garbled files): the directory is moved to
    ///   `<path>.corrupt` (replacing an older one) and a new store is created ([`Opened::Replaced`]);
    ///   if the new one fails too, the error is returned: no crash loop on a bad disk;
    /// - held by another process: [`StoreError::InUse`];
    /// - a directory of other files, or a newer/older format: refused, nothing touched.
    pub fn open_for_run(path: &Path, identity: &Identity) -> Result<(Store, Opened), StoreError> {
        let mut opened = Opened::Existing;
        let fresh = !path.exists() || is_empty_dir(path).unwrap_or(false);
        if fresh {
            opened = Opened::Created;
        } else if !looks_like_sled(path) {
            return Err(StoreError::NotAStore {
                path: path.to_path_buf(),
                reason: "the directory holds files that are not a sled database; point store.path at an empty or new directory".into(),
            });
        }
        let db = match open_sled(path) {
            Ok(db) => db,
            Err(e) if e.contains("could not acquire lock") => {
                return Err(StoreError::InUse {
                    path: path.to_path_buf(),
                    hint: in_use_hint(path),
                })
            }
            Err(e) => {
                let aside = PathBuf::from(format!("{}.corrupt", path.display()));
                let _ = std::fs::remove_dir_all(&aside);
                std::fs::rename(path, &aside).map_err(|io| StoreError::Corrupt {
                    path: path.to_path_buf(),
                    reason: format!("{e}; moving it aside to {} failed: {io}", aside.display()),
                })?;
                opened = Opened::Replaced {
                    reason: "corrupt",
                    detail: format!("sled could not open it ({e}); moved to {}", aside.display()),
                };
                open_sled(path).map_err(|e2| StoreError::Corrupt {
                    path: path.to_path_buf(),
                    reason: format!("a new store cannot be created either: {e2}"),
                })?
            }
        };
        let store = Store {
            db,
            path: Arc::new(path.to_path_buf()),
        };
        match store.format_version()? {
            None if store.db.is_empty() => {}
            None => {
                return Err(StoreError::NotAStore {
                    path: path.to_path_buf(),
                    reason: "a sled database without a kafka-dedup format version".into(),
                })
            }
            Some(v) if v > FORMAT_VERSION => {
                return Err(StoreError::NewerFormat {
                    path: path.to_path_buf(),
                    found: v,
                    supported: FORMAT_VERSION,
                })
            }
            Some(v) if v < FORMAT_VERSION => {
                return Err(StoreError::OlderFormat {
                    path: path.to_path_buf(),
                    found: v,
                    supported: FORMAT_VERSION,
                })
            }
            Some(_) => {}
        }
        match store.identity() {
            Ok(Some(id)) if &id == identity => {}
            Ok(Some(id)) => {
                store.db.clear().map_err(|e| store.sled_err(e))?;
                opened = Opened::Replaced {
                    reason: "other_deployment",
                    detail: format!(
                        "it belonged to group {} ({} -> {}, source {}); cleared",
                        id.group_id, id.input_topic, id.output_topic, id.source
                    ),
                };
            }
            Ok(None) => {}
            Err(e) => {
                store.db.clear().map_err(|e| store.sled_err(e))?;
                opened = Opened::Replaced {
                    reason: "corrupt",
                    detail: format!("{e}; cleared"),
                };
            }
        }
        store
            .db
            .insert(KEY_FORMAT, &FORMAT_VERSION.to_be_bytes())
            .map_err(|e| store.sled_err(e))?;
        store
            .db
            .insert(KEY_IDENTITY, serde_json::to_vec(identity).expect("identity serializes"))
            .map_err(|e| store.sled_err(e))?;
        store.db.flush().map_err(|e| store.sled_err(e))?;
        Ok((store, opened))
    }

    /// Opens an existing store without changing it (for `inspect`). Refuses a missing or empty
    /// directory, a directory that is not a store, a newer format, and a store in use.
    pub fn open_existing(path: &Path) -> Result<Store, StoreError> {
        let not = |reason: &str| StoreError::NotAStore {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        };
        if !path.exists() {
            return Err(not("no such directory"));
        }
        if !path.is_dir() {
            return Err(not("not a directory"));
        }
        if is_empty_dir(path).unwrap_or(false) {
            return Err(not("the directory is empty"));
        }
        if !looks_like_sled(path) {
            return Err(not("the directory holds no sled database (no `conf` or `db` file)"));
        }
        let db = match open_sled(path) {
            Ok(db) => db,
            Err(e) if e.contains("could not acquire lock") => {
                return Err(StoreError::InUse {
                    path: path.to_path_buf(),
                    hint: in_use_hint(path),
                })
            }
            Err(e) => {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    reason: e,
                })
            }
        };
        let store = Store {
            db,
            path: Arc::new(path.to_path_buf()),
        };
        match store.format_version()? {
            None => Err(not("a sled database without a kafka-dedup format version")),
            Some(v) if v > FORMAT_VERSION => Err(StoreError::NewerFormat {
                path: path.to_path_buf(),
                found: v,
                supported: FORMAT_VERSION,
            }),
            Some(_) => Ok(store),
        }
    }

    fn sled_err(&self, source: sled::Error) -> StoreError {
        StoreError::Sled {
            path: self.path.to_path_buf(),
            source,
        }
    }

    fn corrupt(&self, reason: impl Into<String>) -> StoreError {
        StoreError::Corrupt {
            path: self.path.to_path_buf(),
            reason: reason.into(),
        }
    }

    /// The store directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The format version stamped in the store, if any.
    pub fn format_version(&self) -> Result<Option<u32>, StoreError> {
        match self.db.get(KEY_FORMAT).map_err(|e| self.sled_err(e))? {
            None => Ok(None),
            Some(v) if v.len() == 4 => Ok(Some(u32::from_be_bytes(v.as_ref().try_into().expect("4 bytes")))),
            Some(_) => Err(self.corrupt("format version is not 4 bytes")),
        }
    }

    /// Stamps a format version (used by `migrate`).
    pub fn set_format_version(&self, v: u32) -> Result<(), StoreError> {
        self.db
            .insert(KEY_FORMAT, &v.to_be_bytes())
            .map_err(|e| self.sled_err(e))?;
        self.db.flush().map_err(|e| self.sled_err(e))?;
        Ok(())
    }

    /// The deployment the store belongs to.
    pub fn identity(&self) -> Result<Option<Identity>, StoreError> {
        match self.db.get(KEY_IDENTITY).map_err(|e| self.sled_err(e))? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| self.corrupt(format!("identity: {e}"))),
        }
    }

    /// Partitions with a snapshot, ascending.
    pub fn partitions(&self) -> Result<Vec<i32>, StoreError> {
        let mut out = Vec::new();
        for kv in self.db.scan_prefix(b"s") {
            let (k, _) = kv.map_err(|e| self.sled_err(e))?;
            if k.len() == 5 {
                out.push(u32::from_be_bytes(k[1..5].try_into().expect("4 bytes")) as i32);
            }
        }
        Ok(out)
    }

    /// Runs `f`, turning a panic inside sled (mangled files it did not detect at open) into
    /// [`StoreError::Corrupt`], so a bad store leads to a rebuild, never to a crash loop.
    fn guarded<T>(&self, what: &str, f: impl FnOnce() -> Result<T, StoreError>) -> Result<T, StoreError> {
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(r) => r,
            Err(_) => Err(self.corrupt(format!("sled panicked while {what}"))),
        }
    }

    /// The snapshot of partition `p`, if any.
    pub fn snapshot(&self, p: i32) -> Result<Option<PartitionSnapshot>, StoreError> {
        self.guarded("reading a snapshot", || self.snapshot_unguarded(p))
    }

    fn snapshot_unguarded(&self, p: i32) -> Result<Option<PartitionSnapshot>, StoreError> {
        match self.db.get(snapshot_key(p)).map_err(|e| self.sled_err(e))? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| self.corrupt(format!("snapshot of partition {p}: {e}"))),
        }
    }

    /// Calls `f` with every chunk's entries of generation `meta` of partition `p`, in order,
    /// one chunk in memory at a time. Fails on a missing chunk or a checksum mismatch.
    pub fn for_each_chunk(
        &self,
        p: i32,
        meta: &GenerationMeta,
        mut f: impl FnMut(&[(u128, u32)]),
    ) -> Result<(), StoreError> {
        let mut seen = 0u64;
        for c in 0..meta.chunks {
            let v = self
                .db
                .get(chunk_key(p, meta.epoch, c))
                .map_err(|e| self.sled_err(e))?
                .ok_or_else(|| self.corrupt(format!("partition {p} generation {} chunk {c} missing", meta.epoch)))?;
            let entries = decode_chunk(&v)
                .map_err(|e| self.corrupt(format!("partition {p} generation {} chunk {c}: {e}", meta.epoch)))?;
            seen += entries.len() as u64;
            f(&entries);
        }
        if seen != meta.count {
            return Err(self.corrupt(format!(
                "partition {p} generation {}: {seen} fingerprints stored, {} expected",
                meta.epoch, meta.count
            )));
        }
        Ok(())
    }

    /// Loads the generations of a snapshot, oldest first, verifying every chunk. The returned
    /// generations are marked as stored.
    pub fn load_generations(&self, p: i32, snap: &PartitionSnapshot) -> Result<Vec<Generation>, StoreError> {
        self.guarded("loading generations", || self.load_generations_unguarded(p, snap))
    }

    fn load_generations_unguarded(&self, p: i32, snap: &PartitionSnapshot) -> Result<Vec<Generation>, StoreError> {
        let mut out = Vec::with_capacity(snap.generations.len());
        for meta in &snap.generations {
            let mut table = FingerprintTable::with_capacity(meta.count as usize);
            self.for_each_chunk(p, meta, |entries| {
                for (fp, off) in entries {
                    table.insert(*fp, *off);
                }
            })?;
            let g = Generation {
                epoch: meta.epoch,
                created_at_ms: meta.created_at_ms,
                in_start: meta.in_start,
                out_start: meta.out_start.clone(),
                table,
                stored_len: Default::default(),
            };
            g.mark_stored();
            out.push(g);
        }
        Ok(out)
    }

    /// Writes a checkpoint of several partitions as one atomic sled batch, then flushes it to
    /// disk. Generations already stored with the same count are not rewritten; chunks of
    /// generations no longer live are removed. On success the written generations are marked
    /// stored. Errors: sled I/O.
    pub fn save(&self, writes: &[PartitionWrite<'_>]) -> Result<(), StoreError> {
        self.guarded("writing a checkpoint", || self.save_unguarded(writes))
    }

    fn save_unguarded(&self, writes: &[PartitionWrite<'_>]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        let mut written: Vec<&Generation> = Vec::new();
        for w in writes {
            let old = self.snapshot_unguarded(w.partition).ok().flatten();
            let mut metas = Vec::with_capacity(w.generations.len());
            for g in &w.generations {
                let count = g.len();
                let chunks = count.div_ceil(CHUNK_ENTRIES) as u32;
                let old_meta = old
                    .as_ref()
                    .and_then(|o| o.generations.iter().find(|m| m.epoch == g.epoch));
                if !(g.is_stored() && old_meta.is_some_and(|m| m.count == count as u64)) {
                    let mut entries: Vec<(u128, u32)> = Vec::with_capacity(CHUNK_ENTRIES.min(count));
                    let mut c = 0u32;
                    for e in g.table.iter() {
                        entries.push(e);
                        if entries.len() == CHUNK_ENTRIES {
                            batch.insert(chunk_key(w.partition, g.epoch, c), encode_chunk(&entries));
                            entries.clear();
                            c += 1;
                        }
                    }
                    if !entries.is_empty() {
                        batch.insert(chunk_key(w.partition, g.epoch, c), encode_chunk(&entries));
                        c += 1;
                    }
                    debug_assert_eq!(c, chunks);
                    if let Some(m) = old_meta {
                        for stale in chunks..m.chunks {
                            batch.remove(chunk_key(w.partition, g.epoch, stale));
                        }
                    }
                    written.push(g);
                }
                metas.push(GenerationMeta {
                    epoch: g.epoch,
                    created_at_ms: g.created_at_ms,
                    in_start: g.in_start,
                    out_start: g.out_start.clone(),
                    count: count as u64,
                    chunks,
                });
            }
            // Chunks of generations that are no longer live.
            match &old {
                Some(o) => {
                    for m in &o.generations {
                        if !w.generations.iter().any(|g| g.epoch == m.epoch) {
                            for c in 0..m.chunks {
                                batch.remove(chunk_key(w.partition, m.epoch, c));
                            }
                        }
                    }
                }
                None => {
                    // No readable snapshot: remove whatever chunks the partition has that are
                    // not being written now.
                    for kv in self.db.scan_prefix(chunk_prefix(w.partition)) {
                        let (k, _) = kv.map_err(|e| self.sled_err(e))?;
                        if k.len() == 17 {
                            let epoch = u64::from_be_bytes(k[5..13].try_into().expect("8 bytes"));
                            if !w.generations.iter().any(|g| g.epoch == epoch) {
                                batch.remove(k);
                            }
                        }
                    }
                }
            }
            let snap = PartitionSnapshot {
                epoch: w.epoch,
                ckpt: w.ckpt.clone(),
                committed_offset: w.committed_offset,
                out_covered: w.out_covered.clone(),
                generations: metas,
                written_at_ms: now_ms(),
                clean: w.clean,
            };
            batch.insert(
                snapshot_key(w.partition),
                serde_json::to_vec(&snap).expect("snapshot serializes"),
            );
        }
        self.db.apply_batch(batch).map_err(|e| self.sled_err(e))?;
        self.db.flush().map_err(|e| self.sled_err(e))?;
        for g in written {
            g.mark_stored();
        }
        Ok(())
    }

    /// Records that an owner started producing for partition `p`: its snapshot is no longer the
    /// result of a clean hand-over. Flushed before returning.
    pub fn mark_dirty(&self, p: i32) -> Result<(), StoreError> {
        if let Some(mut snap) = self.snapshot(p)? {
            if snap.clean {
                snap.clean = false;
                self.db
                    .insert(snapshot_key(p), serde_json::to_vec(&snap).expect("snapshot serializes"))
                    .map_err(|e| self.sled_err(e))?;
                self.db.flush().map_err(|e| self.sled_err(e))?;
            }
        }
        Ok(())
    }

    /// Bytes the store occupies on disk (sled's own accounting).
    pub fn size_on_disk(&self) -> u64 {
        self.db.size_on_disk().unwrap_or(0)
    }

    /// Writes the HTTP address of this process into the store directory, for `inspect`'s hint.
    pub fn write_live_file(&self, http_listen: &str) {
        let _ = std::fs::write(self.path.join(LIVE_FILE), http_listen);
    }

    /// Removes the file written by [`Store::write_live_file`].
    pub fn remove_live_file(&self) {
        let _ = std::fs::remove_file(self.path.join(LIVE_FILE));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn identity() -> Identity {
        Identity {
            group_id: "g".into(),
            input_topic: "in".into(),
            output_topic: "out".into(),
            source: "value".into(),
        }
    }

    fn pos(p: i32, o: i64) -> Positions {
        [(p, o)].into_iter().collect()
    }

    #[test]
    fn save_load_round_trip_and_rotation_cleanup() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("store");
        let (store, opened) = Store::open_for_run(&path, &identity()).unwrap();
        assert_eq!(opened, Opened::Created);
        let mut g1 = Generation::new(1, 0, pos(0, 0), 0);
        for i in 1..=(CHUNK_ENTRIES as u128 + 10) {
            g1.table.insert(i * 7919, i as u32);
        }
        let g2 = Generation::new(2, 100, pos(0, 90), 0);
        store
            .save(&[PartitionWrite {
                partition: 0,
                epoch: 2,
                ckpt: "a".into(),
                committed_offset: 100,
                out_covered: pos(0, 90),
                generations: vec![&g1, &g2],
                clean: false,
            }])
            .unwrap();
        assert!(g1.is_stored());
        let snap = store.snapshot(0).unwrap().unwrap();
        assert_eq!(snap.generations[0].chunks, 2);
        let loaded = store.load_generations(0, &snap).unwrap();
        assert_eq!(loaded[0].len(), g1.len());
        assert_eq!(loaded[0].table.get(7919), Some(1));
        drop(store);

        // Reopen: same identity, existing.
        let (store, opened) = Store::open_for_run(&path, &identity()).unwrap();
        assert_eq!(opened, Opened::Existing);
        // Rotate: g1 drops out; its chunks are removed.
        let g3 = Generation::new(3, 200, pos(0, 180), 0);
        store
            .save(&[PartitionWrite {
                partition: 0,
                epoch: 3,
                ckpt: "b".into(),
                committed_offset: 200,
                out_covered: pos(0, 180),
                generations: vec![&g2, &g3],
                clean: false,
            }])
            .unwrap();
        let keys = store.db.scan_prefix(chunk_prefix(0)).count();
        assert_eq!(keys, 0, "g2 and g3 are empty, g1's chunks are gone");
        assert_eq!(store.partitions().unwrap(), vec![0]);
    }

    #[test]
    fn garbled_chunk_is_reported_corrupt() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open_for_run(dir.path(), &identity()).unwrap();
        let mut g = Generation::new(1, 0, pos(0, 0), 0);
        g.table.insert(42, 0);
        store
            .save(&[PartitionWrite {
                partition: 3,
                epoch: 1,
                ckpt: "c".into(),
                committed_offset: 1,
                out_covered: pos(3, 1),
                generations: vec![&g],
                clean: false,
            }])
            .unwrap();
        let k = chunk_key(3, 1, 0);
        let mut v = store.db.get(&k).unwrap().unwrap().to_vec();
        v[10] ^= 0xff;
        store.db.insert(&k, v).unwrap();
        let snap = store.snapshot(3).unwrap().unwrap();
        let err = store.load_generations(3, &snap).unwrap_err();
        assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
    }

    #[test]
    fn other_deployment_is_cleared_and_foreign_dirs_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s");
        {
            let (store, _) = Store::open_for_run(&path, &identity()).unwrap();
            let g = Generation::new(1, 0, pos(0, 0), 0);
            store
                .save(&[PartitionWrite {
                    partition: 0,
                    epoch: 1,
                    ckpt: "x".into(),
                    committed_offset: 0,
                    out_covered: pos(0, 0),
                    generations: vec![&g],
                    clean: false,
                }])
                .unwrap();
        }
        let mut other = identity();
        other.output_topic = "elsewhere".into();
        let (store, opened) = Store::open_for_run(&path, &other).unwrap();
        assert!(matches!(
            opened,
            Opened::Replaced {
                reason: "other_deployment",
                ..
            }
        ));
        assert!(store.partitions().unwrap().is_empty());
        drop(store);

        let foreign = dir.path().join("foreign");
        std::fs::create_dir(&foreign).unwrap();
        std::fs::write(foreign.join("notes.txt"), "hello").unwrap();
        assert!(matches!(
            Store::open_for_run(&foreign, &identity()),
            Err(StoreError::NotAStore { .. })
        ));
        assert_eq!(std::fs::read_dir(&foreign).unwrap().count(), 1);
    }

    #[test]
    fn second_opener_is_told_the_store_is_in_use() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _) = Store::open_for_run(dir.path(), &identity()).unwrap();
        store.write_live_file("127.0.0.1:9999");
        let err = Store::open_existing(dir.path()).err().expect("locked");
        let msg = err.to_string();
        assert!(
            msg.contains("in use") && msg.contains("http://127.0.0.1:9999/store/"),
            "{msg}"
        );
    }
}

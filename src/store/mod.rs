//! The local fingerprint store: a sled database that caches each owned partition's generations
//! as of its last checkpoint, so a restart need not re-read two intervals of the output topic.
//!
//! It is a cache of the output topic (docs/ARCHITECTURE.md, "Principles"): a snapshot is used only when
//! its checkpoint id equals the one in the committed offset's metadata; anything else (missing,
//! behind, ahead, from another deployment, corrupt) is rebuilt from the output topic.
//!
//! Layout (format version [`FORMAT_VERSION`], documented in `migrations/0001-initial.md`). The
//! directory holds the format file [`FORMAT_FILE`] (the version as decimal text), sled's files
//! (`conf`, `db`, `blobs/`, `snap.*`) and, while `run` has it open, [`LIVE_FILE`]. The database
//! is one sled tree, so a checkpoint is one atomic batch:
//!
//! | key                                              | value                                   |
//! |--------------------------------------------------|-----------------------------------------|
//! | `m:format`                                       | format version, u32 big-endian          |
//! | `m:identity`                                     | JSON [`Identity`]                       |
//! | `s` partition:u32-be                             | JSON [`PartitionSnapshot`]              |
//! | `g` partition:u32-be epoch:u64-be chunk:u32-be   | chunk: `KDG1` count:u32-le, count x (fingerprint:u128-le, first-seen:u32-le), xxh3-64:u64-le of what precedes |
//!
//! Chunks hold up to [`CHUNK_ENTRIES`] fingerprints (80 KiB), so a generation of millions is
//! written and read in bounded pieces and `inspect dump` can stream it.
//!
//! Versioning: sled writes to its files whenever it opens a database, even to read it, so the
//! format file is read first and every refusal (not a store, newer format, older format) is
//! decided before sled is touched. Once the database is open, `m:format` decides: a migration
//! ([`crate::migrate`]) writes it with its data, and rewrites the format file after it.
//!
//! The rooms: `codec` (keys and chunk values), `open` (what a directory holds, and opening
//! it for `run`, `inspect` and `migrate`), `handle` (the sled handle's life cycle: releasing
//! the page cache, reopening, a store closed for good), and this file (the types, reading and
//! writing).

mod codec;
mod handle;
mod open;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use serde::{Deserialize, Serialize};

use crate::generations::{now_ms, Generation, Positions};
use crate::table::FingerprintTable;

use codec::{chunk_key, chunk_prefix, snapshot_key, KEY_FORMAT, KEY_IDENTITY};
pub use codec::{decode_chunk, encode_chunk, ChunkError, StoreKey};
pub use open::{format_file_version, FormatFileError};
use open::{in_use_hint, open_sled_waiting, write_format_file, LOCK_GRACE};

/// The store format this build reads and writes. See `migrations/`.
pub const FORMAT_VERSION: u32 = 1;

/// Fingerprints per chunk value (80 KiB). Small on purpose: sled 0.34 keeps up to 17 values in
/// one leaf page and reads and caches a page whole, so the chunk size bounds the memory one read
/// takes (with 65,536-entry chunks a page reached 22 MB, and reading it peaked near 3x that).
pub const CHUNK_ENTRIES: usize = 4_096;
/// File in the store directory naming the HTTP address (`http.listen`, empty when off) of the
/// `run` process that has it open; read for the hint of [`StoreError::InUse`]. Removed when `run`
/// stops cleanly (every partition handed over), so a file left in a store nobody holds says the
/// last run did not close it cleanly: records it forwarded after its snapshots are in the output
/// topic only (`inspect lookup` says so under `incomplete`).
pub const LIVE_FILE: &str = "kafka-dedup.live";
/// File in the store directory holding the format version as decimal text (`1` and a newline).
/// Its presence is what makes a directory a kafka-dedup store.
pub const FORMAT_FILE: &str = "kafka-dedup.format";

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
    /// True when written by a clean hand-over (nothing in flight). Informational (`inspect
    /// stats`): recovery decides on fencing from the committed metadata only, since another
    /// instance may have owned the partition after this snapshot was written.
    #[serde(default)]
    pub clean: bool,
    /// The partition clock at this checkpoint, ms since the Unix epoch ([`crate::horizon`]): a
    /// restart that loads this snapshot continues it. Absent (written by an older kafka-dedup, or
    /// before the partition took a record): not known. Optional, so format 1 is unchanged
    /// (`migrations/README.md`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<i64>,
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
    /// Its record-time bucket ([`Generation::bucket`]); absent when not known. Optional, so
    /// format 1 is unchanged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket: Option<i64>,
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
    #[error("store {path} has format version {found}, this build uses {supported}; run `kafka-dedup migrate --store {path}` \
             (or delete the directory: the store is a cache, and the next start rebuilds it from the output topic); \
             nothing was modified")]
    OlderFormat { path: PathBuf, found: u32, supported: u32 },
    /// `run` cannot create or write the store there (a read-only file system, no permission, a
    /// file where a directory should be): a configuration error, exit 2.
    #[error("configuration key `store.path`: {path} is not writable ({reason}); point it at a directory kafka-dedup may create and write")]
    NotWritable { path: PathBuf, reason: String },
    /// The database is closed: a write failed and it could not be opened again yet (or, at
    /// start, not at all, for want of space). `run` goes on without it and retries.
    #[error("store {path} is not open (a write failed and it could not be reopened yet: {reason})")]
    Closed { path: PathBuf, reason: String },
    /// Data that fails a checksum or does not parse.
    #[error("store {path} is corrupt: {reason}")]
    Corrupt { path: PathBuf, reason: String },
    /// sled or the file system failed.
    #[error("store {path}: {source}")]
    Sled { path: PathBuf, source: sled::Error },
}

impl StoreError {
    /// True for a write refused for want of space (`ENOSPC`, a disk quota): `run` goes on
    /// without the store and opens it when space returns.
    pub fn is_no_space(&self) -> bool {
        use std::io::ErrorKind as K;
        matches!(self, StoreError::Sled { source: sled::Error::Io(e), .. }
            if matches!(e.kind(), K::StorageFull | K::QuotaExceeded))
    }
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

/// The open store. Cheap to clone: the clones share one sled database, which `run` may close
/// and reopen underneath them ([`Store::save`] after a failed write).
#[derive(Clone)]
pub struct Store {
    /// The sled database (one tree); `None` while closed (it could not be reopened after a
    /// failed write, or not opened at start for want of space). Every user holds an `Arc` of
    /// it ([`Store::handle`]) for as long as it uses it, so its strong count says whether anyone
    /// does: [`Store::release_cache`] closes it only when nobody else holds it.
    db: Arc<RwLock<Option<Arc<sled::Db>>>>,
    /// The store directory.
    path: Arc<PathBuf>,
    /// sled's page cache size, kept for [`Store::reopened`].
    cache_bytes: u64,
    /// `run`'s deployment, with which [`Store::save`] reopens the store; `None` for the tools.
    identity: Option<Arc<Identity>>,
    /// Set when a write failed: sled refuses every later write after an I/O error (no space
    /// left, a file system turned read-only) until the database is opened again.
    broken: Arc<AtomicBool>,
    /// Bytes of chunks read since the database was last opened; see [`Store::release_cache`].
    read_since_open: Arc<AtomicU64>,
    /// How many bytes of chunks read make `run`'s store release sled's page cache (a quarter of it).
    pub(crate) release_after: u64,
    /// How often the page cache was released ([`Store::release_cache`]).
    releases: Arc<AtomicU64>,
    /// Set while a page-cache release left the database closed (its reopen failed): the next
    /// [`Store::handle`] opens it again.
    release_pending: Arc<AtomicBool>,
    /// Tests only: when set, [`Store::save`] holding its database handle says so on the first
    /// channel and waits for the second before it writes (a long write, made deterministic).
    #[cfg(test)]
    pub(crate) save_gate: Arc<std::sync::Mutex<Option<SaveGate>>>,
}

/// See [`Store::save_gate`]: (told when the save holds its handle, waited on before it writes).
#[cfg(test)]
pub(crate) type SaveGate = (std::sync::mpsc::Sender<()>, std::sync::mpsc::Receiver<()>);

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
    /// See [`PartitionSnapshot::clock`].
    pub clock: Option<i64>,
}

impl Store {
    /// Reads chunk `c` of generation `meta` of partition `p` and checks it (magic, length,
    /// checksum). Returns the entries and the value's size in bytes. Errors: missing, damaged
    /// ([`StoreError::Corrupt`]), sled I/O.
    pub fn read_chunk(&self, p: i32, meta: &GenerationMeta, c: u32) -> Result<(Vec<(u128, u32)>, usize), StoreError> {
        let v = self
            .handle()?
            .get(chunk_key(p, meta.epoch, c))
            .map_err(|e| self.sled_err(e))?
            .ok_or_else(|| {
                self.corrupt(format!(
                    "partition {p} generation {}: chunk {c} of {} missing",
                    meta.epoch, meta.chunks
                ))
            })?;
        let entries = decode_chunk(&v)
            .map_err(|e| self.corrupt(format!("partition {p} generation {} chunk {c}: {e}", meta.epoch)))?;
        let len = v.len();
        drop(v);
        self.read_since_open.fetch_add(len as u64, Ordering::SeqCst);
        self.release_cache();
        Ok((entries, len))
    }

    /// Every entry with a key at or after `from`, in key order, classified by the layout, one at
    /// a time. For `inspect verify`, which resumes from the last key after a [`Store::reopened`].
    pub fn entries_from(
        &self,
        from: &[u8],
    ) -> impl Iterator<Item = Result<(sled::IVec, StoreKey, sled::IVec), StoreError>> + '_ {
        let (range, closed) = match self.handle() {
            Ok(db) => (Some(db.range(from.to_vec()..)), None),
            Err(e) => (None, Some(Err(e))),
        };
        closed.into_iter().chain(range.into_iter().flatten().map(move |kv| {
            let (k, v) = kv.map_err(|e| self.sled_err(e))?;
            let key = StoreKey::parse(&k);
            Ok((k, key, v))
        }))
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
        match self.handle()?.get(KEY_FORMAT).map_err(|e| self.sled_err(e))? {
            None => Ok(None),
            Some(v) if v.len() == 4 => Ok(Some(u32::from_be_bytes(v.as_ref().try_into().expect("4 bytes")))),
            Some(_) => Err(self.corrupt("format version is not 4 bytes")),
        }
    }

    /// Stamps format version `v`: inside the database (flushed), then in the format file. Used by
    /// `migrate` after each step, and by tests to make a store look like another version's.
    /// Errors: sled or file-system I/O.
    pub fn set_format_version(&self, v: u32) -> Result<(), StoreError> {
        let db = self.handle()?;
        db.insert(KEY_FORMAT, &v.to_be_bytes()).map_err(|e| self.sled_err(e))?;
        db.flush().map_err(|e| self.sled_err(e))?;
        write_format_file(&self.path, v).map_err(|e| self.sled_err(sled::Error::Io(e)))
    }

    /// The sled database, for migration steps ([`crate::migrate`]; none exists yet, hence the
    /// `allow`) and tests that damage a store on purpose. Everything else goes through the typed
    /// methods.
    #[allow(dead_code)]
    pub(crate) fn db(&self) -> Arc<sled::Db> {
        self.handle().expect("the store is open")
    }

    /// The deployment the store belongs to.
    pub fn identity(&self) -> Result<Option<Identity>, StoreError> {
        match self.handle()?.get(KEY_IDENTITY).map_err(|e| self.sled_err(e))? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| self.corrupt(format!("identity: {e}"))),
        }
    }

    /// Partitions with a snapshot, ascending.
    pub fn partitions(&self) -> Result<Vec<i32>, StoreError> {
        let mut out = Vec::new();
        for kv in self.handle()?.scan_prefix(b"s") {
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
        match self.handle()?.get(snapshot_key(p)).map_err(|e| self.sled_err(e))? {
            None => Ok(None),
            Some(v) => serde_json::from_slice(&v)
                .map(Some)
                .map_err(|e| self.corrupt(format!("snapshot of partition {p}: {e}"))),
        }
    }

    /// Calls `f` with every chunk's entries of generation `meta` of partition `p`, in order,
    /// one chunk in memory at a time. Fails on a missing chunk, a checksum mismatch, or a total
    /// that differs from `meta.count`.
    pub fn for_each_chunk(
        &self,
        p: i32,
        meta: &GenerationMeta,
        mut f: impl FnMut(&[(u128, u32)]),
    ) -> Result<(), StoreError> {
        let mut seen = 0u64;
        for entries in self.chunks(p, meta) {
            let entries = entries?;
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

    /// The chunks of generation `meta` of partition `p`, in order, each read and checked (magic,
    /// length, checksum) when the iterator reaches it, so one chunk is in memory at a time and a
    /// caller can stop early. Ends after the first error. Does not compare the total with
    /// `meta.count` ([`Store::for_each_chunk`] does).
    pub fn chunks<'a>(
        &'a self,
        p: i32,
        meta: &'a GenerationMeta,
    ) -> impl Iterator<Item = Result<Vec<(u128, u32)>, StoreError>> + 'a {
        let mut failed = false;
        (0..meta.chunks).map_while(move |c| {
            if failed {
                return None;
            }
            let read = self.read_chunk(p, meta, c).map(|(entries, _)| entries);
            failed = read.is_err();
            Some(read)
        })
    }

    /// Loads the generations of a snapshot, oldest first, verifying every chunk. The returned
    /// generations (at least one) are marked as stored. Errors: [`StoreError::Corrupt`] for a
    /// snapshot that lists no generation, a count that does not fit its chunks, a missing or
    /// damaged chunk (recovery then rebuilds from the output topic); sled I/O.
    pub fn load_generations(&self, p: i32, snap: &PartitionSnapshot) -> Result<Vec<Generation>, StoreError> {
        self.guarded("loading generations", || self.load_generations_unguarded(p, snap))
    }

    fn load_generations_unguarded(&self, p: i32, snap: &PartitionSnapshot) -> Result<Vec<Generation>, StoreError> {
        // A snapshot always lists the current generation; one that lists none is damaged.
        if snap.generations.is_empty() {
            return Err(self.corrupt(format!("snapshot of partition {p} lists no generation")));
        }
        let mut out = Vec::with_capacity(snap.generations.len());
        let current = snap.generations.len() - 1;
        for (i, meta) in snap.generations.iter().enumerate() {
            // The count sizes the table: it must fit the chunks, and the last chunk must be there,
            // before it is believed (a damaged count would otherwise allocate without bound).
            if u64::from(meta.chunks) != meta.count.div_ceil(CHUNK_ENTRIES as u64) {
                return Err(self.corrupt(format!(
                    "partition {p} generation {}: {} fingerprints cannot fill {} chunks",
                    meta.epoch, meta.count, meta.chunks
                )));
            }
            if let Some(last) = meta.chunks.checked_sub(1) {
                self.read_chunk(p, meta, last)?;
            }
            // The frozen generations never grow; the current one takes the inserts from now on.
            let mut table = if i == current {
                FingerprintTable::with_room_to_grow(meta.count as usize)
            } else {
                FingerprintTable::with_capacity(meta.count as usize)
            };
            self.for_each_chunk(p, meta, |entries| {
                for (fp, off) in entries {
                    table.insert(*fp, *off);
                }
            })?;
            let g = Generation {
                epoch: meta.epoch,
                bucket: meta.bucket,
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
    ///
    /// After a failed write (or with a store that could not be opened at start), the store is
    /// first opened again (`Store::reopen`): sled refuses every write after an I/O error until
    /// then. So a store whose disk was full, or turned read-only, takes writes again by itself
    /// once the cause is gone. [`Store::is_broken`] tells whether the last write failed.
    pub fn save(&self, writes: &[PartitionWrite<'_>]) -> Result<(), StoreError> {
        let result = (|| {
            if self.is_broken() {
                self.reopen()?;
            }
            self.guarded("writing a checkpoint", || self.save_unguarded(writes))
        })();
        // A save that went through on a handle the store has closed since (a reopen that failed
        // meanwhile) does not make the store sound: it is still closed.
        let open = self.db.read().is_ok_and(|slot| slot.is_some());
        self.broken.store(result.is_err() || !open, Ordering::SeqCst);
        result
    }

    fn save_unguarded(&self, writes: &[PartitionWrite<'_>]) -> Result<(), StoreError> {
        let mut batch = sled::Batch::default();
        let mut written: Vec<&Generation> = Vec::new();
        for w in writes {
            let old = self.snapshot_unguarded(w.partition).ok().flatten();
            let mut metas = Vec::with_capacity(w.generations.len());
            for g in &w.generations {
                let old_meta = old
                    .as_ref()
                    .and_then(|o| o.generations.iter().find(|m| m.epoch == g.epoch));
                let meta = GenerationMeta::of(g);
                if !(g.is_stored() && old_meta.is_some_and(|m| m.count == meta.count)) {
                    write_chunks(&mut batch, w.partition, g, old_meta);
                    written.push(g);
                }
                metas.push(meta);
            }
            self.remove_dropped(&mut batch, w, old.as_ref())?;
            batch.insert(
                snapshot_key(w.partition),
                serde_json::to_vec(&w.snapshot(metas)).expect("snapshot serializes"),
            );
        }
        let db = self.handle()?;
        #[cfg(test)]
        if let Some((holding, go)) = self.save_gate.lock().expect("gate").take() {
            holding.send(()).expect("the test waits");
            go.recv().expect("the test lets the save go on");
        }
        db.apply_batch(batch).map_err(|e| self.sled_err(e))?;
        db.flush().map_err(|e| self.sled_err(e))?;
        for g in written {
            g.mark_stored();
        }
        Ok(())
    }

    /// Removes the chunks of generations that are no longer live: those the old snapshot lists
    /// and `w` does not, or, without a readable snapshot, every chunk of the partition not being
    /// written now.
    fn remove_dropped(
        &self,
        batch: &mut sled::Batch,
        w: &PartitionWrite<'_>,
        old: Option<&PartitionSnapshot>,
    ) -> Result<(), StoreError> {
        let live = |epoch: u64| w.generations.iter().any(|g| g.epoch == epoch);
        if let Some(o) = old {
            for m in o.generations.iter().filter(|m| !live(m.epoch)) {
                for c in 0..m.chunks {
                    batch.remove(chunk_key(w.partition, m.epoch, c));
                }
            }
            return Ok(());
        }
        for kv in self.handle()?.scan_prefix(chunk_prefix(w.partition)) {
            let (k, _) = kv.map_err(|e| self.sled_err(e))?;
            if k.len() == 17 {
                let epoch = u64::from_be_bytes(k[5..13].try_into().expect("8 bytes"));
                if !live(epoch) {
                    batch.remove(k);
                }
            }
        }
        Ok(())
    }

    /// Bytes the store directory occupies on disk: the blocks allocated to it and to everything
    /// in it (sled's log, blobs and snapshots, the stamps), as `du` counts them, which is what
    /// fills a disk. `kafka_dedup_store_size_bytes` and `inspect stats` both report this
    /// (sled's own `size_on_disk` leaves out its snapshot files and the rest).
    pub fn size_on_disk(&self) -> u64 {
        disk_usage(&self.path)
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

/// Bytes allocated to `path` and, for a directory, to everything under it (`du -s -B1`); what
/// cannot be read counts 0.
fn disk_usage(path: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt as _;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return 0;
    };
    let own = meta.blocks() * 512;
    if !meta.is_dir() {
        return own;
    }
    let inner: u64 = std::fs::read_dir(path)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| disk_usage(&e.path()))
        .sum();
    own + inner
}

/// Adds generation `g` of partition `p` to `batch` as chunks of [`CHUNK_ENTRIES`], removing
/// chunks beyond its new count that `old` (its stored description, if any) had.
fn write_chunks(batch: &mut sled::Batch, p: i32, g: &Generation, old: Option<&GenerationMeta>) {
    let count = g.len();
    let chunks = count.div_ceil(CHUNK_ENTRIES) as u32;
    let mut entries: Vec<(u128, u32)> = Vec::with_capacity(CHUNK_ENTRIES.min(count));
    let mut c = 0u32;
    for e in g.table.iter() {
        entries.push(e);
        if entries.len() == CHUNK_ENTRIES {
            batch.insert(chunk_key(p, g.epoch, c), encode_chunk(&entries));
            entries.clear();
            c += 1;
        }
    }
    if !entries.is_empty() {
        batch.insert(chunk_key(p, g.epoch, c), encode_chunk(&entries));
        c += 1;
    }
    debug_assert_eq!(c, chunks);
    if let Some(m) = old {
        for stale in chunks..m.chunks {
            batch.remove(chunk_key(p, g.epoch, stale));
        }
    }
}

impl GenerationMeta {
    /// The description of generation `g` as stored now.
    fn of(g: &Generation) -> Self {
        let count = g.len();
        GenerationMeta {
            epoch: g.epoch,
            created_at_ms: g.created_at_ms,
            in_start: g.in_start,
            out_start: g.out_start.clone(),
            count: count as u64,
            chunks: count.div_ceil(CHUNK_ENTRIES) as u32,
            bucket: g.bucket,
        }
    }
}

impl PartitionWrite<'_> {
    /// The snapshot this write stores, with its generations described by `generations`.
    fn snapshot(&self, generations: Vec<GenerationMeta>) -> PartitionSnapshot {
        PartitionSnapshot {
            epoch: self.epoch,
            ckpt: self.ckpt.clone(),
            committed_offset: self.committed_offset,
            out_covered: self.out_covered.clone(),
            generations,
            written_at_ms: now_ms(),
            clean: self.clean,
            clock: self.clock,
        }
    }
}

/// The identity the unit tests of the store and its tools use.
#[cfg(test)]
pub(crate) fn test_identity() -> Identity {
    Identity {
        group_id: "g".into(),
        input_topic: "in".into(),
        output_topic: "out".into(),
        source: "value".into(),
    }
}

#[cfg(test)]
mod tests;

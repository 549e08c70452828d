//! The store handle's life cycle: the sled database behind a [`Store`] is closed and opened
//! again to release sled 0.34's page cache ([`Store::release_cache`], [`Store::reopened`] for
//! `inspect`'s scans), reopened on the next use when a release's reopen failed
//! ([`Store::handle`]), or closed for good for a run that starts on a full disk
//! ([`Store::closed_for_run`]).

use super::*;

impl Store {
    /// Closes sled and opens the same directory again, with the same cache size: the only way
    /// to release sled 0.34's page cache, which keeps every page a one-pass scan reads (its LRU
    /// evicts only after 64 accesses to one of its 256 shards). For the scans of `inspect`
    /// ([`crate::inspect::Scan`]). Consumes the handle: sled's file lock is released only when
    /// every clone is dropped, so with other clones alive this fails with
    /// [`StoreError::InUse`]. Errors: as [`Store::open_existing`] past its refusals.
    pub fn reopened(self) -> Result<Store, StoreError> {
        let Store {
            db,
            path,
            cache_bytes,
            identity,
            broken,
            release_after,
            releases,
            release_pending,
            ..
        } = self;
        drop(db);
        // This process just released the lock; sled's background tasks may hold it a moment.
        match open_sled_waiting(&path, cache_bytes, 5 * LOCK_GRACE) {
            Ok(db) => Ok(Store {
                db: Arc::new(RwLock::new(Some(Arc::new(db)))),
                path,
                cache_bytes,
                identity,
                broken,
                read_since_open: Arc::default(),
                release_after,
                releases,
                release_pending,
                #[cfg(test)]
                save_gate: Arc::default(),
            }),
            Err(e) if e.is_lock() => Err(StoreError::InUse {
                hint: in_use_hint(&path),
                path: path.to_path_buf(),
            }),
            Err(e) => Err(StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: e.to_string(),
            }),
        }
    }

    /// The sled database, shared; [`StoreError::Closed`] while it is closed. Holding the `Arc`
    /// keeps [`Store::release_cache`] from closing the database under the holder. A store of
    /// `run` left closed by a release whose reopen failed (sled's file lock not given back in
    /// time) is opened again here first, so a release never leaves it closed for good.
    pub(super) fn handle(&self) -> Result<Arc<sled::Db>, StoreError> {
        let open = self
            .db
            .read()
            .map_err(|_| self.closed("a thread panicked while reopening it"))?
            .clone();
        match open {
            Some(db) => Ok(db),
            None if self.release_pending.load(Ordering::SeqCst) => self.reopen_after_release(),
            None => Err(self.closed("see the log")),
        }
    }

    /// Opens the database a page-cache release closed and could not open again
    /// ([`Store::release_cache`]); [`StoreError::Closed`] while it still cannot.
    pub(super) fn reopen_after_release(&self) -> Result<Arc<sled::Db>, StoreError> {
        let mut slot = self
            .db
            .write()
            .map_err(|_| self.closed("a thread panicked while reopening it"))?;
        if let Some(db) = slot.as_ref() {
            return Ok(db.clone()); // another thread opened it meanwhile
        }
        match open_sled_waiting(&self.path, self.cache_bytes, LOCK_GRACE) {
            Ok(db) => {
                let db = Arc::new(db);
                *slot = Some(db.clone());
                self.release_pending.store(false, Ordering::SeqCst);
                self.broken.store(false, Ordering::SeqCst);
                self.read_since_open.store(0, Ordering::SeqCst);
                tracing::info!(path = %self.path.display(), "the store is open again after releasing its page cache");
                Ok(db)
            }
            Err(e) => Err(self.closed(&format!("opening it again after releasing its page cache: {e}"))),
        }
    }

    pub(super) fn closed(&self, reason: &str) -> StoreError {
        StoreError::Closed {
            path: self.path.to_path_buf(),
            reason: reason.to_string(),
        }
    }

    /// A store of `run` at `path` that could not be opened for want of space (or another
    /// failure of the file system): closed; [`Store::save`] opens it when space returns. Until
    /// then reads fail with [`StoreError::Closed`] and recovery rebuilds every partition from
    /// the output topic.
    pub fn closed_for_run(path: &Path, identity: &Identity) -> Store {
        Store {
            db: Arc::new(RwLock::new(None)),
            path: Arc::new(path.to_path_buf()),
            cache_bytes: open::RUN_CACHE_BYTES,
            identity: Some(Arc::new(identity.clone())),
            broken: Arc::new(AtomicBool::new(true)),
            read_since_open: Arc::default(),
            release_after: open::RUN_CACHE_BYTES / 4,
            releases: Arc::default(),
            release_pending: Arc::default(),
            #[cfg(test)]
            save_gate: Arc::default(),
        }
    }

    /// True while writes fail (since the last failed [`Store::save`], until one succeeds).
    pub fn is_broken(&self) -> bool {
        self.broken.load(Ordering::SeqCst)
    }

    /// Closes the database and opens it again as `run` does ([`Store::open_for_run`]): after an
    /// I/O error sled refuses every write until then. The clones see the new database. Fails
    /// while the disk is still full (the store stays closed, and the next [`Store::save`] tries
    /// again), or when another handle of this process still holds the old one past sled's lock
    /// grace (a scan in progress).
    pub(super) fn reopen(&self) -> Result<(), StoreError> {
        let identity = self
            .identity
            .clone()
            .ok_or_else(|| self.closed("only run reopens a store"))?;
        let mut slot = self
            .db
            .write()
            .map_err(|_| self.closed("a thread panicked while reopening it"))?;
        // Released first: sled's file lock goes with the last handle.
        drop(slot.take());
        let (fresh, _) = Store::open_for_run(&self.path, &identity)?;
        let db = fresh.db.write().ok().and_then(|mut d| d.take());
        *slot = db;
        self.read_since_open.store(0, Ordering::SeqCst);
        self.release_pending.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Releases sled's page cache of `run`'s store once the chunks read since the database was
    /// opened reach [`Store::release_after`] bytes (a quarter of the cache, 16 MiB): closes and opens it
    /// again, then hands the freed memory back to the system
    /// ([`crate::alloc::return_free_memory`]). sled 0.34 keeps every page a one-pass read brings
    /// in (its LRU evicts only after 64 accesses to one of its 256 shards), so without this a
    /// recovery that loads 10M fingerprints (200 MB of chunks) keeps them all in the cache: about
    /// 20 bytes of RSS per fingerprint on top of the tables'. Readers of other threads wait on the handle's lock
    /// meanwhile and go on with the new database. Nothing for the tools' stores (`inspect`
    /// reopens between its scans itself, [`Store::reopened`]).
    ///
    /// Never while another thread holds the database ([`Store::handle`]: a checkpoint's
    /// [`Store::save`] writing and flushing a large batch, another recovery's read): closing it
    /// then would not release sled's file lock, which goes with the last handle, and the reopen
    /// would fail. That release is skipped (the bytes read stay counted, so the next read asks
    /// again). A reopen that fails all the same (sled's own threads keep the lock past its
    /// wait of 5 s) leaves the store closed and marked broken, and the next [`Store::handle`]
    /// (a read, the next save) opens it again.
    pub(super) fn release_cache(&self) {
        if self.identity.is_none() || self.read_since_open.load(Ordering::SeqCst) < self.release_after {
            return;
        }
        let t = std::time::Instant::now();
        // Not `reopen`: the database is the one `run` opened and stamped, so sled's open is all
        // it takes (no identity check, no stamp and flush).
        let Ok(mut slot) = self.db.write() else { return };
        match slot.as_ref() {
            // Nobody can take a new handle while the write lock is held.
            Some(db) if Arc::strong_count(db) == 1 => {}
            _ => return, // held by another thread (or closed): skipped, asked again at the next read
        }
        let read = self.read_since_open.swap(0, Ordering::SeqCst);
        // Released first: sled's file lock goes with the last handle.
        drop(slot.take());
        let reopened =
            open_sled_waiting(&self.path, self.cache_bytes, 5 * LOCK_GRACE).map(|db| *slot = Some(Arc::new(db)));
        drop(slot);
        match reopened {
            Ok(()) => {
                self.releases.fetch_add(1, Ordering::SeqCst);
                crate::alloc::return_free_memory();
                tracing::debug!(
                    path = %self.path.display(),
                    read_bytes = read,
                    seconds = t.elapsed().as_secs_f64(),
                    "released the store's page cache (closed and opened again)"
                );
            }
            Err(e) => {
                self.broken.store(true, Ordering::SeqCst);
                self.release_pending.store(true, Ordering::SeqCst);
                tracing::warn!(
                    path = %self.path.display(),
                    error = %e,
                    "could not open the store again after releasing its page cache; the next read or checkpoint \
                     tries again"
                );
            }
        }
    }

    /// How often this store released sled's page cache ([`Store::release_cache`]).
    pub fn cache_releases(&self) -> u64 {
        self.releases.load(Ordering::SeqCst)
    }
}

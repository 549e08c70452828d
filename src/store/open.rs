//! What a directory holds, and opening it: for `run` (creating, replacing or clearing what
//! cannot be used), for `inspect` and for `migrate` (refusing what is not theirs to touch).

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::codec::{KEY_FORMAT, KEY_IDENTITY};
use super::{Identity, Opened, Store, StoreError, FORMAT_FILE, FORMAT_VERSION, LIVE_FILE};

/// What a directory holds, judged from its file names and the format file alone: sled writes to
/// its log and snapshot files whenever it opens a database, even to read it, so every refusal
/// is decided here, before sled is touched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Found {
    /// No such path.
    Missing,
    /// An empty directory.
    Empty,
    /// A format file with this version and the sled files beside it.
    Store(u32),
    /// A format file with this version but no sled database (creation was interrupted).
    FormatOnly(u32),
}

/// Why a directory is not a store (a [`StoreError::NotAStore`] reason), or what it holds.
fn examine(path: &Path) -> Result<Found, StoreError> {
    let not = |reason: String| StoreError::NotAStore {
        path: path.to_path_buf(),
        reason,
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return Err(not(format!("cannot read it: {e}"))),
    };
    if !meta.is_dir() {
        return Err(not("it is a file, not a directory".into()));
    }
    let mut names = Vec::new();
    for entry in std::fs::read_dir(path).map_err(|e| not(format!("cannot list it: {e}")))? {
        let entry = entry.map_err(|e| not(format!("cannot list it: {e}")))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    if names.is_empty() {
        return Ok(Found::Empty);
    }
    let sled_files = names.iter().any(|n| n == "db" || n == "conf");
    match read_format_file(path) {
        Ok(Some(v)) if sled_files => Ok(Found::Store(v)),
        Ok(Some(v)) => Ok(Found::FormatOnly(v)),
        Ok(None) if sled_files => Err(not(format!(
            "it holds a sled database but no `{FORMAT_FILE}` (a database of another program, or a store \
             written before kafka-dedup stamped its format; a store is a cache of the output topic, so such \
             a directory can be deleted and the next start rebuilds it)"
        ))),
        Ok(None) => {
            names.sort();
            let shown: Vec<&str> = names.iter().take(5).map(String::as_str).collect();
            Err(not(format!(
                "it holds other files ({}{}) and no `{FORMAT_FILE}`; point store.path at an empty or new directory",
                shown.join(", "),
                if names.len() > shown.len() { ", ..." } else { "" }
            )))
        }
        Err(e) => Err(not(e.to_string())),
    }
}

/// A format file that holds no version.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatFileError {
    /// It holds something else (trimmed).
    #[error("`{FORMAT_FILE}` does not hold a format version (found {0:?})")]
    NotAVersion(String),
    /// It cannot be read (the I/O error's message).
    #[error("`{FORMAT_FILE}` cannot be read: {0}")]
    Unreadable(String),
}

/// Reads the format file: `Ok(None)` when absent.
pub(super) fn read_format_file(dir: &Path) -> Result<Option<u32>, FormatFileError> {
    match std::fs::read_to_string(dir.join(FORMAT_FILE)) {
        Ok(text) => text
            .trim()
            .parse::<u32>()
            .map(Some)
            .map_err(|_| FormatFileError::NotAVersion(text.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(FormatFileError::Unreadable(e.to_string())),
    }
}

/// Writes the format file atomically (a temporary file renamed over it, then the directory synced).
/// A temporary file that cannot be written (a full disk) is removed again: left behind, it
/// would make the directory look like someone else's at the next start.
pub(super) fn write_format_file(dir: &Path, version: u32) -> std::io::Result<()> {
    use std::io::Write as _;
    let tmp = dir.join(format!("{FORMAT_FILE}.tmp"));
    let written = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        writeln!(f, "{version}")?;
        f.sync_all()?;
        std::fs::rename(&tmp, dir.join(FORMAT_FILE))
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written?;
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// The format version stamped in a store's format file (`kafka-dedup.format`), without opening
/// the store. `Ok(None)` when the file is absent.
pub fn format_file_version(dir: &Path) -> Result<Option<u32>, FormatFileError> {
    read_format_file(dir)
}

/// sled's page cache for `run`: bytes.
pub(super) const RUN_CACHE_BYTES: u64 = 64 * 1024 * 1024;
/// sled's page cache for `inspect` and `migrate`: small, so `dump` of any store size stays in
/// bounded memory (chunks are read one at a time).
const TOOL_CACHE_BYTES: u64 = 8 * 1024 * 1024;

/// Why sled did not open a database.
#[derive(Debug, thiserror::Error)]
pub(super) enum OpenFailure {
    /// sled's error.
    #[error("{0}")]
    Sled(sled::Error),
    /// sled panicked (mangled files it did not detect otherwise); the panic's message.
    #[error("sled panicked while opening: {0}")]
    Panicked(String),
}

impl OpenFailure {
    /// True when another process holds the database's file lock.
    pub(super) fn is_lock(&self) -> bool {
        matches!(self, OpenFailure::Sled(e) if e.to_string().contains("could not acquire lock"))
    }

    /// The file system refused (no space, read-only, no permission): nothing says the store is
    /// damaged, so it is not moved aside.
    fn io_refusal(&self) -> Option<std::io::ErrorKind> {
        match self {
            OpenFailure::Sled(sled::Error::Io(e)) if is_refusal(e.kind()) => Some(e.kind()),
            _ => None,
        }
    }
}

/// An I/O error kind that says the file system refuses writes, not that data is damaged.
fn is_refusal(kind: std::io::ErrorKind) -> bool {
    use std::io::ErrorKind as K;
    matches!(
        kind,
        K::StorageFull | K::QuotaExceeded | K::ReadOnlyFilesystem | K::PermissionDenied | K::NotADirectory
    )
}

/// Opens sled, turning sled's panics on mangled files into errors.
fn open_sled(path: &Path, cache_bytes: u64) -> Result<sled::Db, OpenFailure> {
    let path = path.to_path_buf();
    let result = std::panic::catch_unwind(move || {
        sled::Config::new()
            .path(&path)
            .cache_capacity(cache_bytes)
            .flush_every_ms(None)
            .open()
    });
    match result {
        Ok(Ok(db)) => Ok(db),
        Ok(Err(e)) => Err(OpenFailure::Sled(e)),
        Err(panic) => Err(OpenFailure::Panicked(
            panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied())
                .unwrap_or("?")
                .to_string(),
        )),
    }
}

/// How long an open retries while sled's file lock is held: 1 s. A lock outlives its holder for
/// a moment when the holder was this process: sled's background tasks keep the file open after
/// the last handle is dropped, and a child process spawned meanwhile holds a copy of the
/// descriptor until it execs. A lock held by another running process is reported after this.
pub(super) const LOCK_GRACE: Duration = Duration::from_secs(1);

/// [`open_sled`], retried while the lock is held, for up to `grace`.
pub(super) fn open_sled_waiting(path: &Path, cache_bytes: u64, grace: Duration) -> Result<sled::Db, OpenFailure> {
    let deadline = Instant::now() + grace;
    loop {
        match open_sled(path, cache_bytes) {
            Err(e) if e.is_lock() && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20));
            }
            result => return result,
        }
    }
}

/// The HTTP address written by [`Store::write_live_file`], made usable from this host: an
/// unspecified listen address (`0.0.0.0`, `[::]`) becomes the loopback address.
fn live_address(path: &Path) -> Option<String> {
    let addr = std::fs::read_to_string(path.join(LIVE_FILE)).ok()?;
    let addr = addr.trim();
    if addr.is_empty() {
        return None;
    }
    Some(if let Some(port) = addr.strip_prefix("0.0.0.0:") {
        format!("127.0.0.1:{port}")
    } else if let Some(port) = addr.strip_prefix("[::]:") {
        format!("[::1]:{port}")
    } else {
        addr.to_string()
    })
}

/// The hint of [`StoreError::InUse`] for a second `run`: two processes cannot share a store, so
/// each instance needs a `store.path` of its own (the running one, if it wrote its address,
/// answers what it holds over HTTP).
fn run_in_use_hint(path: &Path) -> String {
    let running = match live_address(path) {
        Some(addr) => format!("; the running one answers at http://{addr}/store/stats"),
        None => String::new(),
    };
    format!(
        "; give each instance its own `store.path` (two processes cannot share a store; a second instance \
         of the same deployment joins its consumer group with a store of its own){running}"
    )
}

pub(super) fn in_use_hint(path: &Path) -> String {
    match live_address(path) {
        Some(addr) => format!(
            "; ask it over HTTP instead: http://{addr}/store/stats, http://{addr}/store/lookup?value=TEXT \
             (or ?key=, ?header=NAME=VALUE, ?fingerprint=HEX; with a json:, avro: or protobuf: source the \
             identity's fields, ?event_id=VALUE)"
        ),
        None => "; ask it over HTTP instead: GET /store/stats and /store/lookup on its http.listen address \
                 (it did not write its address into the store directory, so http.listen may be disabled)"
            .to_string(),
    }
}

fn check_version(path: &Path, found: u32) -> Result<(), StoreError> {
    if found > FORMAT_VERSION {
        Err(StoreError::NewerFormat {
            path: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        })
    } else if found < FORMAT_VERSION {
        Err(StoreError::OlderFormat {
            path: path.to_path_buf(),
            found,
            supported: FORMAT_VERSION,
        })
    } else {
        Ok(())
    }
}

/// Refuses a store path `run` could not write ([`StoreError::NotWritable`]), touching nothing: the
/// directory if it exists, else the nearest existing ancestor, where it would be created, must
/// be a directory that access(2) says is writable and searchable (which also answers for a
/// read-only file system, and for root).
fn check_writable(path: &Path) -> Result<(), StoreError> {
    let not = |reason: String| StoreError::NotWritable {
        path: path.to_path_buf(),
        reason,
    };
    let mut dir = path;
    loop {
        match std::fs::metadata(dir) {
            Ok(m) if m.is_dir() => break,
            // The path itself a file: `examine` says so.
            Ok(_) if dir == path => return Ok(()),
            Ok(_) => return Err(not(format!("{} is a file", dir.display()))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                dir = match dir.parent() {
                    Some(p) if !p.as_os_str().is_empty() => p,
                    _ => Path::new("."),
                };
            }
            Err(e) => return Err(not(e.to_string())),
        }
    }
    use std::os::unix::ffi::OsStrExt as _;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).map_err(|e| not(e.to_string()))?;
    // SAFETY: `c` is a valid NUL-terminated path for the duration of the call.
    if unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(not(if dir == path {
            e.to_string()
        } else {
            format!("{}: {e}", dir.display())
        }));
    }
    Ok(())
}

/// A file-system error at `path`, as a store error: [`StoreError::NotWritable`] when the file
/// system refuses writes for good (read-only, no permission), an I/O error otherwise (a full
/// disk among them: [`StoreError::is_no_space`]).
fn io_error(path: &Path, e: std::io::Error) -> StoreError {
    use std::io::ErrorKind as K;
    if matches!(e.kind(), K::ReadOnlyFilesystem | K::PermissionDenied | K::NotADirectory) {
        return StoreError::NotWritable {
            path: path.to_path_buf(),
            reason: e.to_string(),
        };
    }
    StoreError::Sled {
        path: path.to_path_buf(),
        source: sled::Error::Io(e),
    }
}

/// Creates the store directory and its format file (a new store). A directory the file system
/// refuses to create by its name (ENOENT where `check_writable` found the parent: procfs answers
/// `mkdir` so; a name it does not take, too long, a loop of links) is
/// [`StoreError::NotWritable`] (a configuration error, naming `store.path`); a fault of the disk
/// (EIO, a full disk) stays an I/O error.
fn create_dir(path: &Path) -> Result<(), StoreError> {
    std::fs::create_dir_all(path).map_err(|e| {
        use std::io::ErrorKind as K;
        let by_name = matches!(e.kind(), K::NotFound | K::InvalidInput | K::InvalidFilename)
            || matches!(e.raw_os_error(), Some(libc::ENAMETOOLONG | libc::ELOOP));
        match by_name {
            true => StoreError::NotWritable {
                path: path.to_path_buf(),
                reason: format!("cannot create the directory: {e}"),
            },
            false => io_error(path, e),
        }
    })?;
    write_format_file(path, FORMAT_VERSION).map_err(|e| io_error(path, e))
}

/// sled cannot open the store at `path` (`failure`): moves the directory to `<path>.corrupt`
/// (replacing an older one) and creates a new store. Errors when the new one fails too: no
/// crash loop on a bad disk.
fn replace_unopenable(path: &Path, failure: &OpenFailure) -> Result<(sled::Db, Opened), StoreError> {
    let aside = PathBuf::from(format!("{}.corrupt", path.display()));
    let _ = std::fs::remove_dir_all(&aside);
    std::fs::rename(path, &aside).map_err(|io| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("{failure}; moving it aside to {} failed: {io}", aside.display()),
    })?;
    let opened = Opened::Replaced {
        reason: "corrupt",
        detail: format!("sled could not open it ({failure}); moved to {}", aside.display()),
    };
    create_dir(path)?;
    let db = open_sled(path, RUN_CACHE_BYTES).map_err(|e2| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("a new store cannot be created either: {e2}"),
    })?;
    Ok((db, opened))
}

impl Store {
    /// The refusals of [`Store::open_for_run`] that need no Kafka and touch nothing (not
    /// writable, not a store, a newer or an older format), checked on their own so that `run` can refuse such a
    /// directory before it contacts the brokers, yet check the topics before the store changes.
    pub fn precheck_for_run(path: &Path) -> Result<(), StoreError> {
        check_writable(path)?;
        match examine(path)? {
            Found::Missing | Found::Empty => Ok(()),
            Found::Store(v) | Found::FormatOnly(v) => check_version(path, v),
        }
    }

    /// Opens the store of a deployment for `kafka-dedup run`, creating it if needed.
    ///
    /// - no directory or an empty one: a new store ([`Opened::Created`]): the format file first,
    ///   then the sled database;
    /// - a directory without the format file (other files, another program's sled database), a
    ///   newer or an older format: refused before sled opens, nothing touched. An older format is
    ///   not migrated here: the error names `kafka-dedup migrate` (see `migrations/README.md`);
    /// - held by another process: [`StoreError::InUse`], saying to give each instance its own
    ///   `store.path`;
    /// - sled fails to open it (truncated or garbled files): the directory is moved to
    ///   `<path>.corrupt` (replacing an older one) and a new store is created ([`Opened::Replaced`]);
    ///   if the new one fails too, the error is returned: no crash loop on a bad disk;
    /// - a store of another deployment (different [`Identity`]), or whose stamps inside the
    ///   database are missing or unreadable: cleared ([`Opened::Replaced`]).
    pub fn open_for_run(path: &Path, identity: &Identity) -> Result<(Store, Opened), StoreError> {
        let mut opened = Opened::Existing;
        match examine(path)? {
            Found::Missing | Found::Empty => {
                create_dir(path)?;
                opened = Opened::Created;
            }
            Found::Store(v) => check_version(path, v)?,
            Found::FormatOnly(v) => {
                check_version(path, v)?;
                opened = Opened::Created;
            }
        }
        let db = match open_sled_waiting(path, RUN_CACHE_BYTES, LOCK_GRACE) {
            Ok(db) => db,
            Err(e) if e.is_lock() => {
                return Err(StoreError::InUse {
                    path: path.to_path_buf(),
                    hint: run_in_use_hint(path),
                })
            }
            Err(OpenFailure::Sled(sled::Error::Io(e))) if is_refusal(e.kind()) => return Err(io_error(path, e)),
            Err(e) => {
                debug_assert!(e.io_refusal().is_none());
                let (db, replaced) = replace_unopenable(path, &e)?;
                opened = replaced;
                db
            }
        };
        let store = Store {
            db: Arc::new(RwLock::new(Some(Arc::new(db)))),
            path: Arc::new(path.to_path_buf()),
            cache_bytes: RUN_CACHE_BYTES,
            identity: Some(Arc::new(identity.clone())),
            broken: Arc::default(),
            read_since_open: Arc::default(),
            release_after: RUN_CACHE_BYTES / 4,
            releases: Arc::default(),
            release_pending: Arc::default(),
            #[cfg(test)]
            save_gate: Arc::default(),
        };
        if let Some(replaced) = store.clear_unusable(identity)? {
            opened = replaced;
        }
        store.stamp(identity)?;
        Ok((store, opened))
    }

    /// Clears the database when its stamps say it cannot be used: an unreadable format version,
    /// another deployment's identity, an unreadable identity. Returns why, if it did. The stamp
    /// inside the database decides once it is open: a migration writes it in the same step as
    /// the data, and the format file after it.
    fn clear_unusable(&self, identity: &Identity) -> Result<Option<Opened>, StoreError> {
        let mut replaced = None;
        let db = self.handle()?;
        match self.format_version() {
            Ok(Some(v)) => check_version(&self.path, v)?,
            Ok(None) if db.is_empty() => {}
            Ok(None) | Err(_) => {
                db.clear().map_err(|e| self.sled_err(e))?;
                replaced = Some(Opened::Replaced {
                    reason: "corrupt",
                    detail: "the database holds no readable format version; cleared".into(),
                });
            }
        }
        let detail = match self.identity() {
            Ok(Some(id)) if &id == identity => return Ok(replaced),
            Ok(None) => return Ok(replaced),
            Ok(Some(id)) => Opened::Replaced {
                reason: "other_deployment",
                detail: format!(
                    "it belonged to group {} ({} -> {}, source {}); cleared",
                    id.group_id, id.input_topic, id.output_topic, id.source
                ),
            },
            Err(e) => Opened::Replaced {
                reason: "corrupt",
                detail: format!("{e}; cleared"),
            },
        };
        db.clear().map_err(|e| self.sled_err(e))?;
        Ok(Some(detail))
    }

    /// Writes this build's format version and `identity` into the database (flushed), and the
    /// format file if it says otherwise.
    fn stamp(&self, identity: &Identity) -> Result<(), StoreError> {
        let db = self.handle()?;
        db.insert(KEY_FORMAT, &FORMAT_VERSION.to_be_bytes())
            .map_err(|e| self.sled_err(e))?;
        db.insert(KEY_IDENTITY, serde_json::to_vec(identity).expect("identity serializes"))
            .map_err(|e| self.sled_err(e))?;
        db.flush().map_err(|e| self.sled_err(e))?;
        if read_format_file(&self.path) != Ok(Some(FORMAT_VERSION)) {
            write_format_file(&self.path, FORMAT_VERSION).map_err(|e| io_error(&self.path, e))?;
        }
        Ok(())
    }

    /// Opens an existing store of this build's format for reading (`inspect`). Refuses, before
    /// sled opens and without touching anything: a missing or empty directory, a directory that
    /// is not a store (no format file), a newer format ([`StoreError::NewerFormat`]) and an older
    /// one ([`StoreError::OlderFormat`], whose message names `kafka-dedup migrate`). Then refuses a
    /// store held by a running process ([`StoreError::InUse`], naming its HTTP address). sled
    /// itself may rewrite its log and snapshot files when it opens a database; the store's
    /// content is not changed. Uses a small page cache (`TOOL_CACHE_BYTES`, 8 MiB).
    pub fn open_existing(path: &Path) -> Result<Store, StoreError> {
        let (store, found) = Self::open_tool(path, FORMAT_VERSION, FORMAT_VERSION)?;
        check_version(path, found)?;
        Ok(store)
    }

    /// Opens a store for `migrate` to format `target` (normally [`FORMAT_VERSION`]), returning the
    /// version stamped inside the database (the format file's when the database holds none yet).
    /// Refuses what [`Store::open_existing`] refuses, except that only a format file newer than
    /// `target` is refused; comparing the returned version is the caller's job.
    pub fn open_for_migration(path: &Path, target: u32) -> Result<(Store, u32), StoreError> {
        Self::open_tool(path, 0, target)
    }

    /// Opens a store whose format file says a version in `oldest..=newest` (anything else is
    /// refused before sled opens) and returns the version stamped inside the database.
    fn open_tool(path: &Path, oldest: u32, newest: u32) -> Result<(Store, u32), StoreError> {
        let not = |reason: &str| StoreError::NotAStore {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        };
        let file_version =
            match examine(path)? {
                Found::Missing => return Err(not("no such directory")),
                Found::Empty => return Err(not("the directory is empty")),
                Found::FormatOnly(_) => return Err(not(
                    "it holds a format file but no database (its creation was interrupted before anything was stored)",
                )),
                Found::Store(v) => v,
            };
        // Refuse before sled opens it: a later build may lay the directory out differently, and
        // sled writes to its files when it opens them.
        if file_version > newest {
            return Err(StoreError::NewerFormat {
                path: path.to_path_buf(),
                found: file_version,
                supported: newest,
            });
        }
        if file_version < oldest {
            return Err(StoreError::OlderFormat {
                path: path.to_path_buf(),
                found: file_version,
                supported: oldest,
            });
        }
        let db = match open_sled_waiting(path, TOOL_CACHE_BYTES, LOCK_GRACE) {
            Ok(db) => db,
            Err(e) if e.is_lock() => {
                return Err(StoreError::InUse {
                    path: path.to_path_buf(),
                    hint: in_use_hint(path),
                })
            }
            Err(e) => {
                return Err(StoreError::Corrupt {
                    path: path.to_path_buf(),
                    reason: e.to_string(),
                })
            }
        };
        let store = Store {
            db: Arc::new(RwLock::new(Some(Arc::new(db)))),
            path: Arc::new(path.to_path_buf()),
            cache_bytes: TOOL_CACHE_BYTES,
            identity: None,
            broken: Arc::default(),
            read_since_open: Arc::default(),
            release_after: u64::MAX,
            releases: Arc::default(),
            release_pending: Arc::default(),
            #[cfg(test)]
            save_gate: Arc::default(),
        };
        let found = match store.format_version()? {
            Some(v) => v,
            None if store.db().is_empty() => file_version,
            None => return Err(store.corrupt("the database holds data but no format version")),
        };
        Ok((store, found))
    }
}

//! `kafka-dedup migrate --store DIR`: upgrades a store written by an older format version, one
//! step at a time, as listed in `migrations/`. Each step is atomic (one sled batch plus the new
//! version stamp); a step that was interrupted is simply applied again.
//!
//! Format version 1 is the first; there is nothing to migrate yet. `run` refuses an older store
//! and names this command; it never migrates on its own, so an operator decides when a store is
//! rewritten.

use std::path::Path;

use crate::store::{Store, StoreError, FORMAT_VERSION};

/// Applies every migration from the store's version to [`FORMAT_VERSION`]. Returns a summary.
/// Refuses a directory that is not a store, a newer format, and a store in use.
pub fn migrate(path: &Path) -> Result<String, StoreError> {
    let store = Store::open_existing(path)?;
    let found = store.format_version()?.unwrap_or(FORMAT_VERSION);
    if found == FORMAT_VERSION {
        return Ok(format!(
            "store {} is at format version {FORMAT_VERSION}: nothing to do",
            path.display()
        ));
    }
    // Migrations from older versions go here, in order, each followed by
    // `store.set_format_version(next)`. There are none: version 1 is the first.
    Err(StoreError::Corrupt {
        path: path.to_path_buf(),
        reason: format!("format version {found} is unknown to this build (it knows 1..={FORMAT_VERSION})"),
    })
}

//! `kafka-dedup migrate --store DIR`: upgrades a store written in an older format version to
//! [`FORMAT_VERSION`], one step at a time, in the order of [`MIGRATIONS`]. Each format version has
//! a document in `migrations/` (what changed, why, how to upgrade); `migrations/README.md`
//! describes the scheme and the checklist for a format change.
//!
//! A step ([`Migration`]) rewrites the database from its `from` version to its `to` version; the
//! framework then stamps `to` inside the database (`m:format`, flushed) and in the format file.
//! A step must be **resumable**: run again on a store it left half-done (a crash, a full disk),
//! it finishes the job. One sled batch per step makes it atomic, which is the simplest way;
//! a step too large for one batch writes its progress in the same batch as each piece. So an
//! interrupted `migrate` is simply run again: finished steps are not repeated (their stamp is
//! written), the interrupted one resumes.
//!
//! The whole path from the store's version to the target is checked before anything is written:
//! a version no step leads from is refused with the store untouched.
//!
//! `run` never migrates on its own: it refuses an older store and names this command (see
//! [`StoreError::OlderFormat`]), so an operator decides when a store is rewritten (and may keep a
//! copy of the directory first). The store is a cache of the output topic: deleting it instead
//! is always correct, at the price of one re-read of the horizon at the next start.
//!
//! Format version 1 is the first, so [`MIGRATIONS`] is empty; the framework is exercised by this
//! module's tests with test-only steps.

use std::path::{Path, PathBuf};

use crate::store::{format_file_version, Store, StoreError, FORMAT_VERSION};

/// One format change.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// The format version this step reads.
    pub from: u32,
    /// The format version it writes (normally `from + 1`).
    pub to: u32,
    /// The document in `migrations/` describing format `to` (for example `0002-....md`).
    pub doc: &'static str,
    /// Rewrites the database from `from` to `to`, resumably (see the module documentation). Must
    /// not write the format stamps: the framework does, after it returns `Ok`. The error is
    /// shown to the operator.
    pub apply: fn(&Store) -> Result<(), StepError>,
}

/// Why a migration step failed: whatever it met (sled, a value that does not parse), shown to
/// the operator.
pub type StepError = Box<dyn std::error::Error + Send + Sync>;

/// Every migration, in order. Empty: format 1 is the first (`migrations/0001-initial.md`).
pub const MIGRATIONS: &[Migration] = &[];

/// Why a migration did not complete. `main` maps `Store` refusals and `NoPath` to exit 2,
/// `Step` and other store errors to 1.
#[derive(Debug, thiserror::Error)]
pub enum MigrateError {
    /// The store cannot be opened (not a store, in use, corrupt), or its stamp cannot be written.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// No chain of steps leads from the store's version to the target. Nothing was written.
    #[error("store {path} has format version {found}: this build knows no migration from it to {target} (known steps: {known}); nothing was modified")]
    NoPath {
        /// Store directory.
        path: PathBuf,
        /// Version found in the store.
        found: u32,
        /// Version this build uses.
        target: u32,
        /// The known steps, as `a -> b` (or `none`).
        known: String,
    },
    /// A step failed. The store is at `from` (stamped), possibly with that step half done;
    /// running `migrate` again resumes it.
    #[error("store {path}: migration {from} -> {to} failed: {reason}; the store is still at format version {from}, run `kafka-dedup migrate` again to resume")]
    Step {
        /// Store directory.
        path: PathBuf,
        /// Version the step reads.
        from: u32,
        /// Version it writes.
        to: u32,
        /// The step's error.
        reason: StepError,
    },
}

/// What `migrate` did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    /// Store directory.
    pub path: PathBuf,
    /// Version found.
    pub from: u32,
    /// Version now.
    pub to: u32,
    /// Steps applied, as `(from, to)`.
    pub applied: Vec<(u32, u32)>,
    /// True when the format file lagged behind the database's stamp (a migration interrupted
    /// between the two) and was rewritten.
    pub repaired_format_file: bool,
}

impl std::fmt::Display for Report {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.applied.is_empty() {
            write!(
                f,
                "store {} is at format version {}: nothing to migrate",
                self.path.display(),
                self.to
            )?;
        } else {
            let steps: Vec<String> = self.applied.iter().map(|(a, b)| format!("{a} -> {b}")).collect();
            write!(
                f,
                "store {} migrated from format version {} to {} ({})",
                self.path.display(),
                self.from,
                self.to,
                steps.join(", ")
            )?;
        }
        if self.repaired_format_file {
            write!(f, "; the format file was brought up to date")?;
        }
        Ok(())
    }
}

/// Applies [`MIGRATIONS`] to bring the store at `path` to [`FORMAT_VERSION`].
pub fn migrate(path: &Path) -> Result<Report, MigrateError> {
    migrate_with(path, MIGRATIONS, FORMAT_VERSION)
}

/// The steps leading from `found` to `target`, in order; `None` when there is no such chain.
pub fn plan(steps: &[Migration], found: u32, target: u32) -> Option<Vec<Migration>> {
    let mut out = Vec::new();
    let mut v = found;
    while v != target {
        let step = steps.iter().find(|s| s.from == v && s.to > v && s.to <= target)?;
        out.push(*step);
        v = step.to;
    }
    Some(out)
}

/// Brings the store at `path` to format `target` with `steps` (the general form of [`migrate`],
/// for tests). Refuses, untouched: a directory that is not a store, a store in use, a version
/// newer than `target`, and a version no chain of steps leads from.
pub fn migrate_with(path: &Path, steps: &[Migration], target: u32) -> Result<Report, MigrateError> {
    let no_path = |found: u32| MigrateError::NoPath {
        path: path.to_path_buf(),
        found,
        target,
        known: if steps.is_empty() {
            "none".to_string()
        } else {
            steps
                .iter()
                .map(|s| format!("{} -> {}", s.from, s.to))
                .collect::<Vec<_>>()
                .join(", ")
        },
    };
    // Plan from the format file first: a version no chain leads from is refused before sled
    // opens (and rewrites its files).
    if let Ok(Some(v)) = format_file_version(path) {
        if v <= target && plan(steps, v, target).is_none() {
            return Err(no_path(v));
        }
    }
    let (store, found) = Store::open_for_migration(path, target)?;
    if found > target {
        return Err(StoreError::NewerFormat {
            path: path.to_path_buf(),
            found,
            supported: target,
        }
        .into());
    }
    let plan = plan(steps, found, target).ok_or_else(|| no_path(found))?;
    let mut report = Report {
        path: path.to_path_buf(),
        from: found,
        to: found,
        applied: Vec::new(),
        repaired_format_file: false,
    };
    if plan.is_empty() {
        if format_file_version(path).ok().flatten() != Some(found) {
            store.set_format_version(found)?;
            report.repaired_format_file = true;
        }
        return Ok(report);
    }
    for step in plan {
        tracing::info!(path = %path.display(), from = step.from, to = step.to, doc = step.doc, "applying store migration");
        (step.apply)(&store).map_err(|reason| MigrateError::Step {
            path: path.to_path_buf(),
            from: step.from,
            to: step.to,
            reason,
        })?;
        store.set_format_version(step.to)?;
        report.applied.push((step.from, step.to));
        report.to = step.to;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generations::{Generation, Positions};
    use crate::store::PartitionWrite;

    use crate::store::test_identity as identity;

    /// A format-1 store with one partition and a few fingerprints.
    fn store_v1(path: &Path) {
        let (store, _) = Store::open_for_run(path, &identity()).unwrap();
        let mut g = Generation::new(1, 10, Positions::new(), 0);
        for i in 0..5u128 {
            g.table.insert(xxhash_rust::xxh3::xxh3_128(&i.to_le_bytes()), i as u32);
        }
        store
            .save(&[PartitionWrite {
                partition: 0,
                epoch: 1,
                ckpt: "c".into(),
                committed_offset: 20,
                out_covered: Positions::new(),
                generations: vec![&g],
                clean: true,
                clock: None,
            }])
            .unwrap();
    }

    /// Test-only format 2: adds key `t:two`. Resumable: inserting again is harmless.
    fn to_two(store: &Store) -> Result<(), StepError> {
        store.db().insert(b"t:two", b"2")?;
        store.db().flush()?;
        Ok(())
    }

    /// Test-only format 3: needs format 2's key. Fails once on a store holding `t:fail` (the
    /// failure is per store, so tests running in parallel do not see each other's).
    fn to_three(store: &Store) -> Result<(), StepError> {
        if store.db().remove(b"t:fail")?.is_some() {
            return Err("disk full (simulated)".into());
        }
        if store.db().get(b"t:two")?.is_none() {
            return Err("format 2's key is missing: steps ran out of order".into());
        }
        let mut batch = sled::Batch::default();
        batch.remove(b"t:two".as_ref());
        batch.insert(b"t:three".as_ref(), b"3".as_ref());
        store.db().apply_batch(batch)?;
        store.db().flush()?;
        Ok(())
    }

    const TEST_STEPS: &[Migration] = &[
        Migration {
            from: 2,
            to: 3,
            doc: "test",
            apply: to_three,
        },
        Migration {
            from: 1,
            to: 2,
            doc: "test",
            apply: to_two,
        },
    ];

    fn versions(path: &Path) -> (Option<u32>, Option<u32>) {
        let (store, _) = Store::open_for_migration(path, 3).unwrap();
        (store.format_version().unwrap(), format_file_version(path).unwrap())
    }

    #[test]
    fn steps_apply_in_chain_order_and_stamp_each_version() {
        let dir = tempfile::tempdir().unwrap();
        store_v1(dir.path());
        let report = migrate_with(dir.path(), TEST_STEPS, 3).unwrap();
        assert_eq!(report.applied, vec![(1, 2), (2, 3)]);
        assert_eq!((report.from, report.to), (1, 3));
        assert_eq!(versions(dir.path()), (Some(3), Some(3)));
        let (store, _) = Store::open_for_migration(dir.path(), 3).unwrap();
        assert!(store.db().get(b"t:three").unwrap().is_some());
        assert!(store.db().get(b"t:two").unwrap().is_none());
        drop(store);
        // Run again: nothing to do.
        let again = migrate_with(dir.path(), TEST_STEPS, 3).unwrap();
        assert!(again.applied.is_empty() && !again.repaired_format_file, "{again}");
    }

    #[test]
    fn a_failed_step_leaves_the_previous_version_and_a_rerun_resumes() {
        let dir = tempfile::tempdir().unwrap();
        store_v1(dir.path());
        {
            let (store, _) = Store::open_for_migration(dir.path(), 3).unwrap();
            store.db().insert(b"t:fail", b"1").unwrap();
        }
        let err = migrate_with(dir.path(), TEST_STEPS, 3).unwrap_err();
        assert!(matches!(err, MigrateError::Step { from: 2, to: 3, .. }), "{err}");
        assert!(err.to_string().contains("run `kafka-dedup migrate` again"), "{err}");
        assert_eq!(versions(dir.path()), (Some(2), Some(2)), "1 -> 2 was stamped");
        let report = migrate_with(dir.path(), TEST_STEPS, 3).unwrap();
        assert_eq!(report.applied, vec![(2, 3)], "1 -> 2 is not repeated");
        assert_eq!(versions(dir.path()), (Some(3), Some(3)));
    }

    #[test]
    fn no_chain_refuses_before_writing_anything() {
        let dir = tempfile::tempdir().unwrap();
        store_v1(dir.path());
        let before = {
            let (store, _) = Store::open_for_migration(dir.path(), 3).unwrap();
            store.db().iter().map(|kv| kv.unwrap()).collect::<Vec<_>>()
        };
        let err = migrate_with(dir.path(), &TEST_STEPS[..1], 3).unwrap_err();
        assert!(
            matches!(
                err,
                MigrateError::NoPath {
                    found: 1,
                    target: 3,
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("2 -> 3"), "{err}");
        let (store, _) = Store::open_for_migration(dir.path(), 3).unwrap();
        let after: Vec<_> = store.db().iter().map(|kv| kv.unwrap()).collect();
        assert_eq!(before, after);
        assert_eq!(format_file_version(dir.path()).unwrap(), Some(1));
    }

    #[test]
    fn a_newer_store_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        store_v1(dir.path());
        let err = migrate_with(dir.path(), &[], 0).unwrap_err();
        assert!(
            matches!(err, MigrateError::Store(StoreError::NewerFormat { found: 1, .. })),
            "{err}"
        );
    }

    #[test]
    fn a_format_file_behind_the_database_is_repaired() {
        let dir = tempfile::tempdir().unwrap();
        store_v1(dir.path());
        // As if a migration to 2 stamped the database and stopped before the format file.
        {
            let (store, _) = Store::open_for_migration(dir.path(), 3).unwrap();
            store.db().insert(b"m:format", &2u32.to_be_bytes()).unwrap();
            store.db().flush().unwrap();
        }
        let report = migrate_with(dir.path(), TEST_STEPS, 2).unwrap();
        assert!(report.applied.is_empty() && report.repaired_format_file, "{report}");
        assert_eq!(versions(dir.path()), (Some(2), Some(2)));
    }

    #[test]
    fn the_real_chain_reaches_this_build_and_every_format_is_documented() {
        let docs: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/migrations"))
            .expect("migrations/ exists")
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        for v in 1..=FORMAT_VERSION {
            let prefix = format!("{v:04}-");
            assert!(
                docs.iter().any(|d| d.starts_with(&prefix) && d.ends_with(".md")),
                "format {v} has no migrations/{prefix}*.md"
            );
            assert!(
                plan(MIGRATIONS, v, FORMAT_VERSION).is_some(),
                "no chain of MIGRATIONS from format {v} to {FORMAT_VERSION}"
            );
        }
        for m in MIGRATIONS {
            assert!(
                docs.iter().any(|d| d == m.doc),
                "{} -> {}: migrations/{} is missing",
                m.from,
                m.to,
                m.doc
            );
        }
    }
}

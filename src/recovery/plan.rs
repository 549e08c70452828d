//! Step 2 of a recovery: from what was read ([`Facts`]) to what to do ([`Plan`]). A pure
//! function: no Kafka, no store, no clock; every outcome is a row of the table test (`plan/tests.rs`).
//!
//! | committed offset | metadata | store snapshot                       | plan                          |
//! |------------------|----------|--------------------------------------|-------------------------------|
//! | none             | -        | -                                    | `Fresh` at `input.start`       |
//! | yes              | yes      | same checkpoint id and offset        | `Load`, re-read from its `out_covered` |
//! | yes              | yes      | other, missing, unreadable           | `Rebuild` at the metadata's output starts |
//! | yes              | yes, positions left out | other, missing, unreadable | `RebuildByTime` back from the metadata's clock |
//! | yes              | yes, a changelog checkpoint in it | other, missing, unreadable; `store.changelog_topic` set | `Changelog`: load its generations, re-read from the first one it lacks |
//! | yes              | yes, no usable changelog | other, missing, unreadable; `store.changelog_topic` set | `Rebuild`, the changelog's fallback counted |
//! | yes              | none     | taken at exactly the committed offset | `Load` (always waits for the fence) |
//! | yes              | none     | other, missing, unreadable; a horizon marker | `Rebuild` from the marker, one generation |
//! | yes              | none     | other, missing, unreadable; no marker | `Fresh` at the committed offset (`no_metadata`) |
//!
//! Metadata that decodes but cannot be kafka-dedup's (no generation, or more generations than
//! its epoch allows: `epoch + 1 - gens` would underflow) is foreign: planned as without metadata.
//! A snapshot that [`Snapshot::Present`] names but that fails to load is planned again as
//! [`Snapshot::Unreadable`]. In idempotent mode a plan waits for the fence unless the metadata
//! says the previous owner handed over cleanly; in transactional mode it never waits (the
//! producer's `init_transactions` fenced the previous owner) and the re-read stops at the
//! committed transaction's end (`out_end`).
//!
//! The changelog (`crate::changelog`) is asked only when the store cannot be used, the metadata
//! has its output positions and at least one frozen generation is live: it is used when the
//! metadata names a changelog checkpoint (`cl`) whose generations are still live; a changelog
//! that then fails to load is planned again as [`ChangelogFacts::Failed`], i.e. `Rebuild` with
//! its reason.

use crate::changelog::{ChangelogRef, Fallback};
use crate::config::{Delivery, Start};
use crate::generations::Positions;
use crate::metadata::CheckpointMeta;
use crate::store::PartitionSnapshot;

/// What the store holds of the partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Snapshot {
    /// No snapshot.
    Missing,
    /// A snapshot that cannot be read or loaded, and why (for the log).
    Unreadable(String),
    /// A snapshot.
    Present(PartitionSnapshot),
}

/// The fingerprint changelog (`store.changelog_topic`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangelogFacts {
    /// Not configured.
    Off,
    /// Configured; not yet tried.
    On,
    /// Configured, and the load the plan chose failed (why).
    Failed(Fallback),
}

/// What to load from the changelog ([`Plan::Changelog`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangelogLoad {
    /// The chunks, as the metadata names them.
    pub from: ChangelogRef,
    /// The epochs of the live generations to load from them, oldest first.
    pub epochs: Vec<u64>,
}

/// What a recovery read before deciding (step 1).
#[derive(Debug, Clone)]
pub struct Facts {
    /// Input partition.
    pub partition: i32,
    /// The group's committed offset on the input partition.
    pub committed: Option<i64>,
    /// The checkpoint metadata committed with it, when kafka-dedup wrote it (see
    /// [`CheckpointMeta::decode`]).
    pub meta: Option<CheckpointMeta>,
    /// `partitioning = "preserve"`: the group's committed offset on the output partition, where
    /// the oldest live generation begins (the horizon marker).
    pub marker: Option<i64>,
    /// The store's snapshot of the partition.
    pub snapshot: Snapshot,
    /// `input.start`: where a partition without committed offset starts.
    pub start: Start,
    /// `output.delivery`.
    pub delivery: Delivery,
    /// `output.provenance`: forwarded records name their input offset, so the output itself
    /// says where a partition must resume when nothing trustworthy is committed.
    pub provenance: bool,
    /// True when the horizon marker came back without the metadata string kafka-dedup commits
    /// with it: the broker drops offset metadata (tansu 0.6), so an input commit without
    /// metadata may still be kafka-dedup's own. False when the marker kept it (a commit without
    /// metadata was then made by someone else: an operator's reset) or when there is no marker.
    pub metadata_dropped: bool,
    /// The fingerprint changelog.
    pub changelog: ChangelogFacts,
}

/// Where consumption resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resume {
    /// At this input offset.
    At(i64),
    /// Nothing committed: at the input's low or high watermark, as `input.start` says.
    Start(Start),
}

/// The re-read of the output topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reread {
    /// From these output positions (per output partition).
    pub from: Positions,
    /// Up to these (transactional mode: the committed transaction's end), or to the end.
    pub to: Option<Positions>,
    /// Wait until `output.fence_wait` has passed since the assignment before reading the end.
    pub wait_for_fence: bool,
}

/// An empty generation to re-learn from the output topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenerationStart {
    /// Its epoch.
    pub epoch: u64,
    /// Where its records begin in the output topic.
    pub out_start: Positions,
}

/// What is logged and counted when the store is not used (`kafka_dedup_store_rebuilds_total`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Notice {
    /// The generations are rebuilt from the output topic; `reason` is the metric label
    /// (`missing`, `behind_or_ahead`, `corrupt`), `detail` the log's explanation.
    Rebuild {
        /// The metric label.
        reason: &'static str,
        /// What was wrong with the store's snapshot.
        detail: String,
    },
    /// A committed offset without metadata or horizon marker: empty generations (label
    /// `no_metadata`).
    NoMetadata,
}

/// Why the output decides where a partition resumes ([`Plan::FromOutput`]); the label of
/// `kafka_dedup_positions_from_output_total{reason}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FromOutputReason {
    /// The group has no committed offset for the partition: a first start, or offsets lost
    /// (the broker expires an empty group's offsets after `offsets.retention.minutes`, 7 days by
    /// default; a changed `input.group_id`).
    NoCommit,
    /// The committed offset carries no kafka-dedup metadata (an operator reset it, or another
    /// tool committed it) and nothing else says it is kafka-dedup's.
    NoMetadata,
}

impl FromOutputReason {
    /// The metric label: `no_commit`, `no_metadata`.
    pub fn label(self) -> &'static str {
        match self {
            FromOutputReason::NoCommit => "no_commit",
            FromOutputReason::NoMetadata => "no_metadata",
        }
    }
}

/// What a recovery does (step 3 carries it out).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Nothing to re-learn: one empty generation starting at the output's end.
    Fresh {
        /// Where consumption resumes.
        resume: Resume,
        /// Said when a committed offset had nothing to recover from.
        notice: Option<Notice>,
    },
    /// The store holds the committed state: load the snapshot, re-read what followed it.
    Load {
        /// Where consumption resumes.
        resume: i64,
        /// The checkpoint id the state descends from.
        ckpt: String,
        /// The re-read, from the snapshot's `out_covered`.
        reread: Reread,
    },
    /// Nothing trustworthy is committed but the output names its records' input offsets
    /// (`output.provenance`): re-learn the output over the horizon by record time (back from its
    /// newest record's timestamp), then resume where [`resume_from_output`] says.
    FromOutput {
        /// The committed offset, if any (without metadata).
        committed: Option<i64>,
        /// Wait until `output.fence_wait` has passed since the assignment before reading.
        wait_for_fence: bool,
        /// Why (logged and counted).
        why: FromOutputReason,
    },
    /// The metadata is kafka-dedup's but its output positions did not fit in the commit
    /// ([`CheckpointMeta::elided`]: `key` partitioning over many output partitions): one empty
    /// generation, re-learned from the output over the horizon by record time, back from
    /// `clock` (or, unknown, from the output's newest record), to the output's end.
    RebuildByTime {
        /// Where consumption resumes (the committed offset).
        resume: i64,
        /// The generation's epoch: the metadata's.
        epoch: u64,
        /// The partition clock the metadata carries, ms since the Unix epoch.
        clock: Option<i64>,
        /// Wait until `output.fence_wait` has passed since the assignment before reading.
        wait_for_fence: bool,
        /// Why the store was not used.
        notice: Notice,
    },
    /// The store cannot be used and the changelog holds the older live generations of a
    /// committed checkpoint: load them (`load.epochs`), start the others empty at the metadata's
    /// output starts, and re-read the output from the first of those.
    Changelog {
        /// Where consumption resumes (every generation's input start).
        resume: i64,
        /// Every live generation, oldest first (those of `load.epochs` are loaded).
        generations: Vec<GenerationStart>,
        /// What to load.
        load: ChangelogLoad,
        /// The re-read, from the first generation not loaded.
        reread: Reread,
        /// Why the store was not used.
        notice: Notice,
    },
    /// Empty generations at known output starts, re-learned from the output topic.
    Rebuild {
        /// Where consumption resumes (every generation's input start).
        resume: i64,
        /// The generations, oldest first.
        generations: Vec<GenerationStart>,
        /// The re-read, from the oldest generation's start.
        reread: Reread,
        /// Why the store was not used.
        notice: Notice,
        /// Why the changelog was not used, when it is configured and would have saved a
        /// re-read (`kafka_dedup_changelog_fallbacks_total{reason}`).
        changelog: Option<Fallback>,
    },
}

/// Decides the recovery of a partition from `facts`.
pub fn plan(facts: &Facts) -> Plan {
    let Some(resume) = facts.committed else {
        if facts.provenance {
            // In idempotent mode an owner commits before it forwards anything, so without a
            // commit nobody can have records in flight: no fence wait.
            return Plan::FromOutput {
                committed: None,
                wait_for_fence: false,
                why: FromOutputReason::NoCommit,
            };
        }
        return Plan::Fresh {
            resume: Resume::Start(facts.start),
            notice: None,
        };
    };
    match &facts.meta {
        Some(meta) => with_metadata(facts, resume, meta).unwrap_or_else(|| without_metadata(facts, resume)),
        None => without_metadata(facts, resume),
    }
}

/// The metric label and the log's explanation of a missing snapshot.
fn missing() -> (&'static str, String) {
    ("missing", "the store has no snapshot of this partition".to_string())
}

/// Metadata names the checkpoint: the store is used only if it holds exactly it. `None` for
/// metadata that cannot be kafka-dedup's (no generation, or more generations than epochs):
/// planned as foreign, i.e. without metadata.
fn with_metadata(facts: &Facts, resume: i64, meta: &CheckpointMeta) -> Option<Plan> {
    // Neither positions nor a count of the generations left out: not kafka-dedup's.
    if meta.live_generations() == 0 {
        return None;
    }
    // Epochs of the live generations: meta.epoch + 1 - live ..= meta.epoch, checked.
    let first_epoch = meta
        .epoch
        .checked_add(1)?
        .checked_sub(u64::from(meta.live_generations()))?;
    let reread = |from: Positions| Reread {
        from,
        to: match facts.delivery {
            Delivery::Transactional => meta.out_end.clone(),
            Delivery::Idempotent => None,
        },
        wait_for_fence: facts.delivery == Delivery::Idempotent && !meta.clean,
    };
    let (reason, detail) = match &facts.snapshot {
        Snapshot::Present(s) if s.ckpt == meta.ckpt && s.committed_offset == resume => {
            return Some(Plan::Load {
                resume,
                ckpt: meta.ckpt.clone(),
                reread: reread(s.out_covered.clone()),
            })
        }
        Snapshot::Present(s) => (
            "behind_or_ahead",
            format!(
                "store snapshot {} (offset {}) does not match the committed checkpoint {} (offset {resume})",
                s.ckpt, s.committed_offset, meta.ckpt
            ),
        ),
        Snapshot::Missing => missing(),
        Snapshot::Unreadable(detail) => ("corrupt", detail.clone()),
    };
    let Some(oldest) = meta.gens.first().cloned() else {
        return Some(Plan::RebuildByTime {
            resume,
            epoch: meta.epoch,
            clock: meta.clock,
            wait_for_fence: facts.delivery == Delivery::Idempotent && !meta.clean,
            notice: Notice::Rebuild { reason, detail },
        });
    };
    let generations: Vec<GenerationStart> = meta
        .gens
        .iter()
        .enumerate()
        .map(|(i, starts)| GenerationStart {
            // At most meta.epoch: no overflow.
            epoch: first_epoch + i as u64,
            out_start: starts.clone(),
        })
        .collect();
    let notice = Notice::Rebuild { reason, detail };
    let changelog = match changelog_choice(facts, meta, first_epoch) {
        None => None,
        Some(Ok(load)) => {
            let first_missing = (load.from.e - first_epoch) as usize;
            return Some(Plan::Changelog {
                resume,
                reread: reread(generations[first_missing].out_start.clone()),
                generations,
                load,
                notice,
            });
        }
        Some(Err(fallback)) => Some(fallback),
    };
    Some(Plan::Rebuild {
        resume,
        generations,
        reread: reread(oldest),
        notice,
        changelog,
    })
}

/// Whether the changelog is used for a rebuild of the live generations of `meta` (epochs
/// `first_epoch..=meta.epoch`): `None` when it is off or would save nothing (no frozen generation
/// live); otherwise what to load, or why not.
fn changelog_choice(facts: &Facts, meta: &CheckpointMeta, first_epoch: u64) -> Option<Result<ChangelogLoad, Fallback>> {
    if facts.changelog == ChangelogFacts::Off || meta.gens.len() < 2 {
        return None;
    }
    if let ChangelogFacts::Failed(f) = &facts.changelog {
        return Some(Err(f.clone()));
    }
    let fallback = |reason: &'static str, detail: &str| {
        Some(Err(Fallback {
            reason,
            detail: detail.to_string(),
        }))
    };
    let Some(cl) = &meta.cl else {
        return fallback("missing", "the committed checkpoint names no changelog checkpoint");
    };
    if cl.e > meta.epoch {
        return fallback(
            "behind_or_ahead",
            "the changelog checkpoint is ahead of the committed one",
        );
    }
    let epochs: Vec<u64> = (first_epoch..cl.e).collect();
    if epochs.is_empty() {
        return fallback(
            "behind_or_ahead",
            "every generation of the changelog checkpoint has rotated out",
        );
    }
    Some(Ok(ChangelogLoad {
        from: cl.clone(),
        epochs,
    }))
}

/// No metadata: the broker dropped it (tansu 0.6 does) or an operator reset the offset. A store
/// snapshot taken at exactly this offset is used; otherwise the horizon marker on the output
/// partition says where to re-read from; without one, the partition starts empty. Nobody can
/// tell whether the previous owner handed over cleanly (a snapshot's `clean` flag is not
/// trusted: another instance may have owned the partition since, without moving the committed
/// offset, and crashed with records in flight), so idempotent mode always waits for the fence.
fn without_metadata(facts: &Facts, resume: i64) -> Plan {
    let reread = |from: Positions| Reread {
        from,
        to: None,
        wait_for_fence: facts.delivery == Delivery::Idempotent,
    };
    let (reason, detail) = match &facts.snapshot {
        Snapshot::Present(s) if s.committed_offset == resume => {
            return Plan::Load {
                resume,
                ckpt: s.ckpt.clone(),
                reread: reread(s.out_covered.clone()),
            }
        }
        Snapshot::Present(s) => (
            "behind_or_ahead",
            format!(
                "store snapshot at offset {} does not match the committed offset {resume}",
                s.committed_offset
            ),
        ),
        Snapshot::Missing => missing(),
        Snapshot::Unreadable(detail) => ("corrupt", detail.clone()),
    };
    match facts.marker {
        // Without provenance the marker is used whatever the broker does with metadata (the
        // input offset may then have been reset by someone else: replays of records before it
        // are not caught); with provenance, only when the broker drops metadata.
        Some(start) if facts.metadata_dropped || !facts.provenance => {
            let starts: Positions = [(facts.partition, start)].into_iter().collect();
            Plan::Rebuild {
                resume,
                generations: vec![GenerationStart {
                    epoch: 1,
                    out_start: starts.clone(),
                }],
                reread: reread(starts),
                notice: Notice::Rebuild { reason, detail },
                changelog: None,
            }
        }
        _ if facts.provenance => Plan::FromOutput {
            committed: Some(resume),
            wait_for_fence: facts.delivery == Delivery::Idempotent,
            why: FromOutputReason::NoMetadata,
        },
        _ => Plan::Fresh {
            resume: Resume::At(resume),
            notice: Some(Notice::NoMetadata),
        },
    }
}

mod proof;
pub use self::proof::{behind_output, learns, provenance_proves, resume_from_output, AtInput, Proof};

#[cfg(test)]
mod tests;

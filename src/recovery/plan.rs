//! Step 2 of a recovery: from what was read ([`Facts`]) to what to do ([`Plan`]). A pure
//! function: no Kafka, no store, no clock; every outcome is a row of the table test below.
//!
//! | committed offset | metadata | store snapshot                       | plan                          |
//! |------------------|----------|--------------------------------------|-------------------------------|
//! | none             | -        | -                                    | `Fresh` at `input.start`       |
//! | yes              | yes      | same checkpoint id and offset        | `Load`, re-read from its `out_covered` |
//! | yes              | yes      | other, missing, unreadable           | `Rebuild` at the metadata's output starts |
//! | yes              | yes, positions left out | other, missing, unreadable | `RebuildByTime` back from the metadata's clock |
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

use std::collections::BTreeMap;

use crate::config::{Delivery, Partitioning, Start};
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
    let generations = meta
        .gens
        .iter()
        .enumerate()
        .map(|(i, starts)| GenerationStart {
            // At most meta.epoch: no overflow.
            epoch: first_epoch + i as u64,
            out_start: starts.clone(),
        })
        .collect();
    Some(Plan::Rebuild {
        resume,
        generations,
        reread: reread(oldest),
        notice: Notice::Rebuild { reason, detail },
    })
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

/// Whether a committed offset without kafka-dedup's metadata is behind what the output proves:
/// a record older than the re-read horizon (the one just before where the re-read starts) came
/// from input offset `before_horizon`, at or after `committed`. kafka-dedup's own commits never
/// are (the records before the horizon were forwarded before the checkpoint that committed), so
/// this is an offset reset by someone else on a broker that drops metadata, where the horizon
/// marker alone cannot tell; resuming there would forward again everything older than the
/// horizon.
pub fn behind_output(committed: i64, before_horizon: Option<i64>) -> bool {
    before_horizon.is_some_and(|b| b >= committed)
}

/// Where a partition resumes after [`Plan::FromOutput`]: after the newest record the output
/// proves this partition's owner handled, or at the committed offset when that is later, or at
/// `input.start` when neither exists.
///
/// `newest` maps each output partition to the newest input offset of this partition found in it
/// (by provenance, over the re-read horizon). With `partitioning = "preserve"` there is one:
/// the output partition receives the input partition's records in input order, so every record
/// before the newest one was forwarded (and is there), dropped as a replay, or sent to a side
/// topic. With `"key"` each output partition receives a subsequence in order, but a record bound
/// for another output partition may not have landed when its owner died, and an output partition
/// that received none of them within the re-read window says nothing at all. So with a committed
/// offset, `key` partitioning resumes there (what was forwarded after it was re-learned, so it
/// is dropped when met again; an offset reset by an operator then forwards again what is older
/// than the horizon). Without one, the smallest of the per-partition newest offsets: a record in
/// flight to an output partition without any recent record of this input partition when its
/// owner died just before the group's offsets were lost is not sent again (docs/guarantee.md, "Provenance").
pub fn resume_from_output(
    committed: Option<i64>,
    newest: &BTreeMap<i32, i64>,
    partitioning: Partitioning,
    start: Start,
) -> Resume {
    if let (Partitioning::Key, Some(c)) = (partitioning, committed) {
        // An output partition with no record of this input partition in the re-read window
        // proves nothing about records bound for it: only the committed offset is safe.
        return Resume::At(c);
    }
    let proven = newest.values().min().map(|o| o.saturating_add(1));
    match (committed, proven) {
        (Some(c), Some(p)) => Resume::At(c.max(p)),
        (Some(c), None) => Resume::At(c),
        (None, Some(p)) => Resume::At(p),
        (None, None) => Resume::Start(start),
    }
}

/// What the input partition holds at an offset a provenance header names as a forwarded
/// record's source (read by the recovery, judged by [`provenance_proves`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtInput {
    /// The offset lies below the partition's log start `low`: retention (or DeleteRecords)
    /// deleted the record.
    Deleted {
        /// The log start offset (low watermark).
        low: i64,
    },
    /// The offset lies at or beyond the partition's end (high watermark).
    Beyond,
    /// The first record at or after the offset: its offset, and whether its key and value are
    /// those of the output record that names it.
    Found {
        /// Its input offset.
        offset: i64,
        /// Same key and value as the output record.
        same: bool,
    },
    /// No record from the offset to the end (compaction removed them; transaction markers).
    Nothing,
}

/// What a provenance offset proves about where its input partition resumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proof {
    /// The input holds the named record: resume after it.
    Confirmed,
    /// The named record is gone from the input (retention deleted it, compaction removed it):
    /// the output's copy is the proof it was forwarded, so resume after it (at the log start
    /// when that is later), never at `input.start` (issue 22, item 6).
    Gone,
    /// The input holds another record there, or none that far (the input topic was deleted and
    /// recreated: its offsets start again at 0; the output was written from another cluster):
    /// the provenance is ignored.
    Refuted,
}

/// Judges provenance offset `offset` by what the input holds there (`at`). A pure function of
/// the table in its test.
pub fn provenance_proves(offset: i64, at: AtInput) -> Proof {
    match at {
        AtInput::Found { offset: o, same: true } if o == offset => Proof::Confirmed,
        AtInput::Found { offset: o, .. } if o == offset => Proof::Refuted,
        // The named offset itself holds no record, a later one does: compaction removed it.
        AtInput::Found { .. } | AtInput::Nothing | AtInput::Deleted { .. } => Proof::Gone,
        AtInput::Beyond => Proof::Refuted,
    }
}

/// Whether a recovery of input partition `p` learns an output record whose provenance names
/// input partition `named` (`None`: it names none of the input topic). With `partitioning =
/// "key"` an output partition holds records of every input partition, and with `provenance` on
/// each names its own: only `p`'s are learned (a record of another input partition is no replay
/// in the partition scope). A record that names none is learned (nothing says it is another's),
/// and so is every record with `"preserve"` (the output partition is `p`'s alone).
pub fn learns(partitioning: Partitioning, provenance: bool, named: Option<i32>, p: i32) -> bool {
    match partitioning {
        Partitioning::Preserve => true,
        Partitioning::Key => !provenance || named.is_none_or(|n| n == p),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::generations::pos;

    const P: i32 = 0;

    fn meta(ckpt: &str, clean: bool, out_end: Option<Positions>) -> Option<CheckpointMeta> {
        Some(CheckpointMeta {
            kd: crate::metadata::METADATA_VERSION,
            epoch: 7,
            ckpt: ckpt.into(),
            gens: vec![pos(P, 1200), pos(P, 1350)],
            elided: None,
            clean,
            out_end,
            clock: None,
            hw: Default::default(),
        })
    }

    fn snap(ckpt: &str, committed_offset: i64) -> Snapshot {
        Snapshot::Present(PartitionSnapshot {
            epoch: 7,
            ckpt: ckpt.into(),
            committed_offset,
            out_covered: pos(P, 1400),
            generations: Vec::new(),
            written_at_ms: 0,
            clean: true,
            clock: None,
        })
    }

    fn facts(committed: Option<i64>, meta: Option<CheckpointMeta>, marker: Option<i64>, snapshot: Snapshot) -> Facts {
        Facts {
            partition: P,
            committed,
            meta,
            marker,
            snapshot,
            start: Start::Earliest,
            delivery: Delivery::Idempotent,
            provenance: false,
            metadata_dropped: true,
        }
    }

    /// As [`facts`], with `output.provenance` on and whether the marker lost its metadata.
    fn with_provenance(mut f: Facts, metadata_dropped: bool) -> Facts {
        f.provenance = true;
        f.metadata_dropped = metadata_dropped;
        f
    }

    fn from_output(committed: Option<i64>, wait_for_fence: bool, why: FromOutputReason) -> Plan {
        Plan::FromOutput {
            committed,
            wait_for_fence,
            why,
        }
    }

    /// `output.provenance` on: where nothing trustworthy is committed, the output decides.
    #[test]
    fn with_provenance_the_output_decides_where_nothing_trustworthy_is_committed() {
        use FromOutputReason::*;
        #[rustfmt::skip]
        let rows: Vec<(&str, Facts, Plan)> = vec![
            ("no commit (offsets expired, a new group id): from the output, no fence (nobody committed, so nobody forwarded)",
                with_provenance(facts(None, None, None, Snapshot::Missing), false),
                from_output(None, false, NoCommit)),
            ("no commit, a snapshot of an earlier group: still from the output",
                with_provenance(facts(None, None, None, snap("a", 400)), false),
                from_output(None, false, NoCommit)),
            ("kafka-dedup's metadata: as without provenance",
                with_provenance(facts(Some(500), meta("a", false, None), None, snap("a", 500)), false),
                Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, true) }),
            ("no metadata, the marker lost its metadata too (tansu drops it): the marker is kafka-dedup's, use it",
                with_provenance(facts(Some(500), None, Some(1100), Snapshot::Missing), true),
                Plan::Rebuild { resume: 500, generations: from_marker(1100), reread: reread(pos(P, 1100), None, true),
                    notice: rebuild("missing", "the store has no snapshot of this partition") }),
            ("no metadata, the marker kept its metadata: the input offset was reset by someone else: from the output, wait",
                with_provenance(facts(Some(0), None, Some(1100), Snapshot::Missing), false),
                from_output(Some(0), true, NoMetadata)),
            ("no metadata, no marker (key partitioning on a broker that drops metadata): from the output, wait",
                with_provenance(facts(Some(500), None, None, Snapshot::Missing), true),
                from_output(Some(500), true, NoMetadata)),
            ("no metadata, snapshot at exactly the committed offset: load",
                with_provenance(facts(Some(500), None, None, snap("a", 500)), true),
                Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, true) }),
        ];
        for (case, facts, want) in rows {
            assert_eq!(plan(&facts), want, "{case}");
        }
    }

    /// When a committed offset without metadata is behind what the output proves.
    #[test]
    fn behind_output_in_a_table() {
        #[rustfmt::skip]
        let rows = [
            ("kafka-dedup's own commit: the records before the horizon came from before it", 500, Some(420), false),
            ("the record just before the horizon is the last one before the commit", 500, Some(499), false),
            ("reset to 0: the output holds records from later offsets before the horizon", 0, Some(420), true),
            ("reset back into what was forwarded", 300, Some(420), true),
            ("nothing before the horizon (it covers the whole output): cannot tell, trust it", 0, None, false),
        ];
        for (case, committed, before, behind) in rows {
            assert_eq!(behind_output(committed, before), behind, "{case}");
        }
    }

    /// Where [`Plan::FromOutput`] resumes, one row per case.
    #[test]
    fn resume_from_output_in_a_table() {
        let newest = |pairs: &[(i32, i64)]| pairs.iter().copied().collect::<BTreeMap<i32, i64>>();
        #[rustfmt::skip]
        let rows = [
            ("nothing committed, nothing in the output: input.start", None, newest(&[]), Resume::Start(Start::Latest)),
            ("nothing committed: after the newest record of the partition", None, newest(&[(0, 99)]), Resume::At(100)),
            ("reset to 0 by an operator: after the newest record", Some(0), newest(&[(0, 99)]), Resume::At(100)),
            ("reset forward past the output (skip on purpose): the committed offset", Some(150), newest(&[(0, 99)]), Resume::At(150)),
            ("a commit, nothing in the output: the committed offset", Some(40), newest(&[]), Resume::At(40)),
            ("key partitioning: the smallest of the per-partition newest offsets", None, newest(&[(0, 520), (1, 510), (2, 530)]), Resume::At(511)),
            ("key partitioning, committed: the committed offset, even when output partitions are later", Some(500), newest(&[(0, 520), (1, 510)]), Resume::At(500)),
        ];
        for (case, committed, newest, want) in rows {
            let partitioning = if newest.len() > 1 {
                Partitioning::Key
            } else {
                Partitioning::Preserve
            };
            assert_eq!(
                resume_from_output(committed, &newest, partitioning, Start::Latest),
                want,
                "{case}"
            );
        }
    }

    fn reread(from: Positions, to: Option<Positions>, wait_for_fence: bool) -> Reread {
        Reread {
            from,
            to,
            wait_for_fence,
        }
    }

    fn rebuild(reason: &'static str, detail: &str) -> Notice {
        Notice::Rebuild {
            reason,
            detail: detail.into(),
        }
    }

    /// The two generations of [`meta`], as rebuilt.
    fn from_meta() -> Vec<GenerationStart> {
        vec![
            GenerationStart {
                epoch: 6,
                out_start: pos(P, 1200),
            },
            GenerationStart {
                epoch: 7,
                out_start: pos(P, 1350),
            },
        ]
    }

    fn from_marker(start: i64) -> Vec<GenerationStart> {
        vec![GenerationStart {
            epoch: 1,
            out_start: pos(P, start),
        }]
    }

    /// One row per outcome of today's recovery, idempotent mode (transactional below).
    #[test]
    fn every_plan_in_a_table() {
        let unreadable = || Snapshot::Unreadable("chunk checksum mismatch".into());
        #[rustfmt::skip]
        let rows: Vec<(&str, Facts, Plan)> = vec![
            ("no commit: fresh at input.start (the store is not asked)",
                facts(None, None, Some(5), snap("a", 10)),
                Plan::Fresh { resume: Resume::Start(Start::Earliest), notice: None }),
            ("snapshot of exactly the committed checkpoint, unclean: load, wait",
                facts(Some(500), meta("a", false, None), None, snap("a", 500)),
                Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, true) }),
            ("snapshot of exactly the committed checkpoint, clean hand-over: load, no wait",
                facts(Some(500), meta("a", true, None), None, snap("a", 500)),
                Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, false) }),
            ("snapshot behind (another checkpoint id)",
                facts(Some(500), meta("b", false, None), Some(1200), snap("a", 400)),
                Plan::Rebuild { resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, true),
                    notice: rebuild("behind_or_ahead", "store snapshot a (offset 400) does not match the committed checkpoint b (offset 500)") }),
            ("snapshot ahead (same id, another offset), clean hand-over",
                facts(Some(500), meta("a", true, None), None, snap("a", 600)),
                Plan::Rebuild { resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, false),
                    notice: rebuild("behind_or_ahead", "store snapshot a (offset 600) does not match the committed checkpoint a (offset 500)") }),
            ("snapshot unreadable, with metadata",
                facts(Some(500), meta("a", false, None), None, unreadable()),
                Plan::Rebuild { resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, true),
                    notice: rebuild("corrupt", "chunk checksum mismatch") }),
            ("snapshot missing, with metadata",
                facts(Some(500), meta("a", false, None), None, Snapshot::Missing),
                Plan::Rebuild { resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, true),
                    notice: rebuild("missing", "the store has no snapshot of this partition") }),
            ("no metadata, snapshot at exactly the committed offset: load, always wait",
                facts(Some(500), None, Some(1200), snap("a", 500)),
                Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, true) }),
            ("no metadata, snapshot at another offset, marker",
                facts(Some(500), None, Some(1100), snap("a", 400)),
                Plan::Rebuild { resume: 500, generations: from_marker(1100), reread: reread(pos(P, 1100), None, true),
                    notice: rebuild("behind_or_ahead", "store snapshot at offset 400 does not match the committed offset 500") }),
            ("no metadata, no snapshot, marker only",
                facts(Some(500), None, Some(1100), Snapshot::Missing),
                Plan::Rebuild { resume: 500, generations: from_marker(1100), reread: reread(pos(P, 1100), None, true),
                    notice: rebuild("missing", "the store has no snapshot of this partition") }),
            ("no metadata, unreadable snapshot, marker",
                facts(Some(500), None, Some(1100), unreadable()),
                Plan::Rebuild { resume: 500, generations: from_marker(1100), reread: reread(pos(P, 1100), None, true),
                    notice: rebuild("corrupt", "chunk checksum mismatch") }),
            ("no metadata, no marker (an operator reset the offsets): fresh at the committed offset",
                facts(Some(500), None, None, snap("a", 400)),
                Plan::Fresh { resume: Resume::At(500), notice: Some(Notice::NoMetadata) }),
            ("no metadata, no marker, no snapshot",
                facts(Some(500), None, None, Snapshot::Missing),
                Plan::Fresh { resume: Resume::At(500), notice: Some(Notice::NoMetadata) }),
        ];
        for (case, facts, want) in rows {
            assert_eq!(plan(&facts), want, "{case}");
        }
    }

    /// Metadata that is foreign or of another version decodes to `None`: planned as without
    /// metadata. `key` partitioning has no horizon marker.
    #[test]
    fn foreign_metadata_and_key_partitioning_plan_as_without_metadata() {
        assert_eq!(CheckpointMeta::decode("some other tool"), None);
        assert_eq!(
            CheckpointMeta::decode(r#"{"kd":99,"epoch":1,"ckpt":"x","gens":[{}],"clean":true}"#),
            None
        );
        let key_mode = facts(Some(500), None, None, Snapshot::Missing);
        assert_eq!(
            plan(&key_mode),
            Plan::Fresh {
                resume: Resume::At(500),
                notice: Some(Notice::NoMetadata)
            }
        );
        let mut latest = facts(None, None, None, Snapshot::Missing);
        latest.start = Start::Latest;
        assert_eq!(
            plan(&latest),
            Plan::Fresh {
                resume: Resume::Start(Start::Latest),
                notice: None
            }
        );
    }

    /// Metadata that decodes but cannot be kafka-dedup's (crafted: more generations than epochs,
    /// an epoch at the top of the range, no generation) is planned as foreign, without metadata,
    /// instead of overflowing the epoch arithmetic.
    #[test]
    fn impossible_metadata_is_planned_as_foreign() {
        let crafted = |epoch: u64, gens: Vec<Positions>| {
            let mut m = meta("a", false, None).unwrap();
            m.epoch = epoch;
            m.gens = gens;
            plan(&facts(Some(500), Some(m), Some(1100), Snapshot::Missing))
        };
        let foreign = plan(&facts(Some(500), None, Some(1100), Snapshot::Missing));
        assert_eq!(crafted(0, vec![pos(P, 1200), pos(P, 1350)]), foreign);
        assert_eq!(crafted(u64::MAX, vec![pos(P, 1200)]), foreign);
        assert_eq!(crafted(7, Vec::new()), foreign);
        let mut edge = from_meta();
        edge[0].epoch = 0;
        edge[1].epoch = 1;
        assert_eq!(
            crafted(1, vec![pos(P, 1200), pos(P, 1350)]),
            Plan::Rebuild {
                resume: 500,
                generations: edge,
                reread: reread(pos(P, 1200), None, true),
                notice: rebuild("missing", "the store has no snapshot of this partition")
            }
        );
    }

    /// Metadata whose positions were left out (too many output partitions): its snapshot is
    /// loaded as ever; without it the generations are found by time, back from the metadata's
    /// clock, waiting for the fence unless the hand-over was clean (never in transactional
    /// mode). Its epoch arithmetic is checked as with positions.
    #[test]
    fn metadata_without_positions_rebuilds_by_time() {
        let bare = |clean: bool, epoch: u64, elided: u32| {
            let mut m = meta("a", clean, None).unwrap();
            m.gens.clear();
            m.elided = Some(elided);
            m.epoch = epoch;
            m.clock = Some(1_700_000_000_000);
            Some(m)
        };
        let by_time = |wait_for_fence: bool, reason: &'static str, detail: &str| Plan::RebuildByTime {
            resume: 500,
            epoch: 7,
            clock: Some(1_700_000_000_000),
            wait_for_fence,
            notice: rebuild(reason, detail),
        };
        let missing = "the store has no snapshot of this partition";
        assert_eq!(
            plan(&facts(Some(500), bare(false, 7, 2), None, snap("a", 500))),
            Plan::Load {
                resume: 500,
                ckpt: "a".into(),
                reread: reread(pos(P, 1400), None, true)
            }
        );
        assert_eq!(
            plan(&facts(Some(500), bare(false, 7, 2), None, Snapshot::Missing)),
            by_time(true, "missing", missing)
        );
        assert_eq!(
            plan(&facts(
                Some(500),
                bare(true, 7, 2),
                None,
                Snapshot::Unreadable("chunk checksum mismatch".into())
            )),
            by_time(false, "corrupt", "chunk checksum mismatch")
        );
        let mut txn = facts(Some(500), bare(false, 7, 2), None, Snapshot::Missing);
        txn.delivery = Delivery::Transactional;
        assert_eq!(plan(&txn), by_time(false, "missing", missing));
        let foreign = plan(&facts(Some(500), None, None, Snapshot::Missing));
        assert_eq!(
            plan(&facts(Some(500), bare(false, 1, 3), None, Snapshot::Missing)),
            foreign
        );
    }

    /// Transactional mode never waits for the fence, and the re-read stops at the committed
    /// transaction's end when the metadata has one.
    #[test]
    fn transactional_plans_stop_at_the_transaction_end_and_never_wait() {
        let txn = |mut f: Facts| {
            f.delivery = Delivery::Transactional;
            plan(&f)
        };
        let end = Some(pos(P, 1500));
        assert_eq!(
            txn(facts(Some(500), meta("a", false, end.clone()), None, snap("a", 500))),
            Plan::Load {
                resume: 500,
                ckpt: "a".into(),
                reread: reread(pos(P, 1400), end.clone(), false)
            }
        );
        assert_eq!(
            txn(facts(Some(500), meta("a", false, end.clone()), None, Snapshot::Missing)),
            Plan::Rebuild {
                resume: 500,
                generations: from_meta(),
                reread: reread(pos(P, 1200), end, false),
                notice: rebuild("missing", "the store has no snapshot of this partition")
            }
        );
        assert_eq!(
            txn(facts(Some(500), None, Some(1100), Snapshot::Missing)),
            Plan::Rebuild {
                resume: 500,
                generations: from_marker(1100),
                reread: reread(pos(P, 1100), None, false),
                notice: rebuild("missing", "the store has no snapshot of this partition")
            }
        );
    }

    /// What a provenance offset (here 99) proves, by what the input holds there.
    #[test]
    fn provenance_proves_in_a_table() {
        use AtInput::*;
        #[rustfmt::skip]
        let rows = [
            ("the record is there, same key and value", Found { offset: 99, same: true }, Proof::Confirmed),
            ("another record there: recreated topic, or mirrored output", Found { offset: 99, same: false }, Proof::Refuted),
            ("beyond the end: recreated topic", Beyond, Proof::Refuted),
            ("below the log start: retention deleted it", Deleted { low: 150 }, Proof::Gone),
            ("deleted up to just after it", Deleted { low: 100 }, Proof::Gone),
            ("compaction removed it, a later record is there", Found { offset: 104, same: false }, Proof::Gone),
            ("compaction removed it and every later one to the end", Nothing, Proof::Gone),
        ];
        for (case, at, want) in rows {
            assert_eq!(provenance_proves(99, at), want, "{case}");
        }
    }

    /// Which re-read output records a recovery of input partition 0 learns.
    #[test]
    fn learns_in_a_table() {
        use Partitioning::*;
        #[rustfmt::skip]
        let rows = [
            ("preserve: the output partition is the input partition's", Preserve, true, Some(1), true),
            ("key, provenance: this partition's record", Key, true, Some(0), true),
            ("key, provenance: another input partition's record", Key, true, Some(1), false),
            ("key, provenance, a record that names none (written before it was on)", Key, true, None, true),
            ("key, no provenance: nothing tells them apart", Key, false, Some(1), true),
        ];
        for (case, partitioning, provenance, named, want) in rows {
            assert_eq!(learns(partitioning, provenance, named, 0), want, "{case}");
        }
    }
}

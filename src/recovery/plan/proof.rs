//! What the output's provenance proves, for a recovery that re-reads it: whether a committed
//! offset without metadata is behind it, where a partition resumes from it, whether the input
//! still holds the record it names, and which re-read records a partition learns. Pure
//! functions, re-exported by [`super`] (`crate::recovery::plan`).

use std::collections::BTreeMap;

use super::Resume;
use crate::config::{Partitioning, Start};

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

/// Where a partition resumes after [`Plan::FromOutput`](super::Plan::FromOutput): after the newest record the output
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

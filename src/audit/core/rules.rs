//! What the audit of one partition is told: which input records are judged ([`Bounds`]) and
//! the settings it judges them by ([`Rules`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use super::record::Horizon;
use crate::config::OnMissing;

/// Which input records are judged: offsets in `[from_offset, to_offset)` whose input clock is in
/// `[since_ms, until_ms)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bounds {
    /// First input offset judged.
    pub from_offset: i64,
    /// First input offset past the range.
    pub to_offset: i64,
    /// Input clock (ms since the Unix epoch) from which records are judged.
    pub since_ms: i64,
    /// Input clock from which records are no longer judged.
    pub until_ms: i64,
}

impl Bounds {
    /// Every record.
    pub const ALL: Bounds = Bounds {
        from_offset: i64::MIN,
        to_offset: i64::MAX,
        since_ms: i64::MIN,
        until_ms: i64::MAX,
    };

    pub(super) fn contains(&self, offset: i64, clock: i64) -> bool {
        (self.from_offset..self.to_offset).contains(&offset) && (self.since_ms..self.until_ms).contains(&clock)
    }
}

/// What the audit of one partition needs to know.
#[derive(Debug, Clone)]
pub struct Rules {
    /// The input partition audited (its output partition under `partitioning = "preserve"`).
    pub partition: i32,
    /// The horizon.
    pub horizon: Horizon,
    /// `fingerprint.on_missing`: whether records without fingerprint are expected in the output.
    pub on_missing: OnMissing,
    /// The input records judged.
    pub bounds: Bounds,
    /// The wall clock, ms since the Unix epoch: later timestamps count as this.
    pub now_ms: i64,
    /// The input partition's end (its high watermark) when the audit began, read after the
    /// output's end: an output record read copies, if anything, an input record before it. When
    /// the range reaches it (and `until_ms` cut nothing), nothing past the range can have a copy
    /// in the output, so an output record after the last one matched to the range that copies
    /// no input record read is unexpected, and the output is read to its end; otherwise such a
    /// record may copy input past the range and is counted as not judged
    /// ([`PartitionAudit::not_judged_after_range`](super::PartitionAudit::not_judged_after_range)).
    pub input_end: i64,
    /// The input offset the input stream is read from (the lead-in's first offset; `i64::MIN`:
    /// the log start). An output record whose provenance names an earlier input offset copies
    /// a record before the lead-in: context, never judged, whether or not the stream held any
    /// record (a quiet partition under `--since` holds none).
    pub input_read_from: i64,
    /// The input records the filter let past on purpose: not expected in the output.
    pub diverted: Diverted,
}

/// The input records of one partition the filter does not forward on purpose, by input offset:
/// those `input.skip` names, and those found in `fingerprint.dead_letter_topic` (by their
/// `kafka-dedup.source` header). One not in the output is counted as skipped or dead-lettered
/// instead of lost (a dead-lettered one first: that is where it went).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Diverted {
    /// Input offsets `input.skip` names in this partition.
    pub skips: BTreeSet<i64>,
    /// Input offsets found in the dead-letter topic, each with its copy there.
    pub dead_letters: BTreeMap<i64, DeadLetter>,
}

/// A copy of an input record in the dead-letter topic.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetter {
    /// Its `kafka-dedup.reason` header (`too_large`, `timestamp_out_of_range`, `skipped`, or why
    /// the record has no fingerprint: `not_json`, `no_id`, ...); `"?"` when it has none.
    pub reason: String,
    /// Its partition in the dead-letter topic.
    pub partition: i32,
    /// Its offset there.
    pub offset: i64,
}

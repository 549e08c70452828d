//! What the audit finds in one partition ([`PartitionAudit`]): each kind of finding, counted,
//! with its first [`EXAMPLES`].

use serde::{Deserialize, Serialize};

/// Examples kept per finding and partition (the count is always exact).
pub const EXAMPLES: usize = 10;

/// A finding: how many, and the first [`EXAMPLES`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Finding<T> {
    /// How many records.
    pub count: u64,
    /// The first ones, in the order found.
    pub examples: Vec<T>,
}

impl<T> Default for Finding<T> {
    fn default() -> Self {
        Finding {
            count: 0,
            examples: Vec::new(),
        }
    }
}

impl<T> Finding<T> {
    pub(super) fn add(&mut self, example: T) {
        self.count += 1;
        if self.examples.len() < EXAMPLES {
            self.examples.push(example);
        }
    }

    pub(super) fn absorb(&mut self, other: Finding<T>) {
        self.count += other.count;
        for e in other.examples {
            if self.examples.len() < EXAMPLES {
                self.examples.push(e);
            }
        }
    }
}

/// Which rule made an output record a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DuplicateRule {
    /// Its provenance names an input record an earlier output record copies.
    SameInputRecord,
    /// An earlier output record has its fingerprint, less than H_min before it.
    Fingerprint,
}

/// An output record that repeats an earlier one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Duplicate {
    /// Its output offset.
    pub output_offset: i64,
    /// The output offset of the earlier record it repeats.
    pub repeats_output_offset: i64,
    /// The rule.
    pub rule: DuplicateRule,
    /// The input offset its provenance names, if any.
    pub input_offset: Option<i64>,
    /// The fingerprint (32 hex digits); `None` for a record without one.
    pub fingerprint: Option<String>,
}

/// An output record identical to an earlier one (same fingerprint) H_max or more after it on the
/// output clock: forwarded by the filter's rule (docs/guarantee.md, "The guarantee"), not a failure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Repeat {
    /// Its output offset.
    pub output_offset: i64,
    /// The output offset of the latest earlier record with its fingerprint.
    pub repeats_output_offset: i64,
    /// The input offset it copies.
    pub input_offset: i64,
    /// How far apart the two are on the output clock, ms (at least H_max).
    pub apart_ms: i64,
    /// The fingerprint (32 hex digits).
    pub fingerprint: String,
}

/// An input record that should be in the output and is not.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lost {
    /// Its input offset.
    pub input_offset: i64,
    /// Its fingerprint (32 hex digits); `None` for a record without one (`on_missing = "forward"`).
    pub fingerprint: Option<String>,
    /// The input clock at it, ms since the Unix epoch.
    pub clock_ms: i64,
}

/// An input record `input.skip` names that is not in the output: let past on purpose, not lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    /// Its input offset.
    pub input_offset: i64,
    /// The input clock at it, ms since the Unix epoch.
    pub clock_ms: i64,
}

/// An input record that is not in the output but in `fingerprint.dead_letter_topic` (found by
/// its `kafka-dedup.source` header): put aside on purpose, not lost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLettered {
    /// Its input offset.
    pub input_offset: i64,
    /// Why, its copy's `kafka-dedup.reason` (`too_large`, `timestamp_out_of_range`, `skipped`,
    /// `not_json`, `no_id`, ...).
    pub reason: String,
    /// The copy's partition in the dead-letter topic.
    pub dead_letter_partition: i32,
    /// ... and its offset there.
    pub dead_letter_offset: i64,
}

/// An output record whose source comes before the source of an earlier output record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutOfOrder {
    /// Its output offset.
    pub output_offset: i64,
    /// The input offset of its source.
    pub input_offset: i64,
    /// The earlier output record with the newest source (the cursor): its output offset.
    pub after_output_offset: i64,
    /// ... and its source's input offset.
    pub after_input_offset: i64,
}

/// Why an output record is no copy of an input record of the range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "reason")]
pub enum UnexpectedReason {
    /// No input record near its position has its fingerprint (or bytes).
    NoSuchInputRecord,
    /// Its provenance names another input partition (`partitioning = "preserve"` keeps them equal).
    OtherPartition {
        /// The input partition named.
        partition: i32,
    },
    /// Its provenance names an input offset holding no record the filter forwards (none read
    /// there, or one without fingerprint that `on_missing` does not forward).
    NotForwardable {
        /// The input offset named.
        input_offset: i64,
    },
    /// Its provenance names an input record with another fingerprint.
    Differs {
        /// The input offset named.
        input_offset: i64,
    },
}

/// An output record that is no copy of an input record of the range.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unexpected {
    /// Its output offset.
    pub output_offset: i64,
    /// Why.
    #[serde(flatten)]
    pub reason: UnexpectedReason,
}

/// The audit of one partition: what was read, what was found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PartitionAudit {
    /// The input partition (and, `preserve`, the output partition).
    pub partition: i32,
    /// Input records read before (or after) the range: context only.
    pub input_context_records: u64,
    /// Input records in the range: `forwarded + replays + lost + not_forwardable + skipped +
    /// dead_lettered`.
    pub input_records: u64,
    /// First input offset in the range read.
    pub first_input_offset: Option<i64>,
    /// Last input offset in the range read.
    pub last_input_offset: Option<i64>,
    /// Input records of the range found in the output.
    pub forwarded: u64,
    /// Input records of the range not in the output because they are replays (see the rules).
    pub replays: u64,
    /// Input records of the range without fingerprint that `on_missing` does not forward (and,
    /// `dead_letter`, not found in the dead-letter topic).
    pub not_forwardable: u64,
    /// Input records of the range `input.skip` names, not in the output: not a failure.
    #[serde(default)]
    pub skipped: Finding<Skipped>,
    /// Input records of the range not in the output but in the dead-letter topic: not a failure.
    #[serde(default)]
    pub dead_lettered: Finding<DeadLettered>,
    /// Output records read.
    pub output_records: u64,
    /// ... of which carry provenance naming the input topic.
    pub output_with_provenance: u64,
    /// Output records repeating an earlier one.
    pub duplicates: Finding<Duplicate>,
    /// Input records that should be in the output and are not.
    pub lost: Finding<Lost>,
    /// Output records out of input order.
    pub out_of_order: Finding<OutOfOrder>,
    /// Output records that copy no input record of the range.
    pub unexpected: Finding<Unexpected>,
    /// Output records identical to one forwarded H_max or more before them: the filter's rule,
    /// not a finding that makes the partition unclean.
    pub repeats_outside_horizon: Finding<Repeat>,
    /// Output records after the last one matched to the range that copy no input record read,
    /// while the input holds records past the range: they may copy those, so they are not
    /// judged (audit a range reaching further to judge them). When the range reaches the
    /// input's end they are unexpected instead.
    #[serde(default)]
    pub not_judged_after_range: u64,
    /// The most input records held in the window at once (the memory bound at work).
    pub peak_window_records: u64,
}

impl PartitionAudit {
    /// True when nothing was found.
    pub fn clean(&self) -> bool {
        self.duplicates.count == 0 && self.lost.count == 0 && self.out_of_order.count == 0 && self.unexpected.count == 0
    }
}

//! What the audit of one partition is told: which input records are judged ([`Bounds`]) and
//! the settings it judges them by ([`Rules`]).

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
}

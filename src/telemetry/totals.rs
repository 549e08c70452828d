//! Process-wide counts, readable without a metrics recorder ([`Totals`]), and what the log's
//! progress lines give of them ([`Progress`]: each checkpoint's line, since the previous one,
//! and the stop's, since the start).

use std::sync::atomic::{AtomicU64, Ordering};

/// Process-wide totals, readable without a metrics recorder (demo, tests, `/readyz`).
#[derive(Debug, Default)]
pub struct Totals {
    /// Records consumed.
    pub consumed: AtomicU64,
    /// Records acknowledged by the output topic.
    pub forwarded: AtomicU64,
    /// Replays dropped.
    pub duplicates: AtomicU64,
    /// Records without a fingerprint (any action).
    pub unfingerprintable: AtomicU64,
    /// Records taken again (forwarded before, by this process or the one before it: not
    /// replays; `kafka_dedup_input_retaken_records_total`).
    pub retaken: AtomicU64,
    /// Checkpoints completed.
    pub checkpoints: AtomicU64,
    /// Partitions rebuilt from the output topic.
    pub rebuilds: AtomicU64,
    /// Output records re-read during recovery.
    pub scanned: AtomicU64,
}

impl Totals {
    /// Adds one to `c`.
    #[inline]
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads `c`.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }

    /// The counts a progress line gives (each checkpoint's, the stop's), read now.
    pub fn progress(&self) -> Progress {
        Progress {
            consumed: Self::get(&self.consumed),
            forwarded: Self::get(&self.forwarded),
            replays_dropped: Self::get(&self.duplicates),
            unfingerprintable: Self::get(&self.unfingerprintable),
            retaken: Self::get(&self.retaken),
        }
    }
}

/// Records counted by [`Totals`] at one moment, or between two ([`Progress::since`]): what the log
/// says at each checkpoint (since the previous checkpoint's line) and at the stop (since the start).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Records consumed.
    pub consumed: u64,
    /// Records acknowledged by the output topic.
    pub forwarded: u64,
    /// Replays dropped.
    pub replays_dropped: u64,
    /// Records without a fingerprint (any `fingerprint.on_missing` action).
    pub unfingerprintable: u64,
    /// Records taken again after a restart or a hand-over (forwarded before: dropped, not
    /// replays), so that `consumed` adds up after a crash.
    pub retaken: u64,
}

impl Progress {
    /// The counts from `earlier` to `self` (counters only grow; an `earlier` read later than
    /// `self` gives 0s, not a wrapped count).
    pub fn since(self, earlier: Progress) -> Progress {
        Progress {
            consumed: self.consumed.saturating_sub(earlier.consumed),
            forwarded: self.forwarded.saturating_sub(earlier.forwarded),
            replays_dropped: self.replays_dropped.saturating_sub(earlier.replays_dropped),
            unfingerprintable: self.unfingerprintable.saturating_sub(earlier.unfingerprintable),
            retaken: self.retaken.saturating_sub(earlier.retaken),
        }
    }
}

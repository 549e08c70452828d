//! The horizon rule: when a partition's generations rotate, as pure functions of the records'
//! timestamps and a wall-clock time passed in (docs/guarantee.md, "The guarantee"; docs/ARCHITECTURE.md,
//! "Generations"). Nothing here reads a clock or talks to Kafka.
//!
//! # The rule
//!
//! Let `I` be `checkpoint.interval` and `G` be `checkpoint.generations` (milliseconds and a count).
//!
//! - Each partition has a *partition clock* `c` ([`Clock`]): the newest effective time taken so
//!   far. It never goes back.
//! - A record's *effective time* ([`effective_ms`]) is its timestamp when that says when the
//!   record was made: at or after the Unix epoch and not after the wall clock when it is taken.
//!   A record without such a timestamp (none, -1, any other negative value, `i64::MIN`; or a
//!   stamp in the future, which a skewed producer clock wrote) gets the time the clock would have
//!   reached by running on the wall clock since the previous record was taken: `c + (now - the
//!   previous record's wall-clock time)`, at most now. So in a caught-up partition it counts as
//!   now, a partition of such records runs on the wall clock, and in a partition that is catching
//!   up a backlog (its clock far behind the wall clock) one such record does not throw the clock
//!   forward to now, which would forget every generation at once. The first record of a
//!   partition whose clock is not known counts as now; the first after a restart or hand-over
//!   as `c` (no wall-clock time is known to have passed).
//! - Generations are record-time *buckets*: the current generation is bucket `floor(c / I)`
//!   ([`bucket_of`]).
//! - [`advance`] runs when a record is taken, *before* it is looked up: when the record's effective
//!   time moves `c` into a later bucket `b`, the generations rotate `min(b - current, G)` times
//!   (empty generations stand for skipped buckets), so the live generations always cover the
//!   buckets `[b - G + 1, b]`. Then the record is looked up and, if new, inserted.
//! - Stuck-clock escape: while records keep arriving and `c` stays in one bucket, their wall-clock
//!   time accumulates (each gap between two records counts for at most one interval, so a quiet
//!   spell does not count); after [`STUCK_INTERVALS`] intervals of it the generations rotate once.
//!   This bounds memory when a producer stamps every record with the same time; it is the one
//!   case that can shorten `H_min`.
//!
//! # The bounds ([`bounds_ms`])
//!
//! Measured on the partition clock, a repeat taken at `c2` of a record whose first (forwarded)
//! copy was taken at `c1` (each the clock just after taking that record):
//!
//! - `c2 - c1 < H_min = (G - 1) * I`: always dropped. The first copy went into bucket
//!   `floor(c1 / I)`; `floor(c2 / I) - floor(c1 / I) <= G - 1`, and a rotation never counts more
//!   buckets than the clock crossed, so fewer than `G` rotations happened: its generation is live.
//! - `c2 - c1 >= H_max = G * I`: always forwarded. The clock crossed at least `G` buckets, and
//!   the rotations add up to at least `min(crossed, G) = G`: its generation was dropped.
//! - In between it depends on where in its bucket the first copy fell.
//!
//! For a replay that keeps its original event time (Flink and Kafka Streams sinks do), `c2` is the
//! newest time on the partition when the replay arrives, not the replay's own stamp. For a
//! caught-up partition whose records are stamped when produced, the partition clock follows the
//! wall clock, and the same numbers hold in wall time.

/// Wall-clock intervals of arriving records after which a clock stuck in one bucket rotates once
/// (the stuck-clock escape; see the module documentation).
pub const STUCK_INTERVALS: i64 = 10;

/// The rotation state of one partition: its partition clock, and the wall-clock bookkeeping of
/// the stuck-clock escape. Only the clock crosses a hand-over or a restart (offset metadata,
/// store snapshot: [`Clock::resumed`]); the escape's bookkeeping starts again at zero, which can
/// only delay an escape.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Clock {
    /// The partition clock `c`: the newest effective time taken, ms since the Unix epoch. `None`
    /// until known (a fresh partition, or an older kafka-dedup's checkpoint with nothing to
    /// re-read): the first record taken sets it.
    time: Option<i64>,
    /// Wall-clock time (ms since the Unix epoch) the last record was taken, if one was.
    last_take_ms: Option<i64>,
    /// Wall-clock ms that records kept arriving since the last rotation while `c` stayed in its
    /// bucket (each gap capped at one interval).
    stuck_ms: i64,
}

impl Clock {
    /// A partition clock that is not known yet.
    pub fn new() -> Self {
        Clock::default()
    }

    /// A partition clock continuing at `time` (ms since the Unix epoch; `None`: not known), as
    /// carried by a checkpoint or found by a recovery.
    pub fn resumed(time: Option<i64>) -> Self {
        Clock {
            time,
            ..Clock::default()
        }
    }

    /// The partition clock `c`, ms since the Unix epoch, if known.
    pub fn time(&self) -> Option<i64> {
        self.time
    }

    /// The current generation's bucket, `floor(c / interval_ms)`, if the clock is known.
    pub fn bucket(&self, interval_ms: i64) -> Option<i64> {
        self.time.map(|t| bucket_of(t, interval_ms))
    }
}

/// A record timestamp `ts` (ms since the Unix epoch) that says when the record was made, as seen
/// at wall-clock time `now_ms`: `None` for none, -1, any other negative value (`i64::MIN`
/// included) and a stamp after `now_ms` (`i64::MAX` included).
pub fn stamp_ms(ts: Option<i64>, now_ms: i64) -> Option<i64> {
    ts.filter(|t| (0..=now_ms).contains(t))
}

/// The effective time (ms since the Unix epoch) of a record with timestamp `ts` taken at
/// wall-clock time `now_ms` by a partition whose rotation state is `clock`, before `clock`
/// advances: its timestamp when [`stamp_ms`] accepts it; otherwise the clock run on by the
/// wall-clock time since the previous record was taken, at most `now_ms` (the clock unknown:
/// `now_ms`; no previous record in this ownership: the clock itself). Saturating.
pub fn effective_ms(clock: &Clock, ts: Option<i64>, now_ms: i64) -> i64 {
    if let Some(t) = stamp_ms(ts, now_ms) {
        return t;
    }
    match (clock.time, clock.last_take_ms) {
        (None, _) => now_ms,
        (Some(c), None) => c,
        (Some(c), Some(last)) => c.saturating_add(now_ms.saturating_sub(last).max(0)).min(now_ms),
    }
}

/// `checkpoint.interval` in ms, the length of a bucket (saturating; the configuration keeps it
/// between 100 ms and 7 days).
pub fn interval_ms(interval: std::time::Duration) -> i64 {
    i64::try_from(interval.as_millis()).unwrap_or(i64::MAX)
}

/// The bucket of time `time_ms`: `floor(time_ms / interval_ms)` (`interval_ms` below 1 counts
/// as 1). Never overflows.
pub fn bucket_of(time_ms: i64, interval_ms: i64) -> i64 {
    time_ms.div_euclid(interval_ms.max(1))
}

/// `(H_min, H_max)` in ms for `interval_ms` and `generations`: `((G - 1) * I, G * I)`, saturating.
/// A repeat taken less than `H_min` after its first copy on the partition clock is always
/// dropped; one taken `H_max` or more after it is always forwarded.
pub fn bounds_ms(interval_ms: i64, generations: u32) -> (i64, i64) {
    let g = i64::from(generations.max(1));
    (interval_ms.saturating_mul(g - 1), interval_ms.saturating_mul(g))
}

/// The horizon of `interval_ms` and `generations` in plain words, as `check-config` and the
/// start-up log print it: for 1 min and 3, "a replay that arrives within 2m of its first copy is
/// always dropped; a repeat 3m or more after it is always forwarded" (H_min and H_max of
/// [`bounds_ms`], in humantime's form; on the partition clock, which for a caught-up partition
/// of records stamped when produced is the wall clock: docs/guarantee.md, "The guarantee").
pub fn in_words(interval_ms: i64, generations: u32) -> String {
    let (min, max) = bounds_ms(interval_ms, generations);
    let text = |ms: i64| humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64)).to_string();
    format!(
        "a replay that arrives within {} of its first copy is always dropped; a repeat {} or more after it is \
         always forwarded",
        text(min),
        text(max)
    )
}

/// Takes a record with timestamp `ts` (ms since the Unix epoch, as the consumer returns it) at
/// wall-clock time `now_ms`: advances `clock` and returns how many times the generations rotate
/// before the record is looked up (0 to `generations`). The new current generation's bucket is
/// then [`Clock::bucket`]. See the module documentation for the rule. All arithmetic saturates:
/// any `ts` and `now_ms` are accepted.
pub fn advance(clock: &mut Clock, ts: Option<i64>, now_ms: i64, interval_ms: i64, generations: u32) -> u32 {
    let interval = interval_ms.max(1);
    let effective = effective_ms(clock, ts, now_ms);
    let gap = clock
        .last_take_ms
        .map_or(0, |last| now_ms.saturating_sub(last).clamp(0, interval));
    clock.last_take_ms = Some(now_ms);
    let Some(c) = clock.time else {
        clock.time = Some(effective);
        clock.stuck_ms = 0;
        return 0;
    };
    let moved = c.max(effective);
    clock.time = Some(moved);
    let crossed = bucket_of(moved, interval).saturating_sub(bucket_of(c, interval));
    if crossed > 0 {
        clock.stuck_ms = 0;
        return crossed.min(i64::from(generations)) as u32;
    }
    clock.stuck_ms = clock.stuck_ms.saturating_add(gap);
    if clock.stuck_ms >= interval.saturating_mul(STUCK_INTERVALS) {
        clock.stuck_ms = 0;
        return 1;
    }
    0
}

/// The record-time span the live generations cover, in ms: from the start of the oldest live
/// bucket `oldest_bucket` to the partition clock `clock_ms` (the `kafka_dedup_horizon_seconds`
/// gauge). A replay whose first copy was taken within it is held.
pub fn span_ms(clock_ms: i64, oldest_bucket: i64, interval_ms: i64) -> i64 {
    clock_ms.saturating_sub(oldest_bucket.saturating_mul(interval_ms.max(1)))
}

/// The partition clock a recovery resumes with: the newer of the one a checkpoint carried
/// (`known`) and the newest effective time among the output records it re-read (`reread`: records
/// forwarded after that checkpoint by an owner that then crashed moved the clock on). `None` when
/// neither is known: the first record taken sets it.
pub fn recovered(known: Option<i64>, reread: Option<i64>) -> Option<i64> {
    match (known, reread) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// The effective time of an output record re-read by a recovery, with timestamp `ts` (its input
/// record's), at wall-clock `now_ms`: the stamp when [`stamp_ms`] accepts it, `None` otherwise
/// (it cannot tell how far such a record moved the clock of the owner that took it, which was
/// by the wall-clock time between two records, at most).
pub fn reread_ms(ts: Option<i64>, now_ms: i64) -> Option<i64> {
    stamp_ms(ts, now_ms)
}

/// A recovery re-reading an output partition in order (`partitioning = "preserve"`: its input
/// partition's forwarded records in input order) takes a record of effective time `t`
/// ([`reread_ms`]): moves the partition clock `clock` (ms since the Unix epoch; `None`: not known)
/// on as the record did when it was first taken, and returns how many times the generations
/// rotated then (0 to `generations`), as [`advance`] counts them. A record without usable stamp
/// (`t` is `None`) moves nothing (how far it moved the clock is not known); the clock unknown,
/// the first stamped record sets it. The stuck-clock escape is left out (it can only have
/// rotated more, which a recovery never needs to repeat to stay inside `H_min`). Saturating.
pub fn reread_advance(clock: &mut Option<i64>, t: Option<i64>, interval_ms: i64, generations: u32) -> u32 {
    let Some(t) = t else { return 0 };
    let Some(c) = *clock else {
        *clock = Some(t);
        return 0;
    };
    let moved = c.max(t);
    *clock = Some(moved);
    let crossed = bucket_of(moved, interval_ms).saturating_sub(bucket_of(c, interval_ms));
    crossed.clamp(0, i64::from(generations)) as u32
}

#[cfg(test)]
mod tests;

//! One owner of each input partition's life cycle: its state is one type, [`Partition`], owned
//! by the pipeline thread (docs/ARCHITECTURE.md, "The partition life cycle").
//!
//! ```text
//!   assigned ──► Recovering ──(generations rebuilt, offset sought)──► Running ──► revoked (removed)
//!                    │                                                 │  ▲
//!                    └──────────── revoked: worker cancelled ──────────┘  └─ checkpointing: a
//!                                                                            checkpoint target is
//!                                                                            pending (see pipeline)
//! ```
//!
//! While `Recovering`, the partition is paused in the consumer and any record the client still
//! hands over is ignored (it is fetched again after the seek). Only `Running` partitions forward,
//! and only their offsets are committed.

use std::collections::VecDeque;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Instant;

use crate::generations::{Generations, Positions};
use crate::horizon::Clock;
pub use crate::state::PartitionState;
use crate::telemetry::PartitionMetrics;

/// Where a taken record went; decides what its acknowledgement means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// Nothing produced (dropped duplicate, dropped unfingerprintable): done at once.
    None,
    /// Produced to the output topic; its acknowledgement advances the output position.
    Output,
    /// Produced to the duplicates or dead-letter topic.
    Side,
}

/// One taken record in [`InFlight`].
#[derive(Debug, Clone, Copy)]
struct Entry {
    /// Its input offset.
    offset: i64,
    /// Acknowledged, or needed no produce.
    done: bool,
    /// Where it was produced.
    target: Target,
}

/// Records of one partition taken from the consumer and not yet acknowledged, in input order.
/// Gives the commit position: every offset below [`InFlight::watermark`] is done (acknowledged by
/// the topic it was produced to, or needed no produce).
///
/// Each produced record gets a sequence number (44 bits, starting at a random value per
/// ownership) carried in the producer's delivery opaque, so a late acknowledgement from an
/// earlier ownership of the same partition is recognised and ignored.
#[derive(Debug)]
pub struct InFlight {
    /// Taken records from the oldest not-done one on.
    entries: VecDeque<Entry>,
    /// Sequence number of `entries[0]`.
    base_seq: u64,
    /// Input offset after the last taken record.
    next_offset: i64,
    /// Input offset after the last record the consumer returned, taken or not.
    returned: i64,
}

/// Mask of the sequence number bits in a delivery opaque.
pub const SEQ_BITS: u32 = 44;
const SEQ_MASK: u64 = (1 << SEQ_BITS) - 1;

impl InFlight {
    /// Tracking that starts at input offset `start` (the next record expected).
    pub fn new(start: i64) -> Self {
        InFlight {
            entries: VecDeque::new(),
            base_seq: rand::random::<u64>() & SEQ_MASK,
            next_offset: start,
            returned: start,
        }
    }

    /// Takes the record at `offset`. Returns the sequence number to put in the delivery opaque
    /// when it is produced (`target` not `None`); `None` when it is done already.
    #[inline]
    pub fn take(&mut self, offset: i64, target: Target) -> Option<u64> {
        self.next_offset = offset + 1;
        if target == Target::None && self.entries.is_empty() {
            return None;
        }
        let seq = (self.base_seq + self.entries.len() as u64) & SEQ_MASK;
        self.entries.push_back(Entry {
            offset,
            done: target == Target::None,
            target,
        });
        (target != Target::None).then_some(seq)
    }

    /// Forgets the last taken record (its produce was refused synchronously and will be retried
    /// or the filter stops).
    pub fn untake(&mut self, offset: i64) {
        if self.entries.back().is_some_and(|e| e.offset == offset && !e.done) {
            self.entries.pop_back();
        }
        self.next_offset = offset;
    }

    /// Marks the record with sequence number `seq` done. Returns its input offset and target,
    /// or `None` for an unknown (stale or repeated) sequence number.
    #[inline]
    pub fn ack(&mut self, seq: u64) -> Option<(i64, Target)> {
        let i = (seq.wrapping_sub(self.base_seq) & SEQ_MASK) as usize;
        let e = self.entries.get_mut(i)?;
        if e.done || e.target == Target::None {
            return None;
        }
        e.done = true;
        let out = (e.offset, e.target);
        while self.entries.front().is_some_and(|e| e.done) {
            self.entries.pop_front();
            self.base_seq = (self.base_seq + 1) & SEQ_MASK;
        }
        Some(out)
    }

    /// The input offset below which everything is done: the commit position.
    pub fn watermark(&self) -> i64 {
        self.entries.front().map_or(self.next_offset, |e| e.offset)
    }

    /// Input offset after the last taken record.
    pub fn next_offset(&self) -> i64 {
        self.next_offset
    }

    /// Notes that the consumer returned the record at `offset` (before it is taken).
    #[inline]
    pub fn returned(&mut self, offset: i64) {
        if offset >= self.returned {
            self.returned = offset + 1;
        }
    }

    /// Moves the next offset forward to the consumer's `position` when the consumer skipped
    /// records it never returned (transaction markers, aborted records), so the committed
    /// position reaches the partition's end. Only when every record it returned was taken:
    /// a record returned but not taken (refused by the producer) is never skipped. Never moves
    /// back.
    pub fn skip_to(&mut self, position: i64) {
        if self.returned <= self.next_offset && position > self.next_offset {
            self.next_offset = position;
        }
    }

    /// True when nothing awaits an acknowledgement.
    pub fn is_idle(&self) -> bool {
        self.entries.is_empty()
    }

    /// How many taken records await an acknowledgement.
    pub fn pending_count(&self) -> usize {
        self.entries.iter().filter(|e| !e.done).count()
    }

    /// The input offset and target of the produced record with sequence number `seq` while it
    /// awaits its acknowledgement; `None` when done, stale or unknown.
    pub fn pending(&self, seq: u64) -> Option<(i64, Target)> {
        let i = (seq.wrapping_sub(self.base_seq) & SEQ_MASK) as usize;
        self.entries
            .get(i)
            .filter(|e| !e.done && e.target != Target::None)
            .map(|e| (e.offset, e.target))
    }
}

/// What a record the consumer returned below a running partition's next offset means
/// ([`behind`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Behind {
    /// Fetched before a seek of ours that is still pending (below the offset sought): fetched
    /// again after it, ignored.
    Stale,
    /// No seek of ours explains it: the consumer went back on its own (the input partition was
    /// truncated by an unclean leader election and librdkafka moved to the divergence point, or
    /// an out-of-range position was reset to `earliest`). The records between it and the next
    /// offset may be new ones, not replays: never dropped in silence.
    Rewound,
}

/// Whether the record at input `offset` is behind `next` (the running partition's
/// [`InFlight::next_offset`]), and why: `None` when it is not (it is taken as usual). `sought`:
/// the offset of the partition's last seek of ours while no record at or after it has been
/// returned yet (the seek is pending), else `None`.
pub fn behind(offset: i64, next: i64, sought: Option<i64>) -> Option<Behind> {
    if offset >= next {
        None
    } else if sought.is_some_and(|s| offset < s) {
        Some(Behind::Stale)
    } else {
        Some(Behind::Rewound)
    }
}

/// A partition being recovered: its generations are rebuilt by a worker thread.
pub struct Recovering {
    /// Distinguishes this ownership from earlier ones; the worker's result carries it.
    pub incarnation: u64,
    /// When the partition was assigned (start of `output.fence_wait`, recovery duration).
    pub since: Instant,
    /// Set on revocation; the worker stops at its next check.
    pub cancel: Arc<AtomicBool>,
    /// Set after a failed attempt: retry at this time.
    pub retry_at: Option<Instant>,
}

/// A partition that consumes and forwards.
pub struct Running {
    /// The ownership this state belongs to.
    pub incarnation: u64,
    /// Live fingerprint generations.
    pub gens: Generations,
    /// Taken records awaiting acknowledgement; the commit position.
    pub inflight: InFlight,
    /// Lower bounds of the output end per output partition: the recovery scan's end, then the
    /// last acknowledged offset + 1. The next generation starts here.
    pub out_positions: Positions,
    /// Id of the snapshot/commit this state descends from (kept while the store still matches).
    pub ckpt: String,
    /// The partition clock: when generations rotate ([`crate::horizon`]).
    pub clock: Clock,
    /// Global scope, filter stage: the highest input offset taken per input partition, and
    /// what a commit carries of them ([`crate::global::Marks`]); empty otherwise.
    pub high_water: crate::global::Marks,
    /// When the partition was assigned and how many output records its recovery re-read; logged
    /// with the first record this ownership forwards, then cleared.
    pub first_forward: Option<FirstForward>,
    /// What the changelog (`store.changelog_topic`) holds of this partition, named in its
    /// commits ([`crate::changelog::ChangelogRef`]).
    pub changelog: Option<crate::changelog::ChangelogRef>,
    /// Metric handles.
    pub metrics: PartitionMetrics,
    /// The partitioner that placed the last keyed record ([`crate::kafka::key_placed_in`]).
    pub key_hash: crate::kafka::KeyHash,
}

/// What the log line of an ownership's first forwarded record tells.
#[derive(Debug, Clone, Copy)]
pub struct FirstForward {
    /// When the partition was assigned.
    pub assigned: Instant,
    /// When it began to run (its recovery done): what comes after is the wait for input and the
    /// first acknowledgement.
    pub running: Instant,
    /// Output records its recovery re-read.
    pub rescanned: u64,
}

/// The life-cycle state of one owned input partition.
pub enum Partition {
    /// See [`Recovering`].
    Recovering(Recovering),
    /// See [`Running`].
    Running(Box<Running>),
}

impl Partition {
    /// Which state it is in, by name.
    pub fn state(&self) -> PartitionState {
        match self {
            Partition::Recovering(_) => PartitionState::Recovering,
            Partition::Running(_) => PartitionState::Running,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record below the next offset is ignored only while a seek of ours explains it.
    #[test]
    fn a_record_behind_the_next_offset_is_stale_only_below_a_pending_seek() {
        #[rustfmt::skip]
        let rows = [
            (10, 10, None, None, "the next record: taken"),
            (12, 10, None, None, "ahead (compacted, transaction markers): taken"),
            (10, 10, Some(10), None, "the record sought: taken (and the seek is done)"),
            (7, 10, Some(10), Some(Behind::Stale), "fetched before the seek to 10"),
            (9, 10, Some(12), Some(Behind::Stale), "below a seek to 12"),
            (7, 10, None, Some(Behind::Rewound), "no seek pending: truncated or reset"),
            (0, 10, None, Some(Behind::Rewound), "reset to earliest"),
            (8, 10, Some(5), Some(Behind::Rewound), "at or after the offset sought: not explained by it"),
        ];
        for (offset, next, sought, want, case) in rows {
            assert_eq!(behind(offset, next, sought), want, "{case}");
        }
    }

    #[test]
    fn watermark_waits_for_the_oldest_unacknowledged() {
        let mut f = InFlight::new(10);
        assert_eq!(f.watermark(), 10);
        assert_eq!(f.take(10, Target::None), None, "done at once, nothing pending");
        assert_eq!(f.watermark(), 11);
        let a = f.take(11, Target::Output).unwrap();
        assert_eq!(f.take(12, Target::None), None);
        let b = f.take(13, Target::Side).unwrap();
        assert_eq!(f.watermark(), 11);
        assert_eq!(f.ack(b), Some((13, Target::Side)));
        assert_eq!(f.watermark(), 11, "13 done, 11 still pending");
        assert_eq!(f.ack(a), Some((11, Target::Output)));
        assert_eq!(f.watermark(), 14);
        assert!(f.is_idle());
        assert_eq!(f.ack(a), None, "a repeated acknowledgement is ignored");
    }

    #[test]
    fn pending_records_are_counted_and_found_by_sequence() {
        let mut f = InFlight::new(0);
        let a = f.take(0, Target::Side).unwrap();
        f.take(1, Target::None);
        let b = f.take(2, Target::Output).unwrap();
        assert_eq!(f.pending_count(), 2);
        assert_eq!(f.pending(a), Some((0, Target::Side)));
        f.ack(b);
        assert_eq!(f.pending(b), None, "done");
        assert_eq!(f.pending_count(), 1);
        assert_eq!(f.pending(a.wrapping_add(5) & SEQ_MASK), None, "unknown");
    }

    #[test]
    fn stale_sequence_numbers_are_ignored() {
        let mut old = InFlight::new(0);
        let s = old.take(0, Target::Output).unwrap();
        let mut new = InFlight::new(0);
        // With random 44-bit bases the chance that `s` falls in `new`'s window is negligible.
        new.take(0, Target::Output);
        if (s.wrapping_sub(new.base_seq) & SEQ_MASK) != 0 {
            assert_eq!(new.ack(s), None);
        }
    }

    #[test]
    fn a_returned_but_untaken_record_is_never_skipped() {
        let mut f = InFlight::new(0);
        f.returned(0);
        f.take(0, Target::None);
        f.returned(1);
        f.take(1, Target::Output);
        f.untake(1); // refused by the producer
        f.skip_to(5);
        assert_eq!(f.watermark(), 1);
    }

    #[test]
    fn skipped_offsets_move_the_watermark_when_idle() {
        let mut f = InFlight::new(0);
        f.returned(0);
        let a = f.take(0, Target::Output).unwrap();
        f.skip_to(5);
        assert_eq!(f.watermark(), 0);
        f.ack(a);
        assert_eq!(f.watermark(), 5);
    }
}

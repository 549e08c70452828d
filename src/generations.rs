//! The generations of one input partition: the fingerprint set of the current checkpoint interval
//! plus `checkpoint.generations - 1` previous ones (docs/ARCHITECTURE.md, "Generations").
//!
//! A record is a replay when its fingerprint is in any live generation. New fingerprints go into
//! the current generation. Each generation is a bucket of record time (`checkpoint.interval` of
//! the partition clock, [`crate::horizon`]): when a record moves the clock into a later bucket, the
//! current generation is frozen (it becomes immutable and shareable with the store writer) and a
//! new, empty one starts, once per bucket crossed; the oldest beyond the configured count is
//! dropped. Memory and the dedup horizon are therefore bounded by what arrives in `generations`
//! intervals of record time.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::table::{FingerprintTable, UNKNOWN_OFFSET};

/// Offsets per output partition (`partition -> offset`). In `partitioning = "preserve"` mode it
/// has one entry, the output partition equal to the input partition.
pub type Positions = BTreeMap<i32, i64>;

/// One generation: the fingerprints forwarded while the partition clock was in one bucket.
#[derive(Debug)]
pub struct Generation {
    /// Increases by one at every rotation of this partition; carried in the commit metadata.
    pub epoch: u64,
    /// Its record-time bucket (`floor(partition clock / checkpoint.interval)` while it was
    /// current, [`crate::horizon::bucket_of`]); `None` when not known (written by an older
    /// kafka-dedup, or rebuilt before the clock was known). Two generations share a bucket after
    /// a stuck-clock escape. Only the horizon gauge reads it; rotation follows the clock.
    pub bucket: Option<i64>,
    /// Wall-clock creation time, milliseconds since the Unix epoch (for `inspect`).
    pub created_at_ms: i64,
    /// Input offset at which the generation started; first-seen offsets are stored relative to it.
    pub in_start: i64,
    /// Output offsets at or after which every record of this generation lies (a lower bound:
    /// the output end known when the generation started). Recovery re-reads from here.
    pub out_start: Positions,
    /// The fingerprints and their first-seen input offsets (relative to `in_start`).
    pub table: FingerprintTable,
    /// How many entries the store holds for this generation as written or loaded by this
    /// process (0: not stored). Lets a checkpoint skip rewriting a frozen generation.
    pub stored_len: AtomicUsize,
}

impl Generation {
    /// A new, empty generation sized for `expected` fingerprints.
    pub fn new(epoch: u64, in_start: i64, out_start: Positions, expected: usize) -> Self {
        Generation {
            epoch,
            bucket: None,
            created_at_ms: now_ms(),
            in_start,
            out_start,
            table: FingerprintTable::with_capacity(expected),
            stored_len: AtomicUsize::new(0),
        }
    }

    /// An empty generation with the same epoch, bucket, creation time and starts: how a
    /// periodic checkpoint stores the current generation (its records are re-learned from the
    /// output topic).
    pub fn empty_copy(&self) -> Generation {
        Generation {
            epoch: self.epoch,
            bucket: self.bucket,
            created_at_ms: self.created_at_ms,
            in_start: self.in_start,
            out_start: self.out_start.clone(),
            table: FingerprintTable::with_capacity(0),
            stored_len: AtomicUsize::new(0),
        }
    }

    /// Number of fingerprints held.
    pub fn len(&self) -> usize {
        self.table.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The first-seen input offset stored as `rel`, if known.
    pub fn absolute_offset(&self, rel: u32) -> Option<i64> {
        (rel != UNKNOWN_OFFSET).then(|| self.in_start + rel as i64)
    }

    /// Encodes an absolute input offset relative to `in_start` (unknown when it does not fit).
    pub fn relative_offset(&self, offset: Option<i64>) -> u32 {
        match offset {
            Some(o) if o >= self.in_start && o - self.in_start < UNKNOWN_OFFSET as i64 => (o - self.in_start) as u32,
            _ => UNKNOWN_OFFSET,
        }
    }

    /// True if the store already holds exactly this generation's entries.
    pub fn is_stored(&self) -> bool {
        let n = self.stored_len.load(Ordering::Acquire);
        n != 0 && n == self.len()
    }

    /// Records that the store now holds this generation's current entries.
    pub fn mark_stored(&self) {
        self.stored_len.store(self.len(), Ordering::Release);
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Where a duplicate's fingerprint was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hit {
    /// 0 for the current generation, 1 for the previous one, and so on.
    pub age: usize,
    /// The epoch of the generation that matched.
    pub epoch: u64,
    /// Input offset where the fingerprint was first seen, when known: the record's own when it
    /// was forwarded by this process or a store snapshot holds it, the one the output record's
    /// provenance names when recovery re-learned it; `None` without provenance.
    pub first_offset: Option<i64>,
}

/// The live generations of one input partition, oldest first, the last one current.
#[derive(Debug)]
pub struct Generations {
    /// Frozen generations, oldest first. Shared with the store writer during a checkpoint.
    frozen: VecDeque<Arc<Generation>>,
    /// The generation new fingerprints go into.
    current: Generation,
    /// `checkpoint.generations`: how many generations are live, current included.
    keep: usize,
}

impl Generations {
    /// Live generations from parts (oldest first, the last one becomes current). At least one.
    pub fn from_parts(mut gens: Vec<Generation>, keep: usize) -> Self {
        assert!(!gens.is_empty(), "at least the current generation");
        let current = gens.pop().expect("non-empty");
        let mut frozen: VecDeque<Arc<Generation>> = gens.into_iter().map(Arc::new).collect();
        while frozen.len() + 1 > keep.max(1) {
            frozen.pop_front();
        }
        Generations {
            frozen,
            current,
            keep: keep.max(1),
        }
    }

    /// Starts loading `fp`'s home slot in every live generation (a hint, see
    /// [`FingerprintTable::prefetch`]). Called for every record of a polled batch before the
    /// first of them is looked up, so that their memory latencies overlap instead of adding up:
    /// a table of millions misses the CPU caches on nearly every lookup (BENCHMARKS.md).
    #[inline]
    pub fn prefetch(&self, fp: u128) {
        self.current.table.prefetch(fp);
        for g in &self.frozen {
            g.table.prefetch(fp);
        }
    }

    /// Looks `fp` up in every live generation, newest first. The home slots of all of them are
    /// prefetched first, so a miss (the common case) waits for one memory latency, not one per
    /// generation.
    #[inline]
    pub fn lookup(&self, fp: u128) -> Option<Hit> {
        self.prefetch(fp);
        if let Some(rel) = self.current.table.get(fp) {
            return Some(Hit {
                age: 0,
                epoch: self.current.epoch,
                first_offset: self.current.absolute_offset(rel),
            });
        }
        for (i, g) in self.frozen.iter().rev().enumerate() {
            if let Some(rel) = g.table.get(fp) {
                return Some(Hit {
                    age: i + 1,
                    epoch: g.epoch,
                    first_offset: g.absolute_offset(rel),
                });
            }
        }
        None
    }

    /// Adds `fp`, first seen at input `offset`, to the current generation. Returns true if new there.
    #[inline]
    pub fn insert(&mut self, fp: u128, offset: Option<i64>) -> bool {
        let rel = self.current.relative_offset(offset);
        self.current.table.insert(fp, rel)
    }

    /// Freezes the current generation and starts epoch `current.epoch + 1` at input offset
    /// `in_start` and output positions `out_start`. The new table is pre-sized from the frozen
    /// one's count so a steady stream does not rehash. Drops the oldest generation beyond
    /// `keep`. Returns the frozen generation.
    pub fn rotate(&mut self, in_start: i64, out_start: Positions) -> Arc<Generation> {
        let expected = self.current.len() + self.current.len() / 8;
        let next = Generation::new(self.current.epoch + 1, in_start, out_start, expected);
        let frozen = Arc::new(std::mem::replace(&mut self.current, next));
        self.frozen.push_back(frozen.clone());
        while self.frozen.len() + 1 > self.keep {
            self.frozen.pop_front();
        }
        frozen
    }

    /// Rotates `times` times for the partition clock's move into bucket `bucket`
    /// ([`crate::horizon::advance`]): the new current generation is bucket `bucket`, those in
    /// between (empty, standing for buckets the clock skipped) `bucket - times + 1 ..`; all start
    /// at input offset `in_start` and output positions `out_start`. The new current table is
    /// pre-sized from the generation current before (see [`Generations::rotate`]).
    pub fn rotate_to(&mut self, times: u32, bucket: i64, in_start: i64, out_start: Positions) {
        let expected = self.current.len() + self.current.len() / 8;
        for i in 1..=times {
            let last = i == times;
            let capacity = if last { expected } else { 0 };
            let mut next = Generation::new(self.current.epoch + 1, in_start, out_start.clone(), capacity);
            next.bucket = Some(bucket.saturating_sub(i64::from(times - i)));
            let frozen = Arc::new(std::mem::replace(&mut self.current, next));
            self.frozen.push_back(frozen);
            while self.frozen.len() + 1 > self.keep {
                self.frozen.pop_front();
            }
        }
    }

    /// Sets the current generation's bucket: when the partition clock becomes known (the first
    /// record of a partition whose clock was not), or moved on during a recovery.
    pub fn set_current_bucket(&mut self, bucket: i64) {
        self.current.bucket = Some(bucket);
    }

    /// The bucket of the oldest live generation, counted back from the current one's: each
    /// older generation is the bucket before the next newer one, or the same bucket when it was
    /// frozen by a stuck-clock escape (its stored bucket equals the newer one's). A bucket that
    /// is not known, or that says more (a generation relabelled by a recovery, or bucketed with
    /// another `checkpoint.interval`), counts as the bucket before: the span this gives is never
    /// more than what is held. `None` while the current generation's bucket is not known.
    pub fn oldest_bucket(&self) -> Option<i64> {
        let mut b = self.current.bucket?;
        for g in self.frozen.iter().rev() {
            if g.bucket != Some(b) {
                b = b.saturating_sub(1);
            }
        }
        Some(b)
    }

    /// The current generation.
    pub fn current(&self) -> &Generation {
        &self.current
    }

    /// Live generations, oldest first; the last is the current one.
    pub fn iter(&self) -> impl Iterator<Item = &Generation> {
        self.frozen
            .iter()
            .map(|g| g.as_ref())
            .chain(std::iter::once(&self.current))
    }

    /// The frozen generations, oldest first (shareable with a background writer).
    pub fn frozen(&self) -> impl Iterator<Item = &Arc<Generation>> {
        self.frozen.iter()
    }

    /// Output start positions of the live generations, oldest first (commit metadata).
    pub fn out_starts(&self) -> Vec<Positions> {
        self.iter().map(|g| g.out_start.clone()).collect()
    }

    /// Total fingerprints held across live generations.
    pub fn total_len(&self) -> usize {
        self.iter().map(|g| g.len()).sum()
    }

    /// Inserts a fingerprint re-learned from the output topic at output `(partition, offset)`
    /// into the newest generation whose `out_start` for that partition is at or before it, with
    /// `in_offset` as its first input offset: the input offset of the recovering partition that
    /// the output record's provenance names (`None` without provenance, or when it names another
    /// partition; kept as unknown when it lies before the generation's `in_start` or 2^32 - 1
    /// offsets or more after it). A lookup then tells the same input record taken again (its
    /// own offset) from a replay ([`crate::pipeline::route::Route::DropRetaken`]). Returns false
    /// if it lies before every generation (then it is outside the horizon).
    pub fn relearn(&mut self, fp: u128, out_partition: i32, out_offset: i64, in_offset: Option<i64>) -> bool {
        let starts_at_or_before = |g: &Generation| g.out_start.get(&out_partition).is_none_or(|s| *s <= out_offset);
        if starts_at_or_before(&self.current) {
            let rel = self.current.relative_offset(in_offset);
            self.current.table.insert(fp, rel);
            return true;
        }
        // Frozen generations are immutable behind Arc; during recovery nothing else holds them.
        for g in self.frozen.iter_mut().rev() {
            if starts_at_or_before(g) {
                if let Some(g) = Arc::get_mut(g) {
                    let rel = g.relative_offset(in_offset);
                    g.table.insert(fp, rel);
                    return true;
                }
            }
        }
        false
    }
}

/// `{p: o}`: a one-partition [`Positions`], for unit tests here and in the store's tools.
#[cfg(test)]
pub(crate) fn pos(p: i32, o: i64) -> Positions {
    [(p, o)].into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// First-seen offsets are kept relative to the generation's input start, in 32 bits; the
    /// ones that do not fit (before the start, or `UNKNOWN_OFFSET` or more after it) are stored
    /// as unknown rather than wrapped into a wrong offset. (Mutation testing found these edges
    /// unguarded.)
    #[test]
    fn first_seen_offsets_outside_32_bits_are_unknown_not_wrapped() {
        let g = Generation::new(1, 1_000, pos(0, 0), 0);
        let unknown = UNKNOWN_OFFSET as i64;
        let rows: [(Option<i64>, Option<i64>); 6] = [
            (Some(1_000), Some(1_000)),
            (Some(1_001), Some(1_001)),
            (Some(999), None),
            (Some(1_000 + unknown - 1), Some(1_000 + unknown - 1)),
            (Some(1_000 + unknown), None),
            (None, None),
        ];
        for (offset, want) in rows {
            assert_eq!(g.absolute_offset(g.relative_offset(offset)), want, "{offset:?}");
        }
    }

    /// A generation counts as stored only when the store holds exactly its current entries:
    /// never when nothing was written, and no longer once it took more.
    #[test]
    fn stored_means_the_store_holds_exactly_the_current_entries() {
        let mut gens = Generations::from_parts(vec![Generation::new(1, 0, pos(0, 0), 0)], 2);
        assert!(gens.current().is_empty());
        assert!(!gens.current().is_stored(), "empty, never written");
        gens.current().mark_stored();
        assert!(!gens.current().is_stored(), "an empty write stores nothing");
        gens.insert(1, Some(0));
        assert!(!gens.current().is_stored());
        gens.current().mark_stored();
        assert!(gens.current().is_stored());
        gens.insert(2, Some(1));
        assert!(!gens.current().is_stored(), "took an entry since");
        assert!(!gens.current().is_empty());
    }

    /// `from_parts` keeps the newest `keep` generations (current included), at least one.
    #[test]
    fn from_parts_keeps_the_newest_keep_generations() {
        let parts = || (1..=4).map(|e| Generation::new(e, 0, pos(0, 0), 0)).collect::<Vec<_>>();
        for (keep, want) in [
            (0, vec![4]),
            (1, vec![4]),
            (2, vec![3, 4]),
            (3, vec![2, 3, 4]),
            (9, vec![1, 2, 3, 4]),
        ] {
            let gens = Generations::from_parts(parts(), keep);
            assert_eq!(gens.iter().map(|g| g.epoch).collect::<Vec<_>>(), want, "keep {keep}");
        }
    }

    #[test]
    fn rotation_keeps_the_configured_number_of_generations() {
        let mut g = Generations::from_parts(vec![Generation::new(1, 0, pos(0, 0), 0)], 2);
        assert!(g.insert(10, Some(0)));
        assert!(!g.insert(10, Some(5)), "already held");
        assert_eq!(
            g.lookup(10),
            Some(Hit {
                age: 0,
                epoch: 1,
                first_offset: Some(0)
            })
        );
        g.rotate(1, pos(0, 1));
        assert!(g.insert(20, Some(7)));
        assert_eq!(
            g.lookup(10),
            Some(Hit {
                age: 1,
                epoch: 1,
                first_offset: Some(0)
            })
        );
        assert_eq!(
            g.lookup(20),
            Some(Hit {
                age: 0,
                epoch: 2,
                first_offset: Some(7)
            })
        );
        g.rotate(8, pos(0, 2));
        assert_eq!(
            g.lookup(10),
            None,
            "epoch 1 dropped after two rotations with generations = 2"
        );
        assert_eq!(g.lookup(20).map(|h| h.age), Some(1));
        assert_eq!(g.iter().count(), 2);
        assert_eq!(g.out_starts(), vec![pos(0, 1), pos(0, 2)]);
    }

    #[test]
    fn relearn_places_by_output_offset() {
        let gens = vec![
            Generation::new(4, 0, pos(0, 100), 0),
            Generation::new(5, 50, pos(0, 200), 0),
        ];
        let mut g = Generations::from_parts(gens, 3);
        assert!(g.relearn(1, 0, 150, None));
        assert!(g.relearn(2, 0, 250, None));
        assert!(!g.relearn(3, 0, 99, None));
        assert_eq!(g.lookup(1).map(|h| (h.age, h.first_offset)), Some((1, None)));
        assert_eq!(g.lookup(2).map(|h| h.age), Some(0));
        assert_eq!(g.lookup(3), None);
    }

    /// A fingerprint re-learned with the input offset its provenance names keeps it as its first
    /// offset, in whichever generation it lands; one before the generation's input start is
    /// unknown, as without provenance.
    #[test]
    fn relearn_keeps_the_input_offset_of_the_provenance() {
        let gens = vec![
            Generation::new(4, 0, pos(0, 100), 0),
            Generation::new(5, 50, pos(0, 200), 0),
        ];
        let mut g = Generations::from_parts(gens, 3);
        assert!(g.relearn(1, 0, 150, Some(30)));
        assert!(g.relearn(2, 0, 250, Some(70)));
        assert!(g.relearn(3, 0, 260, Some(20)));
        assert_eq!(g.lookup(1).map(|h| (h.age, h.first_offset)), Some((1, Some(30))));
        assert_eq!(g.lookup(2).map(|h| (h.age, h.first_offset)), Some((0, Some(70))));
        assert_eq!(g.lookup(3).map(|h| (h.age, h.first_offset)), Some((0, None)));
    }
}

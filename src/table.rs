//! `FingerprintTable`: the set of fingerprints of one generation, with the input offset where
//! each was first seen. The hot path does one lookup per live generation and one insert per
//! forwarded record.
//!
//! Ordered linear probing ("sorted clusters", Amble & Knuth 1974) in one array of 20-byte slots:
//! the fingerprint (u128, little-endian; 0 marks an empty slot) then the first-seen input offset
//! (u32, relative to the generation's first input offset), so a hit or an insert touches one
//! cache line. The home slot is `(hi64(fp) * capacity) >> 64` (Lemire's "fastrange"), which is
//! monotone in the fingerprint and needs no power-of-two capacity. Invariants: the occupied slots,
//! read left to right, hold strictly increasing fingerprints; each sits at or after its home slot
//! with no empty slot in between; the last slot is empty. Hence
//!
//! - a lookup scans from the home slot to the first slot holding a fingerprint >= the one sought
//!   (or an empty slot): about `(1 + 1/(1 - load)) / 2` slots whether the fingerprint is held or
//!   not (3 at the maximum load of 0.8; plain linear probing needs 13 to prove a miss there);
//! - an insert shifts the rest of its cluster right by one slot (a `memmove` of a few slots);
//! - growing is one sequential merge pass (slots are already in order), not a random rehash;
//! - there is no wrap-around: slots past the last home slot (a tail of `64 + capacity/1024`,
//!   extended if a cluster ever reaches the end) take the overflow of the last home slots.
//!
//! Memory: 20 bytes a slot. The table grows by 1.25x when the load would pass 0.8, so it holds
//! between 25 and 31.25 bytes a fingerprint (at most 20 x 1.25 / 0.8); a table pre-sized from the
//! previous generation (see [`FingerprintTable::with_capacity`]) sits near 28.
//!
//! Fingerprints are xxh3 output, uniformly distributed, so they are used as their own hash. The
//! one fingerprint equal to 0 is stored as 1 (a 2^-128 chance of merging two events).

/// Stored for a fingerprint whose first-seen input offset is unknown (re-learned from the
/// output topic during recovery) or does not fit 32 bits relative to the generation start.
pub const UNKNOWN_OFFSET: u32 = u32::MAX;

/// Maximum load factor, as a fraction: grow when `len > capacity * 4 / 5`.
const LOAD_NUM: usize = 4;
const LOAD_DEN: usize = 5;
/// Growth factor, as a fraction: 5/4 (bounds memory at 31.25 bytes a fingerprint, see above).
const GROW_NUM: usize = 5;
const GROW_DEN: usize = 4;
const MIN_CAPACITY: usize = 64;
/// Minimum number of overflow slots after the last home slot.
const MIN_TAIL: usize = 64;
/// Bytes of a slot: fingerprint (16) + offset (4).
const SLOT_BYTES: usize = 20;

/// One slot: fingerprint u128-le, then offset u32-le. All zero when empty (so a zeroed
/// allocation is an empty table, see `zeroed_slots`). A byte array: alignment 1, no padding.
type Slot = [u8; SLOT_BYTES];
const EMPTY: Slot = [0; SLOT_BYTES];

/// A set of 128-bit fingerprints with a 32-bit value each. Not thread-safe; one owner.
#[derive(Default)]
pub struct FingerprintTable {
    /// `capacity` home slots then the overflow tail; sorted by fingerprint, ignoring empty slots.
    slots: Vec<Slot>,
    /// Number of home slots: the range of home positions and the basis of the load factor.
    capacity: usize,
    /// Occupied slots.
    len: usize,
}

#[inline]
fn stored(fp: u128) -> u128 {
    if fp == 0 {
        1
    } else {
        fp
    }
}

#[inline]
fn key_of(slot: &Slot) -> u128 {
    u128::from_le_bytes(slot[..16].try_into().expect("16 bytes"))
}

#[inline]
fn offset_of(slot: &Slot) -> u32 {
    u32::from_le_bytes(slot[16..].try_into().expect("4 bytes"))
}

#[inline]
fn encode(key: u128, offset: u32) -> Slot {
    let mut s = EMPTY;
    s[..16].copy_from_slice(&key.to_le_bytes());
    s[16..].copy_from_slice(&offset.to_le_bytes());
    s
}

fn tail_for(capacity: usize) -> usize {
    MIN_TAIL + capacity / 1024
}

/// `home_slot(key, capacity)`: fastrange of the fingerprint's high 64 bits (monotone in `key`).
#[inline]
fn home_slot(key: u128, capacity: usize) -> usize {
    (((key >> 64) as u64 as u128 * capacity as u128) >> 64) as usize
}

/// `n` zeroed slots from `alloc_zeroed` (calloc), for a table made at once (a generation's
/// table at a rotation, a snapshot loaded): memory mimalloc takes fresh from the kernel is
/// mapped as it is first touched and costs no `memset`; memory it reuses it zeroes with one
/// (about 6-15 ms for the 200 MB of a 10M-fingerprint table, measured beside this change).
/// `vec![EMPTY; n]` would always `memset`: std only treats arrays of up to 16 elements as zero,
/// and a slot is 20 bytes. Then [`advise_huge_pages`]. ([`FingerprintTable::grow`] writes its
/// new slots itself.)
fn zeroed_slots(n: usize) -> Vec<Slot> {
    let layout = std::alloc::Layout::array::<Slot>(n).expect("table size fits the address space");
    if layout.size() == 0 {
        return Vec::new();
    }
    // SAFETY: `layout` has a non-zero size. The memory is zeroed, and an all-zero `[u8; 20]` is a
    // valid (empty) slot, so all `n` elements are initialized. `Vec::from_raw_parts` gets a pointer
    // from the global allocator with exactly the layout of `n` slots (size `20 n`, alignment 1),
    // length and capacity `n`, as it requires.
    let slots = unsafe {
        let p = std::alloc::alloc_zeroed(layout);
        if p.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        Vec::from_raw_parts(p.cast::<Slot>(), n, n)
    };
    advise_huge_pages(slots.as_ptr(), slots.len());
    slots
}

/// Asks Linux to back the `n` slots allocated at `slots` with transparent huge pages (2 MiB)
/// where it can (`madvise(MADV_HUGEPAGE)`; effective when
/// `/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` or `always`). A lookup is one
/// random access into a table of up to hundreds of MiB:
/// with 4 KiB pages nearly every one also misses the TLB, and the page walk (two-dimensional
/// under a hypervisor) costs about as much as the access itself (BENCHMARKS.md). A hint only:
/// contents and correctness are unaffected, and a failure is ignored.
fn advise_huge_pages(slots: *const Slot, n: usize) {
    #[cfg(target_os = "linux")]
    {
        const PAGE: usize = 4096;
        let bytes = n * SLOT_BYTES;
        if bytes < (2 << 20) {
            return;
        }
        let start = slots as usize;
        let first = (start + PAGE - 1) & !(PAGE - 1);
        let end = (start + bytes) & !(PAGE - 1);
        if end > first {
            // SAFETY: the range lies inside the allocation of `n` slots at `slots` (the caller's,
            // initialized or not); MADV_HUGEPAGE changes only how the kernel backs it, never
            // its contents.
            unsafe {
                libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_HUGEPAGE);
            }
        }
    }
}

impl FingerprintTable {
    /// An empty table that holds `expected` fingerprints without growing. Allocates about
    /// `20 * expected * 5/4` bytes (at least 64 home slots), mapped by the kernel as it is used.
    pub fn with_capacity(expected: usize) -> Self {
        let capacity = (expected.saturating_mul(LOAD_DEN) / LOAD_NUM + 1).max(MIN_CAPACITY);
        FingerprintTable {
            slots: zeroed_slots(capacity + tail_for(capacity)),
            capacity,
            len: 0,
        }
    }

    /// An empty table that holds `held` fingerprints and then a quarter more without growing:
    /// the capacity its first growth would give a table of `held` at full load (`20 * held *
    /// 25/16` bytes, about 31 a fingerprint while `held` are in it). For a generation loaded
    /// from the store that takes inserts at once (the current one): it skips that growth, which
    /// holds the old and the new slots at once and copies every entry.
    pub fn with_room_to_grow(held: usize) -> Self {
        Self::with_capacity(held.saturating_mul(GROW_NUM) / GROW_DEN)
    }

    /// Number of fingerprints held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no fingerprint is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of home slots (the table grows when `len` would pass 0.8 of it).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Heap bytes held by the table (20 a slot, home slots and tail).
    pub fn heap_bytes(&self) -> usize {
        self.slots.capacity() * SLOT_BYTES
    }

    #[inline]
    fn key_at(&self, i: usize) -> u128 {
        key_of(&self.slots[i])
    }

    /// The slot holding `key`, or the slot where it belongs (empty, or holding a larger key).
    /// The table must have slots.
    #[inline]
    fn find(&self, key: u128) -> (usize, bool) {
        let mut i = home_slot(key, self.capacity);
        loop {
            // Terminates: the last slot is always empty.
            let k = self.key_at(i);
            if k == key {
                return (i, true);
            }
            if k == 0 || k > key {
                return (i, false);
            }
            i += 1;
        }
    }

    /// Starts loading the cache line of `fp`'s home slot and the line after it, so that a
    /// lookup issued shortly after (in this or another table) overlaps its memory latency with
    /// others. Two lines: a probe scans about 3 slots (60 bytes) from the home slot, and an
    /// insert to the end of the cluster, so it often crosses into the next line (measured:
    /// `generations/miss_insert_batched/10M` 371 ns with one line, 278 ns with two, 395 ns with
    /// four). A hint only.
    #[inline]
    pub fn prefetch(&self, fp: u128) {
        if self.capacity == 0 {
            return;
        }
        let i = home_slot(stored(fp), self.capacity);
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `i` < capacity <= slots.len(), so the first pointer is inside the allocation
        // and the second is computed with `wrapping_add` (no provenance requirement); a prefetch
        // never faults and has no architectural effect.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            let p = self.slots.as_ptr().add(i) as *const i8;
            _mm_prefetch::<_MM_HINT_T0>(p);
            _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(64));
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = i;
    }

    /// The value stored with `fp`, if held.
    #[inline]
    pub fn get(&self, fp: u128) -> Option<u32> {
        if self.capacity == 0 {
            return None;
        }
        let (i, found) = self.find(stored(fp));
        found.then(|| offset_of(&self.slots[i]))
    }

    /// True if `fp` is held.
    #[inline]
    pub fn contains(&self, fp: u128) -> bool {
        self.get(fp).is_some()
    }

    /// Inserts `fp` with `offset` unless it is already held (the first value is kept).
    /// Returns true if it was new. Grows by 1.25x past the load factor.
    #[inline]
    pub fn insert(&mut self, fp: u128, offset: u32) -> bool {
        if (self.len + 1) * LOAD_DEN > self.capacity * LOAD_NUM {
            self.grow();
        }
        let key = stored(fp);
        let (i, found) = self.find(key);
        if found {
            return false;
        }
        if self.key_at(i) != 0 {
            // Make room: shift the rest of the cluster right by one slot.
            let mut j = i + 1;
            while self.key_at(j) != 0 {
                j += 1;
            }
            if j + 1 == self.slots.len() {
                self.extend_tail();
            }
            self.slots.copy_within(i..j, i + 1);
        }
        self.slots[i] = encode(key, offset);
        self.len += 1;
        true
    }

    /// A cluster reached the last slot: add overflow slots (keeps the last slot empty).
    #[cold]
    fn extend_tail(&mut self) {
        let n = self.slots.len() + tail_for(self.capacity);
        self.slots.resize(n, EMPTY);
    }

    /// Moves the entries into `capacity * 5/4` home slots (and their tail) in one sequential
    /// pass: the old slots are in fingerprint order, so each goes to its home slot or right
    /// after the previous one, and every slot of the new array is written once, in order, with
    /// an entry or empty. Nothing is zeroed beforehand: a zeroed allocation costs mimalloc a
    /// `memset` of memory it reuses (the growth series frees each table after the next is
    /// allocated), which was three quarters of a growth's instructions
    /// (`scripts/bench.sh --callgrind`, BENCHMARKS.md). A table grows from empty in a
    /// partition's first generation; a later generation is sized at rotation for 1.125x its
    /// predecessor's count (`Generations::rotate`, [`Self::with_capacity`]) and grows only when
    /// it takes more than that.
    #[cold]
    fn grow(&mut self) {
        let capacity = (self.capacity * GROW_NUM / GROW_DEN).max(MIN_CAPACITY);
        let tail = tail_for(capacity);
        let mut slots: Vec<Slot> = Vec::with_capacity(capacity + tail);
        advise_huge_pages(slots.as_ptr(), slots.capacity());
        for slot in &self.slots {
            let key = key_of(slot);
            if key == 0 {
                continue;
            }
            // The empty slots before its home, one push each: a gap is mostly 0 to 2 slots, for
            // which `resize` (a call and its checks per entry) cost about twice the loop.
            let home = home_slot(key, capacity);
            while slots.len() < home {
                slots.push(EMPTY);
            }
            slots.push(*slot);
        }
        // The tail keeps the last slot empty: extended as `extend_tail` would have.
        let mut len = capacity + tail;
        while len < slots.len() + 1 {
            len += tail;
        }
        slots.resize(len, EMPTY);
        self.slots = slots;
        self.capacity = capacity;
    }

    /// Every (fingerprint, value) held, in increasing fingerprint order.
    pub fn iter(&self) -> impl Iterator<Item = (u128, u32)> + '_ {
        self.slots
            .iter()
            .map(|s| (key_of(s), offset_of(s)))
            .filter(|(k, _)| *k != 0)
    }
}

impl Clone for FingerprintTable {
    /// A copy in a fresh `zeroed_slots` allocation (so it gets huge pages too).
    fn clone(&self) -> Self {
        let mut slots = zeroed_slots(self.slots.len());
        slots.copy_from_slice(&self.slots);
        FingerprintTable {
            slots,
            capacity: self.capacity,
            len: self.len,
        }
    }
}

impl std::fmt::Debug for FingerprintTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FingerprintTable")
            .field("len", &self.len)
            .field("capacity", &self.capacity)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn grows_and_keeps_first_value() {
        let mut t = FingerprintTable::default();
        assert_eq!(t.get(5), None);
        for i in 0..10_000u128 {
            assert!(t.insert(i.wrapping_mul(0x9e3779b97f4a7c15_f39cc0605cedc835), i as u32));
        }
        assert_eq!(t.len(), 10_000);
        assert!(!t.insert(0, 99), "0 was inserted first as i = 0");
        assert_eq!(t.get(0), Some(0));
        for i in 0..10_000u128 {
            assert_eq!(
                t.get(i.wrapping_mul(0x9e3779b97f4a7c15_f39cc0605cedc835)),
                Some(i as u32)
            );
        }
        assert!(t.len() * 5 <= t.capacity() * 4);
    }

    #[test]
    fn presized_table_does_not_grow() {
        let mut t = FingerprintTable::with_capacity(1000);
        let cap = t.capacity();
        for i in 1..=1000u128 {
            t.insert(i << 64 | i, 0);
        }
        assert_eq!(t.capacity(), cap);
    }

    /// The layout invariants: fingerprints strictly increasing over occupied slots, each at or
    /// after its home slot with no empty slot in between, the last slot empty.
    fn check_invariants(t: &FingerprintTable) {
        if t.slots.is_empty() {
            // A default table before its first insert: no slots at all.
            assert_eq!((t.len(), t.capacity()), (0, 0));
            return;
        }
        let mut prev = 0u128;
        let mut run_start = 0usize;
        for (i, s) in t.slots.iter().enumerate() {
            let k = key_of(s);
            if k == 0 {
                run_start = i + 1;
                continue;
            }
            assert!(k > prev, "slot {i}: not in order");
            prev = k;
            let home = home_slot(k, t.capacity);
            assert!(
                home <= i && home >= run_start,
                "slot {i}: home {home}, cluster from {run_start}"
            );
        }
        assert_eq!(key_of(t.slots.last().expect("slots")), 0, "last slot empty");
        assert_eq!(t.iter().count(), t.len());
    }

    #[test]
    fn clusters_at_the_end_extend_the_tail() {
        // Every fingerprint homes in the last home slot: the overflow tail must grow.
        let mut t = FingerprintTable::with_capacity(1000);
        let cap = t.capacity();
        for i in 1..=300u128 {
            assert!(t.insert(u128::MAX - i, i as u32));
        }
        assert_eq!(t.capacity(), cap, "no growth: 300 is below the load factor");
        check_invariants(&t);
        for i in 1..=300u128 {
            assert_eq!(t.get(u128::MAX - i), Some(i as u32));
        }
        // and growth keeps them reachable
        for i in 0..2000u128 {
            t.insert(i.wrapping_mul(0x9e3779b97f4a7c15_f39cc0605cedc835) | 1, 0);
        }
        check_invariants(&t);
        for i in 1..=300u128 {
            assert_eq!(t.get(u128::MAX - i), Some(i as u32));
        }
    }

    #[test]
    fn growth_bounds_memory_per_fingerprint() {
        let mut t = FingerprintTable::default();
        for i in 1..=200_000u128 {
            t.insert(i.wrapping_mul(0x9e3779b97f4a7c15_f39cc0605cedc835), 0);
            if i % 997 == 0 {
                // 20 bytes a slot, load between 0.8 / 1.25 and 0.8, plus the tail.
                let per = (t.capacity() * SLOT_BYTES) as f64 / t.len() as f64;
                assert!(
                    t.len() < 1000 || per <= 31.3,
                    "{per} bytes a fingerprint at {}",
                    t.len()
                );
            }
        }
        check_invariants(&t);
    }

    proptest! {
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec((any::<u128>(), any::<u32>()), 0..2000)) {
            let mut t = FingerprintTable::default();
            let mut m: HashMap<u128, u32> = HashMap::new();
            for (fp, off) in &ops {
                let new = !m.contains_key(&stored(*fp));
                m.entry(stored(*fp)).or_insert(*off);
                prop_assert_eq!(t.insert(*fp, *off), new);
            }
            prop_assert_eq!(t.len(), m.len());
            for (fp, _) in &ops {
                prop_assert_eq!(t.get(*fp), m.get(&stored(*fp)).copied());
            }
            check_invariants(&t);
            let all: Vec<_> = t.iter().collect();
            let mut expect: Vec<_> = m.into_iter().collect();
            expect.sort();
            prop_assert_eq!(all, expect);
        }
    }
}

#![allow(dead_code)]
//! BASELINE COPY for side-by-side benchmarks: the table as it was before issue 6 (commit 6989a0c,
//! `src/table.rs`), linear probing without ordering. Not used by the crate.
//!
//! `FingerprintTable`: the set of fingerprints of one generation, with the input offset where
//! each was first seen. The hot path does one lookup per generation and one insert per record.
//!
//! Open addressing with linear probing over two parallel arrays (structure of arrays):
//! `keys: [u128]` (16 bytes a slot, 0 marks an empty slot) and `offsets: [u32]` (4 bytes a slot,
//! the first-seen input offset relative to the generation's first input offset). 20 bytes a slot;
//! at the maximum load factor of 0.8 that is 25 bytes a fingerprint, at the minimum (just after a
//! growth by 1.5x) 37.5. The home slot is `(hi64(fp) * capacity) >> 64` (Lemire's "fastrange"),
//! which needs no power-of-two capacity, so the table can grow by 1.5x and be sized exactly from
//! the previous generation's count (see [`FingerprintTable::with_capacity`]).
//!
//! Fingerprints are xxh3 output, uniformly distributed, so they are used as their own hash. The
//! one fingerprint equal to 0 is stored as 1 (a 2^-128 chance of merging two events).

/// Stored for a fingerprint whose first-seen input offset is unknown (re-learned from the
/// output topic during recovery) or does not fit 32 bits relative to the generation start.
pub const UNKNOWN_OFFSET: u32 = u32::MAX;

/// Maximum load factor, as a fraction: grow when `len > capacity * 4 / 5`.
const LOAD_NUM: usize = 4;
const LOAD_DEN: usize = 5;
const MIN_CAPACITY: usize = 64;

/// A set of 128-bit fingerprints with a 32-bit value each. Not thread-safe; one owner.
#[derive(Clone, Default)]
pub struct FingerprintTable {
    /// Slot keys; 0 is an empty slot.
    keys: Vec<u128>,
    /// Slot values, parallel to `keys`.
    offsets: Vec<u32>,
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

impl FingerprintTable {
    /// An empty table that holds `expected` fingerprints without growing. Allocates
    /// `20 * expected * 5/4` bytes (at least 64 slots).
    pub fn with_capacity(expected: usize) -> Self {
        let capacity = (expected.saturating_mul(LOAD_DEN) / LOAD_NUM + 1).max(MIN_CAPACITY);
        FingerprintTable {
            keys: vec![0; capacity],
            offsets: vec![0; capacity],
            len: 0,
        }
    }

    /// Number of fingerprints held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no fingerprint is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of slots.
    pub fn capacity(&self) -> usize {
        self.keys.len()
    }

    /// Heap bytes held by the table (both arrays).
    pub fn heap_bytes(&self) -> usize {
        self.keys.capacity() * 16 + self.offsets.capacity() * 4
    }

    #[inline]
    fn home(&self, key: u128) -> usize {
        (((key >> 64) as u64 as u128 * self.keys.len() as u128) >> 64) as usize
    }

    /// The slot holding `key`, or the empty slot where it would go.
    #[inline]
    fn find(&self, key: u128) -> (usize, bool) {
        let cap = self.keys.len();
        let mut i = self.home(key);
        loop {
            // SAFETY-free bounds: i < cap always.
            let k = self.keys[i];
            if k == key {
                return (i, true);
            }
            if k == 0 {
                return (i, false);
            }
            i += 1;
            if i == cap {
                i = 0;
            }
        }
    }

    /// The value stored with `fp`, if held.
    #[inline]
    pub fn get(&self, fp: u128) -> Option<u32> {
        if self.keys.is_empty() {
            return None;
        }
        let (i, found) = self.find(stored(fp));
        found.then(|| self.offsets[i])
    }

    /// True if `fp` is held.
    #[inline]
    pub fn contains(&self, fp: u128) -> bool {
        self.get(fp).is_some()
    }

    /// Inserts `fp` with `offset` unless it is already held (the first value is kept).
    /// Returns true if it was new. Grows by 1.5x past the load factor.
    #[inline]
    pub fn insert(&mut self, fp: u128, offset: u32) -> bool {
        if (self.len + 1) * LOAD_DEN > self.keys.len() * LOAD_NUM {
            self.grow();
        }
        let key = stored(fp);
        let (i, found) = self.find(key);
        if found {
            return false;
        }
        self.keys[i] = key;
        self.offsets[i] = offset;
        self.len += 1;
        true
    }

    fn grow(&mut self) {
        let new_cap = (self.keys.len() + self.keys.len() / 2).max(MIN_CAPACITY);
        let old_keys = std::mem::replace(&mut self.keys, vec![0; new_cap]);
        let old_offsets = std::mem::replace(&mut self.offsets, vec![0; new_cap]);
        for (k, o) in old_keys.into_iter().zip(old_offsets) {
            if k != 0 {
                let (i, _) = self.find(k);
                self.keys[i] = k;
                self.offsets[i] = o;
            }
        }
    }

    /// Every (fingerprint, value) held, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u128, u32)> + '_ {
        self.keys
            .iter()
            .zip(self.offsets.iter())
            .filter(|(k, _)| **k != 0)
            .map(|(k, o)| (*k, *o))
    }
}

impl std::fmt::Debug for FingerprintTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FingerprintTable")
            .field("len", &self.len)
            .field("capacity", &self.keys.len())
            .finish()
    }
}

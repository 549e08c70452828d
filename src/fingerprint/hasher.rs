//! The hasher the fingerprints are computed with: xxh3-128 over the canonical encoding, fed in
//! pieces (a tag byte, a length, the bytes).
//!
//! xxh3's streaming form (`Xxh3Default`) and its one-shot form (`xxh3_128`) give the same digest
//! for the same bytes, however they are split. Streaming pays for each piece (a call, a copy
//! into its 256-byte buffer, the bookkeeping of stripes) and for its digest: the fingerprint of
//! a 100-byte value (`source = "value"`, four pieces) took about 460 instructions streamed and
//! takes about 285 gathered and hashed in one shot (callgrind, `scripts/bench.sh --callgrind`:
//! BENCHMARKS.md).
//! So the encoding is gathered in a stack buffer of [`INLINE`] bytes and hashed in one shot; an
//! encoding that outgrows it goes on streaming from there, as before. Either way the
//! fingerprint is the same (tests below, and
//! `fingerprint::tests::long_values_keep_their_fingerprints`).

use std::mem::MaybeUninit;

use xxhash_rust::xxh3::{xxh3_128, Xxh3Default};

/// Bytes of canonical encoding hashed in one shot: a value or key of up to 1,030 bytes (plus its
/// tag, presence byte and length: the benchmarks' 1 KB records), a JSON id, a composite's part
/// fingerprints. Left uninitialized (zeroing it would cost more than the hash of a short value).
pub(super) const INLINE: usize = 1040;

/// xxh3-128 of the bytes given to [`Hasher::update`], in order. `repr(C)`, `buf` last: in the
/// order Rust chose (`buf`, then the zeroed `len`), LLVM merged the two into one `memset` of the
/// whole kilobyte a record (seen in the disassembly: uninitialized bytes may be given any value).
#[repr(C)]
pub(super) struct Hasher {
    /// Set once the encoding outgrows `buf` (which it was given first).
    stream: Option<Xxh3Default>,
    len: usize,
    /// The first `len` bytes are written.
    buf: MaybeUninit<[u8; INLINE]>,
}

impl Hasher {
    #[inline]
    pub(super) fn new() -> Self {
        Hasher {
            stream: None,
            len: 0,
            buf: MaybeUninit::uninit(),
        }
    }

    #[inline]
    pub(super) fn update(&mut self, bytes: &[u8]) {
        if let Some(s) = &mut self.stream {
            s.update(bytes);
        } else if bytes.len() <= INLINE - self.len {
            // SAFETY: `len + bytes.len() <= INLINE`: the copy stays inside `buf`, which does not
            // overlap `bytes` (borrowed apart from `self`).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.buf.as_mut_ptr().cast::<u8>().add(self.len),
                    bytes.len(),
                );
            }
            self.len += bytes.len();
        } else {
            let mut s = Xxh3Default::new();
            s.update(self.gathered());
            s.update(bytes);
            self.stream = Some(s);
        }
    }

    #[inline]
    pub(super) fn digest128(&self) -> u128 {
        match &self.stream {
            Some(s) => s.digest128(),
            None => xxh3_128(self.gathered()),
        }
    }

    /// The bytes gathered in `buf`.
    fn gathered(&self) -> &[u8] {
        // SAFETY: `update` wrote the first `len` bytes of `buf` (and `len <= INLINE`).
        unsafe { std::slice::from_raw_parts(self.buf.as_ptr().cast::<u8>(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        /// Any bytes, cut into any pieces: the digest of the streaming form over the same pieces.
        #[test]
        fn the_digest_is_xxh3_of_the_bytes_however_they_are_cut(
            bytes in proptest::collection::vec(any::<u8>(), 0..3 * INLINE),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..6),
        ) {
            let mut at: Vec<usize> = cuts.iter().map(|c| c.index(bytes.len() + 1)).collect();
            at.push(0);
            at.push(bytes.len());
            at.sort_unstable();
            let (mut h, mut reference) = (Hasher::new(), Xxh3Default::new());
            for w in at.windows(2) {
                h.update(&bytes[w[0]..w[1]]);
                reference.update(&bytes[w[0]..w[1]]);
            }
            prop_assert_eq!(h.digest128(), reference.digest128());
            prop_assert_eq!(h.digest128(), xxh3_128(&bytes));
        }
    }

    /// The lengths around the buffer's end, piece by piece as a `value` source feeds them.
    #[test]
    fn the_buffers_end_is_seamless() {
        for n in INLINE - 12..INLINE + 12 {
            let bytes: Vec<u8> = (0..n).map(|i| i as u8).collect();
            let mut h = Hasher::new();
            h.update(&[1]);
            h.update(&[1]);
            h.update(&(n as u64).to_le_bytes());
            h.update(&bytes);
            let whole = [&[1u8, 1][..], &(n as u64).to_le_bytes(), &bytes].concat();
            assert_eq!(h.digest128(), xxh3_128(&whole), "{n}");
        }
    }
}

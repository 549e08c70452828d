//! Helpers shared by the benchmarks (`#[path]`-included; each bench is its own crate).
#![allow(dead_code)]

use kafka_dedup::generations::{Generation, Generations, Positions};
use kafka_dedup::table::FingerprintTable;

/// splitmix64: a fast, well-mixed sequence, so fingerprints look like xxh3 output.
#[inline]
pub fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The `i`-th fingerprint of stream `stream` (distinct streams never collide in practice).
#[inline]
pub fn fp(stream: u64, i: u64) -> u128 {
    let a = mix(i ^ stream.rotate_left(32));
    let b = mix(a ^ 0x5555_5555_5555_5555 ^ stream);
    ((a as u128) << 64) | b as u128
}

/// A table holding fingerprints `0..n` of `stream`, pre-sized the way
/// [`Generations::rotate`] sizes a new generation (the previous count + 1/8), i.e. the steady
/// state of a stream with a constant rate.
pub fn table(stream: u64, n: u64) -> FingerprintTable {
    let mut t = FingerprintTable::with_capacity((n + n / 8) as usize);
    for i in 0..n {
        t.insert(fp(stream, i), i as u32);
    }
    t
}

/// Empty output positions (generations that start at output offset 0 of partition 0).
pub fn positions() -> Positions {
    [(0, 0)].into_iter().collect()
}

/// A generation of epoch `epoch` holding `table`.
pub fn generation(epoch: u64, table: FingerprintTable) -> Generation {
    let mut g = Generation::new(epoch, 0, positions(), 0);
    g.table = table;
    g
}

/// Two live generations (`checkpoint.generations = 2`): a frozen one holding `n - n/2`
/// fingerprints of stream 1 and the current one holding `n/2` of stream 2, pre-sized from the
/// frozen one's count as a rotation does.
pub fn generations(n: u64) -> Generations {
    let frozen = generation(1, table(1, n - n / 2));
    let current = generation(2, table(2, n / 2));
    Generations::from_parts(vec![frozen, current], 2)
}

/// Resident set size of this process in bytes (`/proc/self/statm`, field 2 x page size).
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// Peak resident set size of this process in bytes (`VmHWM` in `/proc/self/status`).
pub fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

//! Generation lookup + insert on one core, with 1M and 10M fingerprints held.
//!
//! - `table/hit/N`: [`FingerprintTable::get`] of a held fingerprint (random order) in one table
//!   of N;
//! - `table/miss_insert/N`: `get` of a new fingerprint, then [`FingerprintTable::insert`];
//! - `generations/hit/N`, `generations/miss_insert/N`: what the pipeline does per record,
//!   [`Generations::lookup`] (then [`Generations::insert`] on a miss), with N held in two live
//!   generations (`checkpoint.generations = 2`: N/2 frozen, N/2 current);
//! - `generations/miss_insert_batched/N`: the same, the way the pipeline runs it over a polled
//!   batch of `pipeline::BATCH` records: [`Generations::prefetch`] of every fingerprint in the
//!   batch, then lookup (and insert) of each.
//!
//! `table_v0/...` runs the same table benchmarks on the table as it was before issue 6 (plain
//! linear probing over two arrays, `benches/support/table_v0.rs`), side by side.
//!
//! Tables are pre-sized as a rotation sizes them (previous count + 1/8), so the load factor is
//! the steady state's (~0.71 at the start). Miss benchmarks insert at most the headroom left
//! before the table would grow, then restore the table (not timed), so a sample never includes a
//! rehash of millions. One element = one record's work. `cargo bench --bench table`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
use kafka_dedup::generations::Generations;
use kafka_dedup::table::FingerprintTable;

#[path = "support/mod.rs"]
mod support;
#[path = "support/table_v0.rs"]
mod table_v0;
use kafka_dedup::pipeline::BATCH;
use support::{fp, generation, mix};

/// The operations the table benchmarks use, for the current table and the baseline.
trait Table: Clone {
    fn with_capacity(expected: usize) -> Self;
    fn get(&self, fp: u128) -> Option<u32>;
    fn insert(&mut self, fp: u128, offset: u32) -> bool;
    fn capacity(&self) -> usize;
    fn len(&self) -> usize;
}

macro_rules! impl_table {
    ($t:ty) => {
        impl Table for $t {
            fn with_capacity(expected: usize) -> Self {
                <$t>::with_capacity(expected)
            }
            #[inline]
            fn get(&self, fp: u128) -> Option<u32> {
                <$t>::get(self, fp)
            }
            #[inline]
            fn insert(&mut self, fp: u128, offset: u32) -> bool {
                <$t>::insert(self, fp, offset)
            }
            fn capacity(&self) -> usize {
                <$t>::capacity(self)
            }
            fn len(&self) -> usize {
                <$t>::len(self)
            }
        }
    };
}
impl_table!(FingerprintTable);
impl_table!(table_v0::FingerprintTable);

/// Fingerprints `0..n` of `stream`, pre-sized as a rotation does (see `support::table`).
fn filled<T: Table>(stream: u64, n: u64) -> T {
    let mut t = T::with_capacity((n + n / 8) as usize);
    for i in 0..n {
        t.insert(fp(stream, i), i as u32);
    }
    t
}

const SIZES: [(u64, &str); 2] = [(1_000_000, "1M"), (10_000_000, "10M")];

/// `hit` and `miss_insert` on one table of each size, under `name`.
fn table_ops<T: Table>(c: &mut Criterion, name: &str) {
    let mut group = c.benchmark_group(name);
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(1));
    for (n, label) in SIZES {
        let pristine: T = filled(1, n);
        group.bench_function(BenchmarkId::new("hit", label), |b| {
            let mut i = 0u64;
            b.iter(|| {
                i += 1;
                let key = fp(1, mix(i) % n);
                black_box(pristine.get(black_box(key)))
            })
        });
        // Inserts allowed before the table would grow: capacity * 0.8 - len.
        let headroom = (pristine.capacity() * 4 / 5 - pristine.len()) as u64;
        let mut t = pristine.clone();
        let mut inserted = 0u64;
        let mut next = 0u64;
        group.bench_function(BenchmarkId::new("miss_insert", label), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    if inserted >= headroom {
                        t.clone_from(&pristine);
                        inserted = 0;
                    }
                    let chunk = left.min(headroom - inserted);
                    let start = Instant::now();
                    for _ in 0..chunk {
                        next += 1;
                        let key = fp(99, next);
                        if t.get(black_box(key)).is_none() {
                            t.insert(key, next as u32);
                        }
                    }
                    total += start.elapsed();
                    inserted += chunk;
                    left -= chunk;
                }
                total
            })
        });
    }
    group.finish();
}

fn table_bench(c: &mut Criterion) {
    table_ops::<FingerprintTable>(c, "table");
    table_ops::<table_v0::FingerprintTable>(c, "table_v0");
}

fn generations_bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("generations");
    group.sampling_mode(SamplingMode::Flat);
    group.throughput(Throughput::Elements(1));
    for (n, label) in SIZES {
        let mut gens = support::generations(n);
        group.bench_function(BenchmarkId::new("hit", label), |b| {
            let mut i = 0u64;
            b.iter(|| {
                i += 1;
                let r = mix(i);
                // Half the hits in each generation, as replays of both intervals.
                let key = if r & 1 == 0 {
                    fp(1, r % (n - n / 2))
                } else {
                    fp(2, r % (n / 2))
                };
                black_box(gens.lookup(black_box(key)))
            })
        });
        let current = gens.current().table.clone();
        let headroom = (current.capacity() * 4 / 5 - current.len()) as u64;
        let mut inserted = 0u64;
        let mut next = 0u64;
        // One record at a time, and the pipeline's way (`pipeline::BATCH`): the fingerprints of
        // a polled batch are prefetched first, then each is looked up (and inserted), so the
        // cache misses overlap.
        for (name, batch) in [("miss_insert", 1), ("miss_insert_batched", BATCH as u64)] {
            group.bench_function(BenchmarkId::new(name, label), |b| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    let mut left = iters;
                    let mut keys = Vec::with_capacity(batch as usize);
                    while left > 0 {
                        if inserted + batch > headroom {
                            gens = restore(std::mem::replace(&mut gens, support::generations(2)), &current);
                            inserted = 0;
                        }
                        let chunk = left.min(headroom - inserted);
                        let start = Instant::now();
                        let mut done = 0;
                        while done < chunk {
                            keys.clear();
                            keys.extend((0..(chunk - done).min(batch)).map(|_| {
                                next += 1;
                                (fp(99, next), next as i64)
                            }));
                            if batch > 1 {
                                for &(key, _) in &keys {
                                    gens.prefetch(black_box(key));
                                }
                            }
                            for &(key, offset) in &keys {
                                if gens.lookup(black_box(key)).is_none() {
                                    gens.insert(key, Some(offset));
                                }
                            }
                            done += keys.len() as u64;
                        }
                        total += start.elapsed();
                        inserted += chunk;
                        left -= chunk;
                    }
                    total
                })
            });
        }
    }
    group.finish();
}

/// `gens` with its current generation replaced by a copy of `current` (the frozen one kept).
fn restore(gens: Generations, current: &FingerprintTable) -> Generations {
    let frozen = gens.frozen().next().cloned().expect("one frozen generation");
    drop(gens);
    let frozen = std::sync::Arc::try_unwrap(frozen).expect("sole owner");
    Generations::from_parts(vec![frozen, generation(2, current.clone())], 2)
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).measurement_time(Duration::from_secs(3))
        .warm_up_time(Duration::from_millis(500));
    targets = table_bench, generations_bench
}
criterion_main!(benches);

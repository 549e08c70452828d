//! Checkpoint persist and rotate, with 100k and 1M new fingerprints.
//!
//! - `checkpoint/persist/N`: [`Store::save`] of one partition in the steady state of
//!   `checkpoint.generations = 2`: the generation frozen at the previous checkpoint is already
//!   stored (skipped), the one frozen now holds N new fingerprints (written: N/4,096 chunks of
//!   80 KiB in one sled batch, then a flush), the generation that left the horizon is removed,
//!   and the snapshot is rewritten. The store lives in a temporary directory (the system's temp
//!   file system, usually the same disk as a deployment's store); each sample is one checkpoint.
//! - `checkpoint/rotate/N`: [`Generations::rotate`] of a current generation holding N (allocates
//!   the next, pre-sized table), as the poll thread does at the start of a checkpoint.
//!
//! `cargo bench --bench checkpoint`; BENCHMARKS.md.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
use kafka_dedup::generations::{Generation, Generations};
use kafka_dedup::store::{Identity, PartitionWrite, Store};

#[path = "support/mod.rs"]
mod support;
use support::{generation, positions, table};

fn identity() -> Identity {
    Identity {
        group_id: "bench".into(),
        input_topic: "in".into(),
        output_topic: "out".into(),
        source: "value".into(),
    }
}

fn write<'a>(epoch: u64, gens: Vec<&'a Generation>) -> PartitionWrite<'a> {
    PartitionWrite {
        partition: 0,
        epoch,
        ckpt: format!("ckpt-{epoch}"),
        committed_offset: epoch as i64 * 1_000_000,
        out_covered: positions(),
        generations: gens,
        clean: false,
        clock: None,
    }
}

fn checkpoint(c: &mut Criterion) {
    let mut group = c.benchmark_group("checkpoint");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    for (n, label) in [(100_000u64, "100k"), (1_000_000, "1M")] {
        let dir = tempfile::tempdir().expect("temp dir");
        let (store, _) = Store::open_for_run(&dir.path().join("store"), &identity()).expect("store opens");
        let content = table(3, n);
        // The generation frozen at the previous checkpoint, stored by it.
        let mut previous = Arc::new(generation(1, content.clone()));
        store
            .save(&[write(
                2,
                vec![previous.as_ref(), &Generation::new(2, 0, positions(), 0)],
            )])
            .expect("first save");
        let mut epoch = 2u64;
        group.throughput(Throughput::Elements(n));
        group.bench_function(BenchmarkId::new("persist", label), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    // Not timed: the generation frozen now (new epoch, new content for sled).
                    let frozen = Arc::new(generation(epoch, table(epoch + 10, n)));
                    let current = Generation::new(epoch + 1, 0, positions(), 0);
                    let w = write(epoch + 1, vec![previous.as_ref(), frozen.as_ref(), &current]);
                    let start = Instant::now();
                    store.save(&[w]).expect("save");
                    total += start.elapsed();
                    previous = frozen;
                    epoch += 1;
                }
                total
            })
        });
        drop(content);
        group.bench_function(BenchmarkId::new("rotate", label), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut gens = Generations::from_parts(vec![generation(1, table(4, n))], 2);
                    let start = Instant::now();
                    let frozen = gens.rotate(n as i64, positions());
                    total += start.elapsed();
                    drop((frozen, gens));
                }
                total
            })
        });
        drop(store);
    }
    group.finish();
}

criterion_group!(benches, checkpoint);
criterion_main!(benches);

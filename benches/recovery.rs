//! Recovery re-learning: what the recovery scan does per output record it re-reads, without
//! the broker: fingerprint the record ([`Fingerprinter::fingerprint`], source `value`) and
//! [`Generations::relearn`] it into the generation whose output range holds it.
//!
//! `recovery/relearn/SIZE`: 1M distinct records of SIZE bytes re-learned into the generations
//! of a rebuild (two live generations, empty, starting at output offsets 0 and 500,000; tables
//! grow from empty as in a rebuild). One sample is a whole re-read of 1M; the figure is records
//! per second. The re-read from a broker is measured end to end by `benches/e2e.rs`
//! (`recovery` line). `cargo bench --bench recovery`; BENCHMARKS.md.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput};
use kafka_dedup::fingerprint::{Fingerprinter, OwnedRecord, Source};
use kafka_dedup::generations::{Generation, Generations};

const RECORDS: u64 = 1_000_000;

fn relearn(c: &mut Criterion) {
    let mut group = c.benchmark_group("recovery");
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(RECORDS));
    let f = Fingerprinter::new(Source::Value);
    for size in [100usize, 1024] {
        let mut record = OwnedRecord {
            key: Some(b"user-00000000042".to_vec()),
            value: Some(vec![b'x'; size - 16]),
            headers: Vec::new(),
        };
        group.bench_function(BenchmarkId::new("relearn", size), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut gens = Generations::from_parts(
                        vec![
                            Generation::new(1, 0, [(0, 0)].into_iter().collect(), 0),
                            Generation::new(2, 0, [(0, RECORDS as i64 / 2)].into_iter().collect(), 0),
                        ],
                        2,
                    );
                    let start = Instant::now();
                    for o in 0..RECORDS {
                        // A distinct record per offset: its number in the first 8 value bytes.
                        let v = record.value.as_mut().expect("value");
                        v[..8].copy_from_slice(&o.to_le_bytes());
                        let fp = f.fingerprint(&record).expect("value present");
                        black_box(gens.relearn(fp.0, 0, o as i64, Some(o as i64)));
                    }
                    total += start.elapsed();
                    assert_eq!(gens.total_len() as u64, RECORDS);
                }
                total
            })
        });
    }
    group.finish();
}

criterion_group!(benches, relearn);
criterion_main!(benches);

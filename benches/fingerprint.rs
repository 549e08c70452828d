//! Fingerprinting one record, per source (`fingerprint.source`), for 100-byte and 1 KiB records.
//!
//! A record is a 16-byte key, a JSON value padded to the record size (minus key and headers),
//! and two headers (`trace`, 16 bytes; `event-id`, a 36-byte UUID-like id). The figure is the
//! time of [`Fingerprinter::fingerprint`] on an in-memory record ([`OwnedRecord`]), so it is the
//! encoding and hashing cost alone. `cargo bench --bench fingerprint`; BENCHMARKS.md.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use kafka_dedup::fingerprint::{Fingerprinter, OwnedRecord, Source};

/// A record of about `size` bytes (key + value + headers) whose value is JSON with `/id`.
fn record(size: usize, i: u64) -> OwnedRecord {
    let key = format!("user-{i:011}").into_bytes();
    let event_id = format!("{:08x}-0000-4000-8000-{:012x}", i as u32, i);
    let headers = vec![
        (b"trace".to_vec(), Some(format!("{i:016x}").into_bytes())),
        (b"event-id".to_vec(), Some(event_id.clone().into_bytes())),
    ];
    let fixed = key.len() + 5 + 16 + 8 + event_id.len();
    let mut value = format!(r#"{{"id":"{event_id}","ts":1700000000123,"kind":"click","pad":""#);
    let target = size.saturating_sub(fixed).max(value.len() + 2);
    while value.len() + 2 < target {
        value.push('x');
    }
    value.push_str("\"}");
    OwnedRecord {
        key: Some(key),
        value: Some(value.into_bytes()),
        headers,
    }
}

fn sources() -> Vec<Source> {
    ["value", "key", "key_value", "header:event-id", "json:/id"]
        .iter()
        .map(|s| Source::try_from(s.to_string()).expect("valid source"))
        .collect()
}

fn fingerprint(c: &mut Criterion) {
    let mut group = c.benchmark_group("fingerprint");
    for size in [100usize, 1024] {
        // A few distinct records so the branch predictor does not learn one.
        let records: Vec<OwnedRecord> = (0..64).map(|i| record(size, i)).collect();
        for source in sources() {
            let f = Fingerprinter::new(source.clone());
            group.throughput(Throughput::Elements(1));
            group.bench_with_input(BenchmarkId::new(source.to_string(), size), &records, |b, records| {
                let mut i = 0usize;
                b.iter(|| {
                    i = (i + 1) & 63;
                    black_box(f.fingerprint(black_box(&records[i])).expect("fingerprintable"))
                })
            });
        }
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).measurement_time(std::time::Duration::from_secs(2))
        .warm_up_time(std::time::Duration::from_millis(500));
    targets = fingerprint
}
criterion_main!(benches);

//! The seed scenario (docs/ARCHITECTURE.md, "What it is for") and its verification, shared by
//! `kafka-dedup demo` and the tests.
//!
//! An upstream job emits increasing integers (key and value: the decimal text; partition:
//! `value % partitions`), checkpoints every so often, and "crashes" at random points; after a
//! crash it re-emits everything since its last checkpoint together with a few new records, in
//! shuffled order (`32 … 40`, crash, `32 34 35 36 40 41 46 31 33 …`), then goes on in order.
//!
//! The filter is correct when its output holds each integer exactly once, on the output
//! partition equal to the input partition it was written to (`partitioning = "preserve"`), and,
//! per partition, in the order of first appearance in the input.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};

/// The records an upstream job writes, replays included.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// (partition, value) in write order.
    pub records: Vec<(i32, u64)>,
    /// Distinct values (0..n).
    pub distinct: u64,
    /// Upstream crashes simulated.
    pub crashes: u64,
    /// Records written that are replays of an earlier record.
    pub replays: u64,
}

/// Generates the scenario: `n` integers over `partitions`, upstream checkpoints every 50..150
/// records, a crash with probability 1/`crash_every` after each record.
pub fn replay_scenario(n: u64, partitions: i32, crash_every: u64, seed: u64) -> Scenario {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut records = Vec::with_capacity(n as usize * 5 / 4);
    let mut seen = HashSet::new();
    let mut replays = 0;
    let mut crashes = 0;
    let mut checkpoint = 0u64;
    let mut next_checkpoint = rng.gen_range(50..150);
    let mut i = 0u64;
    let mut emit = |v: u64, records: &mut Vec<(i32, u64)>| {
        if !seen.insert(v) {
            replays += 1;
        }
        records.push(((v % partitions as u64) as i32, v));
    };
    while i < n {
        emit(i, &mut records);
        i += 1;
        if i == next_checkpoint {
            checkpoint = i;
            next_checkpoint = i + rng.gen_range(50..150);
        }
        if i < n && crash_every > 0 && rng.gen_range(0..crash_every) == 0 {
            crashes += 1;
            // Restart from the checkpoint: re-emit [checkpoint, i) plus a few new ones, shuffled.
            let extra = rng.gen_range(0..10).min(n - i);
            let mut window: Vec<u64> = (checkpoint..i + extra).collect();
            window.shuffle(&mut rng);
            for v in window {
                emit(v, &mut records);
            }
            i += extra;
            if i >= next_checkpoint {
                checkpoint = i;
                next_checkpoint = i + rng.gen_range(50..150);
            }
        }
    }
    Scenario {
        records,
        distinct: n,
        crashes,
        replays,
    }
}

/// What the output holds compared with the input.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// Distinct values written.
    pub distinct: u64,
    /// Records read from the output.
    pub output_records: u64,
    /// Values never in the output.
    pub missing: u64,
    /// Output records that repeat a value already in the output.
    pub duplicated: u64,
    /// Partitions whose output order differs from the input's first-appearance order.
    pub out_of_order_partitions: u64,
    /// Output records on another partition than the input partition their value was written to
    /// (`partitioning = "preserve"` keeps them equal).
    pub misplaced: u64,
    /// Output values that were never written (corruption).
    pub unexpected: u64,
}

impl Verdict {
    /// True when each value is in the output exactly once, on its input partition, in order per
    /// partition.
    pub fn ok(&self) -> bool {
        self.missing == 0
            && self.duplicated == 0
            && self.out_of_order_partitions == 0
            && self.unexpected == 0
            && self.misplaced == 0
    }
}

/// Compares the output (per partition, in offset order) with what was written, for
/// `partitioning = "preserve"`: a value must come out on the partition it was first written to.
pub fn verify(written: &[(i32, u64)], output: &BTreeMap<i32, Vec<u64>>) -> Verdict {
    let mut first: BTreeMap<i32, Vec<u64>> = BTreeMap::new();
    let mut home: HashMap<u64, i32> = HashMap::new();
    let mut seen = HashSet::new();
    for (p, v) in written {
        if seen.insert(*v) {
            first.entry(*p).or_default().push(*v);
            home.insert(*v, *p);
        }
    }
    let mut v = Verdict {
        distinct: seen.len() as u64,
        ..Default::default()
    };
    let mut out_seen = HashSet::new();
    for (p, values) in output {
        v.output_records += values.len() as u64;
        let mut unique = Vec::with_capacity(values.len());
        for x in values {
            if !seen.contains(x) {
                v.unexpected += 1;
                continue;
            }
            if home.get(x) != Some(p) {
                v.misplaced += 1;
            }
            if !out_seen.insert(*x) {
                v.duplicated += 1;
            } else {
                unique.push(*x);
            }
        }
        let expected = first.get(p).cloned().unwrap_or_default();
        // Order: the output's values must appear in the same relative order as the input's.
        let pos: HashMap<u64, usize> = expected.iter().enumerate().map(|(i, x)| (*x, i)).collect();
        let ranks: Vec<usize> = unique.iter().filter_map(|x| pos.get(x).copied()).collect();
        if ranks.windows(2).any(|w| w[0] > w[1]) {
            v.out_of_order_partitions += 1;
        }
    }
    v.missing = seen.iter().filter(|x| !out_seen.contains(*x)).count() as u64;
    v
}

/// Writes `records` as (key, value) = (decimal, decimal) to `topic`, each to its partition,
/// spreading them over `duration` (zero: as fast as possible). Waits for every acknowledgement;
/// fails if any record was not delivered.
pub fn produce(
    config: &ClientConfig,
    topic: &str,
    records: &[(i32, u64)],
    duration: Duration,
) -> Result<(), KafkaError> {
    let failed = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let producer: ThreadedProducer<CountFailures> = config.create_with_context(CountFailures(failed.clone()))?;
    let started = Instant::now();
    let n = records.len().max(1);
    for (i, (p, v)) in records.iter().enumerate() {
        if !duration.is_zero() && i % 64 == 0 {
            let due = started + duration.mul_f64(i as f64 / n as f64);
            if let Some(wait) = due.checked_duration_since(Instant::now()) {
                std::thread::sleep(wait);
            }
        }
        let text = v.to_string();
        let mut record = BaseRecord::to(topic).partition(*p).key(&text).payload(&text);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(5));
                }
                Err((e, _)) => return Err(e),
            }
        }
    }
    producer.flush(Duration::from_secs(60))?;
    if failed.load(std::sync::atomic::Ordering::SeqCst) > 0 {
        return Err(KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::Fail));
    }
    Ok(())
}

/// Producer context counting failed deliveries.
struct CountFailures(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl rdkafka::ClientContext for CountFailures {}

impl rdkafka::producer::ProducerContext for CountFailures {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &rdkafka::producer::DeliveryResult<'_>, _: ()) {
        if result.is_err() {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
    }
}

/// Reads every record of `topic` (all `partitions`) from the beginning to the end, as the
/// decimal values of their payloads, per partition in offset order. Records whose payload is
/// not a number are counted under `u64::MAX`. Counts by reading, not from watermarks.
pub fn read_values(
    config: &ClientConfig,
    topic: &str,
    partitions: i32,
    timeout: Duration,
) -> Result<BTreeMap<i32, Vec<u64>>, KafkaError> {
    let mut c = config.clone();
    c.set("group.id", "kafka-dedup-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", "read_committed");
    let consumer: crate::kafka::Reader = c.create_with_context(crate::kafka::ReaderContext::default())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    consumer.assign(&tpl)?;
    let mut out: BTreeMap<i32, Vec<u64>> = (0..partitions).map(|p| (p, Vec::new())).collect();
    let mut eof = HashSet::new();
    let deadline = Instant::now() + timeout;
    while eof.len() < partitions as usize && Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let v = m
                    .payload()
                    .and_then(|b| std::str::from_utf8(b).ok())
                    .and_then(|s| s.parse().ok())
                    .unwrap_or(u64::MAX);
                out.entry(m.partition()).or_default().push(v);
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            Some(Err(_)) | None => {}
        }
    }
    if eof.len() < partitions as usize {
        return Err(KafkaError::Global(rdkafka::types::RDKafkaErrorCode::OperationTimedOut));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_has_replays_and_every_value() {
        let s = replay_scenario(5000, 3, 120, 7);
        assert!(s.crashes > 10, "{}", s.crashes);
        assert!(s.replays > 100, "{}", s.replays);
        let distinct: HashSet<u64> = s.records.iter().map(|r| r.1).collect();
        assert_eq!(distinct.len(), 5000);
        assert_eq!(s.records.len() as u64, 5000 + s.replays);
    }

    #[test]
    fn verify_detects_each_fault() {
        let written = vec![(0, 0), (1, 1), (0, 2), (0, 0), (1, 3)];
        let good: BTreeMap<i32, Vec<u64>> = [(0, vec![0, 2]), (1, vec![1, 3])].into_iter().collect();
        assert!(verify(&written, &good).ok());
        let dup: BTreeMap<i32, Vec<u64>> = [(0, vec![0, 2, 0]), (1, vec![1, 3])].into_iter().collect();
        assert_eq!(verify(&written, &dup).duplicated, 1);
        let missing: BTreeMap<i32, Vec<u64>> = [(0, vec![0]), (1, vec![1, 3])].into_iter().collect();
        assert_eq!(verify(&written, &missing).missing, 1);
        let order: BTreeMap<i32, Vec<u64>> = [(0, vec![2, 0]), (1, vec![1, 3])].into_iter().collect();
        assert_eq!(verify(&written, &order).out_of_order_partitions, 1);
        let one_partition: BTreeMap<i32, Vec<u64>> = [(0, vec![0, 1, 2, 3]), (1, vec![])].into_iter().collect();
        let v = verify(&written, &one_partition);
        assert_eq!((v.misplaced, v.missing, v.duplicated), (2, 0, 0));
        assert!(!v.ok(), "every value once, but not on its input partition");
        let unexpected: BTreeMap<i32, Vec<u64>> = [(0, vec![0, 2, 9]), (1, vec![1, 3])].into_iter().collect();
        assert_eq!(verify(&written, &unexpected).unexpected, 1);
    }
}

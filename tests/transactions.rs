//! `delivery = "transactional"` and transactional input on Apache Kafka (the suite's broker),
//! whose transactions are real: read_committed readers never get an aborted transaction's
//! records, the last stable offset holds them back while a transaction is open, producer fencing
//! aborts a fenced producer's open transaction. Checked (issue 3 case 6, issue 14 case 9, issue 21
//! cases 1 and 2): each checkpoint commits the output records and the input offsets in one
//! transaction, and the committed offset matches what the committed transactions hold; a process
//! frozen inside a transaction (SIGSTOP: a zombie) is fenced when a replacement starts with the
//! same transactional id, and stops with an error instead of committing; a read_committed reader
//! of the output never sees the records of a transaction aborted by a crash or a SIGKILL; an input
//! written by a transactional upstream is read up to its last stable offset, without its aborted
//! records, across its transaction markers.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use kafka_dedup::metadata::CheckpointMeta;
use kafka_dedup::provenance::{Provenance, HEADER};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";

fn committed_offset(kafka: &Broker, group: &str, topic: &str) -> Option<i64> {
    kafka.committed(group, topic, 1)[&0].0
}

/// Checks the output of a run in which a zombie was frozen inside a transaction and replaced:
/// read_uncommitted, it must read `0..r` (the zombie's committed transactions, `r` >=
/// `frozen_committed`, the offset the replacement resumed at), then the zombie's open transaction
/// `r..r+k` (aborted by the fencing; `k` may be 0), then the replacement's `r..end`, and nothing
/// after it: a fenced zombie adds nothing. Returns (`r`, `k`).
fn zombie_and_replacement(out: &[u64], frozen_committed: u64, end: u64) -> (u64, u64) {
    let Some(i) = out.iter().enumerate().position(|(i, v)| *v != i as u64) else {
        assert_eq!(out.len() as u64, end, "{out:?}");
        return (end, 0);
    };
    let r = out[i];
    let tail: Vec<u64> = (r..end).collect();
    assert!(
        r >= frozen_committed && r <= i as u64,
        "the replacement resumed at {r}: frozen with {frozen_committed} committed, {i} records before it"
    );
    assert_eq!(
        &out[i..],
        tail.as_slice(),
        "after the zombie's records: the replacement's {r}..{end}, once, in order, and nothing else"
    );
    (r, i as u64 - r)
}

#[test]
fn zombie_and_replacement_shapes() {
    let run = |v: &[std::ops::Range<u64>]| -> Vec<u64> { v.iter().cloned().flatten().collect() };
    assert_eq!(zombie_and_replacement(&(0..10).collect::<Vec<u64>>(), 4, 10), (10, 0));
    assert_eq!(zombie_and_replacement(&run(&[0..4, 4..7, 4..10]), 4, 10), (4, 3));
    assert_eq!(zombie_and_replacement(&run(&[0..6, 6..7, 6..10]), 4, 10), (6, 1));
    for bad in [
        run(&[0..4, 4..7, 4..10, 7..8]), // the zombie wrote after the replacement
        run(&[0..4, 4..7, 4..6, 7..10]), // a record of the replacement's range missing
        run(&[0..4, 4..7, 3..10]),       // resumed before the committed offset
    ] {
        let caught = std::panic::catch_unwind(|| zombie_and_replacement(&bad, 4, 10));
        assert!(caught.is_err(), "{bad:?} must be refused");
    }
}

#[test]
fn transactional_checkpoints_crash_and_fencing() {
    let kafka = Broker::kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("txn-in"), unique("txn-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, 1);
    let mut spec = FilterSpec::new(&input, &output, dir.path()).killable();
    spec.broker = kafka.clone();
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__DELIVERY".into(), "transactional".into()));
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__TRANSACTIONAL_ID".into(), unique("txn")));

    let records: Vec<(i32, u64)> = (0..3000).map(|v| (0, v)).collect();
    let writer = {
        let (records, kafka, input) = (records.clone(), kafka.clone(), input.clone());
        std::thread::spawn(move || kafka.produce_values(&input, &records, Duration::from_secs(8)))
    };
    let mut zombie = spec.start(dir.path());
    zombie.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(90));
    let deadline = Instant::now() + Duration::from_secs(30);
    let committed = loop {
        if let Some(c) = committed_offset(&kafka, &spec.group, &input).filter(|c| *c > 0) {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "no transaction committed offsets:\n{}",
            zombie.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Every input record is new, so the committed transactions hold exactly the records before
    // the committed offset, in order (records of the open transaction may follow them).
    let out = kafka.read_values(&output, 1);
    let prefix: Vec<u64> = out[&0].iter().copied().take(committed as usize).collect();
    assert_eq!(prefix, (0..committed as u64).collect::<Vec<_>>());

    // Freeze it inside a transaction; a replacement (another machine: its own store) starts with
    // the same transactional id, fences the zombie and aborts its open transaction.
    zombie.signal(libc::SIGSTOP);
    let frozen_committed = committed_offset(&kafka, &spec.group, &input).unwrap();
    let mut other = spec.clone();
    other.store = dir.path().join("store-replacement");
    let mut replacement = other.start(dir.path());
    writer.join().unwrap();
    // The input was written without transactions: its end is the record count.
    let end = records.len() as i64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while committed_offset(&kafka, &spec.group, &input) != Some(end) {
        assert!(
            Instant::now() < deadline,
            "the replacement did not commit to the end:\n{}",
            replacement.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // The zombie wakes up: fenced, it stops with an error and commits nothing.
    zombie.signal(libc::SIGCONT);
    let status = zombie.wait_exit(Duration::from_secs(120));
    assert!(!status.success(), "the zombie must not succeed:\n{}", zombie.logs());
    let zlogs = zombie.logs().to_lowercase();
    assert!(zlogs.contains("fenced"), "{zlogs}");
    assert_eq!(
        committed_offset(&kafka, &spec.group, &input),
        Some(end),
        "the zombie committed nothing"
    );
    assert!(replacement.terminate().success(), "{}", replacement.logs());
    assert_eq!(committed_offset(&kafka, &spec.group, &input), Some(end));
    // read_committed: exact; read_uncommitted: the zombie's aborted transaction is in the log.
    let out = kafka.read_values(&output, 1);
    assert_eq!(out[&0], (0..end as u64).collect::<Vec<u64>>(), "read_committed");
    let log: Vec<u64> = read_seen(&kafka, &output, 1, "read_uncommitted")[&0]
        .iter()
        .map(|s| s.value)
        .collect();
    let (resumed, aborted) = zombie_and_replacement(&log, frozen_committed as u64, end as u64);
    eprintln!(
        "zombie frozen with {frozen_committed} committed; the replacement resumed at {resumed}; \
         {aborted} records of the zombie's aborted transaction in the log"
    );
}

/// Issue 14, case 9: transactional mode with `input.start = "latest"`, killed before its first
/// checkpoint. The first start begins at the input's end (50); records 50..100 arrive, some are
/// forwarded in the open transaction, and the process dies (crash point after 20
/// acknowledgements; the transaction is never committed). The restart must resume at 50, where
/// the first start began, not at the input's end again (which would skip 50..100 for good).
#[test]
fn a_first_start_at_latest_killed_before_its_first_checkpoint_resumes_where_it_began() {
    let kafka = Broker::kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("txl-in"), unique("txl-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, 1);
    produce_values_to(&kafka, &input, 0, &(0..50).collect::<Vec<u64>>());
    let mut spec = FilterSpec::on(kafka.clone(), &input, &output, dir.path()).killable();
    spec.interval = "1h";
    spec.env.extend([
        ("KAFKA_DEDUP__OUTPUT__DELIVERY".to_string(), "transactional".to_string()),
        ("KAFKA_DEDUP__OUTPUT__TRANSACTIONAL_ID".to_string(), unique("txl")),
        ("KAFKA_DEDUP__INPUT__START".to_string(), "latest".to_string()),
    ]);
    let mut crashing = spec.clone();
    crashing
        .env
        .push(("KAFKA_DEDUP_CRASH_AT".to_string(), "after-ack:20".to_string()));
    let mut first = crashing.start(dir.path());
    first.wait_ready(Duration::from_secs(90));
    produce_values_to(&kafka, &input, 0, &(50..100).collect::<Vec<u64>>());
    let status = first.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "aborted at the crash point:\n{}", first.logs());

    spec.interval = "1s";
    let mut again = spec.survivor().start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(90);
    while committed_offset(&kafka, &spec.group, &input) != Some(100) {
        assert!(
            Instant::now() < deadline,
            "committed {:?}:\n{}",
            committed_offset(&kafka, &spec.group, &input),
            again.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(again.terminate().success(), "{}", again.logs());
    // read_committed: 50..100 once, none of the first start's aborted transaction, nothing
    // before the first start.
    let out = kafka.read_values(&output, 1)[&0].clone();
    assert_eq!(out, (50..100).collect::<Vec<u64>>(), "{}", again.logs());
    let log = read_seen(&kafka, &output, 1, "read_uncommitted")[&0].len();
    assert!(
        log > 50,
        "the first start's aborted transaction is in the log: {log} records"
    );
}

/// One output record as a reader of the output sees it: its output offset, its value (decimal
/// text) and the input offset its provenance header (`kafka-dedup.source`) names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    offset: i64,
    value: u64,
    input_offset: i64,
}

/// Every record of `topic`'s `partitions` from the beginning to the end, in offset order, as a
/// reader with `isolation.level = isolation` sees them (`read_committed` stops at the last
/// stable offset and skips aborted transactions; `read_uncommitted` returns them).
fn read_seen(kafka: &Broker, topic: &str, partitions: i32, isolation: &str) -> BTreeMap<i32, Vec<Seen>> {
    use rdkafka::message::{Headers, Message};
    let mut c = kafka.client();
    c.set("group.id", unique("txn-reader"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation);
    let consumer: BaseConsumer = c.create().unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut out: BTreeMap<i32, Vec<Seen>> = (0..partitions).map(|p| (p, Vec::new())).collect();
    let mut eof = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while eof.len() < partitions as usize {
        assert!(Instant::now() < deadline, "reading {topic} ({isolation}) timed out");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let text = |b: Option<&[u8]>| b.and_then(|b| std::str::from_utf8(b).ok()).map(str::to_string);
                let value = text(m.payload()).and_then(|s| s.parse().ok()).unwrap_or(u64::MAX);
                let input_offset = m
                    .headers()
                    .and_then(|h| h.iter().filter(|h| h.key == HEADER).last())
                    .and_then(|h| h.value.and_then(Provenance::parse))
                    .map_or(-1, |s| s.offset);
                out.entry(m.partition()).or_default().push(Seen {
                    offset: m.offset(),
                    value,
                    input_offset,
                });
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            _ => {}
        }
    }
    out
}

/// Writes `values` to partition `p` of `topic` (key and value: the decimal text), in order, and
/// waits for them.
fn produce_values_to(kafka: &Broker, topic: &str, p: i32, values: &[u64]) {
    let records: Vec<(i32, u64)> = values.iter().map(|v| (p, *v)).collect();
    kafka.produce_values(topic, &records, Duration::ZERO);
}

/// An upstream's writes of `range` with replays: after every 100 values the last 30 again (a
/// restart from a checkpoint 30 records back).
fn with_replays(range: std::ops::Range<u64>) -> Vec<u64> {
    let mut out = Vec::new();
    for v in range.clone() {
        out.push(v);
        if (v + 1 - range.start).is_multiple_of(100) {
            out.extend(v + 1 - 30..=v);
        }
    }
    out
}

/// The input as written (read back, read_uncommitted): per partition, each record's offset and
/// value, and which offsets hold the first copy of their value (the records kafka-dedup must
/// forward; the others are replays, dropped).
fn first_copies(kafka: &Broker, input: &str, partitions: i32) -> BTreeMap<i32, Vec<(i64, u64)>> {
    read_seen(kafka, input, partitions, "read_uncommitted")
        .into_iter()
        .map(|(p, seen)| {
            let mut known = std::collections::HashSet::new();
            let firsts = seen
                .iter()
                .filter(|s| known.insert(s.value))
                .map(|s| (s.offset, s.value))
                .collect();
            (p, firsts)
        })
        .collect()
}

/// Issue 21, case 1: `delivery = "transactional"` on Apache Kafka, across a crash inside an open
/// transaction (crash point `after-ack`, after a transaction committed) and a SIGKILL of a
/// restart whose whole work is one open transaction (`checkpoint.interval = 1h`: no checkpoint
/// falls due). Both transactions are aborted by the next start's `init_transactions` (producer
/// fencing). Checked: the read_uncommitted view of the output holds the aborted records, the
/// read_committed view holds none of them and is exact (each value once, in order, from the
/// input offset of its first copy), and every commit observed while running (input offset and
/// `out_end`, committed in one transaction) covers exactly the input records whose outcome the
/// committed output holds: the committed output before `out_end` is the first copies at input
/// offsets below the committed offset, no more, no less.
#[test]
fn a_read_committed_reader_never_sees_an_aborted_transaction() {
    let kafka = Broker::kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("txa-in"), unique("txa-out"));
    const P: i32 = 2;
    kafka.create_topic(&input, P);
    kafka.create_topic(&output, P);
    let mut spec = FilterSpec::new(&input, &output, dir.path()).killable();
    spec.env.extend([
        ("KAFKA_DEDUP__OUTPUT__DELIVERY".to_string(), "transactional".to_string()),
        ("KAFKA_DEDUP__OUTPUT__TRANSACTIONAL_ID".to_string(), unique("txa")),
    ]);

    // Every commit of the group while it runs: (partition, offset, metadata).
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = {
        let (kafka, group, input, stop) = (kafka.clone(), spec.group.clone(), input.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeSet::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for (p, (o, meta)) in kafka.committed(&group, &input, P) {
                    if let Some(o) = o {
                        seen.insert((p, o, meta));
                    }
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            seen
        })
    };
    let committed_all = |at: i64| {
        let c = kafka.committed(&spec.group, &input, P);
        (0..P).all(|p| c[&p].0 == Some(at))
    };
    // Both partitions' writes of `range` (with replays), interleaved, spread over `over`.
    let write = |range: std::ops::Range<u64>, over: Duration| {
        let per: Vec<Vec<u64>> = (0..P as u64)
            .map(|p| with_replays(p * 1_000_000 + range.start..p * 1_000_000 + range.end))
            .collect();
        let records: Vec<(i32, u64)> = (0..per[0].len())
            .flat_map(|i| per.iter().enumerate().map(move |(p, vs)| (p as i32, vs[i])))
            .collect();
        kafka.produce_values(&input, &records, over);
    };

    // Run A: 0..400 (520 records per partition with the replays) committed in a transaction,
    // then 400..800 over 3 s (checkpoints fall due while records are in flight); it aborts at its
    // 1,500th acknowledgement: past the 800 first copies of phase one, so inside a transaction
    // that began after a commit.
    let mut crashing = spec.clone();
    crashing
        .env
        .push(("KAFKA_DEDUP_CRASH_AT".into(), "after-ack:1500".into()));
    let mut a = crashing.start(dir.path());
    a.wait_ready(Duration::from_secs(90));
    write(0..400, Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !committed_all(520) {
        assert!(Instant::now() < deadline, "run A committed nothing:\n{}", a.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    write(400..800, Duration::from_secs(3));
    let status = a.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "aborted at the crash point:\n{}", a.logs());
    assert!(a.logs().contains("crash point after-ack reached"), "{}", a.logs());

    // Run B: no checkpoint falls due; everything it forwards is in its one open transaction.
    let mut slow = spec.clone();
    slow.interval = "1h";
    let mut b = slow.start(dir.path());
    write(800..1000, Duration::ZERO);
    // Phase three's values are all in the log (read_uncommitted) before the SIGKILL, and none
    // is visible to a read_committed reader: the last stable offset holds them back.
    let phase_three = |seen: &BTreeMap<i32, Vec<Seen>>| -> usize {
        (0..P)
            .map(|p| {
                let base = p as u64 * 1_000_000;
                let values: std::collections::HashSet<u64> = seen[&p].iter().map(|s| s.value).collect();
                (base + 800..base + 1000).filter(|v| values.contains(v)).count()
            })
            .sum()
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    while phase_three(&read_seen(&kafka, &output, P, "read_uncommitted")) < 2 * 200 {
        assert!(
            b.running() && Instant::now() < deadline,
            "run B did not forward 800..1000:\n{}",
            b.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(phase_three(&read_seen(&kafka, &output, P, "read_committed")), 0);
    b.kill9();

    // Run C: fences B (its transaction is aborted) and runs to the end.
    let mut c = spec.survivor().start(dir.path());
    let end = 1000 + 10 * 30; // values and replays per partition
    let deadline = Instant::now() + Duration::from_secs(90);
    while !committed_all(end) {
        assert!(
            Instant::now() < deadline,
            "run C did not commit to {end}:\n{}",
            c.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(c.terminate().success(), "{}", c.logs());
    let commits = sampler.join().unwrap();

    let firsts = first_copies(&kafka, &input, P);
    let committed = read_seen(&kafka, &output, P, "read_committed");
    let uncommitted = read_seen(&kafka, &output, P, "read_uncommitted");
    let mut aborted = 0;
    for p in 0..P {
        let got: Vec<(i64, u64)> = committed[&p].iter().map(|s| (s.input_offset, s.value)).collect();
        assert_eq!(got, firsts[&p], "partition {p}: the committed output is exact");
        // The aborted runs are in the log: every record read_uncommitted sees beyond the committed
        // ones is a copy of a committed one (a record of A's or B's aborted transaction).
        let committed_offsets: std::collections::HashSet<i64> = committed[&p].iter().map(|s| s.offset).collect();
        let extra: Vec<&Seen> = uncommitted[&p]
            .iter()
            .filter(|s| !committed_offsets.contains(&s.offset))
            .collect();
        for s in &extra {
            assert!(
                got.contains(&(s.input_offset, s.value)),
                "partition {p}: {s:?} is no copy of a committed record"
            );
        }
        aborted += extra.len();
    }
    assert!(aborted > 0, "the aborted transactions left records in the log");

    // Each observed commit holds exactly the outcome of the input records before it.
    let mut checked = 0;
    for (p, offset, meta) in &commits {
        let Some(out_end) = CheckpointMeta::decode(meta).and_then(|m| m.out_end) else {
            continue;
        };
        let end = out_end[p];
        let held: Vec<(i64, u64)> = committed[p]
            .iter()
            .filter(|s| s.offset < end)
            .map(|s| (s.input_offset, s.value))
            .collect();
        let expected: Vec<(i64, u64)> = firsts[p].iter().copied().filter(|(o, _)| o < offset).collect();
        assert_eq!(held, expected, "partition {p}: commit at {offset} ({meta})");
        // `out_end` is where the transaction ended: after a committed record comes its
        // transaction marker (an offset no reader gets), not another record of the transaction.
        let records: std::collections::HashSet<i64> = uncommitted[p].iter().map(|s| s.offset).collect();
        if committed[p].iter().any(|s| s.offset == end - 1) {
            assert!(
                !records.contains(&end),
                "partition {p}: commit at {offset} ends at {end}, inside a transaction ({meta})"
            );
        }
        checked += 1;
    }
    assert!(checked >= 4, "{checked} commits observed: {commits:?}");
    eprintln!("{aborted} aborted records in the log; {checked} commits checked");
}

/// A transactional upstream: a producer with its own `transactional.id`, transactions begun.
fn upstream(kafka: &Broker) -> rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext> {
    use rdkafka::producer::Producer;
    let mut c = kafka.client();
    c.set("transactional.id", unique("upstream")).set("linger.ms", "0");
    let producer: rdkafka::producer::ThreadedProducer<_> = c.create().unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    producer
}

/// Sends `values` to partition 0 of `topic` in a new transaction of `producer` and flushes; the
/// transaction is left open.
fn send_in_transaction(
    producer: &rdkafka::producer::ThreadedProducer<rdkafka::producer::DefaultProducerContext>,
    topic: &str,
    values: std::ops::Range<u64>,
) {
    use rdkafka::producer::{BaseRecord, Producer};
    producer.begin_transaction().unwrap();
    for v in values {
        let text = v.to_string();
        producer
            .send(BaseRecord::to(topic).partition(0).key(&text).payload(&text))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Issue 21, case 2: an input written by a transactional upstream. Committed 0..50, then a
/// transaction (1000..1050) held open while another producer commits 50..100 behind it: the
/// last stable offset stays at the open transaction's first record, so kafka-dedup's
/// read_committed consumer forwards 0..50 and nothing more for three checkpoints; then the open
/// transaction is aborted and 100..150 committed. The output holds 0..150 once, in order, and
/// none of the aborted values (read_uncommitted: the filter's own idempotent output has no
/// aborted records either); the committed input offset reaches the end offset across the
/// transaction markers' offset gaps, and the consumer lag is 0.
#[test]
fn a_transactional_upstreams_open_and_aborted_transactions() {
    use rdkafka::producer::Producer;
    let kafka = Broker::kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("txu-in"), unique("txu-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, 1);
    let (first, held) = (upstream(&kafka), upstream(&kafka));
    send_in_transaction(&first, &input, 0..50);
    first.commit_transaction(Duration::from_secs(30)).unwrap();
    send_in_transaction(&held, &input, 1000..1050);
    send_in_transaction(&first, &input, 50..100);
    first.commit_transaction(Duration::from_secs(30)).unwrap();

    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut f = spec.start(dir.path());
    f.wait_metric(FORWARDED, &[], 50.0, Duration::from_secs(90));
    // The committed offset stops at the last stable offset: the open transaction's first record.
    let lso = 51; // 0..50 and their commit marker
    let deadline = Instant::now() + Duration::from_secs(30);
    while committed_offset(&kafka, &spec.group, &input) != Some(lso) {
        assert!(
            Instant::now() < deadline,
            "committed {:?}:\n{}",
            committed_offset(&kafka, &spec.group, &input),
            f.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let ok = "result=\"ok\"";
    let checkpoints = metric(&f.scrape(), "kafka_dedup_checkpoints_total", &[ok]);
    f.wait_metric(
        "kafka_dedup_checkpoints_total",
        &[ok],
        checkpoints + 3.0,
        Duration::from_secs(30),
    );
    assert_eq!(
        metric(&f.scrape(), FORWARDED, &[]),
        50.0,
        "nothing past the last stable offset"
    );
    assert_eq!(committed_offset(&kafka, &spec.group, &input), Some(lso));

    held.abort_transaction(Duration::from_secs(30)).unwrap();
    send_in_transaction(&first, &input, 100..150);
    first.commit_transaction(Duration::from_secs(30)).unwrap();
    // 150 records, 50 aborted ones, four transaction markers.
    let end = kafka.end_offsets(&input, 1)[&0];
    assert_eq!(end, 150 + 50 + 4);
    let deadline = Instant::now() + Duration::from_secs(60);
    while committed_offset(&kafka, &spec.group, &input) != Some(end) {
        assert!(
            Instant::now() < deadline,
            "committed {:?}, end {end}:\n{}",
            committed_offset(&kafka, &spec.group, &input),
            f.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let lag = "kafka_dedup_consumer_lag_records";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = f.scrape();
        if s.lines().any(|l| l.starts_with(lag)) && metric(&s, lag, &[]) == 0.0 {
            break;
        }
        assert!(Instant::now() < deadline, "lag not 0:\n{s}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(metric(&f.scrape(), FORWARDED, &[]), 150.0);
    assert!(f.terminate().success(), "{}", f.logs());
    for isolation in ["read_committed", "read_uncommitted"] {
        let values: Vec<u64> = read_seen(&kafka, &output, 1, isolation)[&0]
            .iter()
            .map(|s| s.value)
            .collect();
        assert_eq!(values, (0..150).collect::<Vec<u64>>(), "{isolation}");
    }
}

/// Kafka's api key of InitProducerId, which `init_transactions` sends.
const INIT_PRODUCER_ID: i16 = 22;

/// Waits `away` while the broker is held away, asserting that the process stays up; returns the
/// last `/readyz` answer (status and body) seen meanwhile.
fn stays_up_for(f: &mut FilterProcess, away: Duration) -> Option<(u16, String)> {
    let until = Instant::now() + away;
    let mut last = None;
    while Instant::now() < until {
        assert!(f.running(), "exited while the broker was away:\n{}", f.logs());
        if let Some(answer) = http_get(&f.http, "/readyz") {
            last = Some(answer);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(f.running(), "exited while the broker was away:\n{}", f.logs());
    last
}

fn transactional_spec(kafka: &Broker, dir: &std::path::Path) -> FilterSpec {
    let mut spec = FilterSpec::on(kafka.clone(), "in", "out", dir);
    spec.interval = "2s";
    spec.env.extend([
        ("KAFKA_DEDUP__OUTPUT__DELIVERY".to_string(), "transactional".to_string()),
        ("KAFKA_DEDUP__OUTPUT__TRANSACTIONAL_ID".to_string(), unique("txaway")),
    ]);
    spec
}

/// The broker away at start: it answers metadata, but the `InitProducerId` request that
/// `init_transactions` sends is held by the proxy for 40 s, past the call's 30 s timeout. The
/// process must stay up (it exited 1 and crash-looped), `/readyz` answering 503 and naming the
/// cause meanwhile, and once the request is released forward every record once, committed
/// (read_committed output exact).
#[test]
fn a_transactional_start_waits_for_the_broker_instead_of_exiting() {
    let own = common::proxy::ProxiedBroker::start();
    let kafka = own.broker();
    let dir = tempfile::tempdir().unwrap();
    kafka.create_topic("in", 1);
    kafka.create_topic("out", 1);
    produce_values_to(&kafka, "in", 0, &(0..200).collect::<Vec<u64>>());
    own.proxy.hold_from_api(INIT_PRODUCER_ID);
    let spec = transactional_spec(&kafka, dir.path());
    let mut f = spec.start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(60);
    while own.proxy.held_api_requests() == 0 {
        assert!(f.running(), "exited before init_transactions:\n{}", f.logs());
        assert!(Instant::now() < deadline, "no InitProducerId held:\n{}", f.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, body) = stays_up_for(&mut f, Duration::from_secs(40)).expect("/readyz answers");
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("init_transactions"), "/readyz names the cause: {body}");
    own.proxy.release();
    kafka.wait_committed(
        &spec.group,
        "in",
        &BTreeMap::from([(0, 200)]),
        Duration::from_secs(120),
        || f.logs(),
    );
    f.wait_ready(Duration::from_secs(30));
    let logs = f.logs();
    assert!(f.terminate().success(), "{logs}");
    assert_eq!(
        kafka.read_values("out", 1)[&0],
        (0..200).collect::<Vec<u64>>(),
        "{logs}"
    );
    assert!(logs.contains("init_transactions did not complete"), "{logs}");
}

/// The broker away across a checkpoint's commit: after 100 records are committed, the proxy
/// holds what the filter's producer sends, 100 more are taken into the open transaction, and
/// the checkpoint's commit cannot flush them for 50 s, past the flush's 30 s timeout (and the
/// abort that followed it, up to 30 s more, before the old exit). The
/// process must not exit (it exited 1: `transaction: flush: ...`); once the proxy lets go it
/// commits, and the read_committed output holds every record once.
#[test]
fn a_transaction_commit_waits_while_the_broker_is_away_past_the_flush_timeout() {
    let own = common::proxy::ProxiedBroker::start();
    let kafka = own.broker();
    let dir = tempfile::tempdir().unwrap();
    kafka.create_topic("in", 1);
    kafka.create_topic("out", 1);
    let mut spec = transactional_spec(&kafka, dir.path());
    // Room for the 50 s away within one transaction (by default the interval plus 60 s).
    spec.env.push((
        "KAFKA_DEDUP__KAFKA__PROPERTIES__TRANSACTION_TIMEOUT_MS".to_string(),
        "120000".to_string(),
    ));
    produce_values_to(&kafka, "in", 0, &(0..100).collect::<Vec<u64>>());
    let mut f = spec.start(dir.path());
    let ends = |n| BTreeMap::from([(0, n)]);
    kafka.wait_committed(&spec.group, "in", &ends(100), Duration::from_secs(120), || f.logs());
    assert!(
        own.proxy.hold_producers() >= 1,
        "the filter's producer connection is held"
    );
    produce_values_to(&kafka, "in", 0, &(100..200).collect::<Vec<u64>>());
    f.wait_metric(
        "kafka_dedup_records_consumed_total",
        &[],
        200.0,
        Duration::from_secs(60),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    while own.proxy.held_produce_requests() == 0 {
        assert!(Instant::now() < deadline, "no produce request held:\n{}", f.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, body) = stays_up_for(&mut f, Duration::from_secs(50)).expect("/readyz answers");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("transaction commit waits"),
        "/readyz names the cause: {body}"
    );
    own.proxy.release();
    kafka.wait_committed(&spec.group, "in", &ends(200), Duration::from_secs(120), || f.logs());
    let logs = f.logs();
    assert!(f.terminate().success(), "{logs}");
    assert_eq!(
        kafka.read_values("out", 1)[&0],
        (0..200).collect::<Vec<u64>>(),
        "{logs}"
    );
    assert!(logs.contains("the pending transaction commit completed"), "{logs}");
}

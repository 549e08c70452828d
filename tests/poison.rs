//! Issues 22 and 23: one bad record stops at most its own partition, and nothing is lost.
//! Records without a fingerprint after a crash (issue 22, item 2), records the output refuses
//! for their size (item 8), a way past a poison record (issue 23, item 3). The binary runs as its
//! own process against the suite's Apache Kafka.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";
const DROPPED: &str = "kafka_dedup_duplicates_dropped_total";

fn start_with_crash(spec: &FilterSpec, dir: &Path, point: &str) -> FilterProcess {
    let mut s = spec.clone();
    s.env.push(("KAFKA_DEDUP_CRASH_AT".into(), point.into()));
    s.start(dir)
}

/// The values of `records` as text, `None` for a tombstone.
fn texts(records: &[Raw]) -> Vec<Option<String>> {
    records
        .iter()
        .map(|r| r.value.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()))
        .collect()
}

/// `kafka-dedup audit --json` with `spec`'s configuration: its exit code and what it said.
fn audit(spec: &FilterSpec, dir: &Path) -> (Option<i32>, String) {
    let (code, said, _) = spec.audit_json(dir);
    (code, said)
}

/// Issue 22, item 2: under the defaults (`source = "value"`, `on_missing = "forward"`) the input
/// `k1=v1, k1=null, k1=v2` is forwarded, then the process aborts after the third acknowledgement
/// (`after-ack:3`), before any checkpoint. The restart re-takes the three records from the
/// committed offset: `v1` and `v2` are re-takes of fingerprints re-learned from the output (with
/// their input offsets), and the tombstone, which has no fingerprint, must be known too (by its
/// stand-in, re-learned from its provenance), or it is forwarded a second time, after `v2`. All
/// three count as taken again, none as a replay.
#[test]
fn a_tombstone_forwarded_before_a_crash_is_not_forwarded_again() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("tomb-in"), unique("tomb-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let records = vec![
        raw(Some("k1"), Some("v1"), &[]),
        raw(Some("k1"), None, &[]),
        raw(Some("k1"), Some("v2"), &[]),
    ];
    kafka().produce_raw(&input, 0, &records);
    let mut spec = FilterSpec::new(&input, &output, dir.path()).killable();
    spec.interval = "1h"; // no checkpoint: only the commit made when the partition starts
    let mut filter = start_with_crash(&spec, dir.path(), "after-ack:3");
    let status = filter.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "aborted at the crash point:\n{}", filter.logs());
    assert_eq!(
        texts(&kafka().read_records(&output, 1)[&0]).len(),
        3,
        "all three reached the output"
    );
    assert_eq!(kafka().committed(&spec.group, &input, 1)[&0].0, Some(0));

    spec.interval = "1s";
    let mut filter = spec.survivor().start(dir.path());
    let three = [(0, 3)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &three, Duration::from_secs(60), || filter.logs());
    let scrape = filter.scrape();
    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = kafka().read_forwarded(&output, 1, &input);
    assert_eq!(
        texts(&out[&0]),
        [Some("v1".to_string()), None, Some("v2".to_string())],
        "{scrape}"
    );
    assert_eq!(metric(&scrape, FORWARDED, &[]), 0.0, "{scrape}");
    assert_eq!(
        metric(&scrape, "kafka_dedup_input_retaken_records_total", &[]),
        3.0,
        "all three taken again, the tombstone by its stand-in:\n{scrape}"
    );
    assert_eq!(metric(&scrape, DROPPED, &[]), 0.0, "none is a replay:\n{scrape}");
    let (code, said) = audit(&spec, dir.path());
    assert_eq!(code, Some(0), "{said}");
}

const REFUSED: &str = "kafka_dedup_output_refused_total";
const SKIPPED: &str = "kafka_dedup_records_skipped_total";

/// Writes `records` to `topic`, partition by partition, with a producer that takes records up to
/// the broker's default limit (librdkafka's own default, 1,000,000 bytes, is lower).
fn produce_large(topic: &str, records: &[(i32, Raw)]) {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    let mut c = kafka().client();
    c.set("message.max.bytes", "1100000");
    let producer: ThreadedProducer<_> = c.create().unwrap();
    for (p, r) in records {
        let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(*p);
        if let Some(k) = &r.key {
            rec = rec.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            rec = rec.payload(v.as_slice());
        }
        producer.send(rec).map_err(|(e, _)| e).unwrap();
        producer.flush(Duration::from_secs(30)).unwrap();
    }
}

/// Small records `name-0 .. name-{n-1}` on every one of `partitions` partitions.
fn small(name: &str, n: usize, partitions: i32) -> Vec<(i32, Raw)> {
    (0..n)
        .flat_map(|i| (0..partitions).map(move |p| (p, raw(None, Some(&format!("{name}-{p}-{i}")), &[]))))
        .collect()
}

/// The texts of what was forwarded to `output` from `input`, per partition.
fn forwarded(output: &str, input: &str, partitions: i32) -> std::collections::BTreeMap<i32, Vec<Option<String>>> {
    kafka()
        .read_forwarded(output, partitions, input)
        .into_iter()
        .map(|(p, rs)| (p, texts(&rs)))
        .collect()
}

/// Issue 22, item 8 (first half): a record of 1,040,000 bytes, which the input took under the
/// broker's default limit (1,048,588), fits the output (same default) with its provenance header:
/// librdkafka's own producer default (`message.max.bytes` 1,000,000) refused it, which stopped
/// every partition. Forwarded now, with everything around it.
#[test]
fn a_record_the_input_took_fits_the_output() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("big-in"), unique("big-out"));
    kafka().create_topic(&input, 3);
    kafka().create_topic(&output, 3);
    let big = "x".repeat(1_040_000);
    let mut records = small("a", 2, 3);
    records.push((0, raw(None, Some(&big), &[])));
    records.extend(small("b", 2, 3));
    produce_large(&input, &records);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut filter = spec.start(dir.path());
    filter.wait_metric(FORWARDED, &[], records.len() as f64, Duration::from_secs(60));
    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = forwarded(&output, &input, 3);
    assert_eq!(out[&0].len(), 5);
    assert_eq!(out[&0][2].as_ref().map(String::len), Some(1_040_000));
}

/// Issue 22, item 8 (second half), and issue 23, item 3: the output topic's own
/// `max.message.bytes` is lower than the input's, and a record on partition 0 exceeds it. Only
/// partition 0 halts: the others run on, the process stays up, the refusal is counted and
/// `/readyz` names the partition and the reason, with the ways past. One of them,
/// `input.skip = "0:2"`, lets exactly that record past at the next start (counted, logged);
/// nothing else of partition 0 is lost or repeated.
#[test]
fn a_record_over_the_outputs_limit_halts_only_its_partition_until_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("limit-in"), unique("limit-out"));
    kafka().create_topic(&input, 3);
    kafka().create_topic_with(&output, 3, &[("max.message.bytes", "100000")]);
    let big = "y".repeat(150_000);
    let mut records = small("a", 2, 3);
    records.push((0, raw(None, Some(&big), &[])));
    records.extend(small("b", 2, 3));
    produce_large(&input, &records);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut filter = spec.start(dir.path());
    // Partitions 1 and 2 forward all their 4 records, partition 0 the 2 before the big one.
    filter.wait_metric(FORWARDED, &[], 10.0, Duration::from_secs(60));
    filter.wait_metric(REFUSED, &["partition=\"0\""], 1.0, Duration::from_secs(60));
    let (code, body) = http_get(&filter.http, "/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("halted") && body.contains("offset 2") && body.contains("input.skip"),
        "{body}"
    );
    // The other partitions are committed to their end; partition 0 up to the refused record.
    let ends = [(0, 2), (1, 4), (2, 4)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &ends, Duration::from_secs(60), || filter.logs());
    assert!(filter.running(), "{}", filter.logs());
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(kafka().committed(&spec.group, &input, 3)[&0].0, Some(2));

    let mut skipping = spec.clone();
    skipping.env.push(("KAFKA_DEDUP__INPUT__SKIP".into(), "0:2".into()));
    let mut filter = skipping.start(dir.path());
    let five = [(0, 5), (1, 4), (2, 4)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &five, Duration::from_secs(60), || filter.logs());
    let scrape = filter.scrape();
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(metric(&scrape, SKIPPED, &["partition=\"0\""]), 1.0, "{scrape}");
    // Said plainly that it is gone (no dead-letter topic here).
    assert!(
        filter
            .logs()
            .contains("record named in input.skip: dropped, not forwarded (no fingerprint.dead_letter_topic is set)"),
        "{}",
        filter.logs()
    );
    let out = forwarded(&output, &input, 3);
    let want = |p: i32| -> Vec<Option<String>> {
        ["a-{p}-0", "a-{p}-1", "b-{p}-0", "b-{p}-1"]
            .iter()
            .map(|t| Some(t.replace("{p}", &p.to_string())))
            .collect()
    };
    for p in 0..3 {
        assert_eq!(out[&p], want(p), "partition {p}");
    }
}

/// Issue 22, item 8 and issue 23, item 3 with `fingerprint.dead_letter_topic` set: the record the
/// output refuses for its size goes there, with the reason `too_large` and its provenance, and
/// its partition runs on; counted, nothing halts.
#[test]
fn a_record_over_the_outputs_limit_goes_to_the_dead_letter_topic() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output, dlq) = (unique("dl-in"), unique("dl-out"), unique("dl-dlq"));
    kafka().create_topic(&input, 1);
    kafka().create_topic_with(&output, 1, &[("max.message.bytes", "100000")]);
    kafka().create_topic(&dlq, 1);
    let big = "z".repeat(150_000);
    let mut records = small("a", 2, 1);
    records.push((0, raw(None, Some(&big), &[])));
    records.extend(small("b", 2, 1));
    produce_large(&input, &records);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.fingerprint = format!("[fingerprint]\nsource = \"value\"\ndead_letter_topic = \"{dlq}\"\n");
    let mut filter = spec.start(dir.path());
    let five = [(0, 5)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &five, Duration::from_secs(60), || filter.logs());
    let scrape = filter.scrape();
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(
        metric(&scrape, REFUSED, &["partition=\"0\"", "action=\"dead_letter\""]),
        1.0,
        "{scrape}"
    );
    assert_eq!(
        forwarded(&output, &input, 1)[&0],
        [
            Some("a-0-0".into()),
            Some("a-0-1".into()),
            Some("b-0-0".into()),
            Some("b-0-1".into())
        ]
    );
    let dead = kafka().read_records(&dlq, 1);
    assert_eq!(dead[&0].len(), 1);
    assert_eq!(dead[&0][0].value.as_ref().map(Vec::len), Some(150_000));
    assert_eq!(dead[&0][0].header("kafka-dedup.reason"), Some(Some(&b"too_large"[..])));
}

/// Issue 23, item 3: `on_missing = "fail"` stops on a record without fingerprint and says how to
/// get past it; `input.skip` names it, and the next start lets exactly that record past (to the
/// dead-letter topic when one is set; here none: dropped, logged and counted).
#[test]
fn a_record_that_stops_the_filter_can_be_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("fail-in"), unique("fail-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let records = vec![
        raw(None, Some("v1"), &[]),
        raw(None, None, &[]),
        raw(None, Some("v2"), &[]),
    ];
    kafka().produce_raw(&input, 0, &records);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.fingerprint = "[fingerprint]\nsource = \"value\"\non_missing = \"fail\"\n".into();
    let mut filter = spec.start(dir.path());
    let status = filter.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{}", filter.logs());
    let logs = filter.logs();
    assert!(
        logs.contains("partition 0 offset 1") && logs.contains("input.skip = \"0:1\""),
        "{logs}"
    );

    let mut skipping = spec.clone();
    skipping.env.push(("KAFKA_DEDUP__INPUT__SKIP".into(), "0:1".into()));
    let mut filter = skipping.start(dir.path());
    let three = [(0, 3)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &three, Duration::from_secs(60), || filter.logs());
    let scrape = filter.scrape();
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(metric(&scrape, SKIPPED, &["partition=\"0\""]), 1.0, "{scrape}");
    assert_eq!(
        forwarded(&output, &input, 1)[&0],
        [Some("v1".to_string()), Some("v2".to_string())]
    );
}

/// Issue 22, item 9: an output partition offline (its leader down on librdkafka's mock cluster)
/// leaves that partition's records unacknowledged for as long as it lasts (the output's producer
/// waits: nothing may be lost or reordered). The periodic checkpoint must still commit the
/// partitions that are done: partition 0's committed offset reaches its end while partition 1's
/// stays where its output stopped acknowledging. Once the leader is back, everything is
/// committed and the output holds every record once, in order.
#[test]
fn an_offline_output_partition_does_not_freeze_the_other_partitions_checkpoints() {
    use rdkafka::mocking::{MockCluster, MockCoordinator};
    let cluster: MockCluster<'static, rdkafka::producer::DefaultProducerContext> = MockCluster::new(2).unwrap();
    cluster.create_topic("in", 2, 1).unwrap();
    cluster.create_topic("out", 2, 1).unwrap();
    cluster.partition_leader("in", 0, Some(1)).unwrap();
    cluster.partition_leader("in", 1, Some(1)).unwrap();
    cluster.partition_leader("out", 0, Some(1)).unwrap();
    cluster.partition_leader("out", 1, Some(2)).unwrap();
    let broker = Broker::at(cluster.bootstrap_servers());
    let dir = tempfile::tempdir().unwrap();
    let mut spec = FilterSpec::on(broker.clone(), "in", "out", dir.path());
    spec.session_timeout_ms = Some(6000);
    cluster
        .coordinator(MockCoordinator::Group(spec.group.clone()), 1)
        .unwrap();
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    let values = |range: std::ops::Range<u64>| -> Vec<(i32, u64)> { range.map(|v| ((v % 2) as i32, v)).collect() };
    broker.produce_values("in", &values(0..200), Duration::ZERO);
    let half = [(0, 100), (1, 100)].into_iter().collect();
    broker.wait_committed(&spec.group, "in", &half, Duration::from_secs(60), || filter.logs());

    cluster.broker_down(2).unwrap();
    broker.produce_values("in", &values(200..400), Duration::ZERO);
    let p0_done = [(0, 200)].into_iter().collect();
    broker.wait_committed(&spec.group, "in", &p0_done, Duration::from_secs(30), || filter.logs());
    let c = broker.committed(&spec.group, "in", 2);
    assert_eq!(c[&1].0, Some(100), "partition 1 waits for its output: {c:?}");
    assert!(filter.running(), "{}", filter.logs());

    cluster.broker_up(2).unwrap();
    let ends = [(0, 200), (1, 200)].into_iter().collect();
    broker.wait_committed(&spec.group, "in", &ends, Duration::from_secs(60), || filter.logs());
    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = broker.read_values("out", 2);
    let v = kafka_dedup::scenario::verify(&values(0..400), &out);
    assert!(v.ok() && v.output_records == 400, "{v:?}");
}

/// Issue 22, "Low": a lost assignment (session timeout) of a halted partition whose only
/// unacknowledged record is the refused one, which is not in the producer, has nothing to drop:
/// released without commit, and the process runs on (it exited, `AssignmentLost`, because the
/// refused record counted as in flight). The process is stopped (SIGSTOP) past its 6 s session
/// timeout, then continued: the group gives it the partition back, which halts again at the same
/// record.
#[test]
fn a_lost_assignment_of_a_halted_partition_does_not_stop_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("lost-in"), unique("lost-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic_with(&output, 1, &[("max.message.bytes", "100000")]);
    let mut records = small("a", 1, 1);
    records.push((0, raw(None, Some(&"w".repeat(150_000)), &[])));
    produce_large(&input, &records);
    let spec = FilterSpec::new(&input, &output, dir.path()).killable();
    let mut filter = spec.start(dir.path());
    // Every record but the refused one acknowledged first (on a broker just started, the
    // producer's first request waits for its producer id: "Coordinator load in progress"), or
    // the record still in the producer makes the loss stop the process, rightly.
    filter.wait_metric(FORWARDED, &[], 1.0, Duration::from_secs(60));
    filter.wait_metric(REFUSED, &["partition=\"0\""], 1.0, Duration::from_secs(60));
    filter.signal(libc::SIGSTOP);
    // The stimulus, not a wait for an event: stopped for longer than the session timeout (6 s).
    std::thread::sleep(Duration::from_secs(9));
    filter.signal(libc::SIGCONT);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let relearned = |logs: &str| logs.matches("partition running").count() >= 2 && logs.contains("assignment lost");
    while !relearned(&filter.logs()) {
        assert!(filter.running(), "kafka-dedup exited:\n{}", filter.logs());
        assert!(std::time::Instant::now() < deadline, "{}", filter.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    // Owned again, it meets the record again and halts again.
    while !http_get(&filter.http, "/readyz").is_some_and(|(_, body)| body.contains("halted")) {
        assert!(filter.running(), "kafka-dedup exited:\n{}", filter.logs());
        assert!(std::time::Instant::now() < deadline, "{}", filter.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(filter.logs().contains("releasing without commit"), "{}", filter.logs());
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(
        kafka().committed(&spec.group, &input, 1)[&0].0,
        Some(1),
        "committed up to the refused record:\n{}",
        filter.logs()
    );
}

/// The records of `small(name, n, partitions)`, each stamped `at` (ms since the Unix epoch), as
/// `produce_timed` takes them for partition `p`.
fn small_at(name: &str, n: usize, p: i32, at: i64) -> Vec<(i64, Raw)> {
    (0..n)
        .map(|i| (at, raw(None, Some(&format!("{name}-{p}-{i}")), &[])))
        .collect()
}

/// Writes `a-P-0, a-P-1` (stamped now) on each of `partitions` partitions, then, on partition 0
/// only, a record `old` stamped two hours ago, then `b-P-0, b-P-1` (now). Returns the old
/// record's timestamp (ms since the Unix epoch).
fn produce_with_an_old_record(input: &str, partitions: i32) -> i64 {
    let now = wall_ms();
    for p in 0..partitions {
        let mut records = small_at("a", 2, p, now);
        if p == 0 {
            records.push((now - 2 * 3_600_000, raw(None, Some("old"), &[])));
        }
        records.extend(small_at("b", 2, p, now));
        kafka().produce_timed(input, p, &records);
    }
    now - 2 * 3_600_000
}

/// An output topic that takes records stamped at most an hour ago
/// (`message.timestamp.before.max.ms`), and one input record on partition 0 stamped two hours
/// ago among records stamped now: the broker would refuse its batch (`INVALID_TIMESTAMP`), which
/// under the gapless guarantee kills the producer, and the restart meets the same record. The
/// filter refuses it before producing it, as a record too large: only partition 0 halts, the
/// others run on, `/readyz` names the offset and `input.skip`, which lets it past at the next
/// start; nothing else is lost or repeated.
#[test]
fn a_record_older_than_the_output_takes_halts_only_its_partition_until_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("old-in"), unique("old-out"));
    kafka().create_topic(&input, 3);
    kafka().create_topic_with(&output, 3, &[("message.timestamp.before.max.ms", "3600000")]);
    produce_with_an_old_record(&input, 3);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut filter = spec.start(dir.path());
    filter.wait_metric(FORWARDED, &[], 10.0, Duration::from_secs(60));
    filter.wait_metric(REFUSED, &["partition=\"0\""], 1.0, Duration::from_secs(60));
    let (code, body) = http_get(&filter.http, "/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("halted") && body.contains("offset 2") && body.contains("input.skip"),
        "{body}"
    );
    assert!(body.contains("message.timestamp.before.max.ms"), "{body}");
    let ends = [(0, 2), (1, 4), (2, 4)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &ends, Duration::from_secs(60), || filter.logs());
    assert!(filter.running(), "{}", filter.logs());
    assert!(filter.terminate().success(), "{}", filter.logs());

    let mut skipping = spec.clone();
    skipping.env.push(("KAFKA_DEDUP__INPUT__SKIP".into(), "0:2".into()));
    let mut filter = skipping.start(dir.path());
    let five = [(0, 5), (1, 4), (2, 4)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &five, Duration::from_secs(60), || filter.logs());
    let scrape = filter.scrape();
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(metric(&scrape, SKIPPED, &["partition=\"0\""]), 1.0, "{scrape}");
    let out = forwarded(&output, &input, 3);
    for p in 0..3 {
        let want: Vec<Option<String>> = ["a-{p}-0", "a-{p}-1", "b-{p}-0", "b-{p}-1"]
            .iter()
            .map(|t| Some(t.replace("{p}", &p.to_string())))
            .collect();
        assert_eq!(out[&p], want, "partition {p}");
    }
}

/// The same old record with `fingerprint.dead_letter_topic` set: it goes there, with the reason
/// `timestamp_out_of_range` and its provenance, and its partition runs on; counted, nothing halts.
#[test]
fn a_record_older_than_the_output_takes_goes_to_the_dead_letter_topic() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output, dlq) = (unique("oldl-in"), unique("oldl-out"), unique("oldl-dlq"));
    kafka().create_topic(&input, 1);
    kafka().create_topic_with(&output, 1, &[("message.timestamp.before.max.ms", "3600000")]);
    kafka().create_topic(&dlq, 1);
    produce_with_an_old_record(&input, 1);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.fingerprint = format!("[fingerprint]\nsource = \"value\"\ndead_letter_topic = \"{dlq}\"\n");
    let mut filter = spec.start(dir.path());
    let five = [(0, 5)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &five, Duration::from_secs(60), || filter.logs());
    let scrape = filter.scrape();
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(
        metric(&scrape, REFUSED, &["partition=\"0\"", "action=\"dead_letter\""]),
        1.0,
        "{scrape}"
    );
    assert_eq!(
        forwarded(&output, &input, 1)[&0],
        [
            Some("a-0-0".into()),
            Some("a-0-1".into()),
            Some("b-0-0".into()),
            Some("b-0-1".into())
        ]
    );
    let dead = kafka().read_records(&dlq, 1);
    assert_eq!(dead[&0].len(), 1);
    assert_eq!(dead[&0][0].value.as_deref(), Some(&b"old"[..]));
    assert_eq!(
        dead[&0][0].header("kafka-dedup.reason"),
        Some(Some(&b"timestamp_out_of_range"[..]))
    );
}

/// A record stamped in the future beyond the output's `message.timestamp.after.max.ms` (Apache
/// Kafka 4 sets it to an hour by default, KIP-1030; 20 s here) halts its partition until it is in
/// range, and is then forwarded by the halt's resend. Its fingerprint must be learned then, as
/// for any record forwarded: its replay (the same event, the same stamp), well inside the horizon
/// (60 generations of 1 s), is dropped, not forwarded a second time.
#[test]
fn a_record_forwarded_after_its_halt_is_learned_and_its_replay_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("fut-in"), unique("fut-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic_with(&output, 1, &[("message.timestamp.after.max.ms", "20000")]);
    let now = wall_ms();
    let future = now + 25_000;
    let mut records = small_at("a", 2, 0, now);
    records.push((future, raw(None, Some("future"), &[])));
    records.extend(small_at("b", 2, 0, now));
    kafka().produce_timed(&input, 0, &records);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.generations = 60;
    let mut filter = spec.start(dir.path());
    filter.wait_metric(
        REFUSED,
        &["partition=\"0\"", "action=\"halt\""],
        1.0,
        Duration::from_secs(60),
    );
    // Forwarded once in range (about 7 s on), then the records after it.
    let five = [(0, 5)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &five, Duration::from_secs(90), || filter.logs());
    // The replay, as upstream replays it: the same event time.
    let mut replay = vec![(future, raw(None, Some("future"), &[]))];
    replay.extend(small_at("c", 1, 0, wall_ms()));
    kafka().produce_timed(&input, 0, &replay);
    let seven = [(0, 7)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &seven, Duration::from_secs(60), || filter.logs());
    let scrape = filter.scrape();
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(
        forwarded(&output, &input, 1)[&0],
        ["a-0-0", "a-0-1", "future", "b-0-0", "b-0-1", "c-0-0"]
            .map(|t| Some(t.to_string()))
            .to_vec()
    );
    assert_eq!(metric(&scrape, DROPPED, &["partition=\"0\""]), 1.0, "{scrape}");
}

/// The old record of [`produce_with_an_old_record`] refused by the output (it takes an hour), and
/// a dead-letter topic with the same limit (Apache Kafka 4's defaults apply to every topic): its
/// copy is stamped now, with the record's own timestamp in `kafka-dedup.timestamp`, so the
/// dead-letter topic takes it and the partition goes on. Sent with the record's stamp, the copy
/// was refused too: the partition halted for ever in idempotent mode, and in transactional mode
/// (the copy in the transaction) the process stopped, and stopped again at every start.
fn an_old_record_goes_to_a_dead_letter_topic_with_the_same_limit(transactional: bool) {
    let dir = tempfile::tempdir().unwrap();
    let (input, output, dlq) = (unique("olds-in"), unique("olds-out"), unique("olds-dlq"));
    let hour = [("message.timestamp.before.max.ms", "3600000")];
    kafka().create_topic(&input, 1);
    kafka().create_topic_with(&output, 1, &hour);
    kafka().create_topic_with(&dlq, 1, &hour);
    let old = produce_with_an_old_record(&input, 1);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.fingerprint = format!("[fingerprint]\nsource = \"value\"\ndead_letter_topic = \"{dlq}\"\n");
    if transactional {
        spec.env
            .push(("KAFKA_DEDUP__OUTPUT__DELIVERY".into(), "transactional".into()));
        spec.env
            .push(("KAFKA_DEDUP__OUTPUT__TRANSACTIONAL_ID".into(), unique("txn")));
    }
    let mut filter = spec.start(dir.path());
    let five = [(0, 5)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &five, Duration::from_secs(60), || filter.logs());
    let scrape = filter.scrape();
    assert!(filter.running(), "{}", filter.logs());
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_no_side_copy_refused(&scrape);
    assert_eq!(
        forwarded(&output, &input, 1)[&0],
        ["a-0-0", "a-0-1", "b-0-0", "b-0-1"]
            .map(|t| Some(t.to_string()))
            .to_vec()
    );
    assert_one_copy_restamped(&dlq, "old", "timestamp_out_of_range", old);
}

/// Nothing refused by a side topic (`kafka_dedup_side_copies_refused_total` 0 in `scrape`).
fn assert_no_side_copy_refused(scrape: &str) {
    assert_eq!(
        metric(scrape, "kafka_dedup_side_copies_refused_total", &[]),
        0.0,
        "{scrape}"
    );
}

/// `side` (partition 0) holds one copy, of `value`, with the reason `reason` and the record's own
/// timestamp `stamp` in `kafka-dedup.timestamp` (it was stamped now).
fn assert_one_copy_restamped(side: &str, value: &str, reason: &str, stamp: i64) {
    let copies = kafka().read_records(side, 1);
    assert_eq!(copies[&0].len(), 1, "{:?}", copies[&0]);
    assert_eq!(copies[&0][0].value.as_deref(), Some(value.as_bytes()));
    assert_eq!(
        copies[&0][0].header("kafka-dedup.reason"),
        Some(Some(reason.as_bytes()))
    );
    assert_eq!(
        copies[&0][0].header("kafka-dedup.timestamp"),
        Some(Some(stamp.to_string().as_bytes()))
    );
}

#[test]
fn an_old_record_goes_to_a_dead_letter_topic_with_the_same_limit_idempotent() {
    an_old_record_goes_to_a_dead_letter_topic_with_the_same_limit(false);
}

#[test]
fn an_old_record_goes_to_a_dead_letter_topic_with_the_same_limit_transactional() {
    an_old_record_goes_to_a_dead_letter_topic_with_the_same_limit(true);
}

/// `input.skip` of the old record with a dead-letter topic that takes an hour: the skip's copy is
/// stamped now (its stamp in `kafka-dedup.timestamp`), so the skip gets past it. Before, the skip
/// sent it with its own stamp, the dead-letter topic refused it, and the partition halted there.
#[test]
fn input_skip_of_an_old_record_gets_past_a_dead_letter_topic_with_a_limit() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output, dlq) = (unique("oldk-in"), unique("oldk-out"), unique("oldk-dlq"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    kafka().create_topic_with(&dlq, 1, &[("message.timestamp.before.max.ms", "3600000")]);
    let old = produce_with_an_old_record(&input, 1);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.fingerprint = format!("[fingerprint]\nsource = \"value\"\ndead_letter_topic = \"{dlq}\"\n");
    spec.env.push(("KAFKA_DEDUP__INPUT__SKIP".into(), "0:2".into()));
    let mut filter = spec.start(dir.path());
    let five = [(0, 5)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &five, Duration::from_secs(60), || filter.logs());
    let scrape = filter.scrape();
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(metric(&scrape, SKIPPED, &["partition=\"0\""]), 1.0, "{scrape}");
    assert_no_side_copy_refused(&scrape);
    assert_eq!(
        forwarded(&output, &input, 1)[&0],
        ["a-0-0", "a-0-1", "b-0-0", "b-0-1"]
            .map(|t| Some(t.to_string()))
            .to_vec()
    );
    assert_one_copy_restamped(&dlq, "old", "skipped", old);
}

/// A replay of a record stamped two hours ago, copied to an `output.duplicates_topic` that takes
/// an hour (the output has no limit, so the first copy is forwarded as it is): the copy is
/// stamped now, the record's stamp in `kafka-dedup.timestamp`, and nothing halts. Before, the
/// duplicates topic refused it and the partition halted.
#[test]
fn a_replay_copied_to_a_duplicates_topic_with_a_limit_is_stamped_now() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output, dups) = (unique("oldd-in"), unique("oldd-out"), unique("oldd-dups"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    kafka().create_topic_with(&dups, 1, &[("message.timestamp.before.max.ms", "3600000")]);
    let old = wall_ms() - 2 * 3_600_000;
    let records = [
        (old, raw(None, Some("old"), &[])),
        (old, raw(None, Some("old"), &[])),
        (wall_ms(), raw(None, Some("new"), &[])),
    ];
    kafka().produce_timed(&input, 0, &records);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__DUPLICATES_TOPIC".into(), dups.clone()));
    let mut filter = spec.start(dir.path());
    let three = [(0, 3)].into_iter().collect();
    kafka().wait_committed(&spec.group, &input, &three, Duration::from_secs(60), || filter.logs());
    let scrape = filter.scrape();
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_no_side_copy_refused(&scrape);
    assert_eq!(
        forwarded(&output, &input, 1)[&0],
        [Some("old".to_string()), Some("new".to_string())]
    );
    assert_one_copy_restamped(&dups, "old", "duplicate", old);
}

//! Issue 15: lost offsets lose nothing and duplicate nothing. Every forwarded record names its
//! input partition and offset (`kafka-dedup.source`), so when the group's committed offset is
//! missing or unusable, the output itself says where to resume. The binary runs as its own
//! process against the test broker (Apache Kafka).

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use kafka_dedup::scenario;

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";
const FROM_OUTPUT: &str = "kafka_dedup_positions_from_output_total";

fn values(range: std::ops::Range<u64>) -> Vec<(i32, u64)> {
    range.map(|v| (0, v)).collect()
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// Records `range` (key and value the decimal text) stamped `ts`, written to partition 0.
fn stamped(kafka: &Broker, topic: &str, range: std::ops::Range<u64>, ts: i64) {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    let producer: ThreadedProducer<_> = kafka.client().create().unwrap();
    for v in range {
        let text = v.to_string();
        producer
            .send(
                BaseRecord::to(topic)
                    .partition(0)
                    .key(&text)
                    .payload(&text)
                    .timestamp(ts),
            )
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// Commits `offset` for partition 0 of `topic` in `group`, without metadata (what an operator's
/// `kafka-consumer-groups --reset-offsets` does).
fn reset(kafka: &Broker, group: &str, topic: &str, offset: i64) {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{Offset, TopicPartitionList};
    let mut c = kafka.client();
    c.set("group.id", group);
    let consumer: BaseConsumer = c.create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Offset(offset)).unwrap();
    // Apache Kafka takes a commit from outside the group only once the group is empty: a killed
    // member stays in it until its session times out.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while let Err(e) = consumer.commit(&tpl, CommitMode::Sync) {
        assert!(std::time::Instant::now() < deadline, "reset {group}: {e}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A changed `input.group_id` (or a group whose offsets the broker expired after
/// `offsets.retention.minutes`): the new group has no committed offset. 100 records were forwarded
/// and committed by the old group; the new one must forward none of them again, only what comes
/// after, and say that its position came from the output.
#[test]
fn a_group_without_offsets_forwards_nothing_again() {
    let kafka = kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("prov-in"), unique("prov-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, 1);
    kafka.produce_values(&input, &values(0..100), Duration::ZERO);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut first = spec.start(dir.path());
    wait_drained(&spec, 1, &[&first], Duration::from_secs(90), || first.logs());
    assert!(first.terminate().success(), "{}", first.logs());

    let mut renamed = spec.clone();
    renamed.group = unique("renamed");
    renamed.store = dir.path().join("store-renamed");
    kafka.produce_values(&input, &values(100..150), Duration::ZERO);
    let mut again = renamed.start(dir.path());
    wait_drained(&renamed, 1, &[&again], Duration::from_secs(90), || again.logs());
    let scrape = again.scrape();
    assert_eq!(metric(&scrape, FROM_OUTPUT, &["reason=\"no_commit\""]), 1.0, "{scrape}");
    assert_eq!(metric(&scrape, FORWARDED, &[]), 50.0, "{scrape}");
    assert!(again.terminate().success(), "{}", again.logs());
    let v = scenario::verify(&values(0..150), &kafka.read_values(&output, 1));
    assert!(v.ok() && v.output_records == 150, "{v:?}\n{}", again.logs());
}

/// An operator resets the group to offset 0 while the filter is stopped (the commit carries no
/// metadata). The horizon covers only the last generations, so a filter that resumed at 0 would
/// forward everything older again. Three batches with record times 10 s apart (interval 1 s)
/// make the generations rotate, so the horizon marker leaves the first batch behind; the restart
/// must see a commit without metadata (reason `no_metadata`) and resume after the output's newest
/// record.
#[test]
fn an_offset_reset_to_zero_forwards_nothing_again() {
    let kafka = kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("reset-in"), unique("reset-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, 1);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    // About the horizon: its timeline (batches 10 s apart) is written for H_min 1 s, H_max 2 s.
    spec.generations = 2;
    let mut first = spec.start(dir.path());
    first.wait_ready(Duration::from_secs(60));
    let t0 = now_ms() - 30_000;
    for (i, range) in [0..100u64, 100..200, 200..300].into_iter().enumerate() {
        let end = range.end as i64;
        stamped(&kafka, &input, range, t0 + 10_000 * i as i64);
        kafka.wait_committed(
            &spec.group,
            &input,
            &BTreeMap::from([(0, end)]),
            Duration::from_secs(60),
            || first.logs(),
        );
    }
    assert!(first.terminate().success(), "{}", first.logs());
    let marker = kafka.committed(&spec.group, &output, 1)[&0].0;
    assert!(
        marker.is_some_and(|m| m > 0),
        "the horizon marker left the first batch: {marker:?}"
    );

    reset(&kafka, &spec.group, &input, 0);
    kafka.produce_values(&input, &values(300..350), Duration::ZERO);
    let mut again = spec.start(dir.path());
    wait_drained(&spec, 1, &[&again], Duration::from_secs(90), || again.logs());
    let scrape = again.scrape();
    assert_eq!(
        metric(&scrape, FROM_OUTPUT, &["reason=\"no_metadata\""]),
        1.0,
        "{scrape}\n{}",
        again.logs()
    );
    assert!(again.terminate().success(), "{}", again.logs());
    let v = scenario::verify(&values(0..350), &kafka.read_values(&output, 1));
    assert!(v.ok() && v.output_records == 350, "{v:?}\n{}", again.logs());
}

/// Issue 14, case 4: `partitioning = "key"` on a broker that drops offset-commit metadata (no
/// horizon marker exists in key mode). The filter forwards 200 of 300 keyed records over three
/// output partitions and is killed (crash point) before its first periodic checkpoint; its store
/// is deleted, and its commit is written again without metadata (Apache Kafka keeps metadata; a
/// broker that drops it, or an operator's offset tool, leaves just this). The restart has nothing
/// but a commit without metadata: it must re-learn the output by record time and resume from the
/// provenance, forwarding every record exactly once.
#[test]
fn key_partitioning_on_a_broker_that_drops_metadata() {
    let kafka = kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("keyprov-in"), unique("keyprov-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, 3);
    kafka.produce_values(&input, &values(0..300), Duration::ZERO);
    let mut spec = FilterSpec::new(&input, &output, dir.path()).killable();
    spec.interval = "1h";
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__PARTITIONING".into(), "key".into()));
    let mut crashing = spec.clone();
    crashing
        .env
        .push(("KAFKA_DEDUP_CRASH_AT".into(), "after-ack:200".into()));
    let mut first = crashing.start(dir.path());
    let status = first.wait_exit(Duration::from_secs(60));
    assert!(!status.success(), "aborted at the crash point:\n{}", first.logs());
    std::fs::remove_dir_all(&spec.store).unwrap();
    let (committed, metadata) = kafka.committed(&spec.group, &input, 1)[&0].clone();
    let committed = committed.expect("the assignment's commit");
    assert!(!metadata.is_empty(), "Apache Kafka keeps the commit's metadata");
    reset(&kafka, &spec.group, &input, committed);

    spec.interval = "1s";
    let mut again = spec.survivor().start(dir.path());
    wait_drained(&spec, 1, &[&again], Duration::from_secs(90), || again.logs());
    let scrape = again.scrape();
    assert!(again.terminate().success(), "{}", again.logs());
    let out = kafka.read_values(&output, 3);
    let mut all: Vec<u64> = out.values().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..300).collect::<Vec<_>>(),
        "each record once:\n{scrape}\n{}",
        again.logs()
    );
    for (q, vals) in &out {
        assert!(
            vals.windows(2).all(|w| w[0] < w[1]),
            "output partition {q} in input order: {vals:?}"
        );
    }
    assert_eq!(
        metric(&scrape, FROM_OUTPUT, &["reason=\"no_metadata\""]),
        1.0,
        "{scrape}"
    );
}

/// `output.provenance = false`: forwarded records are exactly the input records (no extra header).
#[test]
fn provenance_can_be_switched_off() {
    let kafka = kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("noprov-in"), unique("noprov-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, 1);
    let records: Vec<Raw> = (0..20)
        .map(|i| raw(Some(&format!("k{i}")), Some(&i.to_string()), &[("trace", "t")]))
        .collect();
    kafka.produce_raw(&input, 0, &records);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__PROVENANCE".into(), "false".into()));
    let mut filter = spec.start(dir.path());
    filter.wait_metric(FORWARDED, &[], 20.0, Duration::from_secs(60));
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(kafka.read_records(&output, 1)[&0], records);
    // With it on (the default), the same records carry their source, and nothing else changes.
    let output2 = unique("prov-out2");
    kafka.create_topic(&output2, 1);
    let spec2 = FilterSpec::new(&input, &output2, &dir.path().join("on"));
    std::fs::create_dir_all(dir.path().join("on")).unwrap();
    let mut filter = spec2.start(dir.path());
    filter.wait_metric(FORWARDED, &[], 20.0, Duration::from_secs(60));
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(kafka.read_forwarded(&output2, 1, &input)[&0], records);
}

/// The output names an input offset the input does not have (the input topic was deleted and
/// recreated: its offsets start again at 0; or the output was written from another cluster).
/// A group without offsets must not resume after that offset, which would skip every record of
/// the new topic: the provenance is checked against the input and ignored.
#[test]
fn provenance_the_input_does_not_confirm_is_ignored() {
    let kafka = kafka();
    let (input, output) = (unique("recreated-in"), unique("recreated-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, 1);
    let stale = raw(
        Some("k"),
        Some("old"),
        &[("kafka-dedup.source", &format!("{input}/0/1000000"))],
    );
    kafka.produce_raw(&output, 0, &[stale]);
    kafka.produce_values(&input, &values(0..50), Duration::ZERO);
    let dir = tempfile::tempdir().unwrap();
    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut filter = spec.start(dir.path());
    wait_drained(&spec, 1, &[&filter], Duration::from_secs(90), || filter.logs());
    assert_eq!(metric(&filter.scrape(), FORWARDED, &[]), 50.0, "{}", filter.logs());
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert!(filter.logs().contains("holds no such record"), "{}", filter.logs());
}

/// Issue 22, item 6: a group without offsets whose newest provenance names an input record that
/// retention deleted. The old group forwarded 0..60; 60..100 wait; DeleteRecords moves the
/// input's log start to 70, past the newest record the output proves forwarded (offset 59). With
/// `input.start = "latest"` the new group must resume at the log start (the next offset after 59
/// is gone), forwarding the retained backlog 70..100, never skip it by falling back to
/// `input.start`.
#[test]
fn a_group_without_offsets_resumes_at_the_log_start_when_retention_deleted_its_provenance() {
    let kafka = kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("retained-in"), unique("retained-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, 1);
    kafka.produce_values(&input, &values(0..60), Duration::ZERO);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut first = spec.start(dir.path());
    wait_drained(&spec, 1, &[&first], Duration::from_secs(90), || first.logs());
    assert!(first.terminate().success(), "{}", first.logs());

    kafka.produce_values(&input, &values(60..100), Duration::ZERO);
    kafka.delete_records(&input, 0, 70);
    let mut renamed = spec.clone();
    renamed.group = unique("retained");
    renamed.store = dir.path().join("store-renamed");
    renamed.env.push(("KAFKA_DEDUP__INPUT__START".into(), "latest".into()));
    let mut again = renamed.start(dir.path());
    wait_drained(&renamed, 1, &[&again], Duration::from_secs(90), || again.logs());
    let scrape = again.scrape();
    assert!(again.terminate().success(), "{}", again.logs());
    assert_eq!(
        metric(&scrape, FORWARDED, &[]),
        30.0,
        "the retained backlog 70..100:\n{scrape}\n{}",
        again.logs()
    );
    assert_eq!(metric(&scrape, FROM_OUTPUT, &["reason=\"no_commit\""]), 1.0, "{scrape}");
    let expected: Vec<u64> = (0..60).chain(70..100).collect();
    assert_eq!(kafka.read_values(&output, 1)[&0], expected);
    assert!(again.logs().contains("log start"), "{}", again.logs());
}

/// Issue 22 (low): with `partitioning = "key"` an output partition holds records of every input
/// partition; recovery must learn only those whose provenance names the partition it recovers.
/// Input partition 1 forwards `7`; the store is deleted, so the restart rebuilds both partitions
/// from the output; then `7` arrives on input partition 0, a distinct event in the partition
/// scope, and must be forwarded (not dropped as a replay of partition 1's record).
#[test]
fn key_partitioning_recovery_learns_only_the_partitions_own_records() {
    let kafka = kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("keyown-in"), unique("keyown-out"));
    kafka.create_topic(&input, 2);
    kafka.create_topic(&output, 2);
    // One stamp for every record: the replay of 7 on partition 1 lies inside the horizon.
    let t0 = now_ms();
    kafka.produce_values_at(&input, &[(1, 7), (1, 8), (0, 1)], t0);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__PARTITIONING".into(), "key".into()));
    let mut first = spec.start(dir.path());
    wait_drained(&spec, 2, &[&first], Duration::from_secs(90), || first.logs());
    assert!(first.terminate().success(), "{}", first.logs());
    std::fs::remove_dir_all(&spec.store).unwrap();

    kafka.produce_values_at(&input, &[(0, 7), (1, 7)], t0);
    let mut again = spec.start(dir.path());
    wait_drained(&spec, 2, &[&again], Duration::from_secs(90), || again.logs());
    let scrape = again.scrape();
    assert!(again.terminate().success(), "{}", again.logs());
    assert_eq!(
        metric(&scrape, FORWARDED, &[]),
        1.0,
        "partition 0's 7 forwarded, partition 1's replay dropped:\n{scrape}\n{}",
        again.logs()
    );
    let mut all: Vec<u64> = kafka.read_values(&output, 2).values().flatten().copied().collect();
    all.sort_unstable();
    assert_eq!(all, [1, 7, 7, 8]);
}

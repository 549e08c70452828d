//! Issue 21, case 7 (part): the broker's own limits, on Apache Kafka (the suite's broker), where
//! each is enforced for real: offset-commit metadata over `offset.metadata.max.bytes` (4096 bytes)
//! is refused, a compacted output topic refuses records without a key, and retention (here
//! DeleteRecords) moves the log start past a committed offset.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kafka_dedup::metadata::CheckpointMeta;
use rdkafka::admin::{AdminClient, AdminOptions, AlterConfig, ResourceSpecifier};
use rdkafka::client::DefaultClientContext;
use rdkafka::{Offset, TopicPartitionList};

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";

fn committed_offset(kafka: &Broker, group: &str, topic: &str) -> Option<i64> {
    kafka.committed(group, topic, 1)[&0].0
}

/// Waits until `group`'s committed offset on partition 0 of `topic` is `offset`.
fn wait_committed_at(kafka: &Broker, group: &str, topic: &str, offset: i64, f: &FilterProcess) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while committed_offset(kafka, group, topic) != Some(offset) {
        assert!(
            Instant::now() < deadline,
            "committed {:?}, expected {offset}:\n{}",
            committed_offset(kafka, group, topic),
            f.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `partitioning = "key"` over 520 output partitions: the one live generation's output positions
/// (520 entries, about 4,100 bytes with the other fields) are over the broker's 4096-byte
/// `offset.metadata.max.bytes`, which refuses such a commit (`OFFSET_METADATA_TOO_LARGE`: checked
/// by committing the full form on purpose). The commit goes through in the elided form
/// (`metadata::CheckpointMeta::encode`), and a restart without its store finds the generation by
/// record time: the replays of everything forwarded are dropped, new records forwarded. (The
/// commit is the clean hand-over's; its metadata is encoded as a periodic checkpoint's.)
#[test]
fn offset_metadata_over_the_brokers_limit_is_committed_elided_and_recovers() {
    let kafka = Broker::kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("wide-in"), unique("wide-out"));
    const OUT: i32 = 520;
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, OUT);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    // A horizon of at least 30 s: the replays below come well inside it (docs/guarantee.md, "The guarantee").
    spec.interval = "30s";
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__PARTITIONING".into(), "key".into()));
    let first: Vec<(i32, u64)> = (0..300).map(|v| (0, v)).collect();
    kafka.produce_values(&input, &first, Duration::ZERO);
    let mut f = spec.start(dir.path());
    f.wait_metric(FORWARDED, &[], 300.0, Duration::from_secs(90));
    // The hand-over commits synchronously; a commit the broker refused leaves no offset.
    assert!(f.terminate().success(), "{}", f.logs());
    let (offset, meta) = kafka.committed(&spec.group, &input, 1)[&0].clone();
    assert_eq!(offset, Some(300), "{}", f.logs());
    assert!(meta.len() <= 4096, "{} bytes", meta.len());
    let m = CheckpointMeta::decode(&meta).unwrap_or_else(|| panic!("kafka-dedup's metadata: {meta}"));
    assert!(m.gens.is_empty() && m.elided == Some(1), "the elided form: {meta}");

    // Another machine (no store): replays of 0..300, then 300..400.
    std::fs::remove_dir_all(&spec.store).unwrap();
    let second: Vec<(i32, u64)> = (0..400).map(|v| (0, v)).collect();
    kafka.produce_values(&input, &second, Duration::ZERO);
    let mut again = spec.start(dir.path());
    again.wait_metric(FORWARDED, &[], 100.0, Duration::from_secs(90));
    let scrape = again.scrape();
    assert_eq!(
        metric(&scrape, "kafka_dedup_store_rebuilds_total", &["reason=\"missing\""]),
        1.0
    );
    assert!(again.terminate().success(), "{}", again.logs());
    assert_eq!(
        metric(&scrape, FORWARDED, &[]),
        100.0,
        "the replays dropped:\n{}",
        again.logs()
    );
    let (offset, meta) = kafka.committed(&spec.group, &input, 1)[&0].clone();
    assert_eq!(offset, Some(700));
    assert!(
        CheckpointMeta::decode(&meta).is_some_and(|m| m.elided.is_some()),
        "{meta}"
    );
    let mut values: Vec<u64> = kafka.read_values(&output, OUT).into_values().flatten().collect();
    values.sort_unstable();
    assert_eq!(values, (0..400).collect::<Vec<u64>>());
    kafka.delete_topic(&output);
}

/// Retention moves the input's log start past the committed offset while kafka-dedup is down
/// (DeleteRecords, as a retention pass would): the restart resumes at the log start with a
/// warning, never at the end; the deleted records are gone for every reader, the rest is
/// forwarded once.
#[test]
fn retention_past_the_committed_offset_resumes_at_the_log_start() {
    let kafka = Broker::kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("ret-in"), unique("ret-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic(&output, 1);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let write = |r: std::ops::Range<u64>| {
        let records: Vec<(i32, u64)> = r.map(|v| (0, v)).collect();
        kafka.produce_values(&input, &records, Duration::ZERO);
    };
    write(0..100);
    let mut f = spec.start(dir.path());
    wait_committed_at(&kafka, &spec.group, &input, 100, &f);
    assert!(f.terminate().success(), "{}", f.logs());

    write(100..200);
    let admin: AdminClient<DefaultClientContext> = kafka.client().create().unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&input, 0, Offset::Offset(150)).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let res = rt
        .block_on(admin.delete_records(&tpl, &AdminOptions::new()))
        .expect("DeleteRecords");
    assert_eq!(res.elements()[0].offset(), Offset::Offset(150), "the new log start");
    write(200..250);

    let mut again = spec.start(dir.path());
    wait_committed_at(&kafka, &spec.group, &input, 250, &again);
    let logs = again.logs();
    assert!(logs.contains("resuming at the log start"), "{logs}");
    assert!(again.terminate().success(), "{logs}");
    let out = kafka.read_values(&output, 1)[&0].clone();
    let expected: Vec<u64> = (0..100).chain(150..250).collect();
    assert_eq!(out, expected);
}

/// A compacted output topic (`cleanup.policy = compact`) refuses records without a key
/// (`INVALID_RECORD`, for the whole produce request's batch). Input: `0..5` keyed, `5` without key,
/// `6..10` keyed. kafka-dedup stops (exit 1) naming the key-less record and the cause, and commits
/// nothing past it; once the topic accepts it (here `cleanup.policy = delete`), the restart
/// forwards everything once, in order: nothing was lost.
#[test]
fn a_compacted_output_refuses_a_record_without_key() {
    let kafka = Broker::kafka();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("cmp-in"), unique("cmp-out"));
    kafka.create_topic(&input, 1);
    kafka.create_topic_with(&output, 1, &[("cleanup.policy", "compact")]);
    let text = |v: u64| v.to_string();
    let records: Vec<Raw> = (0..10)
        .map(|v| raw((v != 5).then(|| text(v)).as_deref(), Some(&text(v)), &[]))
        .collect();
    kafka.produce_raw(&input, 0, &records);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut f = spec.start(dir.path());
    let status = f.wait_exit(Duration::from_secs(60));
    let logs = f.logs();
    assert_eq!(status.code(), Some(1), "{logs}");
    assert!(
        logs.lines()
            .any(|l| l.contains("the output refused a record without a key")
                && l.contains("cleanup.policy = compact")
                && l.contains("offset=5")),
        "the key-less record and the cause are named:\n{logs}"
    );
    let committed = committed_offset(&kafka, &spec.group, &input).unwrap_or(0);
    assert!(committed <= 5, "committed {committed}: past the refused record");

    let admin: AdminClient<DefaultClientContext> = kafka.client().create().unwrap();
    let config = AlterConfig::new(ResourceSpecifier::Topic(&output)).set("cleanup.policy", "delete");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for r in rt
        .block_on(admin.alter_configs(&[config], &AdminOptions::new()))
        .expect("AlterConfigs")
    {
        r.unwrap_or_else(|(t, e)| panic!("alter {t:?}: {e}"));
    }
    // The broker applies the change from its metadata log, after AlterConfigs answered.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let described = rt
            .block_on(admin.describe_configs(&[ResourceSpecifier::Topic(&output)], &AdminOptions::new()))
            .expect("DescribeConfigs");
        let policy = described[0]
            .as_ref()
            .ok()
            .and_then(|c| c.get("cleanup.policy").and_then(|e| e.value.clone()));
        if policy.as_deref() == Some("delete") {
            break;
        }
        assert!(Instant::now() < deadline, "cleanup.policy still {policy:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    let mut again = spec.start(dir.path());
    while committed_offset(&kafka, &spec.group, &input) != Some(10) {
        assert!(again.running(), "{}", again.logs());
        assert!(Instant::now() < deadline, "{}", again.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(again.terminate().success(), "{}", again.logs());
    let out: Vec<Raw> = kafka.read_forwarded(&output, 1, &input)[&0].clone();
    assert_eq!(out, records);
}

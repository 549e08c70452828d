//! Issue 2's cases: the binary as its own process, filtering replaying topics on the real broker.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::given::Scenario;
use common::*;
use kafka_dedup::scenario;

/// Case 1: the seed scenario, 10,000 integers on 3 partitions with upstream replays.
#[test]
fn seed_scenario_on_three_partitions() {
    let mut given = Scenario::new("seed", 3);
    let filter = given.start_ready();

    let s = scenario::replay_scenario(10_000, 3, 150, 1);
    assert!(s.replays > 500, "the scenario injects replays ({})", s.replays);
    given.produce_records(&s.records, Duration::from_secs(3));
    given.wait_done(&filter);
    let filter = given.stop(filter);
    // The test configuration sets consumer-only properties (heartbeat.interval.ms): the producer
    // does not get them, so librdkafka has nothing to warn about.
    let logs = filter.logs();
    assert!(!logs.contains("CONFWARN"), "{logs}");

    let out = given.output();
    let v = scenario::verify(&s.records, &out);
    if !v.ok() {
        explain(given, &out);
    }
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.output_records, 10_000);
    for (p, values) in &out {
        assert!(
            values.iter().all(|v| v % 3 == *p as u64),
            "output partition {p} holds only values written to input partition {p}"
        );
    }
}

/// For a failed run: prints every value the output holds twice (where first, where again) and
/// keeps the scenario's directory (the store, the filter's log) for a look.
fn explain(given: Scenario, out: &BTreeMap<i32, Vec<u64>>) {
    let mut seen = std::collections::HashMap::new();
    for (p, vals) in out {
        for (i, x) in vals.iter().enumerate() {
            if let Some(prev) = seen.insert(*x, (*p, i)) {
                eprintln!("DUP value {x}: first at {prev:?}, again at ({p}, {i})");
            }
        }
    }
    let keep = given.dir.keep();
    eprintln!("kept {}", keep.display());
}

const CONSUMED: &str = "kafka_dedup_records_consumed_total";
const FORWARDED: &str = "kafka_dedup_records_forwarded_total";
const DROPPED: &str = "kafka_dedup_duplicates_dropped_total";
const UNFINGERPRINTABLE: &str = "kafka_dedup_unfingerprintable_records_total";

fn text_values(out: &BTreeMap<i32, Vec<Raw>>, p: i32) -> Vec<String> {
    out[&p]
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap_or_default()).unwrap())
        .collect()
}

/// Case 2: a retried batch. 1..500, then 401..500 again (same key, value, headers) at new
/// offsets, then 501..1000 → 1..1000 once; exactly 100 dropped.
#[test]
fn retried_batch_drops_exactly_the_repeats() {
    let s = Scenario::new("retry", 1);
    let rec = |i: u32| {
        raw(
            Some(&format!("k{i}")),
            Some(&i.to_string()),
            &[("trace", &format!("t{i}"))],
        )
    };
    let mut records: Vec<Raw> = (1..=500).map(rec).collect();
    records.extend((401..=500).map(rec));
    records.extend((501..=1000).map(rec));
    s.produce_raw(0, &records);

    let mut filter = s.start();
    filter.wait_metric(CONSUMED, &[], 1100.0, Duration::from_secs(60));
    filter.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(60));
    let scrape = filter.scrape();
    assert_eq!(metric(&scrape, CONSUMED, &[]), 1100.0);
    assert_eq!(metric(&scrape, FORWARDED, &[]), 1000.0);
    assert_eq!(metric(&scrape, DROPPED, &[]), 100.0, "{scrape}");
    s.stop(filter);

    let out = s.forwarded();
    let expected: Vec<String> = (1..=1000).map(|i| i.to_string()).collect();
    assert_eq!(text_values(&out, 0), expected);
    // Key and headers are kept.
    assert_eq!(out[&0][0], rec(1));
}

/// Case 3: identity from a header. Same value with event-id A and B: both forwarded; A again
/// with an extra header: dropped; no header: follows on_missing (forward, then dead_letter).
#[test]
fn header_selected_identity() {
    let mut given = Scenario::new("hdr", 1);
    let dlq = given.side_topic("hdr-dlq");
    let records = vec![
        raw(None, Some("same"), &[("event-id", "A")]),
        raw(None, Some("same"), &[("event-id", "B")]),
        raw(None, Some("different"), &[("retry", "1"), ("event-id", "A")]),
        raw(None, Some("no header"), &[("other", "x")]),
    ];
    given.produce_raw(0, &records);

    given.spec.fingerprint = "[fingerprint]\nsource = \"header:event-id\"\n".into();
    let mut filter = given.start();
    filter.wait_metric(CONSUMED, &[], 4.0, Duration::from_secs(60));
    filter.wait_metric(FORWARDED, &[], 3.0, Duration::from_secs(60));
    let scrape = filter.scrape();
    assert_eq!(metric(&scrape, DROPPED, &[]), 1.0);
    assert_eq!(
        metric(&scrape, UNFINGERPRINTABLE, &["action=\"forward\"", "reason=\"absent\""]),
        1.0,
        "{scrape}"
    );
    given.stop(filter);
    let out = given.forwarded();
    assert_eq!(
        out[&0],
        vec![records[0].clone(), records[1].clone(), records[3].clone()]
    );

    // The same input with on_missing = dead_letter: the header-less record goes to the DLQ.
    let mut again = given.with_new_output("hdr-out2");
    again.spec.fingerprint = format!(
        "[fingerprint]\nsource = \"header:event-id\"\non_missing = \"dead_letter\"\ndead_letter_topic = \"{dlq}\"\n"
    );
    let mut filter2 = again.start();
    filter2.wait_metric(CONSUMED, &[], 4.0, Duration::from_secs(60));
    filter2.wait_metric(FORWARDED, &[], 2.0, Duration::from_secs(60));
    filter2.wait_metric(
        UNFINGERPRINTABLE,
        &["action=\"dead_letter\""],
        1.0,
        Duration::from_secs(10),
    );
    again.stop(filter2);
    let out2 = again.forwarded();
    assert_eq!(out2[&0], vec![records[0].clone(), records[1].clone()]);
    let dead = given.broker.read_records(&dlq, 1);
    assert_eq!(dead[&0].len(), 1);
    assert_eq!(dead[&0][0].value.as_deref(), Some(&b"no header"[..]));
    assert_eq!(dead[&0][0].header("kafka-dedup.reason"), Some(Some(&b"absent"[..])));
    let source = dead[&0][0].header("kafka-dedup.source").flatten().map(<[u8]>::to_vec);
    assert_eq!(source, Some(format!("{}/0/3", given.input).into_bytes()));
}

/// Case 4: tombstones with key_value. (k1,"v1"), (k1,null), (k2,null), (k1,null) again, and
/// (k1,"") → the repeat is dropped; a null value and an empty value are different events.
#[test]
fn tombstones_and_empty_values() {
    let mut s = Scenario::new("tomb", 1);
    let records = vec![
        raw(Some("k1"), Some("v1"), &[]),
        raw(Some("k1"), None, &[]),
        raw(Some("k2"), None, &[]),
        raw(Some("k1"), None, &[]),
        raw(Some("k1"), Some(""), &[]),
    ];
    s.produce_raw(0, &records);
    s.spec.fingerprint = "[fingerprint]\nsource = \"key_value\"\n".into();
    let mut filter = s.start();
    filter.wait_metric(CONSUMED, &[], 5.0, Duration::from_secs(60));
    filter.wait_metric(FORWARDED, &[], 4.0, Duration::from_secs(60));
    assert_eq!(metric(&filter.scrape(), DROPPED, &[]), 1.0);
    s.stop(filter);
    let out = s.forwarded();
    assert_eq!(
        out[&0],
        vec![
            records[0].clone(),
            records[1].clone(),
            records[2].clone(),
            records[4].clone()
        ]
    );
}

/// Case 5: offset gaps. Input written by a transactional producer (commit markers take offsets)
/// on the broker that accepts transactions → everything forwarded once, the committed position
/// equals each partition's end (lag 0), and a restart forwards nothing again.
#[test]
fn transaction_markers_do_not_stall_the_committed_position() {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    // Given: an input written by a transactional producer, three transactions of ten records.
    let given = Scenario::new("gap", 2);
    let mut c = given.broker.client();
    c.set("transactional.id", unique("upstream"));
    let producer: ThreadedProducer<_> = c.create().unwrap();
    producer.init_transactions(Duration::from_secs(30)).unwrap();
    let mut written = Vec::new();
    for txn in 0..3 {
        producer.begin_transaction().unwrap();
        for i in 0..10u64 {
            let v = txn * 10 + i;
            let p = (v % 2) as i32;
            let text = v.to_string();
            producer
                .send(BaseRecord::to(&given.input).partition(p).key(&text).payload(&text))
                .map_err(|(e, _)| e)
                .unwrap();
            written.push((p, v));
        }
        producer.commit_transaction(Duration::from_secs(30)).unwrap();
    }
    let ends = given.broker.end_offsets(&given.input, 2);
    assert!(ends.values().all(|e| *e > 15), "markers take offsets: {ends:?}");

    // When: the filter runs; then: committed to each end, every value once.
    let mut filter = given.start();
    filter.wait_metric(FORWARDED, &[], 30.0, Duration::from_secs(90));
    given.stop(filter);
    for (p, end) in &ends {
        let committed = given.committed(*p);
        assert_eq!(
            committed,
            Some(*end),
            "partition {p}: committed {committed:?}, end {end}"
        );
    }
    let out = given.output();
    let v = scenario::verify(&written, &out);
    assert!(v.ok(), "{v:?}");
    assert_eq!(out.values().map(Vec::len).sum::<usize>(), 30);

    // Restart: after a checkpoint, nothing was consumed or forwarded again.
    let mut again = given.start();
    again.wait_ready(Duration::from_secs(90));
    again.wait_metric(
        "kafka_dedup_checkpoints_total",
        &["result=\"ok\""],
        1.0,
        Duration::from_secs(30),
    );
    let scrape = again.scrape();
    assert_eq!(metric(&scrape, CONSUMED, &[]), 0.0, "{scrape}");
    assert_eq!(metric(&scrape, FORWARDED, &[]), 0.0);
    given.stop(again);
}

/// Case 6: a graceful restart mid-stream (SIGTERM, start again) loses and repeats nothing.
#[test]
fn graceful_restart_mid_stream() {
    let mut given = Scenario::new("restart", 3);
    let mut filter = given.start_ready();
    let s = scenario::replay_scenario(6000, 3, 150, 2);
    let writer = given.produce_records_over(&s.records, Duration::from_secs(6));
    // Stop while records are flowing, then start again on the same store.
    filter.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(60));
    given.stop(filter);
    let stopped_at = given.broker.committed(&given.spec.group, &given.input, 3);
    let filter = given.start();
    writer.join().unwrap();
    given.wait_done(&filter);
    given.stop(filter);

    let out = given.output();
    let v = scenario::verify(&s.records, &out);
    if !v.ok() {
        eprintln!("stopped_at {stopped_at:?}");
        explain(given, &out);
    }
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.output_records, 6000);
    assert!(
        stopped_at.values().any(|(o, _)| o.is_some_and(|o| o > 0)),
        "the first run committed progress before stopping: {stopped_at:?}"
    );
}

/// Case 7: input compressed with zstd, lz4 and gzip is filtered like any other (snappy is covered
/// on the mock cluster).
#[test]
fn compressed_input() {
    let given = Scenario::new("codec", 2);
    let s = scenario::replay_scenario(4000, 2, 100, 3);
    let quarter = s.records.len() / 4 + 1; // four batches of codecs
    for (chunk, codec) in s.records.chunks(quarter).zip(["zstd", "lz4", "gzip", "zstd"]) {
        let mut c = given.broker.client();
        c.set("compression.type", codec).set("linger.ms", "20");
        scenario::produce(&c, &given.input, chunk, Duration::ZERO).unwrap();
    }
    let mut filter = given.start();
    filter.wait_metric(CONSUMED, &[], s.records.len() as f64, Duration::from_secs(90));
    filter.wait_metric(FORWARDED, &[], 4000.0, Duration::from_secs(60));
    assert_eq!(metric(&filter.scrape(), DROPPED, &[]), s.replays as f64);
    given.stop(filter);
    let out = given.output();
    let v = scenario::verify(&s.records, &out);
    assert!(v.ok() && v.output_records == 4000, "{v:?}");
}

/// Case 8: bad configurations exit 2 naming the key, before consuming anything.
#[test]
fn bad_configs_exit_2_naming_the_key() {
    let mut given = Scenario::new("badcfg", 1);
    // About the horizon: its plain words below are written for H_min 1 s, H_max 2 s.
    given.spec.generations = 2;
    let (dir, input, output, spec) = (given.path(), &given.input, &given.output, &given.spec);
    given.produce_raw(0, &[raw(None, Some("x"), &[])]);
    let good = spec.toml(free_port());
    let cases: Vec<(String, &str)> = vec![
        (good.replace("[input]", "[input]\ntopicc = \"typo\""), "input.topicc"),
        (good.replace(&format!("topic = \"{output}\""), ""), "output.topic"),
        (
            good.replace("source = \"value\"", "source = \"json:no-slash\""),
            "fingerprint.source",
        ),
        (
            good.replace("interval = \"1s\"", "interval = \"0s\""),
            "checkpoint.interval",
        ),
        (
            good.replace("generations = 2", "generations = 0"),
            "checkpoint.generations",
        ),
        // Issue 23, item 6: a TOML syntax error names the key of its line (and says where, below).
        (
            good.replace("interval = \"1s\"", "interval = 1s"),
            "checkpoint.interval",
        ),
    ];
    for (i, (text, key)) in cases.iter().enumerate() {
        let path = dir.join(format!("bad-{i}.toml"));
        std::fs::write(&path, text).unwrap();
        let out = kafka_dedup_command()
            .args(["run", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "case {key}: {stderr}");
        assert!(stderr.contains(&format!("`{key}`")), "case {key}: {stderr}");
        // check-config agrees.
        let check = kafka_dedup_command()
            .args(["check-config", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        assert_eq!(check.status.code(), Some(2));
        if text.contains("interval = 1s") {
            assert!(
                stderr.contains("not valid TOML at line ") && stderr.contains(", column "),
                "{stderr}"
            );
        }
    }
    // An output topic that does not exist: refused before consuming, exit 2.
    let missing = good.replace(&format!("topic = \"{output}\""), "topic = \"no-such-topic-kd\"");
    let path = dir.join("missing-topic.toml");
    std::fs::write(&path, missing).unwrap();
    let out = kafka_dedup_command()
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("no-such-topic-kd") && stderr.contains("does not exist"),
        "{stderr}"
    );
    // Nothing was consumed: the group never committed.
    assert_eq!(given.committed(0), None);
    // A good configuration passes check-config and prints the effective settings.
    let path = dir.join("good.toml");
    std::fs::write(&path, &good).unwrap();
    let check = kafka_dedup_command()
        .args(["check-config", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(check.status.success());
    let printed = String::from_utf8_lossy(&check.stdout);
    assert!(
        printed.contains("generations = 2") && printed.contains(input.as_str()),
        "{printed}"
    );
    // Issue 23, item 1: the horizon in plain words.
    assert!(
        printed.contains(
            "a replay that arrives within 1s of its first copy is always dropped; \
             a repeat 2s or more after it is always forwarded"
        ),
        "{printed}"
    );
    // Issue 23, item 6: a second `run` on a store in use is told what to do.
    let identity = kafka_dedup::pipeline::identity_of(&kafka_dedup::config::Config::load(&path).unwrap());
    let (held, _) = kafka_dedup::store::Store::open_for_run(&spec.store, &identity).unwrap();
    let out = kafka_dedup_command()
        .args(["run", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    drop(held);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("in use") && stderr.contains("give each instance its own `store.path`"),
        "{stderr}"
    );
}

// Case 6b, an output topic with fewer partitions than the input under `preserve`, is no longer
// refused at start (a restart after partitions were added to the input would exit again and
// again): the extra partitions are held, `operating::a_start_with_fewer_output_partitions_holds_the_extra_ones`.

/// A side topic that does not exist is refused at start (exit 2, naming the key), before the
/// store is touched: a typo must not cost a rebuild. Found by a new user: it used to surface only
/// at the first replay sent there.
#[test]
fn missing_side_topic_is_refused_before_the_store_is_touched() {
    let mut given = Scenario::new("side", 1);
    // (By environment: `extra` would repeat the generated [output] table.)
    given
        .spec
        .env
        .push(("KAFKA_DEDUP__OUTPUT__DUPLICATES_TOPIC".into(), unique("no-such-topic")));
    let mut filter = given.start();
    let status = filter.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{}", filter.logs());
    let logs = filter.logs();
    assert!(
        logs.contains("output.duplicates_topic") && logs.contains("does not exist"),
        "{logs}"
    );
    assert!(
        !given.spec.store.exists(),
        "the store was created before the topics were checked"
    );
}

const HORIZON: &str = "kafka_dedup_horizon_seconds";

/// A record time (ms since the Unix epoch) a minute in the past, on a whole second, so that the
/// timelines below fall into known 1 s buckets and stay behind the wall clock (a later stamp
/// would count as "now").
fn timeline_origin() -> i64 {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    (now - 60_000) / 1000 * 1000
}

/// The record with value `v` (no key, no headers).
fn value(v: &str) -> Raw {
    raw(None, Some(v), &[])
}

/// Issue 13, case 1: a quiet partition forgets. `checkpoint.interval = "1s"`, `generations = 2`
/// (H_min 1 s, H_max 2 s), nothing on the partition but value `P` stamped 0 s, 0.3 s, 4.8 s and
/// 9.3 s: forwarded, dropped (0.3 s after the first copy), forwarded (4.8 s after it), forwarded
/// (4.5 s after the second forwarded copy). Before the fix the record clock moved only after the
/// arriving record was looked up, so the last two were dropped too.
#[test]
fn a_quiet_partition_forgets_after_the_horizon() {
    let mut given = Scenario::new("quiet", 1);
    // About the horizon: its timeline is written for H_min 1 s, H_max 2 s.
    given.spec.generations = 2;
    let t0 = timeline_origin();
    let timeline: Vec<(i64, Raw)> = [0, 300, 4_800, 9_300]
        .into_iter()
        .map(|t| (t0 + t, value("P")))
        .collect();
    given.produce_timed(0, &timeline);

    let mut filter = given.start();
    filter.wait_metric(CONSUMED, &[], 4.0, Duration::from_secs(60));
    given.wait_committed(&filter, &[(0, 4)]);
    let scrape = filter.scrape();
    assert_eq!(
        (metric(&scrape, FORWARDED, &[]), metric(&scrape, DROPPED, &[])),
        (3.0, 1.0),
        "forwarded and dropped: P at 0 s, 0.3 s, 4.8 s, 9.3 s must be forwarded, dropped, forwarded, forwarded\n{scrape}"
    );
    // The live generations are the buckets [8 s, 9 s) and [9 s, 10 s); the clock is at 9.3 s.
    let horizon = metric(&scrape, HORIZON, &["partition=\"0\""]);
    assert!(
        (horizon - 1.3).abs() < 1e-9,
        "{HORIZON} {horizon}, expected 1.3\n{scrape}"
    );
    given.stop(filter);
    assert_eq!(text_values(&given.output_records(), 0), vec!["P"; 3]);
}

/// Issue 13, case 3: a hand-over neither shortens nor stretches the horizon. The first owner
/// takes `x` at 0 s, `a` at 8.5 s and `b` at 9 s (`a` now in the previous generation, the
/// bucket [8 s, 9 s)) and stops cleanly. The next owner (a restart on the same store) first takes
/// `r0` stamped 1 s (an upstream replay keeps its event time), then `c` at 9.4 s, and, after a
/// checkpoint, the replay of `a` at its original 8.5 s: 0.9 s after its first copy on the
/// partition clock, inside H_min (1 s), so it must be dropped. Before the fix the new owner
/// seeded its rotation from `r0` and the checkpoint after `c` dropped the previous owner's
/// generation, which let the replay through.
#[test]
fn an_old_stamped_first_record_after_a_hand_over_keeps_the_horizon() {
    let mut given = Scenario::new("handover", 1);
    // About the horizon: its timeline is written for H_min 1 s, H_max 2 s (with more generations
    // the dropped generation the fix is about would not matter).
    given.spec.generations = 2;
    let t0 = timeline_origin();
    given.produce_timed(
        0,
        &[(t0, value("x")), (t0 + 8_500, value("a")), (t0 + 9_000, value("b"))],
    );
    let first = given.start();
    given.wait_committed(&first, &[(0, 3)]);
    given.stop(first);

    given.produce_timed(0, &[(t0 + 1_000, value("r0")), (t0 + 9_400, value("c"))]);
    let second = given.start();
    // Committed past `c`: a checkpoint ran after the new owner took it.
    given.wait_committed(&second, &[(0, 5)]);
    given.produce_timed(0, &[(t0 + 8_500, value("a"))]);
    given.wait_committed(&second, &[(0, 6)]);
    let scrape = second.scrape();
    given.stop(second);
    assert_eq!(
        text_values(&given.output_records(), 0),
        vec!["x", "a", "b", "r0", "c"],
        "the replay of a, 0.9 s after its first copy, must be dropped\n{scrape}"
    );
    assert_eq!(metric(&scrape, DROPPED, &[]), 1.0, "{scrape}");
}

/// Issue 27: an identity of several fields with one left out. `(tenant_id, event_id)` is the
/// event, `processed_at` is stamped again by the upstream on every attempt. A replay that
/// differs only in its stamp is dropped; the same event id under another tenant is another
/// event; a record without `event_id` follows `on_missing` (forward), counted with the part's
/// reason; `/store/lookup` answers for a JSON document the way the filter fingerprints it.
#[test]
fn several_fields_are_one_identity_and_ignored_fields_do_not_count() {
    let mut given = Scenario::new("ids", 1);
    let records: Vec<Raw> = [
        r#"{"tenant_id":"t1","event_id":"e1","processed_at":"12:00:00"}"#,
        r#"{"tenant_id":"t2","event_id":"e1","processed_at":"12:00:01"}"#,
        r#"{"processed_at":"12:05:00","event_id":"e1","tenant_id":"t1"}"#,
        r#"{"tenant_id":"t1","processed_at":"12:05:01"}"#,
        r#"{"tenant_id":"t1","event_id":"e2","processed_at":"12:05:02"}"#,
    ]
    .iter()
    .map(|v| raw(None, Some(v), &[]))
    .collect();
    given.produce_raw(0, &records);
    given.spec.fingerprint =
        "[fingerprint]\nsource = [\"json:/tenant_id\", \"json:/event_id\"]\nignore = [\"/processed_at\"]\n".into();
    let mut filter = given.start();
    filter.wait_metric(CONSUMED, &[], 5.0, Duration::from_secs(60));
    filter.wait_metric(FORWARDED, &[], 4.0, Duration::from_secs(60));
    let scrape = filter.scrape();
    assert_eq!(metric(&scrape, DROPPED, &[]), 1.0, "{scrape}");
    assert_eq!(
        metric(
            &scrape,
            UNFINGERPRINTABLE,
            &["action=\"forward\"", "reason=\"pointer_not_found\""]
        ),
        1.0,
        "{scrape}"
    );
    let doc = |v: &str| {
        v.replace('"', "%22")
            .replace('{', "%7B")
            .replace('}', "%7D")
            .replace(':', "%3A")
    };
    let (code, body) = http_get(
        &filter.http,
        &format!(
            "/store/lookup?value={}",
            doc(r#"{"event_id":"e2","tenant_id":"t1","processed_at":"x"}"#)
        ),
    )
    .unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"held\":true"), "{body}");
    // The fields of the identity alone (issue 27, item 3).
    for (query, held) in [("tenant_id=t1&event_id=e2", true), ("event_id=e2&tenant_id=t2", false)] {
        let (code, body) = http_get(&filter.http, &format!("/store/lookup?{query}")).unwrap();
        assert_eq!(code, 200, "{query}: {body}");
        assert_eq!(body.contains("\"held\":true"), held, "{query}: {body}");
    }
    given.stop(filter);
    let out = given.forwarded();
    let want: Vec<Raw> = [0, 1, 3, 4].iter().map(|i| records[*i].clone()).collect();
    assert_eq!(out[&0], want);
}

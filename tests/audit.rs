//! `kafka-dedup audit` on the test broker (issue 15, item 3): topics written by the test with
//! planted faults, with and without provenance headers, and a real filter run.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::given::{Audit, Scenario};
use common::*;
use kafka_dedup::audit::core::DuplicateRule;
use kafka_dedup::audit::report::{PartitionReport, Report, UpperBound};
use kafka_dedup::provenance::{Provenance, HEADER};
use kafka_dedup::scenario;
use rdkafka::consumer::Consumer;
use rdkafka::{Message, Offset, TopicPartitionList};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

fn partition(r: &Report, p: i32) -> &PartitionReport {
    r.partitions
        .iter()
        .find(|x| x.audit.partition == p)
        .unwrap_or_else(|| panic!("partition {p} not in the report"))
}

/// (duplicates, lost, out of order, unexpected) of a partition.
fn findings(p: &PartitionReport) -> (u64, u64, u64, u64) {
    let a = &p.audit;
    (
        a.duplicates.count,
        a.lost.count,
        a.out_of_order.count,
        a.unexpected.count,
    )
}

/// The input of the planted-fault topics, per partition `p`: `p-0` .. `p-39` stamped 100 ms
/// apart from `t0` (4 s: twice H_max), with a replay of `p-15` after `p-20` (input offset 21,
/// stamped `t0` + 2,050 ms); so `p-i` is at input offset `i` up to 20 and `i + 1` after.
fn planted_input(p: i32, t0: i64) -> Vec<(i64, Raw)> {
    let rec = |i: i64| {
        (
            t0 + i * 100,
            raw(Some(&format!("k{i}")), Some(&format!("{p}-{i}")), &[]),
        )
    };
    let mut records: Vec<(i64, Raw)> = (0..=20).map(rec).collect();
    records.push((t0 + 2050, rec(15).1));
    records.extend((21..40).map(rec));
    records
}

/// What the filter should have written for partition `p` (every `p-i` once, with the input's
/// timestamps), with one fault planted: 1 a copy of `1-30` after `1-31`, 2 `2-25` left out, 3
/// `3-33` and `3-34` swapped; 0 none. With `provenance`, each record carries the header naming
/// its input offset.
fn planted_output(input: &str, p: i32, t0: i64, provenance: bool) -> Vec<(i64, Raw)> {
    let offset = |i: i64| if i <= 20 { i } else { i + 1 };
    let rec = |i: i64| {
        let mut r = raw(Some(&format!("k{i}")), Some(&format!("{p}-{i}")), &[]);
        if provenance {
            let source = Provenance {
                topic: input.to_string(),
                partition: p,
                offset: offset(i),
            };
            r.headers
                .push((HEADER.as_bytes().to_vec(), Some(source.encode().into_bytes())));
        }
        (t0 + i * 100, r)
    };
    let mut order: Vec<i64> = (0..40).collect();
    match p {
        1 => order.insert(32, 30),
        2 => order.retain(|i| *i != 25),
        3 => order.swap(33, 34),
        _ => {}
    }
    order.into_iter().map(rec).collect()
}

/// The planted faults, found exactly, per partition; partition 0 alone is clean (exit 0); the
/// bounds leave a fault in or out.
fn planted(provenance: bool) {
    // Given: the input and what a filter wrote, with the faults planted.
    let mut given = Scenario::new("audit", 4);
    // About the horizon: its timeline and bounds are written for H_min 1 s, H_max 2 s.
    given.spec.generations = 2;
    let t0 = now_ms() - 600_000;
    for p in 0..4 {
        given.produce_timed(p, &planted_input(p, t0));
        given.write_output_timed(p, &planted_output(&given.input, p, t0, provenance));
    }

    // When: the audit judges the pair; then: it finds exactly the faults.
    let a = given.audit(&["--json"]);
    assert_eq!(a.code, 1, "{}\n{}", a.stdout, a.stderr);
    let r = a.report();
    assert!(!r.clean);
    assert_eq!(r.horizon.min_ms, 1000, "interval 1 s, 2 generations");
    assert_eq!(r.horizon.max_ms, 2000);
    for p in &r.partitions {
        let a = &p.audit;
        assert_eq!(p.range.to, UpperBound::End, "nothing committed");
        assert_eq!(
            (a.input_records, a.output_records),
            (41, 40 + (a.partition == 1) as u64 - (a.partition == 2) as u64)
        );
        assert_eq!(a.output_with_provenance, if provenance { a.output_records } else { 0 });
        assert_eq!(a.replays, 1, "the replay of {}-15 was dropped: right", a.partition);
    }
    assert_eq!(findings(partition(&r, 0)), (0, 0, 0, 0), "{:#?}", partition(&r, 0));

    let dup = partition(&r, 1);
    assert_eq!(findings(dup), (1, 0, 0, 0), "{dup:#?}");
    let d = &dup.audit.duplicates.examples[0];
    assert_eq!((d.output_offset, d.repeats_output_offset), (32, 30));
    if provenance {
        assert_eq!((d.rule, d.input_offset), (DuplicateRule::SameInputRecord, Some(31)));
    } else {
        assert_eq!((d.rule, d.input_offset), (DuplicateRule::Fingerprint, None));
    }

    let gap = partition(&r, 2);
    assert_eq!(findings(gap), (0, 1, 0, 0), "{gap:#?}");
    assert_eq!(gap.audit.lost.examples[0].input_offset, 26, "2-25");
    assert_eq!(gap.audit.lost.examples[0].clock_ms, t0 + 2500);

    let reorder = partition(&r, 3);
    assert_eq!(findings(reorder), (0, 0, 1, 0), "{reorder:#?}");
    let o = &reorder.audit.out_of_order.examples[0];
    assert_eq!(
        (
            o.output_offset,
            o.input_offset,
            o.after_output_offset,
            o.after_input_offset
        ),
        (34, 34, 33, 35)
    );
    assert_eq!(r.totals.duplicates + r.totals.lost + r.totals.out_of_order, 3);

    // The same as text, for people.
    let text = given.audit(&[]);
    eprintln!("{}", text.stdout);
    assert_eq!(text.code, 1);
    for needle in [
        "DUPLICATE output offset 32 repeats output offset 30",
        "LOST input offset 26",
        "OUT OF ORDER output offset 34 copies input offset 34, after output offset 33 copied input offset 35",
        "NOT CLEAN: 4 partition(s)",
    ] {
        assert!(text.stdout.contains(needle), "{needle:?} in:\n{}", text.stdout);
    }

    // A clean pair: exit 0.
    let clean = given.audit(&["--json", "--partition", "0"]);
    assert_eq!(clean.code, 0, "{}\n{}", clean.stdout, clean.stderr);
    assert!(clean.report().clean);
    assert_eq!(clean.report().partitions.len(), 1);
    let text = given.audit(&["--partition", "0"]);
    assert!(
        text.stdout
            .contains("\nCLEAN: 1 partition(s), 41 input records judged (40 forwarded, 1 replay(s)"),
        "{}",
        text.stdout
    );

    // Bounds. In partition 2 the gap is input offset 26, stamped t0 + 2,500 ms. In partition 0,
    // input offset 21 is a replay (stamped t0 + 2,050 ms) of offset 15: judged alone, it is a
    // replay only if the audit read what came before it (the lead-in, H_max = 2 s of input). The
    // input is read from the record stamped 2 s before the range (ListOffsets by time), or
    // from the log start when there is none.
    let at = |ms: i64| humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms as u64)).to_string();
    let (since, until) = (
        |ms| vec!["--since".to_string(), at(ms)],
        |ms| vec!["--until".to_string(), at(ms)],
    );
    let offsets = |from: Option<i64>, to: Option<i64>| {
        let mut v = Vec::new();
        if let Some(f) = from {
            v.extend(["--from-offset".to_string(), f.to_string()]);
        }
        if let Some(t) = to {
            v.extend(["--to-offset".to_string(), t.to_string()]);
        }
        v
    };
    #[rustfmt::skip]
    let rows: Vec<(&str, Vec<String>, i32, i64)> = vec![
        // partition, bounds, exit code (= lost records), first input offset read
        ("2", offsets(Some(27), None),     0, 6),
        ("2", offsets(None, Some(26)),     0, 0),
        ("2", offsets(Some(26), Some(27)), 1, 5),
        ("2", until(t0 + 2500),            0, 0),
        ("2", since(t0 + 2500),            1, 5),
        ("2", since(t0 + 2501),            0, 6),
        ("2", since(t0 + 1000),            1, 0),
        ("2", vec!["--since".into(), "1h".into()], 1, 0),
        ("0", offsets(Some(21), Some(22)), 0, 1),
        ("0", [since(t0 + 2050), until(t0 + 2051)].concat(), 0, 1),
    ];
    for (p, bounds, code, read_from) in rows {
        let mut args = vec!["--json", "--partition", p];
        args.extend(bounds.iter().map(String::as_str));
        let a = given.audit(&args);
        assert_eq!(a.code, code, "{bounds:?}:\n{}\n{}", a.stdout, a.stderr);
        let r = a.report();
        let p = &r.partitions[0];
        assert_eq!(findings(p), (0, code as u64, 0, 0), "{bounds:?}: {p:#?}");
        assert!(p.audit.input_records >= 1, "{bounds:?}: {p:#?}");
        assert_eq!(p.range.input_read_from, read_from, "{bounds:?}: {p:#?}");
        assert_eq!(p.range.output_read_from, 0, "2 x H_max before the range: before t0");
        assert_eq!(
            p.audit.input_records,
            p.audit.forwarded + p.audit.replays + p.audit.lost.count + p.audit.not_forwardable
        );
    }
}

/// Case 1 without provenance headers: matched by fingerprint and order.
#[test]
fn planted_duplicate_gap_and_reorder_without_provenance() {
    planted(false);
}

/// Case 1 with provenance headers: matched by input offset.
#[test]
fn planted_duplicate_gap_and_reorder_with_provenance() {
    planted(true);
}

/// The last record of `topic`/`p`: its offset, the record and its timestamp.
fn last_record(broker: &Broker, topic: &str, p: i32) -> (i64, Raw, i64) {
    let mut c = broker.client();
    c.set("group.id", unique("reader")).set("enable.partition.eof", "true");
    let consumer: kafka_dedup::kafka::Reader = c
        .create_with_context(kafka_dedup::kafka::ReaderContext::default())
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    consumer.assign(&tpl).unwrap();
    let mut last = None;
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        assert!(std::time::Instant::now() < deadline, "reading {topic} timed out");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let mut headers = Vec::new();
                kafka_dedup::fingerprint::for_each_raw_header(&m, &mut |name, value| {
                    headers.push((name.to_vec(), value.map(|v| v.to_vec())))
                });
                let r = Raw {
                    key: m.key().map(|k| k.to_vec()),
                    value: m.payload().map(|v| v.to_vec()),
                    headers,
                };
                last = Some((m.offset(), r, m.timestamp().to_millis().unwrap()));
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(_))) => break,
            _ => {}
        }
    }
    last.expect("the output partition has records")
}

/// Case 2: the audit agrees with a real filter run on the replay scenario (clean, every event
/// forwarded once, every replay dropped), then finds exactly the duplicate appended by hand.
#[test]
fn agrees_with_a_filter_run_then_finds_a_duplicate_appended_by_hand() {
    // Given: a filter, and upstream writing the replay scenario.
    let mut given = Scenario::new("audit-run", 3);
    let filter = given.start_ready();
    let s = scenario::replay_scenario(3000, 3, 100, 15);
    assert!(s.replays > 100, "{}", s.replays);
    given.produce_records(&s.records, Duration::from_secs(2));
    given.wait_done(&filter);
    given.stop(filter);
    given.then_once_in_order(3000);

    // When: the audit judges the run; then: clean, and it counts what the filter did.
    let a = given.audit(&["--json"]);
    assert_eq!(a.code, 0, "{}\n{}", a.stdout, a.stderr);
    let r = a.report();
    assert!(r.clean);
    assert_eq!(r.totals.input_records, s.records.len() as u64);
    assert_eq!(r.totals.forwarded, 3000);
    assert_eq!(r.totals.replays, s.replays);
    assert_eq!(r.totals.output_records, 3000);
    for p in &r.partitions {
        assert_eq!(p.range.to, UpperBound::Committed, "{p:#?}");
    }

    // When: a copy of partition 1's last output record is appended as the filter would have
    // written it; then: the audit finds that one duplicate.
    let (offset, record, ts) = last_record(&given.broker, &given.output, 1);
    given.write_output_timed(1, &[(ts, record)]);
    let a = given.audit(&["--json"]);
    assert_eq!(a.code, 1, "{}\n{}", a.stdout, a.stderr);
    let r = a.report();
    assert_eq!(
        (
            r.totals.duplicates,
            r.totals.lost,
            r.totals.out_of_order,
            r.totals.unexpected
        ),
        (1, 0, 0, 0),
        "{r:#?}"
    );
    let d = &partition(&r, 1).audit.duplicates.examples[0];
    assert_eq!((d.output_offset, d.repeats_output_offset), (offset + 1, offset));
    assert_eq!(r.totals.forwarded, 3000);
}

/// A new user's first hour: an audit run before the filter's first checkpoint judged nothing
/// and said CLEAN (the filter commits only where it starts until then), and a copy written into
/// the output by hand, without provenance, more than H_max after its original, was counted in no
/// category. Now the first says NOTHING JUDGED and which input is past the range, and the second
/// is unexpected once the range reaches the input's end.
#[test]
fn nothing_judged_is_said_and_a_late_foreign_copy_is_unexpected() {
    // Given: a filter checkpointing every hour (H_min 1 h, H_max 2 h), and 40 records stamped
    // 3 h ago (a backfill: the copy below is stamped later than H_max after them, yet not in
    // the future).
    let mut given = Scenario::new("audit-first", 1);
    given.spec.interval = "1h";
    given.spec.generations = 2;
    let filter = given.start_ready();
    let t0 = now_ms() - 3 * 3_600_000;
    let records: Vec<(i64, Raw)> = (0..40)
        .map(|i| {
            (
                t0 + i * 100,
                raw(Some(&format!("k{i}")), Some(&(1000 + i).to_string()), &[]),
            )
        })
        .collect();
    given.produce_timed(0, &records);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while given.output_len() < 40 {
        assert!(std::time::Instant::now() < deadline, "{}", filter.logs());
        std::thread::sleep(Duration::from_millis(100));
    }

    // When: the audit runs before the first checkpoint; then: nothing judged, and it says so.
    assert_eq!(given.committed(0), Some(0), "only the start-of-ownership commit");
    let a = given.audit(&[]);
    assert_eq!(a.code, 0, "{}\n{}", a.stdout, a.stderr);
    for needle in [
        "input offsets [0, 40) are past the range, not judged: the filter has not checkpointed them yet",
        "NOTHING JUDGED (nothing found, but no input record was in the range): 1 partition(s), 0 input records judged",
    ] {
        assert!(a.stdout.contains(needle), "{needle:?} in:\n{}", a.stdout);
    }

    // When: the filter stops (its last checkpoint commits the end) and a copy of record 5, without
    // provenance, is written into the output 2 h 10 s after it; then: one unexpected record.
    given.stop(filter);
    assert_eq!(given.committed(0), Some(40));
    given.write_output_timed(0, &[(t0 + 500 + 7_810_000, records[5].1.clone())]);
    let a = given.audit(&["--json"]);
    assert_eq!(a.code, 1, "{}\n{}", a.stdout, a.stderr);
    let r = a.report();
    assert_eq!(findings(partition(&r, 0)), (0, 0, 0, 1), "{r:#?}");
    assert_eq!(partition(&r, 0).audit.unexpected.examples[0].output_offset, 40);
    assert_eq!(partition(&r, 0).range.input_end, 40);
    assert_eq!(r.totals.forwarded, 40);
}

/// `input.start = "latest"` on a topic with a backlog: the filter starts at the end and has
/// forwarded nothing yet; the audit judged the whole backlog as lost (NOT CLEAN). Now the range
/// starts at the committed offset while the output is empty: nothing judged, exit 0.
#[test]
fn a_filter_started_at_the_end_is_not_charged_with_the_backlog() {
    let mut given = Scenario::new("audit-latest", 1);
    given
        .spec
        .env
        .push(("KAFKA_DEDUP__INPUT__START".into(), "latest".into()));
    let now = now_ms();
    let backlog: Vec<(i64, Raw)> = (0..20)
        .map(|i| (now, raw(Some(&format!("k{i}")), Some(&(100 + i).to_string()), &[])))
        .collect();
    given.produce_timed(0, &backlog);
    let filter = given.start_ready();
    given.wait_committed(&filter, &[(0, 20)]);
    // The audit reads the filter's configuration: the same start (the filter has it by its
    // environment).
    let config = given.config_file();
    let text = std::fs::read_to_string(&config).unwrap();
    std::fs::write(&config, text.replace("[input]\n", "[input]\nstart = \"latest\"\n")).unwrap();
    let a = Audit::run(&config, &[]);
    given.stop(filter);
    assert_eq!(a.code, 0, "{}\n{}", a.stdout, a.stderr);
    assert!(a.stdout.contains("NOTHING JUDGED"), "{}", a.stdout);
    assert!(!a.stdout.contains("LOST"), "{}", a.stdout);
}

/// What the audit cannot check exits 2, naming why.
#[test]
fn refusals_exit_2() {
    // Given: an input, and an output that does not exist yet.
    let given = Scenario::input_only("audit-no", 2);
    let (input, output) = (&given.input, &given.output);
    let a = given.audit(&[]);
    assert_eq!(a.code, 2, "{}", a.stderr);
    assert!(
        a.stderr.contains(output.as_str()) && a.stderr.contains("does not exist"),
        "{}",
        a.stderr
    );

    given.create_output();
    // Issue 23, item 6: a partition past both topics' is blamed on the input, not the output.
    for p in ["2", "5"] {
        let a = given.audit(&["--partition", p]);
        assert_eq!(a.code, 2, "{}", a.stderr);
        assert!(
            a.stderr.contains(&format!(
                "--partition {p}: the input topic \"{input}\" has 2 partitions"
            )),
            "{}",
            a.stderr
        );
    }
    for bad in [
        vec!["--since", "soon"],
        vec!["--from-offset", "-3"],
        vec!["--from-offset", "9", "--to-offset", "3"],
    ] {
        let a = given.audit(&bad);
        assert_eq!(a.code, 2, "{bad:?}: {}", a.stderr);
    }
    let mut key = given.spec.clone();
    key.extra = String::new();
    let text = key.toml(free_port()).replace(
        &format!("topic = \"{output}\"\n"),
        &format!("topic = \"{output}\"\npartitioning = \"key\"\n"),
    );
    let key_config = given.path().join("key.toml");
    std::fs::write(&key_config, text).unwrap();
    let a = Audit::run(&key_config, &[]);
    assert_eq!(a.code, 2, "{}", a.stderr);
    assert!(a.stderr.contains("partitioning = \"key\""), "{}", a.stderr);

    let a = given.audit(&["--json"]);
    assert_eq!(a.code, 0, "two empty topics are clean: {}\n{}", a.stdout, a.stderr);
}

/// Issue 23, item 2: identical records forwarded H_max or more apart (the filter's rule: a
/// repeat that far after its first copy is always forwarded) are counted as repeats outside the
/// horizon, with their offsets, in text and JSON; they are no failure (exit 0). Partition 0
/// without provenance, partition 1 with it: `p-0` .. `p-39` stamped 100 ms apart, then each
/// again 6 s later (H_max = 2 s), all 80 in the output as the filter forwards them.
#[test]
fn repeats_outside_the_horizon_are_counted_not_failed() {
    // Given: both copies in the input, and in the output as the filter forwards them.
    let mut given = Scenario::new("audit-rep", 2);
    // About the horizon: its timeline is written for H_min 1 s, H_max 2 s.
    given.spec.generations = 2;
    let t0 = now_ms() - 600_000;
    for p in 0..2 {
        // (copy, i): offset copy x 40 + i in both topics.
        let copies: Vec<(i64, i64)> = (0..2).flat_map(|copy| (0..40).map(move |i| (copy, i))).collect();
        let record = |i: i64| raw(Some(&format!("k{i}")), Some(&format!("{p}-{i}")), &[]);
        let stamp = |copy: i64, i: i64| t0 + copy * 6_000 + i * 100;
        let inputs: Vec<(i64, Raw)> = copies.iter().map(|&(c, i)| (stamp(c, i), record(i))).collect();
        let outputs: Vec<(i64, Raw)> = copies
            .iter()
            .map(|&(c, i)| {
                let mut r = record(i);
                if p == 1 {
                    let source = Provenance {
                        topic: given.input.clone(),
                        partition: p,
                        offset: c * 40 + i,
                    };
                    r.headers
                        .push((HEADER.as_bytes().to_vec(), Some(source.encode().into_bytes())));
                }
                (stamp(c, i), r)
            })
            .collect();
        given.produce_timed(p, &inputs);
        given.write_output_timed(p, &outputs);
    }

    // When: the audit judges the pair; then: the repeats are counted, not failed.
    let a = given.audit(&["--json"]);
    assert_eq!(
        a.code, 0,
        "the filter's rule, not a failure: {}\n{}",
        a.stdout, a.stderr
    );
    let json: serde_json::Value = serde_json::from_str(&a.stdout).unwrap();
    assert_eq!(json["clean"], true);
    assert_eq!(json["totals"]["repeats_outside_horizon"], 80, "{json:#}");
    for p in 0..2 {
        let part = &json["partitions"][p];
        assert_eq!(
            (part["forwarded"].as_u64(), part["replays"].as_u64()),
            (Some(80), Some(0)),
            "{part:#}"
        );
        let repeats = &part["repeats_outside_horizon"];
        assert_eq!(repeats["count"], 40, "{part:#}");
        let first = &repeats["examples"][0];
        assert_eq!(
            (
                first["output_offset"].as_i64(),
                first["repeats_output_offset"].as_i64(),
                first["input_offset"].as_i64(),
                first["apart_ms"].as_i64()
            ),
            (Some(40), Some(0), Some(40), Some(6_000)),
            "{first:#}"
        );
    }

    let text = given.audit(&[]);
    eprintln!("{}", text.stdout);
    assert_eq!(text.code, 0);
    for needle in [
        "REPEAT output offset 40 repeats output offset 0",
        "80 forwarded, 0 replay(s)",
        "80 repeats outside the horizon",
    ] {
        assert!(text.stdout.contains(needle), "{needle:?} in:\n{}", text.stdout);
    }
}

/// The user's sequence (a record the output refuses for its size): output topic with
/// `max.message.bytes = 2000`, input `a-P-0`, then on partition 1 a 5 KB record (offset 1), then
/// `b-P-0`, `b-P-1`, all stamped now. The filter forwards the small records and halts partition 1
/// at offset 1 (committed there) unless `dead_letter` names a topic, where the record then goes.
fn too_large_on_partition_1(name: &str, dead_letter: bool) -> (Scenario, Option<String>) {
    let mut given = Scenario::input_only(name, 2);
    kafka().create_topic_with(&given.output, 2, &[("max.message.bytes", "2000")]);
    let dlq = dead_letter.then(|| given.side_topic(&format!("{name}-dlq")));
    if let Some(dlq) = &dlq {
        given.spec.fingerprint = format!("[fingerprint]\nsource = \"value\"\ndead_letter_topic = \"{dlq}\"\n");
    }
    let now = now_ms();
    for p in 0..2 {
        let mut records = vec![(now, raw(None, Some(&format!("a-{p}-0")), &[]))];
        if p == 1 {
            records.push((now, raw(None, Some(&"x".repeat(5_000)), &[])));
        }
        records.extend((0..2).map(|i| (now, raw(None, Some(&format!("b-{p}-{i}")), &[]))));
        given.produce_timed(p, &records);
    }
    (given, dlq)
}

/// `given`'s configuration with `input.skip = skip`: the file `audit` reads, as the operator's.
fn config_with_skip(given: &Scenario, skip: &str) -> std::path::PathBuf {
    let text = given
        .spec
        .toml(free_port())
        .replacen("[input]\n", &format!("[input]\nskip = \"{skip}\"\n"), 1);
    let path = given.path().join("skip.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The user's sequence (a): the 5 KB record halts partition 1; the documented way past,
/// `input.skip = "1:1"` without a dead-letter topic, drops it. The audit, given that
/// configuration, reports it as skipped (its offset), not lost: clean, exit 0, in JSON and text.
/// The same audit without `input.skip` in the configuration still calls it lost.
#[test]
fn a_record_let_past_with_input_skip_is_skipped_not_lost() {
    // Given: partition 1 halted at the big record, then the filter run again with input.skip.
    let (given, _) = too_large_on_partition_1("audit-skip", false);
    let filter = given.start();
    given.wait_committed(&filter, &[(0, 3), (1, 1)]);
    given.stop(filter);
    let mut skipping = given.spec.clone();
    skipping.env.push(("KAFKA_DEDUP__INPUT__SKIP".into(), "1:1".into()));
    let mut filter = skipping.start(given.path());
    given.broker.wait_committed(
        &given.spec.group,
        &given.input,
        &[(0, 3), (1, 4)].into_iter().collect(),
        Duration::from_secs(60),
        || filter.logs(),
    );
    assert!(filter.terminate().success(), "{}", filter.logs());

    // When: the audit reads the operator's configuration; then: skipped, clean.
    let config = config_with_skip(&given, "1:1");
    let a = Audit::run(&config, &["--json"]);
    assert_eq!(a.code, 0, "{}\n{}", a.stdout, a.stderr);
    let json: serde_json::Value = serde_json::from_str(&a.stdout).unwrap();
    assert_eq!(json["clean"], true, "{json:#}");
    assert_eq!(
        (json["totals"]["skipped"].as_u64(), json["totals"]["lost"].as_u64()),
        (Some(1), Some(0)),
        "{json:#}"
    );
    let p1 = &json["partitions"][1];
    assert_eq!(
        (p1["forwarded"].as_u64(), p1["input_records"].as_u64()),
        (Some(3), Some(4)),
        "{p1:#}"
    );
    assert_eq!(p1["skipped"]["count"], 1, "{p1:#}");
    assert_eq!(p1["skipped"]["examples"][0]["input_offset"], 1, "{p1:#}");
    assert_eq!(json["partitions"][0]["skipped"]["count"], 0);
    let text = Audit::run(&config, &[]);
    eprintln!("{}", text.stdout);
    assert_eq!(text.code, 0, "{}", text.stdout);
    for needle in ["SKIPPED input offset 1", "1 skipped", "CLEAN"] {
        assert!(text.stdout.contains(needle), "{needle:?} in:\n{}", text.stdout);
    }
    assert!(!text.stdout.contains("LOST"), "{}", text.stdout);

    // When: the configuration does not name it; then: the record is lost.
    let a = given.audit(&["--json"]);
    assert_eq!(a.code, 1, "{}\n{}", a.stdout, a.stderr);
    let r = a.report();
    assert_eq!(r.totals.lost, 1, "{r:#?}");
    assert_eq!(partition(&r, 1).audit.lost.examples[0].input_offset, 1);
}

/// The user's sequence (b): with `fingerprint.dead_letter_topic` set, the 5 KB record goes there
/// (`kafka-dedup.reason = too_large`, `kafka-dedup.source` its input coordinates). The audit
/// reads that topic and reports the record as dead-lettered with its reason: clean, exit 0. A
/// record appended to the input afterwards and never forwarded is still lost.
#[test]
fn a_dead_lettered_record_is_dead_lettered_not_lost() {
    // Given: the filter ran over all of it, the big record dead-lettered.
    let (given, dlq) = too_large_on_partition_1("audit-dlq", true);
    let dlq = dlq.unwrap();
    let filter = given.start();
    given.wait_committed(&filter, &[(0, 3), (1, 4)]);
    given.stop(filter);
    let dead = given.broker.read_records(&dlq, 1);
    assert_eq!(dead[&0].len(), 1);
    assert_eq!(dead[&0][0].header("kafka-dedup.reason"), Some(Some(&b"too_large"[..])));

    // When: the audit judges it; then: dead-lettered, with its reason, and clean.
    let a = given.audit(&["--json"]);
    assert_eq!(a.code, 0, "{}\n{}", a.stdout, a.stderr);
    let json: serde_json::Value = serde_json::from_str(&a.stdout).unwrap();
    assert_eq!(json["clean"], true, "{json:#}");
    assert_eq!(
        (
            json["totals"]["dead_lettered"].as_u64(),
            json["totals"]["lost"].as_u64()
        ),
        (Some(1), Some(0)),
        "{json:#}"
    );
    let p1 = &json["partitions"][1];
    assert_eq!(p1["dead_lettered"]["count"], 1, "{p1:#}");
    let d = &p1["dead_lettered"]["examples"][0];
    assert_eq!(
        (d["input_offset"].as_i64(), d["reason"].as_str()),
        (Some(1), Some("too_large")),
        "{d:#}"
    );
    assert_eq!(json["partitions"][0]["dead_lettered"]["count"], 0);
    let text = given.audit(&[]);
    eprintln!("{}", text.stdout);
    assert_eq!(text.code, 0, "{}", text.stdout);
    for needle in ["DEAD-LETTERED input offset 1", "too_large", "1 dead-lettered", "CLEAN"] {
        assert!(text.stdout.contains(needle), "{needle:?} in:\n{}", text.stdout);
    }

    // When: a record on partition 1 is in neither the output nor the dead-letter topic (written
    // to the input, no filter running; audited to the end); then: lost, exit 1.
    given.produce_timed(1, &[(now_ms(), raw(None, Some("c-1-0"), &[]))]);
    let a = given.audit(&["--json", "--to-offset", "5"]);
    assert_eq!(a.code, 1, "{}\n{}", a.stdout, a.stderr);
    let json: serde_json::Value = serde_json::from_str(&a.stdout).unwrap();
    let p1 = &json["partitions"][1];
    assert_eq!(
        (p1["lost"]["count"].as_u64(), p1["dead_lettered"]["count"].as_u64()),
        (Some(1), Some(1)),
        "{p1:#}"
    );
    assert_eq!(p1["lost"]["examples"][0]["input_offset"], 4, "{p1:#}");
}

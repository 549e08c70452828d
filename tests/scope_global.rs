//! Issue 18: replays that change partition, caught by the global scope
//! (`fingerprint.scope = "global"`: a route stage re-partitions the input by fingerprint into a
//! route topic, today's filter runs there). The binary runs as its own process against the real
//! broker (Apache Kafka).
//!
//! The measurement of the issue: 3 input partitions, 3,000 distinct values, then the last 600
//! written again, each to another partition than its first copy (`(p + 1) mod 3`), as a
//! producer without a key would. Every record keeps the timestamp of its first copy
//! ([`Broker::produce_values_at`]), as upstream replays do, so that the replays are within the
//! horizon whatever the test's pace.
//!

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const ROUTED: &str = "kafka_dedup_records_routed_total";
const DROPPED: &str = "kafka_dedup_duplicates_dropped_total";
const FORWARDED: &str = "kafka_dedup_records_forwarded_total";
/// Second copies of the route stage, dropped by provenance (issue 22).
const RECOPIES: &str = "kafka_dedup_route_copies_dropped_total";
/// First copies the filter stage took again after its own crash.
const RETAKEN: &str = "kafka_dedup_input_retaken_records_total";

/// Distinct values written first.
const DISTINCT: u64 = 3_000;
/// The last `REPLAYED` of them are written again.
const REPLAYED: u64 = 600;

/// The topics of one test: input, route and output, 3 partitions each.
struct Topics {
    input: String,
    route: String,
    output: String,
}

impl Topics {
    fn new(name: &str) -> Self {
        let t = Topics {
            input: unique(&format!("{name}-in")),
            route: unique(&format!("{name}-route")),
            output: unique(&format!("{name}-out")),
        };
        for topic in [&t.input, &t.route, &t.output] {
            kafka().create_topic(topic, 3);
        }
        t
    }
}

/// A filter of `topics` in the global scope (value fingerprints).
fn global(topics: &Topics, dir: &Path) -> FilterSpec {
    let mut spec = FilterSpec::new(&topics.input, &topics.output, dir);
    spec.fingerprint = format!(
        "[fingerprint]\nsource = \"value\"\nscope = \"global\"\nroute_topic = \"{}\"\n",
        topics.route
    );
    spec.interval = "2s";
    spec
}

/// Waits until `f` dropped `n` copies, as replays (by fingerprint), as the route stage's second
/// copies (by provenance: a copy made again after a kill is dropped either way) or as its own
/// re-takes (a first copy taken again at its route offset after a kill).
fn wait_dropped(f: &mut FilterProcess, n: f64, timeout: Duration) {
    let deadline = Instant::now() + timeout;
    loop {
        let s = f.scrape();
        if metric(&s, DROPPED, &[]) + metric(&s, RECOPIES, &[]) + metric(&s, RETAKEN, &[]) >= n {
            return;
        }
        assert!(f.running(), "kafka-dedup exited:\n{}", f.logs());
        assert!(
            Instant::now() < deadline,
            "fewer than {n} dropped after {timeout:?}:\n{s}\n{}",
            f.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The first copies: value `v` to partition `v mod 3`.
fn first_copies() -> Vec<(i32, u64)> {
    (0..DISTINCT).map(|v| ((v % 3) as i32, v)).collect()
}

/// The replays: the last [`REPLAYED`] values, each to the partition after its first copy's.
fn replays() -> Vec<(i32, u64)> {
    (DISTINCT - REPLAYED..DISTINCT)
        .map(|v| (((v + 1) % 3) as i32, v))
        .collect()
}

/// The filter stage's view of `spec`: the route topic read in the group `<group>-global`.
fn filter_stage(spec: &FilterSpec, route: &str) -> FilterSpec {
    let mut s = spec.clone();
    s.input = route.to_string();
    s.group = format!("{}-global", spec.group);
    s
}

/// Waits until both stages committed everything: the route stage the input, then the filter
/// stage the route topic (whose end is known only once the route stage is done).
/// (`/readyz` lists the filter stage's partitions only: the route stage is given no live member.)
fn wait_both_drained(spec: &FilterSpec, route: &str, live: &[&FilterProcess]) {
    let logs = || live.iter().map(|f| f.logs()).collect::<Vec<_>>().join("\n----\n");
    wait_drained(spec, 3, &[], Duration::from_secs(180), logs);
    wait_drained(&filter_stage(spec, route), 3, live, Duration::from_secs(180), logs);
}

/// How many times each value is in `topic`.
fn counts(topic: &str) -> BTreeMap<u64, usize> {
    let mut n = BTreeMap::new();
    for v in kafka().read_values(topic, 3).into_values().flatten() {
        *n.entry(v).or_insert(0) += 1;
    }
    n
}

/// Asserts that `output` holds each of the [`DISTINCT`] values exactly once.
fn assert_each_once(output: &str) {
    let n = counts(output);
    let twice: Vec<_> = n.iter().filter(|(_, c)| **c > 1).collect();
    let missing: Vec<u64> = (0..DISTINCT).filter(|v| !n.contains_key(v)).collect();
    assert!(
        twice.is_empty() && missing.is_empty() && n.len() == DISTINCT as usize,
        "{} values, {} duplicated (first: {:?}), {} missing (first: {:?}), {} records",
        n.len(),
        twice.len(),
        twice.iter().take(5).collect::<Vec<_>>(),
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        n.values().sum::<usize>()
    );
}

/// The measurement, in both scopes: the per-partition scope forwards the replays that
/// landed in another partition (all 600 here); the global scope forwards each value once.
#[test]
fn replays_in_another_partition_pass_the_partition_scope_and_not_the_global_one() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let topics = Topics::new("global");
    let ts = wall_ms();
    kafka().produce_values_at(&topics.input, &first_copies(), ts);
    kafka().produce_values_at(&topics.input, &replays(), ts);

    // The contrast: the per-partition scope, on the same input.
    let partition_out = unique("global-partition-out");
    kafka().create_topic(&partition_out, 3);
    let mut partition = FilterSpec::new(&topics.input, &partition_out, &dir.path().join("partition"));
    partition.interval = "2s";
    let t = Instant::now();
    let mut p = partition.start(dir.path());
    wait_drained(&partition, 3, &[&p], Duration::from_secs(180), || p.logs());
    let partition_time = t.elapsed();
    assert!(p.terminate().success(), "{}", p.logs());
    let n = counts(&partition_out);
    let passed = n.values().filter(|c| **c > 1).count();
    assert_eq!(
        (n.len(), passed),
        (DISTINCT as usize, REPLAYED as usize),
        "the per-partition scope forwards every replay that landed elsewhere"
    );

    let spec = global(&topics, dir.path());
    let t = Instant::now();
    let mut g = spec.start(dir.path());
    wait_both_drained(&spec, &topics.route, &[&g]);
    let global_time = t.elapsed();
    // `/readyz` lists both stages' partitions: the route topic's, and the input's (route stage).
    let (_, readyz) = http_get(&g.http, "/readyz").expect("/readyz answers");
    let readyz: serde_json::Value = serde_json::from_str(&readyz).unwrap();
    assert_eq!(readyz["route_partitions"], serde_json::json!([0, 1, 2]), "{readyz}");
    assert_eq!(g.owned(), vec![0, 1, 2], "{readyz}");
    let scrape = g.scrape();
    assert!(g.terminate().success(), "{}", g.logs());
    assert_each_once(&topics.output);
    assert_eq!(metric(&scrape, ROUTED, &[]), (DISTINCT + REPLAYED) as f64, "{scrape}");
    assert_eq!(metric(&scrape, DROPPED, &[]), REPLAYED as f64, "{scrape}");
    // Every copy of a value met in one route partition.
    let route = kafka().read_values(&topics.route, 3);
    for (part, values) in &route {
        for v in values {
            let other = route.iter().find(|(q, vs)| *q != part && vs.contains(v));
            assert!(
                other.is_none(),
                "value {v} in route partitions {part} and {:?}",
                other.map(|o| o.0)
            );
        }
    }
    // Not a benchmark (the broker and the machine dominate): what one run of each cost here.
    eprintln!(
        "start to drained: partition scope {partition_time:?}, global scope {global_time:?}; the whole \
         test {:?}",
        started.elapsed()
    );
}

/// A SIGKILL in the middle of the replay, then a restart: each value once. The checkpoint
/// interval is longer than the test, so neither stage commits or stores anything between the
/// clean stop before the replay and the kill: the restarted route stage copies every replay again,
/// and the restarted filter stage reads the first copies again too.
#[test]
fn a_sigkill_in_the_middle_of_the_replay_loses_and_duplicates_nothing() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let topics = Topics::new("global-kill");
    let ts = wall_ms();
    kafka().produce_values_at(&topics.input, &first_copies(), ts);
    let mut spec = global(&topics, dir.path()).killable();
    spec.interval = "60s";

    let mut first = spec.start(dir.path());
    first.wait_metric(FORWARDED, &[], DISTINCT as f64, Duration::from_secs(180));
    assert!(first.terminate().success(), "{}", first.logs());
    let committed = kafka().committed(&spec.group, &topics.input, 3);
    assert_eq!(
        committed.values().filter_map(|(o, _)| *o).sum::<i64>(),
        DISTINCT as i64,
        "a clean stop commits what was copied"
    );

    let mut killed = spec.start(dir.path());
    killed.wait_ready(Duration::from_secs(120));
    kafka().produce_values_at(&topics.input, &replays(), ts);
    // Half of the replay copied (acknowledged by the route topic): the route stage is copying,
    // the filter stage reading the copies.
    killed.wait_metric(ROUTED, &[], (REPLAYED / 2) as f64, Duration::from_secs(120));
    let dropped_before_kill = metric(&killed.scrape(), DROPPED, &[]);
    killed.kill9();
    assert_eq!(
        kafka().committed(&spec.group, &topics.input, 3),
        committed,
        "nothing of the replay committed: the route stage copies it again"
    );

    let mut restarted = spec.survivor().start(dir.path());
    restarted.wait_metric(ROUTED, &[], REPLAYED as f64, Duration::from_secs(180));
    // Every copy after the first 3,000 is a replay of a value forwarded before the kill: the
    // killed route stage's copies and the restarted one's, which copies the whole replay again.
    let copies = kafka().end_offsets(&topics.route, 3).values().sum::<i64>();
    assert!(
        copies > (DISTINCT + REPLAYED) as i64,
        "some replays were copied twice: {copies} copies"
    );
    wait_dropped(
        &mut restarted,
        (copies - DISTINCT as i64) as f64,
        Duration::from_secs(180),
    );
    assert!(restarted.terminate().success(), "{}", restarted.logs());
    assert_each_once(&topics.output);
    eprintln!(
        "SIGKILL in the middle of the replay (the killed filter stage had dropped {dropped_before_kill}); \
         {copies} copies; done in {:?}",
        started.elapsed()
    );
}

/// Records without fingerprint (`on_missing = "forward"`) are known in the filter stage by their
/// provenance: copied twice by a route stage killed before its commit, each is forwarded once,
/// the restarted filter stage re-learning them from the output topic.
#[test]
fn records_without_fingerprint_are_forwarded_once_across_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let topics = Topics::new("global-missing");
    // 60 records without the header the fingerprint is read from, 20 a partition.
    for p in 0..3 {
        let records: Vec<Raw> = (0..20)
            .map(|i| raw(None, Some(&format!("{}", p * 100 + i)), &[]))
            .collect();
        kafka().produce_raw(&topics.input, p, &records);
    }
    let mut spec = global(&topics, dir.path()).killable();
    spec.interval = "60s"; // nothing committed or stored before the kill
    spec.fingerprint = format!(
        "[fingerprint]\nsource = \"header:id\"\non_missing = \"forward\"\nscope = \"global\"\nroute_topic = \"{}\"\n",
        topics.route
    );
    let mut killed = spec.start(dir.path());
    killed.wait_metric(FORWARDED, &[], 60.0, Duration::from_secs(120));
    killed.kill9();
    assert!(
        kafka()
            .committed(&spec.group, &topics.input, 3)
            .values()
            .all(|(o, _)| o.is_none()),
        "nothing committed: every record is copied again"
    );

    let mut restarted = spec.survivor().start(dir.path());
    // 120 copies read (60 copied before the kill, 60 after), 60 forwarded before: all dropped
    // (the first copies as re-takes, the second ones as copies made again).
    wait_dropped(&mut restarted, 120.0, Duration::from_secs(90));
    assert!(restarted.terminate().success(), "{}", restarted.logs());
    assert_eq!(kafka().end_offsets(&topics.route, 3).values().sum::<i64>(), 120);
    let n = counts(&topics.output);
    let want: Vec<u64> = (0..3).flat_map(|p| (0..20).map(move |i| p * 100 + i)).collect();
    assert_eq!(n.keys().copied().collect::<Vec<_>>(), want, "{n:?}");
    assert!(n.values().all(|c| *c == 1), "forwarded more than once: {n:?}");
    // In order within an input partition: its records share a route partition.
    let out = kafka().read_values(&topics.output, 3);
    for p in 0..3u64 {
        let seen: Vec<u64> = out.values().flatten().copied().filter(|v| v / 100 == p).collect();
        let mut sorted = seen.clone();
        sorted.sort();
        assert_eq!(seen, sorted, "input partition {p} in order");
    }
}

/// Scale-out in the global scope: three instances (each running both stages) while the input is
/// written, one killed with SIGKILL, one joining: each value once.
#[test]
fn three_instances_one_killed_one_joining() {
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let topics = Topics::new("global-scale");
    let spec = global(&topics, dir.path()).killable();
    // Only the member to be killed has the short session (its partitions move quickly); the
    // others have librdkafka's 45 s, so that a busy broker delaying their heartbeats does not
    // take their partitions away meanwhile (see `FilterSpec::survivor`).
    let replica = |name: &str| {
        let mut s = if name == "a" { spec.clone() } else { spec.survivor() };
        s.store = dir.path().join(format!("store-{name}"));
        s
    };
    let ts = wall_ms();
    // The first copies, then the replays, 300 records a second.
    let writer = {
        let input = topics.input.clone();
        std::thread::spawn(move || {
            let all: Vec<(i32, u64)> = first_copies().into_iter().chain(replays()).collect();
            for chunk in all.chunks(300) {
                kafka().produce_values_at(&input, chunk, ts);
                std::thread::sleep(Duration::from_secs(1));
            }
        })
    };
    let mut a = replica("a").start(dir.path());
    let b = replica("b").start(dir.path());
    let c = replica("c").start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(180);
    while [&a, &b, &c]
        .iter()
        .map(|f| metric(&f.scrape(), FORWARDED, &[]))
        .sum::<f64>()
        < 1000.0
    {
        assert!(Instant::now() < deadline, "A:\n{}", a.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    a.kill9();
    let d = replica("d").start(dir.path());
    writer.join().unwrap();
    wait_both_drained(&spec, &topics.route, &[&b, &c, &d]);
    for mut f in [b, c, d] {
        assert!(f.terminate().success(), "{}", f.logs());
    }
    assert_each_once(&topics.output);
    eprintln!(
        "three instances, one killed, one joining: done in {:?}",
        started.elapsed()
    );
}

/// Issue 22 item 1: with records stamped when produced, the other instances keep every route
/// partition's clock moving while a killed instance's input partitions wait for the session
/// timeout; the new owner's second copies of what the killed one copied since its last commit
/// (it dies at a crash point just before a commit, so that there are some)
/// arrive past H_max (interval 1 s, 2 generations: 2 s; the session 6 s) and, by fingerprint
/// alone, would be forwarded again. The filter stage drops them by provenance: each value once,
/// with input flowing on every partition for more than 3 x H_max after the kill.
#[test]
fn copies_made_again_after_a_kill_past_the_horizon_are_dropped() {
    const VALUES: u64 = 12_000;
    let started = Instant::now();
    let dir = tempfile::tempdir().unwrap();
    let topics = Topics::new("global-recopy");
    let mut spec = global(&topics, dir.path()).killable();
    // About the horizon: its timeline is written for H_min 1 s, H_max 2 s (second copies past
    // H_max, which only provenance drops).
    spec.interval = "1s";
    spec.generations = 2;
    let replica = |name: &str| {
        let mut s = if name == "a" { spec.clone() } else { spec.survivor() };
        s.store = dir.path().join(format!("store-{name}"));
        s
    };
    // A dies as its route stage is about to commit for the third time: copies acknowledged past
    // its committed offsets, which the next owner makes again. (A SIGKILL at a moment of the
    // test's choosing could follow a commit with nothing copied since: no copy to make again.)
    let mut a = replica("a");
    a.env
        .push(("KAFKA_DEDUP_CRASH_AT".into(), "route-before-commit:3".into()));
    let mut a = a.start(dir.path());
    let b = replica("b").start(dir.path());
    let c = replica("c").start(dir.path());
    // Distinct values, stamped when produced, over 40 s on every partition.
    let writer = {
        let input = topics.input.clone();
        std::thread::spawn(move || {
            let all: Vec<(i32, u64)> = (0..VALUES).map(|v| ((v % 3) as i32, v)).collect();
            kafka().produce_values(&input, &all, Duration::from_secs(40));
            Instant::now()
        })
    };
    // A copies one input partition (or more), then dies.
    let status = a.wait_exit(Duration::from_secs(60));
    let killed = Instant::now();
    assert!(
        !status.success() && a.logs().contains("crash point route-before-commit reached"),
        "A did not die at its third route commit ({status:?}):\n{}",
        a.logs()
    );
    let written = writer.join().unwrap();
    assert!(
        written.duration_since(killed) > Duration::from_secs(6),
        "input flowed {:?} after the kill, not more than 3 x H_max",
        written.duration_since(killed)
    );
    wait_both_drained(&spec, &topics.route, &[&b, &c]);
    let copied_twice = counts(&topics.route).values().filter(|n| **n > 1).count();
    let dropped: f64 = [&b, &c].iter().map(|f| metric(&f.scrape(), RECOPIES, &[])).sum();
    for mut f in [b, c] {
        assert!(f.terminate().success(), "{}", f.logs());
    }
    assert!(copied_twice > 0, "the kill left no copy to make again");
    let n = counts(&topics.output);
    let twice: Vec<_> = n.iter().filter(|(_, c)| **c > 1).map(|(v, _)| *v).collect();
    let missing = (0..VALUES).filter(|v| !n.contains_key(v)).count();
    assert!(
        twice.is_empty() && missing == 0,
        "{} values forwarded twice (first: {:?}) of {copied_twice} copied twice, {missing} missing",
        twice.len(),
        &twice[..twice.len().min(5)]
    );
    eprintln!(
        "killed with copies since its last commit: {copied_twice} copied twice, {dropped} dropped by provenance, \
         done in {:?}",
        started.elapsed()
    );
    // `audit` in the global scope checks the filter stage (the route topic is its input) and
    // knows the copies made again by their provenance: the same events, not lost ones (read as
    // events, they would be repeats past H_max that the output lacks).
    let (code, said, report) = spec.audit_json(dir.path());
    assert_eq!(code, Some(0), "audit of the global scope: {said}");
    let report = report.expect("a JSON report");
    assert_eq!(report["totals"]["forwarded"].as_u64(), Some(VALUES), "{said}");
}

/// A record the output refuses halts its route partition in the filter stage; a checkpoint or
/// a hand-over then commits up to it. The marks committed with it must not name its input
/// record: after the operator lets the output take it (the halt's own advice) and restarts, the
/// record is forwarded, not dropped as a copy made again (it was, before: lost without a word,
/// counted only in kafka_dedup_route_copies_dropped_total). One partition each; the output takes
/// records stamped at most an hour ago, the input's third record is stamped two hours ago.
#[test]
fn a_record_halted_in_the_filter_stage_is_forwarded_once_the_output_takes_it() {
    let dir = tempfile::tempdir().unwrap();
    let topics = Topics {
        input: unique("global-halt-in"),
        route: unique("global-halt-route"),
        output: unique("global-halt-out"),
    };
    kafka().create_topic(&topics.input, 1);
    kafka().create_topic(&topics.route, 1);
    kafka().create_topic_with(&topics.output, 1, &[("message.timestamp.before.max.ms", "3600000")]);
    let now = wall_ms();
    let at = |t: i64, v: &str| (t, raw(None, Some(v), &[]));
    let records = [
        at(now, "a-0"),
        at(now, "a-1"),
        at(now - 2 * 3_600_000, "old"),
        at(now, "b-0"),
        at(now, "b-1"),
    ];
    kafka().produce_timed(&topics.input, 0, &records);
    let spec = global(&topics, dir.path());
    let mut f = spec.start(dir.path());
    f.wait_metric("kafka_dedup_output_refused_total", &[], 1.0, Duration::from_secs(60));
    // The filter stage commits its route partition up to the halted record.
    let route_group = format!("{}-global", spec.group);
    let halted = [(0, 2)].into_iter().collect();
    kafka().wait_committed(&route_group, &topics.route, &halted, Duration::from_secs(60), || {
        f.logs()
    });
    assert!(f.terminate().success(), "{}", f.logs());
    assert_eq!(kafka().committed(&route_group, &topics.route, 1)[&0].0, Some(2));

    kafka().alter_topic(&topics.output, &[("message.timestamp.before.max.ms", "86400000")]);
    let mut f = spec.start(dir.path());
    let done = [(0, 5)].into_iter().collect();
    kafka().wait_committed(&route_group, &topics.route, &done, Duration::from_secs(60), || f.logs());
    let scrape = f.scrape();
    assert!(f.terminate().success(), "{}", f.logs());
    let out: Vec<String> = kafka().read_records(&topics.output, 1)[&0]
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(
        out,
        ["a-0", "a-1", "old", "b-0", "b-1"],
        "copies dropped as made again: {}",
        metric(&scrape, RECOPIES, &[])
    );
}

/// A record the route topic does not take for its timestamp (here stamped two hours ago, the
/// route topic taking an hour) stopped the process at every start: the broker's refusal is
/// fatal to the gapless producer, and the restart copies the same record again. Its copy is now
/// stamped when copied, its own timestamp in `kafka-dedup.timestamp`, counted, and forwarded in
/// its place, everything around it as usual. The route topic also keeps records a day, the
/// input a week: said at start (its copies of old records would be deleted unread).
#[test]
fn a_record_the_route_topic_refuses_for_its_timestamp_is_copied_stamped_now() {
    let dir = tempfile::tempdir().unwrap();
    let topics = Topics {
        input: unique("global-stamp-in"),
        route: unique("global-stamp-route"),
        output: unique("global-stamp-out"),
    };
    kafka().create_topic(&topics.input, 1);
    kafka().create_topic_with(
        &topics.route,
        1,
        &[
            ("message.timestamp.before.max.ms", "3600000"),
            ("retention.ms", "86400000"),
        ],
    );
    kafka().create_topic(&topics.output, 1);
    let now = wall_ms();
    let old = now - 2 * 3_600_000;
    let at = |t: i64, v: &str| (t, raw(None, Some(v), &[]));
    let records = [
        at(now, "a-0"),
        at(now, "a-1"),
        at(old, "old"),
        at(now, "b-0"),
        at(now, "b-1"),
    ];
    kafka().produce_timed(&topics.input, 0, &records);
    let spec = global(&topics, dir.path());
    let mut f = spec.start(dir.path());
    let route_group = format!("{}-global", spec.group);
    let done = [(0, 5)].into_iter().collect();
    kafka().wait_committed(&route_group, &topics.route, &done, Duration::from_secs(60), || f.logs());
    let scrape = f.scrape();
    assert!(f.terminate().success(), "{}", f.logs());
    assert_eq!(
        metric(&scrape, "kafka_dedup_route_restamped_total", &[]),
        1.0,
        "{scrape}"
    );
    let logs = f.logs();
    assert!(
        logs.contains("retention.ms of the route topic is 86400000, shorter than the input's 604800000"),
        "{logs}"
    );
    let out = &kafka().read_records(&topics.output, 1)[&0];
    let values: Vec<String> = out
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    assert_eq!(values, ["a-0", "a-1", "old", "b-0", "b-1"]);
    let stamp = |r: &Raw| {
        r.headers
            .iter()
            .filter(|(k, _)| k.as_slice() == kafka_dedup::provenance::TIMESTAMP_HEADER.as_bytes())
            .map(|(_, v)| String::from_utf8_lossy(v.as_deref().unwrap_or_default()).into_owned())
            .collect::<Vec<_>>()
    };
    assert_eq!(stamp(&out[2]), [old.to_string()]);
    assert!(stamp(&out[1]).is_empty() && stamp(&out[3]).is_empty());
}

/// A record too large for the route topic stopped the process (exit 1) at every start: the
/// broker's refusal of its batch is fatal to the gapless producer. Now the route producer is
/// fitted to the route topic's `max.message.bytes`, so the copy is refused when produced, and only
/// its input partition is held there (not copied, not committed past it; `/readyz` says which
/// record and what to do) while the others go on; once the route topic takes it, a restart copies
/// it and what follows, each once.
#[test]
fn a_record_too_large_for_the_route_topic_holds_only_its_input_partition() {
    let dir = tempfile::tempdir().unwrap();
    let topics = Topics {
        input: unique("global-big-in"),
        route: unique("global-big-route"),
        output: unique("global-big-out"),
    };
    kafka().create_topic(&topics.input, 2);
    kafka().create_topic_with(&topics.route, 1, &[("max.message.bytes", "2000")]);
    kafka().create_topic(&topics.output, 1);
    let now = wall_ms();
    let at = |v: &str| (now, raw(None, Some(v), &[]));
    let big = "x".repeat(5000);
    kafka().produce_timed(&topics.input, 0, &[at("a-0"), at("a-1")]);
    kafka().produce_timed(&topics.input, 1, &[at("b-0"), at(&big), at("b-2")]);
    let spec = global(&topics, dir.path());

    // When: the filter runs; then: input partition 0 is copied whole, partition 1 up to the big
    // record, and the process stays up, not ready, saying why.
    let mut f = spec.start(dir.path());
    let held = [(0, 2), (1, 1)].into_iter().collect();
    kafka().wait_committed(&spec.group, &topics.input, &held, Duration::from_secs(60), || f.logs());
    let route_group = format!("{}-global", spec.group);
    let three = [(0, 3)].into_iter().collect();
    kafka().wait_committed(&route_group, &topics.route, &three, Duration::from_secs(60), || {
        f.logs()
    });
    assert!(f.running(), "{}", f.logs());
    let (code, body) = http_get(&f.http, "/readyz").expect("/readyz answers");
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("the route stage holds input partition 1 held at offset 1")
            && body.contains("raise the route topic's max.message.bytes"),
        "{body}"
    );
    assert!(f.terminate().success(), "{}", f.logs());
    assert_eq!(kafka().committed(&spec.group, &topics.input, 2)[&1].0, Some(1));

    // When: the route topic takes it, and the filter starts again; then: every record once.
    kafka().alter_topic(&topics.route, &[("max.message.bytes", "1048576")]);
    let mut f = spec.start(dir.path());
    let all = [(0, 2), (1, 3)].into_iter().collect();
    kafka().wait_committed(&spec.group, &topics.input, &all, Duration::from_secs(60), || f.logs());
    let five = [(0, 5)].into_iter().collect();
    kafka().wait_committed(&route_group, &topics.route, &five, Duration::from_secs(60), || f.logs());
    assert!(f.terminate().success(), "{}", f.logs());
    let mut values: Vec<String> = kafka().read_records(&topics.output, 1)[&0]
        .iter()
        .map(|r| String::from_utf8_lossy(r.value.as_deref().unwrap_or_default()).into_owned())
        .collect();
    values.sort();
    let mut want = vec!["a-0".to_string(), "a-1".into(), "b-0".into(), big, "b-2".into()];
    want.sort();
    assert_eq!(values, want);
}

/// The route topic must exist: `run` exits 2 naming the key and the command that creates it
/// (kafka-dedup creates no topics).
#[test]
fn a_missing_route_topic_exits_2_with_the_command_to_create_it() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("global-noroute-in"), unique("global-noroute-out"));
    kafka().create_topic(&input, 3);
    kafka().create_topic(&output, 3);
    let route = unique("global-noroute-route");
    let topics = Topics {
        input,
        route: route.clone(),
        output,
    };
    let mut f = global(&topics, dir.path()).start(dir.path());
    let status = f.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(2), "{}", f.logs());
    let logs = f.logs();
    assert!(logs.contains("fingerprint.route_topic"), "{logs}");
    assert!(
        logs.contains(&format!("--create --topic {route} --partitions 3")),
        "{logs}"
    );
}

/// A second instance given the store another one holds exits 2, naming the store, before its
/// route stage joins the input's consumer group (it used to join while the filter stage waited
/// for the store's lock, rebalancing the running instance's route stage twice for nothing).
#[test]
fn a_store_in_use_is_refused_before_the_route_stage_joins_the_group() {
    let dir = tempfile::tempdir().unwrap();
    let topics = Topics::new("global-inuse");
    let spec = global(&topics, dir.path());
    // Given: the filter stage's store held, as a running instance holds it.
    let cfg = kafka_dedup::config::Config::from_toml_str(&spec.toml(0), Some(Default::default())).unwrap();
    let stage = cfg.filter_stage().expect("the global scope has a filter stage");
    let identity = kafka_dedup::pipeline::identity_of(&stage);
    let (held, _) = kafka_dedup::store::Store::open_for_run(&stage.store.path, &identity).unwrap();
    // When: an instance starts on it; then: exit 2 naming the store, and its route stage never
    // subscribed (the input's group has no member).
    let mut f = spec.start(dir.path());
    let status = f.wait_exit(Duration::from_secs(60));
    drop(held);
    let logs = f.logs();
    assert_eq!(status.code(), Some(2), "{logs}");
    assert!(logs.contains("give each instance its own `store.path`"), "{logs}");
    assert!(
        !logs.contains("route stage started"),
        "the route stage joined the group: {logs}"
    );
}

/// The global scope on librdkafka's mock cluster: two brokers, `in` and `out` (two partitions
/// each) led by broker 1 and `route` (two partitions) by broker 2, so that the route topic alone
/// can go down (`broker_down(2)`); both groups coordinated by broker 1. The spec reads `in` into
/// `out` in the global scope, with a 6 s session: the mock rebalances within the session less 1 s.
struct GlobalMock {
    cluster: rdkafka::mocking::MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    broker: Broker,
    dir: tempfile::TempDir,
    spec: FilterSpec,
}

fn global_on_mock() -> GlobalMock {
    use rdkafka::mocking::{MockCluster, MockCoordinator};
    let cluster: MockCluster<'static, rdkafka::producer::DefaultProducerContext> = MockCluster::new(2).unwrap();
    for (topic, broker) in [("in", 1), ("route", 2), ("out", 1)] {
        cluster.create_topic(topic, 2, 1).unwrap();
        for p in 0..2 {
            cluster.partition_leader(topic, p, Some(broker)).unwrap();
        }
    }
    let broker = Broker::at(cluster.bootstrap_servers());
    let dir = tempfile::tempdir().unwrap();
    let mut spec = FilterSpec::on(broker.clone(), "in", "out", dir.path());
    spec.session_timeout_ms = Some(6000);
    spec.fingerprint = "[fingerprint]\nsource = \"value\"\nscope = \"global\"\nroute_topic = \"route\"\n".into();
    for group in [spec.group.clone(), format!("{}-global", spec.group)] {
        cluster.coordinator(MockCoordinator::Group(group), 1).unwrap();
    }
    GlobalMock {
        cluster,
        broker,
        dir,
        spec,
    }
}

/// The route topic unreachable for 20 s, three times `max.poll.interval.ms`, on librdkafka's mock
/// cluster (the route topic alone on a broker taken down): the route stage's producer queue
/// fills, its input partitions pause while the poll loop keeps serving the group (no lost
/// assignment), and everything is copied and filtered once the broker is back; each value once.
#[test]
fn a_route_topic_outage_pauses_the_route_stage_without_leaving_the_group() {
    let GlobalMock {
        cluster,
        broker,
        dir,
        mut spec,
    } = global_on_mock();
    spec.env.extend([
        (
            "KAFKA_DEDUP__KAFKA__PROPERTIES__QUEUE_BUFFERING_MAX_MESSAGES".to_string(),
            "100".to_string(),
        ),
        (
            "KAFKA_DEDUP__KAFKA__PROPERTIES__MAX_POLL_INTERVAL_MS".to_string(),
            "6000".to_string(),
        ),
    ]);
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    let records: Vec<(i32, u64)> = (0..3000).map(|v| ((v % 2) as i32, v)).collect();
    broker.produce_values("in", &records[..1000], Duration::ZERO);
    filter.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(60));
    cluster.broker_down(2).unwrap();
    broker.produce_values("in", &records[1000..], Duration::ZERO);
    std::thread::sleep(Duration::from_secs(20)); // the outage's length, not a wait for an event
    assert!(filter.running(), "the process waits out the outage:\n{}", filter.logs());
    cluster.broker_up(2).unwrap();
    filter.wait_metric(FORWARDED, &[], 3000.0, Duration::from_secs(120));
    assert!(filter.terminate().success(), "{}", filter.logs());
    let logs = filter.logs();
    assert!(
        !logs.contains("lost=true"),
        "the route stage kept its partitions:\n{logs}"
    );
    assert!(!logs.contains("assignment lost"), "{logs}");
    assert!(logs.contains("input partitions paused until it drains"), "{logs}");
    assert!(logs.contains("input partitions resumed"), "{logs}");
    let mut n = BTreeMap::new();
    for v in broker.read_values("out", 2).into_values().flatten() {
        *n.entry(v).or_insert(0) += 1;
    }
    assert_eq!(n.len(), 3000, "every value");
    assert!(n.values().all(|c| *c == 1), "each once: {n:?}");
}

/// Issue 22 item 4, on librdkafka's mock cluster (retention 5 MB per partition): the route stage
/// copies 100 records and stops (committed 100); while it is down 6 MB more arrive and retention
/// deletes the oldest, the committed offset included. Restarted with `input.start = "latest"`,
/// it must resume at the oldest record left, not jump to the end (`input.start` applies only
/// where nothing is committed). Its lag is exported per input partition
/// (`kafka_dedup_route_lag_records`) and reaches 0.
#[test]
fn the_route_stage_resumes_at_the_log_start_when_retention_deleted_its_committed_offset() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::mocking::MockCluster;
    let cluster: MockCluster<'static, rdkafka::producer::DefaultProducerContext> = MockCluster::new(1).unwrap();
    for (topic, partitions) in [("in", 1), ("route", 2), ("out", 2)] {
        cluster.create_topic(topic, partitions, 1).unwrap();
    }
    let broker = Broker::at(cluster.bootstrap_servers());
    let dir = tempfile::tempdir().unwrap();
    let mut spec = FilterSpec::on(broker.clone(), "in", "out", dir.path());
    spec.session_timeout_ms = Some(6000);
    spec.fingerprint = "[fingerprint]\nsource = \"value\"\nscope = \"global\"\nroute_topic = \"route\"\n".into();
    spec.env.push((
        "KAFKA_DEDUP__KAFKA__PROPERTIES__STATISTICS_INTERVAL_MS".to_string(),
        "500".to_string(),
    ));
    broker.produce_values("in", &(0..100).map(|v| (0, v)).collect::<Vec<_>>(), Duration::ZERO);
    let mut filter = spec.start(dir.path());
    filter.wait_metric(FORWARDED, &[], 100.0, Duration::from_secs(60));
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(broker.committed(&spec.group, "in", 1)[&0].0, Some(100));
    spec.env
        .push(("KAFKA_DEDUP__INPUT__START".to_string(), "latest".to_string()));

    let big: Vec<Raw> = (0..600u32)
        .map(|i| raw(None, Some(&format!("{i:>10000}")), &[]))
        .collect();
    broker.produce_raw("in", 0, &big);
    let reader: BaseConsumer = broker.client().create().unwrap();
    let (low, high) = reader.fetch_watermarks("in", 0, Duration::from_secs(10)).unwrap();
    assert!(
        low > 100,
        "retention moved the log start past the committed offset: {low}..{high}"
    );

    let mut again = spec.start(dir.path());
    again.wait_metric(FORWARDED, &[], (high - low) as f64, Duration::from_secs(60));
    // The route stage's lag is exported, and reaches 0 once everything is committed.
    let lag = "kafka_dedup_route_lag_records{partition=\"0\"} ";
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let scrape = again.scrape();
        if scrape.lines().any(|l| l.strip_prefix(lag) == Some("0")) {
            break;
        }
        assert!(Instant::now() < deadline, "route lag not 0:\n{scrape}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(again.terminate().success(), "{}", again.logs());
    assert_eq!(broker.committed(&spec.group, "in", 1)[&0].0, Some(high));
}

/// Issue 22 item 3, on librdkafka's mock cluster: the route topic's broker down, instance A holds
/// copies it cannot deliver when B joins and takes a partition; A's hand-over times out
/// (`output.handover_timeout` 2 s). A must purge them and exit 1 (as the filter does), not keep a
/// producer that retries them for ever and lands them after B's copies. With the broker back, B
/// copies everything once more and the output holds each value once.
#[test]
fn a_route_hand_over_that_times_out_purges_and_exits() {
    let GlobalMock {
        cluster,
        broker,
        dir,
        mut spec,
    } = global_on_mock();
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__HANDOVER_TIMEOUT".to_string(), "2s".to_string()));
    let replica = |name: &str| {
        let mut s = spec.clone();
        s.store = dir.path().join(format!("store-{name}"));
        s
    };
    let mut a = replica("a").start(dir.path());
    a.wait_ready(Duration::from_secs(60));
    let records: Vec<(i32, u64)> = (0..1000).map(|v| ((v % 2) as i32, v)).collect();
    broker.produce_values("in", &records[..500], Duration::ZERO);
    a.wait_metric(FORWARDED, &[], 500.0, Duration::from_secs(60));
    cluster.broker_down(2).unwrap();
    // Copies A cannot deliver: A fetches these within its fetch wait (100 ms), long before B
    // (a process to start, a group to join) takes a partition from it.
    broker.produce_values("in", &records[500..], Duration::ZERO);
    let mut b = replica("b").start(dir.path());
    let status = a.wait_exit(Duration::from_secs(60));
    let logs = a.logs();
    // Exit 1; or, when a second rebalance is under way as the stage stops, librdkafka 2.12.1
    // aborts the consumer's close (`rd_kafka_cgrp_terminated: assert:
    // !rd_kafka_assignment_in_progress`, the class of librdkafka issue #5573): a crash after the
    // purge, which crash safety covers (the rest of the test checks it). Any other end fails.
    let aborted = status.code().is_none() && logs.contains("rd_kafka_assignment_in_progress");
    assert!(status.code() == Some(1) || aborted, "{status:?}\n{logs}");
    assert!(
        logs.contains("route stage: hand-over with copies not acknowledged; dropping them from the producer"),
        "{logs}"
    );
    cluster.broker_up(2).unwrap();
    broker.wait_committed(
        &spec.group,
        "in",
        &[(0, 500), (1, 500)].into(),
        Duration::from_secs(120),
        || b.logs(),
    );
    let route_ends = broker.end_offsets("route", 2);
    broker.wait_committed(
        &format!("{}-global", spec.group),
        "route",
        &route_ends,
        Duration::from_secs(120),
        || b.logs(),
    );
    assert!(b.terminate().success(), "{}", b.logs());
    let mut n = BTreeMap::new();
    for v in broker.read_values("out", 2).into_values().flatten() {
        *n.entry(v).or_insert(0) += 1;
    }
    assert_eq!(n.len(), 1000, "every value");
    assert!(n.values().all(|c| *c == 1), "each once: {n:?}");
}

/// The input partitions the route stage owns, from `/readyz` (`route_partitions`).
fn route_owned(f: &FilterProcess) -> Vec<i64> {
    http_get(&f.http, "/readyz")
        .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
        .and_then(|v| {
            v["route_partitions"]
                .as_array()
                .map(|a| a.iter().filter_map(|p| p.as_i64()).collect())
        })
        .unwrap_or_default()
}

/// Waits (up to 90 s) until `f`'s log holds `line`.
fn wait_log(f: &FilterProcess, line: &str) {
    let deadline = Instant::now() + Duration::from_secs(90);
    while !f.logs().contains(line) {
        assert!(Instant::now() < deadline, "no {line:?}:\n{}", f.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Issue 22 item 5, on librdkafka's mock cluster: librdkafka keeps a partition's pause across
/// assignments. A's route stage backs off (the route topic's broker down, its producer's queue
/// full: every input partition paused); B joins and takes a partition (revoked from A while
/// paused); the broker comes back and A's back-off ends; B stops and the partition returns to A
/// after the back-off. A must copy it (every assignment is resumed), not leave it paused for
/// ever.
#[test]
fn a_partition_revoked_while_backed_off_and_assigned_again_is_resumed() {
    let GlobalMock {
        cluster,
        broker,
        dir,
        mut spec,
    } = global_on_mock();
    spec.env.push((
        "KAFKA_DEDUP__KAFKA__PROPERTIES__QUEUE_BUFFERING_MAX_MESSAGES".to_string(),
        "100".to_string(),
    ));
    // The route stage's lag per partition in the scrape a failure prints (below).
    spec.env.push((
        "KAFKA_DEDUP__KAFKA__PROPERTIES__STATISTICS_INTERVAL_MS".to_string(),
        "500".to_string(),
    ));
    let replica = |name: &str| {
        let mut s = spec.clone();
        s.store = dir.path().join(format!("store-{name}"));
        s
    };
    let mut a = replica("a").start(dir.path());
    let values = |from: u64, n: u64, p: i32| (from..from + n).map(|v| (p, v)).collect::<Vec<_>>();
    broker.produce_values("in", &[values(0, 10, 0), values(10, 10, 1)].concat(), Duration::ZERO);
    a.wait_metric(FORWARDED, &[], 20.0, Duration::from_secs(60));
    cluster.broker_down(2).unwrap();
    broker.produce_values("in", &values(100, 300, 0), Duration::ZERO);
    wait_log(&a, "input partitions paused until it drains");
    let mut b = replica("b").start(dir.path());
    wait_log(&a, "route stage: partitions revoked");
    cluster.broker_up(2).unwrap();
    wait_log(&a, "input partitions resumed");
    let deadline = Instant::now() + Duration::from_secs(60);
    while route_owned(&b).is_empty() {
        assert!(Instant::now() < deadline, "B's route stage owns nothing:\n{}", b.logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(b.terminate().success(), "{}", b.logs());
    let deadline = Instant::now() + Duration::from_secs(60);
    while route_owned(&a).len() < 2 {
        assert!(
            Instant::now() < deadline,
            "A did not get both partitions back:\n{}",
            a.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    broker.produce_values(
        "in",
        &[values(1000, 100, 0), values(2000, 100, 1)].concat(),
        Duration::ZERO,
    );
    let ends = broker.end_offsets("in", 2);
    // Failed about 1 run in 10 under load (2026-12-04, before and after the bounded close): A's
    // route stage got partition 0 back and copied nothing of it (committed stayed at B's). What
    // A's route stage says of each partition, and B's side, for the next time.
    let said = || {
        let routed: Vec<String> = a
            .scrape()
            .lines()
            .filter(|l| l.starts_with("kafka_dedup_route") || l.starts_with("kafka_dedup_records_routed"))
            .map(str::to_string)
            .collect();
        format!(
            "{}\nA's route metrics:\n{}\nB's log:\n{}",
            a.logs(),
            routed.join("\n"),
            b.logs()
        )
    };
    broker.wait_committed(&spec.group, "in", &ends, Duration::from_secs(60), said);
    assert!(a.terminate().success(), "{}", a.logs());
}

/// A stage that panics stops the process (exit 1), its partner included: the filter stage does
/// not run on alone with the route stage gone.
#[test]
fn a_panicking_route_stage_stops_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let topics = Topics::new("global-panic");
    let mut spec = global(&topics, dir.path());
    spec.env.push(("KAFKA_DEDUP_CRASH_AT".into(), "route".into()));
    let mut f = spec.start(dir.path());
    let status = f.wait_exit(Duration::from_secs(90));
    assert_eq!(status.code(), Some(1), "{}", f.logs());
    assert!(f.logs().contains("panic point route reached"), "{}", f.logs());
}

/// The audit of the global scope (route topic -> output) counts a record the filter stage put in
/// `fingerprint.dead_letter_topic` (too large for the output: `max.message.bytes = 2000`, a 5 KB
/// record) as dead-lettered, by its provenance naming the route topic: clean, exit 0, nothing
/// lost.
#[test]
fn the_audit_of_the_global_scope_counts_dead_lettered_records_not_lost() {
    let dir = tempfile::tempdir().unwrap();
    let t = Topics {
        input: unique("global-dl-in"),
        route: unique("global-dl-route"),
        output: unique("global-dl-out"),
    };
    kafka().create_topic(&t.input, 3);
    kafka().create_topic(&t.route, 3);
    kafka().create_topic_with(&t.output, 3, &[("max.message.bytes", "2000")]);
    let dlq = unique("global-dl-dlq");
    kafka().create_topic(&dlq, 1);
    for p in 0..3 {
        let mut records: Vec<Raw> = (0..3).map(|i| raw(None, Some(&format!("v-{p}-{i}")), &[])).collect();
        if p == 1 {
            records.insert(1, raw(None, Some(&"x".repeat(5_000)), &[]));
        }
        kafka().produce_raw(&t.input, p, &records);
    }
    let mut spec = global(&t, dir.path());
    spec.fingerprint = format!(
        "[fingerprint]\nsource = \"value\"\nscope = \"global\"\nroute_topic = \"{}\"\ndead_letter_topic = \"{dlq}\"\n",
        t.route
    );
    let filter = spec.start(dir.path());
    wait_both_drained(&spec, &t.route, &[&filter]);
    let mut filter = filter;
    assert!(filter.terminate().success(), "{}", filter.logs());
    let dead = kafka().read_records(&dlq, 1);
    assert_eq!(dead[&0].len(), 1, "the big record dead-lettered");
    assert_eq!(dead[&0][0].header("kafka-dedup.reason"), Some(Some(&b"too_large"[..])));

    let (code, said, report) = spec.audit_json(dir.path());
    assert_eq!(code, Some(0), "audit of the global scope: {said}");
    let report = report.expect("a JSON report");
    assert_eq!(
        (
            report["totals"]["forwarded"].as_u64(),
            report["totals"]["dead_lettered"].as_u64(),
            report["totals"]["lost"].as_u64()
        ),
        (Some(9), Some(1), Some(0)),
        "{said}"
    );
    let d = report["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find_map(|p| p["dead_lettered"]["examples"].get(0).cloned())
        .expect("an example");
    assert_eq!(d["reason"], "too_large", "{d:#}");
}

//! Issue 7: several instances in one consumer group; the state follows the partition. Each
//! instance is the binary as its own process with its own store directory.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;
use kafka_dedup::scenario::{self, read_values};

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";
const REBUILDS: &str = "kafka_dedup_store_rebuilds_total";

/// An instance of `spec` with its own store directory and HTTP port.
fn replica(spec: &FilterSpec, dir: &Path, name: &str) -> FilterSpec {
    let mut s = spec.clone();
    s.store = dir.join(format!("store-{name}"));
    s
}

/// Waits until the group committed every input partition to its end, with `live` the running
/// members.
fn wait_all_committed(spec: &FilterSpec, partitions: i32, live: &[&FilterProcess], logs: impl Fn() -> String) {
    wait_drained(spec, partitions, live, Duration::from_secs(240), logs);
}

fn verify_output(written: &[(i32, u64)], output: &str, partitions: i32, distinct: u64) {
    let out = read_values(&kafka().client(), output, partitions, Duration::from_secs(120)).unwrap();
    let v = scenario::verify(written, &out);
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.output_records, distinct, "{v:?}");
}

/// Case 1: three instances, 30,000 records with replays on 6 partitions; one instance is killed
/// with SIGKILL, another stopped gracefully, and a new one joins.
#[test]
fn three_instances_kill_stop_join() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("scale-in"), unique("scale-out"));
    kafka().create_topic(&input, 6);
    kafka().create_topic(&output, 6);
    let spec = FilterSpec::new(&input, &output, dir.path()).killable();
    let s = scenario::replay_scenario(30_000, 6, 150, 21);
    let writer = {
        let (records, input) = (s.records.clone(), input.clone());
        std::thread::spawn(move || {
            scenario::produce(&kafka().client(), &input, &records, Duration::from_secs(40)).unwrap()
        })
    };
    let mut a = replica(&spec, dir.path(), "a").start(dir.path());
    let mut b = replica(&spec, dir.path(), "b").start(dir.path());
    let mut c = replica(&spec, dir.path(), "c").start(dir.path());
    a.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(90));
    std::thread::sleep(Duration::from_secs(5));
    a.kill9();
    b.wait_metric(FORWARDED, &[], 3000.0, Duration::from_secs(120));
    assert!(b.terminate().success(), "{}", b.logs());
    let mut d = replica(&spec, dir.path(), "d").start(dir.path());
    writer.join().unwrap();
    wait_all_committed(&spec, 6, &[&c, &d], || {
        let pick = |l: String| {
            l.lines()
                .filter(|l| l.contains("partition=0") || l.contains("partitions=") || l.contains("lost"))
                .map(|l| l.chars().take(260).collect::<String>())
                .collect::<Vec<_>>()
                .join("\n")
        };
        format!(
            "A:\n{}\nB:\n{}\nC:\n{}\nD:\n{}",
            pick(a.logs()),
            pick(b.logs()),
            pick(c.logs()),
            pick(d.logs())
        )
    });
    assert!(c.terminate().success(), "{}", c.logs());
    assert!(d.terminate().success(), "{}", d.logs());
    verify_output(&s.records, &output, 6, 30_000);
}

/// Case 2: scale 1 → 3 → 1 mid-stream, with graceful joins and leaves (cooperative-sticky).
#[test]
fn scale_one_three_one() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("s131-in"), unique("s131-out"));
    kafka().create_topic(&input, 6);
    kafka().create_topic(&output, 6);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let s = scenario::replay_scenario(20_000, 6, 150, 22);
    let writer = {
        let (records, input) = (s.records.clone(), input.clone());
        std::thread::spawn(move || {
            scenario::produce(&kafka().client(), &input, &records, Duration::from_secs(30)).unwrap()
        })
    };
    let mut a = replica(&spec, dir.path(), "a").start(dir.path());
    a.wait_metric(FORWARDED, &[], 2000.0, Duration::from_secs(90));
    let mut b = replica(&spec, dir.path(), "b").start(dir.path());
    let mut c = replica(&spec, dir.path(), "c").start(dir.path());
    b.wait_metric(FORWARDED, &[], 500.0, Duration::from_secs(120));
    c.wait_metric(FORWARDED, &[], 500.0, Duration::from_secs(120));
    assert!(b.terminate().success(), "{}", b.logs());
    assert!(c.terminate().success(), "{}", c.logs());
    writer.join().unwrap();
    wait_all_committed(&spec, 6, &[&a], || a.logs());
    assert!(a.terminate().success(), "{}", a.logs());
    verify_output(&s.records, &output, 6, 20_000);
}

/// Case 4: an instance is given back partitions it owned earlier, while another instance moved
/// them on: its local store is stale, is noticed, and the generations are re-learned from the
/// output topic; replays of what the other instance forwarded are dropped.
#[test]
fn stale_local_store_is_relearned() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("stale-in"), unique("stale-out"));
    kafka().create_topic(&input, 2);
    kafka().create_topic(&output, 2);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let first: Vec<(i32, u64)> = (0..2000).map(|v| ((v % 2) as i32, v)).collect();
    scenario::produce(&kafka().client(), &input, &first, Duration::ZERO).unwrap();
    let a_spec = replica(&spec, dir.path(), "a");
    let mut a = a_spec.start(dir.path());
    wait_all_committed(&spec, 2, &[&a], || a.logs());
    assert!(a.terminate().success());

    // Meanwhile another instance owns the partitions and forwards more.
    let second: Vec<(i32, u64)> = (2000..4000).map(|v| ((v % 2) as i32, v)).collect();
    let event_time = wall_ms();
    scenario::produce(&kafka().client(), &input, &second, Duration::ZERO).unwrap();
    let mut b = replica(&spec, dir.path(), "b").start(dir.path());
    wait_all_committed(&spec, 2, &[&b], || b.logs());
    assert!(b.terminate().success());

    // The first instance comes back with its old store; replays of the second's records arrive
    // (keeping their event time: written now with a new one, they would be past the horizon).
    let replays: Vec<(i32, u64)> = (3000..4000).map(|v| ((v % 2) as i32, v)).collect();
    let third: Vec<(i32, u64)> = (4000..4500).map(|v| ((v % 2) as i32, v)).collect();
    kafka().produce_values_at(&input, &replays, event_time);
    scenario::produce(&kafka().client(), &input, &third, Duration::ZERO).unwrap();
    let mut a = a_spec.start(dir.path());
    wait_all_committed(&spec, 2, &[&a], || a.logs());
    let scrape = a.scrape();
    assert_eq!(
        metric(&scrape, REBUILDS, &["reason=\"behind_or_ahead\""]),
        2.0,
        "{scrape}"
    );
    assert_eq!(metric(&scrape, "kafka_dedup_duplicates_dropped_total", &[]), 1000.0);
    assert!(a.terminate().success());
    let all: Vec<_> = first
        .iter()
        .chain(&second)
        .chain(&replays)
        .chain(&third)
        .copied()
        .collect();
    verify_output(&all, &output, 2, 4500);
}

/// Records/s of `instances` replicas draining `n` records already in a fresh input topic of 6
/// partitions: growth of the records forwarded (summed over the instances' `/metrics`) between
/// 10% and 90% of `n`, so that start-up and the tail are left out.
fn drain_rate(dir: &Path, instances: usize, n: u64, round: usize) -> f64 {
    let (input, output) = (unique("rate-in"), unique("rate-out"));
    kafka().create_topic(&input, 6);
    kafka().create_topic(&output, 6);
    let records: Vec<(i32, u64)> = (0..n).map(|v| ((v % 6) as i32, v)).collect();
    scenario::produce(&kafka().client(), &input, &records, Duration::ZERO).unwrap();
    let spec = FilterSpec::new(&input, &output, dir);
    let mut live: Vec<FilterProcess> = (0..instances)
        .map(|i| replica(&spec, dir, &format!("r{round}-{i}")).start(dir))
        .collect();
    let (lo, hi) = ((n / 10) as i64, (n * 9 / 10) as i64);
    let (mut t_lo, deadline) = (None, std::time::Instant::now() + Duration::from_secs(600));
    let rate = loop {
        let total: f64 = live.iter().map(|f| metric(&f.scrape(), FORWARDED, &[])).sum();
        let total = total as i64;
        let now = std::time::Instant::now();
        if t_lo.is_none() && total >= lo {
            t_lo = Some((now, total));
        }
        if total >= hi {
            let (t0, c0) = t_lo.unwrap();
            break (total - c0) as f64 / now.duration_since(t0).as_secs_f64();
        }
        assert!(now < deadline, "drain stalled at {total}/{n}");
        std::thread::sleep(Duration::from_millis(50));
    };
    for f in &mut live {
        assert!(f.terminate().success(), "{}", f.logs());
    }
    rate
}

/// Report (issue 7): aggregate throughput of 3 instances vs 1 on the same broker, in one run,
/// rounds in the order 1, 3, 3, 1 so that the broker's slow-down as its database grows weighs on
/// both alike. Not a pass/fail test: `scripts/test.sh --test scale -- --ignored --nocapture report_`.
#[test]
#[ignore = "report; run on demand"]
fn report_throughput_three_vs_one() {
    let dir = tempfile::tempdir().unwrap();
    let n = 60_000;
    let mut one = Vec::new();
    let mut three = Vec::new();
    for (round, instances) in [1, 3, 3, 1].into_iter().enumerate() {
        let r = drain_rate(dir.path(), instances, n, round);
        eprintln!("round {round}: {instances} instance(s): {r:.0} records/s");
        if instances == 1 {
            one.push(r)
        } else {
            three.push(r)
        }
    }
    let mean = |v: &[f64]| v.iter().sum::<f64>() / v.len() as f64;
    eprintln!(
        "| instances | records/s (mean of 2) |\n|---|---|\n| 1 | {:.0} |\n| 3 | {:.0} |\nratio 3/1: {:.2}",
        mean(&one),
        mean(&three),
        mean(&three) / mean(&one)
    );
}

/// Report (issue 7): time from a partition's assignment to its first forwarded record, against
/// how many records the re-read of the output covered. For each size, one instance forwards
/// `k` records inside one generation and stops gracefully; its store is deleted; a second instance gets
/// the partition, re-learns the `k` records and forwards the next, new record. Its log line
/// "first record forwarded since the partition was assigned" gives the time (fence wait of 1 s
/// included).
/// `scripts/test.sh --test scale -- --ignored --nocapture report_`.
#[test]
#[ignore = "report; run on demand"]
fn report_assignment_to_first_forward() {
    let dir = tempfile::tempdir().unwrap();
    eprintln!("| records re-read | assignment to first forward (s) |\n|---|---|");
    for k in [0u64, 10_000, 50_000, 100_000] {
        let (input, output) = (unique("ff-in"), unique("ff-out"));
        kafka().create_topic(&input, 1);
        kafka().create_topic(&output, 1);
        let mut spec = FilterSpec::new(&input, &output, dir.path());
        spec.interval = "1h";
        let first: Vec<(i32, u64)> = (0..k).map(|v| (0, v)).collect();
        scenario::produce(&kafka().client(), &input, &first, Duration::ZERO).unwrap();
        let a_spec = replica(&spec, dir.path(), &format!("ff-a-{k}"));
        // One generation (interval 1 h): the graceful stop commits it with where it begins.
        let mut a = a_spec.start(dir.path());
        a.wait_ready(Duration::from_secs(60));
        a.wait_metric(FORWARDED, &[], k as f64, Duration::from_secs(300));
        assert!(a.terminate().success(), "{}", a.logs());
        std::fs::remove_dir_all(&a_spec.store).unwrap();
        scenario::produce(&kafka().client(), &input, &[(0, k)], Duration::ZERO).unwrap();
        let mut b = a_spec.start(dir.path());
        b.wait_metric(FORWARDED, &[], 1.0, Duration::from_secs(300));
        assert!(b.terminate().success(), "{}", b.logs());
        let logs = b.logs();
        let line = logs
            .lines()
            .find(|l| l.contains("first record forwarded since the partition was assigned"))
            .unwrap_or_else(|| panic!("no first-forward line:\n{logs}"));
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{name}=")))
                .unwrap_or("?")
                .to_string()
        };
        assert_eq!(field("rescanned"), k.to_string(), "{line}");
        eprintln!("| {k} | {} |", field("seconds"));
    }
}

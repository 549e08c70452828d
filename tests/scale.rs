//! Issue 7: several instances in one consumer group; the state follows the partition. Each
//! instance is the binary as its own process with its own store directory.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

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

fn wait_all_committed(group: &str, input: &str, partitions: i32, end: &BTreeMap<i32, i64>, logs: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let c = committed(group, input, partitions);
        if end
            .iter()
            .all(|(p, e)| c.get(p).and_then(|x| x.0).is_some_and(|o| o >= *e))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "committed {c:?}, expected {end:?}\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn verify_output(written: &[(i32, u64)], output: &str, partitions: i32, distinct: u64) {
    let out = read_values(&client(), output, partitions, Duration::from_secs(120)).unwrap();
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
    create_topic(&input, 6);
    create_topic(&output, 6);
    let spec = FilterSpec::new(&input, &output, dir.path()).killable();
    let s = scenario::replay_scenario(30_000, 6, 150, 21);
    let writer = {
        let (records, input) = (s.records.clone(), input.clone());
        std::thread::spawn(move || scenario::produce(&client(), &input, &records, Duration::from_secs(40)).unwrap())
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
    let end = end_offsets(&input, 6);
    wait_all_committed(&spec.group, &input, 6, &end, || {
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
    create_topic(&input, 6);
    create_topic(&output, 6);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let s = scenario::replay_scenario(20_000, 6, 150, 22);
    let writer = {
        let (records, input) = (s.records.clone(), input.clone());
        std::thread::spawn(move || scenario::produce(&client(), &input, &records, Duration::from_secs(30)).unwrap())
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
    let end = end_offsets(&input, 6);
    wait_all_committed(&spec.group, &input, 6, &end, || a.logs());
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
    create_topic(&input, 2);
    create_topic(&output, 2);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let first: Vec<(i32, u64)> = (0..2000).map(|v| ((v % 2) as i32, v)).collect();
    scenario::produce(&client(), &input, &first, Duration::ZERO).unwrap();
    let a_spec = replica(&spec, dir.path(), "a");
    let mut a = a_spec.start(dir.path());
    wait_all_committed(&spec.group, &input, 2, &end_offsets(&input, 2), || a.logs());
    assert!(a.terminate().success());

    // Meanwhile another instance owns the partitions and forwards more.
    let second: Vec<(i32, u64)> = (2000..4000).map(|v| ((v % 2) as i32, v)).collect();
    scenario::produce(&client(), &input, &second, Duration::ZERO).unwrap();
    let mut b = replica(&spec, dir.path(), "b").start(dir.path());
    wait_all_committed(&spec.group, &input, 2, &end_offsets(&input, 2), || b.logs());
    assert!(b.terminate().success());

    // The first instance comes back with its old store; replays of the second's records arrive.
    let replays: Vec<(i32, u64)> = (3000..4000).map(|v| ((v % 2) as i32, v)).collect();
    let third: Vec<(i32, u64)> = (4000..4500).map(|v| ((v % 2) as i32, v)).collect();
    scenario::produce(&client(), &input, &replays, Duration::ZERO).unwrap();
    scenario::produce(&client(), &input, &third, Duration::ZERO).unwrap();
    let mut a = a_spec.start(dir.path());
    wait_all_committed(&spec.group, &input, 2, &end_offsets(&input, 2), || a.logs());
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

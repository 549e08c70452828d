//! Issue 2's cases: the binary as its own process, filtering replaying topics on the real broker.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::*;
use kafka_dedup::scenario::{self, read_values};

/// Case 1: the seed scenario, 10,000 integers on 3 partitions with upstream replays.
#[test]
fn seed_scenario_on_three_partitions() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("seed-in"), unique("seed-out"));
    create_topic(&input, 3);
    create_topic(&output, 3);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));

    let s = scenario::replay_scenario(10_000, 3, 150, 1);
    assert!(s.replays > 500, "the scenario injects replays ({})", s.replays);
    scenario::produce(&client(), &input, &s.records, Duration::from_secs(3)).unwrap();
    wait_committed(&spec.group, &input, &end_offsets(&input, 3), Duration::from_secs(120));
    assert!(filter.terminate().success(), "{}", filter.logs());

    let out = read_values(&client(), &output, 3, Duration::from_secs(60)).unwrap();
    let v = scenario::verify(&s.records, &out);
    assert!(v.ok(), "{v:?}");
    assert_eq!(v.output_records, 10_000);
    let all: std::collections::BTreeSet<u64> = out.values().flatten().copied().collect();
    assert_eq!(all, (0..10_000).collect());
    let _: BTreeMap<i32, Vec<u64>> = out;
}

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
    let config = dir.join("audit.toml");
    std::fs::write(&config, spec.toml(free_port())).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kafka-dedup"))
        .args(["audit", "--json", "--config"])
        .arg(&config)
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code(), said)
}

/// Issue 22, item 2: under the defaults (`source = "value"`, `on_missing = "forward"`) the input
/// `k1=v1, k1=null, k1=v2` is forwarded, then the process aborts after the third acknowledgement
/// (`after-ack:3`), before any checkpoint. The restart re-takes the three records from the
/// committed offset: `v1` and `v2` are replays of fingerprints re-learned from the output, and the
/// tombstone, which has no fingerprint, must be known too (by its stand-in, re-learned from its
/// provenance), or it is forwarded a second time, after `v2`.
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
    assert_eq!(metric(&scrape, DROPPED, &[]), 3.0, "{scrape}");
    let (code, said) = audit(&spec, dir.path());
    assert_eq!(code, Some(0), "{said}");
}

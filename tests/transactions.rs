//! Case 6 of issue 3: `delivery = "transactional"` against the test broker that accepts
//! transactions (the prebuilt tansu of `scripts/test.sh`, a separate process). Checked: each
//! checkpoint commits the output records and the input offsets in one transaction, and the
//! committed offset matches what the committed transactions hold; a process frozen inside a
//! transaction (SIGSTOP: a zombie) is fenced when a replacement starts with the same
//! transactional id, and stops with an error instead of committing. Not checkable here: that a
//! read_committed reader never sees the aborted transaction's records (neither test broker
//! filters them; see the README).

mod common;

use std::time::{Duration, Instant};

use common::*;
use kafka_dedup::scenario::{self, read_values};

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";

fn committed_offset(bootstrap: &str, group: &str, topic: &str) -> Option<i64> {
    committed_on(bootstrap, group, topic, 1)[&0].0
}

#[test]
fn transactional_checkpoints_crash_and_fencing() {
    let bootstrap = tx_broker();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("txn-in"), unique("txn-out"));
    create_topic_on(&bootstrap, &input, 1, &[]);
    create_topic_on(&bootstrap, &output, 1, &[]);
    let mut spec = FilterSpec::new(&input, &output, dir.path()).killable();
    spec.broker = bootstrap.clone();
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__DELIVERY".into(), "transactional".into()));
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__TRANSACTIONAL_ID".into(), unique("txn")));

    let records: Vec<(i32, u64)> = (0..3000).map(|v| (0, v)).collect();
    let writer = {
        let (records, bootstrap, input) = (records.clone(), bootstrap.clone(), input.clone());
        std::thread::spawn(move || {
            scenario::produce(&client_for(&bootstrap), &input, &records, Duration::from_secs(8)).unwrap()
        })
    };
    let mut zombie = spec.start(dir.path());
    zombie.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(90));
    let deadline = Instant::now() + Duration::from_secs(30);
    let committed = loop {
        if let Some(c) = committed_offset(&bootstrap, &spec.group, &input).filter(|c| *c > 0) {
            break c;
        }
        assert!(
            Instant::now() < deadline,
            "no transaction committed offsets:\n{}",
            zombie.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    // Every input record is new, so the committed transactions hold exactly the records before
    // the committed offset, in order (records of the open transaction may follow them).
    let out = read_values(&client_for(&bootstrap), &output, 1, Duration::from_secs(30)).unwrap();
    let prefix: Vec<u64> = out[&0].iter().copied().take(committed as usize).collect();
    assert_eq!(prefix, (0..committed as u64).collect::<Vec<_>>());

    // Freeze it inside a transaction; a replacement (another machine: its own store) starts with
    // the same transactional id, fences the zombie and aborts its open transaction.
    zombie.signal("STOP");
    let frozen_committed = committed_offset(&bootstrap, &spec.group, &input).unwrap();
    let mut other = spec.clone();
    other.store = dir.path().join("store-replacement");
    let mut replacement = other.start(dir.path());
    writer.join().unwrap();
    // The input was written without transactions: its end is the record count (this broker's
    // high watermark is wrong when the last batch holds several records, so it is not asked).
    let end = records.len() as i64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while committed_offset(&bootstrap, &spec.group, &input) != Some(end) {
        assert!(
            Instant::now() < deadline,
            "the replacement did not commit to the end:\n{}",
            replacement.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(frozen_committed <= end);

    // The zombie wakes up: fenced, it stops with an error and commits nothing.
    zombie.signal("CONT");
    let status = zombie.wait_exit(Duration::from_secs(120));
    assert!(!status.success(), "the zombie must not succeed:\n{}", zombie.logs());
    let zlogs = zombie.logs().to_lowercase();
    assert!(zlogs.contains("fenced"), "{zlogs}");
    assert_eq!(
        committed_offset(&bootstrap, &spec.group, &input),
        Some(end),
        "the zombie committed nothing"
    );
    assert!(replacement.terminate().success(), "{}", replacement.logs());
    assert_eq!(committed_offset(&bootstrap, &spec.group, &input), Some(end));
}

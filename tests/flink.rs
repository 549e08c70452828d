//! Issue 24: the seed's scenario for real. A Flink 2.x job (examples/flink-replay, a MiniCluster
//! in one JVM) copies increasing integers with an AT_LEAST_ONCE KafkaSink while its JVM is
//! SIGKILLed three times between checkpoints and relaunched from its newest retained checkpoint;
//! kafka-dedup runs behind it. `scripts/flink-replay.sh` does the run (the same script a user
//! runs, on the suite's broker); this test then reads the topics itself.
//!
//! The horizon: the job checkpoints every 2 s and a relaunch takes 10-60 s on 2 busy cores;
//! kafka-dedup runs with `checkpoint.interval = "40s"`, `generations = 3`, so H_min = 80 s
//! exceeds the job's checkpoint interval plus its restart time (docs/guarantee.md, "The guarantee"). The
//! job's KafkaSink keeps each record's timestamp, so on the partition clock a replay lies as far
//! after its first copy as the kill after the restored checkpoint's source position: one
//! checkpoint interval in a job that keeps up, but more for a kill while the job is still working
//! through the previous kill's backlog (its checkpoint's barrier left the source well before it
//! completed): 23 s in one run of this test.
//!
//! Needs Java 17 and Maven (the script builds the job once per machine, scripts/brokers.sh
//! `install_flink`); `scripts/test.sh` provides both.

mod common;

use std::collections::{HashMap, HashSet};
use std::process::Command;
use std::time::Instant;

use common::*;

/// `KEY=VALUE` lines of the script's `run.env`.
fn run_env(dir: &std::path::Path) -> HashMap<String, String> {
    let text = std::fs::read_to_string(dir.join("run.env")).expect("run.env written by scripts/flink-replay.sh");
    text.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The names in the system's temporary directory that Flink's MiniCluster creates there when
/// java.io.tmpdir is left at its default (`flink-rpc-*.jar`, `flink-io-*`, `flink-netty-shuffle-*`,
/// `flink-dist-cache-*`, `minicluster_*`).
fn flink_files_in_system_temp() -> HashSet<String> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("flink-") || n.starts_with("minicluster_"))
        .collect()
}

#[test]
fn flink_job_killed_three_times_replays_and_kafka_dedup_forwards_each_integer_once() {
    let broker = kafka();
    let dir = tempfile::tempdir().unwrap();
    let flink_files_before = flink_files_in_system_temp();
    let started = Instant::now();
    let run = Command::new("scripts/flink-replay.sh")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([
            "--broker",
            &broker.bootstrap,
            "--guarantee",
            "at-least-once",
            "--kills",
            "3",
        ])
        .args(["--checkpoint", "2", "--every-ms", "20", "--partitions", "2"])
        .args(["--dedup-interval", "40s", "--dedup-generations", "3"])
        .args(["--bin", env!("CARGO_BIN_EXE_kafka-dedup")])
        .arg("--dir")
        .arg(dir.path())
        .output()
        .expect("running scripts/flink-replay.sh");
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr)
    );
    println!("{said}");
    println!("scripts/flink-replay.sh took {:?}", started.elapsed());
    assert!(run.status.success(), "scripts/flink-replay.sh failed: {said}");
    // A SIGKILLed JVM runs no shutdown hook: what Flink put in java.io.tmpdir stays. The script
    // points it into its own directory, removed at exit; in /tmp each kill left ~21 MB (a CI
    // machine that keeps running the suite would fill its disk).
    let left: Vec<String> = flink_files_in_system_temp()
        .difference(&flink_files_before)
        .cloned()
        .collect();
    assert!(
        left.is_empty(),
        "the Flink job's JVMs left files in {}: {left:?}",
        std::env::temp_dir().display()
    );

    let env = run_env(dir.path());
    let partitions: i32 = env["PARTITIONS"].parse().unwrap();
    let input = broker.read_values(&env["INPUT"], partitions);
    let job = broker.read_values(&env["JOB_OUT_ALO"], partitions);
    let dedup = broker.read_values(&env["DEDUP_ALO_DEDUP"], partitions);
    let produced: usize = input.values().map(Vec::len).sum();
    // How many integers there are depends on how fast the three kills and relaunches go (one
    // integer every 20 ms until the last relaunch caught up: about 1,000 on a quiet machine,
    // 2,000-3,000 on a busy one); what the test holds is below: replays, then each once.
    assert!(produced > 200, "the producer wrote {produced} integers");

    // The scenario is real: every integer reached the job's output at least once, in its
    // partition, and some more than once (the replays after the kills).
    let mut replays = 0;
    for (p, values) in &input {
        let out = &job[p];
        let seen: HashSet<u64> = out.iter().copied().collect();
        assert!(
            values.iter().all(|v| seen.contains(v)),
            "partition {p}: the job's output lacks an integer"
        );
        replays += out.len() - seen.len();
    }
    assert!(
        replays > 0,
        "the job's output holds no replays: the kills did not land between checkpoints"
    );

    // kafka-dedup's output: every integer exactly once, in input order, per partition.
    for (p, values) in &input {
        let out = &dedup[p];
        let distinct: HashSet<u64> = out.iter().copied().collect();
        let first_difference = values.iter().zip(out).position(|(a, b)| a != b);
        assert!(
            out == values,
            "partition {p}: kafka-dedup's output is not the input once and in order: {} records for {} \
             integers, {} duplicates, {} missing, first difference at position {first_difference:?} \
             (output there: {:?})",
            out.len(),
            values.len(),
            out.len() - distinct.len(),
            values.iter().filter(|v| !distinct.contains(v)).count(),
            first_difference.map(|i| &out[i..out.len().min(i + 8)]),
        );
    }
    println!("{produced} integers; the job's output held {replays} replays; kafka-dedup's output each once, in order");

    // `kafka-dedup audit` agrees.
    let audit = kafka_dedup_command()
        .args(["audit", "--json", "--config"])
        .arg(dir.path().join("alo.dedup.toml"))
        .output()
        .unwrap();
    let said = format!(
        "{}\n{}",
        String::from_utf8_lossy(&audit.stdout),
        String::from_utf8_lossy(&audit.stderr)
    );
    assert_eq!(audit.status.code(), Some(0), "{said}");
    let report: serde_json::Value = serde_json::from_slice(&audit.stdout).expect(&said);
    assert_eq!(report["totals"]["forwarded"].as_u64(), Some(produced as u64), "{said}");
    assert_eq!(report["totals"]["replays"].as_u64(), Some(replays as u64), "{said}");
}

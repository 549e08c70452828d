//! Operating it for real (issue 16, items 4 to 6): what the process does when the topology or the
//! disk changes under it, and the rough edges an operator meets first (configuration errors, the
//! store's size, a malformed lookup). On librdkafka's mock cluster, in this test process; the
//! binary runs as its own process.

mod common;

use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::*;
use rdkafka::mocking::MockCluster;

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";

/// A mock cluster with `topics` (name, partitions) and the broker value for its address.
fn mock(topics: &[(&str, i32)]) -> (MockCluster<'static, rdkafka::producer::DefaultProducerContext>, Broker) {
    let cluster = MockCluster::new(1).unwrap();
    for (t, p) in topics {
        cluster.create_topic(t, *p, 1).unwrap();
    }
    let broker = Broker::at(cluster.bootstrap_servers());
    (cluster, broker)
}

/// A filter spec on `broker` with a 6 s session (the mock's rebalances wait the session less 1 s).
fn spec_on(broker: &Broker, dir: &Path) -> FilterSpec {
    let mut spec = FilterSpec::on(broker.clone(), "in", "out", dir);
    spec.session_timeout_ms = Some(6000);
    spec
}

/// Runs the binary with `args` and `config` written to a file; waits at most `timeout`.
fn run_binary(args: &[&str], config: &str, dir: &Path, timeout: Duration) -> Output {
    let path = dir.join(format!("config-{}.toml", unique("c")));
    std::fs::write(&path, config).unwrap();
    let child = Command::new(env!("CARGO_BIN_EXE_kafka-dedup"))
        .args(args)
        .arg("--config")
        .arg(&path)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = child.id();
    let killer = std::thread::spawn(move || {
        std::thread::sleep(timeout);
        // SAFETY: kill(2) has no memory-safety preconditions; a pid that already exited is harmless here.
        unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    });
    let out = child.wait_with_output().unwrap();
    drop(killer);
    out
}

/// A configuration on a broker that is not there (nothing answers on port 1).
fn offline_config(dir: &Path, extra_props: &str, store: &Path) -> String {
    let mut spec = FilterSpec::on(Broker::at("127.0.0.1:1"), "in", "out", dir);
    spec.store = store.to_path_buf();
    spec.toml(free_port())
        .replace("[kafka.properties]\n", &format!("[kafka.properties]\n{extra_props}\n"))
}

/// Issue 16, item 6: settings librdkafka refuses only when it creates a client (`acks = 0` with
/// the idempotence kafka-dedup enforces) fail `check-config`, exit 2 naming the key, and make
/// `run` exit 2 at once, before it waits for brokers (none answers here).
#[test]
fn client_settings_are_checked_by_check_config_and_before_connecting() {
    let dir = tempfile::tempdir().unwrap();
    let config = offline_config(dir.path(), "acks = 0", &dir.path().join("store"));
    for args in [&["check-config"][..], &["run"][..]] {
        let started = Instant::now();
        let out = run_binary(args, &config, dir.path(), Duration::from_secs(20));
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("`kafka.properties.acks`"), "{args:?}: {stderr}");
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{args:?}: {:?}",
            started.elapsed()
        );
    }
    let good = offline_config(dir.path(), "", &dir.path().join("store"));
    let out = run_binary(&["check-config"], &good, dir.path(), Duration::from_secs(20));
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Issue 16, item 6: a `store.path` that cannot be written exits 2 naming the key, before any
/// broker is asked (none answers here): under a file, and on a read-only file system (a
/// read-only tmpfs; skipped, saying so, where mounting is not allowed).
#[test]
fn an_unwritable_store_path_exits_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let mut cases = vec![("under a file", file.join("store"))];
    let ro = dir.path().join("read-only");
    std::fs::create_dir(&ro).unwrap();
    let mounted = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "ro,size=1m", "tmpfs"])
        .arg(&ro)
        .status()
        .is_ok_and(|s| s.success());
    if mounted {
        cases.push(("read-only file system", ro.join("store")));
    } else {
        eprintln!("skipping the read-only case: mounting a tmpfs is not allowed here (needs root)");
    }
    for (case, store) in &cases {
        let out = run_binary(
            &["run"],
            &offline_config(dir.path(), "", store),
            dir.path(),
            Duration::from_secs(20),
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{case}: {stderr}");
        assert!(
            stderr.contains("`store.path`") && stderr.contains("not writable"),
            "{case}: {stderr}"
        );
    }
    if mounted {
        let _ = Command::new("umount").arg(&ro).status();
    }
}

/// Issue 16, item 6: the store size of the gauge, of `/store/stats` (the HTTP twin of `inspect
/// stats`) and of `du` agree (a 1 h checkpoint interval: nothing writes the store meanwhile);
/// a lookup whose query is not URL-encoded (`%ZZ`) is refused as a bad request instead of
/// looking up the text "%ZZ".
#[test]
fn the_store_size_is_one_measure_and_a_malformed_lookup_is_refused() {
    let (_cluster, broker) = mock(&[("in", 1), ("out", 1)]);
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_on(&broker, dir.path());
    spec.interval = "1h";
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    let (code, body) = http_get(&filter.http, "/store/lookup?value=%ZZ").unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("%ZZ"), "{body}");
    let (code, body) = http_get(&filter.http, "/store/lookup?value=%41").unwrap();
    assert_eq!(code, 200, "{body}");
    let du = || -> f64 {
        let out = Command::new("du")
            .args(["-s", "-B1"])
            .arg(&spec.store)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout)
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap()
    };
    let gauge = metric(&filter.scrape(), "kafka_dedup_store_size_bytes", &[]);
    let (code, body) = http_get(&filter.http, "/store/stats").unwrap();
    assert_eq!(code, 200, "{body}");
    let stats: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(gauge, du(), "gauge and du");
    assert_eq!(
        stats["size_on_disk_bytes"].as_f64(),
        Some(du()),
        "/store/stats and du: {body}"
    );

    assert!(filter.terminate().success(), "{}", filter.logs());
    let _ = FORWARDED;
}

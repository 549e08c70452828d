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
    let child = kafka_dedup_command()
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
    let mounted = SmallDisk::mount_with(&ro, "ro,size=1m");
    if mounted.is_some() {
        cases.push(("read-only file system", ro.join("store")));
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
    drop(mounted);
}

/// A reviewer's finding: the configuration's check of the environment's keys read
/// `std::env::vars`, which panics on a variable whose name is not Unicode, anyone's (exit 101);
/// such a variable is skipped, as the config crate skips it.
#[test]
fn a_variable_whose_name_is_not_unicode_is_skipped() {
    use std::os::unix::ffi::OsStrExt;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(&config, offline_config(dir.path(), "", &dir.path().join("store"))).unwrap();
    let out = kafka_dedup_command()
        .args(["check-config", "--config"])
        .arg(&config)
        .env(std::ffi::OsStr::from_bytes(b"NOT_UNICODE_\xff"), "x")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
}

/// Issue 16, item 6: the store size of the gauge, of `/store/stats` (the HTTP twin of `inspect
/// stats`) and of `du` agree (a 1 h checkpoint interval: nothing writes the store meanwhile);
/// a lookup whose query is not URL-encoded (`%ZZ`) is refused as a bad request naming where
/// (byte 6 of `value=%ZZ`) instead of looking up the text "%ZZ".
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
    assert!(body.contains("bad URL encoding at byte 6"), "{body}");
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

/// `records` (partition, value) written straight to the mock cluster (not through the proxy).
fn write(broker: &Broker, records: &[(i32, u64)]) {
    broker.produce_values("in", records, Duration::ZERO);
}

/// Values `range` on `partition`.
fn on(partition: i32, range: std::ops::Range<u64>) -> Vec<(i32, u64)> {
    range.map(|v| (partition, v)).collect()
}

/// A filter that reaches the mock cluster through `proxy`; with `refresh_ms`, every client
/// refreshes its metadata that often (the defaults: 30 s for the consumer,
/// `kafka::METADATA_REFRESH_MS`, and librdkafka's 5 minutes for the producer).
fn spec_through(proxy: &hiding::HidingProxy, dir: &Path, refresh_ms: Option<u32>) -> FilterSpec {
    let mut spec = spec_on(&Broker::at(format!("127.0.0.1:{}", proxy.port)), dir);
    if let Some(ms) = refresh_ms {
        spec.env.push((
            "KAFKA_DEDUP__KAFKA__PROPERTIES__TOPIC_METADATA_REFRESH_INTERVAL_MS".into(),
            ms.to_string(),
        ));
    }
    spec
}

/// The mock cluster's port.
fn port_of(broker: &Broker) -> u16 {
    broker.bootstrap.rsplit(':').next().unwrap().parse().unwrap()
}

/// Issue 16, item 4: input and output grow from 2 to 3 partitions while the filter runs, and
/// records go to the new partition: they are forwarded to the new output partition, in order,
/// by the same process (no restart), and committed.
///
/// How partitions are added: see [`hiding::HidingProxy`] (the topics have 3 partitions on the
/// mock cluster; the filter is shown 2 until the "CreatePartitions"). The clients keep their
/// default metadata refresh: the consumer notices the new input partition within 30 s, while the
/// producer would not know the new output partition for 5 minutes (and refuse its records) if
/// the recovery had not asked the output's partitions through it.
#[test]
fn partitions_added_while_running_are_forwarded_in_order() {
    let (_cluster, broker) = mock(&[("in", 3), ("out", 3)]);
    let proxy = hiding::HidingProxy::start(port_of(&broker), &[("in", 2), ("out", 2)]);
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_through(&proxy, dir.path(), None);
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    assert_eq!(filter.owned(), vec![0, 1]);
    let mut records = [on(0, 0..200), on(1, 200..400)].concat();
    write(&broker, &records);
    filter.wait_metric(FORWARDED, &[], 400.0, Duration::from_secs(60));

    proxy.show("out", 3);
    proxy.show("in", 3);
    let later = [on(2, 1000..1500), on(0, 400..450), on(1, 450..500)].concat();
    write(&broker, &later);
    records.extend(later);
    filter.wait_metric(FORWARDED, &[], records.len() as f64, Duration::from_secs(90));
    assert!(filter.running(), "{}", filter.logs());
    assert_eq!(filter.owned(), vec![0, 1, 2]);
    let ends = broker.end_offsets("in", 3);
    broker.wait_committed(&spec.group, "in", &ends, Duration::from_secs(60), || filter.logs());
    let pid = filter.pid();
    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = broker.read_values("out", 3);
    assert_eq!(out[&2], (1000..1500).collect::<Vec<_>>(), "partition 2, in order");
    let v = kafka_dedup::scenario::verify(&records, &out);
    assert!(v.ok() && v.output_records == records.len() as u64, "{v:?}");
    let logs = filter.logs();
    assert_eq!(
        logs.matches("starting kafka-dedup").count(),
        1,
        "one process ({pid}), no restart"
    );
}

/// Issue 16, item 4: only the input grows (the output keeps 2 partitions, `partitioning =
/// "preserve"`): the new input partition is held: nothing of it is forwarded, sent elsewhere or
/// committed, `/readyz` names it (and says it once in the log), the other partitions keep
/// forwarding. Once the output grows too, it runs, without a restart.
#[test]
fn an_input_partition_without_an_output_partition_is_held_and_the_others_run() {
    let (_cluster, broker) = mock(&[("in", 3), ("out", 3)]);
    let proxy = hiding::HidingProxy::start(port_of(&broker), &[("in", 2), ("out", 2)]);
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_through(&proxy, dir.path(), Some(1000));
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    write(&broker, &[on(0, 0..100), on(1, 100..200)].concat());
    filter.wait_metric(FORWARDED, &[], 200.0, Duration::from_secs(60));

    proxy.show("in", 3);
    write(&broker, &on(2, 1000..1100));
    let deadline = Instant::now() + Duration::from_secs(60);
    let reason = loop {
        if let Some((503, body)) = http_get(&filter.http, "/readyz") {
            if body.contains("without an output partition") {
                break body;
            }
        }
        assert!(Instant::now() < deadline, "never held:\n{}", filter.logs());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(
        reason.contains("2: output topic \\\"out\\\" has 2 partitions"),
        "{reason}"
    );
    // The others run meanwhile, over several of the held partition's looks at the output.
    write(&broker, &[on(0, 200..250), on(1, 250..300)].concat());
    filter.wait_metric(FORWARDED, &[], 300.0, Duration::from_secs(60));
    std::thread::sleep(Duration::from_secs(11));
    assert!(filter.running(), "{}", filter.logs());
    assert_eq!(metric(&filter.scrape(), FORWARDED, &[]), 300.0);
    assert_eq!(
        broker.committed(&spec.group, "in", 3)[&2].0,
        None,
        "nothing of partition 2 committed"
    );
    let out = broker.read_values("out", 3);
    assert!(
        out[&2].is_empty() && out.values().flatten().all(|v| *v < 1000),
        "{out:?}"
    );
    assert_eq!(
        filter.logs().matches("input partition held").count(),
        1,
        "{}",
        filter.logs()
    );

    proxy.show("out", 3);
    filter.wait_metric(FORWARDED, &[], 400.0, Duration::from_secs(60));
    filter.wait_ready(Duration::from_secs(30));
    let ends = broker.end_offsets("in", 3);
    broker.wait_committed(&spec.group, "in", &ends, Duration::from_secs(60), || filter.logs());
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert_eq!(broker.read_values("out", 3)[&2], (1000..1100).collect::<Vec<_>>());
}

/// Issue 16, item 4: a start with fewer output partitions than input partitions (`preserve`)
/// is not an exit 2 (a restart after the input grew would exit again and again, stopping every
/// partition): the partitions without an output partition are held, the others run.
#[test]
fn a_start_with_fewer_output_partitions_holds_the_extra_ones() {
    let (_cluster, broker) = mock(&[("in", 3), ("out", 2)]);
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_on(&broker, dir.path());
    write(&broker, &[on(0, 0..10), on(1, 10..20), on(2, 20..30)].concat());
    let mut filter = spec.start(dir.path());
    filter.wait_metric(FORWARDED, &[], 20.0, Duration::from_secs(60));
    let (code, body) = http_get(&filter.http, "/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(
        body.contains("without an output partition") && body.contains("2: output topic"),
        "{body}"
    );
    assert!(filter.logs().contains("has fewer partitions"), "{}", filter.logs());
    assert!(filter.running());
    assert_eq!(broker.committed(&spec.group, "in", 3)[&2].0, None);
    assert!(filter.terminate().success(), "{}", filter.logs());
}

const WRITE_FAILURES: &str = "kafka_dedup_store_write_failures_total";

/// A small tmpfs mounted at `dir` (unmounted on drop); `None` where mounting is not allowed.
struct SmallDisk {
    dir: std::path::PathBuf,
}

impl SmallDisk {
    fn mount(dir: &Path, size: &str) -> Option<SmallDisk> {
        Self::mount_with(dir, &format!("size={size}"))
    }

    /// Mounts a tmpfs with mount options `options` (`ro,size=1m`).
    fn mount_with(dir: &Path, options: &str) -> Option<SmallDisk> {
        std::fs::create_dir_all(dir).unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", options, "tmpfs"])
            .arg(dir)
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            eprintln!(
                "SKIPPED: mounting a tmpfs is not allowed here (needs root, as CI has); the full-disk test did not run"
            );
        }
        ok.then(|| SmallDisk { dir: dir.to_path_buf() })
    }

    /// Fills the file system with `filler` until a write fails for want of space.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.dir.join("filler")).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        let mut small = vec![0u8; 512];
        while !small.is_empty() && f.write_all(&small).is_ok() {}
        small.truncate(0);
        let _ = f.sync_all();
    }

    fn free(&self) {
        std::fs::remove_file(self.dir.join("filler")).unwrap();
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

/// Waits until `check` holds, up to `timeout`.
fn until(what: &str, timeout: Duration, filter: &FilterProcess, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what}: not after {timeout:?}:\n{}",
            filter.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The `/readyz` answer: status code and JSON.
fn readyz(filter: &FilterProcess) -> (u16, serde_json::Value) {
    let (code, body) = http_get(&filter.http, "/readyz").unwrap();
    (code, serde_json::from_str(&body).unwrap())
}

/// Issue 16, item 5: the store's file system fills up while the filter runs (a 8 MB tmpfs, filled
/// by another file): it keeps forwarding and committing from memory, counts the failed store
/// writes, says so once in the log and in `/readyz` (200: ready, with a `warning`), and once
/// space returns the store takes writes again by itself. A restart after a clean stop then uses
/// the store's snapshot (no rebuild). (A file system turned read-only takes the same path, a
/// failed write; it is not tested here: Linux refuses to remount a tmpfs read-only while sled
/// holds its files open for writing.)
#[test]
fn a_full_disk_is_survived_and_recovered_from() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&dir.path().join("disk"), "8m") else {
        return;
    };
    let (_cluster, broker) = mock(&[("in", 1), ("out", 1)]);
    let mut spec = spec_on(&broker, dir.path());
    spec.store = disk.dir.join("store");
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    write(&broker, &on(0, 0..500));
    filter.wait_metric(FORWARDED, &[], 500.0, Duration::from_secs(60));
    assert_eq!(metric(&filter.scrape(), WRITE_FAILURES, &[]), 0.0, "exported at 0");

    disk.fill();
    filter.wait_metric(WRITE_FAILURES, &[], 3.0, Duration::from_secs(30));
    write(&broker, &on(0, 500..1000));
    filter.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(60));
    let ends = broker.end_offsets("in", 1);
    broker.wait_committed(&spec.group, "in", &ends, Duration::from_secs(60), || filter.logs());
    let (code, r) = readyz(&filter);
    assert_eq!(code, 200, "{r}");
    let warning = r["warning"].as_str().unwrap_or_default().to_string();
    assert!(
        warning.contains("cannot be written") && warning.contains("No space left"),
        "{r}"
    );
    assert_eq!(
        filter.logs().matches("the local store cannot be written").count(),
        1,
        "logged once"
    );

    disk.free();
    until("the store takes writes again", Duration::from_secs(30), &filter, || {
        filter.logs().contains("the local store takes writes again")
    });
    let (code, r) = readyz(&filter);
    assert!(code == 200 && r.get("warning").is_none(), "{r}");
    let failures = metric(&filter.scrape(), WRITE_FAILURES, &[]);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        metric(&filter.scrape(), WRITE_FAILURES, &[]),
        failures,
        "no more failures"
    );
    assert!(filter.running());
    assert!(filter.terminate().success(), "{}", filter.logs());

    let mut again = spec.start(dir.path());
    again.wait_ready(Duration::from_secs(60));
    assert_eq!(
        metric(&again.scrape(), "kafka_dedup_store_rebuilds_total", &[]),
        0.0,
        "{}",
        again.logs()
    );
    assert!(again.terminate().success(), "{}", again.logs());
    let v = kafka_dedup::scenario::verify(&on(0, 0..1000), &broker.read_values("out", 1));
    assert!(v.ok() && v.output_records == 1000, "{v:?}");
}

/// Issue 16, item 5: a start on a full disk (the store cannot even be created) does not exit,
/// which would restart in a loop: the filter runs without its store (the partitions are
/// learned from the output topic), forwards, says why in `/readyz` and the log, and creates the
/// store once space returns.
#[test]
fn a_start_on_a_full_disk_runs_without_the_store_until_space_returns() {
    let dir = tempfile::tempdir().unwrap();
    let Some(disk) = SmallDisk::mount(&dir.path().join("disk"), "4m") else {
        return;
    };
    let (_cluster, broker) = mock(&[("in", 1), ("out", 1)]);
    let mut spec = spec_on(&broker, dir.path());
    spec.store = disk.dir.join("store");
    disk.fill();
    write(&broker, &on(0, 0..100));
    let mut filter = spec.start(dir.path());
    filter.wait_metric(FORWARDED, &[], 100.0, Duration::from_secs(60));
    let (code, r) = readyz(&filter);
    assert!(
        code == 200 && r["warning"].as_str().is_some_and(|w| w.contains("No space left")),
        "{r}"
    );
    assert!(metric(&filter.scrape(), WRITE_FAILURES, &[]) >= 1.0);

    disk.free();
    until("the store is created", Duration::from_secs(30), &filter, || {
        filter.logs().contains("the local store takes writes again")
    });
    assert!(spec.store.join("kafka-dedup.format").exists());
    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = kafka_dedup_command()
        .args(["inspect", "--store"])
        .arg(&spec.store)
        .arg("stats")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
}

/// A TCP proxy in front of the one broker of a mock cluster that shows clients fewer partitions
/// of a topic than the broker has, until told otherwise: librdkafka's mock cluster cannot add
/// partitions to a topic (`rd_kafka_mock_topic_create` refuses an existing one, and its handlers
/// have no CreatePartitions), tansu 0.6 refuses CreatePartitions, and a client learns how many
/// partitions a topic has only from Metadata answers. So the topics are created with their final
/// count, and the proxy rewrites what clients are told: partitions it hides are absent from every
/// Metadata answer, as before CreatePartitions; [`HidingProxy::show`] is the CreatePartitions.
///
/// To keep the rewriting small, the proxy caps the Metadata version the broker offers (in the
/// ApiVersions answer) at 4, the last one without flexible encoding, and rewrites the brokers'
/// ports in Metadata and FindCoordinator answers to its own, so that every client connection,
/// the group coordinator's included, goes through it. Everything else passes unchanged.
mod hiding {
    use std::collections::HashMap;
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};

    /// Highest Metadata version offered to clients (non-flexible).
    const METADATA_MAX: i16 = 4;
    const API_METADATA: i16 = 3;
    const API_FIND_COORDINATOR: i16 = 10;
    const API_VERSIONS: i16 = 18;

    /// Partitions shown per topic; topics not named are shown whole.
    type Shown = Arc<Mutex<HashMap<String, i32>>>;

    /// See the module documentation.
    pub struct HidingProxy {
        /// The port clients use.
        pub port: u16,
        shown: Shown,
    }

    impl HidingProxy {
        /// Proxies `127.0.0.1:upstream`, the mock cluster's only broker, showing the partitions
        /// `shown` says (topic, count) and every partition of other topics.
        pub fn start(upstream: u16, shown: &[(&str, i32)]) -> HidingProxy {
            let listener = TcpListener::bind("127.0.0.1:0").unwrap();
            let port = listener.local_addr().unwrap().port();
            let shown: Shown = Arc::new(Mutex::new(shown.iter().map(|(t, n)| (t.to_string(), *n)).collect()));
            let s = shown.clone();
            std::thread::spawn(move || {
                for client in listener.incoming().flatten() {
                    let Ok(broker) = TcpStream::connect(("127.0.0.1", upstream)) else {
                        continue;
                    };
                    let asked: Arc<Mutex<HashMap<i32, (i16, i16)>>> = Arc::default();
                    let (c2, b2, asked2, shown) = (
                        client.try_clone().unwrap(),
                        broker.try_clone().unwrap(),
                        asked.clone(),
                        s.clone(),
                    );
                    std::thread::spawn(move || requests(client, broker, asked));
                    std::thread::spawn(move || answers(b2, c2, asked2, shown, port));
                }
            });
            HidingProxy { port, shown }
        }

        /// Shows `partitions` partitions of `topic` from now on (the CreatePartitions).
        pub fn show(&self, topic: &str, partitions: i32) {
            self.shown.lock().unwrap().insert(topic.to_string(), partitions);
        }
    }

    fn frame(from: &mut TcpStream) -> Option<Vec<u8>> {
        let mut size = [0u8; 4];
        from.read_exact(&mut size).ok()?;
        let mut buf = vec![0u8; i32::from_be_bytes(size) as usize];
        from.read_exact(&mut buf).ok()?;
        Some(buf)
    }

    fn send(to: &mut TcpStream, body: &[u8]) -> bool {
        to.write_all(&(body.len() as i32).to_be_bytes()).is_ok() && to.write_all(body).is_ok()
    }

    /// Client to broker: notes each request's api key and version by correlation id.
    fn requests(mut client: TcpStream, mut broker: TcpStream, asked: Arc<Mutex<HashMap<i32, (i16, i16)>>>) {
        while let Some(req) = frame(&mut client) {
            if req.len() >= 8 {
                let key = i16::from_be_bytes([req[0], req[1]]);
                let version = i16::from_be_bytes([req[2], req[3]]);
                let corr = i32::from_be_bytes([req[4], req[5], req[6], req[7]]);
                asked.lock().unwrap().insert(corr, (key, version));
            }
            if !send(&mut broker, &req) {
                break;
            }
        }
        let _ = broker.shutdown(Shutdown::Write);
    }

    /// Broker to client: rewrites the answers the module documentation names.
    fn answers(
        mut broker: TcpStream,
        mut client: TcpStream,
        asked: Arc<Mutex<HashMap<i32, (i16, i16)>>>,
        shown: Shown,
        port: u16,
    ) {
        while let Some(mut resp) = frame(&mut broker) {
            let corr = i32::from_be_bytes([resp[0], resp[1], resp[2], resp[3]]);
            let request = asked.lock().unwrap().remove(&corr);
            match request {
                Some((API_VERSIONS, v)) => cap_metadata(&mut resp[4..], v),
                Some((API_METADATA, v)) => {
                    assert!(v <= METADATA_MAX, "a Metadata v{v} request despite the cap");
                    let shown = shown.lock().unwrap().clone();
                    let body = metadata(&resp[4..], v, &shown, port);
                    resp.truncate(4);
                    resp.extend(body);
                }
                Some((API_FIND_COORDINATOR, v)) => {
                    assert!(v <= 2, "a flexible FindCoordinator v{v}");
                    let n = resp.len();
                    resp[n - 4..].copy_from_slice(&(port as i32).to_be_bytes());
                }
                _ => {}
            }
            if !send(&mut client, &resp) {
                break;
            }
        }
        let _ = client.shutdown(Shutdown::Write);
    }

    /// An unsigned varint at `b[*at..]`.
    fn uvarint(b: &[u8], at: &mut usize) -> u64 {
        let (mut v, mut shift) = (0u64, 0);
        loop {
            let byte = b[*at];
            *at += 1;
            v |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                return v;
            }
            shift += 7;
        }
    }

    /// ApiVersions answer (header v0, then the body): Metadata's max version lowered in place.
    fn cap_metadata(body: &mut [u8], version: i16) {
        let mut at = 2; // error_code
        let count = if version >= 3 {
            uvarint(body, &mut at).saturating_sub(1) as usize
        } else {
            let n = i32::from_be_bytes(body[at..at + 4].try_into().unwrap()) as usize;
            at += 4;
            n
        };
        for _ in 0..count {
            let key = i16::from_be_bytes([body[at], body[at + 1]]);
            if key == API_METADATA {
                let max = i16::from_be_bytes([body[at + 4], body[at + 5]]).min(METADATA_MAX);
                body[at + 4..at + 6].copy_from_slice(&max.to_be_bytes());
            }
            at += 6;
            if version >= 3 {
                let tags = uvarint(body, &mut at);
                for _ in 0..tags {
                    let _tag = uvarint(body, &mut at);
                    let size = uvarint(body, &mut at) as usize;
                    at += size;
                }
            }
        }
    }

    /// A reader of a non-flexible body.
    struct Cursor<'a> {
        b: &'a [u8],
        at: usize,
    }

    impl Cursor<'_> {
        fn take(&mut self, n: usize) -> &[u8] {
            let s = &self.b[self.at..self.at + n];
            self.at += n;
            s
        }
        fn i16(&mut self) -> i16 {
            i16::from_be_bytes(self.take(2).try_into().unwrap())
        }
        fn i32(&mut self) -> i32 {
            i32::from_be_bytes(self.take(4).try_into().unwrap())
        }
        /// A (nullable) string, raw with its length prefix, and its text.
        fn string(&mut self) -> (Vec<u8>, String) {
            let n = self.i16();
            let text = if n < 0 {
                Vec::new()
            } else {
                self.take(n as usize).to_vec()
            };
            let mut raw = n.to_be_bytes().to_vec();
            raw.extend(&text);
            (raw, String::from_utf8_lossy(&text).into_owned())
        }
        fn i32_array(&mut self) -> Vec<u8> {
            let n = self.i32();
            let mut raw = n.to_be_bytes().to_vec();
            raw.extend(self.take(4 * n.max(0) as usize));
            raw
        }
    }

    /// A Metadata answer (v0..v4) rewritten: every broker's port the proxy's, and each topic of
    /// `shown` without its partitions from the shown count on.
    fn metadata(body: &[u8], v: i16, shown: &HashMap<String, i32>, port: u16) -> Vec<u8> {
        let mut c = Cursor { b: body, at: 0 };
        let mut out = Vec::with_capacity(body.len());
        if v >= 3 {
            out.extend(c.take(4)); // throttle_time_ms
        }
        let brokers = c.i32();
        out.extend(brokers.to_be_bytes());
        for _ in 0..brokers {
            out.extend(c.take(4)); // node_id
            out.extend(c.string().0); // host
            c.i32();
            out.extend((port as i32).to_be_bytes());
            if v >= 1 {
                out.extend(c.string().0); // rack
            }
        }
        if v >= 2 {
            out.extend(c.string().0); // cluster_id
        }
        if v >= 1 {
            out.extend(c.take(4)); // controller_id
        }
        let topics = c.i32();
        out.extend(topics.to_be_bytes());
        for _ in 0..topics {
            out.extend(c.take(2)); // error_code
            let (raw, name) = c.string();
            out.extend(raw);
            if v >= 1 {
                out.extend(c.take(1)); // is_internal
            }
            let parts = c.i32();
            let mut kept = Vec::new();
            let mut n = 0i32;
            for _ in 0..parts {
                let error = c.take(2).to_vec();
                let index = c.i32();
                let leader = c.take(4).to_vec();
                let replicas = c.i32_array();
                let isr = c.i32_array();
                if shown.get(&name).is_none_or(|count| index < *count) {
                    n += 1;
                    kept.extend(error);
                    kept.extend(index.to_be_bytes());
                    kept.extend(leader);
                    kept.extend(replicas);
                    kept.extend(isr);
                }
            }
            out.extend(n.to_be_bytes());
            out.extend(kept);
        }
        out.extend(&body[c.at..]);
        out
    }
}

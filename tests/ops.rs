//! Issue 4's cases: operating the binary. Each test starts `kafka-dedup run` as its own process
//! against the Apache Kafka broker of `scripts/test.sh` and looks at it only from outside: `/metrics`,
//! `/healthz`, `/readyz`, exit codes, stderr and the topics.
//!
//! Case 1 of the issue (after the retried batch, `/metrics` shows consumed 1100, forwarded 1000,
//! duplicates dropped 100, exactly) is `tests/filter.rs::retried_batch_drops_exactly_the_repeats`;
//! [`retried_batch_horizon_diagnostics`] runs the same input and checks the horizon diagnostics.
//! Case 4 (a scrape loop does not stall a full-speed run) is a measurement in its own test binary,
//! `tests/ops_bench.rs`, so that no other test runs beside it.

mod common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use kafka_dedup::telemetry::{
    CHECKPOINTS, CONSUMER_LAG, DUPLICATES_DROPPED, DUPLICATE_DISTANCE, FINGERPRINTS_HELD, PARTITION_STATE, READY,
    RECORDS_CONSUMED, RECORDS_FORWARDED, RECOVERY_SCANNED, STORE_REBUILDS, STORE_SIZE, UNFINGERPRINTABLE,
};

/// The repository root (the dashboard, the Dockerfile and `deploy/` live there).
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Values `i` as records with key `k<i>`: a distinct event each.
fn numbered(range: std::ops::Range<u32>) -> Vec<Raw> {
    range
        .map(|i| raw(Some(&format!("k{i}")), Some(&i.to_string()), &[]))
        .collect()
}

/// Environment that makes librdkafka publish statistics (consumer lag) every 500 ms.
fn fast_statistics() -> (String, String) {
    (
        "KAFKA_DEDUP__KAFKA__PROPERTIES__STATISTICS_INTERVAL_MS".into(),
        "500".into(),
    )
}

/// Names of the samples in a Prometheus text scrape (`name{labels} value` -> `name`).
fn sample_names(scrape: &str) -> BTreeSet<String> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_string)
        .collect()
}

/// Every `kafka_dedup_*` metric name in a PromQL expression.
fn names_in_expr(expr: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = expr;
    while let Some(i) = rest.find("kafka_dedup_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        out.push(tail[..end].to_string());
        rest = &tail[end..];
    }
    out
}

/// Every `expr` of every panel (and row) of a Grafana dashboard, with the panel's title.
fn dashboard_exprs(dashboard: &serde_json::Value) -> Vec<(String, String)> {
    fn walk(panels: &serde_json::Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("").to_string();
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push((title.clone(), e.to_string()));
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&dashboard["panels"], &mut out);
    out
}

fn load_dashboard() -> serde_json::Value {
    let path = repo().join("dashboards/kafka-dedup.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Given: topics `<name>-in-…` and `<name>-out-…` of one partition, the input holding issue 4's
/// retried batch: 1..500, then 401..500 again (100 replays), then 501..1000: 1,100 records,
/// 1,000 distinct. Returns (input, output).
fn retried_batch(name: &str) -> (String, String) {
    let (input, output) = (unique(&format!("{name}-in")), unique(&format!("{name}-out")));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let mut records = numbered(1..501);
    records.extend(numbered(401..501));
    records.extend(numbered(501..1001));
    kafka().produce_raw(&input, 0, &records);
    (input, output)
}

/// Case 1, horizon diagnostics: 1..500, 401..500 again, 501..1000. Each replay sits exactly 100
/// input offsets after its first copy, so the distance histogram holds 100 samples of 100.
#[test]
fn retried_batch_horizon_diagnostics() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = retried_batch("ops-retry");

    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut filter = spec.start(dir.path());
    filter.wait_metric(RECORDS_CONSUMED, &[], 1100.0, Duration::from_secs(60));
    filter.wait_metric(RECORDS_FORWARDED, &[], 1000.0, Duration::from_secs(60));
    let s = filter.scrape();
    assert_eq!(metric(&s, RECORDS_CONSUMED, &[]), 1100.0, "{s}");
    assert_eq!(metric(&s, RECORDS_FORWARDED, &[]), 1000.0, "{s}");
    assert_eq!(metric(&s, DUPLICATES_DROPPED, &[]), 100.0, "{s}");
    // Every generation's label (0 the current, up to `generations - 1` the oldest): which one
    // matched depends on the rotations while the batch was written, not on the test.
    let by_generation: f64 = (0..spec.generations)
        .map(|g| metric(&s, DUPLICATES_DROPPED, &[&format!("generation=\"{g}\"")]))
        .sum();
    assert_eq!(
        by_generation, 100.0,
        "every drop names the generation that matched:\n{s}"
    );
    let hist = |suffix: &str, labels: &[&str]| metric(&s, &format!("{DUPLICATE_DISTANCE}{suffix}"), labels);
    assert_eq!(hist("_count", &[]), 100.0, "{s}");
    assert_eq!(hist("_sum", &[]), 100.0 * 100.0, "{s}");
    assert_eq!(hist("_bucket", &["le=\"10\""]), 0.0, "{s}");
    assert_eq!(hist("_bucket", &["le=\"100\""]), 100.0, "{s}");
    assert!(filter.terminate().success(), "{}", filter.logs());
}

/// What the log says without a scrape (a new user's first look at it): each checkpoint's line
/// gives what was consumed, forwarded and dropped since the previous line, the stop's hand-over
/// included (so the lines add up to the totals, each record counted once), and the stop's last
/// line gives the totals. In both delivery modes (`commit=sent`: the offset commit;
/// `commit=committed`: the transaction).
#[test]
fn the_log_says_what_each_checkpoint_forwarded_and_dropped_and_the_stop_the_totals() {
    for delivery in ["idempotent", "transactional"] {
        log_says_counts(delivery);
    }
}

fn log_says_counts(delivery: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = retried_batch("ops-progress");

    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env.push(("KAFKA_DEDUP__OUTPUT__DELIVERY".into(), delivery.into()));
    if delivery == "transactional" {
        spec.env
            .push(("KAFKA_DEDUP__OUTPUT__TRANSACTIONAL_ID".into(), unique("progress-txn")));
    }
    let mut filter = spec.start(dir.path());
    filter.wait_metric(RECORDS_FORWARDED, &[], 1000.0, Duration::from_secs(60));
    // A periodic checkpoint's line (every `spec.interval`, 1 s), whatever it counts.
    let commit = if delivery == "transactional" {
        "commit=committed"
    } else {
        "commit=sent"
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while !filter
        .logs()
        .lines()
        .any(|l| l.contains(": checkpoint ") && l.contains(commit))
    {
        assert!(
            Instant::now() < deadline,
            "{delivery}: no checkpoint line with {commit}:\n{}",
            filter.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // The stop's hand-over logs what came after the last periodic line: the lines add up.
    assert!(filter.terminate().success(), "{}", filter.logs());
    let logs = filter.logs();
    assert!(logs.contains("commit=hand-over"), "{logs}");
    assert_eq!(sum_of(&logs, "checkpoint", "forwarded"), 1000, "{logs}");
    assert_eq!(sum_of(&logs, "checkpoint", "consumed"), 1100, "{logs}");
    assert_eq!(sum_of(&logs, "checkpoint", "replays_dropped"), 100, "{logs}");
    assert_eq!(sum_of(&logs, "checkpoint", "unfingerprintable"), 0, "{logs}");
    let last = logs
        .lines()
        .rfind(|l| l.contains(": kafka-dedup stopped "))
        .unwrap_or_default();
    assert!(!last.is_empty(), "no stop line:\n{logs}");
    assert_eq!(sum_of(last, "kafka-dedup stopped", "consumed"), 1100, "{logs}");
    assert_eq!(sum_of(last, "kafka-dedup stopped", "forwarded"), 1000, "{logs}");
    assert_eq!(sum_of(last, "kafka-dedup stopped", "replays_dropped"), 100, "{logs}");
}

/// Case 2: a restart without the local store rebuilds the partition from the output topic
/// (30,000 records). While it re-reads, `/readyz` answers 503 with the reason; it answers 200
/// only once everything is re-read; `/healthz` answers 200 throughout.
///
/// Race-free by ordering, not by timing: a `/readyz` 200 that reports partition 0 running is
/// followed by a scrape that must show the whole output re-read (the counter only grows), and at
/// least one 503 must be bracketed by a scrape before it showing the re-read started and a scrape
/// after it showing it unfinished. (A 200 owning no partition is legitimate: the group may hand
/// the restarted member an empty assignment first, while the previous member is still in it.)
#[test]
fn readyz_not_ready_while_recovery_rereads_the_output() {
    const N: u32 = 30_000;
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("ops-rec-in"), unique("ops-rec-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    kafka().produce_raw(&input, 0, &numbered(0..N));
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    // No rotation before the restart (the first one is 10 intervals away when record time stands
    // still), so the restart re-reads all N records.
    spec.interval = "30s";
    let mut first = spec.start(dir.path());
    first.wait_metric(RECORDS_FORWARDED, &[], N as f64, Duration::from_secs(120));
    assert!(first.terminate().success(), "{}", first.logs());
    std::fs::remove_dir_all(&spec.store).unwrap();

    let mut filter = spec.start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(120);
    let scanned = |s: &str| metric(s, RECOVERY_SCANNED, &[]);
    let (mut not_ready, mut during_reread, mut health_checks, mut ready_owning_nothing) = (0, 0, 0, 0);
    loop {
        assert!(Instant::now() < deadline, "never ready:\n{}", filter.logs());
        assert!(filter.running(), "kafka-dedup exited:\n{}", filter.logs());
        let before = filter.scrape();
        let Some((code, body)) = http_get(&filter.http, "/readyz") else {
            continue; // the HTTP server is not listening yet
        };
        let health = http_get(&filter.http, "/healthz");
        assert_eq!(health.as_ref().map(|h| h.0), Some(200), "/healthz: {health:?}");
        health_checks += 1;
        let after = filter.scrape();
        if code == 200 {
            let r: serde_json::Value = serde_json::from_str(&body).unwrap();
            if r["partitions"].as_object().is_some_and(|m| m.is_empty()) {
                // A member that owns nothing is ready: the group gave this one an empty assignment
                // first (the previous member was still in the group), partition 0 comes later.
                ready_owning_nothing += 1;
                continue;
            }
            assert_eq!(r["partitions"]["0"], "running", "{body}");
            assert!(
                scanned(&after) >= N as f64,
                "partition 0 running before the output was re-read: {body}\n{after}"
            );
            break;
        }
        assert_eq!(code, 503, "{body}");
        let r: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(r["ready"], false, "{body}");
        let reason = r["reason"].as_str().unwrap_or_default();
        assert!(!reason.is_empty(), "not ready without a reason: {body}");
        if reason.contains("recovering") {
            not_ready += 1;
            if scanned(&before) > 0.0 && scanned(&after) < N as f64 {
                during_reread += 1;
                assert_eq!(
                    metric(&after, PARTITION_STATE, &["partition=\"0\"", "state=\"recovering\""]),
                    1.0,
                    "the state gauge agrees with /readyz:\n{after}"
                );
            }
        }
    }
    assert!(not_ready > 0, "never saw /readyz say recovering:\n{}", filter.logs());
    assert!(
        during_reread > 0,
        "never saw /readyz not ready while the output was being re-read ({not_ready} not-ready answers)"
    );
    let s = filter.scrape();
    assert_eq!(metric(&s, STORE_REBUILDS, &["reason=\"missing\""]), 1.0, "{s}");
    assert_eq!(metric(&s, PARTITION_STATE, &["state=\"running\""]), 1.0, "{s}");
    assert_eq!(metric(&s, READY, &[]), 1.0, "{s}");
    assert_eq!(http_get(&filter.http, "/healthz").map(|h| h.0), Some(200));
    assert!(filter.terminate().success(), "{}", filter.logs());
    eprintln!(
        "{not_ready} not-ready answers, {during_reread} during the re-read, {ready_owning_nothing} ready \
         owning nothing yet, {health_checks} /healthz checks"
    );
    if ready_owning_nothing > 0 {
        let logs = filter.logs();
        let group: Vec<&str> = logs
            .lines()
            .filter(|l| l.contains("partition") || l.contains("rebalance") || l.contains("assign"))
            .collect();
        eprintln!("how the group handed partition 0 over:\n{}", group.join("\n"));
    }
}

/// Case 3: a scenario that exercises every panel (replays, a tombstone, checkpoints, a restart
/// that rebuilds from the output), then every metric name the dashboard queries must be in the
/// live scrape, and the panels' main series must hold real values.
#[test]
fn every_dashboard_metric_is_in_a_live_scrape() {
    let dashboard = load_dashboard();
    let wanted: BTreeSet<String> = dashboard_exprs(&dashboard)
        .iter()
        .flat_map(|(_, e)| names_in_expr(e))
        .collect();
    assert!(wanted.len() >= 12, "the dashboard queries {wanted:?}");

    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("ops-dash-in"), unique("ops-dash-out"));
    kafka().create_topic(&input, 2);
    kafka().create_topic(&output, 2);
    let tombstone = raw(Some("gone"), None, &[]);
    let event_time = wall_ms();
    for p in 0..2 {
        let mut batch = numbered(0..300);
        batch.extend(numbered(250..300)); // a replay
        batch.push(tombstone.clone()); // no fingerprint (source = value): forwarded, counted
        kafka().produce_raw(&input, p, &batch);
    }
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env.push(fast_statistics());
    let mut first = spec.start(dir.path());
    first.wait_metric(RECORDS_FORWARDED, &[], 602.0, Duration::from_secs(60));
    assert!(first.terminate().success(), "{}", first.logs());

    // The restart without its store rebuilds both partitions from the output topic.
    std::fs::remove_dir_all(&spec.store).unwrap();
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    for p in 0..2 {
        // Replays of records forwarded before the restart, then new records, all on the first
        // run's timeline: written now with new timestamps they would be seconds after the first
        // run's records, possibly past the horizon on a loaded machine, so the replays would
        // rightly be forwarded and the re-learned fingerprints rotated out.
        let mut batch = numbered(280..300);
        batch.extend(numbered(1000..1100));
        batch.push(tombstone.clone());
        let batch: Vec<(i64, Raw)> = batch.into_iter().map(|r| (event_time, r)).collect();
        kafka().produce_timed(&input, p, &batch);
    }
    filter.wait_metric(RECORDS_CONSUMED, &[], 242.0, Duration::from_secs(60));
    filter.wait_metric(RECORDS_FORWARDED, &[], 202.0, Duration::from_secs(60));
    filter.wait_metric(CHECKPOINTS, &["result=\"ok\""], 1.0, Duration::from_secs(30));

    // Gauges refreshed periodically (statistics, store size) appear within a few seconds.
    let deadline = Instant::now() + Duration::from_secs(30);
    let scrape = loop {
        let s = filter.scrape();
        let present = sample_names(&s);
        let missing: Vec<&String> = wanted.difference(&present).collect();
        // The gauges are refreshed every second: wait until they show the last records too
        // (per partition, 300 re-learned and 100 new, and the two tombstones' stand-ins: the
        // first run's re-learned by its provenance, the second's learned when forwarded).
        if missing.is_empty() && metric(&s, FINGERPRINTS_HELD, &[]) >= 804.0 {
            break s;
        }
        assert!(filter.running(), "kafka-dedup exited:\n{}", filter.logs());
        assert!(
            Instant::now() < deadline,
            "metrics the dashboard queries are missing from the live scrape: {missing:?}\n{s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let v = |name: &str, labels: &[&str]| metric(&scrape, name, labels);
    assert_eq!(v(RECORDS_CONSUMED, &[]), 242.0, "{scrape}");
    assert_eq!(
        v(DUPLICATES_DROPPED, &[]),
        40.0,
        "replays of records forwarded before the restart"
    );
    assert_eq!(v(UNFINGERPRINTABLE, &["action=\"forward\"", "reason=\"absent\""]), 2.0);
    assert_eq!(v(STORE_REBUILDS, &["reason=\"missing\""]), 2.0, "{scrape}");
    // Everything forwarded before the restart, unless a (slow) first run rotated a generation out.
    assert!((1.0..=602.0).contains(&v(RECOVERY_SCANNED, &[])), "{scrape}");
    assert_eq!(v(FINGERPRINTS_HELD, &[]), 804.0, "{scrape}");
    assert!(v(STORE_SIZE, &[]) > 0.0, "{scrape}");
    assert!(
        scrape.contains(&format!("{CONSUMER_LAG}{{partition=\"0\"}}")),
        "{scrape}"
    );
    assert_eq!(v(PARTITION_STATE, &["state=\"running\""]), 2.0, "{scrape}");
    assert_eq!(v(READY, &[]), 1.0);
    // Once everything is committed, the lag (high watermark minus committed offset, from the
    // statistics every 500 ms) reads 0 on both partitions. 242 records were consumed since the
    // restart, so a gauge that reported the high watermark or the records consumed would not.
    let ends = kafka().end_offsets(&input, 2);
    kafka().wait_committed(&spec.group, &input, &ends, Duration::from_secs(60), || filter.logs());
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = filter.scrape();
        let lag = |p: &str| metric(&s, CONSUMER_LAG, &[&format!("partition=\"{p}\"")]);
        if lag("0") == 0.0 && lag("1") == 0.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "lag after everything was committed ({ends:?}):\n{s}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(filter.terminate().success(), "{}", filter.logs());
}

/// The dashboard file itself: a fixed uid, every panel on the provisioned Prometheus datasource
/// (through the `datasource` variable whose default is its fixed uid), unique panel ids, and
/// the panels the issue lists.
#[test]
fn dashboard_and_provisioning_agree() {
    let d = load_dashboard();
    assert_eq!(
        d["uid"], "kafka-dedup",
        "a fixed uid keeps links and provisioning stable"
    );
    let provisioning =
        std::fs::read_to_string(repo().join("dashboards/provisioning/datasources/prometheus.yaml")).unwrap();
    assert!(provisioning.contains("uid: kafka-dedup-prometheus"), "{provisioning}");
    let var = d["templating"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "datasource")
        .expect("a datasource variable");
    assert_eq!(var["current"]["value"], "kafka-dedup-prometheus");
    let mut ids = BTreeSet::new();
    let mut titles = Vec::new();
    fn panels(v: &serde_json::Value) -> Vec<serde_json::Value> {
        let mut out = Vec::new();
        for p in v.as_array().into_iter().flatten() {
            out.push(p.clone());
            out.extend(panels(&p["panels"]));
        }
        out
    }
    for p in panels(&d["panels"]) {
        assert!(ids.insert(p["id"].as_i64().unwrap()), "duplicate panel id {}", p["id"]);
        titles.push(p["title"].as_str().unwrap().to_lowercase());
        if p["type"] != "row" {
            assert_eq!(p["datasource"]["uid"], "${datasource}", "panel {}", p["title"]);
            for t in p["targets"].as_array().unwrap() {
                assert_eq!(t["datasource"]["uid"], "${datasource}", "panel {}", p["title"]);
            }
        }
    }
    for wanted in [
        "throughput",
        "duplicate rate",
        "drops by generation",
        "replay distance",
        "horizon",
        "checkpoint duration",
        "fingerprints held",
        "store size",
        "lag",
        "recovery",
        "partition state",
    ] {
        assert!(
            titles.iter().any(|t| t.contains(wanted)),
            "no panel about {wanted}: {titles:?}"
        );
    }
    let provider = std::fs::read_to_string(repo().join("dashboards/provisioning/dashboards/kafka-dedup.yaml")).unwrap();
    assert!(provider.contains("path: /var/lib/grafana/dashboards"), "{provider}");
}

/// Runs `kafka-dedup ARGS --config FILE`; returns (exit code, stderr, stdout).
fn run_binary(cmd: &str, config: &Path) -> (Option<i32>, String, String) {
    let out = kafka_dedup_command()
        .args([cmd, "--config"])
        .arg(config)
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

const SECRET: &str = "s3cret-never-shown-7f3a";

/// Security misconfigurations fail at start with exit 2 and a message naming the key, before
/// consuming anything, and never print the secret.
#[test]
fn security_misconfigurations_exit_2_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("ops-sec-in"), unique("ops-sec-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let good = spec.toml(free_port());
    let with = |props: &str| good.replace("[kafka.properties]\n", &format!("[kafka.properties]\n{props}"));
    let sasl = "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.username\" = \"dedup\"\n";
    let garbage = dir.path().join("garbage.pem");
    std::fs::write(&garbage, "not a certificate\n").unwrap();
    let secret_file = dir.path().join("password");
    std::fs::write(&secret_file, format!("{SECRET}\n")).unwrap();

    let cases: Vec<(&str, String, &str)> = vec![
        (
            "unknown mechanism",
            with(&format!(
                "{sasl}\"sasl.mechanism\" = \"SCRAM-SHA-1024\"\n\"sasl.password\" = \"{SECRET}\"\n"
            )),
            "kafka.properties.sasl.mechanism",
        ),
        (
            "missing password",
            with(&format!("{sasl}\"sasl.mechanism\" = \"SCRAM-SHA-256\"\n")),
            "kafka.properties.sasl.password",
        ),
        (
            "unreadable password file",
            with(&format!(
                "{sasl}\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.password\" = \"file:{}/no-such-secret\"\n",
                dir.path().display()
            )),
            "kafka.properties.sasl.password",
        ),
        (
            "unreadable certificate file",
            with(&format!(
                "{sasl}\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.password\" = \"file:{}\"\n\
                 \"ssl.ca.location\" = \"{}/no-such-ca.pem\"\n",
                secret_file.display(),
                dir.path().display()
            )),
            "kafka.properties.ssl.ca.location",
        ),
        (
            "unknown protocol",
            with("\"security.protocol\" = \"TLS\"\n"),
            "kafka.properties.security.protocol",
        ),
    ];
    for (what, text, key) in &cases {
        let path = dir.path().join(format!("{}.toml", what.replace(' ', "-")));
        std::fs::write(&path, text).unwrap();
        for cmd in ["run", "check-config"] {
            let (code, stderr, stdout) = run_binary(cmd, &path);
            assert_eq!(code, Some(2), "{what} ({cmd}): {stderr}");
            assert!(
                stderr.contains(&format!("`{key}`")),
                "{what} ({cmd}) names {key}: {stderr}"
            );
            assert!(
                !stderr.contains(SECRET) && !stdout.contains(SECRET),
                "{what}: secret shown"
            );
        }
    }

    // A readable file that is not a certificate passes the start-up checks; librdkafka refuses it
    // when the clients are created: still exit 2, naming the property.
    let path = dir.path().join("garbage-ca.toml");
    std::fs::write(
        &path,
        with(&format!(
            "{sasl}\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.password\" = \"file:{}\"\n\"ssl.ca.location\" = \"{}\"\n",
            secret_file.display(),
            garbage.display()
        )),
    )
    .unwrap();
    let (code, stderr, _) = run_binary("run", &path);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("ssl.ca.location"), "{stderr}");
    assert!(!stderr.contains(SECRET), "{stderr}");

    // Nothing was consumed: the group never committed.
    let c = kafka().committed(&spec.group, &input, 1);
    assert_eq!(c[&0].0, None, "{c:?}");

    // The same settings with a readable password file are valid; check-config shows them redacted.
    let path = dir.path().join("good-sasl.toml");
    std::fs::write(
        &path,
        with(&format!(
            "{sasl}\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\"sasl.password\" = \"file:{}\"\n",
            secret_file.display()
        )),
    )
    .unwrap();
    let (code, stderr, stdout) = run_binary("check-config", &path);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("\"sasl.password\" = \"<redacted>\""), "{stdout}");
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET), "{stdout}{stderr}");
}

/// Dockerfile instructions as (keyword, arguments): comments dropped, continuation lines joined.
fn dockerfile() -> Vec<(String, String)> {
    let text = std::fs::read_to_string(repo().join("Dockerfile")).unwrap();
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let t = line.trim();
        if current.is_empty() && (t.starts_with('#') || t.is_empty()) {
            continue;
        }
        if let Some(head) = t.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
            continue;
        }
        current.push_str(t);
        let (k, rest) = current.split_once(char::is_whitespace).unwrap_or((&current, ""));
        out.push((k.to_ascii_uppercase(), rest.trim().to_string()));
        current.clear();
    }
    out
}

/// The Debian package that holds a shared library, as `dpkg -S` says (trying the path, its
/// `/usr` twin on a merged-/usr system, and the resolved symlink).
fn debian_package_of(path: &str) -> String {
    let resolved = std::fs::canonicalize(path).unwrap().display().to_string();
    for candidate in [path.to_string(), format!("/usr{path}"), resolved] {
        let out = Command::new("dpkg")
            .args(["-S", &candidate])
            .output()
            .expect("dpkg (Debian)");
        if out.status.success() {
            let text = String::from_utf8_lossy(&out.stdout);
            let pkg = text.split(':').next().unwrap().trim().to_string();
            return pkg;
        }
    }
    panic!("no Debian package holds {path}");
}

/// The container image, read: two stages; the runtime stage runs as a non-root user, keeps the
/// store (the path the image configures) in a volume, exposes the HTTP port it configures,
/// installs a package for every shared library the binary links besides libc (from `ldd` and
/// `dpkg -S` on this Debian machine, the image's release), ships a configuration that passes
/// `check-config` with the docker-compose example's environment, and its HEALTHCHECK command,
/// run here with bash against a live kafka-dedup, succeeds (and fails on a closed port).
#[test]
fn container_image_matches_the_binary() {
    let ins = dockerfile();
    let froms: Vec<&String> = ins.iter().filter(|(k, _)| k == "FROM").map(|(_, a)| a).collect();
    assert!(froms.len() >= 2, "multi-stage: {froms:?}");
    assert!(froms[0].contains(" AS build"), "{froms:?}");
    assert!(
        froms.last().unwrap().contains("-slim"),
        "a slim runtime base: {froms:?}"
    );
    let last_from = ins.iter().rposition(|(k, _)| k == "FROM").unwrap();
    let runtime = &ins[last_from..];
    let all = |key: &str| -> Vec<&str> {
        runtime
            .iter()
            .filter(|(k, _)| k == key)
            .map(|(_, a)| a.as_str())
            .collect()
    };
    let one = |key: &str| -> &str {
        let v = all(key);
        assert_eq!(v.len(), 1, "one {key} in the runtime stage: {v:?}");
        v[0]
    };

    let user = one("USER");
    assert!(!user.starts_with("root") && !user.starts_with("0"), "non-root: {user}");
    let env: Vec<(String, String)> = all("ENV")
        .iter()
        .flat_map(|a| a.split_whitespace())
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let env_of = |k: &str| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()).unwrap();
    let store = env_of("KAFKA_DEDUP__STORE__PATH");
    let listen = env_of("KAFKA_DEDUP__HTTP__LISTEN");
    assert!(
        listen.starts_with("0.0.0.0:"),
        "reachable from outside the container: {listen}"
    );
    let port = listen.rsplit(':').next().unwrap().to_string();
    let volume: Vec<String> = serde_json::from_str(one("VOLUME")).unwrap();
    assert_eq!(volume, vec![store.clone()], "the store is the volume");
    assert_eq!(one("EXPOSE"), port);

    // Shared libraries: each one's package is installed in the runtime stage (or is libc's).
    let installed: BTreeSet<String> = all("RUN")
        .iter()
        .filter_map(|r| r.split("apt-get install").nth(1))
        .flat_map(|rest| rest.split("&&").next().unwrap().split_whitespace())
        .filter(|w| !w.starts_with('-'))
        .map(str::to_string)
        .collect();
    let ldd = Command::new("ldd")
        .arg(env!("CARGO_BIN_EXE_kafka-dedup"))
        .output()
        .expect("ldd");
    let ldd = String::from_utf8_lossy(&ldd.stdout).into_owned();
    let mut needed = BTreeSet::new();
    for line in ldd.lines() {
        if let Some((_, rest)) = line.split_once("=> ") {
            let path = rest.split_whitespace().next().unwrap();
            needed.insert(debian_package_of(path));
        }
    }
    assert!(needed.contains("libssl3") && needed.contains("zlib1g"), "{ldd}");
    for pkg in &needed {
        assert!(
            installed.contains(pkg) || ["libc6", "libgcc-s1"].contains(&pkg.as_str()),
            "the binary needs {pkg} (ldd:\n{ldd}), the runtime stage installs {installed:?}"
        );
    }

    // The configuration the image runs with.
    let cmd: Vec<String> = serde_json::from_str(one("CMD")).unwrap();
    let config_in_image = cmd.iter().skip_while(|a| *a != "--config").nth(1).unwrap().clone();
    let copied = all("COPY")
        .into_iter()
        .find(|a| a.ends_with(&config_in_image))
        .expect("the configuration is copied into the image");
    let source = repo().join(copied.split_whitespace().next().unwrap());
    let compose = std::fs::read_to_string(repo().join("deploy/docker-compose.yaml")).unwrap();
    let service = compose
        .split("\n  kafka-dedup:\n")
        .nth(1)
        .expect("a kafka-dedup service");
    let compose_env: Vec<(String, String)> = service
        .lines()
        .take_while(|l| !l.starts_with("  ") || l.starts_with("    ") || l.trim().is_empty())
        .filter_map(|l| l.trim().split_once(": "))
        .filter(|(k, _)| k.starts_with("KAFKA_DEDUP__"))
        .map(|(k, v)| (k.to_string(), v.trim_matches('"').to_string()))
        .collect();
    assert!(
        compose_env.iter().any(|(k, _)| k == "KAFKA_DEDUP__INPUT__TOPIC"),
        "{compose_env:?}"
    );
    let check = |extra: &[(String, String)]| {
        kafka_dedup_command()
            .args(["check-config", "--config"])
            .arg(&source)
            .envs(env.iter().cloned())
            .envs(extra.iter().cloned())
            .output()
            .unwrap()
    };
    let out = check(&compose_env);
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(printed.contains(&format!("path = \"{store}\"")), "{printed}");
    assert!(printed.contains(&format!("listen = \"{listen}\"")), "{printed}");
    let out = check(&[]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "the image needs the topics from its environment"
    );
    let prometheus = std::fs::read_to_string(repo().join("deploy/prometheus.yml")).unwrap();
    assert!(prometheus.contains(&format!("kafka-dedup:{port}")), "{prometheus}");

    // The HEALTHCHECK command, with bash, against a live kafka-dedup.
    let healthcheck = one("HEALTHCHECK");
    let probe: Vec<String> = serde_json::from_str(healthcheck.split_once("CMD ").unwrap().1).unwrap();
    assert!(probe.join(" ").contains("/healthz"), "{probe:?}");
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("ops-img-in"), unique("ops-img-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let mut filter = FilterSpec::new(&input, &output, dir.path()).start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    let run_probe = |listen: &str| {
        Command::new(&probe[0])
            .args(&probe[1..])
            .env("KAFKA_DEDUP__HTTP__LISTEN", listen)
            .status()
            .unwrap()
    };
    assert!(
        run_probe(&filter.http).success(),
        "the HEALTHCHECK fails against a live kafka-dedup"
    );
    assert!(
        !run_probe(&format!("127.0.0.1:{}", free_port())).success(),
        "nothing listens there"
    );
    assert!(filter.terminate().success(), "{}", filter.logs());
}

/// The Kubernetes example's configuration is valid (with its secret files in place) and shows
/// the password redacted; its probes use the real endpoints.
#[test]
fn kubernetes_example_configuration_is_valid() {
    let manifest = std::fs::read_to_string(repo().join("deploy/kubernetes/sidecar.yaml")).unwrap();
    let toml: String = manifest
        .split("kafka-dedup.toml: |\n")
        .nth(1)
        .expect("the ConfigMap's file")
        .lines()
        .take_while(|l| l.starts_with("    ") || l.trim().is_empty())
        .map(|l| format!("{}\n", l.strip_prefix("    ").unwrap_or("")))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("sasl-password"), format!("{SECRET}\n")).unwrap();
    // A CA file librdkafka can parse: check-config creates the clients, which load it.
    std::fs::copy("/etc/ssl/certs/ca-certificates.crt", dir.path().join("ca.crt"))
        .expect("the system's CA bundle (Debian's ca-certificates)");
    let path = dir.path().join("kafka-dedup.toml");
    std::fs::write(
        &path,
        toml.replace("/etc/kafka-dedup/secrets", &dir.path().display().to_string()),
    )
    .unwrap();
    let (code, stderr, stdout) = run_binary("check-config", &path);
    assert_eq!(code, Some(0), "{stderr}\n{toml}");
    assert!(stdout.contains("\"sasl.password\" = \"<redacted>\""), "{stdout}");
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET));
    for probe in ["path: /readyz", "path: /healthz", "path: /metrics"] {
        assert!(manifest.contains(probe), "{probe}");
    }
}

/// The lines librdkafka's clients had kafka-dedup log at WARN or ERROR: its own client-error
/// lines and librdkafka's log lines, whichever client they come from (the filter's consumer and
/// producers, the topics watcher, an admin client).
fn client_lines(logs: &str) -> Vec<&str> {
    logs.lines()
        .filter(|l| l.contains(" WARN ") || l.contains(" ERROR "))
        .filter(|l| {
            l.contains("librdkafka")
                || l.contains("kafka producer error")
                || l.contains("kafka client error")
                || l.contains("kafka reader error")
        })
        .collect()
}

/// A new user stopped kafka-dedup with the broker going away: 152 `ERROR rdkafka::client:
/// librdkafka: Global error: AllBrokersDown` lines within 8 ms from the topics watcher (a
/// client on rust-rdkafka's default context: every error at ERROR, unbounded), and librdkafka's
/// `FAIL ... Connection refused` lines every second from every client. Every client's errors
/// and librdkafka's lines are logged at most once per kind and client every 30 s
/// (`kafka::logs`). On a broker of the test's own: SIGTERM while the group coordinator does not
/// answer the commit (its connection held by the proxy), then the broker goes (the proxy closes
/// every connection and refuses new ones). The stop ends within its bound
/// (`output.handover_timeout`, the commit included, then the 30 s close: it waited for ever in
/// librdkafka's synchronous commit before `kafka::commit_within`) and exits 0 (nothing could be
/// committed: the next start resumes from the output), with a bounded number of client lines,
/// none of them from rust-rdkafka's default context.
#[test]
fn stopping_with_the_broker_gone_logs_client_errors_at_a_bounded_rate() {
    let own = common::proxy::ProxiedBroker::start();
    let kafka = own.broker();
    let dir = tempfile::tempdir().unwrap();
    kafka.create_topic("in", 3);
    kafka.create_topic("out", 3);
    let mut spec = FilterSpec::on(kafka.clone(), "in", "out", dir.path());
    spec.session_timeout_ms = Some(6000);
    // The stop's bound: 10 s for the hand-over (its commit included), then the 30 s close.
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__HANDOVER_TIMEOUT".to_string(), "10s".to_string()));
    let mut filter = spec.start(dir.path());
    kafka.produce_raw("in", 0, &numbered(0..100));
    filter.wait_metric(RECORDS_FORWARDED, &[], 100.0, Duration::from_secs(60));
    own.proxy.hold_from_api(8); // OffsetCommit: the stop waits for its commit
    filter.signal(libc::SIGTERM);
    std::thread::sleep(Duration::from_secs(3));
    own.proxy.shut();
    // Before `kafka::commit_within`, the stop waited in librdkafka's synchronous commit for as
    // long as this test watched (120 s).
    let status = filter.wait_exit(Duration::from_secs(90));
    let logs = filter.logs();
    assert!(status.success(), "{logs}");
    assert!(logs.contains("kafka-dedup stopped"), "{logs}");
    let lines = client_lines(&logs);
    let default_context: Vec<&&str> = lines.iter().filter(|l| l.contains("rdkafka::client")).collect();
    assert!(default_context.is_empty(), "{default_context:#?}");
    assert!(
        lines.len() <= 30,
        "{} client lines in the stop with the broker gone:\n{}",
        lines.len(),
        lines.join("\n")
    );
}

//! Issue 16, items 1 to 3: the metrics, the dashboard and the alerting rules against the real
//! components an operator runs. `promtool` checks and unit-tests the rules
//! (`deploy/prometheus/`); a real Prometheus (Debian's `prometheus` package, installed by
//! `scripts/test.sh`, its own temporary directory and port) scrapes a live kafka-dedup during a
//! scenario with replays and evaluates every dashboard query and every alert expression through
//! its HTTP API; a live kafka-dedup exports every counter from its first scrape and drops a
//! partition's series when the partition moves to another member.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use kafka_dedup::telemetry::{
    CHECKPOINTS, CHECKPOINT_RESULTS, COUNTERS, DUPLICATES_DROPPED, INPUT_RETAKEN, INPUT_REWOUND, OUTPUT_REFUSED,
    OUTPUT_REFUSED_ACTIONS, OUT_OF_SCOPE, OUT_OF_SCOPE_REASONS, POSITIONS_FROM_OUTPUT, POSITION_FROM_OUTPUT_REASONS,
    RECORDS_CONSUMED, RECORDS_FORWARDED, RECOVERY_PANICS, RECOVERY_SCANNED, REGISTRY_UNAVAILABLE, SIDES, SIDE_REFUSED,
    SKIPPED, STORE_REBUILDS, STORE_REBUILD_REASONS, STORE_WRITE_FAILURES, UNFINGERPRINTABLE, UNFINGERPRINTABLE_REASONS,
};
use serde_json::Value;

/// The repository root.
fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The alerting rules and their promtool unit tests.
const RULES: &str = "deploy/prometheus/kafka-dedup.rules.yml";
const RULE_TESTS: &str = "deploy/prometheus/kafka-dedup.rules.test.yml";

/// Runs a tool of Debian's `prometheus` package; panics with its output unless it succeeds.
fn run_tool(tool: &str, args: &[&str]) -> String {
    let out = Command::new(tool)
        .args(args)
        .current_dir(repo())
        .output()
        .unwrap_or_else(|e| panic!("{tool}: {e}; scripts/test.sh installs it (Debian package `prometheus`)"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{tool} {args:?} failed:\n{text}");
    text
}

/// The alert names of the rules file (`- alert: NAME` lines).
fn alert_names() -> Vec<String> {
    std::fs::read_to_string(repo().join(RULES))
        .unwrap()
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
        .map(|n| n.trim().to_string())
        .collect()
}

/// The rules are valid, their promtool unit tests pass, every alert has a test case where it
/// fires and one where it stays silent, the Prometheus configurations of `deploy/` load them
/// (and the compose file mounts them where those configurations look), and the README explains
/// each one.
#[test]
fn alert_rules_pass_promtool_and_are_wired_and_documented() {
    let checked = run_tool("promtool", &["check", "rules", RULES]);
    let names = alert_names();
    assert!(
        checked.contains(&format!("SUCCESS: {} rules found", names.len())),
        "{checked}"
    );
    run_tool("promtool", &["test", "rules", RULE_TESTS]);

    // Each alert: a case where it fires (a non-empty exp_alerts) and one where it does not.
    let tests = std::fs::read_to_string(repo().join(RULE_TESTS)).unwrap();
    let lines: Vec<&str> = tests.lines().map(str::trim).collect();
    let mut cases: BTreeMap<&str, (u32, u32)> = BTreeMap::new();
    for (i, l) in lines.iter().enumerate() {
        if let Some(name) = l.strip_prefix("alertname: ") {
            let entry = cases.entry(name).or_default();
            match lines.get(i + 1) {
                Some(&"exp_alerts: []") => entry.1 += 1,
                Some(&"exp_alerts:") => entry.0 += 1,
                other => panic!("alertname {name} followed by {other:?}"),
            }
        }
    }
    for name in &names {
        let (firing, silent) = cases.get(name.as_str()).copied().unwrap_or_default();
        assert!(
            firing > 0 && silent > 0,
            "{name}: {firing} firing and {silent} silent test cases"
        );
    }
    assert_eq!(
        cases.keys().map(|k| k.to_string()).collect::<BTreeSet<_>>(),
        names.iter().cloned().collect::<BTreeSet<_>>(),
        "test cases for alerts that do not exist"
    );

    // Wired into the example deployment: the configurations name the rules file relative to
    // themselves (promtool resolves and checks it), the compose file mounts it there.
    for config in ["deploy/prometheus.yml", "deploy/prometheus-replicas.yml"] {
        let out = run_tool("promtool", &["check", "config", config]);
        assert!(
            out.contains("kafka-dedup.rules.yml"),
            "{config} loads the rules:\n{out}"
        );
    }
    let compose = std::fs::read_to_string(repo().join("deploy/docker-compose.yaml")).unwrap();
    assert!(
        compose.contains("- ./prometheus:/etc/prometheus/prometheus:ro"),
        "the compose file mounts deploy/prometheus/ beside prometheus.yml"
    );

    let readme = std::fs::read_to_string(repo().join("docs/operating.md")).unwrap();
    let alerts = readme
        .split("### Alerts")
        .nth(1)
        .expect("docs/operating.md has an Alerts section")
        .split("\n## ")
        .next()
        .unwrap();
    for name in &names {
        assert!(
            alerts.contains(name.as_str()),
            "docs/operating.md, Alerts: {name} is not explained"
        );
    }
}

/// Replaces each comparison at the top level of a PromQL expression (`>`, `<`, `>=`, `<=`,
/// `==`, `!=`, outside label matchers and strings) by its `bool` form: the filter becomes a
/// value of 0 or 1 per series, so an alert expression returns a series even while it does not
/// fire, which shows that its metric names and labels match what is exported.
fn with_bool_comparisons(expr: &str) -> String {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = String::new();
    let (mut braces, mut quote) = (0, None::<char>);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if let Some(q) = quote {
            out.push(c);
            if c == '\\' {
                if let Some(n) = chars.get(i + 1) {
                    out.push(*n);
                    i += 1;
                }
            } else if c == q {
                quote = None;
            }
            i += 1;
            continue;
        }
        match c {
            '"' | '\'' | '`' => quote = Some(c),
            '{' => braces += 1,
            '}' => braces -= 1,
            _ => {}
        }
        let next = chars.get(i + 1).copied();
        let op_len = match (c, next) {
            _ if braces > 0 => 0,
            ('=', Some('=')) | ('!', Some('=')) | ('>', Some('=')) | ('<', Some('=')) => 2,
            ('>', _) | ('<', _) => 1,
            _ => 0,
        };
        if op_len == 0 {
            out.push(c);
            i += 1;
            continue;
        }
        out.extend(&chars[i..i + op_len]);
        i += op_len;
        let rest: String = chars[i..].iter().collect();
        if !rest.trim_start().starts_with("bool ") {
            out.push_str(" bool");
            if !rest.starts_with(char::is_whitespace) {
                out.push(' ');
            }
        }
    }
    out
}

#[test]
fn bool_comparisons_leave_matchers_and_strings_alone() {
    assert_eq!(
        with_bool_comparisons(r#"a{x!="1",y=~"z>"} > 0 and b >= 2"#),
        r#"a{x!="1",y=~"z>"} > bool 0 and b >= bool 2"#
    );
    assert_eq!(with_bool_comparisons("up == 0"), "up == bool 0");
    assert_eq!(with_bool_comparisons("a > bool 1"), "a > bool 1");
    assert_eq!(with_bool_comparisons("a / b<0.5"), "a / b< bool 0.5");
}

/// URL-encodes a query parameter (RFC 3986 unreserved characters kept).
fn encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A Prometheus server of its own: Debian's binary, a configuration and a TSDB in a temporary
/// directory, a free port. Killed when dropped.
struct Prometheus {
    child: Child,
    /// `127.0.0.1:port` of its HTTP API.
    addr: String,
    log: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (job `kafka-dedup`, the job name the rules use) and
    /// evaluating the repository's rules, both every second; waits until it is ready.
    fn start(dir: &Path, targets: &[&str]) -> Prometheus {
        let config = dir.join("prometheus.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - \"{}\"\n\
                 scrape_configs:\n  - job_name: kafka-dedup\n    static_configs:\n      - targets: [{}]\n",
                repo().join(RULES).display(),
                targets.join(", ")
            ),
        )
        .unwrap();
        let addr = format!("127.0.0.1:{}", free_port());
        let log = dir.join("prometheus.log");
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("tsdb").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("prometheus (Debian package `prometheus`; scripts/test.sh installs it)");
        let mut p = Prometheus { child, addr, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        while !matches!(http_get(&p.addr, "/-/ready"), Some((200, _))) {
            assert!(
                p.child.try_wait().unwrap().is_none(),
                "prometheus exited:\n{}",
                p.logs()
            );
            assert!(Instant::now() < deadline, "prometheus not ready:\n{}", p.logs());
            std::thread::sleep(Duration::from_millis(200));
        }
        p
    }

    fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// GET `path` of the API; the decoded `data` of a successful answer, or the error Prometheus
    /// gives (a syntax error is a 400 with `errorType` `bad_data`).
    fn api(&self, path: &str) -> Result<Value, String> {
        let (code, body) = http_get(&self.addr, path).ok_or_else(|| format!("no answer to {path}"))?;
        let v: Value = serde_json::from_str(&body).map_err(|e| format!("{path}: {e}: {body}"))?;
        if code != 200 || v["status"] != "success" {
            return Err(format!("{path}: {code} {body}"));
        }
        Ok(v["data"].clone())
    }

    /// Evaluates `query` now: the result vector, or the error.
    fn query(&self, query: &str) -> Result<Vec<Value>, String> {
        let data = self.api(&format!("/api/v1/query?query={}", encode(query)))?;
        Ok(data["result"].as_array().cloned().unwrap_or_default())
    }

    /// Waits until `query` returns at least one series; fails at once on an error (a syntax
    /// error, an unknown function), and with the last answer after `timeout`.
    fn wait_series(&self, what: &str, query: &str, timeout: Duration) -> Vec<Value> {
        let deadline = Instant::now() + timeout;
        loop {
            let result = self
                .query(query)
                .unwrap_or_else(|e| panic!("{what}: `{query}` is refused: {e}"));
            if !result.is_empty() {
                return result;
            }
            assert!(
                Instant::now() < deadline,
                "{what}: `{query}` returned no series after {timeout:?}"
            );
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Values `i` as records with key `k<i>`: a distinct event each.
fn numbered(range: std::ops::Range<u32>) -> Vec<Raw> {
    range
        .map(|i| raw(Some(&format!("k{i}")), Some(&i.to_string()), &[]))
        .collect()
}

/// Every `expr` of the dashboard's panels (rows included), with the panel title.
fn dashboard_exprs() -> Vec<(String, String)> {
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push((p["title"].as_str().unwrap_or("").to_string(), e.to_string()));
                }
            }
            walk(&p["panels"], out);
        }
    }
    let text = std::fs::read_to_string(repo().join("dashboards/kafka-dedup.json")).unwrap();
    let d: Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    walk(&d["panels"], &mut out);
    out
}

/// Grafana's variables in a dashboard query, as Grafana would expand them for this test:
/// `$instance` the scraped kafka-dedup, `$__rate_interval` four scrape intervals of the
/// provisioned data source (`timeInterval: 5s`), `$__interval` one, `$__range` the dashboard's
/// default time range (1 h). A variable this does not know fails the test.
fn expand(expr: &str, instance: &str) -> String {
    let out = expr
        .replace("${instance}", instance)
        .replace("$instance", instance)
        .replace("$__rate_interval", "20s")
        .replace("$__interval", "5s")
        .replace("$__range", "1h");
    assert!(
        !out.contains('$'),
        "a dashboard variable this test does not expand: {expr}"
    );
    out
}

/// Item 3: a real Prometheus scrapes kafka-dedup every second during a scenario with replays
/// (a tombstone, null keys), then every dashboard query and every alert expression is evaluated
/// through its HTTP API: none is refused, each returns a series. An alert expression returns
/// series only while it fires, so each is also evaluated with its comparisons in `bool` form
/// ([`with_bool_comparisons`]). Every rule is loaded and evaluates without error, and the
/// out-of-scope alert fires on the first null-key records: their counter was scraped at 0 before
/// them (item 1), so `increase` sees them.
#[test]
fn prometheus_evaluates_every_dashboard_query_and_alert_expression() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("prom-in"), unique("prom-out"));
    kafka().create_topic(&input, 2);
    kafka().create_topic(&output, 2);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env.push((
        "KAFKA_DEDUP__KAFKA__PROPERTIES__STATISTICS_INTERVAL_MS".into(),
        "500".into(),
    ));
    let mut filter = spec.start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(90);
    while filter.owned().len() < 2 {
        assert!(filter.running(), "kafka-dedup exited:\n{}", filter.logs());
        assert!(Instant::now() < deadline, "partitions not assigned:\n{}", filter.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    filter.wait_ready(Duration::from_secs(60));

    let prom = Prometheus::start(dir.path(), &[&filter.http]);
    let instance = filter.http.clone();
    // Scraped at 0 before the first record: the counter the out-of-scope alert watches.
    let zero = format!("{OUT_OF_SCOPE}{{instance=\"{instance}\",reason=\"null_key\"}} == 0");
    let deadline = Instant::now() + Duration::from_secs(30);
    while prom.query(&zero).unwrap().len() < 2 {
        assert!(
            Instant::now() < deadline,
            "null_key counters of both partitions never scraped at 0:\n{}\n{}",
            filter.scrape(),
            prom.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    for p in 0..2 {
        let mut batch = numbered(0..200);
        batch.extend(numbered(150..200)); // replays
        batch.push(raw(Some("gone"), None, &[])); // a tombstone: no fingerprint (source = value)
        batch.extend((0..5).map(|i| raw(None, Some(&format!("null-key-{p}-{i}")), &[])));
        kafka().produce_raw(&input, p, &batch);
    }
    filter.wait_metric(RECORDS_FORWARDED, &[], 2.0 * 206.0, Duration::from_secs(90));
    filter.wait_metric(DUPLICATES_DROPPED, &[], 100.0, Duration::from_secs(30));

    // The instance variable of the dashboard lists this kafka-dedup.
    let values = prom
        .api("/api/v1/label/instance/values?match%5B%5D=kafka_dedup_build_info")
        .unwrap();
    assert!(
        values.as_array().unwrap().iter().any(|v| v == instance.as_str()),
        "{values}"
    );

    let exprs = dashboard_exprs();
    assert!(exprs.len() >= 20, "{exprs:?}");
    for (title, expr) in &exprs {
        prom.wait_series(
            &format!("dashboard panel {title:?}"),
            &expand(expr, &instance),
            Duration::from_secs(60),
        );
    }

    // The rules as Prometheus loaded them: all of the file, each evaluated without error.
    let names: BTreeSet<String> = alert_names().into_iter().collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    let rules = loop {
        let data = prom.api("/api/v1/rules").unwrap();
        let rules: Vec<Value> = data["groups"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|g| g["rules"].as_array().unwrap().clone())
            .collect();
        let healthy = rules.iter().all(|r| r["health"] == "ok");
        if healthy && rules.len() == names.len() {
            break rules;
        }
        assert!(
            Instant::now() < deadline,
            "rules not all loaded and evaluated without error: {rules:#?}\n{}",
            prom.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    };
    let loaded: BTreeSet<String> = rules.iter().map(|r| r["name"].as_str().unwrap().to_string()).collect();
    assert_eq!(loaded, names);
    for rule in &rules {
        let (name, query) = (rule["name"].as_str().unwrap(), rule["query"].as_str().unwrap());
        prom.query(query)
            .unwrap_or_else(|e| panic!("alert {name}: `{query}` is refused: {e}"));
        let series = prom.wait_series(
            &format!("alert {name}"),
            &with_bool_comparisons(query),
            Duration::from_secs(60),
        );
        // An alert over a whole group (KafkaDedupPartitionsUnowned) is by job, without instance.
        assert!(
            series.iter().all(|s| s["metric"]["instance"] == instance.as_str()
                || (s["metric"]["instance"].is_null() && s["metric"]["job"] == "kafka-dedup")),
            "alert {name}: series of another instance? {series:?}"
        );
    }

    // The first null-key records fire the out-of-scope alert for this instance.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let alerts = prom.api("/api/v1/alerts").unwrap();
        let fired = alerts["alerts"].as_array().unwrap().iter().any(|a| {
            a["labels"]["alertname"] == "KafkaDedupOutOfScopeRecords"
                && a["labels"]["reason"] == "null_key"
                && a["labels"]["instance"] == instance.as_str()
                && a["state"] == "firing"
        });
        if fired {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "KafkaDedupOutOfScopeRecords did not fire: {alerts:#}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert!(filter.terminate().success(), "{}", filter.logs());
}

/// The samples of `name` in a scrape: the label sets (sorted `k="v"` strings) and values.
fn series_of(scrape: &str, name: &str) -> BTreeMap<BTreeSet<String>, f64> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{') | Some(b' ')))
        .map(|l| {
            let (series, value) = l.rsplit_once(' ').unwrap();
            let labels = series
                .split_once('{')
                .map(|(_, rest)| rest.trim_end_matches('}'))
                .unwrap_or("")
                .split(',')
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect();
            (labels, value.parse().unwrap())
        })
        .collect()
}

/// Every label set of the product of `dims` (`name`, values), as sorted `name="value"` strings.
fn product(dims: &[(&str, Vec<String>)]) -> BTreeSet<BTreeSet<String>> {
    let mut out = vec![BTreeSet::new()];
    for (name, values) in dims {
        out = out
            .iter()
            .flat_map(|l| {
                values.iter().map(move |v| {
                    let mut l = l.clone();
                    l.insert(format!("{name}=\"{v}\""));
                    l
                })
            })
            .collect();
    }
    out.into_iter().collect()
}

fn strings<S: ToString>(values: &[S]) -> Vec<String> {
    values.iter().map(|v| v.to_string()).collect()
}

/// The counter series a member owning `partitions` exports (three generations, `on_missing =
/// "forward"`), by name.
fn expected_counters(partitions: &[i32]) -> BTreeMap<&'static str, BTreeSet<BTreeSet<String>>> {
    let p = ("partition", strings(partitions));
    BTreeMap::from([
        (RECORDS_CONSUMED, product(std::slice::from_ref(&p))),
        (RECORDS_FORWARDED, product(std::slice::from_ref(&p))),
        (RECOVERY_SCANNED, product(std::slice::from_ref(&p))),
        (
            OUTPUT_REFUSED,
            product(&[p.clone(), ("action", strings(&OUTPUT_REFUSED_ACTIONS))]),
        ),
        (SKIPPED, product(std::slice::from_ref(&p))),
        (INPUT_REWOUND, product(std::slice::from_ref(&p))),
        (INPUT_RETAKEN, product(std::slice::from_ref(&p))),
        (REGISTRY_UNAVAILABLE, product(std::slice::from_ref(&p))),
        (
            DUPLICATES_DROPPED,
            product(&[p.clone(), ("generation", strings(&[0, 1, 2]))]),
        ),
        (
            UNFINGERPRINTABLE,
            product(&[
                p.clone(),
                ("action", strings(&["forward"])),
                ("reason", strings(&UNFINGERPRINTABLE_REASONS)),
            ]),
        ),
        (
            OUT_OF_SCOPE,
            product(&[p.clone(), ("reason", strings(&OUT_OF_SCOPE_REASONS))]),
        ),
        (CHECKPOINTS, product(&[("result", strings(&CHECKPOINT_RESULTS))])),
        (STORE_REBUILDS, product(&[("reason", strings(&STORE_REBUILD_REASONS))])),
        (STORE_WRITE_FAILURES, product(&[])),
        (
            kafka_dedup::telemetry::CHANGELOG_FALLBACKS,
            product(&[("reason", strings(&kafka_dedup::changelog::FALLBACK_REASONS))]),
        ),
        (kafka_dedup::telemetry::CHANGELOG_LOADED_BYTES, product(&[])),
        (kafka_dedup::telemetry::CHANGELOG_WRITTEN_BYTES, product(&[])),
        (RECOVERY_PANICS, product(std::slice::from_ref(&p))),
        (SIDE_REFUSED, product(&[p.clone(), ("side", strings(&SIDES))])),
        (
            POSITIONS_FROM_OUTPUT,
            product(&[("reason", strings(&POSITION_FROM_OUTPUT_REASONS))]),
        ),
    ])
}

/// The counters that stay 0 while no record is written (the test below writes none).
const RECORD_COUNTERS: [&str; 13] = [
    INPUT_REWOUND,
    INPUT_RETAKEN,
    RECOVERY_PANICS,
    REGISTRY_UNAVAILABLE,
    SIDE_REFUSED,
    OUTPUT_REFUSED,
    SKIPPED,
    RECORDS_CONSUMED,
    RECORDS_FORWARDED,
    DUPLICATES_DROPPED,
    UNFINGERPRINTABLE,
    OUT_OF_SCOPE,
    RECOVERY_SCANNED,
];

/// Checks a scrape of a member owning `owned` (of partitions 0 and 1): every counter with
/// exactly the label values of its partitions, nothing of the other partition in any metric,
/// the counters `zero` at 0.
fn check_counters(who: &str, scrape: &str, owned: &[i32], zero: &[&str]) {
    let expected = expected_counters(owned);
    assert_eq!(
        expected.keys().copied().collect::<BTreeSet<_>>(),
        COUNTERS.into_iter().collect::<BTreeSet<_>>()
    );
    for (name, label_sets) in &expected {
        let got = series_of(scrape, name);
        assert_eq!(
            &got.keys().cloned().collect::<BTreeSet<_>>(),
            label_sets,
            "{who}: {name}\n{scrape}"
        );
        if zero.contains(name) {
            assert!(got.values().all(|v| *v == 0.0), "{who}: {name} {got:?}");
        }
    }
    for other in [0, 1].iter().filter(|p| !owned.contains(p)) {
        let label = format!("partition=\"{other}\"");
        let stale: Vec<&str> = scrape.lines().filter(|l| l.contains(&label)).collect();
        assert!(stale.is_empty(), "{who} still exports partition {other}: {stale:#?}");
    }
}

/// Item 1 on the real binary: the first scrape after the partitions run holds every counter at
/// 0 with all its label values; when a second member joins and takes one partition over, each
/// member's scrape holds the series of its own partition only.
#[test]
fn every_counter_is_in_the_first_scrape_and_a_partition_takes_its_series_along() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("prom-first-in"), unique("prom-first-out"));
    kafka().create_topic(&input, 2);
    kafka().create_topic(&output, 2);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env
        .push(("KAFKA_DEDUP__CHECKPOINT__GENERATIONS".into(), "3".into()));
    // The eager assignor: the join below moves one partition in one rebalance.
    spec.env.push((
        "KAFKA_DEDUP__KAFKA__PROPERTIES__PARTITION_ASSIGNMENT_STRATEGY".into(),
        "range".into(),
    ));
    let mut a = spec.start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        assert!(a.running(), "kafka-dedup exited:\n{}", a.logs());
        assert!(
            Instant::now() < deadline,
            "not ready with both partitions:\n{}",
            a.logs()
        );
        if let Some((200, body)) = http_get(&a.http, "/readyz") {
            if body.contains("\"0\":\"running\"") && body.contains("\"1\":\"running\"") {
                break;
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    // A new group: no partition was rebuilt either. Checkpoints may have happened.
    let zero: Vec<&str> = RECORD_COUNTERS
        .into_iter()
        .chain([STORE_REBUILDS, STORE_WRITE_FAILURES])
        .collect();
    check_counters("the only member", &a.scrape(), &[0, 1], &zero);

    let mut b_spec = spec.clone();
    b_spec.store = dir.path().join("store-b");
    let mut b = b_spec.start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(120);
    let (owned_a, owned_b) = loop {
        assert!(a.running() && b.running(), "{}\n{}", a.logs(), b.logs());
        let (oa, ob) = (a.owned(), b.owned());
        let ready = |f: &FilterProcess| matches!(http_get(&f.http, "/readyz"), Some((200, _)));
        if oa.len() == 1 && ob.len() == 1 && oa != ob && ready(&a) && ready(&b) {
            break (oa, ob);
        }
        assert!(
            Instant::now() < deadline,
            "partitions not split: a {oa:?}, b {ob:?}\nA:\n{}\nB:\n{}",
            a.logs(),
            b.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    // The member that joined rebuilds its partition (its store has none of it).
    check_counters(
        "the first member after the join",
        &a.scrape(),
        &owned_a,
        &RECORD_COUNTERS,
    );
    check_counters("the member that joined", &b.scrape(), &owned_b, &RECORD_COUNTERS);
    assert!(b.terminate().success(), "{}", b.logs());
    assert!(a.terminate().success(), "{}", a.logs());
}

//! Issue 21, item 6: TLS and SASL/SCRAM for real, on the SASL_SSL listener of the suite's
//! Apache Kafka (SCRAM-SHA-512, a broker certificate signed by a CA made at set-up:
//! scripts/kafka-broker.sh). The filter, `audit` and `check-config` work over it with the
//! password read from a secret file (docs/security.md, "Security"); a wrong password or an untrusted CA
//! keeps the process up with `/readyz` naming the cause, and a restart after the fix recovers.
//! Topics are created and read by the test over the plaintext listener.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::*;
use kafka_dedup::scenario;
use kafka_dedup::telemetry::READY;

/// A password no log line may show.
const WRONG: &str = "wrong-password-never-shown-5c1d";

/// `spec` reaching the broker over SASL_SSL: bootstrap servers, SCRAM-SHA-512, the password from
/// `secret` (`file:`), the CA from `ca`, set through the environment (`KAFKA_DEDUP__KAFKA__...`)
/// on top of the file `spec` writes. `spec.broker` stays the plaintext listener, for the test's
/// own reads.
fn over_sasl(mut spec: FilterSpec, secret: &Path, ca: &Path) -> FilterSpec {
    let sasl = sasl();
    spec.env.push((
        "KAFKA_DEDUP__KAFKA__BOOTSTRAP_SERVERS".to_string(),
        sasl.bootstrap.clone(),
    ));
    for (k, v) in [
        ("SECURITY_PROTOCOL", "SASL_SSL".to_string()),
        ("SASL_MECHANISM", "SCRAM-SHA-512".to_string()),
        ("SASL_USERNAME", sasl.user.clone()),
        ("SASL_PASSWORD", format!("file:{}", secret.display())),
        ("SSL_CA_LOCATION", ca.display().to_string()),
    ] {
        spec.env.push((format!("KAFKA_DEDUP__KAFKA__PROPERTIES__{k}"), v));
    }
    spec
}

/// Runs `kafka-dedup CMD --config FILE ARGS` with `spec`'s configuration and environment;
/// returns (exit code, stdout, stderr).
fn run_command(spec: &FilterSpec, dir: &Path, cmd: &str, args: &[&str]) -> (Option<i32>, String, String) {
    let config = dir.join(format!("{cmd}.toml"));
    std::fs::write(&config, spec.toml(free_port())).unwrap();
    let out = kafka_dedup_command()
        .arg(cmd)
        .arg("--config")
        .arg(&config)
        .args(args)
        .envs(spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
        .env("RUST_LOG", "info")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A CA certificate (PEM) that did not sign the broker's certificate, made with openssl.
fn untrusted_ca(dir: &Path) -> PathBuf {
    let (key, pem) = (dir.join("other-ca.key"), dir.join("other-ca.pem"));
    let status = Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1"])
        .args(["-subj", "/CN=not the broker's CA", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&pem)
        .stderr(std::process::Stdio::null())
        .status()
        .expect("openssl");
    assert!(status.success(), "openssl made no CA");
    pem
}

/// Waits until `/readyz` answers 503 with a reason containing `cause` while the process stays
/// up; returns the reason.
fn wait_not_ready_because(f: &mut FilterProcess, cause: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        assert!(f.running(), "kafka-dedup exited:\n{}", f.logs());
        assert!(
            Instant::now() < deadline,
            "/readyz never named {cause:?}:\n{}",
            f.logs()
        );
        if let Some((code, body)) = http_get(&f.http, "/readyz") {
            assert_eq!(code, 503, "ready without a usable connection: {body}");
            let r: serde_json::Value = serde_json::from_str(&body).unwrap();
            let reason = r["reason"].as_str().unwrap_or_default().to_string();
            if reason.contains(cause) {
                return reason;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The filter, `check-config` and `audit` over SASL_SSL (SCRAM-SHA-512, the password from a
/// file, the run's CA): the output is exact and the audit agrees.
#[test]
fn the_filter_audit_and_check_config_work_over_sasl_ssl() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("sasl-in"), unique("sasl-out"));
    kafka().create_topic(&input, 2);
    kafka().create_topic(&output, 2);
    let secret = dir.path().join("kafka-password");
    std::fs::write(&secret, format!("{}\n", sasl().password)).unwrap();
    let spec = over_sasl(FilterSpec::new(&input, &output, dir.path()), &secret, &sasl().ca);
    let s = scenario::replay_scenario(2_000, 2, 150, 61);
    kafka().produce_values(&input, &s.records, Duration::ZERO);

    let (code, stdout, stderr) = run_command(&spec, dir.path(), "check-config", &[]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stdout.contains("\"sasl.password\" = \"<redacted>\""), "{stdout}");
    assert!(!stdout.contains(&sasl().password) && !stderr.contains(&sasl().password));

    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    wait_drained(&spec, 2, &[&filter], Duration::from_secs(60), || filter.logs());
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert!(
        !filter.logs().contains(&sasl().password),
        "the password reached the logs"
    );
    let v = scenario::verify(&s.records, &kafka().read_values(&output, 2));
    assert!(v.ok() && v.output_records == 2_000, "{v:?}");

    let (code, stdout, stderr) = run_command(&spec, dir.path(), "audit", &["--json"]);
    assert_eq!(
        code,
        Some(0),
        "the audit over SASL_SSL finds the output clean:\n{stdout}\n{stderr}"
    );
    let report: serde_json::Value = serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"));
    let totals = &report["totals"];
    assert_eq!(report["clean"], true, "{stdout}");
    assert_eq!(
        totals["input_records"],
        s.records.len() as u64,
        "it read the whole input: {stdout}"
    );
    assert_eq!(totals["output_records"], 2_000, "and the whole output: {stdout}");
    assert_eq!(totals["output_with_provenance"], 2_000, "{stdout}");
}

/// A wrong password (from the secret file) and then a CA that did not sign the broker's
/// certificate: each time the process stays up, `/healthz` answers 200 and `/readyz` 503 naming
/// the cause (no crash loop: the same process retries), the secret never reaches the logs; once
/// the file is fixed, a restart recovers and forwards.
#[test]
fn a_wrong_password_or_an_untrusted_ca_keeps_it_up_and_a_restart_after_the_fix_recovers() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("sasl-bad-in"), unique("sasl-bad-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let values: Vec<(i32, u64)> = (0..200).map(|v| (0, v)).collect();
    kafka().produce_values(&input, &values, Duration::ZERO);
    let secret = dir.path().join("kafka-password");
    let ca = dir.path().join("ca.pem");
    std::fs::write(&secret, format!("{WRONG}\n")).unwrap();
    std::fs::copy(sasl().ca, &ca).unwrap();
    let spec = over_sasl(FilterSpec::new(&input, &output, dir.path()), &secret, &ca);

    let mut filter = spec.start(dir.path());
    let pid = filter.pid();
    let reason = wait_not_ready_because(&mut filter, "authentication");
    assert!(reason.contains("SASL"), "the reason says what failed: {reason}");
    assert_eq!(http_get(&filter.http, "/healthz").map(|h| h.0), Some(200));
    assert_eq!(metric(&filter.scrape(), READY, &[]), 0.0);
    // Not a crash loop: the same process retries and stays not ready for the same reason.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !filter.logs().contains("cannot reach the brokers; retrying") {
        assert!(filter.running(), "kafka-dedup exited:\n{}", filter.logs());
        assert!(Instant::now() < deadline, "no retry:\n{}", filter.logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(filter.running() && filter.pid() == pid);
    wait_not_ready_because(&mut filter, "authentication");
    assert!(filter.terminate().success(), "{}", filter.logs());
    // check-config --connect names the refused authentication, not only the request's timeout
    // ("Failed while waiting for controller: Local: Timed out", before).
    let (code, stdout, stderr) = run_command(&spec, dir.path(), "check-config", &["--connect"]);
    assert_eq!(code, Some(1), "{stdout}\n{stderr}");
    assert!(
        format!("{stdout}{stderr}").contains("SASL"),
        "the problem names the SASL authentication:\n{stdout}\n{stderr}"
    );
    let logs = filter.logs();
    assert!(!logs.contains(WRONG), "the secret reached the logs");
    assert!(
        logs.contains("<redacted>"),
        "the start-up line shows the configuration redacted"
    );

    // The secret fixed, an untrusted CA instead.
    std::fs::write(&secret, format!("{}\n", sasl().password)).unwrap();
    std::fs::copy(untrusted_ca(dir.path()), &ca).unwrap();
    let mut filter = spec.start(dir.path());
    let reason = wait_not_ready_because(&mut filter, "TLS");
    assert!(
        reason.to_lowercase().contains("certificate"),
        "the reason says what failed: {reason}"
    );
    assert_eq!(http_get(&filter.http, "/healthz").map(|h| h.0), Some(200));
    assert!(filter.terminate().success(), "{}", filter.logs());

    // Both fixed: a restart recovers.
    std::fs::copy(sasl().ca, &ca).unwrap();
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    wait_drained(&spec, 1, &[&filter], Duration::from_secs(60), || filter.logs());
    assert!(filter.terminate().success(), "{}", filter.logs());
    let v = scenario::verify(&values, &kafka().read_values(&output, 1));
    assert!(v.ok() && v.output_records == 200, "{v:?}");
}

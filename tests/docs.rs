//! The documentation keeps up with the code: every configuration key the code accepts is in the
//! configuration page's reference block (docs/configuration.md), and every key there is one the
//! code accepts; every script under scripts/ says its usage for `--help`.

use std::collections::BTreeSet;

use kafka_dedup::config::Config;

/// `section.key` for every key of every table in `value` (nested tables by dotted path), except
/// under `kafka.properties` (librdkafka's own, open-ended).
fn keys(value: &toml::Value, prefix: &str, out: &mut BTreeSet<String>) {
    if let toml::Value::Table(t) = value {
        for (k, v) in t {
            let path = if prefix.is_empty() {
                k.clone()
            } else {
                format!("{prefix}.{k}")
            };
            if path == "kafka.properties" {
                continue;
            }
            match v {
                toml::Value::Table(_) => keys(v, &path, out),
                _ => {
                    out.insert(path);
                }
            }
        }
    }
}

#[test]
fn every_configuration_key_is_documented_and_every_documented_key_exists() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let minimal = "[input]\ntopic = \"events\"\n[output]\ntopic = \"events.dedup\"\n";
    let cfg = Config::from_toml_str(minimal, Some(Default::default())).expect("a minimal configuration");
    let accepted: toml::Value = toml::from_str(&cfg.to_redacted_toml()).expect("the effective configuration");
    let mut code = BTreeSet::new();
    keys(&accepted, "", &mut code);

    let page = std::fs::read_to_string(root.join("docs/configuration.md")).unwrap();
    let block = page
        .split("```toml\n")
        .nth(1)
        .and_then(|b| b.split("\n```").next())
        .expect("docs/configuration.md opens with a ```toml reference block");
    let documented: toml::Value = toml::from_str(block).expect("the reference block is valid TOML");
    let mut docs = BTreeSet::new();
    keys(&documented, "", &mut docs);

    let undocumented: Vec<_> = code.difference(&docs).collect();
    let unknown: Vec<_> = docs.difference(&code).collect();
    assert!(
        undocumented.is_empty() && unknown.is_empty(),
        "keys the code accepts but docs/configuration.md does not show: {undocumented:?}; \
         keys it shows that the code does not accept: {unknown:?}"
    );
    // Every key the reference block shows is accepted by the parser as written there.
    Config::from_toml_str(block, Some(Default::default())).expect("the reference block loads as a configuration");
}

/// Every script a person runs prints its usage (its header comment) for `--help` and exits 0,
/// before it installs, builds or starts anything: `scripts/bench.sh --help` started a release
/// build, `scripts/flink-replay.sh --help` exited 2 ("unknown option"), `scripts/mutants.sh
/// --help` would have installed cargo-mutants. (scripts/brokers.sh is sourced, not run.)
#[test]
fn every_script_prints_its_usage_for_help_before_doing_anything() {
    use std::process::{Command, Stdio};
    use std::time::Duration;
    use wait_timeout::ChildExt;

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut scripts: Vec<String> = std::fs::read_dir(root.join("scripts"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sh") && n != "brokers.sh" && n != "help.sh")
        .collect();
    scripts.sort();
    assert!(scripts.len() >= 7, "the scripts: {scripts:?}");
    for name in &scripts {
        for flag in ["--help", "-h"] {
            let mut child = Command::new("bash")
                .arg(root.join("scripts").join(name))
                .arg(flag)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap();
            // Printing a comment takes milliseconds; an install or a build takes minutes.
            let Some(status) = child.wait_timeout(Duration::from_secs(20)).unwrap() else {
                let _ = child.kill();
                panic!("scripts/{name} {flag} still running after 20 s: it does more than print its usage");
            };
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                status.success(),
                "scripts/{name} {flag}: {status}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            assert!(
                stdout.contains(&format!("scripts/{name}")) && !stdout.contains("set -euo"),
                "scripts/{name} {flag} prints its header, which names it: {stdout}"
            );
        }
    }
}

/// The quick start's broker, `scripts/local-kafka.sh PORT`, stops on Ctrl-C as its usage says
/// (SIGINT to the terminal's foreground group: the script and the broker it started), leaves no
/// process and no listener behind, and says that it stopped (before, it printed nothing: a new
/// user could not tell it from a hang). Needs Apache Kafka's jars (`scripts/test.sh` installs
/// them; the script installs them itself otherwise).
#[test]
fn local_kafka_stops_its_broker_on_ctrl_c_and_says_so() {
    use std::os::unix::process::CommandExt;
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    use wait_timeout::ChildExt;

    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    /// Kills what is left of the group however the test ends (it is not the test's group).
    struct Group(i32);
    impl Drop for Group {
        fn drop(&mut self) {
            unsafe { libc::killpg(self.0, libc::SIGKILL) };
        }
    }

    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("local-kafka.log");
    let out = std::fs::File::create(&log).unwrap();
    let mut child = Command::new("bash")
        .arg(root.join("scripts/local-kafka.sh"))
        .arg(port.to_string())
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .process_group(0) // its own group, as a terminal's foreground job is
        .spawn()
        .unwrap();
    let group = Group(child.id() as i32);
    let read = || std::fs::read_to_string(&log).unwrap_or_default();
    let deadline = Instant::now() + Duration::from_secs(300); // the jars' install, on a fresh machine
    while !read().contains("ready on") {
        assert!(
            Instant::now() < deadline && child.try_wait().unwrap().is_none(),
            "scripts/local-kafka.sh {port} did not get ready:\n{}",
            read()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(), "{}", read());
    // Ctrl-C: SIGINT to the whole foreground group. The script stops the broker (SIGTERM, then
    // SIGKILL after 20 s) before it exits.
    unsafe { libc::killpg(group.0, libc::SIGINT) };
    let status = child.wait_timeout(Duration::from_secs(60)).unwrap();
    let alive = unsafe { libc::killpg(group.0, 0) } == 0;
    assert!(status.is_some(), "still running 60 s after Ctrl-C:\n{}", read());
    assert!(
        !alive,
        "a process of its group (the broker) outlived the script:\n{}",
        read()
    );
    assert!(
        read().contains("Apache Kafka stopped") && !read().contains("ended by itself"),
        "{}",
        read()
    );
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
        "port {port} still answers"
    );
}

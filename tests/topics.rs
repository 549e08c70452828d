//! Issue 23 item 4: topics deleted and created again while kafka-dedup runs. With two instances
//! in the group, each topic kind (input, output, a side topic, the global scope's route topic) is
//! deleted and recreated under them: both must say so (`/readyz` 503 naming the topic), not go on
//! silently (a recreated input was read from the old topic's offsets: its first records skipped)
//! nor die without a word (librdkafka 2.12.1 crashed in its metadata cache on tansu).

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::*;

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";

/// Which topic a test deletes and creates again.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Input,
    Output,
    Duplicates,
    Route,
}

/// Two instances on 2-partition topics; 200 records (100 values, each twice, so the duplicates
/// topic has copies too), then `kind`'s topic deleted and created again, and 40 records (20
/// values twice) more: every partition of the new topic ends below the old one's end.
fn deleted_and_recreated(kind: Kind, dir: &Path) {
    let name = format!("{kind:?}").to_lowercase();
    let [input, output, side, route] = ["in", "out", "dups", "route"].map(|t| unique(&format!("recreated-{name}-{t}")));
    let k = kafka();
    for t in [&input, &output, &side, &route] {
        k.create_topic(t, 2);
    }
    let mut spec = FilterSpec::new(&input, &output, dir);
    spec.env
        .push(("KAFKA_DEDUP__OUTPUT__DUPLICATES_TOPIC".into(), side.clone()));
    if matches!(kind, Kind::Route) {
        spec.fingerprint =
            format!("[fingerprint]\nsource = \"value\"\nscope = \"global\"\nroute_topic = \"{route}\"\n");
    }
    let mut spec_b = spec.clone();
    spec_b.store = dir.join("store-b");
    let mut filters = [spec.start(dir), spec_b.start(dir)];
    for f in &mut filters {
        f.wait_ready(Duration::from_secs(60));
    }
    let records: Vec<(i32, u64)> = (0..200).map(|v| ((v % 2) as i32, v % 100)).collect();
    k.produce_values(&input, &records, Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(60);
    while filters.iter().map(|f| metric(&f.scrape(), FORWARDED, &[])).sum::<f64>() < 100.0 {
        assert!(Instant::now() < deadline, "not forwarded:\n{}", filters[0].logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let topic = match kind {
        Kind::Input => &input,
        Kind::Output => &output,
        Kind::Duplicates => &side,
        Kind::Route => &route,
    };
    // Every copy acknowledged, and the watcher's next look has seen the ends (it looks every 5 s).
    std::thread::sleep(Duration::from_secs(6));
    k.delete_topic(topic);
    k.create_topic(topic, 2);
    let more: Vec<(i32, u64)> = (0..40).map(|v| ((v % 2) as i32, 1000 + v % 20)).collect();
    k.produce_values(&input, &more, Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(30);
    for f in &mut filters {
        loop {
            assert!(f.running(), "kafka-dedup exited:\n{}", f.logs());
            let answer = http_get(&f.http, "/readyz");
            if let Some((503, body)) = &answer {
                if body.contains(&format!("topic \\\"{topic}\\\"")) {
                    assert!(body.contains("created again") || body.contains("deleted"), "{body}");
                    break;
                }
            }
            assert!(
                Instant::now() < deadline,
                "/readyz does not name the recreated topic {topic}: {answer:?}\n{}",
                f.logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
        assert!(f.logs().contains(&format!("topic \"{topic}\"")), "{}", f.logs());
    }
}

#[test]
fn an_input_topic_deleted_and_recreated_is_named() {
    deleted_and_recreated(Kind::Input, tempfile::tempdir().unwrap().path());
}

#[test]
fn an_output_topic_deleted_and_recreated_is_named() {
    deleted_and_recreated(Kind::Output, tempfile::tempdir().unwrap().path());
}

#[test]
fn a_side_topic_deleted_and_recreated_is_named() {
    deleted_and_recreated(Kind::Duplicates, tempfile::tempdir().unwrap().path());
}

#[test]
fn a_route_topic_deleted_and_recreated_is_named() {
    deleted_and_recreated(Kind::Route, tempfile::tempdir().unwrap().path());
}

/// Runs `kafka-dedup check-config --connect` on `toml`; (exit code, stderr).
fn check_connect(dir: &Path, toml: &str) -> (Option<i32>, String) {
    let path = dir.join("check.toml");
    std::fs::write(&path, toml).unwrap();
    let out = kafka_dedup_command()
        .args(["check-config", "--connect", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A configuration for `broker` naming `input`, `output` and `extra` TOML in `[output]`.
fn connect_toml(broker: &str, input: &str, output: &str, extra: &str) -> String {
    format!(
        "[kafka]\nbootstrap_servers = \"{broker}\"\n[input]\ntopic = \"{input}\"\ngroup_id = \"{}\"\n[output]\ntopic = \"{output}\"\n{extra}",
        unique("check-group")
    )
}

/// Issue 23 item 8: `check-config --connect` on topics that fit: exit 0, each check said.
#[test]
fn check_config_connect_passes_on_topics_that_fit() {
    let dir = tempfile::tempdir().unwrap();
    let [input, output, dups] = ["in", "out", "dups"].map(|t| unique(&format!("check-{t}")));
    for t in [&input, &output, &dups] {
        kafka().create_topic(t, 3);
    }
    let extra = format!("duplicates_topic = \"{dups}\"\n");
    let (code, err) = check_connect(dir.path(), &connect_toml(&kafka().bootstrap, &input, &output, &extra));
    assert_eq!(code, Some(0), "{err}");
    for t in [&input, &output, &dups] {
        assert!(
            err.contains(&format!("ok: topic \"{t}\"")) && err.contains("3 partitions"),
            "{err}"
        );
    }
    assert!(err.contains("committed offsets fetched (0 of 3 partitions"), "{err}");
    assert!(!err.contains("problem:"), "{err}");
    // The verdict last, after the effective configuration (stdout) and every check.
    let last = err.lines().last().unwrap_or_default();
    assert!(
        last.starts_with("kafka-dedup: no problem found (") && last.contains(" checks passed"),
        "{err}"
    );
    assert!(!err.contains("not checked"), "READ and WRITE checked: {err}");
    // The permissions are said too (a broker without an authorizer grants every operation, and
    // check-config said nothing about them).
    for (t, key, may) in [
        (&input, "input.topic", "read"),
        (&output, "output.topic", "read and write to"),
        (&dups, "output.duplicates_topic", "write to"),
    ] {
        assert!(
            err.contains(&format!("ok: topic \"{t}\" ({key}): the principal may {may} it")),
            "{key}: {err}"
        );
    }
}

/// Each problem named at once, exit 1: an output with fewer partitions than the input under
/// `preserve`, a side topic that does not exist; a broker that does not answer; a configuration
/// error is still exit 2, before anything connects.
#[test]
fn check_config_connect_names_each_problem() {
    let dir = tempfile::tempdir().unwrap();
    let [input, output, dups] = ["in", "out", "dups"].map(|t| unique(&format!("check-bad-{t}")));
    kafka().create_topic(&input, 3);
    kafka().create_topic(&output, 2);
    let extra = format!("duplicates_topic = \"{dups}\"\n");
    let (code, err) = check_connect(dir.path(), &connect_toml(&kafka().bootstrap, &input, &output, &extra));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "problem: output.topic \"{output}\" has 2 partitions, input.topic \"{input}\" 3"
        )),
        "{err}"
    );
    assert!(
        err.contains(&format!(
            "problem: topic \"{dups}\" (output.duplicates_topic) does not exist"
        )),
        "{err}"
    );
    assert!(err.contains("2 problem(s) found"), "{err}");

    let (code, err) = check_connect(dir.path(), &connect_toml("127.0.0.1:1", &input, &output, ""));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("problem: kafka.bootstrap_servers \"127.0.0.1:1\""),
        "{err}"
    );

    let (code, err) = check_connect(
        dir.path(),
        &connect_toml(&kafka().bootstrap, &input, &output, "delivery = \"transactionl\"\n"),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("output.delivery"), "{err}");
}

/// A crash in native code (librdkafka's SIGSEGV of issue 23, simulated by the crash point `segv`
/// on a thread of its own) says so on stderr and ends the process by that signal (exit 139).
#[test]
fn a_fatal_signal_is_not_silent() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("segv-in"), unique("segv-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env.push((kafka_dedup::crash::ENV.into(), "segv".into()));
    let mut f = spec.start(dir.path());
    let status = f.wait_exit(Duration::from_secs(60));
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "{status:?}\n{}", f.logs());
    assert!(f.logs().contains("kafka-dedup: fatal signal SIGSEGV"), "{}", f.logs());
}

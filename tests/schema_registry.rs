//! Issue 27: `avro:/event_id` against a real Schema Registry. Apicurio Registry 2.4.2.Final
//! (Confluent-compatible API under `/apis/ccompat/v7`, built from Maven Central by
//! `scripts/schema-registry.sh`), records written by the Python confluent-kafka client's
//! `AvroSerializer` (`tests/fixtures/avro_records.py`) under three versions of one subject, and
//! the registry stopped mid-stream: the partition halts (nothing forwarded unfingerprinted,
//! `/readyz` says why) and runs on once the registry is back.
//!
//! The same for `protobuf:/event_id` (the registry's ccompat API takes PROTOBUF schemas; the
//! Python client registers them as base64 `FileDescriptorProto`s), records written by its
//! `ProtobufSerializer` (`tests/fixtures/protobuf_records.py`) under three versions, one of
//! which puts the event in a nested message, and `protobuf-key:/id` reading a Protobuf key. The
//! registry stopped mid-stream is the Avro test's (the client and the halt are one for both).
//!
//! Needs Java 17, Maven and `confluent-kafka[avro,schemaregistry,protobuf]` with `protobuf`
//! from PyPI; `scripts/test.sh` provides them.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::*;

/// A registry process of `scripts/schema-registry.sh` (killed on drop).
struct Registry {
    child: Child,
}

impl Registry {
    /// Starts it on `port` with its database in `data`, and waits until its API answers.
    fn start(port: u16, data: &std::path::Path, log: &std::path::Path) -> Registry {
        let child = Command::new("scripts/schema-registry.sh")
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .arg(port.to_string())
            .arg(data)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .expect("scripts/schema-registry.sh");
        let mut r = Registry { child };
        let deadline = Instant::now() + Duration::from_secs(300);
        let addr = format!("127.0.0.1:{port}");
        while http_get(&addr, "/apis/ccompat/v7/subjects").is_none_or(|(code, _)| code != 200) {
            assert!(
                r.child.try_wait().unwrap().is_none(),
                "the registry exited:\n{}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
            assert!(Instant::now() < deadline, "the registry did not start in 300 s");
            std::thread::sleep(Duration::from_millis(300));
        }
        r
    }

    /// Stops it (the script `exec`s the JVM, so the child is the registry itself).
    fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

/// One serialized record of the fixture.
struct Written {
    batch: String,
    event_id: String,
    value: Vec<u8>,
    /// The serialized key, when the fixture writes one.
    key: Option<Vec<u8>>,
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// The records of `tests/fixtures/avro_records.py`, serialized with the registry at `url`.
fn serialize(url: &str, topic: &str) -> Vec<Written> {
    serialize_with("tests/fixtures/avro_records.py", url, topic)
}

/// The records the fixture `script` writes with the registry at `url`.
fn serialize_with(script: &str, url: &str, topic: &str) -> Vec<Written> {
    let out = Command::new("python3")
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args([script, url, topic])
        .output()
        .expect("python3");
    assert!(
        out.status.success(),
        "{script} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Written {
                batch: v["batch"].as_str().unwrap().to_string(),
                event_id: v["event_id"].as_str().unwrap().to_string(),
                value: hex(v["value"].as_str().unwrap()),
                key: v["key"].as_str().map(hex),
            }
        })
        .collect()
}

fn value(bytes: &[u8]) -> Raw {
    Raw {
        value: Some(bytes.to_vec()),
        ..Raw::default()
    }
}

/// Waits until `output` holds `n` records; returns their values.
fn wait_output(broker: &Broker, output: &str, n: usize, filter: &mut FilterProcess) -> Vec<Vec<u8>> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let got: Vec<Vec<u8>> = broker.read_records(output, 1)[&0]
            .iter()
            .map(|r| r.value.clone().unwrap_or_default())
            .collect();
        if got.len() >= n {
            return got;
        }
        assert!(filter.running(), "kafka-dedup exited:\n{}", filter.logs());
        assert!(
            Instant::now() < deadline,
            "{} of {n} records in {output} after 90 s:\n{}",
            got.len(),
            filter.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn avro_records_of_three_schema_versions_collapse_and_a_stopped_registry_halts_the_partition() {
    let broker = kafka();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/apis/ccompat/v7");
    let mut registry = Registry::start(port, &dir.path().join("registry"), &dir.path().join("registry-1.log"));

    let (input, output) = (unique("avro-in"), unique("avro-out"));
    broker.create_topic(&input, 1);
    broker.create_topic(&output, 1);
    let written = serialize(&url, &input);
    let batch = |name: &str| -> Vec<&Written> { written.iter().filter(|w| w.batch == name).collect() };
    let (v1, v2, v3) = (batch("v1"), batch("v2"), batch("v3"));
    assert_eq!((v1.len(), v2.len(), v3.len()), (10, 15, 3));
    let ids: std::collections::BTreeSet<[u8; 5]> = written.iter().map(|w| w.value[..5].try_into().unwrap()).collect();
    assert_eq!(ids.len(), 3, "three schema ids in the wire format: {ids:?}");

    // v1 (e-0..e-9), a value without the wire format, then v2 (e-0..e-9 again, e-10..e-14).
    let not_wire = br#"{"event_id":"e-0"}"#.to_vec();
    let mut first: Vec<Raw> = v1.iter().map(|w| value(&w.value)).collect();
    first.push(value(&not_wire));
    first.extend(v2.iter().map(|w| value(&w.value)));
    broker.produce_raw(&input, 0, &first);

    let mut spec = FilterSpec::new(&input, &output, dir.path());
    // A horizon longer than the registry's downtime, so v3's e-5 is still a replay of v1's.
    spec.interval = "1m";
    spec.fingerprint = format!(
        "[fingerprint]\nsource = \"avro:/event_id\"\n[fingerprint.schema_registry]\nurl = \"{url}\"\ntimeout = \"2s\"\n"
    );
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    let mut expected: Vec<Vec<u8>> = v1.iter().map(|w| w.value.clone()).collect();
    expected.push(not_wire.clone());
    expected.extend(v2[10..].iter().map(|w| w.value.clone()));
    assert_eq!(expected.len(), 16);
    let got = wait_output(&broker, &output, expected.len(), &mut filter);
    assert_eq!(
        got, expected,
        "one record per event_id across v1 and v2, the non-Avro value forwarded"
    );
    filter.wait_metric(
        "kafka_dedup_unfingerprintable_records_total",
        &["reason=\"no_magic_byte\""],
        1.0,
        Duration::from_secs(10),
    );
    filter.wait_metric(
        "kafka_dedup_duplicates_dropped_total",
        &["partition=\"0\""],
        10.0,
        Duration::from_secs(10),
    );

    // The registry stops; v3's schema was never fetched by kafka-dedup.
    registry.stop();
    broker.produce_raw(&input, 0, &v3.iter().map(|w| value(&w.value)).collect::<Vec<_>>());
    filter.wait_metric(
        "kafka_dedup_schema_registry_unavailable_total",
        &["partition=\"0\""],
        1.0,
        Duration::from_secs(30),
    );
    let (code, body) = http_get(&filter.http, "/readyz").unwrap();
    assert_ne!(code, 200, "{body}");
    assert!(body.contains("schema_registry"), "/readyz names the cause: {body}");
    std::thread::sleep(Duration::from_secs(3));
    let during = broker.read_records(&output, 1)[&0].len();
    assert_eq!(during, expected.len(), "nothing forwarded while the registry is away");

    // Back, with its schemas: the waiting records are fingerprinted, e-5 is a replay.
    let _registry = Registry::start(port, &dir.path().join("registry"), &dir.path().join("registry-2.log"));
    expected.extend(v3.iter().filter(|w| w.event_id != "e-5").map(|w| w.value.clone()));
    let got = wait_output(&broker, &output, expected.len(), &mut filter);
    assert_eq!(got, expected);
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(&filter.http, "/readyz").is_none_or(|(code, _)| code != 200) {
        assert!(Instant::now() < deadline, "not ready again:\n{}", filter.logs());
        std::thread::sleep(Duration::from_millis(300));
    }
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(
        broker.read_records(&output, 1)[&0].len(),
        expected.len(),
        "e-5 of v3 dropped"
    );
    assert_eq!(filter.terminate().code(), Some(0), "{}", filter.logs());
}

#[test]
fn protobuf_records_of_three_schema_versions_collapse_by_value_and_by_key() {
    let broker = kafka();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/apis/ccompat/v7");
    let _registry = Registry::start(port, &dir.path().join("registry"), &dir.path().join("registry.log"));

    let (input, output) = (unique("proto-in"), unique("proto-out"));
    broker.create_topic(&input, 1);
    broker.create_topic(&output, 1);
    let written = serialize_with("tests/fixtures/protobuf_records.py", &url, &input);
    let batch = |name: &str| -> Vec<&Written> { written.iter().filter(|w| w.batch == name).collect() };
    let (v1, v2, v3) = (batch("v1"), batch("v2"), batch("v3"));
    assert_eq!((v1.len(), v2.len(), v3.len()), (10, 15, 3));
    let ids: std::collections::BTreeSet<[u8; 5]> = written.iter().map(|w| w.value[..5].try_into().unwrap()).collect();
    assert_eq!(ids.len(), 3, "three schema ids in the wire format: {ids:?}");
    // The message indexes: [0] as a single 0, [1] as count 1 and index 1, [0, 0] as count 2.
    assert_eq!(v1[0].value[5], 0);
    assert_eq!(&v2[0].value[5..7], &[2, 2]);
    assert_eq!(&v3[0].value[5..8], &[4, 0, 0]);

    // v1 (e-0..e-9); a value without the wire format; an id the registry lacks; a known id with
    // a payload that does not decode (field 1 as a length of 9 with 1 byte); then v2 (e-0..e-9
    // again, e-10..e-14) and v3 (e-5 again, e-20, e-21).
    let not_wire = br#"{"event_id":"e-0"}"#.to_vec();
    let unknown_id = vec![0, 0x7f, 0xff, 0xff, 0xff, 0, 0x0a, 1, b'e'];
    let mut undecodable = v1[0].value[..6].to_vec();
    undecodable.extend([0x0a, 9, b'e']);
    let mut first: Vec<Raw> = v1.iter().map(|w| value(&w.value)).collect();
    first.extend([value(&not_wire), value(&unknown_id), value(&undecodable)]);
    first.extend(v2.iter().chain(&v3).map(|w| value(&w.value)));
    broker.produce_raw(&input, 0, &first);

    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.interval = "1m";
    spec.fingerprint = format!(
        "[fingerprint]\nsource = \"protobuf:/event_id\"\n[fingerprint.schema_registry]\nurl = \"{url}\"\ntimeout = \"2s\"\n"
    );
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    let mut expected: Vec<Vec<u8>> = v1.iter().map(|w| w.value.clone()).collect();
    expected.extend([not_wire, unknown_id, undecodable]);
    expected.extend(v2[10..].iter().map(|w| w.value.clone()));
    expected.extend(v3.iter().filter(|w| w.event_id != "e-5").map(|w| w.value.clone()));
    assert_eq!(expected.len(), 20);
    let got = wait_output(&broker, &output, expected.len(), &mut filter);
    assert_eq!(
        got, expected,
        "one record per event_id across v1, v2 and v3; the bad ones forwarded"
    );
    for reason in ["no_magic_byte", "unknown_schema_id", "not_protobuf"] {
        filter.wait_metric(
            "kafka_dedup_unfingerprintable_records_total",
            &[&format!("reason=\"{reason}\"")],
            1.0,
            Duration::from_secs(10),
        );
    }
    filter.wait_metric(
        "kafka_dedup_duplicates_dropped_total",
        &["partition=\"0\""],
        11.0,
        Duration::from_secs(10),
    );
    // `/store/lookup` names an event by its field, and its record as JSON.
    let held = |query: &str| {
        let (code, body) = http_get(&filter.http, &format!("/store/lookup?{query}")).unwrap();
        assert_eq!(code, 200, "{query}: {body}");
        serde_json::from_str::<serde_json::Value>(&body).unwrap()["held"] == true
    };
    assert!(held("event_id=e-3"), "e-3 is held");
    assert!(held("event_id=e-21"), "e-21 (v3) is held");
    assert!(
        held("value=%7B%22event_id%22%3A%22e-14%22%2C%22n%22%3A7%7D"),
        "a record as JSON"
    );
    assert!(!held("event_id=e-99"), "e-99 was never seen");
    let (code, body) = http_get(&filter.http, "/store/lookup?evnt_id=e-3").unwrap();
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("event_id"), "names the field it has: {body}");
    assert_eq!(filter.terminate().code(), Some(0), "{}", filter.logs());
    // `inspect lookup --field` reads the store the same way.
    let out = kafka_dedup_command()
        .arg("inspect")
        .arg("--store")
        .arg(&spec.store)
        .args(["--json", "lookup", "--field", "event_id=e-3"])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}{}", String::from_utf8_lossy(&out.stderr));
    let answer: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answer["held"], true, "{stdout}");

    // The key: `protobuf-key:/id` (the key names the event, its values are all one schema).
    let (input, output) = (unique("proto-key-in"), unique("proto-key-out"));
    broker.create_topic(&input, 1);
    broker.create_topic(&output, 1);
    let keyed = |w: &Written| Raw {
        key: w.key.clone(),
        value: Some(w.value.clone()),
        ..Raw::default()
    };
    broker.produce_raw(&input, 0, &v1.iter().chain(&v2).map(|w| keyed(w)).collect::<Vec<_>>());
    let store = dir.path().join("keys");
    std::fs::create_dir_all(&store).unwrap();
    let mut spec = FilterSpec::new(&input, &output, &store);
    spec.interval = "1m";
    spec.fingerprint =
        format!("[fingerprint]\nsource = \"protobuf-key:/id\"\n[fingerprint.schema_registry]\nurl = \"{url}\"\n");
    let mut filter = spec.start(&store);
    filter.wait_ready(Duration::from_secs(60));
    let expected: Vec<Vec<u8>> = v1.iter().chain(&v2[10..]).map(|w| w.value.clone()).collect();
    let got = wait_output(&broker, &output, expected.len(), &mut filter);
    assert_eq!(got, expected, "one record per key id");
    filter.wait_metric(
        "kafka_dedup_duplicates_dropped_total",
        &["partition=\"0\""],
        10.0,
        Duration::from_secs(10),
    );
    assert_eq!(filter.terminate().code(), Some(0), "{}", filter.logs());
}

/// All the records of `topic`'s `partitions` partitions, values only.
fn all_values(broker: &Broker, topic: &str, partitions: i32) -> Vec<Vec<u8>> {
    broker
        .read_records(topic, partitions)
        .into_values()
        .flatten()
        .map(|r| r.value.unwrap_or_default())
        .collect()
}

/// Issue 27, item 4: `protobuf:` in the global scope. Replays written by a second schema version
/// into another input partition are dropped; with the registry stopped, the route stage waits at
/// the record whose schema it lacks (nothing routed past it, `/readyz` says why) and copies it
/// once the registry is back.
#[test]
fn the_global_scope_routes_protobuf_records_and_waits_for_a_stopped_registry() {
    let broker = kafka();
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let url = format!("http://127.0.0.1:{port}/apis/ccompat/v7");
    let mut registry = Registry::start(port, &dir.path().join("registry"), &dir.path().join("registry-1.log"));
    let (input, route, output) = (unique("pg-in"), unique("pg-route"), unique("pg-out"));
    for t in [&input, &route, &output] {
        broker.create_topic(t, 2);
    }
    let written = serialize_with("tests/fixtures/protobuf_records.py", &url, &input);
    let batch = |name: &str| -> Vec<&Written> { written.iter().filter(|w| w.batch == name).collect() };
    let (v1, v2, v3) = (batch("v1"), batch("v2"), batch("v3"));
    // v1 into partition 0, v2 (e-0..e-9 again, e-10..e-14) into partition 1.
    broker.produce_raw(&input, 0, &v1.iter().map(|w| value(&w.value)).collect::<Vec<_>>());
    broker.produce_raw(&input, 1, &v2.iter().map(|w| value(&w.value)).collect::<Vec<_>>());

    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.interval = "1m";
    spec.fingerprint = format!(
        "[fingerprint]\nsource = \"protobuf:/event_id\"\nscope = \"global\"\nroute_topic = \"{route}\"\n\
         [fingerprint.schema_registry]\nurl = \"{url}\"\ntimeout = \"2s\"\n"
    );
    let mut filter = spec.start(dir.path());
    let deadline = Instant::now() + Duration::from_secs(90);
    while all_values(&broker, &output, 2).len() < 15 {
        assert!(filter.running(), "kafka-dedup exited:\n{}", filter.logs());
        assert!(Instant::now() < deadline, "not 15 records in 90 s:\n{}", filter.logs());
        std::thread::sleep(Duration::from_millis(500));
    }
    filter.wait_metric(
        "kafka_dedup_duplicates_dropped_total",
        &[],
        10.0,
        Duration::from_secs(30),
    );
    assert_eq!(all_values(&broker, &output, 2).len(), 15, "e-0..e-14 once each");

    // The registry stops; v3's schema was never fetched.
    registry.stop();
    broker.produce_raw(&input, 0, &v3.iter().map(|w| value(&w.value)).collect::<Vec<_>>());
    let deadline = Instant::now() + Duration::from_secs(30);
    let body = loop {
        let (code, body) = http_get(&filter.http, "/readyz").unwrap();
        if code != 200 && body.contains("route stage waits") {
            break body;
        }
        assert!(
            Instant::now() < deadline,
            "/readyz does not say the route stage waits: {body}"
        );
        std::thread::sleep(Duration::from_millis(300));
    };
    assert!(body.contains("schema_registry"), "{body}");
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(
        broker.read_records(&route, 2).values().map(Vec::len).sum::<usize>(),
        25,
        "nothing routed past it"
    );
    assert_eq!(all_values(&broker, &output, 2).len(), 15);

    // Back: e-20 and e-21 forwarded, e-5 dropped.
    let _registry = Registry::start(port, &dir.path().join("registry"), &dir.path().join("registry-2.log"));
    let deadline = Instant::now() + Duration::from_secs(90);
    while all_values(&broker, &output, 2).len() < 17 {
        assert!(filter.running(), "kafka-dedup exited:\n{}", filter.logs());
        assert!(
            Instant::now() < deadline,
            "v3 not forwarded in 90 s:\n{}",
            filter.logs()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    filter.wait_metric(
        "kafka_dedup_duplicates_dropped_total",
        &[],
        11.0,
        Duration::from_secs(30),
    );
    let out = all_values(&broker, &output, 2);
    assert_eq!(out.len(), 17, "e-5 of v3 dropped");
    // Each event once, whichever copy reached its route partition first (v1's or v2's).
    let event = |v: &Vec<u8>| {
        written
            .iter()
            .find(|w| &w.value == v)
            .map(|w| w.event_id.clone())
            .unwrap()
    };
    let mut got: Vec<String> = out.iter().map(event).collect();
    got.sort();
    let mut want: Vec<String> = (0..15)
        .map(|i| format!("e-{i}"))
        .chain(["e-20".into(), "e-21".into()])
        .collect();
    want.sort();
    assert_eq!(got, want);
    let deadline = Instant::now() + Duration::from_secs(30);
    while http_get(&filter.http, "/readyz").is_none_or(|(code, _)| code != 200) {
        assert!(Instant::now() < deadline, "not ready again:\n{}", filter.logs());
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(filter.terminate().code(), Some(0), "{}", filter.logs());
}

//! Issue 12's cases: odd records through the binary on the real broker. Distinct events never
//! collapse (a null or empty id is not an identity), and no record can crash the filter (JSON
//! nested a hundred thousand levels deep, header names that are not UTF-8).

mod common;

use std::time::Duration;

use common::*;

const CONSUMED: &str = "kafka_dedup_records_consumed_total";
const FORWARDED: &str = "kafka_dedup_records_forwarded_total";
const DROPPED: &str = "kafka_dedup_duplicates_dropped_total";
const UNFINGERPRINTABLE: &str = "kafka_dedup_unfingerprintable_records_total";

/// A record with a text value and byte-named headers.
fn rec(value: &str, headers: &[(&[u8], Option<&str>)]) -> Raw {
    Raw {
        key: None,
        value: Some(value.as_bytes().to_vec()),
        headers: headers
            .iter()
            .map(|(k, v)| (k.to_vec(), v.map(|v| v.as_bytes().to_vec())))
            .collect(),
    }
}

/// Runs a filter with `source` over `records` (one partition) until it consumed them all and
/// forwarded `forwarded`; returns the final scrape and the output, after a clean stop.
fn filter_once(prefix: &str, source: &str, records: &[Raw], forwarded: usize) -> (String, Vec<Raw>) {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique(&format!("{prefix}-in")), unique(&format!("{prefix}-out")));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    kafka().produce_raw(&input, 0, records);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.fingerprint = format!("[fingerprint]\nsource = \"{source}\"\n");
    let mut filter = spec.start(dir.path());
    filter.wait_metric(CONSUMED, &[], records.len() as f64, Duration::from_secs(60));
    filter.wait_metric(FORWARDED, &[], forwarded as f64, Duration::from_secs(60));
    let scrape = filter.scrape();
    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = kafka()
        .read_forwarded(&output, 1, &input)
        .remove(&0)
        .unwrap_or_default();
    (scrape, out)
}

fn unfingerprintable(scrape: &str, reason: &str) -> f64 {
    metric(
        scrape,
        UNFINGERPRINTABLE,
        &["action=\"forward\"", &format!("reason=\"{reason}\"")],
    )
}

/// Case 1, `json:/POINTER`: records whose id is JSON `null` or `""` follow `on_missing`
/// (forward), counted as `null_id` and `empty_id`; none of them suppresses another. A real id
/// still catches its replay.
#[test]
fn json_null_and_empty_ids_never_collapse() {
    let records: Vec<Raw> = [
        r#"{"event_id":"a1","n":1}"#,
        r#"{"event_id":null,"n":2}"#,
        r#"{"event_id":null,"n":3}"#,
        r#"{"event_id":"","n":4}"#,
        r#"{"event_id":"","n":5}"#,
        r#"{"n":6,"event_id":"a1"}"#,
        r#"{"event_id":"a2","n":7}"#,
    ]
    .iter()
    .map(|v| rec(v, &[]))
    .collect();
    let (scrape, out) = filter_once("nullid", "json:/event_id", &records, 6);
    assert_eq!(metric(&scrape, DROPPED, &[]), 1.0, "{scrape}");
    assert_eq!(unfingerprintable(&scrape, "null_id"), 2.0, "{scrape}");
    assert_eq!(unfingerprintable(&scrape, "empty_id"), 2.0, "{scrape}");
    let want: Vec<Raw> = [0, 1, 2, 3, 4, 6].iter().map(|i| records[*i].clone()).collect();
    assert_eq!(out, want);
}

/// Case 1, `header:NAME`: a header present only with null values has no identity (`null_id`),
/// one with only null or empty values neither (`empty_id`); a header with at least one real
/// value is an identity over all its values in order, nulls included.
#[test]
fn header_null_and_empty_values_never_collapse() {
    let id: &[u8] = b"event-id";
    let records = vec![
        rec("0", &[(id, Some("A"))]),
        rec("1", &[(id, None)]),
        rec("2", &[(id, None)]),
        rec("3", &[(id, Some(""))]),
        rec("4", &[(id, Some(""))]),
        rec("5", &[(id, None), (id, None)]),
        rec("6", &[(id, Some("")), (id, None)]),
        rec("7", &[(id, None), (id, Some("A"))]),
        rec("8", &[(b"trace", Some("t")), (id, None), (id, Some("A"))]),
        rec("9", &[(id, Some("A"))]),
    ];
    let (scrape, out) = filter_once("nullhdr", "header:event-id", &records, 8);
    assert_eq!(metric(&scrape, DROPPED, &[]), 2.0, "{scrape}");
    assert_eq!(unfingerprintable(&scrape, "null_id"), 3.0, "{scrape}");
    assert_eq!(unfingerprintable(&scrape, "empty_id"), 3.0, "{scrape}");
    assert_eq!(out, records[..8].to_vec());
}

/// `depth` nested arrays.
fn nested(depth: usize) -> String {
    format!("{}{}", "[".repeat(depth), "]".repeat(depth))
}

/// Case 2: an id nested 100,000 levels deep used to overflow the poll thread's stack (the
/// process aborted, on every restart). Deeper than the limit is `not_json` (forwarded, counted);
/// at the limit it is an identity like any other. The same value sent to `/store/lookup` is a
/// bad request, and the service stays up.
#[test]
fn deep_json_is_not_json_and_cannot_take_the_service_down() {
    let limit = kafka_dedup::fingerprint::MAX_JSON_DEPTH;
    let doc = |id: &str| format!(r#"{{"id":{id}}}"#);
    let records: Vec<Raw> = [
        doc("1"),
        doc(&nested(100_000)),
        doc(&nested(100_000)),
        doc(&nested(limit)),
        doc(&nested(limit + 1)),
        doc("1"),
        doc(&nested(limit)),
        doc("2"),
    ]
    .iter()
    .map(|v| rec(v, &[]))
    .collect();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("deep-in"), unique("deep-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    kafka().produce_raw(&input, 0, &records);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.fingerprint = "[fingerprint]\nsource = \"json:/id\"\n".into();
    let mut filter = spec.start(dir.path());
    filter.wait_metric(CONSUMED, &[], 8.0, Duration::from_secs(60));
    filter.wait_metric(FORWARDED, &[], 6.0, Duration::from_secs(60));
    let scrape = filter.scrape();
    assert_eq!(metric(&scrape, DROPPED, &[]), 2.0, "{scrape}");
    assert_eq!(unfingerprintable(&scrape, "not_json"), 3.0, "{scrape}");

    // The live lookup: a deep value is a bad request, a shallow one is found. 10,000 levels, URL
    // encoded, is about as long a request line as hyper accepts (64 KiB, else 414).
    let deep = format!("/store/lookup?value={}", percent(&doc(&nested(10_000))));
    let answer = http_get(&filter.http, &deep);
    assert!(filter.running(), "a lookup took the service down:\n{}", filter.logs());
    let (code, body) = answer.expect("an answer");
    assert_eq!(code, 400, "{body}");
    assert!(body.contains("deeper than"), "{body}");
    let (code, body) = http_get(&filter.http, &format!("/store/lookup?value={}", percent(&doc("1")))).unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("\"held\":true"), "{body}");
    assert_eq!(http_get(&filter.http, "/healthz").map(|(c, _)| c), Some(200));

    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = kafka()
        .read_forwarded(&output, 1, &input)
        .remove(&0)
        .unwrap_or_default();
    let want: Vec<Raw> = [0, 1, 2, 3, 4, 7].iter().map(|i| records[*i].clone()).collect();
    assert_eq!(out, want);
}

/// Percent-encodes every byte but unreserved ASCII.
fn percent(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Case 3: header names that are not UTF-8 (a librdkafka producer can write them) used to panic
/// in rdkafka's header iteration, on every restart. Names are compared as bytes: such a header
/// is simply not the configured one; records are copied to the output with their names byte for
/// byte; and a recovery that re-reads them from the output (the store deleted) learns them too.
#[test]
fn header_names_that_are_not_utf8() {
    let id: &[u8] = b"id";
    let records = vec![
        rec("0", &[(id, Some("A"))]),
        rec("1", &[(b"\xffid", Some("X")), (id, Some("B"))]),
        rec("2", &[(b"id\xfe", Some("A"))]),
        rec("3", &[(b"\xc3\x28", Some("Q")), (id, Some("A"))]),
        rec("4", &[(b"\xff", None), (id, Some("C"))]),
    ];
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("utf8hdr-in"), unique("utf8hdr-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    kafka().produce_raw(&input, 0, &records);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.fingerprint = "[fingerprint]\nsource = \"header:id\"\n".into();
    // The replay of "B" below is written (stamped) after the first run, seconds after its first
    // copy: a horizon of hours keeps it a replay however long the first run takes (with 1 s
    // checkpoints the horizon is 1-2 s of record time, and a slow first run let it pass).
    spec.interval = "1h";
    let mut filter = spec.start(dir.path());
    filter.wait_metric(CONSUMED, &[], 5.0, Duration::from_secs(60));
    filter.wait_metric(FORWARDED, &[], 4.0, Duration::from_secs(60));
    let scrape = filter.scrape();
    assert_eq!(metric(&scrape, DROPPED, &[]), 1.0, "{scrape}");
    assert_eq!(unfingerprintable(&scrape, "absent"), 1.0, "{scrape}");
    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = kafka()
        .read_forwarded(&output, 1, &input)
        .remove(&0)
        .unwrap_or_default();
    let want: Vec<Raw> = [0, 1, 2, 4].iter().map(|i| records[*i].clone()).collect();
    assert_eq!(out, want, "forwarded with their header names byte for byte");

    // Without its store, the next start re-learns the partition from the output topic, whose
    // records carry the same names; the replay of "B" is recognised.
    std::fs::remove_dir_all(&spec.store).unwrap();
    kafka().produce_raw(&input, 0, &[rec("5", &[(b"\xfe\xff", Some("z")), (id, Some("B"))])]);
    let mut again = spec.start(dir.path());
    again.wait_metric(DROPPED, &[], 1.0, Duration::from_secs(60));
    let scrape = again.scrape();
    assert_eq!(metric(&scrape, CONSUMED, &[]), 1.0, "{scrape}");
    assert_eq!(metric(&scrape, FORWARDED, &[]), 0.0, "{scrape}");
    assert!(again.terminate().success(), "{}", again.logs());
}

/// Case 6: a recovery worker that panics (a bug; injected here at its start with the panic point
/// `recovery`) used to leave its partition "recovering" for ever, silently. The panic is caught,
/// logged and counted, and the recovery retried: the partition runs and forwards.
#[test]
fn a_recovery_worker_that_panics_is_retried() {
    let records: Vec<Raw> = (0..3).map(|i| rec(&i.to_string(), &[])).collect();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("panic-in"), unique("panic-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    kafka().produce_raw(&input, 0, &records);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env.push((kafka_dedup::crash::ENV.into(), "recovery:1".into()));
    let mut filter = spec.start(dir.path());
    filter.wait_metric(FORWARDED, &[], 3.0, Duration::from_secs(60));
    let scrape = filter.scrape();
    assert_eq!(
        metric(&scrape, "kafka_dedup_recovery_panics_total", &["partition=\"0\""]),
        1.0,
        "{scrape}"
    );
    assert!(filter.terminate().success(), "{}", filter.logs());
    let logs = filter.logs();
    assert!(logs.contains("recovery worker panicked"), "{logs}");
    assert_eq!(kafka().read_forwarded(&output, 1, &input)[&0], records);
}

/// Issue 22 (low): a recovery that panics at every attempt (a deterministic bug) is not retried
/// for ever: after a few panics in a row the process exits 1 with an error that names the
/// partition and the panic, and forwards nothing meanwhile.
#[test]
fn a_recovery_that_panics_at_every_attempt_exits_1() {
    let records: Vec<Raw> = (0..3).map(|i| rec(&i.to_string(), &[])).collect();
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("panics-in"), unique("panics-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    kafka().produce_raw(&input, 0, &records);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env.push((kafka_dedup::crash::ENV.into(), "recovery:1+".into()));
    let mut filter = spec.start(dir.path());
    let status = filter.wait_exit(Duration::from_secs(60));
    let logs = filter.logs();
    assert_eq!(status.code(), Some(1), "{logs}");
    assert!(
        logs.contains("recovery of partition 0 panicked 3 times in a row"),
        "{logs}"
    );
    assert!(logs.contains("panic point recovery reached"), "{logs}");
    assert!(kafka().read_records(&output, 1).get(&0).is_none_or(|r| r.is_empty()));
}

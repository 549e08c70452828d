//! Fault injection on librdkafka's mock cluster (in this test process, listening on loopback):
//! brokers down mid-stream, produce and commit request errors, a produce error the producer
//! cannot retry, and the transactional flow (commit, crash inside a transaction, fencing of a
//! zombie, in `tests/transactions.rs`). The binary runs as its own process against the mock cluster's address.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::*;
use kafka_dedup::scenario::{self, read_values};
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

const CONSUMED: &str = "kafka_dedup_records_consumed_total";
const FORWARDED: &str = "kafka_dedup_records_forwarded_total";

struct Mock {
    cluster: MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    bootstrap: String,
}

fn mock(brokers: i32, topics: &[(&str, i32)]) -> Mock {
    let cluster = MockCluster::new(brokers).unwrap();
    for (t, p) in topics {
        cluster.create_topic(t, *p, 1).unwrap();
    }
    let bootstrap = cluster.bootstrap_servers();
    Mock { cluster, bootstrap }
}

/// A filter on the mock cluster, with a 6 s session timeout: the mock's group coordinator gives
/// a rebalance the session timeout less 1 s for every member to rejoin
/// (`rd_kafka_mock_cgrp_rebalance`, librdkafka `rdkafka_mock_cgrp.c`), 44 s with librdkafka's
/// default. The mock answers heartbeats promptly, so the short session costs nothing here.
fn spec_on(m: &Mock, input: &str, output: &str, dir: &std::path::Path) -> FilterSpec {
    let mut spec = FilterSpec::new(input, output, dir);
    spec.broker = m.bootstrap.clone();
    spec.session_timeout_ms = Some(6000);
    spec
}

fn wait_committed_on(
    m: &Mock,
    group: &str,
    topic: &str,
    partitions: i32,
    ends: &BTreeMap<i32, i64>,
    f: &FilterProcess,
) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let c = committed_on(&m.bootstrap, group, topic, partitions);
        if ends
            .iter()
            .all(|(p, e)| c.get(p).and_then(|x| x.0).is_some_and(|o| o >= *e))
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "committed {c:?}, expected {ends:?}\n{}",
            f.logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Case 5: the brokers go down for 10 s mid-stream and come back → the filter pauses and
/// resumes; nothing lost, nothing repeated.
#[test]
fn brokers_down_for_ten_seconds() {
    let m = mock(1, &[("in", 3), ("out", 3)]);
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_on(&m, "in", "out", dir.path());
    // The default session timeout (45 s): a 10 s outage pauses the group, it does not end it.
    spec.session_timeout_ms = None;
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));

    let s = scenario::replay_scenario(20_000, 3, 150, 11);
    let writer = {
        let (records, bootstrap) = (s.records.clone(), m.bootstrap.clone());
        std::thread::spawn(move || {
            scenario::produce(&client_for(&bootstrap), "in", &records, Duration::from_secs(8)).unwrap()
        })
    };
    filter.wait_metric(FORWARDED, &[], 3000.0, Duration::from_secs(60));
    m.cluster.broker_down(1).unwrap();
    let down_at = Instant::now();
    std::thread::sleep(Duration::from_secs(10));
    let during = metric(&filter.scrape(), CONSUMED, &[]);
    assert!(filter.running(), "the filter survives the outage:\n{}", filter.logs());
    m.cluster.broker_up(1).unwrap();
    eprintln!(
        "brokers down for {:?}; consumed {during} records by then",
        down_at.elapsed()
    );
    writer.join().unwrap();
    let ends = end_offsets_on(&m.bootstrap, "in", 3);
    wait_committed_on(&m, &spec.group, "in", 3, &ends, &filter);
    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = read_values(&client_for(&m.bootstrap), "out", 3, Duration::from_secs(60)).unwrap();
    let v = scenario::verify(&s.records, &out);
    assert!(v.ok() && v.output_records == 20_000, "{v:?}");
}

/// Produce and offset-commit requests that fail with retriable errors: retried, nothing lost or
/// repeated.
#[test]
fn retriable_produce_and_commit_errors() {
    let m = mock(1, &[("in", 2), ("out", 2)]);
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_on(&m, "in", "out", dir.path());
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    let s = scenario::replay_scenario(6000, 2, 150, 12);
    let (first, rest) = s.records.split_at(s.records.len() / 2);
    scenario::produce(&client_for(&m.bootstrap), "in", first, Duration::ZERO).unwrap();
    filter.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(60));
    m.cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 5],
    );
    m.cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE; 5],
    );
    scenario::produce(&client_for(&m.bootstrap), "in", rest, Duration::from_secs(2)).unwrap();
    let ends = end_offsets_on(&m.bootstrap, "in", 2);
    wait_committed_on(&m, &spec.group, "in", 2, &ends, &filter);
    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = read_values(&client_for(&m.bootstrap), "out", 2, Duration::from_secs(60)).unwrap();
    let v = scenario::verify(&s.records, &out);
    assert!(v.ok() && v.output_records == 6000, "{v:?}");
}

/// Case 3 (asynchronous variant): the broker refuses produce requests with an error the
/// producer cannot retry → the filter stops with exit 1, commits nothing it did not deliver; once
/// the broker accepts again, a restart forwards everything, once.
#[test]
fn permanent_produce_error_stops_and_restart_forwards() {
    let m = mock(1, &[("in", 1), ("out", 1)]);
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_on(&m, "in", "out", dir.path());
    let records = values(0..200);
    scenario::produce(&client_for(&m.bootstrap), "in", &records, Duration::ZERO).unwrap();
    // The next produce requests, the filter's first ones, fail permanently.
    m.cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE; 3],
    );
    let mut filter = spec.start(dir.path());
    let status = filter.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{}", filter.logs());
    let logs = filter.logs();
    assert!(logs.contains("delivery to out failed"), "{logs}");
    let delivered = read_values(&client_for(&m.bootstrap), "out", 1, Duration::from_secs(30)).unwrap()[&0].len() as i64;
    let c = committed_on(&m.bootstrap, &spec.group, "in", 1);
    assert!(
        c[&0].0.unwrap_or(0) <= delivered,
        "nothing committed past what was delivered: {c:?}, {delivered}"
    );
    assert!(
        delivered < 200,
        "the failure stopped the filter before everything was forwarded"
    );
    m.cluster.clear_request_errors(RDKafkaApiKey::Produce);

    let mut filter = spec.start(dir.path());
    let ends = end_offsets_on(&m.bootstrap, "in", 1);
    wait_committed_on(&m, &spec.group, "in", 1, &ends, &filter);
    assert!(filter.terminate().success(), "{}", filter.logs());
    let out = read_values(&client_for(&m.bootstrap), "out", 1, Duration::from_secs(60)).unwrap();
    let v = scenario::verify(&records, &out);
    assert!(v.ok() && v.output_records == 200, "{v:?}");
}

fn values(range: std::ops::Range<u64>) -> Vec<(i32, u64)> {
    range.map(|v| (0, v)).collect()
}

/// Issue 7, case 3: partitions revoked (cooperative rebalance: a second instance joins) while
/// records of them are still in flight (every broker round trip slowed to 400 ms) → the first
/// instance waits for their acknowledgements and commits before letting go; none of them
/// appears twice, none is lost.
#[test]
fn revoked_with_records_in_flight() {
    let m = mock(1, &[("in", 4), ("out", 4)]);
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_on(&m, "in", "out", dir.path());
    let mut a_spec = spec.clone();
    a_spec.store = dir.path().join("store-a");
    let mut b_spec = spec.clone();
    b_spec.store = dir.path().join("store-b");
    let mut a = a_spec.start(dir.path());
    a.wait_ready(Duration::from_secs(60));
    let s = scenario::replay_scenario(12_000, 4, 150, 31);
    let writer = {
        let (records, bootstrap) = (s.records.clone(), m.bootstrap.clone());
        std::thread::spawn(move || {
            scenario::produce(&client_for(&bootstrap), "in", &records, Duration::from_secs(8)).unwrap()
        })
    };
    a.wait_metric(FORWARDED, &[], 2000.0, Duration::from_secs(60));
    m.cluster.broker_round_trip_time(1, Duration::from_millis(400)).unwrap();
    let mut b = b_spec.start(dir.path());
    b.wait_metric(FORWARDED, &[], 200.0, Duration::from_secs(120));
    m.cluster.broker_round_trip_time(1, Duration::ZERO).unwrap();
    let alogs = a.logs();
    assert!(
        alogs.contains("offsets committed for a clean hand-over"),
        "the first instance handed partitions over:\n{alogs}"
    );
    writer.join().unwrap();
    let ends = end_offsets_on(&m.bootstrap, "in", 4);
    wait_committed_on(&m, &spec.group, "in", 4, &ends, &b);
    assert!(a.terminate().success(), "{}", a.logs());
    assert!(b.terminate().success(), "{}", b.logs());
    let out = read_values(&client_for(&m.bootstrap), "out", 4, Duration::from_secs(60)).unwrap();
    let v = scenario::verify(&s.records, &out);
    assert!(v.ok() && v.output_records == 12_000, "{v:?}");
}

/// Per partition, seconds from "partition running" (recovered, resumed at its offset) to the
/// first record forwarded, from a filter's log.
fn resume_gaps(logs: &str) -> BTreeMap<i32, f64> {
    let field = |line: &str, name: &str| -> Option<f64> {
        let rest = &line[line.find(&format!(" {name}="))? + name.len() + 2..];
        rest.split_whitespace().next()?.parse().ok()
    };
    let mut running = BTreeMap::new();
    let mut gaps = BTreeMap::new();
    for line in logs.lines() {
        let (Some(p), Some(s)) = (field(line, "partition"), field(line, "seconds")) else {
            continue;
        };
        if line.contains("partition running") {
            running.insert(p as i32, s);
        } else if line.contains("first record forwarded") {
            if let Some(r) = running.get(&(p as i32)) {
                gaps.insert(p as i32, s - r);
            }
        }
    }
    gaps
}

/// A recovered partition is fetched at once, on a first start (resumed at offset 0) and on a
/// restart (resumed at the committed offset). librdkafka wakes a partition's fetcher only on a
/// change of its fetch state; resuming a paused partition after seeking it changes none, so
/// every assignment used to idle up to 1 s (librdkafka's idle wait) before its first record:
/// 0.8–0.9 s for every partition here. The bound, half of that, is on the partition resumed
/// first: the others can wait behind its fetch, which the broker holds for up to
/// `fetch.wait.max.ms` (500 ms) once it has read everything, as any Kafka consumer's would.
#[test]
fn recovered_partitions_are_fetched_at_once() {
    let m = mock(1, &[("in", 4), ("out", 4)]);
    let dir = tempfile::tempdir().unwrap();
    let spec = spec_on(&m, "in", "out", dir.path());
    let batch = |range: std::ops::Range<u64>| -> Vec<(i32, u64)> { range.map(|v| ((v % 4) as i32, v)).collect() };
    for (run, range) in [("first start", 0..400), ("restart", 400..800)] {
        scenario::produce(&client_for(&m.bootstrap), "in", &batch(range), Duration::ZERO).unwrap();
        let mut filter = spec.start(dir.path());
        filter.wait_metric(FORWARDED, &[], 400.0, Duration::from_secs(60));
        assert!(filter.terminate().success(), "{}", filter.logs());
        let logs = filter.logs();
        let gaps = resume_gaps(&logs);
        assert_eq!(gaps.len(), 4, "{run}: a gap for every partition: {gaps:?}\n{logs}");
        let first = gaps.values().copied().fold(f64::INFINITY, f64::min);
        println!("{run}: running → first forward per partition {gaps:?}");
        assert!(
            first < 0.45,
            "{run}: even the first partition resumed idled: {gaps:?}\n{logs}"
        );
    }
}

/// Stopping while the producer's queue is full: the record waiting for room is refused
/// (`Refused::Stopping`), and so is every later record of the polled batch, so the hand-over
/// commits up to the first refused record, not past it. 3,000 records, a producer queue of 10
/// messages and 50 ms per broker round trip keep the poll thread waiting for room nearly all the
/// time; SIGTERM after 300 forwarded, then a restart forwards the rest: once each, none missing.
#[test]
fn stopped_while_the_producer_queue_is_full() {
    let m = mock(1, &[("in", 1), ("out", 1)]);
    let dir = tempfile::tempdir().unwrap();
    let mut spec = spec_on(&m, "in", "out", dir.path());
    spec.env.push((
        "KAFKA_DEDUP__KAFKA__PROPERTIES__QUEUE_BUFFERING_MAX_MESSAGES".into(),
        "10".into(),
    ));
    let records = values(0..3000);
    scenario::produce(&client_for(&m.bootstrap), "in", &records, Duration::ZERO).unwrap();
    m.cluster.broker_round_trip_time(1, Duration::from_millis(50)).unwrap();
    let mut filter = spec.start(dir.path());
    filter.wait_metric(FORWARDED, &[], 300.0, Duration::from_secs(60));
    assert!(filter.terminate().success(), "{}", filter.logs());
    m.cluster.broker_round_trip_time(1, Duration::ZERO).unwrap();
    let mut again = spec.start(dir.path());
    let ends = end_offsets_on(&m.bootstrap, "in", 1);
    wait_committed_on(&m, &spec.group, "in", 1, &ends, &again);
    assert!(again.terminate().success(), "{}", again.logs());
    let out = read_values(&client_for(&m.bootstrap), "out", 1, Duration::from_secs(30)).unwrap();
    let v = scenario::verify(&records, &out);
    assert!(
        v.ok() && v.output_records == 3000,
        "{v:?}\nfirst run:\n{}",
        filter.logs()
    );
}

//! Fault injection on librdkafka's mock cluster (in this test process, listening on loopback):
//! brokers down mid-stream, produce and commit request errors, a produce error the producer
//! cannot retry, and the transactional flow (commit, crash inside a transaction, fencing of a
//! zombie, in `tests/transactions.rs`). The binary runs as its own process against the mock cluster's address.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::given::Scenario;
use common::*;
use kafka_dedup::scenario;
use rdkafka::mocking::MockCluster;
use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr};

const CONSUMED: &str = "kafka_dedup_records_consumed_total";
const FORWARDED: &str = "kafka_dedup_records_forwarded_total";

/// A mock cluster and the broker value for its bootstrap address.
struct Mock {
    /// The in-process cluster (fault injection).
    cluster: MockCluster<'static, rdkafka::producer::DefaultProducerContext>,
    /// Its brokers, as the test helpers take them.
    broker: Broker,
}

fn mock(brokers: i32, topics: &[(&str, i32)]) -> Mock {
    let cluster = MockCluster::new(brokers).unwrap();
    for (t, p) in topics {
        cluster.create_topic(t, *p, 1).unwrap();
    }
    let broker = Broker::at(cluster.bootstrap_servers());
    Mock { cluster, broker }
}

impl Mock {
    /// Given: a scenario on this cluster's topics `in` and `out` (made by [`mock`], `partitions`
    /// of `in`), whose filter has a 6 s session timeout: the mock's group coordinator gives a
    /// rebalance the session timeout less 1 s for every member to rejoin
    /// (`rd_kafka_mock_cgrp_rebalance`, librdkafka `rdkafka_mock_cgrp.c`), 44 s with librdkafka's
    /// default. The mock answers heartbeats promptly, so the short session costs nothing here.
    fn scenario(&self, partitions: i32) -> Scenario {
        let mut s = Scenario::on(self.broker.clone(), "in", "out", partitions);
        s.spec.session_timeout_ms = Some(6000);
        s
    }
}

/// Case 5: the brokers go down for 10 s mid-stream and come back → the filter pauses (nothing is
/// acknowledged, so nothing more is forwarded, and `/readyz` says the brokers are unreachable),
/// stays up, and resumes; nothing lost, nothing repeated.
#[test]
fn brokers_down_for_ten_seconds() {
    let m = mock(1, &[("in", 3), ("out", 3)]);
    let mut given = m.scenario(3);
    // The default session timeout (45 s): a 10 s outage pauses the group, it does not end it.
    given.spec.session_timeout_ms = None;
    let mut filter = given.start_ready();

    // When: upstream writes the replay scenario over 8 s, and the brokers go down mid-stream.
    let s = scenario::replay_scenario(20_000, 3, 150, 11);
    let writer = given.produce_records_over(&s.records, Duration::from_secs(8));
    filter.wait_metric(FORWARDED, &[], 3000.0, Duration::from_secs(60));
    m.cluster.broker_down(1).unwrap();
    let down_at = Instant::now();
    // Within the outage: a moment for acknowledgements already on the wire, then the forwarded
    // count must stand still, and /readyz must turn not ready, naming the brokers.
    std::thread::sleep(Duration::from_secs(1));
    let forwarded_early = metric(&filter.scrape(), FORWARDED, &[]);
    // Ten seconds at least, longer (up to 30 s) until /readyz has said so: on a loaded machine
    // librdkafka may take more than ten seconds to report the connections failed.
    let mut unready = None;
    while down_at.elapsed() < Duration::from_secs(10)
        || (unready.is_none() && down_at.elapsed() < Duration::from_secs(30))
    {
        if let Some((503, body)) = http_get(&filter.http, "/readyz") {
            unready.get_or_insert(body);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let forwarded_late = metric(&filter.scrape(), FORWARDED, &[]);
    assert!(filter.running(), "the filter survives the outage:\n{}", filter.logs());
    m.cluster.broker_up(1).unwrap();

    // Then: nothing moved while they were down, /readyz said why, the log stayed quiet, and
    // once they are back every value is forwarded once, in order.
    assert_eq!(
        forwarded_early, forwarded_late,
        "nothing is acknowledged while the brokers are down"
    );
    let unready = unready.unwrap_or_else(|| panic!("/readyz stayed ready during the outage:\n{}", filter.logs()));
    assert!(unready.to_lowercase().contains("broker"), "{unready}");
    // Issue 16, item 6: the clients' errors are logged at a bounded rate (one line per kind of
    // error and client per 30 s), not several lines a second for as long as the outage lasts.
    let logs = filter.logs();
    let lines = logs
        .lines()
        .filter(|l| l.contains("kafka producer error") || l.contains("kafka client error"))
        .count();
    assert!(lines <= 12, "{lines} client error lines in a 10 s outage:\n{logs}");
    eprintln!("brokers down for 10 s: forwarded {forwarded_late} before and during; /readyz {unready}");

    writer.join().unwrap();
    given.wait_done(&filter);
    given.stop(filter);
    given.then_once_in_order(20_000);
}

/// Produce and offset-commit requests that fail with retriable errors: retried, nothing lost or
/// repeated. The input is written (and its producer gone) before the errors are injected, and
/// the filter is the only client that produces or commits afterwards, so every injected error
/// is met by the filter (librdkafka retries both; the start-of-ownership commit takes about a
/// second longer).
#[test]
fn retriable_produce_and_commit_errors() {
    let m = mock(1, &[("in", 2), ("out", 2)]);
    let mut given = m.scenario(2);
    given.produce_records(&scenario::replay_scenario(6000, 2, 150, 12).records, Duration::ZERO);

    // When: the next five produce and five offset-commit requests fail, retriably.
    m.cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS; 5],
    );
    m.cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE; 5],
    );
    given.stop(given.run_to_end());

    // Then: every value once, in order.
    given.then_once_in_order(6000);
}

/// Rule: an input offset is committed only after its record is acknowledged by the output
/// topic. The output partition's leader is on broker 2, the input and the group coordinator on
/// broker 1. After 500 records are forwarded, broker 2 goes down: the filter goes on consuming
/// (500 more records) but nothing is acknowledged. For five checkpoint intervals the committed
/// offset must not pass 500 (a checkpoint that committed its target without waiting for the
/// acknowledgements would commit 1000 within one interval). Then the filter is killed (its
/// unacknowledged records die with it), broker 2 comes back, and a restart forwards the rest:
/// every record exactly once, in order.
#[test]
fn checkpoint_commits_only_what_the_output_acknowledged() {
    use rdkafka::mocking::MockCoordinator;
    let m = mock(2, &[("in", 1), ("out", 1)]);
    m.cluster.partition_leader("in", 0, Some(1)).unwrap();
    m.cluster.partition_leader("out", 0, Some(2)).unwrap();
    let mut given = m.scenario(1);
    m.cluster
        .coordinator(MockCoordinator::Group(given.spec.group.clone()), 1)
        .unwrap();
    let mut filter = given.start_ready();
    given.produce(0..500);
    filter.wait_metric(FORWARDED, &[], 500.0, Duration::from_secs(60));

    // When: the output's broker goes down and 500 more records arrive.
    m.cluster.broker_down(2).unwrap();
    given.produce(500..1000);
    filter.wait_metric(CONSUMED, &[], 1000.0, Duration::from_secs(60));

    // Then: for five intervals nothing is committed past what the output acknowledged.
    let window = Instant::now();
    while window.elapsed() < Duration::from_secs(5) {
        let c = given.committed(0).unwrap_or(0);
        assert!(
            c <= 500,
            "committed {c} while only 500 records were acknowledged by the output:\n{}",
            filter.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(metric(&filter.scrape(), FORWARDED, &[]), 500.0);

    // When: the filter is killed and the broker comes back; then: a restart forwards the rest.
    filter.kill9();
    m.cluster.broker_up(2).unwrap();
    given.stop(given.run_to_end());
    given.then_once_in_order(1000);
}

/// Case 3 (asynchronous variant): the broker refuses produce requests with an error the
/// producer cannot retry → the filter stops with exit 1, commits nothing it did not deliver; once
/// the broker accepts again, a restart forwards everything, once.
#[test]
fn permanent_produce_error_stops_and_restart_forwards() {
    let m = mock(1, &[("in", 1), ("out", 1)]);
    let mut given = m.scenario(1);
    given.produce(0..200);

    // When: the next produce requests, the filter's first ones, fail permanently.
    m.cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE; 3],
    );
    let mut filter = given.start();

    // Then: exit 1, naming the delivery, and nothing committed past what was delivered.
    let status = filter.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{}", filter.logs());
    let logs = filter.logs();
    assert!(logs.contains("delivery to out failed"), "{logs}");
    let delivered = given.output()[&0].len() as i64;
    let c = given.committed(0);
    assert!(
        c.unwrap_or(0) <= delivered,
        "nothing committed past what was delivered: {c:?}, {delivered}"
    );
    assert!(
        delivered < 200,
        "the failure stopped the filter before everything was forwarded"
    );

    // When: the broker accepts again; then: a restart forwards everything, once.
    m.cluster.clear_request_errors(RDKafkaApiKey::Produce);
    given.stop(given.run_to_end());
    given.then_once_in_order(200);
}

/// Records (partition 0, value) for values in `range`.
fn on_partition_0(range: std::ops::Range<u64>) -> Vec<(i32, u64)> {
    range.map(|v| (0, v)).collect()
}

/// Issue 7, case 3: partitions revoked (cooperative rebalance: a second instance joins) while
/// records of them are still in flight (every broker round trip slowed to 400 ms) → the first
/// instance waits for their acknowledgements and commits before letting go; none of them
/// appears twice, none is lost.
#[test]
fn revoked_with_records_in_flight() {
    let m = mock(1, &[("in", 4), ("out", 4)]);
    let mut given = m.scenario(4);
    let with_store = |name: &str| {
        let mut s = given.spec.clone();
        s.store = given.path().join(name);
        s
    };
    let (a_spec, b_spec) = (with_store("store-a"), with_store("store-b"));
    let mut a = a_spec.start(given.path());
    a.wait_ready(Duration::from_secs(60));
    let s = scenario::replay_scenario(12_000, 4, 150, 31);
    let writer = given.produce_records_over(&s.records, Duration::from_secs(8));
    a.wait_metric(FORWARDED, &[], 2000.0, Duration::from_secs(60));

    // When: every round trip slows to 400 ms and a second instance joins.
    m.cluster.broker_round_trip_time(1, Duration::from_millis(400)).unwrap();
    let mut b = b_spec.start(given.path());
    b.wait_metric(FORWARDED, &[], 200.0, Duration::from_secs(120));
    m.cluster.broker_round_trip_time(1, Duration::ZERO).unwrap();

    // Then: the first handed its partitions over cleanly, and every value is there once.
    let alogs = a.logs();
    assert!(
        alogs.contains("offsets committed for a clean hand-over"),
        "the first instance handed partitions over:\n{alogs}"
    );
    writer.join().unwrap();
    given.wait_done(&b);
    given.stop(a);
    given.stop(b);
    given.then_once_in_order(12_000);
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
    let mut given = m.scenario(4);
    for (run, range) in [("first start", 0..400), ("restart", 400..800)] {
        // When: 400 records wait, and the filter starts (again).
        given.produce(range);
        let mut filter = given.start();
        filter.wait_metric(FORWARDED, &[], 400.0, Duration::from_secs(60));
        let filter = given.stop(filter);

        // Then: the partition resumed first forwards without an idle wait.
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
    let mut given = m.scenario(1);
    given.spec.env.push((
        "KAFKA_DEDUP__KAFKA__PROPERTIES__QUEUE_BUFFERING_MAX_MESSAGES".into(),
        "10".into(),
    ));
    given.produce(0..3000);

    // When: round trips of 50 ms keep the queue full, and the filter is stopped mid-stream.
    m.cluster.broker_round_trip_time(1, Duration::from_millis(50)).unwrap();
    let mut filter = given.start();
    filter.wait_metric(FORWARDED, &[], 300.0, Duration::from_secs(60));
    let filter = given.stop(filter);
    m.cluster.broker_round_trip_time(1, Duration::ZERO).unwrap();
    given.stop(given.run_to_end());

    // Then: every value once, in order (the first run's log tells what it refused).
    let v = scenario::verify(&given.written, &given.output());
    assert!(
        v.ok() && v.output_records == 3000,
        "{v:?}\nfirst run:\n{}",
        filter.logs()
    );
}

/// A checkpoint whose offset commit the group coordinator refuses (here: metadata too large,
/// which librdkafka does not retry) is counted as failed, so an alert on failing checkpoints
/// can see it, and nothing is lost: the next checkpoint commits again.
#[test]
fn refused_checkpoint_commits_are_counted_and_retried() {
    const CHECKPOINTS: &str = "kafka_dedup_checkpoints_total";
    let m = mock(1, &[("in", 1), ("out", 1)]);
    let mut given = m.scenario(1);
    let mut filter = given.start_ready();
    given.produce(0..100);
    filter.wait_metric(FORWARDED, &[], 100.0, Duration::from_secs(60));
    assert_eq!(metric(&filter.scrape(), CHECKPOINTS, &["result=\"failed\""]), 0.0);

    // When: the coordinator refuses the next two offset commits.
    m.cluster.request_errors(
        RDKafkaApiKey::OffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_OFFSET_METADATA_TOO_LARGE; 2],
    );

    // Then: counted as failed and logged; the next checkpoints commit, nothing lost.
    filter.wait_metric(CHECKPOINTS, &["result=\"failed\""], 2.0, Duration::from_secs(30));
    assert!(filter.logs().contains("offset commit failed"), "{}", filter.logs());
    given.produce(100..200);
    given.wait_done(&filter);
    given.stop(filter);
    given.then_once_in_order(200);
}

/// Order survives a delivery that fails for good while later records are in flight: the broker
/// refuses one produce request mid-stream (a permanent error), with 20 ms round trips keeping
/// several requests in flight behind it. The filter stops (exit 1) without committing past the
/// refused records, and no record after them may reach the output before them: once the broker
/// accepts again, a restart forwards the rest, and the output holds every record once, in input
/// order.
///
/// The refusal must reach the filter's producer while it still has records to send (the mock
/// hands an injected error to the next produce request, whoever sends it): batches of 10 records
/// behind 20 ms round trips, at most 5 in flight (the idempotent producer's limit), forward about
/// 2,500 records a second, so the 20,000 take ~8 s and the error is injected after 1,000. (With
/// librdkafka's 10,000-record batches the filter could finish before the injection: seen in CI.)
#[test]
fn a_refused_delivery_never_leaves_a_gap() {
    let m = mock(1, &[("in", 1), ("out", 1)]);
    let mut given = m.scenario(1);
    given
        .spec
        .env
        .push(("KAFKA_DEDUP__KAFKA__PROPERTIES__BATCH_NUM_MESSAGES".into(), "10".into()));
    given.produce(0..20_000);
    m.cluster.broker_round_trip_time(1, Duration::from_millis(20)).unwrap();
    let mut filter = given.start();
    filter.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(60));

    // When: the broker refuses one produce request for good, mid-stream.
    m.cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_MSG_SIZE_TOO_LARGE],
    );

    // Then: exit 1, and the output so far is a prefix of the input, without a gap.
    let status = filter.wait_exit(Duration::from_secs(60));
    assert_eq!(status.code(), Some(1), "{}", filter.logs());
    m.cluster.broker_round_trip_time(1, Duration::ZERO).unwrap();
    let out = given.output();
    let firsts = &out[&0];
    assert!(
        firsts.len() >= 1000 && firsts.len() < 20_000,
        "the refusal came mid-stream: {} records before it",
        firsts.len()
    );
    assert!(
        firsts.iter().enumerate().all(|(i, v)| *v == i as u64),
        "the output before the restart is a prefix of the input, without a gap: {} records, first gap at {:?}",
        firsts.len(),
        firsts.iter().enumerate().find(|(i, v)| **v != *i as u64)
    );

    // When: a restart; then: every value once, in order.
    given.stop(given.run_to_end());
    given.then_once_in_order(20_000);
}

/// `input.start = "latest"` applies only where nothing was committed. The filter forwards 100
/// records and stops (committed 100); while it is down, 6 MB more arrive and the mock cluster's
/// retention (5 MB per partition) deletes the oldest, the committed offset included. On restart
/// the committed offset is below the log start: the filter must resume at the oldest record
/// left, not skip everything retained by jumping to the end.
#[test]
fn a_committed_offset_lost_to_retention_resumes_at_the_log_start() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    let m = mock(1, &[("in", 1), ("out", 1)]);
    let mut given = m.scenario(1);
    given
        .spec
        .env
        .push(("KAFKA_DEDUP__INPUT__START".into(), "latest".into()));
    let mut filter = given.start_ready();
    given.produce(0..100);
    filter.wait_metric(FORWARDED, &[], 100.0, Duration::from_secs(60));
    given.stop(filter);
    assert_eq!(given.committed(0), Some(100));

    // When: while it is down, retention deletes the committed offset.
    let big: Vec<Raw> = (0..600u32)
        .map(|i| raw(None, Some(&format!("{i:>10000}")), &[]))
        .collect();
    given.produce_raw(0, &big);
    let reader: BaseConsumer = given.broker.client().create().unwrap();
    let (low, high) = reader.fetch_watermarks("in", 0, Duration::from_secs(10)).unwrap();
    assert!(
        low > 100,
        "retention moved the log start past the committed offset: {low}..{high}"
    );

    // Then: a restart resumes at the oldest record left, not at the end.
    let mut again = given.start();
    again.wait_metric(FORWARDED, &[], (high - low) as f64, Duration::from_secs(60));
    let logs = again.logs();
    assert!(logs.contains("resuming at the log start"), "{logs}");
    given.stop(again);
    assert_eq!(given.committed(0), Some(high));
}

/// Issue 14, case 1: a transactional hand-over that fails must not leave the released
/// partition's records in the open transaction, where the next periodic commit would make them
/// visible after the new owner forwarded them again. Filter A (transactional, no periodic
/// checkpoint) forwards 200 records into its open transaction; the coordinator then refuses the
/// next EndTxn, and B joins: A's hand-over commit fails, so A must abort the transaction and
/// exit 1. (The mock cluster does not hide aborted records from read_committed readers, so what
/// is checked is A's abort and exit; the invisibility of aborted records is Kafka's.)
#[test]
fn a_failed_transactional_handover_aborts_and_exits() {
    let m = mock(1, &[("in", 2), ("out", 2)]);
    let mut given = m.scenario(2);
    given.spec.interval = "1h";
    given.spec.transactional(None);
    let with_id = |name: &str| {
        let mut s = given.spec.clone();
        s.store = given.path().join(format!("store-{name}"));
        s.env.push((
            "KAFKA_DEDUP__OUTPUT__TRANSACTIONAL_ID".into(),
            unique(&format!("txn-{name}")),
        ));
        s
    };
    let (a_spec, b_spec) = (with_id("a"), with_id("b"));
    let mut a = a_spec.start(given.path());
    a.wait_ready(Duration::from_secs(60));
    given.produce_records(&on_partition_0(0..200), Duration::ZERO);
    a.wait_metric(FORWARDED, &[], 200.0, Duration::from_secs(60));

    // When: the coordinator refuses the next EndTxn, and B joins.
    m.cluster.request_errors(
        RDKafkaApiKey::EndTxn,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_POLICY_VIOLATION],
    );
    let _b = b_spec.start(given.path());

    // Then: A's hand-over fails, it aborts its transaction and exits 1.
    let status = a.wait_exit(Duration::from_secs(90));
    let logs = a.logs();
    assert_eq!(status.code(), Some(1), "{logs}");
    assert!(logs.contains("hand-over of partitions"), "{logs}");
    assert!(logs.contains("open transaction aborted"), "{logs}");
}

/// A reviewer reading librdkafka: the transaction's step that adds the input offsets
/// (`send_offsets_to_transaction`) sends TxnOffsetCommit to the group coordinator, which
/// librdkafka retries only until the call's timeout and then makes the transaction abortable; a
/// checkpoint gave that step 30 s (1 s when resuming a pending commit), so a group coordinator
/// that answered `COORDINATOR_LOAD_IN_PROGRESS` for longer made the filter abort and exit 1,
/// though the commit is promised to be retried up to 90 % of `transaction.timeout.ms` (62 s
/// here, the interval plus 60 s). Here the coordinator answers so for 70 requests (librdkafka
/// asks again every 500 ms: over 35 s): the filter keeps running and commits once it answers.
#[test]
fn a_transaction_waits_out_a_slow_group_coordinator_instead_of_exiting() {
    let m = mock(1, &[("in", 1), ("out", 1)]);
    let mut given = m.scenario(1);
    given.spec.interval = "2s";
    given.spec.transactional(Some(unique("txn-slow-group")));
    let mut filter = given.start();
    filter.wait_ready(Duration::from_secs(60));
    // The mock cluster keeps no offsets a transaction commits (its TxnOffsetCommit answers
    // without storing them) and no transaction markers: the filter's checkpoint lines tell, each
    // with the records its transaction forwarded.
    let committed = |filter: &FilterProcess| -> u64 {
        let logs = filter.logs();
        let lines = logs.lines().filter(|l| l.contains("commit=committed"));
        let forwarded = lines.filter_map(|l| l.split(" forwarded=").nth(1)?.split(' ').next()?.parse::<u64>().ok());
        forwarded.sum()
    };
    // Until `n` records so committed, the filter's exit, or `timeout`.
    let wait_committed = |filter: &mut FilterProcess, n: u64, timeout: Duration| {
        let deadline = Instant::now() + timeout;
        while committed(filter) < n && filter.running() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(200));
        }
        assert_eq!(committed(filter), n, "{}", filter.logs());
    };
    given.produce_records(&on_partition_0(0..100), Duration::ZERO);
    wait_committed(&mut filter, 100, Duration::from_secs(60));

    // When: the group coordinator answers TxnOffsetCommit "still loading" for over 30 s.
    m.cluster.request_errors(
        RDKafkaApiKey::TxnOffsetCommit,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS; 70],
    );
    let injected = Instant::now();
    given.produce_records(&on_partition_0(100..200), Duration::ZERO);

    // Then: the filter waits it out, keeps its transaction and commits the second hundred, once.
    wait_committed(&mut filter, 200, Duration::from_secs(90));
    let logs = filter.logs();
    assert!(filter.running(), "{logs}");
    assert!(!logs.contains("aborted"), "{logs}");
    assert!(
        injected.elapsed() > Duration::from_secs(30),
        "the coordinator's refusals lasted longer than a first attempt's 30 s: {:?}",
        injected.elapsed()
    );
    given.stop(filter);
}

/// Issue 12, case 5: a side topic that refuses copies (here: the broker answers every produce
/// request with an authorisation error, three times; all records go to the dead-letter topic)
/// halts the partition instead of stopping the process: nothing is committed past the refused
/// record, `/readyz` names the cause, the refusals are counted, and the copies are sent again
/// with back-off until the broker takes them; then the partition runs on, and each record is in
/// the dead-letter topic once.
#[test]
fn refused_side_copies_halt_the_partition_and_are_retried() {
    let m = mock(1, &[("in", 1), ("out", 1), ("dlq", 1)]);
    let mut given = m.scenario(1);
    given.spec.fingerprint =
        "[fingerprint]\nsource = \"header:id\"\non_missing = \"dead_letter\"\ndead_letter_topic = \"dlq\"\n".into();
    let records: Vec<Raw> = (0..20).map(|i| raw(None, Some(&i.to_string()), &[])).collect();
    given.produce_raw(0, &records);

    // When: the filter's produce requests (its first ones: it forwards nothing to the output)
    // fail three times.
    m.cluster.request_errors(
        RDKafkaApiKey::Produce,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED; 3],
    );
    let mut filter = given.start();

    // Then: the partition halts, /readyz names the cause, nothing is committed.
    filter.wait_metric(
        "kafka_dedup_side_copies_refused_total",
        &["side=\"dead_letter\""],
        1.0,
        Duration::from_secs(60),
    );
    let (code, body) = http_get(&filter.http, "/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("halted") && body.contains("dlq"), "{body}");
    assert_eq!(
        metric(&filter.scrape(), "kafka_dedup_partition_state", &["state=\"halted\""]),
        1.0
    );
    let c = given.committed(0).unwrap_or(0);
    assert_eq!(c, 0, "nothing committed past the refused record");

    // Then: the broker takes them on a retry: everything is committed, each copy is there once.
    given.wait_done(&filter);
    assert!(filter.running(), "{}", filter.logs());
    filter.wait_ready(Duration::from_secs(30));
    given.stop(filter);
    let dead: Vec<Option<Vec<u8>>> = given.broker.read_records("dlq", 1)[&0]
        .iter()
        .map(|r| r.value.clone())
        .collect();
    let want: Vec<Option<Vec<u8>>> = records.iter().map(|r| r.value.clone()).collect();
    assert_eq!(dead, want);
    assert!(given.output_records()[&0].is_empty());
}

/// Issue 12, case 5, refused by the producer itself: a record that fits `message.max.bytes` but
/// whose dead-letter copy (with its provenance headers) does not. The partition halts (the
/// process stays up, `/readyz` names it); a stop hands it over cleanly at once, committing up
/// to the refused record; with the limit raised, the next start sends the copy and goes on.
#[test]
fn side_copy_refused_by_the_producer_halts_until_restarted() {
    let m = mock(1, &[("in", 1), ("out", 1), ("dlq", 1)]);
    let mut given = m.scenario(1);
    // The output copy must fit `message.max.bytes` and the dead-letter copy (with its two
    // headers) not: without a provenance header on the output copy the sizes say so.
    given.spec.provenance = false;
    given.spec.fingerprint =
        "[fingerprint]\nsource = \"header:id\"\non_missing = \"dead_letter\"\ndead_letter_topic = \"dlq\"\n".into();
    let big = "x".repeat(940);
    let records = vec![
        raw(None, Some(&big), &[("id", "a")]),
        raw(None, Some(&big), &[]),
        raw(None, Some(&big), &[("id", "b")]),
    ];
    given.produce_raw(0, &records);

    // When: a filter runs whose `message.max.bytes` the dead-letter copy exceeds.
    let mut limited = given.spec.clone();
    limited.env.push((
        "KAFKA_DEDUP__KAFKA__PROPERTIES__MESSAGE_MAX_BYTES".into(),
        "1000".into(),
    ));
    let mut filter = limited.start(given.path());

    // Then: the partition halts at offset 1; a stop hands it over at once, committed up to it.
    filter.wait_metric(
        "kafka_dedup_side_copies_refused_total",
        &["side=\"dead_letter\""],
        1.0,
        Duration::from_secs(60),
    );
    let (code, body) = http_get(&filter.http, "/readyz").unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(body.contains("halted") && body.contains("offset 1"), "{body}");
    filter.wait_metric(FORWARDED, &[], 1.0, Duration::from_secs(30));
    let stop = Instant::now();
    given.stop(filter);
    assert!(
        stop.elapsed() < Duration::from_secs(30),
        "the hand-over waited for the refused copy"
    );
    assert_eq!(given.committed(0), Some(1), "committed up to the refused record");

    // When: a start with the limit raised; then: the copy is sent and the partition goes on.
    given.stop(given.run_to_end());
    assert_eq!(given.output_records()[&0], vec![records[0].clone(), records[2].clone()]);
    let dead = given.broker.read_records("dlq", 1);
    assert_eq!(dead[&0].len(), 1);
    assert_eq!(dead[&0][0].value, records[1].value);
}

/// The output unwritable for longer than `max.poll.interval.ms` (here 6 s; the output's leader
/// down for 20 s) with the producer's queue full (100 messages): the poll thread must not wait
/// inside the producer for all that time. It would stop serving the group, which would take the
/// partitions away while this process's producer still holds their records (they would land
/// after the next owner re-read the output). Instead the partitions pause while the queue is
/// full and resume when it drains: the filter never leaves the group, and every record comes
/// out once, in order.
#[test]
fn a_long_output_outage_pauses_without_leaving_the_group() {
    output_outage("QUEUE_BUFFERING_MAX_MESSAGES", "100");
}

/// The same with the producer's queue full by its size (`queue.buffering.max.kbytes` = 1: about
/// 250 of these 4-byte values) far below half its message limit (100,000 by default): the
/// partitions resumed at once (the queue was "drained to half" of its message limit), and each
/// resume took a record that waited a second for room and paused them again, a pause and a
/// resume a second while the output was away. Found by a reviewer reading librdkafka. Now they
/// stay paused until the queue has drained to half of what it held.
#[test]
fn an_output_outage_with_the_queue_full_by_its_size_pauses_once() {
    output_outage("QUEUE_BUFFERING_MAX_KBYTES", "1");
}

/// The output's broker down for 20 s with 2,000 records waiting and the producer's queue limited
/// by `[kafka.properties]` `limit` (its environment variable's tail) = `value`.
fn output_outage(limit: &str, value: &str) {
    use rdkafka::mocking::MockCoordinator;
    let m = mock(2, &[("in", 2), ("out", 2)]);
    for p in 0..2 {
        m.cluster.partition_leader("in", p, Some(1)).unwrap();
        m.cluster.partition_leader("out", p, Some(2)).unwrap();
    }
    let mut given = m.scenario(2);
    given.spec.env.extend([
        (format!("KAFKA_DEDUP__KAFKA__PROPERTIES__{limit}"), value.to_string()),
        (
            "KAFKA_DEDUP__KAFKA__PROPERTIES__MAX_POLL_INTERVAL_MS".to_string(),
            "6000".to_string(),
        ),
    ]);
    m.cluster
        .coordinator(MockCoordinator::Group(given.spec.group.clone()), 1)
        .unwrap();
    let mut filter = given.start_ready();
    given.produce(0..1000);
    filter.wait_metric(FORWARDED, &[], 1000.0, Duration::from_secs(60));

    // When: the output's broker is down for 20 s (past max.poll.interval.ms) with 2,000 more
    // records waiting.
    m.cluster.broker_down(2).unwrap();
    given.produce(1000..3000);
    let resumed = "partitions resumed";
    std::thread::sleep(Duration::from_secs(5));
    let paused = filter.logs();
    assert!(paused.contains("partitions paused until it drains"), "{paused}");
    std::thread::sleep(Duration::from_secs(15));
    assert!(filter.running(), "the filter waits out the outage:\n{}", filter.logs());
    let during = filter.logs();
    m.cluster.broker_up(2).unwrap();

    // Then: it paused instead of leaving the group, and stayed paused while nothing could drain
    // (the queue full from the 5th second on: no resume in the next 15); every value is there
    // once, in order, each counted once (a record the full queue gave back is taken again when
    // it resumes).
    assert_eq!(
        during.matches(resumed).count(),
        paused.matches(resumed).count(),
        "resumed while the output was away:\n{during}"
    );
    given.wait_done(&filter);
    let scrape = filter.scrape();
    let filter = given.stop(filter);
    let logs = filter.logs();
    assert!(!logs.contains("assignment lost"), "{logs}");
    given.then_once_in_order(3000);
    assert_eq!(
        metric(&scrape, "kafka_dedup_records_consumed_total", &[]),
        3000.0,
        "{scrape}"
    );
}

/// Found by an adversary reading librdkafka (librdkafka issue #5260): the Java producer sizes a
/// compressed batch by its estimated compressed size, and the broker checks `max.message.bytes`
/// against the compressed batch, so highly compressible records make batches of a few KB on the
/// wire and over 100 MB decompressed. librdkafka's consumer gave up decompressing a batch past
/// `receive.message.max.bytes` (100 MB by default) with `_BAD_COMPRESSION` and fetched it again
/// for ever: the partition stopped there, `/readyz` ready, no record of it reaching the filter
/// (so neither a halt nor `input.skip` could get past it). The consumers now default to
/// librdkafka's largest size (`kafka::RECEIVE_MAX_BYTES`). Here the upstream batch is made with
/// librdkafka's producer, its `batch.size` and `message.max.bytes` raised (it counts
/// uncompressed bytes): 1,100 records of 100 KB of one character, one zstd batch of about 110 MB
/// decompressed, 17 KB on the wire.
#[test]
fn an_input_batch_over_100_mb_decompressed_is_consumed() {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    let m = mock(1, &[("in", 2), ("out", 2)]);
    let mut given = m.scenario(2);
    let mut filter = given.start_ready();
    given.produce(0..100);
    filter.wait_metric(FORWARDED, &[], 100.0, Duration::from_secs(60));

    // When: upstream writes one highly compressible zstd batch to partition 0, then more records.
    let mut c = given.broker.client();
    c.set("compression.type", "zstd")
        .set("linger.ms", "5000")
        .set("batch.num.messages", "100000")
        .set("batch.size", "200000000")
        .set("message.max.bytes", "200000000");
    let producer: ThreadedProducer<_> = c.create().unwrap();
    let pad = "x".repeat(100_000);
    for i in 0..1100 {
        let v = format!("big-{i}-{pad}");
        producer
            .send(BaseRecord::<[u8], [u8]>::to("in").partition(0).payload(v.as_bytes()))
            .map_err(|(e, _)| e)
            .unwrap();
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    drop(producer);
    given.produce(100..200);

    // Then: partition 0 forwards the batch and what follows it (50 + 1,100 + 50), partition 1 its
    // 100.
    filter.wait_metric(FORWARDED, &["partition=\"1\""], 100.0, Duration::from_secs(60));
    filter.wait_metric(FORWARDED, &["partition=\"0\""], 1200.0, Duration::from_secs(90));
    let filter = given.stop(filter);
    let logs = filter.logs();
    assert!(!logs.contains("Decompression"), "{logs}");
}

/// Found reading librdkafka: it starts fetching an assigned partition once its own fetch of the
/// group's committed offsets for the assignment has answered, and seeks only a partition it
/// fetches (`_STATE` otherwise). When that fetch fails with an error it does not retry (here one
/// `GROUP_AUTHORIZATION_FAILED`, as while ACLs change; the filter asks nothing before it is
/// assigned, so the first OffsetFetch is librdkafka's), the partition stays unstarted until the
/// next assignment: the filter's own fetch succeeded, its seek failed, and the partition
/// recovered again every 2 s for ever, forwarding nothing. Now after 30 s of failed seeks the
/// process exits 1 naming the cause, and the restart, a new member with a new assignment,
/// forwards every record once.
#[test]
fn a_partition_librdkafka_never_starts_stops_the_process() {
    let m = mock(1, &[("in", 1), ("out", 1)]);
    let mut given = m.scenario(1);
    given.produce(0..100);

    // When: the group coordinator refuses the first OffsetFetch once.
    m.cluster.request_errors(
        RDKafkaApiKey::OffsetFetch,
        &[RDKafkaRespErr::RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED],
    );
    let mut filter = given.start();

    // Then: it stops, saying why, and the next start forwards every record once.
    let status = filter.wait_exit(Duration::from_secs(90));
    let logs = filter.logs();
    assert_eq!(status.code(), Some(1), "{logs}");
    assert!(logs.contains("librdkafka has not started fetching it"), "{logs}");
    let mut filter = given.start();
    filter.wait_metric(FORWARDED, &[], 100.0, Duration::from_secs(60));
    given.stop(filter);
    given.then_once_in_order(100);
}

/// Issue 14, case 6: in `key` mode the commit's metadata names a position per output partition
/// and generation, about 9 bytes each here, and Kafka refuses metadata over
/// `offset.metadata.max.bytes` (4096 by default; the mock cluster does not enforce it, so the
/// test checks the size). At 1,000 output partitions the positions are left out of the commit
/// (`elided`); a restart without the store finds the generations in the output by record time
/// and still catches a replay of every record.
#[test]
fn key_mode_over_1000_output_partitions_commits_within_the_metadata_limit() {
    let m = mock(1, &[("in", 1), ("out", 1000)]);
    let mut given = m.scenario(1);
    given
        .spec
        .env
        .push(("KAFKA_DEDUP__OUTPUT__PARTITIONING".into(), "key".into()));
    // Replays keep their first copies' event time (as Flink's and Kafka Streams' sinks do), so
    // they stay within the horizon however long the first run takes.
    let stamp = kafka_dedup::generations::now_ms();
    given.produce_records_at(&on_partition_0(0..1000), stamp);
    given.stop(given.run_to_end());

    // Then: the commit's metadata fits Kafka's limit, the positions elided.
    let (_, metadata) = given.committed_with_metadata(0);
    assert!(
        metadata.len() <= 4096 && metadata.contains(r#""elided":"#),
        "{} bytes: {metadata}",
        metadata.len()
    );

    // When: the store is lost and upstream replays everything; then: each record once.
    std::fs::remove_dir_all(&given.spec.store).unwrap();
    given.produce_records_at(&on_partition_0(0..1100), stamp);
    let again = given.run_to_end();
    let scrape = again.scrape();
    let again = given.stop(again);
    let mut all: Vec<u64> = given.broker.read_values("out", 1000).into_values().flatten().collect();
    all.sort_unstable();
    assert_eq!(
        all,
        (0..1100).collect::<Vec<_>>(),
        "each record once:\n{}",
        again.logs()
    );
    assert_eq!(
        metric(&scrape, "kafka_dedup_store_rebuilds_total", &["reason=\"missing\""]),
        1.0,
        "{scrape}"
    );
}

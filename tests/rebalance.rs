//! Issue 14: ownership changes that never duplicate, on their failure paths. Each test is a
//! sequence of events in which a record could otherwise be forwarded twice or out of order.

mod common;

use std::time::{Duration, Instant};

use common::proxy::ProxiedBroker;
use common::*;
use kafka_dedup::scenario;

const CONSUMED: &str = "kafka_dedup_records_consumed_total";
const FORWARDED: &str = "kafka_dedup_records_forwarded_total";

fn values(range: std::ops::Range<u64>, partitions: i32) -> Vec<(i32, u64)> {
    range.map(|v| ((v % partitions as u64) as i32, v)).collect()
}

/// Case 2: a revocation whose acknowledgements do not come within `output.handover_timeout`.
/// Filter A owns both partitions; the proxy then holds everything A's producer sends (a network
/// that silently loses its requests), A takes 200 more records, and B joins, so the group
/// revokes a partition from A. A's hand-over times out after 3 s. A must drop what its producer
/// holds and exit 1: had it released the partition and gone on, its producer would retry the
/// lost requests on a new connection once they time out (10 s), landing A's copies after B
/// (fence wait 2 s) has re-read the output and forwarded the same records.
#[test]
fn a_handover_that_times_out_drops_what_the_producer_holds_and_exits() {
    let own = ProxiedBroker::start();
    let kafka = own.broker();
    let dir = tempfile::tempdir().unwrap();
    kafka.create_topic("in", 2);
    kafka.create_topic("out", 2);
    let mut spec = FilterSpec::on(kafka.clone(), "in", "out", dir.path());
    spec.fence_wait = "2s";
    spec.env.extend([
        ("KAFKA_DEDUP__OUTPUT__HANDOVER_TIMEOUT".to_string(), "3s".to_string()),
        (
            "KAFKA_DEDUP__KAFKA__PROPERTIES__REQUEST_TIMEOUT_MS".to_string(),
            "10000".to_string(),
        ),
    ]);
    let written = values(0..600, 2);
    kafka.produce_values("in", &written[..400], Duration::ZERO);
    let mut a_spec = spec.clone();
    a_spec.store = dir.path().join("store-a");
    let mut a = a_spec.start(dir.path());
    a.wait_metric(FORWARDED, &[], 400.0, Duration::from_secs(60));

    assert!(own.proxy.hold_producers() >= 1, "A's producer connection is held");
    kafka.produce_values("in", &written[400..], Duration::ZERO);
    a.wait_metric(CONSUMED, &[], 600.0, Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(30);
    while own.proxy.held_produce_requests() == 0 {
        assert!(Instant::now() < deadline, "no produce request held:\n{}", a.logs());
        std::thread::sleep(Duration::from_millis(50));
    }

    let mut b_spec = spec.clone();
    b_spec.store = dir.path().join("store-b");
    let mut b = b_spec.start(dir.path());
    // Give A's producer time to retry on a new connection (10 s request timeout), had A gone on.
    let deadline = Instant::now() + Duration::from_secs(30);
    while a.running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let live: Vec<&FilterProcess> = if a.running() { vec![&a, &b] } else { vec![&b] };
    wait_drained(&b_spec, 2, &live, Duration::from_secs(120), || b.logs());
    let v = scenario::verify(&written, &kafka.read_values("out", 2));
    assert!(b.terminate().success(), "{}", b.logs());
    let alogs = a.logs();
    assert!(
        v.ok() && v.output_records == 600,
        "{v:?}\nA:\n{alogs}\nB:\n{}",
        b.logs()
    );
    let status = a.wait_exit(Duration::from_secs(30));
    assert_eq!(status.code(), Some(1), "A gives up and exits:\n{alogs}");
    assert!(alogs.contains("hand-over of partitions"), "{alogs}");
}

/// Case 2, lost assignment: the group takes a partition away without a hand-over while records
/// of it are not yet acknowledged, and gives it back to the same live process. Filter A (6 s
/// session) forwards 300 records; the proxy then holds what A's producer sends, A takes 200
/// more, and A is frozen (SIGSTOP) for 10 s: the group expires it. When it wakes up its
/// assignment is lost. A must drop what its producer holds and exit 1: had it gone on, it would
/// get the partition back, re-read the output (without the held records) and forward them, and
/// its producer would then retry the held requests on a new connection (10 s request timeout),
/// landing a second copy.
#[test]
fn a_lost_assignment_with_records_in_flight_drops_them_and_exits() {
    let own = ProxiedBroker::start();
    let kafka = own.broker();
    let dir = tempfile::tempdir().unwrap();
    kafka.create_topic("in", 1);
    kafka.create_topic("out", 1);
    let mut spec = FilterSpec::on(kafka.clone(), "in", "out", dir.path()).killable();
    spec.fence_wait = "2s";
    spec.env.push((
        "KAFKA_DEDUP__KAFKA__PROPERTIES__REQUEST_TIMEOUT_MS".to_string(),
        "10000".to_string(),
    ));
    let written = values(0..500, 1);
    kafka.produce_values("in", &written[..300], Duration::ZERO);
    let mut a = spec.start(dir.path());
    a.wait_metric(FORWARDED, &[], 300.0, Duration::from_secs(60));
    assert!(own.proxy.hold_producers() >= 1, "A's producer connection is held");
    kafka.produce_values("in", &written[300..], Duration::ZERO);
    a.wait_metric(CONSUMED, &[], 500.0, Duration::from_secs(60));
    let deadline = Instant::now() + Duration::from_secs(30);
    while own.proxy.held_produce_requests() == 0 {
        assert!(Instant::now() < deadline, "no produce request held:\n{}", a.logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    a.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_secs(10));
    a.signal(libc::SIGCONT);
    // Had A gone on, it would have the partition back and its retries would land by now.
    let deadline = Instant::now() + Duration::from_secs(40);
    while a.running() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let alogs = a.logs();
    let mut b = None;
    if !a.running() {
        let mut b_spec = spec.clone();
        b_spec.store = dir.path().join("store-b");
        b = Some(b_spec.start(dir.path()));
    }
    let live: Vec<&FilterProcess> = b.iter().chain(a.running().then_some(&a)).collect();
    wait_drained(&spec, 1, &live, Duration::from_secs(120), || alogs.clone());
    let v = scenario::verify(&written, &kafka.read_values("out", 1));
    assert!(v.ok() && v.output_records == 500, "{v:?}\nA:\n{alogs}");
    let status = a.wait_exit(Duration::from_secs(5));
    assert_eq!(status.code(), Some(1), "A gives up and exits:\n{alogs}");
    assert!(alogs.contains("assignment of partitions [0] lost"), "{alogs}");
    if let Some(mut b) = b {
        assert!(b.terminate().success(), "{}", b.logs());
    }
}

//! Issue 22 item 7: the HTTP surface under a flood of `/store/lookup` requests. The live
//! questions wait in a bounded queue (`http::LIVE_QUEUE`): past it a request is answered 503 at
//! once, so a flood neither grows the process's memory nor keeps the pipeline thread from
//! forwarding.

mod common;

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;

const FORWARDED: &str = "kafka_dedup_records_forwarded_total";

/// Resident set size of process `pid`, in bytes (`VmRSS` of `/proc/PID/status`).
fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// The bound the test states for the filter's memory during the flood: the debug build at rest
/// takes about 40 MiB here; the queue of 16 questions and 64 open connections add little.
const RSS_BOUND: u64 = 256 << 20;

/// 64 clients send lookups as fast as they are answered while 20,000 records are forwarded:
/// some are refused with 503 (the queue is full), every record is forwarded, and the process's
/// RSS stays under [`RSS_BOUND`] throughout.
#[test]
fn a_lookup_flood_is_refused_past_the_queue_and_forwarding_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("flood-in"), unique("flood-out"));
    kafka().create_topic(&input, 2);
    kafka().create_topic(&output, 2);
    let spec = FilterSpec::new(&input, &output, dir.path());
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));

    let stop = Arc::new(AtomicBool::new(false));
    let (answered, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let clients: Vec<_> = (0..64)
        .map(|i| {
            let (stop, answered, refused, http) =
                (stop.clone(), answered.clone(), refused.clone(), filter.http.clone());
            std::thread::spawn(move || {
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    n += 1;
                    match http_get(&http, &format!("/store/lookup?value={}", i * 1_000_000 + n)) {
                        Some((200, _)) => answered.fetch_add(1, Ordering::Relaxed),
                        Some((503, body)) if body.contains("already wait") => refused.fetch_add(1, Ordering::Relaxed),
                        other => panic!("unexpected answer: {other:?}"),
                    };
                }
            })
        })
        .collect();

    let records: Vec<(i32, u64)> = (0..20_000).map(|v| ((v % 2) as i32, v)).collect();
    kafka().produce_values(&input, &records, Duration::ZERO);
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut peak = 0;
    loop {
        peak = peak.max(rss_bytes(filter.pid()));
        assert!(
            peak < RSS_BOUND,
            "RSS {peak} bytes during the flood:\n{}",
            filter.logs()
        );
        let forwarded = metric(&filter.scrape(), FORWARDED, &[]);
        if forwarded >= 20_000.0 && refused.load(Ordering::Relaxed) > 0 {
            break;
        }
        assert!(filter.running(), "kafka-dedup exited:\n{}", filter.logs());
        assert!(
            Instant::now() < deadline,
            "forwarded {forwarded} of 20000, {} lookups answered, {} refused:\n{}",
            answered.load(Ordering::Relaxed),
            refused.load(Ordering::Relaxed),
            filter.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, Ordering::Relaxed);
    for c in clients {
        c.join().unwrap();
    }
    assert!(answered.load(Ordering::Relaxed) > 0, "no lookup was answered");
    eprintln!(
        "answered {}, refused {}, peak RSS {} MiB",
        answered.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed),
        peak >> 20
    );
    let out: usize = kafka().read_values(&output, 2).values().map(Vec::len).sum();
    assert_eq!(out, 20_000, "every record forwarded once");
    assert!(filter.terminate().success(), "{}", filter.logs());
}

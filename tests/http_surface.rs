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

/// GET `path` from `addr` with `Authorization: Bearer token`; (status code, body).
fn get_with_token(addr: &str, path: &str, token: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.0\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\r\n"
    )
    .unwrap();
    let mut buf = String::new();
    s.read_to_string(&mut buf).unwrap();
    let code = buf.split_whitespace().nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    (
        code,
        buf.split_once("\r\n\r\n")
            .map(|(_, b)| b.to_string())
            .unwrap_or_default(),
    )
}

/// With `http.store_token` set (by the environment, as a secret is), `/store/*` answer only a
/// caller that sends it, even on a loopback address; `/metrics`, `/healthz` and `/readyz` need
/// none; the token is not in the start-up log.
#[test]
fn store_routes_need_the_token_when_one_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("token-in"), unique("token-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    spec.env
        .push(("KAFKA_DEDUP__HTTP__STORE_TOKEN".into(), "s3cret-7f2a".into()));
    let mut filter = spec.start(dir.path());
    filter.wait_ready(Duration::from_secs(60));
    for path in ["/store/lookup?value=1", "/store/stats"] {
        let (code, body) = http_get(&filter.http, path).unwrap();
        assert_eq!(code, 401, "{path}: {body}");
        assert!(body.contains("http.store_token"), "{body}");
        assert_eq!(get_with_token(&filter.http, path, "wrong").0, 401, "{path}");
        let (code, body) = get_with_token(&filter.http, path, "s3cret-7f2a");
        assert_eq!(code, 200, "{path}: {body}");
    }
    for path in ["/metrics", "/healthz", "/readyz"] {
        assert_eq!(http_get(&filter.http, path).map(|(c, _)| c), Some(200), "{path}");
    }
    assert!(filter.terminate().success(), "{}", filter.logs());
    assert!(!filter.logs().contains("s3cret-7f2a"), "the token was logged");
}

/// On `0.0.0.0` (the container image's address) without a token, `/store/*` answer 403 and the
/// health and metrics routes stay open.
#[test]
fn store_routes_are_closed_on_all_interfaces_without_a_token() {
    let dir = tempfile::tempdir().unwrap();
    let (input, output) = (unique("closed-in"), unique("closed-out"));
    kafka().create_topic(&input, 1);
    kafka().create_topic(&output, 1);
    let mut spec = FilterSpec::new(&input, &output, dir.path());
    let port = free_port();
    spec.env
        .push(("KAFKA_DEDUP__HTTP__LISTEN".into(), format!("0.0.0.0:{port}")));
    let mut filter = spec.start(dir.path());
    filter.http = format!("127.0.0.1:{port}");
    filter.wait_ready(Duration::from_secs(60));
    for path in ["/store/lookup?value=1", "/store/stats"] {
        let (code, body) = http_get(&filter.http, path).unwrap();
        assert_eq!(code, 403, "{path}: {body}");
        assert!(body.contains("loopback"), "{body}");
    }
    assert_eq!(http_get(&filter.http, "/metrics").map(|(c, _)| c), Some(200));
    assert!(filter.terminate().success(), "{}", filter.logs());
}

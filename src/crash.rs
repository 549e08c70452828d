//! Crash points for the crash-safety tests. Setting `KAFKA_DEDUP_CRASH_AT=<point>` (or
//! `<point>:<n>` for the n-th time it is reached) makes the process abort at that point, as if it
//! were killed: no hand-over, no flush, no destructors. Unset, each point costs one atomic load.
//!
//! Points: `after-produce` (a record was handed to the producer), `after-ack` (an
//! acknowledgement was applied), `checkpoint-before-store`
//! (generations rotated, nothing stored), `checkpoint-before-commit` (store written, offsets not
//! committed), `offsets-committed` (the group coordinator confirmed an offset commit reported to
//! the consumer's commit callback; after a periodic checkpoint's, the store holds exactly the
//! committed checkpoint), `handover-before-commit` (revocation or shutdown:
//! store written, offsets not committed). Route stage of the global scope: `route-after-produce`
//! (a copy was handed to the producer), `route-committed` (input offsets committed).
//!
//! Panic points ([`panic_point`]) panic instead of aborting, to test that a panic is caught:
//! `recovery` (a recovery worker, before it reads anything; `recovery:2` the second attempt,
//! `recovery:1+` every attempt), `route` (the route stage of the global scope, as it starts).
//! `<point>:<n>+` fires the n-th time and every time after.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Environment variable naming the crash point.
pub const ENV: &str = "KAFKA_DEDUP_CRASH_AT";

struct Armed {
    point: String,
    nth: u64,
    /// `<point>:<n>+`: every time from the n-th on.
    onwards: bool,
    hits: AtomicU64,
}

fn armed() -> &'static Option<Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED.get_or_init(|| {
        let v = std::env::var(ENV).ok()?;
        let (point, nth) = match v.split_once(':') {
            Some((p, n)) => (p.to_string(), n.to_string()),
            None => (v, "1".to_string()),
        };
        let onwards = nth.ends_with('+');
        Some(Armed {
            point,
            nth: nth.trim_end_matches('+').parse().unwrap_or(1u64).max(1),
            onwards,
            hits: AtomicU64::new(0),
        })
    })
}

/// True when `point` is armed and reached for the configured time.
fn reached(point: &str) -> bool {
    armed().as_ref().is_some_and(|a| {
        a.point == point && {
            let hit = a.hits.fetch_add(1, Ordering::Relaxed) + 1;
            hit == a.nth || (a.onwards && hit > a.nth)
        }
    })
}

/// Aborts the process if `point` is armed and reached for the configured time.
#[inline]
pub fn point(point: &str) {
    if reached(point) {
        eprintln!("kafka-dedup: crash point {point} reached ({ENV}); aborting");
        std::process::abort();
    }
}

/// Panics (on the calling thread) if `point` is armed and reached for the configured time.
#[inline]
pub fn panic_point(point: &str) {
    if reached(point) {
        panic!("kafka-dedup: panic point {point} reached ({ENV})");
    }
}

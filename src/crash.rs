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
//! (a copy was handed to the producer), `route-before-commit` (a periodic or hand-over commit
//! about to move input offsets past acknowledged copies: they are made again after the crash),
//! `route-committed` (input offsets committed).
//!
//! Panic points ([`panic_point`]) panic instead of aborting, to test that a panic is caught:
//! `recovery` (a recovery worker, before it reads anything; `recovery:2` the second attempt,
//! `recovery:1+` every attempt), `route` (the route stage of the global scope, as it starts).
//! `<point>:<n>+` fires the n-th time and every time after. Signal point ([`segv_point`]):
//! `segv` (raises SIGSEGV on the topics watcher's thread as it starts, [`crate::topics::watch`]).
//!
//! [`say_fatal_signals`] makes a crash in native code say so on stderr before the process ends.

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

/// Signal point: raises SIGSEGV (as a crash in native code would) if `point` is armed and
/// reached, to test [`say_fatal_signals`].
#[inline]
pub fn segv_point(point: &str) {
    if reached(point) {
        // SAFETY: raise(3) has no preconditions.
        unsafe { libc::raise(libc::SIGSEGV) };
    }
}

/// The signals a crash in native code (librdkafka) ends the process with.
const FATAL_SIGNALS: [libc::c_int; 4] = [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE];

/// The handlers installed before [`say_fatal_signals`] (Rust's stack-overflow reporter for
/// SIGSEGV and SIGBUS), restored by the handler; indexed as [`FATAL_SIGNALS`].
static PREVIOUS: [OnceLock<libc::sigaction>; 4] = [OnceLock::new(), OnceLock::new(), OnceLock::new(), OnceLock::new()];

/// Makes a crash in native code say so: on SIGSEGV, SIGBUS, SIGILL or SIGFPE one line goes to
/// stderr ("kafka-dedup: fatal signal SIGSEGV ..."), then the signal takes its course (exit
/// status 128 + the signal: 139 for SIGSEGV), so the process does not die without a word (issue
/// 23: librdkafka crashed in its metadata cache, exit 139, nothing in the log). The handler only
/// calls async-signal-safe functions: write(2), sigaction(2) to put back the previous handler
/// (for a fault, returning re-runs the faulting instruction, which then meets it), and for a
/// signal sent rather than caused (`si_code <= 0`), the default action and raise(3).
pub fn say_fatal_signals() {
    extern "C" fn on_fatal(sig: libc::c_int, info: *mut libc::siginfo_t, _: *mut libc::c_void) {
        let msg: &[u8] = match sig {
            libc::SIGSEGV => {
                b"kafka-dedup: fatal signal SIGSEGV (a crash in native code, likely librdkafka); exiting\n"
            }
            libc::SIGBUS => b"kafka-dedup: fatal signal SIGBUS (a crash in native code, likely librdkafka); exiting\n",
            libc::SIGILL => b"kafka-dedup: fatal signal SIGILL (a crash in native code); exiting\n",
            _ => b"kafka-dedup: fatal signal SIGFPE (a crash in native code); exiting\n",
        };
        // SAFETY: write(2), sigaction(2), signal(2) and raise(3) are async-signal-safe; `info` is
        // the kernel's siginfo for this delivery; PREVIOUS is only read here.
        unsafe {
            libc::write(2, msg.as_ptr().cast(), msg.len());
            let i = FATAL_SIGNALS.iter().position(|s| *s == sig).unwrap_or(0);
            match PREVIOUS[i].get() {
                Some(old) => libc::sigaction(sig, old, std::ptr::null_mut()),
                None => libc::sigaction(sig, std::ptr::null(), std::ptr::null_mut()),
            };
            if info.is_null() || (*info).si_code <= 0 {
                libc::signal(sig, libc::SIG_DFL);
                libc::raise(sig);
            }
        }
    }
    for (i, sig) in FATAL_SIGNALS.into_iter().enumerate() {
        // SAFETY: sigaction(2) with a zeroed, then filled, struct; the old action is copied out.
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction =
                on_fatal as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) as usize;
            action.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK;
            libc::sigemptyset(&mut action.sa_mask);
            let mut old: libc::sigaction = std::mem::zeroed();
            if libc::sigaction(sig, &action, &mut old) == 0 {
                let _ = PREVIOUS[i].set(old);
            }
        }
    }
}

//! What librdkafka's clients report, logged at a bounded rate: their errors
//! (`ClientContext::error`) and their log lines (`ClientContext::log`), each kind at most once per
//! [`ERROR_LOG_EVERY`] per client ([`Throttle`]), the next line saying how many were left out.
//!
//! Why: while a broker is down librdkafka reports the same failure several times a second per
//! client, and a client nobody polls (the topics watcher) queues its errors and hands them over
//! in a burst: a new user stopping kafka-dedup with the broker gone got 152 identical
//! `AllBrokersDown` lines within 8 ms, and a `FAIL ... Connection refused` line every few
//! seconds from each broker thread (`tests/ops.rs`,
//! `stopping_with_the_broker_gone_logs_client_errors_at_a_bounded_rate`). Every context of
//! kafka-dedup logs through here; [`Logged`] is the context of its helper clients (the topics
//! watcher, admin clients, the changelog's producer). `/readyz` still sees each error at once
//! (the filter's contexts note it before they log).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use tracing::{debug, error, info, warn};

/// How often one kind of client error or log line is logged at most, per client. While a broker
/// is down librdkafka reports the same failure several times a second per client (about 6 lines
/// a second before this bound).
pub const ERROR_LOG_EVERY: Duration = Duration::from_secs(30);

/// How many kinds one [`Throttle`] remembers; past it, it forgets them all and starts over.
const KINDS_MAX: usize = 1024;

/// Admits each kind of client error or log line at most once per [`ERROR_LOG_EVERY`]; the next
/// one admitted says how many were left out meanwhile.
#[derive(Default)]
pub struct Throttle {
    /// Per kind: when it was last logged, and how many occurrences were left out since.
    seen: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Throttle {
    /// `Some(left out since the last line)` when an occurrence of `error` at `now` is to be
    /// logged, `None` when it is left out. Its kind: the error without librdkafka's varying
    /// explanation (`reason`).
    pub fn admit(&self, error: &KafkaError, now: Instant) -> Option<u64> {
        self.admit_kind(error.to_string(), now)
    }

    /// [`Self::admit`] for a kind named by the caller.
    pub fn admit_kind(&self, kind: String, now: Instant) -> Option<u64> {
        let mut seen = self.seen.lock().ok()?;
        if seen.len() >= KINDS_MAX && !seen.contains_key(&kind) {
            seen.clear(); // a bound on memory: the kinds seen start over
        }
        match seen.entry(kind) {
            Entry::Vacant(v) => {
                v.insert((now, 0));
                Some(0)
            }
            Entry::Occupied(mut o) => {
                let (last, left_out) = o.get_mut();
                if now.saturating_duration_since(*last) >= ERROR_LOG_EVERY {
                    let n = *left_out;
                    *o.get_mut() = (now, 0);
                    Some(n)
                } else {
                    *left_out += 1;
                    None
                }
            }
        }
    }
}

/// The kind of a librdkafka log line, for [`Throttle::admit_kind`]: its facility and message
/// less a closing parenthesis, where librdkafka puts what varies between two lines of one failure
/// (`FAIL ... Connection refused (after 0ms in state CONNECT, 3 identical error(s) suppressed)`),
/// and less its digits (offsets, ids, ports: a kind per number would grow a [`Throttle`] for
/// ever). Two brokers' lines of one failure are thus one kind; the bootstrap connection's
/// (`.../bootstrap`) and the coordinator's (`GroupCoordinator`) stay kinds of their own.
pub fn line_kind(fac: &str, message: &str) -> String {
    let stem = match message.rsplit_once(" (") {
        Some((stem, _)) if message.ends_with(')') => stem,
        _ => message,
    };
    let mut kind = format!("{fac} ");
    kind.extend(stem.chars().filter(|c| !c.is_ascii_digit()));
    kind
}

/// Logs a librdkafka line of a client kafka-dedup configured, as rust-rdkafka's default does
/// (its level mapped to tracing's), at most once per kind ([`line_kind`]) and `throttle` every
/// [`ERROR_LOG_EVERY`] (debug lines always); the configuration warning that
/// `enable.gapless.guarantee` is experimental goes to debug: kafka-dedup sets it on purpose
/// (`kafka::producer_config`); the retries of an idempotent producer's first id while the
/// coordinator loads go to info.
pub fn log_client_line(throttle: &Throttle, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
    if fac == "CONFWARN" && log_message.contains("enable.gapless.guarantee") {
        return debug!(target: "librdkafka", "librdkafka: {fac} {log_message} (set by kafka-dedup)");
    }
    if matches!(level, RDKafkaLogLevel::Debug) {
        return debug!(target: "librdkafka", "librdkafka: {fac} {log_message}");
    }
    // The idempotent producer's first InitProducerId, retried while a broker that just started
    // loads its transaction coordinator: transient, said at info (a new user read the warning
    // as a fault). Any other GETPID failure stays a warning.
    let level = if fac == "GETPID" && log_message.contains("load in progress") && log_message.ends_with("retrying") {
        RDKafkaLogLevel::Info
    } else {
        level
    };
    let Some(suppressed) = throttle.admit_kind(line_kind(fac, log_message), Instant::now()) else {
        return;
    };
    match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
            error!(target: "librdkafka", suppressed, "librdkafka: {fac} {log_message}")
        }
        RDKafkaLogLevel::Warning => warn!(target: "librdkafka", suppressed, "librdkafka: {fac} {log_message}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info | RDKafkaLogLevel::Debug => {
            info!(target: "librdkafka", suppressed, "librdkafka: {fac} {log_message}")
        }
    }
}

/// The context of kafka-dedup's helper clients (the topics watcher, admin clients, the
/// changelog's producer, recovery's look-ups): their errors and log lines at a bounded rate,
/// named by `what`. rust-rdkafka's default context logs every error at ERROR, unbounded.
pub struct Logged {
    /// Names the client in its lines (`topics watcher`, ...).
    what: &'static str,
    throttle: Throttle,
}

impl Logged {
    /// The context of the client `what`.
    pub fn new(what: &'static str) -> Self {
        Logged {
            what,
            throttle: Throttle::default(),
        }
    }
}

impl ClientContext for Logged {
    fn error(&self, error: KafkaError, reason: &str) {
        if let Some(suppressed) = self.throttle.admit(&error, Instant::now()) {
            warn!(client = self.what, error = %error, reason, suppressed, "kafka client error");
        }
    }

    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        log_client_line(&self.throttle, level, fac, log_message);
    }
}

impl rdkafka::consumer::ConsumerContext for Logged {}

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::RDKafkaErrorCode;

    /// Issue 16, item 6: one line per kind of error per [`ERROR_LOG_EVERY`], then one saying how
    /// many were left out; another kind is logged at once.
    #[test]
    fn the_same_error_is_logged_at_a_bounded_rate() {
        let t = Throttle::default();
        let down = KafkaError::Global(RDKafkaErrorCode::AllBrokersDown);
        let transport = KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure);
        let start = Instant::now();
        let at = |ms: u64| start + Duration::from_millis(ms);
        assert_eq!(t.admit(&down, at(0)), Some(0));
        let logged = (1..60).filter(|i| t.admit(&down, at(i * 166)).is_some()).count();
        assert_eq!(logged, 0, "ten seconds at six errors a second");
        assert_eq!(t.admit(&transport, at(10_000)), Some(0));
        assert_eq!(t.admit(&down, at(30_000)), Some(59));
        assert_eq!(t.admit(&down, at(30_001)), None);
    }

    /// A throttle remembers at most [`KINDS_MAX`] kinds: past it, it starts over (a kind is
    /// logged again at once), so its memory stays bounded whatever the lines say.
    #[test]
    fn a_throttle_forgets_past_its_bound() {
        let t = Throttle::default();
        let now = Instant::now();
        assert_eq!(t.admit_kind("first".into(), now), Some(0));
        assert_eq!(t.admit_kind("first".into(), now), None);
        for i in 1..KINDS_MAX {
            assert_eq!(t.admit_kind(format!("kind {i}"), now), Some(0));
        }
        assert_eq!(t.seen.lock().unwrap().len(), KINDS_MAX);
        assert_eq!(t.admit_kind("one more".into(), now), Some(0));
        assert_eq!(t.seen.lock().unwrap().len(), 1);
        assert_eq!(t.admit_kind("first".into(), now), Some(0), "forgotten, logged again");
    }

    /// Two lines of one failure are one kind (what varies is in the closing parenthesis, or a
    /// number); the bootstrap connection's and a broker's, or two failures, are two.
    #[test]
    fn a_log_line_kind_leaves_out_what_varies() {
        let refused = |thread: &str, tail: &str| {
            format!("[thrd:{thread}]: {thread}: Connect to ipv4#127.0.0.1:9092 failed: Connection refused ({tail})")
        };
        let connect = "after 0ms in state CONNECT";
        let b1 = "127.0.0.1:9092/1";
        // (facility, message) of two lines, and whether they are one kind.
        type Line = (&'static str, String);
        let cases: [(Line, Line, bool); 8] = [
            (
                ("FAIL", refused(b1, connect)),
                (
                    "FAIL",
                    refused(b1, "after 12ms in state CONNECT, 3 identical error(s) suppressed"),
                ),
                true,
            ),
            (
                ("FAIL", refused(b1, connect)),
                ("FAIL", refused("127.0.0.1:9092/bootstrap", connect)),
                false,
            ),
            (
                ("FAIL", refused(b1, connect)),
                ("FAIL", refused("127.0.0.1:9093/2", connect)),
                true,
            ),
            (
                ("OFFSET", "events [3]: offset reset (at offset 1042) to END".into()),
                ("OFFSET", "events [4]: offset reset (at offset 77) to END".into()),
                true,
            ),
            (
                ("FAIL", "[thrd:main]: Disconnected (after 852ms in state UP)".into()),
                (
                    "FAIL",
                    "[thrd:main]: Connection refused (after 0ms in state CONNECT)".into(),
                ),
                false,
            ),
            (
                ("SESSTMOUT", "Consumer group session timed out".into()),
                ("MAXPOLL", "Consumer group session timed out".into()),
                false,
            ),
            (("X", "no parenthesis".into()), ("X", "no parenthesis".into()), true),
            (
                ("X", "a (middle) part".into()),
                ("X", "a (middle) part, then".into()),
                false,
            ),
        ];
        for ((fa, ma), (fb, mb), same) in cases {
            assert_eq!(line_kind(fa, &ma) == line_kind(fb, &mb), same, "{ma} / {mb}");
        }
    }
}

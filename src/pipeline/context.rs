//! The librdkafka client contexts: how the clients' callbacks (acknowledgements, rebalances,
//! statistics, errors) reach the pipeline. Callbacks run on librdkafka's threads (the producer's
//! acknowledgements) or inside `poll` on the pipeline thread (everything of the consumer).

use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::statistics::Statistics;
use rdkafka::{Message, TopicPartitionList};
use tracing::{debug, error, info, warn};

use super::filter::Filter;
use super::halt::SideCopy;
use super::produce::{Acknowledgement, DeliveryEvent, DeliveryFailure};
use crate::config::Config;
use crate::status::Status;
use crate::telemetry;

/// Producer context: forwards every acknowledgement to the pipeline thread.
pub struct DeliveryContext {
    /// Where acknowledgements go; drained by [`Filter::tick`] on the pipeline thread. A mutex
    /// because the context is shared with librdkafka's threads and `Sender` is not `Sync`.
    tx: Mutex<Sender<DeliveryEvent>>,
    /// Receives client errors: the producer's background thread reports an authentication or
    /// TLS failure at once, with librdkafka's explanation (`/readyz`).
    status: Arc<Status>,
    /// Bounds how often the same error is logged.
    throttle: Throttle,
}

impl DeliveryContext {
    /// A context that sends acknowledgements to `tx` and client errors to `status`.
    pub(super) fn new(tx: Sender<DeliveryEvent>, status: Arc<Status>) -> Self {
        DeliveryContext {
            tx: Mutex::new(tx),
            status,
            throttle: Throttle::default(),
        }
    }
}

/// How often one kind of client error is logged at most. While a broker is down librdkafka
/// reports the same failure several times a second per client (about 6 lines a second before this
/// bound); each error still reaches `/readyz` at once, only its log line waits.
pub const ERROR_LOG_EVERY: Duration = Duration::from_secs(30);

/// Logs each kind of client error (its message without librdkafka's varying explanation) at most
/// once per [`ERROR_LOG_EVERY`]; the next line says how many were left out meanwhile.
#[derive(Default)]
pub struct Throttle {
    /// Per kind: when it was last logged, and how many occurrences were left out since.
    seen: Mutex<HashMap<String, (Instant, u64)>>,
}

impl Throttle {
    /// `Some(left out since the last line)` when an occurrence of `error` at `now` is to be
    /// logged, `None` when it is left out.
    pub fn admit(&self, error: &KafkaError, now: Instant) -> Option<u64> {
        let mut seen = self.seen.lock().ok()?;
        match seen.entry(error.to_string()) {
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

impl ClientContext for DeliveryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.status.note_client_error(&error, reason);
        if let Some(suppressed) = self.throttle.admit(&error, Instant::now()) {
            warn!(error = %error, reason, suppressed, "kafka producer error");
        }
    }

    /// librdkafka's log lines, as rust-rdkafka's default does, except the configuration warning
    /// that `enable.gapless.guarantee` is experimental: kafka-dedup sets it on purpose
    /// (`kafka::producer_config`), so it is logged at debug instead of at every start.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        log_client_line(level, fac, log_message);
    }
}

/// Logs a librdkafka line of a producer kafka-dedup configured, as rust-rdkafka's default does,
/// except the configuration warning that `enable.gapless.guarantee` is experimental: kafka-dedup
/// sets it on purpose (`kafka::producer_config`), so it is logged at debug.
pub fn log_client_line(level: RDKafkaLogLevel, fac: &str, log_message: &str) {
    if fac == "CONFWARN" && log_message.contains("enable.gapless.guarantee") {
        return debug!(target: "librdkafka", "librdkafka: {fac} {log_message} (set by kafka-dedup)");
    }
    match level {
        RDKafkaLogLevel::Emerg | RDKafkaLogLevel::Alert | RDKafkaLogLevel::Critical | RDKafkaLogLevel::Error => {
            error!(target: "librdkafka", "librdkafka: {fac} {log_message}")
        }
        RDKafkaLogLevel::Warning => warn!(target: "librdkafka", "librdkafka: {fac} {log_message}"),
        RDKafkaLogLevel::Notice | RDKafkaLogLevel::Info => {
            info!(target: "librdkafka", "librdkafka: {fac} {log_message}")
        }
        RDKafkaLogLevel::Debug => debug!(target: "librdkafka", "librdkafka: {fac} {log_message}"),
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        let result = match result {
            Ok(m) => Ok(Acknowledgement {
                partition: m.partition(),
                offset: m.offset(),
            }),
            Err((e, m)) => Err(DeliveryFailure {
                topic: m.topic().to_string(),
                error: e.clone(),
                copy: SideCopy::of_message(m),
            }),
        };
        if let Ok(tx) = self.tx.lock() {
            let _ = tx.send(DeliveryEvent { opaque, result });
        }
    }
}

/// Context of the consumer that checks the topics at start: client errors (authentication, TLS)
/// reach `/readyz` before the pipeline's own clients exist.
pub(super) struct StartupContext {
    /// Where client errors go.
    status: Arc<Status>,
    /// Bounds how often the same error is logged.
    throttle: Throttle,
}

impl StartupContext {
    /// A context reporting client errors to `status`.
    pub(super) fn new(status: Arc<Status>) -> Self {
        StartupContext {
            status,
            throttle: Throttle::default(),
        }
    }
}

impl ClientContext for StartupContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.status.note_client_error(&error, reason);
        if let Some(suppressed) = self.throttle.admit(&error, Instant::now()) {
            warn!(error = %error, reason, suppressed, "kafka client error");
        }
    }
}

impl ConsumerContext for StartupContext {}

/// Consumer context: rebalance callbacks reach the [`Filter`]; statistics feed lag and status.
pub struct FilterContext {
    /// The pipeline state; locked by the poll loop around each record and by callbacks.
    filter: Mutex<Filter>,
    /// Shared with the HTTP server: broker reachability, client errors, group joined.
    status: Arc<Status>,
    /// `input.topic`: rebalances and statistics name partitions of several topics.
    input_topic: String,
    /// Bounds how often the same error is logged.
    throttle: Throttle,
}

impl FilterContext {
    /// The context of the pipeline's consumer, owning `filter`.
    pub(super) fn new(filter: Filter, status: Arc<Status>, cfg: &Config) -> Self {
        FilterContext {
            filter: Mutex::new(filter),
            status,
            input_topic: cfg.input.topic.clone(),
            throttle: Throttle::default(),
        }
    }

    /// The pipeline state, locked. Panics if a holder panicked (the pipeline cannot go on).
    pub(super) fn lock(&self) -> MutexGuard<'_, Filter> {
        self.filter.lock().expect("not poisoned")
    }

    /// The input partitions named in `tpl`.
    fn input_partitions(&self, tpl: &TopicPartitionList) -> Vec<i32> {
        tpl.elements_for_topic(&self.input_topic)
            .iter()
            .map(|e| e.partition())
            .collect()
    }
}

impl ClientContext for FilterContext {
    fn stats(&self, stats: Statistics) {
        let up = stats.brokers.values().any(|b| b.state == "UP");
        self.status.set_broker(up, None);
        if let Some(t) = stats.topics.get(&self.input_topic) {
            for (p, ps) in &t.partitions {
                // ops: no stale lag for released partitions
                if *p >= 0 && ps.consumer_lag >= 0 && self.status.owns(*p) {
                    telemetry::consumer_lag(*p, ps.consumer_lag);
                }
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.status.note_client_error(&error, reason); // ops: authentication/TLS -> /readyz
        let serious = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AllBrokersDown)
                | Some(RDKafkaErrorCode::Authentication)
                | Some(RDKafkaErrorCode::SaslAuthenticationFailed)
                | Some(RDKafkaErrorCode::SSL)
                | Some(RDKafkaErrorCode::BrokerTransportFailure)
        );
        if serious {
            self.status.set_broker(false, Some(format!("{error}: {reason}")));
        }
        if let Some(suppressed) = self.throttle.admit(&error, Instant::now()) {
            warn!(error = %error, reason, suppressed, "kafka client error");
        }
    }
}

impl ConsumerContext for FilterContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let parts = self.input_partitions(tpl);
            let lost = consumer.assignment_lost();
            if let Ok(mut f) = self.filter.lock() {
                f.revoke(consumer, &parts, lost);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let parts = self.input_partitions(tpl);
                if let Ok(mut f) = self.filter.lock() {
                    f.assign(consumer, &parts);
                }
                self.status.set_joined();
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => warn!(error = %e, "rebalance error"),
        }
    }

    /// The group coordinator's answer to a checkpoint's offset commit (see
    /// `checkpoint::commit_async`; synchronous commits do not come here).
    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        match result {
            Ok(()) => {
                telemetry::checkpoint_result(true);
                crate::crash::point("offsets-committed");
            }
            Err(e) => {
                warn!(error = %e, partitions = offsets.count(), "offset commit failed; the next checkpoint commits again");
                telemetry::checkpoint_result(false);
            }
        }
    }
}

/// The consumer type of the pipeline.
pub type FilterConsumer = BaseConsumer<FilterContext>;

#[cfg(test)]
mod tests {
    use super::*;

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
}

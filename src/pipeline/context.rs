//! The librdkafka client contexts: how the clients' callbacks (acknowledgements, rebalances,
//! statistics, errors) reach the pipeline. Callbacks run on librdkafka's threads (the producer's
//! acknowledgements) or inside `poll` on the pipeline thread (everything of the consumer).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::statistics::Statistics;
use rdkafka::TopicPartitionList;
use tracing::warn;

use super::filter::Filter;
use crate::config::Config;
use crate::kafka::Throttle;
use crate::status::Status;
use crate::telemetry;

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

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        crate::kafka::logs::log_client_line(&self.throttle, level, fac, log_message);
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

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        crate::kafka::logs::log_client_line(&self.throttle, level, fac, log_message);
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

//! The filter's producers at start ([`Producers::start`]): the output topic's limits read from
//! the broker (`max.message.bytes`, the record timestamps it takes) and fitted to the producer,
//! the side topics' timestamp limits, the side producer of idempotent mode, and, in
//! transactional mode, `init_transactions` retried while the broker is unreachable.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::producer::{Producer, ThreadedProducer};
use tracing::{info, warn};

use super::delivery::{DeliveryContext, DeliveryEvent};
use super::delivery_queue::DeliverySender;
use super::mode::Mode;
use super::produce::TimestampLimits;
use super::{RunError, Shutdown};
use crate::config::Config;
use crate::kafka;
use crate::status::Status;

/// How long the start waits for the output topic's configuration (`max.message.bytes` and the
/// timestamp limits: [`kafka::topic_configs`]): a broker answers DescribeConfigs in milliseconds; one
/// that does not implement it (librdkafka's mock cluster) never answers, and the producer then
/// keeps its default limit and no timestamp is checked.
pub(crate) const DESCRIBE_CONFIGS_TIMEOUT: Duration = Duration::from_secs(2);

/// What [`Producers::start`] makes for the filter.
pub(super) struct Producers {
    /// Writes the output topic (and the side topics unless `side_producer` does).
    pub producer: ThreadedProducer<DeliveryContext>,
    /// Idempotent mode with a side topic: the producer of the side copies, without the gapless
    /// guarantee (`kafka::side_producer_config`).
    pub side_producer: Option<Arc<ThreadedProducer<DeliveryContext>>>,
    /// The record timestamps the output topic takes (none known when it was not described).
    pub output_timestamps: TimestampLimits,
    /// The record timestamps each side topic takes, those that could be described.
    pub side_timestamps: BTreeMap<String, TimestampLimits>,
}

impl Producers {
    /// Reads the output topic's configuration (DescribeConfigs, up to
    /// [`DESCRIBE_CONFIGS_TIMEOUT`]; not answered: logged, the producer keeps its own limits),
    /// creates the producers (their delivery reports into `deliveries`) and, in transactional
    /// mode, fences the previous producer of the transactional id and begins the first
    /// transaction. `None` when a stop was requested while `init_transactions` waited for the
    /// broker. Errors: a producer cannot be created, or its transactions cannot be initialised
    /// (a fatal or abortable error; a retriable one is retried: [`init_transactions`]).
    pub(super) fn start(
        cfg: &Config,
        deliveries: DeliverySender<DeliveryEvent>,
        shutdown: &Shutdown,
        status: &Arc<Status>,
    ) -> Result<Option<Producers>, RunError> {
        let asked = match &cfg.output.topic_configs {
            Some(known) => Ok(known.clone()),
            None => kafka::topic_configs(cfg, &cfg.output.topic, DESCRIBE_CONFIGS_TIMEOUT),
        };
        let output_described = asked.is_ok();
        let configs = match asked {
            Ok(configs) => configs,
            Err(e) => {
                warn!(
                    topic = %cfg.output.topic,
                    error = %e,
                    "cannot read the output topic's configuration (DescribeConfigs: grant DESCRIBE_CONFIGS on it); \
                     the producer keeps its own size limit and no record timestamp is checked, so a record the \
                     broker refuses for its size or its timestamp stops the process instead of halting its partition: \
                     set kafka.properties.message.max.bytes to the topic's max.message.bytes less 256 to fit the size \
                     by hand"
                );
                Default::default()
            }
        };
        // A limit the user set is kept as it is (`fit_to_topic`, `Kept::AsWritten`).
        let limit = match cfg.kafka.flat_properties().contains_key("message.max.bytes") {
            true => None,
            false => configs.get("max.message.bytes").and_then(|v| v.parse().ok()),
        };
        let recompressed = kafka::recompresses(&configs, cfg);
        let output_timestamps = TimestampLimits::of_configs(&configs);
        let side_timestamps = match output_described {
            true => side_timestamp_limits(cfg),
            false => BTreeMap::new(), // the same brokers would not answer for the side topics either
        };
        let mut producer_config = kafka::producer_config(cfg);
        kafka::fit_to_topic(
            &mut producer_config,
            cfg,
            &cfg.output.topic,
            limit,
            recompressed,
            kafka::Kept::AsWritten,
        );
        info!(
            topic = %cfg.output.topic,
            max_message_bytes = limit,
            producer_message_max_bytes = producer_config.get("message.max.bytes"),
            timestamp_before_max_ms = output_timestamps.before_ms,
            timestamp_after_max_ms = output_timestamps.after_ms,
            "output record limits"
        );
        let producer: ThreadedProducer<DeliveryContext> =
            producer_config.create_with_context(DeliveryContext::new(deliveries.clone(), status.clone()))?;
        let mode = Mode::of(cfg);
        let sides = !cfg.output.duplicates_topic.is_empty() || !cfg.fingerprint.dead_letter_topic.is_empty();
        let side_producer = match mode {
            Mode::Idempotent { .. } if sides => Some(Arc::new(
                kafka::side_producer_config(cfg)
                    .create_with_context(DeliveryContext::new(deliveries, status.clone()))?,
            )),
            _ => None,
        };
        if let Mode::Transactional { .. } = mode {
            // Fences a previous producer with the same transactional.id and aborts its open transaction.
            if !init_transactions(&producer, shutdown, status)? {
                return Ok(None);
            }
            producer.begin_transaction()?;
        }
        Ok(Some(Producers {
            producer,
            side_producer,
            output_timestamps,
            side_timestamps,
        }))
    }
}

/// The timestamp limits of the side topics of `cfg` (`output.duplicates_topic`,
/// `fingerprint.dead_letter_topic`), asked as the output's ([`kafka::topic_configs`],
/// DescribeConfigs, waiting up to [`DESCRIBE_CONFIGS_TIMEOUT`] each; asked only when the
/// output's was answered). A topic whose configuration cannot be read is left out (no limit
/// known: logged), as are all when the output's configuration is given (`kafka-dedup demo`'s
/// mock cluster does not answer).
fn side_timestamp_limits(cfg: &Config) -> BTreeMap<String, TimestampLimits> {
    let mut limits = BTreeMap::new();
    if cfg.output.topic_configs.is_some() {
        return limits;
    }
    for (key, topic) in [
        ("output.duplicates_topic", &cfg.output.duplicates_topic),
        ("fingerprint.dead_letter_topic", &cfg.fingerprint.dead_letter_topic),
    ] {
        if topic.is_empty() || limits.contains_key(topic) {
            continue;
        }
        match kafka::topic_configs(cfg, topic, DESCRIBE_CONFIGS_TIMEOUT) {
            Ok(configs) => {
                let l = TimestampLimits::of_configs(&configs);
                info!(
                    key,
                    topic = topic.as_str(),
                    timestamp_before_max_ms = l.before_ms,
                    timestamp_after_max_ms = l.after_ms,
                    "side topic timestamp limits"
                );
                limits.insert(topic.clone(), l);
            }
            Err(e) => warn!(
                key, topic = topic.as_str(), error = %e,
                "cannot read the side topic's configuration (DescribeConfigs: grant DESCRIBE_CONFIGS on it); its \
                 copies keep the record's timestamp until the topic refuses one for it (idempotent mode: the \
                 partition halts and sends it again stamped now; transactional mode: the process stops)"
            ),
        }
    }
    limits
}

/// How long one `init_transactions` attempt waits at start-up before it is logged and tried
/// again (a stop request is noticed between two attempts).
const INIT_TRANSACTIONS_ATTEMPT: Duration = Duration::from_secs(10);

/// `init_transactions`, retried the way `wait_for_topics` retries an unreachable broker: while
/// librdkafka says the error is retriable (`rd_kafka_error_is_retriable`: the call timed out,
/// the transaction coordinator is not available yet), it is logged, `/readyz` names it, and the
/// call is made again (librdkafka resumes the step in progress). `false` when a stop was
/// requested meanwhile. Errors: a fatal or abortable error (e.g. the transactional id not
/// authorised), as before.
fn init_transactions(
    producer: &ThreadedProducer<DeliveryContext>,
    shutdown: &Shutdown,
    status: &Status,
) -> Result<bool, RunError> {
    let started = Instant::now();
    loop {
        match producer.init_transactions(INIT_TRANSACTIONS_ATTEMPT) {
            Ok(()) => {
                if started.elapsed() > INIT_TRANSACTIONS_ATTEMPT {
                    status.set_broker(true, None);
                    info!(
                        waited_seconds = started.elapsed().as_secs_f64(),
                        "transactions initialised"
                    );
                }
                return Ok(true);
            }
            Err(e) if transaction_retriable(&e) => {
                status.set_broker(false, Some(format!("init_transactions: {e}")));
                warn!(
                    error = %e,
                    waited_seconds = started.elapsed().as_secs_f64(),
                    "init_transactions did not complete (the broker unreachable or slow); retrying"
                );
                if shutdown.is_triggered() {
                    return Ok(false);
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Whether librdkafka says the transactional call that failed with `e` may be made again
/// (`rd_kafka_error_is_retriable`): a timeout, a coordinator not available yet. Not an
/// abortable error (`txn_requires_abort`) nor a fatal one.
pub(super) fn transaction_retriable(e: &rdkafka::error::KafkaError) -> bool {
    match e {
        rdkafka::error::KafkaError::Transaction(e) => e.is_retriable() && !e.is_fatal() && !e.txn_requires_abort(),
        _ => false,
    }
}

//! The topic checks made before consuming: the configured topics exist and have the partitions
//! the configuration needs ([`check_topics`], [`check_route_topic`], [`partition_count`]).

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::config::Config;

/// Why the topics do not fit the configuration.
#[derive(Debug, thiserror::Error)]
pub enum TopicError {
    /// A configured topic does not exist.
    #[error("topic \"{topic}\" ({key}) does not exist; kafka-dedup does not create topics")]
    Missing { topic: String, key: &'static str },
    /// The principal may not describe a configured topic (`TOPIC_AUTHORIZATION_FAILED` in the
    /// metadata answer): it may exist.
    #[error(
        "topic \"{topic}\" ({key}): not authorized to describe it (TOPIC_AUTHORIZATION_FAILED); grant the \
         principal DESCRIBE and READ on it (and WRITE on the output, side and route topics); \
         `kafka-dedup check-config --connect` lists what each topic lacks"
    )]
    NotAuthorized { topic: String, key: &'static str },
    /// The route topic of the global scope (`fingerprint.route_topic`) does not exist.
    #[error(
        "topic \"{topic}\" (fingerprint.route_topic) does not exist; kafka-dedup does not create topics. Create it \
         with as many partitions as the input (never change the count afterwards: a replay is found in partition \
         fingerprint mod N), e.g. kafka-topics.sh --bootstrap-server <brokers> --create --topic {topic} \
         --partitions {partitions} --config retention.ms=<the input's retention.ms plus the longest lag of the \
         filter stage, e.g. 691200000 for a 7-day input> (the copies keep the input records' timestamps, by which \
         Kafka deletes them)"
    )]
    MissingRoute {
        /// The topic.
        topic: String,
        /// The partition count suggested: the input topic's.
        partitions: usize,
    },
    /// The changelog topic (`store.changelog_topic`) does not exist.
    #[error(
        "topic \"{topic}\" (store.changelog_topic) does not exist; kafka-dedup does not create topics. Create it \
         compacted, e.g. kafka-topics.sh --bootstrap-server <brokers> --create --topic {topic} \
         --partitions {partitions} --config cleanup.policy=compact,delete --config retention.ms=604800000 \
         --config min.compaction.lag.ms=600000 --config max.message.bytes=2000000, or set \
         store.changelog_topic = \"\" to turn the changelog off"
    )]
    MissingChangelog {
        /// The topic.
        topic: String,
        /// The partition count suggested: the input topic's.
        partitions: usize,
    },
    /// Metadata could not be fetched, or the answer holds a topic-level error other than
    /// "unknown" and "not authorized" (a leader being elected): retried by the callers.
    #[error("cannot fetch topic metadata: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
}

/// Number of partitions of `topic` as `client`'s brokers report it, `None` if it does not exist
/// (`UNKNOWN_TOPIC_OR_PARTITION`, or not in the answer). librdkafka takes every metadata answer
/// into the client's own view of the topic, so asked through the producer's client this also
/// makes the producer know a partition added since its last refresh (it refuses a record for a
/// partition it does not know: `Local: Unknown partition`).
///
/// Errors: the request's, or the topic's own error in the answer as
/// `KafkaError::MetadataFetch(code)`: `LEADER_NOT_AVAILABLE` while a topic just created elects
/// its leaders, `TOPIC_AUTHORIZATION_FAILED` without DESCRIBE on it. Neither says the topic is
/// missing ([`TopicError::NotAuthorized`] names the second; the callers retry the others).
pub fn partition_count<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    topic: &str,
    timeout: Duration,
) -> Result<Option<usize>, KafkaError> {
    let md = client.fetch_metadata(Some(topic), timeout)?;
    let Some(t) = md.topics().iter().find(|t| t.name() == topic) else {
        return Ok(None);
    };
    match t.error().map(RDKafkaErrorCode::from) {
        None if t.partitions().is_empty() => Ok(None),
        None => Ok(Some(t.partitions().len())),
        Some(RDKafkaErrorCode::UnknownTopicOrPartition) => Ok(None),
        Some(code) => Err(KafkaError::MetadataFetch(code)),
    }
}

/// [`partition_count`] of the topic configured under `key`, an authorization failure named as
/// such ([`TopicError::NotAuthorized`], a configuration matter: `audit` and the start exit 2);
/// any other error is [`TopicError::Kafka`].
pub fn partition_count_for<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    key: &'static str,
    topic: &str,
    timeout: Duration,
) -> Result<Option<usize>, TopicError> {
    partition_count(client, topic, timeout).map_err(|e| match e.rdkafka_error_code() {
        Some(RDKafkaErrorCode::TopicAuthorizationFailed) => TopicError::NotAuthorized {
            topic: topic.to_string(),
            key,
        },
        _ => TopicError::Kafka(e),
    })
}

/// Global scope: checks that `input` (the configured `input.topic`) and `route` (the route topic)
/// exist. Returns their partition counts. Errors: [`TopicError::Missing`] naming `input.topic`,
/// [`TopicError::MissingRoute`] with the command that creates the route topic, or the metadata
/// request's.
pub fn check_route_topic<C: ClientContext>(
    client: &rdkafka::client::Client<C>,
    input: &str,
    route: &str,
    timeout: Duration,
) -> Result<(usize, usize), TopicError> {
    let inputs = partition_count_for(client, "input.topic", input, timeout)?.ok_or_else(|| TopicError::Missing {
        topic: input.to_string(),
        key: "input.topic",
    })?;
    let routes = partition_count_for(client, "fingerprint.route_topic", route, timeout)?.ok_or_else(|| {
        TopicError::MissingRoute {
            topic: route.to_string(),
            partitions: inputs,
        }
    })?;
    Ok((inputs, routes))
}

/// Checks that the input and output topics exist, and that the side topics
/// (`output.duplicates_topic`, `fingerprint.dead_letter_topic`), when set, exist. Returns the
/// input and output partition counts. An output with fewer partitions than the input under
/// `partitioning = "preserve"` is not refused: the input partitions it lacks are held
/// (`pipeline::ownership`) while the others run, and picked up once the output has them.
pub fn check_topics<C: rdkafka::consumer::ConsumerContext>(
    consumer: &BaseConsumer<C>,
    cfg: &Config,
    timeout: Duration,
) -> Result<(usize, usize), TopicError> {
    let client = consumer.client();
    if let Some(routed_from) = &cfg.input.routed_from {
        // The filter stage of the global scope reads the route topic.
        check_route_topic(client, routed_from, &cfg.input.topic, timeout)?;
    }
    let input =
        partition_count_for(client, "input.topic", &cfg.input.topic, timeout)?.ok_or_else(|| TopicError::Missing {
            topic: cfg.input.topic.clone(),
            key: "input.topic",
        })?;
    let output = partition_count_for(client, "output.topic", &cfg.output.topic, timeout)?.ok_or_else(|| {
        TopicError::Missing {
            topic: cfg.output.topic.clone(),
            key: "output.topic",
        }
    })?;
    for (key, topic) in [
        ("output.duplicates_topic", &cfg.output.duplicates_topic),
        ("fingerprint.dead_letter_topic", &cfg.fingerprint.dead_letter_topic),
    ] {
        if !topic.is_empty() && partition_count_for(client, key, topic, timeout)?.is_none() {
            return Err(TopicError::Missing {
                topic: topic.clone(),
                key,
            });
        }
    }
    let changelog = &cfg.store.changelog_topic;
    if !changelog.is_empty() && partition_count_for(client, "store.changelog_topic", changelog, timeout)?.is_none() {
        return Err(TopicError::MissingChangelog {
            topic: changelog.clone(),
            partitions: input,
        });
    }
    Ok((input, output))
}

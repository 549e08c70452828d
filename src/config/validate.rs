//! The checks of a [`Config`] that serde cannot make: non-empty names, bounds of durations,
//! choices that must agree, and the librdkafka settings kafka-dedup fixes or refuses. The first
//! failure is returned as a [`ConfigError`] naming its key.

use super::*;

impl Config {
    /// Checks what serde cannot: non-empty names, positive durations, consistent choices. The
    /// first failure is returned, in the order of the sections.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_kafka()?;
        self.validate_topics()?;
        self.validate_checkpoint()?;
        self.validate_delivery()?;
        if let Err(e) = Source::ignoring(self.fingerprint.source.clone(), &self.fingerprint.ignore) {
            return Err(ConfigError::key("fingerprint.ignore", e.to_string()));
        }
        if self.fingerprint.source.reads_registry() {
            self.fingerprint.schema_registry.validate()?;
        }
        if self.store.path.as_os_str().is_empty() {
            return Err(ConfigError::key("store.path", "must not be empty"));
        }
        if !self.store.changelog_topic.is_empty() && self.output.delivery == Delivery::Transactional {
            return Err(ConfigError::key(
                "store.changelog_topic",
                "the changelog is written in output.delivery = \"idempotent\" only (set it to \"\")",
            ));
        }
        if !self.http.listen.is_empty() && self.http.listen.parse::<SocketAddr>().is_err() {
            return Err(ConfigError::key(
                "http.listen",
                format!(
                    "\"{}\" is not a host:port address such as 127.0.0.1:9464",
                    self.http.listen
                ),
            ));
        }
        Ok(())
    }

    /// `[kafka]`: brokers named, no property kafka-dedup sets itself with another value
    /// (`kafka::ENFORCED`, in the configured delivery mode), the security checks.
    fn validate_kafka(&self) -> Result<(), ConfigError> {
        if self.kafka.bootstrap_servers.trim().is_empty() {
            return Err(ConfigError::key("kafka.bootstrap_servers", "must not be empty"));
        }
        let props = self.kafka.flat_properties();
        for (name, value) in &props {
            if let Some(why) = crate::kafka::refused_override(name, value, self.output.delivery) {
                return Err(ConfigError::key(format!("kafka.properties.{name}"), why));
            }
        }
        security::validate(&props)?;
        if let Some((name, why)) = GroupProtocol::of(&props).refused(&props) {
            return Err(ConfigError::key(format!("kafka.properties.{name}"), why));
        }
        Ok(())
    }

    /// Topics named, distinct, and a dead-letter topic when `on_missing` needs one.
    fn validate_topics(&self) -> Result<(), ConfigError> {
        if self.input.topic.trim().is_empty() {
            return Err(ConfigError::key(
                "input.topic",
                "missing or empty: name the topic to read",
            ));
        }
        if self.input.group_id.trim().is_empty() {
            return Err(ConfigError::key("input.group_id", "must not be empty"));
        }
        parse_skips(&self.input.skip).map_err(|e| ConfigError::key("input.skip", e))?;
        if self.output.topic.trim().is_empty() {
            return Err(ConfigError::key(
                "output.topic",
                "missing or empty: name the topic to write",
            ));
        }
        if self.output.topic == self.input.topic {
            return Err(ConfigError::key("output.topic", "must differ from input.topic"));
        }
        for (key, topic) in [
            ("output.duplicates_topic", &self.output.duplicates_topic),
            ("fingerprint.dead_letter_topic", &self.fingerprint.dead_letter_topic),
        ] {
            if !topic.is_empty() && (topic == &self.input.topic || topic == &self.output.topic) {
                return Err(ConfigError::key(key, "must differ from input.topic and output.topic"));
            }
        }
        for (key, topic) in [
            ("input.topic", &self.input.topic),
            ("output.topic", &self.output.topic),
            ("output.duplicates_topic", &self.output.duplicates_topic),
            ("fingerprint.dead_letter_topic", &self.fingerprint.dead_letter_topic),
            ("fingerprint.route_topic", &self.fingerprint.route_topic),
            ("store.changelog_topic", &self.store.changelog_topic),
        ] {
            if let Some(why) = invalid_topic_name(topic) {
                return Err(ConfigError::key(key, why));
            }
        }
        if self.fingerprint.on_missing == OnMissing::DeadLetter && self.fingerprint.dead_letter_topic.is_empty() {
            return Err(ConfigError::key(
                "fingerprint.dead_letter_topic",
                "required when fingerprint.on_missing = \"dead_letter\"",
            ));
        }
        self.validate_scope()
    }

    /// `fingerprint.scope = "global"` needs a route topic of its own; `"partition"` none.
    fn validate_scope(&self) -> Result<(), ConfigError> {
        let route = &self.fingerprint.route_topic;
        match self.fingerprint.scope {
            Scope::Partition => {
                if !route.is_empty() {
                    return Err(ConfigError::key(
                        "fingerprint.route_topic",
                        "only used with fingerprint.scope = \"global\"; remove it, or set the scope",
                    ));
                }
            }
            Scope::Global => {
                if route.trim().is_empty() {
                    return Err(ConfigError::key(
                        "fingerprint.route_topic",
                        "required with fingerprint.scope = \"global\": name the internal topic records are \
                         re-partitioned into by fingerprint (create it first, with as many partitions as the \
                         input: kafka-dedup does not create topics)",
                    ));
                }
                let others = [
                    &self.input.topic,
                    &self.output.topic,
                    &self.output.duplicates_topic,
                    &self.fingerprint.dead_letter_topic,
                ];
                if others.contains(&route) {
                    return Err(ConfigError::key(
                        "fingerprint.route_topic",
                        "must differ from input.topic, output.topic, output.duplicates_topic and \
                         fingerprint.dead_letter_topic: it holds copies of the input that only kafka-dedup reads",
                    ));
                }
                let parts = match &self.fingerprint.source {
                    Source::Composite(parts) => parts.as_slice(),
                    one => std::slice::from_ref(one),
                };
                for name in parts.iter().filter_map(|p| match p {
                    Source::Header(name) => Some(name),
                    _ => None,
                }) {
                    if name == crate::provenance::HEADER {
                        return Err(ConfigError::key(
                            "fingerprint.source",
                            "the header kafka-dedup.source is written by the route stage of the global scope; \
                             name a header of your own",
                        ));
                    }
                }
            }
        }
        Ok(())
    }

    /// Bounds of `checkpoint.interval`, `output.fence_wait` and `checkpoint.generations`.
    fn validate_checkpoint(&self) -> Result<(), ConfigError> {
        // Bounds: below 100 ms the checkpoint (a store write and an offset commit per partition)
        // would be the work; above 7 days the horizon outlives any upstream replay, and instants
        // computed from it could overflow.
        if self.checkpoint.interval < Duration::from_millis(100) || self.checkpoint.interval > MAX_INTERVAL {
            return Err(ConfigError::key(
                "checkpoint.interval",
                format!(
                    "is {}, must be between 100ms and 7days, e.g. \"20s\"",
                    humantime::format_duration(self.checkpoint.interval)
                ),
            ));
        }
        if self.output.handover_timeout < Duration::from_secs(1) || self.output.handover_timeout > MAX_FENCE_WAIT {
            return Err(ConfigError::key(
                "output.handover_timeout",
                format!(
                    "is {}, must be between 1s and 1h",
                    humantime::format_duration(self.output.handover_timeout)
                ),
            ));
        }
        if self.output.fence_wait > MAX_FENCE_WAIT {
            return Err(ConfigError::key(
                "output.fence_wait",
                format!(
                    "is {}, must be at most 1h (it delays every recovery)",
                    humantime::format_duration(self.output.fence_wait)
                ),
            ));
        }
        if self.checkpoint.generations < 2 {
            return Err(ConfigError::key(
                "checkpoint.generations",
                format!(
                    "is {}, must be at least 2 (the current generation and the previous one); \
                     with fewer, a replay that straddles a checkpoint would pass",
                    self.checkpoint.generations
                ),
            ));
        }
        if self.checkpoint.generations > 64 {
            return Err(ConfigError::key("checkpoint.generations", "must be at most 64"));
        }
        Ok(())
    }

    /// What transactional mode needs: a stable transactional id and transactions that outlive a
    /// checkpoint interval. (Idempotent mode's, every record kept until it is acknowledged, are
    /// settings kafka-dedup fixes: `kafka::ENFORCED`, checked by [`Config::validate_kafka`].)
    fn validate_delivery(&self) -> Result<(), ConfigError> {
        // Idempotent mode's producer settings are kafka::ENFORCED's (validate_kafka).
        if self.output.delivery == Delivery::Transactional {
            if self.output.transactional_id.is_empty() && self.input.group_instance_id.is_empty() {
                return Err(ConfigError::key(
                    "output.transactional_id",
                    "required with output.delivery = \"transactional\" unless input.group_instance_id is set: \
                     it must be stable across restarts of one replica and differ between replicas",
                ));
            }
            self.validate_transaction_timeout(&self.kafka.flat_properties())?;
        }
        Ok(())
    }

    /// A transaction stays open for a checkpoint interval: a `transaction.timeout.ms` shorter than
    /// that (plus 10 s to commit) would have the coordinator abort every transaction.
    fn validate_transaction_timeout(&self, props: &BTreeMap<String, String>) -> Result<(), ConfigError> {
        let Some(value) = props.get("transaction.timeout.ms") else {
            return Ok(()); // set from the interval (kafka::transaction_timeout_ms)
        };
        let key = "kafka.properties.transaction.timeout.ms";
        let ms: u64 = value
            .trim()
            .parse()
            .map_err(|_| ConfigError::key(key, format!("\"{value}\" is not a number of milliseconds")))?;
        let needed = self.checkpoint.interval + Duration::from_secs(10);
        if Duration::from_millis(ms) < needed {
            return Err(ConfigError::key(
                key,
                format!(
                    "is {}, shorter than checkpoint.interval ({}) plus 10 s: a transaction stays open for a \
                     whole interval and the coordinator would abort every one. Raise it to at least {} ms, \
                     or remove it (kafka-dedup then sets the interval plus 60 s)",
                    humantime::format_duration(Duration::from_millis(ms)),
                    humantime::format_duration(self.checkpoint.interval),
                    needed.as_millis()
                ),
            ));
        }
        Ok(())
    }
}

/// Why Kafka would refuse `topic` as a topic name (`None`: a valid name, or empty, which the
/// callers judge): Kafka's `Topic.validate` (clients, `org.apache.kafka.common.internals.Topic`)
/// takes at most 249 characters of `[a-zA-Z0-9._-]`, not `.` or `..`. Why here: a metadata
/// request for such a name is answered `INVALID_TOPIC_EXCEPTION`, which the start would retry as
/// a broker not ready, for ever.
pub(super) fn invalid_topic_name(topic: &str) -> Option<String> {
    if topic.is_empty() {
        return None;
    }
    if topic == "." || topic == ".." {
        return Some(format!(
            "\"{topic}\" is not a valid topic name (Kafka refuses \".\" and \"..\")"
        ));
    }
    if topic.chars().count() > 249 {
        return Some(format!(
            "a topic name has at most 249 characters (Kafka's limit); this one has {}",
            topic.chars().count()
        ));
    }
    if let Some(c) = topic
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Some(format!(
            "\"{topic}\" is not a valid topic name: {c:?} is not allowed (Kafka takes ASCII letters, digits, '.', '_' and '-')"
        ));
    }
    None
}

//! `[kafka]` ([`KafkaConfig`]): the brokers and the librdkafka properties every client gets, each
//! a TOML value of any kind ([`PropertyValue`]), and the consumer group protocol they choose
//! ([`GroupProtocol`]: KIP-848's `consumer` or `classic`, and the properties only `classic`
//! takes).

use super::*;

/// `[kafka]`: connection settings shared by the consumer and the producer. Its `Debug` output
/// redacts secret property values ([`is_secret`]).
#[derive(Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaConfig {
    /// Comma-separated `host:port` list; librdkafka's `bootstrap.servers`.
    #[serde(default = "default_bootstrap_servers")]
    pub bootstrap_servers: String,
    /// librdkafka properties passed to both clients (`security.protocol`, `sasl.*`, `ssl.*`, ...).
    /// Nested TOML tables are flattened with dots, so `sasl.mechanism = "PLAIN"` (a dotted key)
    /// and `"sasl.mechanism" = "PLAIN"` (a quoted key) are the same. From the environment,
    /// underscores stand for dots: `KAFKA_DEDUP__KAFKA__PROPERTIES__SASL_PASSWORD`. A value
    /// `"file:PATH"` is replaced at load by the content of PATH (see [`crate::security`]).
    #[serde(default)]
    pub properties: BTreeMap<String, PropertyValue>,
}

impl fmt::Debug for KafkaConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let shown: BTreeMap<String, String> = self
            .flat_properties()
            .into_iter()
            .map(|(k, v)| {
                let v = if is_secret(&k) { "<redacted>".to_string() } else { v };
                (k, v)
            })
            .collect();
        f.debug_struct("KafkaConfig")
            .field("bootstrap_servers", &self.bootstrap_servers)
            .field("properties", &shown)
            .finish()
    }
}

fn default_bootstrap_servers() -> String {
    "127.0.0.1:9092".to_string()
}

impl Default for KafkaConfig {
    fn default() -> Self {
        KafkaConfig {
            bootstrap_servers: default_bootstrap_servers(),
            properties: BTreeMap::new(),
        }
    }
}

/// A librdkafka property value as written in TOML: a scalar, or a table of further dotted parts.
///
/// Deserialized by hand (not `untagged`): an untagged enum buffers a dotted key's whole table
/// and reports a bad value deep inside it at the table's first part (`kafka.properties.fetch`);
/// the visitor below descends with the path, so the error names the whole key
/// (`kafka.properties.fetch.max.bytes`). A float is kept as its text, for librdkafka to judge.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
pub enum PropertyValue {
    /// `true` / `false`, passed as the strings librdkafka expects.
    Bool(bool),
    /// An integer such as `session.timeout.ms = 6000`.
    Int(i64),
    /// Anything else (a string, or a float as its text).
    String(String),
    /// A TOML dotted key or sub-table, flattened with `.` by [`KafkaConfig::flat_properties`].
    Table(BTreeMap<String, PropertyValue>),
}

impl<'de> Deserialize<'de> for PropertyValue {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PropertyVisitor)
    }
}

/// Builds a [`PropertyValue`]; anything but a scalar or a table is refused where it stands.
struct PropertyVisitor;

impl<'de> serde::de::Visitor<'de> for PropertyVisitor {
    type Value = PropertyValue;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a librdkafka property value: a string, a number or a boolean")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<PropertyValue, E> {
        Ok(PropertyValue::Bool(v))
    }

    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<PropertyValue, E> {
        Ok(PropertyValue::Int(v))
    }

    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<PropertyValue, E> {
        Ok(i64::try_from(v).map_or_else(|_| PropertyValue::String(v.to_string()), PropertyValue::Int))
    }

    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<PropertyValue, E> {
        Ok(PropertyValue::String(v.to_string()))
    }

    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<PropertyValue, E> {
        Ok(PropertyValue::String(v.to_string()))
    }

    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<PropertyValue, E> {
        Ok(PropertyValue::String(v))
    }

    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<PropertyValue, A::Error> {
        let mut table = BTreeMap::new();
        while let Some((k, v)) = map.next_entry::<String, PropertyValue>()? {
            table.insert(k, v);
        }
        Ok(PropertyValue::Table(table))
    }
}

impl KafkaConfig {
    /// The properties as librdkafka `name=value` pairs: dotted paths joined, underscores
    /// (from environment variable names) turned into dots, values as strings.
    pub fn flat_properties(&self) -> BTreeMap<String, String> {
        fn walk(prefix: &str, map: &BTreeMap<String, PropertyValue>, out: &mut BTreeMap<String, String>) {
            for (k, v) in map {
                let name = if prefix.is_empty() {
                    k.replace('_', ".")
                } else {
                    format!("{prefix}.{}", k.replace('_', "."))
                };
                match v {
                    PropertyValue::Bool(b) => {
                        out.insert(name, b.to_string());
                    }
                    PropertyValue::Int(i) => {
                        out.insert(name, i.to_string());
                    }
                    PropertyValue::String(s) => {
                        out.insert(name, s.clone());
                    }
                    PropertyValue::Table(t) => walk(&name, t, out),
                }
            }
        }
        let mut out = BTreeMap::new();
        walk("", &self.properties, &mut out);
        out
    }

    /// Replaces every property value `file:PATH` by the content of `PATH`
    /// ([`security::resolve_files`]). Errors name the property and the path.
    pub(super) fn resolve_files(&mut self) -> Result<(), ConfigError> {
        let mut flat = self.flat_properties();
        if security::resolve_files(&mut flat)? {
            self.properties = flat.into_iter().map(|(k, v)| (k, PropertyValue::String(v))).collect();
        }
        Ok(())
    }

    /// Valid settings that are probably not what was meant ([`security::warnings`]).
    pub fn warnings(&self) -> Vec<String> {
        let properties = self.flat_properties();
        let mut warnings = security::warnings(&properties);
        let limit = crate::kafka::PRODUCER_MESSAGE_MAX_BYTES;
        if let Some(v) = properties
            .get("message.max.bytes")
            .and_then(|v| v.trim().parse::<usize>().ok())
            .filter(|v| *v < limit)
        {
            warnings.push(format!(
                "kafka.properties.message.max.bytes = {v} is below the broker's default record batch size plus \
                 kafka-dedup's headers ({limit}): a record the input took can be refused on its way to the output; it \
                 then halts its partition (or goes to fingerprint.dead_letter_topic when one is set) until the limit is \
                 raised or the record let past with input.skip"
            ));
        }
        warnings
    }

    /// The consumer group protocol `group.protocol` selects ([`GroupProtocol::of`]).
    pub fn group_protocol(&self) -> GroupProtocol {
        GroupProtocol::of(&self.flat_properties())
    }
}

/// librdkafka's `group.protocol`: how the group consumer of the input joins its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupProtocol {
    /// The original protocol (JoinGroup/SyncGroup): the members assign the partitions among
    /// themselves; every Kafka-compatible broker speaks it. librdkafka 2.12's default.
    Classic,
    /// KIP-848 (`ConsumerGroupHeartbeat`, Apache Kafka 4.0 and later): the group coordinator
    /// assigns the partitions, incrementally; the session timeout, the heartbeat interval and
    /// the assignor are the broker's.
    Consumer,
}

/// Consumer properties that only [`GroupProtocol::Classic`] takes, and why: with
/// `group.protocol = "consumer"` librdkafka 2.12 refuses to create a consumer that sets any of
/// them (`rd_kafka_conf_finalize`), because KIP-848 moved them to the broker.
pub const CLASSIC_ONLY: &[(&str, &str)] = &[
    (
        "partition.assignment.strategy",
        "the group coordinator assigns the partitions with group.protocol = \"consumer\" (KIP-848); \
         choose its assignor with group.remote.assignor (uniform or range), or remove it",
    ),
    (
        "session.timeout.ms",
        "with group.protocol = \"consumer\" (KIP-848) the broker sets it \
         (group.consumer.session.timeout.ms, 45 s by default, per group through IncrementalAlterConfigs); remove it",
    ),
    (
        "heartbeat.interval.ms",
        "with group.protocol = \"consumer\" (KIP-848) the broker sets it \
         (group.consumer.heartbeat.interval.ms, 5 s by default); remove it",
    ),
    (
        "group.protocol.type",
        "only the classic group protocol has protocol types; remove it with group.protocol = \"consumer\"",
    ),
];

impl GroupProtocol {
    /// The protocol the flattened `[kafka.properties]` select: `group.protocol`, compared
    /// without case as librdkafka does; [`GroupProtocol::Classic`] when unset (librdkafka's
    /// default) or anything else (librdkafka refuses other values when the properties are
    /// checked).
    pub fn of(props: &BTreeMap<String, String>) -> GroupProtocol {
        match props.get("group.protocol") {
            Some(v) if v.trim().eq_ignore_ascii_case("consumer") => GroupProtocol::Consumer,
            _ => GroupProtocol::Classic,
        }
    }

    /// The first property of `props` (flattened `[kafka.properties]`) that this protocol
    /// refuses, with why ([`CLASSIC_ONLY`]); `None` when it takes them all.
    pub fn refused(self, props: &BTreeMap<String, String>) -> Option<(&'static str, &'static str)> {
        match self {
            GroupProtocol::Classic => None,
            GroupProtocol::Consumer => CLASSIC_ONLY.iter().copied().find(|(k, _)| props.contains_key(*k)),
        }
    }
}

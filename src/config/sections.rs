//! The sections after `[kafka]`: `[input]`, `[output]`, `[fingerprint]` (with its
//! `[fingerprint.schema_registry]`), `[checkpoint]`, `[store]` and `[http]`, each a struct with
//! its defaults (where each default comes from is on its function).

use super::*;

/// Where consumption starts for a partition with no committed offset.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Start {
    /// From the oldest retained record (librdkafka `auto.offset.reset=earliest`).
    Earliest,
    /// From the end: only records produced after the first start are filtered.
    Latest,
}

/// `[input]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InputConfig {
    /// The topic with replays.
    pub topic: String,
    /// Consumer group; its committed offsets carry the checkpoint metadata (see `metadata.rs`).
    #[serde(default = "default_group_id")]
    pub group_id: String,
    /// Where to start a partition that has no committed offset.
    #[serde(default = "default_start")]
    pub start: Start,
    /// Static group membership (librdkafka `group.instance.id`), for example the pod name:
    /// a restarted replica gets its partitions back without a rebalance. Empty: dynamic.
    #[serde(default)]
    pub group_instance_id: String,
    /// Records to let past, as `"PARTITION:OFFSET"` entries separated by commas (`"0:1042, 3:7"`):
    /// the way past a record that halts its partition or stops the filter (issue 23, item 3).
    /// Each is neither forwarded nor stops anything: it goes to `fingerprint.dead_letter_topic`
    /// (reason `skipped`) when one is set, else it is dropped; logged and counted
    /// (`kafka_dedup_records_skipped_total`). Parsed by [`parse_skips`]; empty: none.
    #[serde(default)]
    pub skip: String,
    /// Not a configuration key: set only in the configuration of the filter stage of the global
    /// scope ([`Config::filter_stage`]), whose `topic` is then the route topic. Names the topic
    /// the route stage reads (the configured `input.topic`): the route topic's records are copies
    /// of its records and carry its provenance.
    #[serde(skip)]
    pub routed_from: Option<String>,
}

/// The entries of `input.skip` (`"PARTITION:OFFSET"`, comma-separated, white space around them
/// ignored) as (input partition, input offset) pairs. Errors: the entry that is not two
/// non-negative integers.
pub fn parse_skips(text: &str) -> Result<std::collections::BTreeSet<(i32, i64)>, String> {
    text.split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| {
            let parsed = e
                .split_once(':')
                .and_then(|(p, o)| Some((p.trim().parse::<i32>().ok()?, o.trim().parse::<i64>().ok()?)));
            match parsed {
                Some((p, o)) if p >= 0 && o >= 0 => Ok((p, o)),
                _ => Err(format!(
                    "{e:?} is not PARTITION:OFFSET (two non-negative integers, e.g. \"0:1042\"; entries separated by commas)"
                )),
            }
        })
        .collect()
}

fn default_group_id() -> String {
    "kafka-dedup".to_string()
}

fn default_start() -> Start {
    Start::Earliest
}

/// How output partitions are chosen.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Partitioning {
    /// Output partition = input partition. An input partition whose output partition does not
    /// exist is held (paused, nothing forwarded or committed) until the output has it.
    Preserve,
    /// Output partition from the record key (librdkafka's `murmur2_random`, as the Java client).
    Key,
}

/// How records are written to the output topic.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Delivery {
    /// Idempotent producer; works on every Kafka-compatible broker.
    Idempotent,
    /// One Kafka transaction per checkpoint holding the output records and the input offsets.
    Transactional,
}

/// `[output]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OutputConfig {
    /// The effectively-once topic. Must exist; kafka-dedup does not create topics.
    pub topic: String,
    /// See [`Partitioning`].
    #[serde(default = "default_partitioning")]
    pub partitioning: Partitioning,
    /// See [`Delivery`].
    #[serde(default = "default_delivery")]
    pub delivery: Delivery,
    /// Optional side output for dropped replays (with provenance headers). Empty: none.
    #[serde(default)]
    pub duplicates_topic: String,
    /// Transactional mode only: librdkafka `transactional.id`. Must be stable across restarts of
    /// one replica so a restart fences its predecessor. Default: `<group_id>-<group_instance_id>`.
    #[serde(default)]
    pub transactional_id: String,
    /// Idempotent mode only: how long recovery waits, counted from the partition's assignment,
    /// for records that a previous owner which stopped without a clean hand-over had already
    /// sent to land in the output partition, before re-reading it. See docs/guarantee.md, "Crash safety".
    #[serde(default = "default_fence_wait", with = "humantime_serde")]
    pub fence_wait: Duration,
    /// How long a revocation or a stop (SIGTERM) waits for the acknowledgements of the
    /// partitions it hands over. Past it, kafka-dedup drops what the producer still queues and
    /// exits with an error (1), so that no record of a partition it gave up can reach the output
    /// later: what was already on the wire lands within the next owner's fence wait. Keep it
    /// below the orchestrator's grace period (`terminationGracePeriodSeconds`).
    #[serde(default = "default_handover_timeout", with = "humantime_serde")]
    pub handover_timeout: Duration,
    /// Whether each forwarded record carries the header `kafka-dedup.source` (input topic,
    /// partition and offset; [`crate::provenance`]). On by default: recovery uses it to find
    /// where to resume when the group's committed offset is missing or unusable, and `audit`
    /// to match records exactly. Off for readers that cannot tolerate an extra header; see the
    /// README for what that costs.
    #[serde(default = "default_true")]
    pub provenance: bool,
    /// Not a configuration key: the output topic's configuration when it is known without
    /// asking the broker (`kafka-dedup demo`: librdkafka's mock cluster does not answer
    /// DescribeConfigs, which the start would wait 2 s for and warn about). `None`: asked.
    #[serde(skip)]
    pub topic_configs: Option<std::collections::BTreeMap<String, String>>,
}

fn default_true() -> bool {
    true
}

fn default_partitioning() -> Partitioning {
    Partitioning::Preserve
}

fn default_delivery() -> Delivery {
    Delivery::Idempotent
}

/// Default of `output.fence_wait`. A request that a dead process had written to its socket reaches
/// the broker within a round trip; 10 s is far above that on any sane network and short next to a
/// consumer group's session timeout (librdkafka default 45 s).
fn default_fence_wait() -> Duration {
    Duration::from_secs(10)
}

/// Default of `output.handover_timeout`: a minute, within Kubernetes' and Docker's usual grace
/// periods once raised for a slow output (docs/deploying.md, "Deploying as a sidecar").
fn default_handover_timeout() -> Duration {
    Duration::from_secs(60)
}

/// What to do with a record whose fingerprint source is absent or unreadable.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum OnMissing {
    /// Forward it without deduplication.
    Forward,
    /// Drop it (counted).
    Drop,
    /// Copy it to `fingerprint.dead_letter_topic`, not to the output.
    DeadLetter,
    /// Stop the filter with an error naming the partition and offset; nothing is committed past it.
    Fail,
}

impl OnMissing {
    /// The label value used in metrics and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            OnMissing::Forward => "forward",
            OnMissing::Drop => "drop",
            OnMissing::DeadLetter => "dead_letter",
            OnMissing::Fail => "fail",
        }
    }
}

/// `[fingerprint]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FingerprintConfig {
    /// `value | key | key_value | header:NAME | json:/POINTER`, or a list of them (one identity
    /// of several parts, [`Source::Composite`]). Use [`Self::identity`], which folds `ignore` in.
    #[serde(default = "default_source")]
    pub source: Source,
    /// JSON members (RFC 6901 pointers from the document's root) left out of every json part of
    /// `source` before it is fingerprinted, e.g. `["/processed_at"]` ([`Source::Ignoring`]).
    #[serde(default)]
    pub ignore: Vec<String>,
    /// See [`OnMissing`].
    #[serde(default = "default_on_missing")]
    pub on_missing: OnMissing,
    /// Required when `on_missing = "dead_letter"`.
    #[serde(default)]
    pub dead_letter_topic: String,
    /// Where replays are caught: within an input partition (the default) or wherever they land
    /// (see [`Scope`], docs/global-scope-design.md).
    #[serde(default = "default_scope")]
    pub scope: Scope,
    /// `scope = "global"` only, and required then: the internal topic records are re-partitioned
    /// into by fingerprint. Must exist (kafka-dedup does not create topics), differ from every
    /// other configured topic, and keep its partition count.
    #[serde(default)]
    pub route_topic: String,
    /// Where the `avro:` and `protobuf:` parts (and their `-key:` forms) of `source` find the
    /// writer schemas of records in the Schema Registry wire format. Required with such a part,
    /// unused without one.
    #[serde(default)]
    pub schema_registry: SchemaRegistryConfig,
}

/// `[fingerprint.schema_registry]`: a Schema Registry that speaks Confluent's REST API (Confluent
/// Schema Registry, Apicurio Registry under `/apis/ccompat/v7`, Karapace, Redpanda). Its `Debug`
/// output redacts the password.
#[derive(Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SchemaRegistryConfig {
    /// Base URL, e.g. `http://registry:8081`; schemas are read at `{url}/schemas/ids/{id}`.
    #[serde(default)]
    pub url: String,
    /// Basic-auth user name; none when empty.
    #[serde(default)]
    pub username: String,
    /// Basic-auth password, or `file:PATH` to read it from PATH at start (one trailing newline
    /// removed), as for `[kafka.properties]` ([`crate::security`]).
    #[serde(default)]
    pub password: String,
    /// A PEM file of the CA certificate(s) an `https` registry's certificate is checked against,
    /// in addition to the system's; empty for the system's only.
    #[serde(default)]
    pub ca_file: String,
    /// Most writer schemas kept in memory (ids are immutable in a registry, so a schema is
    /// fetched once while it stays cached; the oldest fetched is left out first).
    #[serde(default = "default_cache_schemas")]
    pub cache_schemas: usize,
    /// Connect and request timeout of one fetch.
    #[serde(default = "default_registry_timeout", with = "humantime_serde")]
    pub timeout: Duration,
}

impl fmt::Debug for SchemaRegistryConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SchemaRegistryConfig")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password", &if self.password.is_empty() { "" } else { "<redacted>" })
            .field("ca_file", &self.ca_file)
            .field("cache_schemas", &self.cache_schemas)
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// 1,000 schemas: a few hundred kilobytes for typical schemas, more versions than most subjects
/// ever have.
fn default_cache_schemas() -> usize {
    1000
}

/// 5 s: long enough for a registry across a region, short enough that a halted partition says
/// why soon.
fn default_registry_timeout() -> Duration {
    Duration::from_secs(5)
}

impl SchemaRegistryConfig {
    /// Replaces a `password` of `file:PATH` by the content of PATH ([`security::resolve_files`]).
    pub(super) fn resolve_files(&mut self) -> Result<(), ConfigError> {
        let mut one = BTreeMap::from([("password".to_string(), std::mem::take(&mut self.password))]);
        let resolved = security::resolve_files(&mut one);
        self.password = one.remove("password").unwrap_or_default();
        resolved
            .map(|_| ())
            .map_err(|e| ConfigError::key("fingerprint.schema_registry.password", e.reason))
    }

    /// Checks the settings an `avro:` or `protobuf:` part needs: a URL (http or https), a
    /// password only with a user name, a positive cache size and timeout.
    pub(super) fn validate(&self) -> Result<(), ConfigError> {
        let key = |k: &str| format!("fingerprint.schema_registry.{k}");
        if self.url.trim().is_empty() {
            return Err(ConfigError::key(
                key("url"),
                "required with an avro: or protobuf: part in fingerprint.source: the base URL of a registry that speaks \
                 Confluent's API, e.g. \"http://registry:8081\" (Apicurio: \"http://HOST:8080/apis/ccompat/v7\")",
            ));
        }
        if !(self.url.starts_with("http://") || self.url.starts_with("https://")) {
            return Err(ConfigError::key(key("url"), "must start with http:// or https://"));
        }
        if !self.password.is_empty() && self.username.is_empty() {
            return Err(ConfigError::key(
                key("password"),
                "set without fingerprint.schema_registry.username",
            ));
        }
        if self.cache_schemas == 0 {
            return Err(ConfigError::key(key("cache_schemas"), "must be at least 1"));
        }
        if self.timeout.is_zero() {
            return Err(ConfigError::key(key("timeout"), "must be positive, e.g. \"5s\""));
        }
        Ok(())
    }
}

impl Default for SchemaRegistryConfig {
    fn default() -> Self {
        SchemaRegistryConfig {
            url: String::new(),
            username: String::new(),
            password: String::new(),
            ca_file: String::new(),
            cache_schemas: default_cache_schemas(),
            timeout: default_registry_timeout(),
        }
    }
}

impl FingerprintConfig {
    /// The identity records are fingerprinted by: `source`, with `ignore` folded in. Valid once
    /// [`Config::validate`] passed (an invalid `ignore` gives the source alone here).
    pub fn identity(&self) -> Source {
        Source::ignoring(self.source.clone(), &self.ignore).unwrap_or_else(|_| self.source.clone())
    }
}

/// Which records' replays are caught (`fingerprint.scope`).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Scope {
    /// Fingerprints are kept per input partition: a replay is caught when it lands in the same
    /// input partition as its first copy (keyed records, fixed partitioners).
    Partition,
    /// Records are first copied to `fingerprint.route_topic`, partition `fingerprint mod N`, and
    /// filtered there: a replay is caught whatever input partition it lands in. Costs an extra
    /// hop (docs/global-scope.md, "Global scope").
    Global,
}

fn default_scope() -> Scope {
    Scope::Partition
}

fn default_source() -> Source {
    Source::Value
}

fn default_on_missing() -> OnMissing {
    OnMissing::Forward
}

impl Default for FingerprintConfig {
    fn default() -> Self {
        FingerprintConfig {
            source: default_source(),
            ignore: Vec::new(),
            on_missing: default_on_missing(),
            dead_letter_topic: String::new(),
            scope: default_scope(),
            route_topic: String::new(),
            schema_registry: SchemaRegistryConfig::default(),
        }
    }
}

/// `[checkpoint]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckpointConfig {
    /// Time between checkpoints, and the length of a generation's bucket of record time. The
    /// dedup horizon is `(generations - 1)` (H_min) to `generations` (H_max) intervals
    /// ([`crate::horizon::bounds_ms`]); set it so that H_min exceeds the upstream's checkpoint
    /// interval plus its recovery time. Default 1 min (docs/configuration.md, "Configuration").
    #[serde(default = "default_interval", with = "humantime_serde")]
    pub interval: Duration,
    /// Fingerprint sets kept per partition: the current one and `generations - 1` previous ones.
    /// Default 3: with the default interval, H_min 2 min and H_max 3 min.
    #[serde(default = "default_generations")]
    pub generations: u32,
}

impl CheckpointConfig {
    /// The horizon in plain words ([`crate::horizon::in_words`]).
    pub fn horizon_in_words(&self) -> String {
        crate::horizon::in_words(crate::horizon::interval_ms(self.interval), self.generations)
    }
}

/// Upper bound of `checkpoint.interval`.
pub(super) const MAX_INTERVAL: Duration = Duration::from_secs(7 * 24 * 3600);
/// Upper bound of `output.fence_wait`.
pub(super) const MAX_FENCE_WAIT: Duration = Duration::from_secs(3600);

/// 1 min x 3 generations: H_min 2 min covers a Flink job checkpointing every 20-60 s that
/// restarts in under a minute, and kafka-dedup's own restart after a SIGKILL (45 s session
/// timeout, 10 s fence wait, the recovery) or a hand-over; a crash re-consumes at most about a
/// minute of input, and a transaction stays open a minute (docs/configuration.md, "Configuration").
fn default_interval() -> Duration {
    Duration::from_secs(60)
}

fn default_generations() -> u32 {
    3
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig {
            interval: default_interval(),
            generations: default_generations(),
        }
    }
}

/// `[store]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoreConfig {
    /// Directory of the sled database. Created if missing.
    #[serde(default = "default_store_path")]
    pub path: PathBuf,
    /// A compacted topic of the user's for the fingerprint changelog (`crate::changelog`);
    /// empty (the default): off. Idempotent mode only.
    #[serde(default)]
    pub changelog_topic: String,
}

fn default_store_path() -> PathBuf {
    PathBuf::from("./kafka-dedup-data")
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            path: default_store_path(),
            changelog_topic: String::new(),
        }
    }
}

/// `[http]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpConfig {
    /// `host:port` for `/metrics`, `/healthz`, `/readyz` and `/store/...`. Empty: no HTTP server.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// A secret that `/store/stats` and `/store/lookup` require as `Authorization: Bearer TOKEN`.
    /// Empty (the default): those routes answer only on a loopback `listen` address, and 403
    /// elsewhere (`0.0.0.0`: the container image). A lookup tells whether a value was forwarded.
    #[serde(default)]
    pub store_token: String,
}

fn default_listen() -> String {
    "127.0.0.1:9464".to_string()
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: default_listen(),
            store_token: String::new(),
        }
    }
}

impl fmt::Display for Start {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Start::Earliest => "earliest",
            Start::Latest => "latest",
        })
    }
}

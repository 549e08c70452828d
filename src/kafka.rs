//! librdkafka client settings for the three clients kafka-dedup uses (the properties it sets
//! itself and those of one kind of client: `kafka/properties.rs`), the topic checks made before
//! consuming (`kafka/topics.rs`) and the producers' size fit (`kafka/fit.rs`), all re-exported
//! here.
//!
//! `[kafka.properties]` applies to every client; the settings the guarantees depend on are set
//! after it and cannot be overridden (listed in [`ENFORCED`]).

use std::time::Duration;

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::producer::BaseProducer;

use crate::config::{Config, ConfigError, Delivery, GroupProtocol};

/// Which kind of client a configuration is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    Consumer,
    Producer,
}

/// Bootstrap servers, client id, `allow.auto.create.topics=false` ([`ENFORCED`]) and the
/// `[kafka.properties]` that concern `role`: a
/// consumer-only property is not given to the producer and the reverse ([`CONSUMER_ONLY`],
/// [`PRODUCER_ONLY`]), so that setting e.g. `session.timeout.ms` does not make librdkafka log a
/// CONFWARN for the other client at every start. Any other property (both kinds, or one
/// librdkafka does not know, which it then refuses) goes to every client.
fn base(cfg: &Config, role: Role) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", &cfg.kafka.bootstrap_servers);
    c.set("client.id", format!("kafka-dedup-{}", cfg.input.group_id));
    let other = match role {
        Role::Consumer => PRODUCER_ONLY,
        Role::Producer => CONSUMER_ONLY,
    };
    for (k, v) in cfg.kafka.flat_properties() {
        if !other.contains(&k.as_str()) {
            c.set(k, v);
        }
    }
    // ENFORCED, on every client: the consumer's default, not the producer's.
    c.set("allow.auto.create.topics", "false");
    c
}

fn set_default(c: &mut ClientConfig, key: &str, value: &str) {
    if c.get(key).is_none() {
        c.set(key, value);
    }
}

/// The consumer's default `topic.metadata.refresh.interval.ms`: 30 s (librdkafka: 5 minutes).
/// A consumer group notices partitions added to the input topic only through a metadata
/// refresh (the group then rebalances and assigns them); the records written to a new
/// partition wait unread until then. 30 s bounds that wait for the price of one small Metadata
/// request (the input topic only) per instance every 30 s.
pub const METADATA_REFRESH_MS: &str = "30000";

/// The group consumer of the input topic.
///
/// Defaults (overridable): `partition.assignment.strategy=cooperative-sticky` (a rebalance moves
/// only the partitions that change owner; with `group.protocol = "consumer"` not set: the broker
/// assigns, incrementally, and librdkafka refuses the property, [`GroupProtocol`]),
/// `isolation.level=read_committed` (librdkafka default,
/// stated), `statistics.interval.ms=5000` (consumer lag metric), `fetch.wait.max.ms=100`
/// (librdkafka's is 500): a partition resumed after its recovery joins the consumer's fetches only
/// when the fetch in flight returns, and a broker holds a fetch of caught-up partitions that long;
/// partitions recovered a moment apart waited up to twice that before their first record
/// (measured on the mock cluster: 0.9 s; BENCHMARKS.md). The cost: a caught-up consumer sends
/// up to 10 fetch requests a second per broker instead of 2. `topic.metadata.refresh.interval.ms`
/// = [`METADATA_REFRESH_MS`]: input partitions added while running are assigned within 30 s.
/// `fetch.queue.backoff.ms` = [`FETCH_QUEUE_BACKOFF_MS`], `receive.message.max.bytes` =
/// [`RECEIVE_MAX_BYTES`].
pub fn consumer_config(cfg: &Config) -> ClientConfig {
    let mut c = base(cfg, Role::Consumer);
    c.set("group.id", &cfg.input.group_id);
    if !cfg.input.group_instance_id.is_empty() {
        c.set("group.instance.id", &cfg.input.group_instance_id);
    }
    if cfg.kafka.group_protocol() == GroupProtocol::Classic {
        set_default(&mut c, "partition.assignment.strategy", "cooperative-sticky");
    }
    set_default(&mut c, "isolation.level", "read_committed");
    set_default(&mut c, "statistics.interval.ms", "5000");
    set_default(&mut c, "fetch.wait.max.ms", "100");
    set_default(&mut c, "fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    set_default(&mut c, "topic.metadata.refresh.interval.ms", METADATA_REFRESH_MS);
    set_default(&mut c, "receive.message.max.bytes", RECEIVE_MAX_BYTES);
    // Where nothing is committed, recovery seeks to `input.start` itself; everywhere else the
    // consumer resumes at a committed offset, and one out of range (below the log start after
    // retention) must move to the oldest record left, never to the end.
    c.set("auto.offset.reset", "earliest");
    c.set("enable.auto.commit", "false");
    c.set("enable.auto.offset.store", "false");
    c.set("enable.partition.eof", "false");
    c
}

/// The consumers' `fetch.queue.backoff.ms`: 10 ms (librdkafka: 1,000). librdkafka stops fetching
/// a partition for that long once its local queue passes `queued.min.messages` or
/// `queued.max.messages.kbytes`; a consumer catching up on a backlog drains the queue well
/// within a second and then stood still for the rest of it (stalls of 0.7-0.9 s in most runs of
/// the end-to-end benchmark on Apache Kafka, for the copier as for kafka-dedup; none in five runs
/// with 10 ms). The cost: one more look at the queue every 10 ms while it is full.
pub const FETCH_QUEUE_BACKOFF_MS: &str = "10";

/// The consumers' default `receive.message.max.bytes`: 2,147,483,647, librdkafka's maximum (its
/// default: 100,000,000). librdkafka gives up decompressing a zstd record batch whose records
/// would pass it (`_BAD_COMPRESSION`, `rd_kafka_zstd_decompress`, rdkafka_zstd.c; lz4, gzip and
/// snappy have no such bound), keeps the partition's fetch position at that batch and fetches it
/// again for ever (rdkafka_msgset_reader.c): the partition stops there, and no record of it
/// reaches the filter, so neither a halt nor `input.skip` can get past it. The Java producer
/// sizes a compressed batch by its estimated compressed size, and the broker checks
/// `max.message.bytes` against the compressed batch, so highly compressible records (repetitive
/// JSON, padding) make batches of a few KB on the wire and over 100 MB decompressed (librdkafka
/// issue #5260); the Java consumer reads them. What still stops: a zstd frame that records its
/// size, past 2 GiB decompressed; one that does not (a streaming compressor's, as zstd-jni's),
/// past the largest of librdkafka's guesses below 2 GiB (2, 6, 18, ... times the compressed
/// size: between about 716 MB and 2 GiB). The cost: a batch that large is held decompressed in
/// memory while its records are handed out; the responses themselves stay bounded by
/// `fetch.max.bytes` (50 MB by default). Found by an adversary reading librdkafka;
/// `mock::an_input_batch_over_100_mb_decompressed_is_consumed`.
pub const RECEIVE_MAX_BYTES: &str = "2147483647";

/// The producer of the output (and side) topics: idempotent, and transactional in that mode.
///
/// Defaults (overridable): `partitioner=murmur2_random` (the Java client's key hashing, used when
/// `output.partitioning = "key"`), `linger.ms=5` (librdkafka's default, stated).
///
/// Set by kafka-dedup in idempotent mode ([`ENFORCED`], refused under
/// `[kafka.properties]`), so that a partition's output never has a gap that a restart could only
/// fill out of order: `message.timeout.ms=0` (a record waits for its acknowledgement as long as
/// it takes: an unreachable output pauses the filter, it does not fail records; librdkafka's
/// default would give up after 5 minutes, possibly while later records get through) and
/// `enable.gapless.guarantee=true` (librdkafka stops the producer with a fatal error instead of
/// letting later records through after a batch failed for good). Transactional mode: librdkafka
/// derives the message timeout from `transaction.timeout.ms`, which is set from the checkpoint
/// interval ([`transaction_timeout_ms`]).
pub fn producer_config(cfg: &Config) -> ClientConfig {
    let mut c = base(cfg, Role::Producer);
    set_default(&mut c, "partitioner", "murmur2_random");
    set_default(&mut c, "linger.ms", "5");
    // librdkafka's default (1,000,000) is below the broker's, so a record the input took could be
    // refused on its way out (issue 22, item 8).
    set_default(&mut c, "message.max.bytes", &PRODUCER_MESSAGE_MAX_BYTES.to_string());
    c.set("enable.idempotence", "true");
    // Producer statistics are not used; without a handler rdkafka would log each at info.
    c.remove("statistics.interval.ms");
    match cfg.output.delivery {
        Delivery::Idempotent => {
            c.set("message.timeout.ms", "0");
            c.set("enable.gapless.guarantee", "true");
        }
        Delivery::Transactional => {
            c.set("transactional.id", cfg.transactional_id());
            set_default(
                &mut c,
                "transaction.timeout.ms",
                &transaction_timeout_ms(cfg.checkpoint.interval).to_string(),
            );
        }
    }
    c
}

/// The producer of the side topics (`output.duplicates_topic`, `fingerprint.dead_letter_topic`)
/// in idempotent mode: [`producer_config`] without `enable.gapless.guarantee`. A side topic that
/// refuses a copy halts its partition, which sends the copy again until it is taken
/// (`pipeline::halt`); with the gapless guarantee the refusal would be a fatal error of the
/// producer, and the output's records could not be produced any more either. Side topics keep
/// no order that a gap could break. In transactional mode the copies stay in the transaction,
/// through the one producer.
pub fn side_producer_config(cfg: &Config) -> ClientConfig {
    let mut c = producer_config(cfg);
    c.set("enable.gapless.guarantee", "false");
    // A side topic that is unreachable rather than refusing (its leader down) fails the copy
    // after this long, which halts its partition like a refusal, instead of holding it
    // unacknowledged for ever (issue 22, item 9).
    c.set("message.timeout.ms", SIDE_MESSAGE_TIMEOUT_MS);
    c
}

/// `message.timeout.ms` of the side producer: 30 s. librdkafka retries a copy within it; past
/// it the copy failed (it may still have been written: side topics are at-least-once), and the
/// partition halts and sends it again with back-off (`pipeline::halt`).
pub const SIDE_MESSAGE_TIMEOUT_MS: &str = "30000";

/// Apache Kafka's default broker `message.max.bytes` and topic `max.message.bytes`: the largest
/// record batch a topic takes (1 MiB plus 12 bytes of log framing).
pub const BROKER_MESSAGE_MAX_BYTES: usize = 1_048_588;

/// Room for the headers kafka-dedup adds to a copy: `kafka-dedup.source` (its value at most
/// [`crate::provenance::ENCODED_MAX`], 291 bytes) and, on a side copy, `kafka-dedup.reason`, with
/// their names and framing.
pub const HEADER_ROOM: usize = 512;

/// The producers' default `message.max.bytes`: the broker's default plus [`HEADER_ROOM`], so that
/// no record an input at the broker's default took is refused by the producer for its size.
/// The output's producer fits itself to the output topic's own limit when it is known
/// ([`fit_to_topic`]).
pub const PRODUCER_MESSAGE_MAX_BYTES: usize = BROKER_MESSAGE_MAX_BYTES + HEADER_ROOM;

/// What the broker counts in a record batch and librdkafka's per-record size check does not: the
/// batch header (61 bytes) and a record's varint framing (at most 41 bytes), with margin.
pub const BATCH_FRAMING: usize = 256;

/// The configuration of `topic` as its broker reports it (name → value, every entry that has a
/// value: `max.message.bytes`, `message.timestamp.type`, `message.timestamp.before.max.ms`, ...),
/// asked with DescribeConfigs through an admin client of `cfg`'s brokers. Errors: the request
/// failed (brokers unreachable, a broker that does not implement it and never answers), or the
/// broker refused it for the topic (no `DESCRIBE_CONFIGS` permission: the principal needs it on
/// the output topic for the size fit, see [`fit_to_topic`], and the timestamp check,
/// `pipeline::produce::TimestampLimits`).
pub fn topic_configs(
    cfg: &Config,
    topic: &str,
    timeout: Duration,
) -> Result<std::collections::BTreeMap<String, String>, KafkaError> {
    use rdkafka::admin::{AdminClient, AdminOptions, ResourceSpecifier};
    let admin: AdminClient<Logged> = base(cfg, Role::Producer).create_with_context(Logged::new("admin client"))?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|_| KafkaError::AdminOpCreation("a runtime for DescribeConfigs".into()))?;
    let answers = runtime.block_on(admin.describe_configs(
        &[ResourceSpecifier::Topic(topic)],
        &AdminOptions::new().request_timeout(Some(timeout)),
    ))?;
    let mut configs = std::collections::BTreeMap::new();
    for answer in answers {
        let resource = answer.map_err(KafkaError::AdminOp)?;
        for e in resource.entries {
            if let Some(v) = e.value {
                configs.insert(e.name, v);
            }
        }
    }
    Ok(configs)
}

/// Default `transaction.timeout.ms` in transactional mode: one checkpoint interval (how long a
/// transaction stays open) plus a minute for the commit, and at least librdkafka's default,
/// 60 s. The broker refuses more than its `transaction.max.timeout.ms` (15 minutes by default)
/// when the producer starts.
pub fn transaction_timeout_ms(interval: std::time::Duration) -> u64 {
    (interval.as_millis() as u64).saturating_add(60_000).max(60_000)
}

/// A consumer outside the group, for recovery: reads committed offsets (same `group.id`, never
/// subscribes, never commits) and re-reads output partitions up to their end; `audit` reads the
/// input with it too. Defaults as the group consumer's: `fetch.queue.backoff.ms`,
/// `receive.message.max.bytes` ([`RECEIVE_MAX_BYTES`]).
pub fn reader_config(cfg: &Config) -> ClientConfig {
    let mut c = base(cfg, Role::Consumer);
    set_default(&mut c, "fetch.queue.backoff.ms", FETCH_QUEUE_BACKOFF_MS);
    set_default(&mut c, "receive.message.max.bytes", RECEIVE_MAX_BYTES);
    c.set("group.id", &cfg.input.group_id);
    // Always: a re-read that learned records of an aborted transaction would drop their input
    // records, consumed again after the committed offset, as replays (`[kafka.properties]`
    // cannot lower it here).
    c.set("isolation.level", "read_committed");
    c.set("enable.auto.commit", "false");
    c.set("enable.auto.offset.store", "false");
    c.set("enable.partition.eof", "true");
    c.set("auto.offset.reset", "earliest");
    // Rebalance and statistics settings make no sense here: the reader never joins the group
    // (it assigns partitions itself and only fetches the group's offsets, which any protocol's
    // group answers), so it keeps librdkafka's classic protocol whatever the group consumer's.
    c.remove("statistics.interval.ms");
    c.remove("group.instance.id");
    c.remove("group.protocol");
    c.remove("group.remote.assignor");
    c
}

/// Creates the group consumer, the producer and the recovery reader with librdkafka, without
/// bootstrap servers (so nothing connects), and drops them. librdkafka checks some settings only
/// as a whole, when a client is created: `acks = 0` with the idempotence kafka-dedup enforces, a
/// certificate it cannot parse. `check-config` and `run` call this before anything connects, so
/// such a mistake exits 2 at once instead of after the brokers answered. The error names the
/// property librdkafka names when `[kafka.properties]` sets it (else `kafka.properties`).
pub fn check_clients(cfg: &Config) -> Result<(), ConfigError> {
    let clients = [
        ("consumer", consumer_config(cfg)),
        ("producer", producer_config(cfg)),
        ("reader", reader_config(cfg)),
    ];
    for (role, mut c) in clients {
        c.remove("bootstrap.servers");
        let created = if role == "producer" {
            c.create_with_context::<_, BaseProducer<Quiet>>(Quiet).map(drop)
        } else {
            c.create_with_context::<_, BaseConsumer<Quiet>>(Quiet).map(drop)
        };
        if let Err(e) = created {
            return Err(client_error(cfg, role, &e));
        }
    }
    Ok(())
}

/// The configuration error for librdkafka's refusal `e` of the `role` client's settings.
fn client_error(cfg: &Config, role: &str, e: &KafkaError) -> ConfigError {
    let set = cfg.kafka.flat_properties();
    let (named, detail) = match e {
        KafkaError::ClientConfig(_, desc, key, _) => (Some(key.clone()), desc.clone()),
        KafkaError::ClientCreation(msg) => {
            // The longest property of the configuration that the message names.
            let named = set
                .keys()
                .filter(|k| msg.contains(&format!("`{k}`")) || msg.contains(k.as_str()))
                .max_by_key(|k| k.len())
                .cloned();
            (named, msg.clone())
        }
        other => (None, other.to_string()),
    };
    let key = match named {
        Some(k) if set.contains_key(&k) => format!("kafka.properties.{k}"),
        _ => "kafka.properties".to_string(),
    };
    ConfigError::Key {
        key,
        reason: format!("librdkafka refuses the {role}'s settings: {detail}"),
    }
}

/// The context of the clients [`check_clients`] creates: they never connect, and librdkafka's
/// warning that no bootstrap server is configured is not for the user.
struct Quiet;

impl ClientContext for Quiet {
    fn log(&self, _: rdkafka::config::RDKafkaLogLevel, _: &str, _: &str) {}
    fn error(&self, _: KafkaError, _: &str) {}
}

impl rdkafka::consumer::ConsumerContext for Quiet {}

impl rdkafka::producer::ProducerContext for Quiet {
    type DeliveryOpaque = ();
    fn delivery(&self, _: &rdkafka::producer::DeliveryResult<'_>, _: ()) {}
}

/// Kafka's murmur2 hash (the Java client's `Utils.murmur2`), used by the Java client's default
/// partitioner: `(murmur2(key) & 0x7fffffff) % partitions`.
pub fn murmur2(data: &[u8]) -> i32 {
    const SEED: u32 = 0x9747_b28c;
    const M: u32 = 0x5bd1_e995;
    let mut h: u32 = SEED ^ data.len() as u32;
    let chunks = data.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        let Ok(word) = <[u8; 4]>::try_from(c) else { continue }; // always 4 bytes
        let mut k = u32::from_le_bytes(word);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    if let Some(b) = tail.get(2) {
        h ^= (*b as u32) << 16;
    }
    if let Some(b) = tail.get(1) {
        h ^= (*b as u32) << 8;
    }
    if let Some(b) = tail.first() {
        h ^= *b as u32;
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The key-hashing partitioners [`key_placed_in`] knows: the Java client's default (murmur2,
/// its sign bit cleared) and librdkafka's default `consistent_random` (CRC-32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyHash {
    #[default]
    Murmur2,
    Crc32,
}

impl KeyHash {
    /// The partition of `n` this partitioner writes `key` to.
    fn partition(self, key: &[u8], n: u32) -> u32 {
        match self {
            KeyHash::Murmur2 => ((murmur2(key) as u32) & 0x7fff_ffff) % n,
            KeyHash::Crc32 => crc32fast::hash(key) % n,
        }
    }

    fn other(self) -> KeyHash {
        match self {
            KeyHash::Murmur2 => KeyHash::Crc32,
            KeyHash::Crc32 => KeyHash::Murmur2,
        }
    }
}

/// True if a key-hashing producer ([`KeyHash`]) would have written `key` to `partition` of a
/// topic with `partitions` partitions. Records for which this is false have been placed by other
/// means (round robin, a custom partitioner, a changed partition count), so their replays may
/// land in another partition, outside the per-partition dedup scope. `first` is tried first and
/// becomes the partitioner that placed the key, if one did: a partition's records mostly come
/// from one kind of producer, so the other hash is mostly not computed (the answer does not
/// depend on `first`).
pub fn key_placed_in(key: &[u8], partition: i32, partitions: usize, first: &mut KeyHash) -> bool {
    if partitions == 0 {
        return true;
    }
    let (n, p) = (partitions as u32, partition as u32);
    if first.partition(key, n) == p {
        return true;
    }
    let second = first.other();
    if second.partition(key, n) == p {
        *first = second;
        return true;
    }
    false
}

/// The generation (classic group protocol) or member epoch (KIP-848) librdkafka holds for the
/// group consumer `consumer`: above 0 once the group coordinator has accepted it as a member, 0
/// or -1 before, and after it left or was fenced. `None` when librdkafka has no group metadata
/// (a consumer without `group.id`). With `group.protocol = "consumer"` this is how kafka-dedup
/// knows it joined when the group gives it no partition: librdkafka 2.12 calls no rebalance
/// callback for an assignment that stays empty. Read from librdkafka's serialized consumer group
/// metadata ([`generation_of`]).
pub fn member_epoch<C: rdkafka::consumer::ConsumerContext>(consumer: &BaseConsumer<C>) -> Option<i32> {
    use rdkafka::bindings as rd;
    // SAFETY: the metadata is created from the live client and destroyed here; the buffer
    // librdkafka writes is read within its `size` and freed with librdkafka's allocator.
    unsafe {
        let md = rd::rd_kafka_consumer_group_metadata(consumer.client().native_ptr());
        if md.is_null() {
            return None;
        }
        let (mut buf, mut size) = (std::ptr::null_mut(), 0usize);
        let error = rd::rd_kafka_consumer_group_metadata_write(md, &mut buf, &mut size);
        rd::rd_kafka_consumer_group_metadata_destroy(md);
        if !error.is_null() {
            rd::rd_kafka_error_destroy(error);
            return None;
        }
        let epoch = generation_of(std::slice::from_raw_parts(buf as *const u8, size));
        rd::rd_kafka_mem_free(std::ptr::null_mut(), buf);
        epoch
    }
}

/// The generation id in librdkafka's serialized consumer group metadata (format v2 of
/// `rd_kafka_consumer_group_metadata_write`, librdkafka 2.12: the 7 bytes `CGMDv2:`, then the
/// generation as a native-endian `i32`, then the group id, member id and instance id). `None`
/// for any other format.
pub fn generation_of(serialized: &[u8]) -> Option<i32> {
    let rest = serialized.strip_prefix(b"CGMDv2:")?;
    Some(i32::from_ne_bytes(rest.get(..4)?.try_into().ok()?))
}

/// Context of the consumers that read to the end of partitions (recovery, tests): the
/// end-of-partition events they ask for are not errors and are not logged as such.
#[derive(Default)]
pub struct ReaderContext {
    throttle: Throttle,
}

impl rdkafka::client::ClientContext for ReaderContext {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if matches!(error, rdkafka::error::KafkaError::PartitionEOF(_))
            || error.rdkafka_error_code() == Some(rdkafka::types::RDKafkaErrorCode::PartitionEOF)
        {
            return;
        }
        if let Some(suppressed) = self.throttle.admit(&error, std::time::Instant::now()) {
            tracing::warn!(error = %error, reason, suppressed, "kafka reader error");
        }
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        logs::log_client_line(&self.throttle, level, fac, log_message);
    }
}

impl rdkafka::consumer::ConsumerContext for ReaderContext {}

/// A consumer for reading partitions to their end.
pub type Reader = BaseConsumer<ReaderContext>;

mod commit;
pub use self::commit::{answered, commit_within, committed_when_ready, coordinator_not_ready, COORDINATOR_WAIT};
mod fit;
pub mod logs;
pub use self::close::{close_within, Bounded, CLOSE_TIMEOUT};
pub use self::logs::{Logged, Throttle};
mod backoff;
mod close;
pub use self::backoff::BackedOff;
pub use self::fit::{fit_to_topic, recompresses, size_fit, Kept};
mod properties;
pub use self::properties::{refused_override, Enforced, CONSUMER_ONLY, ENFORCED, PRODUCER_ONLY};
mod topics;
pub use self::topics::{check_route_topic, check_topics, partition_count, partition_count_for, TopicError};

#[cfg(test)]
mod tests;

//! kafka-dedup: a sidecar that makes an at-least-once Kafka topic effectively-once.
//!
//! # Layout: the path of one record
//!
//! 1. Consume: [`pipeline::run_filter`] polls the group consumer of `input.topic` (one thread),
//!    up to [`pipeline::BATCH`] records at a time; [`pipeline::context`] brings librdkafka's
//!    rebalances to the same [`pipeline::Filter`], and [`pipeline::delivery`] its producer's
//!    acknowledgements, through a queue the `Filter` drains a batch at a time
//!    (`pipeline::delivery_queue`).
//! 2. Fingerprint: [`pipeline::Filter::admit`] computes each record's [`fingerprint`] (xxh3-128
//!    of the configured source) and prefetches its slots in the partition's [`generations`].
//!    When the record is handled, its timestamp advances the partition clock first, which
//!    rotates the generations when it enters a later bucket of record time ([`horizon`]).
//! 3. Route: [`pipeline::route::route`] decides, as a pure function of the lookup and the
//!    configuration, whether it is forwarded, dropped as a replay, or handled by `on_missing`.
//! 4. Produce: [`pipeline::Filter::on_record`] counts it ([`telemetry`]) and produces it to
//!    `output.topic` (same partition, key, value, headers, timestamp) or a side topic; its input
//!    offset waits in [`partition::InFlight`].
//! 5. Acknowledge: the producer's acknowledgement moves the partition's commit position.
//! 6. Checkpoint: every `checkpoint.interval` the frozen generations go to the [`store`], and
//!    input offsets are committed with [`metadata::CheckpointMeta`] (which carries the partition
//!    clock); transactional mode commits a transaction instead. With `store.changelog_topic`
//!    the frozen generations also go to that compacted topic ([`changelog`]), and the metadata
//!    names them once acknowledged.
//! 7. On assignment, [`recovery`] (read, plan, execute) rebuilds a partition's generations from
//!    the store (or, without a usable one, the [`changelog`]) and the output topic (the truth)
//!    before it runs; [`partition::Partition`] is its
//!    life cycle, [`state::PartitionState`] its name.
//!
//! Global scope (`fingerprint.scope = "global"`, docs/global-scope-design.md): a route stage,
//! [`global::run_route`], first copies every input record to `fingerprint.route_topic`, partition
//! [`global::route_partition`] (fingerprint mod N), committing input offsets once the copies are
//! acknowledged; steps 1 to 7 then run unchanged on the route topic
//! ([`config::Config::filter_stage`]), where every copy of an event meets in one partition. A
//! record without fingerprint is known there by its provenance
//! ([`fingerprint::Fingerprinter::stand_in`]); a second copy the route stage made of one input
//! record is dropped by its provenance ([`global::copy_fate`]). Both stages run in one process.
//!
//! Around it: [`record`] (what is read of a record: key, value, headers as bytes; below both
//! [`fingerprint`] and [`provenance`]), [`config`] (TOML + environment), [`security`] (TLS/SASL checks, secrets from
//! files), [`schema_registry`] (writer schemas of `avro:` and `protobuf:` sources, fetched by id and cached),
//! [`kafka`] (client settings), [`service`] (signals, HTTP), [`http`] (every route),
//! [`status`] (`/readyz`), [`topics`] (topics deleted or recreated while running), [`inspect`]
//! and [`migrate`] (store tools), [`audit`] (did it work: duplicates, lost records and order,
//! read from the topics), [`demo`] and [`scenario`]
//! (the seed scenario), [`connect`] (`check-config --connect`: what the brokers say), [`alloc`]
//! (the process's allocator, mimalloc, also librdkafka's). The design: `docs/ARCHITECTURE.md`.

pub mod alloc;
pub mod audit;
pub mod changelog;
pub mod config;
pub mod connect;
pub mod crash;
pub mod demo;
pub mod fingerprint;
pub mod generations;
pub mod global;
pub mod horizon;
pub mod http;
pub mod inspect;
pub mod kafka;
pub mod metadata;
pub mod migrate;
pub mod partition;
pub mod pipeline;
pub mod provenance;
pub mod record;
pub mod recovery;
pub mod scenario;
pub mod schema_registry;
pub mod security;
pub mod service;
pub mod state;
pub mod status;
pub mod store;
pub mod table;
pub mod telemetry;
pub mod topics;

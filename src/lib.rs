//! kafka-dedup: a sidecar that makes an at-least-once Kafka topic effectively-once.
//!
//! # Layout: the path of one record
//!
//! 1. [`pipeline::run_filter`] polls the group consumer of `input.topic` (one thread), up to
//!    [`pipeline::BATCH`] records at a time.
//! 2. [`pipeline::Filter::admit`] computes each record's [`fingerprint`] (xxh3-128 of the
//!    configured source) and prefetches its slots; [`pipeline::Filter::on_record`] looks it up in
//!    its partition's [`generations`] (each a [`table::FingerprintTable`]). A hit is a replay:
//!    counted ([`telemetry`]) and dropped.
//! 3. A miss is inserted into the current generation and produced to `output.topic` (same
//!    partition, key, value, headers, timestamp) by the idempotent producer; its input offset is
//!    tracked in [`partition::InFlight`] until the acknowledgement arrives.
//! 4. Every `checkpoint.interval`, [`pipeline`] rotates generations, waits for acknowledgements,
//!    writes the frozen generations to the [`store`] and commits the input offsets with
//!    [`metadata::CheckpointMeta`] (where each live generation begins in the output).
//! 5. On assignment, [`recovery`] rebuilds a partition's generations from the store and the
//!    output topic (the truth) before consuming it; [`partition::Partition`] is its life cycle.
//!
//! Around it: [`config`] (TOML + environment), [`security`] (TLS/SASL checks, secrets from
//! files), [`kafka`] (client settings), [`service`] (signals, HTTP), [`http`] and [`status`]
//! (`/metrics`, `/healthz`, `/readyz`), [`telemetry`] (every metric name), [`inspect`] and
//! [`migrate`] (store tools), [`demo`] and [`scenario`] (the seed scenario).

pub mod config;
pub mod crash;
pub mod demo;
pub mod fingerprint;
pub mod generations;
pub mod http;
pub mod inspect;
pub mod kafka;
pub mod metadata;
pub mod migrate;
pub mod partition;
pub mod pipeline;
pub mod recovery;
pub mod scenario;
pub mod security;
pub mod service;
pub mod state;
pub mod status;
pub mod store;
pub mod table;
pub mod telemetry;

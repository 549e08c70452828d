//! `kafka-dedup audit --config FILE`: did it work? Reads the configured input and output topics,
//! fingerprints both with `fingerprint.source`, and reports per partition:
//!
//! - **duplicates**: output records repeating an earlier one (the same input record twice, by
//!   provenance; or the same fingerprint less than H_min apart on the output's record clock);
//! - **lost**: input records neither in the output nor replays of an event that is, nor let past
//!   on purpose (below);
//! - **out of order**: output records whose source comes before an earlier output record's;
//! - **unexpected**: output records that copy no input record of the range;
//! - and, apart, not a failure: **repeats outside the horizon**, identical records forwarded
//!   H_max or more apart (the filter's rule); input records let past on purpose, not in the
//!   output: **skipped** (named in `input.skip`) and **dead-lettered** (a copy in
//!   `fingerprint.dead_letter_topic` names them by provenance; its reason is reported).
//!
//! The exact rules, the horizon (H_min, H_max) and the memory bound are in [`core`](mod@core);
//! where each partition's range begins and ends in [`read`]. Without provenance headers records
//! are matched by fingerprint and order; with them (`kafka-dedup.source`, [`crate::provenance`])
//! by input offset, exactly.
//!
//! The rooms:
//! - [`core`](mod@core): the rules, as a pure function over two in-memory record streams, in
//!   four files: the records compared (`core/record.rs`), what a partition's audit is told
//!   (`core/rules.rs`), what it finds (`core/findings.rs`), and the walk (`core/walk.rs`);
//! - [`read`]: the Kafka side: ranges, the two streams, progress;
//! - [`report`]: the answer, as JSON and as text;
//! - [`cli`]: the command line.
//!
//! Only `output.partitioning = "preserve"` is audited: with `key`, an output partition mixes
//! input partitions and the order to check is per input partition within each output partition.

pub mod cli;
pub mod core;
pub mod read;
pub mod report;

pub use cli::{run, AuditArgs, TimeArg};
pub use report::Report;

use rdkafka::error::KafkaError;

use crate::kafka::TopicError;

/// Why the audit could not be made. `main` exits with [`AuditError::exit_code`].
#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    /// A topic is missing, or the output has fewer partitions than the input.
    #[error(transparent)]
    Topics(#[from] TopicError),
    /// `fingerprint.schema_registry` cannot be set up (its CA file).
    #[error(transparent)]
    SchemaRegistry(#[from] crate::schema_registry::RegistryConfigError),
    /// `partitioning = "preserve"` with fewer output than input partitions: the filter holds the
    /// input partitions without an output partition, so there is nothing to compare them with.
    #[error(
        "output topic \"{output}\" has {output_partitions} partitions, input topic \"{input}\" {input_partitions}: \
         with output.partitioning = \"preserve\" each input partition needs its output partition \
         (audit the others with --partition)"
    )]
    TooFewOutputPartitions {
        /// The input topic.
        input: String,
        /// Its partition count.
        input_partitions: usize,
        /// The output topic.
        output: String,
        /// Its partition count.
        output_partitions: usize,
    },
    /// `output.partitioning = "key"`.
    #[error(
        "output.partitioning = \"key\": the audit checks \"preserve\" only (with key partitioning an output \
         partition mixes input partitions)"
    )]
    KeyPartitioning,
    /// `--partition` names a partition the input topic does not have.
    #[error("--partition {partition}: the input topic \"{topic}\" has {partitions} partitions")]
    NoSuchPartition {
        /// The partition asked for.
        partition: i32,
        /// The input topic.
        topic: String,
        /// Its partition count.
        partitions: usize,
    },
    /// Bounds that leave nothing to audit.
    #[error(transparent)]
    Usage(#[from] UsageError),
    /// A Kafka request failed.
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// A topic partition returned nothing, neither records nor its end, for too long.
    #[error("{topic} partition {partition}: nothing read at offset {offset} for {seconds} s")]
    Stalled {
        /// The topic.
        topic: String,
        /// The partition.
        partition: i32,
        /// The offset expected next.
        offset: i64,
        /// How long it waited.
        seconds: u64,
    },
    /// The report could not be written.
    #[error("writing the report: {0}")]
    Io(#[from] std::io::Error),
}

/// Command-line bounds that leave nothing to audit.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UsageError {
    /// `--from-offset` at or after `--to-offset`.
    #[error("--from-offset {from} is not before --to-offset {to}")]
    EmptyOffsets {
        /// `--from-offset`.
        from: i64,
        /// `--to-offset`.
        to: i64,
    },
    /// `--since` at or after `--until` (ms since the Unix epoch).
    #[error("--since is not before --until ({since} ms >= {until} ms since the Unix epoch)")]
    EmptyTimes {
        /// `--since`.
        since: i64,
        /// `--until`.
        until: i64,
    },
}

impl AuditError {
    /// The process exit code: 2 for what the configuration or the command line fixes (as every
    /// command, docs/commands.md, "Commands"), 1 for a failure while reading.
    pub fn exit_code(&self) -> u8 {
        match self {
            AuditError::Topics(TopicError::Kafka(_)) => 1,
            AuditError::Topics(_)
            | AuditError::KeyPartitioning
            | AuditError::NoSuchPartition { .. }
            | AuditError::TooFewOutputPartitions { .. } => 2,
            AuditError::Usage(_) | AuditError::SchemaRegistry(_) => 2,
            AuditError::Kafka(KafkaError::ClientCreation(_) | KafkaError::ClientConfig(..)) => 2,
            AuditError::Kafka(_) | AuditError::Stalled { .. } | AuditError::Io(_) => 1,
        }
    }
}

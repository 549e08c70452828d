//! The pipeline: consume → fingerprint → route → produce → acknowledge → checkpoint.
//!
//! One thread runs the consumer's poll loop ([`run_filter`]). It takes records in batches of up
//! to [`BATCH`]: each is [admitted](Filter::admit) (fingerprinted, its lookup prefetched) as it
//! arrives, then handled in order by [`Filter::on_record`], which asks [`route::route`] what
//! happens to it and carries that out. Producer acknowledgements arrive from librdkafka's
//! producer thread through a channel and are applied by [`Filter::tick`] (once per batch), which
//! also installs recovered partitions and drives checkpoints. Rebalance callbacks run inside
//! `poll` on the same thread and reach the same [`Filter`] through the consumer context, so
//! exactly one owner touches partition state.
//!
//! The rooms, from the bottom up (each file imports only files above it in this list, never
//! one below; the graph is drawn in docs/ARCHITECTURE.md and checked by `tests/pipeline_graph.rs`):
//! - [`route`]: the pure decision of where one record goes;
//! - `refused`: what a halted partition holds (the refused copies, the retry back-off);
//! - [`delivery`]: the producer's context, whose callback sends `DeliveryEvent`s
//!   into a queue, and the delivery opaque;
//! - `delivery_queue`: that queue (many senders, the pipeline thread drains it a batch at a
//!   time: a lock and a swap of two vectors);
//! - `topic`: a producer's handle of one topic, made once, through which `produce` sends (no
//!   topic name per record);
//! - `produce`: producing a record (destination, headers, what a refused send gives back);
//! - `recoveries`: the recovery workers' results, as data;
//! - `checkpoint_state`: a checkpoint's state as data (`CheckpointRecord`, the checkpoint in
//!   progress and its stage);
//! - `mode`: the delivery mode as a value carrying its own state;
//! - `filter`: the [`Filter`] (the pipeline's state) and what happens to one record;
//! - [`context`]: the consumer's context, which owns the `Filter` and hands it rebalances;
//! - the `Filter`'s rooms, each an `impl Filter` that `filter` does not import: `tick` (one step
//!   between two polls), `acknowledge` (applying acknowledgements), `halt` (a side topic that
//!   refuses copies halts its partition, which retries them), `backpressure`, `checkpoint`
//!   (periodic checkpoints: the idempotent mode's stages), `transaction` (the transactional
//!   mode's checkpoint: the transaction's commit, pending while the broker is away), `ownership`
//!   (assignment, recovery results: a partition taken on), `handover` (revocation, a lost
//!   assignment, shutdown, abort: partitions given up);
//! - this file: start-up and the poll loop, [`Shutdown`], [`RunError`], [`Fatal`].
//!
//! docs/ARCHITECTURE.md ("Checkpoint", "The partition life cycle") tells the whole story.

mod acknowledge;
mod backpressure;
mod checkpoint;
mod checkpoint_state;
pub mod context;
pub mod delivery;
mod delivery_queue;
mod filter;
mod halt;
mod handover;
mod mode;
mod ownership;
mod produce;
mod producers;
mod recoveries;
pub(crate) mod refused;
pub mod route;
mod tick;
mod topic;
mod transaction;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use tracing::{debug, error, info, warn};

use crate::config::{Config, Partitioning};
use crate::fingerprint::{Fingerprint, Unfingerprintable};
use crate::kafka::{self, TopicError};
use crate::status::Status;
use crate::store::{Identity, Opened, Store, StoreError};
use crate::telemetry;

pub use context::{FilterConsumer, FilterContext};
pub use delivery::DeliveryContext;
pub use filter::{Filter, Handled};
pub use handover::HandoverError;
pub(crate) use produce::{copy_of, too_large, TimestampLimits};
pub(crate) use producers::DESCRIBE_CONFIGS_TIMEOUT;
pub use transaction::TransactionError;

use context::StartupContext;
use rdkafka::message::BorrowedMessage;

/// Timeout of synchronous Kafka calls on the poll thread (commit, seek, transaction steps).
const KAFKA_TIMEOUT: Duration = Duration::from_secs(30);

/// Records taken from the consumer per turn of the poll loop, at most: after the first (waited
/// for up to 100 ms), whatever the consumer already holds, without waiting. Each is
/// [admitted](Filter::admit) as it arrives (its fingerprint's home slots start loading), then all
/// are handled in order; with millions of fingerprints held, the lookups' cache misses overlap
/// instead of adding up (`generations/miss_insert_batched` in `benches/table.rs`). Acknowledgements
/// and checkpoints are driven once per batch. 32 records take a few tens of microseconds.
pub const BATCH: usize = 32;

/// How long the poll loop waits for the first record of a batch.
const POLL_WAIT: Duration = Duration::from_millis(100);

/// How long it waits instead while a recovery worker runs. A finished recovery is installed
/// (resumed, sought) by the next tick, and nothing wakes the poll for it: the recovering
/// partitions are paused, so with [`POLL_WAIT`] a recovered partition waited up to 100 ms
/// (measured: 0.10 s from assignment to running for a fresh partition whose recovery took 10 ms,
/// BENCHMARKS.md "Start → first forwarded record"). Only the wait changes: 200 empty turns a
/// second while a recovery runs.
const RECOVERY_POLL_WAIT: Duration = Duration::from_millis(5);

/// A stop request shared by the signal handler, the HTTP server and the pipeline thread.
#[derive(Clone, Default)]
pub struct Shutdown(Arc<AtomicBool>);

impl Shutdown {
    /// A new, untriggered signal.
    pub fn new() -> Self {
        Self::default()
    }
    /// Asks the pipeline to finish its checkpoint and stop.
    pub fn trigger(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    /// True once triggered.
    pub fn is_triggered(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Why the filter stopped with an error. `main` maps these to exit codes.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The topics do not fit the configuration (exit 2).
    #[error(transparent)]
    Topics(#[from] TopicError),
    /// The store cannot be used (exit 1; 2 when it is not a store or needs a migration).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A Kafka client could not be created or a required call failed (exit 1).
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// The pipeline stopped; nothing was committed past the failed record (exit 1).
    #[error(transparent)]
    Fatal(#[from] Fatal),
    /// `fingerprint.schema_registry` cannot be set up (its CA file; exit 2).
    #[error(transparent)]
    SchemaRegistry(#[from] crate::schema_registry::RegistryConfigError),
}

/// A condition that stops the pipeline. Offsets are not committed past the record concerned, so
/// the next start processes it again.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Fatal {
    /// A record could not be delivered to the output topic (after librdkafka's retries) or was
    /// refused; in transactional mode also a side copy the broker refused (a side copy otherwise
    /// halts its partition: `halt`).
    #[error("partition {partition} offset {offset}: delivery to {topic} failed: {error}{}", way_past(error, topic, *partition, *offset, *skippable))]
    Delivery {
        /// Input partition of the record.
        partition: i32,
        /// Input offset of the record (for an acknowledgement error: the first record of the
        /// refused batch, or the partition's commit position when the report names no record
        /// still pending).
        offset: i64,
        /// The topic it was produced to.
        topic: String,
        /// librdkafka's error.
        error: KafkaError,
        /// Whether `input.skip` can let the record past: the filter's input records; not the
        /// route stage's (in the global scope `input.skip` names route topic records, read by
        /// the filter stage), whose only way past a record too large is the route topic's limit.
        skippable: bool,
    },
    /// `fingerprint.on_missing = "fail"` met a record without fingerprint.
    #[error(
        "partition {partition} offset {offset}: no fingerprint ({reason}) and fingerprint.on_missing = \"fail\"; \
         to let this record past, set input.skip = \"{partition}:{offset}\" (it then goes to \
         fingerprint.dead_letter_topic when one is set), or choose another fingerprint.on_missing"
    )]
    Unfingerprintable {
        /// Input partition of the record.
        partition: i32,
        /// Input offset of the record.
        offset: i64,
        /// Why it has no fingerprint.
        reason: Unfingerprintable,
    },
    /// A transaction step failed (transactional mode).
    #[error("transaction: {0}")]
    Transaction(#[from] TransactionError),
    /// A hand-over (revocation or stop) could not finish: what the producer still held was
    /// dropped (idempotent mode) or the open transaction aborted (transactional mode), so no
    /// record of the partitions given up can reach the output later; the process exits and the
    /// next owner's recovery (and fence wait) takes over.
    #[error(
        "hand-over of partitions {partitions:?} failed ({error}); records not acknowledged were dropped, \
             the next owner recovers from the output topic"
    )]
    Handover {
        /// The input partitions being handed over.
        partitions: Vec<i32>,
        /// Why it failed.
        error: Arc<HandoverError>,
    },
    /// The group consumer failed for good (librdkafka's fatal error, e.g. `FENCED_INSTANCE_ID`:
    /// another process uses the same `input.group_instance_id`); the process exits rather than
    /// sit in the group owning nothing.
    #[error("the consumer failed for good: {0}")]
    Consumer(KafkaError),
    /// The group took partitions away without a hand-over (session timeout, fenced member)
    /// while records of them were still unacknowledged (or, in transactional mode, in the open
    /// transaction): they were dropped from the producer and the process exits, so none can
    /// land after the next owner re-read the output (README, "The guarantee during a
    /// rebalance").
    #[error(
        "assignment of partitions {partitions:?} lost with records not yet acknowledged; they were dropped \
             from the producer, the next owner recovers from the output topic"
    )]
    AssignmentLost {
        /// The input partitions lost.
        partitions: Vec<i32>,
    },
    /// The recovery of a partition panicked `ownership::RECOVERY_PANICS_MAX` times in a row: a bug
    /// that recurs at every attempt (issue 22). Retrying for ever would leave the partition
    /// recovering, unnoticed; the process exits 1 with the panic's message instead.
    #[error(
        "recovery of partition {partition} panicked {panics} times in a row (a bug: please report it with the log; \
         deleting the store directory makes the next start rebuild from the output topic, which helps if the \
         store caused it): {error}"
    )]
    RecoveryPanicked {
        /// The input partition.
        partition: i32,
        /// Panics in a row.
        panics: u32,
        /// The last panic's message.
        error: String,
    },
    /// The seek that starts a recovered partition still failed `ownership::seek_failing_max`
    /// after its first failure: librdkafka has not started fetching the partition, which only a
    /// new assignment does; the restart joins the group anew.
    #[error(
        "partition {partition}: the consumer refused to seek it for {seconds} s ({error}): librdkafka has not started \
         fetching it, which only a new assignment does (its fetch of the group's committed offsets for the \
         assignment failed: see the `kafka client error` lines before); exiting so that the restart joins the group \
         anew (nothing past the last checkpoint was committed)"
    )]
    SeekFailing {
        /// The input partition.
        partition: i32,
        /// Since the first failed seek, seconds.
        seconds: u64,
        /// The last seek's error.
        error: String,
    },
}

/// What to do about a delivery that failed with `error`, to append to [`Fatal::Delivery`]'s
/// message: for a record too large for the output (the broker refused it), the settings and the
/// way past (issue 23, item 3); for a timestamp out of the output's range, the same; for any
/// other refusal of the filter's input records (`skippable`), the `input.skip` entry that lets
/// the record at `partition`/`offset` past, since a refusal the broker makes for one record
/// (`POLICY_VIOLATION`, `CORRUPT_MESSAGE`, `INVALID_RECORD`) meets the same record at the next
/// start. `offset` is the first record of the refused batch: the culprit may be a later one.
fn way_past(error: &KafkaError, topic: &str, partition: i32, offset: i64, skippable: bool) -> String {
    let skip = format!(
        "let the record past with input.skip = \"{partition}:{offset}\" (the first record of {topic}'s refused batch, \
         not acknowledged; if a later record of the batch is the cause, name that one)"
    );
    if produce::too_large(error) && !skippable {
        format!(
            "; raise the max.message.bytes of the route topic {topic} to at least the input topic's plus 1 KB \
             (the route stage copies every input record there with a provenance header; it has no other way past \
             a record too large for it)"
        )
    } else if !skippable {
        String::new()
    } else if produce::too_large(error) {
        format!(
            "; raise the max.message.bytes of {topic} (the next start fits the producer to it, and a record \
             too large for it then halts only its partition), set fingerprint.dead_letter_topic, or {skip}"
        )
    } else if produce::out_of_range(error) {
        format!(
            "; a record's timestamp is out of the range {topic} takes (message.timestamp.before.max.ms / \
             message.timestamp.after.max.ms, changed while running?): the next start reads them and a record out of \
             range then halts only its partition (or goes to fingerprint.dead_letter_topic); or {skip}"
        )
    } else {
        format!("; if the broker refused one record (a policy, a corrupt or invalid record), {skip}")
    }
}

/// The identity a store must have to be used with `cfg`.
pub fn identity_of(cfg: &Config) -> Identity {
    Identity {
        group_id: cfg.input.group_id.clone(),
        input_topic: cfg.input.topic.clone(),
        output_topic: cfg.output.topic.clone(),
        source: cfg.fingerprint.identity().to_string(),
    }
}

/// Runs the filter until `shutdown` is triggered (then hands over cleanly and returns `Ok`) or
/// a fatal error (returns it; nothing committed past the failed record). Blocking: call it from
/// a dedicated thread. `status` is updated for `/readyz` and the demo.
pub fn run_filter(cfg: Arc<Config>, shutdown: Shutdown, status: Arc<Status>) -> Result<(), RunError> {
    // A directory that is not a store, or of another format, is refused without Kafka. Then the
    // topics must exist and fit, checked before the store may change (a typo in a topic name must
    // not cost a store rebuild); a broker that cannot be reached yet is waited for.
    Store::precheck_for_run(&cfg.store.path)?;
    let Some(topics) = wait_for_topics(&cfg, &shutdown, &status)? else {
        return Ok(());
    };
    let (store, unopened) = open_store(&cfg)?;
    status.set_store(store.clone());
    let Some(mut filter) = Filter::start(cfg.clone(), store.clone(), shutdown.clone(), status.clone(), topics)? else {
        // Stopped while init_transactions waited for the broker: nothing was owned.
        store.remove_live_file();
        return Ok(());
    };
    if let Some(e) = unopened {
        filter.store_written(&Err(e));
    }
    let consumer: FilterConsumer =
        kafka::consumer_config(&cfg).create_with_context(FilterContext::new(filter, status.clone(), &cfg))?;
    // Closed within a bound, by `close` below or, on a panic, when dropped.
    let consumer = kafka::Bounded::new(consumer, "filter");
    consumer.subscribe(&[&cfg.input.topic])?;
    info!(input = %cfg.input.topic, output = %cfg.output.topic, group = %cfg.input.group_id, "filter started");

    let result = poll_loop(&consumer, &shutdown);
    let result = stop(&consumer, result, &status);
    if result.is_err() {
        // The other stage of the global scope starts its hand-over now, not after this close.
        shutdown.trigger();
    }
    consumer.unsubscribe();
    let closed = consumer.close();
    if result.is_ok() && closed {
        // Every partition was handed over: its snapshot is complete. After an error (or a close
        // left unfinished, the store still open) the file stays, and `inspect` says the
        // snapshots may lack what was forwarded since.
        store.remove_live_file();
    }
    result.map_err(RunError::from)
}

/// Partition counts of the input and output topics, as checked at start and raised when a
/// recovery finds more (partitions added while running: `ownership`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TopicCounts {
    /// Partitions of `input.topic` (for the out-of-scope diagnostics).
    pub input: usize,
    /// Partitions of `output.topic` (`key` partitioning's recovery re-reads all of them).
    pub output: usize,
}

/// Checks that the topics exist and fit, retrying while the brokers cannot be reached. `None`
/// when a stop was requested meanwhile.
fn wait_for_topics(cfg: &Config, shutdown: &Shutdown, status: &Arc<Status>) -> Result<Option<TopicCounts>, RunError> {
    let metadata: BaseConsumer<StartupContext> =
        kafka::reader_config(cfg).create_with_context(StartupContext::new(status.clone()))?;
    loop {
        match kafka::check_topics(&metadata, cfg, Duration::from_secs(10)) {
            Ok((input, output)) => {
                if cfg.output.partitioning == Partitioning::Preserve && output < input {
                    error!(
                        input = %cfg.input.topic, input_partitions = input,
                        output = %cfg.output.topic, output_partitions = output,
                        "output.partitioning = \"preserve\" writes input partition N to output partition N, and the \
                         output topic has fewer partitions: input partitions {output} and above are held (nothing of \
                         them is forwarded or committed) until partitions are added to the output topic; the others run"
                    );
                }
                return Ok(Some(TopicCounts { input, output }));
            }
            Err(TopicError::Kafka(e)) => {
                status.set_broker(false, Some(format!("metadata: {e}")));
                warn!(error = %e, "cannot reach the brokers; retrying");
                if shutdown.is_triggered() {
                    return Ok(None);
                }
                // Serves the client's error callbacks (an authentication failure reaches
                // /readyz from there) while waiting a second.
                let _ = metadata.poll(Duration::from_secs(1));
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// Opens (or creates, or replaces) the store for this deployment, and says so in the log. On a
/// full disk the store is a closed one, with the error: the filter runs without it (every
/// partition rebuilds from the output topic) and opens it at a checkpoint once space returns;
/// exiting instead would restart in a loop, each start failing the same way.
fn open_store(cfg: &Config) -> Result<(Store, Option<StoreError>), RunError> {
    let identity = identity_of(cfg);
    let (store, opened) = match Store::open_for_run(&cfg.store.path, &identity) {
        Ok(opened) => opened,
        Err(e) if e.is_no_space() => return Ok((Store::closed_for_run(&cfg.store.path, &identity), Some(e))),
        Err(e) => return Err(e.into()),
    };
    // Absolute: the default (`./kafka-dedup-data`) is relative to the working directory.
    let path = std::path::absolute(&cfg.store.path).unwrap_or_else(|_| cfg.store.path.clone());
    match &opened {
        Opened::Replaced { reason, detail } => {
            warn!(path = %path.display(), reason, "local store replaced: {detail}; partitions rebuild from the output topic");
            telemetry::store_rebuild(reason);
        }
        Opened::Created => info!(path = %path.display(), "new local store"),
        Opened::Existing => info!(path = %path.display(), "local store opened"),
    }
    // Written with or without an address: a file left behind says the store was not closed
    // cleanly (`LIVE_FILE`).
    store.write_live_file(&cfg.http.listen);
    Ok((store, None))
}

/// A record taken from the consumer and its fingerprint, computed when it was admitted.
type Admitted<'c> = (BorrowedMessage<'c>, Result<Fingerprint, Unfingerprintable>);

/// Polls, handles and ticks until a stop is requested (`Ok`) or a fatal error.
fn poll_loop(consumer: &FilterConsumer, shutdown: &Shutdown) -> Result<(), Fatal> {
    let mut batch = Vec::with_capacity(BATCH);
    loop {
        if shutdown.is_triggered() {
            return Ok(());
        }
        let taken = take_batch(consumer, &mut batch);
        let mut f = consumer.context().lock();
        if let Err(e) = taken.and_then(|()| handle_batch(&mut f, consumer, &mut batch, shutdown)) {
            f.fail(e.clone());
            return Err(e);
        }
        f.tick(consumer)?;
    }
}

/// Fills `batch` with up to [`BATCH`] records: the first waited for up to [`POLL_WAIT`] (or
/// [`RECOVERY_POLL_WAIT`] while a recovery runs), the rest only if the consumer already holds
/// them. Polls without holding the filter: rebalance callbacks run inside `poll` and take it.
fn take_batch<'c>(consumer: &'c FilterConsumer, batch: &mut Vec<Admitted<'c>>) -> Result<(), Fatal> {
    batch.clear();
    let mut wait = if consumer.context().lock().recovery_running() {
        RECOVERY_POLL_WAIT
    } else {
        POLL_WAIT
    };
    while batch.len() < BATCH {
        match consumer.poll(wait) {
            Some(Ok(msg)) => {
                let fp = consumer.context().lock().admit(&msg);
                batch.push((msg, fp));
                wait = Duration::ZERO;
            }
            Some(Err(e @ KafkaError::MessageConsumptionFatal(_))) => return Err(Fatal::Consumer(e)),
            Some(Err(e)) => {
                debug!(error = %e, "consumer error");
                break;
            }
            None => break,
        }
    }
    Ok(())
}

/// Handles the records of `batch` in order; stops at the first fatal error.
fn handle_batch(
    f: &mut Filter,
    consumer: &FilterConsumer,
    batch: &mut Vec<Admitted<'_>>,
    shutdown: &Shutdown,
) -> Result<(), Fatal> {
    // One reading of the wall clock for the batch (the partition clock's `now`, the output's
    // timestamp check): read after the batch was polled, so no record of it was stamped later by
    // this host's clock; its records are handled within microseconds, and `produce::send` reads
    // it again after each wait for room in the producer's queue.
    let mut now = crate::generations::now_ms();
    for (msg, fp) in batch.drain(..) {
        // Once stopping, nothing more is taken: the producer refuses records then
        // (`Refused::Stopping`), and taking a later record of the same partition would let
        // the commit pass the refused one. Records left untaken are re-read by the next owner.
        if shutdown.is_triggered() {
            break;
        }
        if let Handled::ProducerFull(target) = f.on_record(&msg, fp, &mut now)? {
            // The rest of the batch is not taken either: every running partition pauses and
            // resumes, at its first record not taken, once the producer's queue drains.
            f.back_off(consumer, target);
            break;
        }
    }
    Ok(())
}

/// After the loop: a clean hand-over of every partition, or, after an error (or a hand-over
/// that failed), an abort. Returns the error the process stops with, if any.
fn stop(consumer: &FilterConsumer, result: Result<(), Fatal>, status: &Status) -> Result<(), Fatal> {
    let mut f = consumer.context().lock();
    let result = match result {
        Ok(()) => {
            // Its bounds, said: with the brokers away nothing else is logged until they pass.
            info!(
                handover_timeout = %humantime::format_duration(f.cfg.output.handover_timeout),
                close_timeout = %humantime::format_duration(kafka::CLOSE_TIMEOUT),
                "stopping: handing over every partition (waiting for acknowledgements, then committing), then closing \
                 the consumer"
            );
            f.shutdown(consumer)
        }
        Err(e) => Err(e),
    };
    if let Err(e) = &result {
        error!(error = %e, "stopping on error");
        status.set_fatal(e.to_string());
        f.abort();
    }
    result
}

#[cfg(test)]
mod tests {
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

    use super::Fatal;

    /// Every fatal delivery error of the filter's input records names the record and the
    /// `input.skip` entry that lets it past, with the settings that apply; the route stage's
    /// cannot be skipped.
    #[test]
    fn a_fatal_delivery_error_names_the_way_past() {
        let skip = "input.skip = \"3:17\"";
        let cases: &[(RDKafkaErrorCode, bool, &[&str], &[&str])] = &[
            (
                RDKafkaErrorCode::MessageSizeTooLarge,
                true,
                &[skip, "max.message.bytes of out"],
                &[],
            ),
            (
                RDKafkaErrorCode::MessageSizeTooLarge,
                false,
                &["route topic out"],
                &["input.skip"],
            ),
            (
                RDKafkaErrorCode::InvalidTimestamp,
                true,
                &[skip, "message.timestamp.before.max.ms"],
                &[],
            ),
            (RDKafkaErrorCode::PolicyViolation, true, &[skip], &[]),
            (RDKafkaErrorCode::InvalidRecord, true, &[skip], &[]),
            (RDKafkaErrorCode::InvalidMessage, true, &[skip], &[]),
            (RDKafkaErrorCode::PolicyViolation, false, &[], &["input.skip"]),
        ];
        for (code, skippable, has, lacks) in cases {
            let said = Fatal::Delivery {
                partition: 3,
                offset: 17,
                topic: "out".into(),
                error: KafkaError::MessageProduction(*code),
                skippable: *skippable,
            }
            .to_string();
            assert!(
                said.starts_with("partition 3 offset 17: delivery to out failed"),
                "{said}"
            );
            for h in *has {
                assert!(said.contains(h), "{code:?} {skippable}: {said}");
            }
            for l in *lacks {
                assert!(!said.contains(l), "{code:?} {skippable}: {said}");
            }
        }
    }
}

//! The pipeline: consume → fingerprint → look up → forward or drop → acknowledge → checkpoint.
//!
//! One thread runs the consumer's poll loop ([`run_filter`]). It takes records in batches of up
//! to [`BATCH`]: each is [admitted](Filter::admit) (fingerprinted, its lookup prefetched) as it
//! arrives, then handled in order by [`Filter::on_record`]. Producer acknowledgements arrive
//! from librdkafka's producer thread through a channel and are applied by [`Filter::tick`]
//! (once per batch), which also installs recovered partitions and drives checkpoints.
//! Rebalance callbacks run inside `poll` on the same thread and reach the same [`Filter`]
//! through the consumer context, so exactly one owner touches partition state.
//!
//! A checkpoint (every `checkpoint.interval`, idempotent mode):
//! 1. rotate the generations of every running partition whose input advanced by an interval of
//!    record time ([`Rotation`]: a stalled or lagging filter does not shorten the horizon) and
//!    note each partition's target offset
//!    (the consumer's position: everything taken so far, plus transaction markers librdkafka
//!    skipped);
//! 2. wait, without stopping consumption, until every record before each target is acknowledged;
//! 3. write the frozen generations and positions to the store in one atomic sled batch and flush,
//!    on a background thread;
//! 4. commit the targets with [`CheckpointMeta`] (epoch, output start of each live generation).
//!
//! In transactional mode a checkpoint commits the producer's transaction with the offsets in it.
//! On revocation and shutdown, the partition's deliveries are awaited, its generations (the
//! current one included, so no horizon is lost) are stored, and the offset is committed
//! synchronously with `clean = true`.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::statistics::Statistics;
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::{debug, error, info, warn};

use crate::config::{Config, Delivery, OnMissing, Partitioning};
use crate::fingerprint::{Fingerprint, Fingerprinter, Unfingerprintable};
use crate::generations::Generation;
use crate::inspect::{LiveRequest, PartitionView};
use crate::kafka::{self, TopicError};
use crate::metadata::{new_checkpoint_id, CheckpointMeta};
use crate::partition::{InFlight, Partition, Recovering, Rotation, Running, Target, SEQ_BITS};
use crate::recovery::{recover, Recovered, RecoveryEnv, RecoveryError, RecoveryRequest};
use crate::status::Status;
use crate::store::{Identity, Opened, PartitionWrite, Store, StoreError};
use crate::telemetry::{self, PartitionMetrics, Totals};

/// Timeout of synchronous Kafka calls on the poll thread (commit, seek, transaction steps).
const KAFKA_TIMEOUT: Duration = Duration::from_secs(30);

/// Records taken from the consumer per turn of the poll loop, at most: after the first (waited
/// for up to 100 ms), whatever the consumer already holds, without waiting. Each is
/// [admitted](Filter::admit) as it arrives (its fingerprint's home slots start loading), then all
/// are handled in order; with millions of fingerprints held, the lookups' cache misses overlap
/// instead of adding up (`generations/miss_insert_batched` in `benches/table.rs`). Acknowledgements
/// and checkpoints are driven once per batch. 32 records take a few tens of microseconds.
pub const BATCH: usize = 32;
/// How long a revocation or shutdown waits for in-flight deliveries before giving up on a clean
/// hand-over (the next owner then waits `output.fence_wait` instead).
const HANDOVER_TIMEOUT: Duration = Duration::from_secs(60);
/// Delay before retrying a recovery that failed (broker unreachable, ...).
const RECOVERY_RETRY: Duration = Duration::from_secs(2);

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
}

/// A condition that stops the pipeline. Offsets are not committed past the record concerned, so
/// the next start processes it again.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Fatal {
    /// A record could not be delivered (after librdkafka's retries) or was refused.
    #[error("partition {partition} offset {offset}: delivery to {topic} failed: {error}")]
    Delivery {
        partition: i32,
        offset: i64,
        topic: String,
        error: String,
    },
    /// `fingerprint.on_missing = "fail"` met a record without fingerprint.
    #[error("partition {partition} offset {offset}: no fingerprint ({reason}) and fingerprint.on_missing = \"fail\"")]
    Unfingerprintable {
        partition: i32,
        offset: i64,
        reason: String,
    },
    /// A transaction step failed (transactional mode).
    #[error("transaction: {0}")]
    Transaction(String),
}

/// An acknowledgement from the producer thread.
struct DeliveryEvent {
    /// `partition << SEQ_BITS | seq` (see [`InFlight`]).
    opaque: usize,
    /// Output partition and offset, or the error.
    result: Result<(i32, i64), (String, String)>,
}

/// Producer context: forwards every acknowledgement to the pipeline thread.
pub struct DeliveryContext {
    tx: Mutex<Sender<DeliveryEvent>>,
    /// Receives client errors: the producer's background thread reports an authentication or
    /// TLS failure at once, with librdkafka's explanation (`/readyz`).
    status: Arc<Status>,
}

impl ClientContext for DeliveryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.status.note_client_error(&error, reason);
        warn!(error = %error, reason, "kafka producer error");
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        let result = match result {
            Ok(m) => Ok((m.partition(), m.offset())),
            Err((e, m)) => Err((m.topic().to_string(), e.to_string())),
        };
        if let Ok(tx) = self.tx.lock() {
            let _ = tx.send(DeliveryEvent { opaque, result });
        }
    }
}

fn encode_opaque(partition: i32, seq: u64) -> usize {
    ((partition as u64) << SEQ_BITS | seq) as usize
}

fn decode_opaque(opaque: usize) -> (i32, u64) {
    let v = opaque as u64;
    ((v >> SEQ_BITS) as i32, v & ((1 << SEQ_BITS) - 1))
}

/// Context of the consumer that checks the topics at start: client errors (authentication, TLS)
/// reach `/readyz` before the pipeline's own clients exist.
struct StartupContext(Arc<Status>);

impl ClientContext for StartupContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.0.note_client_error(&error, reason);
        warn!(error = %error, reason, "kafka client error");
    }
}

impl ConsumerContext for StartupContext {}

/// Consumer context: rebalance callbacks reach the [`Filter`]; statistics feed lag and status.
pub struct FilterContext {
    /// The pipeline state; locked by the poll loop around each record and by callbacks.
    pub filter: Mutex<Filter>,
    /// Shared with the HTTP server.
    pub status: Arc<Status>,
    input_topic: String,
}

impl ClientContext for FilterContext {
    fn stats(&self, stats: Statistics) {
        let up = stats.brokers.values().any(|b| b.state == "UP");
        self.status.set_broker(up, None);
        if let Some(t) = stats.topics.get(&self.input_topic) {
            let owned = self.status.partitions(); // ops: no stale lag for released partitions
            for (p, ps) in &t.partitions {
                if *p >= 0 && ps.consumer_lag >= 0 && owned.contains_key(p) {
                    telemetry::consumer_lag(*p, ps.consumer_lag);
                }
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.status.note_client_error(&error, reason); // ops: authentication/TLS -> /readyz
        let serious = matches!(
            error.rdkafka_error_code(),
            Some(RDKafkaErrorCode::AllBrokersDown)
                | Some(RDKafkaErrorCode::Authentication)
                | Some(RDKafkaErrorCode::SaslAuthenticationFailed)
                | Some(RDKafkaErrorCode::SSL)
                | Some(RDKafkaErrorCode::BrokerTransportFailure)
        );
        if serious {
            self.status.set_broker(false, Some(format!("{error}: {reason}")));
        }
        warn!(error = %error, reason, "kafka client error");
    }
}

impl ConsumerContext for FilterContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Revoke(tpl) = rebalance {
            let parts: Vec<i32> = tpl
                .elements_for_topic(&self.input_topic)
                .iter()
                .map(|e| e.partition())
                .collect();
            let lost = consumer.assignment_lost();
            if let Ok(mut f) = self.filter.lock() {
                f.revoke(consumer, &parts, lost);
            }
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let parts: Vec<i32> = tpl
                    .elements_for_topic(&self.input_topic)
                    .iter()
                    .map(|e| e.partition())
                    .collect();
                if let Ok(mut f) = self.filter.lock() {
                    f.assign(consumer, &parts);
                }
                self.status.set_joined();
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => warn!(error = %e, "rebalance error"),
        }
    }

    fn commit_callback(&self, result: KafkaResult<()>, offsets: &TopicPartitionList) {
        match result {
            Ok(()) => {
                telemetry::checkpoint_result(true);
                crate::crash::point("offsets-committed");
            }
            Err(e) => {
                warn!(error = %e, partitions = offsets.count(), "offset commit failed; the next checkpoint commits again");
                telemetry::checkpoint_result(false);
            }
        }
    }
}

/// The consumer type of the pipeline.
pub type FilterConsumer = BaseConsumer<FilterContext>;

/// One partition's part of a checkpoint in progress.
struct CheckpointPart {
    /// Ownership the checkpoint was taken for.
    incarnation: u64,
    /// Input offset to commit: every record before it must be acknowledged first.
    target: i64,
    /// Live generations after the rotation, oldest first; the last is the new, empty current
    /// generation as of the rotation (records taken since are re-learned from the output).
    frozen: Vec<Arc<Generation>>,
    current: Generation,
    /// Metadata to commit.
    meta: CheckpointMeta,
}

/// What the background store write of a checkpoint needs for one partition: partition, commit
/// target, metadata, the frozen live generations, and the new current generation (empty).
type PersistJob = (i32, i64, CheckpointMeta, Vec<Arc<Generation>>, Generation);

enum Stage {
    /// Waiting for acknowledgements up to each target.
    Delivering,
    /// The store write runs on a background thread.
    Persisting(Receiver<Result<(), StoreError>>),
}

/// A checkpoint in progress (at most one at a time).
struct Checkpoint {
    started: Instant,
    parts: BTreeMap<i32, CheckpointPart>,
    stage: Stage,
}

/// The pipeline state: partitions, producer, store, checkpoint. Owned by [`FilterContext`].
pub struct Filter {
    /// The configuration.
    cfg: Arc<Config>,
    /// Computes fingerprints from the configured source.
    fingerprinter: Fingerprinter,
    /// Writes the output and side topics.
    producer: ThreadedProducer<DeliveryContext>,
    /// Acknowledgements from the producer thread.
    deliveries: Receiver<DeliveryEvent>,
    /// The local store.
    store: Store,
    /// Owned input partitions and their life-cycle state.
    partitions: BTreeMap<i32, Partition>,
    /// Finished recoveries from worker threads: (partition, incarnation, result).
    recovered_rx: Receiver<(i32, u64, Result<Recovered, RecoveryError>)>,
    recovered_tx: Sender<(i32, u64, Result<Recovered, RecoveryError>)>,
    /// Counter for ownership incarnations.
    incarnations: u64,
    /// The checkpoint in progress, if any.
    checkpoint: Option<Checkpoint>,
    /// When the next checkpoint starts.
    next_checkpoint: Instant,
    /// Set when the pipeline must stop; nothing is committed or stored afterwards.
    failure: Option<Fatal>,
    /// Number of output partitions (for `key` partitioning's recovery).
    output_partitions: usize,
    /// Number of input partitions (for the out-of-scope diagnostics).
    input_partitions: usize,
    /// Shared with HTTP, demo and tests.
    status: Arc<Status>,
    /// Process totals.
    totals: Arc<Totals>,
    /// Stop request; checked while waiting for producer queue space.
    shutdown: Shutdown,
    /// Last time gauges were refreshed.
    last_gauges: Instant,
    /// Since when this instance owns no partition, and when that was last logged.
    idle: (Option<Instant>, Option<Instant>),
    /// Records produced and not yet acknowledged, over all partitions.
    unacknowledged: AtomicU64,
    /// Questions of the live `/store/*` routes, answered in [`Filter::tick`] from this thread's
    /// partition state.
    live: Receiver<LiveRequest>,
}

/// Outcome of the fingerprint lookup for one record.
enum Decision {
    Forward(Option<u128>),
    Duplicate { age: usize, distance: Option<i64> },
    Missing(Unfingerprintable),
}

impl Filter {
    fn transactional(&self) -> bool {
        self.cfg.output.delivery == Delivery::Transactional
    }

    /// Takes a record the consumer just returned into the current batch (see [`BATCH`]):
    /// computes its fingerprint, starts loading its home slots in the partition's generations,
    /// and notes it returned, so that a hand-over run by a rebalance callback before
    /// [`Self::on_record`] handles it does not commit past it ([`InFlight::skip_to`]).
    pub fn admit(&mut self, msg: &BorrowedMessage<'_>) -> Result<Fingerprint, Unfingerprintable> {
        let fp = self.fingerprinter.fingerprint(msg);
        if let Some(Partition::Running(run)) = self.partitions.get_mut(&msg.partition()) {
            run.inflight.returned(msg.offset());
            if let Ok(f) = &fp {
                run.gens.prefetch(f.0);
            }
        }
        fp
    }

    /// Handles one consumed record, [admitted](Self::admit) with its fingerprint `fp`: look up,
    /// forward or drop. Errors stop the pipeline (see [`Fatal`]).
    pub fn on_record(
        &mut self,
        msg: &BorrowedMessage<'_>,
        fp: Result<Fingerprint, Unfingerprintable>,
    ) -> Result<(), Fatal> {
        let p = msg.partition();
        let offset = msg.offset();
        let Some(Partition::Running(run)) = self.partitions.get_mut(&p) else {
            // Recovering (fetched again after the seek) or no longer ours: never forwarded.
            return Ok(());
        };
        run.inflight.returned(offset);
        if offset < run.inflight.next_offset() {
            return Ok(()); // handed over again after a seek
        }
        run.rotation.took(msg.timestamp().to_millis());
        run.metrics.consumed.increment(1);
        match msg.key() {
            None => run.metrics.null_key.increment(1),
            Some(k) if !kafka::key_placed_in(k, p, self.input_partitions) => run.metrics.key_elsewhere.increment(1),
            Some(_) => {}
        }
        Totals::bump(&self.totals.consumed);

        let decision = match fp {
            Ok(fp) => match run.gens.lookup(fp.0) {
                Some(hit) => Decision::Duplicate {
                    age: hit.age,
                    distance: hit.first_offset.map(|f| offset - f),
                },
                None => Decision::Forward(Some(fp.0)),
            },
            Err(why) => Decision::Missing(why),
        };

        // Where the record goes: (topic, output partition, extra headers, target); None: nowhere.
        let cfg = &self.cfg;
        let out_partition = match cfg.output.partitioning {
            Partitioning::Preserve => Some(p),
            Partitioning::Key => None,
        };
        let mut new_fingerprint = None;
        let route = match decision {
            Decision::Forward(fp) => {
                new_fingerprint = fp;
                Some((&cfg.output.topic, out_partition, None, Target::Output))
            }
            Decision::Duplicate { age, distance } => {
                if let Some(c) = run.metrics.duplicates.get(age) {
                    c.increment(1);
                }
                if let Some(d) = distance {
                    run.metrics.distance.record(d as f64);
                }
                Totals::bump(&self.totals.duplicates);
                (!cfg.output.duplicates_topic.is_empty()).then(|| {
                    let extra = provenance(&cfg.input.topic, p, offset, "duplicate");
                    (&cfg.output.duplicates_topic, None, Some(extra), Target::Side)
                })
            }
            Decision::Missing(why) => {
                let action = cfg.fingerprint.on_missing;
                run.metrics.unfingerprintable(action, why.reason());
                Totals::bump(&self.totals.unfingerprintable);
                match action {
                    OnMissing::Fail => {
                        return Err(Fatal::Unfingerprintable {
                            partition: p,
                            offset,
                            reason: why.to_string(),
                        })
                    }
                    OnMissing::Drop => None,
                    OnMissing::Forward => Some((&cfg.output.topic, out_partition, None, Target::Output)),
                    OnMissing::DeadLetter => {
                        let extra = provenance(&cfg.input.topic, p, offset, why.reason());
                        Some((&cfg.fingerprint.dead_letter_topic, None, Some(extra), Target::Side))
                    }
                }
            }
        };
        let Some((topic, partition, extra, target)) = route else {
            run.inflight.take(offset, Target::None);
            return Ok(());
        };
        let seq = run.inflight.take(offset, target).expect("produced records are tracked");
        match send(
            &self.producer,
            &self.shutdown,
            topic,
            partition,
            msg,
            extra,
            encode_opaque(p, seq),
        ) {
            Ok(()) => {}
            Err(Refused::Stopping) => {
                // Not taken: nothing past it is committed, the next owner processes it.
                run.inflight.untake(offset);
                return Ok(());
            }
            Err(Refused::Kafka(e)) => {
                run.inflight.untake(offset);
                return Err(Fatal::Delivery {
                    partition: p,
                    offset,
                    topic: topic.clone(),
                    error: e.to_string(),
                });
            }
        }
        // Only once the producer accepted it: a refused record must not suppress itself.
        if let Some(fp) = new_fingerprint {
            run.gens.insert(fp, Some(offset));
        }
        crate::crash::point("after-produce");
        self.unacknowledged.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Applies acknowledgements, installs recovered partitions, drives the checkpoint.
    /// Call after every poll. Errors stop the pipeline.
    pub fn tick(&mut self, consumer: &FilterConsumer) -> Result<(), Fatal> {
        self.drain_deliveries();
        if let Some(f) = self.failure.clone() {
            return Err(f);
        }
        while let Ok((p, inc, result)) = self.recovered_rx.try_recv() {
            self.on_recovered(consumer, p, inc, result);
        }
        self.retry_recoveries();
        self.drive_checkpoint(consumer)?;
        if self.last_gauges.elapsed() >= Duration::from_secs(1) {
            self.last_gauges = Instant::now();
            self.refresh_gauges();
            self.warn_if_idle();
        }
        self.answer_live();
        Ok(())
    }

    /// An instance that owns no partition is ready (a replica beyond the partition count is idle
    /// by design), but one that stays so may also mean the group coordinator left partitions with
    /// a member that is gone: after a minute it says so, then every 10 minutes.
    fn warn_if_idle(&mut self) {
        if !self.partitions.is_empty() {
            self.idle = (None, None);
            return;
        }
        let since = *self.idle.0.get_or_insert_with(Instant::now);
        let due = match self.idle.1 {
            None => since.elapsed() >= Duration::from_secs(60),
            Some(last) => last.elapsed() >= Duration::from_secs(600),
        };
        if due {
            self.idle.1 = Some(Instant::now());
            warn!(
                input = %self.cfg.input.topic,
                partitions = self.input_partitions,
                idle_seconds = since.elapsed().as_secs(),
                "this instance owns no input partition: fine if the group has more members than the topic \
                 has partitions; otherwise check the group's assignment (kafka-consumer-groups --describe)"
            );
        }
    }

    /// Answers the live `/store/*` questions from the owned partitions' in-memory state (see
    /// [`crate::inspect`]): running partitions with their generations, recovering ones as such.
    fn answer_live(&self) {
        while let Ok(request) = self.live.try_recv() {
            let view: BTreeMap<i32, PartitionView<'_>> = self
                .partitions
                .iter()
                .map(|(p, state)| {
                    let v = match state {
                        Partition::Recovering(_) => PartitionView::Recovering,
                        Partition::Running(r) => PartitionView::Running {
                            gens: &r.gens,
                            next_offset: r.inflight.next_offset(),
                            output_position: &r.out_positions,
                        },
                    };
                    (*p, v)
                })
                .collect();
            request.answer(&view, &self.fingerprinter);
        }
    }

    fn drain_deliveries(&mut self) {
        loop {
            match self.deliveries.try_recv() {
                Ok(ev) => self.apply_delivery(ev),
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => return,
            }
        }
    }

    fn apply_delivery(&mut self, ev: DeliveryEvent) {
        self.unacknowledged.fetch_sub(1, Ordering::Relaxed);
        let (p, seq) = decode_opaque(ev.opaque);
        let Some(Partition::Running(run)) = self.partitions.get_mut(&p) else {
            return; // acknowledgement for a partition no longer owned
        };
        match ev.result {
            Ok((q, o)) => {
                if let Some((_, target)) = run.inflight.ack(seq) {
                    crate::crash::point("after-ack");
                    if target == Target::Output {
                        run.metrics.forwarded.increment(1);
                        Totals::bump(&self.totals.forwarded);
                        if let Some((since, rescanned)) = run.first_forward.take() {
                            info!(
                                partition = p,
                                seconds = since.elapsed().as_secs_f64(),
                                rescanned,
                                "first record forwarded since the partition was assigned"
                            );
                        }
                        let e = run.out_positions.entry(q).or_insert(o + 1);
                        *e = (*e).max(o + 1);
                    }
                }
            }
            Err((topic, error)) => {
                // Not acknowledged: the watermark stays before it, so it is never committed, and
                // nothing is stored from now on, so its fingerprint dies with this process.
                let offset = run.inflight.watermark();
                if self.failure.is_none() {
                    error!(
                        partition = p,
                        topic, error, "delivery failed; stopping without committing past it"
                    );
                    self.failure = Some(Fatal::Delivery {
                        partition: p,
                        offset,
                        topic,
                        error,
                    });
                }
            }
        }
    }

    fn wait_deliveries(&mut self, parts: &[i32], deadline: Instant) -> bool {
        loop {
            self.drain_deliveries();
            let idle = parts.iter().all(|p| match self.partitions.get(p) {
                Some(Partition::Running(r)) => r.inflight.is_idle(),
                _ => true,
            });
            if idle {
                return true;
            }
            if self.failure.is_some() {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.deliveries.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(ev) => self.apply_delivery(ev),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => return false,
            }
        }
    }

    /// New partitions: pause them and start their recovery.
    pub fn assign(&mut self, consumer: &FilterConsumer, parts: &[i32]) {
        let mut tpl = TopicPartitionList::new();
        for p in parts {
            tpl.add_partition(&self.cfg.input.topic, *p);
        }
        if let Err(e) = consumer.pause(&tpl) {
            warn!(error = %e, "pausing newly assigned partitions failed");
        }
        for &p in parts {
            if self.partitions.contains_key(&p) {
                continue;
            }
            self.incarnations += 1;
            let rec = Recovering {
                incarnation: self.incarnations,
                since: Instant::now(),
                cancel: Arc::new(AtomicBool::new(false)),
                retry_at: None,
            };
            info!(partition = p, "partition assigned; recovering its generations");
            self.spawn_recovery(p, &rec);
            self.partitions.insert(p, Partition::Recovering(rec));
            self.status.set_partition(p, "recovering");
        }
    }

    fn spawn_recovery(&self, p: i32, rec: &Recovering) {
        let env = RecoveryEnv {
            cfg: self.cfg.clone(),
            store: self.store.clone(),
            fingerprinter: self.fingerprinter.clone(),
            output_partitions: self.output_partitions,
            totals: self.totals.clone(),
        };
        let req = RecoveryRequest {
            partition: p,
            incarnation: rec.incarnation,
            since: rec.since,
            cancel: rec.cancel.clone(),
        };
        let tx = self.recovered_tx.clone();
        let spawned = std::thread::Builder::new().name(format!("recover-{p}")).spawn(move || {
            let result = recover(&env, &req);
            let _ = tx.send((req.partition, req.incarnation, result));
        });
        if let Err(e) = spawned {
            error!(partition = p, error = %e, "cannot start a recovery thread");
        }
    }

    fn retry_recoveries(&mut self) {
        let now = Instant::now();
        let due: Vec<i32> = self
            .partitions
            .iter()
            .filter_map(|(p, s)| match s {
                Partition::Recovering(r) if r.retry_at.is_some_and(|t| t <= now) => Some(*p),
                _ => None,
            })
            .collect();
        for p in due {
            if let Some(Partition::Recovering(r)) = self.partitions.get_mut(&p) {
                r.retry_at = None;
                let snapshot = Recovering {
                    incarnation: r.incarnation,
                    since: r.since,
                    cancel: r.cancel.clone(),
                    retry_at: None,
                };
                self.spawn_recovery(p, &snapshot);
            }
        }
    }

    fn schedule_retry(&mut self, p: i32, why: &str) {
        if let Some(Partition::Recovering(r)) = self.partitions.get_mut(&p) {
            warn!(partition = p, error = why, "recovery failed; retrying");
            self.status
                .set_partition_reason(p, format!("recovering (retrying: {why})"));
            r.retry_at = Some(Instant::now() + RECOVERY_RETRY);
        }
    }

    fn on_recovered(&mut self, consumer: &FilterConsumer, p: i32, inc: u64, result: Result<Recovered, RecoveryError>) {
        match self.partitions.get(&p) {
            Some(Partition::Recovering(r)) if r.incarnation == inc => {}
            _ => return, // revoked meanwhile, or an older attempt
        }
        let rec = match result {
            Ok(rec) => rec,
            Err(RecoveryError::Cancelled) => return,
            Err(e) => return self.schedule_retry(p, &e.to_string()),
        };
        let topic = self.cfg.input.topic.clone();
        // Tell later owners that someone produces for this partition now (clean = false), and
        // make sure a crash before the first checkpoint still leaves metadata to recover from.
        if !self.transactional() {
            let meta = CheckpointMeta {
                kd: crate::metadata::METADATA_VERSION,
                epoch: rec.gens.current().epoch,
                ckpt: rec.ckpt.clone(),
                gens: rec.gens.out_starts(),
                clean: false,
                out_end: None,
            };
            let t = Instant::now();
            let committed = commit_list(&self.cfg, &[(p, rec.resume, &meta)])
                .and_then(|tpl| consumer.commit(&tpl, CommitMode::Sync));
            debug!(
                partition = p,
                seconds = t.elapsed().as_secs_f64(),
                "start-of-ownership commit"
            );
            if let Err(e) = committed {
                return self.schedule_retry(p, &format!("commit before resuming: {e}"));
            }
        }
        // Resume, then seek. librdkafka wakes a partition's fetcher only when the partition's
        // fetch state changes (`rd_kafka_toppar_set_fetch_state`, rdkafka_partition.c): a seek
        // changes it (offset validation, or the lookup of a logical offset), a resume does not.
        // Seeking first, while paused, left the fetcher asleep for up to its 1 s idle wait
        // (`rd_kafka_max_block_ms`, rdkafka_broker.c) after every assignment. Records fetched
        // between the resume and the seek carry the older op version, and librdkafka discards
        // them. Offset 0 is sought as `Beginning` (the same records: nothing precedes the log
        // start; and no fall-back to `auto.offset.reset` if retention moved the log start):
        // an absolute 0 changes no state, the lookup of the log start does (unless librdkafka
        // answers it from a log start it has cached, and then the fetcher may idle as before).
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition(&topic, p);
        if let Err(e) = consumer.resume(&tpl) {
            return self.schedule_retry(p, &format!("resume: {e}"));
        }
        let t = Instant::now();
        let to = match rec.resume {
            0 => Offset::Beginning,
            o => Offset::Offset(o),
        };
        let sought = consumer.seek(&topic, p, to, KAFKA_TIMEOUT);
        debug!(partition = p, seconds = t.elapsed().as_secs_f64(), "seek");
        if let Err(e) = sought {
            // Paused again until the retry; records fetched meanwhile were never taken.
            let _ = consumer.pause(&tpl);
            return self.schedule_retry(p, &format!("seek to {}: {e}", rec.resume));
        }
        let metrics = PartitionMetrics::new(p, &self.cfg);
        metrics.set_state("running");
        let took = rec.since.elapsed();
        telemetry::recovery(took.as_secs_f64());
        info!(
            partition = p,
            offset = rec.resume,
            generations = rec.gens.iter().count(),
            fingerprints = rec.gens.total_len(),
            rescanned = rec.scanned,
            fresh = rec.fresh,
            seconds = took.as_secs_f64(),
            "partition running"
        );
        let run = Running {
            incarnation: inc,
            gens: rec.gens,
            inflight: InFlight::new(rec.resume),
            out_positions: rec.out_positions,
            ckpt: rec.ckpt,
            rotation: Rotation::new(),
            first_forward: Some((rec.since, rec.scanned)),
            metrics,
        };
        self.partitions.insert(p, Partition::Running(Box::new(run)));
        self.status.set_partition(p, "running");
    }

    /// Partitions taken away: finish them cleanly unless the assignment was lost.
    pub fn revoke(&mut self, consumer: &FilterConsumer, parts: &[i32], lost: bool) {
        for p in parts {
            if let Some(Partition::Recovering(r)) = self.partitions.get(p) {
                r.cancel.store(true, Ordering::Relaxed);
                self.partitions.remove(p);
                self.status.remove_partition(*p);
            }
        }
        let running: Vec<i32> = parts
            .iter()
            .copied()
            .filter(|p| self.partitions.contains_key(p))
            .collect();
        if running.is_empty() {
            return;
        }
        if lost {
            warn!(partitions = ?running, "assignment lost (session timeout or fenced); releasing without commit");
            self.release(&running);
            return;
        }
        if self.failure.is_some() {
            self.release(&running);
            return;
        }
        if let Err(e) = self.handover(consumer, &running, true) {
            warn!(partitions = ?running, error = %e, "clean hand-over failed; the next owner recovers from the output topic");
        }
        self.release(&running);
    }

    fn release(&mut self, parts: &[i32]) {
        for p in parts {
            if let Some(Partition::Running(r)) = self.partitions.remove(p) {
                r.metrics.release();
            }
            if let Some(c) = self.checkpoint.as_mut() {
                c.parts.remove(p);
            }
            self.status.remove_partition(*p);
            info!(partition = p, "partition released");
        }
    }

    /// Finishes `parts` cleanly: waits for their deliveries, stores all their generations (the
    /// current one included), and commits their offsets with `clean = true`.
    fn handover(&mut self, consumer: &FilterConsumer, parts: &[i32], continuing: bool) -> Result<(), String> {
        // A background store write for an earlier checkpoint must land first, or it could
        // overwrite the newer snapshot written here.
        self.finish_persisting(consumer);
        let deadline = Instant::now() + HANDOVER_TIMEOUT;
        if self.transactional() {
            return self.commit_transaction(consumer, false, parts, continuing);
        }
        if !self.wait_deliveries(parts, deadline) {
            return Err(match &self.failure {
                Some(f) => f.to_string(),
                None => "deliveries still in flight after the hand-over timeout".to_string(),
            });
        }
        let positions = consumer.position().ok();
        let topic = self.cfg.input.topic.clone();
        let mut metas = Vec::new();
        let txn = self.transactional();
        for p in parts {
            if let Some(Partition::Running(run)) = self.partitions.get_mut(p) {
                if let Some(Offset::Offset(o)) = positions
                    .as_ref()
                    .and_then(|t| t.find_partition(&topic, *p))
                    .map(|e| e.offset())
                {
                    run.inflight.skip_to(o);
                }
                run.ckpt = new_checkpoint_id();
                metas.push((*p, run.inflight.watermark(), Self::meta_of(run, true, txn)));
            }
        }
        self.store_partitions(parts, &metas);
        let entries: Vec<_> = metas.iter().map(|(p, o, m)| (*p, *o, m)).collect();
        let tpl = commit_list(&self.cfg, &entries).map_err(|e| e.to_string())?;
        crate::crash::point("handover-before-commit");
        consumer.commit(&tpl, CommitMode::Sync).map_err(|e| e.to_string())?;
        info!(partitions = ?parts, "offsets committed for a clean hand-over");
        Ok(())
    }

    fn meta_of(run: &Running, clean: bool, transactional: bool) -> CheckpointMeta {
        CheckpointMeta {
            kd: crate::metadata::METADATA_VERSION,
            epoch: run.gens.current().epoch,
            ckpt: run.ckpt.clone(),
            gens: run.gens.out_starts(),
            clean,
            out_end: transactional.then(|| run.out_positions.clone()),
        }
    }

    /// Synchronously stores the full state of `parts` with the given commit positions.
    fn store_partitions(&mut self, parts: &[i32], metas: &[(i32, i64, CheckpointMeta)]) {
        let mut writes = Vec::new();
        for (p, offset, meta) in metas {
            if let Some(Partition::Running(run)) = self.partitions.get(p) {
                writes.push(PartitionWrite {
                    partition: *p,
                    epoch: meta.epoch,
                    ckpt: meta.ckpt.clone(),
                    committed_offset: *offset,
                    out_covered: run.out_positions.clone(),
                    generations: run.gens.iter().collect(),
                    clean: meta.clean,
                });
            }
        }
        if let Err(e) = self.store.save(&writes) {
            warn!(partitions = ?parts, error = %e, "store write failed; the next owner rebuilds from the output topic");
        }
    }

    /// Stops the pipeline cleanly: hands over every partition. Called on SIGTERM/SIGINT.
    pub fn shutdown(&mut self, consumer: &FilterConsumer) {
        let all: Vec<i32> = self.partitions.keys().copied().collect();
        for p in &all {
            if let Some(Partition::Recovering(r)) = self.partitions.get(p) {
                r.cancel.store(true, Ordering::Relaxed);
            }
        }
        let running: Vec<i32> = all
            .iter()
            .copied()
            .filter(|p| matches!(self.partitions.get(p), Some(Partition::Running(_))))
            .collect();
        if !running.is_empty() {
            match self.handover(consumer, &running, false) {
                Ok(()) => {}
                Err(e) => {
                    warn!(error = %e, "shutdown without a clean hand-over; the next start recovers from the output topic")
                }
            }
        }
        let all: Vec<i32> = self.partitions.keys().copied().collect();
        self.release(&all);
    }

    /// After a fatal error: abort the open transaction (transactional mode); commit nothing.
    pub fn abort(&mut self) {
        if self.transactional() {
            if let Err(e) = self.producer.abort_transaction(KAFKA_TIMEOUT) {
                warn!(error = %e, "aborting the transaction failed; the next start fences it");
            }
        }
        for p in self.partitions.values() {
            if let Partition::Recovering(r) = p {
                r.cancel.store(true, Ordering::Relaxed);
            }
        }
        // Released without commit: closing the consumer must not hand anything over.
        let all: Vec<i32> = self.partitions.keys().copied().collect();
        self.release(&all);
    }

    fn drive_checkpoint(&mut self, consumer: &FilterConsumer) -> Result<(), Fatal> {
        if self.checkpoint.is_none() {
            if Instant::now() < self.next_checkpoint {
                return Ok(());
            }
            self.next_checkpoint = Instant::now() + self.cfg.checkpoint.interval;
            if self.transactional() {
                let parts: Vec<i32> = self.partitions.keys().copied().collect();
                return self
                    .commit_transaction(consumer, true, &[], true)
                    .map_err(Fatal::Transaction)
                    .inspect_err(|e| {
                        self.failure = Some(e.clone());
                    })
                    .map(|_| debug!(partitions = parts.len(), "checkpoint committed (transaction)"));
            }
            self.begin_checkpoint(consumer);
            return Ok(());
        }
        let ready = {
            let ckpt = self.checkpoint.as_mut().expect("checked");
            match &ckpt.stage {
                Stage::Delivering => {
                    let parts = &self.partitions;
                    ckpt.parts.retain(|p, part| matches!(parts.get(p), Some(Partition::Running(r)) if r.incarnation == part.incarnation));
                    ckpt.parts.iter().all(|(p, part)| match parts.get(p) {
                        Some(Partition::Running(r)) => r.inflight.watermark() >= part.target,
                        _ => true,
                    })
                }
                Stage::Persisting(rx) => match rx.try_recv() {
                    Ok(result) => {
                        if let Err(e) = result {
                            warn!(error = %e, "store write failed at checkpoint; committing anyway, a restart rebuilds from the output topic");
                        }
                        self.commit_checkpoint(consumer);
                        return Ok(());
                    }
                    Err(TryRecvError::Empty) => false,
                    Err(TryRecvError::Disconnected) => {
                        self.commit_checkpoint(consumer);
                        return Ok(());
                    }
                },
            }
        };
        if ready {
            self.persist_checkpoint();
        }
        Ok(())
    }

    /// Step 1: rotate every running partition and note its commit target.
    fn begin_checkpoint(&mut self, consumer: &FilterConsumer) {
        let positions = consumer.position().ok();
        let topic = &self.cfg.input.topic;
        let mut parts = BTreeMap::new();
        for (p, state) in self.partitions.iter_mut() {
            let Partition::Running(run) = state else { continue };
            if let Some(Offset::Offset(o)) = positions
                .as_ref()
                .and_then(|t| t.find_partition(topic, *p))
                .map(|e| e.offset())
            {
                run.inflight.skip_to(o);
            }
            let target = run.inflight.next_offset();
            if run.rotation.due(self.cfg.checkpoint.interval) {
                run.rotation.rotated();
                let frozen = run.gens.rotate(target, run.out_positions.clone());
                debug!(
                    partition = p,
                    epoch = frozen.epoch + 1,
                    target,
                    frozen = frozen.len(),
                    "generation rotated"
                );
            }
            run.ckpt = new_checkpoint_id();
            let cur = run.gens.current();
            let meta = CheckpointMeta {
                kd: crate::metadata::METADATA_VERSION,
                epoch: cur.epoch,
                ckpt: run.ckpt.clone(),
                gens: run.gens.out_starts(),
                clean: false,
                out_end: None,
            };
            parts.insert(
                *p,
                CheckpointPart {
                    incarnation: run.incarnation,
                    target,
                    frozen: run.gens.frozen().cloned().collect(),
                    current: Generation::new(cur.epoch, cur.in_start, cur.out_start.clone(), 0),
                    meta,
                },
            );
        }
        self.checkpoint = Some(Checkpoint {
            started: Instant::now(),
            parts,
            stage: Stage::Delivering,
        });
    }

    /// Step 3: write the frozen generations on a background thread.
    fn persist_checkpoint(&mut self) {
        let ckpt = self.checkpoint.as_mut().expect("in progress");
        let store = self.store.clone();
        let jobs: Vec<PersistJob> = ckpt
            .parts
            .iter()
            .map(|(p, part)| {
                let current = Generation::new(
                    part.current.epoch,
                    part.current.in_start,
                    part.current.out_start.clone(),
                    0,
                );
                (*p, part.target, part.meta.clone(), part.frozen.clone(), current)
            })
            .collect();
        let (tx, rx) = mpsc::channel();
        crate::crash::point("checkpoint-before-store");
        std::thread::spawn(move || {
            let writes: Vec<PartitionWrite<'_>> = jobs
                .iter()
                .map(|(p, target, meta, frozen, current)| PartitionWrite {
                    partition: *p,
                    epoch: meta.epoch,
                    ckpt: meta.ckpt.clone(),
                    committed_offset: *target,
                    out_covered: current.out_start.clone(),
                    generations: frozen
                        .iter()
                        .map(|g| g.as_ref())
                        .chain(std::iter::once(current))
                        .collect(),
                    clean: false,
                })
                .collect();
            let started = Instant::now();
            let result = store.save(&writes);
            debug!(
                partitions = writes.len(),
                seconds = started.elapsed().as_secs_f64(),
                ok = result.is_ok(),
                "checkpoint stored"
            );
            let _ = tx.send(result);
        });
        ckpt.stage = Stage::Persisting(rx);
    }

    /// Step 4: commit the targets with their metadata (asynchronously).
    fn commit_checkpoint(&mut self, consumer: &FilterConsumer) {
        let Some(ckpt) = self.checkpoint.take() else { return };
        // Only partitions still owned by the same incarnation.
        let entries: Vec<_> = ckpt
            .parts
            .iter()
            .filter(|(p, part)| matches!(self.partitions.get(p), Some(Partition::Running(r)) if r.incarnation == part.incarnation))
            .map(|(p, part)| (*p, part.target, &part.meta))
            .collect();
        let tpl = match commit_list(&self.cfg, &entries) {
            Ok(t) => t,
            Err(e) => {
                warn!(error = %e, "cannot build the offset commit");
                return;
            }
        };
        if tpl.count() > 0 {
            crate::crash::point("checkpoint-before-commit");
            if let Err(e) = commit_async(consumer, &tpl) {
                warn!(error = %e, "offset commit could not be sent; the next checkpoint commits again");
                telemetry::checkpoint_result(false);
                return;
            }
        } else {
            telemetry::checkpoint_result(true); // nothing owned: nothing to confirm
        }
        let secs = ckpt.started.elapsed().as_secs_f64();
        telemetry::checkpoint_duration(secs);
        Totals::bump(&self.totals.checkpoints);
        debug!(partitions = tpl.count(), seconds = secs, "checkpoint commit sent");
    }

    /// Waits for a background store write and commits its checkpoint (before a hand-over).
    fn finish_persisting(&mut self, consumer: &FilterConsumer) {
        if let Some(Checkpoint {
            stage: Stage::Persisting(rx),
            ..
        }) = &self.checkpoint
        {
            let _ = rx.recv();
            self.commit_checkpoint(consumer);
        }
    }

    /// Transactional mode: rotates (periodic checkpoint) or not (hand-over), flushes, commits
    /// the transaction with the offsets of every running partition, stores their state, and
    /// begins the next transaction when `continuing`. `clean_for` get `clean = true`.
    fn commit_transaction(
        &mut self,
        consumer: &FilterConsumer,
        rotate: bool,
        clean_for: &[i32],
        continuing: bool,
    ) -> Result<(), String> {
        let started = Instant::now();
        if rotate {
            let positions = consumer.position().ok();
            let topic = self.cfg.input.topic.clone();
            for (p, state) in self.partitions.iter_mut() {
                if let Partition::Running(run) = state {
                    if let Some(Offset::Offset(o)) = positions
                        .as_ref()
                        .and_then(|t| t.find_partition(&topic, *p))
                        .map(|e| e.offset())
                    {
                        run.inflight.skip_to(o);
                    }
                    let target = run.inflight.next_offset();
                    if run.rotation.due(self.cfg.checkpoint.interval) {
                        run.rotation.rotated();
                        run.gens.rotate(target, run.out_positions.clone());
                    }
                }
            }
        }
        self.producer.flush(KAFKA_TIMEOUT).map_err(|e| format!("flush: {e}"))?;
        let running: Vec<i32> = self
            .partitions
            .iter()
            .filter(|(_, s)| matches!(s, Partition::Running(_)))
            .map(|(p, _)| *p)
            .collect();
        if !self.wait_deliveries(&running, Instant::now() + KAFKA_TIMEOUT) {
            return Err("deliveries did not complete before the transaction commit".into());
        }
        let positions = consumer.position().ok();
        let topic = self.cfg.input.topic.clone();
        let mut metas = Vec::new();
        let txn = self.transactional();
        for p in &running {
            if let Some(Partition::Running(run)) = self.partitions.get_mut(p) {
                if let Some(Offset::Offset(o)) = positions
                    .as_ref()
                    .and_then(|t| t.find_partition(&topic, *p))
                    .map(|e| e.offset())
                {
                    run.inflight.skip_to(o);
                }
                run.ckpt = new_checkpoint_id();
                let meta = Self::meta_of(run, clean_for.contains(p), txn);
                metas.push((*p, run.inflight.watermark(), meta));
            }
        }
        if !metas.is_empty() {
            let entries: Vec<_> = metas.iter().map(|(p, o, m)| (*p, *o, m)).collect();
            let tpl = commit_list(&self.cfg, &entries).map_err(|e| e.to_string())?;
            let group = consumer.group_metadata().ok_or("no consumer group metadata")?;
            self.producer
                .send_offsets_to_transaction(&tpl, &group, KAFKA_TIMEOUT)
                .map_err(|e| format!("send offsets to transaction: {e}"))?;
        }
        self.producer
            .commit_transaction(KAFKA_TIMEOUT)
            .map_err(|e| format!("commit transaction: {e}"))?;
        self.store_partitions(&running, &metas);
        if continuing {
            self.producer
                .begin_transaction()
                .map_err(|e| format!("begin transaction: {e}"))?;
        }
        telemetry::checkpoint_duration(started.elapsed().as_secs_f64());
        telemetry::checkpoint_result(true);
        Totals::bump(&self.totals.checkpoints);
        Ok(())
    }

    fn refresh_gauges(&self) {
        for state in self.partitions.values() {
            if let Partition::Running(run) = state {
                let gens: Vec<&Generation> = run.gens.iter().collect();
                for (age, g) in gens.iter().rev().enumerate() {
                    if let Some(h) = run.metrics.held.get(age) {
                        h.set(g.len() as f64);
                    }
                }
            }
        }
        telemetry::store_size(self.store.size_on_disk());
    }
}

/// The offset commit of a checkpoint: each input partition's offset with its [`CheckpointMeta`],
/// and, with `partitioning = "preserve"`, the horizon marker: the group's offset on output
/// partition `p` set to where `p`'s oldest live generation begins. Both go in one OffsetCommit
/// request. The marker lets recovery find the horizon on brokers that drop offset metadata.
fn commit_list(cfg: &Config, entries: &[(i32, i64, &CheckpointMeta)]) -> KafkaResult<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    for (p, offset, meta) in entries {
        tpl.add_partition_offset(&cfg.input.topic, *p, Offset::Offset(*offset))?;
        if let Some(mut e) = tpl.find_partition(&cfg.input.topic, *p) {
            e.set_metadata(meta.encode());
        }
        if cfg.output.partitioning == Partitioning::Preserve {
            if let Some(start) = meta.gens.first().and_then(|g| g.get(p)) {
                tpl.add_partition_offset(&cfg.output.topic, *p, Offset::Offset(*start))?;
            }
        }
    }
    Ok(tpl)
}

/// Sends the offset commit `tpl` without waiting for it. The group coordinator's answer comes
/// back as an offset-commit event on the consumer's own queue, which `poll` hands to
/// [`FilterContext::commit_callback`] (a failure is logged and counted there).
///
/// Not `Consumer::commit(.., CommitMode::Async)`: that calls `rd_kafka_commit` without a reply
/// queue, and librdkafka then drops the result of a manual commit unless an `offset_commit_cb`
/// is configured (`rd_kafka_cgrp_propagate_commit_result`, rdkafka_cgrp.c), which
/// rust-rdkafka's event-based consumer never configures: a failed checkpoint commit went
/// unnoticed. `rd_kafka_commit_queue` posts the answer to the queue it is given.
fn commit_async(consumer: &FilterConsumer, tpl: &TopicPartitionList) -> KafkaResult<()> {
    use rdkafka::bindings as rd;
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live consumer's handle and `tpl` a valid list for the duration of
    // the call (librdkafka copies it); the queue reference taken here is released after the
    // call, the queue itself lives as long as the consumer.
    let err = unsafe {
        let queue = rd::rd_kafka_queue_get_consumer(rk);
        let err = rd::rd_kafka_commit_queue(rk, tpl.ptr(), queue, None, std::ptr::null_mut());
        rd::rd_kafka_queue_destroy(queue);
        err
    };
    if err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(KafkaError::ConsumerCommit(err.into()))
    }
}

/// Provenance headers added to records copied to the duplicates or dead-letter topic.
fn provenance(topic: &str, partition: i32, offset: i64, reason: &str) -> OwnedHeaders {
    OwnedHeaders::new()
        .insert(Header {
            key: "kafka-dedup.reason",
            value: Some(reason),
        })
        .insert(Header {
            key: "kafka-dedup.source",
            value: Some(&format!("{topic}/{partition}/{offset}")),
        })
}

/// Why the producer did not take a record.
enum Refused {
    /// Its queue was full and a stop was requested while waiting.
    Stopping,
    /// Refused (for example larger than `message.max.bytes`).
    Kafka(KafkaError),
}

/// Produces a copy of `msg` (key, value, headers, timestamp) to `topic`. Waits while librdkafka's
/// queue is full, unless a stop is requested; any other refusal is returned.
fn send(
    producer: &ThreadedProducer<DeliveryContext>,
    shutdown: &Shutdown,
    topic: &str,
    partition: Option<i32>,
    msg: &BorrowedMessage<'_>,
    extra: Option<OwnedHeaders>,
    opaque: usize,
) -> Result<(), Refused> {
    let mut headers = msg.headers().map(|h| h.detach());
    if let Some(extra) = extra {
        let mut all = headers.unwrap_or_default();
        for h in extra.iter() {
            all = all.insert(Header {
                key: h.key,
                value: h.value,
            });
        }
        headers = Some(all);
    }
    let mut record: BaseRecord<'_, [u8], [u8], usize> = BaseRecord::with_opaque_to(topic, opaque);
    if let Some(p) = partition {
        record = record.partition(p);
    }
    if let Some(k) = msg.key() {
        record = record.key(k);
    }
    if let Some(v) = msg.payload() {
        record = record.payload(v);
    }
    if let Some(ts) = msg.timestamp().to_millis() {
        record = record.timestamp(ts);
    }
    if let Some(h) = headers {
        record = record.headers(h);
    }
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                if shutdown.is_triggered() {
                    return Err(Refused::Stopping);
                }
                record = r;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err((e, _)) => return Err(Refused::Kafka(e)),
        }
    }
}

/// The identity a store must have to be used with `cfg`.
pub fn identity_of(cfg: &Config) -> Identity {
    Identity {
        group_id: cfg.input.group_id.clone(),
        input_topic: cfg.input.topic.clone(),
        output_topic: cfg.output.topic.clone(),
        source: cfg.fingerprint.source.to_string(),
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
    let (input_partitions, output_partitions) = {
        let metadata: BaseConsumer<StartupContext> =
            kafka::reader_config(&cfg).create_with_context(StartupContext(status.clone()))?;
        loop {
            match kafka::check_topics(&metadata, &cfg, Duration::from_secs(10)) {
                Ok(counts) => break counts,
                Err(TopicError::Kafka(e)) => {
                    status.set_broker(false, Some(format!("metadata: {e}")));
                    warn!(error = %e, "cannot reach the brokers; retrying");
                    if shutdown.is_triggered() {
                        return Ok(());
                    }
                    // Serves the client's error callbacks (an authentication failure reaches
                    // /readyz from there) while waiting a second.
                    let _ = metadata.poll(Duration::from_secs(1));
                }
                Err(e) => return Err(e.into()),
            }
        }
    };
    let identity = identity_of(&cfg);
    let (store, opened) = Store::open_for_run(&cfg.store.path, &identity)?;
    match &opened {
        Opened::Replaced { reason, detail } => {
            warn!(path = %cfg.store.path.display(), reason, "local store replaced: {detail}; partitions rebuild from the output topic");
            telemetry::store_rebuild(reason);
        }
        Opened::Created => info!(path = %cfg.store.path.display(), "new local store"),
        Opened::Existing => info!(path = %cfg.store.path.display(), "local store opened"),
    }
    if !cfg.http.listen.is_empty() {
        store.write_live_file(&cfg.http.listen);
    }
    status.set_store(store.clone());
    let (live_tx, live_rx) = mpsc::channel();
    status.set_live(live_tx);
    let totals = status.totals.clone();

    let (dtx, drx) = mpsc::channel();
    let producer: ThreadedProducer<DeliveryContext> =
        kafka::producer_config(&cfg).create_with_context(DeliveryContext {
            tx: Mutex::new(dtx),
            status: status.clone(),
        })?;
    if cfg.output.delivery == Delivery::Transactional {
        // Fences a previous producer with the same transactional.id and aborts its open transaction.
        producer.init_transactions(KAFKA_TIMEOUT)?;
        producer.begin_transaction()?;
    }
    let (rtx, rrx) = mpsc::channel();
    let filter = Filter {
        cfg: cfg.clone(),
        fingerprinter: Fingerprinter::new(cfg.fingerprint.source.clone()),
        producer,
        deliveries: drx,
        store: store.clone(),
        partitions: BTreeMap::new(),
        recovered_rx: rrx,
        recovered_tx: rtx,
        incarnations: 0,
        checkpoint: None,
        next_checkpoint: Instant::now() + cfg.checkpoint.interval,
        failure: None,
        output_partitions: 0,
        input_partitions: 0,
        status: status.clone(),
        totals,
        shutdown: shutdown.clone(),
        last_gauges: Instant::now(),
        idle: (None, None),
        unacknowledged: AtomicU64::new(0),
        live: live_rx,
    };
    let context = FilterContext {
        filter: Mutex::new(filter),
        status: status.clone(),
        input_topic: cfg.input.topic.clone(),
    };
    let consumer: FilterConsumer = kafka::consumer_config(&cfg).create_with_context(context)?;

    {
        let mut f = consumer.context().filter.lock().expect("not poisoned");
        f.output_partitions = output_partitions;
        f.input_partitions = input_partitions;
    }
    consumer.subscribe(&[&cfg.input.topic])?;
    info!(input = %cfg.input.topic, output = %cfg.output.topic, group = %cfg.input.group_id, "filter started");

    let mut batch = Vec::with_capacity(BATCH);
    let result: Result<(), Fatal> = loop {
        if shutdown.is_triggered() {
            break Ok(());
        }
        // Poll without holding the filter: rebalance callbacks run inside `poll` and take it.
        batch.clear();
        let mut wait = Duration::from_millis(100);
        while batch.len() < BATCH {
            match consumer.poll(wait) {
                Some(Ok(msg)) => {
                    let fp = consumer.context().filter.lock().expect("not poisoned").admit(&msg);
                    batch.push((msg, fp));
                    wait = Duration::ZERO;
                }
                Some(Err(e)) => {
                    debug!(error = %e, "consumer error");
                    break;
                }
                None => break,
            }
        }
        let mut f = consumer.context().filter.lock().expect("not poisoned");
        let mut failed = None;
        for (msg, fp) in batch.drain(..) {
            // Once stopping, nothing more is taken: the producer refuses records then
            // (`Refused::Stopping`), and taking a later record of the same partition would let
            // the commit pass the refused one. Records left untaken are re-read by the next owner.
            if shutdown.is_triggered() {
                break;
            }
            if let Err(e) = f.on_record(&msg, fp) {
                failed = Some(e);
                break;
            }
        }
        if let Some(e) = failed {
            f.failure = Some(e.clone());
            break Err(e);
        }
        if let Err(e) = f.tick(&consumer) {
            break Err(e);
        }
    };
    {
        let mut f = consumer.context().filter.lock().expect("not poisoned");
        match &result {
            Ok(()) => {
                info!("stopping: handing over every partition");
                f.shutdown(&consumer);
            }
            Err(e) => {
                error!(error = %e, "stopping on error");
                status.set_fatal(e.to_string());
                f.abort();
            }
        }
    }
    consumer.unsubscribe();
    drop(consumer);
    store.remove_live_file();
    result.map_err(RunError::from)
}

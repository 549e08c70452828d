//! The route stage of the global scope ([`run_route`]; the module documentation of
//! [`crate::global`] tells what it does): its producer context, the [`Router`] that copies
//! records to the route topic and commits behind the acknowledgements, the poll loop. Its
//! consumer context (rebalances) is `route/context.rs`, its start-time checks (topics, the route
//! topic's limits and retention) `route/start.rs`.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::{debug, error, info, warn};

use super::{route_partition, RECORDS_ROUTED, ROUTE_COPIES_DROPPED, ROUTE_LAG, ROUTE_RESTAMPED};
use crate::config::{Config, Delivery, Start};
use crate::fingerprint::Fingerprinter;
use crate::kafka::Throttle;
use crate::kafka::{self, TopicError};
use crate::partition::{InFlight, Target, SEQ_BITS};
use crate::pipeline::refused::{with_timestamp_header, RETRY_FIRST, RETRY_MAX};
use crate::pipeline::TimestampLimits;
use crate::pipeline::{Fatal, HandoverError, RunError, Shutdown};
use crate::provenance::{Provenance, HEADER};
use crate::status::Status;

mod context;
mod handover;
mod pause;
mod start;

use context::RouteContext;
#[cfg(test)]
pub(super) use start::route_retention_risk;
use start::{route_topic_limits, start_at_the_end, wait_for_topics};

/// How long one poll waits for a record.
const POLL_WAIT: Duration = Duration::from_millis(100);

/// Timeout of the synchronous offset commits, seeks and metadata requests.
const KAFKA_TIMEOUT: Duration = Duration::from_secs(10);

/// How long [`Router::copy`] waits for room in the producer's queue before it gives the record
/// back and the stage backs off ([`Router::back_off`]), as the filter does (`pipeline::produce`).
const QUEUE_WAIT: Duration = Duration::from_secs(1);

/// An acknowledgement of a copy, from the producer thread: the delivery opaque
/// (`input partition << SEQ_BITS | seq`) and the result.
struct Ack {
    opaque: usize,
    result: Result<(), KafkaError>,
}

/// The route stage's producer context: acknowledgements go to the poll thread.
struct RouteDelivery {
    tx: Mutex<Sender<Ack>>,
    status: Arc<Status>,
    throttle: Throttle,
}

impl ClientContext for RouteDelivery {
    fn error(&self, error: KafkaError, reason: &str) {
        self.status.note_client_error(&error, reason);
        if let Some(suppressed) = self.throttle.admit(&error, Instant::now()) {
            warn!(error = %error, reason, suppressed, "kafka producer error (route stage)");
        }
    }

    /// As the filter's producer ([`crate::pipeline::DeliveryContext`]): librdkafka's lines, the
    /// warning that `enable.gapless.guarantee` (set on purpose) is experimental at debug.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        kafka::logs::log_client_line(&self.throttle, level, fac, log_message);
    }
}

impl ProducerContext for RouteDelivery {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        let result = result.as_ref().map(|_| ()).map_err(|(e, _)| e.clone());
        if let Ok(tx) = self.tx.lock() {
            let _ = tx.send(Ack { opaque, result });
        }
    }
}

/// One input partition the route stage copies.
struct Tracked {
    /// Copies not yet acknowledged, in input order: the commit position.
    inflight: InFlight,
    /// The last offset committed (or the first one read).
    committed: i64,
}

/// The route stage's state, owned by the poll thread (and its rebalance callbacks).
struct Router {
    /// The whole configuration (global scope).
    cfg: Arc<Config>,
    /// The configured source: the same fingerprints as the filter stage computes.
    fingerprinter: Fingerprinter,
    /// The idempotent producer of the copies.
    producer: ThreadedProducer<RouteDelivery>,
    /// Its acknowledgements.
    acks: Receiver<Ack>,
    /// Partitions of the route topic, read at start (it must never change).
    route_partitions: usize,
    /// Input partitions with records taken since they were assigned.
    partitions: BTreeMap<i32, Tracked>,
    /// When the next periodic commit is due.
    next_commit: Instant,
    /// Set when a copy could not be delivered: nothing is committed past it, the stage stops.
    failure: Option<Fatal>,
    /// The record timestamps the route topic takes, read at start ([`route_topic_limits`]).
    stamps: TimestampLimits,
    /// Input partitions for which a copy stamped anew was logged (once per partition).
    restamped: std::collections::BTreeSet<i32>,
    /// [`RECORDS_ROUTED`].
    routed: metrics::Counter,
    /// Since when the producer's queue has been full and every assigned input partition paused,
    /// and what it held then ([`Router::back_off`]); `None` while records flow.
    backpressure: Option<kafka::BackedOff>,
    /// While backed off: per input partition, the first offset the consumer returned and the
    /// stage did not take; the partition resumes there.
    resume_at: BTreeMap<i32, i64>,
    /// While a record's fingerprint waits for the schema registry ([`Router::wait_for_registry`]):
    /// when the partitions may resume to try it again, and how many tries failed in a row.
    registry_retry: Option<(Instant, u32)>,
    /// Input partitions held at a record too large for the route topic: the offset of that
    /// record. Paused; nothing of them is copied or committed past it until they are revoked
    /// (the next owner meets the record again) or the process restarts ([`Router::halt`]).
    halted: BTreeMap<i32, i64>,
    /// `/readyz` (the route stage's wait for the registry, its halted partitions).
    status: Arc<Status>,
}

/// What became of a turn of the poll loop's record ([`Router::copy`]).
#[derive(Debug, PartialEq, Eq)]
enum Copied {
    /// Handed to the producer (or copied already, or nothing was polled, or not taken while the
    /// stage is backed off: noted in `resume_at`).
    Done,
    /// Not taken: the producer's queue stayed full for [`QUEUE_WAIT`]; the stage backs off.
    Full,
    /// Not taken: a stop was requested while the producer's queue was full.
    Stopping,
    /// Not taken: its fingerprint needs the schema registry, which cannot be asked (the reason);
    /// the stage backs off and takes it again later.
    Wait(String),
    /// Not taken: too large for the route topic; its input partition is held there (paused).
    Halted(i32),
}

impl Router {
    /// Copies `msg` to its route partition. Waits while the producer's queue is full (unless a
    /// stop is requested). Errors: the producer refused the record.
    fn copy(&mut self, msg: &BorrowedMessage<'_>, shutdown: &Shutdown) -> Result<Copied, Fatal> {
        let (p, offset) = (msg.partition(), msg.offset());
        if self
            .partitions
            .get(&p)
            .is_some_and(|t| offset < t.inflight.next_offset())
        {
            return Ok(Copied::Done); // fetched again; already copied
        }
        if self.halted.contains_key(&p) {
            return Ok(Copied::Done); // fetched before the pause took effect; met again if reassigned
        }
        if self.backpressure.is_some() {
            // Backed off: not taken; fetched again when the partitions resume.
            self.not_taken(p, offset);
            return Ok(Copied::Done);
        }
        let fingerprint = match self.fingerprinter.fingerprint(msg) {
            Err(why) if why.must_wait() => {
                // Never routed as a record without identity: its route partition would be wrong.
                self.not_taken(p, offset);
                return Ok(Copied::Wait(format!("input partition {p} offset {offset}: {why}")));
            }
            other => other.ok(),
        };
        if self.registry_retry.take().is_some() {
            self.status.set_route_waiting(None);
            info!("route stage: the schema registry answers again");
        }
        let to = route_partition(fingerprint, p, self.route_partitions);
        let tracked = self.partitions.entry(p).or_insert_with(|| {
            // Once per ownership of `p`: where its copying starts (what a partition that is
            // assigned and never copied lacks).
            debug!(
                partition = p,
                offset, "route stage: first record of the partition taken"
            );
            Tracked {
                inflight: InFlight::new(offset),
                committed: offset,
            }
        });
        let seq = tracked
            .inflight
            .take(offset, Target::Output)
            .expect("produced records are tracked");
        let opaque = ((p as u64) << SEQ_BITS | seq) as usize;
        let source = Provenance::encode_parts(msg.topic(), p, offset);
        let headers = msg
            .headers()
            .map(|h| h.detach())
            .unwrap_or_else(|| OwnedHeaders::new_with_capacity(1))
            .insert(Header {
                key: HEADER,
                value: Some(&source),
            });
        let cfg = self.cfg.clone(); // the record borrows the topic name while `self` changes
        let mut record = crate::pipeline::copy_of(
            msg,
            BaseRecord::with_opaque_to(&cfg.fingerprint.route_topic, opaque)
                .partition(to)
                .headers(headers),
        );
        // A copy the route topic would refuse for its timestamp (fatal to the gapless producer,
        // and met again at every start): stamped now, its own timestamp in a header.
        let mut restamped = false;
        if let Some(limit) = self.stamps.refuses(record.timestamp, crate::generations::now_ms()) {
            if let Some(ts) = record.timestamp.take() {
                record.headers = Some(with_timestamp_header(record.headers.take(), ts));
                restamped = true;
                if self.restamped.insert(p) {
                    warn!(
                        partition = p,
                        offset,
                        timestamp = ts,
                        limit,
                        "route stage: the route topic does not take this record's timestamp; its copy is stamped now, \
                         its own timestamp in the header kafka-dedup.timestamp, and forwarded so (counted in \
                         kafka_dedup_route_restamped_total; logged once per input partition)"
                    );
                }
            }
        }
        let mut full_since: Option<Instant> = None;
        loop {
            match self.producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    if shutdown.is_triggered() {
                        self.untake(p, offset);
                        return Ok(Copied::Stopping);
                    }
                    if full_since.get_or_insert_with(Instant::now).elapsed() >= QUEUE_WAIT {
                        self.untake(p, offset);
                        self.not_taken(p, offset);
                        return Ok(Copied::Full);
                    }
                    record = r;
                    self.drain_acks();
                    std::thread::sleep(Duration::from_millis(2));
                }
                Err((error, r)) if crate::pipeline::too_large(&error) => {
                    // librdkafka refused it before any batch (its message.max.bytes is fitted to
                    // the route topic's max.message.bytes): this partition stops, not the process.
                    let bytes = r.payload.map_or(0, <[u8]>::len) + r.key.map_or(0, <[u8]>::len);
                    self.untake(p, offset);
                    self.halt(p, offset, bytes, &error);
                    return Ok(Copied::Halted(p));
                }
                Err((error, _)) => {
                    self.untake(p, offset);
                    return Err(Fatal::Delivery {
                        partition: p,
                        offset,
                        topic: cfg.fingerprint.route_topic.clone(),
                        error,
                        skippable: false,
                    });
                }
            }
        }
        if restamped {
            // Counted once taken: a copy given back is stamped again when its record comes again.
            metrics::counter!(ROUTE_RESTAMPED).increment(1);
        }
        crate::crash::point("route-after-produce");
        Ok(Copied::Done)
    }

    fn untake(&mut self, p: i32, offset: i64) {
        if let Some(t) = self.partitions.get_mut(&p) {
            t.inflight.untake(offset);
        }
    }

    /// Notes that the record at `p`/`offset` was returned by the consumer and not taken: the
    /// partition resumes there at the latest.
    fn not_taken(&mut self, p: i32, offset: i64) {
        let at = self.resume_at.entry(p).or_insert(offset);
        *at = (*at).min(offset);
    }

    /// Applies every acknowledgement that arrived.
    fn drain_acks(&mut self) {
        while let Ok(ack) = self.acks.try_recv() {
            self.apply(ack);
        }
    }

    /// Applies one acknowledgement: the copy is done; a failed copy stops the stage (its offset is
    /// never committed: the watermark stays before it).
    fn apply(&mut self, ack: Ack) {
        let v = ack.opaque as u64;
        let (p, seq) = ((v >> SEQ_BITS) as i32, v & ((1 << SEQ_BITS) - 1));
        let Some(t) = self.partitions.get_mut(&p) else {
            return; // a partition handed over meanwhile
        };
        match ack.result {
            Ok(()) => {
                if t.inflight.ack(seq).is_some() {
                    self.routed.increment(1);
                }
            }
            Err(error) => {
                if self.failure.is_none() {
                    error!(partition = p, error = %error, "copy to the route topic failed; stopping without committing past it");
                    self.failure = Some(Fatal::Delivery {
                        partition: p,
                        offset: t.inflight.watermark(),
                        topic: self.cfg.fingerprint.route_topic.clone(),
                        error,
                        skippable: false,
                    });
                }
            }
        }
    }

    /// Between two polls: acknowledgements, and the periodic commit. Errors stop the stage.
    fn tick(&mut self, consumer: &RouteConsumer) -> Result<(), Fatal> {
        self.drain_acks();
        if let Some(f) = &self.failure {
            return Err(f.clone());
        }
        self.drive_backpressure(consumer);
        if Instant::now() >= self.next_commit {
            self.next_commit = Instant::now() + self.cfg.checkpoint.interval;
            let parts: Vec<i32> = self.partitions.keys().copied().collect();
            self.commit(consumer, &parts, KAFKA_TIMEOUT);
        }
        Ok(())
    }
}

type RouteConsumer = BaseConsumer<RouteContext>;

/// Sets the route stage's lag of input partition `p` ([`ROUTE_LAG`]).
fn route_lag(p: i32, lag: i64) {
    metrics::gauge!(ROUTE_LAG, "partition" => p.to_string()).set(lag as f64);
}

/// Runs the route stage until `shutdown` is triggered (then hands every partition over and
/// returns `Ok`) or a fatal error (returns it; nothing committed past the record concerned).
/// Blocking: call it from a dedicated thread. `cfg` is the whole configuration (global scope).
/// It joins the input's consumer group only once the filter stage (sharing `status`) has opened
/// its store ([`Status::store`]), so an instance refused its store never joins. Errors: the input
/// or route topic does not exist ([`RunError::Topics`], exit 2), a client cannot be created, a
/// copy failed (a copy too large for the route topic halts its input partition instead,
/// [`Router::halt`]), the consumer failed for good.
pub fn run_route(cfg: Arc<Config>, shutdown: Shutdown, status: Arc<Status>) -> Result<(), RunError> {
    metrics::describe_counter!(
        RECORDS_ROUTED,
        metrics::Unit::Count,
        "Input records copied to the route topic (global scope), counted when acknowledged."
    );
    let routed = metrics::counter!(RECORDS_ROUTED);
    routed.increment(0);
    metrics::describe_counter!(
        ROUTE_COPIES_DROPPED,
        metrics::Unit::Count,
        "Copies the filter stage dropped as the route stage's second copies of an input record (global scope)."
    );
    metrics::counter!(ROUTE_COPIES_DROPPED).increment(0);
    metrics::describe_counter!(
        ROUTE_RESTAMPED,
        metrics::Unit::Count,
        "Copies the route stage stamped now because the route topic does not take the record's timestamp (global scope)."
    );
    metrics::counter!(ROUTE_RESTAMPED).increment(0);
    status.set_route_partitions(&[], &[]);
    crate::crash::panic_point("route");
    let Some(route_partitions) = wait_for_topics(&cfg, &shutdown)? else {
        return Ok(());
    };
    let (stamps, route_limit, recompressed) = route_topic_limits(&cfg);
    // The route stage always writes with the idempotent producer: it needs no transaction (it
    // keeps no state), and the gapless guarantee keeps a failed copy from being passed.
    let mut producer_cfg = (*cfg).clone();
    producer_cfg.output.delivery = Delivery::Idempotent;
    let (tx, acks) = mpsc::channel();
    // Fitted to the route topic's max.message.bytes, as the filter's to the output's (a limit set
    // under [kafka.properties], meant for the output, lowered to it): a copy too large for it is
    // refused when produced, which holds its input partition (`Router::halt`), not in a batch the
    // broker refuses, which the gapless guarantee makes fatal to the process.
    let mut route_producer = kafka::producer_config(&producer_cfg);
    kafka::fit_to_topic(
        &mut route_producer,
        &cfg,
        &cfg.fingerprint.route_topic,
        route_limit,
        recompressed,
        kafka::Kept::BelowFit,
    );
    let producer: ThreadedProducer<RouteDelivery> = route_producer.create_with_context(RouteDelivery {
        tx: Mutex::new(tx),
        status: status.clone(),
        throttle: Throttle::default(),
    })?;
    let router = Router {
        cfg: cfg.clone(),
        fingerprinter: Fingerprinter::of_config(&cfg.fingerprint)?,
        producer,
        acks,
        route_partitions,
        partitions: BTreeMap::new(),
        next_commit: Instant::now() + cfg.checkpoint.interval,
        failure: None,
        stamps,
        restamped: Default::default(),
        routed,
        backpressure: None,
        resume_at: BTreeMap::new(),
        registry_retry: None,
        halted: BTreeMap::new(),
        status: status.clone(),
    };
    metrics::describe_gauge!(
        ROUTE_LAG,
        metrics::Unit::Count,
        "Route stage lag per input partition (global scope), from librdkafka statistics."
    );
    // `auto.offset.reset` stays `earliest` (`kafka::consumer_config`): `input.start = "latest"`
    // is applied where nothing is committed only ([`start_at_the_end`]).
    let consumer_cfg = kafka::consumer_config(&cfg);
    let consumer: RouteConsumer = consumer_cfg.create_with_context(RouteContext {
        router: Mutex::new(router),
        input_topic: cfg.input.topic.clone(),
        start: cfg.input.start,
        assigned: Mutex::new(Default::default()),
        status: status.clone(),
        throttle: Throttle::default(),
        fetch_states: Mutex::new(BTreeMap::new()),
    })?;
    // Closed within a bound, by `close` below or, on a panic, when dropped.
    let consumer = kafka::Bounded::new(consumer, "route stage");
    // The filter stage's store first: a second instance given a store another one holds is
    // refused there (exit 2), and must not join the input's group before (each join rebalances
    // the running instance's route stage).
    while status.store().is_none() {
        if shutdown.is_triggered() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    consumer.subscribe(&[&cfg.input.topic])?;
    info!(
        input = %cfg.input.topic, route = %cfg.fingerprint.route_topic, route_partitions,
        group = %cfg.input.group_id, "route stage started (global scope)"
    );
    let result = poll_loop(&consumer, &shutdown);
    let mut r = consumer.context().lock();
    let result = match result {
        Ok(()) => {
            info!(
                handover_timeout = %humantime::format_duration(cfg.output.handover_timeout),
                close_timeout = %humantime::format_duration(kafka::CLOSE_TIMEOUT),
                "route stage stopping: handing over every partition (waiting for acknowledgements, then committing), \
                 then closing the consumer"
            );
            let parts: Vec<i32> = r.partitions.keys().copied().collect();
            r.hand_over(&consumer, &parts, false);
            match r.failure.take() {
                Some(f) => Err(f),
                None => Ok(()),
            }
        }
        Err(e) => Err(e),
    };
    if let Err(e) = &result {
        error!(error = %e, "route stage stopping on error");
        status.set_fatal(e.to_string());
        // Nothing queued is sent, nothing in flight retried (the producer's drop waits for the
        // close, which may not end).
        r.producer
            .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
        // The filter stage starts its hand-over now, not after this close.
        shutdown.trigger();
    }
    drop(r);
    consumer.unsubscribe();
    consumer.close();
    result.map_err(RunError::from)
}

/// Polls and copies until a stop is requested (`Ok`) or a fatal error.
fn poll_loop(consumer: &RouteConsumer, shutdown: &Shutdown) -> Result<(), Fatal> {
    loop {
        if shutdown.is_triggered() {
            return Ok(());
        }
        // Polled without holding the router: rebalance callbacks run inside `poll` and take it.
        let polled = consumer.poll(POLL_WAIT);
        let mut r = consumer.context().lock();
        let copied = match polled {
            Some(Ok(msg)) => r.copy(&msg, shutdown)?,
            Some(Err(e @ KafkaError::MessageConsumptionFatal(_))) => return Err(Fatal::Consumer(e)),
            Some(Err(e)) => {
                debug!(error = %e, "route stage: consumer error");
                Copied::Done
            }
            None => Copied::Done,
        };
        match copied {
            Copied::Stopping => return Ok(()),
            Copied::Full => r.back_off(consumer),
            Copied::Wait(why) => r.wait_for_registry(consumer, why),
            Copied::Halted(_) => {
                if let Err(e) = r.pause_halted(consumer) {
                    warn!(error = %e, "route stage: pausing a halted partition failed (its records are not taken)");
                }
            }
            Copied::Done => {}
        }
        r.tick(consumer)?;
    }
}

//! The [`Filter`]: the pipeline's state (partitions, producer, store, delivery mode), and what
//! happens to one record ([`Filter::admit`], [`Filter::on_record`]) and between two batches
//! ([`Filter::tick`]).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::mpsc::{self, Receiver};
use std::sync::Arc;
use std::time::Instant;

use rdkafka::message::BorrowedMessage;
use rdkafka::producer::ThreadedProducer;
use rdkafka::Message;
use tracing::{debug, error, info, warn};

use super::delivery::{encode_opaque, DeliveryContext, DeliveryEvent, SpareHeaders};
use super::delivery_queue::{self, DeliveryReceiver};
use super::mode::Mode;
use super::produce::{self, refuse, send, timestamp_refusal, Added, Destination, Refused, TimestampLimits};
use super::producers::Producers;
use super::recoveries::Recoveries;
use super::refused::Halt;
use super::route::{route, Policy, Route};
use super::topic::TopicHandle;
use super::{Fatal, RunError, Shutdown, TopicCounts};
use crate::config::{Config, OnMissing};
use crate::fingerprint::{stand_in_at, Fingerprint, Fingerprinter, Unfingerprintable};
use crate::global::{self, CopyFate};
use crate::horizon;
use crate::inspect::live::LiveRequest;
use crate::kafka;
use crate::partition::{behind, Behind, Partition, Running, Target};
use crate::provenance::Provenance;
use crate::status::Status;
use crate::store::{Store, StoreError};
use crate::telemetry::{self, Progress, Totals};

/// The pipeline state: partitions, producer, store, checkpoint. Owned by
/// [`FilterContext`](super::FilterContext).
pub struct Filter {
    /// The configuration.
    pub(super) cfg: Arc<Config>,
    /// The parts of the configuration that decide each record's route.
    policy: Policy,
    /// Computes fingerprints from the configured source (records, recovery, live lookups).
    pub(super) fingerprinter: Fingerprinter,
    /// Writes the output and side topics. Shared with the recovery workers, which ask the output
    /// topic's partitions through it (`ownership`).
    pub(super) producer: Arc<ThreadedProducer<DeliveryContext>>,
    /// Idempotent mode with a side topic: the producer of the side copies, without the gapless
    /// guarantee (`kafka::side_producer_config`); otherwise side copies go through `producer`.
    pub(super) side_producer: Option<Arc<ThreadedProducer<DeliveryContext>>>,
    /// The output topic's handle of `producer`, made once ([`TopicHandle`]).
    output_handle: TopicHandle,
    /// The side topics' handles (`output.duplicates_topic`, `fingerprint.dead_letter_topic`, those
    /// set), of `side_producer` when there is one, of `producer` otherwise.
    side_handles: Vec<TopicHandle>,
    /// Acknowledgements from the producer thread.
    pub(super) deliveries: DeliveryReceiver<DeliveryEvent>,
    /// The acknowledgements being applied, taken from `deliveries` a batch at a time (empty
    /// between two batches, kept for its allocation: `delivery_queue`).
    pub(super) delivery_batch: Vec<DeliveryEvent>,
    /// The local store: checkpoints write it, recoveries read it.
    pub(super) store: Store,
    /// Owned input partitions and their life-cycle state.
    pub(super) partitions: BTreeMap<i32, Partition>,
    /// Recovery workers: their results, and the counter of ownership incarnations.
    pub(super) recoveries: Recoveries,
    /// The delivery mode and its state (the checkpoint in progress in idempotent mode).
    pub(super) mode: Mode,
    /// When the next checkpoint starts.
    pub(super) next_checkpoint: Instant,
    /// Set when the pipeline must stop; nothing is committed or stored afterwards.
    pub(super) failure: Option<Fatal>,
    /// Partition counts of the topics (key partitioning's recovery, out-of-scope diagnostics).
    pub(super) topics: TopicCounts,
    /// Partition states for `/readyz` and the demo; shared with HTTP.
    pub(super) status: Arc<Status>,
    /// Process totals (the demo and tests read them).
    pub(super) totals: Arc<Totals>,
    /// Stop request; checked while waiting for producer queue space.
    shutdown: Shutdown,
    /// Last time gauges were refreshed.
    pub(super) last_gauges: Instant,
    /// The counts the previous checkpoint's log line gave ([`Filter::log_checkpoint`]).
    pub(super) logged: Progress,
    /// Whether and since when this instance owns no partition.
    pub(super) idle: Idle,
    /// Questions of the live `/store/*` routes, answered in [`Filter::tick`] from this thread's
    /// partition state.
    pub(super) live: Receiver<LiveRequest>,
    /// Running partitions halted because a side topic refused a copy (`halt`).
    pub(super) halts: BTreeMap<i32, Halt>,
    /// Halts in a row of running partitions waiting for the schema registry (`halt`), for the
    /// back-off; a partition leaves it when one of its records is fingerprinted.
    pub(super) registry_attempts: BTreeMap<i32, u32>,
    /// Since when the producer's queue has been full and every running partition paused, and what
    /// the producers held then ([`Filter::back_off`]); `None` while records flow.
    pub(super) backpressure: Option<crate::kafka::BackedOff>,
    /// Owned partitions held for want of an output partition (`ownership`), so that each is
    /// logged once.
    pub(super) held: BTreeSet<i32>,
    /// Since when the local store cannot be written, if it cannot ([`Filter::store_written`]).
    pub(super) store_failing: Option<Instant>,
    /// `input.skip`: (input partition, input offset) of the records to let past
    /// ([`Filter::skip`]).
    skips: BTreeSet<(i32, i64)>,
    /// The record timestamps each side topic (`output.duplicates_topic`,
    /// `fingerprint.dead_letter_topic`) takes, read at start as the output's: a side copy out of
    /// its topic's range is stamped now, its own stamp in a header ([`Destination::stamps`]). A
    /// topic missing here (its configuration could not be read) has no known limit.
    pub(super) side_timestamps: BTreeMap<String, TimestampLimits>,
    /// The record timestamps the output topic takes, read at start: a record out of the range
    /// is refused before it is produced, as one too large ([`Filter::on_record`]), and a halted
    /// one is not sent again until it is in range (`halt`).
    pub(super) output_timestamps: TimestampLimits,
    /// Seeks of ours not yet followed by a record at or after the offset sought, by input
    /// partition (set where `ownership::resume_at` is called): what explains a record returned
    /// below the next offset ([`behind`]).
    pub(super) seeks: BTreeMap<i32, i64>,
    /// The last record returned below the next offset with no seek to explain it, by input
    /// partition: a rewind is logged once, where it starts.
    pub(super) rewound: BTreeMap<i32, i64>,
    /// The last record counted and then given back (the producer's queue full, a stop), by
    /// input partition: taken again when its partition resumes, it is not counted twice.
    pub(super) counted: BTreeMap<i32, i64>,
    /// Header lists of acknowledged records, emptied, for the next records' provenance.
    pub(super) spare_headers: SpareHeaders,
}

/// What became of a record handed to [`Filter::on_record`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handled {
    /// Taken (forwarded, dropped, copied), or not ours to take.
    Done,
    /// Not taken: the queue of the producer of this target (the output's, or the side topics')
    /// stayed full. The rest of the batch must not be taken either; the partitions are paused
    /// until the queue drains.
    ProducerFull(Target),
}

/// Since when an instance owns no partition, and when it last said so.
#[derive(Debug, Default)]
pub(super) struct Idle {
    /// Since when no partition is owned; `None` while some is.
    pub(super) since: Option<Instant>,
    /// When the idle warning was last logged.
    pub(super) warned: Option<Instant>,
}

impl Filter {
    /// The state of a pipeline that owns no partition yet: creates the producer (in
    /// transactional mode, fences its predecessor and begins the first transaction) and the
    /// channel of the live `/store/*` questions. `None` when a stop was requested while
    /// `init_transactions` waited for the broker. Errors: the producer cannot be created or its
    /// transactions cannot be initialised (a fatal or abortable error; a retriable one, the
    /// broker unreachable or slow, is retried: [`Producers::start`]).
    pub(super) fn start(
        cfg: Arc<Config>,
        store: Store,
        shutdown: Shutdown,
        status: Arc<Status>,
        topics: TopicCounts,
    ) -> Result<Option<Filter>, RunError> {
        let (live_tx, live) = mpsc::sync_channel(crate::http::LIVE_QUEUE);
        status.set_live(live_tx);
        let (dtx, deliveries) = delivery_queue::queue();
        let Some(Producers {
            producer,
            side_producer,
            output_timestamps,
            side_timestamps,
        }) = Producers::start(&cfg, dtx, &shutdown, &status)?
        else {
            return Ok(None);
        };
        // The transaction began now, not when the mode was chosen.
        let mode = Mode::of(&cfg);
        let fingerprinter = Fingerprinter::of_config(&cfg.fingerprint)?;
        let producer = Arc::new(producer);
        let output_handle = TopicHandle::new(&producer, &cfg.output.topic)?;
        let mut side_handles: Vec<TopicHandle> = Vec::new();
        for topic in [&cfg.output.duplicates_topic, &cfg.fingerprint.dead_letter_topic] {
            if !topic.is_empty() && side_handles.iter().all(|h| h.name() != topic.as_str()) {
                side_handles.push(TopicHandle::new(side_producer.as_ref().unwrap_or(&producer), topic)?);
            }
        }
        Ok(Some(Filter {
            policy: Policy::of(&cfg),
            fingerprinter: match &cfg.input.routed_from {
                Some(topic) => fingerprinter.with_stand_in(topic),
                None => fingerprinter.with_stand_in(&cfg.input.topic),
            },
            producer,
            side_producer,
            output_handle,
            side_handles,
            deliveries,
            delivery_batch: Vec::new(),
            store,
            partitions: BTreeMap::new(),
            recoveries: Recoveries::new(),
            mode,
            next_checkpoint: Instant::now() + cfg.checkpoint.interval,
            failure: None,
            topics,
            totals: status.totals.clone(),
            logged: status.totals.progress(),
            status,
            shutdown,
            last_gauges: Instant::now(),
            idle: Idle::default(),
            live,
            halts: BTreeMap::new(),
            registry_attempts: BTreeMap::new(),
            counted: BTreeMap::new(),
            backpressure: None,
            held: BTreeSet::new(),
            store_failing: None,
            skips: crate::config::parse_skips(&cfg.input.skip).unwrap_or_default(),
            output_timestamps,
            side_timestamps,
            seeks: BTreeMap::new(),
            rewound: BTreeMap::new(),
            spare_headers: SpareHeaders::default(),
            cfg,
        }))
    }

    /// Takes a record the consumer just returned into the current batch (see
    /// [`BATCH`](super::BATCH)): computes its fingerprint, starts loading its home slots in the
    /// partition's generations, and notes it returned, so that a hand-over run by a rebalance
    /// callback before [`Self::on_record`] handles it does not commit past it
    /// ([`InFlight::skip_to`](crate::partition::InFlight::skip_to)).
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

    /// Handles one consumed record, [admitted](Self::admit) with its fingerprint `fp`: decides
    /// its [`Route`], counts it, and produces it (or not). `now` is the wall clock (ms since the
    /// Unix epoch) the record is taken at: read once per batch by the poll loop, whose records
    /// are handled within microseconds of each other, and read again by [`send`] after each wait
    /// for room in the producer's queue. Errors stop the pipeline (see [`Fatal`]).
    pub fn on_record(
        &mut self,
        msg: &BorrowedMessage<'_>,
        fp: Result<Fingerprint, Unfingerprintable>,
        now: &mut i64,
    ) -> Result<Handled, Fatal> {
        let (p, offset) = (msg.partition(), msg.offset());
        let Some(Partition::Running(run)) = self.partitions.get_mut(&p) else {
            // Recovering (fetched again after the seek) or no longer ours: never forwarded.
            return Ok(Handled::Done);
        };
        run.inflight.returned(offset);
        let next = run.inflight.next_offset();
        match behind(offset, next, self.seeks.get(&p).copied()) {
            None => {}
            Some(Behind::Stale) => return Ok(Handled::Done), // fetched again after the seek
            Some(Behind::Rewound) => {
                telemetry::input_rewound(p);
                if self.rewound.insert(p, offset) != Some(offset - 1) {
                    error!(
                        partition = p,
                        offset,
                        next_offset = next,
                        "the consumer went back below the partition's next offset without a seek of ours: the input \
                         partition was truncated (an unclean leader election) or its position reset; records from \
                         here up to next_offset are not taken, and any that are not replays of records forwarded \
                         are lost (counted in kafka_dedup_input_rewound_records_total; compare with kafka-dedup audit)"
                    );
                }
                return Ok(Handled::Done);
            }
        }
        if self.seeks.get(&p).is_some_and(|s| offset >= *s) {
            self.seeks.remove(&p); // the seek is done: a record below the next offset is a rewind now
        }
        if self.halts.contains_key(&p) || self.backpressure.is_some() {
            // Halted (a side topic refused a copy) or paused while the producer's queue is full:
            // not taken, fetched again once it resumes.
            return Ok(Handled::Done);
        }
        if let Some(why) = fp.as_ref().err().filter(|e| e.must_wait()) {
            // The schema registry is unavailable: the record may have an identity that cannot
            // be computed now. Not taken; the partition halts and fingerprints it again.
            self.halt_for_registry(p, offset, &why.to_string());
            return Ok(Handled::Done);
        }
        if !self.registry_attempts.is_empty() {
            self.registry_attempts.remove(&p);
        }
        let routed = self.cfg.input.routed_from.is_some();
        // Counted once: a record given back (`counted`) comes again when its partition resumes.
        let recount = !self.counted.is_empty() && self.counted.get(&p).is_some_and(|o| offset <= *o);
        if !recount {
            self.counted.remove(&p);
            consumed(run, msg, self.topics.input, routed, &self.totals);
        }
        take_time(run, msg, &self.cfg, offset, *now);
        if self.skips.contains(&(p, offset)) {
            return Ok(self.skip(msg, p, offset, "skipped", now));
        }
        // A record without fingerprint is known by its provenance: its own coordinates, or, in
        // the filter stage of the global scope, the input record its routed copy names.
        let stand_in = match &fp {
            Err(_) if self.policy.on_missing == OnMissing::Forward && routed => self.fingerprinter.stand_in(msg),
            Err(_) if self.policy.on_missing == OnMissing::Forward => Some(stand_in_at(msg.topic(), p, offset)),
            _ => None,
        };
        let known = fp.as_ref().ok().copied().or(stand_in);
        // Global scope, filter stage: the input record the route stage copied, by provenance. A
        // copy it made again (after a crash, a late copy of a previous owner) is dropped whatever
        // its age; a record without identity follows `on_missing` as before.
        let source = routed_source(&self.cfg, msg);
        if run.high_water.fate(known.and(source)) == CopyFate::Recopy {
            metrics::counter!(global::ROUTE_COPIES_DROPPED).increment(1);
            run.inflight.take(offset, Target::None);
            return Ok(Handled::Done);
        }
        let hit = known.and_then(|f| run.gens.lookup(f.0));
        let decided = route(&self.policy, p, offset, fp, stand_in, hit);
        if !recount {
            count(run, &decided, &self.totals);
        }
        let Some((mut to, learn)) = destination(&self.cfg, p, offset, &decided)? else {
            run.inflight.take(offset, Target::None);
            run.high_water.take(offset, source, run.inflight.watermark());
            return Ok(Handled::Done);
        };
        let (topic, target) = (to.topic, to.target);
        if target == Target::Side {
            to.stamps = self.side_timestamps.get(topic).copied().unwrap_or_default();
        }
        let seq = run
            .inflight
            .take(offset, to.target)
            .expect("produced records are tracked");
        let handle = match to.target {
            Target::Side => side_handle(&self.side_handles, topic),
            _ => &self.output_handle,
        };
        let opaque = encode_opaque(p, seq);
        let stamp = msg.timestamp().to_millis();
        let sent = match target == Target::Output && self.output_timestamps.refuses(stamp, *now).is_some() {
            // The broker would refuse its batch (`INVALID_TIMESTAMP`), fatal to the producer under
            // the gapless guarantee: refused here instead, as a record too large.
            true => Err(refuse(to, msg, opaque, timestamp_refusal(), &mut self.spare_headers)),
            false => send(handle, &self.shutdown, to, msg, opaque, now, &mut self.spare_headers),
        };
        match sent {
            Ok(()) => {}
            Err(Refused::Stopping) => {
                // Not taken: nothing past it is committed, the next owner processes it.
                run.inflight.untake(offset);
                self.counted.insert(p, offset);
                return Ok(Handled::Done);
            }
            Err(Refused::Full) => {
                // Not taken: fetched again when the partitions resume.
                run.inflight.untake(offset);
                self.counted.insert(p, offset);
                return Ok(Handled::ProducerFull(target));
            }
            Err(Refused::Kafka(error, Some(_)))
                if target == Target::Output && !self.cfg.fingerprint.dead_letter_topic.is_empty() =>
            {
                // Too large for the output, or stamped out of its range: dead-lettered instead, with
                // its reason.
                run.inflight.untake(offset);
                let reason = produce::refusal_reason(&error);
                warn!(
                    partition = p, offset, topic, error = %error, reason, timestamp = stamp,
                    "the output refused the record (too_large: for its size; timestamp_out_of_range: its timestamp \
                     is out of the range the topic takes); sent to fingerprint.dead_letter_topic instead"
                );
                telemetry::output_refused(p, "dead_letter");
                return Ok(self.skip(msg, p, offset, reason, now));
            }
            Err(Refused::Kafka(error, Some(mut copy))) => {
                // A side copy, or a record the output refused (too large, stamped out of its range):
                // the record stays taken and
                // unacknowledged (nothing is committed past it) and the partition halts until the
                // copy is taken. A record for the output carries its fingerprint, learned when the
                // producer takes it on a resend (`halt`), as below.
                run.high_water.take(offset, source, run.inflight.watermark());
                if target == Target::Output {
                    copy.learn = learn.map(|f| f.0);
                }
                self.halt(p, seq, offset, *copy, &error);
                return Ok(Handled::Done);
            }
            Err(Refused::Kafka(error, None)) => {
                run.inflight.untake(offset);
                return Err(Fatal::Delivery {
                    partition: p,
                    offset,
                    topic: topic.to_string(),
                    error,
                    skippable: true,
                });
            }
        }
        run.high_water.take(offset, source, run.inflight.watermark());
        // Only once the producer accepted it: a refused record must not suppress itself.
        if let Some(fp) = learn {
            run.gens.insert(fp.0, Some(offset));
        }
        crate::crash::point("after-produce");
        Ok(Handled::Done)
    }

    /// Lets the record at input `p`/`offset` of a running partition past without forwarding it
    /// (`why`: `skipped`, it is named in `input.skip`; `too_large` or `timestamp_out_of_range`, the
    /// output refused it for its size or its timestamp): copied to `fingerprint.dead_letter_topic` with the reason `why` when one is set
    /// (a refusal there halts the partition, as for any dead-letter copy), else dropped. Logged
    /// and, when skipped, counted (`kafka_dedup_records_skipped_total`).
    fn skip(&mut self, msg: &BorrowedMessage<'_>, p: i32, offset: i64, why: &'static str, now: &mut i64) -> Handled {
        let Some(Partition::Running(run)) = self.partitions.get_mut(&p) else {
            return Handled::Done;
        };
        let dead_letter = &self.cfg.fingerprint.dead_letter_topic;
        // Global scope, filter stage: a record let past is taken like any other, so its input
        // record's mark rises (a second copy of it is then dropped as one).
        let source = routed_source(&self.cfg, msg);
        if why == "skipped" {
            telemetry::skipped(p);
            // Said plainly: a new user read the one message for both cases as "kept somewhere".
            match dead_letter.is_empty() {
                true => warn!(
                    partition = p,
                    offset,
                    "record named in input.skip: dropped, not forwarded (no fingerprint.dead_letter_topic is set)"
                ),
                false => warn!(
                    partition = p,
                    offset,
                    dead_letter_topic = dead_letter.as_str(),
                    "record named in input.skip: not forwarded, copied to fingerprint.dead_letter_topic"
                ),
            }
        }
        if dead_letter.is_empty() {
            run.inflight.take(offset, Target::None);
            run.high_water.take(offset, source, run.inflight.watermark());
            return Handled::Done;
        }
        let to = Destination {
            topic: dead_letter,
            input: &self.cfg.input.topic,
            partition: None,
            added: Added::ReasonAndSource(why),
            target: Target::Side,
            stamps: self
                .side_timestamps
                .get(dead_letter.as_str())
                .copied()
                .unwrap_or_default(),
        };
        let seq = run
            .inflight
            .take(offset, Target::Side)
            .expect("produced records are tracked");
        let handle = side_handle(&self.side_handles, dead_letter);
        match send(
            handle,
            &self.shutdown,
            to,
            msg,
            encode_opaque(p, seq),
            now,
            &mut self.spare_headers,
        ) {
            Ok(()) => {
                run.high_water.take(offset, source, run.inflight.watermark());
                Handled::Done
            }
            Err(Refused::Stopping) => {
                run.inflight.untake(offset);
                self.counted.insert(p, offset);
                Handled::Done
            }
            Err(Refused::Full) => {
                run.inflight.untake(offset);
                self.counted.insert(p, offset);
                Handled::ProducerFull(Target::Side)
            }
            Err(Refused::Kafka(error, copy)) => {
                match copy {
                    Some(copy) => {
                        run.high_water.take(offset, source, run.inflight.watermark());
                        self.halt(p, seq, offset, *copy, &error)
                    }
                    None => run.inflight.untake(offset),
                }
                Handled::Done
            }
        }
    }

    /// Takes note of the result of a store write (a checkpoint's, a hand-over's). A failure is
    /// counted (`kafka_dedup_store_write_failures_total`); the first of a series is logged and
    /// shown by `/readyz` (ready all the same), the later ones only counted; the first success
    /// after them says the store takes writes again. The store is a cache: forwarding goes on,
    /// from memory, and every write retries ([`Store::save`] reopens a store whose write failed).
    pub(super) fn store_written(&mut self, result: &Result<(), StoreError>) {
        match result {
            Err(e) => {
                telemetry::store_write_failed();
                if self.store_failing.is_none() {
                    self.store_failing = Some(Instant::now());
                    warn!(
                        path = %self.cfg.store.path.display(), error = %e,
                        "the local store cannot be written: forwarding goes on from memory (the store is a cache; \
                         a restart or a rebalance re-reads the output topic instead); every checkpoint tries again, \
                         failures are counted in kafka_dedup_store_write_failures_total"
                    );
                    self.status.set_store_warning(Some(format!(
                        "the local store cannot be written ({e}): forwarding goes on from memory; a restart or a \
                         rebalance re-reads the output topic; every checkpoint tries again"
                    )));
                }
            }
            Ok(()) => {
                if let Some(since) = self.store_failing.take() {
                    info!(
                        path = %self.cfg.store.path.display(),
                        failing_seconds = since.elapsed().as_secs(),
                        "the local store takes writes again"
                    );
                    self.status.set_store_warning(None);
                }
            }
        }
    }

    /// Records a fatal error: nothing is committed or stored from now on.
    pub(super) fn fail(&mut self, e: Fatal) {
        self.failure = Some(e);
    }
}

/// Advances `run`'s partition clock with the record at input `offset`, before it is looked up,
/// rotating the generations when the clock enters a later bucket ([`horizon::advance`]); the new
/// generations start at `offset` and at the output positions acknowledged so far (a lower bound
/// of where their records will lie).
fn take_time(run: &mut Running, msg: &BorrowedMessage<'_>, cfg: &Config, offset: i64, now: i64) {
    let interval = horizon::interval_ms(cfg.checkpoint.interval);
    let generations = cfg.checkpoint.generations;
    let rotations = horizon::advance(&mut run.clock, msg.timestamp().to_millis(), now, interval, generations);
    let Some(bucket) = run.clock.bucket(interval) else {
        return;
    };
    if rotations > 0 {
        run.gens.rotate_to(rotations, bucket, offset, run.out_positions.clone());
        debug!(
            partition = msg.partition(),
            offset,
            rotations,
            epoch = run.gens.current().epoch,
            bucket,
            "generations rotated"
        );
    } else if run.gens.current().bucket.is_none() {
        run.gens.set_current_bucket(bucket);
    }
}

/// Global scope, filter stage: the input record (partition, offset) the route stage copied
/// `msg` from, by its provenance header naming `input.routed_from`; `None` otherwise.
fn routed_source(cfg: &Config, msg: &BorrowedMessage<'_>) -> Option<(i32, i64)> {
    let topic = cfg.input.routed_from.as_deref()?;
    Provenance::of(msg, topic).map(|s| (s.partition, s.offset))
}

/// Counts a record taken from the consumer, and whether its replays could land in another
/// partition (null key, or a key a default partitioner places elsewhere). Not in the filter stage
/// of the global scope (`routed`): there every copy of an event is in one partition by
/// construction.
fn consumed(run: &mut Running, msg: &BorrowedMessage<'_>, input_partitions: usize, routed: bool, totals: &Totals) {
    run.metrics.consumed.increment(1);
    Totals::bump(&totals.consumed);
    if routed {
        return;
    }
    match msg.key() {
        None => run.metrics.null_key.increment(1),
        Some(k) if !kafka::key_placed_in(k, msg.partition(), input_partitions, &mut run.key_hash) => {
            run.metrics.key_elsewhere.increment(1)
        }
        Some(_) => {}
    }
}

/// Counts a routed record: replays by age and distance, records taken again (not replays:
/// neither in the duplicates counter nor in the distance histogram), records without fingerprint
/// by action and reason.
fn count(run: &Running, decided: &Route, totals: &Totals) {
    if let Route::DropRetaken = decided {
        run.metrics.retaken.increment(1);
        Totals::bump(&totals.retaken);
    }
    if let Route::DropReplay { age, distance, .. } = decided {
        if let Some(c) = run.metrics.duplicates.get(*age) {
            c.increment(1);
        }
        if let Some(d) = distance {
            run.metrics.distance.record(*d as f64);
        }
        Totals::bump(&totals.duplicates);
    }
    if let Some((action, why)) = decided.unfingerprintable() {
        run.metrics.unfingerprintable(action, why.reason());
        Totals::bump(&totals.unfingerprintable);
    }
}

/// Where the record at input `p`/`offset` is produced for route `decided`, and the fingerprint to
/// learn once the producer took it. `Ok(None)`: nowhere (dropped). `Err`: the pipeline stops
/// (`on_missing = "fail"`).
fn destination<'c>(
    cfg: &'c Config,
    p: i32,
    offset: i64,
    decided: &Route,
) -> Result<Option<(Destination<'c>, Option<Fingerprint>)>, Fatal> {
    let side = |topic: &'c str, reason: &'static str| Destination {
        topic,
        input: &cfg.input.topic,
        partition: None,
        added: Added::ReasonAndSource(reason),
        target: Target::Side,
        stamps: TimestampLimits::default(),
    };
    let output = |partition: Option<i32>| Destination {
        topic: &cfg.output.topic,
        input: &cfg.input.topic,
        partition,
        added: if cfg.output.provenance {
            Added::Source
        } else {
            Added::Nothing
        },
        target: Target::Output,
        stamps: TimestampLimits::default(),
    };
    Ok(match decided {
        Route::Forward { fingerprint, partition } => Some((output(*partition), Some(*fingerprint))),
        Route::ForwardUnfingerprintable { partition, learn, .. } => Some((output(*partition), *learn)),
        Route::DropReplay { copy_to_side, .. } => {
            copy_to_side.then(|| (side(&cfg.output.duplicates_topic, "duplicate"), None))
        }
        Route::DropRetaken | Route::DropUnfingerprintable { .. } => None,
        Route::DeadLetter { why } => Some((side(&cfg.fingerprint.dead_letter_topic, why.reason()), None)),
        Route::Fail { why } => {
            return Err(Fatal::Unfingerprintable {
                partition: p,
                offset,
                reason: why.clone(),
            })
        }
    })
}

/// The handle of side topic `topic` among `handles` ([`Filter::start`] makes one for each side
/// topic set, the only topics a side copy goes to).
fn side_handle<'h>(handles: &'h [TopicHandle], topic: &str) -> &'h TopicHandle {
    handles
        .iter()
        .find(|h| h.name() == topic)
        .expect("a handle for every side topic set (Filter::start)")
}

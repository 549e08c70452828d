//! Producing a record, and applying its acknowledgement.
//!
//! Every produced record carries a delivery opaque, `partition << SEQ_BITS | seq`, naming the
//! input partition and the record's sequence number in its [`InFlight`](crate::partition::InFlight)
//! tracking; the acknowledgement ([`DeliveryEvent`]) comes back through
//! [`DeliveryContext`](super::DeliveryContext) and is applied on the pipeline thread.

use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, ThreadedProducer};
use rdkafka::Message;
use tracing::{error, info};

use super::context::DeliveryContext;
use super::filter::Filter;
use super::halt::SideCopy;
use super::mode::Mode;
use super::{Fatal, Shutdown};
use crate::partition::{Partition, Running, Target, SEQ_BITS};
use crate::provenance::{Provenance, ENCODED_MAX, HEADER, REASON_HEADER};
use crate::telemetry::Totals;

/// Where the output acknowledged a record.
#[derive(Debug, Clone, Copy)]
pub(super) struct Acknowledgement {
    /// Output partition.
    pub partition: i32,
    /// Output offset.
    pub offset: i64,
}

/// A record the producer gave up on (after librdkafka's retries).
pub(super) struct DeliveryFailure {
    /// The topic it was produced to.
    pub topic: String,
    /// librdkafka's error.
    pub error: KafkaError,
    /// The record as produced, to be sent again if it was a side copy (`halt`).
    pub copy: SideCopy,
}

/// An acknowledgement from the producer thread.
pub(super) struct DeliveryEvent {
    /// `partition << SEQ_BITS | seq` (see [`encode_opaque`]).
    pub opaque: usize,
    /// Where the record landed, or why it did not.
    pub result: Result<Acknowledgement, DeliveryFailure>,
}

/// The delivery opaque of the record with sequence number `seq` of input partition `partition`.
pub(super) fn encode_opaque(partition: i32, seq: u64) -> usize {
    ((partition as u64) << SEQ_BITS | seq) as usize
}

/// The input partition and sequence number of a delivery opaque.
fn decode_opaque(opaque: usize) -> (i32, u64) {
    let v = opaque as u64;
    ((v >> SEQ_BITS) as i32, v & ((1 << SEQ_BITS) - 1))
}

/// Where a produced copy of a record goes.
pub(super) struct Destination<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The partition; `None` for the producer's partitioner.
    pub partition: Option<i32>,
    /// Headers added to the record's own.
    pub added: Added<'a>,
    /// What the acknowledgement means (see [`Target`]).
    pub target: Target,
}

/// How long [`send`] waits for room in the producer's queue before it gives the record back
/// ([`Refused::Full`]): long enough that a fast output drains it (the usual back-pressure at full
/// speed), short next to `max.poll.interval.ms` (300 s), past which the group would take the
/// partitions away from a poll thread stuck here.
const QUEUE_WAIT: Duration = Duration::from_secs(1);

/// Why the producer did not take a record.
pub(super) enum Refused {
    /// Its queue was full and a stop was requested while waiting.
    Stopping,
    /// Its queue stayed full for [`QUEUE_WAIT`]: the output is slow or unreachable. The record is
    /// not taken; the filter pauses its partitions ([`Filter::back_off`]) and keeps polling.
    Full,
    /// Refused (for example larger than `message.max.bytes`); for a side copy, or a record for
    /// the output refused for its size ([`too_large`]), the copy, to be sent again (`halt`) or
    /// dead-lettered.
    Kafka(KafkaError, Option<Box<SideCopy>>),
}

/// True when `e` says a record is too large for the producer's `message.max.bytes` (which
/// [`crate::kafka::fit_to_output`] fits to the output topic's `max.message.bytes`) or for the
/// topic: a refusal of that one record, which halts its partition or dead-letters it, not a
/// failure of the producer.
pub(super) fn too_large(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge)
}

/// Produces a copy of `msg` (key, value, headers, timestamp) to `to`. Waits while librdkafka's
/// queue is full, unless a stop is requested; any other refusal is returned.
pub(super) fn send(
    producer: &ThreadedProducer<DeliveryContext>,
    shutdown: &Shutdown,
    to: Destination<'_>,
    msg: &BorrowedMessage<'_>,
    opaque: usize,
) -> Result<(), Refused> {
    let mut record = copy_of(msg, BaseRecord::with_opaque_to(to.topic, opaque));
    if let Some(p) = to.partition {
        record = record.partition(p);
    }
    if let Some(h) = headers(msg, to.added) {
        record = record.headers(h);
    }
    let mut full_since: Option<Instant> = None;
    loop {
        match producer.send(record) {
            Ok(()) => return Ok(()),
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                if shutdown.is_triggered() {
                    return Err(Refused::Stopping);
                }
                if full_since.get_or_insert_with(Instant::now).elapsed() >= QUEUE_WAIT {
                    return Err(Refused::Full);
                }
                record = r;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err((e, r)) => {
                let keep = to.target == Target::Side || too_large(&e);
                let copy = keep.then(|| Box::new(SideCopy::of_record(r)));
                return Err(Refused::Kafka(e, copy));
            }
        }
    }
}

/// `record` carrying the key, value and timestamp of the consumed record `msg` (a null key or
/// value stays null; a record without timestamp gets the producer's): what every copy kafka-dedup
/// produces keeps of its input record, to the output, a side topic or the route topic.
pub(crate) fn copy_of<'a>(
    msg: &'a BorrowedMessage<'_>,
    mut record: BaseRecord<'a, [u8], [u8], usize>,
) -> BaseRecord<'a, [u8], [u8], usize> {
    if let Some(k) = msg.key() {
        record = record.key(k);
    }
    if let Some(v) = msg.payload() {
        record = record.payload(v);
    }
    if let Some(ts) = msg.timestamp().to_millis() {
        record = record.timestamp(ts);
    }
    record
}

/// Headers kafka-dedup adds to a produced copy of a record ([`crate::provenance`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Added<'a> {
    /// None (a forwarded record with `output.provenance = false`).
    Nothing,
    /// `kafka-dedup.source` (a forwarded record).
    Source,
    /// `kafka-dedup.reason` with this reason, then `kafka-dedup.source` (a side copy).
    ReasonAndSource(&'a str),
}

/// The record's own headers followed by the `added` ones. The source is the record's own topic,
/// partition and offset (it is an input record).
fn headers(msg: &BorrowedMessage<'_>, added: Added<'_>) -> Option<OwnedHeaders> {
    let own = msg.headers().map(|h| h.detach());
    let reason = match added {
        Added::Nothing => return own,
        Added::Source => None,
        Added::ReasonAndSource(reason) => Some(reason),
    };
    let mut all = own.unwrap_or_else(|| OwnedHeaders::new_with_capacity(2));
    if let Some(reason) = reason {
        all = all.insert(Header {
            key: REASON_HEADER,
            value: Some(reason),
        });
    }
    let mut buf = [0u8; ENCODED_MAX];
    let (topic, partition, offset) = (msg.topic(), msg.partition(), msg.offset());
    Some(
        match Provenance::encode_parts_into(&mut buf, topic, partition, offset) {
            Some(source) => all.insert(Header {
                key: HEADER,
                value: Some(source),
            }),
            None => all.insert(Header {
                key: HEADER,
                value: Some(&Provenance::encode_parts(topic, partition, offset)),
            }),
        },
    )
}

impl Filter {
    /// Applies every acknowledgement that arrived.
    pub(super) fn drain_deliveries(&mut self) {
        loop {
            match self.deliveries.try_recv() {
                Ok(ev) => self.apply_delivery(ev),
                Err(TryRecvError::Empty) | Err(TryRecvError::Disconnected) => return,
            }
        }
    }

    /// Applies one acknowledgement: the record is done. A side copy that failed halts its
    /// partition (idempotent mode, see `halt`); any other failure stops the pipeline.
    fn apply_delivery(&mut self, ev: DeliveryEvent) {
        let (p, seq) = decode_opaque(ev.opaque);
        let failure = match ev.result {
            Ok(ack) => {
                self.halted_copy_acknowledged(p, seq);
                if let Some(Partition::Running(run)) = self.partitions.get_mut(&p) {
                    acknowledged(run, p, seq, ack, &self.totals);
                }
                return; // or an acknowledgement for a partition no longer owned
            }
            Err(failure) => failure,
        };
        if let (Some(offset), Mode::Idempotent { .. }) = (self.pending_side_copy(p, seq), &self.mode) {
            return self.halt(p, seq, offset, failure.copy, &failure.error);
        }
        let Some(Partition::Running(run)) = self.partitions.get_mut(&p) else {
            return; // a failure for a partition no longer owned
        };
        let DeliveryFailure { topic, error, copy } = failure;
        if copy.key.is_none() && error.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidRecord) {
            // The broker names no record of the refused batch; this one is the likely cause.
            error!(
                partition = p,
                offset = run.inflight.pending(seq).map(|(o, _)| o),
                topic,
                "the output refused a record without a key: a compacted topic (cleanup.policy = compact) \
                 accepts keyed records only; nothing is committed past it"
            );
        }
        // Not acknowledged: the watermark stays before it, so it is never committed, and nothing
        // is stored from now on, so its fingerprint dies with this process.
        let offset = run.inflight.watermark();
        if self.failure.is_none() {
            let message = error.to_string();
            error!(
                partition = p,
                topic,
                error = message.as_str(),
                "delivery failed; stopping without committing past it"
            );
            self.failure = Some(Fatal::Delivery {
                partition: p,
                offset,
                topic,
                error,
                skippable: true,
            });
        }
    }

    /// Waits until nothing of `parts` awaits an acknowledgement. False at `deadline`, after a
    /// delivery failure, or when the producer is gone.
    pub(super) fn wait_deliveries(&mut self, parts: &[i32], deadline: Instant) -> bool {
        loop {
            self.drain_deliveries();
            let idle = parts.iter().all(|p| self.deliveries_idle(*p));
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
}

/// Marks record `seq` of running partition `p` done; a record forwarded to the output moves the
/// partition's output position and counts as forwarded.
fn acknowledged(run: &mut Running, p: i32, seq: u64, ack: Acknowledgement, totals: &Totals) {
    let Some((_, target)) = run.inflight.ack(seq) else {
        return;
    };
    crate::crash::point("after-ack");
    if target != Target::Output {
        return;
    }
    run.metrics.forwarded.increment(1);
    Totals::bump(&totals.forwarded);
    if let Some(first) = run.first_forward.take() {
        info!(
            partition = p,
            seconds = first.assigned.elapsed().as_secs_f64(),
            rescanned = first.rescanned,
            "first record forwarded since the partition was assigned"
        );
    }
    let e = run.out_positions.entry(ack.partition).or_insert(ack.offset + 1);
    *e = (*e).max(ack.offset + 1);
}

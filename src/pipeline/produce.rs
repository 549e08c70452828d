//! Producing a record: where a copy goes ([`Destination`]), the headers it carries, and what a
//! refused `send` gives back ([`Refused`]). No partition state: the acknowledgement comes back
//! through [`DeliveryContext`](super::DeliveryContext) and is applied by `acknowledge`.

use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders};
use rdkafka::producer::{BaseRecord, ThreadedProducer};
use rdkafka::Message;

use super::delivery::DeliveryContext;
use super::refused::SideCopy;
use super::Shutdown;
use crate::partition::Target;
use crate::provenance::{Provenance, ENCODED_MAX, HEADER, REASON_HEADER};

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

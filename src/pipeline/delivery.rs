//! The producer's side of librdkafka: the producer context ([`DeliveryContext`]), whose delivery
//! callback runs on the thread that polls the producer (rust-rdkafka's `ThreadedProducer`
//! polling thread; the pipeline thread itself while it flushes) and only sends a
//! [`DeliveryEvent`] into a channel (the pipeline thread drains it, `acknowledge`), and the
//! delivery opaque that names the record an event is for. Its client errors and log lines go
//! through `kafka::logs`, as every context's. Knows nothing of the `Filter`.
//!
//! Every produced record carries a delivery opaque, `partition << SEQ_BITS | seq`, naming the
//! input partition and the record's sequence number in its [`InFlight`](crate::partition::InFlight)
//! tracking.

use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::Instant;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::Message;
use tracing::warn;

use super::refused::SideCopy;
use crate::kafka::logs::{log_client_line, Throttle};
use crate::partition::SEQ_BITS;
use crate::status::Status;

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

/// An acknowledgement from the producer thread: 40 bytes, one per produced record through the
/// channel (the rare failure boxed, so that the common event stays small).
pub(super) struct DeliveryEvent {
    /// `partition << SEQ_BITS | seq` (see [`encode_opaque`]).
    pub opaque: usize,
    /// Where the record landed, or why it did not.
    pub result: Result<Acknowledgement, Box<DeliveryFailure>>,
    /// The acknowledged record's header list, detached from it: freed where the event is
    /// dropped, on the pipeline thread, which allocated it ([`DetachedHeaders`]).
    pub headers: Option<DetachedHeaders>,
}

/// The header list of a delivered record, taken from librdkafka's message before it destroys it
/// (`rd_kafka_message_detach_headers`) and destroyed when dropped. Why: every forwarded record
/// carries a header list the pipeline thread allocates (three allocations, the provenance); freed
/// by librdkafka with the message on the producer's polling thread, each free crosses threads,
/// which costs mimalloc about 430 instructions a record there, against about 100 to free them on
/// the thread that allocated them (`scripts/bench.sh --callgrind`, BENCHMARKS.md). (A halted side
/// copy sent again carries a list copied on the polling thread: freed across threads the other
/// way, rarely.) The lists wait in the channel until the pipeline thread drains it, at most what
/// was acknowledged since its last step, outside the producer's `queue.buffering.max.*`, which
/// counts a record until its delivery report.
pub(super) struct DetachedHeaders(std::ptr::NonNull<rdkafka::bindings::rd_kafka_headers_t>);

// SAFETY: the list is owned (detached: librdkafka no longer refers to it) and librdkafka's
// headers functions take no thread-local state; it is used by one thread at a time.
unsafe impl Send for DetachedHeaders {}

impl DetachedHeaders {
    /// Detaches the header list of the delivered record `m`; `None` when it has none.
    pub(super) fn of(m: &BorrowedMessage<'_>) -> Option<DetachedHeaders> {
        let mut list = std::ptr::null_mut();
        // SAFETY: `m` is a live message of librdkafka's (borrowed for the delivery callback);
        // detaching sets its header pointer to null, so destroying the message no longer
        // destroys the list, which becomes ours.
        let error = unsafe { rdkafka::bindings::rd_kafka_message_detach_headers(m.ptr(), &mut list) };
        if error != rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return None;
        }
        std::ptr::NonNull::new(list).map(DetachedHeaders)
    }
}

impl Drop for DetachedHeaders {
    fn drop(&mut self) {
        // SAFETY: the list is ours (detached) and destroyed once, here.
        unsafe { rdkafka::bindings::rd_kafka_headers_destroy(self.0.as_ptr()) }
    }
}

/// The delivery opaque of the record with sequence number `seq` of input partition `partition`.
pub(super) fn encode_opaque(partition: i32, seq: u64) -> usize {
    ((partition as u64) << SEQ_BITS | seq) as usize
}

/// The input partition and sequence number of a delivery opaque.
pub(super) fn decode_opaque(opaque: usize) -> (i32, u64) {
    let v = opaque as u64;
    ((v >> SEQ_BITS) as i32, v & ((1 << SEQ_BITS) - 1))
}

/// Producer context: forwards every acknowledgement to the pipeline thread.
pub struct DeliveryContext {
    /// Where acknowledgements go; drained by `Filter::tick` on the pipeline thread. (`Sender` is
    /// `Sync`: no lock per acknowledgement.)
    tx: Sender<DeliveryEvent>,
    /// Receives client errors: the producer's background thread reports an authentication or
    /// TLS failure at once, with librdkafka's explanation (`/readyz`).
    status: Arc<Status>,
    /// Bounds how often the same error is logged.
    throttle: Throttle,
}

impl DeliveryContext {
    /// A context that sends acknowledgements to `tx` and client errors to `status`.
    pub(super) fn new(tx: Sender<DeliveryEvent>, status: Arc<Status>) -> Self {
        DeliveryContext {
            tx,
            status,
            throttle: Throttle::default(),
        }
    }
}

impl ClientContext for DeliveryContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.status.note_client_error(&error, reason);
        if let Some(suppressed) = self.throttle.admit(&error, Instant::now()) {
            warn!(error = %error, reason, suppressed, "kafka producer error");
        }
    }

    /// librdkafka's log lines, as rust-rdkafka's default does, except the configuration warning
    /// that `enable.gapless.guarantee` is experimental: kafka-dedup sets it on purpose
    /// (`kafka::producer_config`), so it is logged at debug instead of at every start.
    fn log(&self, level: RDKafkaLogLevel, fac: &str, log_message: &str) {
        log_client_line(&self.throttle, level, fac, log_message);
    }
}

impl ProducerContext for DeliveryContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
        let (result, headers) = match result {
            Ok(m) => (
                Ok(Acknowledgement {
                    partition: m.partition(),
                    offset: m.offset(),
                }),
                DetachedHeaders::of(m),
            ),
            Err((e, m)) => (
                Err(Box::new(DeliveryFailure {
                    topic: m.topic().to_string(),
                    error: e.clone(),
                    copy: SideCopy::of_message(m),
                })),
                None,
            ),
        };
        let _ = self.tx.send(DeliveryEvent {
            opaque,
            result,
            headers,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The event stays as small as its documentation says (one goes through the channel per
    /// produced record): the failure boxed, the header list one pointer.
    #[test]
    fn a_delivery_event_is_40_bytes() {
        assert!(
            std::mem::size_of::<DeliveryEvent>() <= 40,
            "{}",
            std::mem::size_of::<DeliveryEvent>()
        );
    }
}

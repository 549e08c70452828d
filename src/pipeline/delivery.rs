//! The producer's side of librdkafka: the producer context ([`DeliveryContext`]), whose delivery
//! callback runs on the thread that polls the producer (rust-rdkafka's `ThreadedProducer`
//! polling thread; the pipeline thread itself while it flushes) and only sends a
//! [`DeliveryEvent`] into a queue (`delivery_queue`; the pipeline thread drains it, `acknowledge`), and the
//! delivery opaque that names the record an event is for. Its client errors and log lines go
//! through `kafka::logs`, as every context's. Knows nothing of the `Filter`.
//!
//! Every produced record carries a delivery opaque, `partition << SEQ_BITS | seq`, naming the
//! input partition and the record's sequence number in its [`InFlight`](crate::partition::InFlight)
//! tracking.

use std::ptr::NonNull;
use std::sync::Arc;
use std::time::Instant;

use rdkafka::client::ClientContext;
use rdkafka::config::RDKafkaLogLevel;
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedHeaders, BorrowedMessage, OwnedHeaders};
use rdkafka::producer::{DeliveryResult, ProducerContext};
use rdkafka::types::RDKafkaHeaders;
use rdkafka::Message;
use tracing::warn;

use super::delivery_queue::DeliverySender;
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
    /// The acknowledged record's header list, detached from it: kept for the next record
    /// ([`SpareHeaders`]) or freed where the event is applied, on the pipeline thread, which
    /// allocated it ([`DetachedHeaders`]).
    pub headers: Option<DetachedHeaders>,
}

/// The header list of a delivered record, taken from librdkafka's message before it destroys it
/// (`rd_kafka_message_detach_headers`), destroyed when dropped unless [`SpareHeaders`] keeps it.
/// Why: every forwarded record
/// carries a header list the pipeline thread allocates (three allocations, the provenance); freed
/// by librdkafka with the message on the producer's polling thread, each free crosses threads,
/// which costs mimalloc about 430 instructions a record there, against about 100 to free them on
/// the thread that allocated them (`scripts/bench.sh --callgrind`, BENCHMARKS.md). (A halted side
/// copy sent again carries a list copied on the polling thread: freed across threads the other
/// way, rarely.) The lists wait in the channel until the pipeline thread drains it, at most what
/// was acknowledged since its last step, outside the producer's `queue.buffering.max.*`, which
/// counts a record until its delivery report.
pub(super) struct DetachedHeaders(NonNull<rdkafka::bindings::rd_kafka_headers_t>);

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
        NonNull::new(list).map(DetachedHeaders)
    }
}

impl Drop for DetachedHeaders {
    fn drop(&mut self) {
        // SAFETY: the list is ours (detached) and destroyed once, here.
        unsafe { rdkafka::bindings::rd_kafka_headers_destroy(self.0.as_ptr()) }
    }
}

/// Empty header lists, left by delivered records, for the next records' provenance: the
/// pipeline thread's pool ([`SpareHeaders::give_back`], [`SpareHeaders::take`]).
///
/// Why: a forwarded record that has no header of its own carries a list holding the provenance
/// header only, and a new list costs three allocations (the list, its array, the header) and
/// three frees. A list given back keeps its array; emptied of the provenance header it is
/// taken by the next such record, which then allocates only its header: two allocations and two
/// frees less a record (`scripts/bench.sh --callgrind`, BENCHMARKS.md). The records produced
/// are the same: a list taken from the pool is empty, as a new one is.
///
/// At most [`SpareHeaders::MAX`] lists are kept (about 64 bytes each: 2 MiB): the broker
/// acknowledges a produced batch at once (librdkafka's `batch.num.messages`, 10,000 by default),
/// so a batch's lists wait here for the next records. The pool never holds more lists than were
/// in flight at once, which the producer's `queue.buffering.max.messages` bounds. (In a run of
/// 100,000 records of 100 B, none with headers of its own, 41,156 of the 89,968 forwarded took a
/// list from the pool, 46 %: 48,812 lists were made, and the lists of the last records came back
/// after the input had run out, filling the pool; 16,043 were destroyed at its bound.
/// `scripts/bench.sh --callgrind`, calls of `OwnedHeaders::new_with_capacity` and of
/// `rd_kafka_header_remove`.)
#[derive(Default)]
pub(super) struct SpareHeaders {
    /// The lists kept, each empty.
    lists: Vec<OwnedHeaders>,
}

impl SpareHeaders {
    /// Most lists kept; a list given back beyond it is destroyed.
    pub(super) const MAX: usize = 32_768;

    /// Takes back the header list of a delivered record: kept, emptied, when its one header is
    /// the provenance ([`HEADER`](crate::provenance::HEADER)); destroyed otherwise (the record
    /// had headers of its own, or it was a side copy with its reason).
    pub(super) fn give_back(&mut self, list: DetachedHeaders) {
        if self.lists.len() >= Self::MAX {
            return;
        }
        let ptr = list.0.as_ptr();
        // SAFETY: the list is ours (detached); counting and removing read and change it only.
        let emptied = unsafe {
            rdkafka::bindings::rd_kafka_header_cnt(ptr) == 1
                && rdkafka::bindings::rd_kafka_header_remove(ptr, PROVENANCE.as_ptr())
                    == rdkafka::bindings::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                && rdkafka::bindings::rd_kafka_header_cnt(ptr) == 0
        };
        if emptied {
            if let Some(owned) = list.into_owned() {
                self.lists.push(owned);
            }
        }
    }

    /// An empty header list: a spare one, else a new one with room for two headers.
    pub(super) fn take(&mut self) -> OwnedHeaders {
        self.lists.pop().unwrap_or_else(|| OwnedHeaders::new_with_capacity(2))
    }

    /// Lists kept.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.lists.len()
    }
}

/// [`HEADER`](crate::provenance::HEADER) as a C string, for librdkafka's header functions.
const PROVENANCE: &std::ffi::CStr = c"kafka-dedup.source";

impl DetachedHeaders {
    /// The list as rust-rdkafka's [`OwnedHeaders`], which destroys it when dropped; `None` (the
    /// list destroyed) when rust-rdkafka's `OwnedHeaders` is not a bare pointer to its list
    /// ([`owned_headers_are_a_pointer`]), which only a future rust-rdkafka could change.
    fn into_owned(self) -> Option<OwnedHeaders> {
        if !owned_headers_are_a_pointer() {
            return None;
        }
        let ptr = self.0;
        std::mem::forget(self);
        // SAFETY: `OwnedHeaders` is exactly one non-null pointer to the list it owns (checked
        // above, on a real one), and this list is ours (detached): the `OwnedHeaders` made takes
        // it over and destroys it once, when dropped (`self` was forgotten).
        Some(unsafe { std::mem::transmute::<NonNull<rdkafka::bindings::rd_kafka_headers_t>, OwnedHeaders>(ptr) })
    }
}

/// Whether rust-rdkafka's [`OwnedHeaders`] is laid out as the bare pointer to its librdkafka
/// list (`OwnedHeaders { ptr: NativePtr { ptr: NonNull } }` in rdkafka 0.39, whose constructor
/// from a pointer is private): the bytes of a real one are the pointer its `as_borrowed` gives.
/// Checked once a process. (That it has a pointer's size and alignment is checked when this
/// compiles: a rust-rdkafka that changes them fails the build here.)
fn owned_headers_are_a_pointer() -> bool {
    type Ptr = *mut rdkafka::bindings::rd_kafka_headers_t;
    const _: () = assert!(
        std::mem::size_of::<OwnedHeaders>() == std::mem::size_of::<Ptr>()
            && std::mem::align_of::<OwnedHeaders>() == std::mem::align_of::<Ptr>()
    );
    static CHECKED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CHECKED.get_or_init(|| {
        let probe = OwnedHeaders::new_with_capacity(0);
        // SAFETY: the sizes are equal (asserted above); reading the bytes as a pointer moves
        // nothing (`probe` still owns its list).
        let bytes: Ptr = unsafe { std::mem::transmute_copy(&probe) };
        bytes == headers_ptr(&probe)
    })
}

/// The librdkafka header list `headers` wraps (rust-rdkafka's `OwnedHeaders::ptr` is private:
/// its `as_borrowed` is the same pointer, cast).
pub(super) fn headers_ptr(headers: &OwnedHeaders) -> *mut RDKafkaHeaders {
    headers.as_borrowed() as *const BorrowedHeaders as *mut RDKafkaHeaders
}

/// A header list's (name, value) pairs, in order: what tests compare.
#[cfg(test)]
pub(super) fn header_pairs(h: &OwnedHeaders) -> Vec<(String, Option<Vec<u8>>)> {
    use rdkafka::message::Headers;
    h.iter()
        .map(|h| (h.key.to_string(), h.value.map(<[u8]>::to_vec)))
        .collect()
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
    /// Where acknowledgements go; drained by `Filter::tick` on the pipeline thread.
    tx: DeliverySender<DeliveryEvent>,
    /// Receives client errors: the producer's background thread reports an authentication or
    /// TLS failure at once, with librdkafka's explanation (`/readyz`).
    status: Arc<Status>,
    /// Bounds how often the same error is logged.
    throttle: Throttle,
}

impl DeliveryContext {
    /// A context that sends acknowledgements to `tx` and client errors to `status`.
    pub(super) fn new(tx: DeliverySender<DeliveryEvent>, status: Arc<Status>) -> Self {
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
        self.tx.send(DeliveryEvent {
            opaque,
            result,
            headers,
        });
    }
}

#[cfg(test)]
mod tests {
    use rdkafka::message::{Header, Headers};

    use super::*;
    use crate::provenance::HEADER;

    /// A list of `headers` (name, value), detached as a delivered record's is.
    fn detached(headers: &[(&str, &str)]) -> DetachedHeaders {
        let mut owned = OwnedHeaders::new_with_capacity(2);
        for (key, value) in headers {
            owned = owned.insert(Header {
                key,
                value: Some(*value),
            });
        }
        let ptr = NonNull::new(headers_ptr(&owned)).expect("a list");
        std::mem::forget(owned);
        DetachedHeaders(ptr)
    }

    /// The pool is on: rust-rdkafka's `OwnedHeaders` is the bare pointer `into_owned` relies on
    /// (a rust-rdkafka that keeps its size but changes what its bytes are fails here, and every
    /// list is then destroyed instead; one that changes its size fails to build).
    #[test]
    fn owned_headers_are_the_pointer_to_their_list() {
        assert!(owned_headers_are_a_pointer());
        assert_eq!(PROVENANCE.to_bytes(), HEADER.as_bytes());
        let list = detached(&[("a", "1")]);
        let ptr = list.0.as_ptr();
        let owned = list.into_owned().expect("an OwnedHeaders");
        assert_eq!(headers_ptr(&owned), ptr);
        assert_eq!(header_pairs(&owned), vec![("a".to_string(), Some(b"1".to_vec()))]);
    }

    /// A case: its name, the list's headers (name, value), whether it is kept.
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);

    /// Which lists are kept, emptied; and that a kept list carries the next record's headers
    /// exactly as a new list does.
    #[test]
    fn a_list_holding_only_the_provenance_is_kept_empty() {
        let cases: &[Case<'_>] = &[
            (
                "the provenance only (a forwarded record)",
                &[(HEADER, "events/0/7")],
                true,
            ),
            (
                "own header and provenance",
                &[("own", "x"), (HEADER, "events/0/7")],
                false,
            ),
            (
                "reason and provenance (a side copy)",
                &[("kafka-dedup.reason", "duplicate"), (HEADER, "events/0/7")],
                false,
            ),
            ("one header, another name", &[("own", "x")], false),
            ("a name the provenance's begins", &[("kafka-dedup.sourc", "x")], false),
            ("empty", &[], false),
        ];
        for &(name, headers, kept) in cases {
            let mut spares = SpareHeaders::default();
            spares.give_back(detached(headers));
            assert_eq!(spares.len(), usize::from(kept), "{name}");
            let list = spares.take();
            assert_eq!(list.count(), 0, "{name}: an empty list either way");
            let next = list.insert(Header {
                key: HEADER,
                value: Some("events/1/8"),
            });
            let fresh = OwnedHeaders::new_with_capacity(2).insert(Header {
                key: HEADER,
                value: Some("events/1/8"),
            });
            assert_eq!(header_pairs(&next), header_pairs(&fresh), "{name}");
            assert_eq!(spares.len(), 0, "{name}");
        }
    }

    #[test]
    fn at_most_max_lists_are_kept() {
        let mut spares = SpareHeaders::default();
        for _ in 0..SpareHeaders::MAX + 3 {
            spares.give_back(detached(&[(HEADER, "events/0/7")]));
        }
        assert_eq!(spares.len(), SpareHeaders::MAX);
    }

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

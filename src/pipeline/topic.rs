//! [`TopicHandle`]: a producer's handle of one topic, made once, through which [`send`] produces
//! without naming the topic for each record.
//!
//! rust-rdkafka's `BaseProducer::send` copies the topic name into a `CString` for every record
//! and passes it to `rd_kafka_producev` as `RD_KAFKA_VTYPE_TOPIC`, which makes librdkafka look
//! the topic up by name under the client's write lock (`rd_kafka_topic_new0`). Given a handle
//! (`RD_KAFKA_VTYPE_RKT`), librdkafka uses the same topic object that lookup would find: the
//! handle is made with no topic configuration of its own (`rd_kafka_topic_new(rk, name, NULL)`),
//! so it has the producer's default topic configuration and partitioner, as a topic first named
//! by `send` has; librdkafka keeps one object per topic name either way.
//!
//! [`send`]: TopicHandle::send

use std::ffi::{c_void, CString};
use std::mem;
use std::ptr::{self, NonNull};
use std::sync::Arc;

use rdkafka::bindings as rdsys;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, Producer, ProducerContext, ThreadedProducer};
use rdkafka::types::{RDKafkaRespErr, RDKafkaTopic};
use rdkafka::util::IntoOpaque;

use super::delivery::{headers_ptr, DeliveryContext};

/// The record [`TopicHandle::send`] takes: key and value as bytes, the delivery opaque of
/// [`DeliveryContext`] (`encode_opaque`).
pub(super) type Record<'a> = BaseRecord<'a, [u8], [u8], usize>;

/// A producer's handle of one topic (librdkafka's `rd_kafka_topic_t`), for a producer whose
/// delivery opaque is a `usize` (`C`: [`DeliveryContext`]; the tests' own). It holds its
/// producer, so the handle is destroyed before the producer is (librdkafka requires every topic
/// handle destroyed before its client).
pub(super) struct TopicHandle<C: ProducerContext<DeliveryOpaque = usize> + 'static = DeliveryContext> {
    /// The handle, one application reference of librdkafka's topic object; never null.
    rkt: NonNull<RDKafkaTopic>,
    /// The topic's name, as given to [`TopicHandle::new`].
    name: String,
    /// The producer the handle belongs to; dropped after the handle ([`Drop`]).
    producer: Arc<ThreadedProducer<C>>,
}

// SAFETY: librdkafka's topic objects are reference counted and locked internally;
// `rd_kafka_producev` and `rd_kafka_topic_destroy` may be called from any thread.
unsafe impl<C: ProducerContext<DeliveryOpaque = usize> + 'static> Send for TopicHandle<C> {}
// SAFETY: as above: `send` takes `&self` and only calls `rd_kafka_producev`, which is thread-safe.
unsafe impl<C: ProducerContext<DeliveryOpaque = usize> + 'static> Sync for TopicHandle<C> {}

impl<C: ProducerContext<DeliveryOpaque = usize> + 'static> TopicHandle<C> {
    /// The handle of topic `name` for `producer`. Errors: `name` holds a NUL byte
    /// ([`KafkaError::Nul`]), or librdkafka refuses it (longer than 512 bytes:
    /// [`KafkaError::Global`] with its error).
    pub(super) fn new(producer: &Arc<ThreadedProducer<C>>, name: &str) -> Result<TopicHandle<C>, KafkaError> {
        let c_name = CString::new(name)?;
        // SAFETY: the client pointer is valid while `producer` lives; a null topic configuration
        // makes librdkafka use the producer's default one.
        let rkt =
            unsafe { rdsys::rd_kafka_topic_new(producer.client().native_ptr(), c_name.as_ptr(), ptr::null_mut()) };
        match NonNull::new(rkt) {
            Some(rkt) => Ok(TopicHandle {
                rkt,
                name: name.to_string(),
                producer: producer.clone(),
            }),
            None => Err(KafkaError::Global(RDKafkaErrorCode::from(unsafe {
                rdsys::rd_kafka_last_error()
            }))),
        }
    }

    /// The topic's name.
    pub(super) fn name(&self) -> &str {
        &self.name
    }

    /// Produces `record` to this handle's topic (`record.topic` must name it): rust-rdkafka's
    /// `BaseProducer::send` with the handle for the topic's name, field for field (librdkafka
    /// copies key and value: `RD_KAFKA_MSG_F_COPY`; partition `None` is the partitioner's, `-1`;
    /// timestamp `None` is the producer's, `0`). Taken: librdkafka owns the headers, and the
    /// opaque comes back with the acknowledgement. Refused (for example
    /// [`RDKafkaErrorCode::QueueFull`] or [`RDKafkaErrorCode::MessageSizeTooLarge`]): the
    /// record is given back whole, headers and opaque included, with
    /// [`KafkaError::MessageProduction`]. Never blocks.
    #[allow(clippy::result_large_err)] // the record given back, as rust-rdkafka's `send`
    pub(super) fn send<'a>(&self, mut record: Record<'a>) -> Result<(), (KafkaError, Record<'a>)> {
        debug_assert_eq!(
            record.topic, self.name,
            "a record produced through another topic's handle"
        );
        let bytes = |b: Option<&[u8]>| b.map_or((ptr::null_mut(), 0), |b| (b.as_ptr() as *mut c_void, b.len()));
        let (payload_ptr, payload_len) = bytes(record.payload);
        let (key_ptr, key_len) = bytes(record.key);
        let headers_ptr = record.headers.as_ref().map_or(ptr::null_mut(), headers_ptr);
        // `usize` is `Copy`: the record keeps its opaque for a refusal.
        let opaque_ptr = record.delivery_opaque.into_ptr();
        // SAFETY: the client and topic pointers are valid while `self` lives (it holds the
        // producer); key and value are copied by librdkafka before it returns (MSG_F_COPY); the
        // headers are taken over by librdkafka only when it returns no error (forgotten below),
        // and are left to the record otherwise, as rust-rdkafka's `send` relies on.
        let err: RDKafkaRespErr = unsafe {
            rdsys::rd_kafka_producev(
                self.producer.client().native_ptr(),
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_RKT,
                self.rkt.as_ptr(),
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_PARTITION,
                record.partition.unwrap_or(-1),
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_MSGFLAGS,
                rdsys::RD_KAFKA_MSG_F_COPY,
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_VALUE,
                payload_ptr,
                payload_len,
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_KEY,
                key_ptr,
                key_len,
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_OPAQUE,
                opaque_ptr,
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_TIMESTAMP,
                record.timestamp.unwrap_or(0),
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_HEADERS,
                headers_ptr,
                rdsys::rd_kafka_vtype_t::RD_KAFKA_VTYPE_END,
            )
        };
        if err != RDKafkaRespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err((KafkaError::MessageProduction(err.into()), record));
        }
        // librdkafka owns the headers now.
        mem::forget(record.headers.take());
        Ok(())
    }
}

impl<C: ProducerContext<DeliveryOpaque = usize> + 'static> Drop for TopicHandle<C> {
    fn drop(&mut self) {
        // SAFETY: the handle's own application reference, released once; the producer it
        // belongs to is dropped after this (a field).
        unsafe { rdsys::rd_kafka_topic_destroy(self.rkt.as_ptr()) }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use rdkafka::client::ClientContext;
    use rdkafka::message::{Header, OwnedHeaders};
    use rdkafka::producer::{DeliveryResult, PurgeConfig};
    use rdkafka::{ClientConfig, Message};

    use super::super::delivery::header_pairs;
    use super::*;

    const TOPIC: &str = "kd-topic-handle";

    /// Every delivery report, as (opaque, what librdkafka held of the record).
    #[derive(Default)]
    struct Reports(Mutex<Vec<(usize, Held)>>);

    impl ClientContext for Reports {}

    impl ProducerContext for Reports {
        type DeliveryOpaque = usize;

        fn delivery(&self, result: &DeliveryResult<'_>, opaque: usize) {
            let m = match result {
                Ok(m) | Err((_, m)) => m,
            };
            let held = (
                m.topic().to_string(),
                Some(m.partition()),
                m.key().map(<[u8]>::to_vec),
                m.payload().map(<[u8]>::to_vec),
                m.timestamp().to_millis(),
                m.headers().map(|h| header_pairs(&h.detach())),
            );
            self.0.lock().unwrap().push((opaque, held));
        }
    }

    /// A producer of no reachable broker: records are queued, never delivered (a purge reports
    /// them).
    fn producer(queue_messages: usize) -> Arc<ThreadedProducer<Reports>> {
        let p: ThreadedProducer<Reports> = ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:9")
            .set("message.max.bytes", "2000")
            .set("queue.buffering.max.messages", queue_messages.to_string())
            .set("message.timeout.ms", "600000")
            .set("log_level", "0")
            .create_with_context(Reports::default())
            .expect("producer");
        Arc::new(p)
    }

    fn headers() -> OwnedHeaders {
        OwnedHeaders::new()
            .insert(Header {
                key: "own",
                value: Some("a"),
            })
            .insert(Header {
                key: "kafka-dedup.source",
                value: Some(&[1u8, 2, 3][..]),
            })
    }

    /// A case of the table: name, value, partition, the error wanted.
    type Case<'a> = (&'a str, &'a [u8], Option<i32>, Option<RDKafkaErrorCode>);

    /// What librdkafka holds of a queued record: topic, partition, key, value, timestamp, headers.
    type Held = (
        String,
        Option<i32>,
        Option<Vec<u8>>,
        Option<Vec<u8>>,
        Option<i64>,
        Option<Vec<(String, Option<Vec<u8>>)>>,
    );

    /// The handle's send answers every record as rust-rdkafka's `send` does, and a refused record
    /// comes back whole.
    #[test]
    fn a_send_through_the_handle_is_rust_rdkafkas_send() {
        let big = vec![7u8; 5_000];
        let cases: &[Case<'_>] = &[
            ("taken", b"v", None, None),
            ("taken, partition given", b"v", Some(2), None),
            ("too large", &big, None, Some(RDKafkaErrorCode::MessageSizeTooLarge)),
            ("queue full", b"v", None, Some(RDKafkaErrorCode::QueueFull)),
        ];
        for &(name, value, partition, want) in cases {
            let full = want == Some(RDKafkaErrorCode::QueueFull);
            let p = producer(if full { 1 } else { 100 });
            let handle = TopicHandle::new(&p, TOPIC).expect("handle");
            assert_eq!(handle.name(), TOPIC);
            let record = |opaque: usize| {
                let mut r = Record::with_opaque_to(TOPIC, opaque)
                    .key(&b"k"[..])
                    .payload(value)
                    .timestamp(1_700_000_000_000)
                    .headers(headers());
                r.partition = partition;
                r
            };
            if full {
                // One record fills the queue of one, for both sends alike.
                p.send(record(1)).map_err(|(e, _)| e).expect("first record");
            }
            let ours = handle.send(record(42));
            let theirs = p.send(record(43));
            let code = |r: &Result<(), (KafkaError, Record<'_>)>| r.as_ref().err().map(|(e, _)| e.rdkafka_error_code());
            assert_eq!(code(&ours), want.map(Some), "{name}: the handle's send");
            assert_eq!(code(&ours), code(&theirs), "{name}: as rust-rdkafka's send");
            if let Err((_, back)) = ours {
                assert_eq!(back.delivery_opaque, 42, "{name}");
                assert_eq!(back.topic, TOPIC, "{name}");
                assert_eq!(back.key, Some(&b"k"[..]), "{name}");
                assert_eq!(back.payload, Some(value), "{name}");
                assert_eq!(back.partition, partition, "{name}");
                assert_eq!(back.timestamp, Some(1_700_000_000_000), "{name}");
                let got = back.headers.as_ref().map(header_pairs);
                assert_eq!(got, Some(header_pairs(&headers())), "{name}: headers given back");
            }
            // What librdkafka holds of each queued record, from its purge's delivery reports.
            p.purge(PurgeConfig::default().queue().inflight());
            p.flush(Duration::from_secs(5)).expect("purged");
            let mut queued: Vec<(usize, Held)> = std::mem::take(&mut *p.context().0.lock().unwrap());
            queued.retain(|(opaque, _)| *opaque != 1);
            queued.sort();
            if want.is_none() {
                assert_eq!(queued.len(), 2, "{name}: both records queued");
                let ((ours_opaque, ours), (theirs_opaque, theirs)) = (&queued[0], &queued[1]);
                assert_eq!((*ours_opaque, *theirs_opaque), (42, 43), "{name}: opaques");
                assert_eq!(ours.0, TOPIC, "{name}");
                assert_eq!(ours.3.as_deref(), Some(value), "{name}");
                assert_eq!(ours.5, Some(header_pairs(&headers())), "{name}");
                if let Some(given) = partition {
                    assert_eq!(ours.1, Some(given), "{name}: the partition given");
                }
                assert_eq!(ours, theirs, "{name}: the same record as rust-rdkafka's send queues");
            } else {
                assert_eq!(queued, vec![], "{name}: nothing queued");
            }
            drop(handle); // before the producer's last reference
        }
    }

    #[test]
    fn a_topic_name_with_a_nul_byte_has_no_handle() {
        let p = producer(10);
        assert!(matches!(TopicHandle::new(&p, "a\0b"), Err(KafkaError::Nul(_))));
        assert!(TopicHandle::new(&p, &"t".repeat(513)).is_err());
    }
}

//! What a halted partition holds (`halt`): the copies a side topic refused ([`SideCopy`]), and
//! when they are sent again ([`Halt`], [`backoff`]). Plain data, no partition state.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use rdkafka::Message;

/// Wait before the first retry of refused side copies.
pub const RETRY_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between two retries (the wait doubles from [`RETRY_FIRST`]).
pub const RETRY_MAX: Duration = Duration::from_secs(60);

/// A copy for a side topic, or a record for the output topic that the producer refused, held to
/// be sent again.
pub(super) struct SideCopy {
    /// The side topic (or `output.topic`).
    pub topic: String,
    /// The partition; `None` for the producer's partitioner.
    pub partition: Option<i32>,
    /// Key.
    pub key: Option<Vec<u8>>,
    /// Value.
    pub payload: Option<Vec<u8>>,
    /// Timestamp (ms), as the original record's.
    pub timestamp: Option<i64>,
    /// The record's headers and the provenance headers.
    pub headers: Option<OwnedHeaders>,
    /// For a record for the output: the fingerprint (or stand-in) to learn once the producer
    /// takes it, as [`Filter::on_record`](super::Filter::on_record) learns one it forwards at
    /// once; `None` for a side copy.
    pub learn: Option<u128>,
}

/// `headers` (none: a new set) with [`TIMESTAMP_HEADER`](crate::provenance::TIMESTAMP_HEADER)
/// added, holding `timestamp` (ms since the Unix epoch) in decimal.
pub(crate) fn with_timestamp_header(headers: Option<OwnedHeaders>, timestamp: i64) -> OwnedHeaders {
    let text = timestamp.to_string();
    headers
        .unwrap_or_else(|| OwnedHeaders::new_with_capacity(1))
        .insert(Header {
            key: crate::provenance::TIMESTAMP_HEADER,
            value: Some(text.as_bytes()),
        })
}

impl SideCopy {
    /// Stamps the copy anew: its timestamp goes into the header `kafka-dedup.timestamp`
    /// ([`with_timestamp_header`]) and the producer stamps it when it is sent (now). For a side
    /// copy whose topic refuses its timestamp; nothing for a copy without one.
    pub(super) fn restamp(&mut self) {
        if let Some(ts) = self.timestamp.take().filter(|t| *t > 0) {
            self.headers = Some(with_timestamp_header(self.headers.take(), ts));
        }
    }

    /// The copy a producer refused, from the record it handed back.
    pub(super) fn of_record(record: BaseRecord<'_, [u8], [u8], usize>) -> Self {
        SideCopy {
            topic: record.topic.to_string(),
            partition: record.partition,
            key: record.key.map(<[u8]>::to_vec),
            payload: record.payload.map(<[u8]>::to_vec),
            timestamp: record.timestamp,
            headers: record.headers,
            learn: None,
        }
    }

    /// The copy a delivery report says failed (headers copied natively, names never decoded).
    pub(super) fn of_message(m: &BorrowedMessage<'_>) -> Self {
        SideCopy {
            topic: m.topic().to_string(),
            partition: None,
            key: m.key().map(<[u8]>::to_vec),
            payload: m.payload().map(<[u8]>::to_vec),
            timestamp: m.timestamp().to_millis(),
            headers: m.headers().map(|h| h.detach()),
            learn: None,
        }
    }
}

/// A halted partition: the copies its side topics refused, and when they are sent again.
pub(super) struct Halt {
    /// The ownership it belongs to.
    pub(super) incarnation: u64,
    /// Refused copies not in flight, by input offset: (sequence number, copy).
    pub(super) refused: BTreeMap<i64, (u64, SideCopy)>,
    /// Sequence numbers of copies sent again and not acknowledged yet, with their input offset.
    pub(super) resent: BTreeMap<u64, i64>,
    /// The last refusal, for `/readyz` and the log.
    pub(super) cause: String,
    /// Retry rounds started.
    pub(super) attempts: u32,
    /// When the next retry round may start.
    pub(super) retry_at: Instant,
    /// Whether the consumer has paused the partition.
    pub(super) paused: bool,
    /// Whether it waits for the schema registry (an `avro:` or `protobuf:` source could not
    /// fetch a writer schema): it resumes at `retry_at`, where the record is fingerprinted again.
    pub(super) registry: bool,
}

impl Halt {
    /// True when every record of the partition that awaits an acknowledgement is a refused copy
    /// that is not in flight: a hand-over need not wait for anything of it.
    pub(super) fn nothing_in_flight(&self, pending: usize) -> bool {
        self.resent.is_empty() && pending == self.refused.len()
    }
}

/// The wait before retry round `attempts + 1`.
pub(super) fn backoff(attempts: u32) -> Duration {
    RETRY_FIRST.saturating_mul(1u32 << attempts.min(16)).min(RETRY_MAX)
}

impl Halt {
    /// The halt of partition `p` in `halts` for ownership `incarnation`: the one there, or a
    /// new one when there is none or it is of an earlier ownership.
    pub(super) fn of(halts: &mut std::collections::BTreeMap<i32, Halt>, p: i32, incarnation: u64) -> &mut Halt {
        halts
            .entry(p)
            .and_modify(|h| {
                if h.incarnation != incarnation {
                    *h = Halt::new(incarnation);
                }
            })
            .or_insert_with(|| Halt::new(incarnation))
    }

    /// A halt of ownership `incarnation`, nothing refused yet.
    pub(super) fn new(incarnation: u64) -> Self {
        Halt {
            incarnation,
            refused: BTreeMap::new(),
            resent: BTreeMap::new(),
            cause: String::new(),
            attempts: 0,
            retry_at: Instant::now(),
            paused: false,
            registry: false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_up_to_the_maximum() {
        assert_eq!(backoff(0), RETRY_FIRST);
        assert_eq!(backoff(1), RETRY_FIRST * 2);
        assert_eq!(backoff(3), RETRY_FIRST * 8);
        assert_eq!(backoff(30), RETRY_MAX);
        assert_eq!(backoff(u32::MAX), RETRY_MAX);
    }

    #[test]
    fn a_restamped_copy_carries_its_timestamp_in_a_header() {
        use rdkafka::message::Headers;
        let mut copy = SideCopy {
            topic: "dlq".into(),
            partition: None,
            key: None,
            payload: None,
            timestamp: Some(1_764_644_400_000),
            headers: Some(OwnedHeaders::new().insert(Header {
                key: "kafka-dedup.reason",
                value: Some("skipped"),
            })),
            learn: None,
        };
        copy.restamp();
        assert_eq!(copy.timestamp, None, "stamped by the producer");
        let headers = copy.headers.as_ref().unwrap();
        let all: Vec<(&str, Option<&[u8]>)> = headers.iter().map(|h| (h.key, h.value)).collect();
        assert_eq!(
            all,
            [
                ("kafka-dedup.reason", Some(&b"skipped"[..])),
                ("kafka-dedup.timestamp", Some(&b"1764644400000"[..]))
            ]
        );
        copy.restamp();
        assert_eq!(copy.headers.as_ref().unwrap().count(), 2, "restamped once");
    }

    #[test]
    fn a_halt_is_idle_when_only_refused_copies_are_pending() {
        let mut h = Halt::new(1);
        let copy = || SideCopy {
            topic: "dlq".into(),
            partition: None,
            key: None,
            payload: None,
            timestamp: None,
            headers: None,
            learn: None,
        };
        h.refused.insert(4, (10, copy()));
        h.refused.insert(7, (13, copy()));
        assert!(h.nothing_in_flight(2));
        assert!(!h.nothing_in_flight(3), "another record is in flight");
        h.resent.insert(10, 4);
        assert!(!h.nothing_in_flight(2), "a copy sent again is in flight");
    }
}

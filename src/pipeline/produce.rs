//! Producing a record: where a copy goes ([`Destination`]), the headers it carries, and what a
//! refused `send` gives back ([`Refused`]). No partition state: the acknowledgement comes back
//! through [`DeliveryContext`](super::DeliveryContext) and is applied by `acknowledge`.

use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, OwnedHeaders};
use rdkafka::producer::BaseRecord;
use rdkafka::Message;

use super::delivery::SpareHeaders;
use super::refused::{with_timestamp_header, SideCopy};
use super::topic::TopicHandle;
use super::Shutdown;
use crate::partition::Target;
use crate::provenance::{Provenance, HEADER, REASON_HEADER};

/// Where a produced copy of a record goes.
pub(super) struct Destination<'a> {
    /// The topic.
    pub topic: &'a str,
    /// The topic the record was consumed from (the filter stage's `input.topic`, the only topic
    /// its consumer subscribes to): the topic of the provenance header `kafka-dedup.source`.
    pub input: &'a str,
    /// The partition; `None` for the producer's partitioner.
    pub partition: Option<i32>,
    /// Headers added to the record's own.
    pub added: Added<'a>,
    /// What the acknowledgement means (see [`Target`]).
    pub target: Target,
    /// For a side copy, the record timestamps `topic` takes: a copy stamped out of them is
    /// produced stamped now, its own timestamp in `kafka-dedup.timestamp` ([`record_of`]).
    /// Not used for the output (its refusals halt: [`refuse`]).
    pub stamps: TimestampLimits,
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
    /// the output refused for its size ([`too_large`]) or its timestamp ([`refuse`]), the copy, to be sent again (`halt`) or
    /// dead-lettered.
    Kafka(KafkaError, Option<Box<SideCopy>>),
}

/// True when `e` says a record is too large for the producer's `message.max.bytes` (which
/// [`crate::kafka::fit_to_topic`] fits to the output topic's `max.message.bytes`) or for the
/// topic: a refusal of that one record, which halts its partition or dead-letters it, not a
/// failure of the producer.
pub(crate) fn too_large(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::MessageSizeTooLarge)
}

/// The error a record gets when [`TimestampLimits::refuses`] it before it is produced: the one
/// the broker would answer (`INVALID_TIMESTAMP`), which under the gapless guarantee would be a
/// fatal error of the output's producer.
pub(super) fn timestamp_refusal() -> KafkaError {
    KafkaError::MessageProduction(RDKafkaErrorCode::InvalidTimestamp)
}

/// True when `e` says the record's timestamp is out of the range the output topic takes
/// ([`TimestampLimits`], or the broker's own answer).
pub(super) fn out_of_range(e: &KafkaError) -> bool {
    e.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidTimestamp)
}

/// The reason a record the output refused carries to `fingerprint.dead_letter_topic`
/// (`kafka-dedup.reason`): `timestamp_out_of_range` ([`out_of_range`]) or `too_large`.
pub(super) fn refusal_reason(e: &KafkaError) -> &'static str {
    if out_of_range(e) {
        "timestamp_out_of_range"
    } else {
        "too_large"
    }
}

/// The range of record timestamps a topic takes, from its configuration: with
/// `message.timestamp.type = CreateTime` (the default) the broker refuses a batch holding a
/// record stamped more than `message.timestamp.before.max.ms` before its clock or more than
/// `message.timestamp.after.max.ms` after it (`INVALID_TIMESTAMP`; brokers before 3.6 have one
/// limit, `message.timestamp.difference.max.ms`, for both). `None`: no limit that way.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TimestampLimits {
    /// Oldest age taken, ms (`message.timestamp.before.max.ms`).
    pub before_ms: Option<i64>,
    /// Furthest into the future taken, ms (`message.timestamp.after.max.ms`).
    pub after_ms: Option<i64>,
}

/// The longest margin [`TimestampLimits::refuses`] keeps inside a limit, ms: the time between the
/// check and the broker's own (the producer's queue, a retry), and the two hosts' clocks'
/// difference. It is a tenth of the limit when that is shorter.
pub const TIMESTAMP_MARGIN_MS: i64 = 60_000;

impl TimestampLimits {
    /// The limits of a topic whose configuration is `configs` (name → value, as
    /// [`crate::kafka::topic_configs`] reads them). A limit of `i64::MAX` (Kafka's default), a
    /// value that does not parse, or `message.timestamp.type = LogAppendTime` (the broker stamps
    /// records itself) is no limit.
    pub fn of_configs(configs: &std::collections::BTreeMap<String, String>) -> TimestampLimits {
        if configs.get("message.timestamp.type").map(String::as_str) == Some("LogAppendTime") {
            return TimestampLimits::default();
        }
        let limit = |name: &str| -> Option<i64> {
            let ms: i64 = configs.get(name)?.trim().parse().ok()?;
            (0..i64::MAX).contains(&ms).then_some(ms)
        };
        let old = limit("message.timestamp.difference.max.ms");
        let (before, after) = ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms");
        TimestampLimits {
            before_ms: if configs.contains_key(before) {
                limit(before)
            } else {
                old
            },
            after_ms: if configs.contains_key(after) { limit(after) } else { old },
        }
    }

    /// The setting a record stamped `timestamp` (ms since the Unix epoch; `None`, `-1` or `0`:
    /// none, librdkafka or the broker stamp it) breaks when produced at `now` (ms), or `None` when
    /// the topic takes it. The limits are shortened by [`TIMESTAMP_MARGIN_MS`] (or a tenth of the
    /// limit): a record near a limit is refused here rather than by the broker.
    pub fn refuses(&self, timestamp: Option<i64>, now: i64) -> Option<&'static str> {
        let ts = timestamp.filter(|t| *t != -1 && *t != 0)? as i128;
        let inside = |limit: i64| limit as i128 - (limit / 10).min(TIMESTAMP_MARGIN_MS) as i128;
        let now = now as i128;
        if self.before_ms.is_some_and(|b| now - ts > inside(b)) {
            return Some("message.timestamp.before.max.ms");
        }
        if self.after_ms.is_some_and(|a| ts - now > inside(a)) {
            return Some("message.timestamp.after.max.ms");
        }
        None
    }
}

/// Produces a copy of `msg` (key, value, headers, timestamp) to `to`, through `topic`, the
/// handle of `to.topic` of the producer it goes through. Waits while librdkafka's queue is full,
/// unless a stop is requested, and then reads the wall clock again into `now` (ms since the Unix
/// epoch, the caller's reading for its batch: [`Filter::on_record`](super::Filter::on_record));
/// any other refusal is returned.
pub(super) fn send(
    topic: &TopicHandle,
    shutdown: &Shutdown,
    to: Destination<'_>,
    msg: &BorrowedMessage<'_>,
    opaque: usize,
    now: &mut i64,
    spares: &mut SpareHeaders,
) -> Result<(), Refused> {
    let mut record = record_of(&to, msg, opaque, spares);
    let mut full_since: Option<Instant> = None;
    loop {
        match topic.send(record) {
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
                *now = crate::generations::now_ms();
            }
            Err((e, r)) => {
                let keep = to.target == Target::Side || too_large(&e);
                let copy = keep.then(|| Box::new(SideCopy::of_record(r)));
                return Err(Refused::Kafka(e, copy));
            }
        }
    }
}

/// Refuses the copy of `msg` for `to` without producing it, with `error` (the refusal the
/// broker would answer, e.g. [`timestamp_refusal`]): what [`send`] gives back for a record the
/// producer refused, the copy kept to be sent again (`halt`) or dead-lettered.
pub(super) fn refuse(
    to: Destination<'_>,
    msg: &BorrowedMessage<'_>,
    opaque: usize,
    error: KafkaError,
    spares: &mut SpareHeaders,
) -> Refused {
    Refused::Kafka(
        error,
        Some(Box::new(SideCopy::of_record(record_of(&to, msg, opaque, spares)))),
    )
}

/// The record [`send`] produces for `to`: [`copy_of`] `msg`, to `to`'s partition, with the
/// headers `to` adds (in a list from `spares` when the record has none of its own).
fn record_of<'a>(
    to: &Destination<'a>,
    msg: &'a BorrowedMessage<'_>,
    opaque: usize,
    spares: &mut SpareHeaders,
) -> BaseRecord<'a, [u8], [u8], usize> {
    let mut record = copy_of(msg, BaseRecord::with_opaque_to(to.topic, opaque));
    if let Some(p) = to.partition {
        record = record.partition(p);
    }
    if let Some(h) = headers(msg, to.input, to.added, spares) {
        record = record.headers(h);
    }
    // A side copy is for inspection: its timestamp is not the record's identity, and a copy
    // its topic refuses would halt the partition (or, in a transaction, stop the process).
    if to.target == Target::Side
        && to
            .stamps
            .refuses(record.timestamp, crate::generations::now_ms())
            .is_some()
    {
        if let Some(ts) = record.timestamp.take() {
            record.headers = Some(with_timestamp_header(record.headers.take(), ts));
        }
    }
    record
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

/// The record's own headers followed by the `added` ones. The source is the record's own topic
/// (`input`, the one topic the consumer subscribes to: not asked of each record), partition and
/// offset (it is an input record). A record without headers of its own gets an empty list from
/// `spares`.
fn headers(
    msg: &BorrowedMessage<'_>,
    input: &str,
    added: Added<'_>,
    spares: &mut SpareHeaders,
) -> Option<OwnedHeaders> {
    let own = msg.headers().map(|h| h.detach());
    let reason = match added {
        Added::Nothing => return own,
        Added::Source => None,
        Added::ReasonAndSource(reason) => Some(reason),
    };
    let mut all = own.unwrap_or_else(|| spares.take());
    if let Some(reason) = reason {
        all = all.insert(Header {
            key: REASON_HEADER,
            value: Some(reason),
        });
    }
    debug_assert_eq!(msg.topic(), input, "a record of another topic than input.topic");
    let (partition, offset) = (msg.partition(), msg.offset());
    // Room for a topic name of up to 95 bytes (the two `/`, a partition and an offset take at
    // most 33: `-2147483648`, `-9223372036854775808`).
    let mut buf = [0u8; 128];
    Some(
        match Provenance::encode_parts_into(&mut buf, input, partition, offset) {
            Some(source) => all.insert(Header {
                key: HEADER,
                value: Some(source),
            }),
            None => all.insert(Header {
                key: HEADER,
                value: Some(&Provenance::encode_parts(input, partition, offset)),
            }),
        },
    )
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    const HOUR: i64 = 3_600_000;
    const NOW: i64 = 1_800_000_000_000;

    fn of(entries: &[(&str, &str)]) -> TimestampLimits {
        let configs: BTreeMap<String, String> = entries.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        TimestampLimits::of_configs(&configs)
    }

    #[test]
    fn limits_are_read_from_the_topic_configuration() {
        let max = i64::MAX.to_string();
        let cases: &[(&[(&str, &str)], TimestampLimits)] = &[
            (&[], TimestampLimits::default()),
            (
                &[
                    ("message.timestamp.before.max.ms", &max),
                    ("message.timestamp.after.max.ms", &max),
                ],
                TimestampLimits::default(),
            ),
            (
                &[
                    ("message.timestamp.before.max.ms", "3600000"),
                    ("message.timestamp.after.max.ms", &max),
                ],
                TimestampLimits {
                    before_ms: Some(HOUR),
                    after_ms: None,
                },
            ),
            (
                &[
                    ("message.timestamp.type", "LogAppendTime"),
                    ("message.timestamp.before.max.ms", "3600000"),
                ],
                TimestampLimits::default(),
            ),
            (
                &[
                    ("message.timestamp.type", "CreateTime"),
                    ("message.timestamp.after.max.ms", "60000"),
                ],
                TimestampLimits {
                    before_ms: None,
                    after_ms: Some(60_000),
                },
            ),
            // A broker before 3.6: one limit both ways.
            (
                &[("message.timestamp.difference.max.ms", "3600000")],
                TimestampLimits {
                    before_ms: Some(HOUR),
                    after_ms: Some(HOUR),
                },
            ),
            // 3.6 to 3.9 report all three: the new ones decide.
            (
                &[
                    ("message.timestamp.difference.max.ms", "3600000"),
                    ("message.timestamp.before.max.ms", &max),
                    ("message.timestamp.after.max.ms", "60000"),
                ],
                TimestampLimits {
                    before_ms: None,
                    after_ms: Some(60_000),
                },
            ),
            (
                &[("message.timestamp.before.max.ms", "soon")],
                TimestampLimits::default(),
            ),
        ];
        for (entries, want) in cases {
            assert_eq!(of(entries), *want, "{entries:?}");
        }
    }

    #[test]
    fn a_record_out_of_the_range_is_refused_with_a_margin() {
        let hour_both = TimestampLimits {
            before_ms: Some(HOUR),
            after_ms: Some(HOUR),
        };
        let before = Some("message.timestamp.before.max.ms");
        let after = Some("message.timestamp.after.max.ms");
        let cases: &[(TimestampLimits, Option<i64>, Option<&str>)] = &[
            (TimestampLimits::default(), Some(0x7fff_ffff_ffff), None),
            (TimestampLimits::default(), Some(-5), None),
            (hour_both, Some(NOW), None),
            (hour_both, None, None),
            (hour_both, Some(-1), None),
            (hour_both, Some(0), None),
            (hour_both, Some(NOW - 2 * HOUR), before),
            (hour_both, Some(NOW + 2 * HOUR), after),
            (hour_both, Some(-5), before),
            (hour_both, Some(i64::MIN), before),
            (hour_both, Some(i64::MAX), after),
            // Inside the limit but within the margin (a minute for an hour): refused here.
            (hour_both, Some(NOW - HOUR + 30_000), before),
            (hour_both, Some(NOW - HOUR + 61_000), None),
            (hour_both, Some(NOW + HOUR - 30_000), after),
            // A short limit keeps a tenth of itself.
            (
                TimestampLimits {
                    before_ms: Some(10_000),
                    after_ms: None,
                },
                Some(NOW - 8_500),
                None,
            ),
            (
                TimestampLimits {
                    before_ms: Some(10_000),
                    after_ms: None,
                },
                Some(NOW - 9_500),
                before,
            ),
            (
                TimestampLimits {
                    before_ms: Some(0),
                    after_ms: Some(0),
                },
                Some(NOW),
                None,
            ),
            (
                TimestampLimits {
                    before_ms: Some(0),
                    after_ms: Some(0),
                },
                Some(NOW - 1),
                before,
            ),
        ];
        for (limits, ts, want) in cases {
            assert_eq!(limits.refuses(*ts, NOW), *want, "{limits:?} {ts:?}");
        }
    }
}

//! Provenance: where a record in the output (or a side topic) came from.
//!
//! Every record kafka-dedup forwards carries, unless `output.provenance = false`, the header
//! [`HEADER`] (`kafka-dedup.source`) with the value `<input topic>/<input partition>/<input
//! offset>` in ASCII, e.g. `events/3/1042`. Copies sent to `output.duplicates_topic` and
//! `fingerprint.dead_letter_topic` carry the same header, plus [`REASON_HEADER`]
//! (`kafka-dedup.reason`: `duplicate`, or why the record has no fingerprint), and, when their topic
//! would refuse the record's timestamp, [`TIMESTAMP_HEADER`] (`kafka-dedup.timestamp`, the
//! record's own timestamp; the copy is stamped now). Kafka topic names
//! are `[a-zA-Z0-9._-]`, so the value splits unambiguously at its last two `/`.
//!
//! The output thus describes itself: recovery finds where to resume when the group's committed
//! offset is missing or unusable (the newest provenance in the output, plus one), and `audit`
//! matches output records to input records by offset. A record that already carries the header
//! (its input was itself written by kafka-dedup) keeps it; the one kafka-dedup adds comes last,
//! and readers take the last one naming the input topic they expect.

use crate::record::RecordFields;

/// The provenance header's name.
pub const HEADER: &str = "kafka-dedup.source";

/// The header naming why a record went to a side topic.
pub const REASON_HEADER: &str = "kafka-dedup.reason";

/// The header a side copy carries when its topic would refuse the record's own timestamp
/// (`message.timestamp.before.max.ms` / `after.max.ms`): the copy is then stamped by the
/// producer (now), and this header holds the record's timestamp, ms since the Unix epoch, in
/// decimal ASCII (e.g. `1764644400000`).
pub const TIMESTAMP_HEADER: &str = "kafka-dedup.timestamp";

/// Room for any value of [`HEADER`] kafka-dedup writes: a topic name (at most 249 bytes), two
/// `/`, a partition and an offset (at most 20 bytes each in decimal).
pub const ENCODED_MAX: usize = 249 + 2 + 20 + 20;

/// Where a record came from: input topic, partition and offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provenance {
    /// Input topic.
    pub topic: String,
    /// Input partition.
    pub partition: i32,
    /// Input offset.
    pub offset: i64,
}

impl Provenance {
    /// The header value: `topic/partition/offset`.
    pub fn encode(&self) -> String {
        Self::encode_parts(&self.topic, self.partition, self.offset)
    }

    /// The header value of the record at `topic`/`partition`/`offset`.
    pub fn encode_parts(topic: &str, partition: i32, offset: i64) -> String {
        format!("{topic}/{partition}/{offset}")
    }

    /// [`Self::encode_parts`] written into `buf` instead of a new `String` (the per-record path:
    /// no allocation; a small `N` keeps the buffer's zeroing a few stores); the same bytes.
    /// `None` when they do not fit in `N` bytes (the caller then takes [`Self::encode_parts`]).
    #[inline]
    pub fn encode_parts_into<'b, const N: usize>(
        buf: &'b mut [u8; N],
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Option<&'b [u8]> {
        let mut n = 0;
        let mut put = |bytes: &[u8]| -> Option<()> {
            buf.get_mut(n..n + bytes.len())?.copy_from_slice(bytes);
            n += bytes.len();
            Some(())
        };
        // `itoa` writes what `Display` does, two digits a step.
        let mut digits = itoa::Buffer::new();
        put(topic.as_bytes())?;
        put(b"/")?;
        put(digits.format(partition).as_bytes())?;
        put(b"/")?;
        put(digits.format(offset).as_bytes())?;
        Some(&buf[..n])
    }

    /// Parses a header value written by [`Self::encode`]; `None` for anything else (a header of
    /// the same name written by someone else, a null value, bytes that are not ASCII).
    pub fn parse(value: &[u8]) -> Option<Provenance> {
        let text = std::str::from_utf8(value).ok()?;
        let mut parts = text.rsplitn(3, '/');
        let offset = parts.next()?.parse::<i64>().ok().filter(|o| *o >= 0)?;
        let partition = parts.next()?.parse::<i32>().ok().filter(|p| *p >= 0)?;
        let topic = parts.next()?;
        if topic.is_empty() {
            return None;
        }
        Some(Provenance {
            topic: topic.to_string(),
            partition,
            offset,
        })
    }

    /// The provenance of `record` for input topic `topic`: the last [`HEADER`] naming it.
    pub fn of(record: &dyn RecordFields, topic: &str) -> Option<Provenance> {
        let mut found = None;
        record.for_each_header(HEADER.as_bytes(), &mut |value| {
            if let Some(p) = value.and_then(Provenance::parse) {
                if p.topic == topic {
                    found = Some(p);
                }
            }
        });
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::OwnedRecord;

    #[test]
    fn round_trip_and_refusals() {
        let p = Provenance {
            topic: "orders.v2-x_y".into(),
            partition: 3,
            offset: 1042,
        };
        assert_eq!(p.encode(), "orders.v2-x_y/3/1042");
        assert_eq!(Provenance::parse(p.encode().as_bytes()), Some(p));
        for bad in ["", "t/1", "t/x/1", "t/1/-5", "/1/2", "t/1/2x", "t/-1/2"] {
            assert_eq!(Provenance::parse(bad.as_bytes()), None, "{bad:?}");
        }
        assert_eq!(Provenance::parse(&[0xff, b'/', b'1', b'/', b'2']), None);
    }

    #[test]
    fn encoding_into_a_buffer_writes_the_same_bytes() {
        let (mut small, mut max) = ([0u8; 64], [0u8; ENCODED_MAX]);
        let long = "t".repeat(249);
        for (topic, p, o) in [
            ("events", 0, 0i64),
            ("events", 3, 1042),
            ("orders.v2-x_y", i32::MAX, i64::MAX),
            ("e", -1, i64::MIN),
            (long.as_str(), i32::MIN, -7),
        ] {
            let want = Provenance::encode_parts(topic, p, o).into_bytes();
            let into = Provenance::encode_parts_into(&mut max, topic, p, o).map(<[u8]>::to_vec);
            assert_eq!(into.as_ref(), Some(&want));
            let into = Provenance::encode_parts_into(&mut small, topic, p, o).map(<[u8]>::to_vec);
            assert_eq!(
                into,
                (want.len() <= 64).then_some(want),
                "{topic}: in 64 bytes when it fits"
            );
        }
        let too_long = "t".repeat(ENCODED_MAX);
        assert_eq!(Provenance::encode_parts_into(&mut max, &too_long, 1, 1), None);
    }

    #[test]
    fn the_last_header_naming_the_input_topic_wins() {
        let h = |v: &str| (HEADER.as_bytes().to_vec(), Some(v.as_bytes().to_vec()));
        let record = OwnedRecord {
            key: None,
            value: Some(b"v".to_vec()),
            headers: vec![
                h("upstream/0/7"),
                h("events/1/10"),
                (HEADER.as_bytes().to_vec(), None),
                h("events/1/11"),
                h("garbage"),
            ],
        };
        assert_eq!(Provenance::of(&record, "events").map(|p| p.offset), Some(11));
        assert_eq!(Provenance::of(&record, "upstream").map(|p| p.offset), Some(7));
        assert_eq!(Provenance::of(&record, "other"), None);
    }
}

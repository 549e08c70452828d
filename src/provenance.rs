//! Provenance: where a record in the output (or a side topic) came from.
//!
//! Every record kafka-dedup forwards carries, unless `output.provenance = false`, the header
//! [`HEADER`] (`kafka-dedup.source`) with the value `<input topic>/<input partition>/<input
//! offset>` in ASCII, e.g. `events/3/1042`. Copies sent to `output.duplicates_topic` and
//! `fingerprint.dead_letter_topic` carry the same header, plus [`REASON_HEADER`]
//! (`kafka-dedup.reason`: `duplicate`, or why the record has no fingerprint). Kafka topic names
//! are `[a-zA-Z0-9._-]`, so the value splits unambiguously at its last two `/`.
//!
//! The output thus describes itself: recovery finds where to resume when the group's committed
//! offset is missing or unusable (the newest provenance in the output, plus one), and `audit`
//! matches output records to input records by offset. A record that already carries the header
//! (its input was itself written by kafka-dedup) keeps it; the one kafka-dedup adds comes last,
//! and readers take the last one naming the input topic they expect.

use crate::fingerprint::RecordFields;

/// The provenance header's name.
pub const HEADER: &str = "kafka-dedup.source";

/// The header naming why a record went to a side topic.
pub const REASON_HEADER: &str = "kafka-dedup.reason";

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
        format!("{}/{}/{}", self.topic, self.partition, self.offset)
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
        record.for_each_header(HEADER, &mut |value| {
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
    use crate::fingerprint::OwnedRecord;

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
    fn the_last_header_naming_the_input_topic_wins() {
        let h = |v: &str| (HEADER.to_string(), Some(v.as_bytes().to_vec()));
        let record = OwnedRecord {
            key: None,
            value: Some(b"v".to_vec()),
            headers: vec![
                h("upstream/0/7"),
                h("events/1/10"),
                (HEADER.to_string(), None),
                h("events/1/11"),
                h("garbage"),
            ],
        };
        assert_eq!(Provenance::of(&record, "events").map(|p| p.offset), Some(11));
        assert_eq!(Provenance::of(&record, "upstream").map(|p| p.offset), Some(7));
        assert_eq!(Provenance::of(&record, "other"), None);
    }
}

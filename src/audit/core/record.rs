//! The records the audit compares: one input or output record as the audit sees it
//! ([`AuditRecord`]), its identity (fingerprint, or the bytes of a record without one) and its
//! provenance ([`Origin`]), and the horizon distances are measured against ([`Horizon`]).

use serde::{Deserialize, Serialize};
use xxhash_rust::xxh3::Xxh3Default;

use crate::config::CheckpointConfig;
use crate::fingerprint::{Fingerprint, Fingerprinter, RecordFields};
use crate::provenance::Provenance;

/// The horizon the audit measures with, from `[checkpoint]`, in milliseconds of record time:
/// the filter's bounds (issue 13, docs/guarantee.md, "The guarantee"): a replay taken less than H_min after
/// the copy it forwarded is always dropped, a repeat taken H_max or more after it always
/// forwarded, on the partition clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Horizon {
    /// H_min = (`generations` - 1) x `interval`, ms.
    pub min_ms: i64,
    /// H_max = `generations` x `interval`, ms.
    pub max_ms: i64,
}

impl Horizon {
    /// The horizon of a `[checkpoint]` section.
    pub fn of(checkpoint: &CheckpointConfig) -> Horizon {
        let interval = checkpoint.interval.as_millis().min(i64::MAX as u128) as i64;
        let g = checkpoint.generations as i64;
        Horizon {
            min_ms: interval.saturating_mul(g - 1),
            max_ms: interval.saturating_mul(g),
        }
    }
}

/// What identifies a record for matching.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Identity {
    /// The configured fingerprint (`fingerprint.source`).
    Fingerprint(Fingerprint),
    /// No fingerprint (the source is absent or unreadable): [`content_hash`] of its bytes.
    Unfingerprintable(u128),
}

/// The input record an output record says it copies: the partition and offset of its provenance
/// header ([`Provenance`]) naming the input topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Origin {
    /// Input partition.
    pub partition: i32,
    /// Input offset.
    pub offset: i64,
}

/// One record as the audit sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuditRecord {
    /// Offset in its topic partition.
    pub offset: i64,
    /// Record timestamp, ms since the Unix epoch; `None` when the record has none.
    pub timestamp: Option<i64>,
    /// Fingerprint, or the content hash of a record without one.
    pub identity: Identity,
    /// Output records only: the provenance naming the input topic, if it carries one.
    pub origin: Option<Origin>,
}

impl AuditRecord {
    /// An input record: fingerprinted with `fingerprinter`.
    pub fn input(
        record: &dyn RecordFields,
        offset: i64,
        timestamp: Option<i64>,
        fingerprinter: &Fingerprinter,
    ) -> Self {
        AuditRecord {
            offset,
            timestamp,
            identity: identity(record, fingerprinter),
            origin: None,
        }
    }

    /// An output record: fingerprinted with `fingerprinter`, with the provenance naming
    /// `input_topic` (the last such header, [`Provenance::of`]).
    pub fn output(
        record: &dyn RecordFields,
        offset: i64,
        timestamp: Option<i64>,
        fingerprinter: &Fingerprinter,
        input_topic: &str,
    ) -> Self {
        AuditRecord {
            offset,
            timestamp,
            identity: identity(record, fingerprinter),
            origin: Provenance::of(record, input_topic).map(|p| Origin {
                partition: p.partition,
                offset: p.offset,
            }),
        }
    }
}

fn identity(record: &dyn RecordFields, fingerprinter: &Fingerprinter) -> Identity {
    match fingerprinter.fingerprint(record) {
        Ok(fp) => Identity::Fingerprint(fp),
        Err(_) => Identity::Unfingerprintable(content_hash(record)),
    }
}

/// The bytes of a record without fingerprint, for matching it to its copy: xxh3-128 over the key
/// and the value, each as a null marker or a length-prefixed byte string. Headers are left out:
/// the output copy carries kafka-dedup's provenance header besides the record's own.
pub fn content_hash(record: &dyn RecordFields) -> u128 {
    let mut h = Xxh3Default::new();
    for part in [record.key(), record.value()] {
        match part {
            None => h.update(&[0]),
            Some(b) => {
                h.update(&[1]);
                h.update(&(b.len() as u64).to_le_bytes());
                h.update(b);
            }
        }
    }
    h.digest128()
}

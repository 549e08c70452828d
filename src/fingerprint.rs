//! Fingerprints: what makes two records "the same event".
//!
//! A fingerprint is xxh3-128 over a canonical, length-prefixed encoding of the configured source
//! (`fingerprint.source`). The encoding is:
//!
//! ```text
//! tag:u8 (1 value, 2 key, 3 key_value, 4 header, 5 json, 6 composite, 7 avro, 8 protobuf,
//!        9 avro-key, 10 protobuf-key)  then the fields of the source, each
//! field := 0x00                          (null: absent key, tombstone value, header without value)
//!        | 0x01 len:u64-le bytes[len]    (present, possibly empty)
//! header source: count:u64-le field*     (every value of the named header, in record order)
//! ```
//!
//! so a null value differs from an empty one, (key "ab", value "c") differs from (key "a",
//! value "bc"), and the same bytes read through different sources never collide by construction.
//! Broker-assigned fields (topic, partition, offset, leader epoch, timestamp) never enter it:
//! a replay is the same event at a new offset.
//!
//! For `json:/POINTER` (RFC 6901), the value is parsed as JSON and the pointed-to value is
//! re-encoded canonically (object keys sorted, strings unescaped and re-escaped, insignificant
//! whitespace removed, numbers kept as written so `1` and `1.0` stay different and no precision
//! is lost on large integers). The pointed-to value may nest at most [`MAX_JSON_DEPTH`] arrays
//! and objects; deeper is [`Unfingerprintable::NotJson`]. The work is linear in the value's size
//! (times the pointer's depth, a configuration constant): the document is validated once, each
//! pointer step parses one level, and the target is parsed once into a tree that is written out
//! once.
//!
//! # Which records have an identity
//!
//! The content sources (`value`, `key`, `key_value`) fingerprint bytes: a null key or a
//! tombstone has none (`absent`; `key_value` always has one, nulls encoded), and an empty key or
//! value *is* content (all records with an empty value share one fingerprint under
//! `source = "value"`). The id sources (`header:NAME`, `json:/POINTER`) fingerprint an event id,
//! and a null or empty id names no event: such records follow `on_missing` with their own reason
//! instead of collapsing into one fingerprint.
//!
//! | `header:NAME`: the values of the headers named NAME (compared as bytes) | identity? | reason |
//! |---|---|---|
//! | no header of that name (a name that is not UTF-8 is never NAME)          | no  | `absent` |
//! | every value null                                                         | no  | `null_id` |
//! | every value null or empty, at least one empty                            | no  | `empty_id` |
//! | at least one value neither null nor empty                                | yes: all values in order, nulls and empties included | |
//!
//! | `json:/POINTER`: the value                 | identity? | reason |
//! |---|---|---|
//! | tombstone                                  | no  | `absent` |
//! | not JSON, or the target nests deeper than [`MAX_JSON_DEPTH`] | no | `not_json` |
//! | the pointer does not resolve               | no  | `pointer_not_found` |
//! | the target is `null`                       | no  | `null_id` |
//! | the target is `""`                         | no  | `empty_id` |
//! | anything else (`0`, `false`, `" "`, `[]`, `{}`, ...) | yes: its canonical form | |
//!
//! `avro:/POINTER` reads a value in the Schema Registry wire format, decoded with its writer
//! schema ([`crate::schema_registry`]) into the JSON form of [`avro`], where the pointer is
//! resolved as above (tag 7): `null_id`, `empty_id` and `pointer_not_found` as for json, and
//! `no_magic_byte`, `unknown_schema_id`, `not_avro` for a value that is not in the wire format,
//! names a schema the registry lacks, or does not decode. A registry that cannot be reached is
//! [`Unfingerprintable::RegistryUnavailable`], which is no property of the record
//! ([`Unfingerprintable::must_wait`]): the pipeline halts the partition instead.
//! `protobuf:/POINTER` is the same for Protobuf ([`protobuf`], tag 8; `not_protobuf` for a
//! value that does not decode), and `avro-key:/POINTER`, `protobuf-key:/POINTER` read the key
//! instead of the value (tags 9 and 10; a null key is `absent`).

use std::collections::BTreeMap;
use std::fmt;

use serde_json::value::RawValue;

/// The deepest nesting of arrays and objects accepted in the value a `json:` source points to:
/// 127 levels, the most serde_json's default recursion limit (128) parses, so any value a
/// serde_json-based reader accepts is accepted here. Deeper values are
/// [`Unfingerprintable::NotJson`]: the canonical encoding recurses once per level, and a bound
/// keeps it to a few kilobytes of stack whatever a record holds.
pub const MAX_JSON_DEPTH: usize = 127;

/// A 128-bit fingerprint. Shown as 32 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(pub u128);

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fingerprint({:032x})", self.0)
    }
}

/// Text that is not a fingerprint (32 hex digits).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FingerprintParseError {
    /// Not 32 characters long (after trimming white space).
    #[error("a fingerprint is 32 hex digits, got {0} characters")]
    Length(usize),
    /// 32 characters, but not all hex digits.
    #[error("not hex: {0}")]
    NotHex(std::num::ParseIntError),
}

impl std::str::FromStr for Fingerprint {
    type Err = FingerprintParseError;
    /// Parses 32 hex digits (as printed by `Display`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.len() != 32 {
            return Err(FingerprintParseError::Length(s.len()));
        }
        u128::from_str_radix(s, 16)
            .map(Fingerprint)
            .map_err(FingerprintParseError::NotHex)
    }
}

/// Why a record has no fingerprint. The `reason` is a metric label value.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unfingerprintable {
    /// The source is absent: null key, tombstone value, no such header.
    #[error("the fingerprint source is absent")]
    Absent,
    /// The value is not JSON, or the pointed-to value nests deeper than [`MAX_JSON_DEPTH`] (json
    /// source).
    #[error("the value is not valid JSON: {0}")]
    NotJson(String),
    /// The JSON pointer does not resolve (json source).
    #[error("the JSON pointer does not resolve")]
    PointerNotFound,
    /// The id is null: the pointed-to JSON value is `null`, or every value of the header is
    /// null. A null names no event.
    #[error("the id is null")]
    NullId,
    /// The id is empty: the pointed-to JSON value is `""`, or every value of the header is null
    /// or empty, at least one empty. An empty id names no event.
    #[error("the id is empty")]
    EmptyId,
    /// The value is not in the Schema Registry wire format: it is shorter than 5 bytes or does
    /// not start with the magic byte 0 (avro source).
    #[error("the value is not in the Schema Registry wire format (no magic byte 0 and 4-byte schema id)")]
    NoMagicByte,
    /// The schema registry has no schema with the record's schema id (avro source).
    #[error("the schema registry has no schema with id {0}")]
    UnknownSchemaId(u32),
    /// The value does not decode with its writer schema, or that schema is not an Avro schema
    /// this build reads (avro source; the message says which).
    #[error("the value does not decode as Avro: {0}")]
    NotAvro(String),
    /// The value (or key) does not decode as Protobuf with its writer schema and message
    /// indexes, or that schema is not a Protobuf schema this build reads (protobuf source; the
    /// message says which).
    #[error("the record does not decode as Protobuf: {0}")]
    NotProtobuf(String),
    /// The schema registry could not be asked (avro source). Not a property of the record: the
    /// record must wait, never be handled as one without identity ([`Self::must_wait`]).
    #[error("{0}")]
    RegistryUnavailable(String),
    /// One part of a composite source has none (its position from 1, its source, why).
    #[error("part {index} ({source_name}): {why}")]
    Part {
        /// Position of the part in `fingerprint.source`, from 1.
        index: usize,
        /// The part's source (`fingerprint.source` syntax).
        source_name: String,
        /// Why that part has no fingerprint.
        why: Box<Unfingerprintable>,
    },
}

impl Unfingerprintable {
    /// Every [`reason`](Self::reason) label value, for registering the counters up front.
    /// [`Unfingerprintable::RegistryUnavailable`] is not among them: such a record is not
    /// counted as one without identity, it waits.
    pub const REASONS: [&'static str; 9] = [
        "absent",
        "not_json",
        "pointer_not_found",
        "null_id",
        "empty_id",
        "no_magic_byte",
        "unknown_schema_id",
        "not_avro",
        "not_protobuf",
    ];

    /// Label value for metrics: `absent`, `not_json`, `pointer_not_found`, `null_id`, `empty_id`,
    /// `no_magic_byte`, `unknown_schema_id`, `not_avro`, `not_protobuf` (and `registry_unavailable`, never
    /// counted: see [`Self::must_wait`]).
    pub fn reason(&self) -> &'static str {
        match self {
            Unfingerprintable::Absent => "absent",
            Unfingerprintable::NotJson(_) => "not_json",
            Unfingerprintable::PointerNotFound => "pointer_not_found",
            Unfingerprintable::NullId => "null_id",
            Unfingerprintable::EmptyId => "empty_id",
            Unfingerprintable::NoMagicByte => "no_magic_byte",
            Unfingerprintable::UnknownSchemaId(_) => "unknown_schema_id",
            Unfingerprintable::NotAvro(_) => "not_avro",
            Unfingerprintable::NotProtobuf(_) => "not_protobuf",
            Unfingerprintable::RegistryUnavailable(_) => "registry_unavailable",
            Unfingerprintable::Part { why, .. } => why.reason(),
        }
    }

    /// True when the record may have an identity that cannot be computed now (the schema
    /// registry is unavailable, for the record itself or one part): it must be fingerprinted
    /// again later, not forwarded, dropped or dead-lettered as a record without identity.
    pub fn must_wait(&self) -> bool {
        match self {
            Unfingerprintable::RegistryUnavailable(_) => true,
            Unfingerprintable::Part { why, .. } => why.must_wait(),
            _ => false,
        }
    }
}

// The record abstraction (`RecordFields`, `OwnedRecord`, `for_each_raw_header`) lives in
// `crate::record`, below both this module and `crate::provenance`; re-exported here, where its
// callers have always found it.
pub use crate::record::{for_each_raw_header, OwnedRecord, RecordFields};

/// Computes fingerprints for one configured source. Cheap to clone; holds the parsed pointer.
#[derive(Debug, Clone)]
pub struct Fingerprinter {
    /// The identity as configured (what [`Self::source`] returns).
    source: Source,
    /// What it reads: `source` without its `Ignoring` wrapper (never `Ignoring` itself).
    reads: Source,
    /// Unescaped reference tokens of a JSON pointer (RFC 6901 `~1` -> `/`, `~0` -> `~`).
    pointer: Vec<String>,
    /// Composite source: one fingerprinter per part, in order.
    parts: Vec<Fingerprinter>,
    /// Json source: the members left out (`fingerprint.ignore`), as tokens relative to the
    /// pointed-to value.
    ignore: Vec<Vec<String>>,
    /// The topic whose provenance header identifies a record without fingerprint
    /// ([`Self::stand_in`]): `input.topic` in the partition scope, the topic the route stage reads
    /// in the filter stage of the global scope.
    stand_in_from: Option<String>,
    /// The writer schemas of `avro:` parts (shared by every clone; `None` until
    /// [`Self::with_registry`]: an avro part then has no registry to ask and waits).
    registry: Option<std::sync::Arc<crate::schema_registry::SchemaRegistry>>,
    /// Wire-format parts also read the record's JSON form ([`Self::for_lookup`]).
    lookup: bool,
}

fn field(h: &mut Hasher, bytes: Option<&[u8]>) {
    match bytes {
        None => h.update(&[0]),
        Some(b) => {
            h.update(&[1]);
            h.update(&(b.len() as u64).to_le_bytes());
            h.update(b);
        }
    }
}

/// The stand-in of the input record at `topic`/`partition`/`offset`: xxh3-128 of its provenance
/// (`topic/partition/offset`, [`crate::provenance`]) behind a tag byte of its own, so no
/// fingerprint of a configured source equals it. Partition scope: a record without fingerprint
/// that is forwarded is learned by it (issue 22, item 2), so that a recovery, which re-learns it
/// from the output copy's provenance ([`Fingerprinter::stand_in`]), knows the record when it is
/// consumed again.
pub fn stand_in_at(topic: &str, partition: i32, offset: i64) -> Fingerprint {
    let mut buf = [0u8; crate::provenance::ENCODED_MAX];
    let mut h = Hasher::new();
    h.update(&[0x50]);
    match crate::provenance::Provenance::encode_parts_into(&mut buf, topic, partition, offset) {
        Some(source) => field(&mut h, Some(source)),
        None => field(
            &mut h,
            Some(crate::provenance::Provenance::encode_parts(topic, partition, offset).as_bytes()),
        ),
    }
    Fingerprint(h.digest128())
}

impl Fingerprinter {
    /// A fingerprinter for `source`.
    pub fn new(source: Source) -> Self {
        let (reads, ignore) = match &source {
            Source::Ignoring { source: inner, ignore } => (
                inner.as_ref().clone(),
                ignore.iter().map(|p| pointer_tokens(p)).collect(),
            ),
            other => (other.clone(), Vec::new()),
        };
        let mut f = Fingerprinter::reading(reads, &ignore);
        f.source = source;
        f
    }

    /// A fingerprinter for `reads` (not `Ignoring`), leaving out the members at `ignore`
    /// (tokens from the document's root).
    fn reading(reads: Source, ignore: &[Vec<String>]) -> Self {
        // A pointer is "" (the whole document) or starts with '/' (`Source::try_from` checks).
        let pointer = match &reads {
            Source::Json(p) | Source::Avro(p) | Source::Protobuf(p) | Source::AvroKey(p) | Source::ProtobufKey(p) => {
                pointer_tokens(p)
            }
            _ => Vec::new(),
        };
        let parts = match &reads {
            Source::Composite(parts) => parts
                .iter()
                .map(|p| Fingerprinter::reading(p.clone(), ignore))
                .collect(),
            _ => Vec::new(),
        };
        // The members below this part's target, relative to it (`Source::ignoring` refuses a
        // pointer that is the target or above it).
        let ignore = match &reads {
            Source::Json(_) => ignore
                .iter()
                .filter(|t| t.len() > pointer.len() && t.starts_with(&pointer))
                .map(|t| t[pointer.len()..].to_vec())
                .collect(),
            _ => Vec::new(),
        };
        Fingerprinter {
            source: reads.clone(),
            reads,
            pointer,
            parts,
            ignore,
            stand_in_from: None,
            registry: None,
            lookup: false,
        }
    }

    /// As `self`, and `avro:` parts read their writer schemas from `registry`.
    pub fn with_registry(mut self, registry: std::sync::Arc<crate::schema_registry::SchemaRegistry>) -> Self {
        for part in &mut self.parts {
            part.registry = Some(registry.clone());
        }
        self.registry = Some(registry);
        self
    }

    /// A fingerprinter of `cfg`'s identity, with a schema registry client when it has an
    /// `avro:` part. Errors: a `fingerprint.schema_registry` that cannot be set up (its CA file).
    pub fn of_config(
        cfg: &crate::config::FingerprintConfig,
    ) -> Result<Self, crate::schema_registry::RegistryConfigError> {
        let f = Fingerprinter::new(cfg.identity());
        if !cfg.source.reads_registry() {
            return Ok(f);
        }
        let registry = crate::schema_registry::SchemaRegistry::new(&cfg.schema_registry)?;
        Ok(f.with_registry(std::sync::Arc::new(registry)))
    }

    /// As `self`, and [`Self::stand_in`] identifies a record without fingerprint by its
    /// provenance in `topic`: `input.topic` (partition scope: an output record names the input
    /// record it copies), or the topic the route stage reads (the filter stage of the global
    /// scope: a routed copy and its output copy name the input record).
    pub fn with_stand_in(mut self, topic: &str) -> Self {
        self.stand_in_from = Some(topic.to_string());
        self
    }

    /// An identity for a record without fingerprint: the stand-in of its provenance (the last
    /// `kafka-dedup.source` header naming the stand-in topic, [`crate::provenance`]), which every
    /// copy made of one input record shares: the output copy (read back by recovery) and, in the
    /// global scope, the copies the route stage makes. `None` for a record without such a
    /// header, or without a stand-in topic ([`Self::with_stand_in`]).
    pub fn stand_in(&self, record: &dyn RecordFields) -> Option<Fingerprint> {
        let topic = self.stand_in_from.as_deref()?;
        let source = crate::provenance::Provenance::of(record, topic)?;
        Some(stand_in_at(&source.topic, source.partition, source.offset))
    }

    /// The configured source.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The fingerprint of `record`, or why it has none (see the module documentation for which
    /// records have one). Allocation-free except for the json and avro sources, whose work is
    /// linear in the value's size (an avro source may also fetch a schema it has not seen:
    /// [`crate::schema_registry`], blocking for up to its timeout).
    pub fn fingerprint(&self, record: &dyn RecordFields) -> Result<Fingerprint, Unfingerprintable> {
        let mut h = Hasher::new();
        match &self.reads {
            Source::Value => {
                let v = record.value().ok_or(Unfingerprintable::Absent)?;
                h.update(&[1]);
                field(&mut h, Some(v));
            }
            Source::Key => {
                let k = record.key().ok_or(Unfingerprintable::Absent)?;
                h.update(&[2]);
                field(&mut h, Some(k));
            }
            Source::KeyValue => {
                h.update(&[3]);
                field(&mut h, record.key());
                field(&mut h, record.value());
            }
            Source::Header(name) => {
                // Two passes: the count comes first in the encoding, and whether any value names
                // an event decides whether there is a fingerprint at all.
                let name = name.as_bytes();
                let (mut count, mut named, mut empty) = (0u64, false, false);
                record.for_each_header(name, &mut |v| {
                    count += 1;
                    match v {
                        Some([]) => empty = true,
                        Some(_) => named = true,
                        None => {}
                    }
                });
                if count == 0 {
                    return Err(Unfingerprintable::Absent);
                }
                if !named {
                    return Err(if empty {
                        Unfingerprintable::EmptyId
                    } else {
                        Unfingerprintable::NullId
                    });
                }
                h.update(&[4]);
                h.update(&count.to_le_bytes());
                record.for_each_header(name, &mut |v| field(&mut h, v));
            }
            Source::Json(_) => {
                let v = record.value().ok_or(Unfingerprintable::Absent)?;
                let canonical = self.json_target(v)?;
                match canonical.as_slice() {
                    b"null" => return Err(Unfingerprintable::NullId),
                    b"\"\"" => return Err(Unfingerprintable::EmptyId),
                    _ => {}
                }
                h.update(&[5]);
                field(&mut h, Some(&canonical));
            }
            Source::Avro(_) => {
                let v = record.value().ok_or(Unfingerprintable::Absent)?;
                let canonical = self.avro_or_lookup(v)?;
                match canonical.as_slice() {
                    b"null" => return Err(Unfingerprintable::NullId),
                    b"\"\"" => return Err(Unfingerprintable::EmptyId),
                    _ => {}
                }
                h.update(&[7]);
                field(&mut h, Some(&canonical));
            }
            Source::Protobuf(_) | Source::AvroKey(_) | Source::ProtobufKey(_) => {
                let (tag, canonical) = self.wire_target(record)?;
                h.update(&[tag]);
                field(&mut h, Some(&canonical));
            }
            Source::Composite(_) => {
                // Each part's own fingerprint (16 bytes, fixed): no two tuples share an encoding,
                // whatever bytes the parts hold.
                h.update(&[6]);
                h.update(&(self.parts.len() as u64).to_le_bytes());
                for (i, part) in self.parts.iter().enumerate() {
                    let fp = part.fingerprint(record).map_err(|why| Unfingerprintable::Part {
                        index: i + 1,
                        source_name: part.source.to_string(),
                        why: Box::new(why),
                    })?;
                    h.update(&fp.0.to_le_bytes());
                }
            }
            // `Fingerprinter::new` unwraps it: `reads` is never `Ignoring`.
            Source::Ignoring { .. } => unreachable!("Fingerprinter::reads is never Ignoring"),
        }
        Ok(Fingerprint(h.digest128()))
    }

    /// The canonical encoding of the value the pointer designates in the Avro record `value`
    /// (Schema Registry wire format), read as JSON ([`avro`]).
    fn avro_target(&self, value: &[u8]) -> Result<Vec<u8>, Unfingerprintable> {
        use crate::schema_registry::{split_wire_format, SchemaError};
        let (id, mut body) = split_wire_format(value).ok_or(Unfingerprintable::NoMagicByte)?;
        let registry = self.registry.as_ref().ok_or_else(|| {
            Unfingerprintable::RegistryUnavailable("no schema registry client (fingerprint.schema_registry)".into())
        })?;
        let schema = registry.schema(id).map_err(|e| match e {
            SchemaError::NotFound(id) => Unfingerprintable::UnknownSchemaId(id),
            SchemaError::NotAvro(..) | SchemaError::NotProtobuf(..) => Unfingerprintable::NotAvro(e.to_string()),
            SchemaError::Unavailable(_) => Unfingerprintable::RegistryUnavailable(e.to_string()),
        })?;
        let not_avro = |e: apache_avro::Error| Unfingerprintable::NotAvro(format!("with schema id {id}: {e}"));
        let decoded = apache_avro::reader::datum::GenericDatumReader::builder(&schema)
            .build()
            .map_err(not_avro)?
            .read_value(&mut body)
            .map_err(not_avro)?;
        if !body.is_empty() {
            return Err(Unfingerprintable::NotAvro(format!(
                "with schema id {id}: {} bytes after the record",
                body.len()
            )));
        }
        let target = avro::target(decoded, &schema, &self.pointer)?;
        canonical_json(&target.to_string())
    }

    /// The canonical encoding of the value the pointer designates in the JSON document `value`.
    ///
    /// The whole document is validated first (serde_json's `RawValue`: strict JSON, UTF-8,
    /// without recursion). Each pointer step then parses one object or array, its members kept
    /// raw (duplicate keys: the last wins); the target is canonicalised by [`canonical_json`].
    fn json_target(&self, value: &[u8]) -> Result<Vec<u8>, Unfingerprintable> {
        let mut raw: &RawValue =
            serde_json::from_slice(value).map_err(|e| Unfingerprintable::NotJson(e.to_string()))?;
        for token in &self.pointer {
            let text = raw.get().trim_start();
            raw = if text.starts_with('{') {
                let map: BTreeMap<String, &RawValue> =
                    serde_json::from_str(text).map_err(|e| Unfingerprintable::NotJson(e.to_string()))?;
                *map.get(token.as_str()).ok_or(Unfingerprintable::PointerNotFound)?
            } else if text.starts_with('[') {
                // RFC 6901: an array index is 0 or digits without a leading zero.
                if token.is_empty()
                    || (token.len() > 1 && token.starts_with('0'))
                    || !token.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(Unfingerprintable::PointerNotFound);
                }
                let index: usize = token.parse().map_err(|_| Unfingerprintable::PointerNotFound)?;
                let items: Vec<&RawValue> =
                    serde_json::from_str(text).map_err(|e| Unfingerprintable::NotJson(e.to_string()))?;
                *items.get(index).ok_or(Unfingerprintable::PointerNotFound)?
            } else {
                return Err(Unfingerprintable::PointerNotFound);
            };
        }
        canonical_json_without(raw.get(), &self.ignore)
    }
}

mod canonical;
mod hasher;
mod source;

use self::canonical::{canonical_json, canonical_json_without};
use self::hasher::Hasher;
use self::source::pointer_tokens;
pub use self::source::{Source, SourceError};

mod avro;
mod protobuf;
mod wire;

pub use protobuf::ProtoSchema;

#[cfg(test)]
mod tests;

#[cfg(test)]
#[path = "fingerprint/avro_tests.rs"]
mod avro_tests;

#[cfg(test)]
#[path = "fingerprint/protobuf_tests.rs"]
mod protobuf_tests;

#[cfg(test)]
#[path = "fingerprint/identity_tests.rs"]
mod identity_tests;

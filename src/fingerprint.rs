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

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use xxhash_rust::xxh3::Xxh3Default;

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

/// Which part of a record identifies the event (`fingerprint.source`, with `fingerprint.ignore`
/// folded in by [`crate::config::FingerprintConfig::identity`]).
///
/// Its text form ([`fmt::Display`], parsed back by `TryFrom<String>`) is the identity kept in the
/// store and printed in logs: one source as written in the configuration (`value`,
/// `json:/event_id`, ...); several as a JSON array of those (`["json:/tenant_id","json:/event_id"]`);
/// with members left out as a JSON object (`{"source":"json:","ignore":["/processed_at"]}`). No
/// single source starts with `[` or `{`, so the three forms never overlap. In a configuration
/// file `source` is a string or an array of strings; from the environment, the text form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// The record value. A tombstone (null value) has no fingerprint: `on_missing` applies.
    Value,
    /// The record key. A null key has no fingerprint.
    Key,
    /// Key and value together; always present (nulls are encoded distinctly).
    KeyValue,
    /// Every value of the header with this name (compared as bytes), in order. No such header,
    /// or only null and empty values: no fingerprint (see the module documentation).
    Header(String),
    /// An RFC 6901 JSON pointer into the value (`""` is the whole document). A value that is
    /// not JSON, lacks the pointed-to member, or where it is `null` or `""`, has no fingerprint.
    Json(String),
    /// An RFC 6901 pointer into a value in the Schema Registry wire format (magic byte 0, a
    /// 4-byte big-endian schema id, the Avro-encoded record), decoded with its writer schema
    /// (`fingerprint.schema_registry`) and read as JSON ([`avro`], module documentation): the
    /// target is encoded canonically as for [`Source::Json`], under a tag of its own. Without the
    /// wire format, with an unknown schema id, or not decoding: no fingerprint, each with its
    /// own reason.
    Avro(String),
    /// As [`Source::Avro`] for Protobuf: the wire format carries the message indexes after the
    /// schema id ([`protobuf`]); a value that does not decode is `not_protobuf`.
    Protobuf(String),
    /// As [`Source::Avro`], reading the record key (a null key: no fingerprint, `absent`).
    AvroKey(String),
    /// As [`Source::Protobuf`], reading the record key.
    ProtobufKey(String),
    /// Several sources together, in order (at least two; none composite itself): the event is
    /// the tuple, e.g. `(tenant_id, event_id)`. A record lacking any part has no fingerprint
    /// ([`Unfingerprintable::Part`] names the part).
    Composite(Vec<Source>),
    /// `source` with the JSON members at `ignore` (RFC 6901 pointers from the document's root,
    /// each naming a member below the root) left out of every json part before it is
    /// canonicalised: a replay that differs only in a field the upstream stamps again
    /// (`/processed_at`) is the same event. Parts that are not json are unaffected.
    Ignoring {
        /// The source the members are left out of (not itself `Ignoring`).
        source: Box<Source>,
        /// The pointers left out, sorted and without repeats (their order does not matter).
        ignore: Vec<String>,
    },
}

impl Source {
    /// `source` with the JSON members at `ignore` left out; `source` itself when `ignore` is
    /// empty (so a configuration without `ignore` keeps its identity and fingerprints). Errors:
    /// a pointer that is not one below the root, or a source without a json part.
    pub fn ignoring(source: Source, ignore: &[String]) -> Result<Source, SourceError> {
        if ignore.is_empty() {
            return Ok(source);
        }
        for ptr in ignore {
            if !ptr.starts_with('/') {
                return Err(SourceError::NotAPointer(ptr.clone()));
            }
            if let Some(bad) = invalid_escape(ptr) {
                return Err(SourceError::BadEscape(ptr.clone(), bad));
            }
        }
        let parts: &[Source] = match &source {
            Source::Composite(parts) => parts,
            Source::Ignoring { .. } => return Err(SourceError::Nested(source.to_string())),
            one => std::slice::from_ref(one),
        };
        if !parts.iter().any(|p| matches!(p, Source::Json(_))) {
            return Err(SourceError::IgnoreWithoutJson(source.to_string()));
        }
        for part in parts {
            if let Source::Json(target) = part {
                let target_tokens = pointer_tokens(target);
                if let Some(ptr) = ignore.iter().find(|p| target_tokens.starts_with(&pointer_tokens(p))) {
                    return Err(SourceError::IgnoresTheId(ptr.clone(), part.to_string()));
                }
            }
        }
        let mut ignore = ignore.to_vec();
        ignore.sort();
        ignore.dedup();
        Ok(Source::Ignoring {
            source: Box::new(source),
            ignore,
        })
    }

    /// True when `self` or one of its parts reads the Schema Registry wire format
    /// ([`Source::Avro`], [`Source::Protobuf`] and their key forms: it needs
    /// `fingerprint.schema_registry`).
    pub fn reads_registry(&self) -> bool {
        match self {
            Source::Avro(_) | Source::Protobuf(_) | Source::AvroKey(_) | Source::ProtobufKey(_) => true,
            Source::Composite(parts) => parts.iter().any(Source::reads_registry),
            Source::Ignoring { source, .. } => source.reads_registry(),
            _ => false,
        }
    }

    /// Several sources as one identity: one source stays itself (a one-element list is the
    /// plain source, with its fingerprints). Errors: an empty list, a nested list.
    pub fn composite(parts: Vec<Source>) -> Result<Source, SourceError> {
        if let Some(nested) = parts
            .iter()
            .find(|p| matches!(p, Source::Composite(_) | Source::Ignoring { .. }))
        {
            return Err(SourceError::Nested(nested.to_string()));
        }
        match parts.len() {
            0 => Err(SourceError::Empty),
            1 => Ok(parts.into_iter().next().expect("one part")),
            _ => Ok(Source::Composite(parts)),
        }
    }
}

impl Serialize for Source {
    /// A string for one source, an array of strings for several; an `Ignoring` source as its text
    /// form (configurations carry `ignore` in a key of its own).
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Source::Composite(parts) => {
                let texts: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
                texts.serialize(s)
            }
            other => s.serialize_str(&other.to_string()),
        }
    }
}

impl<'de> Deserialize<'de> for Source {
    /// From a string (any text form) or an array of strings (a composite).
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Source;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str(
                    "a fingerprint source (value | key | key_value | header:NAME | json:/POINTER | avro:/POINTER) or a list of them",
                )
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Source, E> {
                Source::try_from(v.to_string()).map_err(E::custom)
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Source, A::Error> {
                let mut parts = Vec::new();
                while let Some(text) = seq.next_element::<String>()? {
                    parts.push(Source::try_from(text).map_err(serde::de::Error::custom)?);
                }
                Source::composite(parts).map_err(serde::de::Error::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// A `fingerprint.source` value that names no source. The message is the configuration error's
/// reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SourceError {
    /// `header:` without a name.
    #[error("`header:` needs a header name, e.g. \"header:event-id\"")]
    NoHeaderName,
    /// `json:` followed by something that is not a JSON pointer (the whole value).
    #[error("\"{0}\": a JSON pointer (RFC 6901) starts with '/', e.g. \"json:/id\"")]
    NotAPointer(String),
    /// A JSON pointer with a `~` not followed by `0` or `1` (the whole value, the bad escape).
    #[error("\"{0}\": invalid escape in JSON pointer: {1}")]
    BadEscape(String, String),
    /// None of the forms (the whole value).
    #[error("\"{0}\" is not a fingerprint source; use value | key | key_value | header:NAME | json:/POINTER | avro:/POINTER, or a list of them")]
    Unknown(String),
    /// An empty list of sources.
    #[error("an empty list names no source; give one or more, e.g. [\"json:/tenant_id\", \"json:/event_id\"]")]
    Empty,
    /// A list inside a list, or `ignore` inside either (the part).
    #[error("{0}: a list of sources holds single sources only")]
    Nested(String),
    /// `fingerprint.ignore` with a source that reads no JSON (the source).
    #[error("fingerprint.ignore leaves members out of JSON, and source {0} has no json: part")]
    IgnoreWithoutJson(String),
    /// An `ignore` pointer that is a json part's target or one of its parents (the pointer, the
    /// part): leaving it out would leave nothing of the id.
    #[error("fingerprint.ignore {0:?} would leave out the id that {1} reads; ignore members beside or below it")]
    IgnoresTheId(String, String),
    /// A text form in JSON (`[...]`, `{...}`) that does not parse (the text, the reason).
    #[error("{0}: {1}")]
    BadForm(String, String),
}

/// The JSON object form of an [`Source::Ignoring`] (see [`Source`]).
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct IgnoringForm {
    source: serde_json::Value,
    ignore: Vec<String>,
}

impl TryFrom<String> for Source {
    type Error = SourceError;
    /// Any text form of [`Source`].
    fn try_from(s: String) -> Result<Self, SourceError> {
        let bad = |e: serde_json::Error| SourceError::BadForm(s.clone(), e.to_string());
        if s.starts_with('[') {
            let texts: Vec<String> = serde_json::from_str(&s).map_err(bad)?;
            let parts = texts.into_iter().map(Source::try_from).collect::<Result<_, _>>()?;
            return Source::composite(parts);
        }
        if s.starts_with('{') {
            let form: IgnoringForm = serde_json::from_str(&s).map_err(bad)?;
            let source = match form.source {
                serde_json::Value::String(one) => Source::try_from(one)?,
                list @ serde_json::Value::Array(_) => Source::try_from(list.to_string())?,
                other => return Err(SourceError::BadForm(s.clone(), format!("source: {other}"))),
            };
            return Source::ignoring(source, &form.ignore);
        }
        match s.as_str() {
            "value" => Ok(Source::Value),
            "key" => Ok(Source::Key),
            "key_value" => Ok(Source::KeyValue),
            _ => {
                if let Some(name) = s.strip_prefix("header:") {
                    if name.is_empty() {
                        return Err(SourceError::NoHeaderName);
                    }
                    Ok(Source::Header(name.to_string()))
                } else if let Some(ptr) = s.strip_prefix("json:") {
                    if !ptr.is_empty() && !ptr.starts_with('/') {
                        return Err(SourceError::NotAPointer(s));
                    }
                    if let Some(bad) = invalid_escape(ptr) {
                        return Err(SourceError::BadEscape(s, bad));
                    }
                    Ok(Source::Json(ptr.to_string()))
                } else if let Some(wire) = wire::parse(&s) {
                    wire
                } else {
                    Err(SourceError::Unknown(s))
                }
            }
        }
    }
}

impl From<Source> for String {
    fn from(s: Source) -> String {
        s.to_string()
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::Value => f.write_str("value"),
            Source::Key => f.write_str("key"),
            Source::KeyValue => f.write_str("key_value"),
            Source::Header(n) => write!(f, "header:{n}"),
            Source::Json(p) => write!(f, "json:{p}"),
            Source::Avro(p) => write!(f, "avro:{p}"),
            Source::Protobuf(p) => write!(f, "protobuf:{p}"),
            Source::AvroKey(p) => write!(f, "avro-key:{p}"),
            Source::ProtobufKey(p) => write!(f, "protobuf-key:{p}"),
            Source::Composite(parts) => {
                let texts: Vec<String> = parts.iter().map(|p| p.to_string()).collect();
                f.write_str(&serde_json::to_string(&texts).map_err(|_| fmt::Error)?)
            }
            Source::Ignoring { source, ignore } => {
                let inner = match source.as_ref() {
                    Source::Composite(parts) => {
                        serde_json::Value::Array(parts.iter().map(|p| p.to_string().into()).collect())
                    }
                    one => serde_json::Value::String(one.to_string()),
                };
                let form = IgnoringForm {
                    source: inner,
                    ignore: ignore.clone(),
                };
                f.write_str(&serde_json::to_string(&form).map_err(|_| fmt::Error)?)
            }
        }
    }
}

/// RFC 6901: `~` must be followed by `0` or `1`.
fn invalid_escape(ptr: &str) -> Option<String> {
    let b = ptr.as_bytes();
    for (i, c) in b.iter().enumerate() {
        if *c == b'~' && !matches!(b.get(i + 1), Some(b'0') | Some(b'1')) {
            return Some(format!("'~' at byte {i} must be followed by 0 or 1"));
        }
    }
    None
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

fn field(h: &mut Xxh3Default, bytes: Option<&[u8]>) {
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
    let mut h = Xxh3Default::new();
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
        let mut h = Xxh3Default::new();
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

/// The unescaped reference tokens of an RFC 6901 pointer (`~1` -> `/`, `~0` -> `~`); none for
/// `""`, the whole document.
fn pointer_tokens(ptr: &str) -> Vec<String> {
    match ptr.strip_prefix('/') {
        Some(tokens) => tokens
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
        None => Vec::new(),
    }
}

/// [`canonical_json`] with the members at `ignore` (token paths) left out: an object member is
/// removed, an array element is skipped (the others keep their order). A path that leads
/// nowhere in this document removes nothing.
fn canonical_json_without(text: &str, ignore: &[Vec<String>]) -> Result<Vec<u8>, Unfingerprintable> {
    if ignore.is_empty() {
        return canonical_json(text);
    }
    let mut node = parse_json(text)?;
    for path in ignore {
        node.remove(path);
    }
    let mut out = Vec::with_capacity(text.len());
    node.write(&mut out)?;
    Ok(out)
}

/// Writes the JSON text `text` canonically: object keys sorted (by their bytes, after
/// unescaping; a repeated key keeps its last value), no whitespace, strings unescaped and
/// re-escaped by serde_json (lone surrogates are refused, as serde_json refuses them in a
/// string), numbers and literals as written. Nesting deeper than [`MAX_JSON_DEPTH`] is refused.
///
/// One pass builds a tree of the value (bounded recursion: at most [`MAX_JSON_DEPTH`] frames),
/// a second writes it out, so each byte is handled a constant number of times. The output is
/// byte for byte what the previous, recursive re-parsing implementation wrote (pinned by
/// `known_fingerprints_are_kept` and compared on random documents by
/// `canonical_form_matches_the_previous_implementation`).
fn canonical_json(text: &str) -> Result<Vec<u8>, Unfingerprintable> {
    let node = parse_json(text)?;
    let mut out = Vec::with_capacity(text.len());
    node.write(&mut out)?;
    Ok(out)
}

/// The tree of the JSON text `text` (see [`canonical_json`]).
fn parse_json(text: &str) -> Result<Node<'_>, Unfingerprintable> {
    let mut p = Parser { text, pos: 0 };
    p.skip_ws();
    let node = p.value(0)?;
    p.skip_ws();
    if p.pos != text.len() {
        return Err(Unfingerprintable::NotJson(format!(
            "trailing characters at byte {}",
            p.pos
        )));
    }
    Ok(node)
}

/// A parsed JSON value of [`canonical_json`].
enum Node<'a> {
    /// A number, `true`, `false` or `null`, as written.
    Literal(&'a str),
    /// A string, unescaped.
    String(std::borrow::Cow<'a, str>),
    /// An array.
    Array(Vec<Node<'a>>),
    /// An object, keys unescaped and sorted; a repeated key keeps its last value.
    Object(BTreeMap<std::borrow::Cow<'a, str>, Node<'a>>),
    /// An array element left out (`fingerprint.ignore`): written as nothing.
    Removed,
}

impl Node<'_> {
    /// Leaves out the member at `path` (tokens): an object's member is removed, an array's
    /// element becomes [`Node::Removed`] (so other paths keep their indices). Recursion is
    /// bounded by the path's length (a configuration constant).
    fn remove(&mut self, path: &[String]) {
        let Some((first, rest)) = path.split_first() else {
            return;
        };
        match self {
            Node::Object(members) if rest.is_empty() => {
                members.remove(first.as_str());
            }
            Node::Object(members) => {
                if let Some(child) = members.get_mut(first.as_str()) {
                    child.remove(rest);
                }
            }
            Node::Array(items) => {
                let index = (first == "0" || (!first.starts_with('0') && first.bytes().all(|b| b.is_ascii_digit())))
                    .then(|| first.parse::<usize>().ok())
                    .flatten();
                if let Some(item) = index.and_then(|i| items.get_mut(i)) {
                    if rest.is_empty() {
                        *item = Node::Removed;
                    } else {
                        item.remove(rest);
                    }
                }
            }
            _ => {}
        }
    }

    /// Appends the canonical form (recursion bounded by the parse's depth limit).
    fn write(&self, out: &mut Vec<u8>) -> Result<(), Unfingerprintable> {
        let bad = |e: serde_json::Error| Unfingerprintable::NotJson(e.to_string());
        match self {
            Node::Literal(t) => out.extend_from_slice(t.as_bytes()),
            Node::String(s) => serde_json::to_writer(&mut *out, s.as_ref()).map_err(bad)?,
            Node::Array(items) => {
                out.push(b'[');
                for (i, v) in items.iter().filter(|v| !matches!(v, Node::Removed)).enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    v.write(out)?;
                }
                out.push(b']');
            }
            Node::Removed => {}
            Node::Object(members) => {
                out.push(b'{');
                for (i, (k, v)) in members.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    serde_json::to_writer(&mut *out, k.as_ref()).map_err(bad)?;
                    out.push(b':');
                    v.write(out)?;
                }
                out.push(b'}');
            }
        }
        Ok(())
    }
}

/// A cursor over a JSON text for [`canonical_json`]. The text was validated as JSON by
/// serde_json already; the parser still refuses (never panics on) anything unexpected.
struct Parser<'a> {
    /// The text.
    text: &'a str,
    /// Byte position of the next unread byte.
    pos: usize,
}

impl<'a> Parser<'a> {
    /// An error at the current position.
    fn error(&self, what: &str) -> Unfingerprintable {
        Unfingerprintable::NotJson(format!("{what} at byte {}", self.pos))
    }

    /// The next unread byte.
    fn peek(&self) -> Option<u8> {
        self.text.as_bytes().get(self.pos).copied()
    }

    /// Skips JSON white space (space, tab, line feed, carriage return).
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            self.pos += 1;
        }
    }

    /// Consumes `b` (after white space) or fails.
    fn expect(&mut self, b: u8) -> Result<(), Unfingerprintable> {
        self.skip_ws();
        if self.peek() == Some(b) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.error(&format!("expected '{}'", b as char)))
        }
    }

    /// The value at the cursor, nested in `depth` arrays and objects of the target.
    fn value(&mut self, depth: usize) -> Result<Node<'a>, Unfingerprintable> {
        self.skip_ws();
        match self.peek() {
            Some(b'"') => Ok(Node::String(self.string()?)),
            Some(open @ (b'[' | b'{')) => {
                if depth >= MAX_JSON_DEPTH {
                    return Err(Unfingerprintable::NotJson(format!(
                        "nested deeper than {MAX_JSON_DEPTH} levels"
                    )));
                }
                self.pos += 1;
                if open == b'[' {
                    self.array(depth + 1)
                } else {
                    self.object(depth + 1)
                }
            }
            Some(_) => self.literal(),
            None => Err(self.error("expected a value")),
        }
    }

    /// The members of an array whose `[` was consumed.
    fn array(&mut self, depth: usize) -> Result<Node<'a>, Unfingerprintable> {
        let mut items = Vec::new();
        self.skip_ws();
        if self.peek() == Some(b']') {
            self.pos += 1;
            return Ok(Node::Array(items));
        }
        loop {
            items.push(self.value(depth)?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b']') => {
                    self.pos += 1;
                    return Ok(Node::Array(items));
                }
                _ => return Err(self.error("expected ',' or ']'")),
            }
        }
    }

    /// The members of an object whose `{` was consumed.
    fn object(&mut self, depth: usize) -> Result<Node<'a>, Unfingerprintable> {
        let mut members = BTreeMap::new();
        self.skip_ws();
        if self.peek() == Some(b'}') {
            self.pos += 1;
            return Ok(Node::Object(members));
        }
        loop {
            self.skip_ws();
            if self.peek() != Some(b'"') {
                return Err(self.error("expected a key"));
            }
            let key = self.string()?;
            self.expect(b':')?;
            let v = self.value(depth)?;
            members.insert(key, v);
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(Node::Object(members));
                }
                _ => return Err(self.error("expected ',' or '}'")),
            }
        }
    }

    /// The string at the cursor (at its `"`), unescaped. Without escapes it is borrowed; with
    /// them, serde_json unescapes it (and refuses what it refuses in a string: invalid escapes,
    /// lone surrogates, control characters).
    fn string(&mut self) -> Result<std::borrow::Cow<'a, str>, Unfingerprintable> {
        let start = self.pos;
        let bytes = self.text.as_bytes();
        let mut i = start + 1;
        let mut plain = true;
        loop {
            match bytes.get(i) {
                Some(b'"') => break,
                Some(b'\\') => {
                    plain = false;
                    i += 2;
                }
                Some(c) => {
                    plain &= *c >= 0x20;
                    i += 1;
                }
                None => return Err(self.error("unterminated string")),
            }
        }
        self.pos = i + 1;
        let token = self.text.get(start..=i).ok_or_else(|| self.error("string"))?;
        if plain {
            let inner = token.strip_prefix('"').and_then(|t| t.strip_suffix('"'));
            return inner
                .map(std::borrow::Cow::Borrowed)
                .ok_or_else(|| self.error("string"));
        }
        serde_json::from_str::<String>(token)
            .map(std::borrow::Cow::Owned)
            .map_err(|e| Unfingerprintable::NotJson(e.to_string()))
    }

    /// A number, `true`, `false` or `null`, as written (checked by serde_json's validation of the
    /// document; here only delimited).
    fn literal(&mut self) -> Result<Node<'a>, Unfingerprintable> {
        let start = self.pos;
        while matches!(
            self.peek(),
            Some(b'0'..=b'9' | b'a'..=b'z' | b'A'..=b'Z' | b'+' | b'-' | b'.')
        ) {
            self.pos += 1;
        }
        match self.text.get(start..self.pos) {
            Some(t) if !t.is_empty() => Ok(Node::Literal(t)),
            _ => Err(self.error("expected a value")),
        }
    }
}

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

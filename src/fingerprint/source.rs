//! The `fingerprint.source` syntax: [`Source`], its text forms (parsed and printed), its
//! configuration errors, and the JSON pointer syntax (RFC 6901) its `json:` and `avro:` parts use.

use std::fmt;

use serde::{Deserialize, Serialize};

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
                    "a fingerprint source (value | key | key_value | header:NAME | json:/POINTER | avro:/POINTER | protobuf:/POINTER | avro-key:/POINTER | protobuf-key:/POINTER) or a list of them",
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
    #[error("\"{0}\" is not a fingerprint source; use value | key | key_value | header:NAME | json:/POINTER | avro:/POINTER | protobuf:/POINTER | avro-key:/POINTER | protobuf-key:/POINTER, or a list of them")]
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
                } else if let Some(wire) = super::wire::parse(&s) {
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
pub(super) fn invalid_escape(ptr: &str) -> Option<String> {
    let b = ptr.as_bytes();
    for (i, c) in b.iter().enumerate() {
        if *c == b'~' && !matches!(b.get(i + 1), Some(b'0') | Some(b'1')) {
            return Some(format!("'~' at byte {i} must be followed by 0 or 1"));
        }
    }
    None
}

/// The unescaped reference tokens of an RFC 6901 pointer (`~1` -> `/`, `~0` -> `~`); none for
/// `""`, the whole document.
pub(super) fn pointer_tokens(ptr: &str) -> Vec<String> {
    match ptr.strip_prefix('/') {
        Some(tokens) => tokens
            .split('/')
            .map(|t| t.replace("~1", "/").replace("~0", "~"))
            .collect(),
        None => Vec::new(),
    }
}

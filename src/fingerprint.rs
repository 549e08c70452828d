//! Fingerprints: what makes two records "the same event".
//!
//! A fingerprint is xxh3-128 over a canonical, length-prefixed encoding of the configured source
//! (`fingerprint.source`). The encoding is:
//!
//! ```text
//! tag:u8 (1 value, 2 key, 3 key_value, 4 header, 5 json)  then the fields of the source, each
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
//! is lost on large integers).

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;
use xxhash_rust::xxh3::Xxh3Default;

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

/// Which part of a record identifies the event (`fingerprint.source`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Source {
    /// The record value. A tombstone (null value) has no fingerprint: `on_missing` applies.
    Value,
    /// The record key. A null key has no fingerprint.
    Key,
    /// Key and value together; always present (nulls are encoded distinctly).
    KeyValue,
    /// Every value of the header with this name, in order. No such header: no fingerprint.
    Header(String),
    /// An RFC 6901 JSON pointer into the value (`""` is the whole document). A value that is
    /// not JSON or lacks the pointed-to member has no fingerprint.
    Json(String),
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
    #[error("\"{0}\" is not a fingerprint source; use value | key | key_value | header:NAME | json:/POINTER")]
    Unknown(String),
}

impl TryFrom<String> for Source {
    type Error = SourceError;
    fn try_from(s: String) -> Result<Self, SourceError> {
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
    /// The value is not JSON (json source).
    #[error("the value is not valid JSON: {0}")]
    NotJson(String),
    /// The JSON pointer does not resolve (json source).
    #[error("the JSON pointer does not resolve")]
    PointerNotFound,
}

impl Unfingerprintable {
    /// Label value for metrics: `absent`, `not_json`, `pointer_not_found`.
    pub fn reason(&self) -> &'static str {
        match self {
            Unfingerprintable::Absent => "absent",
            Unfingerprintable::NotJson(_) => "not_json",
            Unfingerprintable::PointerNotFound => "pointer_not_found",
        }
    }
}

/// The parts of a record a fingerprint may read. Implemented for rdkafka messages and for
/// [`OwnedRecord`] (tests, `inspect lookup`).
pub trait RecordFields {
    /// The key; `None` for a null key.
    fn key(&self) -> Option<&[u8]>;
    /// The value; `None` for a tombstone.
    fn value(&self) -> Option<&[u8]>;
    /// Calls `f` with the value of each header named `name`, in record order.
    fn for_each_header(&self, name: &str, f: &mut dyn FnMut(Option<&[u8]>));
}

impl<M: rdkafka::Message> RecordFields for M {
    fn key(&self) -> Option<&[u8]> {
        rdkafka::Message::key(self)
    }
    fn value(&self) -> Option<&[u8]> {
        rdkafka::Message::payload(self)
    }
    fn for_each_header(&self, name: &str, f: &mut dyn FnMut(Option<&[u8]>)) {
        use rdkafka::message::Headers;
        if let Some(headers) = rdkafka::Message::headers(self) {
            for h in headers.iter() {
                if h.key == name {
                    f(h.value);
                }
            }
        }
    }
}

/// A record held in memory: key, value and headers.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OwnedRecord {
    /// `None` for a null key.
    pub key: Option<Vec<u8>>,
    /// `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers in order; a `None` value is a header without value.
    pub headers: Vec<(String, Option<Vec<u8>>)>,
}

impl RecordFields for OwnedRecord {
    fn key(&self) -> Option<&[u8]> {
        self.key.as_deref()
    }
    fn value(&self) -> Option<&[u8]> {
        self.value.as_deref()
    }
    fn for_each_header(&self, name: &str, f: &mut dyn FnMut(Option<&[u8]>)) {
        for (k, v) in &self.headers {
            if k == name {
                f(v.as_deref());
            }
        }
    }
}

/// Computes fingerprints for one configured source. Cheap to clone; holds the parsed pointer.
#[derive(Debug, Clone)]
pub struct Fingerprinter {
    /// What part of a record it reads.
    source: Source,
    /// Unescaped reference tokens of a JSON pointer (RFC 6901 `~1` -> `/`, `~0` -> `~`).
    pointer: Vec<String>,
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

impl Fingerprinter {
    /// A fingerprinter for `source`.
    pub fn new(source: Source) -> Self {
        let pointer = match &source {
            Source::Json(p) if !p.is_empty() => p[1..]
                .split('/')
                .map(|t| t.replace("~1", "/").replace("~0", "~"))
                .collect(),
            _ => Vec::new(),
        };
        Fingerprinter { source, pointer }
    }

    /// The configured source.
    pub fn source(&self) -> &Source {
        &self.source
    }

    /// The fingerprint of `record`, or why it has none. Allocation-free except for the json source.
    pub fn fingerprint(&self, record: &dyn RecordFields) -> Result<Fingerprint, Unfingerprintable> {
        let mut h = Xxh3Default::new();
        match &self.source {
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
                h.update(&[4]);
                // Two passes: the count comes first in the encoding.
                let mut count = 0u64;
                record.for_each_header(name, &mut |_| count += 1);
                if count == 0 {
                    return Err(Unfingerprintable::Absent);
                }
                h.update(&count.to_le_bytes());
                record.for_each_header(name, &mut |v| field(&mut h, v));
            }
            Source::Json(_) => {
                let v = record.value().ok_or(Unfingerprintable::Absent)?;
                let canonical = self.json_target(v)?;
                h.update(&[5]);
                field(&mut h, Some(canonical.as_bytes()));
            }
        }
        Ok(Fingerprint(h.digest128()))
    }

    fn json_target(&self, value: &[u8]) -> Result<String, Unfingerprintable> {
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
        let mut out = String::new();
        canonical_json(raw, &mut out)?;
        Ok(out)
    }
}

/// Writes `raw` canonically: sorted object keys, no whitespace, strings re-escaped by serde_json,
/// numbers as written.
fn canonical_json(raw: &RawValue, out: &mut String) -> Result<(), Unfingerprintable> {
    let text = raw.get().trim();
    let bad = |e: serde_json::Error| Unfingerprintable::NotJson(e.to_string());
    match text.as_bytes().first() {
        Some(b'{') => {
            let map: BTreeMap<String, &RawValue> = serde_json::from_str(text).map_err(bad)?;
            out.push('{');
            for (i, (k, v)) in map.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&serde_json::to_string(k).map_err(bad)?);
                out.push(':');
                canonical_json(v, out)?;
            }
            out.push('}');
        }
        Some(b'[') => {
            let items: Vec<&RawValue> = serde_json::from_str(text).map_err(bad)?;
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(v, out)?;
            }
            out.push(']');
        }
        Some(b'"') => {
            let s: String = serde_json::from_str(text).map_err(bad)?;
            out.push_str(&serde_json::to_string(&s).map_err(bad)?);
        }
        _ => out.push_str(text),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(key: Option<&str>, value: Option<&str>, headers: &[(&str, Option<&str>)]) -> OwnedRecord {
        OwnedRecord {
            key: key.map(|k| k.as_bytes().to_vec()),
            value: value.map(|v| v.as_bytes().to_vec()),
            headers: headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.map(|v| v.as_bytes().to_vec())))
                .collect(),
        }
    }

    fn fp(source: &str, r: &OwnedRecord) -> Result<Fingerprint, Unfingerprintable> {
        Fingerprinter::new(Source::try_from(source.to_string()).unwrap()).fingerprint(r)
    }

    #[test]
    fn null_differs_from_empty_and_boundaries_matter() {
        let kv = |k, v| fp("key_value", &rec(k, v, &[])).unwrap();
        assert_ne!(kv(Some("k"), None), kv(Some("k"), Some("")));
        assert_ne!(kv(None, Some("v")), kv(Some(""), Some("v")));
        assert_ne!(kv(Some("ab"), Some("c")), kv(Some("a"), Some("bc")));
        assert_eq!(kv(Some("ab"), Some("c")), kv(Some("ab"), Some("c")));
    }

    #[test]
    fn absent_sources_are_reported() {
        assert_eq!(fp("value", &rec(Some("k"), None, &[])), Err(Unfingerprintable::Absent));
        assert_eq!(fp("key", &rec(None, Some("v"), &[])), Err(Unfingerprintable::Absent));
        assert_eq!(
            fp("header:id", &rec(None, Some("v"), &[("other", Some("x"))])),
            Err(Unfingerprintable::Absent)
        );
        assert!(fp("key_value", &rec(None, None, &[])).is_ok());
    }

    #[test]
    fn sources_do_not_collide() {
        let r = rec(Some("x"), Some("x"), &[("h", Some("x"))]);
        let all: Vec<_> = ["value", "key", "key_value", "header:h", "json:"]
            .iter()
            .filter_map(|s| fp(s, &r).ok())
            .collect();
        let mut dedup = all.clone();
        dedup.sort();
        dedup.dedup();
        assert_eq!(all.len(), 4, "json of a non-JSON value has no fingerprint");
        assert_eq!(dedup.len(), all.len());
    }

    #[test]
    fn header_source_uses_every_value_in_order_and_ignores_other_headers() {
        let a = fp("header:id", &rec(None, Some("v"), &[("id", Some("A"))])).unwrap();
        let a_extra = fp(
            "header:id",
            &rec(None, Some("w"), &[("trace", Some("t")), ("id", Some("A"))]),
        )
        .unwrap();
        let b = fp("header:id", &rec(None, Some("v"), &[("id", Some("B"))])).unwrap();
        assert_eq!(a, a_extra);
        assert_ne!(a, b);
        let ab = fp("header:id", &rec(None, None, &[("id", Some("A")), ("id", Some("B"))])).unwrap();
        let ba = fp("header:id", &rec(None, None, &[("id", Some("B")), ("id", Some("A"))])).unwrap();
        assert_ne!(ab, ba);
        assert_ne!(ab, a);
        let null = fp("header:id", &rec(None, None, &[("id", None)])).unwrap();
        let empty = fp("header:id", &rec(None, None, &[("id", Some(""))])).unwrap();
        assert_ne!(null, empty);
    }

    #[test]
    fn json_pointer_is_canonical() {
        let f = |v: &str| fp("json:/event/id", &rec(None, Some(v), &[]));
        let a = f(r#"{"event":{"id":{"x":1,"y":"é"}},"ts":1}"#).unwrap();
        let b = f(r#"{ "ts" : 2, "event" : { "id" : { "y" : "\u00e9", "x" : 1 } } }"#).unwrap();
        assert_eq!(a, b);
        assert_ne!(
            f(r#"{"event":{"id":1}}"#).unwrap(),
            f(r#"{"event":{"id":1.0}}"#).unwrap()
        );
        assert_ne!(
            f(r#"{"event":{"id":12345678901234567890123}}"#).unwrap(),
            f(r#"{"event":{"id":12345678901234567890124}}"#).unwrap()
        );
        assert_eq!(f(r#"{"event":{}}"#), Err(Unfingerprintable::PointerNotFound));
        assert!(matches!(f("not json"), Err(Unfingerprintable::NotJson(_))));
        let arr = fp("json:/a/1", &rec(None, Some(r#"{"a":[10,20]}"#), &[])).unwrap();
        let twenty = fp("json:/a/0", &rec(None, Some(r#"{"a":[20]}"#), &[])).unwrap();
        assert_eq!(arr, twenty);
        let escaped = fp("json:/a~1b/c~0d", &rec(None, Some(r#"{"a/b":{"c~d":7}}"#), &[])).unwrap();
        let plain = fp("json:/x", &rec(None, Some(r#"{"x":7}"#), &[])).unwrap();
        assert_eq!(escaped, plain);
    }

    #[test]
    fn source_parsing() {
        assert!(Source::try_from("json:no-slash".to_string()).is_err());
        assert!(Source::try_from("header:".to_string()).is_err());
        assert!(Source::try_from("json:/a~2".to_string()).is_err());
        assert_eq!(
            Source::try_from("json:".to_string()).unwrap(),
            Source::Json(String::new())
        );
        assert_eq!(
            Source::try_from("header:x".to_string()).unwrap().to_string(),
            "header:x"
        );
        let f: Fingerprint = "000000000000000000000000000000ff".parse().unwrap();
        assert_eq!(f.0, 255);
        assert_eq!(f.to_string(), "000000000000000000000000000000ff");
    }
}

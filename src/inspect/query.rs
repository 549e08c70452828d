//! What a `lookup` asks about: a fingerprint, or a record given on the command line or in the
//! query of `GET /store/lookup`.
//!
//! The record may also be given by the fields of its identity (`--field tenant_id=a --field
//! event_id=e-1`, `?tenant_id=a&event_id=e-1`): they make a JSON document (`{"event_id":"e-1",
//! "tenant_id":"a"}`, each value read as JSON when it is JSON, `7`, `true`, `"7"`, `{...}`, and
//! as a string otherwise), which is the record's value (and, for `avro-key:` and
//! `protobuf-key:` parts, its key) unless the value (or key) is given too. Every field must be
//! the first member of a pointer of the source (`tenant_id` for `json:/tenant_id`): a name
//! that is not cannot match, and is refused.
//!
//! An `avro:` or `protobuf:` part (and a `-key:` one) of a lookup reads a value (or key) that is
//! not in the wire format (does not start with the byte 0) as the record's JSON form: the
//! decoded record as [`crate::fingerprint`] reads it (docs/configuration.md, "Schema Registry
//! sources"), for example `{"event_id":"e-1"}`. Such a lookup needs no registry.

use std::path::Path;

use super::InspectError;
use crate::fingerprint::{Fingerprint, FingerprintParseError, Fingerprinter, OwnedRecord, Source, Unfingerprintable};

/// True when `source` has an `avro-key:` or `protobuf-key:` part (a field document is then the
/// key too).
fn reads_key_document(source: &Source) -> bool {
    match source {
        Source::AvroKey(_) | Source::ProtobufKey(_) => true,
        Source::Composite(parts) => parts.iter().any(reads_key_document),
        Source::Ignoring { source, .. } => reads_key_document(source),
        _ => false,
    }
}

/// A header argument that is not `NAME=VALUE`. The argument is shown as text (bytes that are
/// not UTF-8 as U+FFFD).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// No `=` in it.
    #[error("{0:?}: expected NAME=VALUE")]
    NoValue(String),
    /// Nothing before the `=`.
    #[error("{0:?}: the header name is empty")]
    EmptyName(String),
}

/// A query of `GET /store/lookup` that names no lookup (answered 400 with this message).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum QueryError {
    /// A `header=` that is not `NAME=VALUE`.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// Both a fingerprint and record parts (or fields).
    #[error("give either fingerprint= or the record (value=, key=, header=, fields NAME=VALUE), not both")]
    Both,
    /// A `fingerprint=` that is not 32 hex digits.
    #[error("fingerprint: {0}")]
    Fingerprint(FingerprintParseError),
    /// Nothing given.
    #[error(
        "give fingerprint=HEX, or value=, key=, header=NAME=VALUE, or the identity's fields NAME=VALUE (URL-encoded)"
    )]
    Nothing,
    /// A `%` not followed by two hex digits (the byte offset in the query string).
    #[error("bad URL encoding at byte {0} of the query: '%' must be followed by two hex digits")]
    Encoding(usize),
}

/// A record given to look up that has no fingerprint with the source in use (for example
/// `--key` alone with `source = "value"`), or a field that names no part of it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoFingerprint {
    /// The record has no fingerprint.
    #[error("that record has no fingerprint with source {source_name}: {why}")]
    Record {
        /// The fingerprint source in use (`fingerprint.source` syntax).
        source_name: String,
        /// Why the record has none.
        why: Unfingerprintable,
    },
    /// A field (`--field NAME=VALUE`, `?NAME=VALUE`) that is the first member of no pointer of
    /// the source.
    #[error(
        "{field:?} is not a field of source {source_name} (a lookup field is the first member of one of its \
         pointers{known}); for a whole record give its parts (--value, --key, --header NAME=VALUE; over HTTP \
         value=, key=, header=NAME=VALUE)"
    )]
    UnknownField {
        /// The field's name.
        field: String,
        /// The fingerprint source in use.
        source_name: String,
        /// The fields it has, as `: a, b` (empty when none).
        known: String,
    },
}

/// What to look up: a fingerprint, or a record to fingerprint with the configured source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupInput {
    /// A raw fingerprint.
    Fingerprint(Fingerprint),
    /// Key, value and headers (absent parts are null).
    Record(OwnedRecord),
    /// The fields of a JSON document (name, value as given), and the record parts given beside
    /// them (see the module documentation).
    Fields {
        /// `NAME=VALUE` pairs, in order (a repeated name: the last wins).
        fields: Vec<(String, Vec<u8>)>,
        /// Key, value and headers given beside them.
        record: OwnedRecord,
    },
}

/// The first members of the pointers of `source`'s parts (`None` when a part points at the whole
/// document, so any field may be its member).
fn fields_of(source: &Source) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let parts: Vec<&Source> = match source {
        Source::Composite(parts) => parts.iter().collect(),
        Source::Ignoring { source, .. } => return fields_of(source),
        one => vec![one],
    };
    for part in parts {
        match part {
            Source::Json(p) | Source::Avro(p) | Source::Protobuf(p) | Source::AvroKey(p) | Source::ProtobufKey(p) => {
                let first = p.strip_prefix('/')?.split('/').next().unwrap_or_default();
                out.push(first.replace("~1", "/").replace("~0", "~"));
            }
            _ => {}
        }
    }
    Some(out)
}

/// The JSON document of `fields` (module documentation), keys sorted.
fn document(fields: &[(String, Vec<u8>)]) -> Vec<u8> {
    let members: serde_json::Map<String, serde_json::Value> = fields
        .iter()
        .map(|(name, value)| {
            let v = serde_json::from_slice(value)
                .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(value).into_owned()));
            (name.clone(), v)
        })
        .collect();
    serde_json::Value::Object(members).to_string().into_bytes()
}

impl LookupInput {
    /// The fingerprint to look up, with `f`'s source read as a lookup reads it
    /// ([`Fingerprinter::for_lookup`]: wire-format parts also take the record's JSON form).
    /// Errors: the record has no fingerprint with this source; a field names no part of it.
    pub fn fingerprint(&self, f: &Fingerprinter) -> Result<Fingerprint, NoFingerprint> {
        let f = f.clone().for_lookup();
        let no = |why| NoFingerprint::Record {
            source_name: f.source().to_string(),
            why,
        };
        match self {
            LookupInput::Fingerprint(fp) => Ok(*fp),
            LookupInput::Record(r) => f.fingerprint(r).map_err(no),
            LookupInput::Fields { fields, record } => {
                if let Some(known) = fields_of(f.source()) {
                    if let Some((name, _)) = fields.iter().find(|(name, _)| !known.contains(name)) {
                        return Err(NoFingerprint::UnknownField {
                            field: name.clone(),
                            source_name: f.source().to_string(),
                            known: if known.is_empty() {
                                String::new()
                            } else {
                                format!(": {}", known.join(", "))
                            },
                        });
                    }
                }
                let doc = document(fields);
                let mut r = record.clone();
                if r.value.is_none() {
                    r.value = Some(doc.clone());
                }
                if r.key.is_none() && reads_key_document(f.source()) {
                    r.key = Some(doc);
                }
                f.fingerprint(&r).map_err(no)
            }
        }
    }

    /// From the CLI's arguments (see [`InspectCommand::Lookup`](super::InspectCommand::Lookup)). Errors: nothing given, a bad
    /// fingerprint or header, an unreadable file.
    pub fn from_args(
        fingerprint: Option<&str>,
        value: Option<String>,
        key: Option<String>,
        headers: &[String],
        json_file: Option<&Path>,
        fields: &[String],
    ) -> Result<LookupInput, InspectError> {
        if let Some(hex) = fingerprint {
            return hex
                .parse::<Fingerprint>()
                .map(LookupInput::Fingerprint)
                .map_err(|e| InspectError::Usage(format!("--fingerprint: {e}")));
        }
        if value.is_none() && key.is_none() && headers.is_empty() && json_file.is_none() && fields.is_empty() {
            return Err(InspectError::Usage(
                "give --value, --key, --header NAME=VALUE, --json-file FILE, --field NAME=VALUE or --fingerprint HEX"
                    .into(),
            ));
        }
        let mut r = OwnedRecord {
            key: key.map(String::into_bytes),
            value: value.map(String::into_bytes),
            headers: Vec::new(),
        };
        if let Some(path) = json_file {
            r.value = Some(
                std::fs::read(path).map_err(|e| InspectError::Usage(format!("--json-file {}: {e}", path.display())))?,
            );
        }
        for h in headers {
            r.headers
                .push(parse_header(h.as_bytes()).map_err(|e| InspectError::Usage(format!("--header {e}")))?);
        }
        if fields.is_empty() {
            return Ok(LookupInput::Record(r));
        }
        let fields = fields
            .iter()
            .map(|f| {
                let (name, value) =
                    parse_header(f.as_bytes()).map_err(|e| InspectError::Usage(format!("--field {e}")))?;
                Ok((String::from_utf8_lossy(&name).into_owned(), value.unwrap_or_default()))
            })
            .collect::<Result<_, InspectError>>()?;
        Ok(LookupInput::Fields { fields, record: r })
    }

    /// From the query string of `GET /store/lookup` (what follows `?`, URL-encoded as
    /// `application/x-www-form-urlencoded`: `%XX` is a byte, `+` a space): `fingerprint=HEX`, or
    /// any of `value=`, `key=` and repeated `header=NAME=VALUE`, and any other `NAME=VALUE` as a
    /// field of the identity (module documentation; checked against the source by
    /// [`Self::fingerprint`]). Values, keys, header names and header values are bytes
    /// (`value=%FF` is the one-byte value 0xFF). Errors: bad URL encoding, nothing given, both a
    /// fingerprint and record parts, a bad fingerprint or header.
    pub fn from_query(query: &str) -> Result<LookupInput, QueryError> {
        let mut fingerprint = None;
        let mut r = OwnedRecord::default();
        let mut any_record = false;
        let mut fields = Vec::new();
        let mut at = 0;
        for pair in query.split('&') {
            let start = at;
            at += pair.len() + 1;
            if pair.is_empty() {
                continue;
            }
            let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = String::from_utf8_lossy(&decode(raw_name, start)?).into_owned();
            let value = decode(raw_value, start + raw_name.len() + 1)?;
            match name.as_str() {
                "fingerprint" => fingerprint = Some(String::from_utf8_lossy(&value).into_owned()),
                "value" => {
                    r.value = Some(value);
                    any_record = true;
                }
                "key" => {
                    r.key = Some(value);
                    any_record = true;
                }
                "header" => {
                    r.headers.push(parse_header(&value)?);
                    any_record = true;
                }
                _ => {
                    fields.push((name, value));
                    any_record = true;
                }
            }
        }
        match (fingerprint, any_record) {
            (Some(_), true) => Err(QueryError::Both),
            (None, true) if !fields.is_empty() => Ok(LookupInput::Fields { fields, record: r }),
            (Some(hex), false) => hex
                .parse::<Fingerprint>()
                .map(LookupInput::Fingerprint)
                .map_err(QueryError::Fingerprint),
            (None, true) => Ok(LookupInput::Record(r)),
            (None, false) => Err(QueryError::Nothing),
        }
    }
}

/// Decodes one URL-encoded component to bytes: `%XX` is the byte XX, `+` a space. `offset` is
/// where `s` starts in the query (for the error). Errors: a `%` without two hex digits.
fn decode(s: &str, offset: usize) -> Result<Vec<u8>, QueryError> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match c {
            b'%' => {
                let hex = b.get(i + 1..i + 3).and_then(|h| std::str::from_utf8(h).ok());
                let byte = hex
                    .filter(|h| h.bytes().all(|d| d.is_ascii_hexdigit()))
                    .and_then(|h| u8::from_str_radix(h, 16).ok())
                    .ok_or(QueryError::Encoding(offset + i))?;
                out.push(byte);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

/// A header `NAME=VALUE` (split at the first `=`; the name may be any non-empty bytes) as a
/// record header.
fn parse_header(h: &[u8]) -> Result<(Vec<u8>, Option<Vec<u8>>), HeaderError> {
    let shown = || String::from_utf8_lossy(h).into_owned();
    let eq = h
        .iter()
        .position(|b| *b == b'=')
        .ok_or_else(|| HeaderError::NoValue(shown()))?;
    let (name, v) = (h.get(..eq).unwrap_or_default(), h.get(eq + 1..).unwrap_or_default());
    if name.is_empty() {
        return Err(HeaderError::EmptyName(shown()));
    }
    Ok((name.to_vec(), Some(v.to_vec())))
}

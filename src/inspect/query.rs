//! What a `lookup` asks about: a fingerprint, or a record given on the command line or in the
//! query of `GET /store/lookup`.

use std::path::Path;

use super::InspectError;
use crate::fingerprint::{Fingerprint, FingerprintParseError, Fingerprinter, OwnedRecord, Unfingerprintable};

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
    /// A parameter other than `fingerprint`, `value`, `key`, `header`.
    #[error("unknown parameter {0:?}; use fingerprint=HEX, or value=, key=, header=NAME=VALUE")]
    Unknown(String),
    /// A `header=` that is not `NAME=VALUE`.
    #[error(transparent)]
    Header(#[from] HeaderError),
    /// Both a fingerprint and record parts.
    #[error("give either fingerprint= or the record (value=, key=, header=), not both")]
    Both,
    /// A `fingerprint=` that is not 32 hex digits.
    #[error("fingerprint: {0}")]
    Fingerprint(FingerprintParseError),
    /// Nothing given.
    #[error("give fingerprint=HEX, or value=, key=, header=NAME=VALUE (URL-encoded)")]
    Nothing,
    /// A `%` not followed by two hex digits (the byte offset in the query string).
    #[error("bad URL encoding at byte {0} of the query: '%' must be followed by two hex digits")]
    Encoding(usize),
}

/// A record given to look up that has no fingerprint with the source in use (for example
/// `--key` alone with `source = "value"`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("that record has no fingerprint with source {source_name}: {why}")]
pub struct NoFingerprint {
    /// The fingerprint source in use (`fingerprint.source` syntax).
    pub source_name: String,
    /// Why the record has none.
    pub why: Unfingerprintable,
}

/// What to look up: a fingerprint, or a record to fingerprint with the configured source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupInput {
    /// A raw fingerprint.
    Fingerprint(Fingerprint),
    /// Key, value and headers (absent parts are null).
    Record(OwnedRecord),
}

impl LookupInput {
    /// The fingerprint to look up. Errors: the record has no fingerprint with this source.
    pub fn fingerprint(&self, f: &Fingerprinter) -> Result<Fingerprint, NoFingerprint> {
        match self {
            LookupInput::Fingerprint(fp) => Ok(*fp),
            LookupInput::Record(r) => f.fingerprint(r).map_err(|why| NoFingerprint {
                source_name: f.source().to_string(),
                why,
            }),
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
    ) -> Result<LookupInput, InspectError> {
        if let Some(hex) = fingerprint {
            return hex
                .parse::<Fingerprint>()
                .map(LookupInput::Fingerprint)
                .map_err(|e| InspectError::Usage(format!("--fingerprint: {e}")));
        }
        if value.is_none() && key.is_none() && headers.is_empty() && json_file.is_none() {
            return Err(InspectError::Usage(
                "give --value, --key, --header NAME=VALUE, --json-file FILE or --fingerprint HEX".into(),
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
        Ok(LookupInput::Record(r))
    }

    /// From the query string of `GET /store/lookup` (what follows `?`, URL-encoded as
    /// `application/x-www-form-urlencoded`: `%XX` is a byte, `+` a space): `fingerprint=HEX`, or
    /// any of `value=`, `key=` and repeated `header=NAME=VALUE`. Values, keys, header names and
    /// header values are bytes (`value=%FF` is the one-byte value 0xFF). Errors: bad URL encoding,
    /// unknown parameters, nothing given, both a fingerprint and record parts, a bad fingerprint
    /// or header.
    pub fn from_query(query: &str) -> Result<LookupInput, QueryError> {
        let mut fingerprint = None;
        let mut r = OwnedRecord::default();
        let mut any_record = false;
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
                _ => return Err(QueryError::Unknown(name)),
            }
        }
        match (fingerprint, any_record) {
            (Some(_), true) => Err(QueryError::Both),
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

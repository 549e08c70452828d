//! What a `lookup` asks about: a fingerprint, or a record given on the command line or in the
//! query of `GET /store/lookup`.

use std::path::Path;

use super::InspectError;
use crate::fingerprint::{Fingerprint, FingerprintParseError, Fingerprinter, OwnedRecord, Unfingerprintable};

/// A header argument that is not `NAME=VALUE`.
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
                .push(parse_header(h).map_err(|e| InspectError::Usage(format!("--header {e}")))?);
        }
        Ok(LookupInput::Record(r))
    }

    /// From the query of `GET /store/lookup`: `fingerprint=HEX`, or any of `value=`, `key=` and
    /// repeated `header=NAME=VALUE`. Errors: unknown parameters, nothing given, both a fingerprint
    /// and record parts, a bad fingerprint or header.
    pub fn from_query(pairs: Vec<(String, String)>) -> Result<LookupInput, QueryError> {
        let mut fingerprint = None;
        let mut r = OwnedRecord::default();
        let mut any_record = false;
        for (k, v) in pairs {
            match k.as_str() {
                "fingerprint" => fingerprint = Some(v),
                "value" => {
                    r.value = Some(v.into_bytes());
                    any_record = true;
                }
                "key" => {
                    r.key = Some(v.into_bytes());
                    any_record = true;
                }
                "header" => {
                    r.headers.push(parse_header(&v)?);
                    any_record = true;
                }
                _ => return Err(QueryError::Unknown(k)),
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

/// A header `NAME=VALUE` as a record header.
fn parse_header(h: &str) -> Result<(String, Option<Vec<u8>>), HeaderError> {
    let (name, v) = h.split_once('=').ok_or_else(|| HeaderError::NoValue(h.to_string()))?;
    if name.is_empty() {
        return Err(HeaderError::EmptyName(h.to_string()));
    }
    Ok((name.to_string(), Some(v.as_bytes().to_vec())))
}

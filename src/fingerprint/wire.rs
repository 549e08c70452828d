//! The sources that read the Schema Registry wire format besides `avro:` (which lives in the
//! parent module): `protobuf:/POINTER`, and the key forms `avro-key:/POINTER` and
//! `protobuf-key:/POINTER`. Their text forms, and how a record's target is found and encoded.

use super::source::invalid_escape;
use super::{Fingerprinter, RecordFields, Source, SourceError, Unfingerprintable};

/// A wire-format variant of [`Source`] from its pointer.
type MakeSource = fn(String) -> Source;

/// The text forms of the wire-format sources, each followed by an RFC 6901 pointer (`""` or
/// starting with `/`), and the variant each makes.
const FORMS: [(&str, MakeSource); 4] = [
    ("avro:", Source::Avro),
    ("avro-key:", Source::AvroKey),
    ("protobuf:", Source::Protobuf),
    ("protobuf-key:", Source::ProtobufKey),
];

/// `text` as a wire-format source, `None` when it has none of their prefixes. Errors: a pointer
/// that does not start with `/`, or has an invalid `~` escape.
pub(super) fn parse(text: &str) -> Option<Result<Source, SourceError>> {
    let (ptr, make) = FORMS
        .iter()
        .find_map(|(prefix, make)| text.strip_prefix(prefix).map(|ptr| (ptr, make)))?;
    if !ptr.is_empty() && !ptr.starts_with('/') {
        return Some(Err(SourceError::NotAPointer(text.to_string())));
    }
    if let Some(bad) = invalid_escape(ptr) {
        return Some(Err(SourceError::BadEscape(text.to_string(), bad)));
    }
    Some(Ok(make(ptr.to_string())))
}

/// The value the unescaped pointer `tokens` designates in `json` (RFC 6901: an array index is `0`
/// or digits without a leading zero), or [`Unfingerprintable::PointerNotFound`].
fn resolve(mut json: serde_json::Value, tokens: &[String]) -> Result<serde_json::Value, Unfingerprintable> {
    for token in tokens {
        json = match json {
            serde_json::Value::Object(mut members) => members
                .remove(token.as_str())
                .ok_or(Unfingerprintable::PointerNotFound)?,
            serde_json::Value::Array(mut items) => {
                if token.is_empty()
                    || (token.len() > 1 && token.starts_with('0'))
                    || !token.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(Unfingerprintable::PointerNotFound);
                }
                let index: usize = token.parse().map_err(|_| Unfingerprintable::PointerNotFound)?;
                if index >= items.len() {
                    return Err(Unfingerprintable::PointerNotFound);
                }
                items.swap_remove(index)
            }
            _ => return Err(Unfingerprintable::PointerNotFound),
        };
    }
    Ok(json)
}

impl Fingerprinter {
    /// As `self`, for a lookup (`inspect lookup`, `/store/lookup`): a wire-format part (`avro:`,
    /// `protobuf:`, their `-key:` forms) given bytes that are not in the wire format (do not
    /// start with the magic byte 0) reads them as the JSON form of the decoded record
    /// ([`super::avro`], [`super::protobuf`]), pointer and canonical encoding as for `json:`, so
    /// that a user can name an event by its fields. Records in the pipeline never are.
    pub fn for_lookup(mut self) -> Self {
        for part in &mut self.parts {
            part.lookup = true;
        }
        self.lookup = true;
        self
    }

    /// The canonical target of an `avro:` part in `bytes` (the JSON form in a lookup).
    pub(super) fn avro_or_lookup(&self, bytes: &[u8]) -> Result<Vec<u8>, Unfingerprintable> {
        if self.lookup && bytes.first() != Some(&0) {
            return self.json_target(bytes);
        }
        self.avro_target(bytes)
    }

    /// The tag and canonical encoding of `record`'s target under a `protobuf:`, `avro-key:` or
    /// `protobuf-key:` source (the caller hashes them). A `null` target is
    /// [`Unfingerprintable::NullId`], `""` [`Unfingerprintable::EmptyId`]; a null value or key
    /// [`Unfingerprintable::Absent`].
    pub(super) fn wire_target(&self, record: &dyn RecordFields) -> Result<(u8, Vec<u8>), Unfingerprintable> {
        let (tag, canonical) = match &self.reads {
            Source::Protobuf(_) => (
                8,
                self.protobuf_target(record.value().ok_or(Unfingerprintable::Absent)?)?,
            ),
            Source::AvroKey(_) => (9, self.avro_or_lookup(record.key().ok_or(Unfingerprintable::Absent)?)?),
            Source::ProtobufKey(_) => (
                10,
                self.protobuf_target(record.key().ok_or(Unfingerprintable::Absent)?)?,
            ),
            other => unreachable!("wire_target is called for the wire-format sources only, not {other}"),
        };
        match canonical.as_slice() {
            b"null" => Err(Unfingerprintable::NullId),
            b"\"\"" => Err(Unfingerprintable::EmptyId),
            _ => Ok((tag, canonical)),
        }
    }

    /// The canonical encoding of the value the pointer designates in the Protobuf record
    /// `bytes` (Schema Registry wire format), read as JSON ([`super::protobuf`]).
    pub(super) fn protobuf_target(&self, bytes: &[u8]) -> Result<Vec<u8>, Unfingerprintable> {
        use crate::schema_registry::{split_wire_format, SchemaError};
        if self.lookup && bytes.first() != Some(&0) {
            return self.json_target(bytes);
        }
        let (id, body) = split_wire_format(bytes).ok_or(Unfingerprintable::NoMagicByte)?;
        let registry = self.registry.as_ref().ok_or_else(|| {
            Unfingerprintable::RegistryUnavailable("no schema registry client (fingerprint.schema_registry)".into())
        })?;
        let schema = registry.protobuf_schema(id).map_err(|e| match e {
            SchemaError::NotFound(id) => Unfingerprintable::UnknownSchemaId(id),
            SchemaError::NotAvro(..) | SchemaError::NotProtobuf(..) => Unfingerprintable::NotProtobuf(e.to_string()),
            SchemaError::Unavailable(_) => Unfingerprintable::RegistryUnavailable(e.to_string()),
        })?;
        let json = super::protobuf::to_json(&schema, id, body)?;
        super::canonical_json(&resolve(json, &self.pointer)?.to_string())
    }
}

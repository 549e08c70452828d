//! The `protobuf:/POINTER` source: a value (or, `protobuf-key:`, a key) in the Schema Registry
//! wire format for Protobuf, decoded with its writer schema and turned into JSON, in which the
//! pointer is resolved and the target encoded canonically as for `json:`
//! ([`super::canonical_json`]).
//!
//! The wire format: magic byte `0`, the schema id (4 bytes, big endian), the *message indexes*
//! (which message of the schema's file the payload is: a count, then that many indexes, each a
//! zig-zag varint, the first into the file's top-level messages, each next one into the nested
//! messages of the one before; the count `0` alone means `[0]`, the file's first message), then
//! the message's Protobuf encoding. The schema text is the registry's: `.proto` source (parsed by
//! `protox`, imports of the well-known `google/protobuf/*.proto` files resolved) or a base64
//! `FileDescriptorProto` (what Confluent's clients register); the payload is decoded by
//! `prost-reflect`.
//!
//! The JSON form depends on the decoded *values*, never on field numbers or the order of
//! declarations, so a field keeps its fingerprint across schema versions that keep its name and
//! type (fields added, removed, renumbered or reordered around it, enum values added):
//!
//! | Protobuf value | JSON |
//! |---|---|
//! | `bool`, `string` | the same |
//! | every integer type (`int32`, `int64`, `uint64`, `sint*`, `fixed*`, `sfixed*`) | an integer (`int32` 7 and `int64` 7 are one value, as Avro's `int` and `long`) |
//! | `float`, `double` | a number, shortest form that reads back; NaN and infinities as the strings `"NaN"`, `"Infinity"`, `"-Infinity"` (as Avro) |
//! | `bytes` | a string of one character per byte, U+0000 to U+00FF (as Avro's `bytes`) |
//! | enum | its value's name; a number the schema does not name, the number |
//! | message | an object keyed by field *name*: every field without presence (proto3 singular scalars, repeated, map) with its value, the default when unset (so a proto3 `string` left unset is `""`: `empty_id`); a field with presence (a message, a `oneof` member, `optional`, proto2) only when set (unset: `pointer_not_found`) |
//! | repeated, map | array, object (keys as text, sorted by the canonical form) |
//!
//! Unknown fields (written by a newer schema than the one the id names) are not part of it.

use std::sync::Arc;

use prost_reflect::{DescriptorPool, DynamicMessage, Kind, MapKey, MessageDescriptor, ReflectMessage, Value};
use serde_json::{Map, Number, Value as Json};

use super::{Unfingerprintable, MAX_JSON_DEPTH};

/// A parsed Protobuf writer schema: the registry's schema file and what it imports.
#[derive(Debug)]
pub struct ProtoSchema {
    /// The pool holding the file and its imports.
    pool: DescriptorPool,
    /// The file's name in `pool`.
    file: String,
}

/// The single file of a registry schema, then the well-known imports.
struct OneFile {
    /// The name it is opened under.
    name: String,
    /// The parsed file.
    file: protox::file::File,
}

impl protox::file::FileResolver for OneFile {
    fn open_file(&self, name: &str) -> Result<protox::file::File, protox::Error> {
        if name == self.name {
            Ok(self.file.clone())
        } else {
            Err(protox::Error::file_not_found(name))
        }
    }
}

impl ProtoSchema {
    /// Parses the registry's schema text: `.proto` source, or a base64 `FileDescriptorProto`
    /// (Confluent's serialized form). Errors: the reason, for
    /// [`crate::schema_registry::SchemaError::NotProtobuf`] (an import other than the well-known
    /// `google/protobuf/*` files among them: references are not fetched).
    pub fn parse(text: &str) -> Result<ProtoSchema, String> {
        use base64::Engine;
        let trimmed = text.trim();
        let base64_form = !trimmed.is_empty()
            && trimmed
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'+' | b'/' | b'='));
        let (name, file) = if base64_form {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(trimmed)
                .map_err(|e| format!("not base64: {e}"))?;
            let file = protox::file::File::decode_file_descriptor_proto(bytes.as_slice())
                .map_err(|e| format!("not a FileDescriptorProto: {e}"))?;
            let name = match file.name() {
                "" => "schema.proto".to_string(),
                n => n.to_string(),
            };
            (name, file)
        } else {
            let name = "schema.proto".to_string();
            let file = protox::file::File::from_source(&name, text).map_err(|e| e.to_string())?;
            (name, file)
        };
        let mut resolver = protox::file::ChainFileResolver::new();
        resolver.add(OneFile {
            name: name.clone(),
            file,
        });
        resolver.add(protox::file::GoogleFileResolver::new());
        let mut compiler = protox::Compiler::with_file_resolver(resolver);
        compiler.open_file(&name).map_err(|e| e.to_string())?;
        let pool = compiler.descriptor_pool();
        let file = pool
            .get_file_by_name(&name)
            .map(|f| f.name().to_string())
            .ok_or_else(|| format!("{name} is not in the compiled pool"))?;
        Ok(ProtoSchema { pool, file })
    }

    /// The message named `full_name` (e.g. `t.Event`), in the file or its imports.
    #[cfg(test)]
    pub(super) fn descriptor(&self, full_name: &str) -> Option<MessageDescriptor> {
        self.pool.get_message_by_name(full_name)
    }

    /// The message the indexes name: the file's top-level message `indexes[0]`, then nested
    /// message `indexes[1]` of it, and so on. `None` when one is out of range.
    fn message(&self, indexes: &[usize]) -> Option<MessageDescriptor> {
        let file = self.pool.get_file_by_name(&self.file)?;
        let (first, rest) = indexes.split_first()?;
        let mut message = file.messages().nth(*first)?;
        for i in rest {
            let child = message.child_messages().nth(*i)?;
            message = child;
        }
        Some(message)
    }
}

/// Reads one unsigned varint (at most 10 bytes) from the front of `bytes`.
fn varint(bytes: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for i in 0..10 {
        let (&b, rest) = bytes.split_first()?;
        *bytes = rest;
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Some(value);
        }
    }
    None
}

/// Reads one zig-zag varint as a non-negative index (a negative one is `None`).
fn index(bytes: &mut &[u8]) -> Option<usize> {
    let n = varint(bytes)?;
    let signed = ((n >> 1) as i64) ^ -((n & 1) as i64);
    usize::try_from(signed).ok()
}

/// The most message indexes read (a path into nested messages deeper than this names none a
/// schema holds in practice; the bound keeps a corrupt count from allocating).
const MAX_INDEXES: usize = 64;

/// The JSON form (module documentation) of the message `body` holds: the message indexes, then
/// the payload, as they follow the magic byte and schema id. Errors: [`Unfingerprintable::NotProtobuf`]
/// (indexes that do not read or name no message, a payload that does not decode, nesting deeper
/// than [`MAX_JSON_DEPTH`]), the message naming the schema id `id`.
pub(super) fn to_json(schema: &Arc<ProtoSchema>, id: u32, body: &[u8]) -> Result<Json, Unfingerprintable> {
    let bad = |why: String| Unfingerprintable::NotProtobuf(format!("with schema id {id}: {why}"));
    let mut rest = body;
    let count = index(&mut rest).ok_or_else(|| bad("the message indexes do not read".into()))?;
    if count > MAX_INDEXES {
        return Err(bad(format!("{count} message indexes")));
    }
    let indexes = if count == 0 {
        vec![0]
    } else {
        (0..count)
            .map(|_| index(&mut rest))
            .collect::<Option<Vec<usize>>>()
            .ok_or_else(|| bad("the message indexes do not read".into()))?
    };
    let descriptor = schema
        .message(&indexes)
        .ok_or_else(|| bad(format!("the message indexes {indexes:?} name no message of the schema")))?;
    let name = descriptor.full_name().to_string();
    let message = DynamicMessage::decode(descriptor, rest).map_err(|e| bad(format!("as {name}: {e}")))?;
    message_json(&message, 0).map_err(|e| match e {
        Unfingerprintable::NotProtobuf(why) => bad(why),
        other => other,
    })
}

/// The next depth below `depth`, or the error past [`MAX_JSON_DEPTH`].
fn nested(depth: usize) -> Result<usize, Unfingerprintable> {
    if depth >= MAX_JSON_DEPTH {
        Err(Unfingerprintable::NotProtobuf(format!(
            "nested deeper than {MAX_JSON_DEPTH} levels"
        )))
    } else {
        Ok(depth + 1)
    }
}

/// A message as an object (module documentation).
fn message_json(message: &DynamicMessage, depth: usize) -> Result<Json, Unfingerprintable> {
    let depth = nested(depth)?;
    let mut out = Map::new();
    for field in message.descriptor().fields() {
        if field.supports_presence() && !message.has_field(&field) {
            continue;
        }
        let value = message.get_field(&field);
        let json = if field.is_map() {
            let entry = field.kind();
            let value_kind = entry
                .as_message()
                .map(|m| m.map_entry_value_field().kind())
                .ok_or_else(|| Unfingerprintable::NotProtobuf(format!("map field {} has no entry", field.name())))?;
            let depth = nested(depth)?;
            let mut members = Map::new();
            if let Value::Map(map) = value.as_ref() {
                for (k, v) in map {
                    members.insert(map_key(k), value_json(v, &value_kind, depth)?);
                }
            }
            Json::Object(members)
        } else {
            value_json(value.as_ref(), &field.kind(), depth)?
        };
        out.insert(field.name().to_string(), json);
    }
    Ok(Json::Object(out))
}

/// A map key as text.
fn map_key(k: &MapKey) -> String {
    match k {
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(i) => i.to_string(),
        MapKey::I64(i) => i.to_string(),
        MapKey::U32(i) => i.to_string(),
        MapKey::U64(i) => i.to_string(),
        MapKey::String(s) => s.clone(),
    }
}

/// One value of kind `kind` (a list's items are of the field's kind).
fn value_json(value: &Value, kind: &Kind, depth: usize) -> Result<Json, Unfingerprintable> {
    Ok(match value {
        Value::Bool(b) => Json::Bool(*b),
        Value::I32(i) => Json::from(*i),
        Value::I64(i) => Json::from(*i),
        Value::U32(i) => Json::from(*i),
        Value::U64(i) => Json::from(*i),
        // The f32's own shortest text (1.1, not 1.100000023841858), read as an f64 (as Avro).
        Value::F32(f) => float(f.to_string().parse().unwrap_or(f64::from(*f))),
        Value::F64(f) => float(*f),
        Value::String(s) => Json::String(s.clone()),
        Value::Bytes(b) => Json::String(b.iter().map(|b| char::from(*b)).collect()),
        Value::EnumNumber(n) => match kind.as_enum().and_then(|e| e.get_value(*n)) {
            Some(v) => Json::String(v.name().to_string()),
            None => Json::from(*n),
        },
        Value::Message(m) => message_json(m, depth)?,
        Value::List(items) => {
            let depth = nested(depth)?;
            Json::Array(
                items
                    .iter()
                    .map(|v| value_json(v, kind, depth))
                    .collect::<Result<_, _>>()?,
            )
        }
        // Maps are handled by their field (`message_json`), which knows the value kind.
        Value::Map(_) => return Err(Unfingerprintable::NotProtobuf("a map outside a map field".into())),
    })
}

/// A finite number as a JSON number; NaN and the infinities as strings (as [`super::avro`]).
fn float(f: f64) -> Json {
    match Number::from_f64(f) {
        Some(n) => Json::Number(n),
        None if f.is_nan() => Json::String("NaN".into()),
        None if f > 0.0 => Json::String("Infinity".into()),
        None => Json::String("-Infinity".into()),
    }
}

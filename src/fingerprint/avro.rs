//! The `avro:/POINTER` source: a record value in the Schema Registry wire format, decoded with its
//! writer schema ([`crate::schema_registry`]) and turned into JSON, in which the pointer is
//! resolved and the target encoded canonically as for `json:` ([`super::canonical_json`]).
//!
//! The JSON form depends on the decoded *values*, never on the schema's layout, so a field keeps
//! its fingerprint across schema versions that keep its type (fields added, removed or
//! reordered around it, a union's branches reordered, an enum's symbols added):
//!
//! | Avro value | JSON |
//! |---|---|
//! | `null`, `boolean`, `string` | the same |
//! | `int`, `long` (and `date`, `time-*`, `timestamp-*`, `local-timestamp-*`: their number) | an integer (`int` 7 and `long` 7 are one value, so the `int` -> `long` promotion keeps fingerprints) |
//! | `float`, `double` | a number, shortest form that reads back (`1.5`); NaN and infinities as the strings `"NaN"`, `"Infinity"`, `"-Infinity"` |
//! | `bytes`, `fixed`, `decimal` (its two's-complement bytes), `duration` (its 12 bytes) | a string of one character per byte, U+0000 to U+00FF (the Avro specification's JSON encoding) |
//! | `big-decimal` | its decimal text, as a string |
//! | `uuid` | its hyphenated lowercase text |
//! | enum | its symbol (not its index, which a new version may move) |
//! | union | the branch's value (not the branch's index) |
//! | array, map, record | array, object, object (keys sorted by the canonical form) |

use apache_avro::types::Value;
use serde_json::{Map, Number, Value as Json};

use super::{Unfingerprintable, MAX_JSON_DEPTH};

/// The JSON form of a decoded Avro value (see the module documentation). Nesting deeper than
/// [`MAX_JSON_DEPTH`] arrays, maps and records is [`Unfingerprintable::NotAvro`] (a recursive
/// schema can nest as deep as the record says).
pub(super) fn to_json(value: Value, depth: usize) -> Result<Json, Unfingerprintable> {
    let nested = |depth: usize| {
        if depth >= MAX_JSON_DEPTH {
            Err(Unfingerprintable::NotAvro(format!(
                "nested deeper than {MAX_JSON_DEPTH} levels"
            )))
        } else {
            Ok(depth + 1)
        }
    };
    Ok(match value {
        Value::Null => Json::Null,
        Value::Boolean(b) => Json::Bool(b),
        Value::Int(i) | Value::Date(i) | Value::TimeMillis(i) => Json::from(i),
        Value::Long(i)
        | Value::TimeMicros(i)
        | Value::TimestampMillis(i)
        | Value::TimestampMicros(i)
        | Value::TimestampNanos(i)
        | Value::LocalTimestampMillis(i)
        | Value::LocalTimestampMicros(i)
        | Value::LocalTimestampNanos(i) => Json::from(i),
        // The f32's own shortest text (1.1, not 1.100000023841858), read as an f64.
        Value::Float(f) => float(f.to_string().parse().unwrap_or(f64::from(f))),
        Value::Double(f) => float(f),
        Value::Bytes(b) | Value::Fixed(_, b) => latin1(&b),
        Value::Decimal(d) => {
            latin1(&<Vec<u8>>::try_from(&d).map_err(|e| Unfingerprintable::NotAvro(format!("decimal: {e}")))?)
        }
        Value::Duration(d) => latin1(&<[u8; 12]>::from(d)),
        Value::BigDecimal(d) => Json::String(d.to_string()),
        Value::Uuid(u) => Json::String(u.hyphenated().to_string()),
        Value::String(s) | Value::Enum(_, s) => Json::String(s),
        Value::Union(_, v) => to_json(*v, depth)?,
        Value::Array(items) => {
            let depth = nested(depth)?;
            Json::Array(items.into_iter().map(|v| to_json(v, depth)).collect::<Result<_, _>>()?)
        }
        Value::Map(members) => {
            let depth = nested(depth)?;
            let mut out = Map::new();
            for (k, v) in members {
                out.insert(k, to_json(v, depth)?);
            }
            Json::Object(out)
        }
        Value::Record(fields) => {
            let depth = nested(depth)?;
            let mut out = Map::new();
            for (k, v) in fields {
                out.insert(k, to_json(v, depth)?);
            }
            Json::Object(out)
        }
    })
}

/// A finite number as a JSON number (serde_json writes the shortest text that reads back); NaN
/// and the infinities, which JSON has no number for, as strings.
fn float(f: f64) -> Json {
    match Number::from_f64(f) {
        Some(n) => Json::Number(n),
        None if f.is_nan() => Json::String("NaN".into()),
        None if f > 0.0 => Json::String("Infinity".into()),
        None => Json::String("-Infinity".into()),
    }
}

/// Bytes as a string of one character per byte (U+0000 to U+00FF).
fn latin1(bytes: &[u8]) -> Json {
    Json::String(bytes.iter().map(|b| char::from(*b)).collect())
}

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
//! | union of `null` and one other type (an optional field) | the branch's value (not the branch's index), so making a field optional keeps its fingerprints |
//! | union of two or more types besides `null` | `{"TYPE": value}`, TYPE the branch's full name (records, enums, fixed) or `long` (int, long and their logical types), `double` (float, double), `bytes` (bytes, decimals), `string` (string, uuid), `boolean`, `array`, `map` (the Avro specification's JSON encoding of a union, with the promotions folded): `OrderCreated{id: 42}` and `OrderCancelled{id: 42}` are two values; `null` stays `null` |
//! | array, map, record | array, object, object (keys sorted by the canonical form) |

use apache_avro::schema::{Name, NamesRef, ResolvedSchema, Schema};
use apache_avro::types::Value;
use serde_json::{Map, Number, Value as Json};

use super::{Unfingerprintable, MAX_JSON_DEPTH};

/// The JSON form (see the module documentation) of the value `pointer` (unescaped reference tokens) designates in `value`,
/// decoded with the writer schema `schema`. The pointer goes through a union to its branch's
/// value (`/event/id` reaches `id` whichever record type `event` holds); tokens name record
/// fields and map keys, or are array indices (digits, no leading zero). Errors:
/// [`Unfingerprintable::PointerNotFound`], or [`Unfingerprintable::NotAvro`] for a target nested
/// too deep.
pub(super) fn target(value: Value, schema: &Schema, pointer: &[String]) -> Result<Json, Unfingerprintable> {
    let mut walk = Walk {
        root: schema,
        names: None,
    };
    let (mut value, mut at) = (value, Some(schema));
    for token in pointer {
        (value, at) = walk
            .descend(value, at, token)
            .ok_or(Unfingerprintable::PointerNotFound)?;
    }
    walk.json(value, at, 0)
}

/// The writer schema beside the value being turned into JSON: only a union's branch needs it
/// (its type's name), the rest of the form depends on the value alone.
struct Walk<'s> {
    /// The writer schema.
    root: &'s Schema,
    /// Its named types, resolved on the first reference met (most schemas have none).
    names: Option<NamesRef<'s>>,
}

impl<'s> Walk<'s> {
    /// `schema` with a reference to a named type replaced by the type (`None`: not found, then
    /// the value's form is its own, without a union's type name).
    fn resolve(&mut self, schema: &'s Schema) -> Option<&'s Schema> {
        let Schema::Ref { name } = schema else {
            return Some(schema);
        };
        if self.names.is_none() {
            self.names = Some(
                ResolvedSchema::new(self.root)
                    .map(|r| r.get_names().clone())
                    .unwrap_or_default(),
            );
        }
        self.names
            .as_ref()
            .and_then(|n: &NamesRef<'s>| n.get::<Name>(name).copied())
    }

    /// The member `token` of `value` (whose schema is `schema` when known) and its schema;
    /// through a union to its branch first.
    fn descend(
        &mut self,
        value: Value,
        schema: Option<&'s Schema>,
        token: &str,
    ) -> Option<(Value, Option<&'s Schema>)> {
        let mut schema = schema.and_then(|s| self.resolve(s));
        let mut value = value;
        while let Value::Union(i, v) = value {
            schema = match schema {
                Some(Schema::Union(u)) => u.variants().get(i as usize).and_then(|b| self.resolve(b)),
                _ => None,
            };
            value = *v;
        }
        match value {
            Value::Record(fields) => {
                let field = match schema {
                    Some(Schema::Record(r)) => r.fields.iter().find(|f| f.name == token).map(|f| &f.schema),
                    _ => None,
                };
                let v = fields.into_iter().find(|(k, _)| k == token)?.1;
                Some((v, field))
            }
            Value::Map(mut members) => {
                let types = match schema {
                    Some(Schema::Map(m)) => Some(&*m.types),
                    _ => None,
                };
                Some((members.remove(token)?, types))
            }
            Value::Array(mut items) => {
                if token.is_empty()
                    || (token.len() > 1 && token.starts_with('0'))
                    || !token.bytes().all(|b| b.is_ascii_digit())
                {
                    return None;
                }
                let index: usize = token.parse().ok()?;
                if index >= items.len() {
                    return None;
                }
                let items_schema = match schema {
                    Some(Schema::Array(a)) => Some(&*a.items),
                    _ => None,
                };
                Some((items.swap_remove(index), items_schema))
            }
            _ => None,
        }
    }

    /// The JSON form of `value`, whose schema is `schema` when known.
    fn json(&mut self, value: Value, schema: Option<&'s Schema>, depth: usize) -> Result<Json, Unfingerprintable> {
        let schema = schema.and_then(|s| self.resolve(s));
        match (value, schema) {
            (Value::Union(i, v), Some(Schema::Union(u))) => {
                let branch = u.variants().get(i as usize);
                let others = u.variants().iter().filter(|s| !matches!(s, Schema::Null)).count();
                let branch = branch.and_then(|b| self.resolve(b));
                let tag = branch.filter(|_| others > 1).and_then(union_tag);
                let inner = self.json(*v, branch, depth)?;
                Ok(match tag {
                    Some(tag) if !inner.is_null() => Json::Object(Map::from_iter([(tag, inner)])),
                    _ => inner,
                })
            }
            (Value::Array(items), Some(Schema::Array(a))) => {
                let depth = nested(depth)?;
                let items = items.into_iter().map(|v| self.json(v, Some(&a.items), depth));
                Ok(Json::Array(items.collect::<Result<_, _>>()?))
            }
            (Value::Map(members), Some(Schema::Map(m))) => {
                let depth = nested(depth)?;
                let mut out = Map::new();
                for (k, v) in members {
                    out.insert(k, self.json(v, Some(&m.types), depth)?);
                }
                Ok(Json::Object(out))
            }
            (Value::Record(fields), Some(Schema::Record(r))) => {
                let depth = nested(depth)?;
                let mut out = Map::new();
                for (i, (k, v)) in fields.into_iter().enumerate() {
                    let field = r
                        .fields
                        .get(i)
                        .filter(|f| f.name == k)
                        .or_else(|| r.fields.iter().find(|f| f.name == k));
                    let value = self.json(v, field.map(|f| &f.schema), depth)?;
                    out.insert(k, value);
                }
                Ok(Json::Object(out))
            }
            (value, _) => plain(value, depth, &mut |v, depth| self.json(v, None, depth)),
        }
    }
}

/// The name a union's branch of type `schema` is tagged with (see the module documentation).
fn union_tag(schema: &Schema) -> Option<String> {
    Some(match schema {
        Schema::Null => return None,
        Schema::Boolean => "boolean".into(),
        Schema::Int
        | Schema::Long
        | Schema::Date
        | Schema::TimeMillis
        | Schema::TimeMicros
        | Schema::TimestampMillis
        | Schema::TimestampMicros
        | Schema::TimestampNanos
        | Schema::LocalTimestampMillis
        | Schema::LocalTimestampMicros
        | Schema::LocalTimestampNanos => "long".into(),
        Schema::Float | Schema::Double => "double".into(),
        Schema::Bytes | Schema::Decimal(_) | Schema::BigDecimal => "bytes".into(),
        Schema::String | Schema::Uuid(_) => "string".into(),
        Schema::Array(_) => "array".into(),
        Schema::Map(_) => "map".into(),
        Schema::Union(_) => "union".into(),
        Schema::Record(r) => r.name.fullname(None),
        Schema::Enum(e) => e.name.fullname(None),
        Schema::Fixed(f) | Schema::Duration(f) => f.name.fullname(None),
        Schema::Ref { name } => name.fullname(None),
    })
}

/// One more level of nesting, or [`Unfingerprintable::NotAvro`] past [`MAX_JSON_DEPTH`].
fn nested(depth: usize) -> Result<usize, Unfingerprintable> {
    if depth >= MAX_JSON_DEPTH {
        Err(Unfingerprintable::NotAvro(format!(
            "nested deeper than {MAX_JSON_DEPTH} levels"
        )))
    } else {
        Ok(depth + 1)
    }
}

/// The JSON form of a value without its schema (`inner` for the values it holds).
fn plain(
    value: Value,
    depth: usize,
    inner: &mut dyn FnMut(Value, usize) -> Result<Json, Unfingerprintable>,
) -> Result<Json, Unfingerprintable> {
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
        Value::Union(_, v) => inner(*v, depth)?,
        Value::Array(items) => {
            let depth = nested(depth)?;
            Json::Array(items.into_iter().map(|v| inner(v, depth)).collect::<Result<_, _>>()?)
        }
        Value::Map(members) => {
            let depth = nested(depth)?;
            let mut out = Map::new();
            for (k, v) in members {
                out.insert(k, inner(v, depth)?);
            }
            Json::Object(out)
        }
        Value::Record(fields) => {
            let depth = nested(depth)?;
            let mut out = Map::new();
            for (k, v) in fields {
                out.insert(k, inner(v, depth)?);
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

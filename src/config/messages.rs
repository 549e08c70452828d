//! Configuration errors that say what to do: a deserializer's message rewritten to name what
//! would have been accepted, a TOML syntax error with its line, column and key.

use super::*;

/// Rewrites a deserializer's message about `key` into one that says what would be accepted: the
/// choices of an enum key (the `config` crate says only "enum Delivery does not have variant
/// constructor transactionl"), the form of a duration (humantime says "expected a duration",
/// which `interval = 20` does not explain). Other messages are kept.
pub(super) fn explain(key: &str, reason: String) -> String {
    if let Some(value) = reason
        .split_once(" does not have variant constructor ")
        .map(|(_, v)| v.to_string())
    {
        if let Some(values) = enum_values(key) {
            return format!("\"{value}\" is not one of: {}", values.join(", "));
        }
    }
    if reason.ends_with("expected a duration") {
        let value = reason
            .split_once("string \"")
            .and_then(|(_, rest)| rest.rsplit_once('"'))
            .map_or("", |(v, _)| v);
        return format!(
            "\"{value}\" is not a duration: expected a duration string like \"20s\" (a number with a unit: \
             ms, s, m, h, days)"
        );
    }
    reason
}

/// The error for a TOML syntax error at byte `at` of `text` with toml's `message`: the 1-based
/// line and column (in characters) of `at`, and the key of that line ([`key_of_line`]) when it
/// has one. Messages are put on one line.
pub(super) fn syntax_error(text: &str, at: usize, message: &str) -> ConfigError {
    let at = at.min(text.len());
    let at = (0..=at).rev().find(|i| text.is_char_boundary(*i)).unwrap_or(0);
    let before = &text[..at];
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = text[line_start..at].chars().count() + 1;
    let reason = message.trim().replace('\n', "; ");
    let table = text[..line_start].lines().rev().find_map(table_header);
    let this = text[line_start..].lines().next().unwrap_or("");
    match key_of_line(table.as_deref(), this) {
        Some(key) => {
            let hint = unquoted_text(this).map_or(String::new(), |v| {
                format!(" (a text value, a duration included, is written in quotes: \"{v}\")")
            });
            ConfigError::key(
                key,
                format!("not valid TOML at line {line}, column {column}: {reason}{hint}"),
            )
        }
        None => ConfigError::Syntax { line, column, reason },
    }
}

/// The value of a `key = value` line when it is a word that TOML takes only in quotes
/// (`interval = 20s`, `sasl.mechanism = PLAIN`): not a value as written, a string once quoted.
pub(super) fn unquoted_text(line: &str) -> Option<&str> {
    let value = line.split_once('=')?.1.split('#').next()?.trim();
    let word = !value.is_empty() && !value.contains(|c: char| c.is_whitespace() || "\"'[]{}".contains(c));
    (word && format!("v = {value}").parse::<toml::Table>().is_err()).then_some(value)
}

/// The dotted key a TOML line names, as far as it can be read from a line that may not parse:
/// a table header (`[kafka.properties]`, `[[x]]`, or one missing its `]`) names its table; a
/// `key = value` line its key under `table` (the nearest header above, `None`: the root), each
/// part unquoted (`"sasl.mechanism" = ...` under `[kafka.properties]` is
/// `kafka.properties.sasl.mechanism`). `None` for a blank line, a comment, or text whose key
/// cannot be read.
pub(super) fn key_of_line(table: Option<&str>, line: &str) -> Option<String> {
    if let Some(header) = table_header(line) {
        return Some(header);
    }
    let (lhs, _) = line.split_once('=')?;
    let key = dotted(lhs)?;
    Some(match table {
        Some(t) if !t.is_empty() => format!("{t}.{key}"),
        _ => key,
    })
}

/// The table a header line opens (`[a.b]`, `[[a]]`, `[a` with its `]` missing), unquoted;
/// `None` for any other line.
pub(super) fn table_header(line: &str) -> Option<String> {
    let line = line.trim();
    let inner = line.strip_prefix('[')?;
    let inner = inner.strip_prefix('[').unwrap_or(inner);
    let inner = inner.split('#').next().unwrap_or("").trim_end();
    let inner = inner.trim_end_matches(']');
    dotted(inner)
}

/// A dotted TOML key as written (`a.b`, `"a.b"`, `a . 'b'`) as one dotted name, quotes removed;
/// `None` when it is empty or holds anything else.
pub(super) fn dotted(text: &str) -> Option<String> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    let bare = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
    let mut parts = Vec::new();
    let mut rest = text;
    loop {
        rest = rest.trim_start();
        let part;
        if let Some(q) = rest.chars().next().filter(|c| *c == '"' || *c == '\'') {
            let end = rest[1..].find(q)? + 1;
            part = &rest[1..end];
            rest = &rest[end + 1..];
        } else {
            let end = rest.find(|c: char| !bare(c)).unwrap_or(rest.len());
            if end == 0 {
                return None;
            }
            part = &rest[..end];
            rest = &rest[end..];
        }
        parts.push(part);
        rest = rest.trim_start();
        match rest.strip_prefix('.') {
            Some(r) => rest = r,
            None if rest.is_empty() => return Some(parts.join(".")),
            None => return None,
        }
    }
}

/// The values an enum key accepts, as serde spells them.
pub(super) fn enum_values(key: &str) -> Option<&'static [&'static str]> {
    Some(match key {
        "input.start" => variants::<Start>(),
        "output.partitioning" => variants::<Partitioning>(),
        "output.delivery" => variants::<Delivery>(),
        "fingerprint.on_missing" => variants::<OnMissing>(),
        "fingerprint.scope" => variants::<Scope>(),
        _ => return None,
    })
}

/// The variant names enum `T`'s derived `Deserialize` accepts (with its `rename_all`), asked of
/// `T` itself: a deserializer that records the names serde hands to `deserialize_enum`. No copy
/// of the list can drift from the type.
pub(super) fn variants<T: serde::de::DeserializeOwned>() -> &'static [&'static str] {
    use serde::de::{Error as _, Visitor};
    struct Names<'a>(&'a mut &'static [&'static str]);
    impl<'de> serde::Deserializer<'de> for Names<'_> {
        type Error = serde::de::value::Error;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(Self::Error::custom("not an enum"))
        }
        fn deserialize_enum<V: Visitor<'de>>(
            self,
            _name: &'static str,
            variants: &'static [&'static str],
            _: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = variants;
            Err(Self::Error::custom("names taken"))
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option
            unit unit_struct newtype_struct seq tuple tuple_struct map struct identifier ignored_any
        }
    }
    let mut names: &'static [&'static str] = &[];
    let _ = T::deserialize(Names(&mut names));
    names
}

/// The key of serde's `expected` list ("expected one of `a`, `b`" or "expected `a`") closest to
/// the unknown `field`: the one with the highest Jaro similarity above 0.7, the threshold clap
/// suggests a misspelt subcommand with (strsim, as clap uses it). `None`: nothing is that close.
fn closest<'a>(field: &str, expected: &'a str) -> Option<&'a str> {
    let (_, list) = expected.split_once("expected")?;
    list.split('`')
        .skip(1)
        .step_by(2)
        .map(|name| (strsim::jaro(field, name), name))
        .filter(|(score, _)| *score > 0.7)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, name)| name)
}

/// serde's messages say "unknown field `x`, expected one of ..." for a path like `input`;
/// report the full key (`input.x`) instead, and keep the rest as the reason.
pub(super) fn split_serde_error(path: &str, message: &str) -> (String, String) {
    let path = if path == "." { "" } else { path };
    if let Some(rest) = message.strip_prefix("unknown field `") {
        if let Some(end) = rest.find('`') {
            let field = &rest[..end];
            let key = if path.is_empty() || path == field || path.ends_with(&format!(".{field}")) {
                if path.is_empty() {
                    field.to_string()
                } else {
                    path.to_string()
                }
            } else {
                format!("{path}.{field}")
            };
            let reason = match closest(field, &rest[end..]) {
                Some(near) => {
                    let near = match key.rfind('.') {
                        Some(i) => format!("{}.{near}", &key[..i]),
                        None => near.to_string(),
                    };
                    format!("unknown key (did you mean {near}? every key is in docs/configuration.md)")
                }
                None => "unknown key (check the spelling; every key is in docs/configuration.md)".to_string(),
            };
            return (key, reason);
        }
    }
    if let Some(rest) = message.strip_prefix("missing field `") {
        if let Some(end) = rest.find('`') {
            let field = &rest[..end];
            let key = if path.is_empty() {
                field.to_string()
            } else {
                format!("{path}.{field}")
            };
            return (key, "missing: this key is required".to_string());
        }
    }
    if let Some(rest) = message.strip_prefix("missing configuration field \"") {
        if let Some(end) = rest.find('"') {
            return (rest[..end].to_string(), "missing: this key is required".to_string());
        }
    }
    let key = if path.is_empty() {
        "(root)".to_string()
    } else {
        path.to_string()
    };
    // config appends " for key `x`" to some messages; the key is already reported.
    let reason = match message.find(" for key `") {
        Some(i) => message[..i].to_string(),
        None => message.to_string(),
    };
    (key, reason)
}

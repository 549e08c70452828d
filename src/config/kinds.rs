//! The file's values keep their TOML type ([`check_kinds`]).
//!
//! Why: the `config` crate, which layers the `KAFKA_DEDUP__*` environment over the file,
//! converts a value to the type its key wants (the environment holds only strings, so it must):
//! in the file too, `generations = 3.5` became 4, `generations = "3"` 3, `provenance = 0`
//! false and `topic = 5` `"5"`, each without a word (a new user's trial found them; the
//! horizon changes with `generations`). A value's TOML type is checked here against the type
//! the key took in the effective configuration, so the file is read as strictly as TOML itself
//! reads it, and only the environment's strings are converted.

use super::ConfigError;

/// The keys whose values may take several TOML types by design, each checked by its own
/// deserializer: librdkafka's properties (`"linger.ms" = 5` and `"linger.ms" = "5"` are the same
/// property) and `fingerprint.source` (a string, or a list of strings; one part is written back
/// as a string).
const ANY_KIND: &[&str] = &["kafka.properties", "fingerprint.source"];

/// Checks that every value of `file` (the configuration file, parsed as TOML) has the TOML type
/// of the same key in `effective` (the configuration deserialized from it and the environment,
/// serialized back: each key's own type). Keys absent from `effective` (an option left unset,
/// an alias), keys the environment set (`from_env`: dotted keys, lower case) and the subtrees of
/// [`ANY_KIND`] are not checked; an integer stands for a float. Errors: the first key whose
/// value has another type, with both types and the value ([`ConfigError::Key`]).
pub(super) fn check_kinds(
    file: &toml::Table,
    effective: &toml::Table,
    from_env: &dyn Fn(&str) -> bool,
) -> Result<(), ConfigError> {
    check_table(file, effective, "", from_env)
}

fn check_table(
    file: &toml::Table,
    effective: &toml::Table,
    prefix: &str,
    from_env: &dyn Fn(&str) -> bool,
) -> Result<(), ConfigError> {
    for (name, value) in file {
        let key = if prefix.is_empty() {
            name.clone()
        } else {
            format!("{prefix}.{name}")
        };
        let Some(wanted) = effective.get(name) else {
            continue;
        };
        if ANY_KIND.contains(&key.as_str()) || from_env(&key) {
            continue;
        }
        check_value(value, wanted, &key, from_env)?;
    }
    Ok(())
}

fn check_value(
    value: &toml::Value,
    wanted: &toml::Value,
    key: &str,
    from_env: &dyn Fn(&str) -> bool,
) -> Result<(), ConfigError> {
    use toml::Value as V;
    match (value, wanted) {
        (V::Table(f), V::Table(e)) => check_table(f, e, key, from_env),
        (V::Array(f), V::Array(e)) => {
            // Elements against the first element the key took (all of one type).
            match e.first() {
                Some(first) => f.iter().try_for_each(|v| check_value(v, first, key, from_env)),
                None => Ok(()),
            }
        }
        (V::Integer(_), V::Float(_)) => Ok(()),
        (v, w) if v.type_str() == w.type_str() => Ok(()),
        (v, w) => Err(ConfigError::Key {
            key: key.to_string(),
            reason: format!(
                "expected {}, found {} ({v}); the file's values are not converted (the environment's \
                 KAFKA_DEDUP__* strings are)",
                article(w.type_str()),
                article(v.type_str()),
            ),
        }),
    }
}

/// `integer` -> `an integer`, `string` -> `a string`.
fn article(kind: &str) -> String {
    match kind.chars().next() {
        Some('a' | 'e' | 'i' | 'o' | 'u') => format!("an {kind}"),
        _ => format!("a {kind}"),
    }
}

//! TLS and SASL through `[kafka.properties]`: secrets read from files, and the checks made at start
//! so that a security misconfiguration stops `run` and `check-config` with exit code 2 and a
//! message naming the key, instead of a client that retries a connection forever.
//!
//! Where a secret can come from (docs/security.md, "Security"):
//! - the configuration file (`sasl.password = "..."`), or an environment variable
//!   (`KAFKA_DEDUP__KAFKA__PROPERTIES__SASL_PASSWORD`), like every key;
//! - a file: a property whose value is `file:PATH` takes the content of `PATH`, read once at start
//!   with one trailing newline removed. This is how Docker (`/run/secrets/NAME`) and Kubernetes
//!   (a secret volume) hand secrets to a process. Any property may be read this way; a value
//!   starting with `file://` is a URL and is left alone.
//!
//! Secret values are never printed: `Config::to_redacted_toml` and the start-up log redact every
//! property for which [`is_secret`] holds, `KafkaConfig`'s `Debug` does too, and the messages of
//! this module name keys and paths, never values.
//!
//! The functions here work on the flattened properties (`name -> value`, as
//! `KafkaConfig::flat_properties` gives them) and know nothing of the configuration types:
//! `crate::config` calls them and turns a [`SecurityError`] into its own error for
//! `kafka.properties.NAME`.
//!
//! What [`validate`] checks, each failure naming the key (`kafka.properties.sasl.password`):
//! - librdkafka accepts every property name and value (its own `rd_kafka_conf_set` check);
//! - `security.protocol` is one of `plaintext`, `ssl`, `sasl_plaintext`, `sasl_ssl`;
//! - with a SASL protocol, the mechanism is one this build supports ([`SASL_MECHANISMS`]) and
//!   `sasl.username` and `sasl.password` are set and not empty;
//! - every file a property names ([`PATH_PROPERTIES`]) can be opened for reading.
//!
//! `sasl.*` properties without a SASL protocol and `ssl.*` ones without TLS are valid but ignored
//! by librdkafka; [`warnings`] names them (logged at start, printed by `check-config`).
//!
//! Certificates that are readable but invalid are refused by librdkafka when the clients are
//! created; `main` maps that error to exit 2 as well.

use std::collections::BTreeMap;
use std::path::Path;

use rdkafka::config::ClientConfig;
use rdkafka::error::KafkaError;

/// librdkafka properties whose values are secrets: never printed or logged. librdkafka's own
/// sensitive properties (`_RK_SENSITIVE` in rdkafka_conf.c), except those that hold a file path.
const SECRET_PROPERTIES: &[&str] = &[
    "sasl.username",
    "sasl.password",
    "sasl.oauthbearer.config",
    "sasl.oauthbearer.client.secret",
    "sasl.oauthbearer.assertion.private.key.passphrase",
    "sasl.oauthbearer.assertion.private.key.pem",
    "ssl.ca.pem",
    "ssl.key.password",
    "ssl.key.pem",
    "ssl.keystore.password",
    "ssl_key",
];

/// True for librdkafka property names whose values must never be printed.
pub fn is_secret(name: &str) -> bool {
    SECRET_PROPERTIES.contains(&name) || name.contains("password") || name.contains("secret")
}

/// A property that fails a check: its librdkafka name and why (never its value).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("kafka.properties.{property}: {reason}")]
pub struct SecurityError {
    /// The librdkafka property name (`sasl.password`), or `(all)` when librdkafka names none.
    pub property: String,
    /// Why, naming keys and paths only.
    pub reason: String,
}

/// Prefix of a property value read from a file: `sasl.password = "file:/run/secrets/kafka"`.
pub const FILE_PREFIX: &str = "file:";

/// SASL mechanisms this build supports (`sasl.mechanism`, case-sensitive as in librdkafka).
/// GSSAPI needs librdkafka built with Cyrus SASL and OAUTHBEARER a token provider; neither is
/// part of this build.
pub const SASL_MECHANISMS: &[&str] = &["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"];

/// Properties that name a file (or, for CA locations, a directory) the client reads at start.
/// From librdkafka's CONFIGURATION.md.
pub const PATH_PROPERTIES: &[&str] = &[
    "ssl.ca.location",
    "ssl.certificate.location",
    "ssl.key.location",
    "ssl.keystore.location",
    "ssl.crl.location",
    "ssl.engine.location",
    "https.ca.location",
    "sasl.kerberos.keytab",
];

/// librdkafka's `security.protocol`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// No TLS, no authentication (librdkafka's default).
    Plaintext,
    /// TLS.
    Ssl,
    /// SASL without TLS.
    SaslPlaintext,
    /// SASL over TLS.
    SaslSsl,
}

impl Protocol {
    /// Parses a `security.protocol` value (case-insensitive, as librdkafka does).
    pub fn parse(s: &str) -> Option<Protocol> {
        match s.to_ascii_lowercase().as_str() {
            "plaintext" => Some(Protocol::Plaintext),
            "ssl" => Some(Protocol::Ssl),
            "sasl_plaintext" => Some(Protocol::SaslPlaintext),
            "sasl_ssl" => Some(Protocol::SaslSsl),
            _ => None,
        }
    }

    /// True when the connection authenticates with SASL.
    pub fn sasl(self) -> bool {
        matches!(self, Protocol::SaslPlaintext | Protocol::SaslSsl)
    }

    /// True when the connection uses TLS.
    pub fn tls(self) -> bool {
        matches!(self, Protocol::Ssl | Protocol::SaslSsl)
    }
}

fn err(key: &str, reason: impl Into<String>) -> SecurityError {
    SecurityError {
        property: key.to_string(),
        reason: reason.into(),
    }
}

/// Replaces every property value of the form `file:PATH` by the content of `PATH` (one trailing
/// `\n` or `\r\n` removed). Called once by `Config::from_toml_str`, before [`validate`].
/// Returns true when any value was replaced.
///
/// Errors: a file that cannot be read (or is not UTF-8), naming the property and the path.
pub fn resolve_files(props: &mut BTreeMap<String, String>) -> Result<bool, SecurityError> {
    let mut changed = false;
    for (name, value) in props.iter_mut() {
        let Some(path) = value.strip_prefix(FILE_PREFIX) else {
            continue;
        };
        if path.starts_with("//") {
            continue; // a file:// URL, not a secret reference
        }
        let content = std::fs::read_to_string(path)
            .map_err(|e| err(name, format!("cannot read the file its value names ({path}): {e}")))?;
        let content = content
            .strip_suffix("\r\n")
            .or_else(|| content.strip_suffix('\n'))
            .unwrap_or(&content);
        *value = content.to_string();
        changed = true;
    }
    Ok(changed)
}

/// Checks the security-related properties of `[kafka.properties]`, flattened (see the module
/// documentation).
pub fn validate(props: &BTreeMap<String, String>) -> Result<(), SecurityError> {
    let protocol = match props.get("security.protocol") {
        None => Protocol::Plaintext,
        Some(v) => Protocol::parse(v).ok_or_else(|| {
            err(
                "security.protocol",
                format!("\"{v}\" is not one of plaintext, ssl, sasl_plaintext, sasl_ssl"),
            )
        })?,
    };
    librdkafka_accepts(props)?;
    check_sasl(props, protocol)?;
    for key in PATH_PROPERTIES {
        if let Some(path) = props.get(*key) {
            check_readable(key, path)?;
        }
    }
    Ok(())
}

/// Settings that are valid but probably not what was meant: `sasl.*` properties without a SASL
/// protocol, `ssl.*` properties without a TLS protocol (librdkafka ignores them, and the client
/// connects without authentication or TLS), in the flattened properties. `run` logs each at
/// warn level at start, and `check-config` prints them.
pub fn warnings(props: &BTreeMap<String, String>) -> Vec<String> {
    let shown = props
        .get("security.protocol")
        .map_or("plaintext (the default)", String::as_str);
    let Some(protocol) = Protocol::parse(props.get("security.protocol").map_or("plaintext", String::as_str)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let unused = |prefix: &str| {
        props
            .keys()
            .filter(|k| k.starts_with(prefix))
            .cloned()
            .collect::<Vec<_>>()
    };
    if !protocol.sasl() {
        let keys = unused("sasl.");
        if !keys.is_empty() {
            out.push(format!(
                "kafka.properties: {} set but security.protocol is {shown}, so no SASL is used; \
                 set security.protocol = sasl_plaintext or sasl_ssl, or remove them",
                keys.join(", ")
            ));
        }
    }
    if !protocol.tls() {
        let keys = unused("ssl.");
        if !keys.is_empty() {
            out.push(format!(
                "kafka.properties: {} set but security.protocol is {shown}, so no TLS is used; \
                 set security.protocol = ssl or sasl_ssl, or remove them",
                keys.join(", ")
            ));
        }
    }
    out
}

/// librdkafka's own check of each name and value (`rd_kafka_conf_set`): unknown properties and
/// malformed values. Values of secret properties never appear in the message.
fn librdkafka_accepts(props: &BTreeMap<String, String>) -> Result<(), SecurityError> {
    let mut c = ClientConfig::new();
    for (k, v) in props {
        c.set(k, v);
    }
    match c.create_native_config() {
        Ok(native) => {
            // librdkafka reads an integer property with strtol: "1.5" is taken as 1 without a
            // word. A number it reads back as another number was not meant for that property.
            for (k, v) in props {
                let (Ok(given), Ok(read)) = (v.trim().parse::<f64>(), native.get(k)) else {
                    continue;
                };
                if is_secret(k) || read.trim().parse::<f64>().is_ok_and(|r| r == given) {
                    continue;
                }
                return Err(err(
                    k,
                    format!("\"{v}\" is read by librdkafka as {read}: this property takes an integer"),
                ));
            }
            Ok(())
        }
        Err(KafkaError::ClientConfig(_, desc, key, _value)) => {
            let reason = if is_secret(&key) {
                "refused by librdkafka".to_string()
            } else {
                format!("refused by librdkafka: {desc}")
            };
            Err(err(&key, reason))
        }
        Err(e) => Err(err("(all)", format!("refused by librdkafka: {e}"))),
    }
}

/// With a SASL protocol: a supported mechanism, a user name and a password.
fn check_sasl(props: &BTreeMap<String, String>, protocol: Protocol) -> Result<(), SecurityError> {
    // `sasl.mechanism` is librdkafka's alias of `sasl.mechanisms`.
    let mechanism = match (props.get("sasl.mechanism"), props.get("sasl.mechanisms")) {
        (Some(a), Some(b)) if a != b => {
            return Err(err(
                "sasl.mechanism",
                "sasl.mechanism and sasl.mechanisms are the same property; set only one",
            ))
        }
        (Some(m), _) => Some(("sasl.mechanism", m)),
        (None, Some(m)) => Some(("sasl.mechanisms", m)),
        (None, None) => None,
    };
    if !protocol.sasl() {
        return Ok(()); // unused sasl.* properties: see `warnings`
    }
    let supported = SASL_MECHANISMS.join(", ");
    let (key, mechanism) = mechanism.ok_or_else(|| {
        err(
            "sasl.mechanism",
            format!(
                "missing: security.protocol = {} needs a SASL mechanism, one of {supported} \
                 (librdkafka's default GSSAPI is not supported by this build)",
                props["security.protocol"]
            ),
        )
    })?;
    if !SASL_MECHANISMS.contains(&mechanism.as_str()) {
        let known = ["GSSAPI", "OAUTHBEARER"].contains(&mechanism.as_str());
        return Err(err(
            key,
            if known {
                format!("SASL mechanism \"{mechanism}\" is not supported by this build; use one of {supported}")
            } else {
                format!("unknown SASL mechanism \"{mechanism}\"; use one of {supported} (upper case)")
            },
        ));
    }
    for (k, what) in [("sasl.username", "user name"), ("sasl.password", "password")] {
        if props.get(k).is_none_or(|v| v.is_empty()) {
            return Err(err(
                k,
                format!(
                    "missing: SASL {mechanism} needs a {what}; set {k} in the file, in the environment \
                     (KAFKA_DEDUP__KAFKA__PROPERTIES__{}) or from a file ({k} = \"file:/run/secrets/NAME\")",
                    k.replace('.', "_").to_ascii_uppercase()
                ),
            ));
        }
    }
    Ok(())
}

/// Checks that the file (or CA directory) a path property names can be read.
fn check_readable(key: &str, value: &str) -> Result<(), SecurityError> {
    let is_ca = key.ends_with(".ca.location");
    if is_ca && value == "probe" {
        return Ok(()); // librdkafka probes the system's usual CA locations
    }
    let path = Path::new(value);
    let result = if is_ca && path.is_dir() {
        std::fs::read_dir(path).map(|_| ())
    } else if path.is_dir() {
        Err(std::io::Error::other("is a directory, a file is expected"))
    } else {
        std::fs::File::open(path).map(|_| ())
    };
    result.map_err(|e| err(key, format!("cannot read {value}: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_urls_are_not_secret_references() {
        let mut props: BTreeMap<String, String> = [(
            "sasl.oauthbearer.token.endpoint.url".to_string(),
            "file:///token".to_string(),
        )]
        .into();
        assert!(!resolve_files(&mut props).unwrap());
        assert_eq!(props["sasl.oauthbearer.token.endpoint.url"], "file:///token");
    }

    #[test]
    fn secret_names() {
        for name in [
            "sasl.password",
            "ssl.key.pem",
            "ssl.keystore.password",
            "my.secret.thing",
        ] {
            assert!(is_secret(name), "{name}");
        }
        assert!(!is_secret("sasl.mechanism"));
    }
}

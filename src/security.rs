//! TLS and SASL through `[kafka.properties]`: secrets read from files, and the checks made at start
//! so that a security misconfiguration stops `run` and `check-config` with exit code 2 and a
//! message naming the key, instead of a client that retries a connection forever.
//!
//! Where a secret can come from (README, "Security"):
//! - the configuration file (`sasl.password = "..."`), or an environment variable
//!   (`KAFKA_DEDUP__KAFKA__PROPERTIES__SASL_PASSWORD`), like every key;
//! - a file: a property whose value is `file:PATH` takes the content of `PATH`, read once at start
//!   with one trailing newline removed. This is how Docker (`/run/secrets/NAME`) and Kubernetes
//!   (a secret volume) hand secrets to a process. Any property may be read this way; a value
//!   starting with `file://` is a URL and is left alone.
//!
//! Secret values are never printed: `Config::to_redacted_toml` and the start-up log redact every
//! property for which [`crate::config::is_secret`] holds, `KafkaConfig`'s `Debug` does too, and
//! the messages of this module name keys and paths, never values.
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

use crate::config::{is_secret, ConfigError, KafkaConfig, PropertyValue};

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

fn err(key: &str, reason: impl Into<String>) -> ConfigError {
    ConfigError::Key {
        key: format!("kafka.properties.{key}"),
        reason: reason.into(),
    }
}

/// Replaces every property value of the form `file:PATH` by the content of `PATH` (one trailing
/// `\n` or `\r\n` removed). Called once by `Config::from_toml_str`, before [`validate`].
///
/// Errors: a file that cannot be read (or is not UTF-8), naming the property and the path.
pub fn resolve_files(kafka: &mut KafkaConfig) -> Result<(), ConfigError> {
    let mut flat = kafka.flat_properties();
    let mut changed = false;
    for (name, value) in flat.iter_mut() {
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
    if changed {
        kafka.properties = flat.into_iter().map(|(k, v)| (k, PropertyValue::String(v))).collect();
    }
    Ok(())
}

/// Checks the security-related properties of `[kafka.properties]` (see the module documentation).
pub fn validate(kafka: &KafkaConfig) -> Result<(), ConfigError> {
    let props = kafka.flat_properties();
    let protocol = match props.get("security.protocol") {
        None => Protocol::Plaintext,
        Some(v) => Protocol::parse(v).ok_or_else(|| {
            err(
                "security.protocol",
                format!("\"{v}\" is not one of plaintext, ssl, sasl_plaintext, sasl_ssl"),
            )
        })?,
    };
    librdkafka_accepts(&props)?;
    check_sasl(&props, protocol)?;
    for key in PATH_PROPERTIES {
        if let Some(path) = props.get(*key) {
            check_readable(key, path)?;
        }
    }
    Ok(())
}

/// Settings that are valid but probably not what was meant: `sasl.*` properties without a SASL
/// protocol, `ssl.*` properties without a TLS protocol (librdkafka ignores them, and the client
/// connects without authentication or TLS). `run` logs each at warn level at start, and
/// `check-config` prints them.
pub fn warnings(kafka: &KafkaConfig) -> Vec<String> {
    let props = kafka.flat_properties();
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
fn librdkafka_accepts(props: &BTreeMap<String, String>) -> Result<(), ConfigError> {
    let mut c = ClientConfig::new();
    for (k, v) in props {
        c.set(k, v);
    }
    match c.create_native_config() {
        Ok(_) => Ok(()),
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

fn check_sasl(props: &BTreeMap<String, String>, protocol: Protocol) -> Result<(), ConfigError> {
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

fn check_readable(key: &str, value: &str) -> Result<(), ConfigError> {
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
    use crate::config::Config;
    use std::collections::HashMap;

    const MINIMAL: &str = "[input]\ntopic = \"a\"\n[output]\ntopic = \"b\"\n";

    fn load(props: &str, env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        Config::from_toml_str(&format!("{MINIMAL}[kafka.properties]\n{props}"), Some(env))
    }

    fn key_of(props: &str) -> String {
        load(props, &[]).unwrap_err().key_name().unwrap_or("").to_string()
    }

    #[test]
    fn sasl_plain_and_scram_pass() {
        for m in SASL_MECHANISMS {
            let c = load(
                &format!(
                    "\"security.protocol\" = \"SASL_PLAINTEXT\"\n\"sasl.mechanism\" = \"{m}\"\n\
                     \"sasl.username\" = \"u\"\n\"sasl.password\" = \"p\"\n"
                ),
                &[],
            );
            assert!(c.is_ok(), "{m}: {:?}", c.err());
        }
    }

    #[test]
    fn misconfigurations_name_the_key() {
        let sasl = "\"security.protocol\" = \"sasl_ssl\"\n";
        assert_eq!(
            key_of(&format!("{sasl}\"sasl.mechanism\" = \"PLAINISH\"\n")),
            "kafka.properties.sasl.mechanism"
        );
        assert_eq!(
            key_of(&format!("{sasl}\"sasl.mechanisms\" = \"GSSAPI\"\n")),
            "kafka.properties.sasl.mechanisms"
        );
        assert_eq!(key_of(sasl), "kafka.properties.sasl.mechanism");
        assert_eq!(
            key_of(&format!(
                "{sasl}\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.username\" = \"u\"\n"
            )),
            "kafka.properties.sasl.password"
        );
        assert_eq!(
            key_of(&format!(
                "{sasl}\"sasl.mechanism\" = \"PLAIN\"\n\"sasl.username\" = \"u\"\n\"sasl.password\" = \"\"\n"
            )),
            "kafka.properties.sasl.password"
        );
        assert_eq!(
            key_of("\"security.protocol\" = \"tls\"\n"),
            "kafka.properties.security.protocol"
        );
        assert_eq!(
            key_of("\"security.protocol\" = \"ssl\"\n\"ssl.ca.location\" = \"/nonexistent/ca.pem\"\n"),
            "kafka.properties.ssl.ca.location"
        );
        assert_eq!(
            key_of("\"security.protocol\" = \"ssl\"\n\"ssl.certificate.location\" = \"/\"\n"),
            "kafka.properties.ssl.certificate.location"
        );
        assert_eq!(
            key_of("\"no.such.property\" = 1\n"),
            "kafka.properties.no.such.property"
        );
        assert_eq!(
            key_of("\"session.timeout.ms\" = \"soon\"\n"),
            "kafka.properties.session.timeout.ms"
        );
    }

    #[test]
    fn unused_sasl_and_ssl_properties_are_warned_about() {
        let c = load("\"sasl.password\" = \"x\"\n\"ssl.ca.location\" = \"probe\"\n", &[]).unwrap();
        let w = warnings(&c.kafka);
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("sasl.password") && w[0].contains("no SASL"), "{w:?}");
        assert!(!w[0].contains("\"x\""), "names keys, never values: {w:?}");
        assert!(w[1].contains("ssl.ca.location") && w[1].contains("no TLS"), "{w:?}");
        let c = load(
            "\"security.protocol\" = \"ssl\"\n\"ssl.ca.location\" = \"probe\"\n",
            &[],
        )
        .unwrap();
        assert!(warnings(&c.kafka).is_empty());
    }

    #[test]
    fn ca_location_may_be_a_directory_or_probe() {
        let dir = tempfile::tempdir().unwrap();
        for ca in [dir.path().display().to_string(), "probe".to_string()] {
            let c = load(
                &format!("\"security.protocol\" = \"ssl\"\n\"ssl.ca.location\" = \"{ca}\"\n"),
                &[],
            );
            assert!(c.is_ok(), "{ca}: {:?}", c.err());
        }
    }

    #[test]
    fn secrets_come_from_files_and_are_never_shown() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("password");
        std::fs::write(&secret, "from-a-file-42\n").unwrap();
        let props = "\"security.protocol\" = \"SASL_SSL\"\n\"sasl.mechanism\" = \"SCRAM-SHA-512\"\n\
                     \"sasl.username\" = \"dedup\"\n";
        // From the environment, the usual way to mount a secret.
        let c = load(
            props,
            &[(
                "KAFKA_DEDUP__KAFKA__PROPERTIES__SASL_PASSWORD",
                &format!("file:{}", secret.display()),
            )],
        )
        .unwrap();
        let flat = c.kafka.flat_properties();
        assert_eq!(flat["sasl.password"], "from-a-file-42", "trailing newline removed");
        assert_eq!(flat["security.protocol"], "SASL_SSL");
        let shown = format!("{}\n{:?}", c.to_redacted_toml(), c);
        assert!(!shown.contains("from-a-file-42"), "{shown}");
        assert!(shown.contains("<redacted>"), "{shown}");
        // From the file itself, as a dotted key.
        let c = load(&format!("{props}sasl.password = \"file:{}\"\n", secret.display()), &[]).unwrap();
        assert_eq!(c.kafka.flat_properties()["sasl.password"], "from-a-file-42");
        // A missing file names the key and the path, not a value.
        let e = load(
            &format!("{props}\"sasl.password\" = \"file:{}/missing\"\n", dir.path().display()),
            &[],
        )
        .unwrap_err();
        assert_eq!(e.key_name(), Some("kafka.properties.sasl.password"));
        assert!(e.to_string().contains("missing"), "{e}");
    }

    #[test]
    fn file_urls_are_not_secret_references() {
        let mut k = KafkaConfig::default();
        k.properties.insert(
            "sasl.oauthbearer.token.endpoint.url".into(),
            PropertyValue::String("file:///token".into()),
        );
        resolve_files(&mut k).unwrap();
        assert_eq!(
            k.flat_properties()["sasl.oauthbearer.token.endpoint.url"],
            "file:///token"
        );
    }
}

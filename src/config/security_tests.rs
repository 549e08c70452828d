//! The checks of [`crate::security`], through loading a configuration.
use super::*;
use crate::security::SASL_MECHANISMS;
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
    let w = c.kafka.warnings();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(w[0].contains("sasl.password") && w[0].contains("no SASL"), "{w:?}");
    assert!(!w[0].contains("\"x\""), "names keys, never values: {w:?}");
    assert!(w[1].contains("ssl.ca.location") && w[1].contains("no TLS"), "{w:?}");
    let c = load(
        "\"security.protocol\" = \"ssl\"\n\"ssl.ca.location\" = \"probe\"\n",
        &[],
    )
    .unwrap();
    assert!(c.kafka.warnings().is_empty());
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

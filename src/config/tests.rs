use super::*;
use std::collections::HashMap;

const MINIMAL: &str = r#"
[input]
topic = "events"
[output]
topic = "events.dedup"
"#;

fn load(text: &str) -> Result<Config, ConfigError> {
    Config::from_toml_str(text, Some(HashMap::new()))
}

fn key_of(text: &str, env: &[(&str, &str)]) -> String {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let err = Config::from_toml_str(text, Some(env)).unwrap_err();
    err.key_name().unwrap_or("").to_string()
}

/// A property kafka-dedup sets itself (`kafka::ENFORCED`) is refused under `[kafka.properties]`
/// with any other value, naming the key (it would be overridden without a word); its own value
/// is accepted.
#[test]
fn properties_kafka_dedup_sets_itself_are_refused_with_another_value() {
    let cases: &[(&str, bool)] = &[
        ("\"enable.auto.commit\" = \"true\"", false),
        ("\"enable.auto.commit\" = true", false),
        ("\"enable.auto.commit\" = \"false\"", true),
        ("\"auto.commit.enable\" = \"true\"", false),
        ("\"enable.auto.offset.store\" = \"true\"", false),
        ("\"enable.idempotence\" = \"false\"", false),
        ("\"enable.idempotence\" = true", true),
        ("\"auto.offset.reset\" = \"latest\"", false),
        ("\"auto.offset.reset\" = \"error\"", false),
        ("\"auto.offset.reset\" = \"earliest\"", true),
        ("\"auto.offset.reset\" = \"smallest\"", true),
        ("\"linger.ms\" = \"20\"", true),
        ("\"allow.auto.create.topics\" = true", false),
        ("\"allow.auto.create.topics\" = \"false\"", true),
        // Idempotent mode's producer settings (MINIMAL is idempotent).
        ("\"message.timeout.ms\" = 1000", false),
        ("\"message.timeout.ms\" = 0", true),
        ("\"delivery.timeout.ms\" = \"300000\"", false),
        ("\"enable.gapless.guarantee\" = false", false),
        ("\"enable.gapless.guarantee\" = \"true\"", true),
        // Taken from another key: any value.
        ("\"bootstrap.servers\" = \"b:9092\"", false),
        ("\"group.id\" = \"kafka-dedup\"", false),
        ("\"transactional.id\" = \"t\"", false),
    ];
    for (props, ok) in cases {
        let text = format!("{MINIMAL}\n[kafka.properties]\n{props}\n");
        match Config::from_toml_str(&text, Some(HashMap::new())) {
            Ok(_) => assert!(ok, "{props}: accepted"),
            Err(e) => {
                assert!(!ok, "{props}: refused: {e}");
                let name = props.split('"').nth(1).unwrap();
                assert_eq!(
                    e.key_name(),
                    Some(format!("kafka.properties.{name}").as_str()),
                    "{props}"
                );
                let text = e.to_string();
                assert!(
                    text.contains("kafka-dedup sets it to") || text.contains("set by kafka-dedup from"),
                    "{props}: {e}"
                );
            }
        }
    }
}

/// The producer settings that keep a partition's output gap-free (idempotent mode) and a
/// transaction alive for a checkpoint interval (transactional mode) cannot be undone under
/// `[kafka.properties]`; each refusal names the key.
#[test]
fn delivery_settings_that_would_break_the_guarantee_are_refused() {
    let idempotent = |props: &str| format!("{MINIMAL}\n[kafka.properties]\n{props}\n");
    assert_eq!(
        key_of(&idempotent("\"message.timeout.ms\" = 1000"), &[]),
        "kafka.properties.message.timeout.ms"
    );
    assert_eq!(
        key_of(&idempotent("\"delivery.timeout.ms\" = \"300000\""), &[]),
        "kafka.properties.delivery.timeout.ms"
    );
    assert_eq!(
        key_of(&idempotent("\"enable.gapless.guarantee\" = false"), &[]),
        "kafka.properties.enable.gapless.guarantee"
    );
    assert!(load(&idempotent("\"message.timeout.ms\" = 0")).is_ok());

    let transactional = |interval: &str, props: &str| {
        format!(
            "[input]\ntopic = \"events\"\n[output]\ntopic = \"events.dedup\"\ndelivery = \"transactional\"\n\
                 transactional_id = \"t\"\n[checkpoint]\ninterval = \"{interval}\"\n[kafka.properties]\n{props}\n"
        )
    };
    let err = load(&transactional("5m", "\"transaction.timeout.ms\" = 60000")).unwrap_err();
    assert_eq!(err.key_name(), Some("kafka.properties.transaction.timeout.ms"));
    assert!(err.to_string().contains("checkpoint.interval"), "{err}");
    assert!(load(&transactional("5m", "\"transaction.timeout.ms\" = 310000")).is_ok());
    // Idempotent mode's fixed producer settings are its own: transactional mode leaves them.
    assert!(load(&transactional("5m", "\"message.timeout.ms\" = 1000")).is_ok());
    let cfg = load(&transactional("5m", "")).unwrap();
    let producer = crate::kafka::producer_config(&cfg);
    assert_eq!(producer.get("transaction.timeout.ms"), Some("360000"));
    // Idempotent mode sets its own; transactional mode leaves the message timeout to librdkafka.
    assert_eq!(producer.get("message.timeout.ms"), None);
    let idem = crate::kafka::producer_config(&load(MINIMAL).unwrap());
    assert_eq!(idem.get("message.timeout.ms"), Some("0"));
    assert_eq!(idem.get("enable.gapless.guarantee"), Some("true"));
}

#[test]
fn defaults_match_design() {
    let c = load(MINIMAL).unwrap();
    assert_eq!(c.kafka.bootstrap_servers, "127.0.0.1:9092");
    assert_eq!(c.input.group_id, "kafka-dedup");
    assert_eq!(c.input.start, Start::Earliest);
    assert_eq!(c.output.partitioning, Partitioning::Preserve);
    assert_eq!(c.output.delivery, Delivery::Idempotent);
    assert_eq!(c.fingerprint.source, Source::Value);
    assert_eq!(c.fingerprint.on_missing, OnMissing::Forward);
    // Issue 23, item 1: H_min 2 min, H_max 3 min (docs/configuration.md, "Configuration").
    assert_eq!(c.checkpoint.interval, Duration::from_secs(60));
    assert_eq!(c.checkpoint.generations, 3);
    assert_eq!(c.store.path, PathBuf::from("./kafka-dedup-data"));
    assert_eq!(c.http.listen, "127.0.0.1:9464");
}

#[test]
fn environment_overrides_any_key() {
    let env = [
        ("KAFKA_DEDUP__CHECKPOINT__INTERVAL", "5m"),
        ("KAFKA_DEDUP__OUTPUT__TOPIC", "other"),
        ("KAFKA_DEDUP__CHECKPOINT__GENERATIONS", "3"),
        ("KAFKA_DEDUP__KAFKA__PROPERTIES__SASL_PASSWORD", "hunter2"),
        ("UNRELATED", "x"),
    ];
    let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let c = Config::from_toml_str(MINIMAL, Some(env)).unwrap();
    assert_eq!(c.checkpoint.interval, Duration::from_secs(300));
    assert_eq!(c.output.topic, "other");
    assert_eq!(c.checkpoint.generations, 3);
    assert_eq!(
        c.kafka.flat_properties().get("sasl.password").map(String::as_str),
        Some("hunter2")
    );
    let shown = c.to_redacted_toml();
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(shown.contains("<redacted>"), "{shown}");
}

#[test]
fn dotted_and_quoted_property_keys_are_the_same() {
    let text = format!(
            "{MINIMAL}\n[kafka.properties]\nsasl.mechanism = \"PLAIN\"\n\"security.protocol\" = \"SASL_SSL\"\n\"session.timeout.ms\" = 6000\n\
             sasl.username = \"u\"\n\"sasl.password\" = \"p\"\n"
        );
    let c = load(&text).unwrap();
    let p = c.kafka.flat_properties();
    assert_eq!(p["sasl.mechanism"], "PLAIN");
    assert_eq!(p["security.protocol"], "SASL_SSL");
    assert_eq!(p["session.timeout.ms"], "6000");
}

/// The reason of the error `text` fails with, and its key.
fn key_and_reason(text: &str, env: &[(&str, &str)]) -> (String, String) {
    let env = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    match Config::from_toml_str(text, Some(env)).unwrap_err() {
        ConfigError::Key { key, reason } => (key, reason),
        e => panic!("not about a key: {e}"),
    }
}

/// Issue 16, item 6: a value of the wrong kind is answered with what would be accepted:
/// every choice of an enum key, a duration's form; a property value's error names the
/// whole dotted key.
#[test]
fn errors_say_what_is_accepted() {
    let with = |section: &str, line: &str| {
        let mut text = String::from("[input]\ntopic = \"a\"\n");
        if section == "input" {
            text.push_str(&format!("{line}\n"));
        }
        text.push_str("[output]\ntopic = \"b\"\n");
        if section == "output" {
            text.push_str(&format!("{line}\n"));
        }
        if section != "input" && section != "output" {
            text.push_str(&format!("[{section}]\n{line}\n"));
        }
        text
    };
    for (section, key, values) in [
        ("output", "delivery", "idempotent, transactional"),
        ("output", "partitioning", "preserve, key"),
        ("fingerprint", "on_missing", "forward, drop, dead_letter, fail"),
        ("fingerprint", "scope", "partition, global"),
        ("input", "start", "earliest, latest"),
    ] {
        let (k, reason) = key_and_reason(&with(section, &format!("{key} = \"transactionl\"")), &[]);
        assert_eq!(k, format!("{section}.{key}"));
        assert_eq!(reason, format!("\"transactionl\" is not one of: {values}"));
        let env = format!("KAFKA_DEDUP__{}__{}", section.to_uppercase(), key.to_uppercase());
        let (k, reason) = key_and_reason(MINIMAL, &[(env.as_str(), "nope")]);
        assert_eq!(
            (k.as_str(), reason),
            (
                format!("{section}.{key}").as_str(),
                format!("\"nope\" is not one of: {values}")
            )
        );
    }
    for (section, key) in [
        ("checkpoint", "interval"),
        ("output", "fence_wait"),
        ("output", "handover_timeout"),
    ] {
        for value in ["20", "\"20\"", "\"soon\""] {
            let (k, reason) = key_and_reason(&with(section, &format!("{key} = {value}")), &[]);
            assert_eq!(k, format!("{section}.{key}"));
            let shown = value.trim_matches('"');
            assert!(
                reason.starts_with(&format!(
                    "\"{shown}\" is not a duration: expected a duration string like \"20s\""
                )),
                "{key} = {value}: {reason}"
            );
        }
    }
    for value in ["1.5", "[1]", "{ x = [] }"] {
        let (k, reason) = key_and_reason(&with("kafka.properties", &format!("fetch.max.bytes = {value}")), &[]);
        let want = if value.starts_with('{') {
            "kafka.properties.fetch.max.bytes.x"
        } else {
            "kafka.properties.fetch.max.bytes"
        };
        assert_eq!(k, want, "fetch.max.bytes = {value}: {reason}");
    }
    // A float is a value like any other, for librdkafka to judge.
    let c = load(&with("kafka.properties", "\"queue.buffering.max.ms\" = 0.5")).unwrap();
    assert_eq!(c.kafka.flat_properties()["queue.buffering.max.ms"], "0.5");
}

/// An unknown key is named whole, with the known key of its section closest to it when one is
/// close (a new user wrote `groupid` and was told only to check the spelling).
#[test]
fn unknown_keys_suggest_the_closest_known_one() {
    for (text, key, near) in [
        (
            "[input]\ntopic = \"a\"\ngroupid = \"g\"\n[output]\ntopic = \"b\"\n",
            "input.groupid",
            Some("input.group_id"),
        ),
        (
            "[input]\ntopic = \"a\"\n[output]\ntopic = \"b\"\n[checkpoint]\nintervall = \"1m\"\n",
            "checkpoint.intervall",
            Some("checkpoint.interval"),
        ),
        (
            "[input]\ntopic = \"a\"\n[output]\ntopic = \"b\"\ndeliverry = \"idempotent\"\n",
            "output.deliverry",
            Some("output.delivery"),
        ),
        (
            "[input]\ntopic = \"a\"\n[output]\ntopic = \"b\"\n[fingerprint]\nzzz = 1\n",
            "fingerprint.zzz",
            None,
        ),
    ] {
        let (k, reason) = key_and_reason(text, &[]);
        assert_eq!(k, key, "{text}");
        match near {
            Some(near) => assert_eq!(
                reason,
                format!("unknown key (did you mean {near}? every key is in docs/configuration.md)"),
                "{text}"
            ),
            None => assert!(reason.contains("check the spelling"), "{text}: {reason}"),
        }
    }
}

/// A property set from the environment is taken as written: a secret that looks like a number
/// or a boolean keeps its digits and its case.
#[test]
fn properties_from_the_environment_keep_their_text() {
    for secret in ["007", "TRUE", "1.50", "1e3"] {
        let c = Config::from_toml_str(
            MINIMAL,
            Some(
                [(
                    "KAFKA_DEDUP__KAFKA__PROPERTIES__SASL_PASSWORD".to_string(),
                    secret.to_string(),
                )]
                .into(),
            ),
        )
        .unwrap();
        assert_eq!(c.kafka.flat_properties()["sasl.password"], secret);
    }
    let c = Config::from_toml_str(
        MINIMAL,
        Some([("KAFKA_DEDUP__CHECKPOINT__GENERATIONS".to_string(), "3".to_string())].into()),
    )
    .unwrap();
    assert_eq!(c.checkpoint.generations, 3);
}

/// Issue 18: `fingerprint.scope = "global"` needs a route topic of its own, and the filter
/// stage reads it in a group of its own.
#[test]
fn the_global_scope_needs_a_route_topic_of_its_own() {
    let global = |extra: &str| {
        format!(
            "[input]\ntopic = \"events\"\ngroup_id = \"g\"\nstart = \"latest\"\n[output]\ntopic = \"events.dedup\"\n\
                 duplicates_topic = \"dups\"\n[fingerprint]\nscope = \"global\"\n{extra}\n"
        )
    };
    let refused = |text: &str| {
        let e = load(text).unwrap_err();
        (e.key_name().unwrap_or("").to_string(), e.to_string())
    };
    let (key, why) = refused(&global(""));
    assert_eq!(key, "fingerprint.route_topic");
    assert!(why.contains("required"), "{why}");
    for taken in ["events", "events.dedup", "dups"] {
        let (key, why) = refused(&global(&format!("route_topic = \"{taken}\"")));
        assert_eq!(key, "fingerprint.route_topic", "{taken}");
        assert!(why.contains("must differ"), "{why}");
    }
    let (key, _) = refused(&global("route_topic = \"r\"\nsource = \"header:kafka-dedup.source\""));
    assert_eq!(key, "fingerprint.source");
    let (key, why) = refused(&format!("{MINIMAL}\n[fingerprint]\nroute_topic = \"r\"\n"));
    assert_eq!(key, "fingerprint.route_topic");
    assert!(why.contains("only used with"), "{why}");

    assert_eq!(load(MINIMAL).unwrap().fingerprint.scope, Scope::Partition);
    assert!(load(MINIMAL).unwrap().filter_stage().is_none());
    let c = load(&global("route_topic = \"events.route\"")).unwrap();
    assert_eq!(c.fingerprint.scope, Scope::Global);
    let stage = c.filter_stage().unwrap();
    assert_eq!(stage.input.topic, "events.route");
    assert_eq!(stage.input.group_id, "g-global");
    assert_eq!(stage.input.start, Start::Earliest, "every copy is filtered");
    assert_eq!(stage.input.routed_from.as_deref(), Some("events"));
    assert_eq!(stage.output.topic, "events.dedup");
    assert!(!c.to_redacted_toml().contains("routed_from"));
}

#[test]
fn bad_configs_name_the_key() {
    assert_eq!(
        key_of(&format!("{MINIMAL}\n[checkpoint]\nintervall = \"1s\"\n"), &[]),
        "checkpoint.intervall"
    );
    assert_eq!(key_of("[input]\ntopic = \"a\"\n[output]\n", &[]), "output.topic");
    assert_eq!(key_of("[input]\ntopic = \"a\"\n", &[]), "output");
    assert_eq!(
        key_of(&format!("{MINIMAL}\n[fingerprint]\nsource = \"json:no-slash\"\n"), &[]),
        "fingerprint.source"
    );
    assert_eq!(
        key_of(&format!("{MINIMAL}\n[checkpoint]\ninterval = \"0s\"\n"), &[]),
        "checkpoint.interval"
    );
    assert_eq!(
        key_of(&format!("{MINIMAL}\n[checkpoint]\ninterval = \"50ms\"\n"), &[]),
        "checkpoint.interval"
    );
    assert_eq!(
        key_of(
            &format!("{MINIMAL}\n[checkpoint]\ninterval = \"500000000000years\"\n"),
            &[]
        ),
        "checkpoint.interval"
    );
    assert_eq!(
        key_of(MINIMAL, &[("KAFKA_DEDUP__OUTPUT__FENCE_WAIT", "2h")]),
        "output.fence_wait"
    );
    assert_eq!(
        key_of(&format!("{MINIMAL}\n[checkpoint]\ninterval = \"soon\"\n"), &[]),
        "checkpoint.interval"
    );
    assert_eq!(
        key_of(&format!("{MINIMAL}\n[checkpoint]\ngenerations = 0\n"), &[]),
        "checkpoint.generations"
    );
    assert_eq!(
        key_of(MINIMAL, &[("KAFKA_DEDUP__OUTPUT__TOPICC", "x")]),
        "output.topicc"
    );
    assert_eq!(
        key_of(MINIMAL, &[("KAFKA_DEDUP__CHECKPOINT__GENERATIONS", "many")]),
        "checkpoint.generations"
    );
    assert_eq!(key_of(&format!("bogus = 1\n{MINIMAL}"), &[]), "bogus");
    assert_eq!(key_of(&format!("{MINIMAL}\nbogus = 1\n"), &[]), "output.bogus");
    assert_eq!(
        key_of(
            &format!("{MINIMAL}\n[fingerprint]\non_missing = \"dead_letter\"\n"),
            &[]
        ),
        "fingerprint.dead_letter_topic"
    );
    assert_eq!(key_of(&format!("{MINIMAL}\n[output]\n"), &[]), "output");
    assert_eq!(
        key_of(&format!("{MINIMAL}\n[http]\nlisten = \"nowhere\"\n"), &[]),
        "http.listen"
    );
}

/// Issue 27: `source` as a list of parts, `ignore` folded into the identity; a bad `ignore`
/// exits 2 naming `fingerprint.ignore`; the environment takes the text form.
#[test]
fn composite_sources_and_ignore() {
    let c = load(&format!(
        "{MINIMAL}\n[fingerprint]\nsource = [\"json:/tenant_id\", \"json:/event_id\"]\nignore = [\"/processed_at\"]\n"
    ))
    .unwrap();
    assert_eq!(
        c.fingerprint.identity().to_string(),
        r#"{"source":["json:/tenant_id","json:/event_id"],"ignore":["/processed_at"]}"#
    );
    let env = [("KAFKA_DEDUP__FINGERPRINT__SOURCE", r#"["key","header:event-id"]"#)];
    let env: HashMap<String, String> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let c = Config::from_toml_str(MINIMAL, Some(env)).unwrap();
    assert_eq!(c.fingerprint.identity().to_string(), r#"["key","header:event-id"]"#);
    let (key, reason) = key_and_reason(&format!("{MINIMAL}\n[fingerprint]\nignore = [\"/a\"]\n"), &[]);
    assert_eq!(key, "fingerprint.ignore");
    assert!(reason.contains("has no json: part"), "{reason}");
    let (key, reason) = key_and_reason(&format!("{MINIMAL}\n[fingerprint]\nsource = []\n"), &[]);
    assert_eq!(key, "fingerprint.source");
    assert!(reason.contains("empty list"), "{reason}");
}

/// Issue 27: an `avro:` part needs `fingerprint.schema_registry.url`; the password may come
/// from a file and is never printed; the global scope takes them.
#[test]
fn avro_sources_need_a_schema_registry() {
    let avro = format!("{MINIMAL}\n[fingerprint]\nsource = [\"key\", \"avro:/event_id\"]\n");
    let (key, reason) = key_and_reason(&avro, &[]);
    assert_eq!(key, "fingerprint.schema_registry.url");
    assert!(reason.contains("avro:"), "{reason}");
    let dir = tempfile::tempdir().unwrap();
    let secret = dir.path().join("sr-password");
    std::fs::write(&secret, "s3cret\n").unwrap();
    let text = format!(
        "{avro}[fingerprint.schema_registry]\nurl = \"http://registry:8081/\"\nusername = \"u\"\npassword = \"file:{}\"\n",
        secret.display()
    );
    let c = load(&text).unwrap();
    let sr = &c.fingerprint.schema_registry;
    assert_eq!((sr.username.as_str(), sr.password.as_str()), ("u", "s3cret"));
    assert_eq!((sr.cache_schemas, sr.timeout), (1000, Duration::from_secs(5)));
    assert!(!c.to_redacted_toml().contains("s3cret"));
    assert!(!format!("{c:?}").contains("s3cret"));
    let missing = text.replace(&secret.display().to_string(), "/nonexistent/sr-password");
    assert_eq!(key_of(&missing, &[]), "fingerprint.schema_registry.password");
    let bad_url = format!("{avro}[fingerprint.schema_registry]\nurl = \"registry:8081\"\n");
    assert_eq!(key_of(&bad_url, &[]), "fingerprint.schema_registry.url");
    let global = format!(
        "{MINIMAL}\n[fingerprint]\nsource = \"avro:/id\"\nscope = \"global\"\nroute_topic = \"r\"\n\
         [fingerprint.schema_registry]\nurl = \"http://r:8081\"\n"
    );
    // The global scope takes them (its route stage waits for the registry too).
    load(&global).unwrap();
    // protobuf: and the key forms need the registry too.
    for source in [
        "protobuf:/id",
        "avro-key:/id",
        "[\\\"json:/t\\\", \\\"protobuf-key:/id\\\"]",
    ] {
        let (key, reason) = key_and_reason(&format!("{MINIMAL}\n[fingerprint]\nsource = \"{source}\"\n"), &[]);
        assert_eq!(key, "fingerprint.schema_registry.url", "{source}: {reason}");
        load(&global.replace("avro:/id", source)).unwrap();
    }
    // Without an avro part the registry settings are not needed.
    load(&format!("{MINIMAL}\n[fingerprint]\nsource = \"json:/id\"\n")).unwrap();
}

/// Issue 23, item 6: a TOML syntax error says where (line and column) and names the key of that
/// line (a table header names its table); a line that holds no key is reported by its position.
#[test]
fn syntax_errors_say_where_and_name_the_key() {
    #[rustfmt::skip]
    let rows: Vec<(String, Option<&str>, &str)> = vec![
        // text, the key named, where
        (format!("{MINIMAL}[checkpoint]\ninterval = 20s\n"), Some("checkpoint.interval"), "line 7, column 14"),
        (format!("{MINIMAL}[kafka.properties]\n\"sasl.mechanism\" = PLAIN\n"), Some("kafka.properties.sasl.mechanism"), "line 7, column 20"),
        (format!("{MINIMAL}[kafka.properties]\nsasl.mechanism = PLAIN\n"), Some("kafka.properties.sasl.mechanism"), "line 7, column 18"),
        ("[input]\ntopic = \"a\n[output]\n".to_string(), Some("input.topic"), "line 2, column 11"),
        (format!("{MINIMAL}\n[output]\n"), Some("output"), "line 7, column 1"),
        (format!("{MINIMAL}[checkpoint\ninterval = \"1s\"\n"), Some("checkpoint"), "line 6, column 12"),
        (format!("{MINIMAL}= 3\n"), None, "line 6, column 1"),
    ];
    for (text, key, at) in rows {
        let err = load(&text).unwrap_err();
        let shown = err.to_string();
        assert_eq!(err.key_name(), key, "{text}: {shown}");
        assert!(
            shown.contains(at) && shown.contains("not valid TOML"),
            "{text}: {shown}"
        );
        assert!(!shown.contains("(file)") && !shown.contains('\n'), "{text}: {shown}");
    }
    // A word TOML takes only in quotes is shown quoted.
    let shown = load(&format!("{MINIMAL}[checkpoint]\ninterval = 20s # every 20 s\n"))
        .unwrap_err()
        .to_string();
    assert!(
        shown.ends_with("(a text value, a duration included, is written in quotes: \"20s\")"),
        "{shown}"
    );
    let shown = load(&format!("{MINIMAL}[checkpoint]\ninterval = 20 s\n"))
        .unwrap_err()
        .to_string();
    assert!(!shown.contains("in quotes"), "{shown}");
}

/// Issue 23, item 3: `input.skip` entries, one row per form; a bad entry exits 2 naming the key.
#[test]
fn skip_entries_are_partition_offset_pairs() {
    type Row<'a> = (&'a str, Option<&'a [(i32, i64)]>);
    let rows: [Row<'_>; 7] = [
        ("", Some(&[])),
        ("0:1042", Some(&[(0, 1042)])),
        (" 3:7 , 0:1042,", Some(&[(0, 1042), (3, 7)])),
        ("0 : 5", Some(&[(0, 5)])),
        ("0", None),
        ("-1:5", None),
        ("0:x", None),
    ];
    for (text, want) in rows {
        let got = parse_skips(text);
        match want {
            Some(pairs) => assert_eq!(got, Ok(pairs.iter().copied().collect()), "{text:?}"),
            None => assert!(got.is_err(), "{text:?}: {got:?}"),
        }
    }
    assert_eq!(
        key_of(MINIMAL, &[("KAFKA_DEDUP__INPUT__SKIP", "0:1,two")]),
        "input.skip"
    );
    let cfg = Config::from_toml_str(
        MINIMAL,
        Some([("KAFKA_DEDUP__INPUT__SKIP".to_string(), "2:9".to_string())].into()),
    )
    .unwrap();
    assert_eq!(parse_skips(&cfg.input.skip), Ok([(2, 9)].into_iter().collect()));
}

/// Issue 22, item 8: `message.max.bytes` set below the broker's default plus kafka-dedup's
/// headers is warned about; the default is not.
#[test]
fn a_producer_limit_below_the_brokers_is_warned_about() {
    let with = |v: &str| format!("[kafka.properties]\n\"message.max.bytes\" = {v}\n{MINIMAL}");
    let warned = |text: &str| {
        load(text)
            .unwrap()
            .kafka
            .warnings()
            .iter()
            .any(|w| w.contains("message.max.bytes"))
    };
    assert!(warned(&with("1000000")));
    assert!(!warned(&with("2000000")));
    assert!(!warned(MINIMAL));
}

/// A new user's trial: values of the wrong TOML type were converted without a word
/// (`generations = 3.5` became 4, `"3"` 3, `provenance = 0` false, `topic = 5` "5"); each is
/// refused naming its key, while the environment's strings are still converted and librdkafka's
/// properties still take any scalar.
#[test]
fn values_of_another_toml_type_are_refused_not_converted() {
    #[rustfmt::skip]
    let refused: &[(&str, &str, &str)] = &[
        // (the rest of the file, the key refused, the types named)
        ("[checkpoint]\ngenerations = 3.5\n", "checkpoint.generations", "expected an integer, found a float (3.5)"),
        ("[checkpoint]\ngenerations = 2.4\n", "checkpoint.generations", "found a float"),
        ("[checkpoint]\ngenerations = \"3\"\n", "checkpoint.generations", "expected an integer, found a string"),
        // (MINIMAL ends in its [output] table)
        ("provenance = \"on\"\n", "output.provenance", "expected a boolean, found a string"),
        ("provenance = 0\n", "output.provenance", "expected a boolean, found an integer (0)"),
        ("[http]\nlisten = 9000\n", "http.listen", "expected a string, found an integer"),
        ("[fingerprint.schema_registry]\ncache_schemas = true\n", "fingerprint.schema_registry.cache_schemas", "found a boolean"),
    ];
    for (rest, key, reason) in refused {
        let text = format!("{MINIMAL}{rest}");
        let err = load(&text).expect_err(rest);
        assert_eq!(err.key_name(), Some(*key), "{rest}: {err}");
        assert!(err.to_string().contains(reason), "{rest}: {err}");
    }
    // The output's topic is in MINIMAL: a number there instead.
    let text = MINIMAL.replace("topic = \"events.dedup\"", "topic = 5");
    let err = load(&text).expect_err("topic = 5");
    assert_eq!(err.key_name(), Some("output.topic"), "{err}");

    // Still accepted: the same values with their own types, the environment's strings, an
    // integer for a property given as a string elsewhere.
    let cfg = load(&format!(
        "{MINIMAL}[checkpoint]\ngenerations = 3\n[kafka.properties]\n\"linger.ms\" = 5\n\"enable.idempotence\" = true\n"
    ))
    .unwrap();
    assert_eq!(cfg.checkpoint.generations, 3);
    let env = [
        ("KAFKA_DEDUP__CHECKPOINT__GENERATIONS", "4"),
        ("KAFKA_DEDUP__OUTPUT__PROVENANCE", "false"),
    ]
    .iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    // The environment's value wins, and the file's value of the key it sets is not checked.
    let cfg = Config::from_toml_str(&format!("{MINIMAL}[checkpoint]\ngenerations = \"2\"\n"), Some(env)).unwrap();
    assert_eq!((cfg.checkpoint.generations, cfg.output.provenance), (4, false));
    // The config crate takes the environment's names in any case: so does the check.
    let env = [("kafka_dedup__checkpoint__generations", "5")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let cfg = Config::from_toml_str(&format!("{MINIMAL}[checkpoint]\ngenerations = \"2\"\n"), Some(env)).unwrap();
    assert_eq!(cfg.checkpoint.generations, 5);
}

/// A topic name Kafka refuses (`Topic.validate`) exits 2 naming the key, before anything
/// connects: the broker answers a metadata request for it `INVALID_TOPIC_EXCEPTION`, which the
/// start retried as a broker not ready, for ever (found by a reviewer).
#[test]
fn a_topic_name_kafka_refuses_is_a_configuration_error() {
    let text = |output: &str, extra: &str| {
        format!("[kafka]\nbootstrap_servers = \"b:9092\"\n[input]\ntopic = \"in\"\ngroup_id = \"g\"\n[output]\ntopic = \"{output}\"\n{extra}")
    };
    let long = "t".repeat(250);
    #[rustfmt::skip]
    let rows = [
        (text("orders v2", ""), "output.topic", "' '"),
        (text("a/b", ""), "output.topic", "'/'"),
        (text("..", ""), "output.topic", "\"..\""),
        (text(&long, ""), "output.topic", "249"),
        (text("out", "duplicates_topic = \"dup!\"\n"), "output.duplicates_topic", "'!'"),
        (text("out", "[store]\nchangelog_topic = \"ché\"\n"), "store.changelog_topic", "'é'"),
    ];
    for (text, key, says) in rows {
        let (k, reason) = key_and_reason(&text, &[]);
        assert_eq!(k, key, "{text}");
        assert!(reason.contains(says), "{key}: {reason}");
    }
    let ok = text(&"t".repeat(249), "duplicates_topic = \"a.b_c-D9\"\n");
    assert!(Config::from_toml_str(&ok, Some(Default::default())).is_ok());
}

use super::*;

/// A configuration of topics `i` -> `o` with `props` under `[kafka.properties]`.
fn cfg(props: &str) -> Config {
    Config::from_toml_str(
        &format!("[kafka.properties]\n{props}\n[input]\ntopic = \"i\"\n[output]\ntopic = \"o\"\n"),
        Some(Default::default()),
    )
    .unwrap()
}

/// Issue 22, item 8: the output's producer fits the output topic's `max.message.bytes`
/// (less the batch framing) unless `[kafka.properties]` sets the limits; the producers'
/// default takes what a broker at its default takes, plus the headers' room.
#[test]
fn the_output_producer_fits_the_output_topics_limit() {
    let fitted = |props: &str, limit: Option<usize>| {
        let cfg = cfg(props);
        let mut c = producer_config(&cfg);
        fit_to_topic(&mut c, &cfg, "o", limit, false, Kept::AsWritten);
        (
            c.get("message.max.bytes").map(str::to_string),
            c.get("batch.size").map(str::to_string),
        )
    };
    let s = |v: &str| Some(v.to_string());
    #[rustfmt::skip]
    let rows = [
        ("", None, (s("1049100"), None)),
        ("", Some(BROKER_MESSAGE_MAX_BYTES), (s("1048332"), s("1000000"))),
        ("", Some(100_000), (s("99744"), s("99744"))),
        ("", Some(500), (s("1000"), s("1000"))),
        ("\"message.max.bytes\" = 5000000", Some(100_000), (s("5000000"), s("99744"))),
        ("\"batch.size\" = 16384", Some(100_000), (s("99744"), s("16384"))),
    ];
    for (props, limit, want) in rows {
        assert_eq!(fitted(props, limit), want, "{props} {limit:?}");
    }
    assert_eq!(
        side_producer_config(&cfg("")).get("message.timeout.ms"),
        Some(SIDE_MESSAGE_TIMEOUT_MS)
    );
}

/// The route producer fits the route topic's limit even where `[kafka.properties]` sets a larger
/// `message.max.bytes` for the output (that setting turned the fit off, and a copy the route
/// topic refuses in a batch is fatal to the gapless producer); a smaller one is kept. A topic
/// that recompresses batches (its `compression.type` another codec than the producer's) leaves
/// room for the codec's growth.
#[test]
fn the_route_producer_fits_the_route_topics_limit_and_its_recompression() {
    let fitted = |props: &str, limit: usize, recompressed: bool| {
        let cfg = cfg(props);
        let mut c = producer_config(&cfg);
        fit_to_topic(&mut c, &cfg, "r", Some(limit), recompressed, Kept::BelowFit);
        c.get("message.max.bytes").map(str::to_string)
    };
    let s = |v: &str| Some(v.to_string());
    assert_eq!(fitted("", 2000, false), s("1744"));
    assert_eq!(fitted("\"message.max.bytes\" = 5000000", 2000, false), s("1744"));
    assert_eq!(fitted("\"message.max.bytes\" = 1500", 2000, false), s("1500"));
    // 1 MiB, recompressed: 1048576 - 256 - (8192 + 1024).
    assert_eq!(fitted("", 1_048_576, true), s("1039104"));
    let topic = |ct: &str| std::collections::BTreeMap::from([("compression.type".to_string(), ct.to_string())]);
    #[rustfmt::skip]
    let rows = [
        ("", "producer", false), ("", "uncompressed", false), ("", "lz4", true), ("", "zstd", true),
        ("\"compression.type\" = \"lz4\"", "lz4", false), ("\"compression.codec\" = \"zstd\"", "lz4", true),
        ("\"compression.type\" = \"gzip\"", "producer", false),
    ];
    for (props, ct, want) in rows {
        assert_eq!(recompresses(&topic(ct), &cfg(props)), want, "{props} / topic {ct}");
    }
    assert!(
        !recompresses(&Default::default(), &cfg("")),
        "not reported: not assumed"
    );
}

/// Vectors of Kafka's `UtilsTest.testMurmur2` (Java client).
#[test]
fn murmur2_matches_the_java_client() {
    assert_eq!(murmur2(b"21"), -973932308);
    assert_eq!(murmur2(b"foobar"), -790332482);
    assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
    assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
    assert_eq!(murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"), -58897971);
    assert_eq!(murmur2(b"abc"), 479470107);
}

/// The consumers' own defaults (the group's and the recovery's reader), each overridable under
/// `[kafka.properties]` and not given to the producer; librdkafka takes them as a whole:
/// - issue 25: `fetch.queue.backoff.ms` 10 ms, not librdkafka's 1 s, before fetching again a
///   partition whose local queue was full (a consumer catching up on a backlog);
/// - `receive.message.max.bytes` at librdkafka's largest ([`RECEIVE_MAX_BYTES`]): a zstd batch
///   past its own default decompressed stopped its partition.
#[test]
fn the_consumers_defaults() {
    #[rustfmt::skip]
    let rows = [
        ("fetch.queue.backoff.ms", "10", "200"),
        ("receive.message.max.bytes", RECEIVE_MAX_BYTES, "200000000"),
    ];
    for (key, default, set) in rows {
        for c in [consumer_config(&cfg("")), reader_config(&cfg(""))] {
            assert_eq!(c.get(key), Some(default), "{key}");
            let created: Result<BaseConsumer, KafkaError> = c.create();
            assert!(created.is_ok(), "librdkafka takes {key}: {:?}", created.err());
        }
        assert_eq!(producer_config(&cfg("")).get(key), None, "{key}");
        let props = cfg(&format!("\"{key}\" = \"{set}\""));
        assert_eq!(consumer_config(&props).get(key), Some(set), "{key}");
        assert_eq!(reader_config(&props).get(key), Some(set), "{key}");
    }
}

/// Each client gets the properties that concern it (no CONFWARN for the other kind); the
/// guarantees' own settings still win.
#[test]
fn properties_go_to_the_clients_they_concern() {
    let text = r#"
        [kafka.properties]
        "session.timeout.ms" = "6000"
        "linger.ms" = "20"
        "socket.timeout.ms" = "30000"
        "enable.auto.commit" = "false"
        [input]
        topic = "in"
        group_id = "g"
        [output]
        topic = "out"
    "#;
    let cfg = Config::from_toml_str(text, Some(Default::default())).unwrap();
    let (consumer, producer, reader) = (consumer_config(&cfg), producer_config(&cfg), reader_config(&cfg));
    assert_eq!(consumer.get("session.timeout.ms"), Some("6000"));
    assert_eq!(producer.get("session.timeout.ms"), None);
    assert_eq!(reader.get("session.timeout.ms"), Some("6000"));
    assert_eq!(producer.get("linger.ms"), Some("20"));
    assert_eq!(consumer.get("linger.ms"), None);
    assert_eq!(reader.get("linger.ms"), None);
    for c in [&consumer, &producer, &reader] {
        assert_eq!(c.get("socket.timeout.ms"), Some("30000"), "a property of both kinds");
    }
    assert_eq!(consumer.get("enable.auto.commit"), Some("false"), "enforced");
    assert_eq!(consumer.get("topic.metadata.refresh.interval.ms"), Some("30000"));
    assert!(CONSUMER_ONLY.iter().all(|k| !PRODUCER_ONLY.contains(k)));
}

/// Issue 16, item 6: settings librdkafka refuses only as a whole, when a client is created,
/// are found without connecting, naming the property.
#[test]
fn client_settings_are_checked_without_connecting() {
    let cfg = |props: &str| {
        let text = format!("[kafka]\nbootstrap_servers = \"127.0.0.1:1\"\n[kafka.properties]\n{props}\n[input]\ntopic = \"in\"\n[output]\ntopic = \"out\"\n");
        Config::from_toml_str(&text, Some(Default::default())).unwrap()
    };
    let started = std::time::Instant::now();
    check_clients(&cfg("")).unwrap();
    let e = check_clients(&cfg("acks = 0")).unwrap_err();
    assert_eq!(e.key_name(), Some("kafka.properties.acks"), "{e}");
    assert!(e.to_string().contains("idempotence"), "{e}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
}

/// Issue 21, item 3: `group.protocol = "consumer"` (KIP-848). The consumer kafka-dedup builds
/// from the configuration is created by librdkafka (as `run` and `check-config` do, without
/// connecting), and a property that protocol refuses is a configuration error naming it.
/// Each row: the `[kafka.properties]`, then `Ok(())` or the key of the error.
#[test]
fn group_protocols_and_the_properties_they_refuse() {
    let rows: &[(&str, Result<(), &str>)] = &[
        ("", Ok(())),
        (
            "\"group.protocol\" = \"classic\"\n\"session.timeout.ms\" = 6000\n\"heartbeat.interval.ms\" = 500",
            Ok(()),
        ),
        (
            "\"group.protocol\" = \"classic\"\n\"partition.assignment.strategy\" = \"range\"",
            Ok(()),
        ),
        ("\"group.protocol\" = \"consumer\"", Ok(())),
        ("\"group.protocol\" = \"CONSUMER\"", Ok(())),
        (
            "\"group.protocol\" = \"consumer\"\n\"group.remote.assignor\" = \"range\"",
            Ok(()),
        ),
        (
            "\"group.protocol\" = \"consumer\"\n\"session.timeout.ms\" = 6000",
            Err("kafka.properties.session.timeout.ms"),
        ),
        (
            "\"group.protocol\" = \"consumer\"\n\"heartbeat.interval.ms\" = 500",
            Err("kafka.properties.heartbeat.interval.ms"),
        ),
        (
            "\"group.protocol\" = \"consumer\"\n\"partition.assignment.strategy\" = \"cooperative-sticky\"",
            Err("kafka.properties.partition.assignment.strategy"),
        ),
        (
            "\"group.protocol\" = \"consumer\"\n\"group.protocol.type\" = \"consumer\"",
            Err("kafka.properties.group.protocol.type"),
        ),
    ];
    for (props, expected) in rows {
        let text = format!("[kafka.properties]\n{props}\n[input]\ntopic = \"in\"\n[output]\ntopic = \"out\"\n");
        let got = Config::from_toml_str(&text, Some(Default::default())).and_then(|cfg| {
            check_clients(&cfg)?;
            Ok(cfg)
        });
        match (expected, &got) {
            (Ok(()), Ok(cfg)) => {
                let consumer = consumer_config(cfg);
                let classic = !props.to_ascii_lowercase().contains("\"consumer\"");
                let strategy = consumer.get("partition.assignment.strategy");
                assert_eq!(strategy.is_some(), classic, "{props}: {strategy:?}");
            }
            (Err(key), Err(e)) => {
                assert_eq!(e.key_name(), Some(*key), "{props}: {e}");
                assert!(e.to_string().contains("group.protocol"), "{props}: says why: {e}");
            }
            _ => panic!("{props}: expected {expected:?}, got {:?}", got.map(drop)),
        }
    }
}

/// The generation read back from librdkafka's own serialization, and other formats refused.
#[test]
fn the_generation_is_read_from_librdkafkas_group_metadata() {
    use rdkafka::bindings as rd;
    for generation in [-1, 0, 1, 7, i32::MAX] {
        // SAFETY: the strings outlive the call; the metadata and the buffer are freed here.
        let bytes = unsafe {
            let (group, member, instance) = (c"g", c"m-1", c"pod-0");
            let md = rd::rd_kafka_consumer_group_metadata_new_with_genid(
                group.as_ptr(),
                generation,
                member.as_ptr(),
                instance.as_ptr(),
            );
            let (mut buf, mut size) = (std::ptr::null_mut(), 0usize);
            assert!(rd::rd_kafka_consumer_group_metadata_write(md, &mut buf, &mut size).is_null());
            rd::rd_kafka_consumer_group_metadata_destroy(md);
            let bytes = std::slice::from_raw_parts(buf as *const u8, size).to_vec();
            rd::rd_kafka_mem_free(std::ptr::null_mut(), buf);
            bytes
        };
        assert_eq!(generation_of(&bytes), Some(generation));
    }
    assert_eq!(generation_of(b"CGMDv1:\x01\0\0\0g\0"), None);
    assert_eq!(generation_of(b"CGMDv2:\x01"), None);
}

/// Placed by murmur2, by CRC-32, by both, by neither, whichever partitioner is tried first: the
/// answer is the same, and the hint becomes the one that placed the key.
#[test]
fn key_placement() {
    let n = 6;
    let murmur = |k: &[u8]| ((murmur2(k) as u32 & 0x7fff_ffff) % n) as i32;
    let crc = |k: &[u8]| (crc32fast::hash(k) % n) as i32;
    let key = b"k";
    let (p, q) = (murmur(key), crc(key));
    assert_ne!(p, q, "the key must tell the two apart");
    let other = (0..n as i32).find(|x| *x != p && *x != q).unwrap();
    // A key both place in one partition.
    let both = (0..1000u32)
        .map(|i| format!("key-{i}"))
        .find(|k| murmur(k.as_bytes()) == crc(k.as_bytes()))
        .unwrap();
    let rows: [(&[u8], i32, KeyHash, bool, KeyHash); 8] = [
        (key, p, KeyHash::Murmur2, true, KeyHash::Murmur2),
        (key, p, KeyHash::Crc32, true, KeyHash::Murmur2),
        (key, q, KeyHash::Murmur2, true, KeyHash::Crc32),
        (key, q, KeyHash::Crc32, true, KeyHash::Crc32),
        (key, other, KeyHash::Murmur2, false, KeyHash::Murmur2),
        (key, other, KeyHash::Crc32, false, KeyHash::Crc32),
        (
            both.as_bytes(),
            murmur(both.as_bytes()),
            KeyHash::Crc32,
            true,
            KeyHash::Crc32,
        ),
        (
            both.as_bytes(),
            murmur(both.as_bytes()),
            KeyHash::Murmur2,
            true,
            KeyHash::Murmur2,
        ),
    ];
    for (k, partition, first, placed, then) in rows {
        let mut hint = first;
        assert_eq!(
            key_placed_in(k, partition, n as usize, &mut hint),
            placed,
            "{k:?} {partition} {first:?}"
        );
        assert_eq!(hint, then, "{k:?} {partition} {first:?}");
    }
    assert!(
        key_placed_in(key, 5, 0, &mut KeyHash::Murmur2),
        "no partition count known"
    );
}

/// A reviewer reading librdkafka: its producer's `allow.auto.create.topics` defaults to true
/// (the consumer's to false), and a metadata request of a client so set creates the topic it
/// names on a broker with `auto.create.topics.enable` (Apache Kafka's default): kafka-dedup's
/// producer, which asks for the input's and the output's metadata, would have created again an
/// output topic deleted while it ran (with the broker's `num.partitions`). librdkafka's mock
/// cluster creates a topic a metadata request so allows; each client kafka-dedup makes asks for
/// one that does not exist, and it still does not.
#[test]
fn no_client_creates_a_topic() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::producer::Producer;
    let cluster = MockCluster::new(1).unwrap();
    let mut cfg = cfg("");
    cfg.kafka.bootstrap_servers = cluster.bootstrap_servers();
    let t = Duration::from_secs(5);
    let producer: BaseProducer = producer_config(&cfg).create().unwrap();
    let side: BaseProducer = side_producer_config(&cfg).create().unwrap();
    let consumer: BaseConsumer = consumer_config(&cfg).create().unwrap();
    let reader: BaseConsumer = reader_config(&cfg).create().unwrap();
    type Ask<'a> = Box<dyn Fn(&str) + 'a>;
    let asks: [(&str, Ask); 4] = [
        (
            "producer",
            Box::new(|topic| drop(producer.client().fetch_metadata(Some(topic), t))),
        ),
        (
            "side producer",
            Box::new(|topic| drop(side.client().fetch_metadata(Some(topic), t))),
        ),
        (
            "consumer",
            Box::new(|topic| drop(consumer.fetch_metadata(Some(topic), t))),
        ),
        ("reader", Box::new(|topic| drop(reader.fetch_metadata(Some(topic), t)))),
    ];
    for (name, ask) in asks {
        let topic = format!("absent-{}", name.replace(' ', "-"));
        ask(&topic);
        let md = reader.fetch_metadata(Some(&topic), t).unwrap();
        let error = md
            .topics()
            .first()
            .and_then(|m| m.error())
            .map(rdkafka::types::RDKafkaErrorCode::from);
        assert_eq!(
            error,
            Some(rdkafka::types::RDKafkaErrorCode::UnknownTopicOrPartition),
            "the {name}'s metadata request created {topic}"
        );
    }
}

/// A reviewer reading librdkafka: any topic-level error in a metadata answer read as "the topic
/// does not exist", so a topic just created whose leaders were still being elected
/// (`LEADER_NOT_AVAILABLE`, a compose stack starting) stopped the start with exit 2 ("kafka-dedup
/// does not create topics"), and one the principal may not describe said the same. On
/// librdkafka's mock cluster: unknown is missing, an election is an error the start retries
/// (`TopicError::Kafka`), an authorization failure is named.
#[test]
fn a_topic_level_metadata_error_is_not_a_missing_topic() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::RDKafkaRespErr::*;
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("i", 2, 1).unwrap();
    cluster.create_topic("o", 2, 1).unwrap();
    let mut cfg = cfg("");
    cfg.kafka.bootstrap_servers = cluster.bootstrap_servers();
    let reader: BaseConsumer = reader_config(&cfg).create().unwrap();
    let check_with = |cfg: &Config| check_topics(&reader, cfg, Duration::from_secs(5));
    let check = || check_with(&cfg);
    assert_eq!(check().unwrap(), (2, 2));
    cluster
        .topic_error("o", RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE)
        .unwrap();
    match check() {
        Err(TopicError::Kafka(e)) => assert_eq!(
            e.rdkafka_error_code(),
            Some(rdkafka::types::RDKafkaErrorCode::LeaderNotAvailable)
        ),
        other => panic!("a leader being elected: {other:?}"),
    }
    cluster
        .topic_error("o", RD_KAFKA_RESP_ERR_TOPIC_AUTHORIZATION_FAILED)
        .unwrap();
    match check() {
        Err(
            e @ TopicError::NotAuthorized {
                key: "output.topic", ..
            },
        ) => {
            assert!(e.to_string().contains("not authorized"), "{e}")
        }
        other => panic!("not authorized: {other:?}"),
    }
    cluster.topic_error("o", RD_KAFKA_RESP_ERR_NO_ERROR).unwrap();
    assert_eq!(check().unwrap(), (2, 2));
    let absent = Config {
        output: crate::config::OutputConfig {
            topic: "absent".into(),
            ..cfg.output.clone()
        },
        ..cfg.clone()
    };
    match check_with(&absent) {
        Err(TopicError::Missing {
            key: "output.topic", ..
        }) => {}
        other => panic!("missing: {other:?}"),
    }
}

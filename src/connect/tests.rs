//! Tests of `check-config --connect`'s checks: the reports' wording, the TCP probe, the committed
//! offsets' fetch on librdkafka's mock cluster.

use super::*;

fn cfg(extra: &str) -> Config {
    let text = format!(
        "[kafka]\nbootstrap_servers = \"127.0.0.1:1\"\n[input]\ntopic = \"in\"\n[output]\ntopic = \"out\"\n{extra}"
    );
    Config::from_toml_str(&text, Some(Default::default())).unwrap()
}

fn fact(key: &'static str, topic: &str, partitions: Option<usize>, ops: Option<&[i32]>) -> TopicFacts {
    TopicFacts {
        key,
        topic: topic.into(),
        partitions,
        error: None,
        operations: ops.map(<[i32]>::to_vec),
    }
}

/// Which OffsetFetch errors are asked again: the coordinator's three "not ready yet" codes;
/// not an authorization failure, an unknown group or a timeout.
#[test]
fn the_coordinator_not_ready_is_asked_again() {
    use rdkafka::types::RDKafkaErrorCode as E;
    for (code, again) in [
        (E::NotCoordinator, true),
        (E::CoordinatorLoadInProgress, true),
        (E::CoordinatorNotAvailable, true),
        (E::GroupAuthorizationFailed, false),
        (E::InvalidGroupId, false),
        (E::OperationTimedOut, false),
        (E::UnknownTopicOrPartition, false),
    ] {
        assert_eq!(kafka::coordinator_not_ready(code), again, "{code:?}");
    }
}

/// A new user's first `check-config --connect` right after the broker started: the
/// coordinator answered `NOT_COORDINATOR` and the check failed. On librdkafka's mock cluster
/// (whose DescribeTopics lacks a controller, so the fetch alone): four "not ready" answers,
/// then the offsets; an authorization failure is returned at once.
#[test]
fn committed_offsets_wait_for_a_coordinator_still_loading() {
    use rdkafka::mocking::MockCluster;
    use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr::*};
    let cluster = MockCluster::new(1).unwrap();
    cluster.create_topic("in", 2, 1).unwrap();
    let mut cfg = cfg("");
    cfg.kafka.bootstrap_servers = cluster.bootstrap_servers();
    let tpl = || {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition("in", 0);
        tpl.add_partition("in", 1);
        tpl
    };
    cluster.request_errors(
        RDKafkaApiKey::OffsetFetch,
        &[
            RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
            RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
            RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
            RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
        ],
    );
    let got = fetch_committed(&cfg, "g", tpl()).expect("fetched once the coordinator is ready");
    assert_eq!(got.count(), 2);
    cluster.request_errors(
        RDKafkaApiKey::OffsetFetch,
        &[RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED; 3],
    );
    let started = std::time::Instant::now();
    let err = fetch_committed(&cfg, "g", tpl()).expect_err("not authorized");
    assert_eq!(
        err.rdkafka_error_code(),
        Some(rdkafka::types::RDKafkaErrorCode::GroupAuthorizationFailed)
    );
    assert!(started.elapsed() < kafka::COORDINATOR_WAIT, "{:?}", started.elapsed());
}

/// Each row: the facts, the problems expected (substrings, in order), the warnings count.
#[test]
fn problems_name_the_key_and_what_is_wrong() {
    let rw: &[i32] = &[ACL_READ, ACL_WRITE, 8];
    let c = cfg("");
    let rows: Vec<(&str, Vec<TopicFacts>, Vec<&str>, usize)> = vec![
        (
            "clean",
            vec![
                fact("input.topic", "in", Some(3), Some(rw)),
                fact("output.topic", "out", Some(3), Some(rw)),
            ],
            vec![],
            0,
        ),
        (
            "ALL grants both",
            vec![
                fact("input.topic", "in", Some(3), Some(&[ACL_ALL])),
                fact("output.topic", "out", Some(3), Some(&[ACL_ALL])),
            ],
            vec![],
            0,
        ),
        (
            "output missing",
            vec![
                fact("input.topic", "in", Some(3), Some(rw)),
                fact("output.topic", "out", None, None),
            ],
            vec!["topic \"out\" (output.topic) does not exist"],
            0,
        ),
        (
            "fewer output partitions",
            vec![
                fact("input.topic", "in", Some(3), Some(rw)),
                fact("output.topic", "out", Some(2), Some(rw)),
            ],
            vec!["output.topic \"out\" has 2 partitions, input.topic \"in\" 3"],
            0,
        ),
        (
            "more output partitions: a warning",
            vec![
                fact("input.topic", "in", Some(2), Some(rw)),
                fact("output.topic", "out", Some(3), Some(rw)),
            ],
            vec![],
            1,
        ),
        (
            "output read-only, input write-only",
            vec![
                fact("input.topic", "in", Some(3), Some(&[ACL_WRITE])),
                fact("output.topic", "out", Some(3), Some(&[ACL_READ])),
            ],
            vec![
                "topic \"in\" (input.topic): the principal may not read it",
                "topic \"out\" (output.topic): the principal may not write to it",
            ],
            0,
        ),
        (
            "operations not reported",
            vec![
                fact("input.topic", "in", Some(3), None),
                fact("output.topic", "out", Some(3), None),
            ],
            vec![],
            2,
        ),
    ];
    for (name, facts, want, warnings) in rows {
        let (p, w, _) = judge(&c, &facts);
        assert_eq!(p.len(), want.len(), "{name}: {p:?}");
        for (got, want) in p.iter().zip(&want) {
            assert!(got.contains(want), "{name}: {got}");
        }
        assert_eq!(w.len(), warnings, "{name}: {w:?}");
    }
    // The global scope: the output mirrors the route topic, whatever the input's count.
    let g = cfg("[fingerprint]\nscope = \"global\"\nroute_topic = \"r\"\n");
    let global = |i: usize, r: usize, o: usize| {
        judge(
            &g,
            &[
                fact("input.topic", "in", Some(i), Some(rw)),
                fact("fingerprint.route_topic", "r", Some(r), Some(rw)),
                fact("output.topic", "out", Some(o), Some(rw)),
            ],
        )
    };
    let (p, w, _) = global(4, 3, 3);
    assert!(p.is_empty() && w.is_empty(), "input 4, route 3, output 3: {p:?} {w:?}");
    let (p, _, _) = global(3, 4, 3);
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(
        p[0].contains("output.topic \"out\" has 3 partitions, fingerprint.route_topic \"r\" 4"),
        "{p:?}"
    );
    let (p, w, _) = global(3, 3, 4);
    assert!(p.is_empty() && w.len() == 1, "{p:?} {w:?}");
    let mut err = fact("input.topic", "in", None, None);
    err.error = Some("Broker: Topic authorization failed".into());
    let (p, _, _) = judge(&c, &[err, fact("output.topic", "out", Some(3), Some(rw))]);
    assert_eq!(
        p,
        vec!["topic \"in\" (input.topic): Broker: Topic authorization failed".to_string()]
    );
}

/// Each permission checked and held is said, one line per topic (a broker without an
/// authorizer reports every operation a topic supports: they hold, and check-config said
/// nothing about them).
#[test]
fn permissions_held_are_said() {
    let c = cfg("duplicates_topic = \"d\"\n");
    let rw: &[i32] = &[ACL_READ, ACL_WRITE, 8];
    let facts = [
        fact("input.topic", "in", Some(3), Some(rw)),
        fact("output.topic", "out", Some(3), Some(&[ACL_ALL])),
        fact("output.duplicates_topic", "d", Some(3), Some(&[ACL_READ])),
    ];
    let (problems, _, held) = judge(&c, &facts);
    assert_eq!(
        held,
        [
            "topic \"in\" (input.topic): the principal may read it (READ in its authorized operations)",
            "topic \"out\" (output.topic): the principal may read and write to it (ALL in its authorized operations)",
        ]
    );
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(problems[0].contains("topic \"d\" (output.duplicates_topic): the principal may not write to it"));
    let (_, _, held) = judge(&c, &[fact("input.topic", "in", Some(3), None)]);
    assert!(held.is_empty(), "not reported: not held either: {held:?}");
}

#[test]
fn required_topics_follow_the_configuration() {
    let keys = |c: &Config| required(c).into_iter().map(|(k, _, _)| k).collect::<Vec<_>>();
    assert_eq!(keys(&cfg("")), ["input.topic", "output.topic"]);
    let c = cfg("duplicates_topic = \"d\"\n[fingerprint]\nscope = \"global\"\nroute_topic = \"r\"\n");
    assert_eq!(
        keys(&c),
        [
            "input.topic",
            "output.topic",
            "output.duplicates_topic",
            "fingerprint.route_topic"
        ]
    );
}

/// A new user's trial: `check-config --connect` on a port where nothing listens said only
/// "Failed while waiting for controller: Local: Timed out", never that the connection was
/// refused. Port 1 of the loopback: nothing listens there.
#[test]
fn unreachable_brokers_are_reported_with_why() {
    let report = check(&cfg(""));
    let problem = report.problems.first().expect("a problem");
    assert!(problem.contains("did not answer"), "{problem}");
    assert!(problem.contains("Connection refused"), "{problem}");
}

/// A server that takes a TCP connection is not named; one that refuses it is, with why.
#[test]
fn unreachable_servers_are_those_refusing_a_connection() {
    let listening = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let open = listening.local_addr().unwrap().to_string();
    assert!(unreachable_servers(&open).is_empty());
    let found = unreachable_servers(&format!("{open}, PLAINTEXT://127.0.0.1:1"));
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("PLAINTEXT://127.0.0.1:1: no TCP connection: "),
        "{found:?}"
    );
    // A name of several addresses (`localhost`: ::1 first, where nothing listens) is
    // reachable when one takes the connection, as librdkafka tries them in turn.
    let port = listening.local_addr().unwrap().port();
    assert!(unreachable_servers(&format!("localhost:{port}")).is_empty());
}

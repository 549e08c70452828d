//! `kafka-dedup check-config --connect`: reaches the brokers with the configured clients' settings
//! and checks what `run` needs of them (issue 23 item 8), reporting every problem at once.
//!
//! Checked: the brokers answer; every configured topic exists (input, output, side topics, the
//! route topic of the global scope); with `output.partitioning = "preserve"` the output has as
//! many partitions as the input (fewer: the extra input partitions are held; more: the extra
//! output partitions stay empty, a warning); the principal's authorized operations on each
//! topic (Kafka's DescribeTopics with `include_authorized_operations`, KIP-430: no permission to
//! describe ACLs is needed) include READ on the topics it consumes (input, output for recovery,
//! route) and WRITE on those it produces to (output, side topics, route); the group coordinator
//! answers a committed-offsets fetch for `input.group_id` (and `<group>-global`), asked again
//! while it is not ready ([`kafka::coordinator_not_ready`]). Not checked:
//! READ on the group itself (a commit would write an offset; the fetch needs only DESCRIBE), a
//! transactional id's permission (`init_transactions` would fence a running instance), and the
//! topics' configuration (retention, `max.message.bytes`).

use std::ffi::{CStr, CString};
use std::time::Duration;

use std::sync::Mutex;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::{Offset, TopicPartitionList};

use crate::config::{Config, Partitioning, Scope};
use crate::kafka;

/// Timeout of each request.
const TIMEOUT: Duration = Duration::from_secs(10);

/// What a topic must allow the principal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Consume (and fetch its offsets).
    Read,
    /// Produce.
    Write,
}

/// What the brokers said of one configured topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicFacts {
    /// Its configuration key (`input.topic`, ...).
    pub key: &'static str,
    /// The topic.
    pub topic: String,
    /// Partition count; `None`: it does not exist, or `error` says why it is not known.
    pub partitions: Option<usize>,
    /// The broker's error for it (not authorized to describe, ...), if any.
    pub error: Option<String>,
    /// The principal's authorized operations, as librdkafka's `rd_kafka_AclOperation_t` values;
    /// `None` when the broker did not report them.
    pub operations: Option<Vec<i32>>,
}

/// Operations (librdkafka's `RD_KAFKA_ACL_OPERATION_*`) granted by `ALL`.
const ACL_ALL: i32 = 2;
/// `RD_KAFKA_ACL_OPERATION_READ`.
const ACL_READ: i32 = 3;
/// `RD_KAFKA_ACL_OPERATION_WRITE`.
const ACL_WRITE: i32 = 4;

/// The topics `cfg` names, each with its key and what `run` does with it.
pub fn required(cfg: &Config) -> Vec<(&'static str, String, Vec<Operation>)> {
    use Operation::{Read, Write};
    let mut t = vec![
        ("input.topic", cfg.input.topic.clone(), vec![Read]),
        ("output.topic", cfg.output.topic.clone(), vec![Read, Write]),
    ];
    for (key, topic) in [
        ("output.duplicates_topic", &cfg.output.duplicates_topic),
        ("fingerprint.dead_letter_topic", &cfg.fingerprint.dead_letter_topic),
    ] {
        if !topic.is_empty() {
            t.push((key, topic.clone(), vec![Write]));
        }
    }
    if cfg.fingerprint.scope == Scope::Global {
        t.push((
            "fingerprint.route_topic",
            cfg.fingerprint.route_topic.clone(),
            vec![Read, Write],
        ));
    }
    t
}

/// The problems (each a sentence naming the key), warnings and permissions held (a line per
/// topic whose authorized operations grant what `run` does with it) of `facts` for `cfg`: a
/// pure function of what the brokers said. The partition-count rule comes from
/// `output.partitioning = "preserve"` (input partition N goes to output partition N).
pub fn judge(cfg: &Config, facts: &[TopicFacts]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let (mut problems, mut warnings, mut held) = (Vec::new(), Vec::new(), Vec::new());
    let needs = required(cfg);
    for f in facts {
        let (topic, key) = (&f.topic, f.key);
        match (&f.error, f.partitions) {
            (Some(e), _) => problems.push(format!("topic \"{topic}\" ({key}): {e}")),
            (None, None) => problems.push(format!(
                "topic \"{topic}\" ({key}) does not exist; kafka-dedup does not create topics"
            )),
            (None, Some(_)) => {}
        }
        let wanted = needs
            .iter()
            .find(|(k, _, _)| *k == key)
            .map(|n| n.2.clone())
            .unwrap_or_default();
        match &f.operations {
            Some(ops) if f.error.is_none() => {
                let verb = |op: Operation| if op == Operation::Read { "read" } else { "write to" };
                let name = |op: Operation| if op == Operation::Read { "READ" } else { "WRITE" };
                let (mut verbs, mut names) = (Vec::new(), Vec::new());
                for op in wanted {
                    let code = if op == Operation::Read { ACL_READ } else { ACL_WRITE };
                    if ops.contains(&code) || ops.contains(&ACL_ALL) {
                        verbs.push(verb(op));
                        names.push(if ops.contains(&code) { name(op) } else { "ALL" });
                    } else {
                        problems.push(format!(
                            "topic \"{topic}\" ({key}): the principal may not {} it (no {} in its authorized operations)",
                            verb(op),
                            name(op),
                        ));
                    }
                }
                if !verbs.is_empty() {
                    names.dedup();
                    held.push(format!(
                        "topic \"{topic}\" ({key}): the principal may {} it ({} in its authorized operations)",
                        verbs.join(" and "),
                        names.join(", ")
                    ));
                }
            }
            None if f.error.is_none() && f.partitions.is_some() => warnings.push(format!(
                "topic \"{topic}\" ({key}): the broker did not report the principal's authorized operations; READ/WRITE not checked"
            )),
            _ => {}
        }
    }
    let count = |key: &str| facts.iter().find(|f| f.key == key).and_then(|f| f.partitions);
    // The topic the output mirrors partition by partition: the input, or in the global scope the
    // route topic (the filter stage's input; the input's count does not matter there).
    let (from_key, from_topic) = match cfg.fingerprint.scope {
        Scope::Global => ("fingerprint.route_topic", &cfg.fingerprint.route_topic),
        _ => ("input.topic", &cfg.input.topic),
    };
    if cfg.output.partitioning == Partitioning::Preserve {
        if let (Some(i), Some(o)) = (count(from_key), count("output.topic")) {
            if o < i {
                problems.push(format!(
                    "output.topic \"{}\" has {o} partitions, {from_key} \"{from_topic}\" {i}: with output.partitioning = \
                     \"preserve\" partitions {o} and above of {from_key} would be held; add partitions to the output",
                    cfg.output.topic
                ));
            } else if o > i {
                warnings.push(format!(
                    "output.topic \"{}\" has {o} partitions, {from_key} \"{from_topic}\" {i}: partitions {i} and above \
                     of the output stay empty (output.partitioning = \"preserve\")",
                    cfg.output.topic
                ));
            }
        }
    }
    (problems, warnings, held)
}

/// The client context of the checks: keeps the last error librdkafka reported on its own (a
/// refused SASL authentication, a TLS handshake, a connection refused), which a request that
/// only times out does not name. Error events reach [`error`](rdkafka::client::ClientContext::error)
/// only when the client's queue is polled, which the checks' own requests do not do; librdkafka's
/// log lines of error level (`FAIL`: "Connect to ipv4#127.0.0.1:1 failed: Connection
/// refused") come from its threads at once, and are kept too (and logged as every client's).
#[derive(Default)]
struct LastError(Mutex<Option<String>>, crate::kafka::Throttle);

impl rdkafka::client::ClientContext for LastError {
    fn error(&self, error: rdkafka::error::KafkaError, reason: &str) {
        if let Ok(mut last) = self.0.lock() {
            *last = Some(format!("{error}: {reason}"));
        }
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        use rdkafka::config::RDKafkaLogLevel as L;
        // Error level only: a warning (a deprecated property's CONFWARN) is no reason.
        if matches!(level, L::Emerg | L::Alert | L::Critical | L::Error) {
            if let Ok(mut last) = self.0.lock() {
                *last = Some(format!("{fac} {log_message}"));
            }
        }
        crate::kafka::logs::log_client_line(&self.1, level, fac, log_message);
    }
}

impl ConsumerContext for LastError {}

/// Each `host:port` of `bootstrap` (comma-separated, as `bootstrap.servers`) that a TCP
/// connection cannot reach within 2 s, with why ("127.0.0.1:9099: no TCP connection: Connection
/// refused (os error 111)", or the name not resolving): said when the brokers did not answer,
/// since librdkafka's own error is then often only a timeout, and its log line of the refused
/// connection comes only when it tried to connect before the request gave up. A server that
/// takes the connection is not named (its trouble is elsewhere: TLS, SASL, the listener's
/// advertised address).
fn unreachable_servers(bootstrap: &str) -> Vec<String> {
    use std::net::{TcpStream, ToSocketAddrs};
    bootstrap
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .filter_map(|server| {
            // librdkafka's form may carry a protocol prefix (`SASL_SSL://host:port`) and leave
            // out the port (9092).
            let addr = server.rsplit("://").next().unwrap_or(server);
            let with_port = match addr.rsplit_once(':') {
                Some((_, port)) if port.parse::<u16>().is_ok() => addr.to_string(),
                _ => format!("{addr}:9092"),
            };
            let all: Vec<_> = match with_port.to_socket_addrs() {
                Ok(all) => all.collect(),
                Err(e) => return Some(format!("{server}: does not resolve: {e}")),
            };
            // Reachable if any address takes the connection (`localhost` is ::1 and 127.0.0.1),
            // as librdkafka tries them in turn.
            let mut last = None;
            for a in &all {
                match TcpStream::connect_timeout(a, Duration::from_secs(2)) {
                    Ok(_) => return None,
                    Err(e) => last = Some(e),
                }
            }
            Some(match last {
                Some(e) => format!("{server}: no TCP connection: {e}"),
                None => format!("{server}: resolves to no address"),
            })
        })
        .collect()
}

/// DescribeTopics with the principal's authorized operations, through `client`'s handle.
/// Errors: the request failed as a whole (the brokers cannot be reached), with librdkafka's text.
fn describe_topics<C: ConsumerContext>(
    client: &BaseConsumer<C>,
    topics: &[(&'static str, String)],
) -> Result<Vec<TopicFacts>, String> {
    use rdkafka::bindings as rd;
    let rk = client.client().native_ptr();
    let names: Vec<CString> = topics
        .iter()
        .map(|(_, t)| CString::new(t.as_str()).map_err(|_| format!("topic \"{t}\": a NUL byte")))
        .collect::<Result<_, _>>()?;
    let mut ptrs: Vec<*const std::os::raw::c_char> = names.iter().map(|n| n.as_ptr()).collect();
    let mut errstr = [0 as std::os::raw::c_char; 256];
    // SAFETY: every pointer passed is valid for the call (`rk` lives as long as `client`, the
    // names as long as `names`); each object created here is destroyed here, once, after its
    // last use; the event's results are read before the event is destroyed.
    unsafe {
        let queue = rd::rd_kafka_queue_new(rk);
        let opts = rd::rd_kafka_AdminOptions_new(rk, rd::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS);
        rd::rd_kafka_AdminOptions_set_request_timeout(
            opts,
            TIMEOUT.as_millis() as i32,
            errstr.as_mut_ptr(),
            errstr.len(),
        );
        let _ = rd::rd_kafka_AdminOptions_set_include_authorized_operations(opts, 1);
        let collection = rd::rd_kafka_TopicCollection_of_topic_names(ptrs.as_mut_ptr(), ptrs.len());
        rd::rd_kafka_DescribeTopics(rk, collection, opts, queue);
        let event = rd::rd_kafka_queue_poll(queue, (TIMEOUT.as_millis() + 5_000) as i32);
        let result = if event.is_null() {
            Err("no answer from the brokers".to_string())
        } else if rd::rd_kafka_event_error(event) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            Err(CStr::from_ptr(rd::rd_kafka_event_error_string(event))
                .to_string_lossy()
                .into_owned())
        } else {
            let res = rd::rd_kafka_event_DescribeTopics_result(event);
            let mut n = 0usize;
            let descs = rd::rd_kafka_DescribeTopics_result_topics(res, &mut n);
            let mut facts = Vec::new();
            for i in 0..n {
                let d = *descs.add(i);
                let name = CStr::from_ptr(rd::rd_kafka_TopicDescription_name(d))
                    .to_string_lossy()
                    .into_owned();
                let Some((key, _)) = topics.iter().find(|(_, t)| *t == name) else {
                    continue;
                };
                let err = rd::rd_kafka_TopicDescription_error(d);
                let code = if err.is_null() {
                    rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                } else {
                    rd::rd_kafka_error_code(err)
                };
                let (partitions, error) = match code {
                    rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR => {
                        let mut pn = 0usize;
                        rd::rd_kafka_TopicDescription_partitions(d, &mut pn);
                        (Some(pn), None)
                    }
                    rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART => (None, None),
                    _ => (
                        None,
                        Some(
                            CStr::from_ptr(rd::rd_kafka_error_string(err))
                                .to_string_lossy()
                                .into_owned(),
                        ),
                    ),
                };
                let mut on = 0usize;
                let ops = rd::rd_kafka_TopicDescription_authorized_operations(d, &mut on);
                let operations =
                    (!ops.is_null() && on > 0).then(|| (0..on).map(|j| *ops.add(j) as i32).collect::<Vec<i32>>());
                facts.push(TopicFacts {
                    key,
                    topic: name,
                    partitions,
                    error,
                    operations,
                });
            }
            Ok(facts)
        };
        if !event.is_null() {
            rd::rd_kafka_event_destroy(event);
        }
        rd::rd_kafka_TopicCollection_destroy(collection);
        rd::rd_kafka_AdminOptions_destroy(opts);
        rd::rd_kafka_queue_destroy(queue);
        result
    }
}

/// The committed offsets of `tpl` for `group`, asked with `cfg`'s client settings; asked again
/// while the coordinator is not ready ([`kafka::committed_when_ready`]).
fn fetch_committed(
    cfg: &Config,
    group: &str,
    tpl: TopicPartitionList,
) -> rdkafka::error::KafkaResult<TopicPartitionList> {
    let client = kafka::reader_config(cfg)
        .set("group.id", group)
        .create::<BaseConsumer>()?;
    kafka::committed_when_ready(&client, &tpl, TIMEOUT)
}

/// What `check-config --connect` found: the problems (exit 1 when any) and warnings, and one
/// line per check that passed.
#[derive(Debug, Default)]
pub struct Report {
    /// Each a sentence naming the key.
    pub problems: Vec<String>,
    /// Worth knowing, not wrong.
    pub warnings: Vec<String>,
    /// What was checked and held.
    pub passed: Vec<String>,
}

/// Runs the checks of this module against `cfg`'s brokers. Every problem found is in the report
/// (a broker that cannot be reached is one, and the checks that need it are skipped).
pub fn check(cfg: &Config) -> Report {
    let mut report = Report::default();
    let client: BaseConsumer<LastError> = match kafka::reader_config(cfg).create_with_context(LastError::default()) {
        Ok(c) => c,
        Err(e) => {
            report.problems.push(format!("kafka: cannot create a client: {e}"));
            return report;
        }
    };
    let needs = required(cfg);
    let topics: Vec<(&'static str, String)> = needs.iter().map(|(k, t, _)| (*k, t.clone())).collect();
    let facts = match describe_topics(&client, &topics) {
        Ok(f) => f,
        Err(e) => {
            // The request's own error is often only a timeout; the client's last error says why.
            let mut why = match client.context().0.lock().ok().and_then(|l| l.clone()) {
                Some(last) => format!("{e} (the client's last error: {last})"),
                None => e,
            };
            for unreachable in unreachable_servers(&cfg.kafka.bootstrap_servers) {
                why.push_str(&format!("; {unreachable}"));
            }
            report.problems.push(format!(
                "kafka.bootstrap_servers \"{}\": the brokers did not answer: {why}",
                cfg.kafka.bootstrap_servers
            ));
            return report;
        }
    };
    report
        .passed
        .push(format!("brokers at {} answered", cfg.kafka.bootstrap_servers));
    let (problems, warnings, held) = judge(cfg, &facts);
    for f in &facts {
        if let Some(n) = f.partitions {
            report
                .passed
                .push(format!("topic \"{}\" ({}) exists: {n} partitions", f.topic, f.key));
        }
    }
    report.passed.extend(held);
    report.problems.extend(problems);
    report.warnings.extend(warnings);
    // The group coordinator answers for each group `run` joins (OffsetFetch: DESCRIBE on the
    // group and the input topic).
    let input_partitions = facts.iter().find(|f| f.key == "input.topic").and_then(|f| f.partitions);
    let mut groups = vec![(cfg.input.group_id.clone(), cfg.input.topic.clone(), input_partitions)];
    if cfg.fingerprint.scope == Scope::Global {
        let route = facts
            .iter()
            .find(|f| f.key == "fingerprint.route_topic")
            .and_then(|f| f.partitions);
        groups.push((
            format!("{}-global", cfg.input.group_id),
            cfg.fingerprint.route_topic.clone(),
            route,
        ));
    }
    for (group, topic, partitions) in groups {
        let Some(n) = partitions else { continue };
        let mut tpl = TopicPartitionList::new();
        for p in 0..n as i32 {
            tpl.add_partition(&topic, p);
        }
        // Each partition's answer checked (a partition-level error is not "nothing committed").
        let asked = fetch_committed(cfg, &group, tpl)
            .map_err(|e| e.to_string())
            .and_then(|c| {
                (0..n as i32).try_fold(0, |committed, p| match kafka::answered(&c, &topic, p) {
                    Ok(e) => Ok(committed + usize::from(matches!(e.offset(), Offset::Offset(_)))),
                    Err(e) => Err(format!("partition {p}: {e}")),
                })
            });
        match asked {
            Ok(committed) => report.passed.push(format!(
                "group \"{group}\": committed offsets fetched ({committed} of {n} partitions of \"{topic}\" committed)"
            )),
            Err(e) => report.problems.push(format!(
                "input.group_id \"{group}\": the committed offsets cannot be fetched: {e}"
            )),
        }
    }
    report
}

#[cfg(test)]
mod tests;

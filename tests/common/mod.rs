//! Shared helpers for tests against the real broker (Apache Kafka, started by `scripts/test.sh`)
//! and for driving the `kafka-dedup` binary as its own process.
#![allow(dead_code)]

pub mod given;
pub mod proxy;

use std::collections::BTreeMap;
use std::io::Read;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::{Offset, TopicPartitionList};

/// A Kafka-protocol broker the tests talk to: the Apache Kafka node of `scripts/test.sh`
/// ([`Broker::kafka`]), librdkafka's mock cluster or a broker a test started itself
/// ([`Broker::at`]). Every helper that talks to a broker is a method, so a test names its broker
/// once.
#[derive(Clone, Debug)]
pub struct Broker {
    /// `host:port` for `bootstrap.servers`.
    pub bootstrap: String,
}

/// The Apache Kafka node started by `scripts/test.sh` (the broker of the tests).
pub fn kafka() -> Broker {
    Broker::kafka()
}

/// How to reach the suite's broker over its SASL_SSL listener (SCRAM-SHA-512), from the
/// environment `scripts/test.sh` sets.
#[derive(Clone, Debug)]
pub struct Sasl {
    /// `127.0.0.1:port` of the SASL_SSL listener.
    pub bootstrap: String,
    /// PEM file of the CA that signed the broker's certificate.
    pub ca: PathBuf,
    /// The SCRAM user and its password.
    pub user: String,
    pub password: String,
}

/// The suite's SASL_SSL listener (`KAFKA_DEDUP_TEST_SASL_*`).
pub fn sasl() -> Sasl {
    let var =
        |k: &str| std::env::var(k).unwrap_or_else(|_| panic!("{k} is not set: run the tests through scripts/test.sh"));
    Sasl {
        bootstrap: var("KAFKA_DEDUP_TEST_SASL_BROKER"),
        ca: var("KAFKA_DEDUP_TEST_SASL_CA").into(),
        user: var("KAFKA_DEDUP_TEST_SASL_USER"),
        password: var("KAFKA_DEDUP_TEST_SASL_PASSWORD"),
    }
}

impl Broker {
    /// The Apache Kafka node started by `scripts/test.sh` (`KAFKA_DEDUP_TEST_BROKER`). A test that
    /// needs it fails with a clear message when it is missing (it is never skipped silently).
    pub fn kafka() -> Self {
        Broker::at(std::env::var("KAFKA_DEDUP_TEST_BROKER").expect(
            "KAFKA_DEDUP_TEST_BROKER is not set: run the tests through scripts/test.sh, which starts Apache Kafka",
        ))
    }

    /// The broker at `bootstrap`.
    pub fn at(bootstrap: impl Into<String>) -> Self {
        Broker {
            bootstrap: bootstrap.into(),
        }
    }

    /// A client configuration for this broker.
    pub fn client(&self) -> ClientConfig {
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.bootstrap);
        c
    }

    /// Creates a topic with `partitions` partitions and waits until its metadata shows them.
    pub fn create_topic(&self, name: &str, partitions: i32) {
        self.create_topic_with(name, partitions, &[]);
    }

    /// Creates a topic with topic configs (for example `max.message.bytes`).
    /// Sets `configs` on topic `name` (Kafka's AlterConfigs: the topic's other settings return
    /// to the broker's defaults).
    pub fn alter_topic(&self, name: &str, configs: &[(&str, &str)]) {
        use rdkafka::admin::{AlterConfig, ResourceSpecifier};
        let admin: AdminClient<DefaultClientContext> = self.client().create().expect("admin client");
        let mut alter = AlterConfig::new(ResourceSpecifier::Topic(name));
        for (k, v) in configs {
            alter = alter.set(k, v);
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let res = rt
            .block_on(admin.alter_configs(
                &[alter],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            ))
            .expect("alter_configs request");
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("alter topic {t:?}: {e}"));
        }
    }

    pub fn create_topic_with(&self, name: &str, partitions: i32, configs: &[(&str, &str)]) {
        let admin: AdminClient<DefaultClientContext> = self.client().create().expect("admin client");
        let mut topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
        for (k, v) in configs {
            topic = topic.set(k, v);
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let res = rt
            .block_on(admin.create_topics(
                &[topic],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            ))
            .expect("create_topics request");
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("create topic {t}: {e}"));
        }
        let consumer: BaseConsumer = self.client().create().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(md) = consumer.fetch_metadata(Some(name), Duration::from_secs(5)) {
                if md
                    .topics()
                    .iter()
                    .any(|t| t.name() == name && t.partitions().len() == partitions as usize)
                {
                    return;
                }
            }
            assert!(Instant::now() < deadline, "topic {name} did not appear");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Deletes a topic and waits until its metadata no longer shows it.
    pub fn delete_topic(&self, name: &str) {
        let admin: AdminClient<DefaultClientContext> = self.client().create().expect("admin client");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let res = rt
            .block_on(admin.delete_topics(
                &[name],
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            ))
            .expect("delete_topics request");
        for r in res {
            r.unwrap_or_else(|(t, e)| panic!("delete topic {t}: {e}"));
        }
        let consumer: BaseConsumer = self.client().create().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let gone = consumer
                .fetch_metadata(Some(name), Duration::from_secs(5))
                .map(|md| md.topics().iter().all(|t| t.name() != name || t.error().is_some()))
                .unwrap_or(false);
            if gone {
                return;
            }
            assert!(Instant::now() < deadline, "topic {name} did not go away");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Deletes the records of `topic`/`partition` before `before` (DeleteRecords: the log start
    /// offset moves there, as retention moves it) and waits until the low watermark shows it.
    pub fn delete_records(&self, topic: &str, partition: i32, before: i64) {
        let admin: AdminClient<DefaultClientContext> = self.client().create().expect("admin client");
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(before))
            .unwrap();
        let res = rt
            .block_on(admin.delete_records(
                &tpl,
                &AdminOptions::new().operation_timeout(Some(Duration::from_secs(10))),
            ))
            .expect("delete_records request");
        for e in res.elements() {
            e.error()
                .unwrap_or_else(|err| panic!("delete records of {topic}/{partition}: {err}"));
        }
        let consumer: BaseConsumer = self.client().create().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while consumer
            .fetch_watermarks(topic, partition, Duration::from_secs(5))
            .map_or(true, |(low, _)| low < before)
        {
            assert!(
                Instant::now() < deadline,
                "{topic}/{partition}: log start did not move to {before}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Committed offsets (and metadata) of `group` for `topic`'s partitions.
    pub fn committed(&self, group: &str, topic: &str, partitions: i32) -> BTreeMap<i32, (Option<i64>, String)> {
        let mut c = self.client();
        c.set("group.id", group);
        let consumer: BaseConsumer = c.create().unwrap();
        let mut tpl = TopicPartitionList::new();
        for p in 0..partitions {
            tpl.add_partition(topic, p);
        }
        let got = patiently("committed offsets", || {
            consumer.committed_offsets(tpl.clone(), Duration::from_secs(10))
        });
        got.elements()
            .iter()
            .map(|e| {
                let o = match e.offset() {
                    Offset::Offset(o) => Some(o),
                    _ => None,
                };
                (e.partition(), (o, e.metadata().to_string()))
            })
            .collect()
    }

    /// End offsets (high watermarks) of a topic's partitions. Only for positions, never to count
    /// records.
    pub fn end_offsets(&self, topic: &str, partitions: i32) -> BTreeMap<i32, i64> {
        let consumer: BaseConsumer = self.client().create().unwrap();
        (0..partitions)
            .map(|p| {
                (
                    p,
                    patiently("watermarks", || {
                        consumer.fetch_watermarks(topic, p, Duration::from_secs(10))
                    })
                    .1,
                )
            })
            .collect()
    }

    /// Waits until `group`'s committed offsets reach `ends` (per partition), i.e. the filter has
    /// checkpointed everything; `context` (logs) goes into the failure message.
    pub fn wait_committed(
        &self,
        group: &str,
        topic: &str,
        ends: &BTreeMap<i32, i64>,
        timeout: Duration,
        context: impl Fn() -> String,
    ) {
        let deadline = Instant::now() + timeout;
        loop {
            let c = self.committed(group, topic, ends.len() as i32);
            if ends
                .iter()
                .all(|(p, end)| c.get(p).and_then(|x| x.0).is_some_and(|o| o >= *end))
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "committed {c:?}, expected {ends:?}\n{}",
                context()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// Writes `records` (partition, value) with [`scenario::produce`], spread over `duration`.
    pub fn produce_values(&self, topic: &str, records: &[(i32, u64)], duration: Duration) {
        kafka_dedup::scenario::produce(&self.client(), topic, records, duration).expect("produce the input");
    }

    /// Writes `records` (partition, value) as [`scenario::produce`] does (key and value: the
    /// decimal text), all with timestamp `timestamp` (ms since the Unix epoch): upstream replays
    /// that keep the event time of their first copies, as Flink and Kafka Streams sinks do. (A
    /// replay stamped when it is written is, on the partition clock, as old as the time since
    /// its first copy, and is forwarded once that exceeds the horizon: docs/guarantee.md, "The guarantee".)
    pub fn produce_values_at(&self, topic: &str, records: &[(i32, u64)], timestamp: i64) {
        use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
        let producer: ThreadedProducer<_> = self.client().create().unwrap();
        for (p, v) in records {
            let text = v.to_string();
            let record = BaseRecord::to(topic)
                .partition(*p)
                .key(&text)
                .payload(&text)
                .timestamp(timestamp);
            producer.send(record).map_err(|(e, _)| e).unwrap();
        }
        producer.flush(Duration::from_secs(60)).unwrap();
    }

    /// The decimal values of every record of `topic`, per partition in offset order
    /// ([`scenario::read_values`], read_committed).
    pub fn read_values(&self, topic: &str, partitions: i32) -> BTreeMap<i32, Vec<u64>> {
        kafka_dedup::scenario::read_values(&self.client(), topic, partitions, Duration::from_secs(120))
            .unwrap_or_else(|e| panic!("reading {topic}: {e}"))
    }

    /// Every record of `topic` from the beginning to the end, per partition in offset order.
    pub fn read_records(&self, topic: &str, partitions: i32) -> BTreeMap<i32, Vec<Raw>> {
        read_records(&self.client(), topic, partitions)
    }

    /// The records kafka-dedup forwarded from `input` to `output` (`partitioning = "preserve"`),
    /// as they were in the input: each must carry the provenance header kafka-dedup adds (the
    /// last `kafka-dedup.source` naming `input`), from the same partition, with input offsets
    /// increasing; the header is removed.
    pub fn read_forwarded(&self, output: &str, partitions: i32, input: &str) -> BTreeMap<i32, Vec<Raw>> {
        use kafka_dedup::provenance::{Provenance, HEADER};
        let mut out = self.read_records(output, partitions);
        for (p, records) in out.iter_mut() {
            let mut last = -1;
            for r in records.iter_mut() {
                let source = r
                    .headers
                    .iter()
                    .filter(|(k, _)| k.as_slice() == HEADER.as_bytes())
                    .filter_map(|(_, v)| v.as_deref().and_then(Provenance::parse))
                    .rfind(|s| s.topic == input)
                    .unwrap_or_else(|| panic!("output partition {p}: a record without provenance: {r:?}"));
                assert_eq!(source.partition, *p, "preserve: from input partition {p}: {source:?}");
                assert!(source.offset > last, "input offsets increase: {last}, then {source:?}");
                last = source.offset;
                let i = r
                    .headers
                    .iter()
                    .rposition(|(k, v)| {
                        k.as_slice() == HEADER.as_bytes() && v.as_deref() == Some(source.encode().as_bytes())
                    })
                    .expect("the header just read");
                r.headers.remove(i);
            }
        }
        out
    }

    /// Produces records (key, value, headers) to one partition, in order, and waits for them.
    pub fn produce_raw(&self, topic: &str, partition: i32, records: &[Raw]) {
        let untimed: Vec<(Option<i64>, &Raw)> = records.iter().map(|r| (None, r)).collect();
        produce_raw(&self.client(), topic, partition, &untimed)
    }

    /// Produces records to one partition, in order, each with the given timestamp (ms since the
    /// Unix epoch; the producer's CreateTime), and waits for them: timelines written with chosen
    /// record times instead of sleeps.
    pub fn produce_timed(&self, topic: &str, partition: i32, records: &[(i64, Raw)]) {
        let timed: Vec<(Option<i64>, &Raw)> = records.iter().map(|(t, r)| (Some(*t), r)).collect();
        produce_raw(&self.client(), topic, partition, &timed)
    }
}

/// A command running the kafka-dedup binary under test, without the `KAFKA_DEDUP__*` variables
/// of the environment the tests run in (configuration overrides: a stray one in a developer's or
/// CI's shell would change every test's configuration without a word). Tests set their own.
pub fn kafka_dedup_command() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kafka-dedup"));
    let prefix = format!("{}__", kafka_dedup::config::ENV_PREFIX);
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with(&prefix)) {
            cmd.env_remove(k);
        }
    }
    cmd
}

/// The wall clock, ms since the Unix epoch: the timestamp a record produced now gets.
pub fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

/// Runs a request of the test's own (not the filter's) to the broker, again for up to 30 s while
/// the broker answers with an error a client retries (a group coordinator moving or loading, a
/// leader not elected yet, a request timed out: the suite's broker is started seconds before);
/// any other error, or one still there after 30 s, fails the test, naming `what`.
fn patiently<T>(what: &str, mut request: impl FnMut() -> rdkafka::error::KafkaResult<T>) -> T {
    use rdkafka::types::RDKafkaErrorCode as C;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match request() {
            Ok(v) => return v,
            Err(e)
                if std::time::Instant::now() < deadline
                    && matches!(
                        e.rdkafka_error_code(),
                        Some(
                            C::NotCoordinator
                                | C::CoordinatorLoadInProgress
                                | C::CoordinatorNotAvailable
                                | C::LeaderNotAvailable
                                | C::NotLeaderForPartition
                                | C::RequestTimedOut
                                | C::OperationTimedOut
                        )
                    ) =>
            {
                std::thread::sleep(Duration::from_millis(200));
            }
            Err(e) => panic!("{what}: {e}"),
        }
    }
}

/// A unique name for a topic or group: `prefix-<random>`.
pub fn unique(prefix: &str) -> String {
    format!("{prefix}-{:08x}", rand::random::<u32>())
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// A kafka-dedup process started from the built binary with a configuration file.
pub struct FilterProcess {
    child: Option<Child>,
    /// HTTP address (`127.0.0.1:port`).
    pub http: String,
    /// File receiving the process's stderr (logs).
    pub log: PathBuf,
    /// What it was started with.
    pub spec: FilterSpec,
}

/// Settings of a filter process under test.
#[derive(Clone)]
pub struct FilterSpec {
    /// The broker (default: the Apache Kafka node of `scripts/test.sh`).
    pub broker: Broker,
    pub input: String,
    pub output: String,
    pub group: String,
    /// `input.group_instance_id` (static membership; empty: dynamic).
    pub instance: String,
    pub store: PathBuf,
    /// Extra TOML appended to the generated configuration (whole sections).
    pub extra: String,
    pub interval: &'static str,
    /// `checkpoint.generations` (default 10: with `interval` 1 s, H_min 9 s and H_max 10 s, a
    /// horizon a stall of the writer or of a restart on a loaded 2-core machine does not cross, so
    /// a replay stamped when written stays inside it; the product's default is 3). A test about
    /// the horizon itself (records meant to be forgotten, rotation counts, timestamps computed
    /// from H_min/H_max) sets 2: H_min 1 s, H_max 2 s, the horizon its timeline is written for.
    pub generations: u32,
    /// `store.changelog_topic` (default empty: off).
    pub changelog: String,
    /// `output.fence_wait` (default 1 s).
    pub fence_wait: &'static str,
    /// `output.provenance` (on, the product's default; tests about running without it turn it
    /// off).
    pub provenance: bool,
    /// `session.timeout.ms`; `None` (the default): librdkafka's default, 45 s. [`Self::killable`]
    /// sets 6 s.
    pub session_timeout_ms: Option<u32>,
    /// `group.protocol = "consumer"` (KIP-848; default: librdkafka's classic). The broker then
    /// sets the session timeout and the heartbeat (6 s and 1 s on the suite's broker,
    /// scripts/kafka-broker.sh) and librdkafka refuses them, so neither is written.
    pub consumer_protocol: bool,
    pub fingerprint: String,
    /// Extra environment variables.
    pub env: Vec<(String, String)>,
}

impl FilterSpec {
    /// Defaults for a test on the suite's Apache Kafka: librdkafka's session timeout (45 s; a
    /// member that stops cleanly leaves the group at once, only a killed one waits it out: see
    /// [`Self::killable`]), checkpoint every 1 s with 10 generations (H_min 9 s, H_max 10 s: see
    /// [`Self::generations`]), fence wait 1 s, provenance on.
    pub fn new(input: &str, output: &str, dir: &Path) -> Self {
        Self::on(Broker::kafka(), input, output, dir)
    }

    /// As [`Self::new`], on `broker`.
    pub fn on(broker: Broker, input: &str, output: &str, dir: &Path) -> Self {
        FilterSpec {
            broker,
            input: input.into(),
            output: output.into(),
            group: unique("group"),
            instance: String::new(),
            store: dir.join("store"),
            extra: String::new(),
            interval: "1s",
            generations: 10,
            fence_wait: "1s",
            changelog: String::new(),
            provenance: true,
            session_timeout_ms: None,
            consumer_protocol: false,
            fingerprint: "[fingerprint]\nsource = \"value\"\n".into(),
            env: Vec::new(),
        }
    }

    /// Prepares the filter for being killed: a 6 s session timeout, so a killed member's
    /// partitions move after ~6 s instead of 45 s. The assignor stays the product's default
    /// (`cooperative-sticky`).
    pub fn killable(mut self) -> Self {
        self.session_timeout_ms = Some(6000);
        self
    }

    /// With `group.protocol = "consumer"` (see [`Self::consumer_protocol`]).
    pub fn with_consumer_protocol(mut self) -> Self {
        self.consumer_protocol = true;
        self
    }

    /// With `output.provenance` on (see [`Self::provenance`]).
    pub fn with_provenance(mut self) -> Self {
        self.provenance = true;
        self
    }

    /// Transactional delivery (`output.delivery = "transactional"`), with `transactional_id`
    /// when given (else each filter's own, set later).
    pub fn transactional(&mut self, transactional_id: Option<String>) {
        self.env
            .push(("KAFKA_DEDUP__OUTPUT__DELIVERY".into(), "transactional".into()));
        if let Some(id) = transactional_id {
            self.env.push(("KAFKA_DEDUP__OUTPUT__TRANSACTIONAL_ID".into(), id));
        }
    }

    /// The member that outlives a [`Self::killable`] one: librdkafka's 45 s session, so it keeps
    /// its partitions while the test counts on it.
    pub fn survivor(&self) -> Self {
        let mut s = self.clone();
        s.session_timeout_ms = None;
        s
    }

    /// The configuration text for HTTP port `port`.
    pub fn toml(&self, port: u16) -> String {
        format!(
            r#"[kafka]
bootstrap_servers = "{broker}"
[kafka.properties]
{membership}

[input]
topic = "{input}"
group_id = "{group}"
group_instance_id = "{instance}"

[output]
topic = "{output}"
fence_wait = "{fence_wait}"
provenance = {provenance}

{fingerprint}
[checkpoint]
interval = "{interval}"
generations = {generations}

[store]
path = "{store}"
changelog_topic = "{changelog}"

[http]
listen = "127.0.0.1:{port}"
{extra}
"#,
            broker = self.broker.bootstrap,
            fence_wait = self.fence_wait,
            provenance = self.provenance,
            membership = if self.consumer_protocol {
                "\"group.protocol\" = \"consumer\"".to_string()
            } else {
                let session = self
                    .session_timeout_ms
                    .map(|ms| format!("\"session.timeout.ms\" = {ms}\n"))
                    .unwrap_or_default();
                format!("{session}\"heartbeat.interval.ms\" = 500")
            },
            input = self.input,
            group = self.group,
            instance = self.instance,
            output = self.output,
            fingerprint = self.fingerprint,
            interval = self.interval,
            generations = self.generations,
            store = self.store.display(),
            changelog = self.changelog,
            extra = self.extra,
        )
    }

    /// Starts the binary with this configuration.
    pub fn start(&self, dir: &Path) -> FilterProcess {
        let port = free_port();
        let config = dir.join(format!("config-{port}.toml"));
        std::fs::write(&config, self.toml(port)).unwrap();
        let log = dir.join(format!("filter-{port}.log"));
        let mut cmd = kafka_dedup_command();
        cmd.arg("run")
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info,kafka_dedup=debug,librdkafka=warn,rdkafka=warn")
            .env_remove(kafka_dedup::crash::ENV)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap());
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().expect("start kafka-dedup");
        FilterProcess {
            spec: self.clone(),
            child: Some(child),
            http: format!("127.0.0.1:{port}"),
            log,
        }
    }
}

impl FilterSpec {
    /// `kafka-dedup audit --json` with this configuration (written into `dir`): its exit code,
    /// what it printed (stdout, then stderr) and its JSON report, if stdout held one.
    pub fn audit_json(&self, dir: &Path) -> (Option<i32>, String, Option<serde_json::Value>) {
        let config = dir.join(format!("audit-{}.toml", free_port()));
        std::fs::write(&config, self.toml(free_port())).unwrap();
        let out = kafka_dedup_command()
            .args(["audit", "--json", "--config"])
            .arg(&config)
            .output()
            .expect("run kafka-dedup audit");
        let said = format!(
            "{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.code(), said, serde_json::from_slice(&out.stdout).ok())
    }
}

/// GET `path` from `addr`; returns (status code, body). Plain HTTP/1.0 over a socket.
pub fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    use std::io::Write;
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n\r\n").ok()?;
    let mut buf = String::new();
    s.read_to_string(&mut buf).ok()?;
    let code = buf.split_whitespace().nth(1)?.parse().ok()?;
    let body = buf
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

impl FilterProcess {
    /// Waits until `/readyz` says ready (partitions assigned and recovered).
    pub fn wait_ready(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some((200, _)) = http_get(&self.http, "/readyz") {
                return;
            }
            if let Some(status) = self.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("kafka-dedup exited ({status}) before ready:\n{}", self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "not ready after {timeout:?}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The process's logs so far.
    pub fn logs(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for the exit.
    pub fn terminate(&mut self) -> ExitStatus {
        let child = self.child.as_mut().unwrap();
        let pid = child.id();
        signal(pid, libc::SIGTERM);
        let Some(status) = wait_timeout(child, Duration::from_secs(90)) else {
            panic!("no exit after SIGTERM:\n{}\n{}", self.logs(), thread_stacks(pid))
        };
        self.child = None;
        status
    }

    /// Sends SIGKILL and reaps the process.
    pub fn kill9(&mut self) {
        let mut child = self.child.take().unwrap();
        let _ = child.kill();
        let _ = child.wait();
    }

    /// Waits for the process to exit by itself.
    pub fn wait_exit(&mut self, timeout: Duration) -> ExitStatus {
        let child = self.child.as_mut().unwrap();
        let pid = child.id();
        let Some(status) = wait_timeout(child, timeout) else {
            panic!(
                "still running after {timeout:?}:\n{}\n{}",
                self.logs(),
                thread_stacks(pid)
            )
        };
        self.child = None;
        status
    }

    /// True while the process runs.
    pub fn running(&mut self) -> bool {
        self.child
            .as_mut()
            .is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Sends a signal (`libc::SIGSTOP`, `libc::SIGCONT`, ...) without waiting.
    pub fn signal(&self, sig: libc::c_int) {
        signal(self.pid(), sig);
    }

    /// Process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }
}

impl Drop for FilterProcess {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Sends `sig` to process `pid`.
fn signal(pid: u32, sig: libc::c_int) {
    // SAFETY: kill(2) has no memory-safety preconditions; the pid is our own child's.
    let rc = unsafe { libc::kill(pid as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill({pid}, {sig}): {}", std::io::Error::last_os_error());
}

/// The stack of every thread of process `pid`, by gdb (`gdb -batch -p`, bounded to 60 s), for a
/// process that did not exit when a test expected it to: where it waits. A line saying why
/// when gdb is missing or cannot attach (ptrace refused).
fn thread_stacks(pid: u32) -> String {
    let gdb = Command::new("timeout")
        .args([
            "60",
            "gdb",
            "-batch",
            "-nx",
            "-p",
            &pid.to_string(),
            "-ex",
            "thread apply all bt",
        ])
        .stdin(Stdio::null())
        .output();
    match gdb {
        Ok(out) if out.status.success() => {
            format!("threads of {pid}, by gdb:\n{}", String::from_utf8_lossy(&out.stdout))
        }
        Ok(out) => format!(
            "no thread stacks of {pid} (gdb: {}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => format!("no thread stacks of {pid} (timeout/gdb: {e})"),
    }
}

/// Waits up to `timeout` for `child` to exit.
fn wait_timeout(child: &mut Child, timeout: Duration) -> Option<ExitStatus> {
    use wait_timeout::ChildExt;
    child.wait_timeout(timeout).expect("waiting for a child process")
}

/// A record as written or read back: key, value, headers. Header names are bytes: a
/// librdkafka-based producer can write names that are not UTF-8 (issue 12), and the helpers
/// below read and write them without decoding.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Raw {
    /// `None` for a null key.
    pub key: Option<Vec<u8>>,
    /// `None` for a tombstone.
    pub value: Option<Vec<u8>>,
    /// Headers in order: name bytes, value (`None`: a header without value).
    pub headers: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Raw {
    /// The value of the first header named `name`, if any (`Some(None)`: present without value).
    pub fn header(&self, name: &str) -> Option<Option<&[u8]>> {
        self.headers
            .iter()
            .find(|(k, _)| k.as_slice() == name.as_bytes())
            .map(|(_, v)| v.as_deref())
    }
}

/// The headers of a consumed record, names as bytes, through librdkafka's C API: rdkafka 0.39's
/// `Headers::iter` decodes each name as UTF-8 and panics on any other (`BorrowedHeaders::try_get`).
fn raw_headers(m: &rdkafka::message::BorrowedMessage<'_>) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    use rdkafka::bindings as rd;
    let mut out = Vec::new();
    let mut hdrs: *mut rd::rd_kafka_headers_t = std::ptr::null_mut();
    // SAFETY: `m.ptr()` is the live message; the headers it returns are owned by the message,
    // which outlives this function, and every name and value is copied before returning.
    unsafe {
        if rd::rd_kafka_message_headers(m.ptr(), &mut hdrs) != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return out;
        }
        for idx in 0.. {
            let (mut name, mut value, mut size) = (std::ptr::null(), std::ptr::null(), 0usize);
            if rd::rd_kafka_header_get_all(hdrs, idx, &mut name, &mut value, &mut size)
                != rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                break;
            }
            let name = std::ffi::CStr::from_ptr(name).to_bytes().to_vec();
            let value = (!value.is_null()).then(|| std::slice::from_raw_parts(value as *const u8, size).to_vec());
            out.push((name, value));
        }
    }
    out
}

/// Reads every record of `topic` from the beginning to the end, per partition in offset order.
fn read_records(config: &ClientConfig, topic: &str, partitions: i32) -> BTreeMap<i32, Vec<Raw>> {
    use rdkafka::message::Message;
    let mut c = config.clone();
    c.set("group.id", unique("reader"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true");
    let consumer: kafka_dedup::kafka::Reader = c
        .create_with_context(kafka_dedup::kafka::ReaderContext::default())
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning).unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut out: BTreeMap<i32, Vec<Raw>> = (0..partitions).map(|p| (p, Vec::new())).collect();
    let mut eof = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while eof.len() < partitions as usize {
        assert!(Instant::now() < deadline, "reading {topic} timed out");
        match consumer.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                out.entry(m.partition()).or_default().push(Raw {
                    key: m.key().map(|k| k.to_vec()),
                    value: m.payload().map(|v| v.to_vec()),
                    headers: raw_headers(&m),
                });
            }
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            _ => {}
        }
    }
    out
}

/// Headers with byte names, built with librdkafka's `rd_kafka_header_add`: `OwnedHeaders::insert`
/// takes `&str` names, and the tests write names that are not UTF-8.
fn owned_headers(headers: &[(Vec<u8>, Option<Vec<u8>>)]) -> rdkafka::message::OwnedHeaders {
    use rdkafka::bindings as rd;
    let h = rdkafka::message::OwnedHeaders::new_with_capacity(headers.len());
    // rdkafka 0.39 keeps the native pointer private; a `BorrowedHeaders` reference *is* that
    // pointer (its zero-sized type is laid over `rd_kafka_headers_t`, as rdkafka's own
    // `as_native_ptr` casts it).
    let native = h.as_borrowed() as *const rdkafka::message::BorrowedHeaders as *mut rd::rd_kafka_headers_t;
    for (name, value) in headers {
        let (vp, vlen) = match value {
            Some(v) => (v.as_ptr() as *const std::ffi::c_void, v.len() as isize),
            None => (std::ptr::null(), 0),
        };
        // SAFETY: `native` is the headers object `h` owns, alive for the call; librdkafka copies
        // the name (`name.len()` bytes, no terminator needed) and the value.
        let err = unsafe {
            rd::rd_kafka_header_add(
                native,
                name.as_ptr() as *const std::ffi::c_char,
                name.len() as isize,
                vp,
                vlen,
            )
        };
        assert_eq!(
            err,
            rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR,
            "rd_kafka_header_add"
        );
    }
    h
}

/// Produces records (key, value, headers; a timestamp when given, else the producer's clock) to
/// one partition, in order, and waits for them.
fn produce_raw(config: &ClientConfig, topic: &str, partition: i32, records: &[(Option<i64>, &Raw)]) {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    let producer: ThreadedProducer<_> = config.create().unwrap();
    for (ts, r) in records {
        let mut rec: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic).partition(partition);
        if let Some(ts) = ts {
            rec = rec.timestamp(*ts);
        }
        if let Some(k) = &r.key {
            rec = rec.key(k.as_slice());
        }
        if let Some(v) = &r.value {
            rec = rec.payload(v.as_slice());
        }
        if !r.headers.is_empty() {
            rec = rec.headers(owned_headers(&r.headers));
        }
        producer.send(rec).map_err(|(e, _)| e).unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
}

/// A record with text key/value (None for null) and text headers.
pub fn raw(key: Option<&str>, value: Option<&str>, headers: &[(&str, &str)]) -> Raw {
    Raw {
        key: key.map(|k| k.as_bytes().to_vec()),
        value: value.map(|v| v.as_bytes().to_vec()),
        headers: headers
            .iter()
            .map(|(k, v)| (k.as_bytes().to_vec(), Some(v.as_bytes().to_vec())))
            .collect(),
    }
}

/// Sum of a metric's samples in a Prometheus text scrape, over all label sets matching
/// `labels` (each `name="value"` must appear in the sample's labels).
pub fn metric(scrape: &str, name: &str, labels: &[&str]) -> f64 {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(name) && matches!(l.as_bytes().get(name.len()), Some(b'{') | Some(b' ')))
        .filter(|l| labels.iter().all(|lab| l.contains(lab)))
        .filter_map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .sum()
}

impl FilterProcess {
    /// The current `/metrics` scrape.
    pub fn scrape(&self) -> String {
        http_get(&self.http, "/metrics").map(|(_, b)| b).unwrap_or_default()
    }

    /// Waits until `metric(name, labels)` reaches at least `value`.
    pub fn wait_metric(&mut self, name: &str, labels: &[&str], value: f64, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let s = self.scrape();
            if metric(&s, name, labels) >= value {
                return;
            }
            if !self.running() {
                panic!("kafka-dedup exited while waiting for {name}:\n{}", self.logs());
            }
            assert!(
                Instant::now() < deadline,
                "{name}{labels:?} < {value} after {timeout:?}:\n{s}\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl FilterProcess {
    /// Input partitions this process owns, from `/readyz` (empty when it does not answer).
    pub fn owned(&self) -> Vec<i32> {
        http_get(&self.http, "/readyz")
            .and_then(|(_, body)| serde_json::from_str::<serde_json::Value>(&body).ok())
            .and_then(|v| {
                v["partitions"]
                    .as_object()
                    .map(|m| m.keys().filter_map(|k| k.parse().ok()).collect())
            })
            .unwrap_or_default()
    }
}

/// Waits until `spec.group` has committed every partition of `spec.input` up to its end offset
/// while `filters` (the live members of the group) run. Panics with `context()` and who owns
/// what after `timeout`.
pub fn wait_drained(
    spec: &FilterSpec,
    partitions: i32,
    filters: &[&FilterProcess],
    timeout: Duration,
    context: impl Fn() -> String,
) {
    let ends = spec.broker.end_offsets(&spec.input, partitions);
    let deadline = Instant::now() + timeout;
    loop {
        let c = spec.broker.committed(&spec.group, &spec.input, partitions);
        let lagging = ends
            .iter()
            .any(|(p, end)| c.get(p).and_then(|x| x.0).is_none_or(|o| o < *end));
        if !lagging {
            return;
        }
        if Instant::now() >= deadline {
            let owned: Vec<i32> = filters.iter().flat_map(|f| f.owned()).collect();
            panic!(
                "committed {c:?}, expected {ends:?}, owned by the live members {owned:?}:\n{}",
                context()
            );
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The sum of field `field` (`name=N`) over the log lines whose message is `message` exactly
/// (`tracing`'s format: `... target: message field=value ...`).
pub fn sum_of(logs: &str, message: &str, field: &str) -> u64 {
    let (head, key) = (format!(": {message} "), format!(" {field}="));
    logs.lines()
        .filter(|l| {
            l.find(&head)
                .is_some_and(|i| l[i + head.len()..].split(' ').next().is_some_and(|w| w.contains('=')))
        })
        .filter_map(|l| {
            let rest = &l[l.find(&key)? + key.len()..];
            rest.split(' ').next()?.parse::<u64>().ok()
        })
        .sum()
}

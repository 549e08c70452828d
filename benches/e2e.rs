//! End-to-end benchmark: kafka-dedup against the fastest thing that could stand in its place, on
//! the same broker, in the same run.
//!
//! ```text
//! scripts/bench.sh                                   # a fresh Apache Kafka node, then this benchmark
//! scripts/bench.sh --peers                           # also Kafka Streams and Python + Redis (below)
//! cargo bench --bench e2e -- --brokers HOST:PORT     # any Kafka-protocol broker
//! cargo bench --bench e2e                            # librdkafka's in-process mock cluster
//! ```
//!
//! 1. Produces `--records` records (`--record-bytes` each, a fraction `--duplicates` of them
//!    replays of one of the previous 1,000 events, same key and value) to a new input topic.
//! 2. Runs, alternating and `--rounds` times each (a b, b a, a b, ...: drift of a noisy machine or
//!    of a growing broker database falls on both equally):
//!    - (a) a plain rdkafka copier input → output (same partition, key, value, headers,
//!      timestamp) built from kafka-dedup's own client settings ([`kafka::consumer_config`],
//!      [`kafka::producer_config`]): poll, produce, commit the position every checkpoint interval;
//!    - (b) kafka-dedup's pipeline ([`run_filter`], dedup on, source `value`, Prometheus recorder
//!      installed as in `run`);
//!    - with `--global`, (c) kafka-dedup in the global scope (`fingerprint.scope = "global"`): the
//!      route stage ([`run_route`]) and the filter stage on a route topic of as many partitions, in
//!      one process, as `run` runs them.
//!
//!    Each run is a child process (this binary re-executed) with a new output topic, consumer
//!    group and store, so its CPU time (`/proc/self/stat`) and peak RSS (`VmHWM`) are its own.
//!    Throughput: records done / time, from the moment every partition is assigned (for b: and
//!    recovered) to the last record done, where done is acknowledged by the output topic (or, for
//!    b, dropped as a replay); CPU time per record over the same window. The child
//!    also reports the longest time its consumed count stood still while records were waiting
//!    (a stall: a checkpoint that blocked the poll thread would show here).
//! 3. Latency, in the same child after the throughput phase: on a second, new pair of topics the
//!    parent produces records for `--latency-seconds` at `--latency-rate` per second, each stamped with
//!    its send time (CreateTime, kept in the output by both a and b), and a reader tailing the
//!    output computes arrival − timestamp. Apache Kafka's topics keep CreateTime
//!    (`message.timestamp.type` default), so this is "input send → output readable" for both: the
//!    same produce and fetch paths, so b − a is the latency kafka-dedup adds. The rate is half the
//!    copier's steady rate (its first run; `--latency-rate` sets one), for 2 s by default.
//!
//! CPU per record is the child's, and separately the broker's: with `KD_E2E_BROKER_PID` (set by
//! `scripts/bench.sh`), the broker JVM's user + system time from `/proc/PID/stat` over the same
//! window. Of the child's CPU, the column `(rdk:*)` is its librdkafka threads' (`rdk:broker*`,
//! `rdk:main`, from `/proc/self/task`): their share moves most between runs (a producer broker
//! thread polls without sleeping while a partition has its five requests in flight and a batch
//! ready, so a slow broker costs the client CPU), the rest is the client's own threads.
//! `--record-bytes 100,1000` runs the whole benchmark once per value size (own topics).
//!
//! `--peers` adds the dedups a user might write instead, each an external command started with
//! the broker, topics and group as arguments (`benches/peers/`; `scripts/bench.sh --peers` builds
//! and installs what they need and sets `KD_E2E_STREAMS_CP`, `KD_E2E_PYTHONPATH`,
//! `KD_E2E_REDIS_PORT`, `KD_E2E_REDIS_PID`): a Kafka Streams application (window store) with
//! `at_least_once` and with `exactly_once_v2`, and Python confluent-kafka + Redis `SET NX`. Their
//! rate is read from outside: the output topic's end offsets (polled every 50 ms) from the first
//! output record to the last (scaled to input records by records / distinct), CPU from
//! `/proc/PID/stat` of the child (and of redis-server) over that window, peak RSS from its
//! `VmHWM`; their output is counted afterwards (read_committed). No latency phase for them.
//!
//! Options add runs of kafka-dedup alternating with a and b: `--held N` (c: N fingerprints held
//! from the start, a pre-filled store snapshot that recovery loads, [`prefill`]) and
//! `--compare-provenance` (d: `output.provenance = false`). Each child also reports when it
//! reached the steps of its start (subscribed, first assignment, recovery read, fence wait,
//! partition running, first record taken, first output acknowledged): kafka-dedup's from its own
//! log events ([`LOGGED`]), the copier's from its rebalance callback.
//!
//! The output checks itself: a must deliver every record, b exactly the distinct ones and drop
//! exactly the replays (exit 1 otherwise). BENCHMARKS.md has the figures of one run.

use std::collections::BTreeMap;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use clap::Parser;
use indicatif::{ProgressBar, ProgressStyle};
use kafka_dedup::config::{Config, Scope};
use kafka_dedup::generations::{Generation, Positions};
use kafka_dedup::global::run_route;
use kafka_dedup::kafka;
use kafka_dedup::pipeline::{run_filter, Shutdown};
use kafka_dedup::status::Status;
use kafka_dedup::store::{PartitionWrite, Store};
use kafka_dedup::telemetry::Totals;
use rand::{Rng, SeedableRng};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, ConsumerContext, Rebalance};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::mocking::MockCluster;
use rdkafka::producer::{BaseProducer, BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::Layer;

#[path = "support/mod.rs"]
mod support;

/// Command line (after `cargo bench --bench e2e --`).
#[derive(Parser, Debug, Clone)]
#[command(about = "kafka-dedup vs a passthrough copier, same broker, same run")]
struct Args {
    /// Bootstrap servers of the broker; without it, librdkafka's in-process mock cluster.
    #[arg(long)]
    brokers: Option<String>,
    /// Input records (replays included).
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Fraction of the input records that are replays.
    #[arg(long, default_value_t = 0.1)]
    duplicates: f64,
    /// Bytes of a record's value; several (`100,1000`): the whole benchmark once per size.
    #[arg(long, value_delimiter = ',', default_value = "100")]
    record_bytes: Vec<usize>,
    /// Partitions of every topic; several (`3,30,300`): the whole benchmark once per count (own
    /// topics), after one another, as `--record-bytes` does.
    #[arg(long = "partitions", value_delimiter = ',', default_value = "3")]
    partition_counts: Vec<i32>,
    /// The partition count of this pass (set by the parent from `--partitions`).
    #[arg(skip)]
    partitions: i32,
    /// Runs of each of a and b.
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// kafka-dedup's checkpoint.interval, and the copier's commit interval.
    #[arg(long, default_value = "5s")]
    checkpoint_interval: humantime::Duration,
    /// `session.timeout.ms` of both a's and b's consumer; without it, kafka-dedup's default
    /// (librdkafka's 45 s: Apache Kafka forms a new group without waiting for it).
    #[arg(long)]
    session_timeout: Option<humantime::Duration>,
    /// Seconds of the latency phase of each run (0: no latency phase).
    #[arg(long, default_value_t = 2.0)]
    latency_seconds: f64,
    /// Records per second in the latency phase; 0: half the copier's steady rate (its first run).
    #[arg(long, default_value_t = 0)]
    latency_rate: u64,
    /// Also run the peers (`benches/peers/`): Kafka Streams (at_least_once, exactly_once_v2) and
    /// Python confluent-kafka + Redis SET NX.
    #[arg(long)]
    peers: bool,
    /// Also run (c) kafka-dedup holding this many fingerprints from the start (a long horizon,
    /// pre-filled: a store snapshot with that many fingerprints over the partitions, at offset 0,
    /// which the recovery loads). 0: not run.
    #[arg(long, default_value_t = 0)]
    held: u64,
    /// Also run (d) kafka-dedup with `output.provenance = false` (no `kafka-dedup.source` header).
    #[arg(long)]
    compare_provenance: bool,
    /// Also run kafka-dedup in the global scope (`fingerprint.scope = "global"`).
    #[arg(long)]
    global: bool,
    /// Also run a built kafka-dedup binary, `NAME=PATH` (repeatable; e.g. `previous=/tmp/old/kafka-dedup`
    /// and `this=target/release/kafka-dedup`): `PATH run --config FILE` with the keys every release
    /// knows (brokers, topics, group, store, `checkpoint.interval`; every other key its own default),
    /// measured from outside as the peers are. Compares releases side by side in one run.
    #[arg(long = "binary", value_parser = parse_binary)]
    binaries: Vec<(String, std::path::PathBuf)>,
    /// Record a CPU profile of every run with `perf record` (flat: 999 samples/s) into this directory
    /// (`<variant>-<run>.data`, created if missing; `perf report -i ...`): the copier, kafka-dedup
    /// and each `--binary` (the peers are not profiled). The figures of a profiled run include
    /// perf's own overhead.
    #[arg(long, conflicts_with = "perf")]
    perf: Option<std::path::PathBuf>,
    /// Count the instructions of every run under valgrind's callgrind into this directory
    /// (`<variant>-<run>.<pid>-<thread>`, one file per thread; `callgrind_annotate FILE`), as
    /// `--perf` does, then a table of instructions per input record by thread: repeatable within
    /// about 1 % where the rates are noisy, so a change of 2 % of the CPU shows. Runs about 50x
    /// slower: use `--records 100000`. Needs `valgrind` (scripts/bench.sh installs it then).
    #[arg(long)]
    callgrind: Option<std::path::PathBuf>,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
    /// A `cargo bench` filter: the benchmark runs only if it contains "e2e".
    #[arg(hide = true)]
    filter: Option<String>,
}

// ---------------------------------------------------------------------------------------------
// Child process: one run of a or b.

/// What a child needs, passed in environment variables `KD_E2E_*`.
struct RunSpec {
    role: Role,
    brokers: String,
    input: String,
    output: String,
    latency_input: String,
    latency_output: String,
    /// The route topics of (c) (throughput, latency).
    route: String,
    latency_route: String,
    group: String,
    store: std::path::PathBuf,
    records: u64,
    interval: Duration,
    provenance: bool,
    session_timeout: Option<Duration>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Role {
    Copier,
    Dedup,
    Global,
    /// The peers (`--peers`), external commands.
    StreamsAlos,
    StreamsEos,
    Redis,
    /// `--binary NAME=PATH`, the given index into [`BINARIES`]; an external command too.
    Binary(u8),
}

/// The `--binary` runs, set once by `parent`.
static BINARIES: std::sync::OnceLock<Vec<(String, std::path::PathBuf)>> = std::sync::OnceLock::new();

/// `NAME=PATH` of `--binary`.
fn parse_binary(s: &str) -> Result<(String, std::path::PathBuf), String> {
    let (name, path) = s.split_once('=').ok_or("expected NAME=PATH")?;
    let path = std::path::PathBuf::from(path);
    if !path.is_file() {
        return Err(format!("{}: no such file", path.display()));
    }
    Ok((name.to_string(), path))
}

/// The name and path of `--binary` number `i`.
fn binary(i: u8) -> &'static (String, std::path::PathBuf) {
    &BINARIES.get().expect("BINARIES set by parent")[i as usize]
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Copier => "copier",
            Role::Dedup => "dedup",
            Role::Global => "global",
            Role::StreamsAlos => "streams-alos",
            Role::StreamsEos => "streams-eos",
            Role::Redis => "redis",
            Role::Binary(i) => &binary(i).0,
        }
    }

    fn external(self) -> bool {
        matches!(
            self,
            Role::StreamsAlos | Role::StreamsEos | Role::Redis | Role::Binary(_)
        )
    }
}

/// What one run runs: the copier, or kafka-dedup holding `held` fingerprints from the start,
/// with or without the provenance header.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Variant {
    role: Role,
    held: u64,
    provenance: bool,
}

impl Variant {
    const COPIER: Variant = Variant {
        role: Role::Copier,
        held: 0,
        provenance: true,
    };
    const DEDUP: Variant = Variant {
        role: Role::Dedup,
        held: 0,
        provenance: true,
    };

    /// Short name (topics, groups, perf files).
    fn name(self) -> String {
        let mut n = self.role.name().to_string();
        if self.held > 0 {
            n.push_str("-held");
        }
        if !self.provenance {
            n.push_str("-noprov");
        }
        n
    }

    /// Row label of the tables.
    fn label(self, letter: char) -> String {
        match (self.role, self.held, self.provenance) {
            (Role::Copier, _, _) => format!("({letter}) passthrough copier"),
            (Role::Dedup, 0, true) => format!("({letter}) kafka-dedup"),
            (Role::Dedup, 0, false) => format!("({letter}) kafka-dedup, provenance off"),
            (Role::Dedup, n, true) => format!("({letter}) kafka-dedup, {} held", count(n)),
            (Role::Dedup, n, false) => format!("({letter}) kafka-dedup, {} held, no provenance", count(n)),
            (Role::Global, _, _) => format!("({letter}) kafka-dedup, global scope"),
            (Role::StreamsAlos, _, _) => format!("({letter}) Kafka Streams, at_least_once"),
            (Role::StreamsEos, _, _) => format!("({letter}) Kafka Streams, exactly_once_v2"),
            (Role::Redis, _, _) => format!("({letter}) Python + Redis SET NX"),
            (Role::Binary(i), _, _) => format!("({letter}) kafka-dedup binary \"{}\"", binary(i).0),
        }
    }
}

/// 10000000 as "10M", 1500 as "1.5k".
fn count(n: u64) -> String {
    match n {
        n if n >= 1_000_000 => format!("{}M", n as f64 / 1e6),
        n if n >= 1_000 => format!("{}k", n as f64 / 1e3),
        n => n.to_string(),
    }
}

/// Counters a worker exposes to the child's monitor.
#[derive(Default)]
struct Progress {
    consumed: AtomicU64,
    done: AtomicU64,
}

/// A running copier or pipeline.
struct Worker {
    consumed: Box<dyn Fn() -> u64>,
    done: Box<dyn Fn() -> u64>,
    ready: Box<dyn Fn() -> bool>,
    report: Box<dyn Fn() -> (u64, u64, u64)>,
    stop: Box<dyn FnOnce() -> Result<(), String>>,
}

/// The same configuration for both roles: kafka-dedup's defaults with the bench's topics, group
/// and interval (and `--session-timeout` if given).
fn config(spec: &RunSpec, input: &str, output: &str, group: &str, store: &std::path::Path) -> Config {
    let mut cfg = bench_config(&spec.brokers, spec.interval, input, output, group, store);
    cfg.output.provenance = spec.provenance;
    let session = spec.session_timeout.map(|s| s.as_millis());
    for (k, v) in session.into_iter().flat_map(|session| {
        [
            ("session.timeout.ms", session),
            // librdkafka's default (3 s) unless a third of the session is shorter.
            ("heartbeat.interval.ms", (session / 3).min(3000)),
        ]
    }) {
        cfg.kafka
            .properties
            .insert(k.into(), kafka_dedup::config::PropertyValue::String(v.to_string()));
    }
    // Experiments: `KD_E2E_PROPERTIES="name=value,..."` adds client properties to both a and b.
    for kv in std::env::var("KD_E2E_PROPERTIES").unwrap_or_default().split(',') {
        if let Some((k, v)) = kv.split_once('=') {
            cfg.kafka.properties.insert(
                k.trim().into(),
                kafka_dedup::config::PropertyValue::String(v.trim().into()),
            );
        }
    }
    cfg
}

/// [`config`] from its parts (the parent pre-fills a store with it).
fn bench_config(
    brokers: &str,
    interval: Duration,
    input: &str,
    output: &str,
    group: &str,
    store: &std::path::Path,
) -> Config {
    let text = format!("[input]\ntopic = \"{input}\"\ngroup_id = \"{group}\"\n[output]\ntopic = \"{output}\"\n");
    let mut cfg = Config::from_toml_str(&text, Some(Default::default())).expect("the bench configuration is valid");
    cfg.kafka.bootstrap_servers = brokers.to_string();
    cfg.checkpoint.interval = interval;
    // Two generations, as BENCHMARKS.md's figures and `prefill`'s snapshot were made (the
    // default became 3 with issue 23).
    cfg.checkpoint.generations = 2;
    cfg.store.path = store.to_path_buf();
    cfg.http.listen = String::new();
    cfg.output.fence_wait = Duration::from_millis(500);
    cfg
}

// ---------------------------------------------------------------------------------------------
// Start-up milestones: the time from the start to the first forwarded record, in parts.

/// When the child began (set first thing in [`child`]).
static T0: OnceLock<Instant> = OnceLock::new();
/// Milestones reached in the throughput phase: name -> (first time, last time, seconds), times in
/// seconds since [`T0`]; `seconds` is the duration the first one's log event carries (the fence
/// wait's, the start-of-ownership commit's).
static MILESTONES: Mutex<BTreeMap<&'static str, (f64, f64, f64)>> = Mutex::new(BTreeMap::new());
/// Set after the throughput phase: the latency phase's start marks nothing.
static MILESTONES_DONE: AtomicBool = AtomicBool::new(false);

fn mark(name: &'static str, seconds: f64) {
    if MILESTONES_DONE.load(Ordering::Relaxed) {
        return;
    }
    let t = T0.get().map_or(0.0, |t0| t0.elapsed().as_secs_f64());
    let mut m = MILESTONES.lock().unwrap_or_else(|e| e.into_inner());
    m.entry(name).and_modify(|e| e.1 = t).or_insert((t, t, seconds));
}

/// kafka-dedup's log events that mark a step of its start (their messages), and the milestone
/// each marks. Partitions recover in parallel: the first and the last of each are kept.
const LOGGED: [(&str, &str); 8] = [
    ("new local store", "store opened"),
    ("local store opened", "store opened"),
    ("filter started", "subscribed"),
    ("partition assigned; recovering its generations", "assigned"),
    ("committed offsets fetched", "offsets read"),
    ("fence wait over", "fence over"),
    ("start-of-ownership commit", "ownership committed"),
    ("partition running", "running"),
];

/// Marks the milestones of [`LOGGED`] as kafka-dedup logs them.
struct MilestoneLayer;

/// The fields of a log event that [`MilestoneLayer`] reads.
#[derive(Default)]
struct Fields {
    message: String,
    seconds: f64,
}

impl tracing::field::Visit for Fields {
    fn record_f64(&mut self, field: &tracing::field::Field, value: f64) {
        if field.name() == "seconds" {
            self.seconds = value;
        }
    }
    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        }
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for MilestoneLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        if let Some((_, name)) = LOGGED.iter().find(|(m, _)| *m == f.message) {
            mark(name, f.seconds);
        }
    }
}

/// The copier's consumer: marks its first assignment.
struct Joined;

impl ClientContext for Joined {}

impl ConsumerContext for Joined {
    fn post_rebalance(&self, _: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let Rebalance::Assign(tpl) = rebalance {
            if tpl.count() > 0 {
                mark("assigned", 0.0);
            }
        }
    }
}

/// Delivery counter of the copier's producer.
struct Acks(Arc<Progress>);

impl ClientContext for Acks {}

impl ProducerContext for Acks {
    type DeliveryOpaque = ();
    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.0.done.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => eprintln!("copier: delivery failed: {e}"),
        }
    }
}

/// (a): consume, produce a copy to the same partition, commit the position every interval.
fn start_copier(cfg: Config) -> Worker {
    let progress = Arc::new(Progress::default());
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(AtomicBool::new(false));
    let thread = {
        let (progress, stop, ready) = (progress.clone(), stop.clone(), ready.clone());
        std::thread::spawn(move || -> Result<(), String> {
            let consumer: BaseConsumer<Joined> = kafka::consumer_config(&cfg)
                .create_with_context(Joined)
                .map_err(|e| e.to_string())?;
            let producer: ThreadedProducer<Acks> = kafka::producer_config(&cfg)
                .create_with_context(Acks(progress.clone()))
                .map_err(|e| e.to_string())?;
            consumer.subscribe(&[&cfg.input.topic]).map_err(|e| e.to_string())?;
            mark("subscribed", 0.0);
            let mut next_commit = Instant::now() + cfg.checkpoint.interval;
            let mut next_check = Instant::now();
            while !stop.load(Ordering::Relaxed) {
                if let Some(Ok(m)) = consumer.poll(Duration::from_millis(100)) {
                    progress.consumed.fetch_add(1, Ordering::Relaxed);
                    let mut record: BaseRecord<'_, [u8], [u8]> =
                        BaseRecord::to(&cfg.output.topic).partition(m.partition());
                    if let Some(k) = m.key() {
                        record = record.key(k);
                    }
                    if let Some(v) = m.payload() {
                        record = record.payload(v);
                    }
                    if let Some(ts) = m.timestamp().to_millis() {
                        record = record.timestamp(ts);
                    }
                    if let Some(h) = m.headers() {
                        record = record.headers(h.detach());
                    }
                    loop {
                        match producer.send(record) {
                            Ok(()) => break,
                            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                                record = r;
                                std::thread::sleep(Duration::from_millis(2));
                            }
                            Err((e, _)) => return Err(format!("copier: produce: {e}")),
                        }
                    }
                }
                let now = Instant::now();
                if now >= next_commit {
                    next_commit = now + cfg.checkpoint.interval;
                    if let Ok(pos) = consumer.position() {
                        let _ = consumer.commit(&pos, CommitMode::Async);
                    }
                }
                if !ready.load(Ordering::Relaxed) && now >= next_check {
                    next_check = now + Duration::from_millis(50);
                    ready.store(
                        consumer.assignment().map(|a| a.count() > 0).unwrap_or(false),
                        Ordering::Relaxed,
                    );
                }
            }
            producer.flush(Duration::from_secs(30)).map_err(|e| e.to_string())?;
            Ok(())
        })
    };
    let (p1, p2, p3) = (progress.clone(), progress.clone(), progress);
    Worker {
        consumed: Box::new(move || p1.consumed.load(Ordering::Relaxed)),
        done: Box::new(move || p2.done.load(Ordering::Relaxed)),
        ready: Box::new(move || ready.load(Ordering::Relaxed)),
        report: Box::new(move || (p3.done.load(Ordering::Relaxed), 0, 0)),
        stop: Box::new(move || {
            stop.store(true, Ordering::Relaxed);
            thread.join().map_err(|_| "copier panicked".to_string())?
        }),
    }
}

/// (b): kafka-dedup's pipeline, as `kafka-dedup run` runs it (without the HTTP listener); (c)
/// with `global`: the route stage and the filter stage, as `run` runs them in the global scope.
fn start_dedup(cfg: Config, global: bool) -> Worker {
    let status = Status::new();
    let shutdown = Shutdown::new();
    type Stage = fn(Arc<Config>, Shutdown, Arc<Status>) -> Result<(), kafka_dedup::pipeline::RunError>;
    let stages: Vec<(Stage, Config)> = match cfg.filter_stage().filter(|_| global) {
        Some(filter_cfg) => vec![(run_route as Stage, cfg), (run_filter as Stage, filter_cfg)],
        None => vec![(run_filter as Stage, cfg)],
    };
    let threads: Vec<_> = stages
        .into_iter()
        .map(|(stage, cfg)| {
            let (cfg, shutdown, status) = (Arc::new(cfg), shutdown.clone(), status.clone());
            std::thread::spawn(move || stage(cfg, shutdown, status).map_err(|e| e.to_string()))
        })
        .collect();
    let t = status.totals.clone();
    let (t1, t2, t3) = (t.clone(), t.clone(), t);
    let s = status.clone();
    Worker {
        consumed: Box::new(move || Totals::get(&t1.consumed)),
        done: Box::new(move || Totals::get(&t2.forwarded) + Totals::get(&t2.duplicates)),
        ready: Box::new(move || !s.partitions().is_empty() && s.all_running()),
        report: Box::new(move || {
            (
                Totals::get(&t3.forwarded),
                Totals::get(&t3.duplicates),
                Totals::get(&t3.checkpoints),
            )
        }),
        stop: Box::new(move || {
            shutdown.trigger();
            let results: Vec<_> = threads.into_iter().map(|t| t.join()).collect();
            for r in results {
                r.map_err(|_| "pipeline panicked".to_string())??;
            }
            Ok(())
        }),
    }
}

fn start(spec: &RunSpec, mut cfg: Config, route: &str) -> Worker {
    match spec.role {
        Role::Copier => start_copier(cfg),
        Role::Dedup => start_dedup(cfg, false),
        Role::Global => {
            cfg.fingerprint.scope = Scope::Global;
            cfg.fingerprint.route_topic = route.to_string();
            start_dedup(cfg, true)
        }
        Role::StreamsAlos | Role::StreamsEos | Role::Redis | Role::Binary(_) => {
            unreachable!("a peer runs as its own command (run_peer)")
        }
    }
}

/// User + system CPU time of this process (all threads), from `/proc/self/stat` (USER_HZ = 100).
fn cpu_seconds() -> f64 {
    proc_cpu("self")
}

/// User + system CPU time of this process's librdkafka threads (named `rdk:*`: the broker
/// threads, which fetch, build produce requests and parse responses, and `rdk:main`), from
/// `/proc/self/task/*/stat`; the rest of the process's CPU is its own threads' (poll thread,
/// delivery-report thread, recovery, store). Threads that ended are not counted.
fn librdkafka_cpu_seconds() -> f64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return f64::NAN;
    };
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.starts_with("rdk:")))
        .map(|t| proc_cpu(&format!("self/task/{}", t.file_name().to_string_lossy())))
        .sum()
}

/// The broker's CPU time (`KD_E2E_BROKER_PID`, set by scripts/bench.sh); NaN without it.
fn broker_cpu() -> f64 {
    std::env::var("KD_E2E_BROKER_PID").map_or(f64::NAN, |pid| proc_cpu(&pid))
}

/// Peak RSS (`VmHWM`) of a process, bytes.
fn proc_hwm(pid: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// User + system CPU time of process `pid` ("self" or a number), all threads.
fn proc_cpu(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let f: Vec<&str> = after.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    (ticks(11) + ticks(12)) as f64 / 100.0
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("{name} is set by the parent"))
}

/// The child: throughput phase, report, latency phase until the parent writes STOP.
fn child() -> Result<(), String> {
    let spec = RunSpec {
        role: match env("KD_E2E_ROLE").as_str() {
            "copier" => Role::Copier,
            "global" => Role::Global,
            "dedup" => Role::Dedup,
            other => return Err(format!("no in-process role {other}")),
        },
        brokers: env("KD_E2E_BROKERS"),
        input: env("KD_E2E_INPUT"),
        output: env("KD_E2E_OUTPUT"),
        latency_input: env("KD_E2E_LATENCY_INPUT"),
        latency_output: env("KD_E2E_LATENCY_OUTPUT"),
        route: env("KD_E2E_ROUTE"),
        latency_route: env("KD_E2E_LATENCY_ROUTE"),
        group: env("KD_E2E_GROUP"),
        store: env("KD_E2E_STORE").into(),
        records: env("KD_E2E_RECORDS").parse().expect("a count"),
        interval: Duration::from_millis(env("KD_E2E_INTERVAL_MS").parse().expect("milliseconds")),
        provenance: env("KD_E2E_PROVENANCE") == "true",
        session_timeout: env("KD_E2E_SESSION_TIMEOUT_MS").parse().ok().map(Duration::from_millis),
    };
    let _ = T0.set(Instant::now());
    // The log as configured (RUST_LOG), and kafka-dedup's start-up events for the milestones.
    let shown = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,librdkafka=error"));
    let steps = tracing_subscriber::filter::Targets::new()
        .with_target("kafka_dedup::pipeline", tracing::Level::DEBUG)
        .with_target("kafka_dedup::recovery", tracing::Level::DEBUG);
    let _ = tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_filter(shown),
        )
        .with(MilestoneLayer.with_filter(steps))
        .try_init();
    if spec.role != Role::Copier {
        // As `kafka-dedup run`: metrics are recorded (scraping is not part of this benchmark).
        let _ = kafka_dedup::service::prometheus();
    }
    let out = std::io::stdout();
    let say = |line: String| {
        let mut o = out.lock();
        let _ = writeln!(o, "{line}");
        let _ = o.flush();
    };

    // Throughput.
    let cfg = config(&spec, &spec.input, &spec.output, &spec.group, &spec.store.join("a"));
    let worker = start(&spec, cfg, &spec.route);
    let deadline = Instant::now() + Duration::from_secs(900);
    // The steady state: from the moment every partition is assigned (and, for kafka-dedup,
    // recovered; partitions recover in parallel and start one by one) to the last record done.
    // Start-up is not part of the rate: recovery has its own benchmark.
    let mut steady: Option<(Instant, u64, f64, f64, f64)> = None;
    let (mut last_consumed, mut last_change, mut stall) = (0u64, Instant::now(), Duration::ZERO);
    let mut next_progress = Instant::now();
    let (finished, done, cpu_done, broker_done, hwm, rdk_done) = loop {
        let (consumed, done) = ((worker.consumed)(), (worker.done)());
        let now = Instant::now();
        if consumed > 0 {
            mark("consumed", 0.0);
        }
        if done > 0 {
            mark("done", 0.0);
        }
        if steady.is_none() && (worker.ready)() {
            steady = Some((now, done, cpu_seconds(), broker_cpu(), librdkafka_cpu_seconds()));
            last_change = now;
        }
        if done >= spec.records {
            break (
                now,
                done,
                cpu_seconds(),
                broker_cpu(),
                support::peak_rss_bytes(),
                librdkafka_cpu_seconds(),
            );
        }
        if consumed != last_consumed {
            last_consumed = consumed;
            last_change = now;
        } else if steady.is_some() && consumed < spec.records {
            stall = stall.max(now - last_change);
        }
        if now >= next_progress {
            next_progress = now + Duration::from_millis(100);
            say(format!("P {done}"));
        }
        if now > deadline {
            return Err(format!(
                "{}: {done} of {} records done after 15 minutes",
                spec.role.name(),
                spec.records
            ));
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let (t0, done0, cpu0, broker0, rdk0) = steady.ok_or("finished before every partition was assigned")?;
    if done - done0 < spec.records / 2 {
        return Err(format!(
            "{}: only {} of {} records were done in the steady state; use more --records",
            spec.role.name(),
            done - done0,
            spec.records
        ));
    }
    let (forwarded, duplicates, checkpoints) = (worker.report)();
    // Figures per record done in the steady state.
    say(format!(
        "R {} {} {} {} {} {} {} {} {} {} {}",
        (finished - t0).as_secs_f64(),
        cpu_done - cpu0,
        hwm,
        stall.as_secs_f64(),
        forwarded,
        duplicates,
        checkpoints,
        done - done0,
        support::rss_bytes(),
        broker_done - broker0,
        rdk_done - rdk0
    ));
    MILESTONES_DONE.store(true, Ordering::Relaxed);
    for (name, (first, last, secs)) in MILESTONES.lock().unwrap_or_else(|e| e.into_inner()).iter() {
        say(format!("T {} {first} {last} {secs}", name.replace(' ', "_")));
    }
    (worker.stop)()?;

    // Latency: a new pair of topics, records arriving at a steady rate from the parent.
    let group = format!("{}-latency", spec.group);
    let cfg = config(
        &spec,
        &spec.latency_input,
        &spec.latency_output,
        &group,
        &spec.store.join("b"),
    );
    let worker = start(&spec, cfg, &spec.latency_route);
    while !(worker.ready)() {
        if Instant::now() > deadline {
            return Err("the latency phase did not start".into());
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    say("READY".into());
    let mut line = String::new();
    let _ = std::io::stdin().read_line(&mut line); // STOP, or the parent is gone
    (worker.stop)()?;
    say("BYE".into());
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Parent: broker, topics, input, runs, table.

fn client(brokers: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", brokers);
    c
}

/// Where the topics live: a broker given with `--brokers`, or a mock cluster owned here.
struct Broker {
    brokers: String,
    mock: Option<MockCluster<'static, rdkafka::producer::DefaultProducerContext>>,
}

impl Broker {
    /// Deletes a run's topics once its figures are in (a real broker keeps every record on disk:
    /// 1M records of 1 KB are 1 GB a topic). Best effort; nothing on the mock cluster.
    fn delete_topics(&self, names: &[&str]) {
        if self.mock.is_some() {
            return;
        }
        let Ok(admin) = client(&self.brokers).create::<AdminClient<DefaultClientContext>>() else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() {
            let _ = rt.block_on(admin.delete_topics(names, &AdminOptions::new()));
        }
    }

    fn create_topic(&self, name: &str, partitions: i32) -> Result<(), String> {
        if let Some(m) = &self.mock {
            m.create_topic(name, partitions, 1).map_err(|e| e.to_string())?;
        } else {
            let admin: AdminClient<DefaultClientContext> = client(&self.brokers).create().map_err(|e| e.to_string())?;
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            let topic = NewTopic::new(name, partitions, TopicReplication::Fixed(1));
            let res = rt
                .block_on(admin.create_topics(&[topic], &AdminOptions::new()))
                .map_err(|e| e.to_string())?;
            for r in res {
                r.map_err(|(t, e)| format!("create topic {t}: {e}"))?;
            }
        }
        // Wait until the metadata shows every partition.
        let c: BaseConsumer = client(&self.brokers).create().map_err(|e| e.to_string())?;
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(Some(n)) = kafka::partition_count(c.client(), name, Duration::from_secs(5)) {
                if n == partitions as usize {
                    return Ok(());
                }
            }
            if Instant::now() > deadline {
                return Err(format!("topic {name} did not appear"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A producer for the bench's own records: uncompressed, so the input's batches cost the copier
/// and kafka-dedup no decompression beyond what a user's uncompressed topic would.
fn producer(brokers: &str, linger_ms: &str) -> Result<BaseProducer, String> {
    client(brokers)
        .set("linger.ms", linger_ms)
        .set("queue.buffering.max.messages", "1000000")
        .set("compression.type", "none")
        .create()
        .map_err(|e| e.to_string())
}

fn send(p: &BaseProducer, mut r: BaseRecord<'_, str, [u8]>) -> Result<(), String> {
    loop {
        match p.send(r) {
            Ok(()) => {
                p.poll(Duration::ZERO);
                return Ok(());
            }
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                r = back;
                p.poll(Duration::from_millis(10));
            }
            Err((e, _)) => return Err(e.to_string()),
        }
    }
}

/// The value of event `id`: JSON with the id, padded to `bytes`.
fn value(id: u64, bytes: usize) -> Vec<u8> {
    let mut v = format!("{{\"id\":{id},\"pad\":\"").into_bytes();
    v.resize(bytes.saturating_sub(2).max(v.len()), b'x');
    v.extend_from_slice(b"\"}");
    v
}

fn style(template: &str) -> ProgressStyle {
    ProgressStyle::with_template(template)
        .expect("valid template")
        .progress_chars("=> ")
}

/// Writes the input; returns the number of distinct events.
fn produce_input(args: &Args, topic: &str) -> Result<u64, String> {
    let p = producer(&args.brokers_or_default(), "20")?;
    let bar = ProgressBar::new(args.records).with_style(style("{msg:24} [{bar:30}] {pos}/{len} {per_sec}"));
    bar.set_message("writing the input");
    let mut rng = rand::rngs::StdRng::seed_from_u64(42);
    let mut recent: VecDeque<u64> = VecDeque::with_capacity(1000);
    let mut distinct = 0u64;
    for i in 0..args.records {
        let id = if !recent.is_empty() && rng.gen_bool(args.duplicates.clamp(0.0, 1.0)) {
            recent[rng.gen_range(0..recent.len())]
        } else {
            distinct += 1;
            if recent.len() == 1000 {
                recent.pop_front();
            }
            recent.push_back(distinct);
            distinct
        };
        let key = format!("k{id:010}");
        let v = value(id, args.bytes());
        send(&p, BaseRecord::to(topic).key(key.as_str()).payload(v.as_slice()))?;
        if i % 1000 == 0 {
            bar.set_position(i);
        }
    }
    p.flush(Duration::from_secs(120)).map_err(|e| e.to_string())?;
    bar.finish_and_clear();
    Ok(distinct)
}

/// Start-up milestones of a run: name -> (first, last, seconds), see [`MILESTONES`].
type Marks = BTreeMap<String, (f64, f64, f64)>;

/// One run's figures.
#[derive(Debug, Clone, Default)]
struct RunResult {
    secs: f64,
    cpu: f64,
    peak_rss: u64,
    stall: f64,
    forwarded: u64,
    duplicates: u64,
    checkpoints: u64,
    /// Records done in the steady state (the rate's numerator).
    steady: u64,
    /// Resident set size when the throughput phase ended, bytes.
    rss_end: u64,
    /// The broker's CPU seconds over the steady window (NaN: unknown).
    broker_cpu: f64,
    /// Of `cpu`, the librdkafka threads' (`rdk:*`), seconds (NaN: unknown, the peers).
    rdk_cpu: f64,
    /// Latencies of the latency phase, milliseconds, sorted.
    latencies: Vec<i64>,
    /// Start-up milestones, see [`MILESTONES`].
    milestones: Marks,
}

impl Args {
    fn brokers_or_default(&self) -> String {
        self.brokers.clone().unwrap_or_default()
    }

    /// The value size of this pass (the parent runs one pass per `--record-bytes`).
    fn bytes(&self) -> usize {
        self.record_bytes.first().copied().unwrap_or(100)
    }

    /// The prefix of this pass's topics and groups.
    fn prefix(&self) -> String {
        format!("kd-e2e-{}B-{}p", self.bytes(), self.partitions)
    }
}

fn now_ms() -> i64 {
    kafka_dedup::generations::now_ms()
}

/// Latency phase, parent side: paced records to `input`, arrival − timestamp read from `output`.
fn measure_latency(args: &Args, rate: u64, brokers: &str, input: &str, output: &str) -> Result<Vec<i64>, String> {
    let n = (args.latency_seconds * rate as f64) as u64;
    let reader: BaseConsumer = client(brokers)
        .set("group.id", "kd-e2e-latency-reader")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "10")
        .create()
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..args.partitions {
        tpl.add_partition_offset(output, p, Offset::Beginning)
            .map_err(|e| e.to_string())?;
    }
    reader.assign(&tpl).map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::channel();
    let writer = {
        let (brokers, input, rate, bytes) = (brokers.to_string(), input.to_string(), rate.max(1), args.bytes());
        std::thread::spawn(move || -> Result<(), String> {
            // linger.ms 5 (librdkafka's default, kafka-dedup's): at half the copier's rate, one
            // request per record would make the parent the limit; a and b wait the same.
            let p = producer(&brokers, "5")?;
            let start = Instant::now();
            for i in 0..n {
                let due = start + Duration::from_secs_f64(i as f64 / rate as f64);
                while Instant::now() < due {
                    p.poll(
                        due.saturating_duration_since(Instant::now())
                            .min(Duration::from_millis(1)),
                    );
                }
                let key = format!("l{i:010}");
                let v = value(i, bytes);
                send(
                    &p,
                    BaseRecord::to(&input)
                        .key(key.as_str())
                        .payload(v.as_slice())
                        .timestamp(now_ms()),
                )?;
            }
            p.flush(Duration::from_secs(30)).map_err(|e| e.to_string())?;
            let _ = tx.send(());
            Ok(())
        })
    };
    let mut lat = Vec::with_capacity(n as usize);
    let mut deadline = None;
    while (lat.len() as u64) < n {
        if let Some(Ok(m)) = reader.poll(Duration::from_millis(10)) {
            if let Some(ts) = m.timestamp().to_millis() {
                lat.push(now_ms() - ts);
            }
        }
        if deadline.is_none() && rx.try_recv().is_ok() {
            deadline = Some(Instant::now() + Duration::from_secs(60));
        }
        if deadline.is_some_and(|d| Instant::now() > d) {
            return Err(format!("latency phase: {} of {n} records arrived", lat.len()));
        }
    }
    writer.join().map_err(|_| "latency writer panicked".to_string())??;
    lat.sort_unstable();
    Ok(lat)
}

/// `program` as a command, run under `perf record` into `--perf DIR` (`<label>.data`, the
/// directory created if missing) or under callgrind into `--callgrind DIR` when asked;
/// `KD_E2E_PERF_ARGS` replaces perf's sampling options (default `-F 999`; e.g. "-F 499
/// --call-graph dwarf"). Errors: the directory cannot be made.
fn profiled(args: &Args, label: &str, program: impl AsRef<std::ffi::OsStr>) -> Result<Command, String> {
    if let Some(dir) = &args.callgrind {
        std::fs::create_dir_all(dir).map_err(|e| format!("--callgrind {}: {e}", dir.display()))?;
        let mut c = Command::new("valgrind");
        c.args(["--tool=callgrind", "--separate-threads=yes"])
            .arg(format!(
                "--callgrind-out-file={}",
                dir.join(format!("{label}.%p")).display()
            ))
            .arg(program);
        return Ok(c);
    }
    let Some(dir) = &args.perf else {
        return Ok(Command::new(program));
    };
    std::fs::create_dir_all(dir).map_err(|e| format!("--perf {}: {e}", dir.display()))?;
    let mut c = Command::new("perf");
    let options = std::env::var("KD_E2E_PERF_ARGS").unwrap_or_else(|_| "-F 999".into());
    c.args(["record", "-q"])
        .args(options.split_whitespace())
        .arg("-o")
        .arg(dir.join(format!("{label}.data")))
        .arg("--")
        .arg(program);
    Ok(c)
}
/// Stops a peer or `--binary` child as an operator does, SIGTERM (kafka-dedup then hands its
/// partitions over and a profiler under it writes its data), then SIGKILL after 60 s.
fn stop_child(child: &mut std::process::Child) {
    let pid = child.id() as libc::pid_t;
    // SAFETY: signals the child this function owns, not yet waited for (its pid is not reused).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let deadline = Instant::now() + Duration::from_secs(60);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// One run of `role` as a child process.
fn run_one(
    args: &Args,
    broker: &Broker,
    variant: Variant,
    run: usize,
    input: &str,
    bar: &ProgressBar,
    latency_rate: &mut u64,
) -> Result<RunResult, String> {
    let brokers = &broker.brokers;
    let name = variant.name();
    let prefix = args.prefix();
    let output = format!("{prefix}-{run}-{name}-out");
    let (lat_in, lat_out) = (
        format!("{prefix}-{run}-{name}-lat-in"),
        format!("{prefix}-{run}-{name}-lat-out"),
    );
    let (route, lat_route) = (
        format!("{prefix}-{run}-{name}-route"),
        format!("{prefix}-{run}-{name}-lat-route"),
    );
    for t in [&output, &lat_in, &lat_out] {
        broker.create_topic(t, args.partitions)?;
    }
    if variant.role == Role::Global {
        for t in [&route, &lat_route] {
            broker.create_topic(t, args.partitions)?;
        }
    }
    let group = format!("{prefix}-{run}-{name}");
    let store = tempfile::tempdir().map_err(|e| e.to_string())?;
    if variant.held > 0 {
        bar.set_message(format!("{} (pre-filling)", bar.message()));
        let cfg = bench_config(
            brokers,
            args.checkpoint_interval.into(),
            input,
            &output,
            &group,
            &store.path().join("a"),
        );
        prefill(&cfg, args.partitions, variant.held)?;
    }
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut command = profiled(args, &format!("{name}-{run}"), exe)?;
    let mut child = command
        .env("KD_E2E_ROLE", variant.role.name())
        .env("KD_E2E_PROVENANCE", variant.provenance.to_string())
        .env(
            "KD_E2E_SESSION_TIMEOUT_MS",
            args.session_timeout
                .map_or(String::new(), |s| Duration::from(s).as_millis().to_string()),
        )
        .env("KD_E2E_BROKERS", brokers)
        .env("KD_E2E_INPUT", input)
        .env("KD_E2E_OUTPUT", &output)
        .env("KD_E2E_LATENCY_INPUT", &lat_in)
        .env("KD_E2E_LATENCY_OUTPUT", &lat_out)
        .env("KD_E2E_ROUTE", &route)
        .env("KD_E2E_LATENCY_ROUTE", &lat_route)
        .env("KD_E2E_GROUP", &group)
        .env("KD_E2E_STORE", store.path())
        .env("KD_E2E_RECORDS", args.records.to_string())
        .env(
            "KD_E2E_INTERVAL_MS",
            Duration::from(args.checkpoint_interval).as_millis().to_string(),
        )
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().expect("piped");
    let stdout = BufReader::new(child.stdout.take().expect("piped"));
    bar.set_length(args.records);
    bar.set_position(0);
    let mut result = RunResult::default();
    let mut lines = stdout.lines();
    let mut failed = None;
    while let Some(Ok(line)) = lines.next() {
        let mut f = line.split_whitespace();
        match f.next() {
            Some("P") => bar.set_position(f.next().and_then(|s| s.parse().ok()).unwrap_or(0)),
            Some("R") => {
                let v: Vec<f64> = f.map(|s| s.parse().unwrap_or(0.0)).collect();
                result.secs = v[0];
                result.cpu = v[1];
                result.peak_rss = v[2] as u64;
                result.stall = v[3];
                result.forwarded = v[4] as u64;
                result.duplicates = v[5] as u64;
                result.checkpoints = v[6] as u64;
                result.steady = v[7] as u64;
                result.rss_end = v.get(8).copied().unwrap_or(0.0) as u64;
                result.broker_cpu = v.get(9).copied().unwrap_or(f64::NAN);
                result.rdk_cpu = v.get(10).copied().unwrap_or(f64::NAN);
                if *latency_rate == 0 && variant.role == Role::Copier {
                    *latency_rate = ((result.steady as f64 / result.secs) / 2.0).max(1.0) as u64;
                }
                bar.set_position(args.records);
            }
            Some("T") => {
                let name = f.next().unwrap_or("?").replace('_', " ");
                let v: Vec<f64> = f.map(|s| s.parse().unwrap_or(f64::NAN)).collect();
                if v.len() == 3 {
                    result.milestones.insert(name, (v[0], v[1], v[2]));
                }
            }
            Some("READY") => {
                if args.latency_seconds > 0.0 && *latency_rate > 0 {
                    bar.set_message(format!("{} latency", bar.message()));
                    match measure_latency(args, *latency_rate, brokers, &lat_in, &lat_out) {
                        Ok(l) => result.latencies = l,
                        Err(e) => failed = Some(e),
                    }
                }
                let _ = writeln!(stdin, "STOP");
                let _ = stdin.flush();
            }
            Some("BYE") => break,
            _ => {}
        }
    }
    drop(stdin);
    let status = child.wait().map_err(|e| e.to_string())?;
    broker.delete_topics(&[&output, &lat_in, &lat_out, &route, &lat_route]);
    if let Some(e) = failed {
        return Err(e);
    }
    if !status.success() || result.secs == 0.0 {
        return Err(format!("{name} run {run} failed ({status})"));
    }
    Ok(result)
}

/// One run of a peer (`--peers`, `benches/peers/`): an external command started with the
/// broker, topics and group as arguments, measured from outside (see the module's doc).
fn run_peer(
    args: &Args,
    broker: &Broker,
    role: Role,
    run: usize,
    input: &str,
    distinct: u64,
    bar: &ProgressBar,
) -> Result<RunResult, String> {
    let brokers = &broker.brokers;
    let name = role.name();
    let output = format!("{}-{run}-{name}-out", args.prefix());
    let group = format!("{}-{run}-{name}", args.prefix());
    broker.create_topic(&output, args.partitions)?;
    let state = tempfile::tempdir().map_err(|e| e.to_string())?;
    // The horizon kafka-dedup keeps at most: `checkpoint.generations` (default 2) intervals.
    let horizon_ms = (Duration::from(args.checkpoint_interval).as_millis() * 2).to_string();
    let var =
        |n: &str| std::env::var(n).map_err(|_| format!("--peers: {n} is not set (scripts/bench.sh --peers sets it)"));
    let peers = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("benches/peers");
    let (mut command, extra) = match role {
        Role::Redis => {
            let mut c = Command::new("python3");
            c.env("PYTHONPATH", var("KD_E2E_PYTHONPATH")?)
                .arg(peers.join("redis_dedup.py"))
                .args([brokers, input, &output, &group, &var("KD_E2E_REDIS_PORT")?, &horizon_ms]);
            (c, std::env::var("KD_E2E_REDIS_PID").ok())
        }
        Role::Binary(i) => {
            // Only keys every release has known; the rest are the release's defaults.
            let config = state.path().join("kafka-dedup.toml");
            let toml = format!(
                "[kafka]\nbootstrap_servers = \"{brokers}\"\n[input]\ntopic = \"{input}\"\ngroup_id = \"{group}\"\n\
                 [output]\ntopic = \"{output}\"\n[checkpoint]\ninterval = \"{}\"\n[store]\npath = \"{}\"\n\
                 [http]\nlisten = \"\"\n",
                args.checkpoint_interval,
                state.path().join("store").display()
            );
            std::fs::write(&config, toml).map_err(|e| e.to_string())?;
            let mut c = profiled(args, &format!("{name}-{run}"), &binary(i).1)?;
            c.arg("run")
                .arg("--config")
                .arg(&config)
                .env("RUST_LOG", "warn")
                .stderr(Stdio::null());
            (c, None)
        }
        _ => {
            let mut c = Command::new("java");
            let guarantee = if role == Role::StreamsEos {
                "exactly_once_v2"
            } else {
                "at_least_once"
            };
            c.args([
                "-Xmx1g",
                "-cp",
                &var("KD_E2E_STREAMS_CP")?,
                "kafkadedup.peers.StreamsDedup",
            ])
            .args([brokers, input, &output, &group, guarantee, &horizon_ms])
            .arg(state.path());
            (c, None)
        }
    };
    let spawned = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .map_err(|e| format!("{name}: {e}"))?;
    let pid = child.id().to_string();
    let cpu = |pid: &str, extra: &Option<String>| proc_cpu(pid) + extra.as_deref().map_or(0.0, proc_cpu);
    let watch: BaseConsumer = client(brokers).create().map_err(|e| e.to_string())?;
    let end_offsets = || -> u64 {
        (0..args.partitions)
            .map(|p| {
                watch
                    .fetch_watermarks(&output, p, Duration::from_secs(5))
                    .map_or(0, |(_, high)| high.max(0) as u64)
            })
            .sum()
    };
    bar.set_length(distinct);
    bar.set_position(0);
    let deadline = spawned + Duration::from_secs(900);
    // (time, end offsets, the peer's CPU, the broker's CPU) at the first output record and at
    // the last change of the end offsets.
    let mut first: Option<(Instant, u64, f64, f64)> = None;
    let mut last = (Instant::now(), 0u64, 0.0f64, 0.0f64);
    let outcome = loop {
        let sum = end_offsets();
        let now = Instant::now();
        if sum > 0 && first.is_none() {
            first = Some((now, sum, cpu(&pid, &extra), broker_cpu()));
        }
        if sum != last.1 {
            last = (now, sum, cpu(&pid, &extra), broker_cpu());
            bar.set_position(sum);
        }
        // Exactly the distinct records (at_least_once), or more: exactly_once_v2's transaction
        // markers take offsets too; then done once the end offsets stood still for 2 s.
        if sum == distinct || (sum > distinct && now - last.0 > Duration::from_secs(2)) {
            break Ok(());
        }
        if let Ok(Some(status)) = child.try_wait() {
            break Err(format!(
                "{name} exited ({status}) with {sum} of {distinct} records forwarded"
            ));
        }
        if now > deadline {
            break Err(format!(
                "{name}: {sum} of {distinct} records forwarded after 15 minutes"
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let peak_rss = proc_hwm(&pid);
    stop_child(&mut child);
    outcome?;
    let (t0, sum0, cpu0, broker0) = first.ok_or("no output")?;
    let (t1, sum1, cpu1, broker1) = last;
    // The output, counted (read_committed: without exactly_once_v2's aborted records and markers).
    bar.set_message(format!("{} (counting)", bar.message()));
    let reader: BaseConsumer = client(brokers)
        .set("group.id", format!("{group}-count"))
        .set("enable.auto.commit", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(|e| e.to_string())?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..args.partitions {
        tpl.add_partition_offset(&output, p, Offset::Beginning)
            .map_err(|e| e.to_string())?;
    }
    reader.assign(&tpl).map_err(|e| e.to_string())?;
    let (mut forwarded, mut idle) = (0u64, Instant::now());
    while idle.elapsed() < Duration::from_secs(5) && forwarded < distinct {
        if let Some(Ok(_)) = reader.poll(Duration::from_millis(100)) {
            forwarded += 1;
            idle = Instant::now();
        }
    }
    drop(reader);
    // Kafka Streams' changelog of the store too.
    broker.delete_topics(&[&output, &format!("{group}-ids-changelog")]);
    let scale = args.records as f64 / distinct.max(1) as f64;
    let mut milestones = Marks::new();
    let started = (t0 - spawned).as_secs_f64();
    milestones.insert("done".into(), (started, started, 0.0));
    Ok(RunResult {
        secs: (t1 - t0).as_secs_f64(),
        cpu: cpu1 - cpu0,
        peak_rss,
        stall: f64::NAN,
        forwarded,
        duplicates: args.records - forwarded.min(args.records),
        checkpoints: 0,
        steady: ((sum1 - sum0) as f64 * scale) as u64,
        rss_end: 0,
        broker_cpu: broker1 - broker0,
        rdk_cpu: f64::NAN,
        latencies: Vec::new(),
        milestones,
    })
}

/// A long horizon, pre-filled: a store holding `held` fingerprints over `partitions` partitions
/// (per partition two generations of half each, as `checkpoint.generations = 2` holds them),
/// each partition's snapshot taken at input offset 0, and the group's offset 0 committed for
/// every input partition. kafka-dedup's recovery loads it (a snapshot at exactly the committed
/// offset, docs/guarantee.md, "Crash safety"; it waits for the fence, as after a crash) before the
/// throughput phase begins, so the whole phase runs with the fingerprints held. They never match
/// a record (other fingerprint streams), and the partition clock is "now", later than every
/// input record, so the run rotates no generation away.
fn prefill(cfg: &Config, partitions: i32, held: u64) -> Result<(), String> {
    let identity = kafka_dedup::pipeline::identity_of(cfg);
    let (store, _) = Store::open_for_run(&cfg.store.path, &identity).map_err(|e| e.to_string())?;
    let per = held / partitions.max(1) as u64;
    let now = now_ms();
    let bucket = kafka_dedup::horizon::bucket_of(now, cfg.checkpoint.interval.as_millis() as i64);
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        let out: Positions = [(p, 0)].into_iter().collect();
        let gens: Vec<Generation> = [(1u64, per - per / 2), (2, per / 2)]
            .into_iter()
            .map(|(epoch, n)| {
                let mut g = Generation::new(epoch, 0, out.clone(), 0);
                g.table = support::table(1000 + p as u64 * 2 + epoch, n);
                g.bucket = Some(bucket - 2 + epoch as i64);
                g
            })
            .collect();
        store
            .save(&[PartitionWrite {
                partition: p,
                epoch: 2,
                ckpt: kafka_dedup::metadata::new_checkpoint_id(),
                committed_offset: 0,
                out_covered: out.clone(),
                generations: gens.iter().collect(),
                clean: false,
                clock: Some(now),
            }])
            .map_err(|e| format!("pre-fill: {e}"))?;
        tpl.add_partition_offset(&cfg.input.topic, p, Offset::Offset(0))
            .map_err(|e| e.to_string())?;
    }
    drop(store);
    let c: BaseConsumer = client(&cfg.kafka.bootstrap_servers)
        .set("group.id", &cfg.input.group_id)
        .create()
        .map_err(|e| e.to_string())?;
    c.commit(&tpl, CommitMode::Sync)
        .map_err(|e| format!("pre-fill: commit: {e}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

fn percentile(sorted: &[i64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i] as f64
}

/// Medians over the runs of one role: (records/s, p50 ms, p99 ms, peak RSS MiB, CPU µs/record,
/// longest stall ms, the broker's CPU µs/record, of the CPU µs/record the librdkafka threads').
fn summary(runs: &[RunResult]) -> [f64; 8] {
    let m = |f: &dyn Fn(&RunResult) -> f64| median(runs.iter().map(f).collect());
    [
        m(&|r| r.steady as f64 / r.secs),
        m(&|r| percentile(&r.latencies, 0.50)),
        m(&|r| percentile(&r.latencies, 0.99)),
        m(&|r| r.peak_rss as f64 / (1 << 20) as f64),
        m(&|r| r.cpu / r.steady as f64 * 1e6),
        m(&|r| r.stall * 1e3),
        m(&|r| r.broker_cpu / r.steady as f64 * 1e6),
        m(&|r| r.rdk_cpu / r.steady as f64 * 1e6),
    ]
}

fn parent(args: Args) -> Result<(), String> {
    let broker = match &args.brokers {
        Some(b) => Broker {
            brokers: b.clone(),
            mock: None,
        },
        None => {
            let mock = MockCluster::new(1).map_err(|e| e.to_string())?;
            Broker {
                brokers: mock.bootstrap_servers(),
                mock: Some(mock),
            }
        }
    };
    let args = Args {
        brokers: Some(broker.brokers.clone()),
        ..args
    };
    for bytes in args.record_bytes.clone() {
        for partitions in args.partition_counts.clone() {
            let pass = Args {
                record_bytes: vec![bytes],
                partitions,
                ..args.clone()
            };
            one_pass(&pass, &broker)?;
        }
    }
    Ok(())
}

/// The benchmark at one value size.
fn one_pass(args: &Args, broker: &Broker) -> Result<(), String> {
    let which = if broker.mock.is_some() {
        "librdkafka's in-process mock cluster (no --brokers)".to_string()
    } else {
        format!("the broker at {}", broker.brokers)
    };
    println!(
        "\nkafka-dedup e2e: {} records of {} B ({:.0}% replays), {} partitions, {} rounds of each run, checkpoint every {}, on {which}",
        args.records,
        args.bytes(),
        args.duplicates * 100.0,
        args.partitions,
        args.rounds,
        args.checkpoint_interval
    );
    let input = format!("{}-input", args.prefix());
    let input = input.as_str();
    broker.create_topic(input, args.partitions)?;
    let distinct = produce_input(args, input)?;
    let replays = args.records - distinct;

    let bar = ProgressBar::new(args.records).with_style(style("{msg:24} [{bar:30}] {pos}/{len} {per_sec}"));
    let mut variants = vec![Variant::COPIER, Variant::DEDUP];
    if args.held > 0 {
        variants.push(Variant {
            held: args.held,
            ..Variant::DEDUP
        });
    }
    if args.compare_provenance {
        variants.push(Variant {
            provenance: false,
            ..Variant::DEDUP
        });
    }
    if args.global {
        variants.push(Variant {
            role: Role::Global,
            ..Variant::DEDUP
        });
    }
    if args.peers {
        for role in [Role::StreamsAlos, Role::StreamsEos, Role::Redis] {
            variants.push(Variant { role, ..Variant::DEDUP });
        }
    }
    for i in 0..args.binaries.len() {
        variants.push(Variant {
            role: Role::Binary(i as u8),
            ..Variant::DEDUP
        });
    }
    let mut latency_rate = args.latency_rate;
    let mut results: Vec<Vec<RunResult>> = vec![Vec::new(); variants.len()];
    let mut rows = Vec::new();
    let mut run = 0;
    for round in 0..args.rounds {
        // Alternating: a b c / c b a / a b c ...
        let mut order: Vec<usize> = (0..variants.len()).collect();
        if round % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let variant = variants[i];
            bar.set_message(format!("round {}/{} {}", round + 1, args.rounds, variant.name()));
            let r = if variant.role.external() {
                run_peer(args, broker, variant.role, run, input, distinct, &bar)?
            } else {
                run_one(args, broker, variant, run, input, &bar, &mut latency_rate)?
            };
            run += 1;
            let ok = match variant.role {
                Role::Copier => r.forwarded == args.records,
                _ => r.forwarded == distinct && r.duplicates == replays,
            };
            if !ok {
                bar.finish_and_clear();
                let copier = variant.role == Role::Copier;
                return Err(format!(
                    "{} round {}: forwarded {} and dropped {}, expected {} and {}",
                    variant.name(),
                    round + 1,
                    r.forwarded,
                    r.duplicates,
                    if copier { args.records } else { distinct },
                    if copier { 0 } else { replays }
                ));
            }
            rows.push((round, variant, r.clone()));
            results[i].push(r);
        }
    }
    bar.finish_and_clear();
    let letters: Vec<char> = ('a'..='z').take(variants.len()).collect();

    println!("\nruns, in order:");
    println!(
        "{:<6} {:<18} {:>10} {:>8} {:>8} {:>10} {:>10} {:>9} {:>11} {:>9} {:>12}",
        "round",
        "run",
        "records/s",
        "p50 ms",
        "p99 ms",
        "RSS MiB",
        "CPU µs/rec",
        "(rdk:*)",
        "broker µs/r",
        "stall ms",
        "checkpoints"
    );
    for (round, variant, r) in &rows {
        let s = summary(std::slice::from_ref(r));
        println!(
            "{:<6} {:<18} {:>10.0} {:>8.0} {:>8.0} {:>10.1} {:>10.2} {:>9.2} {:>11.2} {:>9.0} {:>12}",
            round + 1,
            variant.name(),
            s[0],
            s[1],
            s[2],
            s[3],
            s[4],
            s[7],
            s[6],
            s[5],
            r.checkpoints
        );
    }
    let sums: Vec<[f64; 8]> = results.iter().map(|r| summary(r)).collect();
    println!(
        "\nmedians of {} runs each ({} B values; latency at {} records/s, half the copier's first run unless --latency-rate):",
        args.rounds,
        args.bytes(),
        latency_rate
    );
    println!(
        "{:<40} {:>10} {:>8} {:>8} {:>13} {:>14} {:>9} {:>16} {:>17}",
        "",
        "records/s",
        "p50 ms",
        "p99 ms",
        "peak RSS MiB",
        "CPU µs/record",
        "(rdk:*)",
        "broker µs/record",
        "longest stall ms"
    );
    for (i, v) in variants.iter().enumerate() {
        let s = sums[i];
        println!(
            "{:<40} {:>10.0} {:>8.0} {:>8.0} {:>13.1} {:>14.2} {:>9.2} {:>16.2} {:>17.0}",
            v.label(letters[i]),
            s[0],
            s[1],
            s[2],
            s[3],
            s[4],
            s[7],
            s[6],
            s[5]
        );
    }
    let ratio = |x: usize, y: usize, what: &str| {
        let (sx, sy) = (sums[x], sums[y]);
        println!(
            "{:<40} {:>9.3}x {:>+8.0} {:>+8.0} {:>12.2}x {:>13.2}x",
            format!("{}/{} {what}", letters[x], letters[y]),
            sx[0] / sy[0],
            sx[1] - sy[1],
            sx[2] - sy[2],
            sx[3] / sy[3],
            sx[4] / sy[4]
        );
    };
    println!("ratios (records/s, RSS and CPU: x/y; latency: x - y):");
    for (i, v) in variants.iter().enumerate().skip(1) {
        let what = match (v.role, v.held, v.provenance) {
            (Role::Global, _, _) => "global / copier",
            (r, _, _) if r.external() => "peer / copier",
            (_, 0, true) => "kafka-dedup / copier",
            (_, 0, false) => "provenance off / copier",
            _ => "held / copier",
        };
        ratio(i, 0, what);
        if i > 1 && !v.role.external() {
            let what = match (v.role, v.held) {
                (Role::Global, _) => "global / partition scope",
                (_, 0) => "provenance off / on",
                _ => "held / empty horizon",
            };
            ratio(i, 1, what);
        }
    }
    // Releases side by side (`--binary`): each against the first one given.
    let first_binary = variants.iter().position(|v| matches!(v.role, Role::Binary(_)));
    for (i, v) in variants.iter().enumerate() {
        if let (Role::Binary(n), Some(j)) = (v.role, first_binary) {
            if n > 0 {
                ratio(i, j, "binary / first binary");
            }
        }
    }
    // Per-run ratios (run order alternates, so round r's runs are neighbours in time).
    for (i, v) in variants.iter().enumerate().skip(1) {
        let per: Vec<String> = results[i]
            .iter()
            .zip(&results[0])
            .map(|(x, a)| format!("{:.3}", (x.steady as f64 / x.secs) / (a.steady as f64 / a.secs)))
            .collect();
        println!("per round {}/a ({}): {}", letters[i], v.name(), per.join(" / "));
    }
    // Records per CPU-second (the process's own CPU, not the broker's): kafka-dedup against each
    // peer.
    for (i, v) in variants.iter().enumerate().filter(|(_, v)| v.role.external()) {
        println!(
            "records per CPU-second, b / {} ({}): {:.2}x ({:.0} vs {:.0}; with the broker's CPU: {:.2}x)",
            letters[i],
            v.name(),
            sums[i][4] / sums[1][4],
            1e6 / sums[1][4],
            1e6 / sums[i][4],
            (sums[i][4] + sums[i][6]) / (sums[1][4] + sums[1][6])
        );
    }
    if let Some(i) = variants.iter().position(|v| v.held > 0) {
        let extra = (sums[i][3] - sums[1][3]) * (1 << 20) as f64;
        let end = |r: &[RunResult]| median(r.iter().map(|r| r.rss_end as f64).collect());
        let extra_end = end(&results[i]) - end(&results[1]);
        println!(
            "peak RSS per held fingerprint: ({} - {}) / {} = {:.1} B (RSS at the end of the phase: {:.1} B)",
            letters[i],
            letters[1],
            args.held,
            extra / args.held as f64,
            extra_end / args.held as f64
        );
    }
    if args.compare_provenance {
        // The header as the record format v2 encodes it: key length, key, value length, value
        // (varints of 1 byte at these lengths), over the offsets this input has.
        let per_partition = args.records / args.partitions.max(1) as u64;
        let value_bytes: u64 = (0..per_partition)
            .map(|o| kafka_dedup::provenance::Provenance::encode_parts(input, 0, o as i64).len() as u64)
            .sum();
        let header =
            kafka_dedup::provenance::HEADER.len() as f64 + 2.0 + value_bytes as f64 / per_partition.max(1) as f64;
        println!(
            "provenance header: {header:.1} B per forwarded record (\"{}\" = \"{}\"), on a record of {} B value + 11 B key",
            kafka_dedup::provenance::HEADER,
            kafka_dedup::provenance::Provenance::encode_parts(input, 0, per_partition as i64 / 2),
            args.bytes()
        );
    }

    broker.delete_topics(&[input]);
    startup_table(&variants, &letters, &results);
    if let Some(dir) = &args.callgrind {
        callgrind_table(dir, args.records)?;
    }
    println!(
        "\ncheck: every run of a delivered {} records; every run of kafka-dedup forwarded the {distinct} distinct and dropped the {replays} replays",
        args.records
    );
    Ok(())
}

/// The threads of a profiled run, by a function that holds at least a quarter of a thread's
/// instructions, in the order tried: the thread that polls the input and produces (kafka-dedup's
/// poll loop; the copier's, which calls `rd_kafka_producev` itself), librdkafka's broker threads
/// (the produce and the fetch side), its main thread, the thread that serves delivery reports.
/// sled's thread pool is shown and not counted: under valgrind, which runs one thread at a time,
/// its threads spin on its start-up lock for as long as they are scheduled.
const THREADS: [(&str, &str); 8] = [
    ("poll_loop", "poll"),
    ("producer_serve", "rdk:broker produce"),
    ("consumer_serve", "rdk:broker fetch"),
    ("rd_kafka_thread_main", "rdk:main"),
    ("sled::threadpool", "sled (not counted)"),
    ("rd_kafka_producev", "poll"),
    ("BaseProducer", "delivery reports"),
    ("", "other"),
];

/// `--callgrind DIR`: the instructions per input record of each profiled run, by thread
/// ([`THREADS`]), read with `callgrind_annotate`. Repeatable within about 1 % for a given build
/// and input (batching varies), where rates spread by ±30 % between rounds.
fn callgrind_table(dir: &std::path::Path, records: u64) -> Result<(), String> {
    let mut runs: BTreeMap<String, BTreeMap<&str, u64>> = BTreeMap::new();
    let entries = std::fs::read_dir(dir).map_err(|e| format!("--callgrind {}: {e}", dir.display()))?;
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        // `<label>.<pid>-<thread>`; the file without `-<thread>` is the empty process-level one.
        let Some((label, _)) = name.rsplit_once('.').filter(|(_, t)| t.contains('-')) else {
            continue;
        };
        let out = Command::new("callgrind_annotate")
            .args(["--inclusive=yes", "--threshold=100"])
            .arg(entry.path())
            .output()
            .map_err(|e| format!("callgrind_annotate: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        let count = |l: &str| {
            l.split_whitespace()
                .next()
                .and_then(|n| n.replace(',', "").parse::<u64>().ok())
        };
        let Some(total) = text.lines().find(|l| l.contains("PROGRAM TOTALS")).and_then(count) else {
            continue;
        };
        let entry_points: String = text
            .lines()
            .filter(|l| count(l).is_some_and(|n| n * 4 >= total))
            .collect();
        let role = THREADS
            .iter()
            .find(|(key, _)| entry_points.contains(key))
            .map_or("other", |(_, role)| role);
        *runs.entry(label.to_string()).or_default().entry(role).or_default() += total;
    }
    println!(
        "\ninstructions per input record, by thread (callgrind, {}):",
        dir.display()
    );
    let mut columns: Vec<&str> = Vec::new();
    for (_, role) in THREADS {
        if !columns.contains(&role) {
            columns.push(role);
        }
    }
    print!("{:<18} {:>9}", "run", "total");
    for role in &columns {
        print!(" {role:>19}");
    }
    println!();
    let per = |n: u64| n as f64 / records.max(1) as f64;
    for (label, roles) in &runs {
        let total: u64 = roles
            .iter()
            .filter(|(r, _)| !r.ends_with("(not counted)"))
            .map(|(_, n)| n)
            .sum();
        print!("{label:<18} {:>9.0}", per(total));
        for role in &columns {
            print!(" {:>19.0}", per(roles.get(role).copied().unwrap_or(0)));
        }
        println!();
    }
    Ok(())
}

/// The time from the child's start to its first forwarded record, in parts (medians over the
/// runs, seconds). kafka-dedup's parts come from its own log events ([`LOGGED`]).
fn startup_table(variants: &[Variant], letters: &[char], results: &[Vec<RunResult>]) {
    println!(
        "\nstart -> first forwarded record, seconds (medians; partitions start in parallel: the first of each step):"
    );
    println!(
        "{:<40} {:>10} {:>10} {:>9} {:>8} {:>8} {:>8} {:>8} {:>8} {:>12}",
        "", "subscribed", "group join", "recovery", "(read)", "(fence)", "1st fetch", "1st ack", "total", "all running"
    );
    for (i, v) in variants.iter().enumerate() {
        let runs = &results[i];
        let m = |f: &dyn Fn(&Marks) -> Option<f64>| median(runs.iter().filter_map(|r| f(&r.milestones)).collect());
        let first = |k: &'static str| move |ms: &Marks| ms.get(k).map(|e| e.0);
        let between = |x: &'static str, y: &'static str| move |ms: &Marks| Some(ms.get(y)?.0 - ms.get(x)?.0);
        let subscribed = m(&first("subscribed"));
        let join = m(&between("subscribed", "assigned"));
        let total = m(&first("done"));
        let ack = m(&between("consumed", "done"));
        let (recovery, read, fence, fetch, all) = if v.role == Role::Dedup {
            (
                m(&between("assigned", "running")),
                m(&between("assigned", "offsets read")),
                m(&|ms| Some(ms.get("fence over").map_or(0.0, |e| e.2))),
                m(&between("running", "consumed")),
                m(&|ms| Some(ms.get("running")?.1 - ms.get("assigned")?.0)),
            )
        } else {
            (
                0.0,
                0.0,
                0.0,
                m(&between("assigned", "consumed")),
                m(&between("assigned", "assigned")),
            )
        };
        println!(
            "{:<40} {:>10.2} {:>10.2} {:>9.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>12.2}",
            v.label(letters[i]),
            subscribed,
            join,
            recovery,
            read,
            fence,
            fetch,
            ack,
            total,
            all
        );
    }
    println!(
        "(group join: subscribe -> first assignment; recovery: assignment -> first partition running, of which (read): \
         committed offsets fetched, (fence): output.fence_wait waited; 1st fetch: running -> first record taken; \
         1st ack: -> first output record acknowledged; all running: assignment -> last partition running)"
    );
}

fn main() {
    if std::env::var_os("KD_E2E_ROLE").is_some() {
        if let Err(e) = child() {
            eprintln!("e2e child: {e}");
            std::process::exit(1);
        }
        return;
    }
    let args = Args::parse();
    let _ = BINARIES.set(args.binaries.clone());
    if args.filter.as_deref().is_some_and(|f| !f.contains("e2e")) {
        return;
    }
    if let Err(e) = parent(args) {
        eprintln!("e2e: {e}");
        std::process::exit(1);
    }
}

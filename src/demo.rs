//! `kafka-dedup demo`: no set-up. Starts librdkafka's in-process mock cluster, creates the topics,
//! runs the real pipeline ([`run_filter`]) against it while an upstream job writes the seed
//! scenario with replays, then reads the output back and reports. Exit 0 only when the output
//! holds each integer once, in order per partition.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::mocking::MockCluster;

use crate::config::Config;
use crate::pipeline::{run_filter, Shutdown};
use crate::scenario::{self, Verdict};
use crate::status::Status;
use crate::telemetry::Totals;

/// Demo parameters (command-line flags of `kafka-dedup demo`).
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Distinct integers written.
    pub records: u64,
    /// Input and output partitions.
    pub partitions: i32,
    /// Mean records between two upstream crashes.
    pub crash_every: u64,
    /// Seed of the scenario.
    pub seed: u64,
    /// How long the upstream job takes to write everything.
    pub duration: Duration,
    /// The filter's checkpoint interval.
    pub checkpoint_interval: Duration,
}

impl Default for DemoOptions {
    fn default() -> Self {
        DemoOptions {
            records: 10_000,
            partitions: 3,
            crash_every: 300,
            seed: 42,
            duration: Duration::from_secs(4),
            checkpoint_interval: Duration::from_secs(1),
        }
    }
}

/// What the demo saw.
#[derive(Debug, Clone)]
pub struct DemoReport {
    /// Records written, replays included.
    pub written: u64,
    /// Upstream crashes simulated.
    pub crashes: u64,
    /// Replayed records injected.
    pub replays: u64,
    /// Records the filter forwarded (acknowledged).
    pub forwarded: u64,
    /// Records the filter dropped as replays.
    pub dropped: u64,
    /// Checkpoints the filter completed.
    pub checkpoints: u64,
    /// Comparison of output and input.
    pub verdict: Verdict,
    /// The filter's horizon in words ([`crate::config::CheckpointConfig::horizon_in_words`]):
    /// `checkpoint.interval` = the demo's, `checkpoint.generations` the default.
    pub horizon: String,
}

/// Why the demo could not run.
#[derive(Debug, thiserror::Error)]
pub enum DemoError {
    /// The mock cluster or a client failed.
    #[error("kafka: {0}")]
    Kafka(#[from] rdkafka::error::KafkaError),
    /// The filter stopped with an error.
    #[error("filter: {0}")]
    Filter(String),
    /// The filter did not consume everything in time.
    #[error("timed out: {0}")]
    Timeout(String),
    /// Temporary directory.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

/// Runs the demo and returns its report.
pub fn run_demo(opts: &DemoOptions) -> Result<DemoReport, DemoError> {
    let cluster = MockCluster::new(1)?;
    let bootstrap = cluster.bootstrap_servers();
    let (input, output) = ("demo.events", "demo.events.dedup");
    cluster.create_topic(input, opts.partitions, 1)?;
    cluster.create_topic(output, opts.partitions, 1)?;
    let store = tempfile::tempdir()?;

    // librdkafka's mock cluster does not answer DescribeConfigs (the output's limits): the
    // output topic's configuration is given instead, librdkafka's default limit, which the mock
    // topics take, and no timestamp limit.
    let mut cfg: Config = Config::from_toml_str(
        &format!("[input]\ntopic = \"{input}\"\n[output]\ntopic = \"{output}\"\n"),
        Some(Default::default()),
    )
    .expect("the demo configuration is valid");
    cfg.output.topic_configs = Some([("max.message.bytes".to_string(), "1000000".to_string())].into());
    cfg.kafka.bootstrap_servers = bootstrap.clone();
    cfg.checkpoint.interval = opts.checkpoint_interval;
    cfg.store.path = store.path().join("store");
    cfg.http.listen = String::new();
    cfg.output.fence_wait = Duration::from_millis(500);
    // Shortened so the demo's replays, seconds apart, span several generations and checkpoints.
    let default = crate::config::CheckpointConfig::default();
    let (min, max) = crate::horizon::bounds_ms(crate::horizon::interval_ms(default.interval), default.generations);
    let text = |ms: i64| humantime::format_duration(Duration::from_millis(ms.max(0) as u64)).to_string();
    let horizon = format!(
        "{} (checkpoint.interval = {} for the demo; the default {} makes these {} and {})",
        cfg.checkpoint.horizon_in_words(),
        humantime::format_duration(cfg.checkpoint.interval),
        humantime::format_duration(default.interval),
        text(min),
        text(max)
    );

    let status = Status::new();
    let shutdown = Shutdown::new();
    let filter = {
        let (cfg, shutdown, status) = (Arc::new(cfg), shutdown.clone(), status.clone());
        std::thread::spawn(move || run_filter(cfg, shutdown, status).map_err(|e| e.to_string()))
    };

    let scenario = scenario::replay_scenario(opts.records, opts.partitions, opts.crash_every, opts.seed);
    let mut client = ClientConfig::new();
    client.set("bootstrap.servers", &bootstrap);
    scenario::produce(&client, input, &scenario.records, opts.duration)?;

    // Wait until the filter has taken every record, then stop it (final checkpoint included).
    let totals = status.totals.clone();
    let deadline = Instant::now() + Duration::from_secs(60) + opts.duration;
    let written = scenario.records.len() as u64;
    while Totals::get(&totals.consumed) < written {
        if filter.is_finished() {
            break;
        }
        if Instant::now() > deadline {
            shutdown.trigger();
            let _ = filter.join();
            return Err(DemoError::Timeout(format!(
                "the filter consumed {} of {written} records",
                Totals::get(&totals.consumed)
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    shutdown.trigger();
    match filter.join() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(DemoError::Filter(e)),
        Err(_) => return Err(DemoError::Filter("the filter thread panicked".into())),
    }
    let out: BTreeMap<i32, Vec<u64>> =
        scenario::read_values(&client, output, opts.partitions, Duration::from_secs(30))?;
    let verdict = scenario::verify(&scenario.records, &out);
    drop(cluster);
    Ok(DemoReport {
        written,
        crashes: scenario.crashes,
        replays: scenario.replays,
        forwarded: Totals::get(&totals.forwarded),
        dropped: Totals::get(&totals.duplicates),
        checkpoints: Totals::get(&totals.checkpoints),
        verdict,
        horizon,
    })
}

impl std::fmt::Display for DemoReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = &self.verdict;
        writeln!(f, "horizon        {}", self.horizon)?;
        writeln!(
            f,
            "written        {:>7} records: {} distinct integers + {} replays from {} upstream crashes",
            self.written, v.distinct, self.replays, self.crashes
        )?;
        writeln!(f, "forwarded      {:>7}", self.forwarded)?;
        writeln!(f, "dropped        {:>7} replays", self.dropped)?;
        writeln!(f, "checkpoints    {:>7}", self.checkpoints)?;
        writeln!(f, "output         {:>7} records read back", v.output_records)?;
        writeln!(f, "missing        {:>7}", v.missing)?;
        writeln!(f, "duplicated     {:>7}", v.duplicated)?;
        writeln!(f, "out of order   {:>7} partitions", v.out_of_order_partitions)?;
        if v.ok() {
            writeln!(
                f,
                "result         OK: every integer exactly once, in order per partition"
            )?;
        } else {
            writeln!(f, "result         FAILED")?;
        }
        // The demo scripts its replays; the real thing needs a JVM and a broker.
        write!(
            f,
            "real Flink     scripts/flink-replay.sh: a Flink job SIGKILLed between checkpoints on Apache Kafka, kafka-dedup behind it"
        )
    }
}

//! A scenario against the suite's broker, said once (issue 28): *given* an input and an output
//! topic and a filter spec, *when* upstream writes (and replays) integers and the filter runs,
//! crashes at a point or is killed, *then* the output holds every value once, in order, per
//! partition. The test then reads as its scenario:
//!
//! ```ignore
//! let mut s = Scenario::new("fwd", 1);          // given: topics fwd-in, fwd-out; a killable spec
//! s.produce(0..1000);                            // when: upstream writes 0..1000
//! s.crash_at("after-ack:600").wait_exit(..);     //       the filter dies at a crash point
//! s.run_to_end().terminate();                    //       a restart catches up
//! s.then_once_in_order(1000);                    // then: each value once, in order
//! ```
//!
//! Values are spread as the crash tests always did: value `v` on partition `v % partitions`,
//! its key and payload its decimal text ([`kafka_dedup::scenario::produce`]).
//!
//! The scenario runs on the suite's Apache Kafka ([`Scenario::new`]) or on any broker whose
//! topics the test made itself, librdkafka's mock cluster among them ([`Scenario::on`]). Records
//! that are not integers go in with [`Scenario::produce_raw`] / [`Scenario::produce_timed`] and
//! come back with [`Scenario::forwarded`]; a test about `kafka-dedup audit` writes the output
//! itself ([`Scenario::write_output_timed`]) and asks [`Scenario::audit`].

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;
use std::time::Duration;

use kafka_dedup::audit::report::Report;
use kafka_dedup::scenario;

use super::{free_port, kafka, unique, wait_drained, wall_ms, Broker, FilterProcess, FilterSpec, Raw};

/// How long [`Scenario::wait_done`] waits for the filter to commit the whole input.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(180);

/// Records (partition, value) for values in `range`, on `partitions` partitions.
pub fn values(range: Range<u64>, partitions: i32) -> Vec<(i32, u64)> {
    range.map(|v| ((v % partitions as u64) as i32, v)).collect()
}

/// One scenario: its topics, its filter's spec and directory, and everything upstream wrote, in
/// the order written (what the output is compared with).
pub struct Scenario {
    /// Holds the store and the filter's files; removed when the scenario ends.
    pub dir: tempfile::TempDir,
    /// The broker the topics are on (the suite's Apache Kafka, or a mock cluster).
    pub broker: Broker,
    /// `<name>-in-<unique>`.
    pub input: String,
    /// `<name>-out-<unique>`.
    pub output: String,
    /// Partitions of each topic.
    pub partitions: i32,
    /// The filter's configuration; a test changes it between runs (`interval`, `env`, `extra`).
    pub spec: FilterSpec,
    /// Every record written to the input, replays included, in the order written.
    pub written: Vec<(i32, u64)>,
    /// The event time replays carry: the wall clock just before the first write, so that a
    /// replay lies within H_min of its first copy ([`Scenario::replay`]).
    event_time: Option<i64>,
    /// Set by [`Scenario::killable`]: [`Scenario::start`] then starts survivors.
    killable: bool,
}

impl Scenario {
    /// Given: topics `<name>-in-…` and `<name>-out-…` of `partitions` partitions on the suite's
    /// broker, and a filter spec for them ([`FilterSpec::new`]).
    pub fn new(name: &str, partitions: i32) -> Self {
        let s = Self::input_only(name, partitions);
        s.create_output();
        s
    }

    /// Given: topic `<name>-in-…` of `partitions` partitions on the suite's broker, and a filter
    /// spec that names an output `<name>-out-…` not created yet ([`Scenario::create_output`]).
    pub fn input_only(name: &str, partitions: i32) -> Self {
        let (input, output) = (unique(&format!("{name}-in")), unique(&format!("{name}-out")));
        kafka().create_topic(&input, partitions);
        Self::on(kafka(), &input, &output, partitions)
    }

    /// Given: topics `input` and `output` of `partitions` partitions that the test made on
    /// `broker` (a mock cluster's, say), and a filter spec for them ([`FilterSpec::on`]).
    pub fn on(broker: Broker, input: &str, output: &str, partitions: i32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let spec = FilterSpec::on(broker.clone(), input, output, dir.path());
        Scenario {
            dir,
            broker,
            input: input.to_string(),
            output: output.to_string(),
            partitions,
            spec,
            written: Vec::new(),
            event_time: None,
            killable: false,
        }
    }

    /// Given: another filter reading this scenario's input into an output of its own,
    /// `<name>-…` (same partitions), with its own directory and group: the same input under
    /// another configuration. It starts with what upstream wrote so far.
    pub fn with_new_output(&self, name: &str) -> Scenario {
        let output = unique(name);
        self.broker.create_topic(&output, self.partitions);
        let mut s = Scenario::on(self.broker.clone(), &self.input, &output, self.partitions);
        s.written = self.written.clone();
        s.event_time = self.event_time;
        s
    }

    /// Given: the output topic, `partitions` partitions (after [`Scenario::input_only`]).
    pub fn create_output(&self) {
        self.broker.create_topic(&self.output, self.partitions);
    }

    /// Given: a side topic `<name>-…` of one partition (a dead-letter or duplicates topic).
    pub fn side_topic(&self, name: &str) -> String {
        let topic = unique(name);
        self.broker.create_topic(&topic, 1);
        topic
    }

    /// Given: a filter that is going to be killed ([`FilterSpec::killable`]: session timeout
    /// 6 s, so a killed member's partitions move on soon). [`Scenario::start`] still starts
    /// survivors.
    pub fn killable(mut self) -> Self {
        self.spec = self.spec.killable();
        self.killable = true;
        self
    }

    /// The filter's directory.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// The records of values `range` on this scenario's partitions.
    pub fn values(&self, range: Range<u64>) -> Vec<(i32, u64)> {
        values(range, self.partitions)
    }

    /// When: upstream writes values `range` now (all at once). Returns the records written.
    pub fn produce(&mut self, range: Range<u64>) -> Vec<(i32, u64)> {
        let records = self.values(range);
        self.event_time.get_or_insert_with(wall_ms);
        scenario::produce(&self.broker.client(), &self.input, &records, Duration::ZERO).unwrap();
        self.written.extend_from_slice(&records);
        records
    }

    /// When: upstream writes values `range` spread over `duration`, on a thread of its own (join
    /// it before reading the output).
    pub fn produce_over(&mut self, range: Range<u64>, duration: Duration) -> JoinHandle<()> {
        let records = self.values(range);
        self.event_time.get_or_insert_with(wall_ms);
        self.written.extend_from_slice(&records);
        let (input, client) = (self.input.clone(), self.broker.client());
        std::thread::spawn(move || scenario::produce(&client, &input, &records, duration).unwrap())
    }

    /// When: upstream writes `records` spread over `duration`, on a thread of its own (join it
    /// before reading the output).
    pub fn produce_records_over(&mut self, records: &[(i32, u64)], duration: Duration) -> JoinHandle<()> {
        self.event_time.get_or_insert_with(wall_ms);
        self.written.extend_from_slice(records);
        let (input, client, records) = (self.input.clone(), self.broker.client(), records.to_vec());
        std::thread::spawn(move || scenario::produce(&client, &input, &records, duration).unwrap())
    }

    /// When: upstream writes `records` (from [`scenario::replay_scenario`], say) spread over
    /// `duration`.
    pub fn produce_records(&mut self, records: &[(i32, u64)], duration: Duration) {
        self.event_time.get_or_insert_with(wall_ms);
        scenario::produce(&self.broker.client(), &self.input, records, duration).unwrap();
        self.written.extend_from_slice(records);
    }

    /// When: upstream writes `records` (partition, value) all stamped `timestamp` (ms since the
    /// Unix epoch): replays that keep their first copies' event time ([`Broker::produce_values_at`]).
    pub fn produce_records_at(&mut self, records: &[(i32, u64)], timestamp: i64) {
        self.event_time.get_or_insert(timestamp);
        self.broker.produce_values_at(&self.input, records, timestamp);
        self.written.extend_from_slice(records);
    }

    /// When: upstream writes `records` (raw: key, value, headers) to input partition `p`. They
    /// are not integers: compare with [`Scenario::forwarded`].
    pub fn produce_raw(&self, p: i32, records: &[Raw]) {
        self.broker.produce_raw(&self.input, p, records);
    }

    /// When: upstream writes `records` (record time in ms since the Unix epoch, record) to input
    /// partition `p`: a timeline written with chosen record times instead of sleeps.
    pub fn produce_timed(&self, p: i32, records: &[(i64, Raw)]) {
        self.broker.produce_timed(&self.input, p, records);
    }

    /// Given (for the audit): output partition `p` holds `records` (record time, record), as a
    /// filter would have written them, or with faults planted.
    pub fn write_output_timed(&self, p: i32, records: &[(i64, Raw)]) {
        self.broker.produce_timed(&self.output, p, records);
    }

    /// When: upstream replays values `range` (an upstream restart), with the event time of the
    /// first write, as Flink and Kafka Streams sinks do.
    pub fn replay(&mut self, range: Range<u64>) -> Vec<(i32, u64)> {
        let records = self.values(range);
        let at = *self.event_time.get_or_insert_with(wall_ms);
        self.broker.produce_values_at(&self.input, &records, at);
        self.written.extend_from_slice(&records);
        records
    }

    /// From now on, replays carry the event time of the next write (an upstream that restarts
    /// within a later batch of writes).
    pub fn replays_take_time_of_next_write(&mut self) {
        self.event_time = None;
    }

    /// When: a filter starts that aborts at crash point `point` (`KAFKA_DEDUP_CRASH_AT`, e.g.
    /// `after-ack:600`).
    pub fn crash_at(&self, point: &str) -> FilterProcess {
        let mut s = self.spec.clone();
        s.env.push(("KAFKA_DEDUP_CRASH_AT".into(), point.into()));
        s.start(self.path())
    }

    /// When: a filter starts that is meant to survive: after [`Scenario::killable`], with the
    /// default session timeout; otherwise with the spec as it is.
    pub fn start(&self) -> FilterProcess {
        match self.killable {
            true => self.spec.survivor().start(self.path()),
            false => self.spec.start(self.path()),
        }
    }

    /// When: a filter starts and is ready (`/readyz`, within 60 s).
    pub fn start_ready(&self) -> FilterProcess {
        let mut filter = self.start();
        filter.wait_ready(Duration::from_secs(60));
        filter
    }

    /// When: `filter` stops (SIGTERM). Then: it exits cleanly (a hand-over) and says so last
    /// (`kafka-dedup stopped`), or the test fails with its log.
    pub fn stop(&self, mut filter: FilterProcess) -> FilterProcess {
        assert!(filter.terminate().success(), "{}", filter.logs());
        assert!(filter.logs().contains("kafka-dedup stopped"), "{}", filter.logs());
        filter
    }

    /// When: a filter starts and commits the whole input (see [`Scenario::wait_done`]).
    pub fn run_to_end(&self) -> FilterProcess {
        let filter = self.start();
        self.wait_done(&filter);
        filter
    }

    /// Waits until the group committed every input partition to its end, or panics (after
    /// [`DRAIN_TIMEOUT`]) with the filter's log and metrics.
    pub fn wait_done(&self, filter: &FilterProcess) {
        wait_drained(&self.spec, self.partitions, &[filter], DRAIN_TIMEOUT, || {
            format!(
                "{}\n{}",
                filter.logs(),
                filter
                    .scrape()
                    .lines()
                    .filter(|l| !l.starts_with('#'))
                    .collect::<Vec<_>>()
                    .join("\n")
            )
        });
    }

    /// Waits until the group committed input offsets `ends` (per partition, e.g.
    /// `[(0, 4)]`), or panics (after 60 s) with the filter's log.
    pub fn wait_committed(&self, filter: &FilterProcess, ends: &[(i32, i64)]) {
        let ends = ends.iter().copied().collect();
        self.broker
            .wait_committed(&self.spec.group, &self.input, &ends, Duration::from_secs(60), || {
                filter.logs()
            });
    }

    /// The group's committed input offset of partition `p` (`None`: nothing committed).
    pub fn committed(&self, p: i32) -> Option<i64> {
        self.committed_with_metadata(p).0
    }

    /// The group's committed input offset of partition `p` and its metadata.
    pub fn committed_with_metadata(&self, p: i32) -> (Option<i64>, String) {
        self.broker.committed(&self.spec.group, &self.input, self.partitions)[&p].clone()
    }

    /// The output's values per partition, read to its end.
    pub fn output(&self) -> BTreeMap<i32, Vec<u64>> {
        self.read_output(Duration::from_secs(30))
    }

    /// The output's values per partition, read to its end within `timeout`
    /// ([`scenario::read_values`], read_committed).
    fn read_output(&self, timeout: Duration) -> BTreeMap<i32, Vec<u64>> {
        scenario::read_values(&self.broker.client(), &self.output, self.partitions, timeout)
            .unwrap_or_else(|e| panic!("reading {}: {e}", self.output))
    }

    /// The output's records per partition, as forwarded (provenance headers taken off).
    pub fn forwarded(&self) -> BTreeMap<i32, Vec<Raw>> {
        self.broker.read_forwarded(&self.output, self.partitions, &self.input)
    }

    /// The output's records per partition, as they are (headers included).
    pub fn output_records(&self) -> BTreeMap<i32, Vec<Raw>> {
        self.broker.read_records(&self.output, self.partitions)
    }

    /// How many records the output holds.
    pub fn output_len(&self) -> usize {
        self.output().values().map(Vec::len).sum()
    }

    /// Then: every value written reached the output exactly once and in input order per
    /// partition ([`scenario::verify`]), `distinct` records in all.
    pub fn then_once_in_order(&self, distinct: u64) {
        let out = self.read_output(Duration::from_secs(120));
        let v = scenario::verify(&self.written, &out);
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.output_records, distinct, "{v:?}");
    }

    /// Then: the output holds exactly `expected`, partition by partition, in this order.
    pub fn then_output_is(&self, expected: &BTreeMap<i32, Vec<u64>>) {
        let out = self.read_output(Duration::from_secs(120));
        assert_eq!(&out, expected, "the output, per partition");
    }

    /// The filter's configuration file, written into the scenario's directory (what `audit` and
    /// `check-config` read).
    pub fn config_file(&self) -> PathBuf {
        let path = self.path().join(format!("audit-{}.toml", self.output));
        std::fs::write(&path, self.spec.toml(free_port())).unwrap();
        path
    }

    /// When: `kafka-dedup audit --config <the filter's configuration> ARGS...` runs.
    pub fn audit(&self, args: &[&str]) -> Audit {
        Audit::run(&self.config_file(), args)
    }
}

/// What `kafka-dedup audit` answered.
pub struct Audit {
    /// Its exit code (-1: killed by a signal).
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Audit {
    /// Runs `kafka-dedup audit --config CONFIG ARGS...`.
    pub fn run(config: &Path, args: &[&str]) -> Audit {
        let out = super::kafka_dedup_command()
            .arg("audit")
            .arg("--config")
            .arg(config)
            .args(args)
            .output()
            .expect("run kafka-dedup audit");
        Audit {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// The JSON report (`--json`), or a panic showing what was printed instead.
    pub fn report(&self) -> Report {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not a report ({e}):\n{}\n{}", self.stdout, self.stderr))
    }
}

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

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::thread::JoinHandle;
use std::time::Duration;

use kafka_dedup::scenario;

use super::{kafka, unique, wait_drained, wall_ms, FilterProcess, FilterSpec, Raw};

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
}

impl Scenario {
    /// Given: topics `<name>-in-…` and `<name>-out-…` of `partitions` partitions on the suite's
    /// broker, and a filter spec for them ([`FilterSpec::new`]).
    pub fn new(name: &str, partitions: i32) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let (input, output) = (unique(&format!("{name}-in")), unique(&format!("{name}-out")));
        kafka().create_topic(&input, partitions);
        kafka().create_topic(&output, partitions);
        let spec = FilterSpec::new(&input, &output, dir.path());
        Scenario {
            dir,
            input,
            output,
            partitions,
            spec,
            written: Vec::new(),
            event_time: None,
        }
    }

    /// Given: a filter that is going to be killed ([`FilterSpec::killable`]: session timeout
    /// 6 s, so a killed member's partitions move on soon). [`Scenario::start`] still starts
    /// survivors.
    pub fn killable(mut self) -> Self {
        self.spec = self.spec.killable();
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
        scenario::produce(&kafka().client(), &self.input, &records, Duration::ZERO).unwrap();
        self.written.extend_from_slice(&records);
        records
    }

    /// When: upstream writes values `range` spread over `duration`, on a thread of its own (join
    /// it before reading the output).
    pub fn produce_over(&mut self, range: Range<u64>, duration: Duration) -> JoinHandle<()> {
        let records = self.values(range);
        self.event_time.get_or_insert_with(wall_ms);
        self.written.extend_from_slice(&records);
        let input = self.input.clone();
        std::thread::spawn(move || scenario::produce(&kafka().client(), &input, &records, duration).unwrap())
    }

    /// When: upstream writes `records` (from [`scenario::replay_scenario`], say) spread over
    /// `duration`.
    pub fn produce_records(&mut self, records: &[(i32, u64)], duration: Duration) {
        self.event_time.get_or_insert_with(wall_ms);
        scenario::produce(&kafka().client(), &self.input, records, duration).unwrap();
        self.written.extend_from_slice(records);
    }

    /// When: upstream writes `records` (raw: key, value, headers) to input partition `p`. They
    /// are not integers: compare with [`Scenario::forwarded`].
    pub fn produce_raw(&self, p: i32, records: &[Raw]) {
        kafka().produce_raw(&self.input, p, records);
    }

    /// When: upstream replays values `range` (an upstream restart), with the event time of the
    /// first write, as Flink and Kafka Streams sinks do.
    pub fn replay(&mut self, range: Range<u64>) -> Vec<(i32, u64)> {
        let records = self.values(range);
        let at = *self.event_time.get_or_insert_with(wall_ms);
        kafka().produce_values_at(&self.input, &records, at);
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

    /// When: a filter starts that is meant to survive (default session timeout).
    pub fn start(&self) -> FilterProcess {
        self.spec.survivor().start(self.path())
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

    /// The output's values per partition, read to its end.
    pub fn output(&self) -> BTreeMap<i32, Vec<u64>> {
        scenario::read_values(
            &kafka().client(),
            &self.output,
            self.partitions,
            Duration::from_secs(30),
        )
        .unwrap()
    }

    /// The output's records per partition, as forwarded (provenance headers taken off).
    pub fn forwarded(&self) -> BTreeMap<i32, Vec<Raw>> {
        kafka().read_forwarded(&self.output, self.partitions, &self.input)
    }

    /// How many records the output holds.
    pub fn output_len(&self) -> usize {
        self.output().values().map(Vec::len).sum()
    }

    /// Then: every value written reached the output exactly once and in input order per
    /// partition ([`scenario::verify`]), `distinct` records in all.
    pub fn then_once_in_order(&self, distinct: u64) {
        let out = scenario::read_values(
            &kafka().client(),
            &self.output,
            self.partitions,
            Duration::from_secs(120),
        )
        .unwrap();
        let v = scenario::verify(&self.written, &out);
        assert!(v.ok(), "{v:?}");
        assert_eq!(v.output_records, distinct, "{v:?}");
    }

    /// Then: the output holds exactly `expected`, partition by partition, in this order.
    pub fn then_output_is(&self, expected: &BTreeMap<i32, Vec<u64>>) {
        let out = scenario::read_values(
            &kafka().client(),
            &self.output,
            self.partitions,
            Duration::from_secs(120),
        )
        .unwrap();
        assert_eq!(&out, expected, "the output, per partition");
    }
}

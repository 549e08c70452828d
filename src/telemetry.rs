//! Telemetry in one place: every metric name, its help text, and the handles the hot path uses.
//!
//! Names follow docs/ARCHITECTURE.md ("Metrics"): prefix `kafka_dedup_`, base units (seconds, bytes),
//! `_total` on counters, a `partition` label where per-partition, never a key or a fingerprint as
//! a label. Handles are registered once per partition ([`PartitionMetrics::new`]) so the per-record
//! cost is an atomic add.
//!
//! Besides the Prometheus metrics, [`Totals`] keeps process-wide counts that `demo`, tests and
//! `/readyz` read without scraping.

use std::sync::atomic::{AtomicU64, Ordering};

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Gauge, Histogram, Unit,
};

use crate::config::OnMissing;
use crate::state::PartitionState;

/// `kafka_dedup_records_consumed_total{partition}`: records read from the input topic.
pub const RECORDS_CONSUMED: &str = "kafka_dedup_records_consumed_total";
/// `kafka_dedup_records_forwarded_total{partition}`: records acknowledged by the output topic.
pub const RECORDS_FORWARDED: &str = "kafka_dedup_records_forwarded_total";
/// `kafka_dedup_duplicates_dropped_total{partition,generation}`: replays dropped; `generation`
/// is the age of the generation that matched (0 current, 1 previous, ...).
pub const DUPLICATES_DROPPED: &str = "kafka_dedup_duplicates_dropped_total";
/// `kafka_dedup_duplicate_offset_distance_records`: input offset of a replay minus the offset where
/// its first copy was seen (when known): how far back replays reach, against the horizon.
pub const DUPLICATE_DISTANCE: &str = "kafka_dedup_duplicate_offset_distance_records";
/// `kafka_dedup_unfingerprintable_records_total{partition,action,reason}`: records whose
/// fingerprint source was absent or unreadable, by `fingerprint.on_missing` action.
pub const UNFINGERPRINTABLE: &str = "kafka_dedup_unfingerprintable_records_total";
/// `kafka_dedup_checkpoints_total{result}`: checkpoints completed (`ok`) or failed (`failed`).
pub const CHECKPOINTS: &str = "kafka_dedup_checkpoints_total";
/// `kafka_dedup_checkpoint_duration_seconds`: from the checkpoint's start to the offset commit
/// being sent.
pub const CHECKPOINT_DURATION: &str = "kafka_dedup_checkpoint_duration_seconds";
/// `kafka_dedup_fingerprints_held{partition,generation}`: fingerprints per live generation (age).
pub const FINGERPRINTS_HELD: &str = "kafka_dedup_fingerprints_held";
/// `kafka_dedup_horizon_seconds{partition}`: the record-time span the live generations cover now,
/// from the start of the oldest live generation's bucket to the partition clock
/// ([`crate::horizon::span_ms`]): how far back, on the partition clock, a replay's first copy is
/// still held. Between `(generations - 1)` and `generations` x `checkpoint.interval` once the
/// partition has rotated `generations - 1` times; less after a stuck-clock escape. Set once the
/// partition clock is known.
pub const HORIZON: &str = "kafka_dedup_horizon_seconds";
/// `kafka_dedup_store_size_bytes`: sled's size on disk.
pub const STORE_SIZE: &str = "kafka_dedup_store_size_bytes";
/// `kafka_dedup_store_rebuilds_total{reason}`: partitions whose generations were rebuilt from the
/// output topic because the local store could not be used (`missing`, `behind_or_ahead`,
/// `corrupt`, `other_deployment`, `no_metadata`).
pub const STORE_REBUILDS: &str = "kafka_dedup_store_rebuilds_total";
/// `kafka_dedup_recovery_records_scanned_total{partition}`: output records re-read during recovery.
pub const RECOVERY_SCANNED: &str = "kafka_dedup_recovery_records_scanned_total";
/// `kafka_dedup_recovery_duration_seconds`: from assignment to the partition running.
pub const RECOVERY_DURATION: &str = "kafka_dedup_recovery_duration_seconds";
/// `kafka_dedup_consumer_lag_records{partition}`: high watermark minus committed position, from
/// librdkafka statistics.
pub const CONSUMER_LAG: &str = "kafka_dedup_consumer_lag_records";
/// `kafka_dedup_partition_state{partition,state}`: 1 for the partition's current life-cycle state
/// (the `state` label is a [`PartitionState::name`]), 0 for the others; all 0 once the partition
/// is released.
pub const PARTITION_STATE: &str = "kafka_dedup_partition_state";
/// `kafka_dedup_ready`: 1 when `/readyz` answers ready, else 0; set at each scrape, so an alert
/// can say what an orchestrator's readiness probe sees.
pub const READY: &str = "kafka_dedup_ready";
/// `kafka_dedup_out_of_scope_records_total{partition,reason}`: records whose replays may land in
/// another input partition, outside the per-partition dedup scope: `null_key` (producers spread
/// them over partitions) or `key_elsewhere` (neither the Java nor the librdkafka default
/// partitioner would put the key in this partition: a custom partitioner or a changed partition
/// count).
pub const OUT_OF_SCOPE: &str = "kafka_dedup_out_of_scope_records_total";
/// `kafka_dedup_build_info{version}`: always 1.
pub const BUILD_INFO: &str = "kafka_dedup_build_info";

/// Registers help texts and units with the installed recorder. Idempotent.
pub fn describe() {
    describe_counter!(RECORDS_CONSUMED, Unit::Count, "Records read from the input topic.");
    describe_counter!(
        RECORDS_FORWARDED,
        Unit::Count,
        "Records acknowledged by the output topic."
    );
    describe_counter!(
        DUPLICATES_DROPPED,
        Unit::Count,
        "Replays dropped, by age of the generation that matched."
    );
    describe_histogram!(
        DUPLICATE_DISTANCE,
        Unit::Count,
        "Input offset distance from a replay back to its first copy."
    );
    describe_counter!(
        UNFINGERPRINTABLE,
        Unit::Count,
        "Records without a readable fingerprint source, by action."
    );
    describe_counter!(CHECKPOINTS, Unit::Count, "Checkpoints by result.");
    describe_histogram!(
        CHECKPOINT_DURATION,
        Unit::Seconds,
        "Checkpoint duration, start to offset commit."
    );
    describe_gauge!(
        FINGERPRINTS_HELD,
        Unit::Count,
        "Fingerprints held per live generation (by age)."
    );
    describe_gauge!(
        HORIZON,
        Unit::Seconds,
        "Record time the live generations cover: oldest live bucket's start to the partition clock."
    );
    describe_gauge!(STORE_SIZE, Unit::Bytes, "Size of the local fingerprint store on disk.");
    describe_counter!(
        STORE_REBUILDS,
        Unit::Count,
        "Partitions rebuilt from the output topic, by reason."
    );
    describe_counter!(RECOVERY_SCANNED, Unit::Count, "Output records re-read during recovery.");
    describe_histogram!(RECOVERY_DURATION, Unit::Seconds, "Partition recovery duration.");
    describe_gauge!(
        CONSUMER_LAG,
        Unit::Count,
        "Consumer lag per input partition, from librdkafka statistics."
    );
    describe_gauge!(
        PARTITION_STATE,
        Unit::Count,
        "1 for each partition's current life-cycle state."
    );
    describe_gauge!(READY, Unit::Count, "1 when /readyz answers ready, else 0.");
    describe_counter!(
        OUT_OF_SCOPE,
        Unit::Count,
        "Records whose replays may land in another partition (null key, or a key placed elsewhere)."
    );
    describe_gauge!(BUILD_INFO, Unit::Count, "Build information; always 1.");
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
}

/// Metric handles of one input partition, registered once at assignment.
pub struct PartitionMetrics {
    /// Records consumed.
    pub consumed: Counter,
    /// Records forwarded (acknowledged).
    pub forwarded: Counter,
    /// Duplicates by generation age; index = age.
    pub duplicates: Vec<Counter>,
    /// Offset distance of replays.
    pub distance: Histogram,
    /// Fingerprints held by generation age; index = age.
    pub held: Vec<Gauge>,
    /// Record time the live generations cover, seconds ([`HORIZON`]).
    pub horizon: Gauge,
    /// Output records re-read during recovery.
    pub scanned: Counter,
    /// Records with a null key (see [`OUT_OF_SCOPE`]).
    pub null_key: Counter,
    /// Records whose key a default partitioner would place elsewhere (see [`OUT_OF_SCOPE`]).
    pub key_elsewhere: Counter,
    /// The `partition` label value, for the handles registered on use (unfingerprintable
    /// records) and the state gauge.
    partition: String,
}

impl PartitionMetrics {
    /// Registers the handles of `partition` for `generations` live generations.
    pub fn new(partition: i32, generations: usize) -> Self {
        let p = partition.to_string();
        PartitionMetrics {
            consumed: counter!(RECORDS_CONSUMED, "partition" => p.clone()),
            forwarded: counter!(RECORDS_FORWARDED, "partition" => p.clone()),
            duplicates: (0..generations)
                .map(|age| counter!(DUPLICATES_DROPPED, "partition" => p.clone(), "generation" => age.to_string()))
                .collect(),
            distance: histogram!(DUPLICATE_DISTANCE),
            held: (0..generations)
                .map(|age| gauge!(FINGERPRINTS_HELD, "partition" => p.clone(), "generation" => age.to_string()))
                .collect(),
            horizon: gauge!(HORIZON, "partition" => p.clone()),
            scanned: counter!(RECOVERY_SCANNED, "partition" => p.clone()),
            null_key: counter!(OUT_OF_SCOPE, "partition" => p.clone(), "reason" => "null_key"),
            key_elsewhere: counter!(OUT_OF_SCOPE, "partition" => p.clone(), "reason" => "key_elsewhere"),
            partition: p,
        }
    }

    /// Counts an unfingerprintable record (rare path: registers on use).
    pub fn unfingerprintable(&self, action: OnMissing, reason: &'static str) {
        counter!(UNFINGERPRINTABLE, "partition" => self.partition.clone(), "action" => action.as_str(), "reason" => reason)
            .increment(1);
    }

    /// Sets the life-cycle state gauge: 1 for `state`, 0 for the others.
    pub fn set_state(&self, state: PartitionState) {
        set_partition_state(&self.partition, Some(state));
    }

    /// Zeroes the per-partition gauges when the partition is released.
    pub fn release(&self) {
        for g in &self.held {
            g.set(0.0);
        }
        self.horizon.set(0.0);
        set_partition_state(&self.partition, None);
    }
}

fn set_partition_state(partition: &str, state: Option<PartitionState>) {
    for s in PartitionState::ALL {
        let v = if Some(s) == state { 1.0 } else { 0.0 };
        gauge!(PARTITION_STATE, "partition" => partition.to_string(), "state" => s.name()).set(v);
    }
}

/// Sets partition `partition`'s state gauge ([`PARTITION_STATE`]): 1 for `state`, 0 for the
/// other states; `None` (released) zeroes them all. Called by [`crate::status::Status`] on every
/// state change, so the gauge and `/readyz` agree.
pub fn partition_state(partition: i32, state: Option<PartitionState>) {
    set_partition_state(&partition.to_string(), state);
}

/// Sets the [`READY`] gauge.
pub fn ready(ready: bool) {
    gauge!(READY).set(if ready { 1.0 } else { 0.0 });
}

/// Counts a store rebuild of one partition.
pub fn store_rebuild(reason: &'static str) {
    counter!(STORE_REBUILDS, "reason" => reason).increment(1);
}

/// Counts a checkpoint's outcome: `ok` once the group coordinator confirmed its offset commit
/// (or the transaction committed), `failed` when the commit could not be sent or was refused.
pub fn checkpoint_result(ok: bool) {
    counter!(CHECKPOINTS, "result" => if ok { "ok" } else { "failed" }).increment(1);
}

/// Records how long a checkpoint took, from its start to its offset commit being sent.
pub fn checkpoint_duration(seconds: f64) {
    histogram!(CHECKPOINT_DURATION).record(seconds);
}

/// Records a finished recovery.
pub fn recovery(seconds: f64) {
    histogram!(RECOVERY_DURATION).record(seconds);
}

/// Sets the store size gauge.
pub fn store_size(bytes: u64) {
    gauge!(STORE_SIZE).set(bytes as f64);
}

/// Sets a partition's consumer lag.
pub fn consumer_lag(partition: i32, lag: i64) {
    gauge!(CONSUMER_LAG, "partition" => partition.to_string()).set(lag as f64);
}

/// Process-wide totals, readable without a metrics recorder (demo, tests, `/readyz`).
#[derive(Debug, Default)]
pub struct Totals {
    /// Records consumed.
    pub consumed: AtomicU64,
    /// Records acknowledged by the output topic.
    pub forwarded: AtomicU64,
    /// Replays dropped.
    pub duplicates: AtomicU64,
    /// Records without a fingerprint (any action).
    pub unfingerprintable: AtomicU64,
    /// Checkpoints completed.
    pub checkpoints: AtomicU64,
    /// Partitions rebuilt from the output topic.
    pub rebuilds: AtomicU64,
    /// Output records re-read during recovery.
    pub scanned: AtomicU64,
}

impl Totals {
    /// Adds one to `c`.
    #[inline]
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// Reads `c`.
    pub fn get(c: &AtomicU64) -> u64 {
        c.load(Ordering::Relaxed)
    }
}

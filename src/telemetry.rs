//! Telemetry in one place: every metric name, its help text, and the handles the hot path uses.
//!
//! Names follow docs/ARCHITECTURE.md ("Metrics"): prefix `kafka_dedup_`, base units (seconds, bytes),
//! `_total` on counters, a `partition` label where per-partition, never a key or a fingerprint as
//! a label. Handles are registered once per partition ([`PartitionMetrics::new`]) so the per-record
//! cost is an atomic add.
//!
//! Besides the Prometheus metrics, [`Totals`] keeps process-wide counts that `demo`, tests and
//! `/readyz` read without scraping.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter, Gauge, Histogram, Unit,
};
use metrics_exporter_prometheus::PrometheusHandle;

use crate::config::{Config, OnMissing};
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
/// fingerprint source was absent or unreadable, by `fingerprint.on_missing` action (the
/// configured one) and [`UNFINGERPRINTABLE_REASONS`].
pub const UNFINGERPRINTABLE: &str = "kafka_dedup_unfingerprintable_records_total";
/// The values of the `reason` label of [`UNFINGERPRINTABLE`]
/// ([`crate::fingerprint::Unfingerprintable::reason`]).
pub const UNFINGERPRINTABLE_REASONS: [&str; 9] = crate::fingerprint::Unfingerprintable::REASONS;
/// `kafka_dedup_checkpoints_total{result}`: checkpoints by [`CHECKPOINT_RESULTS`]: `ok` once the
/// group coordinator confirmed the offset commit (or the transaction committed), `failed` when it
/// refused it or it could not be sent.
pub const CHECKPOINTS: &str = "kafka_dedup_checkpoints_total";
/// The values of the `result` label of [`CHECKPOINTS`].
pub const CHECKPOINT_RESULTS: [&str; 2] = ["ok", "failed"];
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
/// output topic because the local store could not be used, by [`STORE_REBUILD_REASONS`].
pub const STORE_REBUILDS: &str = "kafka_dedup_store_rebuilds_total";
/// The values of the `reason` label of [`STORE_REBUILDS`] (the callers of [`store_rebuild`]:
/// [`crate::recovery`] and the store's [`crate::store::Opened::Replaced`]): `missing` (no
/// snapshot of the partition), `behind_or_ahead` (a snapshot of another checkpoint), `corrupt`,
/// `other_deployment` (a store written for another input or group), `no_metadata` (a committed
/// offset without checkpoint metadata or horizon marker).
pub const STORE_REBUILD_REASONS: [&str; 5] = [
    "missing",
    "behind_or_ahead",
    "corrupt",
    "other_deployment",
    "no_metadata",
];
/// `kafka_dedup_changelog_fallbacks_total{reason}`: recoveries that could have loaded older
/// generations from `store.changelog_topic` and re-read the output instead, by
/// [`crate::changelog::FALLBACK_REASONS`].
pub const CHANGELOG_FALLBACKS: &str = "kafka_dedup_changelog_fallbacks_total";
/// `kafka_dedup_changelog_loaded_bytes_total`: bytes of changelog chunks loaded by recoveries.
pub const CHANGELOG_LOADED_BYTES: &str = "kafka_dedup_changelog_loaded_bytes_total";
/// `kafka_dedup_changelog_written_bytes_total`: bytes of changelog chunks written by checkpoints.
pub const CHANGELOG_WRITTEN_BYTES: &str = "kafka_dedup_changelog_written_bytes_total";
/// `kafka_dedup_handover_duration_seconds{source}`: time from a partition's assignment until it
/// runs, by where its generations came from ([`HANDOVER_SOURCES`]).
pub const HANDOVER_DURATION: &str = "kafka_dedup_handover_duration_seconds";
/// The values of the `source` label of [`HANDOVER_DURATION`]: `store` (the local store),
/// `changelog` (`store.changelog_topic`), `output` (re-read from the output topic), `fresh`
/// (nothing to recover).
pub const HANDOVER_SOURCES: [&str; 4] = ["store", "changelog", "output", "fresh"];
/// `kafka_dedup_positions_from_output_total{reason}`: recoveries that took a partition's
/// position from the provenance of the output's records, by [`POSITION_FROM_OUTPUT_REASONS`].
pub const POSITIONS_FROM_OUTPUT: &str = "kafka_dedup_positions_from_output_total";
/// The values of the `reason` label of [`POSITIONS_FROM_OUTPUT`] (`recovery::plan::FromOutputReason`):
/// `no_commit` (the group had no committed offset: lost offsets, a new `group_id`),
/// `no_metadata` (a committed offset that kafka-dedup did not write, e.g. an operator's reset).
/// `behind_output` (a committed offset without metadata that the output proves behind).
pub const POSITION_FROM_OUTPUT_REASONS: [&str; 3] = ["no_commit", "no_metadata", "behind_output"];
/// `kafka_dedup_store_write_failures_total`: writes of the local store that failed (a checkpoint's
/// or a hand-over's; a full disk, a file system turned read-only). The store is a cache:
/// forwarding goes on from memory, and the store takes writes again by itself once the cause is
/// gone (docs/operating.md, "A full disk").
pub const STORE_WRITE_FAILURES: &str = "kafka_dedup_store_write_failures_total";
/// `kafka_dedup_recovery_records_scanned_total{partition}`: output records re-read during recovery.
pub const RECOVERY_SCANNED: &str = "kafka_dedup_recovery_records_scanned_total";
/// `kafka_dedup_recovery_duration_seconds`: from assignment to the partition running.
pub const RECOVERY_DURATION: &str = "kafka_dedup_recovery_duration_seconds";
/// `kafka_dedup_consumer_lag_records{partition}`: high watermark minus committed position, from
/// librdkafka statistics.
pub const CONSUMER_LAG: &str = "kafka_dedup_consumer_lag_records";
/// `kafka_dedup_partition_state{partition,state}`: 1 for the partition's current life-cycle state
/// (the `state` label is a [`PartitionState::name`]), 0 for the others; all 0 once the partition
/// is released (and left out of the scrape: [`render`]).
pub const PARTITION_STATE: &str = "kafka_dedup_partition_state";
/// `kafka_dedup_ready`: 1 when `/readyz` answers ready, else 0; set at each scrape, so an alert
/// can say what an orchestrator's readiness probe sees.
pub const READY: &str = "kafka_dedup_ready";
/// `kafka_dedup_partitions_owned`: partitions of `input.topic` this process owns now (in the
/// global scope: its route stage's), set at each scrape. Summed over a group's members and
/// compared with [`INPUT_PARTITIONS`] by the alert `KafkaDedupPartitionsUnowned`: a member that
/// owns nothing is ready (a standby), a group that leaves partitions to nobody is not fine.
pub const PARTITIONS_OWNED: &str = "kafka_dedup_partitions_owned";
/// `kafka_dedup_input_partitions`: the partition count of `input.topic`, as the brokers reported
/// it at the last look of [`crate::topics::watch`] (every 5 s).
pub const INPUT_PARTITIONS: &str = "kafka_dedup_input_partitions";
/// `kafka_dedup_out_of_scope_records_total{partition,reason}`: records whose replays may land in
/// another input partition, outside the per-partition dedup scope: `null_key` (producers spread
/// them over partitions) or `key_elsewhere` (neither the Java nor the librdkafka default
/// partitioner would put the key in this partition: a custom partitioner or a changed partition
/// count).
pub const OUT_OF_SCOPE: &str = "kafka_dedup_out_of_scope_records_total";
/// The values of the `reason` label of [`OUT_OF_SCOPE`].
pub const OUT_OF_SCOPE_REASONS: [&str; 2] = ["null_key", "key_elsewhere"];
/// `kafka_dedup_side_copies_refused_total{partition,side}`: copies for a side topic (`side` is
/// `duplicates` for `output.duplicates_topic`, `dead_letter` for `fingerprint.dead_letter_topic`)
/// that the producer or the broker refused, each attempt counted; the partition halts meanwhile
/// (`kafka_dedup_partition_state{state="halted"}`).
pub const SIDE_REFUSED: &str = "kafka_dedup_side_copies_refused_total";
/// `kafka_dedup_schema_registry_unavailable_total{partition}`: records of an `avro:` or
/// `protobuf:` source (or a `-key:` one) that could not be fingerprinted because the schema
/// registry was unavailable, each attempt counted;
/// the partition halts meanwhile (`kafka_dedup_partition_state{state="halted"}`) and the record
/// waits, never forwarded without its fingerprint.
pub const REGISTRY_UNAVAILABLE: &str = "kafka_dedup_schema_registry_unavailable_total";
/// The values of the `side` label of [`SIDE_REFUSED`].
pub const SIDES: [&str; 2] = ["duplicates", "dead_letter"];
/// `kafka_dedup_output_refused_total{partition,action}`: records refused for the output topic
/// (too large for its `max.message.bytes`, or for the producer's `message.max.bytes`; stamped out
/// of its `message.timestamp.before.max.ms` / `after.max.ms`): `action` `halt` (the partition
/// halts and sends it again with back-off; each attempt counted) or `dead_letter` (sent to
/// `fingerprint.dead_letter_topic` instead, reason `too_large` or `timestamp_out_of_range`).
pub const OUTPUT_REFUSED: &str = "kafka_dedup_output_refused_total";
/// The values of the `action` label of [`OUTPUT_REFUSED`].
pub const OUTPUT_REFUSED_ACTIONS: [&str; 2] = ["halt", "dead_letter"];
/// `kafka_dedup_records_skipped_total{partition}`: records let past by `input.skip` (sent to
/// `fingerprint.dead_letter_topic` when one is set, else dropped).
pub const SKIPPED: &str = "kafka_dedup_records_skipped_total";
/// `kafka_dedup_input_rewound_records_total{partition}`: records the consumer returned below the
/// partition's next offset with no seek of kafka-dedup's to explain it (the input partition was
/// truncated, or its position reset to `earliest`): not taken, and lost unless replays.
pub const INPUT_REWOUND: &str = "kafka_dedup_input_rewound_records_total";
/// `kafka_dedup_input_retaken_records_total{partition}`: input records taken a second time, not
/// replays: the generations held their fingerprint (or stand-in) with the record's own input
/// offset as its first offset ([`crate::pipeline::route::Route::DropRetaken`]), so it was
/// forwarded before (by a process killed before its checkpoint committed it, or an owner whose
/// hand-over did not commit) and re-learned from the output's provenance. Dropped without a copy
/// to `output.duplicates_topic`; not in [`DUPLICATES_DROPPED`]. A burst after a crash is expected
/// (up to the records forwarded since the last checkpoint); without provenance such records count
/// as replays.
pub const INPUT_RETAKEN: &str = "kafka_dedup_input_retaken_records_total";
/// `kafka_dedup_recovery_panics_total{partition}`: recovery workers that panicked (a bug); the
/// recovery is retried with back-off.
pub const RECOVERY_PANICS: &str = "kafka_dedup_recovery_panics_total";
/// `kafka_dedup_build_info{version}`: always 1.
pub const BUILD_INFO: &str = "kafka_dedup_build_info";
/// `kafka_dedup_start_time_seconds`: when the process started (Unix time, seconds); it changes
/// when the process restarts (the alert `KafkaDedupRestarting`).
pub const START_TIME: &str = "kafka_dedup_start_time_seconds";
/// `kafka_dedup_oldest_generation_info{generation}`: always 1; `generation` is the age of the
/// oldest live generation (`checkpoint.generations - 1`), the value of [`DUPLICATES_DROPPED`]'s
/// `generation` label whose replays are about to fall out of the horizon. Lets a query pick
/// those without knowing the configuration: `... and ignoring (partition) <this>`.
pub const OLDEST_GENERATION: &str = "kafka_dedup_oldest_generation_info";

/// Every counter (every name above ending in `_total`; a unit test checks the list against this
/// file). Each is in the first scrape, at 0, with all its known label values.
pub const COUNTERS: [&str; 20] = [
    SIDE_REFUSED,
    INPUT_REWOUND,
    INPUT_RETAKEN,
    REGISTRY_UNAVAILABLE,
    OUTPUT_REFUSED,
    SKIPPED,
    RECOVERY_PANICS,
    POSITIONS_FROM_OUTPUT,
    RECORDS_CONSUMED,
    RECORDS_FORWARDED,
    DUPLICATES_DROPPED,
    UNFINGERPRINTABLE,
    CHECKPOINTS,
    STORE_REBUILDS,
    STORE_WRITE_FAILURES,
    RECOVERY_SCANNED,
    OUT_OF_SCOPE,
    CHANGELOG_FALLBACKS,
    CHANGELOG_LOADED_BYTES,
    CHANGELOG_WRITTEN_BYTES,
];

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
    describe_counter!(
        STORE_WRITE_FAILURES,
        Unit::Count,
        "Writes of the local store that failed (full disk, read-only file system)."
    );
    describe_counter!(RECOVERY_SCANNED, Unit::Count, "Output records re-read during recovery.");
    describe_counter!(
        POSITIONS_FROM_OUTPUT,
        Unit::Count,
        "Recoveries that took the position from the output's provenance headers, by reason."
    );
    describe_histogram!(RECOVERY_DURATION, Unit::Seconds, "Partition recovery duration.");
    describe_histogram!(
        HANDOVER_DURATION,
        Unit::Seconds,
        "Time from a partition's assignment until it runs, by where its generations came from."
    );
    describe_counter!(
        CHANGELOG_FALLBACKS,
        Unit::Count,
        "Recoveries that re-read the output instead of loading the changelog topic, by reason."
    );
    describe_counter!(
        CHANGELOG_LOADED_BYTES,
        Unit::Bytes,
        "Bytes of changelog chunks loaded by recoveries."
    );
    describe_counter!(
        CHANGELOG_WRITTEN_BYTES,
        Unit::Bytes,
        "Bytes of changelog chunks written by checkpoints."
    );
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
    describe_gauge!(
        PARTITIONS_OWNED,
        Unit::Count,
        "Partitions of the input topic this process owns."
    );
    describe_gauge!(INPUT_PARTITIONS, Unit::Count, "Partitions of the input topic.");
    describe_counter!(
        OUT_OF_SCOPE,
        Unit::Count,
        "Records whose replays may land in another partition (null key, or a key placed elsewhere)."
    );
    describe_counter!(
        SIDE_REFUSED,
        Unit::Count,
        "Copies refused by a side topic (duplicates, dead letter); the partition halts and retries."
    );
    describe_counter!(
        REGISTRY_UNAVAILABLE,
        Unit::Count,
        "Records that waited because the schema registry was unavailable; the partition halts and retries."
    );
    describe_counter!(
        OUTPUT_REFUSED,
        Unit::Count,
        "Records the output topic refused for their size or their timestamp: the partition halts, or the record is dead-lettered."
    );
    describe_counter!(
        SKIPPED,
        Unit::Count,
        "Records let past by input.skip (dead-lettered when a dead-letter topic is set, else dropped)."
    );
    describe_counter!(
        INPUT_REWOUND,
        Unit::Count,
        "Records the consumer returned below the next offset without a seek (input truncated or reset): not taken."
    );
    describe_counter!(
        INPUT_RETAKEN,
        Unit::Count,
        "Input records taken a second time (forwarded before a crash, re-learned with their own offset): dropped, not replays."
    );
    describe_counter!(
        RECOVERY_PANICS,
        Unit::Count,
        "Recovery workers that panicked; the recovery is retried with back-off."
    );
    describe_gauge!(BUILD_INFO, Unit::Count, "Build information; always 1.");
    describe_gauge!(START_TIME, Unit::Seconds, "Start time of the process, Unix seconds.");
    describe_gauge!(
        OLDEST_GENERATION,
        Unit::Count,
        "Always 1; the generation label is the age of the oldest live generation."
    );
    gauge!(BUILD_INFO, "version" => env!("CARGO_PKG_VERSION")).set(1.0);
    gauge!(START_TIME).set(started());
    // The process-wide counters and histograms, at 0 before their first event.
    for result in CHECKPOINT_RESULTS {
        counter!(CHECKPOINTS, "result" => result).increment(0);
    }
    for reason in STORE_REBUILD_REASONS {
        counter!(STORE_REBUILDS, "reason" => reason).increment(0);
    }
    for reason in POSITION_FROM_OUTPUT_REASONS {
        counter!(POSITIONS_FROM_OUTPUT, "reason" => reason).increment(0);
    }
    counter!(STORE_WRITE_FAILURES).increment(0);
    for reason in crate::changelog::FALLBACK_REASONS {
        counter!(CHANGELOG_FALLBACKS, "reason" => reason).increment(0);
    }
    counter!(CHANGELOG_LOADED_BYTES).increment(0);
    counter!(CHANGELOG_WRITTEN_BYTES).increment(0);
    for source in HANDOVER_SOURCES {
        let _ = histogram!(HANDOVER_DURATION, "source" => source);
    }
    let _ = histogram!(CHECKPOINT_DURATION);
    let _ = histogram!(RECOVERY_DURATION);
    let _ = histogram!(DUPLICATE_DISTANCE);
}

/// The process's start time (Unix seconds), fixed at the first call.
fn started() -> f64 {
    static STARTED: OnceLock<f64> = OnceLock::new();
    *STARTED.get_or_init(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs() as f64)
    })
}

/// Renders `handle`'s metrics in the Prometheus text format, leaving out every sample whose
/// `partition` label names a partition that `owned` says this process does not own (see the
/// module documentation: the exporter cannot remove one series).
pub fn render(handle: &PrometheusHandle, owned: impl Fn(i32) -> bool) -> String {
    let text = handle.render();
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        if partition_of(line).is_none_or(&owned) {
            out.push_str(line);
        }
    }
    out
}

/// The value of the `partition` label of a sample line (`name{a="x",partition="3"} 1`), if any.
fn partition_of(line: &str) -> Option<i32> {
    if line.starts_with('#') {
        return None;
    }
    let labels = &line[line.find('{')? + 1..];
    let labels = &labels[..labels.find('}')?];
    labels
        .split(',')
        .find_map(|l| l.strip_prefix("partition=\""))
        .and_then(|v| v.strip_suffix('"'))
        .and_then(|v| v.parse().ok())
}

/// Metric handles of one input partition, registered once at assignment: every per-partition
/// series of the partition exists (at 0) from then on, see the module documentation.
pub struct PartitionMetrics {
    /// Records consumed.
    pub consumed: Counter,
    /// Records forwarded (acknowledged).
    pub forwarded: Counter,
    /// Duplicates by generation age; index = age.
    pub duplicates: Vec<Counter>,
    /// Input records taken a second time ([`INPUT_RETAKEN`]).
    pub retaken: Counter,
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
    /// Unfingerprintable records under the configured `on_missing` action, by
    /// [`UNFINGERPRINTABLE_REASONS`] (same index).
    unfingerprintable: [Counter; 9],
    /// The configured `fingerprint.on_missing`, the `action` label of `unfingerprintable`.
    on_missing: OnMissing,
    /// The `partition` label value, for the state gauge and a label value registered on use.
    partition: String,
}

impl PartitionMetrics {
    /// Registers the handles of `partition` with every label value `cfg` makes possible:
    /// `checkpoint.generations` generation ages, the `fingerprint.on_missing` action. Also sets
    /// [`OLDEST_GENERATION`].
    pub fn new(partition: i32, cfg: &Config) -> Self {
        let generations = cfg.checkpoint.generations as usize;
        let on_missing = cfg.fingerprint.on_missing;
        let p = partition.to_string();
        gauge!(OLDEST_GENERATION, "generation" => generations.saturating_sub(1).to_string()).set(1.0);
        // Registering a handle creates its series, at 0.
        PartitionMetrics {
            consumed: counter!(RECORDS_CONSUMED, "partition" => p.clone()),
            forwarded: counter!(RECORDS_FORWARDED, "partition" => p.clone()),
            duplicates: (0..generations)
                .map(|age| counter!(DUPLICATES_DROPPED, "partition" => p.clone(), "generation" => age.to_string()))
                .collect(),
            retaken: counter!(INPUT_RETAKEN, "partition" => p.clone()),
            distance: histogram!(DUPLICATE_DISTANCE),
            held: (0..generations)
                .map(|age| gauge!(FINGERPRINTS_HELD, "partition" => p.clone(), "generation" => age.to_string()))
                .collect(),
            horizon: gauge!(HORIZON, "partition" => p.clone()),
            scanned: counter!(RECOVERY_SCANNED, "partition" => p.clone()),
            null_key: counter!(OUT_OF_SCOPE, "partition" => p.clone(), "reason" => OUT_OF_SCOPE_REASONS[0]),
            key_elsewhere: counter!(OUT_OF_SCOPE, "partition" => p.clone(), "reason" => OUT_OF_SCOPE_REASONS[1]),
            unfingerprintable: UNFINGERPRINTABLE_REASONS.map(|reason| {
                counter!(UNFINGERPRINTABLE, "partition" => p.clone(), "action" => on_missing.as_str(), "reason" => reason)
            }),
            on_missing,
            partition: p,
        }
        .with_zeros()
    }

    /// Registers, at 0, the partition's counters that are only reached through a free function
    /// ([`side_refused`], [`recovery_panic`]).
    fn with_zeros(self) -> Self {
        for side in SIDES {
            counter!(SIDE_REFUSED, "partition" => self.partition.clone(), "side" => side).increment(0);
        }
        for action in OUTPUT_REFUSED_ACTIONS {
            counter!(OUTPUT_REFUSED, "partition" => self.partition.clone(), "action" => action).increment(0);
        }
        counter!(SKIPPED, "partition" => self.partition.clone()).increment(0);
        counter!(INPUT_REWOUND, "partition" => self.partition.clone()).increment(0);
        counter!(REGISTRY_UNAVAILABLE, "partition" => self.partition.clone()).increment(0);
        counter!(RECOVERY_PANICS, "partition" => self.partition.clone()).increment(0);
        self
    }

    /// Counts an unfingerprintable record (`reason`: one of [`UNFINGERPRINTABLE_REASONS`]).
    pub fn unfingerprintable(&self, action: OnMissing, reason: &'static str) {
        let known = UNFINGERPRINTABLE_REASONS.iter().position(|r| *r == reason);
        debug_assert!(
            known.is_some() && action == self.on_missing,
            "unfingerprintable {action:?}/{reason}: not registered at 0 (UNFINGERPRINTABLE_REASONS, on_missing)"
        );
        match known {
            Some(i) if action == self.on_missing => self.unfingerprintable[i].increment(1),
            _ => {
                counter!(UNFINGERPRINTABLE, "partition" => self.partition.clone(), "action" => action.as_str(), "reason" => reason)
                    .increment(1);
            }
        }
    }

    /// Sets the life-cycle state gauge: 1 for `state`, 0 for the others.
    pub fn set_state(&self, state: PartitionState) {
        set_partition_state(&self.partition, Some(state));
    }

    /// Zeroes the per-partition gauges when the partition is released (its series then leave the
    /// scrape: [`render`]).
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

/// Counts a copy for side topic `side` (`duplicates` or `dead_letter`) refused for input
/// partition `partition` ([`SIDE_REFUSED`]).
pub fn side_refused(partition: i32, side: &'static str) {
    counter!(SIDE_REFUSED, "partition" => partition.to_string(), "side" => side).increment(1);
}

/// Counts a record of input partition `partition` the output refused, and what was done
/// (`action`: one of [`OUTPUT_REFUSED_ACTIONS`]) ([`OUTPUT_REFUSED`]).
pub fn output_refused(partition: i32, action: &'static str) {
    counter!(OUTPUT_REFUSED, "partition" => partition.to_string(), "action" => action).increment(1);
}

/// Counts a record of input partition `partition` that waits for the schema registry
/// ([`REGISTRY_UNAVAILABLE`]).
pub fn registry_unavailable(partition: i32) {
    counter!(REGISTRY_UNAVAILABLE, "partition" => partition.to_string()).increment(1);
}

/// Counts a record of input partition `partition` returned below its next offset with no seek to
/// explain it ([`INPUT_REWOUND`]).
pub fn input_rewound(partition: i32) {
    counter!(INPUT_REWOUND, "partition" => partition.to_string()).increment(1);
}

/// Counts a record of input partition `partition` let past by `input.skip` ([`SKIPPED`]).
pub fn skipped(partition: i32) {
    counter!(SKIPPED, "partition" => partition.to_string()).increment(1);
}

/// Counts a recovery worker of input partition `partition` that panicked ([`RECOVERY_PANICS`]).
pub fn recovery_panic(partition: i32) {
    counter!(RECOVERY_PANICS, "partition" => partition.to_string()).increment(1);
}

/// Sets the [`READY`] gauge.
pub fn ready(ready: bool) {
    gauge!(READY).set(if ready { 1.0 } else { 0.0 });
}

/// Sets the [`PARTITIONS_OWNED`] gauge (a count of partitions).
pub fn partitions_owned(n: usize) {
    gauge!(PARTITIONS_OWNED).set(n as f64);
}

/// Sets the [`INPUT_PARTITIONS`] gauge (a count of partitions).
pub fn input_partitions(n: usize) {
    gauge!(INPUT_PARTITIONS).set(n as f64);
}

/// Counts a recovery whose position came from the output's provenance (`reason`: one of
/// [`POSITION_FROM_OUTPUT_REASONS`]).
pub fn position_from_output(reason: &'static str) {
    debug_assert!(POSITION_FROM_OUTPUT_REASONS.contains(&reason), "reason {reason}");
    counter!(POSITIONS_FROM_OUTPUT, "reason" => reason).increment(1);
}

/// Counts a store rebuild of one partition (`reason`: one of [`STORE_REBUILD_REASONS`]).
pub fn store_rebuild(reason: &'static str) {
    debug_assert!(
        STORE_REBUILD_REASONS.contains(&reason),
        "store rebuild reason {reason} is not in STORE_REBUILD_REASONS"
    );
    counter!(STORE_REBUILDS, "reason" => reason).increment(1);
}

/// Counts a changelog fallback (`reason`: one of [`crate::changelog::FALLBACK_REASONS`]).
pub fn changelog_fallback(reason: &'static str) {
    debug_assert!(crate::changelog::FALLBACK_REASONS.contains(&reason), "{reason}");
    counter!(CHANGELOG_FALLBACKS, "reason" => reason).increment(1);
}

/// Counts changelog bytes loaded.
pub fn changelog_loaded(bytes: u64) {
    counter!(CHANGELOG_LOADED_BYTES).increment(bytes);
}

/// Counts changelog bytes written.
pub fn changelog_written(bytes: u64) {
    counter!(CHANGELOG_WRITTEN_BYTES).increment(bytes);
}

/// Records a hand-over's duration by source (one of [`HANDOVER_SOURCES`]).
pub fn handover(source: &'static str, seconds: f64) {
    histogram!(HANDOVER_DURATION, "source" => source).record(seconds);
}

/// Counts a failed write of the local store ([`STORE_WRITE_FAILURES`]).
pub fn store_write_failed() {
    counter!(STORE_WRITE_FAILURES).increment(1);
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

mod totals;
pub use totals::{Progress, Totals};

#[cfg(test)]
mod tests;

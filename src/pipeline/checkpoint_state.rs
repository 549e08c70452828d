//! The state of a checkpoint (docs/ARCHITECTURE.md, "Checkpoint"): one partition's
//! [`CheckpointRecord`], from which its offset metadata and its store write are made, and the
//! checkpoint in progress ([`Checkpoint`]: its parts, its [`Stage`]) that
//! [`Mode::Idempotent`](super::mode::Mode::Idempotent) carries. Plain data below `mode`; the
//! `impl Filter` that drives a checkpoint is in `checkpoint.rs`.

use std::collections::BTreeMap;
use std::sync::mpsc::Receiver;
use std::sync::Arc;
use std::time::Instant;

use crate::generations::{Generation, Generations, Positions};
use crate::global::HighWater;
use crate::metadata::{new_checkpoint_id, CheckpointMeta, METADATA_VERSION};
use crate::partition::Running;
use crate::store::{PartitionWrite, StoreError};

/// One partition's checkpoint: the input offset committed and what recovery needs to know about
/// it. The offset metadata ([`CheckpointRecord::meta`]) and the store write
/// ([`CheckpointRecord::write`], from which the store derives its snapshot) are made from it.
#[derive(Debug, Clone)]
pub(crate) struct CheckpointRecord {
    /// Input partition.
    pub partition: i32,
    /// Input offset committed: the next record to consume.
    pub offset: i64,
    /// Epoch of the current generation.
    pub epoch: u64,
    /// Checkpoint id, naming the store snapshot written for this commit.
    pub ckpt: String,
    /// Output start positions of the live generations, oldest first.
    pub gens: Vec<Positions>,
    /// True when committed by a clean hand-over (every delivery acknowledged).
    pub clean: bool,
    /// Transactional mode: output positions just past the committed transaction.
    pub out_end: Option<Positions>,
    /// The partition clock, ms since the Unix epoch ([`crate::horizon::Clock`]); `None` when not
    /// known. The next owner continues it.
    pub clock: Option<i64>,
    /// Global scope, filter stage: the high-water marks of the records taken before `offset`
    /// ([`crate::global::HighWater`]); empty otherwise.
    pub high_water: HighWater,
    /// What the changelog holds of the partition (`store.changelog_topic`): this checkpoint's
    /// chunks once written and acknowledged, or an earlier committed checkpoint's.
    pub changelog: Option<crate::changelog::ChangelogRef>,
}

impl CheckpointRecord {
    /// The checkpoint of partition `partition` at input `offset`, with generations `gens` and
    /// partition clock `clock`.
    pub fn new(
        partition: i32,
        offset: i64,
        gens: &Generations,
        clock: Option<i64>,
        ckpt: String,
        clean: bool,
        out_end: Option<Positions>,
    ) -> Self {
        CheckpointRecord {
            partition,
            offset,
            epoch: gens.current().epoch,
            ckpt,
            gens: gens.out_starts(),
            clean,
            out_end,
            clock,
            high_water: HighWater::new(),
            changelog: None,
        }
    }

    /// With the high-water marks `high_water` (global scope, filter stage): those of the records
    /// taken before the committed offset, and only those.
    pub fn with_high_water(mut self, high_water: HighWater) -> Self {
        self.high_water = high_water;
        self
    }

    /// The checkpoint of running partition `p` at its commit position (the watermark), under a
    /// new checkpoint id. `transactional`: with the output end of the committed transaction.
    pub(super) fn of_running(p: i32, run: &mut Running, clean: bool, transactional: bool) -> Self {
        run.ckpt = new_checkpoint_id();
        let out_end = transactional.then(|| run.out_positions.clone());
        let watermark = run.inflight.watermark();
        run.high_water.settle(watermark);
        let mut record = Self::new(
            p,
            run.inflight.watermark(),
            &run.gens,
            run.clock.time(),
            run.ckpt.clone(),
            clean,
            out_end,
        )
        .with_high_water(run.high_water.below(watermark));
        record.changelog = run.changelog.clone();
        record
    }

    /// The metadata committed with the offset.
    pub fn meta(&self) -> CheckpointMeta {
        CheckpointMeta {
            kd: METADATA_VERSION,
            epoch: self.epoch,
            ckpt: self.ckpt.clone(),
            gens: self.gens.clone(),
            elided: None,
            clean: self.clean,
            out_end: self.out_end.clone(),
            clock: self.clock,
            hw: self.high_water.clone(),
            cl: self.changelog.clone(),
        }
    }

    /// The store write: `generations` (oldest first), holding every forwarded record's
    /// fingerprint up to the output positions `out_covered`.
    pub fn write<'a>(&self, out_covered: Positions, generations: Vec<&'a Generation>) -> PartitionWrite<'a> {
        PartitionWrite {
            partition: self.partition,
            epoch: self.epoch,
            ckpt: self.ckpt.clone(),
            committed_offset: self.offset,
            out_covered,
            generations,
            clean: self.clean,
            clock: self.clock,
        }
    }
}

/// One partition's part of a checkpoint in progress.
pub(super) struct CheckpointPart {
    /// Ownership the checkpoint was taken for.
    pub(super) incarnation: u64,
    /// What is committed; its offset is the target: every record before it must be
    /// acknowledged first.
    pub(super) record: CheckpointRecord,
    /// Frozen generations as of the checkpoint's start, oldest first.
    pub(super) frozen: Vec<Arc<Generation>>,
    /// The current generation as of the checkpoint's start, stored empty: records taken since are
    /// re-learned from the output.
    pub(super) current: Generation,
    /// Halted at the start or meanwhile, so its target was lowered to its first refused record:
    /// `frozen` may hold records after it that are still in flight, so neither the store nor
    /// the changelog gets this checkpoint of it (its commit names a checkpoint no snapshot has:
    /// a recovery rebuilds it from the output).
    pub(super) lowered: bool,
}

/// What the background store write of a checkpoint needs for one partition.
pub(super) struct PersistJob {
    /// What is committed.
    pub(super) record: CheckpointRecord,
    /// The frozen live generations, oldest first.
    pub(super) frozen: Vec<Arc<Generation>>,
    /// The current generation, empty.
    pub(super) current: Generation,
}

/// Where a checkpoint in progress is.
pub(super) enum Stage {
    /// Waiting for acknowledgements up to each target.
    Delivering,
    /// The store write runs on a background thread: the first receiver gets its result (the
    /// store's, then the changelog's); the second a message as soon as the store write is done,
    /// before the changelog write (which can take long: its leaders offline).
    Persisting(Receiver<Persisted>, Receiver<()>),
}

/// What the background write of a checkpoint did: the store's result, and the changelog chunks
/// written and acknowledged per partition (`store.changelog_topic`).
pub(super) type Persisted = (Result<(), StoreError>, BTreeMap<i32, crate::changelog::ChangelogRef>);

/// A checkpoint in progress (at most one at a time, idempotent mode).
pub(super) struct Checkpoint {
    /// When it began (the duration metric).
    pub(super) started: Instant,
    /// The partitions it covers.
    pub(super) parts: BTreeMap<i32, CheckpointPart>,
    /// Where it is.
    pub(super) stage: Stage,
}

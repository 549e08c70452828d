//! The answers of `inspect` and of the `/store/*` routes, as one set of types serialized the same
//! way by the CLI (`--json`) and by HTTP.

use serde::{Deserialize, Serialize};

use crate::generations::Generation;
use crate::generations::Positions;
use crate::store::{GenerationMeta, Identity, PartitionSnapshot};

/// `stats` answer (`inspect stats --json`, `GET /store/stats`).
#[derive(Debug, Serialize, Deserialize)]
pub struct Stats {
    /// Store format version (see `migrations/`).
    pub format_version: u32,
    /// Deployment the store belongs to; `None` for a store that was never written.
    pub identity: Option<Identity>,
    /// Bytes on disk (sled's own accounting).
    pub size_on_disk_bytes: u64,
    /// Per input partition with a snapshot, ascending.
    pub partitions: Vec<PartitionStats>,
    /// HTTP only: the partitions this process owns, from memory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live: Option<Vec<LivePartition>>,
    /// HTTP only: why `live` is missing (the pipeline did not answer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_unavailable: Option<String>,
}

/// One partition's snapshot in `stats`.
#[derive(Debug, Serialize, Deserialize)]
pub struct PartitionStats {
    /// Input partition.
    pub partition: i32,
    /// Epoch of the current generation.
    pub epoch: u64,
    /// Checkpoint id of the snapshot.
    pub checkpoint: String,
    /// Input offset committed with the snapshot (the next record to consume).
    pub committed_offset: i64,
    /// Output positions up to which the snapshot holds every forwarded record's fingerprint;
    /// the next start re-learns the records from here on from the output topic.
    pub output_covered: Positions,
    /// When the snapshot was written, ms since the Unix epoch.
    pub written_at_ms: i64,
    /// True when written by a clean hand-over (every generation stored in full).
    pub clean: bool,
    /// Fingerprints held over all generations.
    pub fingerprints: u64,
    /// Generations, oldest first, the current one last.
    pub generations: Vec<GenerationStats>,
}

/// One generation in `stats`.
#[derive(Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct GenerationStats {
    /// Epoch.
    pub epoch: u64,
    /// Fingerprints held.
    pub fingerprints: u64,
    /// First input offset of the generation: its records were first seen at input offsets in
    /// `[input_start, input_end)`.
    pub input_start: i64,
    /// End of its input range (exclusive): the next generation's start, or for the current one
    /// the committed offset (offline) or the next offset to consume (live).
    pub input_end: i64,
    /// Output offsets at or after which its forwarded records lie (per output partition; a lower
    /// bound: records in flight when it was frozen land after the next generation's start).
    pub output_start: Positions,
    /// Creation time, ms since the Unix epoch.
    pub created_at_ms: i64,
}

/// One partition owned by the running process, in `GET /store/stats`.
#[derive(Debug, Serialize, Deserialize)]
pub struct LivePartition {
    /// Input partition.
    pub partition: i32,
    /// `running` or `recovering`.
    pub state: String,
    /// Input offset of the next record to consume (running only).
    pub next_offset: Option<i64>,
    /// Output end known to the partition: last acknowledged offset + 1 per output partition.
    pub output_position: Positions,
    /// Fingerprints held in memory over all generations.
    pub fingerprints: u64,
    /// In-memory generations, oldest first (empty while recovering).
    pub generations: Vec<GenerationStats>,
}

/// Where a fingerprint is held.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Holding {
    /// Input partition.
    pub partition: i32,
    /// Generation epoch.
    pub generation: u64,
    /// Age: 0 current, 1 previous, ...
    pub age: usize,
    /// Input offset where it was first seen; `None` when not known (re-learned from an output
    /// record without provenance, or before its generation's input start).
    pub first_seen_offset: Option<i64>,
}

/// A partition whose part of an answer is incomplete, and why.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Incomplete {
    /// Input partition.
    pub partition: i32,
    /// Why.
    pub reason: String,
}

/// `lookup` answer (`inspect lookup --json`, `GET /store/lookup`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Lookup {
    /// The fingerprint looked up, 32 hex digits.
    pub fingerprint: String,
    /// True when any generation holds it.
    pub held: bool,
    /// Where, by partition then age (newest first within a partition).
    pub holdings: Vec<Holding>,
    /// Partitions whose generations were not (entirely) available to the answer; omitted when
    /// none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub incomplete: Vec<Incomplete>,
}

impl GenerationStats {
    /// A stored generation, its input range ending at `input_end`.
    pub(super) fn stored(g: &GenerationMeta, input_end: i64) -> Self {
        GenerationStats {
            epoch: g.epoch,
            fingerprints: g.count,
            input_start: g.in_start,
            input_end,
            output_start: g.out_start.clone(),
            created_at_ms: g.created_at_ms,
        }
    }

    /// An in-memory generation, its input range ending at `input_end`.
    pub(super) fn held(g: &Generation, input_end: i64) -> Self {
        GenerationStats {
            epoch: g.epoch,
            fingerprints: g.len() as u64,
            input_start: g.in_start,
            input_end,
            output_start: g.out_start.clone(),
            created_at_ms: g.created_at_ms,
        }
    }
}

/// Generations, oldest first, with each input range ending where the next begins; the current
/// one's (last) ends where it was made to end.
pub(super) fn chain_input_ranges(mut gens: Vec<GenerationStats>) -> Vec<GenerationStats> {
    for i in 1..gens.len() {
        gens[i - 1].input_end = gens[i].input_start;
    }
    gens
}

pub(super) fn partition_stats(p: i32, s: &PartitionSnapshot) -> PartitionStats {
    let generations = chain_input_ranges(
        s.generations
            .iter()
            .map(|g| GenerationStats::stored(g, s.committed_offset))
            .collect(),
    );
    PartitionStats {
        partition: p,
        epoch: s.epoch,
        checkpoint: s.ckpt.clone(),
        committed_offset: s.committed_offset,
        output_covered: s.out_covered.clone(),
        written_at_ms: s.written_at_ms,
        clean: s.clean,
        fingerprints: s.generations.iter().map(|g| g.count).sum(),
        generations,
    }
}

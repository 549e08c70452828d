//! The metadata string committed with each input offset: enough to rebuild a partition's
//! generations from Kafka alone (docs/ARCHITECTURE.md, "Principles" and "Recovery").
//!
//! It is compact JSON, for example
//! `{"kd":1,"epoch":7,"ckpt":"5f0c…","gens":[{"0":1200},{"0":1350}],"clean":false,"clock":1700000009300}`:
//! - `epoch`: the current generation's epoch;
//! - `ckpt`: id of the store snapshot written for this commit; a local store is used only when it
//!   holds a snapshot with the same id (otherwise it is behind, ahead, or from elsewhere);
//! - `gens`: for each live generation, oldest first, the output offsets (per output partition)
//!   at or after which its records lie; recovery re-reads the output from the first entry;
//! - `clean`: true when the owner handed the partition over cleanly (every delivery acknowledged,
//!   nothing in flight): the next owner need not wait out in-flight records;
//! - `out_end` (transactional mode): output offsets after the last record of the committed
//!   transaction; recovery reads no further, so records of a later, aborted transaction are
//!   never learned even from a broker that does not filter them for read_committed readers;
//! - `clock` (optional): the partition clock at this checkpoint, ms since the Unix epoch
//!   ([`crate::horizon`]): the next owner continues it, so an old-stamped first record neither
//!   rotates its generations nor seeds the clock. Absent in a commit of an older kafka-dedup
//!   (or of a partition that has taken no record yet): the next owner takes the newest timestamp
//!   among the output records it re-reads, or, with nothing re-read, its first record's.
//! - `hw` (optional, global scope, filter stage): per input partition of `input.topic`, the
//!   highest input offset taken from this route partition ([`crate::global::HighWater`]), so
//!   that the next owner drops the route stage's re-copies whatever their age. Absent when empty
//!   (the partition scope) and in a commit of an older kafka-dedup: the next owner rebuilds the
//!   marks from the provenance of the output records it re-reads.
//!
//! Version: `kd` 1. `clock` and `hw` were added without a new version: it is optional, the other fields
//! kept their meaning (`gens` still lists the live generations, oldest first, whatever rotates
//! them), and an older kafka-dedup that reads it ignores it and falls back to its own rotation,
//! which is harmless; a new version would instead make an older instance in a rolling update
//! treat every commit of a newer one as foreign.
//!
//! Kafka limits offset metadata to `offset.metadata.max.bytes` (broker default 4096 bytes; a
//! larger commit is refused with `OFFSET_METADATA_TOO_LARGE`). [`CheckpointMeta::encode`] keeps
//! within [`MAX_METADATA_BYTES`] at any number of output partitions: the positions grow with
//! them (`key` partitioning: one entry per output partition and generation, ~20 bytes each, so
//! about 200 output partitions fill it), so when they do not fit, the oldest generation's alone
//! are kept, and when even those do not, none: `gens` is left out and `elided` says how many
//! generations were live. Recovery then finds where they begin in the output by record time,
//! back from `clock` (see `recovery::plan`, `Plan::RebuildByTime`), and reads the output to its
//! end (transactional mode: to the last stable offset; `out_end` is left out too). Everything
//! else is a fixed size but `hw` (about 20 bytes per input partition), which is left out last
//! when even that form does not fit (the next owner rebuilds the marks from the output), so this
//! form fits whatever the partition counts. An older kafka-dedup,
//! which requires `gens`, reads it as foreign metadata.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::generations::Positions;

/// The metadata string committed with the horizon marker (the group's offset on an output
/// partition). A broker that keeps offset metadata returns it; one that drops it (tansu 0.6)
/// returns an empty string, which tells recovery that an input commit without metadata may still
/// be kafka-dedup's own (see `recovery::plan`).
pub const MARKER_METADATA: &str = "kafka-dedup horizon marker";

/// Format version of the metadata (the `kd` field).
pub const METADATA_VERSION: u32 = 1;

/// Upper bound kept for the encoded metadata; Kafka's default limit is 4096 bytes.
pub const MAX_METADATA_BYTES: usize = 4000;

/// The checkpoint metadata committed with a partition's input offset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CheckpointMeta {
    /// Format version, [`METADATA_VERSION`].
    pub kd: u32,
    /// Epoch of the current generation.
    pub epoch: u64,
    /// Store snapshot id (16 hex digits).
    pub ckpt: String,
    /// Output start positions of the live generations, oldest first. Empty (left out) when they
    /// did not fit: see [`Self::elided`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gens: Vec<Positions>,
    /// The number of live generations whose output positions (and `out_end`) did not fit in
    /// [`MAX_METADATA_BYTES`] and were left out; `None` when `gens` holds them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub elided: Option<u32>,
    /// True when committed by a clean hand-over (shutdown or revocation after all deliveries).
    pub clean: bool,
    /// Transactional mode: output positions just past the committed transaction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub out_end: Option<Positions>,
    /// The partition clock at this checkpoint, ms since the Unix epoch; `None` when not known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub clock: Option<i64>,
    /// Global scope, filter stage: the high-water marks (input partition → highest input offset
    /// taken); empty (left out) otherwise, or when they did not fit.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub hw: BTreeMap<i32, i64>,
    /// What the fingerprint changelog (`store.changelog_topic`) holds of this partition: the
    /// frozen generations of a committed checkpoint ([`crate::changelog`]). Optional, like
    /// `clock`: an older kafka-dedup ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cl: Option<crate::changelog::ChangelogRef>,
}

impl CheckpointMeta {
    /// Encodes as compact JSON of at most [`MAX_METADATA_BYTES`], whatever the number of output
    /// partitions. If the generations' positions do not fit (many output partitions in `key`
    /// mode), only the oldest generation's are kept: recovery then re-learns everything into one
    /// generation, which widens the horizon but loses nothing. If even those (with `out_end`) do
    /// not fit, the positions are left out ([`Self::elided`]): recovery finds them by record time.
    /// If that form does not fit with the high-water marks `hw` (hundreds of input partitions),
    /// they are left out too. The last form holds fixed-size fields only (the checkpoint id is
    /// 16 hex digits), so it always fits.
    pub fn encode(&self) -> String {
        let s = serde_json::to_string(self).expect("metadata serializes");
        if s.len() <= MAX_METADATA_BYTES {
            return s;
        }
        let mut short = self.clone();
        if short.gens.len() > 1 {
            short.gens.truncate(1);
            let s = serde_json::to_string(&short).expect("metadata serializes");
            if s.len() <= MAX_METADATA_BYTES {
                return s;
            }
        }
        let bare = CheckpointMeta {
            gens: Vec::new(),
            elided: Some(self.live_generations().max(1)),
            out_end: None,
            ..self.clone()
        };
        let s = serde_json::to_string(&bare).expect("metadata serializes");
        if s.len() <= MAX_METADATA_BYTES {
            return s;
        }
        let bare = CheckpointMeta {
            hw: BTreeMap::new(),
            ..bare
        };
        serde_json::to_string(&bare).expect("metadata serializes")
    }

    /// How many generations were live at the checkpoint: `gens.len()`, or [`Self::elided`].
    pub fn live_generations(&self) -> u32 {
        self.elided.unwrap_or(self.gens.len() as u32)
    }

    /// Parses metadata written by kafka-dedup; `None` for empty or foreign metadata (for
    /// example an offset reset by `kafka-consumer-groups --reset-offsets`, which clears it), and
    /// for metadata naming no generation (neither `gens` nor `elided`).
    pub fn decode(s: &str) -> Option<CheckpointMeta> {
        if s.is_empty() {
            return None;
        }
        let m: CheckpointMeta = serde_json::from_str(s).ok()?;
        let names_generations = match m.elided {
            None => !m.gens.is_empty(),
            Some(n) => n > 0 && m.gens.is_empty(),
        };
        (m.kd == METADATA_VERSION && names_generations).then_some(m)
    }
}

/// A fresh random checkpoint id as 16 hex digits.
pub fn new_checkpoint_id() -> String {
    format!("{:016x}", rand::random::<u64>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_foreign() {
        let m = CheckpointMeta {
            kd: 1,
            epoch: 7,
            ckpt: new_checkpoint_id(),
            gens: vec![[(0, 1200)].into_iter().collect(), [(0, 1350)].into_iter().collect()],
            elided: None,
            clean: false,
            out_end: None,
            clock: Some(1_700_000_009_300),
            hw: BTreeMap::new(),
            cl: None,
        };
        let s = m.encode();
        assert!(s.len() < 200, "{s}");
        assert_eq!(CheckpointMeta::decode(&s), Some(m));
        assert_eq!(CheckpointMeta::decode(""), None);
        assert_eq!(CheckpointMeta::decode("some other tool"), None);
        assert!(s.contains(r#""clock":1700000009300"#), "{s}");
    }

    /// A commit of an older kafka-dedup (no `clock`) decodes with the clock not known; one
    /// without a clock is written without the field, as an older build wrote it.
    #[test]
    fn a_commit_without_clock_is_read_as_not_known() {
        let old = r#"{"kd":1,"epoch":7,"ckpt":"5f0c5f0c5f0c5f0c","gens":[{"0":1200},{"0":1350}],"clean":false}"#;
        let m = CheckpointMeta::decode(old).expect("an older build's commit decodes");
        assert_eq!(m.clock, None);
        assert_eq!(m.encode(), old);
    }

    /// At 1,000 output partitions (`key` mode), with offsets in the billions, three live
    /// generations and a transaction end, the commit still fits: the positions are left out,
    /// everything else is kept, and it decodes as kafka-dedup's own.
    #[test]
    fn metadata_fits_at_a_thousand_output_partitions() {
        let wide: Positions = (0..1000).map(|p| (p, 9_000_000_000i64 + p as i64)).collect();
        for (gens, out_end) in [
            (vec![wide.clone(), wide.clone(), wide.clone()], Some(wide.clone())),
            (vec![wide.clone()], None),
        ] {
            let m = CheckpointMeta {
                kd: 1,
                epoch: u64::MAX,
                ckpt: "f".repeat(16),
                gens: gens.clone(),
                elided: None,
                clean: false,
                out_end,
                clock: Some(i64::MAX),
                hw: BTreeMap::new(),
                cl: None,
            };
            let s = m.encode();
            assert!(s.len() <= MAX_METADATA_BYTES, "{} bytes", s.len());
            let back = CheckpointMeta::decode(&s).expect("decodes as kafka-dedup's");
            assert_eq!(back.gens, Vec::<Positions>::new());
            assert_eq!(back.elided, Some(gens.len() as u32));
            assert_eq!(back.out_end, None);
            assert_eq!(
                (back.epoch, back.ckpt, back.clean, back.clock),
                (m.epoch, m.ckpt, m.clean, m.clock)
            );
        }
    }

    /// What an older kafka-dedup cannot read (no `gens`) and what names no generation at all is
    /// not decoded as a checkpoint; `elided` beside `gens` is not kafka-dedup's either.
    #[test]
    fn elided_metadata_names_its_generations() {
        let ok = r#"{"kd":1,"epoch":7,"ckpt":"5f0c5f0c5f0c5f0c","elided":2,"clean":false,"clock":5}"#;
        assert_eq!(CheckpointMeta::decode(ok).map(|m| m.live_generations()), Some(2));
        for bad in [
            r#"{"kd":1,"epoch":7,"ckpt":"5f0c5f0c5f0c5f0c","elided":0,"clean":false}"#,
            r#"{"kd":1,"epoch":7,"ckpt":"5f0c5f0c5f0c5f0c","clean":false}"#,
            r#"{"kd":1,"epoch":7,"ckpt":"5f0c5f0c5f0c5f0c","gens":[{"0":1}],"elided":1,"clean":false}"#,
        ] {
            assert_eq!(CheckpointMeta::decode(bad), None, "{bad}");
        }
    }

    #[test]
    fn oversized_metadata_keeps_the_oldest_start() {
        let wide: Positions = (0..150).map(|p| (p, 1_000_000_000i64)).collect();
        let m = CheckpointMeta {
            kd: 1,
            epoch: 3,
            ckpt: "0".repeat(16),
            gens: vec![wide.clone(), wide.clone(), wide],
            elided: None,
            clean: true,
            out_end: None,
            clock: Some(i64::MAX),
            hw: BTreeMap::new(),
            cl: None,
        };
        let s = m.encode();
        assert!(s.len() <= MAX_METADATA_BYTES, "{}", s.len());
        let back = CheckpointMeta::decode(&s).unwrap();
        assert_eq!(back.gens.len(), 1);
    }

    /// The global scope's high-water marks (`hw`) round-trip; at a few input partitions they fit
    /// beside the positions; at 1,000 input partitions they are left out last (after the
    /// positions), and the commit still fits and decodes.
    #[test]
    fn high_water_marks_fit_or_are_left_out_last() {
        let m = |inputs: i32, outputs: i32| CheckpointMeta {
            kd: 1,
            epoch: 3,
            ckpt: "0".repeat(16),
            gens: vec![(0..outputs).map(|p| (p, 1_000_000_000i64)).collect()],
            elided: None,
            clean: false,
            out_end: None,
            clock: Some(1),
            hw: (0..inputs).map(|p| (p, 9_000_000_000i64)).collect(),
            cl: None,
        };
        let small = m(12, 1);
        let s = small.encode();
        assert!(s.contains(r#""hw":{"0":9000000000,"#), "{s}");
        assert_eq!(CheckpointMeta::decode(&s), Some(small));
        // Marks that fit only without the positions keep the marks.
        let back = CheckpointMeta::decode(&m(150, 150).encode()).unwrap();
        assert_eq!((back.gens.len(), back.hw.len()), (0, 150));
        let s = m(1000, 1).encode();
        assert!(s.len() <= MAX_METADATA_BYTES, "{}", s.len());
        let back = CheckpointMeta::decode(&s).unwrap();
        assert!(
            back.hw.is_empty() && back.gens.is_empty() && back.elided == Some(1),
            "{s}"
        );
    }
}

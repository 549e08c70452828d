//! Where one record goes: a pure function of what is known about it (its fingerprint, or why it
//! has none; whether a live generation holds the fingerprint) and the configuration. No Kafka,
//! no partition state: [`Filter::on_record`](super::Filter::on_record) asks [`route`], then does
//! the bookkeeping, the metrics and the produce for the answer.
//!
//! | the record                          | [`Route`]                                         |
//! |-------------------------------------|---------------------------------------------------|
//! | fingerprint not held                | [`Route::Forward`] (and learn the fingerprint)     |
//! | fingerprint held (a replay)         | [`Route::DropReplay`] (copied to `output.duplicates_topic` if set) |
//! | fingerprint held, first taken at this record's own offset | [`Route::DropRetaken`]: the same input record taken again (after a crash or a hand-over that did not commit it), not a replay: no copy, not counted as one |
//! | no fingerprint, `on_missing = forward`     | [`Route::ForwardUnfingerprintable`]        |
//! | the same, stand-in held at this offset     | [`Route::DropRetaken`]: the same input record re-taken after a crash |
//! | the same, stand-in held otherwise          | [`Route::DropReplay`]: a second routed copy (global scope), or the offset not known |
//! | no fingerprint, `on_missing = drop`        | [`Route::DropUnfingerprintable`]           |
//! | no fingerprint, `on_missing = dead_letter` | [`Route::DeadLetter`]                      |
//! | no fingerprint, `on_missing = fail`        | [`Route::Fail`]: the pipeline stops        |

use crate::config::{Config, OnMissing, Partitioning};
use crate::fingerprint::{Fingerprint, Unfingerprintable};
use crate::generations::Hit;

/// The parts of the configuration that decide a record's route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// `fingerprint.on_missing`: what happens to a record without fingerprint.
    pub on_missing: OnMissing,
    /// True when `output.duplicates_topic` is set: replays are copied there.
    pub copy_replays: bool,
    /// `output.partitioning`: whether a forwarded record keeps its input partition.
    pub partitioning: Partitioning,
}

impl Policy {
    /// The policy of `cfg`.
    pub fn of(cfg: &Config) -> Policy {
        Policy {
            on_missing: cfg.fingerprint.on_missing,
            copy_replays: !cfg.output.duplicates_topic.is_empty(),
            partitioning: cfg.output.partitioning,
        }
    }
}

/// What happens to one record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// A record not seen within the horizon: produce it to the output topic, then learn its
    /// fingerprint (only once the producer took it: a refused record must not suppress itself).
    Forward {
        /// The fingerprint to insert into the current generation.
        fingerprint: Fingerprint,
        /// Output partition: the input partition (`preserve`), or `None` for the producer's
        /// partitioner (`key`).
        partition: Option<i32>,
    },
    /// A replay: dropped, counted by the age of the generation that holds it.
    DropReplay {
        /// Age of the generation that matched: 0 the current one, 1 the previous, ...
        age: usize,
        /// Input offsets from this record back to its first copy, when that offset is known
        /// (not for fingerprints re-learned from an output record without provenance, or
        /// from another input partition's records).
        distance: Option<i64>,
        /// True when a copy goes to `output.duplicates_topic`.
        copy_to_side: bool,
    },
    /// The same input record taken a second time, not a replay: the fingerprint (or stand-in) is
    /// held with this record's own input offset as its first offset, so it was learned from this
    /// very record (forwarded before a crash, a hand-over that did not commit it, and re-learned
    /// by recovery from the output's provenance). Dropped without a copy to
    /// `output.duplicates_topic`, counted in `kafka_dedup_input_retaken_records_total`, not as a
    /// replay.
    DropRetaken,
    /// No fingerprint, `on_missing = "forward"`: produced to the output topic, and its stand-in
    /// learned (the hash of its provenance, [`stand_in_at`](crate::fingerprint::stand_in_at)),
    /// so that the same input record met again is dropped: re-taken after a crash (recovery
    /// re-learns the stand-in from the output copy's provenance) or after the clean hand-over of
    /// a halted partition, or copied twice by the route stage (global scope).
    ForwardUnfingerprintable {
        /// Why the record has no fingerprint.
        why: Unfingerprintable,
        /// Output partition, as for [`Route::Forward`].
        partition: Option<i32>,
        /// The stand-in to learn once the producer took it (`None` when not known: a routed
        /// copy without provenance).
        learn: Option<Fingerprint>,
    },
    /// No fingerprint, `on_missing = "drop"`: dropped and counted.
    DropUnfingerprintable {
        /// Why the record has no fingerprint.
        why: Unfingerprintable,
    },
    /// No fingerprint, `on_missing = "dead_letter"`: copied to `fingerprint.dead_letter_topic`
    /// with provenance headers, not to the output.
    DeadLetter {
        /// Why the record has no fingerprint (the `kafka-dedup.reason` header).
        why: Unfingerprintable,
    },
    /// No fingerprint, `on_missing = "fail"`: the pipeline stops without committing past it.
    Fail {
        /// Why the record has no fingerprint.
        why: Unfingerprintable,
    },
}

impl Route {
    /// For a record without fingerprint: the `on_missing` action taken and why (the labels of
    /// `kafka_dedup_unfingerprintable_records_total`). `None` for a fingerprinted record.
    pub fn unfingerprintable(&self) -> Option<(OnMissing, &Unfingerprintable)> {
        match self {
            Route::Forward { .. } | Route::DropReplay { .. } | Route::DropRetaken => None,
            Route::ForwardUnfingerprintable { why, .. } => Some((OnMissing::Forward, why)),
            Route::DropUnfingerprintable { why } => Some((OnMissing::Drop, why)),
            Route::DeadLetter { why } => Some((OnMissing::DeadLetter, why)),
            Route::Fail { why } => Some((OnMissing::Fail, why)),
        }
    }
}

/// Decides the route of the record at input `partition` and `offset`, given its fingerprint (or
/// why it has none), its `stand_in` when it has none (the hash of its provenance; not used unless
/// `on_missing = "forward"`), and `hit`, what
/// the partition's generations hold of the fingerprint, or else of the stand-in (`None` when not
/// held or neither is known). A hit whose first offset is `offset` itself is
/// [`Route::DropRetaken`]; any other hit a replay.
pub fn route(
    policy: &Policy,
    partition: i32,
    offset: i64,
    fingerprint: Result<Fingerprint, Unfingerprintable>,
    stand_in: Option<Fingerprint>,
    hit: Option<Hit>,
) -> Route {
    let out_partition = match policy.partitioning {
        Partitioning::Preserve => Some(partition),
        Partitioning::Key => None,
    };
    let why = match fingerprint {
        Ok(fingerprint) => {
            return match hit {
                Some(hit) => dropped(policy, offset, hit),
                None => Route::Forward {
                    fingerprint,
                    partition: out_partition,
                },
            }
        }
        Err(why) => why,
    };
    match policy.on_missing {
        OnMissing::Forward => match (stand_in, hit) {
            // The same input record again: re-taken after a crash, or copied again by the route
            // stage (global scope).
            (Some(_), Some(hit)) => dropped(policy, offset, hit),
            (learn, _) => Route::ForwardUnfingerprintable {
                why,
                partition: out_partition,
                learn,
            },
        },
        OnMissing::Drop => Route::DropUnfingerprintable { why },
        OnMissing::DeadLetter => Route::DeadLetter { why },
        OnMissing::Fail => Route::Fail { why },
    }
}

/// The route of the record at input `offset` whose fingerprint (or stand-in) the generations hold
/// (`hit`): [`Route::DropRetaken`] when it was first taken at this very offset (the same input
/// record again), else [`Route::DropReplay`] (another offset, or none known: provenance off,
/// a snapshot from before input offsets were kept).
fn dropped(policy: &Policy, offset: i64, hit: Hit) -> Route {
    match hit.first_offset {
        Some(first) if first == offset => Route::DropRetaken,
        first => Route::DropReplay {
            age: hit.age,
            distance: first.map(|first| offset - first),
            copy_to_side: policy.copy_replays,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FP: Fingerprint = Fingerprint(0xfeed);

    fn policy(on_missing: OnMissing, copy_replays: bool, partitioning: Partitioning) -> Policy {
        Policy {
            on_missing,
            copy_replays,
            partitioning,
        }
    }

    fn hit(age: usize, first_offset: Option<i64>) -> Option<Hit> {
        Some(Hit {
            age,
            epoch: 9,
            first_offset,
        })
    }

    fn null() -> Result<Fingerprint, Unfingerprintable> {
        Err(Unfingerprintable::Absent)
    }

    /// A stand-in (global scope).
    const SI: Fingerprint = Fingerprint(0x5150);

    /// A case: its name, the policy, the fingerprint (or why none), the stand-in, the lookup,
    /// the route.
    type Row = (
        &'static str,
        Policy,
        Result<Fingerprint, Unfingerprintable>,
        Option<Fingerprint>,
        Option<Hit>,
        Route,
    );

    /// One row per case: the policy, the record at partition 3 offset 100, and its route.
    #[test]
    fn every_route_in_a_table() {
        use OnMissing::*;
        use Partitioning::*;
        let why = Unfingerprintable::Absent;
        #[rustfmt::skip]
        let rows: Vec<Row> = vec![
            ("new record, preserve", policy(Forward, false, Preserve), Ok(FP), None, None,
                Route::Forward { fingerprint: FP, partition: Some(3) }),
            ("new record, key", policy(Forward, false, Key), Ok(FP), None, None,
                Route::Forward { fingerprint: FP, partition: None }),
            ("new record, on_missing does not matter", policy(Fail, true, Preserve), Ok(FP), None, None,
                Route::Forward { fingerprint: FP, partition: Some(3) }),
            ("replay in the current generation", policy(Forward, false, Preserve), Ok(FP), None, hit(0, Some(90)),
                Route::DropReplay { age: 0, distance: Some(10), copy_to_side: false }),
            ("replay in an older generation, copied aside", policy(Forward, true, Key), Ok(FP), None, hit(1, Some(40)),
                Route::DropReplay { age: 1, distance: Some(60), copy_to_side: true }),
            ("replay of a fingerprint re-learned without its input offset", policy(Drop, false, Preserve), Ok(FP), None,
                hit(1, None), Route::DropReplay { age: 1, distance: None, copy_to_side: false }),
            ("the same record taken again (first offset = its own), not copied aside", policy(Forward, true, Preserve),
                Ok(FP), None, hit(0, Some(100)), Route::DropRetaken),
            ("the same record taken again, from an older generation", policy(Drop, false, Key), Ok(FP), None,
                hit(2, Some(100)), Route::DropRetaken),
            ("replay of a record re-learned with its input offset, copied aside", policy(Forward, true, Preserve),
                Ok(FP), None, hit(0, Some(99)), Route::DropReplay { age: 0, distance: Some(1), copy_to_side: true }),
            ("no fingerprint, forward, preserve", policy(Forward, true, Preserve), null(), None, None,
                Route::ForwardUnfingerprintable { why: why.clone(), partition: Some(3), learn: None }),
            ("no fingerprint, forward, key", policy(Forward, false, Key), null(), None, None,
                Route::ForwardUnfingerprintable { why: why.clone(), partition: None, learn: None }),
            ("global: no fingerprint, forward, stand-in new", policy(Forward, false, Preserve), null(), Some(SI), None,
                Route::ForwardUnfingerprintable { why: why.clone(), partition: Some(3), learn: Some(SI) }),
            ("global: no fingerprint, forward, stand-in held", policy(Forward, true, Preserve), null(), Some(SI),
                hit(0, Some(97)), Route::DropReplay { age: 0, distance: Some(3), copy_to_side: true }),
            ("no fingerprint, forward, stand-in held at its own offset: taken again", policy(Forward, true, Preserve),
                null(), Some(SI), hit(1, Some(100)), Route::DropRetaken),
            ("global: no fingerprint, forward, stand-in held, offset not known", policy(Forward, true, Preserve),
                null(), Some(SI), hit(0, None), Route::DropReplay { age: 0, distance: None, copy_to_side: true }),
            ("global: no fingerprint, drop, stand-in held", policy(Drop, false, Preserve), null(), Some(SI),
                hit(0, Some(97)), Route::DropUnfingerprintable { why: why.clone() }),
            ("global: no fingerprint, dead letter, stand-in new", policy(DeadLetter, false, Key), null(), Some(SI),
                None, Route::DeadLetter { why: why.clone() }),
            ("no fingerprint, drop", policy(Drop, true, Preserve), null(), None, None,
                Route::DropUnfingerprintable { why: why.clone() }),
            ("no fingerprint, dead letter", policy(DeadLetter, false, Key), null(), None, None,
                Route::DeadLetter { why: why.clone() }),
            ("no fingerprint, fail", policy(Fail, false, Preserve), null(), None, None,
                Route::Fail { why: why.clone() }),
        ];
        for (case, policy, fp, stand_in, hit, want) in rows {
            assert_eq!(route(&policy, 3, 100, fp, stand_in, hit), want, "{case}");
        }
    }

    #[test]
    fn unfingerprintable_routes_name_their_action() {
        let why = Unfingerprintable::Absent;
        let cases = [
            (
                Route::ForwardUnfingerprintable {
                    why: why.clone(),
                    partition: None,
                    learn: None,
                },
                Some(OnMissing::Forward),
            ),
            (Route::DropUnfingerprintable { why: why.clone() }, Some(OnMissing::Drop)),
            (Route::DeadLetter { why: why.clone() }, Some(OnMissing::DeadLetter)),
            (Route::Fail { why: why.clone() }, Some(OnMissing::Fail)),
            (
                Route::Forward {
                    fingerprint: FP,
                    partition: None,
                },
                None,
            ),
            (
                Route::DropReplay {
                    age: 0,
                    distance: None,
                    copy_to_side: true,
                },
                None,
            ),
            (Route::DropRetaken, None),
        ];
        for (r, action) in cases {
            assert_eq!(r.unfingerprintable().map(|(a, _)| a), action, "{r:?}");
        }
    }
}

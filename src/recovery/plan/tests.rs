use std::collections::BTreeMap;

use super::*;
use crate::config::Partitioning;
use crate::generations::pos;

const P: i32 = 0;

fn meta(ckpt: &str, clean: bool, out_end: Option<Positions>) -> Option<CheckpointMeta> {
    Some(CheckpointMeta {
        kd: crate::metadata::METADATA_VERSION,
        epoch: 7,
        ckpt: ckpt.into(),
        gens: vec![pos(P, 1200), pos(P, 1350)],
        elided: None,
        clean,
        out_end,
        clock: None,
        hw: Default::default(),
        cl: None,
    })
}

fn snap(ckpt: &str, committed_offset: i64) -> Snapshot {
    Snapshot::Present(PartitionSnapshot {
        epoch: 7,
        ckpt: ckpt.into(),
        committed_offset,
        out_covered: pos(P, 1400),
        generations: Vec::new(),
        written_at_ms: 0,
        clean: true,
        clock: None,
    })
}

fn facts(committed: Option<i64>, meta: Option<CheckpointMeta>, marker: Option<i64>, snapshot: Snapshot) -> Facts {
    Facts {
        partition: P,
        committed,
        meta,
        marker,
        snapshot,
        start: Start::Earliest,
        delivery: Delivery::Idempotent,
        changelog: ChangelogFacts::Off,
        provenance: false,
        metadata_dropped: true,
    }
}

/// As [`facts`], with `output.provenance` on and whether the marker lost its metadata.
fn with_provenance(mut f: Facts, metadata_dropped: bool) -> Facts {
    f.provenance = true;
    f.metadata_dropped = metadata_dropped;
    f
}

fn from_output(committed: Option<i64>, wait_for_fence: bool, why: FromOutputReason) -> Plan {
    Plan::FromOutput {
        committed,
        wait_for_fence,
        why,
    }
}

/// `output.provenance` on: where nothing trustworthy is committed, the output decides.
#[test]
fn with_provenance_the_output_decides_where_nothing_trustworthy_is_committed() {
    use FromOutputReason::*;
    #[rustfmt::skip]
    let rows: Vec<(&str, Facts, Plan)> = vec![
        ("no commit (offsets expired, a new group id): from the output, no fence (nobody committed, so nobody forwarded)",
            with_provenance(facts(None, None, None, Snapshot::Missing), false),
            from_output(None, false, NoCommit)),
        ("no commit, a snapshot of an earlier group: still from the output",
            with_provenance(facts(None, None, None, snap("a", 400)), false),
            from_output(None, false, NoCommit)),
        ("kafka-dedup's metadata: as without provenance",
            with_provenance(facts(Some(500), meta("a", false, None), None, snap("a", 500)), false),
            Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, true) }),
        ("no metadata, the marker lost its metadata too (tansu drops it): the marker is kafka-dedup's, use it",
            with_provenance(facts(Some(500), None, Some(1100), Snapshot::Missing), true),
            Plan::Rebuild { changelog: None, resume: 500, generations: from_marker(1100), reread: reread(pos(P, 1100), None, true),
                notice: rebuild("missing", "the store has no snapshot of this partition") }),
        ("no metadata, the marker kept its metadata: the input offset was reset by someone else: from the output, wait",
            with_provenance(facts(Some(0), None, Some(1100), Snapshot::Missing), false),
            from_output(Some(0), true, NoMetadata)),
        ("no metadata, no marker (key partitioning on a broker that drops metadata): from the output, wait",
            with_provenance(facts(Some(500), None, None, Snapshot::Missing), true),
            from_output(Some(500), true, NoMetadata)),
        ("no metadata, snapshot at exactly the committed offset: load",
            with_provenance(facts(Some(500), None, None, snap("a", 500)), true),
            Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, true) }),
    ];
    for (case, facts, want) in rows {
        assert_eq!(plan(&facts), want, "{case}");
    }
}

/// When a committed offset without metadata is behind what the output proves.
#[test]
fn behind_output_in_a_table() {
    #[rustfmt::skip]
    let rows = [
        ("kafka-dedup's own commit: the records before the horizon came from before it", 500, Some(420), false),
        ("the record just before the horizon is the last one before the commit", 500, Some(499), false),
        ("reset to 0: the output holds records from later offsets before the horizon", 0, Some(420), true),
        ("reset back into what was forwarded", 300, Some(420), true),
        ("nothing before the horizon (it covers the whole output): cannot tell, trust it", 0, None, false),
    ];
    for (case, committed, before, behind) in rows {
        assert_eq!(behind_output(committed, before), behind, "{case}");
    }
}

/// Where [`Plan::FromOutput`] resumes, one row per case.
#[test]
fn resume_from_output_in_a_table() {
    let newest = |pairs: &[(i32, i64)]| pairs.iter().copied().collect::<BTreeMap<i32, i64>>();
    #[rustfmt::skip]
    let rows = [
        ("nothing committed, nothing in the output: input.start", None, newest(&[]), Resume::Start(Start::Latest)),
        ("nothing committed: after the newest record of the partition", None, newest(&[(0, 99)]), Resume::At(100)),
        ("reset to 0 by an operator: after the newest record", Some(0), newest(&[(0, 99)]), Resume::At(100)),
        ("reset forward past the output (skip on purpose): the committed offset", Some(150), newest(&[(0, 99)]), Resume::At(150)),
        ("a commit, nothing in the output: the committed offset", Some(40), newest(&[]), Resume::At(40)),
        ("key partitioning: the smallest of the per-partition newest offsets", None, newest(&[(0, 520), (1, 510), (2, 530)]), Resume::At(511)),
        ("key partitioning, committed: the committed offset, even when output partitions are later", Some(500), newest(&[(0, 520), (1, 510)]), Resume::At(500)),
    ];
    for (case, committed, newest, want) in rows {
        let partitioning = if newest.len() > 1 {
            Partitioning::Key
        } else {
            Partitioning::Preserve
        };
        assert_eq!(
            resume_from_output(committed, &newest, partitioning, Start::Latest),
            want,
            "{case}"
        );
    }
}

fn reread(from: Positions, to: Option<Positions>, wait_for_fence: bool) -> Reread {
    Reread {
        from,
        to,
        wait_for_fence,
    }
}

fn rebuild(reason: &'static str, detail: &str) -> Notice {
    Notice::Rebuild {
        reason,
        detail: detail.into(),
    }
}

/// The two generations of [`meta`], as rebuilt.
fn from_meta() -> Vec<GenerationStart> {
    vec![
        GenerationStart {
            epoch: 6,
            out_start: pos(P, 1200),
        },
        GenerationStart {
            epoch: 7,
            out_start: pos(P, 1350),
        },
    ]
}

fn from_marker(start: i64) -> Vec<GenerationStart> {
    vec![GenerationStart {
        epoch: 1,
        out_start: pos(P, start),
    }]
}

/// One row per outcome of today's recovery, idempotent mode (transactional below).
#[test]
fn every_plan_in_a_table() {
    let unreadable = || Snapshot::Unreadable("chunk checksum mismatch".into());
    #[rustfmt::skip]
    let rows: Vec<(&str, Facts, Plan)> = vec![
        ("no commit: fresh at input.start (the store is not asked)",
            facts(None, None, Some(5), snap("a", 10)),
            Plan::Fresh { resume: Resume::Start(Start::Earliest), notice: None }),
        ("snapshot of exactly the committed checkpoint, unclean: load, wait",
            facts(Some(500), meta("a", false, None), None, snap("a", 500)),
            Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, true) }),
        ("snapshot of exactly the committed checkpoint, clean hand-over: load, no wait",
            facts(Some(500), meta("a", true, None), None, snap("a", 500)),
            Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, false) }),
        ("snapshot behind (another checkpoint id)",
            facts(Some(500), meta("b", false, None), Some(1200), snap("a", 400)),
            Plan::Rebuild { changelog: None, resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, true),
                notice: rebuild("behind_or_ahead", "store snapshot a (offset 400) does not match the committed checkpoint b (offset 500)") }),
        ("snapshot ahead (same id, another offset), clean hand-over",
            facts(Some(500), meta("a", true, None), None, snap("a", 600)),
            Plan::Rebuild { changelog: None, resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, false),
                notice: rebuild("behind_or_ahead", "store snapshot a (offset 600) does not match the committed checkpoint a (offset 500)") }),
        ("snapshot unreadable, with metadata",
            facts(Some(500), meta("a", false, None), None, unreadable()),
            Plan::Rebuild { changelog: None, resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, true),
                notice: rebuild("corrupt", "chunk checksum mismatch") }),
        ("snapshot missing, with metadata",
            facts(Some(500), meta("a", false, None), None, Snapshot::Missing),
            Plan::Rebuild { changelog: None, resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, true),
                notice: rebuild("missing", "the store has no snapshot of this partition") }),
        ("no metadata, snapshot at exactly the committed offset: load, always wait",
            facts(Some(500), None, Some(1200), snap("a", 500)),
            Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, true) }),
        ("no metadata, snapshot at another offset, marker",
            facts(Some(500), None, Some(1100), snap("a", 400)),
            Plan::Rebuild { changelog: None, resume: 500, generations: from_marker(1100), reread: reread(pos(P, 1100), None, true),
                notice: rebuild("behind_or_ahead", "store snapshot at offset 400 does not match the committed offset 500") }),
        ("no metadata, no snapshot, marker only",
            facts(Some(500), None, Some(1100), Snapshot::Missing),
            Plan::Rebuild { changelog: None, resume: 500, generations: from_marker(1100), reread: reread(pos(P, 1100), None, true),
                notice: rebuild("missing", "the store has no snapshot of this partition") }),
        ("no metadata, unreadable snapshot, marker",
            facts(Some(500), None, Some(1100), unreadable()),
            Plan::Rebuild { changelog: None, resume: 500, generations: from_marker(1100), reread: reread(pos(P, 1100), None, true),
                notice: rebuild("corrupt", "chunk checksum mismatch") }),
        ("no metadata, no marker (an operator reset the offsets): fresh at the committed offset",
            facts(Some(500), None, None, snap("a", 400)),
            Plan::Fresh { resume: Resume::At(500), notice: Some(Notice::NoMetadata) }),
        ("no metadata, no marker, no snapshot",
            facts(Some(500), None, None, Snapshot::Missing),
            Plan::Fresh { resume: Resume::At(500), notice: Some(Notice::NoMetadata) }),
    ];
    for (case, facts, want) in rows {
        assert_eq!(plan(&facts), want, "{case}");
    }
}

/// The changelog (`store.changelog_topic`): one row per outcome. The metadata of [`meta`]
/// (epoch 7, generations 6 from 1200 and 7 from 1350), with a changelog checkpoint naming
/// epoch `e` current.
#[test]
fn changelog_plans_in_a_table() {
    use crate::changelog::{ChangelogRef, Fallback};
    let cl = |e: u64| ChangelogRef {
        ck: "c".into(),
        e,
        p: 0,
        o: 40,
        n: 3,
    };
    let with = |cl: Option<ChangelogRef>, clean: bool, snapshot: Snapshot, changelog: ChangelogFacts| {
        let mut m = meta("a", clean, None).unwrap();
        m.cl = cl;
        let mut f = facts(Some(500), Some(m), Some(1200), snapshot);
        f.changelog = changelog;
        f
    };
    let fb = |reason: &'static str, detail: &str| Fallback {
        reason,
        detail: detail.into(),
    };
    let missing = || rebuild("missing", "the store has no snapshot of this partition");
    let garbled = fb("corrupt", "changelog record 41 does not decode");
    #[rustfmt::skip]
    let rows: Vec<(&str, Facts, Plan)> = vec![
        ("the store holds the committed checkpoint: the store wins, the changelog is not read",
            with(Some(cl(7)), true, snap("a", 500), ChangelogFacts::On),
            Plan::Load { resume: 500, ckpt: "a".into(), reread: reread(pos(P, 1400), None, false) }),
        ("no store, the changelog holds generation 6: load it, re-read from generation 7's start, clean: no wait",
            with(Some(cl(7)), true, Snapshot::Missing, ChangelogFacts::On),
            Plan::Changelog { resume: 500, generations: from_meta(),
                load: ChangelogLoad { from: cl(7), epochs: vec![6] },
                reread: reread(pos(P, 1350), None, false), notice: missing() }),
        ("after a crash (not clean): the same, waiting for the fence",
            with(Some(cl(7)), false, Snapshot::Missing, ChangelogFacts::On),
            Plan::Changelog { resume: 500, generations: from_meta(),
                load: ChangelogLoad { from: cl(7), epochs: vec![6] },
                reread: reread(pos(P, 1350), None, true), notice: missing() }),
        ("changelog off: today's rebuild, no fallback counted",
            with(Some(cl(7)), true, Snapshot::Missing, ChangelogFacts::Off),
            Plan::Rebuild { changelog: None, resume: 500, generations: from_meta(),
                reread: reread(pos(P, 1200), None, false), notice: missing() }),
        ("the commit names no changelog checkpoint: rebuild, missing",
            with(None, true, Snapshot::Missing, ChangelogFacts::On),
            Plan::Rebuild { changelog: Some(fb("missing", "the committed checkpoint names no changelog checkpoint")),
                resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, false), notice: missing() }),
        ("the changelog checkpoint's generations rotated out (behind): rebuild",
            with(Some(cl(6)), true, Snapshot::Missing, ChangelogFacts::On),
            Plan::Rebuild { changelog: Some(fb("behind_or_ahead", "every generation of the changelog checkpoint has rotated out")),
                resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, false), notice: missing() }),
        ("a changelog checkpoint ahead of the commit: rebuild",
            with(Some(cl(8)), true, Snapshot::Missing, ChangelogFacts::On),
            Plan::Rebuild { changelog: Some(fb("behind_or_ahead", "the changelog checkpoint is ahead of the committed one")),
                resume: 500, generations: from_meta(), reread: reread(pos(P, 1200), None, false), notice: missing() }),
        ("the load failed (a garbled chunk): planned again as a rebuild with its reason",
            with(Some(cl(7)), true, Snapshot::Missing, ChangelogFacts::Failed(garbled.clone())),
            Plan::Rebuild { changelog: Some(garbled), resume: 500, generations: from_meta(),
                reread: reread(pos(P, 1200), None, false), notice: missing() }),
    ];
    for (case, facts, want) in rows {
        assert_eq!(plan(&facts), want, "{case}");
    }
    // One live generation (nothing frozen): the changelog would save nothing, no fallback.
    let mut one = with(None, true, Snapshot::Missing, ChangelogFacts::On);
    one.meta.as_mut().unwrap().gens.truncate(1);
    assert!(matches!(plan(&one), Plan::Rebuild { changelog: None, .. }));
}

/// Metadata that is foreign or of another version decodes to `None`: planned as without
/// metadata. `key` partitioning has no horizon marker.
#[test]
fn foreign_metadata_and_key_partitioning_plan_as_without_metadata() {
    assert_eq!(CheckpointMeta::decode("some other tool"), None);
    assert_eq!(
        CheckpointMeta::decode(r#"{"kd":99,"epoch":1,"ckpt":"x","gens":[{}],"clean":true}"#),
        None
    );
    let key_mode = facts(Some(500), None, None, Snapshot::Missing);
    assert_eq!(
        plan(&key_mode),
        Plan::Fresh {
            resume: Resume::At(500),
            notice: Some(Notice::NoMetadata)
        }
    );
    let mut latest = facts(None, None, None, Snapshot::Missing);
    latest.start = Start::Latest;
    assert_eq!(
        plan(&latest),
        Plan::Fresh {
            resume: Resume::Start(Start::Latest),
            notice: None
        }
    );
}

/// Metadata that decodes but cannot be kafka-dedup's (crafted: more generations than epochs,
/// an epoch at the top of the range, no generation) is planned as foreign, without metadata,
/// instead of overflowing the epoch arithmetic.
#[test]
fn impossible_metadata_is_planned_as_foreign() {
    let crafted = |epoch: u64, gens: Vec<Positions>| {
        let mut m = meta("a", false, None).unwrap();
        m.epoch = epoch;
        m.gens = gens;
        plan(&facts(Some(500), Some(m), Some(1100), Snapshot::Missing))
    };
    let foreign = plan(&facts(Some(500), None, Some(1100), Snapshot::Missing));
    assert_eq!(crafted(0, vec![pos(P, 1200), pos(P, 1350)]), foreign);
    assert_eq!(crafted(u64::MAX, vec![pos(P, 1200)]), foreign);
    assert_eq!(crafted(7, Vec::new()), foreign);
    let mut edge = from_meta();
    edge[0].epoch = 0;
    edge[1].epoch = 1;
    assert_eq!(
        crafted(1, vec![pos(P, 1200), pos(P, 1350)]),
        Plan::Rebuild {
            changelog: None,
            resume: 500,
            generations: edge,
            reread: reread(pos(P, 1200), None, true),
            notice: rebuild("missing", "the store has no snapshot of this partition")
        }
    );
}

/// Metadata whose positions were left out (too many output partitions): its snapshot is
/// loaded as ever; without it the generations are found by time, back from the metadata's
/// clock, waiting for the fence unless the hand-over was clean (never in transactional
/// mode). Its epoch arithmetic is checked as with positions.
#[test]
fn metadata_without_positions_rebuilds_by_time() {
    let bare = |clean: bool, epoch: u64, elided: u32| {
        let mut m = meta("a", clean, None).unwrap();
        m.gens.clear();
        m.elided = Some(elided);
        m.epoch = epoch;
        m.clock = Some(1_700_000_000_000);
        Some(m)
    };
    let by_time = |wait_for_fence: bool, reason: &'static str, detail: &str| Plan::RebuildByTime {
        resume: 500,
        epoch: 7,
        clock: Some(1_700_000_000_000),
        wait_for_fence,
        notice: rebuild(reason, detail),
    };
    let missing = "the store has no snapshot of this partition";
    assert_eq!(
        plan(&facts(Some(500), bare(false, 7, 2), None, snap("a", 500))),
        Plan::Load {
            resume: 500,
            ckpt: "a".into(),
            reread: reread(pos(P, 1400), None, true)
        }
    );
    assert_eq!(
        plan(&facts(Some(500), bare(false, 7, 2), None, Snapshot::Missing)),
        by_time(true, "missing", missing)
    );
    assert_eq!(
        plan(&facts(
            Some(500),
            bare(true, 7, 2),
            None,
            Snapshot::Unreadable("chunk checksum mismatch".into())
        )),
        by_time(false, "corrupt", "chunk checksum mismatch")
    );
    let mut txn = facts(Some(500), bare(false, 7, 2), None, Snapshot::Missing);
    txn.delivery = Delivery::Transactional;
    assert_eq!(plan(&txn), by_time(false, "missing", missing));
    let foreign = plan(&facts(Some(500), None, None, Snapshot::Missing));
    assert_eq!(
        plan(&facts(Some(500), bare(false, 1, 3), None, Snapshot::Missing)),
        foreign
    );
}

/// Transactional mode never waits for the fence, and the re-read stops at the committed
/// transaction's end when the metadata has one.
#[test]
fn transactional_plans_stop_at_the_transaction_end_and_never_wait() {
    let txn = |mut f: Facts| {
        f.delivery = Delivery::Transactional;
        plan(&f)
    };
    let end = Some(pos(P, 1500));
    assert_eq!(
        txn(facts(Some(500), meta("a", false, end.clone()), None, snap("a", 500))),
        Plan::Load {
            resume: 500,
            ckpt: "a".into(),
            reread: reread(pos(P, 1400), end.clone(), false)
        }
    );
    assert_eq!(
        txn(facts(Some(500), meta("a", false, end.clone()), None, Snapshot::Missing)),
        Plan::Rebuild {
            changelog: None,
            resume: 500,
            generations: from_meta(),
            reread: reread(pos(P, 1200), end, false),
            notice: rebuild("missing", "the store has no snapshot of this partition")
        }
    );
    assert_eq!(
        txn(facts(Some(500), None, Some(1100), Snapshot::Missing)),
        Plan::Rebuild {
            changelog: None,
            resume: 500,
            generations: from_marker(1100),
            reread: reread(pos(P, 1100), None, false),
            notice: rebuild("missing", "the store has no snapshot of this partition")
        }
    );
}

/// What a provenance offset (here 99) proves, by what the input holds there.
#[test]
fn provenance_proves_in_a_table() {
    use AtInput::*;
    #[rustfmt::skip]
    let rows = [
        ("the record is there, same key and value", Found { offset: 99, same: true }, Proof::Confirmed),
        ("another record there: recreated topic, or mirrored output", Found { offset: 99, same: false }, Proof::Refuted),
        ("beyond the end: recreated topic", Beyond, Proof::Refuted),
        ("below the log start: retention deleted it", Deleted { low: 150 }, Proof::Gone),
        ("deleted up to just after it", Deleted { low: 100 }, Proof::Gone),
        ("compaction removed it, a later record is there", Found { offset: 104, same: false }, Proof::Gone),
        ("compaction removed it and every later one to the end", Nothing, Proof::Gone),
    ];
    for (case, at, want) in rows {
        assert_eq!(provenance_proves(99, at), want, "{case}");
    }
}

/// Which re-read output records a recovery of input partition 0 learns.
#[test]
fn learns_in_a_table() {
    use Partitioning::*;
    #[rustfmt::skip]
    let rows = [
        ("preserve: the output partition is the input partition's", Preserve, true, Some(1), true),
        ("key, provenance: this partition's record", Key, true, Some(0), true),
        ("key, provenance: another input partition's record", Key, true, Some(1), false),
        ("key, provenance, a record that names none (written before it was on)", Key, true, None, true),
        ("key, no provenance: nothing tells them apart", Key, false, Some(1), true),
    ];
    for (case, partitioning, provenance, named, want) in rows {
        assert_eq!(learns(partitioning, provenance, named, 0), want, "{case}");
    }
}

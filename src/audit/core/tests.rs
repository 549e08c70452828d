//! The audit's rules in tables: each row an input partition and an output partition written by
//! hand, and what the audit must find, without provenance (matched by fingerprint and order) and
//! with it (matched by input offset).

use std::convert::Infallible;

use super::walk::Auditor;
use super::*;
use crate::config::{CheckpointConfig, OnMissing};
use crate::fingerprint::Fingerprint;

/// A range (`--since`, `--from-offset`): what before it informs and what after it is judged.
mod range;
/// Long partitions: the walk's memory and read-ahead bounds; the horizon from the configuration.
mod streaming;

/// Interval 1 s, 2 generations: H_min = 1 s, H_max = 2 s.
const HORIZON: Horizon = Horizon {
    min_ms: 1000,
    max_ms: 2000,
};
/// Record time 0 of the tables.
const T0: i64 = 1_700_000_000_000;

/// An event: its fingerprint is derived from the name; `U...` names a record without fingerprint.
fn identity(name: &str) -> Identity {
    let h = xxhash_rust::xxh3::xxh3_128(name.as_bytes());
    if name.starts_with('U') {
        Identity::Unfingerprintable(h)
    } else {
        Identity::Fingerprint(Fingerprint(h))
    }
}

/// Input records (name, ms after T0), at offsets 0, 1, 2, ...
fn input(records: &[(&str, i64)]) -> Vec<AuditRecord> {
    records
        .iter()
        .enumerate()
        .map(|(i, (name, t))| AuditRecord {
            offset: i as i64,
            timestamp: Some(T0 + t),
            identity: identity(name),
            origin: None,
        })
        .collect()
}

/// An output record: (name, ms after T0, the input offset it copies; `None`: a record that carries
/// no provenance even when the others do).
type Out = (&'static str, i64, Option<i64>);

/// Output records at offsets 0, 1, 2, ...; with `provenance`, each names its input offset.
fn output(records: &[Out], provenance: bool) -> Vec<AuditRecord> {
    records
        .iter()
        .enumerate()
        .map(|(i, (name, t, source))| AuditRecord {
            offset: i as i64,
            timestamp: Some(T0 + t),
            identity: identity(name),
            origin: source
                .filter(|_| provenance)
                .map(|offset| Origin { partition: 0, offset }),
        })
        .collect()
}

fn rules(bounds: Bounds, on_missing: OnMissing) -> Rules {
    Rules {
        partition: 0,
        horizon: HORIZON,
        on_missing,
        bounds,
        now_ms: T0 + 1_000_000_000,
        input_end: i64::MAX,
        input_read_from: i64::MIN,
        diverted: Diverted::default(),
    }
}

fn run(rules: &Rules, input: Vec<AuditRecord>, output: Vec<AuditRecord>) -> PartitionAudit {
    let ok = |r| Ok::<_, Infallible>(r);
    match audit_partition(rules, input.into_iter().map(ok), output.into_iter().map(ok)) {
        Ok(a) => a,
        Err(never) => match never {},
    }
}

/// What a row must find: duplicates, lost, out of order, unexpected, and replays (input records
/// rightly not forwarded).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Want {
    dup: u64,
    lost: u64,
    order: u64,
    unexpected: u64,
    replays: u64,
}

const fn want(dup: u64, lost: u64, order: u64, unexpected: u64, replays: u64) -> Want {
    Want {
        dup,
        lost,
        order,
        unexpected,
        replays,
    }
}

const CLEAN: Want = want(0, 0, 0, 0, 0);

fn found(a: &PartitionAudit) -> Want {
    want(
        a.duplicates.count,
        a.lost.count,
        a.out_of_order.count,
        a.unexpected.count,
        a.replays,
    )
}

/// A row: name, input, output, what is found without provenance and with it.
struct Row {
    name: &'static str,
    input: Vec<(&'static str, i64)>,
    output: Vec<Out>,
    without: Want,
    with: Want,
}

fn row(name: &'static str, input: &[(&'static str, i64)], output: &[Out], without: Want, with: Want) -> Row {
    Row {
        name,
        input: input.to_vec(),
        output: output.to_vec(),
        without,
        with,
    }
}

fn check(rows: Vec<Row>, rules: &Rules) {
    for r in rows {
        for (provenance, want) in [(false, r.without), (true, r.with)] {
            let a = run(rules, input(&r.input), output(&r.output, provenance));
            let case = format!(
                "{} ({} provenance)",
                r.name,
                if provenance { "with" } else { "without" }
            );
            assert_eq!(found(&a), want, "{case}: {a:#?}");
            assert_eq!(
                a.input_records,
                a.forwarded + a.replays + a.lost.count + a.not_forwardable + a.skipped.count + a.dead_lettered.count,
                "{case}: every input record of the range is accounted for once: {a:#?}"
            );
            assert_eq!(
                a.clean(),
                want.dup + want.lost + want.order + want.unexpected == 0,
                "{case}"
            );
            assert_eq!(
                a.output_with_provenance > 0,
                provenance && r.output.iter().any(|o| o.2.is_some())
            );
        }
    }
}

/// The planted faults and the filter's legitimate behaviour, on the whole partition.
#[test]
fn findings_in_a_table() {
    let abcd = [("a", 0), ("b", 10), ("c", 20), ("d", 30)];
    #[rustfmt::skip]
    let rows = vec![
        row("clean", &abcd,
            &[("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 20, Some(2)), ("d", 30, Some(3))],
            CLEAN, CLEAN),
        row("a planted duplicate", &abcd,
            &[("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 20, Some(2)), ("b", 10, Some(1)), ("d", 30, Some(3))],
            want(1, 0, 0, 0, 0), want(1, 0, 0, 0, 0)),
        row("a planted gap", &abcd,
            &[("a", 0, Some(0)), ("c", 20, Some(2)), ("d", 30, Some(3))],
            want(0, 1, 0, 0, 0), want(0, 1, 0, 0, 0)),
        row("a planted reorder", &abcd,
            &[("a", 0, Some(0)), ("c", 20, Some(2)), ("b", 10, Some(1)), ("d", 30, Some(3))],
            want(0, 0, 1, 0, 0), want(0, 0, 1, 0, 0)),
        row("replays within H_min dropped",
            &[("a", 0), ("b", 10), ("a", 20), ("c", 30), ("b", 900)],
            &[("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 30, Some(3))],
            want(0, 0, 0, 0, 2), want(0, 0, 0, 0, 2)),
        row("a repeat H_max after its first copy forwarded: not a duplicate",
            &[("a", 0), ("b", 100), ("a", 2500)],
            &[("a", 0, Some(0)), ("b", 100, Some(1)), ("a", 2500, Some(2))],
            CLEAN, CLEAN),
        row("a repeat H_max after its first copy dropped: lost",
            &[("a", 0), ("b", 100), ("a", 2500)],
            &[("a", 0, Some(0)), ("b", 100, Some(1))],
            want(0, 1, 0, 0, 0), want(0, 1, 0, 0, 0)),
        row("a repeat between H_min and H_max forwarded",
            &[("a", 0), ("b", 500), ("a", 1500)],
            &[("a", 0, Some(0)), ("b", 500, Some(1)), ("a", 1500, Some(2))],
            CLEAN, CLEAN),
        row("a repeat between H_min and H_max dropped",
            &[("a", 0), ("b", 500), ("a", 1500)],
            &[("a", 0, Some(0)), ("b", 500, Some(1))],
            want(0, 0, 0, 0, 1), want(0, 0, 0, 0, 1)),
        row("the horizon restarts at the copy forwarded in between",
            &[("a", 900), ("a", 2100), ("a", 2500), ("a", 3000)],
            &[("a", 900, Some(0)), ("a", 2100, Some(1))],
            want(0, 0, 0, 0, 2), want(0, 0, 0, 0, 2)),
        row("a replay keeping its event time, taken H_max later on the clock, forwarded",
            &[("a", 0), ("b", 1000), ("c", 3000), ("a", 0)],
            &[("a", 0, Some(0)), ("b", 1000, Some(1)), ("c", 3000, Some(2)), ("a", 0, Some(3))],
            CLEAN, CLEAN),
        row("a replay keeping its event time, taken H_max later on the clock, dropped",
            &[("a", 0), ("b", 1000), ("c", 3000), ("a", 0)],
            &[("a", 0, Some(0)), ("b", 1000, Some(1)), ("c", 3000, Some(2))],
            want(0, 1, 0, 0, 0), want(0, 1, 0, 0, 0)),
        row("a replay keeping its event time within H_min, forwarded: a duplicate",
            &[("a", 0), ("b", 500), ("a", 0)],
            &[("a", 0, Some(0)), ("b", 500, Some(1)), ("a", 0, Some(2))],
            want(1, 0, 0, 0, 1), want(1, 0, 0, 0, 1)),
        row("a lost record whose replay was forwarded: the event is there",
            &[("a", 0), ("b", 10), ("c", 20), ("b", 30)],
            &[("a", 0, Some(0)), ("c", 20, Some(2)), ("b", 30, Some(3))],
            want(0, 0, 0, 0, 1), want(0, 0, 0, 0, 1)),
        row("an event lost with its replays counts once",
            &[("a", 0), ("b", 10), ("b", 20), ("c", 30), ("b", 40)],
            &[("a", 0, Some(0)), ("c", 30, Some(3))],
            want(0, 1, 0, 0, 2), want(0, 1, 0, 0, 2)),
        row("the same input record forwarded twice, H_min apart: only provenance tells",
            &[("a", 0), ("b", 1500), ("c", 1510)],
            &[("a", 0, Some(0)), ("b", 1500, Some(1)), ("a", 0, Some(0)), ("c", 1510, Some(2))],
            want(0, 0, 0, 1, 0), want(1, 0, 0, 0, 0)),
        row("... and H_max behind the newest source: out of order (settled, its fate forgotten)",
            &[("a", 0), ("b", 5000), ("c", 5010)],
            &[("a", 0, Some(0)), ("b", 5000, Some(1)), ("a", 0, Some(0)), ("c", 5010, Some(2))],
            want(0, 0, 0, 1, 0), want(0, 0, 1, 0, 0)),
        row("a record in the middle that copies nothing of the input",
            &abcd,
            &[("a", 0, Some(0)), ("b", 10, Some(1)), ("x", 15, None), ("c", 20, Some(2)), ("d", 30, Some(3))],
            want(0, 0, 0, 1, 0), want(0, 0, 0, 1, 0)),
        // The input ends with the range here (records_after_the_last_match_... has the rest).
        row("a record after the last one of the range copying nothing is unexpected",
            &abcd,
            &[("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 20, Some(2)), ("d", 30, Some(3)), ("x", 40, None)],
            want(0, 0, 0, 1, 0), want(0, 0, 0, 1, 0)),
        row("a gap longer than the horizon",
            &[("a", 0), ("b", 1000), ("c", 2500), ("d", 5000), ("e", 5010)],
            &[("a", 0, Some(0)), ("d", 5000, Some(3)), ("e", 5010, Some(4))],
            want(0, 2, 0, 0, 0), want(0, 2, 0, 0, 0)),
        row("a reorder further than the horizon: lost there, and late",
            &[("a", 0), ("b", 10), ("c", 3000), ("d", 6000), ("e", 6010)],
            &[("a", 0, Some(0)), ("c", 3000, Some(2)), ("d", 6000, Some(3)), ("b", 10, Some(1)), ("e", 6010, Some(4))],
            want(0, 1, 0, 1, 0), want(0, 1, 1, 0, 0)),
    ];
    check(rows, &rules(Bounds::ALL, OnMissing::Forward));
}

/// Issue 23, item 2: identical records forwarded H_max or more apart on the output clock are
/// counted as repeats outside the horizon (up to [`REPEATS_WITHIN`] x H_max apart), with their
/// offsets; the partition stays clean. Rows: name, input, output, repeats (both with and without
/// provenance), and the first one's (output offset, earlier output offset, input offset, ms apart).
#[test]
fn repeats_outside_the_horizon_are_counted_and_clean() {
    /// Name, input, output, repeats, and (output offset, earlier output offset, input offset,
    /// ms apart) of the first.
    type RepeatRow = (
        &'static str,
        Vec<(&'static str, i64)>,
        Vec<Out>,
        u64,
        Option<(i64, i64, i64, i64)>,
    );
    #[rustfmt::skip]
    let rows: Vec<RepeatRow> = vec![
        ("a repeat H_max after its first copy forwarded",
            vec![("a", 0), ("b", 100), ("a", 2500)],
            vec![("a", 0, Some(0)), ("b", 100, Some(1)), ("a", 2500, Some(2))],
            1, Some((2, 0, 2, 2500))),
        ("exactly H_max apart",
            vec![("a", 0), ("a", 2000)],
            vec![("a", 0, Some(0)), ("a", 2000, Some(1))],
            1, Some((1, 0, 1, 2000))),
        ("between H_min and H_max: neither a duplicate nor a repeat outside the horizon",
            vec![("a", 0), ("b", 500), ("a", 1500)],
            vec![("a", 0, Some(0)), ("b", 500, Some(1)), ("a", 1500, Some(2))],
            0, None),
        ("the same input record forwarded twice far apart: a duplicate or out of order, no repeat",
            vec![("a", 0), ("b", 5000), ("c", 5010)],
            vec![("a", 0, Some(0)), ("b", 5000, Some(1)), ("a", 0, Some(0)), ("c", 5010, Some(2))],
            0, None),
        ("a replay keeping its event time, taken H_max later on the clock",
            vec![("a", 0), ("b", 1000), ("c", 3000), ("a", 0)],
            vec![("a", 0, Some(0)), ("b", 1000, Some(1)), ("c", 3000, Some(2)), ("a", 0, Some(3))],
            1, Some((3, 0, 3, 3000))),
        ("three copies: each against the one before",
            vec![("a", 0), ("b", 1000), ("a", 3000), ("c", 4000), ("a", 6000)],
            vec![("a", 0, Some(0)), ("b", 1000, Some(1)), ("a", 3000, Some(2)), ("c", 4000, Some(3)), ("a", 6000, Some(4))],
            2, Some((2, 0, 2, 3000))),
        ("just inside REPEATS_WITHIN x H_max",
            vec![("a", 0), ("b", 5_000), ("a", 9_999)],
            vec![("a", 0, Some(0)), ("b", 5_000, Some(1)), ("a", 9_999, Some(2))],
            1, Some((2, 0, 2, 9_999))),
        ("REPEATS_WITHIN x H_max apart: not looked for",
            vec![("a", 0), ("b", 5_000), ("a", 10_000)],
            vec![("a", 0, Some(0)), ("b", 5_000, Some(1)), ("a", 10_000, Some(2))],
            0, None),
    ];
    let r = rules(Bounds::ALL, OnMissing::Forward);
    for (name, inp, out, count, first) in rows {
        for provenance in [false, true] {
            let a = run(&r, input(&inp), output(&out, provenance));
            assert!(a.clean() || name.starts_with("the same input record"), "{name}: {a:#?}");
            assert_eq!(a.repeats_outside_horizon.count, count, "{name} ({provenance}): {a:#?}");
            let got = a
                .repeats_outside_horizon
                .examples
                .first()
                .map(|x| (x.output_offset, x.repeats_output_offset, x.input_offset, x.apart_ms));
            assert_eq!(got, first, "{name} ({provenance})");
        }
    }
}

/// Records without fingerprint: matched by their bytes when `on_missing = "forward"`, not
/// expected otherwise.
#[test]
fn records_without_fingerprint_follow_on_missing() {
    let input = [("a", 0), ("U1", 10), ("b", 20), ("U1", 30)];
    #[rustfmt::skip]
    let forward = vec![
        row("forwarded, both copies (never replays)", &input,
            &[("a", 0, Some(0)), ("U1", 10, Some(1)), ("b", 20, Some(2)), ("U1", 30, Some(3))],
            CLEAN, CLEAN),
        row("one copy missing: lost", &input,
            &[("a", 0, Some(0)), ("U1", 10, Some(1)), ("b", 20, Some(2))],
            want(0, 1, 0, 0, 0), want(0, 1, 0, 0, 0)),
    ];
    check(forward, &rules(Bounds::ALL, OnMissing::Forward));
    for on_missing in [OnMissing::Drop, OnMissing::DeadLetter, OnMissing::Fail] {
        #[rustfmt::skip]
        let not_forwarded = vec![
            row("not in the output: right", &input,
                &[("a", 0, Some(0)), ("b", 20, Some(2))],
                CLEAN, CLEAN),
            row("in the output: unexpected", &input,
                &[("a", 0, Some(0)), ("U1", 10, Some(1)), ("b", 20, Some(2))],
                want(0, 0, 0, 1, 0), want(0, 0, 0, 1, 0)),
        ];
        check(not_forwarded, &rules(Bounds::ALL, on_missing));
    }
    let a = run(
        &rules(Bounds::ALL, OnMissing::Drop),
        self::input(&input),
        output(&[("a", 0, Some(0)), ("b", 20, Some(2))], true),
    );
    assert_eq!((a.input_records, a.not_forwardable, a.forwarded), (4, 2, 2));
}

/// Records the filter let past on purpose (`input.skip`, the dead-letter topic) are counted as
/// skipped or dead-lettered, not lost, and the partition stays clean; one in neither, nor in the
/// output, stays lost. A diverted record that is in the output anyway is forwarded; a replay of
/// a diverted record is no replay (the filter learned no fingerprint of it) and is lost when
/// missing. Records without fingerprint (`on_missing = "dead_letter"`) found in the dead-letter
/// topic are dead-lettered, not "not forwardable".
#[test]
fn records_let_past_on_purpose_are_not_lost() {
    let dead = |reason: &str, offset| DeadLetter {
        reason: reason.into(),
        partition: 0,
        offset,
    };
    let mut r = rules(Bounds::ALL, OnMissing::DeadLetter);
    r.diverted.skips = [1, 5].into_iter().collect();
    r.diverted.dead_letters = [
        (3, dead("too_large", 0)),
        (6, dead("not_json", 1)),
        (5, dead("skipped", 2)),
    ]
    .into_iter()
    .collect();
    // Offsets: 0 a, 1 b (skipped), 2 c, 3 d (dead-lettered), 4 e (lost), 5 f (skipped, in the
    // dead-letter topic), 6 U1 (no fingerprint, dead-lettered), 7 U2 (no fingerprint, not there),
    // 8 g (named by input.skip? no: forwarded), 9 b again (a replay of the skipped b: lost).
    let input = self::input(&[
        ("a", 0),
        ("b", 10),
        ("c", 20),
        ("d", 30),
        ("e", 40),
        ("f", 50),
        ("U1", 60),
        ("U2", 70),
        ("g", 80),
        ("b", 90),
    ]);
    for provenance in [false, true] {
        let out = output(&[("a", 0, Some(0)), ("c", 20, Some(2)), ("g", 80, Some(8))], provenance);
        let a = run(&r, input.clone(), out);
        assert_eq!(a.forwarded, 3, "{a:#?}");
        assert_eq!(a.skipped.count, 1, "{a:#?}");
        assert_eq!(a.skipped.examples[0].input_offset, 1);
        // In the order settled: the one without fingerprint at once, the others as they settle.
        let mut dl: Vec<(i64, &str, i64)> = a
            .dead_lettered
            .examples
            .iter()
            .map(|d| (d.input_offset, d.reason.as_str(), d.dead_letter_offset))
            .collect();
        dl.sort_unstable();
        assert_eq!(
            dl,
            [(3, "too_large", 0), (5, "skipped", 2), (6, "not_json", 1)],
            "{a:#?}"
        );
        let lost: Vec<i64> = a.lost.examples.iter().map(|l| l.input_offset).collect();
        assert_eq!(lost, [4, 9], "{a:#?}");
        assert_eq!((a.not_forwardable, a.replays), (1, 0), "{a:#?}");
        assert_eq!(
            a.input_records,
            a.forwarded + a.replays + a.lost.count + a.not_forwardable + a.skipped.count + a.dead_lettered.count
        );
        assert!(!a.clean());
    }

    // Only the diverted ones missing: clean. A skipped record forwarded anyway: forwarded.
    let mut r = rules(Bounds::ALL, OnMissing::Drop);
    r.diverted.skips = [1, 2].into_iter().collect();
    r.diverted.dead_letters = [(3, dead("timestamp_out_of_range", 0))].into_iter().collect();
    let input = self::input(&[("a", 0), ("b", 10), ("c", 20), ("d", 30), ("e", 40)]);
    for provenance in [false, true] {
        let out = output(&[("a", 0, Some(0)), ("c", 20, Some(2)), ("e", 40, Some(4))], provenance);
        let a = run(&r, input.clone(), out);
        assert!(a.clean(), "{a:#?}");
        assert_eq!(
            (a.forwarded, a.skipped.count, a.dead_lettered.count),
            (3, 1, 1),
            "{a:#?}"
        );
    }
    // Outside the range: not judged.
    let mut r = rules(
        Bounds {
            from_offset: 2,
            ..Bounds::ALL
        },
        OnMissing::Drop,
    );
    r.diverted.skips = [1].into_iter().collect();
    let a = run(
        &r,
        input.clone(),
        output(
            &[
                ("a", 0, Some(0)),
                ("c", 20, Some(2)),
                ("d", 30, Some(3)),
                ("e", 40, Some(4)),
            ],
            true,
        ),
    );
    assert_eq!((a.skipped.count, a.lost.count), (0, 0), "{a:#?}");
}

/// Provenance makes matching exact: a record copied from another partition, or naming an input
/// record it does not copy, is unexpected; a duplicate is found at any distance.
#[test]
fn provenance_is_exact() {
    let r = rules(Bounds::ALL, OnMissing::Forward);
    let inp = input(&[("a", 0), ("b", 10), ("c", 20)]);
    let mut out = output(&[("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 20, Some(2))], true);
    out[1].origin = Some(Origin {
        partition: 1,
        offset: 1,
    });
    let a = run(&r, inp.clone(), out);
    assert_eq!(found(&a), want(0, 1, 0, 1, 0), "{a:#?}");
    assert_eq!(
        a.unexpected.examples[0].reason,
        UnexpectedReason::OtherPartition { partition: 1 }
    );

    let mut out = output(&[("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 20, Some(2))], true);
    out[1].origin = Some(Origin {
        partition: 0,
        offset: 2,
    });
    let a = run(&r, inp.clone(), out);
    assert_eq!(found(&a), want(0, 1, 0, 1, 0), "{a:#?}");
    assert_eq!(
        a.unexpected.examples[0].reason,
        UnexpectedReason::Differs { input_offset: 2 }
    );

    // The same input record again, long after: a duplicate by provenance alone.
    let inp = input(&[("a", 0), ("b", 5000), ("c", 9000)]);
    let out = output(
        &[
            ("a", 0, Some(0)),
            ("b", 5000, Some(1)),
            ("b", 5000, Some(1)),
            ("c", 9000, Some(2)),
        ],
        true,
    );
    let a = run(&r, inp, out);
    assert_eq!(found(&a), want(1, 0, 0, 0, 0), "{a:#?}");
    let d = &a.duplicates.examples[0];
    assert_eq!(
        (d.output_offset, d.repeats_output_offset, d.rule, d.input_offset),
        (2, 1, DuplicateRule::SameInputRecord, Some(1))
    );
}

/// The examples name the records: offsets in both topics.
#[test]
fn examples_name_the_records() {
    let r = rules(Bounds::ALL, OnMissing::Forward);
    let inp = input(&[("a", 0), ("b", 10), ("c", 20), ("d", 30), ("e", 40)]);
    let out = output(
        &[
            ("a", 0, None),
            ("c", 20, None),
            ("b", 10, None),
            ("c", 20, None),
            ("e", 40, None),
        ],
        false,
    );
    let a = run(&r, inp, out);
    assert_eq!(
        a.out_of_order.examples,
        vec![OutOfOrder {
            output_offset: 2,
            input_offset: 1,
            after_output_offset: 1,
            after_input_offset: 2
        }]
    );
    assert_eq!(a.duplicates.examples[0].output_offset, 3);
    assert_eq!(a.duplicates.examples[0].repeats_output_offset, 1);
    assert_eq!(a.lost.examples[0].input_offset, 3);
    assert_eq!(a.lost.examples[0].clock_ms, T0 + 30);
    let d = identity("d");
    assert_eq!(
        a.lost.examples[0].fingerprint,
        match d {
            Identity::Fingerprint(f) => Some(f.to_string()),
            Identity::Unfingerprintable(_) => None,
        }
    );
}

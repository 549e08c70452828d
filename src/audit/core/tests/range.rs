//! The audit of a range (`--since`, `--from-offset`, `Bounds`): the records before it (the
//! lead-ins) inform and are never judged, the records after it are judged only when nothing
//! matched lies past it, and an output record naming input before where the input is read is
//! context.

use super::*;

/// Bounds: the records before the range (the lead-in) inform, and are never judged.
#[test]
fn bounds_judge_only_the_range() {
    // `a` at offset 0 is before the range; its output copy is before where the output was read.
    let input = [("a", 0), ("b", 10), ("a", 20), ("c", 30), ("d", 40)];
    let by_offset = Bounds {
        from_offset: 2,
        ..Bounds::ALL
    };
    let by_time = Bounds {
        since_ms: T0 + 20,
        ..Bounds::ALL
    };
    for bounds in [by_offset, by_time] {
        #[rustfmt::skip]
        let rows = vec![
            row("a replay of a record before the range", &input,
                &[("b", 10, Some(1)), ("c", 30, Some(3)), ("d", 40, Some(4))],
                want(0, 0, 0, 0, 1), want(0, 0, 0, 0, 1)),
            row("faults before the range are not judged", &input,
                &[("x", 5, None), ("b", 10, Some(1)), ("b", 10, Some(1)), ("c", 30, Some(3)), ("d", 40, Some(4))],
                want(0, 0, 0, 0, 1), want(0, 0, 0, 0, 1)),
            row("a duplicate of a record in the range is", &input,
                &[("b", 10, Some(1)), ("c", 30, Some(3)), ("c", 30, Some(3)), ("d", 40, Some(4))],
                want(1, 0, 0, 0, 1), want(1, 0, 0, 0, 1)),
            row("a gap in the range", &input,
                &[("b", 10, Some(1)), ("d", 40, Some(4))],
                want(0, 1, 0, 0, 1), want(0, 1, 0, 0, 1)),
        ];
        check(rows, &rules(bounds, OnMissing::Forward));
    }
    // The upper bound: `d` is past the range, its copy not judged; nothing after it is read.
    let until = Bounds {
        to_offset: 4,
        ..Bounds::ALL
    };
    #[rustfmt::skip]
    let rows = vec![
        row("the output holds records past the range", &input,
            &[("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 30, Some(3)), ("d", 40, Some(4)), ("y", 50, None)],
            want(0, 0, 0, 0, 1), want(0, 0, 0, 0, 1)),
        row("the output ends before the range does", &input,
            &[("a", 0, Some(0)), ("b", 10, Some(1))],
            want(0, 1, 0, 0, 1), want(0, 1, 0, 0, 1)),
    ];
    check(rows, &rules(until, OnMissing::Forward));
}

/// An output record after the last one matched to the range that copies no input record read:
/// when the range reaches the input's end it copies nothing at all and is unexpected (a copy
/// written into the output H_max after the original, without provenance, was counted in no
/// category); while the input goes on past the range it may copy that input and is counted as
/// not judged.
#[test]
fn records_after_the_last_match_are_judged_when_nothing_is_past_the_range() {
    let inp = [("a", 0), ("b", 10), ("c", 3000)];
    /// Name, output, to_offset, until (ms after T0), input_end, unexpected, not judged.
    type AfterRow = (&'static str, Vec<Out>, i64, Option<i64>, i64, u64, u64);
    #[rustfmt::skip]
    let rows: Vec<AfterRow> = vec![
        ("a provenance-less copy H_max + 1 s after the original, the input ending with the range",
            vec![("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 3000, Some(2)), ("a", 3000, None)], 3, None, 3, 1, 0),
        ("a record copying nothing, the input ending with the range",
            vec![("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 3000, Some(2)), ("x", 3010, None)], 3, None, 3, 1, 0),
        ("the same, the input going on past the range",
            vec![("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 3000, Some(2)), ("x", 3010, None)], 3, None, 7, 0, 1),
        ("the same, the range ending at --to-offset before the input's end",
            vec![("a", 0, Some(0)), ("b", 10, Some(1)), ("x", 20, None)], 2, None, 3, 0, 1),
        ("the same, the range ending at --until before the input's end",
            vec![("a", 0, Some(0)), ("b", 10, Some(1)), ("x", 20, None)], 3, Some(1000), 3, 0, 1),
        ("nothing after the last match",
            vec![("a", 0, Some(0)), ("b", 10, Some(1)), ("c", 3000, Some(2))], 3, None, 3, 0, 0),
    ];
    // With provenance, a record naming an input offset past the input's end (a forged header, a
    // recreated topic) is unexpected too; past the range but not the input's end, not judged.
    for (input_end, unexpected) in [(3, 1), (9, 0)] {
        let r = Rules {
            input_end,
            ..rules(
                Bounds {
                    to_offset: 3,
                    ..Bounds::ALL
                },
                OnMissing::Forward,
            )
        };
        let out = [
            ("a", 0, Some(0)),
            ("b", 10, Some(1)),
            ("c", 3000, Some(2)),
            ("z", 3010, Some(7)),
        ];
        let a = run(&r, input(&inp), output(&out, true));
        assert_eq!(a.unexpected.count, unexpected, "input end {input_end}: {a:#?}");
    }
    for (name, out, to_offset, until, input_end, unexpected, not_judged) in rows {
        let bounds = Bounds {
            to_offset,
            until_ms: until.map_or(i64::MAX, |u| T0 + u),
            ..Bounds::ALL
        };
        let r = Rules {
            input_end,
            ..rules(bounds, OnMissing::Forward)
        };
        for provenance in [false, true] {
            let a = run(&r, input(&inp), output(&out, provenance));
            let case = format!("{name} ({provenance} provenance)");
            assert_eq!(a.unexpected.count, unexpected, "{case}: {a:#?}");
            assert_eq!(a.not_judged_after_range, not_judged, "{case}: {a:#?}");
            assert_eq!((a.duplicates.count, a.lost.count), (0, 0), "{case}: {a:#?}");
        }
    }
}

/// A new user's trial: `audit --since 3m` on a partition whose one record (input offset 0) was
/// forwarded before the range, in the output's longer lead-in (2 H_max) but not the input's
/// (H_max): the input stream, read from offset 1, held no record, and the output record naming
/// input offset 0 was reported unexpected ("holds no record the filter forwards", NOT CLEAN).
/// An output record naming an input offset before where the input is read is context, whatever
/// the input read; one naming an offset at or after it, past the input's end, stays unexpected.
#[test]
fn an_output_record_naming_input_before_the_read_start_is_context_even_when_nothing_was_read() {
    /// Case, input read from, the input records from there, the offset the output names, unexpected.
    type ReadFromRow = (&'static str, i64, Vec<(&'static str, i64)>, i64, u64);
    #[rustfmt::skip]
    let rows: [ReadFromRow; 4] = [
        ("nothing read; the output copies input before the read start", 1, vec![], 0, 0),
        ("context read; the output copies input before the read start", 1, vec![("b", 500)], 0, 0),
        ("nothing read; the output names the read start itself, past the input's end", 1, vec![], 1, 1),
        ("from the log start; the output names an offset past the input's end", i64::MIN, vec![], 0, 1),
    ];
    for (case, read_from, records, names, unexpected) in rows {
        let from = read_from.max(0);
        let inp: Vec<AuditRecord> = input(&records)
            .into_iter()
            .map(|r| AuditRecord {
                offset: r.offset + from,
                ..r
            })
            .collect();
        let end = from + inp.len() as i64;
        let r = Rules {
            input_end: end,
            input_read_from: read_from,
            ..rules(
                Bounds {
                    from_offset: 0,
                    to_offset: end,
                    since_ms: T0 + 1000,
                    ..Bounds::ALL
                },
                OnMissing::Forward,
            )
        };
        let out = output(&[("a", 0, Some(names))], true);
        let a = run(&r, inp, out);
        assert_eq!(a.unexpected.count, unexpected, "{case}: {a:#?}");
        assert_eq!((a.duplicates.count, a.lost.count), (0, 0), "{case}: {a:#?}");
    }
}

//! The horizon rule, one row per timeline of issue 13 (and issue 12's edge timestamps), each run
//! through [`advance`] and the real [`Generations`] by a small simulator and checked against both
//! bounds.

use std::collections::HashMap;

use super::*;
use crate::generations::{pos, Generation, Generations};

/// A wall-clock origin on a whole second (ms since the Unix epoch), so 1 s buckets are easy to read.
const T0: i64 = 1_700_000_000_000;
/// One second, in ms.
const S: i64 = 1_000;
/// One hour, in ms.
const HOUR: i64 = 3_600 * S;
/// Values at and above this are filler records (each distinct); below, probes (whose fates a row
/// lists).
const FILLER: u64 = 1_000_000;

/// What happened to a record of a timeline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Forwarded,
    Dropped,
}

/// One step of a timeline.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// A record with value `value` and timestamp `ts` (as the consumer returns it) taken at
    /// wall-clock time `now` (ms since the Unix epoch).
    Take { now: i64, ts: Option<i64>, value: u64 },
    /// The partition moves to another owner (or the process restarts): what the offset metadata
    /// and the store snapshot carry crosses, the partition clock and the generations; nothing
    /// else ([`Clock::resumed`]).
    HandOver,
}

/// A record taken at `T0 + wall` with timestamp `ts` (absolute: edge values stay as they are).
fn take(wall: i64, ts: Option<i64>, value: u64) -> Step {
    Step::Take {
        now: T0 + wall,
        ts,
        value,
    }
}

/// A timestamp `t` ms after `T0`.
fn at(t: i64) -> Option<i64> {
    Some(T0 + t)
}

/// A record stamped when it is taken (a caught-up partition, producer and filter clocks agree).
fn live(wall: i64, value: u64) -> Step {
    take(wall, at(wall), value)
}

/// Filler records (distinct values) taken every `every` ms of wall time in `[from, to)`, each
/// stamped `stamp(wall)`.
fn fillers(from: i64, to: i64, every: i64, stamp: impl Fn(i64) -> Option<i64>) -> Vec<Step> {
    (0..)
        .map(|i| from + i * every)
        .take_while(|w| *w < to)
        .enumerate()
        .map(|(i, w)| take(w, stamp(w), FILLER + (from as u64) * 1_000 + i as u64))
        .collect()
}

/// `a` and `b` merged by wall-clock time (stable: `a` first at equal times). No hand-overs.
fn merge(a: Vec<Step>, b: Vec<Step>) -> Vec<Step> {
    let wall = |s: &Step| match s {
        Step::Take { now, .. } => *now,
        Step::HandOver => panic!("merge timelines without hand-overs"),
    };
    let mut all: Vec<(usize, Step)> = a.into_iter().chain(b).enumerate().collect();
    all.sort_by_key(|(i, s)| (wall(s), *i));
    all.into_iter().map(|(_, s)| s).collect()
}

/// What a timeline did.
struct Run {
    /// Per take: value, fate, the partition clock after taking it, and the clock distance to the
    /// value's previous forwarded copy, if any.
    takes: Vec<(u64, Fate, i64, Option<i64>)>,
    /// Most fingerprints one generation held.
    max_generation: usize,
    /// Rotations.
    rotations: u32,
}

/// Runs `steps` as the filter does: advance the clock before the lookup, rotate, look up, insert
/// what is forwarded.
fn simulate(steps: &[Step], interval: i64, generations: u32) -> Run {
    let mut clock = Clock::new();
    let mut gens = Generations::from_parts(vec![Generation::new(1, 0, pos(0, 0), 0)], generations as usize);
    let mut first: HashMap<u64, i64> = HashMap::new();
    let mut run = Run {
        takes: Vec::new(),
        max_generation: 0,
        rotations: 0,
    };
    for (offset, step) in steps.iter().enumerate() {
        let offset = offset as i64;
        let (now, ts, value) = match *step {
            Step::HandOver => {
                clock = Clock::resumed(clock.time());
                continue;
            }
            Step::Take { now, ts, value } => (now, ts, value),
        };
        let rotations = advance(&mut clock, ts, now, interval, generations);
        let bucket = clock.bucket(interval).expect("known after a take");
        if rotations > 0 {
            gens.rotate_to(rotations, bucket, offset, pos(0, offset));
        } else if gens.current().bucket.is_none() {
            gens.set_current_bucket(bucket);
        }
        run.rotations += rotations;
        let c = clock.time().expect("known after a take");
        let fp = u128::from(value) + 1;
        let distance = first.get(&value).map(|c1| c - c1);
        let fate = if gens.lookup(fp).is_some() {
            Fate::Dropped
        } else {
            gens.insert(fp, Some(offset));
            first.insert(value, c);
            Fate::Forwarded
        };
        run.max_generation = run.max_generation.max(gens.iter().map(|g| g.len()).max().unwrap_or(0));
        run.takes.push((value, fate, c, distance));
    }
    run
}

/// One timeline of the table.
struct Row {
    /// What it is (the failure message names it).
    name: &'static str,
    /// Its steps.
    steps: Vec<Step>,
    /// The fates of its probes (values below [`FILLER`]) in order: `F` forwarded, `D` dropped.
    probes: &'static str,
    /// True for the one timeline where the stuck-clock escape may drop a copy inside H_min.
    escape: bool,
}

/// Interval 1 s, 2 generations: H_min 1 s, H_max 2 s.
const I: i64 = S;
const G: u32 = 2;

fn rows() -> Vec<Row> {
    let (p, q, r, x, a, b, c, d, z) = (1, 2, 3, 4, 5, 6, 7, 8, 9);
    let stamped_now = |w| at(w);
    vec![
        Row {
            name: "busy: a record every 100 ms, stamped when produced",
            steps: merge(
                fillers(0, 3 * S, 100, stamped_now),
                vec![
                    live(50, p),
                    live(550, q),
                    live(1_000, p),
                    live(2_000, q),
                    live(2_050, p),
                ],
            ),
            // P again 0.95 s after its first copy: dropped; Q 1.45 s after (in between): its
            // bucket 0 is two buckets back, forwarded; P 2 s after its first copy: forwarded.
            probes: "FFDFF",
            escape: false,
        },
        Row {
            name: "quiet (issue case 1): P alone at 0 s, 0.3 s, 4.8 s, 9.3 s",
            steps: vec![live(0, p), live(300, p), live(4_800, p), live(9_300, p)],
            probes: "FDFF",
            escape: false,
        },
        Row {
            name: "bursty: 20 records in 40 ms around 1 s and 6 s, quiet in between",
            steps: merge(
                merge(
                    fillers(980, 1_020, 2, stamped_now),
                    fillers(5_980, 6_020, 2, stamped_now),
                ),
                vec![
                    live(985, r),
                    live(990, p),
                    live(1_015, r),
                    live(6_000, p),
                    live(6_010, r),
                ],
            ),
            // R again 30 ms later across the bucket boundary: dropped.
            probes: "FFDFF",
            escape: false,
        },
        Row {
            name: "lagging catch-up: an hour-old backlog taken at 10x its record time",
            steps: merge(
                fillers(0, 400, 10, |w| at(w * 10 - HOUR)),
                vec![
                    take(0, at(-HOUR), p),
                    take(90, at(900 - HOUR), p),
                    take(250, at(2_500 - HOUR), p),
                ],
            ),
            // 0.9 s of record time (0.09 s of wall time) after the first copy: dropped; 2.5 s of
            // record time (0.25 s of wall time): forwarded.
            probes: "FDF",
            escape: false,
        },
        Row {
            name: "skew-stamped: the producer's clock 5 s ahead (every stamp in the future)",
            steps: merge(
                fillers(0, 3 * S, 100, |w| at(w + 5 * S)),
                vec![
                    take(50, at(5_050), p),
                    take(550, at(5_550), p),
                    take(2_550, at(7_550), p),
                ],
            ),
            // The clock follows the wall clock.
            probes: "FDF",
            escape: false,
        },
        Row {
            name: "skew-stamped: the producer's clock 30 s behind",
            steps: merge(
                fillers(0, 3 * S, 100, |w| at(w - 30 * S)),
                vec![
                    take(50, at(50 - 30 * S), p),
                    take(550, at(550 - 30 * S), p),
                    take(2_550, at(2_550 - 30 * S), p),
                ],
            ),
            probes: "FDF",
            escape: false,
        },
        Row {
            name: "future-stamped (issue case 2): one record stamped a day ahead while catching up",
            steps: merge(
                fillers(0, 400, 10, |w| at(w * 10 - HOUR)),
                vec![
                    take(10, at(100 - HOUR), p),
                    take(20, at(24 * HOUR), x),
                    take(50, Some(i64::MAX), z),
                    take(100, at(1_000 - HOUR), p),
                    take(300, at(3_000 - HOUR), p),
                ],
            ),
            // The future stamps move the clock by the wall time since the previous record
            // (10 ms), not to now: P 0.9 s of record time later is dropped, 2.9 s later forwarded.
            probes: "FFFDF",
            escape: false,
        },
        Row {
            name: "untimed: no record has a timestamp",
            steps: merge(
                fillers(0, 3 * S, 200, |_| None),
                vec![take(10, None, p), take(610, None, p), take(2_210, None, p)],
            ),
            // The clock runs on the wall clock.
            probes: "FDF",
            escape: false,
        },
        Row {
            name: "untimed (issue case 4): one record without timestamp in a caught-up partition",
            steps: merge(
                fillers(0, 3 * S, 100, stamped_now),
                vec![live(50, p), take(300, None, x), live(950, p), live(2_050, p)],
            ),
            probes: "FFDF",
            escape: false,
        },
        Row {
            name: "untimed: one record without timestamp while catching up an hour-old backlog",
            steps: merge(
                fillers(0, 400, 10, |w| at(w * 10 - HOUR)),
                vec![
                    take(10, at(100 - HOUR), p),
                    take(20, None, x),
                    take(100, at(1_000 - HOUR), p),
                    take(300, at(3_000 - HOUR), p),
                ],
            ),
            probes: "FFDF",
            escape: false,
        },
        Row {
            name: "handed over (issue case 3): the new owner first takes an old-stamped record",
            steps: [
                vec![live(0, x), live(8_500, a), live(9_000, b)],
                vec![Step::HandOver],
                vec![
                    take(20_000, at(1_000), r),
                    take(20_100, at(9_400), c),
                    take(20_200, at(8_500), a),
                    take(20_300, at(10_600), d),
                    take(20_400, at(8_500), a),
                ],
            ]
            .concat(),
            // A's replay with its original stamp 0.9 s after its first copy on the partition
            // clock (9.4 s): dropped, whatever the new owner's first record said; again once the
            // clock is at 10.6 s, 2.1 s after it: forwarded.
            probes: "FFFFFDFF",
            escape: false,
        },
        Row {
            name: "handed over: an untimed first record after the hand-over does not move the clock",
            steps: [
                vec![take(0, None, x), take(8_500, None, a), take(9_000, None, b)],
                vec![Step::HandOver],
                vec![take(60_000, None, c), take(60_100, None, a), take(62_200, None, a)],
            ]
            .concat(),
            // The minute between the owners is not counted (no wall-clock time is known to have
            // passed on the partition); then the clock runs on the wall clock again.
            probes: "FFFFDF",
            escape: false,
        },
        Row {
            name: "quiet, then replays keeping their event time: a long pause is no stuck clock",
            steps: [
                merge(fillers(0, 3 * S, 100, stamped_now), vec![live(1_950, p)]),
                fillers(200 * S, 205 * S, 100, |_| at(2_000)),
                vec![take(205 * S, at(1_950), p), live(206 * S, q), live(206_100, p)],
            ]
            .concat(),
            // 200 s of silence count as one interval towards the stuck-clock escape: five seconds
            // of replays later, P's replay (0.95 s after its first copy, which is in the previous
            // generation) is still dropped. Counting the silence would have rotated it away.
            probes: "FDFF",
            escape: false,
        },
        Row {
            name: "stuck clock: every record stamped with the same time, one every 100 ms",
            steps: [
                merge(
                    fillers(0, 25 * S, 100, |_| at(0)),
                    vec![
                        take(50, at(0), p),
                        take(5_050, at(0), p),
                        take(15_050, at(0), p),
                        take(20_550, at(0), p),
                    ],
                ),
                vec![take(25_000, at(5_000), q), take(25_100, at(0), p)],
            ]
            .concat(),
            // The clock stands at 0 s: the escape rotates once per 10 s of arriving records
            // (at 10 s, 20 s), so P is held until the second escape (the exception to H_min), and
            // a generation holds at most 10 s of records. Once the clock moves 5 s on, P is 5 s
            // after its last forwarded copy: forwarded.
            probes: "FDDFFF",
            escape: true,
        },
        Row {
            name: "edge timestamps (issue 12, item 4): i64::MIN, -5, -1, 0, i64::MAX",
            steps: merge(
                fillers(0, 3 * S, 100, stamped_now),
                vec![
                    take(0, Some(i64::MIN), p),
                    take(300, Some(-5), q),
                    take(400, None, r),
                    take(500, Some(i64::MAX), p),
                    take(600, Some(0), q),
                    take(700, Some(i64::MIN + 1), r),
                    take(2_550, Some(-5), p),
                    take(2_650, Some(i64::MAX), q),
                    take(2_750, Some(0), r),
                ],
            ),
            // None of them moves the clock beyond the wall clock or panics; each counts as taken
            // when it is (0 = 1970 counts as an old record: no move). P, Q, R 0.5 s after their
            // first copies: dropped; 2.3 s after: forwarded.
            probes: "FFFDDDFFF",
            escape: false,
        },
    ]
}

#[test]
fn every_timeline_keeps_both_bounds() {
    let (h_min, h_max) = bounds_ms(I, G);
    assert_eq!((h_min, h_max), (S, 2 * S));
    for row in rows() {
        let run = simulate(&row.steps, I, G);
        let fates: String = run
            .takes
            .iter()
            .filter(|(v, ..)| *v < FILLER)
            .map(|(_, f, ..)| if *f == Fate::Forwarded { 'F' } else { 'D' })
            .collect();
        assert_eq!(fates, row.probes, "{}: probe fates", row.name);
        let (mut inside, mut beyond) = (0, 0);
        for (value, fate, clock, distance) in &run.takes {
            let Some(d) = distance else { continue };
            let why = || format!("{}: value {value} at clock {clock}, {d} ms after its copy", row.name);
            if *d < h_min {
                inside += 1;
                assert!(
                    *fate == Fate::Dropped || row.escape,
                    "{}: forwarded inside H_min",
                    why()
                );
            }
            if *d >= h_max {
                beyond += 1;
                assert_eq!(*fate, Fate::Forwarded, "{}: dropped at or beyond H_max", why());
            }
        }
        assert!(
            inside > 0 && beyond > 0,
            "{}: the row checks both bounds ({inside} repeats inside H_min, {beyond} beyond H_max)",
            row.name
        );
        if row.escape {
            assert!(
                run.max_generation <= 101,
                "{}: a generation holds at most 10 s of records, {} held",
                row.name,
                run.max_generation
            );
        }
    }
}

/// The stuck-clock row really is the exception: without the escape a generation would keep
/// every record, and with it a copy inside H_min (here 0 ms on the partition clock) is forwarded.
#[test]
fn the_stuck_clock_escape_is_the_one_exception() {
    let row = rows().into_iter().find(|r| r.escape).unwrap();
    let run = simulate(&row.steps, I, G);
    assert_eq!(run.rotations, 2 + 2, "two escapes, then two buckets crossed at once");
    assert!(
        run.takes
            .iter()
            .any(|(v, f, _, d)| *v < FILLER && *f == Fate::Forwarded && d.is_some_and(|d| d < I)),
        "a copy inside H_min was forwarded after the second escape"
    );
}

#[test]
fn the_clock_crosses_buckets_before_the_lookup_and_never_goes_back() {
    let mut c = Clock::new();
    assert_eq!(
        advance(&mut c, at(300), T0 + 300, I, G),
        0,
        "the first record sets the clock"
    );
    assert_eq!(c.time(), at(300));
    assert_eq!(c.bucket(I), Some(T0 / I));
    assert_eq!(advance(&mut c, at(999), T0 + 999, I, G), 0);
    assert_eq!(advance(&mut c, at(1_000), T0 + 1_000, I, G), 1, "one bucket on");
    assert_eq!(advance(&mut c, at(500), T0 + 1_100, I, G), 0, "an older stamp");
    assert_eq!(c.time(), at(1_000), "the clock never goes back");
    assert_eq!(advance(&mut c, at(3_000), T0 + 3_000, I, G), 2, "two buckets on");
    assert_eq!(
        advance(&mut c, at(90_000), T0 + 90_000, I, G),
        G,
        "87 buckets on: every generation goes, once"
    );
    assert_eq!(bounds_ms(20 * S, 2), (20 * S, 40 * S), "the defaults: 20 s and 40 s");
    assert_eq!(bounds_ms(60 * S, 3), (120 * S, 180 * S));
}

#[test]
fn a_clock_resumed_after_a_hand_over_continues() {
    let mut c = Clock::resumed(at(9_000));
    assert_eq!(
        advance(&mut c, at(1_000), T0 + 60_000, I, G),
        0,
        "an old-stamped first record"
    );
    assert_eq!(c.time(), at(9_000));
    assert_eq!(advance(&mut c, None, T0 + 60_000, I, G), 0, "an untimed first record");
    assert_eq!(c.time(), at(9_000));
    assert_eq!(
        advance(&mut c, None, T0 + 61_500, I, G),
        1,
        "then it runs on the wall clock"
    );
    assert_eq!(c.time(), at(10_500));
    assert_eq!(Clock::resumed(None), Clock::new());
}

#[test]
fn effective_times_of_odd_stamps() {
    let now = T0 + 5_000;
    let unknown = Clock::new();
    for ts in [None, Some(-1), Some(-5), Some(i64::MIN), Some(i64::MAX), Some(now + 1)] {
        assert_eq!(effective_ms(&unknown, ts, now), now, "{ts:?}, clock not known");
    }
    assert_eq!(effective_ms(&unknown, Some(0), now), 0, "1970 is a time");
    assert_eq!(effective_ms(&unknown, Some(now), now), now);
    let mut running = Clock::new();
    advance(&mut running, at(1_000), T0 + 4_000, I, G);
    for ts in [None, Some(-1), Some(i64::MIN), Some(i64::MAX)] {
        assert_eq!(
            effective_ms(&running, ts, now),
            T0 + 2_000,
            "{ts:?}: the clock run on by the 1 s of wall time since the last record"
        );
    }
    assert_eq!(stamp_ms(Some(now), now), Some(now));
    assert_eq!(stamp_ms(Some(now + 1), now), None);
    assert_eq!(reread_ms(Some(i64::MAX), now), None);
    assert_eq!(reread_ms(Some(T0), now), Some(T0));
    assert_eq!(recovered(Some(5), Some(7)), Some(7));
    assert_eq!(recovered(Some(9), Some(7)), Some(9));
    assert_eq!(recovered(None, Some(7)), Some(7));
    assert_eq!(recovered(Some(9), None), Some(9));
    assert_eq!(recovered(None, None), None);
}

/// No input overflows (debug builds panic on overflow, so reaching the end is the assertion).
#[test]
fn no_time_overflows_the_arithmetic() {
    let extremes = [i64::MIN, i64::MIN + 1, -5, -1, 0, 1, T0, i64::MAX - 1, i64::MAX];
    for interval in [i64::MIN, -1, 0, 1, 100, I, 7 * 24 * HOUR, i64::MAX] {
        for generations in [0, 1, 2, 64, u32::MAX] {
            for start in extremes {
                let mut c = Clock::resumed(Some(start));
                for now in extremes {
                    for ts in extremes.iter().map(|t| Some(*t)).chain([None]) {
                        let n = advance(&mut c, ts, now, interval, generations);
                        assert!(n <= generations.max(1), "{n} rotations with {generations} generations");
                        let t = c.time().unwrap();
                        let _ = (
                            c.bucket(interval),
                            span_ms(t, i64::MIN, interval),
                            span_ms(i64::MIN, i64::MAX, interval),
                            bounds_ms(interval, generations),
                        );
                    }
                }
            }
        }
    }
}

/// The horizon gauge: from the oldest live generation's bucket to the clock.
#[test]
fn the_span_covered_runs_from_the_oldest_bucket_to_the_clock() {
    let run_to = |steps: &[Step]| {
        let mut clock = Clock::new();
        let mut gens = Generations::from_parts(vec![Generation::new(1, 0, pos(0, 0), 0)], G as usize);
        for (o, s) in steps.iter().enumerate() {
            let Step::Take { now, ts, .. } = *s else { unreachable!() };
            let n = advance(&mut clock, ts, now, I, G);
            let b = clock.bucket(I).unwrap();
            if n > 0 {
                gens.rotate_to(n, b, o as i64, pos(0, o as i64));
            } else if gens.current().bucket.is_none() {
                gens.set_current_bucket(b);
            }
        }
        span_ms(clock.time().unwrap(), gens.oldest_bucket().unwrap(), I)
    };
    assert_eq!(run_to(&[live(300, 1)]), 300, "one generation so far");
    assert_eq!(run_to(&[live(300, 1), live(1_200, 2)]), 1_200);
    assert_eq!(
        run_to(&[live(0, 1), live(300, 1), live(4_800, 1), live(9_300, 1)]),
        1_300
    );
    // Generations whose bucket is not known count as consecutive.
    let mut gens = Generations::from_parts(
        vec![Generation::new(1, 0, pos(0, 0), 0), Generation::new(2, 0, pos(0, 0), 0)],
        3,
    );
    assert_eq!(gens.oldest_bucket(), None, "the current bucket is not known yet");
    gens.set_current_bucket(10);
    assert_eq!(gens.oldest_bucket(), Some(9));
    // A stuck-clock escape: the generation it froze shares the current one's bucket (three
    // generations live: buckets 9, 10, 10).
    gens.rotate_to(1, 10, 0, pos(0, 0));
    assert_eq!(
        gens.iter().map(|g| g.bucket).collect::<Vec<_>>(),
        [None, Some(10), Some(10)]
    );
    assert_eq!(gens.oldest_bucket(), Some(9));
    // A recovery moved the clock on (the current generation relabelled from 10 to 14): the
    // older one counts as the bucket before, never as more.
    gens.set_current_bucket(14);
    assert_eq!(gens.oldest_bucket(), Some(12));
    // The stuck-clock row: the span after each escape.
    let row = rows().into_iter().find(|r| r.escape).unwrap();
    let before_second_escape: Vec<Step> = row
        .steps
        .iter()
        .copied()
        .filter(|s| matches!(s, Step::Take { now, .. } if *now < T0 + 15 * S))
        .collect();
    assert_eq!(
        run_to(&before_second_escape),
        0,
        "the clock stands at the bucket's start"
    );
}

/// A recovery's re-read moves the clock and counts rotations as the records did when taken
/// (interval 1 s, 2 generations), one row per case.
#[test]
fn reread_advance_in_a_table() {
    /// (case, clock before, record times, rotations per record, clock after).
    type Row = (
        &'static str,
        Option<i64>,
        &'static [Option<i64>],
        &'static [u32],
        Option<i64>,
    );
    #[rustfmt::skip]
    let rows: [Row; 7] = [
        ("no clock: the first stamped record sets it", None, &[Some(5_500), Some(5_900)], &[0, 0], Some(5_900)),
        ("within the checkpoint's bucket: nothing rotates", Some(5_100), &[Some(5_000), Some(5_999)], &[0, 0], Some(5_999)),
        ("one bucket on, then another", Some(5_100), &[Some(6_200), Some(7_000)], &[1, 1], Some(7_000)),
        ("an old stamp (a late event) does not move it back", Some(7_000), &[Some(1_000), Some(7_500)], &[0, 0], Some(7_500)),
        ("far ahead: at most the generations' count", Some(5_100), &[Some(50_000)], &[2], Some(50_000)),
        ("no usable stamp: nothing moves", Some(5_100), &[None, Some(6_000)], &[0, 1], Some(6_000)),
        ("no clock, no stamp: still unknown", None, &[None], &[0], None),
    ];
    for (case, start, times, want, end) in rows {
        let mut clock = start;
        let got: Vec<u32> = times.iter().map(|t| reread_advance(&mut clock, *t, 1_000, 2)).collect();
        assert_eq!((got.as_slice(), clock), (want, end), "{case}");
    }
}

/// Issue 23, item 1: the horizon in the words `check-config` and the start-up log print.
#[test]
fn the_horizon_in_words() {
    #[rustfmt::skip]
    let rows: [(i64, u32, &str, &str); 5] = [
        (60 * S,  3,  "2m",     "3m"),
        (20 * S,  2,  "20s",    "40s"),
        (S,       2,  "1s",     "2s"),
        (90 * S,  4,  "4m 30s", "6m"),
        (100,     2,  "100ms",  "200ms"),
    ];
    for (interval, generations, min, max) in rows {
        assert_eq!(
            in_words(interval, generations),
            format!(
                "a replay that arrives within {min} of its first copy is always dropped; \
                 a repeat {max} or more after it is always forwarded"
            ),
            "{interval} ms x {generations}"
        );
    }
}

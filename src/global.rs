//! The global scope (`fingerprint.scope = "global"`; docs/global-scope-design.md): replays are caught
//! whatever input partition they land in.
//!
//! Two stages run in one process:
//! 1. the **route stage** ([`run_route`], `global/route.rs`) reads `input.topic` in the group
//!    `input.group_id` and copies every record (key, value, headers, timestamp, plus the provenance
//!    header `kafka-dedup.source`) to `fingerprint.route_topic`, partition [`route_partition`]:
//!    `fingerprint mod N`, so that every copy of an event meets in one partition. It commits an
//!    input offset only once every copy before it is acknowledged
//!    ([`InFlight`](crate::partition::InFlight)), every `checkpoint.interval` and at a hand-over
//!    (revocation, stop). It keeps no state: after a crash it copies the records since its last
//!    commit again, and the filter stage drops the second copies as replays. When the route topic
//!    is slow or unreachable, it pauses its input partitions and keeps serving the group
//!    (`Router::back_off`); so it does when a record's fingerprint needs the schema registry and
//!    the registry cannot be asked (`Router::wait_for_registry`: the record is taken again later,
//!    never routed as one without identity, which would send it to the wrong route partition).
//! 2. the **filter stage** is today's filter ([`crate::pipeline::run_filter`]) with
//!    [`Config::filter_stage`](crate::config::Config::filter_stage): it reads the route topic in
//!    the group `<input.group_id>-global`. A record without fingerprint is known there by its
//!    provenance ([`Fingerprinter::stand_in`](crate::fingerprint::Fingerprinter::stand_in)), so a
//!    second copy of it is dropped too. A copy the route stage made again (after a crash, a lost
//!    assignment, a hand-over that timed out) is dropped there whatever its age: [`copy_fate`]
//!    compares its provenance with the [`HighWater`] marks of its route partition.
//!
//! [`crate::service::run`] starts both, sharing the metrics and the HTTP endpoint; the route
//! stage counts [`RECORDS_ROUTED`].

use std::collections::BTreeMap;

use crate::fingerprint::Fingerprint;

/// `kafka_dedup_records_routed_total`: input records the route stage of the global scope copied
/// to the route topic, counted when the route topic acknowledged the copy (a record copied again
/// after a crash counts again). Only in the global scope.
pub const RECORDS_ROUTED: &str = "kafka_dedup_records_routed_total";

/// `kafka_dedup_route_copies_dropped_total`: copies the filter stage of the global scope dropped
/// because the route stage had copied their input record before ([`copy_fate`]: its offset at or
/// below the high-water mark of its input partition), whatever the time since the first copy.
/// Only in the global scope. Also counted in `records_consumed`, not in `duplicates_dropped`.
pub const ROUTE_COPIES_DROPPED: &str = "kafka_dedup_route_copies_dropped_total";

/// `kafka_dedup_route_restamped_total`: copies the route stage of the global scope stamped now
/// because the route topic does not take the record's own timestamp
/// (`message.timestamp.before.max.ms` / `after.max.ms`, as the filter checks its output's): the
/// copy carries the record's timestamp in the header `kafka-dedup.timestamp`, and is forwarded
/// so. Without it, the broker's refusal is fatal to the gapless producer and met again at every
/// start. Only in the global scope.
pub const ROUTE_RESTAMPED: &str = "kafka_dedup_route_restamped_total";

/// The filter stage's high-water marks of one route partition: per input partition (of
/// `input.topic`), the highest input offset whose copy it took (forwarded, dropped or copied
/// aside), by the copy's provenance header. Kept in the checkpoint (offset metadata, `hw`) and
/// rebuilt from the output on recovery ([`crate::recovery`]).
pub type HighWater = BTreeMap<i32, i64>;

/// What the filter stage makes of a routed copy, by its provenance ([`copy_fate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyFate {
    /// Not copied before: looked up by fingerprint as usual, and its offset becomes its input
    /// partition's mark once taken ([`note_taken`]).
    New,
    /// Its input record was copied to this route partition before and taken: dropped, whatever
    /// its fingerprint's age.
    Recopy,
    /// No provenance of `input.topic` (or no fingerprint, nor stand-in: a record without identity
    /// follows `on_missing` as before): looked up by fingerprint as usual.
    Unknown,
}

/// The fate of a routed copy whose provenance is `source` (input partition, offset; `None`
/// without one), given the route partition's marks `high_water`.
///
/// The rule (docs/global-scope-design.md, "Re-copies"): the route stage copies each input partition in
/// input order with one idempotent producer (no gap, no reordering within a route partition), and
/// it resumes an input partition only at an offset whose every earlier copy was acknowledged. So
/// when a route partition holds a copy of input offset `h` of partition `p`, it already holds
/// every earlier record of `p` that routes to it, before that copy: a copy of an offset at or
/// below `h` met later is a second copy (a re-copy after a crash, or a late copy of a previous
/// owner) and is dropped. Nothing else is: a first copy always comes above every mark of its
/// input partition.
pub fn copy_fate(high_water: &HighWater, source: Option<(i32, i64)>) -> CopyFate {
    match source {
        None => CopyFate::Unknown,
        Some((p, offset)) if high_water.get(&p).is_some_and(|h| offset <= *h) => CopyFate::Recopy,
        Some(_) => CopyFate::New,
    }
}

/// Raises the mark of `source`'s input partition to its offset (a copy taken).
pub fn note_taken(high_water: &mut HighWater, source: Option<(i32, i64)>) {
    if let Some((p, offset)) = source {
        let h = high_water.entry(p).or_insert(offset);
        *h = (*h).max(offset);
    }
}

/// Raises every mark of `into` to the one of `from` (the checkpoint's, the output's re-read).
pub fn merge_high_water(into: &mut HighWater, from: &HighWater) {
    for (p, o) in from {
        note_taken(into, Some((*p, *o)));
    }
}

/// The marks of one running route partition of the filter stage: those of every copy taken,
/// which [`copy_fate`] checks, and what a commit may carry of them.
///
/// A commit at route offset `c` must carry the marks of the copies taken below `c` only: a
/// copy taken at or after `c` is read again by the next owner, which must not find its own
/// input offset marked already (it would drop the copy as a re-copy). Such copies exist when a
/// commit stops short of what was taken: a halted partition commits up to its refused record
/// (the halt is the record, which stays unacknowledged until it is taken), a hand-over up to the
/// first unacknowledged copy. So the copies taken since the last settled point are kept, with
/// their route offsets, until every record before them is done ([`Marks::settle`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Marks {
    /// Of every copy taken.
    taken: HighWater,
    /// Of the copies below the settled point.
    settled: HighWater,
    /// The copies taken at or after the settled point: (route offset, input partition, input
    /// offset), in route offset order.
    pending: std::collections::VecDeque<(i64, i32, i64)>,
}

impl Marks {
    /// The marks a partition resumes with (the checkpoint's and the re-read's), all below its
    /// resume offset.
    pub fn resumed(marks: HighWater) -> Self {
        Marks {
            taken: marks.clone(),
            settled: marks,
            pending: Default::default(),
        }
    }

    /// The fate of a copy whose provenance is `source` ([`copy_fate`] with every copy taken).
    pub fn fate(&self, source: Option<(i32, i64)>) -> CopyFate {
        copy_fate(&self.taken, source)
    }

    /// Notes the copy at route offset `offset`, whose provenance is `source`, taken; `done` is
    /// the partition's watermark (every record below it done), settled first, so that only the
    /// copies not done yet stay pending.
    pub fn take(&mut self, offset: i64, source: Option<(i32, i64)>, done: i64) {
        self.settle(done);
        if let Some((p, o)) = source {
            note_taken(&mut self.taken, source);
            self.pending.push_back((offset, p, o));
        }
    }

    /// Every record below route offset `done` is done (acknowledged or dropped: the
    /// partition's watermark): their marks settle.
    pub fn settle(&mut self, done: i64) {
        while let Some(&(_, p, o)) = self.pending.front().filter(|(offset, ..)| *offset < done) {
            note_taken(&mut self.settled, Some((p, o)));
            self.pending.pop_front();
        }
    }

    /// The marks of the copies taken below route offset `commit`: what a commit there carries.
    pub fn below(&self, commit: i64) -> HighWater {
        let mut marks = self.settled.clone();
        for (_, p, o) in self.pending.iter().take_while(|(offset, ..)| *offset < commit) {
            note_taken(&mut marks, Some((*p, *o)));
        }
        marks
    }
}

/// `kafka_dedup_route_lag_records{partition}`: the route stage's lag on an input partition (global
/// scope): its high watermark (last stable offset) minus the route stage's committed offset, from
/// librdkafka statistics, as [`crate::telemetry::CONSUMER_LAG`] is the filter stage's on the
/// route topic. Set to 0 when the partition is revoked.
pub const ROUTE_LAG: &str = "kafka_dedup_route_lag_records";

/// The route partition of a record, in `0..route_partitions`: its fingerprint modulo the route
/// topic's partition count, so every copy of an event lands in one partition whatever input
/// partition it came through; a record without fingerprint (`None`) goes to its input partition
/// modulo the count, so the records of one input partition without fingerprint keep their order.
/// `route_partitions` must be at least 1 (a topic has at least one partition).
pub fn route_partition(fingerprint: Option<Fingerprint>, input_partition: i32, route_partitions: usize) -> i32 {
    let n = route_partitions.max(1);
    match fingerprint {
        Some(fp) => (fp.0 % n as u128) as i32,
        None => (input_partition.max(0) as usize % n) as i32,
    }
}

mod route;
pub use self::route::run_route;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fingerprint::Fingerprinter;

    /// What a commit carries of the marks, one row per case: copies taken (route offset, input
    /// partition, input offset), the watermark settled, the commit's route offset, the marks
    /// committed, and the fate of a copy of input offset 12 of partition 0 while running.
    #[test]
    fn a_commit_carries_the_marks_of_the_copies_below_it() {
        let hw = |v: &[(i32, i64)]| v.iter().copied().collect::<HighWater>();
        type Row = (&'static str, &'static [(i64, i32, i64)], i64, i64, HighWater, CopyFate);
        #[rustfmt::skip]
        let rows: [Row; 6] = [
            ("everything taken is below the commit", &[(5, 0, 10), (6, 1, 3), (7, 0, 12)], 0, 8,
                hw(&[(0, 12), (1, 3)]), CopyFate::Recopy),
            ("a halted copy at 7: the commit stops before it, its input offset is not marked",
                &[(5, 0, 10), (6, 1, 3), (7, 0, 12)], 7, 7, hw(&[(0, 10), (1, 3)]), CopyFate::Recopy),
            ("a hand-over at the watermark 6, copies in flight from 6 on",
                &[(5, 0, 10), (6, 1, 3), (7, 0, 12)], 6, 6, hw(&[(0, 10)]), CopyFate::Recopy),
            ("settled past everything: the commit below the settled point still carries them",
                &[(5, 0, 10)], 9, 9, hw(&[(0, 10)]), CopyFate::New),
            ("nothing taken: the resumed marks", &[], 0, 4, hw(&[(2, 8)]), CopyFate::New),
            ("records without provenance are not marks", &[], 3, 3, hw(&[(2, 8)]), CopyFate::New),
        ];
        for (why, taken, settled, commit, want, fate) in rows {
            let mut m = Marks::resumed(if taken.is_empty() {
                hw(&[(2, 8)])
            } else {
                HighWater::new()
            });
            for (offset, p, o) in taken {
                m.take(*offset, Some((*p, *o)), 0);
            }
            m.take(8, None, 0);
            m.settle(settled);
            assert_eq!(m.below(commit), want, "{why}");
            assert_eq!(m.fate(Some((0, 12))), fate, "{why}");
        }
    }

    /// When the route topic's retention may delete unread copies, one row per case: the input's
    /// and the route topic's `retention.ms` (absent: not read), a risk said or not.
    #[test]
    fn a_route_topic_keeping_records_shorter_than_the_input_is_a_risk() {
        let of = |v: Option<&str>| -> BTreeMap<String, String> {
            v.map(|v| [("retention.ms".to_string(), v.to_string())].into())
                .unwrap_or_default()
        };
        #[rustfmt::skip]
        let rows: [(&str, Option<&str>, Option<&str>, bool); 7] = [
            ("a day under a week", Some("604800000"), Some("86400000"), true),
            ("the same", Some("604800000"), Some("604800000"), false),
            ("a week and a day", Some("604800000"), Some("691200000"), false),
            ("the input forever", Some("-1"), Some("691200000"), true),
            ("both forever", Some("-1"), Some("-1"), false),
            ("the route forever", Some("604800000"), Some("-1"), false),
            ("not read", None, Some("86400000"), false),
        ];
        for (why, input, route, risk) in rows {
            let said = route::route_retention_risk(&of(input), &of(route));
            assert_eq!(said.is_some(), risk, "{why}: {said:?}");
        }
        let said = route::route_retention_risk(&of(Some("-1")), &of(Some("86400000"))).unwrap();
        assert!(said.contains("86400000") && said.contains("-1 (forever)"), "{said}");
    }

    /// The route partition, one row per case: fingerprint (or none), input partition, route
    /// partitions, the answer.
    #[test]
    fn route_partition_in_a_table() {
        let fp = |v: u128| Some(Fingerprint(v));
        #[rustfmt::skip]
        let rows: [(&str, Option<Fingerprint>, i32, usize, i32); 9] = [
            ("fingerprint mod N", fp(7), 0, 3, 1),
            ("the input partition does not matter", fp(7), 2, 3, 1),
            ("a multiple of N", fp(9), 1, 3, 0),
            ("the top bits count", fp(u128::MAX), 0, 3, (u128::MAX % 3) as i32),
            ("one route partition", fp(12345), 4, 1, 0),
            ("no fingerprint: input partition", None, 2, 3, 2),
            ("no fingerprint: input partition mod N", None, 5, 3, 2),
            ("no fingerprint, more route partitions", None, 1, 6, 1),
            ("a count of 0 is treated as 1", fp(5), 3, 0, 0),
        ];
        for (case, fingerprint, input, n, want) in rows {
            assert_eq!(route_partition(fingerprint, input, n), want, "{case}");
        }
    }

    /// The re-copy rule, one row per case: marks, provenance, the fate.
    #[test]
    fn copy_fate_in_a_table() {
        let marks: HighWater = [(0, 100), (2, 7)].into_iter().collect();
        #[rustfmt::skip]
        let rows = [
            ("no provenance", None::<(i32, i64)>, CopyFate::Unknown),
            ("above the mark: a first copy", Some((0, 101)), CopyFate::New),
            ("far above the mark (records routed elsewhere between)", Some((0, 5_000)), CopyFate::New),
            ("at the mark: the same record again", Some((0, 100)), CopyFate::Recopy),
            ("below the mark: a re-copy after a crash", Some((0, 42)), CopyFate::Recopy),
            ("another partition's mark does not count", Some((2, 42)), CopyFate::New),
            ("below another partition's mark", Some((2, 0)), CopyFate::Recopy),
            ("a partition without a mark", Some((1, 0)), CopyFate::New),
        ];
        for (case, source, want) in rows {
            assert_eq!(copy_fate(&marks, source), want, "{case}");
        }
    }

    /// A taken copy raises its partition's mark, never lowers it; merging keeps the higher mark.
    #[test]
    fn marks_only_rise() {
        let mut marks = HighWater::new();
        note_taken(&mut marks, Some((0, 10)));
        note_taken(&mut marks, Some((0, 5))); // a late copy taken (not one the rule drops)
        note_taken(&mut marks, None);
        assert_eq!(marks, [(0, 10)].into_iter().collect());
        merge_high_water(&mut marks, &[(0, 3), (1, 9)].into_iter().collect());
        assert_eq!(marks, [(0, 10), (1, 9)].into_iter().collect());
        // The route stage's order: a re-copy of 4..=10 after 10 was taken is dropped whole,
        // and the next first copy is not.
        let fates: Vec<CopyFate> = (4..=11).map(|o| copy_fate(&marks, Some((0, o)))).collect();
        assert_eq!(fates[..7], [CopyFate::Recopy; 7]);
        assert_eq!(fates[7], CopyFate::New);
    }

    /// Every copy of an event meets in one partition, through whichever input partition it came;
    /// the partitions are all used.
    #[test]
    fn copies_of_an_event_meet_in_one_partition() {
        let f = Fingerprinter::new(crate::fingerprint::Source::Value);
        let mut used = std::collections::BTreeSet::new();
        for v in 0..300u32 {
            let record = crate::fingerprint::OwnedRecord {
                key: None,
                value: Some(v.to_string().into_bytes()),
                headers: vec![],
            };
            let fp = f.fingerprint(&record).ok();
            let at: Vec<i32> = (0..3).map(|input| route_partition(fp, input, 3)).collect();
            assert!(at.iter().all(|p| *p == at[0]), "{v}: {at:?}");
            used.insert(at[0]);
        }
        assert_eq!(used.len(), 3);
    }
}

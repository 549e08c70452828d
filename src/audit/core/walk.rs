//! The walk over the two streams ([`audit_partition`]): the window of input records not yet
//! settled, the cursor, and the rules applied as each output record is read (the module
//! documentation of `audit::core` tells the walk and the rules).

use std::collections::{HashMap, VecDeque};

use super::findings::{
    DeadLettered, Duplicate, DuplicateRule, Finding, Lost, OutOfOrder, PartitionAudit, Repeat, Skipped, Unexpected,
    UnexpectedReason,
};
use super::record::{AuditRecord, Identity};
use super::rules::Rules;
use crate::config::OnMissing;
use crate::fingerprint::Fingerprint;

/// How far back, in H_max of the output clock, a repeat outside the horizon is looked for: the
/// output fingerprints of the last `REPEATS_WITHIN` x H_max are held (a 48-byte queue entry and a
/// 32-byte table entry each, 100 to 170 bytes with the collections' growth headroom; README
/// "Auditing the topics"), so a repeat farther from its earlier copy is not counted. Five
/// horizons reach well past the replays a horizon too short lets through (an upstream restart,
/// a checkpoint interval of the upstream's) for less memory than the window itself.
pub const REPEATS_WITHIN: i64 = 5;

/// Audits one input partition against its output partition: `input` and `output` in offset
/// order, each starting at its lead-in (or anywhere before the range). Reads `input` only as far
/// as needed (see the module documentation) and stops at `rules.bounds`; reads `output` to its
/// end, or, once the input range is read and every record of it accounted for, until the output
/// clock is H_max past the range. Errors: the first error of either stream.
pub fn audit_partition<E>(
    rules: &Rules,
    input: impl Iterator<Item = Result<AuditRecord, E>>,
    output: impl Iterator<Item = Result<AuditRecord, E>>,
) -> Result<PartitionAudit, E> {
    let mut a = Auditor::new(rules);
    let mut input = input.fuse();
    for o in output {
        a.on_output(o?, &mut input)?;
        if a.output_can_stop() {
            break;
        }
    }
    a.out_done = true;
    a.settle(i64::MAX);
    while !a.in_done {
        match input.next() {
            Some(r) => a.push_input(r?),
            None => a.in_done = true,
        }
    }
    Ok(a.finish())
}

/// An input record in the window.
#[derive(Debug, Clone)]
struct Entry {
    offset: i64,
    /// The input clock at it.
    clock: i64,
    identity: Identity,
    /// In the range.
    audited: bool,
    /// The output offset of the record matched to it.
    matched: Option<i64>,
}

/// The source of the newest in-order output record.
#[derive(Debug, Clone, Copy)]
struct Cursor {
    input_offset: i64,
    clock: i64,
    output_offset: i64,
}

/// The walk's state (see the module documentation).
pub(super) struct Auditor<'r> {
    rules: &'r Rules,
    /// Input clock; `None` before the first timestamp.
    in_clock: Option<i64>,
    /// The input clock at the first input record read.
    first_in_clock: Option<i64>,
    /// First input offset read.
    read_start: Option<i64>,
    /// The offset after the last input record read.
    in_next: i64,
    /// No more input is read (the end, or past the range).
    in_done: bool,
    /// An input record past the range was read (by offset or by `until_ms`): input goes on
    /// past the range.
    past_range_read: bool,
    /// Output clock.
    out_clock: Option<i64>,
    /// The output has ended: every input record settles as it is read.
    out_done: bool,
    /// Input records not yet settled, in offset order.
    window: VecDeque<Entry>,
    /// Offsets of the unmatched window records, by identity, ascending.
    index: HashMap<Identity, Vec<i64>>,
    /// Input copies that count as an event's copy (forwarded, lost, or before the range), by
    /// identity: (input offset, input clock). Pruned H_max behind the window.
    copies: HashMap<Identity, Vec<(i64, i64)>>,
    /// `copies` in insertion order, for pruning: (clock, identity, offset).
    copies_order: VecDeque<(i64, Identity, i64)>,
    cursor: Option<Cursor>,
    /// The input offset the output record being judged was matched to, if it is in the range.
    taken: Option<i64>,
    /// Output fingerprints less than [`REPEATS_WITHIN`] x H_max old, each its latest copy:
    /// (output clock, output offset).
    recent: HashMap<Fingerprint, (i64, i64)>,
    /// `recent` in output order, for pruning: (clock, fingerprint, offset).
    recent_order: VecDeque<(i64, Fingerprint, i64)>,
    /// An output record was matched to an input record of the range.
    seen_audited: bool,
    /// Unexpected records since the last output record matched to the range (judged only if
    /// another one follows).
    pending: Finding<Unexpected>,
    /// Output records since the input ended, for the periodic stop check.
    since_check: u32,
    report: PartitionAudit,
}

impl<'r> Auditor<'r> {
    pub(super) fn new(rules: &'r Rules) -> Self {
        Auditor {
            rules,
            in_clock: None,
            first_in_clock: None,
            read_start: None,
            // Nothing read yet: the next is where the stream starts (an output record naming an
            // earlier offset is context even if the stream holds no record, `by_provenance`).
            in_next: rules.input_read_from,
            in_done: false,
            past_range_read: false,
            out_clock: None,
            out_done: false,
            window: VecDeque::new(),
            index: HashMap::new(),
            copies: HashMap::new(),
            copies_order: VecDeque::new(),
            cursor: None,
            taken: None,
            recent: HashMap::new(),
            recent_order: VecDeque::new(),
            seen_audited: false,
            pending: Finding::default(),
            since_check: 0,
            report: PartitionAudit {
                partition: rules.partition,
                ..Default::default()
            },
        }
    }

    fn h_min(&self) -> i64 {
        self.rules.horizon.min_ms
    }

    fn h_max(&self) -> i64 {
        self.rules.horizon.max_ms
    }

    /// A timestamp as the clocks count it: none for a missing or negative one, capped at now.
    fn effective(&self, ts: Option<i64>) -> Option<i64> {
        ts.filter(|t| *t >= 0).map(|t| t.min(self.rules.now_ms))
    }

    fn push_input(&mut self, r: AuditRecord) {
        if let Some(t) = self.effective(r.timestamp) {
            self.in_clock = Some(self.in_clock.map_or(t, |c| c.max(t)));
        }
        let clock = self.in_clock.unwrap_or(0);
        self.first_in_clock.get_or_insert(clock);
        self.read_start.get_or_insert(r.offset);
        self.in_next = r.offset.saturating_add(1);
        let bounds = &self.rules.bounds;
        if r.offset >= bounds.to_offset || clock >= bounds.until_ms {
            // Past the range: read no further, and this record is context.
            self.in_done = true;
            self.past_range_read = true;
        } else if r.offset.saturating_add(1) >= bounds.to_offset {
            self.in_done = true;
        }
        let audited = bounds.contains(r.offset, clock);
        if audited {
            self.report.input_records += 1;
            self.report.first_input_offset.get_or_insert(r.offset);
            self.report.last_input_offset = Some(r.offset);
        } else {
            self.report.input_context_records += 1;
        }
        let expected = matches!(r.identity, Identity::Fingerprint(_)) || self.rules.on_missing == OnMissing::Forward;
        if !expected {
            if audited && !self.divert(r.offset, clock) {
                self.report.not_forwardable += 1;
            }
            return;
        }
        self.window.push_back(Entry {
            offset: r.offset,
            clock,
            identity: r.identity,
            audited,
            matched: None,
        });
        self.index.entry(r.identity).or_default().push(r.offset);
        self.report.peak_window_records = self.report.peak_window_records.max(self.window.len() as u64);
        if self.out_done {
            self.settle(i64::MAX);
        }
    }

    /// Judges output record `o`, reading `input` ahead as far as it needs.
    pub(super) fn on_output<E>(
        &mut self,
        o: AuditRecord,
        input: &mut impl Iterator<Item = Result<AuditRecord, E>>,
    ) -> Result<(), E> {
        if let Some(t) = self.effective(o.timestamp) {
            self.out_clock = Some(self.out_clock.map_or(t, |c| c.max(t)));
        }
        let clock = self.out_clock.unwrap_or(0);
        self.report.output_records += 1;
        if o.origin.is_some() {
            self.report.output_with_provenance += 1;
        }
        let fingerprint = match o.identity {
            Identity::Fingerprint(f) => Some(f),
            Identity::Unfingerprintable(_) => None,
        };
        let earlier = fingerprint.and_then(|f| self.recent.get(&f).copied());
        let repeats = earlier
            .filter(|(c, _)| clock.saturating_sub(*c) < self.h_min())
            .map(|(_, offset)| offset);
        let keep = self.h_max().saturating_mul(REPEATS_WITHIN);
        let outside = earlier.filter(|(c, _)| (self.h_max()..keep).contains(&clock.saturating_sub(*c)));
        while !self.in_done && self.wants_input(&o, repeats.is_some(), clock) {
            match input.next() {
                Some(r) => {
                    self.push_input(r?);
                    // Records passed while reading ahead settle as they would once the cursor
                    // moved there, so that a long gap does not fill the window: to the offset
                    // named, as far as read; to a fingerprint, as far as the output clock.
                    let limit = match o.origin {
                        Some(_) => self.in_clock.unwrap_or(0),
                        None => self.cursor.map_or(clock, |c| c.clock.max(clock)),
                    };
                    self.settle(limit);
                }
                None => self.in_done = true,
            }
        }
        match o.origin {
            Some(src) if src.partition != self.rules.partition => {
                if self.seen_audited {
                    self.report.unexpected.add(Unexpected {
                        output_offset: o.offset,
                        reason: UnexpectedReason::OtherPartition {
                            partition: src.partition,
                        },
                    });
                }
            }
            Some(src) => self.by_provenance(&o, src.offset, repeats),
            None => self.by_identity(&o, repeats),
        }
        if let (Some(input_offset), Some((c, earlier)), Some(f)) = (self.taken.take(), outside, fingerprint) {
            self.report.repeats_outside_horizon.add(Repeat {
                output_offset: o.offset,
                repeats_output_offset: earlier,
                input_offset,
                apart_ms: clock.saturating_sub(c),
                fingerprint: f.to_string(),
            });
        }
        if let Some(f) = fingerprint {
            self.recent.insert(f, (clock, o.offset));
            self.recent_order.push_back((clock, f, o.offset));
        }
        while let Some((c, f, offset)) = self.recent_order.front().copied() {
            if clock.saturating_sub(c) < keep {
                break;
            }
            self.recent_order.pop_front();
            if self.recent.get(&f) == Some(&(c, offset)) {
                self.recent.remove(&f);
            }
        }
        if self.in_done {
            self.since_check = self.since_check.saturating_add(1);
        }
        Ok(())
    }

    /// Whether the input must be read further before `o` is judged.
    fn wants_input(&self, o: &AuditRecord, repeats: bool, out_clock: i64) -> bool {
        match o.origin {
            // Up to the offset named (reading stops at the range's end by itself).
            Some(src) if src.partition == self.rules.partition => self.in_next <= src.offset,
            Some(_) => false,
            None => {
                let Some(first) = self.first_in_clock else {
                    return true;
                };
                if repeats || self.candidate(&o.identity).is_some_and(|(_, in_order)| in_order) {
                    return false;
                }
                let base = self.cursor.map_or(first, |c| c.clock).max(out_clock);
                self.in_clock.unwrap_or(0) < base.saturating_add(self.h_max())
            }
        }
    }

    /// The window position of the unmatched input record `identity` would be matched to, and
    /// whether it is in order (at or after the cursor).
    fn candidate(&self, identity: &Identity) -> Option<(usize, bool)> {
        let offsets = self.index.get(identity)?;
        let after = self.cursor.map_or(i64::MIN, |c| c.input_offset);
        let (offset, in_order) = match offsets.iter().find(|o| **o >= after) {
            Some(o) => (*o, true),
            None => (*offsets.first()?, false),
        };
        self.position(offset).map(|i| (i, in_order))
    }

    /// The window position of input offset `offset`.
    fn position(&self, offset: i64) -> Option<usize> {
        self.window.binary_search_by_key(&offset, |e| e.offset).ok()
    }

    fn by_provenance(&mut self, o: &AuditRecord, k: i64, repeats: Option<i64>) {
        let dup = |rule, repeats_output_offset| Duplicate {
            output_offset: o.offset,
            repeats_output_offset,
            rule,
            input_offset: Some(k),
            fingerprint: fingerprint_text(&o.identity),
        };
        if let Some(i) = self.position(k) {
            let e = &self.window[i];
            let audited = e.audited;
            if let Some(earlier) = e.matched {
                if audited {
                    self.report.duplicates.add(dup(DuplicateRule::SameInputRecord, earlier));
                }
            } else if e.identity != o.identity {
                if audited {
                    self.report.unexpected.add(Unexpected {
                        output_offset: o.offset,
                        reason: UnexpectedReason::Differs { input_offset: k },
                    });
                }
            } else if let Some(earlier) = repeats {
                if audited {
                    self.report.duplicates.add(dup(DuplicateRule::Fingerprint, earlier));
                }
            } else {
                self.take(i, o.offset);
            }
            return;
        }
        // Not in the window: before the lead-in, past what was read, settled, or no record.
        let before_lead_in = self.read_start.is_none_or(|s| k < s);
        if k >= self.in_next && self.nothing_past_range() {
            // Past the input's end: no record there (a forged header, a recreated topic).
            self.report.unexpected.add(Unexpected {
                output_offset: o.offset,
                reason: UnexpectedReason::NotForwardable { input_offset: k },
            });
            return;
        }
        if before_lead_in || k >= self.in_next {
            return; // context, or past the range
        }
        let audited = self.report.first_input_offset.is_some_and(|f| k >= f)
            && self.report.last_input_offset.is_some_and(|l| k <= l);
        if !audited {
            return;
        }
        if let Some(earlier) = repeats {
            self.report.duplicates.add(dup(DuplicateRule::Fingerprint, earlier));
            return;
        }
        let settled = self.window.front().is_none_or(|e| k < e.offset);
        match self.cursor {
            Some(c) if settled && k < c.input_offset => self.report.out_of_order.add(OutOfOrder {
                output_offset: o.offset,
                input_offset: k,
                after_output_offset: c.output_offset,
                after_input_offset: c.input_offset,
            }),
            _ => self.report.unexpected.add(Unexpected {
                output_offset: o.offset,
                reason: UnexpectedReason::NotForwardable { input_offset: k },
            }),
        }
    }

    fn by_identity(&mut self, o: &AuditRecord, repeats: Option<i64>) {
        if let Some(earlier) = repeats {
            if self.seen_audited {
                self.report.duplicates.add(Duplicate {
                    output_offset: o.offset,
                    repeats_output_offset: earlier,
                    rule: DuplicateRule::Fingerprint,
                    input_offset: None,
                    fingerprint: fingerprint_text(&o.identity),
                });
            }
            return;
        }
        match self.candidate(&o.identity) {
            Some((i, _)) => self.take(i, o.offset),
            None => {
                if self.seen_audited {
                    self.pending.add(Unexpected {
                        output_offset: o.offset,
                        reason: UnexpectedReason::NoSuchInputRecord,
                    });
                }
            }
        }
    }

    /// Matches the output record at `output_offset` to the window record at `i`.
    fn take(&mut self, i: usize, output_offset: i64) {
        let e = &mut self.window[i];
        e.matched = Some(output_offset);
        let (offset, clock, identity, audited) = (e.offset, e.clock, e.identity, e.audited);
        if let Some(offsets) = self.index.get_mut(&identity) {
            offsets.retain(|o| *o != offset);
            if offsets.is_empty() {
                self.index.remove(&identity);
            }
        }
        self.add_copy(identity, offset, clock);
        if audited {
            self.taken = Some(offset);
            self.report.forwarded += 1;
            self.seen_audited = true;
            let pending = std::mem::take(&mut self.pending);
            self.report.unexpected.absorb(pending);
        }
        match self.cursor {
            Some(c) if offset < c.input_offset => {
                if audited {
                    self.report.out_of_order.add(OutOfOrder {
                        output_offset,
                        input_offset: offset,
                        after_output_offset: c.output_offset,
                        after_input_offset: c.input_offset,
                    });
                }
            }
            _ => {
                self.cursor = Some(Cursor {
                    input_offset: offset,
                    clock,
                    output_offset,
                });
                self.settle(clock);
            }
        }
    }

    fn add_copy(&mut self, identity: Identity, offset: i64, clock: i64) {
        self.copies.entry(identity).or_default().push((offset, clock));
        self.copies_order.push_back((clock, identity, offset));
    }

    /// Settles the window records whose clock is at least H_max behind `limit`.
    fn settle(&mut self, limit: i64) {
        while let Some(front) = self.window.front() {
            if front.clock.saturating_add(self.h_max()) > limit {
                break;
            }
            let e = self.window.pop_front().expect("front exists");
            if e.matched.is_none() {
                if let Some(offsets) = self.index.get_mut(&e.identity) {
                    offsets.retain(|o| *o != e.offset);
                    if offsets.is_empty() {
                        self.index.remove(&e.identity);
                    }
                }
                self.finalize(e);
            }
        }
        // Copies are needed while a record they may excuse can still settle: from H_max before
        // the oldest unsettled record (or, the window empty, before the next one read).
        let keep_from = self
            .window
            .front()
            .map_or(self.in_clock.unwrap_or(i64::MIN), |e| e.clock)
            .saturating_sub(self.h_max());
        while let Some((clock, identity, offset)) = self.copies_order.front().copied() {
            if clock >= keep_from {
                break;
            }
            self.copies_order.pop_front();
            if let Some(list) = self.copies.get_mut(&identity) {
                list.retain(|(o, _)| *o != offset);
                if list.is_empty() {
                    self.copies.remove(&identity);
                }
            }
        }
    }

    /// Counts the input record at `offset` (in the range, not in the output) as dead-lettered or
    /// skipped when the filter let it past on purpose ([`super::rules::Diverted`]); false when
    /// it did not.
    fn divert(&mut self, offset: i64, clock: i64) -> bool {
        let diverted = &self.rules.diverted;
        if let Some(d) = diverted.dead_letters.get(&offset) {
            self.report.dead_lettered.add(DeadLettered {
                input_offset: offset,
                reason: d.reason.clone(),
                dead_letter_partition: d.partition,
                dead_letter_offset: d.offset,
            });
            true
        } else if diverted.skips.contains(&offset) {
            self.report.skipped.add(Skipped {
                input_offset: offset,
                clock_ms: clock,
            });
            true
        } else {
            false
        }
    }

    /// Whether the filter let the input record at `offset` past on purpose.
    fn diverted(&self, offset: i64) -> bool {
        let diverted = &self.rules.diverted;
        diverted.dead_letters.contains_key(&offset) || diverted.skips.contains(&offset)
    }

    /// An input record no output record was matched to. One let past on purpose is counted so
    /// and is no copy of its event (the filter learns no fingerprint of it: a replay of it is
    /// forwarded).
    fn finalize(&mut self, e: Entry) {
        if e.audited && self.divert(e.offset, e.clock) {
            return;
        }
        let Identity::Fingerprint(fp) = e.identity else {
            if e.audited {
                self.report.lost.add(Lost {
                    input_offset: e.offset,
                    fingerprint: None,
                    clock_ms: e.clock,
                });
            }
            return;
        };
        if !e.audited {
            // Before the range: presumed forwarded, so its replays in the range are replays.
            self.add_copy(e.identity, e.offset, e.clock);
            return;
        }
        if self.excused(&e) {
            self.report.replays += 1;
            return;
        }
        self.report.lost.add(Lost {
            input_offset: e.offset,
            fingerprint: Some(fp.to_string()),
            clock_ms: e.clock,
        });
        // Its replays are replays of a lost event, not more lost events.
        self.add_copy(e.identity, e.offset, e.clock);
    }

    /// A copy of `e`'s event counts for it: less than H_max before it, or forwarded less than
    /// H_min after it (only forwarded copies are known after it when it settles).
    fn excused(&self, e: &Entry) -> bool {
        self.copies.get(&e.identity).is_some_and(|list| {
            list.iter().any(|(offset, clock)| {
                (*offset < e.offset && e.clock.saturating_sub(*clock) < self.h_max())
                    || (*offset > e.offset && clock.saturating_sub(e.clock) < self.h_min())
            })
        })
    }

    /// Once the input has ended: true when the input holds nothing past the range (no output
    /// record can copy input the walk did not read).
    fn nothing_past_range(&self) -> bool {
        self.in_done && !self.past_range_read && self.rules.bounds.to_offset >= self.rules.input_end
    }

    /// Once the input has ended: true when the rest of the output is past the range: every
    /// unsettled input record is matched or a replay of an earlier copy, and the output clock is
    /// H_max past the input's (no copy of a record of the range is expected so late). Checked
    /// every 256 output records.
    fn output_can_stop(&mut self) -> bool {
        if !self.in_done || self.since_check < 256 || self.nothing_past_range() {
            return false;
        }
        self.since_check = 0;
        let out = self.out_clock.unwrap_or(0);
        let input = self.in_clock.unwrap_or(0);
        out >= input.saturating_add(self.h_max())
            && self.window.iter().all(|e| {
                e.matched.is_some()
                    || !e.audited
                    || self.diverted(e.offset)
                    || (matches!(e.identity, Identity::Fingerprint(_))
                        && self.copies.get(&e.identity).is_some_and(|list| {
                            list.iter()
                                .any(|(o, c)| *o < e.offset && e.clock.saturating_sub(*c) < self.h_max())
                        }))
            })
    }

    fn finish(mut self) -> PartitionAudit {
        self.settle(i64::MAX);
        // `pending`: unexpected records after the last one matched to the range. They may copy
        // input past it, unless there is none.
        let pending = std::mem::take(&mut self.pending);
        if self.nothing_past_range() {
            self.report.unexpected.absorb(pending);
        } else {
            self.report.not_judged_after_range = pending.count;
        }
        self.report
    }
}

fn fingerprint_text(identity: &Identity) -> Option<String> {
    match identity {
        Identity::Fingerprint(f) => Some(f.to_string()),
        Identity::Unfingerprintable(_) => None,
    }
}

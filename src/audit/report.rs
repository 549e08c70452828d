//! The audit's answer: the types `--json` prints, and the text for people.

use std::io::{self, Write};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::core::{
    DeadLettered, Duplicate, DuplicateRule, Horizon, Lost, OutOfOrder, PartitionAudit, Repeat, Skipped, Unexpected,
    UnexpectedReason, REPEATS_WITHIN,
};
use crate::config::Config;

/// The whole audit (`kafka-dedup audit --json`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Report {
    /// The input topic.
    pub input_topic: String,
    /// The output topic.
    pub output_topic: String,
    /// `fingerprint.source`.
    pub fingerprint_source: String,
    /// `fingerprint.on_missing`.
    pub on_missing: String,
    /// `fingerprint.dead_letter_topic`, read for the records put aside there; `None` when not set.
    #[serde(default)]
    pub dead_letter_topic: Option<String>,
    /// `input.skip`, as configured (empty: none): the records let past on purpose.
    #[serde(default)]
    pub input_skip: String,
    /// The horizon measured with: H_min and H_max in ms.
    pub horizon: Horizon,
    /// True when no partition has a finding (exit code 0).
    pub clean: bool,
    /// Sums over the partitions.
    pub totals: Totals,
    /// One per audited input partition, ascending.
    pub partitions: Vec<PartitionReport>,
}

/// Sums over the partitions (see [`PartitionAudit`] for each).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Totals {
    /// Input records in the ranges.
    pub input_records: u64,
    /// ... found in the output.
    pub forwarded: u64,
    /// ... rightly not in the output: replays.
    pub replays: u64,
    /// ... without fingerprint that `on_missing` does not forward.
    pub not_forwardable: u64,
    /// ... let past with `input.skip` (not a finding).
    #[serde(default)]
    pub skipped: u64,
    /// ... put aside in the dead-letter topic (not a finding).
    #[serde(default)]
    pub dead_lettered: u64,
    /// Output records read.
    pub output_records: u64,
    /// ... of which carry provenance.
    pub output_with_provenance: u64,
    /// Duplicates found.
    pub duplicates: u64,
    /// Lost records found.
    pub lost: u64,
    /// Records out of order found.
    pub out_of_order: u64,
    /// Unexpected records found.
    pub unexpected: u64,
    /// Repeats outside the horizon: identical records forwarded H_max or more apart (the
    /// filter's rule, not a finding).
    pub repeats_outside_horizon: u64,
}

/// One partition: its range and its audit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct PartitionReport {
    /// What was read and found.
    #[serde(flatten)]
    pub audit: PartitionAudit,
    /// The range judged, and what was read around it.
    pub range: Range,
    /// True when output records carry the broker's append time (`LogAppendTime`) instead of the
    /// input record's: the output clock then runs later than the input's (see the README).
    pub output_log_append_time: bool,
}

/// Where a partition's range came from (see `audit::read`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Range {
    /// First input offset read (the lead-in starts here).
    pub input_read_from: i64,
    /// Input records judged: offsets from here ...
    pub from_offset: i64,
    /// ... up to here (exclusive) ...
    pub to_offset: i64,
    /// ... where `to_offset` comes from ...
    pub to: UpperBound,
    /// ... and input clock from this time on (ms since the Unix epoch; `None`: unbounded) ...
    pub since_ms: Option<i64>,
    /// ... where `since_ms` comes from ...
    pub since: LowerBound,
    /// ... and before this time (`--until`).
    pub until_ms: Option<i64>,
    /// First output offset read.
    pub output_read_from: i64,
    /// The output's end (high watermark) when the partition's audit began.
    pub output_end: i64,
    /// The input's end (high watermark) when the partition's audit began, read after the
    /// output's: input records from `to_offset` to here are past the range, not judged.
    #[serde(default)]
    pub input_end: i64,
}

/// Where the upper offset bound comes from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum UpperBound {
    /// `--to-offset`.
    ToOffset,
    /// The offset `input.group_id` committed: what the filter checkpointed.
    Committed,
    /// The end of the input partition when the audit began (nothing committed).
    End,
}

/// Where the lower time bound comes from.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum LowerBound {
    /// None.
    None,
    /// `--since`.
    Since,
    /// Raised where a topic lost its oldest records, or the filter started at the end.
    Retention,
}

impl Report {
    /// An empty report for `cfg`'s topics.
    pub fn new(cfg: &Config, horizon: Horizon) -> Self {
        Report {
            input_topic: cfg.input.topic.clone(),
            output_topic: cfg.output.topic.clone(),
            fingerprint_source: cfg.fingerprint.identity().to_string(),
            on_missing: cfg.fingerprint.on_missing.as_str().to_string(),
            dead_letter_topic: Some(cfg.fingerprint.dead_letter_topic.clone()).filter(|t| !t.is_empty()),
            input_skip: cfg.input.skip.trim().to_string(),
            horizon,
            clean: true,
            totals: Totals::default(),
            partitions: Vec::new(),
        }
    }

    /// Adds a partition's audit.
    pub fn add(&mut self, p: PartitionReport) {
        let a = &p.audit;
        let t = &mut self.totals;
        t.input_records += a.input_records;
        t.forwarded += a.forwarded;
        t.replays += a.replays;
        t.not_forwardable += a.not_forwardable;
        t.skipped += a.skipped.count;
        t.dead_lettered += a.dead_lettered.count;
        t.output_records += a.output_records;
        t.output_with_provenance += a.output_with_provenance;
        t.duplicates += a.duplicates.count;
        t.lost += a.lost.count;
        t.out_of_order += a.out_of_order.count;
        t.unexpected += a.unexpected.count;
        t.repeats_outside_horizon += a.repeats_outside_horizon.count;
        self.clean &= a.clean();
        self.partitions.push(p);
    }

    /// Writes the report as indented JSON.
    pub fn write_json(&self, out: &mut impl Write) -> io::Result<()> {
        serde_json::to_writer_pretty(&mut *out, self).map_err(io::Error::from)?;
        writeln!(out)
    }

    /// Writes the report as text: a header, per partition its range, counts and findings (the
    /// examples), and a verdict.
    pub fn write_text(&self, out: &mut impl Write) -> io::Result<()> {
        writeln!(
            out,
            "audit {} -> {}: fingerprint source {}, on_missing {}; a replay less than {} (H_min) after the \
             forwarded copy must have been dropped, a repeat {} (H_max) or more after it must have been forwarded",
            self.input_topic,
            self.output_topic,
            self.fingerprint_source,
            self.on_missing,
            duration(self.horizon.min_ms),
            duration(self.horizon.max_ms)
        )?;
        if self.dead_letter_topic.is_some() || !self.input_skip.is_empty() {
            writeln!(
                out,
                "let past on purpose, not lost: {}; {}",
                self.dead_letter_topic.as_deref().map_or_else(
                    || "no dead-letter topic".to_string(),
                    |t| format!("what the dead-letter topic {t} holds")
                ),
                if self.input_skip.is_empty() {
                    "no input.skip".to_string()
                } else {
                    format!("input.skip = \"{}\"", self.input_skip)
                }
            )?;
        }
        for p in &self.partitions {
            write_partition(out, p, self.horizon)?;
        }
        let t = &self.totals;
        writeln!(
            out,
            "{}: {} partition(s), {} input records judged ({} forwarded, {} replay(s), {} not forwardable, \
             {} skipped, {} dead-lettered), {} output records; {} duplicate(s), {} lost, {} out of order, {} unexpected",
            match (self.clean, t.input_records) {
                (false, _) => "NOT CLEAN",
                (true, 0) => "NOTHING JUDGED (nothing found, but no input record was in the range)",
                (true, _) => "CLEAN",
            },
            self.partitions.len(),
            t.input_records,
            t.forwarded,
            t.replays,
            t.not_forwardable,
            t.skipped,
            t.dead_lettered,
            t.output_records,
            t.duplicates,
            t.lost,
            t.out_of_order,
            t.unexpected
        )?;
        if t.repeats_outside_horizon > 0 {
            writeln!(
                out,
                "{} repeats outside the horizon: identical records forwarded {} (H_max) or more apart. That is \
                 the filter's rule (a repeat that late is taken for a new event), not a failure; if they are \
                 replays, the upstream replays from further back than the horizon: raise checkpoint.interval \
                 or checkpoint.generations (docs/guarantee.md). Repeats are looked for up to {} apart",
                t.repeats_outside_horizon,
                duration(self.horizon.max_ms),
                duration(self.horizon.max_ms.saturating_mul(REPEATS_WITHIN))
            )?;
        }
        Ok(())
    }
}

fn duration(ms: i64) -> String {
    humantime::format_duration(Duration::from_millis(ms.max(0) as u64)).to_string()
}

fn time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

/// A partition's word in the text report: `NOT CLEAN` with a finding, `clean` without one, and
/// `nothing judged` when no input record was in its range (a new user read `clean` there as a
/// verdict on records the audit had not judged yet).
fn partition_verdict(clean: bool, judged: u64) -> &'static str {
    match (clean, judged) {
        (false, _) => "NOT CLEAN",
        (true, 0) => "nothing judged",
        (true, _) => "clean",
    }
}

fn write_partition(out: &mut impl Write, p: &PartitionReport, horizon: Horizon) -> io::Result<()> {
    let (a, r) = (&p.audit, &p.range);
    let to = match r.to {
        UpperBound::ToOffset => "--to-offset",
        UpperBound::Committed => "the group's committed offset",
        UpperBound::End => "the end",
    };
    let mut judged = format!("input offsets [{}, {}) (to: {to})", r.from_offset, r.to_offset);
    if let Some(s) = r.since_ms {
        let why = match r.since {
            LowerBound::Retention => " (raised: the topics' oldest records are gone, or the filter started late)",
            _ => "",
        };
        judged.push_str(&format!(", from {}{why}", time(s)));
    }
    if let Some(u) = r.until_ms {
        judged.push_str(&format!(", before {}", time(u)));
    }
    writeln!(
        out,
        "partition {}: {}: {} records, read from offset {}; output read from offset {}: {} records ({} with provenance)",
        a.partition,
        judged,
        a.input_records,
        r.input_read_from,
        r.output_read_from,
        a.output_records,
        a.output_with_provenance
    )?;
    writeln!(
        out,
        "  {} forwarded, {} replay(s), {} not forwardable, {} skipped, {} dead-lettered; {}{}",
        a.forwarded,
        a.replays,
        a.not_forwardable,
        a.skipped.count,
        a.dead_lettered.count,
        partition_verdict(a.clean(), a.input_records),
        match a.repeats_outside_horizon.count {
            0 => String::new(),
            n => format!("; {n} repeats outside the horizon"),
        }
    )?;
    if r.to == UpperBound::Committed && r.to_offset < r.input_end {
        writeln!(
            out,
            "  input offsets [{}, {}) are past the range, not judged: the filter has not checkpointed them yet \
             (it commits what it took at each checkpoint, every {} = checkpoint.interval); audit again after the \
             next one (a halted partition commits no further: its /readyz says why)",
            r.to_offset,
            r.input_end,
            duration(horizon.max_ms.saturating_sub(horizon.min_ms)),
        )?;
    }
    if a.not_judged_after_range > 0 {
        writeln!(
            out,
            "  {} output records after the last one matched to the range copy no input record read: not judged \
             (they may copy input past the range)",
            a.not_judged_after_range
        )?;
    }
    if p.output_log_append_time {
        writeln!(
            out,
            "  note: the output topic stamps records with their append time (LogAppendTime), not the input's: \
             the audit's reading ahead and its memory grow with that lag"
        )?;
    }
    for d in &a.duplicates.examples {
        write_duplicate(out, d)?;
    }
    more(out, a.duplicates.count, a.duplicates.examples.len(), "duplicates")?;
    for l in &a.lost.examples {
        write_lost(out, l)?;
    }
    more(out, a.lost.count, a.lost.examples.len(), "lost records")?;
    for o in &a.out_of_order.examples {
        write_order(out, o)?;
    }
    more(
        out,
        a.out_of_order.count,
        a.out_of_order.examples.len(),
        "records out of order",
    )?;
    for u in &a.unexpected.examples {
        write_unexpected(out, u)?;
    }
    more(
        out,
        a.unexpected.count,
        a.unexpected.examples.len(),
        "unexpected records",
    )?;
    for s in &a.skipped.examples {
        write_skipped(out, s)?;
    }
    more(out, a.skipped.count, a.skipped.examples.len(), "skipped records")?;
    for d in &a.dead_lettered.examples {
        write_dead_lettered(out, d)?;
    }
    more(
        out,
        a.dead_lettered.count,
        a.dead_lettered.examples.len(),
        "dead-lettered records",
    )?;
    for r in &a.repeats_outside_horizon.examples {
        write_repeat(out, r)?;
    }
    more(
        out,
        a.repeats_outside_horizon.count,
        a.repeats_outside_horizon.examples.len(),
        "repeats outside the horizon",
    )
}

fn more(out: &mut impl Write, count: u64, shown: usize, what: &str) -> io::Result<()> {
    if count > shown as u64 {
        writeln!(out, "  ... {} more {what}", count - shown as u64)?;
    }
    Ok(())
}

fn fingerprint(f: &Option<String>) -> String {
    f.as_deref()
        .map_or("without fingerprint".to_string(), |f| format!("fingerprint {f}"))
}

fn write_duplicate(out: &mut impl Write, d: &Duplicate) -> io::Result<()> {
    let why = match d.rule {
        DuplicateRule::SameInputRecord => format!(
            "copies input offset {} again",
            d.input_offset.map_or("?".to_string(), |o| o.to_string())
        ),
        DuplicateRule::Fingerprint => "less than H_min after it on the output clock".to_string(),
    };
    writeln!(
        out,
        "  DUPLICATE output offset {} repeats output offset {} ({}): {why}",
        d.output_offset,
        d.repeats_output_offset,
        fingerprint(&d.fingerprint)
    )
}

fn write_repeat(out: &mut impl Write, r: &Repeat) -> io::Result<()> {
    writeln!(
        out,
        "  REPEAT output offset {} repeats output offset {} (fingerprint {}, input offset {}), {} later on the \
         output clock: outside the horizon, forwarded by the filter's rule",
        r.output_offset,
        r.repeats_output_offset,
        r.fingerprint,
        r.input_offset,
        duration(r.apart_ms)
    )
}

fn write_lost(out: &mut impl Write, l: &Lost) -> io::Result<()> {
    writeln!(
        out,
        "  LOST input offset {} ({}, input clock {}): not in the output, and no copy of it forwarded within the horizon",
        l.input_offset,
        fingerprint(&l.fingerprint),
        time(l.clock_ms)
    )
}

fn write_skipped(out: &mut impl Write, s: &Skipped) -> io::Result<()> {
    writeln!(
        out,
        "  SKIPPED input offset {} (input clock {}): named in input.skip, let past on purpose (not lost)",
        s.input_offset,
        time(s.clock_ms)
    )
}

fn write_dead_lettered(out: &mut impl Write, d: &DeadLettered) -> io::Result<()> {
    writeln!(
        out,
        "  DEAD-LETTERED input offset {} ({}): in the dead-letter topic, partition {} offset {} (not lost)",
        d.input_offset, d.reason, d.dead_letter_partition, d.dead_letter_offset
    )
}

fn write_order(out: &mut impl Write, o: &OutOfOrder) -> io::Result<()> {
    writeln!(
        out,
        "  OUT OF ORDER output offset {} copies input offset {}, after output offset {} copied input offset {}",
        o.output_offset, o.input_offset, o.after_output_offset, o.after_input_offset
    )
}

fn write_unexpected(out: &mut impl Write, u: &Unexpected) -> io::Result<()> {
    let why = match u.reason {
        UnexpectedReason::NoSuchInputRecord => "no input record near it has its fingerprint (or bytes)".to_string(),
        UnexpectedReason::OtherPartition { partition } => {
            format!("its provenance names input partition {partition}")
        }
        UnexpectedReason::NotForwardable { input_offset } => {
            format!("its provenance names input offset {input_offset}, which holds no record the filter forwards")
        }
        UnexpectedReason::Differs { input_offset } => {
            format!("its provenance names input offset {input_offset}, which holds another record")
        }
    };
    writeln!(out, "  UNEXPECTED output offset {}: {why}", u.output_offset)
}

#[cfg(test)]
mod tests {
    use super::partition_verdict;

    #[test]
    fn a_partition_without_records_judged_is_not_called_clean() {
        for (clean, judged, word) in [
            (true, 0, "nothing judged"),
            (true, 5, "clean"),
            (false, 0, "NOT CLEAN"),
            (false, 5, "NOT CLEAN"),
        ] {
            assert_eq!(partition_verdict(clean, judged), word, "{clean} {judged}");
        }
    }
}

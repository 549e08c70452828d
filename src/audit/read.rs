//! The Kafka side of the audit: where each partition's range begins and ends, and the two record
//! streams [`audit_partition`] walks. Partitions are audited one after another, each with one
//! reader on its input partition and one on its output partition (consumers outside the group
//! that never commit, [`kafka::reader_config`]), so memory holds one partition's window at a time.
//!
//! # Where the range begins and ends (per input partition)
//!
//! - Judged input: offsets `[from, to)` and input clock `[since, until)` ([`Bounds`]). `from`:
//!   `--from-offset`, else the log start. `to`: `--to-offset`, else the offset the consumer
//!   group `input.group_id` committed (what the filter has checkpointed: later records may not
//!   have been forwarded yet), else the end; never past the end as of the start of the audit.
//!   `since`/`until`: `--since`/`--until`.
//! - Where a topic lost its oldest records (log start above 0: retention), or the filter started
//!   at the end (`input.start = "latest"`), the range starts no earlier than the first output
//!   record's time and, for the input, H_max after its first record: the first copies of the
//!   replays at the start of what remains are gone, so nothing could tell them from lost records.
//! - The lead-in: the input is read from H_max (of record time) before the range, the output
//!   from 2 x H_max before it (ListOffsets by timestamp, each answer checked against the records
//!   there: a broker that answers wrongly costs a read from the log start, never a record).
//! - The output is read to its end as of the start of the audit (read before the input's end,
//!   so every output record read copies input before that end), or, when the input goes on past
//!   the range and once every input record of the range is accounted for, until its clock is
//!   H_max past the range ([`audit_partition`]).
//!
//! Every partition's range is resolved first; then `fingerprint.dead_letter_topic`, when set, is
//! read once, whole (`dead_letters`), for the copies of input records of those ranges, and
//! `input.skip` is parsed: the records the filter let past on purpose ([`Diverted`]), which each
//! partition's walk counts as dead-lettered or skipped instead of lost.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Timestamp};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::core::{audit_partition, AuditRecord, Bounds, DeadLetter, Diverted, Horizon, Rules};
use super::report::{LowerBound, PartitionReport, Range, Report, UpperBound};
use super::AuditError;
use crate::config::{Config, Partitioning, Start};
use crate::fingerprint::Fingerprinter;
use crate::kafka::{self, Reader, ReaderContext, TopicError};
use crate::record::RecordFields;

/// Timeout of one request to the brokers (metadata, offsets, one record).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A stream that receives nothing for this long (neither a record nor its end) fails.
const STALL_TIMEOUT: Duration = Duration::from_secs(120);
/// How often the progress line is printed.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Poll errors tolerated per stream before the audit fails.
const MAX_ERRORS: u32 = 20;
/// librdkafka's prefetch queue per reader (`queued.max.messages.kbytes`, overridable under
/// `[kafka.properties]`): part of the memory bound.
const PREFETCH_KBYTES: &str = "16384";
/// How long a broker may hold a fetch of a caught-up partition (`fetch.wait.max.ms`, overridable;
/// librdkafka: 500): each partition's range is found by reading single records, and a reader
/// moved to another partition waits for the fetch in flight first.
const FETCH_WAIT_MS: &str = "100";

/// What to audit: the command line resolved against the wall clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// `--from-offset`.
    pub from_offset: Option<i64>,
    /// `--to-offset`.
    pub to_offset: Option<i64>,
    /// `--since`, ms since the Unix epoch.
    pub since_ms: Option<i64>,
    /// `--until`, ms since the Unix epoch.
    pub until_ms: Option<i64>,
    /// `--partition`; empty: all input partitions.
    pub partitions: Vec<i32>,
    /// The wall clock at the start, ms since the Unix epoch.
    pub now_ms: i64,
}

/// Audits `cfg`'s input and output topics as `request` says; progress goes to stderr every
/// [`PROGRESS_EVERY`]. Errors: configuration the audit cannot check (`key` partitioning), topics
/// missing or too small, a partition that does not exist, Kafka failures.
pub fn audit(cfg: &Config, request: &Request) -> Result<Report, AuditError> {
    if cfg.output.partitioning != Partitioning::Preserve {
        return Err(AuditError::KeyPartitioning);
    }
    if let Some(mut stage) = cfg.filter_stage() {
        // The global scope: the filter stage is audited (the route topic is its input; the
        // route stage's re-copies of an input record are recognised by their provenance, as
        // the filter stage drops them: `global::copy_fate`).
        stage.fingerprint.scope = crate::config::Scope::Partition;
        return audit(&stage, request);
    }
    let horizon = Horizon::of(&cfg.checkpoint);
    let meta = reader(cfg)?;
    let count = |topic: &str, key: &'static str| -> Result<usize, AuditError> {
        kafka::partition_count(meta.client(), topic, REQUEST_TIMEOUT)?.ok_or_else(|| {
            AuditError::Topics(TopicError::Missing {
                topic: topic.to_string(),
                key,
            })
        })
    };
    let inputs = count(&cfg.input.topic, "input.topic")?;
    let outputs = count(&cfg.output.topic, "output.topic")?;
    let partitions = partitions_to_audit(
        &request.partitions,
        (&cfg.input.topic, inputs),
        (&cfg.output.topic, outputs),
    )?;
    let committed = committed(&meta, cfg, &partitions)?;
    let fingerprinter = Fingerprinter::of_config(&cfg.fingerprint)?;
    let (input_reader, output_reader) = (reader(cfg)?, reader(cfg)?);
    let plans = partitions
        .iter()
        .map(|p| {
            Ok((
                *p,
                plan(&meta, cfg, request, horizon, *p, committed.get(p).copied().flatten())?,
            ))
        })
        .collect::<Result<Vec<_>, AuditError>>()?;
    let mut dead_letters = dead_letters(cfg, &plans)?;
    // Validated when the configuration was loaded.
    let skips = crate::config::parse_skips(&cfg.input.skip).unwrap_or_default();
    let progress = Progress::new(partitions.len());
    let mut report = Report::new(cfg, horizon);
    for (i, (p, plan)) in plans.into_iter().enumerate() {
        let rules = Rules {
            partition: p,
            horizon,
            on_missing: cfg.fingerprint.on_missing,
            bounds: plan.bounds,
            now_ms: request.now_ms,
            input_end: plan.range.input_end,
            diverted: Diverted {
                skips: skips.iter().filter(|(q, _)| *q == p).map(|(_, o)| *o).collect(),
                dead_letters: dead_letters.remove(&p).unwrap_or_default(),
            },
        };
        progress.start(
            p,
            i,
            (plan.range.input_read_from, plan.range.to_offset),
            (plan.range.output_read_from, plan.range.output_end),
        );
        let log_append_time = Cell::new(false);
        let input = Stream::open(
            &input_reader,
            &cfg.input.topic,
            p,
            plan.range.input_read_from,
            plan.range.to_offset,
            Side::Input {
                routed_from: cfg.input.routed_from.as_deref(),
            },
            &fingerprinter,
            &progress,
            &log_append_time,
        )?;
        let output = Stream::open(
            &output_reader,
            &cfg.output.topic,
            p,
            plan.range.output_read_from,
            plan.range.output_end,
            Side::Output {
                input_topic: &cfg.input.topic,
            },
            &fingerprinter,
            &progress,
            &log_append_time,
        )?;
        let audit = audit_partition(&rules, input, output)?;
        report.add(PartitionReport {
            audit,
            range: plan.range,
            output_log_append_time: log_append_time.get(),
        });
    }
    Ok(report)
}

/// The copies in `fingerprint.dead_letter_topic` (none when it is not set, or the topic does not
/// exist) of the input records `plans` read, by input partition and input offset: every
/// partition of the topic is read from its log start to its end as of now (read_committed), and
/// a record is taken when its provenance (`kafka-dedup.source`, the last naming the input topic)
/// names an input partition planned, at an offset in `[input_read_from, to_offset)`. Its reason
/// is its last `kafka-dedup.reason` header; copies with the reason `duplicate` (a duplicates
/// topic shared with the dead letters) are left out: the walk judges replays itself. The first
/// copy of an input record is kept. Memory: one map entry (about 100 B) per copy taken; the
/// topic's other records are only read. Errors: Kafka failures, a partition that stalls.
fn dead_letters(cfg: &Config, plans: &[(i32, Plan)]) -> Result<BTreeMap<i32, BTreeMap<i64, DeadLetter>>, AuditError> {
    let mut found: BTreeMap<i32, BTreeMap<i64, DeadLetter>> = BTreeMap::new();
    let topic = cfg.fingerprint.dead_letter_topic.as_str();
    if topic.is_empty() || plans.is_empty() {
        return Ok(found);
    }
    let wanted: BTreeMap<i32, (i64, i64)> = plans
        .iter()
        .map(|(p, plan)| (*p, (plan.range.input_read_from, plan.range.to_offset)))
        .collect();
    let r = reader(cfg)?;
    let Some(n) = kafka::partition_count(r.client(), topic, REQUEST_TIMEOUT)? else {
        return Ok(found);
    };
    // Per dead-letter partition: (the next offset expected, its end).
    let mut open: BTreeMap<i32, (i64, i64)> = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for q in 0..n.min(i32::MAX as usize) as i32 {
        let (low, high) = r.fetch_watermarks(topic, q, REQUEST_TIMEOUT)?;
        if low < high {
            tpl.add_partition_offset(topic, q, Offset::Offset(low))?;
            open.insert(q, (low, high));
        }
    }
    if open.is_empty() {
        return Ok(found);
    }
    r.assign(&tpl)?;
    let (mut last, mut errors) = (Instant::now(), 0);
    while let Some((&q, &(next, _))) = open.iter().next() {
        match r.poll(Duration::from_millis(200)) {
            Some(Ok(m)) if m.topic() == topic => {
                last = Instant::now();
                let q = m.partition();
                let Some(&(_, end)) = open.get(&q) else { continue };
                if m.offset() >= end {
                    open.remove(&q);
                    continue;
                }
                if let Some(src) = crate::provenance::Provenance::of(&m, &cfg.input.topic) {
                    let in_range = wanted
                        .get(&src.partition)
                        .is_some_and(|(from, to)| (*from..*to).contains(&src.offset));
                    let mut reason = None;
                    m.for_each_header(crate::provenance::REASON_HEADER.as_bytes(), &mut |v| {
                        reason = Some(v.map_or_else(String::new, |v| String::from_utf8_lossy(v).into_owned()));
                    });
                    let reason = reason.filter(|r| !r.is_empty()).unwrap_or_else(|| "?".to_string());
                    if in_range && reason != "duplicate" {
                        found
                            .entry(src.partition)
                            .or_default()
                            .entry(src.offset)
                            .or_insert(DeadLetter {
                                reason,
                                partition: q,
                                offset: m.offset(),
                            });
                    }
                }
                if m.offset() + 1 >= end {
                    open.remove(&q);
                } else {
                    open.insert(q, (m.offset() + 1, end));
                }
            }
            Some(Ok(_)) => {}
            Some(Err(KafkaError::PartitionEOF(q))) => {
                open.remove(&q);
            }
            Some(Err(e)) => {
                errors += 1;
                if errors > MAX_ERRORS {
                    return Err(e.into());
                }
            }
            None => {
                if last.elapsed() > STALL_TIMEOUT {
                    return Err(AuditError::Stalled {
                        topic: topic.to_string(),
                        partition: q,
                        offset: next,
                        seconds: STALL_TIMEOUT.as_secs(),
                    });
                }
            }
        }
    }
    Ok(found)
}

/// The input partitions to audit, ascending: `requested` (`--partition`, deduplicated), or every
/// partition of the input when it is empty. `input` and `output` are each topic's name and
/// partition count. Errors, in this order: a requested partition the input does not have
/// ([`AuditError::NoSuchPartition`]: what was asked for is wrong, whatever the output has); an
/// input partition to audit without its output partition ([`AuditError::TooFewOutputPartitions`]).
pub fn partitions_to_audit(
    requested: &[i32],
    input: (&str, usize),
    output: (&str, usize),
) -> Result<Vec<i32>, AuditError> {
    let (inputs, outputs) = (input.1, output.1);
    let mut partitions: Vec<i32> = if requested.is_empty() {
        (0..inputs.min(i32::MAX as usize) as i32).collect()
    } else {
        requested.to_vec()
    };
    partitions.sort_unstable();
    partitions.dedup();
    if let Some(bad) = partitions.iter().find(|p| **p < 0 || **p as usize >= inputs) {
        return Err(AuditError::NoSuchPartition {
            partition: *bad,
            topic: input.0.to_string(),
            partitions: inputs,
        });
    }
    if partitions.iter().any(|p| *p as usize >= outputs) {
        return Err(AuditError::TooFewOutputPartitions {
            input: input.0.to_string(),
            input_partitions: inputs,
            output: output.0.to_string(),
            output_partitions: outputs,
        });
    }
    Ok(partitions)
}

/// A reader for the audit: [`kafka::reader_config`] with the audit's defaults
/// ([`PREFETCH_KBYTES`], [`FETCH_WAIT_MS`]).
fn reader(cfg: &Config) -> Result<Reader, AuditError> {
    let mut c = kafka::reader_config(cfg);
    for (key, value) in [
        ("queued.max.messages.kbytes", PREFETCH_KBYTES),
        ("fetch.wait.max.ms", FETCH_WAIT_MS),
    ] {
        if c.get(key).is_none() {
            c.set(key, value);
        }
    }
    Ok(c.create_with_context(ReaderContext)?)
}

/// The offsets `input.group_id` committed on `partitions` of the input topic (`None`: none).
fn committed(meta: &Reader, cfg: &Config, partitions: &[i32]) -> Result<BTreeMap<i32, Option<i64>>, AuditError> {
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition(&cfg.input.topic, *p);
    }
    let got = meta.committed_offsets(tpl, REQUEST_TIMEOUT)?;
    Ok(partitions
        .iter()
        .map(|p| {
            let offset = got.find_partition(&cfg.input.topic, *p).and_then(|e| match e.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            });
            (*p, offset)
        })
        .collect())
}

/// A partition's range, resolved.
struct Plan {
    bounds: Bounds,
    range: Range,
}

/// Resolves where partition `p`'s range begins and ends (see the module documentation).
fn plan(
    meta: &Reader,
    cfg: &Config,
    request: &Request,
    horizon: Horizon,
    p: i32,
    committed: Option<i64>,
) -> Result<Plan, AuditError> {
    let (input, output) = (cfg.input.topic.as_str(), cfg.output.topic.as_str());
    // The output's end first: whatever the filter forwarded before it copies input before the
    // input's end read after it (the walk's `Rules::input_end`).
    let (out_low, out_high) = meta.fetch_watermarks(output, p, REQUEST_TIMEOUT)?;
    let (in_low, in_high) = meta.fetch_watermarks(input, p, REQUEST_TIMEOUT)?;
    let (to_offset, to) = match (request.to_offset, committed) {
        (Some(o), _) => (o, UpperBound::ToOffset),
        (None, Some(c)) => (c, UpperBound::Committed),
        (None, None) => (in_high, UpperBound::End),
    };
    let to_offset = to_offset.clamp(in_low, in_high);
    let from_offset = request.from_offset.unwrap_or(in_low).max(in_low);

    // The floor where records are gone, or the filter started at the end (each first record is
    // read only then: reading one can take a second on a slow broker).
    let mut floor = None;
    if in_low > 0 {
        floor = first_record(meta, input, p, in_low)?.map(|r| r.1.saturating_add(horizon.max_ms));
    }
    if out_low > 0 || cfg.input.start == Start::Latest {
        if let Some((_, t)) = first_record(meta, output, p, out_low)? {
            floor = Some(floor.map_or(t, |f: i64| f.max(t)));
        }
    }
    let (since_ms, since) = match (request.since_ms, floor) {
        (Some(s), Some(f)) if f > s => (Some(f), LowerBound::Retention),
        (Some(s), _) => (Some(s), LowerBound::Since),
        (None, Some(f)) => (Some(f), LowerBound::Retention),
        (None, None) => (None, LowerBound::None),
    };

    // Where the range begins in record time, for the lead-ins.
    let at_from = if from_offset > in_low {
        first_record(meta, input, p, from_offset)?.map(|r| r.1)
    } else {
        None
    };
    let start_ms = match (since_ms, at_from) {
        (Some(s), Some(f)) => Some(s.max(f)),
        (s, f) => s.or(f),
    };
    let (input_read_from, output_read_from) = match start_ms {
        None => (in_low, out_low),
        Some(t) => (
            // Never after an offset bound given (a record stamped earlier than the ones before it
            // would put the answer past it).
            offset_for_time(meta, input, p, t.saturating_sub(horizon.max_ms), (in_low, in_high))?
                .min(request.from_offset.unwrap_or(i64::MAX)),
            offset_for_time(
                meta,
                output,
                p,
                t.saturating_sub(horizon.max_ms.saturating_mul(2)),
                (out_low, out_high),
            )?,
        ),
    };
    let bounds = Bounds {
        from_offset,
        to_offset,
        since_ms: since_ms.unwrap_or(i64::MIN),
        until_ms: request.until_ms.unwrap_or(i64::MAX),
    };
    Ok(Plan {
        bounds,
        range: Range {
            input_read_from,
            from_offset,
            to_offset,
            to,
            since_ms,
            since,
            until_ms: request.until_ms,
            output_read_from,
            output_end: out_high,
            input_end: in_high,
        },
    })
}

/// The offset and timestamp of the first record of `topic`/`p` at or after `offset`; `None` when
/// there is none (the end) or it has no timestamp.
fn first_record(meta: &Reader, topic: &str, p: i32, offset: i64) -> Result<Option<(i64, i64)>, AuditError> {
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Offset(offset))?;
    meta.assign(&tpl)?;
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    let mut errors = 0;
    while Instant::now() < deadline {
        match meta.poll(Duration::from_millis(200)) {
            Some(Ok(m)) if m.topic() == topic && m.partition() == p && m.offset() >= offset => {
                return Ok(m.timestamp().to_millis().filter(|t| *t >= 0).map(|t| (m.offset(), t)));
            }
            Some(Err(KafkaError::PartitionEOF(q))) if q == p => return Ok(None),
            Some(Err(e)) => {
                errors += 1;
                if errors > MAX_ERRORS {
                    return Err(e.into());
                }
            }
            _ => {}
        }
    }
    Err(AuditError::Stalled {
        topic: topic.to_string(),
        partition: p,
        offset,
        seconds: REQUEST_TIMEOUT.as_secs(),
    })
}

/// The first offset of `topic`/`p` whose record is stamped at or after `t` (ms), by ListOffsets,
/// checked by [`checked_start`].
fn offset_for_time(meta: &Reader, topic: &str, p: i32, t: i64, (low, high): (i64, i64)) -> Result<i64, AuditError> {
    if t <= 0 || low >= high {
        return Ok(low);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Offset(t))?;
    let answer = meta
        .offsets_for_times(tpl, REQUEST_TIMEOUT)?
        .find_partition(topic, p)
        .map_or(Offset::Invalid, |e| e.offset());
    checked_start(t, (low, high), answer, |offset| first_record(meta, topic, p, offset))
}

/// Where to start reading for records stamped at or after `t`, given the broker's ListOffsets
/// `answer` and `probe` (the offset and timestamp of the first record at or after an offset).
/// An answer inside the log is taken when the record there is stamped at or after `t` and the
/// record before it (within [`PROBE_BACK`] offsets) earlier; an answer past the end (none stamped so late) when the last record is older
/// than `t`. Anything else gives the log start `low`: reading more is always safe (tansu 0.6
/// answers offset 0 for a time past its last record).
fn checked_start<E>(
    t: i64,
    (low, high): (i64, i64),
    answer: Offset,
    mut probe: impl FnMut(i64) -> Result<Option<(i64, i64)>, E>,
) -> Result<i64, E> {
    Ok(match answer {
        Offset::Offset(o) if o <= low => low,
        Offset::Offset(o) if o < high => {
            let stamped_after = probe(o)?.is_some_and(|(_, ts)| ts >= t);
            // The record before `o`: offsets without one (control records, compaction) are
            // skipped, up to a few; none found is no objection.
            let mut previous_before = true;
            for before in ((o - PROBE_BACK).max(low)..o).rev() {
                if let Some((at, ts)) = probe(before)? {
                    if at < o {
                        previous_before = ts < t;
                        break;
                    }
                }
            }
            if stamped_after && previous_before {
                o
            } else {
                low
            }
        }
        _ => {
            let last_older = probe(high - 1)?.is_some_and(|(_, ts)| ts < t);
            if last_older {
                high
            } else {
                low
            }
        }
    })
}

/// How many offsets [`checked_start`] looks back for the record before an answer.
const PROBE_BACK: i64 = 8;

/// Which topic a stream reads.
#[derive(Clone, Copy)]
enum Side<'a> {
    /// The input topic; in the global scope's filter stage (the route topic) the records'
    /// provenance names `routed_from`, the configured input topic.
    Input {
        /// Global scope: the input topic the route stage copied from.
        routed_from: Option<&'a str>,
    },
    /// The output topic; provenance headers name `input_topic`.
    Output {
        /// The input topic.
        input_topic: &'a str,
    },
}

/// One partition of a topic, read from a start offset to an end, as [`AuditRecord`]s.
struct Stream<'a> {
    consumer: &'a Reader,
    topic: &'a str,
    partition: i32,
    /// Records at or past this offset are not read.
    end: i64,
    side: Side<'a>,
    fingerprinter: &'a Fingerprinter,
    progress: &'a Progress,
    /// Set when an output record carries a log-append time.
    log_append_time: &'a Cell<bool>,
    done: bool,
    errors: u32,
    last_record: Instant,
    /// Global scope, the route topic: the highest input offset seen per input partition, to know
    /// the route stage's re-copies.
    high_water: crate::global::HighWater,
    /// The offset of the next record expected, for errors.
    next: i64,
}

impl<'a> Stream<'a> {
    #[allow(clippy::too_many_arguments)]
    fn open(
        consumer: &'a Reader,
        topic: &'a str,
        partition: i32,
        from: i64,
        end: i64,
        side: Side<'a>,
        fingerprinter: &'a Fingerprinter,
        progress: &'a Progress,
        log_append_time: &'a Cell<bool>,
    ) -> Result<Self, AuditError> {
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, partition, Offset::Offset(from))?;
        consumer.assign(&tpl)?;
        Ok(Stream {
            consumer,
            topic,
            partition,
            end,
            side,
            fingerprinter,
            progress,
            log_append_time,
            done: from >= end,
            errors: 0,
            last_record: Instant::now(),
            high_water: crate::global::HighWater::new(),
            next: from,
        })
    }

    fn record(&self, m: &BorrowedMessage<'_>) -> AuditRecord {
        let ts = m.timestamp();
        let millis = ts.to_millis();
        match self.side {
            Side::Input { .. } => AuditRecord::input(m, m.offset(), millis, self.fingerprinter),
            Side::Output { input_topic } => {
                if matches!(ts, Timestamp::LogAppendTime(_)) {
                    self.log_append_time.set(true);
                }
                AuditRecord::output(m, m.offset(), millis, self.fingerprinter, input_topic)
            }
        }
    }
}

impl Iterator for Stream<'_> {
    type Item = Result<AuditRecord, AuditError>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.done {
            self.progress.tick();
            match self.consumer.poll(Duration::from_millis(200)) {
                Some(Ok(m)) if m.topic() == self.topic && m.partition() == self.partition => {
                    self.last_record = Instant::now();
                    if m.offset() >= self.end {
                        self.done = true;
                        return None;
                    }
                    self.next = m.offset() + 1;
                    if let Side::Input {
                        routed_from: Some(from),
                    } = self.side
                    {
                        // A second copy the route stage made of an input record (after a crash
                        // of the route stage) is not another event: the filter stage drops it
                        // whatever its delay, and so does the audit.
                        let source = crate::provenance::Provenance::of(&m, from).map(|s| (s.partition, s.offset));
                        if crate::global::copy_fate(&self.high_water, source) == crate::global::CopyFate::Recopy {
                            self.progress.input(m.offset());
                            continue;
                        }
                        crate::global::note_taken(&mut self.high_water, source);
                    }
                    let r = self.record(&m);
                    match self.side {
                        Side::Input { .. } => self.progress.input(r.offset),
                        Side::Output { .. } => self.progress.output(r.offset),
                    }
                    return Some(Ok(r));
                }
                Some(Ok(_)) => {}
                Some(Err(KafkaError::PartitionEOF(q))) if q == self.partition => self.done = true,
                Some(Err(KafkaError::PartitionEOF(_))) => {}
                Some(Err(e)) => {
                    self.errors += 1;
                    tracing::warn!(topic = self.topic, partition = self.partition, error = %e, "error while reading");
                    if self.errors > MAX_ERRORS {
                        self.done = true;
                        return Some(Err(e.into()));
                    }
                }
                None => {
                    if self.last_record.elapsed() > STALL_TIMEOUT {
                        self.done = true;
                        return Some(Err(AuditError::Stalled {
                            topic: self.topic.to_string(),
                            partition: self.partition,
                            offset: self.next,
                            seconds: STALL_TIMEOUT.as_secs(),
                        }));
                    }
                }
            }
        }
        None
    }
}

/// The progress line on stderr, every [`PROGRESS_EVERY`] while a scan lasts.
struct Progress {
    /// Partitions to audit.
    partitions: usize,
    started: Instant,
    last: Cell<Instant>,
    partition: Cell<i32>,
    index: Cell<usize>,
    input_records: Cell<u64>,
    output_records: Cell<u64>,
    input_offset: Cell<i64>,
    output_offset: Cell<i64>,
    input_end: Cell<i64>,
    output_end: Cell<i64>,
}

impl Progress {
    fn new(partitions: usize) -> Self {
        Progress {
            partitions,
            started: Instant::now(),
            last: Cell::new(Instant::now()),
            partition: Cell::new(0),
            index: Cell::new(0),
            input_records: Cell::new(0),
            output_records: Cell::new(0),
            input_offset: Cell::new(0),
            output_offset: Cell::new(0),
            input_end: Cell::new(0),
            output_end: Cell::new(0),
        }
    }

    fn start(&self, partition: i32, index: usize, input: (i64, i64), output: (i64, i64)) {
        self.partition.set(partition);
        self.input_offset.set(input.0);
        self.output_offset.set(output.0);
        let (input_end, output_end) = (input.1, output.1);
        self.index.set(index);
        self.input_end.set(input_end);
        self.output_end.set(output_end);
    }

    fn input(&self, offset: i64) {
        self.input_records.set(self.input_records.get() + 1);
        self.input_offset.set(offset);
    }

    fn output(&self, offset: i64) {
        self.output_records.set(self.output_records.get() + 1);
        self.output_offset.set(offset);
    }

    fn tick(&self) {
        if self.last.get().elapsed() < PROGRESS_EVERY {
            return;
        }
        self.last.set(Instant::now());
        eprintln!(
            "kafka-dedup audit: partition {} ({} of {}): input offset {} of {}, output offset {} of {}; \
             {} input and {} output records read in {} s",
            self.partition.get(),
            self.index.get() + 1,
            self.partitions,
            self.input_offset.get(),
            self.input_end.get(),
            self.output_offset.get(),
            self.output_end.get(),
            self.input_records.get(),
            self.output_records.get(),
            self.started.elapsed().as_secs()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A partition of records at offsets 10.. stamped 1000, 2000, ... (offsets 13, 16 and 17
    /// control records: none there).
    fn probe(offset: i64) -> Result<Option<(i64, i64)>, ()> {
        let records = [(10, 1000), (11, 2000), (12, 3000), (14, 5000), (15, 6000), (18, 9000)];
        Ok(records.iter().copied().find(|(o, _)| *o >= offset))
    }

    #[test]
    fn listoffsets_answers_are_checked() {
        let log = (10, 19);
        #[rustfmt::skip]
        let rows = [
            (2500, Offset::Offset(12), 12, "right"),
            (2000, Offset::Offset(11), 11, "right, exactly stamped"),
            (4000, Offset::Offset(14), 14, "right, after a control record"),
            (500,  Offset::Offset(10), 10, "the log start"),
            (500,  Offset::Offset(0),  10, "below the log start"),
            (2500, Offset::Offset(14), 10, "too late: records skipped"),
            (2500, Offset::Offset(11), 10, "too early: the record there is older"),
            (6500, Offset::Offset(18), 18, "right, after two control records"),
            (5500, Offset::Offset(18), 10, "too late, past two control records"),
            (9500, Offset::End,        19, "past the last record (Kafka)"),
            (9500, Offset::Offset(0),  10, "past the last record (tansu 0.6): read all"),
            (8500, Offset::End,        10, "the end, but the last record is not older"),
            (2500, Offset::Invalid,    10, "no answer"),
        ];
        for (t, answer, want, why) in rows {
            assert_eq!(checked_start(t, log, answer, probe), Ok(want), "{why}");
        }
    }

    /// Issue 23, item 6: a `--partition` past the input's partitions is blamed on the input,
    /// whatever the output has; only partitions that exist in the input can lack an output one.
    #[test]
    fn the_partitions_to_audit() {
        /// Ok(partitions), or the error's kind: "no such" or "too few outputs".
        fn of(requested: &[i32], inputs: usize, outputs: usize) -> Result<Vec<i32>, &'static str> {
            partitions_to_audit(requested, ("in", inputs), ("out", outputs)).map_err(|e| match e {
                AuditError::NoSuchPartition { .. } => "no such",
                AuditError::TooFewOutputPartitions { .. } => "too few outputs",
                _ => "other",
            })
        }
        /// The partitions, or the error's kind.
        type Want = Result<Vec<i32>, &'static str>;
        #[rustfmt::skip]
        let rows: [(&[i32], usize, usize, Want); 10] = [
            (&[],        2, 2, Ok(vec![0, 1])),
            (&[],        2, 3, Ok(vec![0, 1])),
            (&[1, 0, 1], 2, 2, Ok(vec![0, 1])),
            (&[5],       2, 2, Err("no such")),
            (&[2],       2, 2, Err("no such")),
            (&[-1],      2, 2, Err("no such")),
            (&[5],       2, 1, Err("no such")),
            (&[],        3, 2, Err("too few outputs")),
            (&[2],       3, 2, Err("too few outputs")),
            (&[1],       3, 2, Ok(vec![1])),
        ];
        for (requested, inputs, outputs, want) in rows {
            assert_eq!(
                of(requested, inputs, outputs),
                want,
                "{requested:?} of {inputs} -> {outputs}"
            );
        }
    }
}

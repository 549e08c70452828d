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
//!
//! The rooms: this file runs the audit ([`audit`]); `read/plan.rs` resolves each partition's
//! range, `read/dead_letters.rs` reads the dead-letter topic, `read/stream.rs` the two record
//! streams and the progress line.

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

mod dead_letters;
mod plan;
mod stream;

use dead_letters::dead_letters;
use plan::*;
use stream::*;

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
        kafka::partition_count_for(meta.client(), key, topic, REQUEST_TIMEOUT)?.ok_or_else(|| {
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
            input_read_from: plan.range.input_read_from,
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
    Ok(c.create_with_context(ReaderContext::default())?)
}

/// The offsets `input.group_id` committed on `partitions` of the input topic (`None`: none),
/// waiting for a group coordinator still starting ([`kafka::committed_when_ready`]). Errors: the
/// fetch's, or a partition-level error in its answer ([`kafka::answered`]).
fn committed(meta: &Reader, cfg: &Config, partitions: &[i32]) -> Result<BTreeMap<i32, Option<i64>>, AuditError> {
    let mut tpl = TopicPartitionList::new();
    for p in partitions {
        tpl.add_partition(&cfg.input.topic, *p);
    }
    let got = kafka::committed_when_ready(meta, &tpl, REQUEST_TIMEOUT)?;
    partitions
        .iter()
        .map(|p| {
            let offset = match kafka::answered(&got, &cfg.input.topic, *p)?.offset() {
                Offset::Offset(o) => Some(o),
                _ => None,
            };
            Ok((*p, offset))
        })
        .collect()
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

    /// A flake of the suite on a broker just started: `kafka-dedup audit` failed with
    /// "Meta data fetch error: NotCoordinator" where `run` and `check-config --connect` wait for
    /// the group coordinator. On librdkafka's mock cluster: "not ready" answers, then the
    /// offsets; an authorization failure is returned at once.
    #[test]
    fn committed_offsets_wait_for_a_coordinator_still_loading() {
        use rdkafka::mocking::MockCluster;
        use rdkafka::types::{RDKafkaApiKey, RDKafkaRespErr::*};
        let cluster = MockCluster::new(1).unwrap();
        cluster.create_topic("in", 2, 1).unwrap();
        let text = format!(
            "[kafka]\nbootstrap_servers = \"{}\"\n[input]\ntopic = \"in\"\ngroup_id = \"g\"\n[output]\ntopic = \"out\"\n",
            cluster.bootstrap_servers()
        );
        let cfg = Config::from_toml_str(&text, Some(Default::default())).unwrap();
        let meta = reader(&cfg).unwrap();
        cluster.request_errors(
            RDKafkaApiKey::OffsetFetch,
            &[
                RD_KAFKA_RESP_ERR_NOT_COORDINATOR,
                RD_KAFKA_RESP_ERR_COORDINATOR_LOAD_IN_PROGRESS,
                RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
            ],
        );
        let got = committed(&meta, &cfg, &[0, 1]).expect("fetched once the coordinator is ready");
        assert_eq!(got, BTreeMap::from([(0, None), (1, None)]));
        cluster.request_errors(
            RDKafkaApiKey::OffsetFetch,
            &[RD_KAFKA_RESP_ERR_GROUP_AUTHORIZATION_FAILED],
        );
        let started = Instant::now();
        committed(&meta, &cfg, &[0, 1]).expect_err("not authorized");
        assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    }
}

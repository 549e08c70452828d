//! Step 3 of a recovery: carry out the [`Plan`]: load the store's snapshot or start empty
//! generations, count and log a rebuild, wait for the fence, re-read the output topic.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::{debug, error, info, warn};

use super::plan::{
    behind_output, learns, plan, provenance_proves, resume_from_output, AtInput, Facts, FromOutputReason, Notice, Plan,
    Proof, Reread, Resume, Snapshot,
};
use super::{check, Recovered, RecoveryEnv, RecoveryError, RecoveryRequest, REQUEST_TIMEOUT};
use crate::config::{Delivery, Partitioning, Start};
use crate::generations::{now_ms, Generation, Generations, Positions};
use crate::global::{merge_high_water, note_taken, HighWater};
use crate::horizon;
use crate::kafka;
use crate::metadata::new_checkpoint_id;
use crate::provenance::Provenance;
use crate::telemetry::{self, PartitionMetrics, Totals};

/// Interval of progress log lines during a long re-read.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Poll errors tolerated during one re-read before the recovery fails (and is retried).
const MAX_SCAN_ERRORS: u32 = 50;

/// Carries out the plan for `facts`. A snapshot that fails to load is planned again as
/// unreadable. Errors: Kafka, or the partition was revoked meanwhile.
pub fn execute(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    req: &RecoveryRequest,
    mut facts: Facts,
) -> Result<Recovered, RecoveryError> {
    let p = req.partition;
    let keep = env.cfg.checkpoint.generations as usize;
    loop {
        match plan(&facts) {
            Plan::Fresh { resume, notice } => {
                if let Some(notice) = notice {
                    announce(env, p, &notice, resume);
                }
                return fresh(env, reader, req, resume);
            }
            Plan::Load { resume, ckpt, reread } => {
                let Snapshot::Present(s) = &facts.snapshot else {
                    unreachable!("only a present snapshot is planned to load")
                };
                let clock = s.clock.or(meta_clock(&facts));
                match env.store.load_generations(p, s) {
                    Ok(gens) => {
                        let gens = Generations::from_parts(gens, keep);
                        let start = Loaded {
                            gens,
                            resume,
                            ckpt,
                            clock,
                            high_water: meta_high_water(&facts),
                        };
                        // A snapshot taken at exactly the committed offset proves the commit is
                        // kafka-dedup's own: never asked whether it is behind.
                        return finish(env, reader, req, start, &reread, false);
                    }
                    Err(e) => facts.snapshot = Snapshot::Unreadable(e.to_string()),
                }
            }
            Plan::FromOutput {
                committed,
                wait_for_fence,
                why,
            } => return from_output(env, reader, req, committed, wait_for_fence, why),
            Plan::RebuildByTime {
                resume,
                epoch,
                clock,
                wait_for_fence,
                notice,
            } => {
                announce(env, p, &notice, Resume::At(resume));
                let out_parts = output_partitions(env, p);
                let from = horizon_start(env, reader, &out_parts, clock)?;
                let start = Loaded {
                    gens: Generations::from_parts(vec![Generation::new(epoch, resume, from.clone(), 0)], keep),
                    resume,
                    ckpt: new_checkpoint_id(),
                    clock,
                    high_water: meta_high_water(&facts),
                };
                let reread = Reread {
                    from,
                    to: transaction_ends(env, &out_parts)?,
                    wait_for_fence,
                };
                return finish(env, reader, req, start, &reread, false);
            }
            Plan::Rebuild {
                resume,
                generations,
                reread,
                notice,
            } => {
                announce(env, p, &notice, Resume::At(resume));
                let gens = generations
                    .into_iter()
                    .map(|g| Generation::new(g.epoch, resume, g.out_start, 0))
                    .collect();
                let start = Loaded {
                    gens: Generations::from_parts(gens, keep),
                    resume,
                    ckpt: new_checkpoint_id(),
                    clock: meta_clock(&facts),
                    high_water: meta_high_water(&facts),
                };
                return finish(env, reader, req, start, &reread, untrusted(&facts));
            }
        }
    }
}

/// The partition clock the committed metadata carries, if any.
fn meta_clock(facts: &Facts) -> Option<i64> {
    facts.meta.as_ref().and_then(|m| m.clock)
}

/// The high-water marks the committed metadata carries (global scope, filter stage), if any.
fn meta_high_water(facts: &Facts) -> HighWater {
    facts.meta.as_ref().map(|m| m.hw.clone()).unwrap_or_default()
}

/// The output partitions whose records partition `p`'s generations hold: `p` itself
/// (`preserve`), or all of them (`key`).
fn output_partitions(env: &RecoveryEnv, p: i32) -> Vec<i32> {
    match env.cfg.output.partitioning {
        Partitioning::Preserve => vec![p],
        Partitioning::Key => (0..env.output_partitions as i32).collect(),
    }
}

/// Logs and counts why the store is not used (`kafka_dedup_store_rebuilds_total{reason}`).
fn announce(env: &RecoveryEnv, p: i32, notice: &Notice, resume: Resume) {
    match notice {
        Notice::Rebuild { reason, detail } => {
            warn!(
                partition = p,
                reason,
                "local store cannot be used for this partition ({detail}); rebuilding its generations from the output topic"
            );
            telemetry::store_rebuild(reason);
            Totals::bump(&env.totals.rebuilds);
        }
        Notice::NoMetadata => {
            let offset = match resume {
                Resume::At(o) => Some(o),
                Resume::Start(_) => None,
            };
            warn!(
                partition = p,
                offset,
                "committed offset without kafka-dedup checkpoint metadata or horizon marker (reset by an operator?); \
                 starting with empty generations: replays of records before this offset are not caught"
            );
            telemetry::store_rebuild("no_metadata");
        }
    }
}

/// Nothing to re-learn: one empty generation beginning at the output's current end.
fn fresh(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    req: &RecoveryRequest,
    resume: Resume,
) -> Result<Recovered, RecoveryError> {
    let cfg = &env.cfg;
    let p = req.partition;
    let resume = match resume {
        Resume::At(o) => within_retention(env, reader, p, o)?,
        Resume::Start(start) => {
            let (low, high) = reader.fetch_watermarks(&cfg.input.topic, p, REQUEST_TIMEOUT)?;
            match start {
                Start::Earliest => low,
                Start::Latest => high,
            }
        }
    };
    let mut out_positions = Positions::new();
    for q in output_partitions(env, p) {
        let (_, high) = reader.fetch_watermarks(&cfg.output.topic, q, REQUEST_TIMEOUT)?;
        out_positions.insert(q, high);
    }
    let first = Generation::new(1, resume, out_positions.clone(), 0);
    Ok(Recovered {
        gens: Generations::from_parts(vec![first], cfg.checkpoint.generations as usize),
        resume,
        out_positions,
        ckpt: new_checkpoint_id(),
        fresh: true,
        scanned: 0,
        since: req.since,
        clock: None,
        high_water: HighWater::new(),
    })
}

/// True when the committed offset carries no kafka-dedup metadata and the output can be asked
/// whether it is behind ([`behind_output`]).
fn untrusted(facts: &Facts) -> bool {
    facts.meta.is_none() && facts.provenance
}

/// What a loaded or rebuilt partition starts from, before the re-read of the output.
struct Loaded {
    /// Its generations (loaded, or empty at the metadata's output starts).
    gens: Generations,
    /// Where consumption resumes.
    resume: i64,
    /// The checkpoint id the state descends from.
    ckpt: String,
    /// The partition clock the checkpoint carried (snapshot or metadata), if any.
    clock: Option<i64>,
    /// The high-water marks the checkpoint carried (global scope, filter stage).
    high_water: HighWater,
}

/// Waits for the fence if the plan says so, then re-reads the output into `start`'s generations.
/// The newest timestamp among the re-read records moves the partition clock on (records
/// forwarded after the checkpoint by an owner that then crashed had moved it), and the current
/// generation, which re-learns them, takes the clock's bucket. `untrusted`: the committed offset
/// has no kafka-dedup metadata; if the output proves it behind ([`behind_output`]), the partition
/// resumes after the newest record the output holds from it.
fn finish(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    req: &RecoveryRequest,
    start: Loaded,
    reread: &Reread,
    untrusted: bool,
) -> Result<Recovered, RecoveryError> {
    let Loaded {
        mut gens,
        resume,
        ckpt,
        clock,
        mut high_water,
    } = start;
    check(&req.cancel)?;
    if reread.wait_for_fence {
        wait_for_fence(env, req)?;
    }
    let out_parts = output_partitions(env, req.partition);
    let before = if untrusted {
        // An offset the input does not have (a recreated topic) proves nothing.
        let (_, high) = reader.fetch_watermarks(&env.cfg.input.topic, req.partition, REQUEST_TIMEOUT)?;
        provenance_before(env, reader, req.partition, &reread.from)?.filter(|b| *b < high)
    } else {
        None
    };
    let scanned = scan(env, reader, req, &out_parts, reread, &mut gens, (clock, Some(resume)))?;
    merge_high_water(&mut high_water, &scanned.high_water);
    let clock = horizon::recovered(clock, scanned.clock_ms);
    if let Some(c) = clock {
        gens.set_current_bucket(horizon::bucket_of(c, horizon::interval_ms(env.cfg.checkpoint.interval)));
    }
    let mut resume = resume;
    if behind_output(resume, before) {
        let newest = confirmed(env, reader, req.partition, &scanned)?;
        let proven = match resume_from_output(Some(resume), &newest, env.cfg.output.partitioning, env.cfg.input.start) {
            Resume::At(o) => o,
            Resume::Start(_) => resume,
        };
        let after = proven.max(before.map_or(resume, |b| b + 1));
        warn!(
            partition = req.partition,
            reason = "behind_output",
            committed = resume,
            resume = after,
            "the committed offset has no kafka-dedup metadata and is behind the output (it holds this partition's \
             records from offset {} before the horizon): reset by someone else; resuming after the newest record \
             the output holds from it",
            before.unwrap_or_default()
        );
        telemetry::position_from_output("behind_output");
        resume = after;
    }
    Ok(Recovered {
        gens,
        resume: within_retention(env, reader, req.partition, resume)?,
        out_positions: scanned.ends,
        ckpt,
        fresh: false,
        scanned: scanned.records,
        since: req.since,
        clock,
        high_water,
    })
}

/// [`Plan::FromOutput`]: re-learns the output over the horizon by record time into one
/// generation, then resumes where [`resume_from_output`] says, from the provenance found.
fn from_output(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    req: &RecoveryRequest,
    committed: Option<i64>,
    wait: bool,
    why: FromOutputReason,
) -> Result<Recovered, RecoveryError> {
    let (cfg, p) = (&env.cfg, req.partition);
    check(&req.cancel)?;
    if wait {
        wait_for_fence(env, req)?;
    }
    let out_parts = output_partitions(env, p);
    let from = horizon_start(env, reader, &out_parts, None)?;
    let first = Generation::new(1, committed.unwrap_or(0), from.clone(), 0);
    let mut gens = Generations::from_parts(vec![first], cfg.checkpoint.generations as usize);
    let reread = Reread {
        from,
        to: transaction_ends(env, &out_parts)?,
        wait_for_fence: false,
    };
    let scanned = scan(env, reader, req, &out_parts, &reread, &mut gens, (None, committed))?;
    let clock = horizon::recovered(None, scanned.clock_ms);
    if let Some(c) = clock {
        gens.set_current_bucket(horizon::bucket_of(c, horizon::interval_ms(cfg.checkpoint.interval)));
    }
    let newest = confirmed(env, reader, p, &scanned)?;
    let resume = match resume_from_output(committed, &newest, cfg.output.partitioning, cfg.input.start) {
        Resume::At(o) => within_retention(env, reader, p, o)?,
        Resume::Start(start) => start_offset(env, reader, p, start)?,
    };
    if newest.is_empty() {
        if committed.is_some() {
            announce(env, p, &Notice::NoMetadata, Resume::At(resume));
        }
    } else {
        warn!(
            partition = p,
            reason = why.label(),
            committed,
            resume,
            rescanned = scanned.records,
            "the position comes from the output topic: it holds this partition's records up to input offset {} \
             (kafka-dedup.source); resuming after them",
            resume - 1
        );
        telemetry::position_from_output(why.label());
    }
    Ok(Recovered {
        gens,
        resume,
        out_positions: scanned.ends,
        ckpt: new_checkpoint_id(),
        fresh: true,
        scanned: scanned.records,
        since: req.since,
        clock,
        high_water: scanned.high_water,
    })
}

/// The key-and-value fingerprint of a record (nulls distinct from empty): what a forwarded copy
/// shares with its input record.
fn key_value_digest(record: &dyn crate::fingerprint::RecordFields) -> u128 {
    crate::fingerprint::Fingerprinter::new(crate::fingerprint::Source::KeyValue)
        .fingerprint(record)
        .map_or(0, |f| f.0)
}

/// The newest input offsets the re-read found (per output partition) that the input does not
/// refute ([`provenance_proves`]): it still holds a record at that offset with the same key and
/// value, or the record is gone (retention deleted it, compaction removed it: logged; the
/// partition resumes after it, at the log start when that is later, never at `input.start`). The
/// others are dropped with an error in the log: the input topic was recreated (its offsets start
/// again at 0), or the output was written from another cluster (a mirrored topic's offsets
/// differ), and resuming after them would skip records that were never forwarded.
fn confirmed(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    p: i32,
    scanned: &Scanned,
) -> Result<BTreeMap<i32, i64>, RecoveryError> {
    let topic = &env.cfg.input.topic;
    let mut out = BTreeMap::new();
    for (q, offset) in &scanned.newest {
        let want = scanned.newest_digest.get(q).copied();
        let at = at_input(reader, topic, p, *offset, want)?;
        match provenance_proves(*offset, at) {
            Proof::Confirmed => {
                out.insert(*q, *offset);
            }
            Proof::Gone => {
                warn!(
                    partition = p,
                    output_partition = q,
                    offset,
                    at_input = ?at,
                    "the newest input record the output proves forwarded is gone from the input (retention deleted \
                     it, or compaction removed it); resuming after it"
                );
                out.insert(*q, *offset);
            }
            Proof::Refuted => error!(
                partition = p,
                output_partition = q,
                offset,
                "the output names input offset {offset} as a record's source, but the input partition holds no such \
                 record (recreated topic, or an output written from another cluster): not resuming from it"
            ),
        }
    }
    Ok(out)
}

/// Unassigns the reader when dropped: a look at one record (or a few) must not leave the reader
/// prefetching the rest of the partition in the background (up to `queued.max.messages.kbytes`,
/// 64 MB), which loads the broker for nothing (seen on tansu 0.6: a group coordinator stalled
/// for 45 s while several recoveries prefetched whole partitions).
struct StopFetching<'r>(&'r kafka::Reader);

impl Drop for StopFetching<'_> {
    fn drop(&mut self) {
        let _ = self.0.unassign();
    }
}

/// Resumes the partitions of its list when dropped (see [`last_timestamps`]).
struct ResumeAll<'r>(&'r kafka::Reader, &'r TopicPartitionList);

impl Drop for ResumeAll<'_> {
    fn drop(&mut self) {
        let _ = self.0.resume(self.1);
    }
}

/// What input partition `topic`/`p` holds at `offset` ([`AtInput`]), `want` being the
/// key-and-value fingerprint of the output record that names it. Errors: Kafka, or no answer
/// within [`REQUEST_TIMEOUT`] (the recovery is retried).
fn at_input(
    reader: &kafka::Reader,
    topic: &str,
    p: i32,
    offset: i64,
    want: Option<u128>,
) -> Result<AtInput, RecoveryError> {
    let (low, high) = reader.fetch_watermarks(topic, p, REQUEST_TIMEOUT)?;
    if offset < low {
        return Ok(AtInput::Deleted { low });
    }
    if offset >= high {
        return Ok(AtInput::Beyond);
    }
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, p, Offset::Offset(offset))?;
    reader.assign(&tpl)?;
    let _stop = StopFetching(reader);
    let deadline = Instant::now() + REQUEST_TIMEOUT;
    loop {
        match reader.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                return Ok(AtInput::Found {
                    offset: m.offset(),
                    same: want == Some(key_value_digest(&m)),
                })
            }
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(AtInput::Nothing),
            Some(Err(e)) => return Err(e.into()),
            None if Instant::now() > deadline => {
                return Err(KafkaError::Global(rdkafka::types::RDKafkaErrorCode::OperationTimedOut).into())
            }
            None => {}
        }
    }
}

/// The input offset of partition `p` that the record just before the re-read's start came from,
/// by provenance, over the output partitions of `from` (the newest such); `None` when there is
/// no such record (the re-read starts at the log start) or it carries no provenance for `p`.
fn provenance_before(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    p: i32,
    from: &Positions,
) -> Result<Option<i64>, RecoveryError> {
    let topic = &env.cfg.output.topic;
    let mut newest = None;
    for (q, start) in from {
        let (low, _) = reader.fetch_watermarks(topic, *q, REQUEST_TIMEOUT)?;
        if *start <= low {
            continue;
        }
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(topic, *q, Offset::Offset(start - 1))?;
        reader.assign(&tpl)?;
        let _stop = StopFetching(reader);
        let deadline = Instant::now() + REQUEST_TIMEOUT;
        loop {
            match reader.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    let source = Provenance::of(&m, &env.cfg.input.topic).filter(|s| s.partition == p);
                    newest = newest.max(source.map(|s| s.offset));
                    break;
                }
                Some(Err(KafkaError::PartitionEOF(_))) => break,
                Some(Err(e)) => return Err(e.into()),
                None if Instant::now() > deadline => break,
                None => {}
            }
        }
    }
    Ok(newest)
}

/// The input offset `input.start` names for partition `p`: its low or high watermark.
fn start_offset(env: &RecoveryEnv, reader: &kafka::Reader, p: i32, start: Start) -> Result<i64, RecoveryError> {
    let (low, high) = reader.fetch_watermarks(&env.cfg.input.topic, p, REQUEST_TIMEOUT)?;
    Ok(match start {
        Start::Earliest => low,
        Start::Latest => high,
    })
}

/// Transactional mode, where no commit recorded the committed transaction's end (`out_end`):
/// how far the re-read must go, the high watermarks of `out_parts` as a `read_uncommitted`
/// client sees them. The recovery reader is `read_committed`, so its end is the last stable
/// offset, which another replica's open transaction on a shared output partition holds below
/// the previous owner's last committed records; the re-read waits for it to pass these ends
/// (every transaction open now ends within `transaction.timeout.ms`). `None` in idempotent mode:
/// to the end.
fn transaction_ends(env: &RecoveryEnv, out_parts: &[i32]) -> Result<Option<Positions>, RecoveryError> {
    if env.cfg.output.delivery != Delivery::Transactional {
        return Ok(None);
    }
    let mut c = kafka::reader_config(&env.cfg);
    c.set("isolation.level", "read_uncommitted");
    let client: rdkafka::consumer::BaseConsumer = c.create()?;
    let mut ends = Positions::new();
    for q in out_parts {
        let (_, high) = client.fetch_watermarks(&env.cfg.output.topic, *q, REQUEST_TIMEOUT)?;
        ends.insert(*q, high);
    }
    Ok(Some(ends))
}

/// Where the horizon begins in each of `out_parts`, by record time: `checkpoint.generations + 1`
/// intervals before `anchor` (the partition clock a commit carried, ms since the Unix epoch) or,
/// without one, before the newest record's timestamp in any of them (the newest time the output
/// shows: a horizon is measured on record time, so the wall clock, which may be days later after
/// a long stop, is not used). Found with ListOffsets by timestamp (`offsets_for_times`); an
/// empty output partition, or one with nothing that recent, starts at its end.
fn horizon_start(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    out_parts: &[i32],
    anchor: Option<i64>,
) -> Result<Positions, RecoveryError> {
    let topic = &env.cfg.output.topic;
    let mut watermarks = BTreeMap::new();
    for q in out_parts {
        watermarks.insert(*q, reader.fetch_watermarks(topic, *q, REQUEST_TIMEOUT)?);
    }
    let mut ends: Positions = watermarks.iter().map(|(q, (_, high))| (*q, *high)).collect();
    let mut newest_of = match anchor {
        Some(_) => BTreeMap::new(),
        None => last_timestamps(reader, topic, &watermarks)?,
    };
    // (A future-stamped record or clock counts as stamped now: it does not move the window past
    // the records really there.)
    let Some(newest) = anchor.or(newest_of.values().max().copied()).map(|t| t.min(now_ms())) else {
        return Ok(ends);
    };
    let span = env.cfg.checkpoint.interval.as_millis() as i64 * (env.cfg.checkpoint.generations as i64 + 1);
    let at = newest.saturating_sub(span).max(0);
    let mut tpl = TopicPartitionList::new();
    for q in out_parts {
        tpl.add_partition_offset(topic, *q, Offset::Offset(at))?;
    }
    let found = reader.offsets_for_times(tpl, REQUEST_TIMEOUT)?;
    let mut none = BTreeMap::new();
    for q in out_parts {
        let Some(e) = found.find_partition(topic, *q) else {
            none.insert(*q, watermarks[q]);
            continue;
        };
        // A partition without a leader is left out of the request and keeps the timestamp in
        // its offset field, with an error: the attempt fails (and is retried) rather than
        // start the re-read at a timestamp taken for an offset.
        e.error()?;
        match e.offset() {
            Offset::Offset(o) => {
                let (low, high) = watermarks[q];
                ends.insert(*q, o.clamp(low, high));
            }
            _ => {
                none.insert(*q, watermarks[q]);
            }
        }
    }
    // Nothing stamped that late in these partitions: they start at their ends. But a partition
    // whose last record is stamped at or after the window's start has one; a broker that
    // answers "none" there cannot look offsets up by time (librdkafka's mock cluster): re-read
    // it all.
    if anchor.is_some() {
        newest_of = last_timestamps(reader, topic, &none)?;
    }
    let mut whole = Vec::new();
    for (q, (low, _)) in none {
        if newest_of.get(&q).is_some_and(|t| (*t).min(now_ms()) >= at) {
            ends.insert(q, low);
            whole.push(q);
        }
    }
    if !whole.is_empty() {
        warn!(
            output_partitions = ?whole,
            "the broker did not look the horizon's start up by time; re-reading these partitions whole"
        );
    }
    Ok(ends)
}

/// The newest record timestamp (ms) among the last records of each partition of `topic` in
/// `watermarks` (partition → low and high watermark), all read in one assignment: back 1, then
/// 16, then 256... records from each end until a record is found (the last offsets can be
/// transaction markers) or the partition's start is reached. Partitions without a timestamped
/// record (empty ones among them) are left out.
fn last_timestamps(
    reader: &kafka::Reader,
    topic: &str,
    watermarks: &BTreeMap<i32, (i64, i64)>,
) -> Result<BTreeMap<i32, i64>, RecoveryError> {
    let mut newest = BTreeMap::new();
    let mut pending: BTreeMap<i32, (i64, i64)> = watermarks
        .iter()
        .filter(|(_, (low, high))| high > low)
        .map(|(q, w)| (*q, *w))
        .collect();
    let mut back = 1i64;
    while !pending.is_empty() {
        let mut tpl = TopicPartitionList::new();
        for (q, (low, high)) in &pending {
            tpl.add_partition_offset(topic, *q, Offset::Offset(high.saturating_sub(back).max(*low)))?;
        }
        reader.assign(&tpl)?;
        let _stop = StopFetching(reader);
        // librdkafka keeps a partition paused across assignments: the ones paused below are
        // resumed (before the unassignment, dropped first) for the re-read that follows.
        let _resume = ResumeAll(reader, &tpl);
        let mut open: BTreeSet<i32> = pending.keys().copied().collect();
        let mut seen = BTreeSet::new();
        // The last batches of every partition: the request timeout, and 10 ms more per partition.
        let deadline = Instant::now() + REQUEST_TIMEOUT + Duration::from_millis(10) * pending.len() as u32;
        let close = |q: i32, open: &mut BTreeSet<i32>| {
            if open.remove(&q) {
                // A partition that is done stops fetching (the output may be taking new records).
                let mut one = TopicPartitionList::new();
                one.add_partition(topic, q);
                let _ = reader.pause(&one);
            }
        };
        while !open.is_empty() {
            if Instant::now() > deadline {
                return Err(KafkaError::Global(rdkafka::types::RDKafkaErrorCode::OperationTimedOut).into());
            }
            match reader.poll(Duration::from_millis(200)) {
                Some(Ok(m)) => {
                    let q = m.partition();
                    let Some((_, high)) = pending.get(&q) else { continue };
                    // Records appended since the watermarks were read (new traffic, a dead
                    // owner's records in flight) are not what the watermarks describe.
                    if m.offset() >= *high {
                        close(q, &mut open);
                        continue;
                    }
                    seen.insert(q);
                    if let Some(t) = m.timestamp().to_millis() {
                        let e = newest.entry(q).or_insert(t);
                        *e = (*e).max(t);
                    }
                    if m.offset() + 1 >= *high {
                        close(q, &mut open);
                    }
                }
                Some(Err(KafkaError::PartitionEOF(q))) => close(q, &mut open),
                Some(Err(e)) => return Err(e.into()),
                None => {}
            }
        }
        pending.retain(|q, (low, high)| !seen.contains(q) && high.saturating_sub(back) > *low);
        back = back.saturating_mul(16);
    }
    Ok(newest)
}

/// The position `resume` of input partition `p` (committed, or proven by the output's
/// provenance), or the partition's log start when retention deleted the records from `resume`
/// on (logged: they are gone). `input.start` never decides here: it applies only where nothing was
/// committed (the group consumer's `auto.offset.reset` is always `earliest`, so an offset out
/// of range can only move forward to the oldest record left).
fn within_retention(env: &RecoveryEnv, reader: &kafka::Reader, p: i32, resume: i64) -> Result<i64, RecoveryError> {
    let (low, high) = reader.fetch_watermarks(&env.cfg.input.topic, p, REQUEST_TIMEOUT)?;
    if resume > high {
        error!(
            partition = p,
            resume,
            log_end = high,
            "the position to resume at lies beyond the input partition's end (the topic was recreated, or an \
             unclean leader election truncated it); resuming at its end instead of skipping what will be written \
             below the old position"
        );
        return Ok(high);
    }
    if resume < low {
        warn!(
            partition = p,
            resume,
            log_start = low,
            "retention deleted the input records from the position to resume at (the committed offset, or the one \
             after the newest record the output proves forwarded) to the log start; resuming at the log start"
        );
        return Ok(low);
    }
    Ok(resume)
}

/// Lets in-flight records of a previous owner land: waits until `output.fence_wait` has passed
/// since this recovery attempt began (the assignment, for a first attempt).
fn wait_for_fence(env: &RecoveryEnv, req: &RecoveryRequest) -> Result<(), RecoveryError> {
    let until = req.attempt + env.cfg.output.fence_wait;
    let t = Instant::now();
    while Instant::now() < until {
        check(&req.cancel)?;
        std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
    }
    debug!(
        partition = req.partition,
        seconds = t.elapsed().as_secs_f64(),
        "fence wait over"
    );
    Ok(())
}

/// A re-read in progress.
struct Progress<'a> {
    /// Where the re-read stops per output partition (`None`: at the end).
    limit: Option<&'a Positions>,
    /// Output partitions not yet read to their end.
    remaining: BTreeSet<i32>,
    /// The end reached per output partition.
    ends: Positions,
    /// Records read.
    scanned: u64,
    /// Records to read, as estimated from the watermarks (for the progress log).
    total_estimate: i64,
    /// When the re-read began.
    started: Instant,
    /// When progress was last logged.
    last_progress: Instant,
    /// Poll errors so far.
    errors: u32,
    /// Per output partition, the newest input offset of the recovering partition found in it
    /// (provenance header).
    newest: BTreeMap<i32, i64>,
    /// Per output partition, the key-and-value fingerprint of the record behind `newest`, to
    /// check against the input record it names ([`confirmed`]).
    newest_digest: BTreeMap<i32, u128>,
    /// The newest effective time among the records read ([`horizon::reread_ms`]).
    clock_ms: Option<i64>,
    /// `partitioning = "preserve"`: the rotations the re-read records caused when they were
    /// taken ([`Rotation`]); `None` with `"key"` (records by output position only).
    rotation: Option<Rotation>,
    /// Global scope, filter stage, `preserve` partitioning: the high-water marks the records
    /// read prove ([`Progress::record`]).
    high_water: HighWater,
}

/// A re-read in output order (`partitioning = "preserve"`: the output partition holds its input
/// partition's forwarded records in input order) rotates the generations as the records did when
/// they were taken: each record after the current generation's output start moves the partition
/// clock on ([`horizon::reread_advance`]) and, entering a later bucket, starts a new generation
/// at its output offset, so it and those after it go to the generation their record time
/// belongs to, and the generations before drop out past the horizon as they did (issue 22: by
/// output position alone, everything after the last checkpoint went into one generation, and
/// the horizon widened). One exception: a generation holding a record the partition takes again
/// when it resumes (at or after the committed offset: the crashed owner's) is never rotated
/// away; its re-take must be dropped whatever its age. Later records then stay in the current
/// generation, as before.
#[derive(Debug)]
struct Rotation {
    /// The partition clock, ms since the Unix epoch: the checkpoint's, moved on by the records
    /// read; `None` until known.
    clock: Option<i64>,
    /// `checkpoint.interval` in ms.
    interval_ms: i64,
    /// `checkpoint.generations`.
    generations: u32,
    /// The input offset from which the partition takes records again when it resumes (the
    /// committed offset), if any: re-read records from it on (by provenance; all, without it)
    /// pin their generation.
    retake_from: Option<i64>,
    /// The epoch of the oldest generation holding such a record, once one was read.
    pinned: Option<u64>,
}

impl Rotation {
    /// The rotation of a re-read that starts from `gens` (the checkpoint's generations). With a
    /// committed offset to resume from (`retake_from`), the oldest generation live at the
    /// checkpoint is pinned from the start: the crashed owner took the records from that offset
    /// on while those generations were live, and dropped some of them as replays of records in
    /// them; those drops left nothing in the output, so no re-read record can say which
    /// generation they need, and taking them again must find the same first copies (a replay
    /// dropped within H_min before the crash is dropped after it). H_max after such a crash can
    /// widen by the rotations the crashed owner made since its checkpoint.
    fn new(
        clock: Option<i64>,
        interval_ms: i64,
        generations: u32,
        retake_from: Option<i64>,
        gens: &Generations,
    ) -> Rotation {
        let oldest = gens.iter().map(|g| g.epoch).min();
        Rotation {
            clock,
            interval_ms,
            generations,
            retake_from,
            pinned: retake_from.and(oldest),
        }
    }

    /// Takes the record re-read at output `(q, o)` with effective time `t`
    /// ([`horizon::reread_ms`]) and input offset `source` (provenance, if any) before it is
    /// re-learned: rotates `gens` if it lies in the current generation and moves the clock into
    /// a later bucket, as far as no pinned generation is dropped.
    fn take(&mut self, gens: &mut Generations, q: i32, o: i64, t: Option<i64>, source: Option<i64>) {
        if gens.current().out_start.get(&q).is_some_and(|s| *s > o) {
            return; // a frozen generation's record: taken before the checkpoint
        }
        let mut times = horizon::reread_advance(&mut self.clock, t, self.interval_ms, self.generations);
        let current = gens.current().epoch;
        if let Some(pinned) = self.pinned {
            // After `times` rotations the oldest live epoch is current + times + 1 - generations.
            let room = (pinned + u64::from(self.generations)).saturating_sub(current + 1);
            times = times.min(u32::try_from(room).unwrap_or(u32::MAX));
        }
        if let (true, Some(c)) = (times > 0, self.clock) {
            let in_start = gens.current().in_start;
            let bucket = horizon::bucket_of(c, self.interval_ms);
            gens.rotate_to(times, bucket, in_start, [(q, o)].into_iter().collect());
        }
        let retaken = self.retake_from.is_some_and(|from| source.is_none_or(|s| s >= from));
        if retaken && self.pinned.is_none() {
            self.pinned = Some(gens.current().epoch);
        }
    }
}

/// What a re-read found.
struct Scanned {
    /// The end reached per output partition.
    ends: Positions,
    /// Records read.
    records: u64,
    /// Per output partition, the newest input offset of the recovering partition found in it,
    /// by provenance ([`crate::provenance`]).
    newest: BTreeMap<i32, i64>,
    /// The key-and-value fingerprint of each record behind `newest`.
    newest_digest: BTreeMap<i32, u128>,
    /// The newest effective time among the records read ([`horizon::reread_ms`]).
    clock_ms: Option<i64>,
    /// The high-water marks the records read prove (see [`Progress::high_water`]).
    high_water: HighWater,
}

/// Re-reads output partitions `out_parts` from `reread.from` to their end (or `reread.to`),
/// re-learning fingerprints into `gens` (with `partitioning = "preserve"`, rotating them by
/// record time from the partition clock `clock` the state was checkpointed with, never away
/// from records at or after `retake_from`: [`Rotation`]).
/// Returns the end position per output partition, the number of records read and the newest
/// effective time among them.
fn scan(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    req: &RecoveryRequest,
    out_parts: &[i32],
    reread: &Reread,
    gens: &mut Generations,
    (clock, retake_from): (Option<i64>, Option<i64>),
) -> Result<Scanned, RecoveryError> {
    let (tpl, mut progress) = ranges(env, reader, out_parts, reread)?;
    if env.cfg.output.partitioning == Partitioning::Preserve {
        let interval_ms = horizon::interval_ms(env.cfg.checkpoint.interval);
        if let Some(c) = clock {
            gens.set_current_bucket(horizon::bucket_of(c, interval_ms));
        }
        progress.rotation = Some(Rotation::new(
            clock,
            interval_ms,
            env.cfg.checkpoint.generations,
            retake_from,
            gens,
        ));
    }
    if progress.remaining.is_empty() {
        return Ok(progress.into_scanned());
    }
    reader.assign(&tpl)?;
    let metrics = PartitionMetrics::new(req.partition, &env.cfg);
    (progress.started, progress.last_progress) = (Instant::now(), Instant::now());
    while !progress.remaining.is_empty() {
        check(&req.cancel)?;
        match reader.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => progress.record(env, req, &m, gens, &metrics)?,
            Some(Err(KafkaError::PartitionEOF(q))) if progress.remaining.contains(&q) => {
                progress.at_end(reader, &env.cfg.output.topic, q)
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {}
            Some(Err(e)) => progress.error(req, e)?,
            None => {}
        }
    }
    Ok(progress.into_scanned())
}

/// Where the re-read of each output partition starts (never before its low watermark), and
/// those with nothing to read (ended at once).
fn ranges<'a>(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    out_parts: &[i32],
    reread: &'a Reread,
) -> Result<(TopicPartitionList, Progress<'a>), RecoveryError> {
    let topic = &env.cfg.output.topic;
    let limit = reread.to.as_ref();
    let mut tpl = TopicPartitionList::new();
    let mut progress = Progress {
        limit,
        remaining: BTreeSet::new(),
        ends: Positions::new(),
        scanned: 0,
        total_estimate: 0,
        started: Instant::now(),
        last_progress: Instant::now(),
        errors: 0,
        newest: BTreeMap::new(),
        newest_digest: BTreeMap::new(),
        clock_ms: None,
        rotation: None,
        high_water: HighWater::new(),
    };
    for q in out_parts {
        let (low, high) = reader.fetch_watermarks(topic, *q, REQUEST_TIMEOUT)?;
        let start = reread.from.get(q).copied().unwrap_or(high).max(low);
        let mut stop = limit.and_then(|l| l.get(q).copied());
        if let Some(s) = stop.filter(|s| *s > high) {
            // The committed transaction's end lies beyond the partition's end: truncated (an
            // unclean leader election) or recreated. Waiting for it would never end.
            error!(
                output_partition = q,
                committed_end = s,
                high_watermark = high,
                "the output partition ends before the committed transaction's end; re-reading to its end"
            );
            stop = Some(high);
        }
        if stop.is_some_and(|s| s <= start) || (stop.is_none() && start >= high && high == low) {
            progress.ends.insert(*q, start.max(stop.unwrap_or(start)));
            continue;
        }
        progress.total_estimate += (stop.unwrap_or(high) - start).max(0);
        tpl.add_partition_offset(topic, *q, Offset::Offset(start))?;
        progress.remaining.insert(*q);
        progress.ends.insert(*q, start);
    }
    Ok((tpl, progress))
}

/// Whether an end-of-partition event ends the re-read of an output partition. Reading to the
/// end (`stop` is `None`), it does. Reading to a limit (transactional mode: the end of the
/// previous owner's committed transaction), only once the reader's `position` reached it: a
/// read_committed reader's end is the last stable offset, which another producer's open
/// transaction on the same output partition (another replica's, in `key` partitioning) holds
/// below the records the previous owner committed; the re-read then waits for it to move (it
/// does within that producer's transaction timeout).
fn eof_ends_reread(position: Option<i64>, stop: Option<i64>) -> bool {
    match stop {
        None => true,
        Some(stop) => position.is_some_and(|p| p >= stop),
    }
}

impl Progress<'_> {
    /// What the re-read found.
    fn into_scanned(self) -> Scanned {
        Scanned {
            ends: self.ends,
            records: self.scanned,
            newest: self.newest,
            newest_digest: self.newest_digest,
            clock_ms: self.clock_ms,
            high_water: self.high_water,
        }
    }

    /// Re-learns one output record (or, past the limit, ends its partition). An output record
    /// whose fingerprint needs the schema registry while it is unavailable is tried again every
    /// second until it can be computed (or the partition is revoked: `Cancelled`): re-learning
    /// it as a record without fingerprint would let its replays through.
    fn record(
        &mut self,
        env: &RecoveryEnv,
        req: &RecoveryRequest,
        m: &BorrowedMessage<'_>,
        gens: &mut Generations,
        metrics: &PartitionMetrics,
    ) -> Result<(), RecoveryError> {
        let (q, o) = (m.partition(), m.offset());
        if !self.remaining.contains(&q) {
            return Ok(());
        }
        if let Some(stop) = self.limit.and_then(|l| l.get(&q)) {
            if o >= *stop {
                self.remaining.remove(&q);
                self.ends.insert(q, *stop);
                return Ok(());
            }
        }
        let named = Provenance::of(m, &env.cfg.input.topic);
        let cfg = &env.cfg.output;
        let own = learns(
            cfg.partitioning,
            cfg.provenance,
            named.as_ref().map(|s| s.partition),
            req.partition,
        );
        if own {
            let t = horizon::reread_ms(m.timestamp().to_millis(), now_ms());
            if let Some(r) = self.rotation.as_mut() {
                let source = named
                    .as_ref()
                    .filter(|s| s.partition == req.partition)
                    .map(|s| s.offset);
                r.take(gens, q, o, t, source);
            }
            // A record forwarded without fingerprint is known by its stand-in (the input record
            // its provenance names), which the pipeline learned when it forwarded it.
            let mut waited = false;
            let fp = loop {
                match env.fingerprinter.fingerprint(m) {
                    Err(e) if e.must_wait() => {
                        check(&req.cancel)?;
                        if !waited {
                            warn!(
                                partition = req.partition, output_partition = q, offset = o, error = %e,
                                "recovery waits for the schema registry to re-learn an output record; retrying every second"
                            );
                            waited = true;
                        }
                        std::thread::sleep(Duration::from_secs(1));
                    }
                    fp => break fp,
                }
            };
            let known = fp.ok().or_else(|| env.fingerprinter.stand_in(m));
            if let Some(fp) = known {
                gens.relearn(fp.0, q, o);
            }
            self.clock_ms = horizon::recovered(self.clock_ms, t);
        }
        // Global scope, filter stage: the route stage's provenance (the input record it copied)
        // raises its input partition's mark. Only with `preserve` partitioning: the output
        // partition then holds this route partition's records alone, forwarded in order by the
        // gapless producer, so every record taken before this one was taken indeed (in `key`
        // partitioning another output partition may have lost a record sent before it).
        if let (Some(routed_from), Partitioning::Preserve) = (&env.cfg.input.routed_from, env.cfg.output.partitioning) {
            let source = Provenance::of(m, routed_from).map(|s| (s.partition, s.offset));
            note_taken(&mut self.high_water, source);
        }
        if let Some(source) = named.filter(|s| s.partition == req.partition) {
            if self.newest.get(&q).is_none_or(|n| source.offset > *n) {
                self.newest.insert(q, source.offset);
                self.newest_digest.insert(q, key_value_digest(m));
            }
        }
        self.scanned += 1;
        metrics.scanned.increment(1);
        Totals::bump(&env.totals.scanned);
        self.ends.insert(q, o + 1);
        self.log_progress(req);
        Ok(())
    }

    /// Logs progress every [`PROGRESS_EVERY`].
    fn log_progress(&mut self, req: &RecoveryRequest) {
        if self.last_progress.elapsed() < PROGRESS_EVERY {
            return;
        }
        self.last_progress = Instant::now();
        let rate = self.scanned as f64 / self.started.elapsed().as_secs_f64().max(1e-3);
        info!(
            partition = req.partition,
            scanned = self.scanned,
            total = self.total_estimate,
            rate = rate as u64,
            "recovery re-reading the output topic"
        );
    }

    /// Output partition `q` reached its end (as a read_committed reader sees it): its end is at
    /// least the reader's position, and its re-read is over unless a limit lies beyond
    /// ([`eof_ends_reread`]).
    fn at_end(&mut self, reader: &kafka::Reader, topic: &str, q: i32) {
        let position = match reader
            .position()
            .ok()
            .and_then(|pos| pos.find_partition(topic, q).map(|e| e.offset()))
        {
            Some(Offset::Offset(o)) => Some(o),
            _ => None,
        };
        if let Some(o) = position {
            let e = self.ends.entry(q).or_insert(o);
            *e = (*e).max(o);
        }
        let stop = self.limit.and_then(|l| l.get(&q).copied());
        if eof_ends_reread(position, stop) {
            self.remaining.remove(&q);
        } else if self.last_progress.elapsed() >= PROGRESS_EVERY {
            self.last_progress = Instant::now();
            info!(
                output_partition = q,
                position,
                until = stop,
                "re-read waiting for the output's last stable offset to reach the committed transaction's end \
                 (another producer's transaction is open)"
            );
        }
    }

    /// A poll error: logged; after [`MAX_SCAN_ERRORS`] the recovery fails.
    fn error(&mut self, req: &RecoveryRequest, e: KafkaError) -> Result<(), RecoveryError> {
        self.errors += 1;
        warn!(partition = req.partition, error = %e, "error while re-reading the output topic");
        if self.errors > MAX_SCAN_ERRORS {
            return Err(e.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::{eof_ends_reread, Rotation};
    use crate::generations::{pos, Generation, Generations};

    /// Issue 22 (low): re-read records go to the generation their record time belongs to, not
    /// only by output position. Interval 1 s, 2 generations; the checkpoint left epoch 6
    /// (bucket 4, from output offset 0) and the current epoch 7 (bucket 5, from 10), clock 5.1 s,
    /// committed input offset 100. Each row re-reads records (output offset, record time, input
    /// offset by provenance) and lists, per record, its generation's age after the re-read
    /// (`None`: dropped out of the horizon), and the current generation's bucket.
    #[test]
    fn reread_records_go_to_the_generation_of_their_record_time() {
        type Row = (
            &'static str,
            &'static [(i64, Option<i64>, Option<i64>)],
            &'static [Option<usize>],
            i64,
        );
        #[rustfmt::skip]
        let rows: [Row; 6] = [
            ("within the checkpoint's bucket: by output position, as before",
                &[(5, Some(4_500), Some(50)), (10, Some(5_300), Some(90)), (11, Some(5_900), Some(91))],
                &[Some(1), Some(0), Some(0)], 5),
            ("two buckets on before the committed offset: the generations rotate as they did, the old ones drop out",
                &[(5, Some(4_500), Some(50)), (10, Some(5_200), Some(90)), (11, Some(6_100), Some(91)), (12, Some(7_300), Some(92))],
                &[None, None, Some(1), Some(0)], 7),
            ("a late event (an old stamp) after a rotation stays in the new generation",
                &[(5, Some(4_500), Some(50)), (10, Some(6_100), Some(90)), (11, Some(1_000), Some(91))],
                &[None, Some(0), Some(0)], 6),
            ("no usable stamps: by output position",
                &[(10, None, Some(90)), (11, None, Some(91))], &[Some(0), Some(0)], 5),
            ("records at or after the committed offset (taken again on resume) are never rotated away",
                &[(5, Some(4_500), Some(50)), (10, Some(5_200), Some(100)), (11, Some(6_100), Some(101)), (12, Some(7_300), Some(102))],
                &[None, Some(1), Some(0), Some(0)], 7),
            ("without provenance every re-read record counts as taken again",
                &[(10, Some(5_200), None), (11, Some(6_100), None), (12, Some(7_300), None)],
                &[Some(1), Some(0), Some(0)], 7),
        ];
        for (case, records, ages, bucket) in rows {
            let mut gens = Generations::from_parts(
                vec![
                    Generation::new(6, 0, pos(0, 0), 0),
                    Generation::new(7, 0, pos(0, 10), 0),
                ],
                2,
            );
            gens.set_current_bucket(5);
            let mut rotation = Rotation {
                clock: Some(5_100),
                interval_ms: 1_000,
                generations: 2,
                retake_from: Some(100),
                pinned: None,
            };
            for (o, t, source) in records {
                rotation.take(&mut gens, 0, *o, *t, *source);
                gens.relearn(*o as u128 + 1, 0, *o);
            }
            // As `finish` does: the current generation takes the clock's bucket.
            gens.set_current_bucket(crate::horizon::bucket_of(rotation.clock.unwrap(), 1_000));
            let got: Vec<Option<usize>> = records
                .iter()
                .map(|(o, _, _)| gens.lookup(*o as u128 + 1).map(|h| h.age))
                .collect();
            assert_eq!((got.as_slice(), gens.current().bucket), (ages, Some(bucket)), "{case}");
        }
    }

    /// Issue 22 review: a replay the crashed owner dropped (so nothing of it is in the output) at
    /// or after the committed offset, whose first copy is in the checkpoint's generation, is taken
    /// again on resume; records forwarded after it that move the clock fast (a catch-up) must not
    /// rotate that generation away. I = 1 s, G = 3; the checkpoint: one generation (epoch 7,
    /// bucket 0), clock 0.5 s, committed offset 20; E at input 5, output 5, t = 0.1 s; forwarded
    /// after the dropped replay: inputs 21..23 at 1.1, 2.1, 3.1 s.
    #[test]
    fn a_replay_dropped_before_the_crash_still_finds_its_first_copy() {
        let e: u128 = 0xE;
        let mut gens = Generations::from_parts(vec![Generation::new(7, 0, pos(0, 0), 0)], 3);
        gens.set_current_bucket(0);
        let mut rotation = Rotation::new(Some(500), 1_000, 3, Some(20), &gens);
        rotation.take(&mut gens, 0, 5, Some(100), Some(5));
        gens.relearn(e, 0, 5);
        for (o, t, src) in [(6, 1_100, 21), (7, 2_100, 22), (8, 3_100, 23)] {
            rotation.take(&mut gens, 0, o, Some(t), Some(src));
            gens.relearn(1000 + o as u128, 0, o);
        }
        assert!(
            gens.lookup(e).is_some(),
            "E forgotten: the replay dropped before the crash would pass"
        );
        for o in 6..=8u128 {
            assert!(gens.lookup(1000 + o).is_some(), "record at output {o} re-learned");
        }
    }

    /// The same review: a record forwarded without a usable timestamp in a partition an hour
    /// behind the wall clock; its output copy carries the wall-clock time it was produced, which
    /// the re-read takes as its record time. With a commit to resume from, nothing live at the
    /// checkpoint is rotated away by it.
    #[test]
    fn an_unstamped_record_in_a_backlog_rotates_nothing_away() {
        let now = crate::generations::now_ms();
        let backlog = now - 3_600_000;
        let interval = 60_000;
        let mut gens = Generations::from_parts(vec![Generation::new(7, 0, pos(0, 0), 0)], 3);
        gens.set_current_bucket(crate::horizon::bucket_of(backlog, interval));
        let mut rotation = Rotation::new(Some(backlog), interval, 3, Some(10), &gens);
        rotation.take(&mut gens, 0, 5, crate::horizon::reread_ms(Some(backlog), now), Some(5));
        gens.relearn(0xE, 0, 5);
        rotation.take(&mut gens, 0, 6, crate::horizon::reread_ms(Some(now - 1), now), Some(6));
        gens.relearn(0xF, 0, 6);
        assert!(
            gens.lookup(0xE).is_some(),
            "E, forwarded just before on the partition clock, forgotten"
        );
        assert!(gens.lookup(0xF).is_some());
    }

    /// One row per case: (reader position at the end event, limit, whether the re-read ends).
    #[test]
    fn the_reread_ends_at_the_end_or_at_the_limit_never_below_it() {
        #[rustfmt::skip]
        let rows = [
            (Some(100), None,      true,  "reading to the end: the end event ends it"),
            (None,      None,      true,  "reading to the end, position unknown"),
            (Some(100), Some(100), true,  "the limit reached"),
            (Some(101), Some(100), true,  "past the limit (a commit marker after it)"),
            (Some(90),  Some(100), false, "the last stable offset below the limit: wait for it"),
            (None,      Some(100), false, "position unknown with a limit: keep reading"),
        ];
        for (position, stop, ends, why) in rows {
            assert_eq!(eof_ends_reread(position, stop), ends, "{why}");
        }
    }
}

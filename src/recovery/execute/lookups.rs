//! The plan's I/O outside the re-read: watermarks, offsets by time, a look at one record (or the
//! last few) of a partition, the fence wait.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::{debug, error, warn};

use super::digest::key_value_digest;
use crate::config::{Delivery, Start};
use crate::generations::{now_ms, Positions};
use crate::kafka;
use crate::provenance::Provenance;
use crate::recovery::plan::AtInput;
use crate::recovery::{check, RecoveryEnv, RecoveryError, RecoveryRequest, REQUEST_TIMEOUT};

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
pub(super) fn at_input(
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
pub(super) fn provenance_before(
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
pub(super) fn start_offset(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    p: i32,
    start: Start,
) -> Result<i64, RecoveryError> {
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
pub(super) fn transaction_ends(env: &RecoveryEnv, out_parts: &[i32]) -> Result<Option<Positions>, RecoveryError> {
    if env.cfg.output.delivery != Delivery::Transactional {
        return Ok(None);
    }
    let mut c = kafka::reader_config(&env.cfg);
    c.set("isolation.level", "read_uncommitted");
    let client: rdkafka::consumer::BaseConsumer<kafka::Logged> =
        c.create_with_context(kafka::Logged::new("recovery's transaction look-up"))?;
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
pub(super) fn horizon_start(
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
pub(super) fn within_retention(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    p: i32,
    resume: i64,
) -> Result<i64, RecoveryError> {
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
pub(super) fn wait_for_fence(env: &RecoveryEnv, req: &RecoveryRequest) -> Result<(), RecoveryError> {
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

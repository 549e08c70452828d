//! The re-read of the output: its ranges, its progress, the rotation of the generations by
//! record time, what it found.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::message::BorrowedMessage;
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::{error, info, warn};

use super::digest::key_value_digest;
use crate::config::Partitioning;
use crate::generations::{now_ms, Generations, Positions};
use crate::global::{note_taken, HighWater};
use crate::horizon;
use crate::kafka;
use crate::provenance::Provenance;
use crate::recovery::plan::{learns, Reread};
use crate::recovery::{check, RecoveryEnv, RecoveryError, RecoveryRequest, REQUEST_TIMEOUT};
use crate::telemetry::{PartitionMetrics, Totals};

/// Interval of progress log lines during a long re-read.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);
/// Poll errors tolerated during one re-read before the recovery fails (and is retried).
const MAX_SCAN_ERRORS: u32 = 50;

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
    /// check against the input record it names ([`confirmed`](super::digest::confirmed)).
    newest_digest: BTreeMap<i32, u128>,
    /// The newest effective time among the records read ([`horizon::reread_ms`]).
    clock_ms: Option<i64>,
    /// `partitioning = "preserve"`: the rotations the re-read records caused when they were
    /// taken ([`Rotation`]); `None` with `"key"` (records by output position only).
    rotation: Option<Rotation>,
    /// Global scope, filter stage, `preserve` partitioning: the high-water marks the records
    /// read prove ([`Progress::record`]).
    high_water: HighWater,
    /// The committed route offset, if any, and the marks of the records forwarded from below it
    /// ([`Scanned::high_water_below`]).
    marks_below: Option<(i64, HighWater)>,
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
pub(super) struct Scanned {
    /// The end reached per output partition.
    pub(super) ends: Positions,
    /// Records read.
    pub(super) records: u64,
    /// Per output partition, the newest input offset of the recovering partition found in it,
    /// by provenance ([`crate::provenance`]).
    pub(super) newest: BTreeMap<i32, i64>,
    /// The key-and-value fingerprint of each record behind `newest`.
    pub(super) newest_digest: BTreeMap<i32, u128>,
    /// The newest effective time among the records read ([`horizon::reread_ms`]).
    pub(super) clock_ms: Option<i64>,
    /// The high-water marks the records read prove (see [`Progress::high_water`]).
    pub(super) high_water: HighWater,
    /// Those of the records forwarded from below the committed offset (`retake_from`), when
    /// there is one and the records name their route offset (`output.provenance`; without it,
    /// `None`: all are taken, as they were before): what a partition resuming there takes. The records from it on are taken
    /// again on resume, which marks them in their turn; a mark made by a later one would drop an
    /// earlier copy the crashed owner had not finished (a halted record, a side copy in flight)
    /// as a re-copy.
    pub(super) high_water_below: Option<HighWater>,
}

/// Re-reads output partitions `out_parts` from `reread.from` to their end (or `reread.to`),
/// re-learning fingerprints into `gens` (with `partitioning = "preserve"`, rotating them by
/// record time from the partition clock `clock` the state was checkpointed with, never away
/// from records at or after `retake_from`: [`Rotation`]).
/// Returns the end position per output partition, the number of records read and the newest
/// effective time among them.
pub(super) fn scan(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    req: &RecoveryRequest,
    out_parts: &[i32],
    reread: &Reread,
    gens: &mut Generations,
    (clock, retake_from): (Option<i64>, Option<i64>),
) -> Result<Scanned, RecoveryError> {
    let (tpl, mut progress) = ranges(env, reader, out_parts, reread)?;
    // Only the filter stage's own provenance (`output.provenance`) names a record's route offset.
    progress.marks_below = retake_from
        .filter(|_| env.cfg.output.provenance)
        .map(|c| (c, HighWater::new()));
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
        marks_below: None,
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
            high_water_below: self.marks_below.map(|(_, m)| m),
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
            // The input offset of this partition the record was forwarded from (provenance).
            let source = named
                .as_ref()
                .filter(|s| s.partition == req.partition)
                .map(|s| s.offset);
            if let Some(r) = self.rotation.as_mut() {
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
                // With its input offset: meeting that input record again after the restart is
                // a re-take, not a replay (`route::Route::DropRetaken`).
                gens.relearn(fp.0, q, o, source);
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
            let own_offset = named
                .as_ref()
                .filter(|s| s.partition == req.partition)
                .map(|s| s.offset);
            if let Some((committed, below)) = self.marks_below.as_mut() {
                if own_offset.is_some_and(|o| o < *committed) {
                    note_taken(below, source);
                }
            }
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
                gens.relearn(*o as u128 + 1, 0, *o, None);
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
        gens.relearn(e, 0, 5, None);
        for (o, t, src) in [(6, 1_100, 21), (7, 2_100, 22), (8, 3_100, 23)] {
            rotation.take(&mut gens, 0, o, Some(t), Some(src));
            gens.relearn(1000 + o as u128, 0, o, None);
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
        gens.relearn(0xE, 0, 5, None);
        rotation.take(&mut gens, 0, 6, crate::horizon::reread_ms(Some(now - 1), now), Some(6));
        gens.relearn(0xF, 0, 6, None);
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

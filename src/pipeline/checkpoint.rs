//! Checkpoints: what makes the state of the running partitions durable.
//!
//! Nothing rotates here: generations rotate when a record moves its partition's clock into a later
//! bucket of record time ([`crate::horizon`], in the filter), so a checkpoint only makes durable
//! what exists. Rotations between two checkpoints are fine: each generation's `out_start` is a
//! lower bound of where its records lie in the output, and the next checkpoint names the live
//! generations as they are then.
//!
//! Idempotent mode, every `checkpoint.interval`, in stages that never stop consumption:
//! 1. note each running partition's target offset (the consumer's position: everything taken so
//!    far, plus transaction markers librdkafka skipped), its frozen generations (shared `Arc`s)
//!    and an empty copy of its current one, and its partition clock;
//! 2. [`Stage::Delivering`]: wait until every record before each target is acknowledged;
//! 3. [`Stage::Persisting`]: write the frozen generations and positions to the store in one
//!    atomic sled batch and flush, on a background thread;
//! 4. commit the targets with their [`CheckpointMeta`](crate::metadata::CheckpointMeta) (epoch,
//!    output start of each live generation, partition clock) and the horizon markers
//!    ([`commit_list`]).
//!
//! Transactional mode: a checkpoint commits the producer's transaction with the offsets in it
//! ([`Filter::commit_transaction`], `transaction.rs`), then stores the partitions' state.
//!
//! Every commit and store write of one partition derives from one [`CheckpointRecord`].

use std::collections::BTreeMap;
use std::sync::mpsc::{self, RecvTimeoutError, TryRecvError};
use std::time::Instant;

use rdkafka::consumer::Consumer;
use rdkafka::error::{KafkaError, KafkaResult};
use rdkafka::{Offset, TopicPartitionList};
use tracing::{debug, info, warn};

use super::checkpoint_state::{Checkpoint, CheckpointPart, CheckpointRecord, PersistJob, Stage};
use super::context::FilterConsumer;
use super::filter::Filter;
use super::mode::Mode;
use super::Fatal;
use crate::config::{Config, Partitioning};
use crate::generations::Generation;
use crate::metadata::{new_checkpoint_id, MARKER_METADATA};
use crate::partition::Partition;
use crate::store::PartitionWrite;
use crate::telemetry::{self, Totals};

impl Filter {
    /// Starts, advances or finishes the periodic checkpoint. Errors (transactional mode) stop
    /// the pipeline.
    pub(super) fn drive_checkpoint(&mut self, consumer: &FilterConsumer) -> Result<(), Fatal> {
        match self.mode {
            Mode::Transactional { .. } => self.drive_transaction(consumer),
            Mode::Idempotent { .. } => {
                self.drive_stages(consumer);
                Ok(())
            }
        }
    }

    /// True (and the next one scheduled) when a periodic checkpoint is due.
    pub(super) fn checkpoint_due(&mut self) -> bool {
        if Instant::now() < self.next_checkpoint {
            return false;
        }
        self.next_checkpoint = Instant::now() + self.cfg.checkpoint.interval;
        true
    }

    /// Idempotent mode: begins a checkpoint when due, or moves the one in progress on.
    fn drive_stages(&mut self, consumer: &FilterConsumer) {
        let Filter {
            mode,
            partitions,
            halts,
            ..
        } = self;
        let Mode::Idempotent { checkpoint } = mode else { return };
        let Some(ckpt) = checkpoint.as_mut() else {
            if self.checkpoint_due() {
                self.begin_checkpoint(consumer);
            }
            return;
        };
        match &ckpt.stage {
            Stage::Delivering => {
                // A checkpoint waiting longer than an interval (a destination unreachable rather
                // than refusing: an output partition offline) commits the partitions that are
                // done; the others wait for a later checkpoint.
                let stale = ckpt.started.elapsed() >= self.cfg.checkpoint.interval;
                let mut left_out = Vec::new();
                ckpt.parts.retain(|p, part| {
                    let Some(Partition::Running(r)) = partitions.get(p) else {
                        return false;
                    };
                    if r.incarnation != part.incarnation {
                        return false;
                    }
                    if halts.contains_key(p) {
                        // Halted meanwhile (`halt`): committed up to its first refused record,
                        // with the marks of the copies before it only.
                        part.record.offset = part.record.offset.min(r.inflight.watermark());
                        part.record.high_water = r.high_water.below(part.record.offset);
                        part.lowered = true;
                    }
                    let done = r.inflight.watermark() >= part.record.offset;
                    if stale && !done {
                        left_out.push(*p);
                    }
                    done || !stale
                });
                if !left_out.is_empty() {
                    warn!(
                        partitions = ?left_out,
                        waited_seconds = ckpt.started.elapsed().as_secs_f64(),
                        "records of these partitions are not acknowledged after a checkpoint interval (a destination \
                         unreachable?): the checkpoint commits the other partitions, these at a later one"
                    );
                }
                let delivered = ckpt.parts.iter().all(|(p, part)| match partitions.get(p) {
                    Some(Partition::Running(r)) => r.inflight.watermark() >= part.record.offset,
                    _ => true,
                });
                if delivered && ckpt.parts.is_empty() && stale {
                    *checkpoint = None; // nothing done: the next checkpoint tries again
                } else if delivered {
                    self.persist_checkpoint();
                }
            }
            Stage::Persisting(rx, _) => match rx.try_recv() {
                Ok((result, changelog)) => {
                    // Committed anyway: the store is a cache, a restart rebuilds from the output topic.
                    self.store_written(&result);
                    self.commit_checkpoint(consumer, changelog);
                }
                Err(TryRecvError::Empty) => {}
                Err(TryRecvError::Disconnected) => self.commit_checkpoint(consumer, BTreeMap::new()),
            },
        }
    }

    /// The running partitions.
    pub(super) fn running(&self) -> Vec<i32> {
        self.partitions
            .iter()
            .filter(|(_, s)| matches!(s, Partition::Running(_)))
            .map(|(p, _)| *p)
            .collect()
    }

    /// Moves each running partition of `parts` past records the consumer skipped without
    /// returning them (transaction markers, aborted records): reads the consumer's position and
    /// applies [`InFlight::skip_to`](crate::partition::InFlight::skip_to).
    pub(super) fn skip_to_positions(&mut self, consumer: &FilterConsumer, parts: &[i32]) {
        let positions = consumer.position().ok();
        let topic = &self.cfg.input.topic;
        for p in parts {
            let Some(Partition::Running(run)) = self.partitions.get_mut(p) else {
                continue;
            };
            if let Some(Offset::Offset(o)) = positions
                .as_ref()
                .and_then(|t| t.find_partition(topic, *p))
                .map(|e| e.offset())
            {
                run.inflight.skip_to(o);
            }
        }
    }

    /// Step 1: note every running partition's commit target and the state it commits.
    fn begin_checkpoint(&mut self, consumer: &FilterConsumer) {
        let running = self.running();
        self.skip_to_positions(consumer, &running);
        let mut parts = BTreeMap::new();
        for (p, state) in self.partitions.iter_mut() {
            let Partition::Running(run) = state else { continue };
            // Halted (`halt`): committed up to its first refused record, which stays uncommitted
            // until it is taken; otherwise everything taken so far.
            let lowered = self.halts.contains_key(p);
            let target = match lowered {
                true => run.inflight.watermark(),
                false => run.inflight.next_offset(),
            };
            run.ckpt = new_checkpoint_id();
            // The marks of the copies taken before the target only (a halted one is not).
            run.high_water.settle(run.inflight.watermark());
            let mut record =
                CheckpointRecord::new(*p, target, &run.gens, run.clock.time(), run.ckpt.clone(), false, None)
                    .with_high_water(run.high_water.below(target));
            record.changelog = run.changelog.clone();
            parts.insert(
                *p,
                CheckpointPart {
                    incarnation: run.incarnation,
                    record,
                    frozen: run.gens.frozen().cloned().collect(),
                    current: run.gens.current().empty_copy(),
                    lowered,
                },
            );
        }
        self.mode = Mode::Idempotent {
            checkpoint: Some(Checkpoint {
                started: Instant::now(),
                parts,
                stage: Stage::Delivering,
            }),
        };
    }

    /// Step 3: write the frozen generations on a background thread.
    fn persist_checkpoint(&mut self) {
        let Mode::Idempotent { checkpoint: Some(ckpt) } = &mut self.mode else {
            return;
        };
        let store = self.store.clone();
        let cfg = self.cfg.clone();
        // A partition halted during the checkpoint commits only up to its first refused record,
        // and its frozen generations may hold records after it that are not in the output yet
        // (in flight): neither its snapshot nor its changelog is written (a crash then rebuilds
        // it from the output; its commit names the changelog checkpoint it named before).
        let halted: Vec<i32> = self.halts.keys().copied().collect();
        let jobs: Vec<PersistJob> = ckpt
            .parts
            .values()
            .filter(|part| !part.lowered)
            .map(|part| PersistJob {
                record: part.record.clone(),
                frozen: part.frozen.clone(),
                current: part.current.empty_copy(),
            })
            .collect();
        let (tx, rx) = mpsc::channel();
        let (stored_tx, stored) = mpsc::channel();
        crate::crash::point("checkpoint-before-store");
        std::thread::spawn(move || {
            let writes: Vec<PartitionWrite<'_>> = jobs
                .iter()
                .map(|job| {
                    let gens = job
                        .frozen
                        .iter()
                        .map(|g| g.as_ref())
                        .chain(std::iter::once(&job.current));
                    job.record.write(job.current.out_start.clone(), gens.collect())
                })
                .collect();
            let started = Instant::now();
            let result = store.save(&writes);
            debug!(
                partitions = writes.len(),
                seconds = started.elapsed().as_secs_f64(),
                ok = result.is_ok(),
                "checkpoint stored"
            );
            drop(writes);
            let _ = stored_tx.send(());
            let changelog = write_changelog(&cfg, &jobs, &halted);
            let _ = tx.send((result, changelog));
        });
        ckpt.stage = Stage::Persisting(rx, stored);
    }

    /// Step 4: commit the targets with their metadata (asynchronously), naming the changelog
    /// chunks written for them (`changelog`), which the partitions name from now on.
    fn commit_checkpoint(
        &mut self,
        consumer: &FilterConsumer,
        changelog: BTreeMap<i32, crate::changelog::ChangelogRef>,
    ) {
        let Mode::Idempotent { checkpoint } = &mut self.mode else {
            return;
        };
        let Some(mut ckpt) = checkpoint.take() else { return };
        for (p, r) in changelog {
            let Some(part) = ckpt.parts.get_mut(&p) else { continue };
            if let Some(Partition::Running(run)) = self.partitions.get_mut(&p) {
                if run.incarnation == part.incarnation {
                    run.changelog = Some(r.clone());
                }
            }
            part.record.changelog = Some(r);
        }
        // Only partitions still owned by the same incarnation.
        let records: Vec<&CheckpointRecord> = ckpt
            .parts
            .iter()
            .filter(|(p, part)| matches!(self.partitions.get(p), Some(Partition::Running(r)) if r.incarnation == part.incarnation))
            .map(|(_, part)| &part.record)
            .collect();
        let tpl = match commit_list(&self.cfg, &records) {
            Ok(t) => t,
            Err(e) => {
                warn!(error = %e, "cannot build the offset commit");
                return;
            }
        };
        if tpl.count() > 0 {
            crate::crash::point("checkpoint-before-commit");
            if let Err(e) = commit_async(consumer, &tpl) {
                warn!(error = %e, "offset commit could not be sent; the next checkpoint commits again");
                telemetry::checkpoint_result(false);
                return;
            }
        } else {
            telemetry::checkpoint_result(true); // nothing owned: nothing to confirm
        }
        let secs = ckpt.started.elapsed().as_secs_f64();
        telemetry::checkpoint_duration(secs);
        Totals::bump(&self.totals.checkpoints);
        self.log_checkpoint(records.len(), "sent");
    }

    /// Logs a checkpoint at info: its input partitions, its commit (`sent`: the offset commit, which
    /// the group coordinator confirms later, a refusal logged then; `committed`: the transaction;
    /// `hand-over`: the commit of partitions handed over, at a revocation or the stop) and the
    /// records of the whole process consumed, forwarded, dropped as replays and without a
    /// fingerprint since the previous line (so the lines of a run whose stop's hand-over commits
    /// add up to the totals that the stop's last line gives: `/metrics` without a scrape).
    pub(super) fn log_checkpoint(&mut self, partitions: usize, commit: &'static str) {
        let now = self.totals.progress();
        let d = now.since(self.logged);
        self.logged = now;
        info!(
            partitions,
            commit = %commit,
            consumed = d.consumed,
            forwarded = d.forwarded,
            replays_dropped = d.replays_dropped,
            unfingerprintable = d.unfingerprintable,
            retaken = d.retaken,
            "checkpoint"
        );
    }

    /// Waits for a background store write and commits its checkpoint (before a hand-over). The
    /// store write (local) is waited for: landing later, it would overwrite the snapshot the
    /// hand-over writes. Its changelog write is waited for until `deadline` (the hand-over's,
    /// `output.handover_timeout`): with the changelog's leaders offline it can take a
    /// changelog request timeout per chunk; past the deadline the commit names the changelog
    /// checkpoint the partitions named before (the chunks written later are named by none).
    pub(super) fn finish_persisting(&mut self, consumer: &FilterConsumer, deadline: Instant) {
        if let Mode::Idempotent {
            checkpoint:
                Some(Checkpoint {
                    stage: Stage::Persisting(rx, stored),
                    ..
                }),
        } = &self.mode
        {
            let _ = stored.recv();
            let changelog = match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok((_, c)) => c,
                Err(RecvTimeoutError::Timeout) => {
                    warn!(
                        "the checkpoint's changelog write did not complete within output.handover_timeout; the \
                         hand-over commits naming the changelog checkpoint each partition named before"
                    );
                    BTreeMap::new()
                }
                Err(RecvTimeoutError::Disconnected) => BTreeMap::new(),
            };
            self.commit_checkpoint(consumer, changelog);
        }
    }

    /// Checkpoint records of the running partitions among `parts`, each at its commit position
    /// under a new checkpoint id; `clean(p)` says which hand over cleanly.
    pub(super) fn records(
        &mut self,
        parts: &[i32],
        clean: impl Fn(i32) -> bool,
        transactional: bool,
    ) -> Vec<CheckpointRecord> {
        let mut out = Vec::new();
        for p in parts {
            if let Some(Partition::Running(run)) = self.partitions.get_mut(p) {
                out.push(CheckpointRecord::of_running(*p, run, clean(*p), transactional));
            }
        }
        out
    }

    /// Synchronously stores the full state (every generation, the current one included) of the
    /// partitions of `records`. A failure is logged: the next owner rebuilds from the output.
    pub(super) fn store_partitions(&mut self, parts: &[i32], records: &[CheckpointRecord]) {
        let mut writes = Vec::new();
        for record in records {
            if let Some(Partition::Running(run)) = self.partitions.get(&record.partition) {
                writes.push(record.write(run.out_positions.clone(), run.gens.iter().collect()));
            }
        }
        let result = self.store.save(&writes);
        drop(writes);
        if let Err(e) = &result {
            debug!(partitions = ?parts, error = %e, "store write failed; the next owner rebuilds from the output topic");
        }
        self.store_written(&result);
    }
}

/// Writes the frozen generations of each job to the changelog (`store.changelog_topic`, when
/// set) and returns, per partition, the chunks written and acknowledged. A partition whose write
/// fails is left out (logged): its commit names the changelog checkpoint it named before.
fn write_changelog(cfg: &Config, jobs: &[PersistJob], halted: &[i32]) -> BTreeMap<i32, crate::changelog::ChangelogRef> {
    let mut out = BTreeMap::new();
    if cfg.store.changelog_topic.is_empty() {
        return out;
    }
    for job in jobs.iter().filter(|j| !halted.contains(&j.record.partition)) {
        let frozen: Vec<&Generation> = job.frozen.iter().map(|g| g.as_ref()).collect();
        let started = Instant::now();
        match crate::changelog::write(cfg, job.record.partition, &job.record.ckpt, job.record.epoch, &frozen) {
            Ok(Some((r, bytes))) => {
                telemetry::changelog_written(bytes);
                debug!(
                    partition = job.record.partition,
                    bytes,
                    chunks = r.n,
                    seconds = started.elapsed().as_secs_f64(),
                    "changelog written"
                );
                out.insert(job.record.partition, r);
            }
            Ok(None) => {}
            Err(e) => warn!(
                partition = job.record.partition,
                error = %e,
                "changelog write failed; the commit names the changelog checkpoint it named before"
            ),
        }
    }
    out
}

/// The offset commit of a checkpoint: each input partition's offset with its [`CheckpointMeta`],
/// and, with `partitioning = "preserve"`, the horizon marker: the group's offset on output
/// partition `p` set to where `p`'s oldest live generation begins. Both go in one OffsetCommit
/// request. The marker lets recovery find the horizon on brokers that drop offset metadata.
/// Sends the offset commit `tpl` without waiting for it. The group coordinator's answer comes
/// back as an offset-commit event on the consumer's own queue, which `poll` hands to
/// [`FilterContext::commit_callback`](super::context::FilterContext) (a failure is logged and
/// counted there).
///
/// Not `Consumer::commit(.., CommitMode::Async)`: that calls `rd_kafka_commit` without a reply
/// queue, and librdkafka then drops the result of a manual commit unless an `offset_commit_cb`
/// is configured (`rd_kafka_cgrp_propagate_commit_result`, rdkafka_cgrp.c), which
/// rust-rdkafka's event-based consumer never configures: a failed checkpoint commit went
/// unnoticed. `rd_kafka_commit_queue` posts the answer to the queue it is given.
fn commit_async(consumer: &FilterConsumer, tpl: &TopicPartitionList) -> KafkaResult<()> {
    use rdkafka::bindings as rd;
    let rk = consumer.client().native_ptr();
    // SAFETY: `rk` is the live consumer's handle and `tpl` a valid list for the duration of
    // the call (librdkafka copies it); the queue reference taken here is released after the
    // call, the queue itself lives as long as the consumer.
    let err = unsafe {
        let queue = rd::rd_kafka_queue_get_consumer(rk);
        let err = rd::rd_kafka_commit_queue(rk, tpl.ptr(), queue, None, std::ptr::null_mut());
        rd::rd_kafka_queue_destroy(queue);
        err
    };
    if err == rd::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
        Ok(())
    } else {
        Err(KafkaError::ConsumerCommit(err.into()))
    }
}

pub(super) fn commit_list(cfg: &Config, records: &[&CheckpointRecord]) -> KafkaResult<TopicPartitionList> {
    let mut tpl = TopicPartitionList::new();
    for r in records {
        let p = r.partition;
        tpl.add_partition_offset(&cfg.input.topic, p, Offset::Offset(r.offset))?;
        if let Some(mut e) = tpl.find_partition(&cfg.input.topic, p) {
            e.set_metadata(r.meta().encode());
        }
        if cfg.output.partitioning == Partitioning::Preserve {
            if let Some(start) = r.gens.first().and_then(|g| g.get(&p)) {
                tpl.add_partition_offset(&cfg.output.topic, p, Offset::Offset(*start))?;
                if let Some(mut e) = tpl.find_partition(&cfg.output.topic, p) {
                    e.set_metadata(MARKER_METADATA);
                }
            }
        }
    }
    Ok(tpl)
}

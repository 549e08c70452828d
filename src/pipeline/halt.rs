//! Side topics that refuse: what happens when `output.duplicates_topic` or
//! `fingerprint.dead_letter_topic` does not take a copy (the topic was deleted, the copy is too
//! large, the producer is not authorised to write there).
//!
//! The partition *halts* instead of the process stopping. A dead-letter copy is the only place a
//! record without fingerprint goes, so skipping it would lose the record; and stopping the
//! process would only make it meet the same record again at the next start (a crash loop, every
//! partition down). Halted:
//!
//! - the refused record stays taken and unacknowledged in [`InFlight`](crate::partition::InFlight),
//!   so nothing is ever committed past it; records after it that were already produced are
//!   acknowledged as usual, and later records are not taken (the partition is paused in the
//!   consumer);
//! - periodic checkpoints leave the partition out (its committed offset stays where it was); a
//!   hand-over (revocation, SIGTERM) does not wait for the refused copies, which are not in
//!   flight, and commits up to the first of them, cleanly;
//! - `/readyz` is not ready and names the topic, the input offset and the error; the partition's
//!   state gauge says `halted`; each refusal is counted in
//!   `kafka_dedup_side_copies_refused_total{partition,side}`; other partitions run on;
//! - the refused copies are sent again, in input order, after [`RETRY_FIRST`], then with the wait
//!   doubling up to [`RETRY_MAX`]. Once all are acknowledged the partition resumes where it
//!   stopped taking records. A side copy may therefore land more than once (a produce that timed
//!   out may have been written) and out of order with later copies: side topics are
//!   at-least-once.
//!
//! A partition also halts when a record's `avro:` or `protobuf:` fingerprint (or a `-key:`
//! form's) needs a writer schema and the schema registry cannot be reached ([`Filter::halt_for_registry`]): the record is not taken
//! (nothing is committed past it, later records are not taken either), `/readyz` names the
//! registry's error, and after [`RETRY_FIRST`], doubling up to [`RETRY_MAX`], the partition
//! resumes at that record, which is fingerprinted again. Forwarding it as a record without
//! fingerprint would let its replays through (or drop or dead-letter it, by `on_missing`).
//!
//! Transactional mode halts the same way when the producer refuses a copy outright (a local
//! error: nothing entered the transaction). A copy the *broker* refuses fails the open
//! transaction, which can then only be aborted: the pipeline stops with
//! [`Fatal::Delivery`](super::Fatal::Delivery), as for the output topic.

use std::time::Instant;

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::BaseRecord;
use rdkafka::TopicPartitionList;
use tracing::{debug, error, info, warn};

use super::context::FilterConsumer;
use super::delivery::encode_opaque;
use super::filter::Filter;
use super::ownership::resume_at;
use super::produce::{out_of_range, timestamp_refusal};
#[cfg(doc)]
use super::refused::RETRY_MAX;
use super::refused::{backoff, Halt, SideCopy, RETRY_FIRST};
use crate::generations::now_ms;
use crate::partition::{Partition, Target};
use crate::state::PartitionState;
use crate::telemetry;

impl Filter {
    /// The configuration key and metric label of side topic `topic` (or of the output topic).
    fn side_of(&self, topic: &str) -> (&'static str, &'static str) {
        if topic == self.cfg.output.topic {
            ("output.topic", "output")
        } else if topic == self.cfg.output.duplicates_topic {
            ("output.duplicates_topic", "duplicates")
        } else {
            ("fingerprint.dead_letter_topic", "dead_letter")
        }
    }

    /// A side topic refused `copy`, the record at input `offset` of running partition `p` with
    /// sequence number `seq` (still taken, unacknowledged): halt the partition (or note one more
    /// refusal), count it, say why.
    pub(super) fn halt(&mut self, p: i32, seq: u64, offset: i64, mut copy: SideCopy, error: &KafkaError) {
        let Some(Partition::Running(run)) = self.partitions.get(&p) else {
            return;
        };
        let incarnation = run.incarnation;
        let (key, side) = self.side_of(&copy.topic);
        if side != "output" && out_of_range(error) {
            // The side topic refused the copy's timestamp (its limits could not be read at start,
            // or changed): sent again stamped now, the record's stamp in a header.
            copy.restamp();
        }
        match side {
            "output" => telemetry::output_refused(p, "halt"),
            side => telemetry::side_refused(p, side),
        }
        let halt = Halt::of(&mut self.halts, p, incarnation);
        let wait = backoff(halt.attempts);
        halt.resent.remove(&seq);
        halt.retry_at = Instant::now() + wait;
        halt.cause = match side {
            "output" if out_of_range(error) => format!(
                "{key} \"{}\" refused input offset {offset}: {error} (stamped {}, out of the range the topic's \
                 message.timestamp.before.max.ms / message.timestamp.after.max.ms take, with a margin); ways past: \
                 raise them (or set its message.timestamp.type to LogAppendTime) and restart, set \
                 fingerprint.dead_letter_topic, or let it past with input.skip = \"{p}:{offset}\"; checking it \
                 again with back-off (a record stamped in the future goes once in range)",
                copy.topic,
                copy.timestamp.map_or("-".to_string(), |t| t.to_string()),
            ),
            "output" => format!(
                "{key} \"{}\" refused input offset {offset}: {error}; ways past: raise the topic's \
                 max.message.bytes (or kafka.properties.message.max.bytes) and restart, set \
                 fingerprint.dead_letter_topic, or let it past with input.skip = \"{p}:{offset}\"; sending it again \
                 with back-off",
                copy.topic
            ),
            _ => format!(
                "{key} \"{}\" refused the copy of input offset {offset}: {error}; sending it again with back-off",
                copy.topic
            ),
        };
        // One line per round: a batch of copies usually fails together.
        if halt.refused.is_empty() {
            error!(
                partition = p,
                offset,
                topic = copy.topic.as_str(),
                error = %error,
                retry_in = ?wait,
                attempts = halt.attempts,
                cause = halt.cause.as_str(),
                "a topic refused a record of the partition; the partition halts (nothing committed past it) and retries"
            );
        } else {
            debug!(partition = p, offset, error = %error, "side topic refused another copy");
        }
        halt.refused.insert(offset, (seq, copy));
        self.status.set_halted(p, &halt.cause);
    }

    /// The record at input `offset` of running partition `p` (returned, not taken) could not be
    /// fingerprinted because the schema registry is unavailable (`error`): halt the partition
    /// (nothing at or after `offset` is taken, nothing committed past it) and resume it at
    /// `offset` after a back-off, where the record is fingerprinted again. A partition that also
    /// holds refused side copies resumes once they are delivered, as any halt.
    pub(super) fn halt_for_registry(&mut self, p: i32, offset: i64, error: &str) {
        let Some(Partition::Running(run)) = self.partitions.get(&p) else {
            return;
        };
        let incarnation = run.incarnation;
        let halt = Halt::of(&mut self.halts, p, incarnation);
        let attempts = self.registry_attempts.entry(p).or_insert(0);
        let wait = backoff(*attempts);
        *attempts = attempts.saturating_add(1);
        halt.registry = true;
        halt.retry_at = Instant::now() + wait;
        halt.cause = format!(
            "fingerprint.schema_registry: {error}; input offset {offset} waits unfingerprinted (nothing \
             after it is taken) and is fingerprinted again in {wait:?}"
        );
        error!(
            partition = p,
            offset,
            retry_in = ?wait,
            cause = halt.cause.as_str(),
            "the schema registry is unavailable; the partition halts (nothing committed past the record) and retries"
        );
        telemetry::registry_unavailable(p);
        self.status.set_halted(p, &halt.cause);
    }

    /// A side copy of halted partition `p` sent again was acknowledged.
    pub(super) fn halted_copy_acknowledged(&mut self, p: i32, seq: u64) {
        if let Some(h) = self.halts.get_mut(&p) {
            h.resent.remove(&seq);
        }
    }

    /// Between two batches: pauses newly halted partitions, sends refused copies again when
    /// their time has come, and resumes partitions whose copies were all acknowledged.
    pub(super) fn drive_halts(&mut self, consumer: &FilterConsumer) {
        if self.halts.is_empty() {
            return;
        }
        let now = Instant::now();
        let parts: Vec<i32> = self.halts.keys().copied().collect();
        for p in parts {
            let current = match self.partitions.get(&p) {
                Some(Partition::Running(run)) => Some(run.incarnation),
                _ => None,
            };
            let Some(h) = self.halts.get_mut(&p) else { continue };
            if current != Some(h.incarnation) {
                self.halts.remove(&p); // released, or owned anew
                continue;
            }
            if !h.paused {
                let mut tpl = TopicPartitionList::new();
                tpl.add_partition(&self.cfg.input.topic, p);
                match consumer.pause(&tpl) {
                    Ok(()) => h.paused = true,
                    Err(e) => {
                        warn!(partition = p, error = %e, "pausing a halted partition failed; its records are ignored")
                    }
                }
            }
            if h.refused.is_empty() && h.resent.is_empty() {
                if h.registry && now < h.retry_at {
                    continue;
                }
                self.unhalt(consumer, p);
            } else if h.resent.is_empty() && now >= h.retry_at && !self.mode.commit_pending() {
                // Not while a transaction commit is pending: a copy sent then would not be in
                // the transaction; it goes into the next one.
                self.resend(p);
            }
        }
    }

    /// Sends the refused copies of halted partition `p` again, in input order.
    fn resend(&mut self, p: i32) {
        let Some(h) = self.halts.get_mut(&p) else { return };
        h.attempts = h.attempts.saturating_add(1);
        info!(
            partition = p,
            copies = h.refused.len(),
            attempt = h.attempts,
            "sending refused side copies again"
        );
        let refused = std::mem::take(&mut h.refused);
        let mut failed = Vec::new();
        for (offset, (seq, mut copy)) in refused {
            // A record stamped out of the output's range is not sent: the broker would refuse it.
            let to_output = copy.topic == self.cfg.output.topic;
            if to_output && self.output_timestamps.refuses(copy.timestamp, now_ms()).is_some() {
                failed.push((offset, seq, copy, timestamp_refusal()));
                continue;
            }
            // A side copy its topic would refuse for its timestamp (it aged while halted) is
            // stamped now, as when it was first sent (`produce::record_of`).
            let side_stamps = self.side_timestamps.get(&copy.topic);
            if !to_output && side_stamps.is_some_and(|l| l.refuses(copy.timestamp, now_ms()).is_some()) {
                copy.restamp();
            }
            let headers = copy.headers.take();
            let mut record: BaseRecord<'_, [u8], [u8], usize> =
                BaseRecord::with_opaque_to(&copy.topic, encode_opaque(p, seq));
            if let Some(k) = &copy.key {
                record = record.key(k.as_slice());
            }
            if let Some(v) = &copy.payload {
                record = record.payload(v.as_slice());
            }
            if let Some(ts) = copy.timestamp {
                record = record.timestamp(ts);
            }
            if let Some(hs) = headers {
                record = record.headers(hs);
            }
            if let Some(partition) = copy.partition {
                record = record.partition(partition);
            }
            // A record for the output goes through the output's producer (its order and gapless
            // guarantee; nothing after it was taken).
            let producer = match &self.side_producer {
                Some(side) if copy.topic != self.cfg.output.topic => &**side,
                _ => &*self.producer,
            };
            match producer.send(record) {
                Ok(()) => {
                    h.resent.insert(seq, offset);
                    // A record for the output taken by the producer: its fingerprint is learned
                    // now, as `on_record` learns a record it forwards at once (into the current
                    // generation, with its input offset), or its replays would pass.
                    if let (Some(fp), Some(Partition::Running(run))) = (copy.learn, self.partitions.get_mut(&p)) {
                        run.gens.insert(fp, Some(offset));
                    }
                }
                Err((e, back)) => {
                    let headers = back.headers;
                    copy.headers = headers;
                    failed.push((offset, seq, copy, e));
                }
            }
        }
        for (offset, seq, copy, e) in failed {
            self.halt(p, seq, offset, copy, &e);
        }
    }

    /// Every refused copy of partition `p` was acknowledged: resume it where it stopped taking
    /// records.
    fn unhalt(&mut self, consumer: &FilterConsumer, p: i32) {
        let Some(Partition::Running(run)) = self.partitions.get(&p) else {
            self.halts.remove(&p);
            return;
        };
        let next = run.inflight.next_offset();
        if let Err(e) = resume_at(consumer, &self.cfg.input.topic, p, next) {
            warn!(partition = p, error = %e, "resuming a halted partition failed; retrying");
            if let Some(h) = self.halts.get_mut(&p) {
                h.retry_at = Instant::now() + RETRY_FIRST;
            }
            return;
        }
        self.seeks.insert(p, next);
        let registry = self.halts.remove(&p).is_some_and(|h| h.registry);
        self.status.set_partition(p, PartitionState::Running);
        if registry {
            info!(
                partition = p,
                offset = next,
                "the partition runs again and fingerprints the record that waited for the schema registry"
            );
        } else {
            info!(
                partition = p,
                offset = next,
                "side copies delivered; the partition runs again"
            );
        }
    }

    /// For a hand-over: true when nothing of partition `p` is in flight (refused copies of a
    /// halted partition are not).
    pub(super) fn deliveries_idle(&self, p: i32) -> bool {
        match self.partitions.get(&p) {
            Some(Partition::Running(r)) => match self.halts.get(&p) {
                Some(h) => h.nothing_in_flight(r.inflight.pending_count()),
                None => r.inflight.is_idle(),
            },
            _ => true,
        }
    }

    /// Whether the record with sequence number `seq` of running partition `p` is a side copy
    /// awaiting its acknowledgement, and its input offset.
    pub(super) fn pending_side_copy(&self, p: i32, seq: u64) -> Option<i64> {
        match self.partitions.get(&p) {
            Some(Partition::Running(r)) => match r.inflight.pending(seq) {
                Some((offset, Target::Side)) => Some(offset),
                _ => None,
            },
            _ => None,
        }
    }
}

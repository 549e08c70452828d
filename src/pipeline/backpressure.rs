//! Back-pressure from the output: when the producer's queue stays full (the output is slow or
//! unreachable), the poll thread must not wait inside `send` for as long as that lasts. It would
//! stop serving the consumer: past `max.poll.interval.ms` (300 s by default) librdkafka leaves
//! the group, the partitions move to another member while this one's producer still holds their
//! records, and those land after the new owner re-read the output (forwarded twice, out of
//! order). So the record is given back ([`Refused::Full`](super::produce::Refused)), every
//! running partition is paused, and the poll loop goes on serving rebalances and
//! acknowledgements; once the queue has drained to half of what it held (whichever of
//! librdkafka's limits filled it, messages or bytes: [`BackedOff`]), each partition resumes at its
//! first record not taken. With a side producer (idempotent mode with a side topic) its queue must
//! have drained too: either one full gives the record back. A revocation meanwhile is an ordinary
//! hand-over (it waits for the acknowledgements up to `output.handover_timeout`).

use rdkafka::consumer::Consumer;
use rdkafka::producer::Producer;
use rdkafka::TopicPartitionList;
use tracing::{info, warn};

use super::context::FilterConsumer;
use super::filter::Filter;
use super::ownership::resume_at;
use crate::kafka::BackedOff;
use crate::partition::{Partition, Target};

impl Filter {
    /// The queue of `target`'s producer stayed full: pauses every running partition that is not
    /// halted (a halted one is paused already) until [`Self::drive_backpressure`] sees that queue
    /// drained to half of what it holds now ([`BackedOff`]).
    pub(super) fn back_off(&mut self, consumer: &FilterConsumer, target: Target) {
        // The producer whose queue was full: the side producer only with one (idempotent mode
        // with a side topic; otherwise side copies go through the output's).
        let [output, side] = self.queued();
        let held = match (target, side) {
            (Target::Side, Some(side)) => [None, Some(side)],
            _ => [output, None],
        };
        if self.pause_running(consumer, held) {
            warn!(
                queued = self.producer.in_flight_count(),
                side_queued = self.side_producer.as_ref().map(|s| s.in_flight_count()),
                "the producer's queue is full (the output is slow or unreachable): partitions paused until it drains"
            );
        }
    }

    /// Pauses every running partition that is not halted, as [`Self::back_off`] does, and
    /// resumes them the same way, once the producer's queue has drained and no transaction
    /// commit is pending (a pending commit pauses them so: `transaction`, with no condition on the
    /// queues, `held` `[None, None]`). `held`: what the full producers hold ([`BackedOff`]). False
    /// when they were paused already.
    pub(super) fn pause_running(&mut self, consumer: &FilterConsumer, held: [Option<i32>; 2]) -> bool {
        if self.backpressure.is_some() {
            return false;
        }
        self.backpressure = Some(BackedOff::new(held));
        let mut tpl = TopicPartitionList::new();
        for p in self.unhalted_running() {
            tpl.add_partition(&self.cfg.input.topic, p);
        }
        if let Err(e) = consumer.pause(&tpl) {
            warn!(error = %e, "pausing the partitions failed");
        }
        true
    }

    /// What the producers hold: the output's, and the side producer's when there is one
    /// (messages queued or in flight, [`BackedOff`]'s order).
    fn queued(&self) -> [Option<i32>; 2] {
        [
            Some(self.producer.in_flight_count()),
            self.side_producer.as_ref().map(|s| s.in_flight_count()),
        ]
    }

    /// While backed off: once the producers' queues (the output's, and the side producer's when
    /// there is one) have drained to half of what they held when the partitions paused
    /// ([`BackedOff::drained`]), resumes every running partition that is not halted at its first
    /// record not taken.
    pub(super) fn drive_backpressure(&mut self, consumer: &FilterConsumer) {
        let Some(backed_off) = self.backpressure else { return };
        if self.mode.commit_pending() {
            return; // resumed once the pending transaction commit completes
        }
        if !backed_off.drained(self.queued()) {
            return;
        }
        for p in self.unhalted_running() {
            let Some(Partition::Running(run)) = self.partitions.get(&p) else {
                continue;
            };
            let next = run.inflight.next_offset();
            if let Err(e) = resume_at(consumer, &self.cfg.input.topic, p, next) {
                // Stay backed off; the next tick tries again, until a partition librdkafka never
                // started fetching (recovered while paused, so never sought) stops the pipeline.
                warn!(partition = p, error = %e, "resuming after the producer's queue drained failed");
                self.seek_failed(p, &e);
                return;
            }
            self.recoveries.seek_failing.remove(&p);
            self.seeks.insert(p, next);
        }
        self.backpressure = None;
        info!(
            seconds = backed_off.since.elapsed().as_secs_f64(),
            "partitions resumed (the producer's queue drained, no transaction commit pending)"
        );
    }

    /// Running partitions that no side topic halted.
    fn unhalted_running(&self) -> Vec<i32> {
        self.partitions
            .iter()
            .filter(|(p, s)| matches!(s, Partition::Running(_)) && !self.halts.contains_key(p))
            .map(|(p, _)| *p)
            .collect()
    }
}

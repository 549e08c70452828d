//! Back-pressure from the output: when the producer's queue stays full (the output is slow or
//! unreachable), the poll thread must not wait inside `send` for as long as that lasts. It would
//! stop serving the consumer: past `max.poll.interval.ms` (300 s by default) librdkafka leaves
//! the group, the partitions move to another member while this one's producer still holds their
//! records, and those land after the new owner re-read the output (forwarded twice, out of
//! order). So the record is given back ([`Refused::Full`](super::produce::Refused)), every
//! running partition is paused, and the poll loop goes on serving rebalances and
//! acknowledgements; once the queue has drained to half, each partition resumes at its first
//! record not taken. With a side producer (idempotent mode with a side topic) its queue must have
//! drained too ([`drained`]): either one full gives the record back. A revocation meanwhile is an ordinary hand-over (it waits for the
//! acknowledgements up to `output.handover_timeout`).

use std::time::Instant;

use rdkafka::consumer::Consumer;
use rdkafka::producer::Producer;
use rdkafka::TopicPartitionList;
use tracing::{info, warn};

use super::context::FilterConsumer;
use super::filter::Filter;
use super::ownership::resume_at;
use crate::partition::Partition;

/// librdkafka's default `queue.buffering.max.messages`.
const DEFAULT_QUEUE_MESSAGES: i32 = 100_000;

impl Filter {
    /// The producer's queue stayed full: pauses every running partition that is not halted (a
    /// halted one is paused already) until [`Self::drive_backpressure`] sees room again.
    pub(super) fn back_off(&mut self, consumer: &FilterConsumer) {
        if self.pause_running(consumer) {
            warn!(
                queued = self.producer.in_flight_count(),
                side_queued = self.side_producer.as_ref().map(|s| s.in_flight_count()),
                "the producer's queue is full (the output is slow or unreachable): partitions paused until it drains"
            );
        }
    }

    /// Pauses every running partition that is not halted, as [`Self::back_off`] does, and
    /// resumes them the same way, once the producer's queue has drained and no transaction
    /// commit is pending (a pending commit pauses them so: `checkpoint`). False when they were
    /// paused already.
    pub(super) fn pause_running(&mut self, consumer: &FilterConsumer) -> bool {
        if self.backpressure.is_some() {
            return false;
        }
        self.backpressure = Some(Instant::now());
        let mut tpl = TopicPartitionList::new();
        for p in self.unhalted_running() {
            tpl.add_partition(&self.cfg.input.topic, p);
        }
        if let Err(e) = consumer.pause(&tpl) {
            warn!(error = %e, "pausing the partitions failed");
        }
        true
    }

    /// While backed off: once the producers' queues (the output's, and the side producer's when
    /// there is one) have drained to half their size ([`drained`]), resumes every running
    /// partition that is not halted at its first record not taken.
    pub(super) fn drive_backpressure(&mut self, consumer: &FilterConsumer) {
        let Some(since) = self.backpressure else { return };
        if self.mode.commit_pending() {
            return; // resumed once the pending transaction commit completes
        }
        let capacity = self.producer_queue_messages.unwrap_or(DEFAULT_QUEUE_MESSAGES);
        let queued = [
            Some(self.producer.in_flight_count()),
            self.side_producer.as_ref().map(|s| s.in_flight_count()),
        ];
        if !drained(&queued, capacity) {
            return;
        }
        for p in self.unhalted_running() {
            let Some(Partition::Running(run)) = self.partitions.get(&p) else {
                continue;
            };
            let next = run.inflight.next_offset();
            if let Err(e) = resume_at(consumer, &self.cfg.input.topic, p, next) {
                // Stay backed off; the next tick tries again.
                warn!(partition = p, error = %e, "resuming after the producer's queue drained failed");
                return;
            }
            self.seeks.insert(p, next);
        }
        self.backpressure = None;
        info!(
            seconds = since.elapsed().as_secs_f64(),
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

/// Whether every producer's queue has drained to half of `capacity` (messages, the producers'
/// `queue.buffering.max.messages`, the same for both): `queued` holds each producer's
/// `in_flight_count` (messages queued or in flight), `None` for a producer that does not exist.
/// Resuming while one is still full would make the next record that goes to it wait
/// `produce::QUEUE_WAIT` (1 s) in `send` and back off again: a pause and resume per second.
fn drained(queued: &[Option<i32>], capacity: i32) -> bool {
    queued.iter().flatten().all(|q| *q <= capacity / 2)
}

#[cfg(test)]
mod tests {
    use super::drained;

    #[test]
    fn the_partitions_resume_once_every_producer_drained() {
        #[rustfmt::skip]
        let rows = [
            ([Some(0), None], true, "the output's producer empty, no side producer"),
            ([Some(50), None], true, "half full: drained"),
            ([Some(51), None], false, "above half"),
            ([Some(0), Some(0)], true, "both empty"),
            ([Some(10), Some(100)], false, "the side producer still full"),
            ([Some(100), Some(10)], false, "the output's producer still full"),
            ([Some(50), Some(50)], true, "both at half"),
        ];
        for (queued, want, case) in rows {
            assert_eq!(drained(&queued, 100), want, "{case}");
        }
    }
}

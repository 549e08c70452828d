//! Applying acknowledgements: the [`DeliveryEvent`]s that librdkafka's producer thread sent
//! through [`DeliveryContext`](super::DeliveryContext) are drained on the pipeline thread, where
//! each marks its record done in the partition's [`InFlight`](crate::partition::InFlight), or
//! halts the partition (a refused side copy, `halt`), or stops the pipeline.

use std::time::{Duration, Instant};

use rdkafka::error::RDKafkaErrorCode;
use tracing::{error, info};

use super::delivery::{decode_opaque, Acknowledgement, DeliveryEvent, DeliveryFailure};
use super::delivery_queue::Waited;
use super::filter::Filter;
use super::mode::Mode;
use super::Fatal;
use crate::partition::{Partition, Running, Target};
use crate::telemetry::Totals;

impl Filter {
    /// Applies every acknowledgement that arrived, a batch at a time (those that arrive
    /// meanwhile too), in the order they were sent.
    pub(super) fn drain_deliveries(&mut self) {
        loop {
            let mut batch = std::mem::take(&mut self.delivery_batch);
            self.deliveries.take_into(&mut batch);
            if batch.is_empty() {
                self.delivery_batch = batch;
                return;
            }
            for ev in batch.drain(..) {
                self.apply_delivery(ev);
            }
            self.delivery_batch = batch;
        }
    }

    /// Applies one acknowledgement: the record is done. A side copy that failed halts its
    /// partition (idempotent mode, see `halt`); any other failure stops the pipeline.
    fn apply_delivery(&mut self, ev: DeliveryEvent) {
        // Kept for the next record's provenance, or freed, here, on the thread that allocated
        // it (see `DetachedHeaders`, `SpareHeaders`).
        if let Some(list) = ev.headers {
            self.spare_headers.give_back(list);
        }
        let (p, seq) = decode_opaque(ev.opaque);
        let failure = match ev.result {
            Ok(ack) => {
                self.halted_copy_acknowledged(p, seq);
                if let Some(Partition::Running(run)) = self.partitions.get_mut(&p) {
                    acknowledged(run, p, seq, ack, &self.totals);
                }
                return; // or an acknowledgement for a partition no longer owned
            }
            Err(failure) => failure,
        };
        if let (Some(offset), Mode::Idempotent { .. }) = (self.pending_side_copy(p, seq), &self.mode) {
            let DeliveryFailure { error, copy, .. } = *failure;
            return self.halt(p, seq, offset, copy, &error);
        }
        let Some(Partition::Running(run)) = self.partitions.get_mut(&p) else {
            return; // a failure for a partition no longer owned
        };
        let DeliveryFailure { topic, error, copy } = *failure;
        if copy.key.is_none() && error.rdkafka_error_code() == Some(RDKafkaErrorCode::InvalidRecord) {
            // The broker names no record of the refused batch; this one is the likely cause.
            error!(
                partition = p,
                offset = run.inflight.pending(seq).map(|(o, _)| o),
                topic,
                "the output refused a record without a key: a compacted topic (cleanup.policy = compact) \
                 accepts keyed records only; nothing is committed past it"
            );
        }
        // Not acknowledged: the watermark stays before it, so it is never committed, and nothing
        // is stored from now on, so its fingerprint dies with this process. The first failure of
        // a partition is the first record of the refused batch (reports come in order): the
        // message names it for `input.skip`.
        let offset = run
            .inflight
            .pending(seq)
            .map_or_else(|| run.inflight.watermark(), |(o, _)| o);
        if self.failure.is_none() {
            let message = error.to_string();
            error!(
                partition = p,
                offset,
                topic,
                error = message.as_str(),
                "delivery failed; stopping without committing past it"
            );
            self.failure = Some(Fatal::Delivery {
                partition: p,
                offset,
                topic,
                error,
                skippable: true,
            });
        }
    }

    /// Waits until nothing of `parts` awaits an acknowledgement. False at `deadline`, after a
    /// delivery failure, or when the producer is gone.
    pub(super) fn wait_deliveries(&mut self, parts: &[i32], deadline: Instant) -> bool {
        loop {
            self.drain_deliveries();
            let idle = parts.iter().all(|p| self.deliveries_idle(*p));
            if idle {
                return true;
            }
            if self.failure.is_some() {
                return false;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            match self.deliveries.wait(left.min(Duration::from_millis(100))) {
                Waited::Ready | Waited::Timeout => {}
                Waited::Disconnected => return false,
            }
        }
    }
}

/// Marks record `seq` of running partition `p` done; a record forwarded to the output moves the
/// partition's output position and counts as forwarded.
fn acknowledged(run: &mut Running, p: i32, seq: u64, ack: Acknowledgement, totals: &Totals) {
    let Some((_, target)) = run.inflight.ack(seq) else {
        return;
    };
    crate::crash::point("after-ack");
    if target != Target::Output {
        return;
    }
    run.metrics.forwarded.increment(1);
    Totals::bump(&totals.forwarded);
    if let Some(first) = run.first_forward.take() {
        // `seconds` includes the wait for input: `since_running` (from the end of the recovery)
        // tells an idle input from a slow recovery.
        info!(
            partition = p,
            seconds = first.assigned.elapsed().as_secs_f64(),
            since_running = first.running.elapsed().as_secs_f64(),
            rescanned = first.rescanned,
            "first record forwarded since the partition was assigned"
        );
    }
    let e = run.out_positions.entry(ack.partition).or_insert(ack.offset + 1);
    *e = (*e).max(ack.offset + 1);
}

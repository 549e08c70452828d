//! One step of the pipeline between two polls ([`Filter::tick`]): apply the acknowledgements,
//! install recovered partitions, retry halted side copies, drive back-pressure and the
//! checkpoint, and now and then refresh the gauges and answer `inspect --live`.

use std::time::Instant;

use super::context::FilterConsumer;
use super::filter::{Filter, GAUGE_EVERY};
use super::Fatal;
use crate::config::GroupProtocol;

impl Filter {
    /// Applies acknowledgements, installs recovered partitions, drives the checkpoint.
    /// Call after every poll. Errors stop the pipeline.
    pub fn tick(&mut self, consumer: &FilterConsumer) -> Result<(), Fatal> {
        self.drain_deliveries();
        if let Some(f) = self.failure.clone() {
            return Err(f);
        }
        while let Ok(finished) = self.recoveries.rx.try_recv() {
            self.on_recovered(consumer, finished);
        }
        self.retry_recoveries();
        self.drive_halts(consumer);
        self.drive_backpressure(consumer);
        self.drive_checkpoint(consumer)?;
        if self.last_gauges.elapsed() >= GAUGE_EVERY {
            self.last_gauges = Instant::now();
            self.note_membership(consumer);
            self.refresh_gauges();
            self.warn_if_idle();
        }
        self.answer_live();
        Ok(())
    }

    /// With `group.protocol = "consumer"`, marks the group joined once the coordinator gave this
    /// member an epoch ([`crate::kafka::member_epoch`]): a member given no partition gets no
    /// rebalance callback from librdkafka 2.12, and would otherwise never be ready. (The classic
    /// protocol calls the callback with an empty assignment; its generation is set before the
    /// assignment arrives, so it is not used there.)
    fn note_membership(&self, consumer: &FilterConsumer) {
        if self.cfg.kafka.group_protocol() == GroupProtocol::Consumer
            && crate::kafka::member_epoch(consumer).is_some_and(|epoch| epoch > 0)
        {
            self.status.set_joined();
        }
    }
}

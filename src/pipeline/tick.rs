//! One step of the pipeline between two polls ([`Filter::tick`]): apply the acknowledgements,
//! install recovered partitions, retry halted side copies, drive back-pressure and the
//! checkpoint, and now and then refresh the gauges, warn when no partition is owned and answer
//! `inspect --live`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use tracing::warn;

use super::context::FilterConsumer;
use super::filter::{Filter, Idle};
use super::Fatal;
use crate::config::GroupProtocol;
use crate::generations::Generation;
use crate::horizon;
use crate::inspect::live::PartitionView;
use crate::partition::Partition;

/// How often gauges are refreshed and the idle warning is considered.
const GAUGE_EVERY: Duration = Duration::from_secs(1);
/// How long an instance owns no partition before it says so, and how often it repeats it.
const IDLE_WARN_AFTER: Duration = Duration::from_secs(60);
/// See [`IDLE_WARN_AFTER`].
const IDLE_WARN_EVERY: Duration = Duration::from_secs(600);

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

    /// An instance that owns no partition is ready (a replica beyond the partition count is idle
    /// by design), but one that stays so may also mean the group coordinator left partitions with
    /// a member that is gone: after a minute it says so, then every 10 minutes.
    pub(super) fn warn_if_idle(&mut self) {
        if !self.partitions.is_empty() {
            self.idle = Idle::default();
            return;
        }
        let since = *self.idle.since.get_or_insert_with(Instant::now);
        let due = match self.idle.warned {
            None => since.elapsed() >= IDLE_WARN_AFTER,
            Some(last) => last.elapsed() >= IDLE_WARN_EVERY,
        };
        if due {
            self.idle.warned = Some(Instant::now());
            warn!(
                input = %self.cfg.input.topic,
                partitions = self.topics.input,
                idle_seconds = since.elapsed().as_secs(),
                "this instance owns no input partition: fine if the group has more members than the topic \
                 has partitions; otherwise check the group's assignment (kafka-consumer-groups --describe)"
            );
        }
    }

    /// Answers the live `/store/*` questions from the owned partitions' in-memory state (see
    /// [`crate::inspect::live`]): running partitions with their generations, recovering ones as such.
    pub(super) fn answer_live(&self) {
        while let Ok(request) = self.live.try_recv() {
            let view: BTreeMap<i32, PartitionView<'_>> = self
                .partitions
                .iter()
                .map(|(p, state)| {
                    let v = match state {
                        Partition::Recovering(_) => PartitionView::Recovering,
                        Partition::Running(r) => PartitionView::Running {
                            gens: &r.gens,
                            next_offset: r.inflight.next_offset(),
                            output_position: &r.out_positions,
                        },
                    };
                    (*p, v)
                })
                .collect();
            request.answer(&view, &self.fingerprinter);
        }
    }

    /// Sets the fingerprints-held and horizon gauges of every running partition (the store size
    /// gauge is set at each scrape, off this thread: `http::metrics`).
    pub(super) fn refresh_gauges(&self) {
        let interval = horizon::interval_ms(self.cfg.checkpoint.interval);
        for state in self.partitions.values() {
            if let Partition::Running(run) = state {
                let gens: Vec<&Generation> = run.gens.iter().collect();
                for (age, g) in gens.iter().rev().enumerate() {
                    if let Some(h) = run.metrics.held.get(age) {
                        h.set(g.len() as f64);
                    }
                }
                if let (Some(c), Some(oldest)) = (run.clock.time(), run.gens.oldest_bucket()) {
                    run.metrics
                        .horizon
                        .set(horizon::span_ms(c, oldest, interval) as f64 / 1000.0);
                }
            }
        }
    }
}

//! The route stage's pauses: an input partition held at a copy too large for the route topic
//! ([`Router::halt`]), every partition paused while the producer's queue stays full
//! ([`Router::back_off`], [`Router::drive_backpressure`]), and the wait for the schema registry
//! ([`Router::wait_for_registry`]).

use super::*;

impl Router {
    /// Holds input partition `p` at the record at `offset` (`bytes` of key and value), which the
    /// route topic cannot take for its size (`error`): nothing of `p` is copied or committed past
    /// it, the other partitions go on, and `/readyz` says which record and what to do. Raising
    /// the route topic's `max.message.bytes` and restarting copies it (the producer's limit is
    /// read at start); a revoked partition's next owner meets it again.
    pub(super) fn halt(&mut self, p: i32, offset: i64, bytes: usize, error: &KafkaError) {
        self.halted.insert(p, offset);
        let why = format!(
            "input partition {p} held at offset {offset}: its record ({bytes} bytes of key and value, plus headers) is \
             too large for the route topic {} ({error}); raise the route topic's max.message.bytes above it, then \
             restart",
            self.cfg.fingerprint.route_topic
        );
        error!(partition = p, offset, bytes, error = %error, "route stage: {why}");
        self.status.set_route_halted(p, Some(why));
    }

    /// The producer's queue stayed full (the route topic is slow or unreachable): pauses every
    /// assigned input partition, so that the poll loop goes on serving the group (a poll thread
    /// waiting inside `send` past `max.poll.interval.ms` would make librdkafka leave the group)
    /// until [`Self::drive_backpressure`] sees room again.
    pub(super) fn back_off(&mut self, consumer: &RouteConsumer) {
        self.pause(consumer, Some(self.producer.in_flight_count()));
    }

    /// Pauses every assigned input partition until [`Self::drive_backpressure`] resumes them:
    /// `held`, the producer's queue when it was full ([`kafka::BackedOff`]; `None`: paused for
    /// the schema registry, no condition on the queue).
    fn pause(&mut self, consumer: &RouteConsumer, held: Option<i32>) {
        if self.backpressure.is_some() {
            return;
        }
        self.backpressure = Some(kafka::BackedOff::new([held, None]));
        if let Err(e) = consumer.assignment().and_then(|a| consumer.pause(&a)) {
            warn!(error = %e, "route stage: pausing the partitions failed");
        }
        if self.registry_retry.is_some() {
            return; // said by `wait_for_registry`
        }
        warn!(
            queued = self.producer.in_flight_count(),
            "route stage: the producer's queue is full (the route topic is slow or unreachable): input partitions \
             paused until it drains"
        );
    }

    /// A record's fingerprint needs the schema registry, which cannot be asked (`why`): backs off
    /// as for a full queue (every assigned input partition paused, the group served), and resumes
    /// after [`RETRY_FIRST`], the wait doubling up to [`RETRY_MAX`] while it fails, at the record,
    /// which is fingerprinted again. `/readyz` says why meanwhile.
    pub(super) fn wait_for_registry(&mut self, consumer: &RouteConsumer, why: String) {
        let failures = self.registry_retry.map_or(0, |(_, n)| n).saturating_add(1);
        let wait = RETRY_FIRST.saturating_mul(1 << (failures - 1).min(6)).min(RETRY_MAX);
        self.registry_retry = Some((Instant::now() + wait, failures));
        warn!(
            error = %why, retry_in_ms = wait.as_millis() as u64,
            "route stage: a record's fingerprint needs the schema registry, which cannot be asked: input partitions \
             paused (nothing is copied past it)"
        );
        self.status.set_route_waiting(Some(format!(
            "fingerprint.schema_registry: {why}; tried again in {} ms",
            wait.as_millis()
        )));
        self.pause(consumer, None);
    }

    /// While backed off: once the producer's queue has drained to half of what it held when the
    /// partitions paused ([`kafka::BackedOff::drained`]) and a wait for the schema registry is
    /// over, resumes every
    /// assigned input partition, each that returned records it did not take at the first of them
    /// (resume, then seek: see `pipeline::ownership::resume_at`).
    pub(super) fn drive_backpressure(&mut self, consumer: &RouteConsumer) {
        let Some(backed_off) = self.backpressure else { return };
        if !backed_off.drained([Some(self.producer.in_flight_count()), None]) {
            return;
        }
        if self.registry_retry.is_some_and(|(at, _)| Instant::now() < at) {
            return;
        }
        let resumed = consumer
            .assignment()
            .and_then(|a| consumer.resume(&a))
            .and_then(|()| self.pause_halted(consumer));
        let sought = resumed.and_then(|()| {
            self.resume_at.iter().try_for_each(|(p, o)| {
                let to = if *o == 0 { Offset::Beginning } else { Offset::Offset(*o) };
                consumer.seek(&self.cfg.input.topic, *p, to, KAFKA_TIMEOUT)
            })
        });
        if let Err(e) = sought {
            // Paused again; the next tick tries again.
            warn!(error = %e, "route stage: resuming after the producer's queue drained failed");
            let _ = consumer.assignment().and_then(|a| consumer.pause(&a));
            return;
        }
        self.resume_at.clear();
        self.backpressure = None;
        info!(
            seconds = backed_off.since.elapsed().as_secs_f64(),
            "route stage: the producer's queue drained: input partitions resumed"
        );
    }

    /// Pauses the halted input partitions ([`Router::halt`]) again (after the others resumed).
    pub(super) fn pause_halted(&self, consumer: &RouteConsumer) -> KafkaResult<()> {
        if self.halted.is_empty() {
            return Ok(());
        }
        let mut tpl = TopicPartitionList::new();
        for p in self.halted.keys() {
            tpl.add_partition(&self.cfg.input.topic, *p);
        }
        consumer.pause(&tpl)
    }
}

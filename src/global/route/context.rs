//! The route stage's consumer context ([`RouteContext`]): rebalance callbacks (a revoked
//! partition is handed over, an assigned one resumed, `input.start = "latest"` applied), the lag
//! from librdkafka's statistics, and client errors.

use super::*;

/// The route stage's consumer context: rebalances reach the [`Router`].
pub(super) struct RouteContext {
    pub(super) router: Mutex<Router>,
    pub(super) input_topic: String,
    /// `input.start`: with `latest`, partitions without a commit start at the end.
    pub(super) start: Start,
    /// The input partitions assigned to the route stage (the lag metric's).
    pub(super) assigned: Mutex<std::collections::BTreeSet<i32>>,
    pub(super) status: Arc<Status>,
    pub(super) throttle: Throttle,
    /// Per assigned input partition, librdkafka's fetch state last seen in its statistics: a
    /// change is logged at debug (what an assigned partition that is never copied would show).
    pub(super) fetch_states: Mutex<BTreeMap<i32, String>>,
}

impl RouteContext {
    pub(super) fn lock(&self) -> MutexGuard<'_, Router> {
        self.router.lock().expect("not poisoned")
    }
}

impl ClientContext for RouteContext {
    /// The route stage's lag per assigned input partition ([`ROUTE_LAG`]).
    fn stats(&self, stats: rdkafka::statistics::Statistics) {
        let Some(t) = stats.topics.get(&self.input_topic) else {
            return;
        };
        let Ok(assigned) = self.assigned.lock() else { return };
        let mut states = self.fetch_states.lock().ok();
        for (p, ps) in &t.partitions {
            if *p < 0 || !assigned.contains(p) {
                continue;
            }
            if ps.consumer_lag >= 0 {
                route_lag(*p, ps.consumer_lag);
            }
            if let Some(states) = states.as_mut() {
                if states.get(p) != Some(&ps.fetch_state) {
                    debug!(
                        partition = p, fetch_state = %ps.fetch_state, next_offset = ps.next_offset,
                        app_offset = ps.app_offset, hi_offset = ps.hi_offset, fetchq_cnt = ps.fetchq_cnt,
                        rx_ver_drops = ps.rx_ver_drops, "route stage: input partition's fetch state"
                    );
                    states.insert(*p, ps.fetch_state.clone());
                }
            }
        }
    }

    fn error(&self, error: KafkaError, reason: &str) {
        self.status.note_client_error(&error, reason);
        if let Some(suppressed) = self.throttle.admit(&error, Instant::now()) {
            warn!(error = %error, reason, suppressed, "kafka client error (route stage)");
        }
    }

    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, fac: &str, log_message: &str) {
        crate::kafka::logs::log_client_line(&self.throttle, level, fac, log_message);
    }
}

impl ConsumerContext for RouteContext {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        if let (Rebalance::Assign(tpl), Start::Latest) = (rebalance, self.start) {
            start_at_the_end(consumer, &self.input_topic, tpl);
        }
        if let Rebalance::Revoke(tpl) = rebalance {
            let parts: Vec<i32> = tpl
                .elements_for_topic(&self.input_topic)
                .iter()
                .map(|e| e.partition())
                .collect();
            let lost = consumer.assignment_lost();
            info!(partitions = ?parts, lost, "route stage: partitions revoked");
            if let Ok(mut r) = self.router.lock() {
                r.hand_over(consumer, &parts, lost);
            }
            if let Ok(mut a) = self.assigned.lock() {
                for p in &parts {
                    a.remove(p);
                    route_lag(*p, 0); // no stale lag for released partitions
                }
            }
            if let Ok(mut states) = self.fetch_states.lock() {
                for p in &parts {
                    states.remove(p);
                }
            }
            self.status.set_route_partitions(&[], &parts);
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Assign(tpl) => {
                let parts: Vec<i32> = tpl
                    .elements_for_topic(&self.input_topic)
                    .iter()
                    .map(|e| e.partition())
                    .collect();
                info!(partitions = ?parts, "route stage: partitions assigned");
                // librdkafka keeps a partition's pause across assignments: one revoked while the
                // stage was backed off would otherwise stay paused for ever. Paused while backed
                // off (resumed with the others), resumed otherwise.
                let backed_off = self.lock().backpressure.is_some();
                let set = if backed_off {
                    consumer.pause(tpl)
                } else {
                    consumer.resume(tpl)
                };
                if let Err(e) = set {
                    warn!(error = %e, backed_off, "route stage: pausing or resuming assigned partitions failed");
                }
                if let Ok(mut a) = self.assigned.lock() {
                    a.extend(parts.iter().copied());
                }
                self.status.set_route_partitions(&parts, &[]);
            }
            Rebalance::Revoke(_) => {}
            Rebalance::Error(e) => warn!(error = %e, "route stage: rebalance error"),
        }
    }
}

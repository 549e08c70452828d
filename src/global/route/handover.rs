//! The route stage's commits and hand-overs ([`Router::hand_over`]): what is acknowledged is
//! committed; copies still unacknowledged when a hand-over ends are purged and stop the stage.

use super::*;

impl Router {
    /// Commits, for each of `parts`, the input offset below which every copy is acknowledged,
    /// when it moved, waiting at most `timeout` for the answer (`kafka::commit_within`). A
    /// failed commit is logged; the next one covers it.
    pub(super) fn commit(&mut self, consumer: &RouteConsumer, parts: &[i32], timeout: Duration) {
        let mut tpl = TopicPartitionList::new();
        let mut moved = Vec::new();
        for p in parts {
            if let Some(t) = self.partitions.get(p) {
                let w = t.inflight.watermark();
                if w > t.committed {
                    let _ = tpl.add_partition_offset(&self.cfg.input.topic, *p, Offset::Offset(w));
                    moved.push((*p, w));
                }
            }
        }
        if moved.is_empty() {
            return;
        }
        // Copies acknowledged past the committed offsets: a crash here leaves them to be made again.
        crate::crash::point("route-before-commit");
        match kafka::commit_within(consumer, &tpl, timeout) {
            Ok(()) => {
                for (p, w) in moved {
                    if let Some(t) = self.partitions.get_mut(&p) {
                        t.committed = w;
                    }
                }
                crate::crash::point("route-committed");
            }
            Err(e) => warn!(error = %e, "route stage: offset commit failed; the next one commits again"),
        }
    }

    /// Copies of `parts` are not acknowledged at a hand-over (timed out, or `lost`): purges the
    /// producer's queue and in-flight requests (librdkafka neither sends nor retries them) and
    /// stops the stage, unless it failed already.
    fn give_up(&mut self, parts: &[i32], lost: bool) {
        error!(
            partitions = ?parts, lost,
            "route stage: hand-over with copies not acknowledged; dropping them from the producer and stopping \
             (the next owner copies them again)"
        );
        self.producer
            .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
        if self.failure.is_none() {
            self.failure = Some(if lost {
                Fatal::AssignmentLost {
                    partitions: parts.to_vec(),
                }
            } else {
                Fatal::Handover {
                    partitions: parts.to_vec(),
                    error: Arc::new(HandoverError::Timeout),
                }
            });
        }
    }

    /// Hands `parts` over (revocation, stop): waits up to `output.handover_timeout` for their
    /// copies' acknowledgements (not at all when the assignment was `lost`), commits what is
    /// acknowledged (unless `lost`: another member may own them already) and forgets them.
    /// Copies still unacknowledged then (a timeout, a lost assignment) are purged from the
    /// producer, which would otherwise retry them for ever and land them after the next owner's
    /// copies, and the stage stops ([`Fatal::Handover`], [`Fatal::AssignmentLost`]), as the
    /// filter does; the next owner copies them again (and the filter stage drops any copy that
    /// was already on the wire by provenance, [`copy_fate`]).
    pub(super) fn hand_over(&mut self, consumer: &RouteConsumer, parts: &[i32], lost: bool) {
        let deadline = Instant::now() + self.cfg.output.handover_timeout;
        loop {
            self.drain_acks();
            let idle = parts.iter().all(|p| {
                self.partitions
                    .get(p)
                    .is_none_or(|t| t.inflight.watermark() >= t.inflight.next_offset())
            });
            let left = deadline.saturating_duration_since(Instant::now());
            if idle || lost || self.failure.is_some() || left.is_zero() {
                if !idle {
                    self.give_up(parts, lost);
                }
                break;
            }
            match self.acks.recv_timeout(left.min(Duration::from_millis(100))) {
                Ok(ack) => self.apply(ack),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => break,
            }
        }
        if !lost {
            // Within what is left of the hand-over's time, at least a second.
            let left = deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_secs(1));
            self.commit(consumer, parts, left);
        }
        for p in parts {
            self.partitions.remove(p);
            self.resume_at.remove(p);
            if self.halted.remove(p).is_some() {
                self.status.set_route_halted(*p, None);
            }
        }
    }
}

//! Giving partitions up: a revocation's clean hand-over (wait for the deliveries, store the
//! generations, commit with `clean = true`; transactional mode: commit the transaction), a lost
//! assignment, the stop's hand-over of every partition, and the abort after a fatal error. The
//! rule behind each failure path: no record of a partition may reach the output after the
//! partition is released (docs/deploying.md, "Running N replicas").

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;
use rdkafka::producer::{Producer, PurgeConfig};
use tracing::{debug, error, info, warn};

use super::checkpoint::commit_list;
use super::context::FilterConsumer;
use super::filter::Filter;
use super::mode::Mode;
use super::transaction::TransactionError;
use super::{Fatal, KAFKA_TIMEOUT};
use crate::kafka;
use crate::partition::Partition;

/// The least a hand-over's commit waits for its answer when the acknowledgements took (almost)
/// all of `output.handover_timeout`.
const COMMIT_WAIT_MIN: Duration = Duration::from_secs(2);

/// Why a clean hand-over failed; the next owner then recovers from the output topic.
#[derive(Debug, thiserror::Error)]
pub enum HandoverError {
    /// Transactional mode: the final transaction did not commit.
    #[error(transparent)]
    Transaction(#[from] TransactionError),
    /// The pipeline had already failed.
    #[error(transparent)]
    Failed(Fatal),
    /// Acknowledgements were still missing after the hand-over timeout.
    #[error("deliveries still in flight after the hand-over timeout")]
    Timeout,
    /// The offsets could not be listed or committed.
    #[error(transparent)]
    Commit(#[from] KafkaError),
}

impl HandoverError {
    /// True when the failed hand-over leaves records that could still reach the output: some not
    /// acknowledged (a timeout, or a delivery that failed, after which the rest of the producer's
    /// queue is not known to have landed), or in an open transaction. A commit refused after
    /// every record was acknowledged leaves none: the next owner just recovers from the output.
    pub fn leaves_records_behind(&self) -> bool {
        match self {
            HandoverError::Transaction(_) | HandoverError::Timeout | HandoverError::Failed(_) => true,
            HandoverError::Commit(_) => false,
        }
    }
}

impl Filter {
    /// Partitions taken away: finish them cleanly unless the assignment was lost.
    pub fn revoke(&mut self, consumer: &FilterConsumer, parts: &[i32], lost: bool) {
        for p in parts {
            if let Some(Partition::Recovering(r)) = self.partitions.get(p) {
                r.cancel.store(true, Ordering::Relaxed);
                self.partitions.remove(p);
                self.held.remove(p);
                self.status.remove_partition(*p);
            }
        }
        let running: Vec<i32> = parts
            .iter()
            .copied()
            .filter(|p| self.partitions.contains_key(p))
            .collect();
        if running.is_empty() {
            return;
        }
        // Acknowledgements that arrived before the group took the partitions count: a lost
        // assignment right after a process pause (SIGSTOP, a long GC of the host) meets them
        // still in the channel, and `lose` would take their records for unacknowledged.
        self.drain_deliveries();
        if self.failure.is_none() {
            if lost {
                self.lose(&running);
            } else if let Err(e) = self.handover(consumer, &running, true) {
                if e.leaves_records_behind() {
                    self.give_up(&running, e);
                } else {
                    warn!(partitions = ?running, error = %e, "clean hand-over failed with every record acknowledged; the next owner recovers from the output topic");
                }
            }
        }
        self.release(&running);
    }

    /// The group took `parts` away without a hand-over. Records of them that the producer still
    /// holds could land after the next owner re-read the output (it may have the partitions
    /// already, and this process may even get them back while its producer retries): if there
    /// are any, they are dropped and the pipeline stops ([`Fatal::AssignmentLost`]; the next
    /// owner's fence wait covers what was already on the wire). In transactional mode the open
    /// transaction may hold records of them: it is aborted and the pipeline stops.
    fn lose(&mut self, parts: &[i32]) {
        // Records in the producer: a halted partition's refused copies are not (`deliveries_idle`).
        let unacknowledged = parts.iter().any(|p| !self.deliveries_idle(*p));
        let must_stop = matches!(self.mode, Mode::Transactional { .. }) || unacknowledged;
        if !must_stop {
            warn!(partitions = ?parts, "assignment lost (session timeout or fenced) with every record acknowledged; releasing without commit");
            return;
        }
        for p in parts {
            if let Some(Partition::Running(r)) = self.partitions.get(p) {
                let h = self.halts.get(p);
                debug!(
                    partition = p,
                    pending = r.inflight.pending_count(),
                    refused = h.map(|h| h.refused.len()),
                    resent = h.map(|h| h.resent.len()),
                    "lost with records in flight"
                );
            }
        }
        error!(partitions = ?parts, "assignment lost (session timeout or fenced) with records not acknowledged or not committed; dropping them and stopping");
        self.drop_unsent();
        self.fail(Fatal::AssignmentLost {
            partitions: parts.to_vec(),
        });
    }

    /// A hand-over of `parts` failed: nothing the producer still holds may reach the output after
    /// the partitions are released, so it is dropped ([`Self::drop_unsent`]) and the pipeline
    /// stops with [`Fatal::Handover`].
    fn give_up(&mut self, parts: &[i32], error: HandoverError) {
        self.drop_unsent();
        self.fail(Fatal::Handover {
            partitions: parts.to_vec(),
            error: Arc::new(error),
        });
    }

    /// Makes sure nothing produced and not acknowledged (idempotent mode) or not committed
    /// (transactional mode) reaches the output from now on: purges the producer's queue and
    /// in-flight requests (librdkafka neither sends nor retries them; a request already written
    /// to the socket may still land, within a network round trip, which the next owner's fence
    /// wait covers), or aborts the open transaction.
    pub(super) fn drop_unsent(&mut self) {
        match self.mode {
            Mode::Idempotent { .. } => {
                self.producer.purge(PurgeConfig::default().queue().inflight());
                if let Some(side) = &self.side_producer {
                    side.purge(PurgeConfig::default().queue().inflight());
                }
            }
            Mode::Transactional { .. } => match self.producer.abort_transaction(KAFKA_TIMEOUT) {
                Ok(()) => {
                    info!("open transaction aborted: none of its records becomes visible to read_committed readers")
                }
                Err(e) => warn!(error = %e, "aborting the transaction failed; the next start fences it"),
            },
        }
    }

    /// Forgets `parts`: their metrics, their part of a checkpoint in progress, their status.
    fn release(&mut self, parts: &[i32]) {
        for p in parts {
            if let Some(Partition::Running(r)) = self.partitions.remove(p) {
                r.metrics.release();
            }
            self.halts.remove(p);
            self.seeks.remove(p);
            self.rewound.remove(p);
            self.recoveries.panics.remove(p);
            self.recoveries.seek_failing.remove(p);
            self.mode.forget(*p);
            self.held.remove(p);
            self.status.remove_partition(*p);
            info!(partition = p, "partition released");
        }
    }

    /// Finishes `parts` cleanly: waits for their deliveries, stores all their generations (the
    /// current one included), and commits their offsets with `clean = true`. Transactional mode:
    /// commits the transaction (and begins the next one when `continuing`).
    fn handover(&mut self, consumer: &FilterConsumer, parts: &[i32], continuing: bool) -> Result<(), HandoverError> {
        // A background store write for an earlier checkpoint must land first, or it could
        // overwrite the newer snapshot written here.
        let deadline = Instant::now() + self.cfg.output.handover_timeout;
        self.finish_persisting(consumer, deadline);
        if let Mode::Transactional { .. } = self.mode {
            self.commit_transaction(consumer, parts, continuing, KAFKA_TIMEOUT, None)?;
            self.log_checkpoint(parts.len(), "hand-over");
            return Ok(());
        }
        if !self.wait_deliveries(parts, deadline) {
            return Err(match &self.failure {
                Some(f) => HandoverError::Failed(f.clone()),
                None => HandoverError::Timeout,
            });
        }
        self.skip_to_positions(consumer, parts);
        let records = self.records(parts, |_| true, false);
        self.store_partitions(parts, &records);
        let tpl = commit_list(&self.cfg, &records.iter().collect::<Vec<_>>())?;
        crate::crash::point("handover-before-commit");
        // Within what is left of the hand-over's time (at least COMMIT_WAIT_MIN): a stop with the
        // broker gone ends, uncommitted (`kafka::commit_within`).
        let left = deadline.saturating_duration_since(Instant::now()).max(COMMIT_WAIT_MIN);
        kafka::commit_within(consumer, &tpl, left)?;
        info!(partitions = ?parts, "offsets committed for a clean hand-over");
        self.log_checkpoint(parts.len(), "hand-over");
        Ok(())
    }

    /// Stops the pipeline cleanly: hands over every partition. Called on SIGTERM/SIGINT. A
    /// hand-over that fails is [`Fatal::Handover`] (the caller then aborts).
    pub fn shutdown(&mut self, consumer: &FilterConsumer) -> Result<(), Fatal> {
        self.cancel_recoveries();
        let running = self.running();
        if !running.is_empty() {
            match self.handover(consumer, &running, false) {
                Err(e) if e.leaves_records_behind() => {
                    return Err(Fatal::Handover {
                        partitions: running,
                        error: Arc::new(e),
                    })
                }
                Err(e) => {
                    warn!(error = %e, "shutdown without a clean hand-over (every record acknowledged); the next start recovers from the output topic")
                }
                Ok(()) => {}
            }
        }
        let all: Vec<i32> = self.partitions.keys().copied().collect();
        self.release(&all);
        Ok(())
    }

    /// After a fatal error: drops what the producer holds ([`Self::drop_unsent`]: purged, or the
    /// open transaction aborted); commits nothing.
    pub fn abort(&mut self) {
        self.drop_unsent();
        self.cancel_recoveries();
        // Released without commit: closing the consumer must not hand anything over.
        let all: Vec<i32> = self.partitions.keys().copied().collect();
        self.release(&all);
    }

    /// Tells every recovery worker to stop.
    fn cancel_recoveries(&self) {
        for p in self.partitions.values() {
            if let Partition::Recovering(r) = p {
                r.cancel.store(true, Ordering::Relaxed);
            }
        }
    }
}

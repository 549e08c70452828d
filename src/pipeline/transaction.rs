//! Transactional mode's checkpoint: the producer's transaction committed with the input offsets
//! in it (`send_offsets_to_transaction`), then the partitions' state stored; a commit that the
//! broker could not answer stays pending, the partitions paused, and is tried again each tick
//! until shortly before the broker would abort the transaction.

use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::producer::Producer;
use rdkafka::types::RDKafkaErrorCode;
use tracing::{debug, info, warn};

use super::checkpoint::commit_list;
use super::context::FilterConsumer;
use super::filter::Filter;
use super::mode::{Mode, PendingCommit};
use super::producers::transaction_retriable;
use super::{Fatal, KAFKA_TIMEOUT};
use crate::config::Config;
use crate::telemetry::{self, Totals};

/// A transaction step that failed (transactional mode). The pipeline stops.
#[derive(Debug, Clone, thiserror::Error)]
pub enum TransactionError {
    /// The producer could not flush its queue.
    #[error("flush: {0}")]
    Flush(KafkaError),
    /// Acknowledgements were still missing at the timeout, or a delivery failed (`failed`).
    #[error("deliveries did not complete before the transaction commit{}", if *failed { " (a delivery failed)" } else { "" })]
    Deliveries {
        /// A delivery failed (otherwise the acknowledgements are only late).
        failed: bool,
    },
    /// The offsets to commit could not be listed.
    #[error(transparent)]
    Offsets(KafkaError),
    /// The consumer has no group metadata to send the offsets with.
    #[error("no consumer group metadata")]
    NoGroupMetadata,
    /// The offsets could not be added to the transaction.
    #[error("send offsets to transaction: {0}")]
    SendOffsets(KafkaError),
    /// The commit failed.
    #[error("commit transaction: {0}")]
    Commit(KafkaError),
    /// The next transaction could not begin.
    #[error("begin transaction: {0}")]
    Begin(KafkaError),
}

impl TransactionError {
    /// Whether the step may be tried again with the transaction kept open: librdkafka says so
    /// (`rd_kafka_error_is_retriable`, not abortable nor fatal: a timeout, a coordinator not
    /// available yet), or the producer's queue did not drain or the acknowledgements did not
    /// all come within the attempt (the broker away or slow, no delivery failed). librdkafka's
    /// INTRODUCTION.md ("Transactional producer", "Error handling"): a retriable error lets the
    /// application call the same function again; an abortable one requires
    /// `abort_transaction`; a fatal one leaves the producer unusable.
    pub fn retriable(&self) -> bool {
        match self {
            TransactionError::Flush(e) => e.rdkafka_error_code() == Some(RDKafkaErrorCode::OperationTimedOut),
            TransactionError::Deliveries { failed } => !failed,
            TransactionError::SendOffsets(e) | TransactionError::Commit(e) => transaction_retriable(e),
            TransactionError::Offsets(_) | TransactionError::NoGroupMetadata | TransactionError::Begin(_) => false,
        }
    }
}

/// How long each further attempt of a pending transaction commit waits (per step) before the
/// poll loop serves the consumer again: a second between two polls keeps rebalances and
/// `max.poll.interval.ms` (300 s by default) served while the broker is away.
const COMMIT_RETRY_ATTEMPT: Duration = Duration::from_secs(1);

/// How long the step that adds the input offsets to the transaction (`send_offsets_to_transaction`)
/// may take in a periodic checkpoint: what is `left` of the transaction until [`commit_deadline`]
/// when the step starts (after the flush and the acknowledgements), at most `poll_cap` (half the
/// consumer's `max.poll.interval.ms`, [`poll_cap`]), and at least `attempt`, the other steps'
/// bound.
///
/// Why not `attempt`: librdkafka retries that step's TxnOffsetCommit to the group coordinator
/// only until the call's timeout and then makes the transaction abortable
/// (`rd_kafka_txn_handle_TxnOffsetCommit`, rdkafka_txnmgr.c: `RETRY` while time remains, then
/// `PERMANENT`), where a flush or the transaction's own commit that times out may be called again.
/// With the 1 s of a resumed attempt ([`COMMIT_RETRY_ATTEMPT`]), a commit pending while the
/// broker was away exited 1 as soon as it came back whenever the group coordinator took more than
/// a second to answer (a new connection, FindCoordinator, a coordinator still loading); with the
/// 30 s of a first attempt, a group coordinator away for longer did. The poll loop waits in
/// that call meanwhile, its partitions paused (no rebalance or stop is served until it returns);
/// librdkafka's own thread keeps the group's heartbeats going, but past `max.poll.interval.ms`
/// without a poll it leaves the group (rdkafka_cgrp.c), hence `poll_cap`: with a
/// `transaction.timeout.ms` raised to ride out long outages the call would otherwise hold the poll
/// loop for minutes.
pub(super) fn offsets_attempt(attempt: Duration, left: Duration, poll_cap: Duration) -> Duration {
    attempt.max(left.min(poll_cap))
}

/// Half the group consumer's `max.poll.interval.ms` (librdkafka's default 300 s, or as set under
/// `[kafka.properties]`): the longest one call may hold the poll loop ([`offsets_attempt`]).
pub(super) fn poll_cap(cfg: &Config) -> Duration {
    let ms = crate::kafka::consumer_config(cfg)
        .get("max.poll.interval.ms")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(300_000);
    Duration::from_millis(ms / 2)
}

/// How long after its transaction began a pending commit is given up: 90 % of the producer's
/// `transaction.timeout.ms` (the broker aborts a transaction that old; by default the
/// checkpoint interval plus 60 s, `kafka::transaction_timeout_ms`).
pub(super) fn commit_deadline(cfg: &Config) -> Duration {
    Duration::from_millis(transaction_timeout(cfg).as_millis() as u64 / 10 * 9)
}

/// The producer's `transaction.timeout.ms`: set under `[kafka.properties]`, or derived from the
/// checkpoint interval ([`crate::kafka::transaction_timeout_ms`]).
pub(super) fn transaction_timeout(cfg: &Config) -> Duration {
    let ms = crate::kafka::producer_config(cfg)
        .get("transaction.timeout.ms")
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or_else(|| crate::kafka::transaction_timeout_ms(cfg.checkpoint.interval));
    Duration::from_millis(ms)
}

impl Filter {
    /// Transactional mode: commits the transaction when a checkpoint is due, or resumes the
    /// commit that is pending. A commit that fails with a retriable error (the broker away or
    /// too slow to drain the producer's queue within the attempt: [`TransactionError::retriable`])
    /// stays pending, the transaction open: every partition is paused (nothing can be added to
    /// a transaction being committed), the poll loop goes on serving the group, and each tick
    /// tries again for [`COMMIT_RETRY_ATTEMPT`], until [`commit_deadline`] (shortly before the
    /// broker would abort the transaction). Then, or on an abortable or fatal error, the
    /// pipeline stops as before (the stop aborts the transaction: nothing of it is visible).
    pub(super) fn drive_transaction(&mut self, consumer: &FilterConsumer) -> Result<(), Fatal> {
        let Mode::Transactional { began, pending } = &self.mode else {
            return Ok(());
        };
        let (began, resuming) = (*began, pending.is_some());
        if !resuming && !self.checkpoint_due() {
            return Ok(());
        }
        let parts = self.partitions.len();
        let attempt = if resuming { COMMIT_RETRY_ATTEMPT } else { KAFKA_TIMEOUT };
        let offsets_until = Some(began + commit_deadline(&self.cfg));
        match self.commit_transaction(consumer, &[], true, attempt, offsets_until) {
            Ok(()) => {
                self.log_checkpoint(parts, "committed");
                Ok(())
            }
            Err(e) if e.retriable() && Instant::now() + COMMIT_RETRY_ATTEMPT < began + commit_deadline(&self.cfg) => {
                if !resuming {
                    self.pause_running(consumer, [None, None]);
                    self.status
                        .set_commit_waiting(Some(format!("the transaction commit waits for the broker: {e}")));
                    warn!(
                        error = %e,
                        transaction_seconds = began.elapsed().as_secs_f64(),
                        give_up_after_seconds = commit_deadline(&self.cfg).as_secs_f64(),
                        "the transaction commit did not complete (the broker unreachable or slow): partitions \
                         paused, the transaction stays open and its commit is retried"
                    );
                } else {
                    debug!(error = %e, "transaction commit still pending");
                }
                Ok(())
            }
            Err(e) => {
                let e = Fatal::from(e);
                self.failure = Some(e.clone());
                Err(e)
            }
        }
    }

    /// Transactional mode (a periodic checkpoint or a hand-over): flushes, commits the
    /// transaction with the offsets of every running partition, stores their state, and begins
    /// the next transaction when `continuing`. `clean_for` get `clean = true`. Each step that
    /// waits waits up to `attempt`, the one adding the offsets (in a periodic checkpoint,
    /// `offsets_until` the commit's deadline) up to what is left of it then
    /// ([`offsets_attempt`]). A commit that failed is left pending in the mode
    /// ([`PendingCommit`]): the next call resumes it after the steps already done (the offsets
    /// named then, `clean_for` of that call), since librdkafka's transactional calls may be
    /// made again after a retriable error.
    pub(super) fn commit_transaction(
        &mut self,
        consumer: &FilterConsumer,
        clean_for: &[i32],
        continuing: bool,
        attempt: Duration,
        offsets_until: Option<Instant>,
    ) -> Result<(), TransactionError> {
        let Mode::Transactional { pending, .. } = &mut self.mode else {
            return Ok(());
        };
        let mut commit = pending.take().unwrap_or_else(PendingCommit::new);
        let result = self.try_commit(consumer, clean_for, &mut commit, attempt, offsets_until);
        if let Err(e) = result {
            if let Mode::Transactional { pending, .. } = &mut self.mode {
                *pending = Some(commit);
            }
            return Err(e);
        }
        let waited = commit.since.elapsed();
        if waited > KAFKA_TIMEOUT {
            info!(
                waited_seconds = waited.as_secs_f64(),
                "the pending transaction commit completed"
            );
        }
        self.status.set_commit_waiting(None);
        let (running, records) = commit.records.unwrap_or_default();
        self.store_partitions(&running, &records);
        if continuing {
            self.producer.begin_transaction().map_err(TransactionError::Begin)?;
            if let Mode::Transactional { began, .. } = &mut self.mode {
                *began = Instant::now();
            }
        }
        telemetry::checkpoint_duration(waited.as_secs_f64());
        telemetry::checkpoint_result(true);
        Totals::bump(&self.totals.checkpoints);
        Ok(())
    }

    /// The steps of [`Self::commit_transaction`] not yet done in `commit`.
    fn try_commit(
        &mut self,
        consumer: &FilterConsumer,
        clean_for: &[i32],
        commit: &mut PendingCommit,
        attempt: Duration,
        offsets_until: Option<Instant>,
    ) -> Result<(), TransactionError> {
        if commit.records.is_none() {
            self.producer.flush(attempt).map_err(TransactionError::Flush)?;
            let running = self.running();
            if !self.wait_deliveries(&running, Instant::now() + attempt) {
                return Err(TransactionError::Deliveries {
                    failed: self.failure.is_some(),
                });
            }
            self.skip_to_positions(consumer, &running);
            let records = self.records(&running, |p| clean_for.contains(&p), true);
            commit.records = Some((running, records));
        }
        let Some((_, records)) = &commit.records else {
            return Ok(());
        };
        if !commit.offsets_sent && !records.is_empty() {
            let tpl = commit_list(&self.cfg, &records.iter().collect::<Vec<_>>()).map_err(TransactionError::Offsets)?;
            let group = consumer.group_metadata().ok_or(TransactionError::NoGroupMetadata)?;
            // What is left until the deadline now, after the flush and the acknowledgements.
            let within = offsets_until.map_or(attempt, |until| {
                offsets_attempt(
                    attempt,
                    until.saturating_duration_since(Instant::now()),
                    poll_cap(&self.cfg),
                )
            });
            self.producer
                .send_offsets_to_transaction(&tpl, &group, within)
                .map_err(TransactionError::SendOffsets)?;
        }
        commit.offsets_sent = true;
        self.producer
            .commit_transaction(attempt)
            .map_err(TransactionError::Commit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a pending commit retries: a flush or acknowledgements that only timed out; not a
    /// flush that failed otherwise, a failed delivery, nor the steps that do not wait.
    #[test]
    fn which_transaction_errors_are_retried() {
        let flush = |code| TransactionError::Flush(KafkaError::Flush(code));
        assert!(flush(RDKafkaErrorCode::OperationTimedOut).retriable());
        assert!(!flush(RDKafkaErrorCode::Fatal).retriable());
        assert!(TransactionError::Deliveries { failed: false }.retriable());
        assert!(!TransactionError::Deliveries { failed: true }.retriable());
        assert!(!TransactionError::NoGroupMetadata.retriable());
        // Not a transactional error (no rd_kafka_error_t): librdkafka did not say it is retriable.
        let other = KafkaError::MessageProduction(RDKafkaErrorCode::RequestTimedOut);
        assert!(!TransactionError::Commit(other.clone()).retriable());
        assert!(!TransactionError::Begin(other).retriable());
    }

    /// A pending commit is given up at 90 % of `transaction.timeout.ms`, set or derived.
    #[test]
    fn the_commit_deadline_is_ninety_percent_of_the_transaction_timeout() {
        let cfg = |extra: &str| {
            let text = format!(
                "[kafka]\nbootstrap_servers = \"127.0.0.1:1\"\n{extra}\n[input]\ntopic = \"in\"\ngroup_id = \"g\"\n\
                 [output]\ntopic = \"out\"\ndelivery = \"transactional\"\ntransactional_id = \"t\"\n\
                 [checkpoint]\ninterval = \"2s\"\n"
            );
            Config::from_toml_str(&text, Some(Default::default())).unwrap()
        };
        // Derived: the interval plus 60 s.
        assert_eq!(commit_deadline(&cfg("")), Duration::from_millis(55_800));
        let set = cfg("[kafka.properties]\n\"transaction.timeout.ms\" = 120000");
        assert_eq!(commit_deadline(&set), Duration::from_secs(108));
    }

    /// The offsets' step waits until the transaction's deadline, never less than the others, never
    /// more than half of `max.poll.interval.ms`.
    #[test]
    fn the_offsets_step_waits_until_the_commit_deadline() {
        let s = Duration::from_secs;
        let cap = s(150);
        #[rustfmt::skip]
        let rows = [
            (s(30), s(55), cap, s(55), "a first attempt, the transaction young: to its deadline"),
            (s(1), s(40), cap, s(40), "a resumed commit: to its deadline, not 1 s"),
            (s(30), s(5), cap, s(30), "a first attempt near the deadline: the usual 30 s"),
            (s(1), Duration::ZERO, cap, s(1), "past the deadline: the resumed attempt's 1 s"),
            (s(1), s(535), cap, cap, "transaction.timeout.ms raised to 10 min: half of max.poll.interval.ms"),
            (s(30), s(55), s(10), s(30), "max.poll.interval.ms lowered to 20 s: the usual 30 s still"),
        ];
        for (attempt, left, poll_cap, want, case) in rows {
            assert_eq!(offsets_attempt(attempt, left, poll_cap), want, "{case}");
        }
    }
}

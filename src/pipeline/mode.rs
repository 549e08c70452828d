//! The delivery mode (`output.delivery`) as a value that carries its own state, so code that
//! belongs to one mode cannot run in the other: a periodic checkpoint in progress exists only in
//! idempotent mode, the open transaction only in transactional mode.

use std::time::Instant;

use super::checkpoint_state::{Checkpoint, CheckpointRecord};
use crate::config::{Config, Delivery};

/// How records reach the output and how input offsets are committed.
pub(super) enum Mode {
    /// The idempotent producer. A checkpoint waits for acknowledgements, writes the store on a
    /// background thread and commits the input offsets with their metadata (docs/ARCHITECTURE.md,
    /// "Checkpoint").
    Idempotent {
        /// The checkpoint in progress, if any (at most one at a time).
        checkpoint: Option<Checkpoint>,
    },
    /// One Kafka transaction per checkpoint, holding the output records and the input offsets.
    /// The producer has a transaction open from start-up (after `init_transactions` fenced any
    /// previous producer with the same `transactional.id`) and after every commit; a checkpoint
    /// commits it synchronously; only a commit that could not complete yet (the broker away or
    /// slow: a retriable error) leaves state between two polls, `pending`, resumed at every tick
    /// (`checkpoint`, "Transactional mode").
    Transactional {
        /// When the open transaction began (start-up or the last commit): the broker aborts it
        /// `transaction.timeout.ms` after its first record, so a pending commit is given up
        /// shortly before that.
        began: Instant,
        /// The commit in progress, if one timed out with a retriable error.
        pending: Option<PendingCommit>,
    },
}

/// A transaction commit that has not completed yet: which of its steps are done, so that the
/// next attempt resumes after them (librdkafka's transactional calls may be called again after
/// a retriable error, `rd_kafka_error_is_retriable`).
#[derive(Debug)]
pub(super) struct PendingCommit {
    /// When the first attempt began.
    pub(super) since: Instant,
    /// Once the producer's queue was flushed and every record acknowledged: the running
    /// partitions and their checkpoint records (their offsets go into the transaction).
    pub(super) records: Option<(Vec<i32>, Vec<CheckpointRecord>)>,
    /// The offsets were added to the transaction (`send_offsets_to_transaction` succeeded).
    pub(super) offsets_sent: bool,
}

impl PendingCommit {
    /// A commit none of whose steps is done.
    pub(super) fn new() -> PendingCommit {
        PendingCommit {
            since: Instant::now(),
            records: None,
            offsets_sent: false,
        }
    }
}

impl Mode {
    /// The mode `cfg` asks for, with nothing in progress.
    pub(super) fn of(cfg: &Config) -> Mode {
        match cfg.output.delivery {
            Delivery::Idempotent => Mode::Idempotent { checkpoint: None },
            Delivery::Transactional => Mode::Transactional {
                began: Instant::now(),
                pending: None,
            },
        }
    }

    /// True while a transaction commit is pending (partitions are paused until it completes).
    pub(super) fn commit_pending(&self) -> bool {
        matches!(self, Mode::Transactional { pending: Some(_), .. })
    }

    /// Forgets partition `p` in the checkpoint in progress (it was released).
    pub(super) fn forget(&mut self, p: i32) {
        if let Mode::Idempotent { checkpoint: Some(c) } = self {
            c.parts.remove(&p);
        }
    }
}

//! The delivery mode (`output.delivery`) as a value that carries its own state, so code that
//! belongs to one mode cannot run in the other: a periodic checkpoint in progress exists only in
//! idempotent mode, the open transaction only in transactional mode.

use super::checkpoint_state::Checkpoint;
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
    /// commits it synchronously, so there is no checkpoint state between two polls.
    Transactional,
}

impl Mode {
    /// The mode `cfg` asks for, with nothing in progress.
    pub(super) fn of(cfg: &Config) -> Mode {
        match cfg.output.delivery {
            Delivery::Idempotent => Mode::Idempotent { checkpoint: None },
            Delivery::Transactional => Mode::Transactional,
        }
    }

    /// Forgets partition `p` in the checkpoint in progress (it was released).
    pub(super) fn forget(&mut self, p: i32) {
        if let Mode::Idempotent { checkpoint: Some(c) } = self {
            c.parts.remove(&p);
        }
    }
}

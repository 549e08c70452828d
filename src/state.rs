//! The life-cycle state of an owned input partition, one name for it everywhere: the
//! `kafka_dedup_partition_state` gauge, `/readyz` and the `live` part of `/store/stats`.
//! [`crate::partition::Partition`] is the state itself, with its data.

use std::fmt;

/// Where an owned input partition is in its life cycle (see [`crate::partition`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PartitionState {
    /// Assigned; its generations are being rebuilt (paused in the consumer).
    Recovering,
    /// Consuming and forwarding.
    Running,
    /// Running, but taking no records: a side topic (`output.duplicates_topic`,
    /// `fingerprint.dead_letter_topic`) refused a copy, which is sent again with back-off;
    /// nothing is committed past it (`pipeline::halt`).
    Halted,
}

impl PartitionState {
    /// Every state, in the order of the gauge's `state` label values.
    pub const ALL: [PartitionState; 3] = [
        PartitionState::Recovering,
        PartitionState::Running,
        PartitionState::Halted,
    ];

    /// The name used in metrics labels and JSON answers: `recovering`, `running` or `halted`.
    pub fn name(self) -> &'static str {
        match self {
            PartitionState::Recovering => "recovering",
            PartitionState::Running => "running",
            PartitionState::Halted => "halted",
        }
    }
}

impl fmt::Display for PartitionState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

//! The recovery workers' side of the pipeline, as data: the channel their results come back on
//! ([`Recoveries`]) and what a result is ([`Finished`], [`NotRecovered`]). What the pipeline does
//! with a result is `ownership`'s.

use std::collections::BTreeMap;
use std::sync::mpsc::{self, Receiver, Sender};

use super::TopicCounts;
use crate::recovery::{Recovered, RecoveryError};

/// A recovery worker's result, sent to the pipeline thread.
pub(super) struct Finished {
    /// Input partition.
    pub(super) partition: i32,
    /// The ownership the recovery ran for; a result for an older one is ignored.
    pub(super) incarnation: u64,
    /// The topics' partition counts the worker found, if it got that far.
    pub(super) topics: Option<TopicCounts>,
    /// The recovered partition, or why not.
    pub(super) result: Result<Recovered, NotRecovered>,
}

/// Why a recovery worker delivered no recovered partition.
#[derive(Debug, thiserror::Error)]
pub(super) enum NotRecovered {
    /// The recovery failed (retried) or was cancelled.
    #[error(transparent)]
    Recovery(#[from] RecoveryError),
    /// `output.partitioning = "preserve"` and the output topic has no partition for this input
    /// partition (partitions were added to the input only): the partition is held.
    #[error(
        "output topic \"{topic}\" has {partitions} partitions, none for input partition {partition} \
         (output.partitioning = \"preserve\"); add partitions to it"
    )]
    NoOutputPartition {
        /// `output.topic`.
        topic: String,
        /// The input partition.
        partition: i32,
        /// The output topic's partitions.
        partitions: usize,
    },
}

/// The recovery workers' side of the `Filter`.
pub(super) struct Recoveries {
    /// Finished recoveries, drained by `Filter::tick`.
    pub(super) rx: Receiver<Finished>,
    /// Cloned into every worker.
    pub(super) tx: Sender<Finished>,
    /// Counter of ownership incarnations: each assignment of a partition gets the next.
    pub(super) incarnations: u64,
    /// Panicked recovery workers per partition since it last ran (the retry's back-off).
    pub(super) panics: BTreeMap<i32, u32>,
    /// Per partition: since its first failed seek while it has not started (after its recovery,
    /// or resumed after back-pressure; `ownership::seek_failing_max`).
    pub(super) seek_failing: BTreeMap<i32, std::time::Instant>,
}

impl Recoveries {
    /// No recovery yet.
    pub(super) fn new() -> Self {
        let (tx, rx) = mpsc::channel();
        Recoveries {
            rx,
            tx,
            incarnations: 0,
            panics: BTreeMap::new(),
            seek_failing: BTreeMap::new(),
        }
    }
}

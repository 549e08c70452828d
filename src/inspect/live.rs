//! The live questions of the `/store/*` routes, answered by the pipeline thread from the owned
//! partitions' in-memory generations ([`LiveRequest::answer`], called by `pipeline::Filter::tick`
//! between two polls), so the answer includes everything forwarded up to the request.

use std::collections::BTreeMap;

use super::query::{LookupInput, NoFingerprint};
use super::report::{chain_input_ranges, GenerationStats, Holding, Incomplete, LivePartition, Lookup};
use crate::fingerprint::{Fingerprint, Fingerprinter};
use crate::generations::{Generation, Generations, Positions};
use crate::state::PartitionState;

/// A question for the pipeline thread, answered from its in-memory partition state by
/// [`LiveRequest::answer`] (called between two polls; see `pipeline::Filter::tick`).
pub enum LiveRequest {
    /// `GET /store/lookup`.
    Lookup {
        /// What to look up.
        input: LookupInput,
        /// The answer, or a bad-request message (the record has no fingerprint).
        reply: tokio::sync::oneshot::Sender<Result<Lookup, NoFingerprint>>,
    },
    /// The `live` part of `GET /store/stats`.
    Partitions {
        /// One entry per owned partition.
        reply: tokio::sync::oneshot::Sender<Vec<LivePartition>>,
    },
}

/// What the pipeline shows of one owned partition.
pub enum PartitionView<'a> {
    /// Assigned; its generations are being rebuilt.
    Recovering,
    /// Consuming and forwarding.
    Running {
        /// Its live generations.
        gens: &'a Generations,
        /// Input offset of the next record to consume.
        next_offset: i64,
        /// Output end known to the partition.
        output_position: &'a Positions,
    },
}

impl LiveRequest {
    /// Answers from `partitions` (every partition the process owns), fingerprinting records with
    /// the pipeline's `fingerprinter`. A requester that gave up is ignored.
    pub fn answer(self, partitions: &BTreeMap<i32, PartitionView<'_>>, fingerprinter: &Fingerprinter) {
        match self {
            LiveRequest::Lookup { input, reply } => {
                let _ = reply.send(input.fingerprint(fingerprinter).map(|fp| live_lookup(partitions, fp)));
            }
            LiveRequest::Partitions { reply } => {
                let _ = reply.send(live_partitions(partitions));
            }
        }
    }
}

/// [`lookup`](super::lookup) over in-memory generations.
pub fn live_lookup(partitions: &BTreeMap<i32, PartitionView<'_>>, fp: Fingerprint) -> Lookup {
    let mut holdings = Vec::new();
    let mut incomplete = Vec::new();
    for (p, view) in partitions {
        match view {
            PartitionView::Recovering => incomplete.push(Incomplete {
                partition: *p,
                reason: "recovering: its generations are being rebuilt; ask again when /readyz is ready".into(),
            }),
            PartitionView::Running { gens, .. } => {
                let all: Vec<&Generation> = gens.iter().collect();
                let n = all.len();
                for (i, g) in all.iter().enumerate().rev() {
                    if let Some(rel) = g.table.get(fp.0) {
                        holdings.push(Holding {
                            partition: *p,
                            generation: g.epoch,
                            age: n - 1 - i,
                            first_seen_offset: g.absolute_offset(rel),
                        });
                    }
                }
            }
        }
    }
    Lookup {
        fingerprint: fp.to_string(),
        held: !holdings.is_empty(),
        holdings,
        incomplete,
    }
}

/// The `live` part of `GET /store/stats`.
pub fn live_partitions(partitions: &BTreeMap<i32, PartitionView<'_>>) -> Vec<LivePartition> {
    partitions
        .iter()
        .map(|(p, view)| match view {
            PartitionView::Recovering => LivePartition {
                partition: *p,
                state: PartitionState::Recovering.name().into(),
                next_offset: None,
                output_position: Positions::new(),
                fingerprints: 0,
                generations: Vec::new(),
            },
            PartitionView::Running {
                gens,
                next_offset,
                output_position,
            } => LivePartition {
                partition: *p,
                state: PartitionState::Running.name().into(),
                next_offset: Some(*next_offset),
                output_position: (*output_position).clone(),
                fingerprints: gens.total_len() as u64,
                generations: chain_input_ranges(gens.iter().map(|g| GenerationStats::held(g, *next_offset)).collect()),
            },
        })
        .collect()
}

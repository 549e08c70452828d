//! Step 1 of a recovery: what Kafka and the store say about the partition.

use std::time::Instant;

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::{Offset, TopicPartitionList};
use tracing::debug;

use super::plan::{ChangelogFacts, Facts, Snapshot};
use super::{check, RecoveryEnv, RecoveryError, RecoveryRequest, REQUEST_TIMEOUT};
use crate::config::Partitioning;
use crate::kafka;
use crate::metadata::CheckpointMeta;

/// An offset the group committed, with its metadata string.
struct Committed {
    /// The offset.
    offset: i64,
    /// The metadata string committed with it (empty when the broker dropped it).
    metadata: String,
}

/// Reads the committed offset and its metadata, the horizon marker (`partitioning =
/// "preserve"`: the offset the group holds on the output partition, where the oldest live
/// generation begins) and the store's snapshot of `req.partition`. Errors: Kafka, or the
/// partition was revoked meanwhile.
pub fn read(env: &RecoveryEnv, reader: &kafka::Reader, req: &RecoveryRequest) -> Result<Facts, RecoveryError> {
    let cfg = &env.cfg;
    let p = req.partition;
    let preserve = cfg.output.partitioning == Partitioning::Preserve;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&cfg.input.topic, p);
    if preserve {
        tpl.add_partition(&cfg.output.topic, p);
    }
    let t = Instant::now();
    let committed = reader.committed_offsets(tpl, REQUEST_TIMEOUT)?;
    debug!(
        partition = p,
        seconds = t.elapsed().as_secs_f64(),
        "committed offsets fetched"
    );
    let input = committed_of(&committed, &cfg.input.topic, p)?;
    let marker = if preserve {
        committed_of(&committed, &cfg.output.topic, p)?
    } else {
        None
    };
    check(&req.cancel)?;
    let snapshot = match env.store.snapshot(p) {
        Ok(Some(s)) => Snapshot::Present(s),
        Ok(None) => Snapshot::Missing,
        // No store open (its disk was full): nothing is known, not something damaged.
        Err(crate::store::StoreError::Closed { .. }) => Snapshot::Missing,
        Err(e) => Snapshot::Unreadable(e.to_string()),
    };
    Ok(Facts {
        partition: p,
        committed: input.as_ref().map(|c| c.offset),
        meta: input.as_ref().and_then(|c| CheckpointMeta::decode(&c.metadata)),
        metadata_dropped: marker.as_ref().is_some_and(|m| m.metadata.is_empty()),
        marker: marker.map(|m| m.offset),
        snapshot,
        start: cfg.input.start,
        delivery: cfg.output.delivery,
        provenance: cfg.output.provenance,
        changelog: match cfg.store.changelog_topic.is_empty() {
            true => ChangelogFacts::Off,
            false => ChangelogFacts::On,
        },
    })
}

/// The group's committed offset of `topic`/`p` in `committed` ([`kafka::answered`]); `None` when
/// nothing is committed.
fn committed_of(committed: &TopicPartitionList, topic: &str, p: i32) -> Result<Option<Committed>, KafkaError> {
    let elem = kafka::answered(committed, topic, p)?;
    Ok(match elem.offset() {
        Offset::Offset(o) => Some(Committed {
            offset: o,
            metadata: elem.metadata().to_string(),
        }),
        _ => None,
    })
}

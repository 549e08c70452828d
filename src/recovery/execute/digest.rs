//! The digest checks of a recovery: whether the input still holds the records the output's
//! provenance names, with the same key and value.

use std::collections::BTreeMap;

use tracing::{error, warn};

use super::lookups::at_input;
use super::reread::Scanned;
use crate::kafka;
use crate::recovery::plan::{provenance_proves, Proof};
use crate::recovery::{RecoveryEnv, RecoveryError};

/// The key-and-value fingerprint of a record (nulls distinct from empty): what a forwarded copy
/// shares with its input record.
pub(super) fn key_value_digest(record: &dyn crate::fingerprint::RecordFields) -> u128 {
    crate::fingerprint::Fingerprinter::new(crate::fingerprint::Source::KeyValue)
        .fingerprint(record)
        .map_or(0, |f| f.0)
}

/// The newest input offsets the re-read found (per output partition) that the input does not
/// refute ([`provenance_proves`]): it still holds a record at that offset with the same key and
/// value, or the record is gone (retention deleted it, compaction removed it: logged; the
/// partition resumes after it, at the log start when that is later, never at `input.start`). The
/// others are dropped with an error in the log: the input topic was recreated (its offsets start
/// again at 0), or the output was written from another cluster (a mirrored topic's offsets
/// differ), and resuming after them would skip records that were never forwarded.
pub(super) fn confirmed(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    p: i32,
    scanned: &Scanned,
) -> Result<BTreeMap<i32, i64>, RecoveryError> {
    let topic = &env.cfg.input.topic;
    let mut out = BTreeMap::new();
    for (q, offset) in &scanned.newest {
        let want = scanned.newest_digest.get(q).copied();
        let at = at_input(reader, topic, p, *offset, want)?;
        match provenance_proves(*offset, at) {
            Proof::Confirmed => {
                out.insert(*q, *offset);
            }
            Proof::Gone => {
                warn!(
                    partition = p,
                    output_partition = q,
                    offset,
                    at_input = ?at,
                    "the newest input record the output proves forwarded is gone from the input (retention deleted \
                     it, or compaction removed it); resuming after it"
                );
                out.insert(*q, *offset);
            }
            Proof::Refuted => error!(
                partition = p,
                output_partition = q,
                offset,
                "the output names input offset {offset} as a record's source, but the input partition holds no such \
                 record (recreated topic, or an output written from another cluster): not resuming from it"
            ),
        }
    }
    Ok(out)
}

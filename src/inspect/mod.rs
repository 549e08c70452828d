//! What kafka-dedup knows about an event: `kafka-dedup inspect` offline, and the answers behind
//! the live `/store/*` routes (registered in [`crate::http`]).
//!
//! Offline, the CLI opens the store directory and answers from it:
//! - `stats`: format version, deployment, size on disk, and per partition the committed input
//!   offset and the generations (epoch, fingerprint count, input offset range, output start,
//!   creation time);
//! - `lookup`: which partition and generation hold a fingerprint, and the input offset where it
//!   was first seen, or "not held";
//! - `dump`: a partition's fingerprints as JSON lines, one chunk in memory at a time;
//! - `verify`: the store's internal consistency ([`verify()`] lists what is checked); exit 1 when
//!   anything is wrong.
//!
//! A store in use by `kafka-dedup run` is refused ([`StoreError::InUse`]) with the HTTP address of
//! that process, which answers the same questions while it runs:
//! - `GET /store/lookup?value=TEXT` (or `key=`, repeated `header=NAME=VALUE`, `fingerprint=HEX`;
//!   URL-encoded): the same JSON as `inspect lookup --json`, answered **live** from the
//!   partitions' in-memory generations by the pipeline thread that owns them ([`live`]), so it
//!   includes everything forwarded up to the moment of the request, not only what the last
//!   checkpoint stored. It covers the partitions this process owns; a partition still recovering
//!   is listed under `incomplete`. After a clean stop and restart with no new input, the live
//!   answer equals the offline one.
//! - `GET /store/stats`: the same JSON as `inspect stats --json` (the store on disk, as of the
//!   last checkpoint), plus `live`: per owned partition its state and in-memory generations.
//!
//! The offline answers are as of the store's snapshot of each partition. After a clean hand-over
//! (SIGTERM, revocation) the snapshot holds every generation in full. A periodic checkpoint
//! stores the current generation empty: its fingerprints are in the output topic, from which the
//! next start re-learns them. Such a partition is listed under `incomplete` in a lookup.
//!
//! The rooms, by audience:
//! - [`report`]: the answers' types (what the CLI prints as JSON and HTTP serves);
//! - [`query`]: what a lookup asks about;
//! - [`offline`]: reading the store in bounded memory ([`Scan`]): `stats`, `lookup`, `dump`;
//! - [`verify`](mod@verify): `verify`;
//! - [`cli`]: the command line and its printing;
//! - [`live`]: the questions answered by the pipeline thread.

pub mod cli;
pub mod live;
pub mod offline;
pub mod query;
pub mod report;
pub mod verify;

#[cfg(test)]
mod tests;

pub use cli::{run, InspectCommand};
pub use live::{live_lookup, live_partitions, LiveRequest, PartitionView};
pub use offline::{dump, lookup, stats, Scan, SCAN_BUDGET_BYTES};
pub use query::{HeaderError, LookupInput, NoFingerprint, QueryError};
pub use report::{GenerationStats, Holding, Incomplete, LivePartition, Lookup, PartitionStats, Stats};
pub use verify::verify;

use crate::store::StoreError;

/// Why inspection failed. `main` maps `Store` refusals and `Usage` to exit 2, the rest to 1.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The store cannot be opened or read.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Bad arguments.
    #[error("{0}")]
    Usage(String),
    /// Output could not be written.
    #[error("{0}")]
    Io(#[from] std::io::Error),
}

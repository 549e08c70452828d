//! Recovery of one input partition on assignment (docs/ARCHITECTURE.md, "Recovery"): rebuild its
//! generations so that replays of everything forwarded within the horizon are recognised,
//! including records forwarded after the last checkpoint by an owner that then crashed.
//!
//! Runs on a worker thread per partition, off the consumer's poll loop, with its own consumer
//! outside the group, in three steps:
//!
//! 1. [`read`]: the committed offset `C` and its [`CheckpointMeta`](crate::metadata::CheckpointMeta),
//!    the horizon marker (`partitioning = "preserve"`), and the store's snapshot of the partition;
//! 2. [`plan`]: a pure function of what was read, deciding what to load, where the re-read of
//!    the output starts and stops, whether to wait for the fence, and why the store was not used
//!    (its module documentation has the whole table);
//! 3. [`execute`]: load the snapshot (a snapshot that fails to load is planned again as
//!    unreadable), count and log a rebuild, wait for the fence, re-read the output partition(s)
//!    and insert each record's fingerprint into the generation whose output range holds it. The
//!    partition clock continues from the snapshot's or the metadata's, moved on by the newest
//!    timestamp among the re-read records ([`crate::horizon::recovered`]).
//!
//! The fence: in idempotent mode, unless the previous owner handed over cleanly, recovery waits
//! until `output.fence_wait` has passed since the assignment before reading the output's end, so
//! produce requests the previous owner had already sent have landed (docs/guarantee.md, "Crash safety"). In
//! transactional mode the new producer's `init_transactions` fenced the old one instead, and the
//! re-read stops at the committed transaction's end (`out_end`).
//!
//! Brokers that do not return offset commit metadata (tansu 0.6 stores it but answers an empty
//! string) get the same guarantees from two further sources: a store snapshot taken at exactly
//! the committed offset is used, and otherwise the group's committed offset on the *output*
//! partition, the horizon marker committed in the same request as every input offset, says where
//! the oldest live generation begins.

pub mod execute;
pub mod plan;
pub mod read;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::error::KafkaError;

use crate::config::Config;
use crate::fingerprint::Fingerprinter;
use crate::generations::{Generations, Positions};
use crate::kafka;
use crate::store::Store;
use crate::telemetry::Totals;

/// Timeout of each metadata, offset and watermark request made during recovery.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// What a recovery worker needs, shared by all workers.
#[derive(Clone)]
pub struct RecoveryEnv {
    /// The configuration.
    pub cfg: Arc<Config>,
    /// The local store.
    pub store: Store,
    /// The configured fingerprint source.
    pub fingerprinter: Fingerprinter,
    /// Number of output partitions (key partitioning re-reads all of them).
    pub output_partitions: usize,
    /// Process totals.
    pub totals: Arc<Totals>,
}

/// A recovery to run.
pub struct RecoveryRequest {
    /// Input partition.
    pub partition: i32,
    /// Ownership incarnation (echoed in the result).
    pub incarnation: u64,
    /// When the partition was assigned.
    pub since: Instant,
    /// When this attempt began (a retry after a failed one begins later): the fence wait counts
    /// from here, so that records of a previous owner that could not land while the output was
    /// unreachable (the reason the first attempt failed) get the whole wait once it is back.
    pub attempt: Instant,
    /// Set when the partition is revoked meanwhile.
    pub cancel: Arc<AtomicBool>,
}

/// A recovered partition, ready to run.
pub struct Recovered {
    /// Rebuilt generations.
    pub gens: Generations,
    /// Input offset to resume consuming at.
    pub resume: i64,
    /// Output end per output partition, as found by the re-read.
    pub out_positions: Positions,
    /// Checkpoint id the state descends from (kept when the store was used).
    pub ckpt: String,
    /// True when the partition starts with empty generations: no commit (first start), or a
    /// commit without metadata or horizon marker (offsets reset by an operator).
    pub fresh: bool,
    /// Output records re-read.
    pub scanned: u64,
    /// The partition clock to continue, ms since the Unix epoch ([`crate::horizon::recovered`]):
    /// the checkpoint's, moved on by the newest timestamp among the re-read output records;
    /// `None` when neither is known (the first record taken sets it).
    pub clock: Option<i64>,
    /// Global scope, filter stage: the high-water marks to continue ([`crate::global::HighWater`]):
    /// the committed metadata's, raised by the provenance of the re-read output records
    /// (`preserve` partitioning only); empty otherwise.
    pub high_water: crate::global::HighWater,
    /// When the partition was assigned (for the recovery's duration).
    pub since: Instant,
    /// Where the generations came from: `store`, `changelog`, `output` (re-read), `fresh`
    /// (nothing to recover); the `source` label of `kafka_dedup_handover_duration_seconds`.
    pub source: &'static str,
    /// What the changelog holds of the partition, carried into this owner's commits until its
    /// own first changelog checkpoint (`crate::changelog`).
    pub changelog: Option<crate::changelog::ChangelogRef>,
}

/// Why a recovery did not finish. All but `Cancelled` are retried by the pipeline.
#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    /// The partition was revoked meanwhile.
    #[error("cancelled: the partition was revoked")]
    Cancelled,
    /// Kafka could not be reached or answered with an error.
    #[error("kafka: {0}")]
    Kafka(#[from] KafkaError),
    /// The recovery worker panicked (a bug); the message is the panic's.
    #[error("the recovery worker panicked: {0}")]
    Panicked(String),
    /// No worker thread could be started (the operating system's error).
    #[error("cannot start a recovery thread: {0}")]
    Thread(String),
}

/// `Err(Cancelled)` once the partition was revoked.
fn check(cancel: &AtomicBool) -> Result<(), RecoveryError> {
    if cancel.load(Ordering::Relaxed) {
        Err(RecoveryError::Cancelled)
    } else {
        Ok(())
    }
}

/// Runs the recovery of `req.partition`: read, plan, execute. Blocking; call from a worker
/// thread.
pub fn recover(env: &RecoveryEnv, req: &RecoveryRequest) -> Result<Recovered, RecoveryError> {
    let reader: kafka::Reader = kafka::reader_config(&env.cfg).create_with_context(kafka::ReaderContext::default())?;
    let facts = read::read(env, &reader, req)?;
    execute::execute(env, &reader, req, facts)
}

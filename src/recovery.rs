//! Recovery of one input partition on assignment (shared/DESIGN.md, "Recovery at start"): rebuild
//! its generations so that replays of everything forwarded within the horizon are recognised,
//! including records forwarded after the last checkpoint by an owner that then crashed.
//!
//! Runs on a worker thread per partition, off the consumer's poll loop, with its own consumer
//! outside the group. Steps:
//!
//! 1. Read the committed offset `C` and its [`CheckpointMeta`] for the partition.
//! 2. If the local store has the snapshot named by the metadata (`ckpt`), load its generations and
//!    re-read the output from the snapshot's `out_covered`; otherwise (missing, behind, ahead,
//!    other deployment, corrupt) start empty generations at the metadata's output starts and
//!    re-read from the oldest one; count and log the rebuild.
//! 3. In idempotent mode, unless the previous owner handed over cleanly, wait until
//!    `output.fence_wait` has passed since the assignment before reading the output's end, so
//!    produce requests the previous owner had already sent have landed (README, "Crash safety").
//!    In transactional mode the new producer's `init_transactions` fenced the old one instead,
//!    and the re-read stops at the committed transaction's end (`out_end`).
//! 4. Re-read the output partition(s) to the end, fingerprint each record with the configured
//!    source and insert it into the generation whose output range holds it.
//! 5. Hand back the generations, the offset to resume at (`C`), and the output end.
//!
//! Without any metadata (first start of the group), the partition starts at `input.start` with
//! one empty generation beginning at the output's current end.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::{info, warn};

use crate::config::{Config, Delivery, Partitioning, Start};
use crate::fingerprint::Fingerprinter;
use crate::generations::{Generation, Generations, Positions};
use crate::kafka;
use crate::metadata::{new_checkpoint_id, CheckpointMeta};
use crate::store::Store;
use crate::telemetry::{self, Totals};

/// Timeout of each metadata, offset and watermark request made during recovery.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval of progress log lines during a long re-read.
const PROGRESS_EVERY: Duration = Duration::from_secs(5);

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
    /// Set when the partition is revoked meanwhile.
    pub cancel: Arc<AtomicBool>,
}

/// A recovered partition, ready to run.
pub struct Recovered {
    /// Input partition.
    pub partition: i32,
    /// Ownership incarnation of the request.
    pub incarnation: u64,
    /// Rebuilt generations.
    pub gens: Generations,
    /// Input offset to resume consuming at.
    pub resume: i64,
    /// Output end per output partition, as found by the re-read.
    pub out_positions: Positions,
    /// Checkpoint id the state descends from (kept when the store was used).
    pub ckpt: String,
    /// True when no checkpoint metadata existed (first start, or offsets reset by an operator).
    pub fresh: bool,
    /// Output records re-read.
    pub scanned: u64,
    /// When the recovery started (for its duration).
    pub since: Instant,
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
}

fn check(cancel: &AtomicBool) -> Result<(), RecoveryError> {
    if cancel.load(Ordering::Relaxed) {
        Err(RecoveryError::Cancelled)
    } else {
        Ok(())
    }
}

/// Runs the recovery of `req.partition`. Blocking; call from a worker thread.
pub fn recover(env: &RecoveryEnv, req: &RecoveryRequest) -> Result<Recovered, RecoveryError> {
    let cfg = &env.cfg;
    let p = req.partition;
    let reader: BaseConsumer = kafka::reader_config(cfg).create()?;

    // 1. Committed offset and metadata.
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition(&cfg.input.topic, p);
    let committed = reader.committed_offsets(tpl, REQUEST_TIMEOUT)?;
    let elem = committed
        .find_partition(&cfg.input.topic, p)
        .ok_or_else(|| KafkaError::OffsetFetch(rdkafka::types::RDKafkaErrorCode::UnknownPartition))?;
    elem.error()?;
    let committed_offset = match elem.offset() {
        Offset::Offset(o) => Some(o),
        _ => None,
    };
    let meta = CheckpointMeta::decode(elem.metadata());
    check(&req.cancel)?;

    let keep = cfg.checkpoint.generations as usize;
    let out_parts: Vec<i32> = match cfg.output.partitioning {
        Partitioning::Preserve => vec![p],
        Partitioning::Key => (0..env.output_partitions as i32).collect(),
    };

    let Some(meta) = meta else {
        // First start (or an offset without our metadata): nothing to re-learn.
        let resume = match committed_offset {
            Some(o) => {
                warn!(
                    partition = p,
                    offset = o,
                    "committed offset has no kafka-dedup metadata (reset by an operator?); starting with empty generations"
                );
                telemetry::store_rebuild("no_metadata");
                o
            }
            None => {
                let (low, high) = reader.fetch_watermarks(&cfg.input.topic, p, REQUEST_TIMEOUT)?;
                match cfg.input.start {
                    Start::Earliest => low,
                    Start::Latest => high,
                }
            }
        };
        let mut out_positions = Positions::new();
        for q in &out_parts {
            let (_, high) = reader.fetch_watermarks(&cfg.output.topic, *q, REQUEST_TIMEOUT)?;
            out_positions.insert(*q, high);
        }
        let gens = Generations::from_parts(vec![Generation::new(1, resume, out_positions.clone(), 0)], keep);
        return Ok(Recovered {
            partition: p,
            incarnation: req.incarnation,
            gens,
            resume,
            out_positions,
            ckpt: new_checkpoint_id(),
            fresh: true,
            scanned: 0,
            since: req.since,
        });
    };
    // With metadata the committed offset exists.
    let resume = committed_offset.unwrap_or(0);

    // 2. The store, if it holds this checkpoint; else empty generations at the metadata's starts.
    let snapshot = env.store.snapshot(p);
    let from_store = match &snapshot {
        Ok(Some(s)) if s.ckpt == meta.ckpt && s.committed_offset == resume => match env.store.load_generations(p, s) {
            Ok(gens) => Some((gens, s.out_covered.clone())),
            Err(e) => {
                rebuild_notice(env, p, "corrupt", &e.to_string());
                None
            }
        },
        Ok(Some(s)) => {
            rebuild_notice(
                env,
                p,
                "behind_or_ahead",
                &format!(
                    "store snapshot {} (offset {}) does not match the committed checkpoint {} (offset {resume})",
                    s.ckpt, s.committed_offset, meta.ckpt
                ),
            );
            None
        }
        Ok(None) => {
            rebuild_notice(env, p, "missing", "the store has no snapshot of this partition");
            None
        }
        Err(e) => {
            rebuild_notice(env, p, "corrupt", &e.to_string());
            None
        }
    };
    let (gen_list, scan_from, ckpt) = match from_store {
        Some((gens, covered)) => (gens, covered, meta.ckpt.clone()),
        None => {
            let n = meta.gens.len();
            let first_epoch = meta.epoch + 1 - n as u64;
            let gens: Vec<Generation> = meta
                .gens
                .iter()
                .enumerate()
                .map(|(i, starts)| Generation::new(first_epoch + i as u64, resume, starts.clone(), 0))
                .collect();
            // A fresh id: the store does not hold this state.
            (gens, meta.gens[0].clone(), new_checkpoint_id())
        }
    };
    let mut gens = Generations::from_parts(gen_list, keep);
    // The current generation must accept offsets from `resume` on.
    check(&req.cancel)?;

    // 3. Let in-flight records of a previous owner land (idempotent mode, unclean hand-over).
    if cfg.output.delivery == Delivery::Idempotent && !meta.clean {
        let until = req.since + cfg.output.fence_wait;
        while Instant::now() < until {
            check(&req.cancel)?;
            std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
        }
    }

    // 4. Re-read the output.
    let limit = match cfg.output.delivery {
        Delivery::Transactional => meta.out_end.clone(),
        Delivery::Idempotent => None,
    };
    let (out_positions, scanned) = scan(env, &reader, req, &out_parts, &scan_from, limit.as_ref(), &mut gens)?;
    Ok(Recovered {
        partition: p,
        incarnation: req.incarnation,
        gens,
        resume,
        out_positions,
        ckpt,
        fresh: false,
        scanned,
        since: req.since,
    })
}

fn rebuild_notice(env: &RecoveryEnv, p: i32, reason: &'static str, detail: &str) {
    warn!(
        partition = p,
        reason,
        "local store cannot be used for this partition ({detail}); rebuilding its generations from the output topic"
    );
    telemetry::store_rebuild(reason);
    Totals::bump(&env.totals.rebuilds);
}

/// Re-reads output partitions from `from` to their end (or `limit`), re-learning fingerprints.
/// Returns the end position per output partition and the number of records read.
fn scan(
    env: &RecoveryEnv,
    reader: &BaseConsumer,
    req: &RecoveryRequest,
    out_parts: &[i32],
    from: &Positions,
    limit: Option<&Positions>,
    gens: &mut Generations,
) -> Result<(Positions, u64), RecoveryError> {
    let cfg = &env.cfg;
    let topic = &cfg.output.topic;
    let mut ends = Positions::new();
    let mut tpl = TopicPartitionList::new();
    let mut remaining = BTreeSet::new();
    let mut total_estimate: i64 = 0;
    for q in out_parts {
        let (low, high) = reader.fetch_watermarks(topic, *q, REQUEST_TIMEOUT)?;
        let start = from.get(q).copied().unwrap_or(high).max(low);
        let stop = limit.and_then(|l| l.get(q).copied());
        if stop.is_some_and(|s| s <= start) || (stop.is_none() && start >= high && high == low) {
            ends.insert(*q, start.max(stop.unwrap_or(start)));
            continue;
        }
        total_estimate += (stop.unwrap_or(high) - start).max(0);
        tpl.add_partition_offset(topic, *q, Offset::Offset(start))?;
        remaining.insert(*q);
        ends.insert(*q, start);
    }
    let mut scanned = 0u64;
    if remaining.is_empty() {
        return Ok((ends, scanned));
    }
    reader.assign(&tpl)?;
    let metrics = telemetry::PartitionMetrics::new(req.partition, cfg.checkpoint.generations as usize);
    let started = Instant::now();
    let mut last_progress = Instant::now();
    let mut errors = 0u32;
    while !remaining.is_empty() {
        check(&req.cancel)?;
        match reader.poll(Duration::from_millis(200)) {
            Some(Ok(m)) => {
                let q = m.partition();
                let o = m.offset();
                if !remaining.contains(&q) {
                    continue;
                }
                if let Some(stop) = limit.and_then(|l| l.get(&q)) {
                    if o >= *stop {
                        remaining.remove(&q);
                        ends.insert(q, *stop);
                        continue;
                    }
                }
                if let Ok(fp) = env.fingerprinter.fingerprint(&m) {
                    gens.relearn(fp.0, q, o);
                }
                scanned += 1;
                metrics.scanned.increment(1);
                Totals::bump(&env.totals.scanned);
                ends.insert(q, o + 1);
                if last_progress.elapsed() >= PROGRESS_EVERY {
                    last_progress = Instant::now();
                    let rate = scanned as f64 / started.elapsed().as_secs_f64().max(1e-3);
                    info!(
                        partition = req.partition,
                        scanned,
                        total = total_estimate,
                        rate = rate as u64,
                        "recovery re-reading the output topic"
                    );
                }
            }
            Some(Err(KafkaError::PartitionEOF(q))) => {
                if remaining.remove(&q) {
                    if let Ok(pos) = reader.position() {
                        if let Some(Offset::Offset(o)) = pos.find_partition(topic, q).map(|e| e.offset()) {
                            let e = ends.entry(q).or_insert(o);
                            *e = (*e).max(o);
                        }
                    }
                }
            }
            Some(Err(e)) => {
                errors += 1;
                warn!(partition = req.partition, error = %e, "error while re-reading the output topic");
                if errors > 50 {
                    return Err(e.into());
                }
            }
            None => {}
        }
    }
    Ok((ends, scanned))
}

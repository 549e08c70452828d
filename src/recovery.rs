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
//! Without any commit (first start of the group), the partition starts at `input.start` with
//! one empty generation beginning at the output's current end.
//!
//! Brokers that do not return offset commit metadata (tansu 0.6 stores it but answers an empty
//! string) get the same guarantees from two further sources: a store snapshot taken at exactly
//! the committed offset is used, and otherwise the group's committed offset on the *output*
//! partition, the horizon marker committed in the same request as every input offset, says where
//! the oldest live generation begins. Without metadata nobody can tell whether the previous
//! owner handed over cleanly (a local snapshot may predate another instance's ownership), so
//! recovery always waits `output.fence_wait`.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rdkafka::consumer::Consumer;
use rdkafka::error::KafkaError;
use rdkafka::{Message, Offset, TopicPartitionList};
use tracing::{debug, info, warn};

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
    let reader: kafka::Reader = kafka::reader_config(cfg).create_with_context(kafka::ReaderContext)?;

    // 1. Committed offset and metadata, and (preserve mode) the horizon marker: the offset the
    //    group holds on the output partition, where the oldest live generation begins.
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
    let offset_of = |topic: &str| -> Result<Option<(i64, String)>, KafkaError> {
        let elem = committed.find_partition(topic, p).ok_or(KafkaError::OffsetFetch(
            rdkafka::types::RDKafkaErrorCode::UnknownPartition,
        ))?;
        elem.error()?;
        Ok(match elem.offset() {
            Offset::Offset(o) => Some((o, elem.metadata().to_string())),
            _ => None,
        })
    };
    let input_commit = offset_of(&cfg.input.topic)?;
    let horizon_marker = if preserve {
        offset_of(&cfg.output.topic)?.map(|(o, _)| o)
    } else {
        None
    };
    let committed_offset = input_commit.as_ref().map(|(o, _)| *o);
    let meta = input_commit.as_ref().and_then(|(_, m)| CheckpointMeta::decode(m));
    check(&req.cancel)?;

    let keep = cfg.checkpoint.generations as usize;
    let out_parts: Vec<i32> = if preserve {
        vec![p]
    } else {
        (0..env.output_partitions as i32).collect()
    };
    let snapshot = env.store.snapshot(p);

    // 2. Decide where the generations come from.
    let plan = match (committed_offset, &meta) {
        (None, _) => Plan::Fresh(None),
        (Some(resume), Some(meta)) => {
            // Metadata names the checkpoint: the store is used only if it holds exactly it.
            let from_store = match &snapshot {
                Ok(Some(s)) if s.ckpt == meta.ckpt && s.committed_offset == resume => load(env, p, s),
                Ok(Some(s)) => Err((
                    "behind_or_ahead",
                    format!(
                        "store snapshot {} (offset {}) does not match the committed checkpoint {} (offset {resume})",
                        s.ckpt, s.committed_offset, meta.ckpt
                    ),
                )),
                Ok(None) => Err(("missing", "the store has no snapshot of this partition".to_string())),
                Err(e) => Err(("corrupt", e.to_string())),
            };
            match from_store {
                Ok((gens, covered, _)) => Plan::Store {
                    resume,
                    gens,
                    scan_from: covered,
                    ckpt: meta.ckpt.clone(),
                    clean: meta.clean,
                },
                Err((reason, detail)) => {
                    rebuild_notice(env, p, reason, &detail);
                    let first_epoch = meta.epoch + 1 - meta.gens.len() as u64;
                    let gens = meta
                        .gens
                        .iter()
                        .enumerate()
                        .map(|(i, starts)| Generation::new(first_epoch + i as u64, resume, starts.clone(), 0))
                        .collect();
                    Plan::Rebuild {
                        resume,
                        gens,
                        scan_from: meta.gens[0].clone(),
                        clean: meta.clean,
                    }
                }
            }
        }
        (Some(resume), None) => {
            // No metadata: the broker dropped it (tansu 0.6 does) or an operator reset the
            // offset. A store snapshot taken at exactly this offset is used; otherwise the
            // horizon marker on the output partition says where to re-read from.
            match &snapshot {
                // Its `clean` flag is not trusted: another instance may have owned the partition
                // since, without moving the committed offset, and crashed with records in flight.
                Ok(Some(s)) if s.committed_offset == resume => match load(env, p, s) {
                    Ok((gens, covered, _)) => Plan::Store {
                        resume,
                        gens,
                        scan_from: covered,
                        ckpt: s.ckpt.clone(),
                        clean: false,
                    },
                    Err((reason, detail)) => marker_plan(env, p, resume, horizon_marker, reason, &detail),
                },
                Ok(Some(s)) => marker_plan(
                    env,
                    p,
                    resume,
                    horizon_marker,
                    "behind_or_ahead",
                    &format!(
                        "store snapshot at offset {} does not match the committed offset {resume}",
                        s.committed_offset
                    ),
                ),
                Ok(None) => marker_plan(
                    env,
                    p,
                    resume,
                    horizon_marker,
                    "missing",
                    "the store has no snapshot of this partition",
                ),
                Err(e) => marker_plan(env, p, resume, horizon_marker, "corrupt", &e.to_string()),
            }
        }
    };

    let (resume, gen_list, scan_from, ckpt, clean) = match plan {
        Plan::Fresh(committed) => {
            let resume = match committed {
                Some(o) => o,
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
        }
        Plan::Store {
            resume,
            gens,
            scan_from,
            ckpt,
            clean,
        } => (resume, gens, scan_from, ckpt, clean),
        Plan::Rebuild {
            resume,
            gens,
            scan_from,
            clean,
        } => (resume, gens, scan_from, new_checkpoint_id(), clean),
    };
    let mut gens = Generations::from_parts(gen_list, keep);
    check(&req.cancel)?;

    // 3. Let in-flight records of a previous owner land (idempotent mode, unclean hand-over).
    if cfg.output.delivery == Delivery::Idempotent && !clean {
        let until = req.since + cfg.output.fence_wait;
        while Instant::now() < until {
            check(&req.cancel)?;
            std::thread::sleep(Duration::from_millis(50).min(until.saturating_duration_since(Instant::now())));
        }
    }

    // 4. Re-read the output.
    let limit = match cfg.output.delivery {
        Delivery::Transactional => meta.as_ref().and_then(|m| m.out_end.clone()),
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

/// Where a partition's generations come from.
enum Plan {
    /// Nothing to re-learn: one empty generation starting at the output's end; consumption
    /// starts at the given offset, or at `input.start` when nothing is committed.
    Fresh(Option<i64>),
    /// The local store holds the committed state.
    Store {
        resume: i64,
        gens: Vec<Generation>,
        scan_from: Positions,
        ckpt: String,
        clean: bool,
    },
    /// Empty generations at known output starts, re-learned from the output topic.
    Rebuild {
        resume: i64,
        gens: Vec<Generation>,
        scan_from: Positions,
        clean: bool,
    },
}

type Loaded = (Vec<Generation>, Positions, bool);

fn load(env: &RecoveryEnv, p: i32, s: &crate::store::PartitionSnapshot) -> Result<Loaded, (&'static str, String)> {
    env.store
        .load_generations(p, s)
        .map(|g| (g, s.out_covered.clone(), s.clean))
        .map_err(|e| ("corrupt", e.to_string()))
}

/// Without metadata and without a usable store: re-learn everything from the horizon marker
/// (the group's offset on the output partition) into one generation; without a marker, start
/// empty (an operator reset the offsets, or the group predates kafka-dedup).
fn marker_plan(
    env: &RecoveryEnv,
    p: i32,
    resume: i64,
    marker: Option<i64>,
    reason: &'static str,
    detail: &str,
) -> Plan {
    match marker {
        Some(start) => {
            rebuild_notice(env, p, reason, detail);
            let starts: Positions = [(p, start)].into_iter().collect();
            Plan::Rebuild {
                resume,
                gens: vec![Generation::new(1, resume, starts.clone(), 0)],
                scan_from: starts,
                clean: false,
            }
        }
        None => {
            warn!(
                partition = p,
                offset = resume,
                "committed offset without kafka-dedup checkpoint metadata or horizon marker (reset by an operator?); \
                 starting with empty generations: replays of records before this offset are not caught"
            );
            telemetry::store_rebuild("no_metadata");
            Plan::Fresh(Some(resume))
        }
    }
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
    reader: &kafka::Reader,
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
    let metrics = telemetry::PartitionMetrics::new(req.partition, cfg);
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
            Some(Err(KafkaError::PartitionEOF(q))) if remaining.remove(&q) => {
                let position = reader
                    .position()
                    .ok()
                    .and_then(|pos| pos.find_partition(topic, q).map(|e| e.offset()));
                if let Some(Offset::Offset(o)) = position {
                    let e = ends.entry(q).or_insert(o);
                    *e = (*e).max(o);
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => {}
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

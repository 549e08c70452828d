//! Step 3 of a recovery: carry out the [`Plan`]: load the store's snapshot or start empty
//! generations, count and log a rebuild, wait for the fence, re-read the output topic.
//!
//! This file carries out each kind of plan; [`lookups`] holds the plan's I/O outside the re-read
//! (watermarks, offsets by time, one-record looks, the fence wait), [`reread`] the re-read of the
//! output, and [`digest`] the check that the input still holds what the output's provenance names.

mod digest;
mod lookups;
mod reread;

use std::time::Instant;

use rdkafka::consumer::Consumer;
use tracing::{info, warn};

use self::digest::confirmed;
use self::lookups::{
    horizon_start, provenance_before, start_offset, transaction_ends, wait_for_fence, within_retention,
};
use self::reread::scan;
use super::plan::{
    behind_output, plan, resume_from_output, ChangelogFacts, Facts, FromOutputReason, Notice, Plan, Reread, Resume,
    Snapshot,
};
use super::{check, Recovered, RecoveryEnv, RecoveryError, RecoveryRequest, REQUEST_TIMEOUT};
use crate::config::{Partitioning, Start};
use crate::generations::{Generation, Generations, Positions};
use crate::global::{merge_high_water, HighWater};
use crate::horizon;
use crate::kafka;
use crate::metadata::new_checkpoint_id;
use crate::telemetry::{self, Totals};

/// Carries out the plan for `facts`. A snapshot that fails to load is planned again as
/// unreadable. Errors: Kafka, or the partition was revoked meanwhile.
pub fn execute(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    req: &RecoveryRequest,
    mut facts: Facts,
) -> Result<Recovered, RecoveryError> {
    let p = req.partition;
    let keep = env.cfg.checkpoint.generations as usize;
    loop {
        match plan(&facts) {
            Plan::Fresh { resume, notice } => {
                if let Some(notice) = notice {
                    announce(env, p, &notice, resume);
                }
                return fresh(env, reader, req, resume);
            }
            Plan::Load { resume, ckpt, reread } => {
                let Snapshot::Present(s) = &facts.snapshot else {
                    unreachable!("only a present snapshot is planned to load")
                };
                let clock = s.clock.or(meta_clock(&facts));
                let t = Instant::now();
                match env.store.load_generations(p, s) {
                    Ok(gens) => {
                        let gens = Generations::from_parts(gens, keep);
                        let start = Loaded {
                            gens,
                            resume,
                            ckpt,
                            clock,
                            high_water: meta_high_water(&facts),
                            source: "store",
                            changelog: facts.meta.as_ref().and_then(|m| m.cl.clone()),
                            load_seconds: t.elapsed().as_secs_f64(),
                        };
                        // A snapshot taken at exactly the committed offset proves the commit is
                        // kafka-dedup's own: never asked whether it is behind.
                        return finish(env, reader, req, start, &reread, false);
                    }
                    // Closed meanwhile (a failed reopen after a page-cache release, a full
                    // disk): nothing known, not something damaged, as when the snapshot is read.
                    Err(crate::store::StoreError::Closed { .. }) => facts.snapshot = Snapshot::Missing,
                    Err(e) => facts.snapshot = Snapshot::Unreadable(e.to_string()),
                }
            }
            Plan::FromOutput {
                committed,
                wait_for_fence,
                why,
            } => return from_output(env, reader, req, committed, wait_for_fence, why),
            Plan::RebuildByTime {
                resume,
                epoch,
                clock,
                wait_for_fence,
                notice,
            } => {
                announce(env, p, &notice, Resume::At(resume));
                let out_parts = output_partitions(env, p);
                let from = horizon_start(env, reader, &out_parts, clock)?;
                let start = Loaded {
                    gens: Generations::from_parts(vec![Generation::new(epoch, resume, from.clone(), 0)], keep),
                    resume,
                    ckpt: new_checkpoint_id(),
                    clock,
                    high_water: meta_high_water(&facts),
                    source: "output",
                    changelog: None,
                    load_seconds: 0.0,
                };
                let reread = Reread {
                    from,
                    to: transaction_ends(env, &out_parts)?,
                    wait_for_fence,
                };
                return finish(env, reader, req, start, &reread, false);
            }
            Plan::Changelog {
                resume,
                generations,
                load,
                reread,
                notice,
            } => {
                let t = Instant::now();
                let loaded = match crate::changelog::load(&env.cfg, reader, p, &load.from, &load.epochs)? {
                    Ok(loaded) => loaded,
                    Err(fallback) => {
                        facts.changelog = ChangelogFacts::Failed(fallback);
                        continue;
                    }
                };
                let load_seconds = t.elapsed().as_secs_f64();
                telemetry::changelog_loaded(loaded.bytes);
                info!(
                    partition = p,
                    reason = match &notice {
                        Notice::Rebuild { reason, .. } => *reason,
                        Notice::NoMetadata => "no_metadata",
                    },
                    generations = loaded.gens.len(),
                    bytes = loaded.bytes,
                    seconds = load_seconds,
                    "local store cannot be used for this partition; loaded its older generations from the changelog \
                     topic, re-reading the output from where the checkpoint's current generation begins"
                );
                let mut from_changelog = loaded.gens.into_iter();
                let gens = generations
                    .into_iter()
                    .map(|g| match load.epochs.contains(&g.epoch) {
                        true => from_changelog.next().expect("one loaded generation per epoch"),
                        false => Generation::new(g.epoch, resume, g.out_start, 0),
                    })
                    .collect();
                let start = Loaded {
                    gens: Generations::from_parts(gens, keep),
                    resume,
                    ckpt: new_checkpoint_id(),
                    clock: meta_clock(&facts),
                    high_water: meta_high_water(&facts),
                    source: "changelog",
                    changelog: Some(load.from.clone()),
                    load_seconds,
                };
                return finish(env, reader, req, start, &reread, false);
            }
            Plan::Rebuild {
                resume,
                generations,
                reread,
                notice,
                changelog,
            } => {
                announce(env, p, &notice, Resume::At(resume));
                if let Some(f) = &changelog {
                    warn!(
                        partition = p,
                        reason = f.reason,
                        "the changelog topic cannot be used for this partition ({}); re-reading the output topic",
                        f.detail
                    );
                    telemetry::changelog_fallback(f.reason);
                }
                let gens = generations
                    .into_iter()
                    .map(|g| Generation::new(g.epoch, resume, g.out_start, 0))
                    .collect();
                let start = Loaded {
                    gens: Generations::from_parts(gens, keep),
                    resume,
                    ckpt: new_checkpoint_id(),
                    clock: meta_clock(&facts),
                    high_water: meta_high_water(&facts),
                    source: "output",
                    // A changelog that failed is not named again by this owner's commits.
                    changelog: changelog
                        .is_none()
                        .then(|| facts.meta.as_ref().and_then(|m| m.cl.clone()))
                        .flatten(),
                    load_seconds: 0.0,
                };
                return finish(env, reader, req, start, &reread, untrusted(&facts));
            }
        }
    }
}

/// The partition clock the committed metadata carries, if any.
fn meta_clock(facts: &Facts) -> Option<i64> {
    facts.meta.as_ref().and_then(|m| m.clock)
}

/// The high-water marks the committed metadata carries (global scope, filter stage), if any.
fn meta_high_water(facts: &Facts) -> HighWater {
    facts.meta.as_ref().map(|m| m.hw.clone()).unwrap_or_default()
}

/// The output partitions whose records partition `p`'s generations hold: `p` itself
/// (`preserve`), or all of them (`key`).
fn output_partitions(env: &RecoveryEnv, p: i32) -> Vec<i32> {
    match env.cfg.output.partitioning {
        Partitioning::Preserve => vec![p],
        Partitioning::Key => (0..env.output_partitions as i32).collect(),
    }
}

/// Logs and counts why the store is not used (`kafka_dedup_store_rebuilds_total{reason}`).
fn announce(env: &RecoveryEnv, p: i32, notice: &Notice, resume: Resume) {
    match notice {
        Notice::Rebuild { reason, detail } => {
            // A snapshot missing or of another checkpoint is the designed path after a crash or
            // when the partition comes from another instance (a new user read the warning as a
            // fault): said at info. A snapshot that cannot be read is a fault of the disk or the
            // store: a warning.
            match *reason {
                "corrupt" => warn!(
                    partition = p,
                    reason,
                    "local store cannot be used for this partition ({detail}); rebuilding its generations from the output topic"
                ),
                _ => info!(
                    partition = p,
                    reason,
                    "local store not current for this partition ({detail}): rebuilding its generations from the output \
                     topic, as after a crash or when the partition comes from another instance"
                ),
            }
            telemetry::store_rebuild(reason);
            Totals::bump(&env.totals.rebuilds);
        }
        Notice::NoMetadata => {
            let offset = match resume {
                Resume::At(o) => Some(o),
                Resume::Start(_) => None,
            };
            warn!(
                partition = p,
                offset,
                "committed offset without kafka-dedup checkpoint metadata or horizon marker (reset by an operator?); \
                 starting with empty generations: replays of records before this offset are not caught"
            );
            telemetry::store_rebuild("no_metadata");
        }
    }
}

/// Nothing to re-learn: one empty generation beginning at the output's current end.
fn fresh(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    req: &RecoveryRequest,
    resume: Resume,
) -> Result<Recovered, RecoveryError> {
    let cfg = &env.cfg;
    let p = req.partition;
    let resume = match resume {
        Resume::At(o) => within_retention(env, reader, p, o)?,
        Resume::Start(start) => {
            let (low, high) = reader.fetch_watermarks(&cfg.input.topic, p, REQUEST_TIMEOUT)?;
            match start {
                Start::Earliest => low,
                Start::Latest => high,
            }
        }
    };
    let mut out_positions = Positions::new();
    for q in output_partitions(env, p) {
        let (_, high) = reader.fetch_watermarks(&cfg.output.topic, q, REQUEST_TIMEOUT)?;
        out_positions.insert(q, high);
    }
    let first = Generation::new(1, resume, out_positions.clone(), 0);
    Ok(Recovered {
        gens: Generations::from_parts(vec![first], cfg.checkpoint.generations as usize),
        resume,
        out_positions,
        ckpt: new_checkpoint_id(),
        fresh: true,
        scanned: 0,
        since: req.since,
        clock: None,
        high_water: HighWater::new(),
        source: "fresh",
        changelog: None,
    })
}

/// True when the committed offset carries no kafka-dedup metadata and the output can be asked
/// whether it is behind ([`behind_output`]).
fn untrusted(facts: &Facts) -> bool {
    facts.meta.is_none() && facts.provenance
}

/// What a loaded or rebuilt partition starts from, before the re-read of the output.
struct Loaded {
    /// Its generations (loaded, or empty at the metadata's output starts).
    gens: Generations,
    /// Where consumption resumes.
    resume: i64,
    /// The checkpoint id the state descends from.
    ckpt: String,
    /// The partition clock the checkpoint carried (snapshot or metadata), if any.
    clock: Option<i64>,
    /// The high-water marks the checkpoint carried (global scope, filter stage).
    high_water: HighWater,
    /// Where the generations came from (`store`, `changelog`, `output`).
    source: &'static str,
    /// The changelog checkpoint to carry into this owner's commits.
    changelog: Option<crate::changelog::ChangelogRef>,
    /// Seconds spent loading (store or changelog).
    load_seconds: f64,
}

/// Waits for the fence if the plan says so, then re-reads the output into `start`'s generations.
/// The newest timestamp among the re-read records moves the partition clock on (records
/// forwarded after the checkpoint by an owner that then crashed had moved it), and the current
/// generation, which re-learns them, takes the clock's bucket. `untrusted`: the committed offset
/// has no kafka-dedup metadata; if the output proves it behind ([`behind_output`]), the partition
/// resumes after the newest record the output holds from it.
fn finish(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    req: &RecoveryRequest,
    start: Loaded,
    reread: &Reread,
    untrusted: bool,
) -> Result<Recovered, RecoveryError> {
    let Loaded {
        mut gens,
        resume,
        ckpt,
        clock,
        mut high_water,
        source,
        changelog,
        load_seconds,
    } = start;
    check(&req.cancel)?;
    let t = Instant::now();
    if reread.wait_for_fence {
        wait_for_fence(env, req)?;
    }
    let fence_seconds = t.elapsed().as_secs_f64();
    let t = Instant::now();
    let out_parts = output_partitions(env, req.partition);
    let before = if untrusted {
        // An offset the input does not have (a recreated topic) proves nothing.
        let (_, high) = reader.fetch_watermarks(&env.cfg.input.topic, req.partition, REQUEST_TIMEOUT)?;
        provenance_before(env, reader, req.partition, &reread.from)?.filter(|b| *b < high)
    } else {
        None
    };
    let scanned = scan(env, reader, req, &out_parts, reread, &mut gens, (clock, Some(resume)))?;
    let committed = resume;
    info!(
        partition = req.partition,
        source,
        load_seconds,
        fence_seconds,
        reread_seconds = t.elapsed().as_secs_f64(),
        rescanned = scanned.records,
        fingerprints = gens.total_len(),
        "recovery steps"
    );
    let clock = horizon::recovered(clock, scanned.clock_ms);
    if let Some(c) = clock {
        gens.set_current_bucket(horizon::bucket_of(c, horizon::interval_ms(env.cfg.checkpoint.interval)));
    }
    let mut resume = resume;
    if behind_output(resume, before) {
        let newest = confirmed(env, reader, req.partition, &scanned)?;
        let proven = match resume_from_output(Some(resume), &newest, env.cfg.output.partitioning, env.cfg.input.start) {
            Resume::At(o) => o,
            Resume::Start(_) => resume,
        };
        let after = proven.max(before.map_or(resume, |b| b + 1));
        warn!(
            partition = req.partition,
            reason = "behind_output",
            committed = resume,
            resume = after,
            "the committed offset has no kafka-dedup metadata and is behind the output (it holds this partition's \
             records from offset {} before the horizon): reset by someone else; resuming after the newest record \
             the output holds from it",
            before.unwrap_or_default()
        );
        telemetry::position_from_output("behind_output");
        resume = after;
    }
    let resume = within_retention(env, reader, req.partition, resume)?;
    // The marks of what it does not take again: below the committed offset when it resumes there,
    // all the re-read found when it resumes later.
    let found = match scanned.high_water_below {
        Some(below) if resume == committed => below,
        _ => scanned.high_water,
    };
    merge_high_water(&mut high_water, &found);
    Ok(Recovered {
        gens,
        resume,
        out_positions: scanned.ends,
        ckpt,
        fresh: false,
        scanned: scanned.records,
        since: req.since,
        clock,
        high_water,
        source,
        changelog,
    })
}

/// [`Plan::FromOutput`]: re-learns the output over the horizon by record time into one
/// generation, then resumes where [`resume_from_output`] says, from the provenance found.
fn from_output(
    env: &RecoveryEnv,
    reader: &kafka::Reader,
    req: &RecoveryRequest,
    committed: Option<i64>,
    wait: bool,
    why: FromOutputReason,
) -> Result<Recovered, RecoveryError> {
    let (cfg, p) = (&env.cfg, req.partition);
    check(&req.cancel)?;
    if wait {
        wait_for_fence(env, req)?;
    }
    let out_parts = output_partitions(env, p);
    let from = horizon_start(env, reader, &out_parts, None)?;
    let first = Generation::new(1, committed.unwrap_or(0), from.clone(), 0);
    let mut gens = Generations::from_parts(vec![first], cfg.checkpoint.generations as usize);
    let reread = Reread {
        from,
        to: transaction_ends(env, &out_parts)?,
        wait_for_fence: false,
    };
    let scanned = scan(env, reader, req, &out_parts, &reread, &mut gens, (None, committed))?;
    let clock = horizon::recovered(None, scanned.clock_ms);
    if let Some(c) = clock {
        gens.set_current_bucket(horizon::bucket_of(c, horizon::interval_ms(cfg.checkpoint.interval)));
    }
    let newest = confirmed(env, reader, p, &scanned)?;
    let resume = match resume_from_output(committed, &newest, cfg.output.partitioning, cfg.input.start) {
        Resume::At(o) => within_retention(env, reader, p, o)?,
        Resume::Start(start) => start_offset(env, reader, p, start)?,
    };
    if newest.is_empty() {
        if committed.is_some() {
            announce(env, p, &Notice::NoMetadata, Resume::At(resume));
        }
    } else {
        warn!(
            partition = p,
            reason = why.label(),
            committed,
            resume,
            rescanned = scanned.records,
            "the position comes from the output topic: it holds this partition's records up to input offset {} \
             (kafka-dedup.source); resuming after them",
            resume - 1
        );
        telemetry::position_from_output(why.label());
    }
    Ok(Recovered {
        gens,
        resume,
        out_positions: scanned.ends,
        ckpt: new_checkpoint_id(),
        fresh: true,
        scanned: scanned.records,
        since: req.since,
        clock,
        // The marks of what it does not take again: below the committed offset when it resumes
        // there, all when it resumes after the output's records.
        high_water: match scanned.high_water_below {
            Some(below) if Some(resume) == committed => below,
            _ => scanned.high_water,
        },
        source: "output",
        changelog: None,
    })
}

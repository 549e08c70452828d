//! `kafka-dedup inspect` and the live `/store/*` routes: what the store knows about an event.
//!
//! Offline, the CLI opens the store directory (refusing one in use, with the HTTP address of the
//! process that holds it). While the filter runs, the same answers come from `GET /store/stats`
//! and `GET /store/lookup?fingerprint=HEX` (or `value=`, `key=`, URL-encoded), as JSON. Both read
//! the store as of the last checkpoint.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use clap::Subcommand;
use serde::Serialize;

use crate::config::Config;
use crate::fingerprint::{Fingerprint, Fingerprinter, OwnedRecord, Source};
use crate::generations::Positions;
use crate::http::HttpState;
use crate::store::{Store, StoreError, FORMAT_VERSION};

/// `inspect` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum InspectCommand {
    /// Format version, partitions, generations, committed positions, size on disk.
    Stats,
    /// Which partition and generation hold an event, and where it was first seen.
    Lookup {
        /// Record value (UTF-8 text).
        #[arg(long)]
        value: Option<String>,
        /// Record key (UTF-8 text).
        #[arg(long)]
        key: Option<String>,
        /// A header `NAME=VALUE`; repeat for several values.
        #[arg(long)]
        header: Vec<String>,
        /// Read the record value from this file (for example a JSON document).
        #[arg(long)]
        json_file: Option<PathBuf>,
        /// A fingerprint as 32 hex digits.
        #[arg(long)]
        fingerprint: Option<String>,
        /// Configuration whose `fingerprint.source` to use (default: the store's own).
        #[arg(long)]
        config: Option<PathBuf>,
    },
    /// Fingerprints of a partition as JSON lines, streamed one chunk at a time.
    Dump {
        /// Input partition.
        #[arg(long)]
        partition: i32,
        /// Only this generation epoch.
        #[arg(long)]
        generation: Option<u64>,
    },
    /// Check the store's internal consistency; exit 1 if anything is wrong.
    Verify,
}

/// Why inspection failed.
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

/// `stats` answer.
#[derive(Debug, Serialize)]
pub struct Stats {
    /// Store format version.
    pub format_version: u32,
    /// Deployment the store belongs to.
    pub identity: Option<crate::store::Identity>,
    /// Bytes on disk.
    pub size_on_disk_bytes: u64,
    /// Per input partition.
    pub partitions: Vec<PartitionStats>,
}

/// One partition in `stats`.
#[derive(Debug, Serialize)]
pub struct PartitionStats {
    /// Input partition.
    pub partition: i32,
    /// Epoch of the current generation.
    pub epoch: u64,
    /// Checkpoint id.
    pub checkpoint: String,
    /// Input offset committed with the snapshot.
    pub committed_offset: i64,
    /// Output positions covered by the snapshot.
    pub output_covered: Positions,
    /// When the snapshot was written (ms since the Unix epoch).
    pub written_at_ms: i64,
    /// Generations, oldest first.
    pub generations: Vec<GenerationStats>,
}

/// One generation in `stats`.
#[derive(Debug, Serialize)]
pub struct GenerationStats {
    /// Epoch.
    pub epoch: u64,
    /// Fingerprints held.
    pub fingerprints: u64,
    /// First input offset of the generation.
    pub input_start: i64,
    /// Output offsets where its records begin.
    pub output_start: Positions,
    /// Creation time (ms since the Unix epoch).
    pub created_at_ms: i64,
}

/// Where a fingerprint is held.
#[derive(Debug, Serialize, PartialEq, Eq)]
pub struct Holding {
    /// Input partition.
    pub partition: i32,
    /// Generation epoch.
    pub generation: u64,
    /// Age: 0 current, 1 previous, ...
    pub age: usize,
    /// Input offset where it was first seen; `None` when re-learned from the output topic.
    pub first_seen_offset: Option<i64>,
}

/// `lookup` answer.
#[derive(Debug, Serialize)]
pub struct Lookup {
    /// The fingerprint looked up.
    pub fingerprint: String,
    /// True when any generation holds it.
    pub held: bool,
    /// Where.
    pub holdings: Vec<Holding>,
}

/// Computes `stats`.
pub fn stats(store: &Store) -> Result<Stats, StoreError> {
    let mut partitions = Vec::new();
    for p in store.partitions()? {
        if let Some(s) = store.snapshot(p)? {
            partitions.push(PartitionStats {
                partition: p,
                epoch: s.epoch,
                checkpoint: s.ckpt.clone(),
                committed_offset: s.committed_offset,
                output_covered: s.out_covered.clone(),
                written_at_ms: s.written_at_ms,
                generations: s
                    .generations
                    .iter()
                    .map(|g| GenerationStats {
                        epoch: g.epoch,
                        fingerprints: g.count,
                        input_start: g.in_start,
                        output_start: g.out_start.clone(),
                        created_at_ms: g.created_at_ms,
                    })
                    .collect(),
            });
        }
    }
    Ok(Stats {
        format_version: store.format_version()?.unwrap_or(FORMAT_VERSION),
        identity: store.identity()?,
        size_on_disk_bytes: store.size_on_disk(),
        partitions,
    })
}

/// Finds every generation holding `fp`. Reads every chunk: linear in the store's size.
pub fn lookup(store: &Store, fp: Fingerprint) -> Result<Lookup, StoreError> {
    let key = if fp.0 == 0 { 1 } else { fp.0 };
    let mut holdings = Vec::new();
    for p in store.partitions()? {
        let Some(s) = store.snapshot(p)? else { continue };
        let n = s.generations.len();
        for (i, g) in s.generations.iter().enumerate() {
            let mut found = None;
            store.for_each_chunk(p, g, |entries| {
                if found.is_none() {
                    found = entries.iter().find(|(f, _)| *f == key).map(|(_, o)| *o);
                }
            })?;
            if let Some(rel) = found {
                holdings.push(Holding {
                    partition: p,
                    generation: g.epoch,
                    age: n - 1 - i,
                    first_seen_offset: (rel != crate::table::UNKNOWN_OFFSET).then(|| g.in_start + rel as i64),
                });
            }
        }
    }
    Ok(Lookup {
        fingerprint: fp.to_string(),
        held: !holdings.is_empty(),
        holdings,
    })
}

/// Problems found by `verify`; empty when consistent.
pub fn verify(store: &Store) -> Result<Vec<String>, StoreError> {
    let mut problems = Vec::new();
    for p in store.partitions()? {
        let s = match store.snapshot(p) {
            Ok(Some(s)) => s,
            Ok(None) => continue,
            Err(e) => {
                problems.push(e.to_string());
                continue;
            }
        };
        if s.generations.is_empty() {
            problems.push(format!("partition {p}: snapshot without generations"));
        }
        for w in s.generations.windows(2) {
            if w[1].epoch <= w[0].epoch {
                problems.push(format!(
                    "partition {p}: generation epochs not increasing ({} then {})",
                    w[0].epoch, w[1].epoch
                ));
            }
        }
        if s.generations.last().is_some_and(|g| g.epoch != s.epoch) {
            problems.push(format!(
                "partition {p}: snapshot epoch {} is not the current generation's",
                s.epoch
            ));
        }
        for g in &s.generations {
            if let Err(e) = store.for_each_chunk(p, g, |_| {}) {
                problems.push(e.to_string());
            }
        }
    }
    Ok(problems)
}

fn fingerprinter_for(store: &Store, config: Option<&Path>) -> Result<Fingerprinter, InspectError> {
    let source = match config {
        Some(path) => {
            Config::load(path)
                .map_err(|e| InspectError::Usage(e.to_string()))?
                .fingerprint
                .source
        }
        None => match store.identity()? {
            Some(id) => Source::try_from(id.source).map_err(InspectError::Usage)?,
            None => Source::Value,
        },
    };
    Ok(Fingerprinter::new(source))
}

fn record_from_args(
    value: Option<String>,
    key: Option<String>,
    header: &[String],
    json_file: Option<&Path>,
) -> Result<OwnedRecord, InspectError> {
    let mut r = OwnedRecord {
        key: key.map(String::into_bytes),
        value: value.map(String::into_bytes),
        headers: Vec::new(),
    };
    if let Some(path) = json_file {
        r.value = Some(std::fs::read(path)?);
    }
    for h in header {
        let (name, v) = h
            .split_once('=')
            .ok_or_else(|| InspectError::Usage(format!("--header {h}: expected NAME=VALUE")))?;
        r.headers.push((name.to_string(), Some(v.as_bytes().to_vec())));
    }
    Ok(r)
}

/// Runs an `inspect` subcommand against the store at `path`, printing to stdout.
pub fn run(path: &Path, json: bool, command: InspectCommand) -> Result<ExitCode, InspectError> {
    let store = Store::open_existing(path)?;
    let mut out = std::io::stdout().lock();
    match command {
        InspectCommand::Stats => {
            let s = stats(&store)?;
            if json {
                serde_json::to_writer_pretty(&mut out, &s).map_err(std::io::Error::from)?;
                writeln!(out)?;
            } else {
                print_stats(&mut out, &s)?;
            }
            Ok(ExitCode::SUCCESS)
        }
        InspectCommand::Lookup {
            value,
            key,
            header,
            json_file,
            fingerprint,
            config,
        } => {
            let fp = match fingerprint {
                Some(hex) => hex
                    .parse::<Fingerprint>()
                    .map_err(|e| InspectError::Usage(format!("--fingerprint: {e}")))?,
                None => {
                    if value.is_none() && key.is_none() && header.is_empty() && json_file.is_none() {
                        return Err(InspectError::Usage(
                            "give --value, --key, --header NAME=VALUE, --json-file or --fingerprint".into(),
                        ));
                    }
                    let record = record_from_args(value, key, &header, json_file.as_deref())?;
                    let f = fingerprinter_for(&store, config.as_deref())?;
                    f.fingerprint(&record).map_err(|e| {
                        InspectError::Usage(format!(
                            "no fingerprint for that record with source {}: {e}",
                            f.source()
                        ))
                    })?
                }
            };
            let l = lookup(&store, fp)?;
            if json {
                serde_json::to_writer_pretty(&mut out, &l).map_err(std::io::Error::from)?;
                writeln!(out)?;
            } else if !l.held {
                writeln!(out, "fingerprint {}: not held", l.fingerprint)?;
            } else {
                for h in &l.holdings {
                    writeln!(
                        out,
                        "fingerprint {}: held by partition {} generation {} (age {}), first seen at input offset {}",
                        l.fingerprint,
                        h.partition,
                        h.generation,
                        h.age,
                        h.first_seen_offset
                            .map_or("unknown (re-learned from the output topic)".to_string(), |o| o
                                .to_string())
                    )?;
                }
            }
            Ok(ExitCode::SUCCESS)
        }
        InspectCommand::Dump { partition, generation } => {
            let snap = store
                .snapshot(partition)?
                .ok_or_else(|| InspectError::Usage(format!("the store holds no partition {partition}")))?;
            let gens: Vec<_> = snap
                .generations
                .iter()
                .filter(|g| generation.is_none_or(|e| e == g.epoch))
                .collect();
            if gens.is_empty() {
                return Err(InspectError::Usage(format!(
                    "partition {partition} has no generation {}",
                    generation.unwrap_or_default()
                )));
            }
            let mut out = std::io::BufWriter::new(out);
            let mut io_err = None;
            for g in gens {
                store.for_each_chunk(partition, g, |entries| {
                    for (fp, rel) in entries {
                        if io_err.is_some() {
                            return;
                        }
                        let offset = if *rel == crate::table::UNKNOWN_OFFSET {
                            "null".to_string()
                        } else {
                            (g.in_start + *rel as i64).to_string()
                        };
                        if let Err(e) = writeln!(
                            out,
                            "{{\"partition\":{partition},\"generation\":{},\"fingerprint\":\"{:032x}\",\"first_seen_offset\":{offset}}}",
                            g.epoch, fp
                        ) {
                            io_err = Some(e);
                        }
                    }
                })?;
            }
            if let Some(e) = io_err {
                if e.kind() != std::io::ErrorKind::BrokenPipe {
                    return Err(e.into());
                }
            }
            out.flush().ok();
            Ok(ExitCode::SUCCESS)
        }
        InspectCommand::Verify => {
            let problems = verify(&store)?;
            if json {
                serde_json::to_writer_pretty(
                    &mut out,
                    &serde_json::json!({"ok": problems.is_empty(), "problems": problems}),
                )
                .map_err(std::io::Error::from)?;
                writeln!(out)?;
            } else if problems.is_empty() {
                writeln!(out, "store {}: consistent", path.display())?;
            } else {
                for p in &problems {
                    writeln!(out, "problem: {p}")?;
                }
            }
            Ok(if problems.is_empty() {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            })
        }
    }
}

fn print_stats(out: &mut impl Write, s: &Stats) -> std::io::Result<()> {
    writeln!(out, "format version  {}", s.format_version)?;
    if let Some(id) = &s.identity {
        writeln!(
            out,
            "deployment      group {} : {} -> {} (source {})",
            id.group_id, id.input_topic, id.output_topic, id.source
        )?;
    }
    writeln!(out, "size on disk    {} bytes", s.size_on_disk_bytes)?;
    writeln!(out, "partitions      {}", s.partitions.len())?;
    for p in &s.partitions {
        writeln!(
            out,
            "partition {}: committed offset {}, epoch {}, checkpoint {}, output covered {:?}",
            p.partition, p.committed_offset, p.epoch, p.checkpoint, p.output_covered
        )?;
        for g in &p.generations {
            writeln!(
                out,
                "  generation {}: {} fingerprints, input from offset {}, output from {:?}, created at {} ms",
                g.epoch, g.fingerprints, g.input_start, g.output_start, g.created_at_ms
            )?;
        }
    }
    Ok(())
}

/// Query of `GET /store/lookup`.
#[derive(Debug, serde::Deserialize)]
pub struct LookupQuery {
    /// 32 hex digits.
    pub fingerprint: Option<String>,
    /// Record value (text).
    pub value: Option<String>,
    /// Record key (text).
    pub key: Option<String>,
}

/// Routes under `/store/` served while the filter runs.
pub fn http_routes() -> Router<HttpState> {
    Router::new()
        .route("/store/stats", get(http_stats))
        .route("/store/lookup", get(http_lookup))
}

fn unavailable() -> (StatusCode, Json<serde_json::Value>) {
    (
        StatusCode::SERVICE_UNAVAILABLE,
        Json(serde_json::json!({"error": "the store is not open yet"})),
    )
}

async fn http_stats(State(s): State<HttpState>) -> impl IntoResponse {
    let Some(store) = s.status.store() else {
        return unavailable();
    };
    match tokio::task::spawn_blocking(move || stats(&store)).await {
        Ok(Ok(st)) => (StatusCode::OK, Json(serde_json::to_value(st).unwrap_or_default())),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(serde_json::json!({"error": e.to_string()})),
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(serde_json::json!({"error": e.to_string()})),
        ),
    }
}

async fn http_lookup(State(s): State<HttpState>, Query(q): Query<LookupQuery>) -> impl IntoResponse {
    let Some(store) = s.status.store() else {
        return unavailable();
    };
    let bad = |m: String| (StatusCode::BAD_REQUEST, Json(serde_json::json!({"error": m})));
    let fp = match (&q.fingerprint, &q.value, &q.key) {
        (Some(hex), _, _) => match hex.parse::<Fingerprint>() {
            Ok(f) => f,
            Err(e) => return bad(format!("fingerprint: {e}")),
        },
        (None, None, None) => return bad("give fingerprint=HEX, value=TEXT or key=TEXT".into()),
        (None, value, key) => {
            let f = match fingerprinter_for(&store, None) {
                Ok(f) => f,
                Err(e) => return bad(e.to_string()),
            };
            let record = OwnedRecord {
                key: key.clone().map(String::into_bytes),
                value: value.clone().map(String::into_bytes),
                headers: Vec::new(),
            };
            match f.fingerprint(&record) {
                Ok(fp) => fp,
                Err(e) => return bad(format!("no fingerprint with source {}: {e}", f.source())),
            }
        }
    };
    match tokio::task::spawn_blocking(move || lookup(&store, fp)).await {
        Ok(Ok(l)) => (StatusCode::OK, Json(serde_json::to_value(l).unwrap_or_default())),
        Ok(Err(e)) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(serde_json::json!({"error": e.to_string()})),
        ),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            Json(serde_json::json!({"error": e.to_string()})),
        ),
    }
}

/// Per-partition fingerprint counts, for tests and the HTTP stats.
pub fn counts(s: &Stats) -> BTreeMap<i32, u64> {
    s.partitions
        .iter()
        .map(|p| (p.partition, p.generations.iter().map(|g| g.fingerprints).sum()))
        .collect()
}

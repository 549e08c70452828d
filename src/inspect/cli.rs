//! The `kafka-dedup inspect` command line: arguments, running a subcommand, printing answers.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::Subcommand;
use serde::Serialize;

use super::offline::{dump, lookup, stats, Scan};
use super::query::LookupInput;
use super::report::{Lookup, Stats};
use super::verify::verify;
use super::InspectError;
use crate::config::Config;
use crate::fingerprint::{Fingerprinter, Source};
use crate::generations::Positions;
use crate::store::{Store, StoreError};

/// `inspect` subcommands.
#[derive(Debug, Clone, Subcommand)]
pub enum InspectCommand {
    /// Format version, partitions, generations, committed positions, size on disk.
    Stats,
    /// Which partition and generation hold an event, and where it was first seen.
    ///
    /// The record given by --value, --key, --header and --json-file is fingerprinted with the
    /// store's fingerprint source (or the one of --config); parts not given are null.
    Lookup {
        /// Record value (UTF-8 text).
        #[arg(long, conflicts_with = "json_file")]
        value: Option<String>,
        /// Record key (UTF-8 text).
        #[arg(long)]
        key: Option<String>,
        /// A header `NAME=VALUE`; repeat for several headers or several values of one header.
        #[arg(long, value_name = "NAME=VALUE")]
        header: Vec<String>,
        /// Read the record value from this file (for example a JSON document), byte for byte.
        #[arg(long, value_name = "FILE")]
        json_file: Option<PathBuf>,
        /// A field of the identity `NAME=VALUE` (the first member of a pointer of the source,
        /// e.g. `event_id=e-1` for `json:/event_id`); repeat for each. They make a JSON document,
        /// the record's value unless --value is given (VALUE read as JSON when it is JSON, as a
        /// string otherwise).
        #[arg(long, value_name = "NAME=VALUE")]
        field: Vec<String>,
        /// A fingerprint as 32 hex digits (as printed by `dump`).
        #[arg(long, value_name = "HEX", conflicts_with_all = ["value", "key", "header", "json_file", "field", "config"])]
        fingerprint: Option<String>,
        /// Configuration whose `fingerprint.source` to use (default: the source the store was
        /// written with). Refused when it differs from the store's.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
    /// Fingerprints of a partition as JSON lines, streamed one chunk at a time.
    Dump {
        /// Input partition.
        #[arg(long)]
        partition: i32,
        /// Only this generation epoch.
        #[arg(long, value_name = "EPOCH")]
        generation: Option<u64>,
    },
    /// Check the store's internal consistency; exit 1 if anything is wrong.
    Verify,
}

/// The fingerprint source for an offline lookup: the store's (its identity), or `--config`'s,
/// which must then be the same.
fn fingerprinter_for(store: &Store, config: Option<&Path>) -> Result<Fingerprinter, InspectError> {
    let stored = match store.identity()? {
        Some(id) => Some(Source::try_from(id.source).map_err(|e| {
            InspectError::Store(StoreError::Corrupt {
                path: store.path().to_path_buf(),
                reason: format!("identity: {e}"),
            })
        })?),
        None => None,
    };
    let source = match config {
        Some(path) => {
            let configured = Config::load(path)
                .map_err(|e| InspectError::Usage(format!("--config {}: {e}", path.display())))?
                .fingerprint
                .identity();
            if let Some(s) = stored.as_ref().filter(|s| **s != configured) {
                return Err(InspectError::Usage(format!(
                    "--config {} fingerprints with source {configured}, but the store was written with source {s}: \
                     a lookup with {configured} cannot match; leave out --config to use the store's",
                    path.display()
                )));
            }
            configured
        }
        None => stored.unwrap_or(Source::Value),
    };
    Ok(Fingerprinter::new(source))
}

fn to_json(out: &mut impl Write, v: &impl Serialize) -> std::io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v).map_err(std::io::Error::from)?;
    writeln!(out)
}

/// Runs an `inspect` subcommand against the store at `path`, printing to stdout (text, or JSON
/// with `json`). Returns exit code 1 when `verify` finds problems. Errors: see [`InspectError`].
pub fn run(path: &Path, json: bool, command: InspectCommand) -> Result<ExitCode, InspectError> {
    // Arguments first, so a usage error never opens the store.
    let lookup_input = match &command {
        InspectCommand::Lookup {
            value,
            key,
            header,
            json_file,
            fingerprint,
            field,
            ..
        } => Some(LookupInput::from_args(
            fingerprint.as_deref(),
            value.clone(),
            key.clone(),
            header,
            json_file.as_deref(),
            field,
        )?),
        _ => None,
    };
    let store = Store::open_existing(path)?;
    let mut out = std::io::stdout().lock();
    match command {
        InspectCommand::Stats => {
            let s = stats(&store)?;
            if json {
                to_json(&mut out, &s)?;
            } else {
                print_stats(&mut out, path, &s)?;
            }
        }
        InspectCommand::Lookup { config, .. } => {
            let input = lookup_input.expect("parsed above");
            run_lookup(store, &input, config.as_deref(), json, &mut out)?;
        }
        InspectCommand::Dump { partition, generation } => {
            let mut out = std::io::BufWriter::new(out);
            dump(&mut Scan::new(store), partition, generation, &mut out)?;
        }
        InspectCommand::Verify => return run_verify(store, path, json, &mut out),
    }
    Ok(ExitCode::SUCCESS)
}

/// `lookup`: fingerprints `input` with the store's (or `config`'s) source and prints where it is
/// held.
fn run_lookup(
    store: Store,
    input: &LookupInput,
    config: Option<&Path>,
    json: bool,
    out: &mut impl Write,
) -> Result<(), InspectError> {
    let f = fingerprinter_for(&store, config)?;
    let fp = input.fingerprint(&f).map_err(|e| InspectError::Usage(e.to_string()))?;
    let l = lookup(&mut Scan::new(store), fp)?;
    if json {
        to_json(out, &l)?;
    } else {
        print_lookup(out, &l)?;
    }
    Ok(())
}

/// `verify`: prints the problems found; exit code 1 when there are any.
fn run_verify(store: Store, path: &Path, json: bool, out: &mut impl Write) -> Result<ExitCode, InspectError> {
    let problems = verify(&mut Scan::new(store))?;
    if json {
        to_json(
            out,
            &serde_json::json!({"ok": problems.is_empty(), "problems": problems}),
        )?;
    } else if problems.is_empty() {
        writeln!(out, "store {}: consistent", path.display())?;
    } else {
        for p in &problems {
            writeln!(out, "problem: {p}")?;
        }
        writeln!(out, "store {}: {} problem(s)", path.display(), problems.len())?;
    }
    Ok(if problems.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn time(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

fn positions(p: &Positions) -> String {
    if p.is_empty() {
        return "-".into();
    }
    p.iter().map(|(q, o)| format!("{q}:{o}")).collect::<Vec<_>>().join(", ")
}

fn print_stats(out: &mut impl Write, path: &Path, s: &Stats) -> std::io::Result<()> {
    writeln!(
        out,
        "store {}: format version {}, {} bytes on disk",
        path.display(),
        s.format_version,
        s.size_on_disk_bytes
    )?;
    match &s.identity {
        Some(id) => writeln!(
            out,
            "deployment: group {}, {} -> {}, fingerprint source {}",
            id.group_id, id.input_topic, id.output_topic, id.source
        )?,
        None => writeln!(out, "deployment: none recorded (never written)")?,
    }
    writeln!(out, "partitions: {}", s.partitions.len())?;
    for p in &s.partitions {
        writeln!(
            out,
            "partition {}: committed input offset {}, {} fingerprints, checkpoint {} written {}{}",
            p.partition,
            p.committed_offset,
            p.fingerprints,
            p.checkpoint,
            time(p.written_at_ms),
            if p.clean { " (clean hand-over)" } else { "" }
        )?;
        let n = p.generations.len();
        for (i, g) in p.generations.iter().enumerate() {
            writeln!(
                out,
                "  generation {}{}: {} fingerprints, input offsets [{}, {}), output from {}, created {}",
                g.epoch,
                if i + 1 == n { " (current)" } else { "" },
                g.fingerprints,
                g.input_start,
                g.input_end,
                positions(&g.output_start),
                time(g.created_at_ms)
            )?;
        }
        if !p.clean {
            writeln!(
                out,
                "  not in the store: records forwarded at or after output {} (re-learned from the output topic at the next start)",
                positions(&p.output_covered)
            )?;
        }
    }
    Ok(())
}

fn print_lookup(out: &mut impl Write, l: &Lookup) -> std::io::Result<()> {
    if !l.held {
        writeln!(out, "fingerprint {}: not held", l.fingerprint)?;
    }
    for h in &l.holdings {
        writeln!(
            out,
            "fingerprint {}: held by partition {} generation {} ({}), first seen at input offset {}",
            l.fingerprint,
            h.partition,
            h.generation,
            match h.age {
                0 => "the current generation".to_string(),
                1 => "the previous generation".to_string(),
                a => format!("{a} generations old"),
            },
            h.first_seen_offset.map_or(
                "unknown (re-learned from an output record without provenance)".to_string(),
                |o| o.to_string()
            )
        )?;
    }
    for i in &l.incomplete {
        writeln!(out, "note: partition {}: {}", i.partition, i.reason)?;
    }
    Ok(())
}

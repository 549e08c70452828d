//! The `kafka-dedup audit` command line: arguments, resolving them, printing the report.

use std::path::PathBuf;
use std::process::ExitCode;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::read::{audit, Request};
use super::{AuditError, UsageError};
use crate::config::Config;

/// `kafka-dedup audit` arguments. Offset and time bounds combine: a record is judged when it is
/// within all that are given.
#[derive(Debug, Clone, clap::Args)]
pub struct AuditArgs {
    /// TOML configuration file of the filter: topics, fingerprint source, horizon, brokers.
    #[arg(long, short)]
    pub config: PathBuf,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Judge input records from this input offset on (in each partition).
    #[arg(long, value_name = "OFFSET", value_parser = clap::value_parser!(i64).range(0..))]
    pub from_offset: Option<i64>,
    /// Judge input records before this input offset (in each partition). Default: the offset the
    /// consumer group `input.group_id` committed (what the filter checkpointed), else the end.
    #[arg(long, value_name = "OFFSET", value_parser = clap::value_parser!(i64).range(0..))]
    pub to_offset: Option<i64>,
    /// Judge input records from this time on (input partition clock): RFC 3339
    /// (2026-11-30T12:00:00Z) or a duration ago (2h, 30m).
    #[arg(long, value_name = "TIME")]
    pub since: Option<TimeArg>,
    /// Judge input records before this time (input partition clock): RFC 3339 or a duration ago.
    #[arg(long, value_name = "TIME")]
    pub until: Option<TimeArg>,
    /// Audit only this input partition; repeat for several. Default: every partition.
    #[arg(long = "partition", value_name = "N")]
    pub partitions: Vec<i32>,
}

/// A point in time on the command line: RFC 3339, or a duration before now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeArg {
    /// `2026-11-30T12:00:00Z` (a time without zone is UTC).
    At(SystemTime),
    /// `2h`: that long before the audit starts.
    Ago(Duration),
}

/// Text that is neither an RFC 3339 time nor a duration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("\"{0}\" is neither an RFC 3339 time (2026-11-30T12:00:00Z) nor a duration ago (2h, 30m)")]
pub struct TimeArgError(String);

impl FromStr for TimeArg {
    type Err = TimeArgError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if let Ok(t) = humantime::parse_rfc3339_weak(s) {
            return Ok(TimeArg::At(t));
        }
        humantime::parse_duration(s)
            .map(TimeArg::Ago)
            .map_err(|_| TimeArgError(s.to_string()))
    }
}

impl TimeArg {
    /// Milliseconds since the Unix epoch, with `now_ms` the wall clock.
    pub fn millis(self, now_ms: i64) -> i64 {
        match self {
            TimeArg::At(t) => t
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis().min(i64::MAX as u128) as i64),
            TimeArg::Ago(d) => now_ms.saturating_sub(d.as_millis().min(i64::MAX as u128) as i64),
        }
    }
}

impl AuditArgs {
    /// The request these arguments make at wall-clock time `now_ms`. Errors: an empty range.
    pub fn request(&self, now_ms: i64) -> Result<Request, UsageError> {
        let since_ms = self.since.map(|t| t.millis(now_ms));
        let until_ms = self.until.map(|t| t.millis(now_ms));
        if let (Some(from), Some(to)) = (self.from_offset, self.to_offset) {
            if from >= to {
                return Err(UsageError::EmptyOffsets { from, to });
            }
        }
        if let (Some(since), Some(until)) = (since_ms, until_ms) {
            if since >= until {
                return Err(UsageError::EmptyTimes { since, until });
            }
        }
        Ok(Request {
            from_offset: self.from_offset,
            to_offset: self.to_offset,
            since_ms,
            until_ms,
            partitions: self.partitions.clone(),
            now_ms,
        })
    }
}

/// Runs the audit `args` ask for on `cfg`'s topics and prints the report on stdout (text, or
/// JSON with `--json`). Returns exit code 0 when clean, 1 when anything was found.
pub fn run(cfg: &Config, args: &AuditArgs) -> Result<ExitCode, AuditError> {
    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let request = args.request(now_ms)?;
    let report = audit(cfg, &request)?;
    let mut out = std::io::stdout().lock();
    if args.json {
        report.write_json(&mut out)?;
    } else {
        report.write_text(&mut out)?;
    }
    Ok(if report.clean {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: AuditArgs,
    }

    fn parse(args: &[&str]) -> Result<AuditArgs, clap::Error> {
        Cli::try_parse_from(std::iter::once("audit").chain(args.iter().copied())).map(|c| c.args)
    }

    #[test]
    fn times_are_rfc3339_or_a_duration_ago() {
        let now = 1_800_000_000_000;
        let rows = [
            ("2026-11-30T12:00:00Z", 1_796_040_000_000),
            ("2026-11-30T12:00:00.250Z", 1_796_040_000_250),
            ("2026-11-30 12:00:00", 1_796_040_000_000),
            ("2h", now - 7_200_000),
            ("90s", now - 90_000),
            ("1day 30m", now - 88_200_000),
        ];
        for (text, ms) in rows {
            assert_eq!(text.parse::<TimeArg>().map(|t| t.millis(now)), Ok(ms), "{text}");
        }
        for bad in ["yesterday", "", "2026-13-01T00:00:00Z", "-2h"] {
            assert!(bad.parse::<TimeArg>().is_err(), "{bad}");
        }
    }

    #[test]
    fn arguments_and_their_refusals() {
        let a = parse(&[
            "--config",
            "c.toml",
            "--from-offset",
            "10",
            "--to-offset",
            "20",
            "--since",
            "2h",
            "--partition",
            "2",
            "--partition",
            "0",
            "--json",
        ])
        .unwrap();
        let r = a.request(10_000_000).unwrap();
        assert_eq!(
            r,
            Request {
                from_offset: Some(10),
                to_offset: Some(20),
                since_ms: Some(10_000_000 - 7_200_000),
                until_ms: None,
                partitions: vec![2, 0],
                now_ms: 10_000_000,
            }
        );
        assert!(a.json);
        assert!(parse(&["--config", "c.toml", "--from-offset", "-1"]).is_err());
        assert!(parse(&["--config", "c.toml", "--since", "soon"]).is_err());
        assert!(parse(&["--from-offset", "1"]).is_err(), "--config is required");
        let empty = parse(&["--config", "c", "--from-offset", "5", "--to-offset", "5"]).unwrap();
        assert_eq!(empty.request(0), Err(UsageError::EmptyOffsets { from: 5, to: 5 }));
        let empty = parse(&["--config", "c", "--since", "1h", "--until", "2h"]).unwrap();
        assert!(matches!(empty.request(10_000_000), Err(UsageError::EmptyTimes { .. })));
    }
}

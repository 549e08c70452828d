//! The `kafka-dedup` binary: parses the command line and calls the library. Exit codes:
//! 0 success, 2 configuration or usage error, 1 runtime failure (docs/ARCHITECTURE.md).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use kafka_dedup::audit::{self, AuditArgs};
use kafka_dedup::config::Config;
use kafka_dedup::demo::{run_demo, DemoOptions};
use kafka_dedup::inspect::{self, InspectCommand};
use kafka_dedup::migrate::{self, MigrateError};
use kafka_dedup::pipeline::RunError;
use kafka_dedup::service::{self, ServiceError};
use kafka_dedup::store::StoreError;
use rdkafka::error::KafkaError;

#[derive(Parser)]
#[command(
    name = "kafka-dedup",
    version,
    about = "Makes an at-least-once Kafka topic effectively-once: drops replayed records"
)]
struct Cli {
    /// The subcommand to run.
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the filter (SIGTERM/SIGINT: finish the checkpoint, exit 0).
    Run {
        /// TOML configuration file; keys overridable by KAFKA_DEDUP__SECTION__KEY.
        #[arg(long, short)]
        config: PathBuf,
    },
    /// Play the replay scenario through the real pipeline on an in-process mock cluster.
    Demo {
        /// Distinct integers to write.
        #[arg(long, default_value_t = 10_000)]
        records: u64,
        /// Partitions of the input and output topics.
        #[arg(long, default_value_t = 3)]
        partitions: i32,
        /// Mean records between two upstream crashes.
        #[arg(long, default_value_t = 300)]
        crash_every: u64,
        /// Seed of the scenario.
        #[arg(long, default_value_t = 42)]
        seed: u64,
    },
    /// Inspect a fingerprint store offline (while `run` holds it, ask its HTTP /store/ routes).
    Inspect {
        /// Store directory (store.path).
        #[arg(long)]
        store: PathBuf,
        /// Print JSON instead of text.
        #[arg(long, global = true)]
        json: bool,
        #[command(subcommand)]
        command: InspectCommand,
    },
    /// Upgrade a store written by an older version (see migrations/).
    Migrate {
        /// Store directory (store.path).
        #[arg(long)]
        store: PathBuf,
    },
    /// Did it work? Reads the input and output topics and reports, per partition, duplicates,
    /// lost records and records out of order (exit 1 when there are any).
    Audit(AuditArgs),
    /// Validate a configuration and print the effective settings (secrets redacted).
    CheckConfig {
        /// TOML configuration file.
        #[arg(long, short)]
        config: PathBuf,
        /// Also reach the brokers: the topics exist, their partition counts fit, the principal
        /// may read and write them, the group's committed offsets can be fetched (exit 1 naming
        /// each problem).
        #[arg(long)]
        connect: bool,
    },
}

fn init_logs(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// Loads and checks the configuration at `path`, the client settings included (librdkafka
/// creates the clients without connecting: [`kafka_dedup::kafka::check_clients`]).
fn load(path: &Path) -> Result<Config, ExitCode> {
    Config::load(path)
        .and_then(|c| kafka_dedup::kafka::check_clients(&c).map(|()| c))
        .map_err(|e| {
            eprintln!("kafka-dedup: configuration error: {e}");
            ExitCode::from(2)
        })
}

fn store_exit(e: &StoreError) -> ExitCode {
    match e {
        StoreError::NotAStore { .. }
        | StoreError::NewerFormat { .. }
        | StoreError::OlderFormat { .. }
        | StoreError::InUse { .. }
        | StoreError::NotWritable { .. } => ExitCode::from(2),
        _ => ExitCode::from(1),
    }
}

fn main() -> ExitCode {
    kafka_dedup::crash::say_fatal_signals();
    let command = Cli::parse().command;
    if !matches!(command, Command::Run { .. }) {
        // A report piped into `head` ends quietly when the reader leaves, as a Unix tool does:
        // Rust ignores SIGPIPE, and `println!` then panics on the broken pipe. `run` keeps it
        // ignored (its sockets report EPIPE as an error instead).
        // SAFETY: signal(2) with SIG_DFL, before any thread is started.
        unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
    }
    match command {
        Command::CheckConfig { config, connect } => check_config(&config, connect),
        Command::Run { config } => run(&config),
        Command::Demo {
            records,
            partitions,
            crash_every,
            seed,
        } => demo(records, partitions, crash_every, seed),
        Command::Inspect { store, json, command } => {
            init_logs("warn");
            match inspect::run(&store, json, command) {
                Ok(code) => code,
                Err(e) => {
                    eprintln!("kafka-dedup inspect: {e}");
                    match &e {
                        inspect::InspectError::Store(s) => store_exit(s),
                        inspect::InspectError::Usage(_) => ExitCode::from(2),
                        _ => ExitCode::from(1),
                    }
                }
            }
        }
        Command::Migrate { store } => migrate(&store),
        Command::Audit(args) => audit(&args),
    }
}

/// `audit`: 0 when clean, 1 when anything was found or reading failed, 2 for configuration.
fn audit(args: &AuditArgs) -> ExitCode {
    init_logs("warn");
    let cfg = match load(&args.config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match audit::run(&cfg, args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("kafka-dedup audit: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `check-config`: the horizon in plain words and the effective configuration, secrets
/// redacted, after its warnings; with `connect`, then what the brokers say
/// ([`kafka_dedup::connect`]): exit 1 with each problem.
fn check_config(config: &Path, connect: bool) -> ExitCode {
    let cfg = match load(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let config_warnings = cfg.kafka.warnings();
    for w in &config_warnings {
        eprintln!("kafka-dedup: warning: {w}");
    }
    // A comment, so that the output stays a valid configuration file.
    println!("# horizon: {}", cfg.checkpoint.horizon_in_words());
    print!("{}", cfg.to_redacted_toml());
    if !connect {
        return ExitCode::SUCCESS;
    }
    let report = kafka_dedup::connect::check(&cfg);
    for p in &report.passed {
        eprintln!("kafka-dedup: ok: {p}");
    }
    for w in &report.warnings {
        eprintln!("kafka-dedup: warning: {w}");
    }
    for p in &report.problems {
        eprintln!("kafka-dedup: problem: {p}");
    }
    if report.problems.is_empty() {
        eprintln!(
            "kafka-dedup: no problem found ({} checks passed, {} warning(s))",
            report.passed.len(),
            config_warnings.len() + report.warnings.len()
        );
        ExitCode::SUCCESS
    } else {
        eprintln!("kafka-dedup: {} problem(s) found", report.problems.len());
        ExitCode::from(1)
    }
}

/// `run`: the service until a signal (0) or an error (1, or 2 for what configuration fixes).
fn run(config: &Path) -> ExitCode {
    init_logs("info");
    let cfg = match load(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    match service::run(cfg) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("kafka-dedup: {e}");
            match &e {
                ServiceError::Run(RunError::Topics(_) | RunError::SchemaRegistry(_)) => ExitCode::from(2),
                // librdkafka refused the client settings (an invalid certificate, ...).
                ServiceError::Run(RunError::Kafka(KafkaError::ClientCreation(_) | KafkaError::ClientConfig(..))) => {
                    ExitCode::from(2)
                }
                ServiceError::Run(RunError::Store(s)) => store_exit(s),
                ServiceError::Listen { .. } => ExitCode::from(2),
                _ => ExitCode::from(1),
            }
        }
    }
}

/// `demo`: the replay scenario on the mock cluster; 0 when every integer arrived once.
fn demo(records: u64, partitions: i32, crash_every: u64, seed: u64) -> ExitCode {
    init_logs("warn");
    if partitions < 1 || records == 0 {
        eprintln!("kafka-dedup: demo needs --records > 0 and --partitions > 0");
        return ExitCode::from(2);
    }
    let opts = DemoOptions {
        records,
        partitions,
        crash_every,
        seed,
        duration: Duration::from_millis((records / 2).clamp(1000, 20_000)),
        ..DemoOptions::default()
    };
    println!(
        "kafka-dedup demo: {records} integers over {partitions} partitions on an in-process mock cluster; \
         the upstream job crashes about every {crash_every} records and replays since its last checkpoint"
    );
    match run_demo(&opts) {
        Ok(report) => {
            println!("{report}");
            if report.verdict.ok() && report.forwarded == report.verdict.distinct {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("kafka-dedup demo: {e}");
            ExitCode::from(1)
        }
    }
}

/// `migrate`: upgrades the store at `store`.
fn migrate(store: &Path) -> ExitCode {
    init_logs("info");
    match migrate::migrate(store) {
        Ok(report) => {
            println!("{report}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("kafka-dedup migrate: {e}");
            match &e {
                MigrateError::Store(s) => store_exit(s),
                MigrateError::NoPath { .. } => ExitCode::from(2),
                MigrateError::Step { .. } => ExitCode::from(1),
            }
        }
    }
}

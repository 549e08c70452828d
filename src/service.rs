//! `kafka-dedup run`: the HTTP server and signal handling around the pipeline thread (two in the
//! global scope: the route stage and the filter stage, [`crate::global`]).
//!
//! Shutdown is a value ([`Shutdown`]): SIGTERM or SIGINT triggers it, the pipeline thread sees it
//! between two polls, hands over every partition (deliveries awaited, store written, offsets
//! committed) and returns; then the HTTP server stops and `run` returns.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tracing::{info, warn};

use crate::config::Config;
use crate::global::run_route;
use crate::http::{self, HttpState};
use crate::pipeline::{run_filter, RunError, Shutdown};
use crate::status::Status;
use crate::telemetry;

static RECORDER: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

/// Installs the Prometheus recorder once per process and returns its handle (`None` if another
/// recorder was installed first).
pub fn prometheus() -> Option<PrometheusHandle> {
    RECORDER
        .get_or_init(|| {
            let seconds = [
                0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
            ];
            let distance = [1.0, 10.0, 100.0, 1e3, 1e4, 1e5, 1e6, 1e7];
            let handle = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &seconds)
                .and_then(|b| b.set_buckets_for_metric(Matcher::Full(telemetry::DUPLICATE_DISTANCE.into()), &distance))
                .ok()?
                .install_recorder()
                .ok()?;
            telemetry::describe();
            Some(handle)
        })
        .clone()
}

/// Why `run` failed to start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The pipeline failed.
    #[error(transparent)]
    Run(#[from] RunError),
    /// The HTTP address cannot be bound.
    #[error("http.listen {addr}: {source}")]
    Listen { addr: String, source: std::io::Error },
    /// The async runtime could not start.
    #[error("{0}")]
    Runtime(std::io::Error),
    /// The pipeline thread panicked or was cancelled.
    #[error("pipeline thread: {0}")]
    PipelineThread(tokio::task::JoinError),
}

/// Runs the service until SIGTERM/SIGINT (returns `Ok` after a clean hand-over) or a fatal error.
pub fn run(cfg: Config) -> Result<(), ServiceError> {
    let cfg = Arc::new(cfg);
    info!(config = %cfg.to_redacted_toml().replace('\n', " "), version = env!("CARGO_PKG_VERSION"), "starting kafka-dedup");
    let interval_ms = crate::horizon::interval_ms(cfg.checkpoint.interval);
    let (h_min_ms, h_max_ms) = crate::horizon::bounds_ms(interval_ms, cfg.checkpoint.generations);
    info!(h_min_ms, h_max_ms, "horizon: {}", cfg.checkpoint.horizon_in_words());
    for w in cfg.kafka.warnings() {
        warn!("{w}");
    }
    let prometheus = prometheus();
    let status = Status::new();
    let shutdown = Shutdown::new();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .map_err(ServiceError::Runtime)?;
    runtime.block_on(async move {
        let (http_stop_tx, http_stop_rx) = tokio::sync::oneshot::channel::<()>();
        let http_task = start_http(&cfg, &status, prometheus, async move {
            let _ = http_stop_rx.await;
        })
        .await?;
        {
            // Topics deleted or created again while running: /readyz names them (issue 23).
            let (cfg, status, shutdown) = (cfg.clone(), status.clone(), shutdown.clone());
            std::thread::spawn(move || {
                if let Err(e) = crate::topics::watch(cfg, status, shutdown) {
                    warn!(error = %e, "topics are not watched for deletion");
                }
            });
        }
        let signal_shutdown = shutdown.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            info!("signal received: finishing the checkpoint and stopping");
            signal_shutdown.trigger();
        });
        let result = match cfg.filter_stage() {
            None => {
                let (cfg, shutdown, status) = (cfg.clone(), shutdown.clone(), status.clone());
                let pipeline = tokio::task::spawn_blocking(move || run_filter(cfg, shutdown, status));
                pipeline.await.map_err(ServiceError::PipelineThread)?
            }
            Some(filter_cfg) => run_global(&cfg, Arc::new(filter_cfg), &shutdown, &status).await?,
        };
        if result.is_ok() {
            // The last line of a clean stop (exit 0), with the run's totals; an error is
            // printed by the caller.
            let t = status.totals.progress();
            info!(
                consumed = t.consumed,
                forwarded = t.forwarded,
                replays_dropped = t.replays_dropped,
                unfingerprintable = t.unfingerprintable,
                retaken = t.retaken,
                "kafka-dedup stopped"
            );
        }
        let _ = http_stop_tx.send(());
        if let Some(t) = http_task {
            if let Ok(Err(e)) = t.await {
                warn!(error = %e, "http server error");
            }
        }
        result.map_err(ServiceError::from)
    })
}

/// The global scope: the route stage and the filter stage, each on its own thread. A stage that
/// stops on an error or panics stops the other (a clean hand-over); the route stage's error is
/// returned first, then the filter stage's (a panic as [`ServiceError::PipelineThread`]).
async fn run_global(
    cfg: &Arc<Config>,
    filter_cfg: Arc<Config>,
    shutdown: &Shutdown,
    status: &Arc<Status>,
) -> Result<Result<(), RunError>, ServiceError> {
    let stage = |f: fn(Arc<Config>, Shutdown, Arc<Status>) -> Result<(), RunError>, cfg: Arc<Config>| {
        let (shutdown, status) = (shutdown.clone(), status.clone());
        tokio::task::spawn_blocking(move || {
            // A stage that ends other than cleanly (an error, or a panic) stops the other, which
            // would otherwise run on alone, its partner's failure never reported.
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(cfg, shutdown.clone(), status)));
            if !matches!(result, Ok(Ok(()))) {
                shutdown.trigger();
            }
            result.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        })
    };
    let route = stage(run_route, cfg.clone());
    let filter = stage(run_filter, filter_cfg);
    let routed = route.await;
    let filtered = filter.await;
    let routed = routed.map_err(ServiceError::PipelineThread)?;
    let filtered = filtered.map_err(ServiceError::PipelineThread)?;
    Ok(routed.and(filtered))
}

/// Binds `http.listen` and serves until `stop` resolves, with the recorder's upkeep every 5 s.
/// `None` when `http.listen` is empty. Errors: the address cannot be bound.
async fn start_http(
    cfg: &Config,
    status: &Arc<Status>,
    prometheus: Option<PrometheusHandle>,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Option<tokio::task::JoinHandle<std::io::Result<()>>>, ServiceError> {
    if cfg.http.listen.is_empty() {
        return Ok(None);
    }
    let listener = tokio::net::TcpListener::bind(&cfg.http.listen)
        .await
        .map_err(|source| ServiceError::Listen {
            addr: cfg.http.listen.clone(),
            source,
        })?;
    info!(listen = %cfg.http.listen, "http endpoint: /metrics /healthz /readyz /store/stats /store/lookup");
    if let Some(h) = prometheus.clone() {
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_secs(5)).await;
                h.run_upkeep();
            }
        });
    }
    let state = HttpState {
        status: status.clone(),
        prometheus,
        store_access: http::StoreAccess::of(&cfg.http.listen, &cfg.http.store_token),
    };
    Ok(Some(tokio::spawn(http::serve(listener, state, stop))))
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        let mut term = match signal(SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => return std::future::pending().await,
        };
        tokio::select! {
            _ = term.recv() => {},
            _ = tokio::signal::ctrl_c() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

//! The HTTP endpoint (`http.listen`): `/metrics` (Prometheus text format), `/healthz` (the process
//! is alive), `/readyz` (recovery finished, group joined, broker reachable; JSON with the reason
//! when not), and the live store inspection routes of [`crate::inspect`].

use std::future::Future;
use std::sync::Arc;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::IntoResponse;
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;

use crate::status::Status;

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    /// The filter's status.
    pub status: Arc<Status>,
    /// Renders the metrics; `None` when no recorder is installed.
    pub prometheus: Option<PrometheusHandle>,
}

/// The routes.
pub fn router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(crate::inspect::http_routes())
        .with_state(state)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: HttpState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    axum::serve(listener, router(state))
        .with_graceful_shutdown(shutdown)
        .await
}

/// Renders the recorder's metrics. Rendering reads the registry without blocking the pipeline
/// thread: the hot path only touches atomic counters through handles registered beforehand.
/// Series of partitions this process does not own (any more) are left out
/// ([`crate::telemetry::render`]).
async fn metrics(State(s): State<HttpState>) -> impl IntoResponse {
    crate::telemetry::ready(s.status.readiness().ready);
    let owned = s.status.partitions();
    let body = s
        .prometheus
        .as_ref()
        .map(|h| crate::telemetry::render(h, |p| owned.contains_key(&p)))
        .unwrap_or_default();
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body)
}

async fn healthz() -> impl IntoResponse {
    Json(json!({"status": "ok"}))
}

async fn readyz(State(s): State<HttpState>) -> impl IntoResponse {
    let r = s.status.readiness();
    let code = if r.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    (code, Json(r))
}

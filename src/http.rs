//! The HTTP endpoint (`http.listen`), every route in one place:
//! - `/metrics`: Prometheus text format;
//! - `/healthz`: the process is alive;
//! - `/readyz`: recovery finished, group joined, broker reachable; JSON with the reason when not;
//! - `/store/stats` and `/store/lookup`: the store inspection answers of [`crate::inspect`],
//!   the live parts asked of the pipeline thread ([`crate::inspect::live`]).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;

use crate::inspect::live::LiveRequest;
use crate::inspect::{stats, LookupInput};
use crate::status::Status;

/// How long an HTTP request waits for the pipeline thread to answer (it answers between two
/// polls; a hand-over or a full producer queue can keep it busy longer).
pub const LIVE_TIMEOUT: Duration = Duration::from_secs(5);

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
        .route("/store/stats", get(store_stats))
        .route("/store/lookup", get(store_lookup))
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
    if let Some(store) = s.status.store() {
        // A walk of the store directory (`Store::size_on_disk`), done here rather than on the
        // pipeline thread.
        crate::telemetry::store_size(store.size_on_disk());
    }
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

/// A JSON error answer `{"error": MESSAGE}`.
fn error(code: StatusCode, message: impl Into<String>) -> Response {
    (code, Json(json!({"error": message.into()}))).into_response()
}

/// Why the pipeline thread gave no answer.
#[derive(Debug, thiserror::Error)]
enum Unanswered {
    /// The pipeline has not started (no request channel yet).
    #[error("the filter is not running")]
    NotRunning,
    /// The pipeline thread is gone.
    #[error("the filter has stopped")]
    Stopped,
    /// No answer within [`LIVE_TIMEOUT`].
    #[error(
        "the pipeline did not answer within {LIVE_TIMEOUT:?} (a hand-over or a full producer queue keeps it busy); retry"
    )]
    Timeout,
}

/// Sends `make(reply)` to the pipeline thread and waits up to [`LIVE_TIMEOUT`] for the answer.
async fn ask<T>(
    s: &HttpState,
    make: impl FnOnce(tokio::sync::oneshot::Sender<T>) -> LiveRequest,
) -> Result<T, Unanswered> {
    let Some(tx) = s.status.live() else {
        return Err(Unanswered::NotRunning);
    };
    let (reply, answer) = tokio::sync::oneshot::channel();
    tx.send(make(reply)).map_err(|_| Unanswered::Stopped)?;
    match tokio::time::timeout(LIVE_TIMEOUT, answer).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err(Unanswered::Stopped),
        Err(_) => Err(Unanswered::Timeout),
    }
}

/// `GET /store/stats`: `inspect stats --json` of the store on disk, plus the live partitions.
async fn store_stats(State(s): State<HttpState>) -> Response {
    let Some(store) = s.status.store() else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "the store is not open yet");
    };
    let mut st = match tokio::task::spawn_blocking(move || stats(&store)).await {
        Ok(Ok(st)) => st,
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        Err(e) => return error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    match ask(&s, |reply| LiveRequest::Partitions { reply }).await {
        Ok(live) => st.live = Some(live),
        Err(why) => st.live_unavailable = Some(why.to_string()),
    }
    (StatusCode::OK, Json(st)).into_response()
}

/// `GET /store/lookup`: `inspect lookup --json`, answered live by the pipeline thread. A query
/// that names no lookup (bad URL encoding included) is a 400 with the reason; so is a record that
/// has no fingerprint (a deep or invalid JSON value, a null id, ...).
async fn store_lookup(State(s): State<HttpState>, RawQuery(query): RawQuery) -> Response {
    let input = match LookupInput::from_query(query.as_deref().unwrap_or_default()) {
        Ok(i) => i,
        Err(m) => return error(StatusCode::BAD_REQUEST, m.to_string()),
    };
    match ask(&s, |reply| LiveRequest::Lookup { input, reply }).await {
        Ok(Ok(l)) => (StatusCode::OK, Json(l)).into_response(),
        Ok(Err(bad)) => error(StatusCode::BAD_REQUEST, bad.to_string()),
        Err(why) => error(StatusCode::SERVICE_UNAVAILABLE, why.to_string()),
    }
}

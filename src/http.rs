//! The HTTP endpoint (`http.listen`), every route in one place:
//! - `/metrics`: Prometheus text format;
//! - `/healthz`: the process is alive;
//! - `/readyz`: recovery finished, group joined, broker reachable; JSON with the reason when not;
//! - `/store/stats` and `/store/lookup`: the store inspection answers of [`crate::inspect`],
//!   the live parts asked of the pipeline thread ([`crate::inspect::live`]) through a queue of
//!   [`LIVE_QUEUE`] questions (503 when full, so a flood neither grows memory nor holds up
//!   forwarding); only to a caller with `http.store_token`, or on a loopback address
//!   ([`StoreAccess`]): a lookup tells whether a value was forwarded.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderMap, StatusCode};
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

/// How many live `/store/*` questions may wait for the pipeline thread; one more is answered
/// 503 at once. The pipeline thread answers them all between two polls, so a flood costs it at
/// most this many lookups per batch of records, and the queue's memory is bounded.
pub const LIVE_QUEUE: usize = 16;

/// Who may use `/store/stats` and `/store/lookup` (docs/security.md, "Security").
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreAccess {
    /// Anyone who reaches the address: `http.listen` is a loopback address and no token is set.
    Loopback,
    /// A caller that sends `Authorization: Bearer TOKEN` (`http.store_token`).
    Token(String),
    /// Nobody (403): a non-loopback `http.listen` without `http.store_token`.
    Closed,
}

impl StoreAccess {
    /// The rule for `listen` (`host:port`) and `token` (`http.store_token`, empty when unset):
    /// a token always decides; without one, only a loopback address serves the routes.
    pub fn of(listen: &str, token: &str) -> Self {
        if !token.is_empty() {
            return StoreAccess::Token(token.to_string());
        }
        match listen.parse::<std::net::SocketAddr>() {
            Ok(a) if a.ip().is_loopback() => StoreAccess::Loopback,
            _ => StoreAccess::Closed,
        }
    }

    /// `Ok` when `headers` may use the store routes, else the status (401 or 403) and why.
    fn check(&self, headers: &HeaderMap) -> Result<(), (StatusCode, &'static str)> {
        match self {
            StoreAccess::Loopback => Ok(()),
            StoreAccess::Closed => Err((
                StatusCode::FORBIDDEN,
                "/store/* is served on a loopback http.listen only, unless http.store_token is set (docs/security.md)",
            )),
            StoreAccess::Token(token) => {
                let given = headers
                    .get(header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .unwrap_or_default();
                if constant_time_eq(given.as_bytes(), token.as_bytes()) {
                    Ok(())
                } else {
                    Err((
                        StatusCode::UNAUTHORIZED,
                        "/store/* needs Authorization: Bearer <http.store_token>",
                    ))
                }
            }
        }
    }
}

/// Compares two secrets in a time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

/// What the handlers read.
#[derive(Clone)]
pub struct HttpState {
    /// The filter's status.
    pub status: Arc<Status>,
    /// Renders the metrics; `None` when no recorder is installed.
    pub prometheus: Option<PrometheusHandle>,
    /// Who may use `/store/*`.
    pub store_access: StoreAccess,
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
    let readiness = s.status.readiness();
    crate::telemetry::ready(readiness.ready);
    let owned = readiness
        .route_partitions
        .map_or(readiness.partitions.len(), |r| r.len());
    crate::telemetry::partitions_owned(owned);
    if let Some(store) = s.status.store() {
        // A walk of the store directory (`Store::size_on_disk`): on a blocking thread, not on
        // the runtime's only worker (which serves every route) nor on the pipeline thread.
        if let Ok(size) = tokio::task::spawn_blocking(move || store.size_on_disk()).await {
            crate::telemetry::store_size(size);
        }
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
    /// [`LIVE_QUEUE`] questions already wait.
    #[error("{LIVE_QUEUE} questions already wait for the pipeline thread; retry")]
    Busy,
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
    tx.try_send(make(reply)).map_err(|e| match e {
        std::sync::mpsc::TrySendError::Full(_) => Unanswered::Busy,
        std::sync::mpsc::TrySendError::Disconnected(_) => Unanswered::Stopped,
    })?;
    match tokio::time::timeout(LIVE_TIMEOUT, answer).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(_)) => Err(Unanswered::Stopped),
        Err(_) => Err(Unanswered::Timeout),
    }
}

/// `GET /store/stats`: `inspect stats --json` of the store on disk, plus the live partitions.
async fn store_stats(State(s): State<HttpState>, headers: HeaderMap) -> Response {
    if let Err((code, why)) = s.store_access.check(&headers) {
        return error(code, why);
    }
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
async fn store_lookup(State(s): State<HttpState>, headers: HeaderMap, RawQuery(query): RawQuery) -> Response {
    if let Err((code, why)) = s.store_access.check(&headers) {
        return error(code, why);
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Who may use `/store/*`: each row a listen address, a token, the access.
    #[test]
    fn store_access_by_address_and_token() {
        let rows = [
            ("127.0.0.1:9464", "", StoreAccess::Loopback),
            ("[::1]:9464", "", StoreAccess::Loopback),
            ("0.0.0.0:9464", "", StoreAccess::Closed),
            ("10.0.0.7:9464", "", StoreAccess::Closed),
            ("0.0.0.0:9464", "s3cret", StoreAccess::Token("s3cret".into())),
            ("127.0.0.1:9464", "s3cret", StoreAccess::Token("s3cret".into())),
        ];
        for (listen, token, want) in rows {
            assert_eq!(StoreAccess::of(listen, token), want, "{listen} {token:?}");
        }
        let bearer = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::AUTHORIZATION, v.parse().unwrap());
            h
        };
        let t = StoreAccess::Token("s3cret".into());
        assert!(t.check(&bearer("Bearer s3cret")).is_ok());
        assert_eq!(
            t.check(&bearer("Bearer s3cre")).unwrap_err().0,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(t.check(&HeaderMap::new()).unwrap_err().0, StatusCode::UNAUTHORIZED);
        let closed = StoreAccess::Closed.check(&bearer("Bearer s3cret")).unwrap_err();
        assert_eq!(closed.0, StatusCode::FORBIDDEN);
        assert!(StoreAccess::Loopback.check(&HeaderMap::new()).is_ok());
    }
}

//! The HTTP layer: the router, the shared [`AppState`], the middleware stack and the handlers.
//!
//! Owns: routes, status codes, request parsing and reply shapes. It is the only module that
//! knows HTTP. Handlers run on the event loop and send every blocking step (store, locks, CPU
//! work) through `state.offload`; request_task-style critical sections enter `state.gate`
//! first and take their pool token only once inside.
//! Must not: call the store or any blocking function outside `Offload::run`, hold a lock
//! across an `.await`, or build a JSON reply without [`reply::ApiReply`] (which guarantees
//! `duration`).

pub mod api;
pub mod auth;
pub mod conn;
pub mod debug;
pub mod error;
pub mod extract;
pub mod limits;
pub mod middleware;
pub mod ops;
pub mod reply;
pub mod run_id;
pub mod ui;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use axum::Router;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::json;
use tokio::sync::Semaphore;

use crate::admission::Gate;
use crate::config::Config;
use crate::offload::Offload;
use crate::rundb::RunDb;
use reply::ApiReply;

/// What request_task (and the debug gate route) answers when the gate refuses a caller.
pub const TOO_BUSY_INFO: &str = "Request_task: the server is currently too busy...";

/// Everything handlers share. Cheap to clone through `Arc`.
pub struct AppState {
    /// The dashboard's first page, rendered at most once a second for everybody.
    pub dashboard: Arc<ui::dashboard::DashboardCache>,
    pub config: Arc<Config>,
    pub primary: bool,
    pub offload: Offload,
    pub gate: Gate,
    /// request_task's jobs handed in to the gate, served in batches by the slot holder.
    pub batches: Arc<api::worker::SchedBatches>,
    pub rundb: Arc<RunDb>,
    pub metrics: PrometheusHandle,
    /// Set when shutdown begins: new requests on open connections get an empty 503.
    pub draining: AtomicBool,
    /// `max_concurrent_requests`, if set: a waiting (never rejecting) cap.
    pub request_cap: Option<Arc<Semaphore>>,
    pub started: Instant,
    /// Failed-authentication counters (password spraying).
    pub throttle: Arc<crate::throttle::AuthThrottle>,
    /// Turns for reading large PGN upload bodies (`pgn_upload_concurrency`).
    pub pgn_uploads: Arc<Semaphore>,
    /// Turns for rendering web pages (`page_render_concurrency`): pages queue for these
    /// before taking a pool token, so a page storm cannot take every core.
    /// The page-render lane: its own low-priority threads, one turn per thread.
    pub page_renders: Arc<crate::offload::Lane>,
    /// Key for signing cookies (loaded or generated at start).
    pub secret: Vec<u8>,
    /// Debug routes' bookkeeping.
    pub debug: debug::DebugState,
    /// PGN retention, on the primary when `pgn_retention_days` is set (`app` runs its passes).
    pub pgn_retention: Option<Arc<crate::rundb::retention::PgnRetention>>,
}

/// The complete application: routes plus the middleware stack.
pub fn router(state: Arc<AppState>) -> Router {
    let mut routes = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/metrics", get(ops::metrics))
        .merge(api::router(&state))
        .merge(ui::router());
    if state.config.debug_endpoints {
        routes = routes.merge(debug::routes());
    }
    let routes = routes.route("/api/limits", get(limits::api_limits)).layer(
        axum::middleware::from_fn_with_state(state.clone(), limits::rate_layer),
    );
    let routes = routes.fallback(not_found).with_state(state.clone());
    middleware::apply(routes, state)
}

/// Unknown paths: the API's `{"detail": "Not Found"}` under `/api`, the HTML 404 page
/// elsewhere.
async fn not_found(
    axum::extract::State(state): axum::extract::State<Arc<AppState>>,
    uri: Uri,
    headers: axum::http::HeaderMap,
) -> Response {
    if uri.path().starts_with("/api") {
        let mut reply = ApiReply::json(json!({"detail": "Not Found"}));
        reply.status = StatusCode::NOT_FOUND;
        reply.into_response()
    } else {
        ui::kit::error::not_found(axum::extract::State(state), headers).await
    }
}

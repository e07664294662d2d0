//! The HTTP layer: the router, the shared [`AppState`], the middleware stack and the handlers.
//!
//! Owns: routes, status codes, request parsing and reply shapes. It is the only module that
//! knows HTTP. Handlers run on the event loop and send every blocking step (store, locks, CPU
//! work) through `state.offload`; request_task-style critical sections enter `state.gate`
//! first and take their pool token only once inside.
//! Must not: call the store or any blocking function outside `Offload::run`, hold a lock
//! across an `.await`, or build a JSON reply without [`reply::ApiReply`] (which guarantees
//! `duration`).

pub mod conn;
pub mod debug;
pub mod extract;
pub mod middleware;
pub mod ops;
pub mod public;
pub mod reply;
pub mod upload;
pub mod worker;

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Instant;

use axum::Router;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
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
    pub config: Arc<Config>,
    pub primary: bool,
    pub offload: Offload,
    pub gate: Gate,
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
    /// Key for signing cookies (loaded or generated at start).
    pub secret: Vec<u8>,
    /// Debug routes' bookkeeping.
    pub debug: debug::DebugState,
}

/// The complete application: routes plus the middleware stack.
pub fn router(state: Arc<AppState>) -> Router {
    let mut routes = Router::new()
        .route("/healthz", get(ops::healthz))
        .route("/metrics", get(ops::metrics))
        .route("/api/request_version", post(worker::request_version))
        .route("/api/request_task", post(worker::request_task))
        .route("/api/update_task", post(worker::update_task))
        .route("/api/beat", post(worker::beat))
        .route("/api/request_spsa", post(worker::request_spsa))
        .route("/api/failed_task", post(worker::failed_task))
        .route("/api/stop_run", post(worker::stop_run))
        .route("/api/worker_log", post(worker::worker_log))
        .route("/api/upload_pgn", post(upload::upload_pgn))
        .route("/api/create_run", post(worker::create_run))
        .route("/api/approve_run", post(worker::approve_run))
        .route("/api/purge_run", post(worker::purge_run))
        .route("/api/calc_elo", get(public::calc_elo))
        .route("/api/get_elo/{id}", get(public::get_elo_route))
        .route("/api/get_run/{id}", get(public::get_run))
        .route("/api/get_task/{id}/{tid}", get(public::get_task))
        .route("/api/active_runs", get(public::active_runs))
        .route("/api/finished_runs", get(public::finished_runs))
        .route("/api/pgn/{name}", get(worker::download_pgn))
        .route("/api/nn/{name}", get(worker::download_net))
        .route("/api/run_pgns/{name}", get(worker::download_run_pgns));
    if state.config.debug_endpoints {
        routes = routes.merge(debug::routes());
    }
    let routes = routes.fallback(not_found).with_state(state.clone());
    middleware::apply(routes, state)
}

/// Unknown paths: the API's `{"detail": "Not Found"}` under `/api`, plain text elsewhere.
async fn not_found(uri: Uri) -> Response {
    if uri.path().starts_with("/api") {
        let mut reply = ApiReply::json(json!({"detail": "Not Found"}));
        reply.status = StatusCode::NOT_FOUND;
        reply.into_response()
    } else {
        (StatusCode::NOT_FOUND, "Not Found").into_response()
    }
}

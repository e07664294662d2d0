//! The HTTP layer: the router, the shared [`AppState`], the middleware stack and the handlers.
//!
//! Owns: routes, status codes, request parsing and reply shapes. It is the only module that
//! knows HTTP. Handlers run on the event loop and send every blocking step (store, locks, CPU
//! work) through `state.offload`; request_task's critical section is the scheduler's
//! (`state.scheduler.request_task`: its gate first, its pool token only once inside).
//! Must not: call the store or any blocking function outside `Offload::run`, hold a lock
//! across an `.await`, or build a JSON reply without [`reply::ApiReply`] (which guarantees
//! `duration`).

pub mod api;
pub mod auth;
pub mod conn;
pub mod debug;
pub mod envelope;
pub mod error;
pub mod extract;
pub mod forgot_queue;
pub mod limits;
pub mod middleware;
pub mod ops;
pub mod reply;
pub mod run_id;
pub mod state;
pub mod ui;

use std::sync::Arc;

use axum::Router;
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;

use reply::ApiReply;
/// For callers outside `http` (start-up); the HTTP modules name `state::AppState`.
pub use state::AppState;

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
        ui::kit::page::not_found(axum::extract::State(state), headers).await
    }
}

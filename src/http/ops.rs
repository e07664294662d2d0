//! Operational routes: `/healthz` and `/metrics`.
//!
//! Owns: the liveness reply and the Prometheus text exposition.
//! Must not: offload or touch the store: both answer from in-memory counters on the event
//! loop, so they stay responsive when every pool token is busy (that is what they are for).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::reply::ApiReply;
use super::state::AppState;

/// `GET /healthz`: 200 with a small status object.
pub async fn healthz(State(state): State<Arc<AppState>>) -> ApiReply {
    let gate = state.scheduler.gate().snapshot();
    let batches = state.scheduler.batches().refresh();
    ApiReply::json(json!({
        "status": if state.draining.load(Ordering::Acquire) { "draining" } else { "ok" },
        "primary": state.primary,
        "uptime_s": state.started.elapsed().as_secs_f64(),
        "pool": {
            "tokens": state.offload.tokens(),
            "reserved": state.offload.reserve(),
            "in_use": state.offload.in_use(),
            "waiting": state.offload.waiting(),
        },
        "gate": {
            "mode": state.scheduler.gate().config().admission.mode(),
            "capacity": state.scheduler.gate().config().capacity,
            "running": gate.running,
            "queued": gate.queued,
            "admitted": gate.admitted,
            "rejected": gate.rejected,
            "max_batch": state.scheduler.batches().max_batch(),
            "handed_in": batches.queued,
            "assignments_per_second": batches.per_second,
        },
    }))
}

/// `GET /metrics`: Prometheus text format.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Response {
    // Close the scheduler's current second, so an idle gate reads 0 assignments/s.
    state.scheduler.batches().refresh();
    let mut response = state.metrics.render().into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    response
}

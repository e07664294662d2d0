//! `POST /api/actions`: the action log as JSON, for scripts and the site's notifications.
//!
//! Owns: the route and its reply: the body is a query in the subset of MongoDB operators that
//! `rundb::actions::ActionFilter::from_mongo` accepts; the reply is a JSON array of at most
//! [`API_ACTIONS_CAP`] actions, newest first, `_id` as a string, with CORS `*` and without
//! `duration` (`BareJson`, as Fishtest answers). A query
//! outside the subset answers `[]`, as Fishtest answers a bad query (the reason is logged at
//! debug level); a body that is not JSON is a 400 like every API body.
//! Must not: read the store outside the pool; let a client name arbitrary fields or operators.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::Value;

use crate::http::extract::ApiJson;
use crate::http::reply::{ApiError, BareJson};
use crate::http::state::AppState;
use crate::ledger::ActionFilter;

/// At most this many actions per reply (Fishtest's cap).
pub const API_ACTIONS_CAP: u64 = 200;

/// The route (any instance; anonymous).
pub fn router() -> Router<Arc<AppState>> {
    Router::new().route("/api/actions", post(actions))
}

/// `POST /api/actions`.
#[utoipa::path(
    post,
    path = "/api/actions",
    tag = "read",
    request_body(
        content = Object,
        description = "A MongoDB-style query over the action fields (`action`, `username`, \
            `run_id`, `time`, …) with `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`, `$in` \
            (at most 1,000 values) and `$exists`; anything else matches nothing"
    ),
    responses(
        (status = 200, description = "At most 200 actions, newest first (a JSON array, `_id` \
            a string; no `duration`; `Access-Control-Allow-Origin: *`)", body = Vec<Object>),
        (status = 400, description = "The body is not JSON", body = crate::http::api::schema::ErrorReply)
    )
)]
pub async fn actions(
    State(state): State<Arc<AppState>>,
    ApiJson(query): ApiJson<Value>,
) -> Result<Response, ApiError> {
    let body = match ActionFilter::from_mongo(&query) {
        Ok(filter) => {
            let ledger = state.ledger.clone();
            state
                .offload
                .run(move || BareJson::of(&ledger.find_actions(&filter, 0, API_ACTIONS_CAP)?))
                .await??
        }
        Err(reason) => {
            tracing::debug!(%reason, "api/actions: query refused");
            BareJson::of(&Vec::<Value>::new())?
        }
    };
    Ok(body.cors().into_response())
}

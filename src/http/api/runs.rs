//! Run submission and control for scripts: create_run, approve_run, purge_run (the pages of
//! the web UI will call the same domain operations). Primary only: the router carries the
//! rule as a layer.
//!
//! Owns: the bodies of these endpoints and their replies.
//! Must not: contain run rules (that is `rundb::create` and the lifecycle).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::middleware::from_fn_with_state;
use axum::routing::post;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::call::{ClientAddr, bad};
use super::schema::ErrorReply;
use crate::http::auth::{Login, with_user};
use crate::http::extract::ApiJson;
use crate::http::reply::{ApiReply, ApiResult};
use crate::http::run_id::RunId;
use crate::http::state::AppState;

/// The run endpoints, primary only.
pub fn router(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/create_run", post(create_run))
        .route("/api/approve_run", post(approve_run))
        .route("/api/purge_run", post(purge_run))
        .route_layer(from_fn_with_state(
            state.clone(),
            super::primary::primary_only,
        ))
}

/// The body of the run-submission endpoints.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRunRequest {
    username: String,
    password: String,
    args: crate::rundb::create::CreateArgs,
}

/// create_run's reply (the envelope adds `duration`).
#[derive(Debug, Serialize, ToSchema)]
pub struct CreateRunReply {
    pub run_id: String,
}

/// approve_run's reply.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApproveRunReply {
    pub run_id: String,
    pub approved: bool,
}

/// purge_run's reply: the ids of the tasks purged, and whether the run was revived.
#[derive(Debug, Serialize, ToSchema)]
pub struct PurgeRunReply {
    pub run_id: String,
    pub purged_tasks: Vec<usize>,
    pub revived: bool,
}

fn reply(body: &impl Serialize) -> ApiReply {
    ApiReply::json(serde_json::to_value(body).unwrap_or_default())
}

/// POST /api/create_run: `{run_id}`.
#[utoipa::path(
    post,
    path = "/api/create_run",
    tag = "runs",
    request_body = CreateRunRequest,
    responses(
        (status = 200, description = "The new run's id", body = CreateRunReply),
        (status = 400, description = "A refused argument (its name in the message)", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn create_run(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    ApiJson(req): ApiJson<CreateRunRequest>,
) -> ApiResult {
    // Rate limits on the loop, before the password check.
    let ctx = crate::limits::KeyCtx {
        user: Some(&req.username),
        ip: Some(&ip),
        ..Default::default()
    };
    let scope = crate::limits::Scope::Endpoint("create_run".into());
    crate::http::limits::check(&state, &scope, &ctx)?;
    let args = req.args;
    let run_id = with_user(
        &state,
        Login::at(ip, req.username, req.password),
        move |db, user| db.create_run(args, &user),
    )
    .await?;
    Ok(reply(&CreateRunReply { run_id }))
}

/// The body of approve_run and purge_run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveRunRequest {
    username: String,
    password: String,
    run_id: String,
}

/// POST /api/approve_run.
#[utoipa::path(
    post,
    path = "/api/approve_run",
    tag = "runs",
    request_body = ApproveRunRequest,
    responses(
        (status = 200, description = "The run is approved", body = ApproveRunReply),
        (status = 400, description = "A refused argument (its name in the message)", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn approve_run(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    ApiJson(req): ApiJson<ApproveRunRequest>,
) -> ApiResult {
    let Ok(run_id) = req.run_id.parse::<RunId>() else {
        return Err(bad(format!("Invalid run_id: {}", req.run_id)));
    };
    with_user(
        &state,
        Login::at(ip, req.username, req.password),
        move |db, user| db.approve_run(run_id.as_str(), &user),
    )
    .await?;
    Ok(reply(&ApproveRunReply {
        run_id: req.run_id,
        approved: true,
    }))
}

/// POST /api/purge_run: the manual purge (run owner or approver), as the run page's button.
#[utoipa::path(
    post,
    path = "/api/purge_run",
    tag = "runs",
    request_body = ApproveRunRequest,
    responses(
        (status = 200, description = "The purge's outcome", body = PurgeRunReply),
        (status = 400, description = "A refused argument (its name in the message)", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn purge_run(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    ApiJson(req): ApiJson<ApproveRunRequest>,
) -> ApiResult {
    let Ok(run_id) = req.run_id.parse::<RunId>() else {
        return Err(bad(format!("Invalid run_id: {}", req.run_id)));
    };
    let outcome = with_user(
        &state,
        Login::at(ip, req.username, req.password),
        move |db, user| db.purge_run(run_id.as_str(), &user),
    )
    .await?;
    Ok(reply(&PurgeRunReply {
        run_id: req.run_id,
        purged_tasks: outcome.purged,
        revived: outcome.revived,
    }))
}

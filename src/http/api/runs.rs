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
use serde::Deserialize;
use serde_json::json;

use super::call::{ClientAddr, bad, is_hex};
use crate::http::AppState;
use crate::http::auth::{Login, with_user};
use crate::http::extract::ApiJson;
use crate::http::reply::{ApiReply, ApiResult};

/// The run endpoints, primary only.
pub fn router(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/create_run", post(create_run))
        .route("/api/approve_run", post(approve_run))
        .route("/api/purge_run", post(purge_run))
        .route_layer(from_fn_with_state(state.clone(), super::primary_only))
}

/// The body of the run-submission endpoints.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateRunRequest {
    username: String,
    password: String,
    args: crate::rundb::create::CreateArgs,
}

/// POST /api/create_run: `{run_id}`.
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
    Ok(ApiReply::json(json!({"run_id": run_id})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApproveRunRequest {
    username: String,
    password: String,
    run_id: String,
}

/// POST /api/approve_run.
pub async fn approve_run(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    ApiJson(req): ApiJson<ApproveRunRequest>,
) -> ApiResult {
    if !is_hex(&req.run_id, 24) {
        return Err(bad(format!("Invalid run_id: {}", req.run_id)));
    }
    let run_id = req.run_id.clone();
    with_user(
        &state,
        Login::at(ip, req.username, req.password),
        move |db, user| db.approve_run(&run_id, &user),
    )
    .await?;
    Ok(ApiReply::json(
        json!({"run_id": req.run_id, "approved": true}),
    ))
}

/// POST /api/purge_run: the manual purge (run owner or approver), as the run page's button.
pub async fn purge_run(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    ApiJson(req): ApiJson<ApproveRunRequest>,
) -> ApiResult {
    if !is_hex(&req.run_id, 24) {
        return Err(bad(format!("Invalid run_id: {}", req.run_id)));
    }
    let run_id = req.run_id.clone();
    let outcome = with_user(
        &state,
        Login::at(ip, req.username, req.password),
        move |db, user| db.purge_run(&run_id, &user),
    )
    .await?;
    Ok(ApiReply::json(json!({
        "run_id": req.run_id,
        "purged_tasks": outcome.purged,
        "revived": outcome.revived,
    })))
}

//! Run submission and control for scripts: create_run, approve_run, purge_run (the pages of
//! the web UI will call the same domain operations), and whoami (who an API token is).
//! Primary only: the router carries the rule as a layer. Each takes a username and password
//! in the body or an API token (`Authorization: Bearer`, `http::auth::Cred`); the three run
//! endpoints change data, so a read-only token is refused on them.
//!
//! Owns: the bodies of these endpoints and their replies; the nets check of create_run (every
//! net named must have been uploaded, `rundb::create::check_nets`); after an approval (here
//! or on the run page), marking a master base's nets `is_master` in the background.
//! Must not: contain run rules (that is `rundb::create` and the lifecycle).

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::middleware::from_fn_with_state;
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::call::{ClientAddr, bad};
use super::schema::ErrorReply;
use crate::http::auth::{bearer, cred, token_gate, with_cred};
use crate::http::error::ApiError;
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
        .route("/api/whoami", get(whoami))
        .route_layer(from_fn_with_state(
            state.clone(),
            super::primary::primary_only,
        ))
}

/// The body of the run-submission endpoints.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateRunRequest {
    /// With `password`; omitted when an API token is sent (`Authorization: Bearer`).
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
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
        (status = 401, description = "Wrong credentials or API token, or a user who may not", body = ErrorReply),
        (status = 403, description = "A read-only API token", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn create_run(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateRunRequest>,
) -> ApiResult {
    if let Some(username) = req.username.as_deref() {
        // Rate limits on the loop, before the password check (a token's are counted once
        // its owner is known: `http::auth::token_gate`).
        let ctx = crate::limits::KeyCtx {
            user: Some(username),
            ip: Some(&ip),
            ..Default::default()
        };
        let scope = crate::limits::Scope::Endpoint("create_run".into());
        crate::http::limits::check(&state, &scope, &ctx)?;
    }
    let cred = cred(&headers, ip, req.username, req.password)?;
    let mut args = req.args;
    // Who submits: the credentials checked once, before GitHub is asked anything.
    let user = with_cred(&state, cred, "create_run", true, |_, user| Ok(user)).await?;
    // The rules of the form's commits by hand, when GitHub answers (`github::given`): the
    // fork rule and `master_repo` (the server's, never the client's), the commits exist,
    // nets left empty read from them, a master base's bench checked.
    args.master_repo = None;
    let given = crate::github::Given {
        tests_repo: args.tests_repo.trim().to_string(),
        new_sha: args.resolved_new.clone(),
        base_sha: args.resolved_base.clone(),
        base_is_master: args.base_tag.trim() == "master",
        base_bench: args.base_signature.clone(),
        read_new_nets: args.new_nets.is_empty(),
        read_base_nets: args.base_nets.is_empty(),
        registered_at: user.registration_time.0.timestamp(),
    };
    let vetted = state.github.vet_given(&given).await.map_err(|problems| {
        let words: Vec<String> = problems
            .iter()
            .map(|p| format!("{}: {}", p.field.arg(), p.message))
            .collect();
        ApiError::BadRequest(words.join("; "))
    })?;
    args.master_repo = vetted.master_repo;
    if let Some(n) = vetted.new_nets {
        args.new_nets = n;
    }
    if let Some(n) = vetted.base_nets {
        args.base_nets = n;
    }
    let compared = (
        args.tests_repo.clone(),
        args.resolved_base.clone(),
        args.resolved_new.clone(),
    );
    let nets = state.nets.clone();
    let st = state.clone();
    let run_id = state
        .offload
        .run(move || -> ApiResult<String> {
            crate::rundb::create::check_nets(&args, |n| nets.known(n).unwrap_or(false))
                .map_err(crate::rundb::RunDbError::BadArgs)?;
            Ok(st.rundb.create_run(args, &user)?)
        })
        .await??;
    // The diff and the ancestry warnings, kept with the run in the background, as for the
    // form's runs.
    let (repo, base, new) = compared;
    state
        .github
        .keep_diff_in_background(run_id.clone(), repo, base, new);
    Ok(reply(&CreateRunReply { run_id }))
}

/// The body of approve_run and purge_run.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveRunRequest {
    /// With `password`; omitted when an API token is sent (`Authorization: Bearer`).
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
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
        (status = 401, description = "Wrong credentials or API token, or a user who may not", body = ErrorReply),
        (status = 403, description = "A read-only API token", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn approve_run(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ApproveRunRequest>,
) -> ApiResult {
    let Ok(run_id) = req.run_id.parse::<RunId>() else {
        return Err(bad(format!("Invalid run_id: {}", req.run_id)));
    };
    let cred = cred(&headers, ip, req.username, req.password)?;
    let id = run_id.as_str().to_string();
    with_cred(&state, cred, "approve_run", true, move |db, user| {
        db.approve_run(run_id.as_str(), &user)
    })
    .await?;
    mark_master_nets(&state, id);
    Ok(reply(&ApproveRunReply {
        run_id: req.run_id,
        approved: true,
    }))
}

/// After an approval, in the background (the approver does not wait for GitHub): when the
/// run's base commit is on official master, its nets that the base commit's sources name get
/// `is_master` (Fishtest's approval; `nets::mark_master` skips a net never tested, as
/// Fishtest's schema requires).
pub(crate) fn mark_master_nets(state: &Arc<AppState>, run_id: String) {
    let state = Arc::clone(state);
    tokio::spawn(async move {
        let db = state.rundb.clone();
        let id = run_id.clone();
        let run = match state.offload.run(move || db.get_run(&id)).await {
            Ok(Ok(Some(run))) => run,
            Ok(Ok(None)) => return,
            Ok(Err(e)) => {
                tracing::warn!(run = %run_id, error = %e, "is_master not set");
                return;
            }
            Err(e) => {
                tracing::warn!(run = %run_id, error = %e, "is_master not set");
                return;
            }
        };
        let names = run.args.base_nets.clone();
        if names.is_empty() || state.github.on_master(&run.args.resolved_base).await != Some(true) {
            return;
        }
        // Only the nets the base commit's own sources name (read from official master's
        // network, where the base is): nets typed by hand for the base are never marked.
        let github = &state.github;
        let read = match github
            .nets(github.official(), &run.args.resolved_base)
            .await
        {
            Ok(read) => read,
            Err(e) => {
                tracing::info!(run = %run_id, error = %e, "is_master not set: base nets not read");
                return;
            }
        };
        let (names, typed): (Vec<String>, Vec<String>) =
            names.into_iter().partition(|n| read.contains(n));
        if !typed.is_empty() {
            tracing::info!(run = %run_id, ?typed, "base nets not in the base commit's sources: not marked is_master");
        }
        if names.is_empty() {
            return;
        }
        let nets = state.nets.clone();
        match state.offload.run(move || nets.mark_master(&names)).await {
            Ok(Ok(skipped)) if !skipped.is_empty() => {
                tracing::info!(run = %run_id, ?skipped, "base nets not marked is_master");
            }
            Ok(Ok(_)) => {}
            Ok(Err(e)) => tracing::warn!(run = %run_id, error = %e, "is_master not set"),
            Err(e) => tracing::warn!(run = %run_id, error = %e, "is_master not set"),
        }
    });
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
        (status = 401, description = "Wrong credentials or API token, or a user who may not", body = ErrorReply),
        (status = 403, description = "A read-only API token", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn purge_run(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ApproveRunRequest>,
) -> ApiResult {
    let Ok(run_id) = req.run_id.parse::<RunId>() else {
        return Err(bad(format!("Invalid run_id: {}", req.run_id)));
    };
    let cred = cred(&headers, ip, req.username, req.password)?;
    let outcome = with_cred(&state, cred, "purge_run", true, move |db, user| {
        db.purge_run(run_id.as_str(), &user)
    })
    .await?;
    Ok(reply(&PurgeRunReply {
        run_id: req.run_id,
        purged_tasks: outcome.purged,
        revived: outcome.revived,
    }))
}

/// whoami's reply: the token's owner and the token.
#[derive(Debug, Serialize, ToSchema)]
pub struct WhoamiReply {
    pub username: String,
    /// The token's name.
    pub token: String,
    pub read_only: bool,
}

/// GET /api/whoami: who an API token belongs to (a read: read-only tokens may call it).
#[utoipa::path(
    get,
    path = "/api/whoami",
    tag = "runs",
    responses(
        (status = 200, description = "The token's owner, name and whether it is read-only", body = WhoamiReply),
        (status = 401, description = "No API token, an unknown or revoked one, or a blocked owner", body = ErrorReply),
        (status = 429, description = "A rate limit of scope `api_token`", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn whoami(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    headers: HeaderMap,
) -> ApiResult {
    let Some(token) = bearer(&headers)? else {
        return Err(crate::http::reply::ApiError::Unauthorized(
            "an API token is required (Authorization: Bearer)".into(),
        ));
    };
    let st = state.clone();
    let (user, info) = state
        .offload
        .run(move || -> ApiResult<_> {
            let (user, info) = token_gate(&st, &ip, &token, "whoami", false)?;
            st.accounts.token_used(&info, "whoami")?;
            Ok((user, info))
        })
        .await??;
    Ok(reply(&WhoamiReply {
        username: user.username,
        token: info.name,
        read_only: info.read_only,
    }))
}

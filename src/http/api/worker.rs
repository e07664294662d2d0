//! The worker protocol's endpoints: request_version, request_task, update_task, beat,
//! request_spsa, failed_task, stop_run, worker_log (docs/protocol.md). Primary only: the
//! router carries the rule as a layer.
//!
//! Owns: each endpoint's path — validate on the loop ([`WorkerCall`]) -> log in (`auth`) ->
//! domain work in the pool -> await the journal ticket (holding no token and no gate place)
//! -> reply. request_task hands the authenticated worker to the scheduler
//! (`Scheduler::request_task`: the gate, the batches, the critical section, the limit wait)
//! and turns its outcome into the reply. beat and update_task
//! first try their work on the event loop (a credential-cache hit and `RunDb::try_beat` /
//! `try_update_task`, which only try locks), counted in `shoal_loop_fast_path_total{route}`.
//! Must not: contain scheduling rules or plumbing (that is `crate::scheduler`) or reply
//! without `ApiReply`.

use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::middleware::from_fn_with_state;
use axum::routing::post;
use serde_json::{Map, Value, json};

use super::call::WorkerRequest;
use super::call::{ClientAddr, Needs, WorkerCall, bad};
use super::replies;
use super::schema::{
    EmptyReply, ErrorReply, RequestTaskReply, TaskAliveReply, VersionReply, VersionRequest,
};
use crate::http::auth::{Login, OnLoop, credentials, login_on_loop, rundb, with_login, with_user};
use crate::http::extract::ApiJson;
use crate::http::limits;
use crate::http::reply::{ApiError, ApiReply, ApiResult};
use crate::http::state::AppState;
use crate::limits::{KeyCtx, Scope};
use crate::rundb::model::{Stats, WorkerInfo};
use crate::rundb::outcome::TaskReply;
use crate::rundb::{RunDb, RunDbError, Ticket, WORKER_VERSION};
use crate::scheduler::{Outcome, SchedError};
use crate::spsa::SpsaReply;
use replies::TOO_BUSY_INFO;

/// The worker endpoints, primary only.
pub fn router(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/request_version", post(request_version))
        .route("/api/request_task", post(request_task))
        .route("/api/update_task", post(update_task))
        .route("/api/beat", post(beat))
        .route("/api/request_spsa", post(request_spsa))
        .route("/api/failed_task", post(failed_task))
        .route("/api/stop_run", post(stop_run))
        .route("/api/worker_log", post(worker_log))
        .route_layer(from_fn_with_state(
            state.clone(),
            super::primary::primary_only,
        ))
}

async fn durable(reply: Map<String, Value>, ticket: Option<Ticket>) -> ApiResult {
    if let Some(t) = ticket {
        t.wait()
            .await
            .map_err(|e| ApiError::Internal(e.to_string()))?;
    }
    Ok(ApiReply::ok(reply))
}

/// POST /api/request_version: `{version}`; lenient body (password + worker_info.username).
#[utoipa::path(
    post,
    path = "/api/request_version",
    tag = "worker",
    request_body = VersionRequest,
    responses(
        (status = 200, description = "The worker version the server announces", body = VersionReply),
        (status = 400, description = "A malformed call", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn request_version(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    ApiJson(body): ApiJson<Value>,
) -> ApiResult {
    let password = body
        .get("password")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("missing password"))?
        .to_string();
    let username = body
        .get("worker_info")
        .and_then(|w| w.get("username"))
        .and_then(Value::as_str)
        .ok_or_else(|| bad("missing worker_info.username"))?
        .to_string();
    // Usually answered from the credential cache on the event loop: request_version is the
    // most frequent call of a reconnecting fleet (before every request_task).
    credentials(&state, Login::at(ip, username, password)).await?;
    Ok(ApiReply::json(json!({"version": WORKER_VERSION})))
}

/// POST /api/request_task: rate limits, credentials, then the scheduler.
#[utoipa::path(
    post,
    path = "/api/request_task",
    tag = "worker",
    request_body = WorkerRequest,
    responses(
        (status = 200, description = "A task, or why there is none", body = RequestTaskReply),
        (status = 400, description = "A malformed call", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn request_task(State(state): State<Arc<AppState>>, call: WorkerCall) -> ApiResult {
    let WorkerCall { peer, headers, req } = call;
    let call = super::call::validate(&state, req, peer, &headers, Needs::default())?;
    // Rate limits first, on the loop: a limited call costs no token and no password check.
    {
        let short = call.wi.short_name();
        let ctx = KeyCtx {
            user: Some(&call.wi.username),
            ip: Some(&call.wi.remote_addr),
            worker: Some(&short),
            run: None,
        };
        limits::check(&state, &Scope::Endpoint("request_task".into()), &ctx)?;
    }
    // Credentials before the gate: a caller with a wrong password (a spray) never takes a
    // place a real worker needs, and a password check (argon2 on a cold cache) never runs
    // inside the scheduler's critical section. (Fishtest validates before its semaphore too.)
    let login = Login {
        ip: call.wi.remote_addr.clone(),
        username: call.wi.username.clone(),
        password: call.password.clone(),
    };
    let user = credentials(&state, login).await?;
    match state.scheduler.request_task(&user, call.wi).await {
        Ok(Outcome::Served(reply, ticket)) => {
            // Where a blocked worker's message sends its owner: `public_url`, else Fishtest's
            // `request.host_url`; worked out only for such a refusal.
            let site = || match &state.config.public_url {
                Some(u) => u.trim_end_matches('/').to_string(),
                None => super::files::host_url(&state, None, &headers, Some(peer)),
            };
            durable(replies::assignment(reply, site), ticket).await
        }
        Ok(Outcome::TooBusy) => Ok(ApiReply::json(
            json!({"task_waiting": false, "info": TOO_BUSY_INFO}),
        )),
        Err(SchedError::Runs(e)) => Err(e.into()),
        Err(SchedError::Lost(e)) => Err(ApiError::Internal(e.to_string())),
    }
}

/// What a task-bound endpoint does once the caller is authenticated (runs in the pool).
type TaskWork = fn(&RunDb, TaskCall) -> Result<(TaskReply, Option<Ticket>), RunDbError>;

/// Work that may be done on the event loop when it needs no wait (never blocks: `None` means
/// "take the pool path"); a change it made comes with its journal ticket, awaited before the
/// reply as on the pool path.
type FastWork = fn(&RunDb, &TaskCall) -> Option<Result<(TaskReply, Option<Ticket>), RunDbError>>;

/// A validated call about one task.
struct TaskCall {
    run_id: String,
    task_id: usize,
    wi: WorkerInfo,
    stats: Stats,
    spsa: Option<crate::spsa::SpsaResult>,
    message: String,
}

/// The common path of the task-bound endpoints: validate on the loop, authenticate and work in
/// the pool, await the journal, reply.
async fn task_bound(
    state: &AppState,
    name: &'static str,
    call: WorkerCall,
    needs: Needs,
    work: TaskWork,
) -> ApiResult {
    task_bound_or_fast(state, name, call, needs, work, None).await
}

/// [`task_bound`], first trying `fast` on the event loop (labelled for metrics). `name` is
/// the endpoint as Fishtest's messages spell it (`Update_task`, …).
async fn task_bound_or_fast(
    state: &AppState,
    name: &'static str,
    call: WorkerCall,
    needs: Needs,
    work: TaskWork,
    fast: Option<(&'static str, FastWork)>,
) -> ApiResult {
    let needs = Needs {
        task: true,
        ..needs
    };
    let call = call.validate(state, needs)?;
    let Some((run_id, task_id)) = call.task else {
        return Err(bad("missing run_id and task_id"));
    };
    let username = call.wi.username.clone();
    let task = TaskCall {
        run_id,
        task_id,
        wi: call.wi,
        stats: call.stats.unwrap_or_default(),
        spsa: call.spsa.map(|s| crate::spsa::SpsaResult {
            num_games: s.num_games,
            wins: s.wins,
            losses: s.losses,
            draws: s.draws,
            sig: s.sig,
        }),
        message: call.message,
    };
    let login = Login {
        ip: task.wi.remote_addr.clone(),
        username,
        password: call.password,
    };
    let on_loop = login_on_loop(state, &login)?;
    if let Some((route, fast)) = fast
        && let OnLoop::Known(_user) = &on_loop
    {
        // The event loop's try: a credential-cache hit and work that needs no wait at all.
        let db = rundb(state);
        if let Some(result) = fast(&db, &task) {
            metrics::counter!("shoal_loop_fast_path_total", "route" => route).increment(1);
            let (reply, ticket) = result?;
            // No lock and no token is held here: only the journal's group commit is awaited.
            return durable(
                replies::task_reply(name, &task.run_id, task.task_id, reply),
                ticket,
            )
            .await;
        }
    }
    let (run_id, task_id) = (task.run_id.clone(), task.task_id);
    let (reply, ticket) = with_login(state, login, on_loop, move |db, _| work(db, task)).await?;
    durable(replies::task_reply(name, &run_id, task_id, reply), ticket).await
}

/// POST /api/update_task.
#[utoipa::path(
    post,
    path = "/api/update_task",
    tag = "worker",
    request_body = WorkerRequest,
    responses(
        (status = 200, description = "Whether the task goes on (a rejection is a 200 with `error`)", body = TaskAliveReply),
        (status = 400, description = "A malformed call", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn update_task(State(state): State<Arc<AppState>>, call: WorkerCall) -> ApiResult {
    let needs = Needs {
        stats: true,
        ..Needs::default()
    };
    task_bound_or_fast(
        &state,
        "Update_task",
        call,
        needs,
        |db, c| db.update_task(&c.run_id, c.task_id, c.stats, c.spsa, c.wi),
        // A mid-task update of a free, cached run: answered on the event loop, the reply
        // still after the journal's commit (RunDb::try_update_task says when it declines).
        Some(("update_task", |db, c| {
            db.try_update_task(&c.run_id, c.task_id, c.stats, c.spsa, &c.wi)
        })),
    )
    .await
}

/// POST /api/beat.
#[utoipa::path(
    post,
    path = "/api/beat",
    tag = "worker",
    request_body = WorkerRequest,
    responses(
        (status = 200, description = "Whether the task goes on", body = TaskAliveReply),
        (status = 400, description = "A malformed call", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn beat(State(state): State<Arc<AppState>>, call: WorkerCall) -> ApiResult {
    task_bound_or_fast(
        &state,
        "Beat",
        call,
        Needs::default(),
        |db, c| db.beat(&c.run_id, c.task_id, &c.wi).map(|r| (r, None)),
        // Usually answered on the event loop: a beat is a timestamp in memory.
        Some(("beat", |db, c| {
            db.try_beat(&c.run_id, c.task_id, &c.wi)
                .map(|r| r.map(|reply| (reply, None)))
        })),
    )
    .await
}

/// POST /api/request_spsa.
#[utoipa::path(
    post,
    path = "/api/request_spsa",
    tag = "worker",
    request_body = WorkerRequest,
    responses(
        (status = 200, description = "The parameters to play (or `task_alive: false` and `info` for an inactive task)", body = SpsaReply),
        (status = 400, description = "A malformed call", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn request_spsa(State(state): State<Arc<AppState>>, call: WorkerCall) -> ApiResult {
    task_bound(&state, "Request_spsa", call, Needs::default(), |db, c| {
        db.request_spsa(&c.run_id, c.task_id, &c.wi)
    })
    .await
}

/// POST /api/failed_task.
#[utoipa::path(
    post,
    path = "/api/failed_task",
    tag = "worker",
    request_body = WorkerRequest,
    responses(
        (status = 200, description = "The task is failed (`{}`), or was not active", body = TaskAliveReply),
        (status = 400, description = "A malformed call", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn failed_task(State(state): State<Arc<AppState>>, call: WorkerCall) -> ApiResult {
    task_bound(&state, "Failed_task", call, Needs::default(), |db, c| {
        db.failed_task(&c.run_id, c.task_id, &c.message, &c.wi)
    })
    .await
}

/// POST /api/stop_run.
#[utoipa::path(
    post,
    path = "/api/stop_run",
    tag = "worker",
    request_body = WorkerRequest,
    responses(
        (status = 200, description = "The run is stopped (`{}`), or the task was not active", body = TaskAliveReply),
        (status = 400, description = "A malformed call", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn stop_run(State(state): State<Arc<AppState>>, call: WorkerCall) -> ApiResult {
    let needs = Needs {
        plain_message: true,
        ..Needs::default()
    };
    task_bound(&state, "Stop_run", call, needs, |db, c| {
        db.stop_run(&c.run_id, c.task_id, &c.message, &c.wi)
    })
    .await
}

/// POST /api/worker_log.
#[utoipa::path(
    post,
    path = "/api/worker_log",
    tag = "worker",
    request_body = WorkerRequest,
    responses(
        (status = 200, description = "The message is logged", body = EmptyReply),
        (status = 400, description = "A malformed call", body = ErrorReply),
        (status = 401, description = "Wrong credentials, or a user who may not", body = ErrorReply),
        (status = 429, description = "Too many failed logins: retry after `Retry-After` seconds", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn worker_log(State(state): State<Arc<AppState>>, call: WorkerCall) -> ApiResult {
    let needs = Needs {
        message: true,
        ..Needs::default()
    };
    let call = call.validate(&state, needs)?;
    let username = call.wi.username.clone();
    let (wi, message, task) = (call.wi, call.message, call.task);
    let login = Login {
        ip: wi.remote_addr.clone(),
        username,
        password: call.password,
    };
    with_user(&state, login, move |db, _| {
        db.worker_log(&message, task.as_ref().map(|(r, t)| (r.as_str(), *t)), &wi)
    })
    .await?;
    Ok(ApiReply::ok(Map::new()))
}

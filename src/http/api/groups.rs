//! Test groups for scripts (issue 39, docs/test-groups.md): `POST /api/create_group` (primary
//! only; a password in the body or an API token, as create_run) and `GET
//! /api/get_group/{id}` (the read API: anonymous, any instance, no `duration`).
//!
//! Owns: the bodies of these two routes and their replies; each take's arguments put
//! together from the group's and the take's, resolved through GitHub as the form resolves a
//! branch (a take given by `new_tag` alone) or checked as create_run checks commits given by
//! hand (`resolved_new` given).
//! Must not: contain group rules (that is `groups`), or create a run before every take is
//! resolved and checked.

use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::middleware::from_fn_with_state;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;

use super::call::ClientAddr;
use super::schema::ErrorReply;
use crate::accounts::User;
use crate::groups::{GroupView, MAX_TAKES, MIN_TAKES};
use crate::http::auth::{cred, with_cred};
use crate::http::error::ApiError;
use crate::http::extract::ApiJson;
use crate::http::reply::{ApiReply, ApiResult, BareJson};
use crate::http::state::AppState;
use crate::rundb::create::CreateArgs;

/// create_group (primary only).
pub fn router(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/create_group", post(create_group))
        .route_layer(from_fn_with_state(
            state.clone(),
            super::primary::primary_only,
        ))
}

/// get_group (any instance).
pub fn read_router() -> Router<Arc<AppState>> {
    Router::new().route("/api/get_group/{id}", get(get_group))
}

/// One take: its branch (resolved through GitHub), or its resolved fields.
#[derive(Debug, Clone, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TakeIn {
    #[serde(default)]
    pub new_tag: String,
    #[serde(default)]
    pub resolved_new: String,
    #[serde(default)]
    pub msg_new: Option<String>,
    #[serde(default)]
    pub new_signature: Option<String>,
    #[serde(default)]
    pub new_nets: Option<Vec<String>>,
    #[serde(default)]
    pub new_options: Option<String>,
    #[serde(default)]
    pub info: Option<String>,
}

/// create_group's body: the run arguments every take shares (create_run's `args` without
/// `new_tag`), and the takes.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateGroupRequest {
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
    /// create_run's `args` without `new_tag` (and without the new side's resolved fields,
    /// which each take gives).
    #[schema(value_type = Object)]
    args: Map<String, Value>,
    /// 2 to 8 takes (also accepted inside `args`).
    #[serde(default)]
    takes: Option<Vec<TakeIn>>,
}

/// create_group's reply (the envelope adds `duration`).
#[derive(Debug, Serialize, ToSchema)]
pub struct CreateGroupReply {
    pub group_id: String,
    pub run_ids: Vec<String>,
}

fn bad(message: impl Into<String>) -> ApiError {
    ApiError::BadRequest(message.into())
}

/// POST /api/create_group: `{group_id, run_ids}`.
#[utoipa::path(
    post,
    path = "/api/create_group",
    tag = "runs",
    request_body = CreateGroupRequest,
    responses(
        (status = 200, description = "The group's id and its runs' ids, in the takes' order", body = CreateGroupReply),
        (status = 400, description = "A refused argument (the take and the argument in the message); nothing created", body = ErrorReply),
        (status = 401, description = "Wrong credentials or API token, or a user who may not", body = ErrorReply),
        (status = 403, description = "A read-only API token", body = ErrorReply),
        (status = 503, description = "Not the primary instance", body = ErrorReply),
    )
)]
pub async fn create_group(
    State(state): State<Arc<AppState>>,
    ClientAddr(ip): ClientAddr,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateGroupRequest>,
) -> ApiResult {
    let mut args = req.args;
    let takes = match (req.takes, args.remove("takes")) {
        (Some(t), None) => t,
        (None, Some(v)) => {
            serde_json::from_value::<Vec<TakeIn>>(v).map_err(|e| bad(format!("takes: {e}")))?
        }
        (Some(_), Some(_)) => return Err(bad("takes: given twice (in the body and in args)")),
        (None, None) => return Err(bad("takes: missing (2 to 8 takes)")),
    };
    if !(MIN_TAKES..=MAX_TAKES).contains(&takes.len()) {
        return Err(bad(format!(
            "takes: a group has {MIN_TAKES} to {MAX_TAKES} takes, not {}",
            takes.len()
        )));
    }
    if args.contains_key("new_tag") {
        return Err(bad(
            "args.new_tag: each take gives its own new_tag (in takes)",
        ));
    }
    // The new side is each take's own: a shared one would be copied to every take.
    for k in ["resolved_new", "new_signature", "new_nets", "msg_new"] {
        if args.contains_key(k) {
            return Err(bad(format!(
                "args.{k}: each take gives its own {k} (in takes)"
            )));
        }
    }
    // One group counts as one create_run per take in create_run's rate limit.
    if let Some(username) = req.username.as_deref() {
        let ctx = crate::limits::KeyCtx {
            user: Some(username),
            ip: Some(&ip),
            ..Default::default()
        };
        let scope = crate::limits::Scope::Endpoint("create_run".into());
        for counted in 0..takes.len() {
            if let Err(e) = crate::http::limits::check(&state, &scope, &ctx) {
                for _ in 0..counted {
                    crate::http::limits::refund(&state, &scope, &ctx);
                }
                return Err(e.into());
            }
        }
    }
    let cred = cred(&headers, ip, req.username, req.password)?;
    let user = with_cred(&state, cred, "create_group", true, |_, user| Ok(user)).await?;
    let mut all = Vec::with_capacity(takes.len());
    for (i, take) in takes.into_iter().enumerate() {
        let args = take_args(&state, &args, take, &user)
            .await
            .map_err(|e| match e {
                ApiError::BadRequest(m) => bad(format!("take {}: {m}", i + 1)),
                e => e,
            })?;
        all.push(args);
    }
    let compared: Vec<(String, String, String)> = all
        .iter()
        .map(|a| {
            (
                a.tests_repo.clone(),
                a.resolved_base.clone(),
                a.resolved_new.clone(),
            )
        })
        .collect();
    let nets = state.nets.clone();
    let st = state.clone();
    let (group_id, run_ids) = state
        .offload
        .run(move || -> ApiResult<(String, Vec<String>)> {
            for (i, a) in all.iter().enumerate() {
                crate::rundb::create::check_nets(a, |n| nets.known(n).unwrap_or(false))
                    .map_err(|e| bad(format!("take {}: {}", i + 1, e.message)))?;
            }
            Ok(st.groups.create(all, &user)?)
        })
        .await??;
    for (id, (repo, base, new)) in run_ids.iter().zip(compared) {
        state
            .github
            .keep_diff_in_background(id.clone(), repo, base, new);
    }
    Ok(ApiReply::json(json!(CreateGroupReply {
        group_id,
        run_ids
    })))
}

/// One take's whole arguments: the group's, with the take's new side, resolved through
/// GitHub (a branch) or checked (commits given by hand), as create_run and the form do.
pub(crate) async fn take_args(
    state: &Arc<AppState>,
    group: &Map<String, Value>,
    take: TakeIn,
    user: &User,
) -> ApiResult<CreateArgs> {
    let mut m = group.clone();
    let text = |m: &Map<String, Value>, k: &str| {
        m.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .trim()
            .to_string()
    };
    if take.resolved_new.trim().is_empty() {
        // A branch: resolved as the form resolves one.
        if take.new_tag.trim().is_empty() {
            return Err(bad("new_tag: give the take's branch, or its resolved_new"));
        }
        let repo = match text(&m, "tests_repo") {
            r if r.is_empty() => user.tests_repo.trim().to_string(),
            r => r,
        };
        let wanted = crate::github::Wanted {
            tests_repo: repo,
            new_tag: take.new_tag.clone(),
            base_tag: match text(&m, "base_tag") {
                b if b.is_empty() => "master".into(),
                b => b,
            },
            new_signature: take.new_signature.as_deref().and_then(|s| s.parse().ok()),
            base_signature: text(&m, "base_signature").parse().ok(),
            registered_at: user.registration_time.0.timestamp(),
        };
        let r = state
            .github
            .resolve_submission(&wanted)
            .await
            .map_err(|problems| {
                let words: Vec<String> = problems
                    .iter()
                    .map(|p| format!("{}: {}", p.field.arg(), p.message))
                    .collect();
                bad(words.join("; "))
            })?;
        m.insert("tests_repo".into(), json!(r.tests_repo));
        m.insert("new_tag".into(), json!(r.new.tag));
        m.insert("base_tag".into(), json!(r.base.tag));
        m.insert("resolved_new".into(), json!(r.new.commit.sha));
        m.insert("resolved_base".into(), json!(r.base.commit.sha));
        m.insert("msg_new".into(), json!(r.new.commit.subject()));
        m.insert("msg_base".into(), json!(r.base.commit.subject()));
        m.insert(
            "new_signature".into(),
            json!(
                take.new_signature
                    .unwrap_or_else(|| r.new.bench.to_string())
            ),
        );
        if text(&m, "base_signature").is_empty() {
            m.insert("base_signature".into(), json!(r.base.bench.to_string()));
        }
        m.insert(
            "new_nets".into(),
            json!(take.new_nets.unwrap_or_else(|| r.new.nets.clone())),
        );
        if m.get("base_nets")
            .is_none_or(|v| v.as_array().is_none_or(Vec::is_empty))
        {
            m.insert("base_nets".into(), json!(r.base.nets));
        }
        let info = take
            .info
            .clone()
            .unwrap_or_else(|| crate::github::parse::info_of(&r.new.commit.message));
        if !info.trim().is_empty() {
            m.insert("info".into(), json!(info));
        }
        if let Some(o) = take.new_options {
            m.insert("new_options".into(), json!(o));
        }
        let mut args: CreateArgs =
            serde_json::from_value(Value::Object(m)).map_err(|e| bad(format!("args: {e}")))?;
        args.master_repo = r.master_repo;
        return Ok(args);
    }
    // Commits given by hand: as create_run.
    let tag = match take.new_tag.trim() {
        "" => take.resolved_new.trim().chars().take(10).collect(),
        t => t.to_string(),
    };
    m.insert("new_tag".into(), json!(tag));
    m.insert("resolved_new".into(), json!(take.resolved_new.trim()));
    if let Some(v) = take.msg_new {
        m.insert("msg_new".into(), json!(v));
    }
    if let Some(v) = take.new_signature {
        m.insert("new_signature".into(), json!(v));
    }
    if let Some(v) = take.new_nets {
        m.insert("new_nets".into(), json!(v));
    }
    if let Some(v) = take.new_options {
        m.insert("new_options".into(), json!(v));
    }
    if let Some(v) = take.info {
        m.insert("info".into(), json!(v));
    }
    let mut args: CreateArgs =
        serde_json::from_value(Value::Object(m)).map_err(|e| bad(format!("args: {e}")))?;
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
        bad(words.join("; "))
    })?;
    args.master_repo = vetted.master_repo;
    if let Some(n) = vetted.new_nets {
        args.new_nets = n;
    }
    if let Some(n) = vetted.base_nets {
        args.base_nets = n;
    }
    Ok(args)
}

/// A group as get_group shows it.
pub fn group_json(v: &GroupView) -> Value {
    let runs: Vec<Value> = v
        .takes
        .iter()
        .map(|t| {
            let Some(r) = &t.run else {
                // A run no longer found (purged): in its place, shown as missing.
                return json!({
                    "run_id": t.run_id,
                    "state": "missing",
                    "finished": true,
                    "share": t.share_played,
                    "target_share": 0.0,
                    "p_best": 0.0,
                    "stopped": t.stopped,
                });
            };
            let sprt = r.args.sprt.as_ref();
            json!({
                "run_id": r.id,
                "new_tag": r.args.new_tag,
                "state": t.state.name(),
                "finished": r.finished,
                "games": r.results.games(),
                "wins": r.results.wins,
                "losses": r.results.losses,
                "draws": r.results.draws,
                "pentanomial": r.results.pairs(),
                "share": t.share_played,
                "target_share": t.share_target,
                "p_best": t.p_best,
                "llr": sprt.map(|s| s.llr),
                "lower_bound": sprt.map(|s| s.lower_bound),
                "upper_bound": sprt.map(|s| s.upper_bound),
                "stopped": t.stopped,
            })
        })
        .collect();
    json!({
        "group_id": v.group.group_id,
        "username": v.group.username,
        "start_time": v.group.created.to_iso(),
        "state": v.group.state.name(),
        "winner": v.group.winner,
        "runs": runs,
    })
}

/// GET /api/get_group/{id}: the group, its runs with each one's state and share of the
/// group's games, and the group's state.
#[utoipa::path(
    get,
    path = "/api/get_group/{id}",
    tag = "read",
    params(("id" = String, Path, description = "The group id (24 hex digits)")),
    responses(
        (status = 200, description = "`{group_id, username, start_time, state (active | pending | \
            passed | ended), winner, runs: [{run_id, new_tag, state (running | pending | passed | \
            failed | stopped | missing), \
            finished, games, wins, losses, draws, pentanomial, share (of the group's games played), \
            target_share, p_best, llr, lower_bound, upper_bound, stopped}]}` (no `duration`)",
            body = Object),
        (status = 404, description = "No such group", body = ErrorReply),
    )
)]
pub async fn get_group(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    if id.len() != 24 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(ApiError::NotFound(format!("The group {id} does not exist")));
    }
    let groups = state.groups.clone();
    let body = state
        .offload
        .run(move || -> Result<BareJson, ApiError> {
            let view = groups.view(&id)?;
            BareJson::of(&group_json(&view))
        })
        .await??;
    Ok(body.cors().into_response())
}

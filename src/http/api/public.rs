//! The read-only JSON API (docs/protocol.md#read-only-api): `calc_elo`, `get_elo`, `get_run`,
//! `get_task`, `active_runs`, `finished_runs`.
//!
//! Owns: parameter rules and reply shapes of these routes (the run and task documents as
//! Fishtest shows them are `run_view.rs`'s). A successful reply is a [`BareJson`], without
//! `duration` (Fishtest adds it only to the worker API and to errors); an error is an
//! [`ApiError`], which carries it. The route-by-route comparison with Fishtest is in
//! docs/fishtest-compatibility.md.
//! Must not: compute statistics or render runs on the event loop (every computation and every
//! run body goes through the pool) or change anything.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use axum::Router;
use axum::routing::get;

use super::call::bad;
use super::run_view::{RunView, api_run, api_task};
use super::schema::{
    CalcEloReply, EloRunDocument, ErrorReply, RunDocument, RunsById, TaskDocument,
};
use crate::http::reply::{ApiError, BareJson};
use crate::http::run_id::RunId;
use crate::http::state::AppState;
use crate::rundb::model::{Date, Run};
use crate::rundb::queries::{FinishedFilter, TaskList};
use crate::stats::{EloModel, Results, get_elo, sprt_elo};

/// The read-only API (any instance; anonymous).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/api/calc_elo", get(calc_elo))
        .route("/api/get_elo/{id}", get(get_elo_route))
        .route("/api/get_run/{id}", get(get_run))
        .route("/api/get_task/{id}/{tid}", get(get_task))
        .route("/api/active_runs", get(active_runs))
        .route("/api/finished_runs", get(finished_runs))
}

/// 404 `The run <id> does not exist` (Fishtest's message).
fn no_run(id: &str) -> ApiError {
    ApiError::NotFound(format!("The run {id} does not exist"))
}

/// The largest count calc_elo accepts per cell (each cell is exact in an f64 far beyond it).
const MAX_GAMES: u64 = crate::protocol::STATS_MAX_GAMES;

/// The last page of finished_runs that may be asked for (50 runs a page: 50 million runs).
const MAX_PAGE: u64 = 1_000_000;

fn count(params: &HashMap<String, String>, key: &str) -> Result<Option<f64>, ApiError> {
    match params.get(key) {
        None => Ok(None),
        Some(v) => v
            .trim()
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= MAX_GAMES)
            .map(|n| Some(n as f64))
            .ok_or_else(|| {
                bad(format!(
                    "{key} must be a non-negative integer of at most {MAX_GAMES}"
                ))
            }),
    }
}

/// GET /api/calc_elo: Elo from W/D/L or a pentanomial (LL, LD, DDWL, WD, WW; it takes
/// priority), with optional SPRT bounds.
#[utoipa::path(
    get,
    path = "/api/calc_elo",
    tag = "read",
    params(
        ("W" = Option<u64>, Query, description = "Wins (with D and L)"),
        ("D" = Option<u64>, Query, description = "Draws"),
        ("L" = Option<u64>, Query, description = "Losses"),
        ("LL" = Option<u64>, Query, description = "Pentanomial: lost pairs (takes priority over W/D/L)"),
        ("LD" = Option<u64>, Query, description = "Pentanomial: loss+draw pairs"),
        ("DDWL" = Option<u64>, Query, description = "Pentanomial: even pairs"),
        ("WD" = Option<u64>, Query, description = "Pentanomial: win+draw pairs"),
        ("WW" = Option<u64>, Query, description = "Pentanomial: won pairs"),
        ("elo0" = Option<f64>, Query, description = "SPRT lower bound (with elo1; |elo| <= 10)"),
        ("elo1" = Option<f64>, Query, description = "SPRT upper bound (at least elo0 + 0.5)"),
        ("elo_model" = Option<String>, Query, description = "normalized (default), logistic or BayesElo"),
    ),
    responses(
        (status = 200, description = "Elo, its 95% interval and LOS; with bounds also a, b and LLR (no `duration`)", body = CalcEloReply),
        (status = 400, description = "Missing or bad counts or bounds", body = ErrorReply),
    )
)]
pub async fn calc_elo(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let penta_keys = ["LL", "LD", "DDWL", "WD", "WW"];
    let penta: Vec<Option<f64>> = penta_keys
        .iter()
        .map(|k| count(&params, k))
        .collect::<Result<_, _>>()?;
    let (results, pentanomial): (Vec<f64>, Option<[u64; 5]>) = if penta.iter().any(Option::is_some)
    {
        if penta.iter().any(Option::is_none) {
            return Err(bad("a pentanomial needs all of LL, LD, DDWL, WD, WW"));
        }
        let cells: Vec<f64> = penta.into_iter().flatten().collect();
        let p = [
            cells[0] as u64,
            cells[1] as u64,
            cells[2] as u64,
            cells[3] as u64,
            cells[4] as u64,
        ];
        (cells, Some(p))
    } else {
        let (w, d, l) = (
            count(&params, "W")?,
            count(&params, "D")?,
            count(&params, "L")?,
        );
        match (w, d, l) {
            (Some(w), Some(d), Some(l)) => (vec![l, d, w], None),
            _ => return Err(bad("give W, D and L, or LL, LD, DDWL, WD and WW")),
        }
    };
    let bound = |k: &str| -> Result<Option<f64>, ApiError> {
        match params.get(k) {
            None => Ok(None),
            Some(v) => v
                .trim()
                .parse::<f64>()
                .ok()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| bad(format!("{k} must be a number"))),
        }
    };
    let (elo0, elo1) = (bound("elo0")?, bound("elo1")?);
    let model = match params.get("elo_model").map(String::as_str) {
        None => EloModel::Normalized,
        Some(m) => EloModel::parse(m).ok_or_else(|| bad(format!("unknown elo_model {m:?}")))?,
    };
    let bounds = match (elo0, elo1) {
        (None, None) => None,
        (Some(e0), Some(e1)) => {
            if e0.abs() > 10.0 || e1.abs() > 10.0 {
                return Err(bad("elo0 and elo1 must be within [-10, 10]"));
            }
            if e1 < e0 + 0.5 {
                return Err(bad("elo1 must be at least elo0 + 0.5"));
            }
            Some((e0, e1))
        }
        _ => return Err(bad("give both elo0 and elo1, or neither")),
    };
    let body = state
        .offload
        .run(move || -> Result<Value, String> {
            match bounds {
                None => {
                    let e = get_elo(&results).map_err(|e| e.to_string())?;
                    Ok(json!({"elo": e.elo, "ci": [e.elo - e.elo95, e.elo + e.elo95], "LOS": e.los}))
                }
                Some((e0, e1)) => {
                    let r = match pentanomial {
                        Some(p) => Results {
                            wins: 0,
                            losses: 0,
                            draws: 0,
                            pentanomial: Some(p),
                        },
                        None => Results {
                            wins: results[2] as u64,
                            losses: results[0] as u64,
                            draws: results[1] as u64,
                            pentanomial: None,
                        },
                    };
                    sprt_elo(&r, 0.05, 0.05, 0.05, e0, e1, model)
                        .map(|s| sprt_json(&s))
                        .map_err(|e| e.to_string())
                }
            }
        })
        .await?
        .map_err(|e| bad(format!("cannot compute: {e}")))?;
    Ok(BareJson::of(&body)?.into_response())
}

/// `SPRT_elo`'s output under Fishtest's key names.
fn sprt_json(s: &crate::stats::SprtElo) -> Value {
    json!({"a": s.a, "b": s.b, "elo": s.elo, "ci": s.ci, "LOS": s.los, "LLR": s.llr})
}

/// The SPRT summary of a run: `SPRT_elo` of its results with its own bounds.
fn sprt_summary(run: &Run) -> Option<Result<Value, String>> {
    let sprt = run.args.sprt.as_ref()?;
    let r = &run.results;
    let results = Results {
        wins: r.wins,
        losses: r.losses,
        draws: r.draws,
        pentanomial: Some(r.pentanomial).filter(|p| p.iter().any(|c| *c > 0)),
    };
    Some(
        sprt_elo(
            &results,
            sprt.alpha,
            sprt.beta,
            0.05,
            sprt.elo0,
            sprt.elo1,
            sprt.elo_model,
        )
        .map(|s| sprt_json(&s))
        .map_err(|e| e.to_string()),
    )
}

/// GET /api/get_elo/{id}: `{}` for non-SPRT runs, else the run (as get_run shows it) plus
/// `elo`.
#[utoipa::path(
    get,
    path = "/api/get_elo/{id}",
    tag = "read",
    params(("id" = String, Path, description = "The run id (24 hex digits)")),
    responses(
        (status = 200, description = "The run as get_run shows it plus `elo`; `{}` for a run \
            that is not an SPRT (no `duration`; `Access-Control-Allow-Origin: *`)", body = EloRunDocument),
        (status = 404, description = "No such run: `The run <id> does not exist`", body = ErrorReply),
    )
)]
pub async fn get_elo_route(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let Ok(id) = id.parse::<RunId>() else {
        return Err(no_run(&id));
    };
    let db = state.rundb.clone();
    let body = state
        .offload
        .run(move || -> Result<BareJson, ApiError> {
            let Some(run) = db.run_head(id.as_str())? else {
                return Err(no_run(id.as_str()));
            };
            let Some(summary) = sprt_summary(&run) else {
                return BareJson::of(&Map::new());
            };
            let elo = summary.map_err(ApiError::Internal)?;
            let mut v = api_run(run, RunView::Stripped)?;
            if let Value::Object(m) = &mut v {
                m.insert("elo".into(), elo);
            }
            BareJson::of(&v)
        })
        .await??;
    Ok(body.cors().into_response())
}

/// GET /api/get_run/{id}: the run with its task lists emptied.
#[utoipa::path(
    get,
    path = "/api/get_run/{id}",
    tag = "read",
    params(("id" = String, Path, description = "The run id (24 hex digits)")),
    responses(
        (status = 200, description = "The run, `tasks` and `bad_tasks` emptied (no `duration`; \
            `Access-Control-Allow-Origin: *`)", body = RunDocument),
        (status = 404, description = "No such run: `The run <id> does not exist`", body = ErrorReply),
    )
)]
pub async fn get_run(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    let Ok(id) = id.parse::<RunId>() else {
        return Err(no_run(&id));
    };
    let db = state.rundb.clone();
    let body = state
        .offload
        .run(move || match db.run_head(id.as_str())? {
            Some(run) => BareJson::of(&api_run(run, RunView::Stripped)?),
            None => Err(no_run(id.as_str())),
        })
        .await??;
    Ok(body.cors().into_response())
}

/// Runs keyed by their id, each shown as `active_runs` and `finished_runs` show it.
fn runs_by_id(runs: Vec<Run>) -> Result<BareJson, ApiError> {
    let mut body = Map::new();
    for run in runs {
        let id = run.id.clone();
        body.insert(id, api_run(run, RunView::Listed)?);
    }
    BareJson::of(&body)
}

/// GET /api/active_runs: every unfinished run, keyed by id, without task lists.
#[utoipa::path(
    get,
    path = "/api/active_runs",
    tag = "read",
    responses((status = 200, description = "Every unfinished run, keyed by id, without `tasks`, \
        `bad_tasks` and `args.spsa.param_history`; nothing else (no `duration`; \
        `Access-Control-Allow-Origin: *`)", body = RunsById))
)]
pub async fn active_runs(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let db = state.rundb.clone();
    let body = state
        .offload
        .run(move || runs_by_id(db.active_heads()?))
        .await??;
    Ok(body.cors().into_response())
}

/// The page parameter as Fishtest reads it: required, an integer from 1 (shoal: up to
/// [`MAX_PAGE`]).
fn page_number(page: Option<&String>) -> Result<u64, ApiError> {
    let page = page
        .filter(|p| !p.is_empty())
        .ok_or_else(|| bad("Please provide a Page number."))?;
    page.parse()
        .ok()
        .filter(|p| (1..=MAX_PAGE).contains(p))
        .ok_or_else(|| bad("Please provide a valid Page number."))
}

/// GET /api/finished_runs?page=N[&username=..&success_only=1&yellow_only=1&ltc_only=1
/// &timestamp=<unix>]: 50 per page, newest first.
#[utoipa::path(
    get,
    path = "/api/finished_runs",
    tag = "read",
    params(
        ("page" = u64, Query, description = "The page, from 1 to 1,000,000 (50 runs a page, newest first)"),
        ("username" = Option<String>, Query, description = "Only this user's runs"),
        ("success_only" = Option<String>, Query, description = "Only green runs (any value but empty, 0 or false)"),
        ("yellow_only" = Option<String>, Query, description = "Only yellow runs"),
        ("ltc_only" = Option<String>, Query, description = "Only long time controls"),
        ("timestamp" = Option<i64>, Query, description = "Only runs updated since this 10-digit Unix time"),
    ),
    responses(
        (status = 200, description = "Finished runs, keyed by id, shown as active_runs shows \
            them; nothing else (no `duration`; `Access-Control-Allow-Origin: *`)", body = RunsById),
        (status = 400, description = "No page (`Please provide a Page number.`), a bad one \
            (`Please provide a valid Page number.`) or a bad timestamp (`Please provide a \
            valid UNIX timestamp.`)", body = ErrorReply),
    )
)]
pub async fn finished_runs(
    State(state): State<Arc<AppState>>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Response, ApiError> {
    let page = page_number(params.get("page"))?;
    let flag = |k: &str| {
        params
            .get(k)
            .is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
    };
    let mut filter = FinishedFilter {
        page,
        page_size: 0,
        username: params.get("username").filter(|u| !u.is_empty()).cloned(),
        success_only: flag("success_only"),
        yellow_only: flag("yellow_only"),
        ltc_only: flag("ltc_only"),
        since: None,
    };
    if let Some(ts) = params.get("timestamp") {
        let bad_ts = || bad("Please provide a valid UNIX timestamp.");
        let secs: i64 = ts
            .parse()
            .ok()
            .filter(|_| ts.len() == 10)
            .ok_or_else(bad_ts)?;
        let since = chrono::DateTime::from_timestamp(secs, 0).ok_or_else(bad_ts)?;
        filter.since = Some(Date(since));
    }
    let db = state.rundb.clone();
    let body = state
        .offload
        .run(move || runs_by_id(db.finished_runs(&filter)?))
        .await??;
    Ok(body.cors().into_response())
}

/// GET /api/get_task/{id}/{tid}: one task (or, with the suffix `bad`, one bad task), with the
/// worker's key shortened and its address hidden.
#[utoipa::path(
    get,
    path = "/api/get_task/{id}/{tid}",
    tag = "read",
    params(
        ("id" = String, Path, description = "The run id (24 hex digits)"),
        ("tid" = String, Path, description = "The task's index, or the index and `bad` for a purged task"),
    ),
    responses(
        (status = 200, description = "The task (no `duration`; `Access-Control-Allow-Origin: *`)", body = TaskDocument),
        (status = 404, description = "No such run or task: `The task <id>/<tid> does not exist`", body = ErrorReply),
    )
)]
pub async fn get_task(
    State(state): State<Arc<AppState>>,
    Path((id, tid)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let not_found = || ApiError::NotFound(format!("The task {id}/{tid} does not exist"));
    let Ok(run_id) = id.parse::<RunId>() else {
        return Err(not_found());
    };
    let (index, bad_list) = match tid.strip_suffix("bad") {
        Some(n) => (n.parse::<usize>().map_err(|_| not_found())?, true),
        None => (tid.parse::<usize>().map_err(|_| not_found())?, false),
    };
    let list = if bad_list {
        TaskList::Bad
    } else {
        TaskList::Tasks
    };
    let db = state.rundb.clone();
    let body = state
        .offload
        .run(move || -> Result<Option<BareJson>, ApiError> {
            match db.task_view(run_id.as_str(), index, list)? {
                Some(task) => Ok(Some(BareJson::of(&api_task(task))?)),
                None => Ok(None),
            }
        })
        .await??;
    match body {
        Some(body) => Ok(body.cors().into_response()),
        None => Err(not_found()),
    }
}

//! Test-only routes under `/debug`, mounted only when `debug_endpoints = true`.
//!
//! Owns: probes that let the integration tests and the benchmarks exercise the concurrency
//! machinery with controlled work: slow offloaded work (`/debug/sleep`), the request_task gate
//! with a timed critical section (`/debug/gate`), and a durable key-value write/read through
//! the run database's key-value probe (`/debug/kv/{key}`), a PGN retention pass run now and
//! awaited (`/debug/pgn_retention`), one periodic job run now and awaited
//! (`/debug/job/{name}`, through `app::run_job`, as the periodic task runs it), and a
//! panicking API handler (`/api/debug/panic`).
//! Must not: be enabled in production (settings.toml says so), or bypass the offload pool or
//! the gate: these routes use exactly the primitives the real endpoints use.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};

use super::api::replies::TOO_BUSY_INFO;
use super::extract::ApiJson;
use super::reply::{ApiError, ApiReply, ApiResult};
use super::state::AppState;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/debug/sleep", get(sleep).post(sleep))
        .route("/debug/gate", post(gate))
        .route("/debug/kv/{key}", get(kv_get).put(kv_put))
        .route("/debug/pgn_retention", post(pgn_retention))
        .route("/debug/job/{name}", post(run_job))
        .route("/api/debug/panic", post(panic_now))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SleepParams {
    #[serde(default)]
    ms: u64,
    #[serde(default)]
    tag: Option<String>,
}

/// Holds one pool token for `ms` milliseconds.
async fn sleep(State(state): State<Arc<AppState>>, Query(p): Query<SleepParams>) -> ApiResult {
    let ms = p.ms.min(60_000);
    state
        .offload
        .run(move || std::thread::sleep(Duration::from_millis(ms)))
        .await?;
    Ok(ApiReply::json(json!({"slept_ms": ms, "tag": p.tag})))
}

/// Enters the request_task gate, then holds the critical section (and one pool token) for
/// `ms` milliseconds. Refused callers get request_task's too-busy reply.
async fn gate(State(state): State<Arc<AppState>>, Query(p): Query<SleepParams>) -> ApiResult {
    let ms = p.ms.min(60_000);
    let permit = match state.scheduler.gate().enter().await {
        Ok(permit) => permit,
        Err(_) => {
            return Ok(ApiReply::json(
                json!({"task_waiting": false, "info": TOO_BUSY_INFO, "tag": p.tag}),
            ));
        }
    };
    let seq = state.debug.gate_seq.fetch_add(1, Ordering::SeqCst);
    state
        .offload
        .run(move || {
            // The permit lives in the closure: the slot is held until the work really ends,
            // even if the client has gone away.
            let _permit = permit;
            std::thread::sleep(Duration::from_millis(ms));
        })
        .await?;
    Ok(ApiReply::json(json!({"seq": seq, "tag": p.tag})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KvBody {
    value: Value,
}

/// Writes `{"_id": key, "value": ...}` to the kvstore; answers only once it is committed.
async fn kv_put(
    State(state): State<Arc<AppState>>,
    Path(key): Path<String>,
    ApiJson(body): ApiJson<KvBody>,
) -> ApiResult {
    let db = state.rundb.clone();
    state
        .offload
        .run(move || db.debug_put(&key, body.value))
        .await??;
    Ok(ApiReply::json(json!({"ok": true})))
}

async fn kv_get(State(state): State<Arc<AppState>>, Path(key): Path<String>) -> ApiResult {
    let db = state.rundb.clone();
    let doc = state.offload.run(move || db.debug_get(&key)).await??;
    match doc {
        Some(doc) => Ok(ApiReply::json(
            json!({"value": doc.get("value").cloned().unwrap_or(Value::Null)}),
        )),
        None => Err(ApiError::NotFound("no such key".into())),
    }
}

/// Runs a PGN retention pass now (after any pass under way) and answers with what it did.
async fn pgn_retention(State(state): State<Arc<AppState>>) -> ApiResult {
    let Some(retention) = state.pgn_retention.clone() else {
        return Err(ApiError::BadRequest(
            "PGN retention is off (every pgn_retention_*days = 0) or this is not the primary"
                .into(),
        ));
    };
    let summary = retention
        .pass(&state.rundb, &state.offload)
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?;
    let days: serde_json::Map<String, Value> = retention
        .windows()
        .iter()
        .map(|(class, days)| (class.name().to_string(), json!(days)))
        .collect();
    Ok(ApiReply::json(json!({
        "days": days,
        "lookback_days": retention.lookback(),
        "pass": summary
    })))
}

/// Runs the periodic job `name` once (the same `jobs::run_job` the periodic task calls: in
/// the pool, timed in `shoal_job_seconds`) and answers `{"job": name, "ok": true}`; a job
/// that fails answers 500 `{"job", "ok": false, "error"}` with the failure's text. An unknown
/// name is a 404 that names the jobs there are; a secondary runs no job (503).
async fn run_job(State(state): State<Arc<AppState>>, Path(name): Path<String>) -> ApiResult {
    let Some(job) = crate::jobs::job(&name) else {
        let names: Vec<&str> = crate::jobs::JOBS.iter().map(|j| j.name).collect();
        let mut reply = ApiReply::error(
            StatusCode::NOT_FOUND,
            format!(
                "no periodic job {name:?} (the jobs: {}; PGN retention is POST \
                 /debug/pgn_retention)",
                names.join(", ")
            ),
        );
        reply.body.insert("job".into(), Value::String(name));
        reply.body.insert("ok".into(), Value::Bool(false));
        return Ok(reply);
    };
    if !state.primary {
        return Err(ApiError::PrimaryRequired);
    }
    match crate::jobs::run_job(&state.jobs, job).await {
        Ok(()) => Ok(ApiReply::json(json!({"job": job.name, "ok": true}))),
        Err(e) => {
            let mut reply = ApiReply::error(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
            reply.body.insert("job".into(), json!(job.name));
            reply.body.insert("ok".into(), Value::Bool(false));
            Ok(reply)
        }
    }
}

/// Panics inside the handler, to prove the panic catcher answers in the API's shape.
async fn panic_now() -> ApiReply {
    panic!("deliberate panic from /debug/panic")
}

//! Schema types of the replies that the API builds as JSON objects (`replies.rs`, `public.rs`,
//! `worker.rs`) rather than from a struct, so that `openapi.rs` can describe them.
//!
//! Owns: the documented shapes of those replies, each next to the handler annotation that
//! names it (`#[utoipa::path(..., responses(...))]`). As in Fishtest, the worker API's replies
//! and every error carry `duration` (the envelope adds it), and their shapes list it; the read
//! API's successful replies (`http::reply::BareJson`) do not, and neither do their shapes.
//! Must not: be used to build a reply (the handlers and `replies.rs` do), or hold logic. A
//! reply that is a struct already (request_spsa's `SpsaReply`, the run endpoints' replies,
//! `rate_limit`) is described by that struct itself, not here.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use utoipa::ToSchema;

/// An error: `{"error": "<path>: <message>", "duration"}` with the status of the failure.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorReply {
    /// The request path, a colon and the message.
    pub error: String,
    /// Seconds the server spent on the request.
    pub duration: f64,
}

/// An unknown `/api` path: 404 `{"detail": "Not Found"}`.
#[derive(Debug, Serialize, ToSchema)]
pub struct NotFoundReply {
    pub detail: String,
    pub duration: f64,
}

/// A reply with nothing to say but how long it took (worker_log, upload_pgn, failed_task
/// once done).
#[derive(Debug, Serialize, ToSchema)]
pub struct EmptyReply {
    pub duration: f64,
}

/// request_version's reply: the worker version the server announces.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionReply {
    pub version: u32,
    pub duration: f64,
}

/// request_task's reply: either a task (`run` and `task_id`) or no task (`task_waiting`,
/// with `info` or `error` saying why).
#[derive(Debug, Serialize, ToSchema)]
pub struct RequestTaskReply {
    /// The run: `_id`, `args` (with `book_sri`) and `my_task` (`num_games`, `start`,
    /// `stats`).
    #[schema(value_type = Option<Object>)]
    pub run: Option<Value>,
    pub task_id: Option<u64>,
    /// Present (always `false`) when there is no task: the worker only checks the key.
    pub task_waiting: Option<bool>,
    /// Why there is no task (the server is busy, the run needs no more games).
    pub info: Option<String>,
    /// Why the worker is refused (blocked, duplicate name, machine limit).
    pub error: Option<String>,
    pub duration: f64,
}

/// The reply of update_task, beat, failed_task and stop_run: whether the task goes on, and
/// `info` or `error` when it does not.
#[derive(Debug, Serialize, ToSchema)]
pub struct TaskAliveReply {
    pub task_alive: Option<bool>,
    pub info: Option<String>,
    pub error: Option<String>,
    pub duration: f64,
}

/// calc_elo's reply: `{elo, ci, LOS}`, plus `a`, `b` and `LLR` when SPRT bounds were given.
/// No `duration`.
#[derive(Debug, Serialize, ToSchema)]
pub struct CalcEloReply {
    pub elo: f64,
    /// The 95% interval.
    pub ci: [f64; 2],
    #[serde(rename = "LOS")]
    pub los: f64,
    /// The SPRT's lower bound of the LLR.
    pub a: Option<f64>,
    /// The SPRT's upper bound of the LLR.
    pub b: Option<f64>,
    #[serde(rename = "LLR")]
    pub llr: Option<f64>,
}

/// A run as get_run shows it: the stored document (Fishtest's field names; `_id` a string)
/// with `tasks` and `bad_tasks` emptied (`[]`), `args.spsa.param_history` emptied when
/// present, and `start_time` and `last_updated` as Python prints them
/// (`YYYY-MM-DD HH:MM:SS.ffffff+00:00`, or `YYYY-MM-DD HH:MM:SS+00:00` when the microseconds
/// are 0). No `duration`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(value_type = Object)]
pub struct RunDocument(pub Value);

/// get_elo's reply: a run as get_run shows it plus `elo` (calc_elo's SPRT shape: `a`, `b`,
/// `elo`, `ci`, `LOS`, `LLR`); `{}` for a run that is not an SPRT. No `duration`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(value_type = Object)]
pub struct EloRunDocument(pub Value);

/// One task (get_task): the stored task with the worker's `unique_key` cut to 8 characters
/// and `...`, its `remote_addr` hidden as `?.?.?.?`, `last_updated` as Python prints it, an
/// infinite `residual` as `"inf"` and `spsa_params.packed_flips` as a list of byte values. No
/// `duration`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(value_type = Object)]
pub struct TaskDocument(pub Value);

/// active_runs and finished_runs: runs keyed by id and nothing else (no `duration`), each
/// as get_run shows it but with `tasks`, `bad_tasks` and `args.spsa.param_history` absent.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunsById(pub BTreeMap<String, RunDocument>);

/// The OpenAPI document itself.
#[derive(Debug, Serialize, ToSchema)]
#[schema(value_type = Object)]
pub struct OpenApiDocument(pub Value);

/// request_version's body: lenient, only these two are read.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionRequest {
    pub password: String,
    /// Only `username` is read.
    pub worker_info: VersionWorkerInfo,
}

/// The part of `worker_info` request_version reads.
#[derive(Debug, Serialize, ToSchema)]
pub struct VersionWorkerInfo {
    pub username: String,
}

/// A file's bytes (PGNs, nets), streamed.
#[derive(Debug, Serialize, ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct Binary(pub Vec<u8>);

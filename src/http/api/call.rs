//! The worker call: what every worker endpoint receives, parsed and checked on the event loop.
//!
//! Owns: the strict request schema (the exact 16-key `worker_info`, unknown keys refused) and
//! its bounds ([`limits`]), the client's address (the socket's, or the hop a trusted proxy
//! added to `X-Forwarded-For`) and country (`X-Country-Code`), and the extractors
//! [`WorkerCall`] (address, headers and the strict body, for the worker endpoints) and
//! [`ClientAddr`] (the address alone, for the other authenticated endpoints).
//! Must not: authenticate, block, or contain scheduling rules.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, FromRequest, FromRequestParts, Request};
use axum::http::HeaderMap;
use axum::http::request::Parts;
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::http::extract::ApiJson;
use crate::http::reply::ApiError;
use crate::http::run_id::RunId;
use crate::http::state::AppState;
use crate::rundb::model::{Stats, WorkerInfo};

/// The body every worker endpoint but request_version sends. Unknown keys are refused.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WorkerRequest {
    password: String,
    /// Exactly the official worker's 16 keys, checked by `parse_worker_info`.
    #[schema(value_type = WorkerInfo)]
    worker_info: Map<String, Value>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    task_id: Option<u64>,
    /// Accepted in every body for the schema's sake; only upload_pgn (which reads its body
    /// itself, see `upload`) uses it, so it is skipped, not kept.
    #[serde(default, rename = "pgn")]
    #[schema(value_type = Option<String>)]
    _pgn: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    spsa: Option<SpsaBlock>,
    #[serde(default)]
    stats: Option<Stats>,
}

/// update_task's `spsa` block: this batch's results and the echoed signature.
#[derive(Debug, Clone, Copy, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SpsaBlock {
    pub(crate) num_games: u64,
    pub(crate) wins: u64,
    pub(crate) losses: u64,
    pub(crate) draws: u64,
    pub(crate) sig: u64,
}

/// Bounds on what a worker may say about itself (docs/security.md lists them). Each is far
/// above anything the official worker sends and far below what could cost the server.
pub mod limits {
    /// Cores per worker (the largest machines today have a few hundred hardware threads).
    pub const MAX_CONCURRENCY: u32 = 1024;
    /// `max_memory`, in MiB (16 TiB).
    pub const MAX_MEMORY_MIB: u64 = 1 << 24;
    /// Each part of `python_version` / `gcc_version`.
    pub const MAX_VERSION_PART: i64 = 100_000;
    /// Nodes per second per thread.
    pub const MAX_NPS: f64 = 1e12;
    /// Characters of `uname`, `ARCH`, `worker_arch`, `username` and each `architecture` part.
    pub const MAX_INFO_TEXT: usize = 256;
    /// Characters of a failed_task / stop_run / worker_log / upload_pgn `message`.
    pub const MAX_MESSAGE: usize = 4096;
}

pub(crate) fn bad(m: impl Into<String>) -> ApiError {
    ApiError::BadRequest(m.into())
}

fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The unique key: a UUID whose first group may be 2–8 alphanumerics (a user prefix).
fn valid_unique_key(key: &str) -> bool {
    let parts: Vec<&str> = key.split('-').collect();
    parts.len() == 5
        && (2..=8).contains(&parts[0].len())
        && parts[0].bytes().all(|b| b.is_ascii_alphanumeric())
        && is_hex(parts[1], 4)
        && is_hex(parts[2], 4)
        && is_hex(parts[3], 4)
        && is_hex(parts[4], 12)
}

/// Checks the exact key set, the types and the value rules of `worker_info`, with Fishtest's
/// username rule and no legacy names.
pub fn parse_worker_info(raw: Map<String, Value>) -> Result<WorkerInfo, ApiError> {
    parse_worker_info_with(raw, &crate::accounts::valid_username)
}

/// [`parse_worker_info`], with `name_allowed` deciding the username (the rule, or a legacy
/// name: `Users::name_allowed`).
pub fn parse_worker_info_with(
    raw: Map<String, Value>,
    name_allowed: &dyn Fn(&str) -> bool,
) -> Result<WorkerInfo, ApiError> {
    if let Some(k) = raw.keys().find(|k| !WorkerInfo::KEYS.contains(&k.as_str())) {
        return Err(bad(format!("worker_info: unknown key {k:?}")));
    }
    if let Some(k) = WorkerInfo::KEYS.iter().find(|k| !raw.contains_key(**k)) {
        return Err(bad(format!("worker_info: missing key {k:?}")));
    }
    let wi: WorkerInfo =
        serde_json::from_value(Value::Object(raw)).map_err(|e| bad(format!("worker_info: {e}")))?;
    if wi.architecture.len() != 2 {
        return Err(bad(
            "worker_info: architecture must be a list of two strings",
        ));
    }
    if wi.python_version.len() != 3 || wi.gcc_version.len() != 3 {
        return Err(bad(
            "worker_info: python_version and gcc_version must be lists of three integers",
        ));
    }
    if !(1..=limits::MAX_CONCURRENCY).contains(&wi.concurrency) {
        return Err(bad(format!(
            "worker_info: concurrency must be between 1 and {}",
            limits::MAX_CONCURRENCY
        )));
    }
    if wi.min_threads == 0 || wi.min_threads > limits::MAX_CONCURRENCY {
        return Err(bad(format!(
            "worker_info: min_threads must be between 1 and {}",
            limits::MAX_CONCURRENCY
        )));
    }
    if wi.max_memory > limits::MAX_MEMORY_MIB {
        return Err(bad(format!(
            "worker_info: max_memory must be at most {} MiB",
            limits::MAX_MEMORY_MIB
        )));
    }
    if wi
        .python_version
        .iter()
        .chain(&wi.gcc_version)
        .any(|v| !(0..=limits::MAX_VERSION_PART).contains(v))
    {
        return Err(bad(format!(
            "worker_info: version numbers must be between 0 and {}",
            limits::MAX_VERSION_PART
        )));
    }
    let texts = [
        ("uname", wi.uname.as_str()),
        ("ARCH", wi.arch.as_str()),
        ("worker_arch", wi.worker_arch.as_str()),
        ("username", wi.username.as_str()),
    ];
    let parts = wi.architecture.iter().map(|a| ("architecture", a.as_str()));
    if let Some((key, _)) = texts
        .into_iter()
        .chain(parts)
        .find(|(_, v)| v.chars().count() > limits::MAX_INFO_TEXT)
    {
        return Err(bad(format!(
            "worker_info: {key} is longer than {} characters",
            limits::MAX_INFO_TEXT
        )));
    }
    if wi.compiler != "g++" && wi.compiler != "clang++" {
        return Err(bad("worker_info: compiler must be g++ or clang++"));
    }
    if !valid_unique_key(&wi.unique_key) {
        return Err(bad("worker_info: unique_key is not a valid key"));
    }
    if wi.worker_arch != "unknown"
        && !crate::rundb::create::SUPPORTED_ARCHES.contains(&wi.worker_arch.as_str())
    {
        return Err(bad(format!(
            "worker_info: unsupported worker_arch {:?}",
            wi.worker_arch
        )));
    }
    if !wi.nps.is_finite() || !(0.0..=limits::MAX_NPS).contains(&wi.nps) {
        return Err(bad(format!(
            "worker_info: nps must be a number between 0 and {:e}",
            limits::MAX_NPS
        )));
    }
    if !name_allowed(&wi.username) {
        return Err(bad("worker_info: invalid username"));
    }
    Ok(wi)
}

/// The client address: the socket's, or, when the socket peer is a trusted proxy, the
/// `X-Forwarded-For` hop that the first trusted proxy added: the last hop that is not itself
/// a trusted proxy. (A proxy appends the address it saw to what the client sent, so the hops
/// before it are whatever the client chose to claim.)
pub(crate) fn client_addr(state: &AppState, peer: SocketAddr, headers: &HeaderMap) -> String {
    let peer_ip = peer.ip();
    let is_trusted = |addr: IpAddr| {
        state
            .config
            .trusted_proxies
            .iter()
            .any(|p| p.parse::<IpAddr>().is_ok_and(|ip| ip == addr))
    };
    if is_trusted(peer_ip) {
        let hops: Vec<&str> = headers
            .get_all("x-forwarded-for")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .map(str::trim)
            .collect();
        for hop in hops.into_iter().rev() {
            match hop.parse::<IpAddr>() {
                Ok(ip) if is_trusted(ip) => continue,
                Ok(ip) => return ip.to_string(),
                Err(_) => break,
            }
        }
    }
    peer_ip.to_string()
}

fn country(headers: &HeaderMap) -> String {
    match headers.get("x-country-code").and_then(|v| v.to_str().ok()) {
        Some(c) if !c.is_empty() && c != "ZZ" && c.len() <= 3 => c.to_string(),
        _ => "?".to_string(),
    }
}

/// What an endpoint needs from the body.
#[derive(Clone, Copy, Default)]
pub(crate) struct Needs {
    pub(crate) task: bool,
    pub(crate) stats: bool,
    pub(crate) message: bool,
    /// The message must be plain text (no control character but tabs and line breaks): it
    /// reaches the action log, pages and followers' feeds (`stop_run`).
    pub(crate) plain_message: bool,
}

/// A validated worker request.
pub(crate) struct Call {
    pub(crate) password: String,
    pub(crate) wi: WorkerInfo,
    pub(crate) task: Option<(String, usize)>,
    pub(crate) stats: Option<Stats>,
    pub(crate) message: String,
    pub(crate) spsa: Option<SpsaBlock>,
}

/// Validates upload_pgn's members (all but `pgn`): a task-bound worker request.
pub(crate) fn validate_upload(
    state: &AppState,
    req: WorkerRequest,
    peer: SocketAddr,
    headers: &HeaderMap,
) -> Result<Call, ApiError> {
    let needs = Needs {
        task: true,
        ..Needs::default()
    };
    validate(state, req, peer, headers, needs)
}

pub(crate) fn validate(
    state: &AppState,
    req: WorkerRequest,
    peer: SocketAddr,
    headers: &HeaderMap,
    needs: Needs,
) -> Result<Call, ApiError> {
    let users = state.accounts.users();
    let mut wi = parse_worker_info_with(req.worker_info, &|name| users.name_allowed(name))?;
    wi.remote_addr = client_addr(state, peer, headers);
    wi.country_code = country(headers);
    if req.task_id.is_some() && req.run_id.is_none() {
        return Err(bad("task_id requires run_id"));
    }
    let task = match (req.run_id, req.task_id) {
        (Some(run), Some(task)) => {
            let Ok(run) = run.parse::<RunId>() else {
                return Err(bad(format!("Invalid run_id: {run}")));
            };
            let task = usize::try_from(task).map_err(|_| bad("task_id out of range"))?;
            Some((run.as_str().to_ascii_lowercase(), task))
        }
        (Some(run), None) if needs.task => {
            return Err(bad(format!("missing task_id for run_id {run}")));
        }
        (Some(_), None) => return Err(bad("run_id requires task_id")),
        _ => None,
    };
    if needs.task && task.is_none() {
        return Err(bad("missing run_id and task_id"));
    }
    if needs.stats {
        let s = req.stats.ok_or_else(|| bad("missing stats"))?;
        s.check().map_err(|e| bad(format!("stats: {e}")))?;
    }
    if let Some(s) = &req.spsa
        && (s
            .wins
            .checked_add(s.losses)
            .and_then(|n| n.checked_add(s.draws))
            != Some(s.num_games)
            || s.num_games % 2 != 0
            || s.num_games > crate::protocol::STATS_MAX_GAMES)
    {
        return Err(bad(
            "spsa: num_games must be even and equal wins + losses + draws",
        ));
    }
    if needs.message && req.message.is_none() {
        return Err(bad("missing message"));
    }
    if req
        .message
        .as_ref()
        .is_some_and(|m| m.chars().count() > limits::MAX_MESSAGE)
    {
        return Err(bad(format!(
            "message is longer than {} characters",
            limits::MAX_MESSAGE
        )));
    }
    if needs.plain_message
        && req
            .message
            .as_deref()
            .is_some_and(|m| !crate::rundb::create::text_without_controls(m))
    {
        return Err(bad(
            "message must not contain control characters (other than tabs and line breaks)",
        ));
    }
    Ok(Call {
        password: req.password,
        wi,
        task,
        stats: req.stats,
        message: req.message.unwrap_or_default(),
        spsa: req.spsa,
    })
}

/// The client's address (see [`client_addr`]), for endpoints whose body is not a worker call.
pub struct ClientAddr(pub String);

impl FromRequestParts<Arc<AppState>> for ClientAddr {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, Self::Rejection> {
        let peer = parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0)
            .ok_or_else(|| ApiError::Internal("no peer address on the request".into()))?;
        Ok(ClientAddr(client_addr(state, peer, &parts.headers)))
    }
}

/// A worker endpoint's input: the socket peer, the headers and the strict body, extracted once
/// (then [`WorkerCall::validate`] for what the endpoint needs).
pub struct WorkerCall {
    pub peer: SocketAddr,
    pub headers: HeaderMap,
    pub req: WorkerRequest,
}

impl WorkerCall {
    pub(crate) fn validate(self, state: &AppState, needs: Needs) -> Result<Call, ApiError> {
        validate(state, self.req, self.peer, &self.headers, needs)
    }
}

impl FromRequest<Arc<AppState>> for WorkerCall {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &Arc<AppState>) -> Result<Self, Self::Rejection> {
        let peer = req
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0)
            .ok_or_else(|| ApiError::Internal("no peer address on the request".into()))?;
        let headers = req.headers().clone();
        let ApiJson(body) = ApiJson::<WorkerRequest>::from_request(req, state).await?;
        Ok(WorkerCall {
            peer,
            headers,
            req: body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unique_keys() {
        assert!(valid_unique_key("ab12cd34-1111-4222-8333-444455556666"));
        assert!(valid_unique_key("ab-1111-4222-8333-444455556666"));
        assert!(!valid_unique_key("a-1111-4222-8333-444455556666"));
        assert!(!valid_unique_key("ab12cd34x-1111-4222-8333-444455556666"));
        assert!(!valid_unique_key("ab12cd34-1111-4222-8333"));
        assert!(!valid_unique_key("ab12cd34-111g-4222-8333-444455556666"));
    }
}

//! The worker API and the run submission API (docs/protocol.md).
//!
//! Owns: the strict request schema (the exact 16-key `worker_info`, unknown keys refused),
//! `remote_addr` (socket, or `X-Forwarded-For` from a trusted proxy) and `country_code`
//! (`X-Country-Code`), authentication, and the request path of each endpoint:
//! validate on the loop -> domain work in the pool -> await the journal ticket (holding no
//! token and no gate slot) -> reply. request_task enters the admission gate first.
//! Must not: contain scheduling rules (that is `rundb`) or reply without `ApiReply`.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::body::Body;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::AppState;
use super::TOO_BUSY_INFO;
use super::extract::ApiJson;
use super::reply::{ApiError, ApiReply, ApiResult};
use crate::rundb::model::{Stats, WorkerInfo};
use crate::rundb::users::{MSG_INVALID, SlowCheckGuard, User, UserError};
use crate::rundb::{Reply, RunDb, RunDbError, Ticket, WORKER_VERSION};
use crate::throttle::{AuthThrottle, Verdict};

impl From<RunDbError> for ApiError {
    fn from(e: RunDbError) -> Self {
        match e {
            RunDbError::Invalid(m) => ApiError::BadRequest(m),
            RunDbError::Unauthorized(m) => ApiError::Unauthorized(m),
            RunDbError::NotFound(m) => ApiError::NotFound(m),
            RunDbError::NotPrimary => ApiError::PrimaryRequired,
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// The body every worker endpoint but request_version sends. Unknown keys are refused.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRequest {
    password: String,
    worker_info: Map<String, Value>,
    #[serde(default)]
    run_id: Option<String>,
    #[serde(default)]
    task_id: Option<u64>,
    /// Accepted in every body for the schema's sake; only upload_pgn (which reads its body
    /// itself, see `upload`) uses it, so it is skipped, not kept.
    #[serde(default, rename = "pgn")]
    _pgn: Option<serde::de::IgnoredAny>,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    spsa: Option<SpsaBlock>,
    #[serde(default)]
    stats: Option<Stats>,
}

/// update_task's `spsa` block: this batch's results and the echoed signature.
#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SpsaBlock {
    num_games: u64,
    wins: u64,
    losses: u64,
    draws: u64,
    sig: u64,
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

fn bad(m: impl Into<String>) -> ApiError {
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

/// Checks the exact key set, the types and the value rules of `worker_info`.
pub fn parse_worker_info(raw: Map<String, Value>) -> Result<WorkerInfo, ApiError> {
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
    if !crate::rundb::users::valid_username(&wi.username) {
        return Err(bad("worker_info: invalid username"));
    }
    Ok(wi)
}

/// The client address: the socket's, or, when the socket peer is a trusted proxy, the
/// `X-Forwarded-For` hop that the first trusted proxy added: the last hop that is not itself
/// a trusted proxy. (A proxy appends the address it saw to what the client sent, so the hops
/// before it are whatever the client chose to claim.)
fn client_addr(state: &AppState, peer: SocketAddr, headers: &HeaderMap) -> String {
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
struct Needs {
    task: bool,
    stats: bool,
    message: bool,
}

/// A validated worker request.
pub(super) struct Call {
    pub(super) password: String,
    pub(super) wi: WorkerInfo,
    pub(super) task: Option<(String, usize)>,
    stats: Option<Stats>,
    message: String,
    spsa: Option<SpsaBlock>,
}

/// Validates upload_pgn's members (all but `pgn`): a task-bound worker request.
pub(super) fn validate_upload(
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

fn validate(
    state: &AppState,
    req: WorkerRequest,
    peer: SocketAddr,
    headers: &HeaderMap,
    needs: Needs,
) -> Result<Call, ApiError> {
    let mut wi = parse_worker_info(req.worker_info)?;
    wi.remote_addr = client_addr(state, peer, headers);
    wi.country_code = country(headers);
    if req.task_id.is_some() && req.run_id.is_none() {
        return Err(bad("task_id requires run_id"));
    }
    let task = match (req.run_id, req.task_id) {
        (Some(run), Some(task)) => {
            if !is_hex(&run, 24) {
                return Err(bad(format!("Invalid run_id: {run}")));
            }
            let task = usize::try_from(task).map_err(|_| bad("task_id out of range"))?;
            Some((run.to_ascii_lowercase(), task))
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
    Ok(Call {
        password: req.password,
        wi,
        task,
        stats: req.stats,
        message: req.message.unwrap_or_default(),
        spsa: req.spsa,
    })
}

fn rundb(state: &AppState) -> Arc<RunDb> {
    state.rundb.clone()
}

/// The credentials of one request and where they come from.
pub(super) struct Login {
    pub(super) ip: String,
    pub(super) username: String,
    pub(super) password: String,
}

impl Login {
    fn new(
        state: &AppState,
        peer: SocketAddr,
        headers: &HeaderMap,
        username: String,
        password: String,
    ) -> Self {
        Login {
            ip: client_addr(state, peer, headers),
            username,
            password,
        }
    }
}

/// How a login that the event loop could not settle is checked in the pool.
#[derive(Clone, Copy, PartialEq, Eq)]
enum PoolCheck {
    /// The full check: store read, argon2 on a new password.
    Full,
    /// Throttled key: only a password the cache has already verified passes (a store read
    /// at most, never argon2); the `Duration` is the Retry-After of a refusal.
    KnownOnly(std::time::Duration),
}

/// What the event loop settled about a login.
enum OnLoop {
    Known(User),
    Pool(PoolCheck),
}

fn throttled(retry_after: std::time::Duration) -> ApiError {
    metrics::counter!("shoal_auth_throttled_total").increment(1);
    ApiError::Throttled {
        retry_after_s: retry_after.as_secs_f64().ceil().max(1.0) as u64,
    }
}

/// What the event loop can settle about a login without waiting: refused by the throttle,
/// or known to the credential cache; otherwise which check the pool must make.
fn login_on_loop(state: &AppState, login: &Login) -> ApiResult<OnLoop> {
    let cached = state
        .rundb
        .users
        .authenticate_cached(&login.username, &login.password);
    let check = match state.throttle.check(&login.username, &login.ip) {
        Verdict::Refuse { retry_after } => return Err(throttled(retry_after)),
        Verdict::VerifiedOnly { retry_after } => PoolCheck::KnownOnly(retry_after),
        Verdict::Allow => PoolCheck::Full,
    };
    match cached {
        Some(verdict) => {
            record_login(&state.throttle, login, check, false, verdict).map(OnLoop::Known)
        }
        None => Ok(OnLoop::Pool(check)),
    }
}

/// The pool's part of a login check.
fn login_in_pool(
    db: &RunDb,
    throttle: &AuthThrottle,
    login: &Login,
    check: PoolCheck,
) -> ApiResult<User> {
    match check {
        PoolCheck::Full => {
            // The guard records every verdict itself, inside the user's single flight, and
            // re-checks the throttle before each argon2 run: concurrent guesses are bounded
            // exactly.
            let guard = ThrottleGuard { throttle, login };
            let verdict = db
                .users
                .authenticate_guarded(&login.username, &login.password, &guard);
            record_login(throttle, login, check, true, verdict)
        }
        PoolCheck::KnownOnly(_) => {
            let verdict = db
                .users
                .authenticate_known(&login.username, &login.password)
                .unwrap_or(Err(UserError::Refused(MSG_INVALID)));
            record_login(throttle, login, check, false, verdict)
        }
    }
}

/// The throttle, as the password check's guard for one login.
struct ThrottleGuard<'a> {
    throttle: &'a AuthThrottle,
    login: &'a Login,
}

impl SlowCheckGuard for ThrottleGuard<'_> {
    fn may_check(&self) -> Result<(), std::time::Duration> {
        match self.throttle.check(&self.login.username, &self.login.ip) {
            Verdict::Allow => Ok(()),
            Verdict::Refuse { retry_after } | Verdict::VerifiedOnly { retry_after } => {
                Err(retry_after)
            }
        }
    }

    fn checked(&self, right: bool) {
        if right {
            self.throttle
                .succeeded(&self.login.username, &self.login.ip);
        } else {
            self.throttle.failed(&self.login.username, &self.login.ip);
        }
    }
}

/// Records the outcome of a password check with the throttle and turns it into the reply's
/// error. Only a wrong password or an unknown user counts as a failure (a blocked or pending
/// account gave the right password); a throttled key's failure is answered 429.
fn record_login(
    throttle: &AuthThrottle,
    login: &Login,
    check: PoolCheck,
    recorded: bool,
    verdict: Result<User, UserError>,
) -> ApiResult<User> {
    let wrong = matches!(&verdict, Err(UserError::Refused(m)) if *m == MSG_INVALID);
    if wrong {
        metrics::counter!("shoal_auth_failures_total").increment(1);
        if !recorded {
            throttle.failed(&login.username, &login.ip);
        }
    }
    match verdict {
        Ok(user) => {
            if !recorded {
                throttle.succeeded(&login.username, &login.ip);
            }
            Ok(user)
        }
        Err(UserError::Throttled(retry_after)) => Err(throttled(retry_after)),
        Err(UserError::Refused(m)) => {
            if m != MSG_INVALID {
                return Err(RunDbError::Unauthorized(m.to_string()).into());
            }
            match check {
                PoolCheck::KnownOnly(retry_after) => Err(throttled(retry_after)),
                PoolCheck::Full => Err(RunDbError::Unauthorized(m.to_string()).into()),
            }
        }
        Err(e) => Err(RunDbError::from(e).into()),
    }
}

/// Checks a login: throttle and credential cache on the event loop, else the pool (store
/// read, argon2, single flight per user).
pub(super) async fn credentials(state: &AppState, login: Login) -> ApiResult<User> {
    let check = match login_on_loop(state, &login)? {
        OnLoop::Known(user) => return Ok(user),
        OnLoop::Pool(check) => check,
    };
    let db = rundb(state);
    let throttle = state.throttle.clone();
    state
        .offload
        .run(move || login_in_pool(&db, &throttle, &login, check))
        .await?
}

/// Checks the login, then runs `work` in the pool: one pool job when the credential cache
/// settles the login on the loop, and also one (check and work together) when it does not.
async fn with_user<T, F>(state: &AppState, login: Login, work: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce(&RunDb, User) -> Result<T, RunDbError> + Send + 'static,
{
    let on_loop = login_on_loop(state, &login)?;
    with_login(state, login, on_loop, work).await
}

/// [`with_user`] for a login the event loop has already looked at (once: each look at an
/// uncached password reserves a failure in the throttle).
async fn with_login<T, F>(state: &AppState, login: Login, on_loop: OnLoop, work: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce(&RunDb, User) -> Result<T, RunDbError> + Send + 'static,
{
    let db = rundb(state);
    let throttle = state.throttle.clone();
    let out = state
        .offload
        .run(move || -> ApiResult<T> {
            let user = match on_loop {
                OnLoop::Known(user) => user,
                OnLoop::Pool(check) => login_in_pool(&db, &throttle, &login, check)?,
            };
            Ok(work(&db, user)?)
        })
        .await??;
    Ok(out)
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
pub async fn request_version(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
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
    credentials(
        &state,
        Login::new(&state, peer, &headers, username, password),
    )
    .await?;
    Ok(ApiReply::json(json!({"version": WORKER_VERSION})))
}

/// POST /api/request_task: the gate, then the scheduler.
pub async fn request_task(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<WorkerRequest>,
) -> ApiResult {
    let call = validate(&state, req, peer, &headers, Needs::default())?;
    // Credentials before the gate: a caller with a wrong password (a spray) never takes a
    // place a real worker needs, and a password check (argon2 on a cold cache) never runs
    // inside the scheduler's critical section. (Fishtest validates before its semaphore too.)
    let login = Login {
        ip: call.wi.remote_addr.clone(),
        username: call.wi.username.clone(),
        password: call.password.clone(),
    };
    let user = credentials(&state, login).await?;
    // Phase 1 of the gate before any pool token: a refused caller costs nothing (no token,
    // no thread; docs/capacity.md).
    let Ok(place) = state.gate.admit().await else {
        return Ok(ApiReply::json(
            json!({"task_waiting": false, "info": TOO_BUSY_INFO}),
        ));
    };
    // Phase 2: the scheduler slot, in arrival order.
    let Ok(permit) = place.slot().await else {
        return Ok(ApiReply::json(
            json!({"task_waiting": false, "info": TOO_BUSY_INFO}),
        ));
    };
    let db = rundb(&state);
    let wi = call.wi;
    // The slot holder takes the pool's reserved token: it never queues behind other traffic.
    let (reply, ticket) = state
        .offload
        .run_reserved(move || {
            // The permit lives in the closure: the slot is held until the work ends.
            let _permit = permit;
            db.request_task(&user, wi)
        })
        .await??;
    durable(reply, ticket).await
}

/// What a task-bound endpoint does once the caller is authenticated (runs in the pool).
type TaskWork = fn(&RunDb, TaskCall) -> Result<(Reply, Option<Ticket>), RunDbError>;

/// Work that may be done on the event loop when it needs no wait (never blocks: `None` means
/// "take the pool path").
type FastWork = fn(&RunDb, &TaskCall) -> Option<Result<Reply, RunDbError>>;

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
    peer: SocketAddr,
    headers: &HeaderMap,
    req: WorkerRequest,
    needs: Needs,
    work: TaskWork,
) -> ApiResult {
    task_bound_or_fast(state, peer, headers, req, needs, work, None).await
}

/// [`task_bound`], first trying `fast` on the event loop (labelled for metrics).
async fn task_bound_or_fast(
    state: &AppState,
    peer: SocketAddr,
    headers: &HeaderMap,
    req: WorkerRequest,
    needs: Needs,
    work: TaskWork,
    fast: Option<(&'static str, FastWork)>,
) -> ApiResult {
    let needs = Needs {
        task: true,
        ..needs
    };
    let call = validate(state, req, peer, headers, needs)?;
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
            return Ok(ApiReply::ok(result?));
        }
    }
    let (reply, ticket) = with_login(state, login, on_loop, move |db, _| work(db, task)).await?;
    durable(reply, ticket).await
}

/// POST /api/update_task.
pub async fn update_task(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<WorkerRequest>,
) -> ApiResult {
    let needs = Needs {
        stats: true,
        ..Needs::default()
    };
    task_bound(&state, peer, &headers, req, needs, |db, c| {
        db.update_task(&c.run_id, c.task_id, c.stats, c.spsa, c.wi)
    })
    .await
}

/// POST /api/beat.
pub async fn beat(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<WorkerRequest>,
) -> ApiResult {
    task_bound_or_fast(
        &state,
        peer,
        &headers,
        req,
        Needs::default(),
        |db, c| db.beat(&c.run_id, c.task_id, &c.wi).map(|r| (r, None)),
        // Usually answered on the event loop: a beat is a timestamp in memory.
        Some(("beat", |db, c| db.try_beat(&c.run_id, c.task_id, &c.wi))),
    )
    .await
}

/// POST /api/request_spsa.
pub async fn request_spsa(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<WorkerRequest>,
) -> ApiResult {
    task_bound(&state, peer, &headers, req, Needs::default(), |db, c| {
        db.request_spsa(&c.run_id, c.task_id, &c.wi)
    })
    .await
}

/// POST /api/failed_task.
pub async fn failed_task(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<WorkerRequest>,
) -> ApiResult {
    task_bound(&state, peer, &headers, req, Needs::default(), |db, c| {
        db.failed_task(&c.run_id, c.task_id, &c.message, &c.wi)
    })
    .await
}

/// POST /api/stop_run.
pub async fn stop_run(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<WorkerRequest>,
) -> ApiResult {
    task_bound(&state, peer, &headers, req, Needs::default(), |db, c| {
        db.stop_run(&c.run_id, c.task_id, &c.message, &c.wi)
    })
    .await
}

/// POST /api/worker_log.
pub async fn worker_log(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<WorkerRequest>,
) -> ApiResult {
    let needs = Needs {
        message: true,
        ..Needs::default()
    };
    let call = validate(&state, req, peer, &headers, needs)?;
    let username = call.wi.username.clone();
    let (wi, message, task) = (call.wi, call.message, call.task);
    let login = Login {
        ip: wi.remote_addr.clone(),
        username,
        password: call.password,
    };
    let reply = with_user(&state, login, move |db, _| {
        db.worker_log(&message, task.as_ref().map(|(r, t)| (r.as_str(), *t)), &wi)
    })
    .await?;
    Ok(ApiReply::ok(reply))
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
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<CreateRunRequest>,
) -> ApiResult {
    let args = req.args;
    let run_id = with_user(
        &state,
        Login::new(&state, peer, &headers, req.username, req.password),
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
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ApproveRunRequest>,
) -> ApiResult {
    if !is_hex(&req.run_id, 24) {
        return Err(bad(format!("Invalid run_id: {}", req.run_id)));
    }
    let run_id = req.run_id.clone();
    with_user(
        &state,
        Login::new(&state, peer, &headers, req.username, req.password),
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
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    ApiJson(req): ApiJson<ApproveRunRequest>,
) -> ApiResult {
    if !is_hex(&req.run_id, 24) {
        return Err(bad(format!("Invalid run_id: {}", req.run_id)));
    }
    let run_id = req.run_id.clone();
    let outcome = with_user(
        &state,
        Login::new(&state, peer, &headers, req.username, req.password),
        move |db, user| db.purge_run(&run_id, &user),
    )
    .await?;
    Ok(ApiReply::json(json!({
        "run_id": req.run_id,
        "purged_tasks": outcome.purged,
        "revived": outcome.revived,
    })))
}

/// Chunk size for PGN downloads: each chunk is one pool job.
const CHUNK: usize = 256 * 1024;

/// Reads up to `CHUNK` bytes of one source from an offset (blocking; run in the pool).
type ReadChunk<T> = Arc<dyn Fn(&T, u64) -> std::io::Result<Vec<u8>> + Send + Sync>;

/// Streams a list of sources (stored PGNs, a net file) one pool-read chunk at a time, so a
/// download is never buffered whole and never blocks the event loop.
fn stream_chunks<T: Clone + Send + Sync + 'static>(
    state: &Arc<AppState>,
    sources: Vec<T>,
    read: ReadChunk<T>,
) -> Body {
    let offload = state.offload.clone();
    let stream = futures::stream::unfold(
        (sources.into_iter(), None::<(T, u64)>),
        move |(mut rest, mut current)| {
            let offload = offload.clone();
            let read = read.clone();
            async move {
                loop {
                    let (source, offset) = match current.take() {
                        Some(c) => c,
                        None => (rest.next()?, 0),
                    };
                    let (s, r) = (source.clone(), read.clone());
                    let chunk = offload
                        .run(move || r(&s, offset))
                        .await
                        .map_err(|e| std::io::Error::other(e.to_string()))
                        .and_then(|r| r);
                    match chunk {
                        Ok(bytes) if bytes.is_empty() => continue,
                        Ok(bytes) => {
                            let next = Some((source, offset + bytes.len() as u64));
                            return Some((Ok(bytes), (rest, next)));
                        }
                        Err(e) => return Some((Err(e), (rest, None))),
                    }
                }
            }
        },
    );
    Body::from_stream(stream)
}

fn stream_pgns(state: &Arc<AppState>, pgns: Vec<crate::rundb::queries::PgnInfo>) -> Body {
    let db = rundb(state);
    let read: ReadChunk<crate::rundb::queries::PgnInfo> = Arc::new(move |p, offset| {
        db.pgn_chunk(p, offset, CHUNK)
            .map_err(|e| std::io::Error::other(e.to_string()))
    });
    stream_chunks(state, pgns, read)
}

/// GET /api/nn/{name}: the net file (or a 302 to `nn_url`), counting the download.
pub async fn download_net(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    use crate::rundb::nets;
    if !nets::valid_name(&name) {
        return Err(ApiError::NotFound("Not Found".into()));
    }
    let path = nets::net_dir(&state.config.data_dir).join(&name);
    let db = rundb(&state);
    let (n, p) = (name.clone(), path.clone());
    let exists = state
        .offload
        .run(move || -> Result<bool, ApiError> {
            let exists = p.is_file();
            if exists {
                db.count_net_download(&n)?;
            }
            Ok(exists)
        })
        .await??;
    if let Some(base) = &state.config.nn_url {
        let location = format!("{}/{name}", base.trim_end_matches('/'));
        let mut r = StatusCode::FOUND.into_response();
        if let Ok(v) = HeaderValue::from_str(&location) {
            r.headers_mut().insert(header::LOCATION, v);
        }
        return Ok(r);
    }
    if !exists {
        return Err(ApiError::NotFound("Not Found".into()));
    }
    let read: ReadChunk<std::path::PathBuf> = Arc::new(|path, offset| {
        use std::os::unix::fs::FileExt as _;
        let file = std::fs::File::open(path)?;
        let mut buf = vec![0u8; CHUNK];
        let n = file.read_at(&mut buf, offset)?;
        buf.truncate(n);
        Ok(buf)
    });
    let mut r = (StatusCode::OK, stream_chunks(&state, vec![path], read)).into_response();
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    Ok(r)
}

fn gzip_response(body: Body, content_type: &'static str, encoded: bool) -> Response {
    let mut r = (StatusCode::OK, body).into_response();
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    if encoded {
        h.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
    }
    r
}

/// GET /api/pgn/{run_id}-{task_id}.pgn: the stored gzip, as `Content-Encoding: gzip`.
pub async fn download_pgn(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let key = name
        .strip_suffix(".pgn")
        .filter(|k| {
            k.split_once('-').is_some_and(|(r, t)| {
                is_hex(r, 24) && !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit())
            })
        })
        .ok_or_else(|| ApiError::NotFound("Not Found".into()))?
        .to_string();
    let db = rundb(&state);
    let found = state.offload.run(move || db.pgn_latest(&key)).await??;
    let Some(last) = found else {
        return Err(ApiError::NotFound("Not Found".into()));
    };
    Ok(gzip_response(
        stream_pgns(&state, vec![last]),
        "application/x-chess-pgn",
        true,
    ))
}

/// GET /api/run_pgns/{run_id}.pgn.gz: every task's gzip member, in task order.
pub async fn download_run_pgns(
    State(state): State<Arc<AppState>>,
    Path(name): Path<String>,
) -> Result<Response, ApiError> {
    let run_id = name
        .strip_suffix(".pgn.gz")
        .filter(|r| is_hex(r, 24))
        .ok_or_else(|| ApiError::NotFound("Not Found".into()))?
        .to_string();
    let db = rundb(&state);
    let list = state.offload.run(move || db.pgns_of_run(&run_id)).await??;
    if list.is_empty() {
        return Err(ApiError::NotFound("Not Found".into()));
    }
    Ok(gzip_response(
        stream_pgns(&state, list),
        "application/gzip",
        false,
    ))
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

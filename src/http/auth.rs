//! Logins at the HTTP edge: every authenticated endpoint checks its credentials here, and
//! Fishtest's texts for a refused login are made here.
//!
//! Owns: running the accounts' login policy in its two places (`Accounts::login_on_loop` on
//! the event loop; on a miss one pool job, `Accounts::login_in_pool`, alone or together with
//! the request's work), and the texts Fishtest's worker and login page expect for a refusal
//! ([`MSG_INVALID`], [`MSG_BLOCKED`], [`MSG_PENDING`]; `http::error` maps an `AuthError` to its
//! status with them).
//! Scripts may present an API token instead (`Authorization: Bearer shoal_…`, [`Cred`]): it
//! is looked up in the pool ([`with_cred`]), a read-only token is refused (403) on an
//! endpoint that changes something, its use is counted against the rate scope `api_token`
//! (and the endpoint's own scope) keyed by its owner, and logged.
//! Must not: decide who may log in (the accounts do), know endpoints beyond the name and
//! whether it writes that the handler passes, or compare messages.

use std::sync::Arc;

use axum::http::{HeaderMap, header};

use super::reply::{ApiError, ApiResult};
use super::state::AppState;
use crate::accounts::{AuthError, TokenInfo, User};
use crate::limits::{KeyCtx, Scope};
use crate::offload::OffloadError;
use crate::rundb::{RunDb, RunDbError};

pub(crate) use crate::accounts::{Login, OnLoop};

pub use super::error::{MSG_BLOCKED, MSG_INVALID, MSG_PENDING, retry_after_s};

pub(crate) fn rundb(state: &AppState) -> Arc<RunDb> {
    state.rundb.clone()
}

/// What the event loop settles about a login (see `Accounts::login_on_loop`); a throttled key
/// is the 429 at once.
pub(crate) fn login_on_loop(state: &AppState, login: &Login) -> ApiResult<OnLoop> {
    Ok(state.accounts.login_on_loop(login)?)
}

/// Checks a login: the throttle and the credential cache on the event loop, else the pool
/// (store read, argon2, single flight per user). The outer `Err` is the pool's failure; the
/// inner one says why the login was refused.
pub(crate) async fn authenticate(
    state: &AppState,
    login: Login,
) -> Result<Result<User, AuthError>, OffloadError> {
    let check = match state.accounts.login_on_loop(&login) {
        Ok(OnLoop::Known(user)) => return Ok(Ok(user)),
        Ok(OnLoop::Pool(check)) => check,
        Err(refused) => return Ok(Err(refused)),
    };
    let accounts = state.accounts.clone();
    state
        .offload
        .run(move || accounts.login_in_pool(&login, check))
        .await
}

/// [`authenticate`] with a refusal as the API's error (401, 429, …).
pub(crate) async fn credentials(state: &AppState, login: Login) -> ApiResult<User> {
    Ok(authenticate(state, login).await??)
}

/// Checks the login, then runs `work` in the pool: one pool job when the credential cache
/// settles the login on the loop, and also one (check and work together) when it does not.
pub(crate) async fn with_user<T, F>(state: &AppState, login: Login, work: F) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce(&RunDb, User) -> Result<T, RunDbError> + Send + 'static,
{
    let on_loop = login_on_loop(state, &login)?;
    with_login(state, login, on_loop, work).await
}

/// [`with_user`] for a login the event loop has already looked at (once: each look at an
/// uncached password reserves a failure in the throttle).
pub(crate) async fn with_login<T, F>(
    state: &AppState,
    login: Login,
    on_loop: OnLoop,
    work: F,
) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce(&RunDb, User) -> Result<T, RunDbError> + Send + 'static,
{
    let db = rundb(state);
    let accounts = state.accounts.clone();
    let out = state
        .offload
        .run(move || -> ApiResult<T> {
            let user = match on_loop {
                OnLoop::Known(user) => user,
                OnLoop::Pool(check) => accounts.login_in_pool(&login, check)?,
            };
            Ok(work(&db, user)?)
        })
        .await??;
    Ok(out)
}

/// How a script's call is authenticated: a username and password in the body, or an API
/// token in `Authorization: Bearer`.
pub(crate) enum Cred {
    Password(Login),
    Token { ip: String, token: String },
}

/// The bearer token of a request's `Authorization` header, if it has one; `Err` for an
/// `Authorization` header that is not `Bearer <token>`.
pub(crate) fn bearer(headers: &HeaderMap) -> ApiResult<Option<String>> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let text = value.to_str().unwrap_or_default().trim();
    match text.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") && !token.is_empty() => {
            Ok(Some(token.trim().to_string()))
        }
        _ => Err(ApiError::Unauthorized(
            "Authorization must be \"Bearer <API token>\"".into(),
        )),
    }
}

/// The credentials of a script's call: a bearer token, or the body's username and password
/// (never both).
pub(crate) fn cred(
    headers: &HeaderMap,
    ip: String,
    username: Option<String>,
    password: Option<String>,
) -> ApiResult<Cred> {
    match (bearer(headers)?, username, password) {
        (Some(token), None, None) => Ok(Cred::Token { ip, token }),
        (Some(_), _, _) => Err(ApiError::BadRequest(
            "send an API token (Authorization: Bearer) or username and password, not both".into(),
        )),
        (None, Some(username), Some(password)) => {
            Ok(Cred::Password(Login::at(ip, username, password)))
        }
        (None, _, _) => Err(ApiError::BadRequest(
            "missing username and password (or an API token in Authorization: Bearer)".into(),
        )),
    }
}

/// A token's check, in the pool: its owner (refused if blocked or pending), a read-only token
/// refused on an endpoint that `writes`, then the rate scopes `api_token` and `endpoint`
/// keyed by the owner.
pub(crate) fn token_gate(
    state: &AppState,
    ip: &str,
    token: &str,
    endpoint: &str,
    writes: bool,
) -> ApiResult<(User, TokenInfo)> {
    let (user, info) = state.accounts.token_login(token)?;
    if writes && info.read_only {
        return Err(ApiError::Forbidden(format!(
            "the API token {:?} is read-only and {endpoint} changes data",
            info.name
        )));
    }
    let ctx = KeyCtx {
        user: Some(&user.username),
        ip: Some(ip),
        ..Default::default()
    };
    let limits = state.scheduler.limits();
    let now = std::time::Instant::now();
    limits.rate_check(&Scope::Endpoint("api_token".into()), &ctx, now)?;
    limits.rate_check(&Scope::Endpoint(endpoint.into()), &ctx, now)?;
    Ok((user, info))
}

/// Runs `work` for the caller of `cred`: [`with_user`] for a password; for a token one pool
/// job ([`token_gate`], the work, the use logged).
pub(crate) async fn with_cred<T, F>(
    state: &Arc<AppState>,
    cred: Cred,
    endpoint: &'static str,
    writes: bool,
    work: F,
) -> ApiResult<T>
where
    T: Send + 'static,
    F: FnOnce(&RunDb, User) -> Result<T, RunDbError> + Send + 'static,
{
    let (ip, token) = match cred {
        Cred::Password(login) => return with_user(state, login, work).await,
        Cred::Token { ip, token } => (ip, token),
    };
    let st = state.clone();
    state
        .offload
        .run(move || -> ApiResult<T> {
            let (user, info) = token_gate(&st, &ip, &token, endpoint, writes)?;
            let out = work(&st.rundb, user)?;
            st.accounts.token_used(&info, endpoint)?;
            Ok(out)
        })
        .await?
}

//! Logins at the HTTP edge: every authenticated endpoint checks its credentials here, and
//! Fishtest's texts for a refused login are made here.
//!
//! Owns: running the accounts' login policy in its two places (`Accounts::login_on_loop` on
//! the event loop; on a miss one pool job, `Accounts::login_in_pool`, alone or together with
//! the request's work), and the texts Fishtest's worker and login page expect for a refusal
//! ([`MSG_INVALID`], [`MSG_BLOCKED`], [`MSG_PENDING`]; `http::error` maps an `AuthError` to its
//! status with them).
//! Must not: decide who may log in (the accounts do), know endpoints, or compare messages.

use std::sync::Arc;

use super::reply::ApiResult;
use super::state::AppState;
use crate::accounts::{AuthError, User};
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

//! Logins: every authenticated endpoint checks its credentials here.
//!
//! Owns: the login path — the throttle's verdict and the credential cache on the event loop;
//! on a miss one pool job (the full check guarded by the throttle inside the user's single
//! flight, or "verified passwords only" for a throttled address or user); recording each
//! verdict; 429 for throttled keys.
//! Must not: know endpoints or reply shapes beyond the error it returns.

use std::sync::Arc;

use super::reply::{ApiError, ApiResult};
use super::state::AppState;
use crate::rundb::users::{MSG_INVALID, SlowCheckGuard, User, UserError};
use crate::rundb::{RunDb, RunDbError};
use crate::throttle::{AuthThrottle, Verdict};

pub(crate) fn rundb(state: &AppState) -> Arc<RunDb> {
    state.rundb.clone()
}

/// The credentials of one request and where they come from.
pub(crate) struct Login {
    pub(crate) ip: String,
    pub(crate) username: String,
    pub(crate) password: String,
}

impl Login {
    /// A login from a known client address.
    pub(crate) fn at(ip: String, username: String, password: String) -> Self {
        Login {
            ip,
            username,
            password,
        }
    }
}

/// How a login that the event loop could not settle is checked in the pool.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum PoolCheck {
    /// The full check: store read, argon2 on a new password.
    Full,
    /// Throttled key: only a password the cache has already verified passes (a store read
    /// at most, never argon2); the `Duration` is the Retry-After of a refusal.
    KnownOnly(std::time::Duration),
}

/// What the event loop settled about a login.
pub(crate) enum OnLoop {
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
pub(crate) fn login_on_loop(state: &AppState, login: &Login) -> ApiResult<OnLoop> {
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
pub(crate) async fn credentials(state: &AppState, login: Login) -> ApiResult<User> {
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

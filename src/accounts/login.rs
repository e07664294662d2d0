//! The login policy: how every authenticated request's credentials are checked.
//!
//! Owns: the order of the checks and who records what. On the event loop
//! ([`Accounts::login_on_loop`]): the throttle's verdict for (user, address) and the credential
//! cache, each without a wait; a refused key is [`AuthError::Throttled`] at once. What the loop
//! cannot settle goes to the pool ([`Accounts::login_in_pool`]): the full check, guarded by the
//! throttle inside the user's single flight (asked again before each argon2 run, told each
//! verdict), or "verified passwords only" for a throttled address or user. Only a wrong
//! password or an unknown user counts as a failure (a blocked or pending account gave the
//! right password); a throttled key's wrong password is answered as throttled.
//! Must not: know HTTP or reply texts (the HTTP layer turns an [`AuthError`] into Fishtest's
//! messages); wait for a lock in `login_on_loop`.

use std::time::Duration;

use super::throttle::{AuthThrottle, Verdict};
use super::{Accounts, AuthError, SlowCheckGuard, User};

/// The credentials of one request and where they come from.
pub struct Login {
    pub ip: String,
    pub username: String,
    pub password: String,
}

impl Login {
    /// A login from a known client address.
    pub fn at(ip: String, username: String, password: String) -> Self {
        Login {
            ip,
            username,
            password,
        }
    }
}

/// How a login that the event loop could not settle is checked in the pool.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum PoolCheck {
    /// The full check: store read, argon2 on a new password.
    Full,
    /// Throttled key: only a password the cache has already verified passes (a store read
    /// at most, never argon2); the `Duration` is the Retry-After of a refusal.
    KnownOnly(Duration),
}

/// What the event loop settled about a login.
pub enum OnLoop {
    Known(User),
    Pool(PoolCheck),
}

/// A throttled login, counted.
fn throttled(retry_after: Duration) -> AuthError {
    metrics::counter!("shoal_auth_throttled_total").increment(1);
    AuthError::Throttled { retry_after }
}

impl Accounts {
    /// What the event loop can settle about a login without waiting: refused by the throttle,
    /// or known to the credential cache; otherwise which check the pool must make. Call it
    /// once per login: each look at an uncached password reserves a failure in the throttle.
    pub fn login_on_loop(&self, login: &Login) -> Result<OnLoop, AuthError> {
        let cached = self
            .users
            .authenticate_cached(&login.username, &login.password);
        let check = match self.throttle.check(&login.username, &login.ip) {
            Verdict::Refuse { retry_after } => return Err(throttled(retry_after)),
            Verdict::VerifiedOnly { retry_after } => PoolCheck::KnownOnly(retry_after),
            Verdict::Allow => PoolCheck::Full,
        };
        match cached {
            Some(verdict) => self
                .record_login(login, check, false, verdict)
                .map(OnLoop::Known),
            None => Ok(OnLoop::Pool(check)),
        }
    }

    /// The pool's part of a login check (blocking: store reads, argon2).
    pub fn login_in_pool(&self, login: &Login, check: PoolCheck) -> Result<User, AuthError> {
        match check {
            PoolCheck::Full => {
                // The guard records every verdict itself, inside the user's single flight, and
                // re-checks the throttle before each argon2 run: concurrent guesses are bounded
                // exactly.
                let guard = ThrottleGuard {
                    throttle: &self.throttle,
                    login,
                };
                let verdict =
                    self.users
                        .authenticate_guarded(&login.username, &login.password, &guard);
                self.record_login(login, check, true, verdict)
            }
            PoolCheck::KnownOnly(_) => {
                let verdict = self
                    .users
                    .authenticate_known(&login.username, &login.password)
                    .unwrap_or(Err(AuthError::WrongPassword));
                self.record_login(login, check, false, verdict)
            }
        }
    }

    /// Records the outcome of a password check with the throttle (unless the guard already
    /// did: `recorded`). A throttled key's wrong password becomes a throttled refusal.
    fn record_login(
        &self,
        login: &Login,
        check: PoolCheck,
        recorded: bool,
        verdict: Result<User, AuthError>,
    ) -> Result<User, AuthError> {
        if matches!(verdict, Err(AuthError::WrongPassword)) {
            metrics::counter!("shoal_auth_failures_total").increment(1);
            if !recorded {
                self.throttle.failed(&login.username, &login.ip);
            }
        }
        match verdict {
            Ok(user) => {
                if !recorded {
                    self.throttle.succeeded(&login.username, &login.ip);
                }
                Ok(user)
            }
            Err(AuthError::Throttled { retry_after }) => Err(throttled(retry_after)),
            Err(AuthError::WrongPassword) => match check {
                PoolCheck::KnownOnly(retry_after) => Err(throttled(retry_after)),
                PoolCheck::Full => Err(AuthError::WrongPassword),
            },
            Err(e) => Err(e),
        }
    }
}

/// The throttle, as the password check's guard for one login.
struct ThrottleGuard<'a> {
    throttle: &'a AuthThrottle,
    login: &'a Login,
}

impl SlowCheckGuard for ThrottleGuard<'_> {
    fn may_check(&self) -> Result<(), Duration> {
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

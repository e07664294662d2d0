//! The credential cache: every worker call carries the password, and an argon2 verification
//! costs tens of milliseconds by design; so after one successful verification the cache keeps
//! an HMAC of the password under a per-process random key, and later calls compare HMACs
//! (about a microsecond). The entry is bound to the stored password hash, so a password change
//! invalidates it; blocked/pending flags are re-read from the store at most [`USER_TTL`] later
//! (Fishtest caches them for 1–2 s). Failed passwords are remembered too, for a user that
//! exists and for one that does not alike, so timing tells nothing about which names exist.
//!
//! Owns: `authenticate` and its forms (guarded by a [`SlowCheckGuard`], cached only on the
//! event loop, known passwords only), the single flight per user name, the remembered refusals.
//! Must not: log passwords; wait for a lock in `authenticate_cached` (it runs on the event
//! loop: it only tries).

use std::time::{Duration, Instant};

use hmac::Mac;
use subtle::ConstantTimeEq;

use super::passwords::{PasswordMode, dummy_hash, move_to_hash, verify_slow};
use super::{Cached, USER_TTL, Users};
use crate::accounts::{AuthError, User, UserError};

/// What [`Users::authenticate_guarded`] asks before each slow (argon2) check and tells after
/// every password verdict. Slow checks of one user name run one at a time, so a guard that
/// counts failures bounds the checks of concurrent guesses exactly.
pub trait SlowCheckGuard {
    /// `Err(retry_after)` to refuse the check.
    fn may_check(&self) -> Result<(), Duration>;
    /// The password was right (`true`) or wrong, or the user unknown (`false`).
    fn checked(&self, right: bool);
}

/// A guard that allows everything and records nothing.
pub struct NoGuard;

impl SlowCheckGuard for NoGuard {
    fn may_check(&self) -> Result<(), Duration> {
        Ok(())
    }
    fn checked(&self, _right: bool) {}
}

/// How many failing passwords are remembered per user name, and for how long — the same for
/// a user that exists (in its cache entry) and for one that does not (in `unknown`): a
/// repeated attempt for a user that does not exist is refused as fast as a repeated wrong
/// password of one that does, and a forgotten one as slowly, so timing tells nothing (and a
/// repeat costs no second argon2 run).
pub(super) const REJECTED_KEPT: usize = 4;
pub(super) const REMEMBERED_TTL: Duration = Duration::from_secs(60);

/// How many (unknown user, password) attempts are remembered in all.
const UNKNOWN_KEPT: usize = 4096;

impl Cached {
    /// What the cache already knows of this password: `Some(true)` verified, `Some(false)`
    /// failed before, `None` unknown.
    fn verdict(&self, mac: &[u8; 32]) -> Option<bool> {
        if self.verified.is_some_and(|v| bool::from(v.ct_eq(mac))) {
            Some(true)
        } else if self
            .rejected
            .iter()
            .any(|(r, at)| at.elapsed() < REMEMBERED_TTL && bool::from(r.ct_eq(mac)))
        {
            Some(false)
        } else {
            None
        }
    }
}

impl Users {
    fn mac(&self, username: &str, password: &str) -> [u8; 32] {
        // Keyed with a per-process secret: a leaked cache reveals nothing reusable.
        let mut mac = self.mac_key.clone();
        mac.update(username.as_bytes());
        mac.update(&[0]);
        mac.update(password.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Checks credentials as the worker API does. Blocking (may read the store and run
    /// argon2): call it from the offload pool. Concurrent calls for one username verify once.
    pub fn authenticate(&self, username: &str, password: &str) -> Result<User, AuthError> {
        self.authenticate_guarded(username, password, &NoGuard)
    }

    /// [`Users::authenticate`], asking `guard` before every slow check and telling it every
    /// password verdict (a remembered one too).
    pub fn authenticate_guarded(
        &self,
        username: &str,
        password: &str,
        guard: &dyn SlowCheckGuard,
    ) -> Result<User, AuthError> {
        let mac = self.mac(username, password);
        let remembered_unknown = |this: &Self| {
            this.unknown
                .lock()
                .iter()
                .any(|(_, m, at)| at.elapsed() < REMEMBERED_TTL && bool::from(m.ct_eq(&mac)))
        };
        if remembered_unknown(self) {
            guard.checked(false);
            return Err(AuthError::WrongPassword);
        }
        let user = self.get(username)?;
        let known = |this: &Self, user: &User| {
            this.cache
                .lock()
                .get(username)
                .filter(|c| c.user.secret() == user.secret())
                .and_then(|c| c.verdict(&mac))
        };
        if let Some(user) = &user
            && let Some(v) = known(self, user)
        {
            guard.checked(v);
            return if v {
                admit(user.clone())
            } else {
                Err(AuthError::WrongPassword)
            };
        }
        // A slow check: one at a time per user name (single flight).
        let lock = self
            .verifying
            .lock()
            .entry(username.to_string())
            .or_default()
            .clone();
        let mut upgraded = None;
        let verdict = {
            let _one = lock.lock();
            // Whoever held the lock before us may have settled this very password.
            let settled = match &user {
                Some(user) => known(self, user),
                None => remembered_unknown(self).then_some(false),
            };
            match settled {
                Some(v) => Ok(v),
                None => match guard.may_check() {
                    Err(retry_after) => Err(AuthError::Throttled { retry_after }),
                    Ok(()) => {
                        let v = match &user {
                            Some(user) => self
                                .verify_and_remember(user, password, mac)
                                .map(|now| {
                                    // The document as the check left it (a plaintext
                                    // moved to its hash): what a session must be made for.
                                    let verified = now.is_some();
                                    upgraded = now;
                                    verified
                                })
                                .map_err(AuthError::from),
                            None => {
                                self.check_unknown(username, password, mac);
                                Ok(false)
                            }
                        };
                        // Told inside the single flight: the next guess sees this one.
                        if let Ok(v) = v {
                            guard.checked(v);
                        }
                        v
                    }
                },
            }
        };
        {
            // Drop the per-user lock once nobody else holds it (the map and we do).
            let mut verifying = self.verifying.lock();
            if std::sync::Arc::strong_count(&lock) <= 2 {
                verifying.remove(username);
            }
        }
        match (verdict?, upgraded.or(user)) {
            (true, Some(user)) => admit(user),
            _ => Err(AuthError::WrongPassword),
        }
    }

    /// The slow check for a user that does not exist: as slow as a wrong password of a real
    /// user (no enumeration by timing), then remembered.
    fn check_unknown(&self, username: &str, password: &str, mac: [u8; 32]) {
        self.slow_checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        metrics::counter!("shoal_auth_slow_checks_total").increment(1);
        let _ = verify_slow(dummy_hash(), password);
        let mut unknown = self.unknown.lock();
        let now = Instant::now();
        while unknown
            .front()
            .is_some_and(|(_, _, at)| now.duration_since(*at) >= REMEMBERED_TTL)
            || unknown.len() >= UNKNOWN_KEPT
        {
            unknown.pop_front();
        }
        // No more per name than a real user's cache entry keeps.
        let mut same = unknown.iter().filter(|(u, _, _)| u == username).count();
        while same >= REJECTED_KEPT {
            if let Some(i) = unknown.iter().position(|(u, _, _)| u == username) {
                unknown.remove(i);
            }
            same -= 1;
        }
        unknown.push_back((username.to_string(), mac, now));
    }

    /// The event loop's fast path: the verdict of a fresh cache entry that already knows this
    /// password, or `None` (cache miss, stale entry, unknown password, or the cache lock busy:
    /// it is only tried, never waited for). Costs one HMAC over the credentials.
    pub fn authenticate_cached(
        &self,
        username: &str,
        password: &str,
    ) -> Option<Result<User, AuthError>> {
        let mac = self.mac(username, password);
        let cache = self.cache.try_lock()?;
        let Some(c) = cache.get(username) else {
            // A remembered unknown user: refused as fast as a remembered wrong password.
            let unknown = self.unknown.try_lock()?;
            let now = Instant::now();
            return unknown
                .iter()
                .any(|(_, m, at)| {
                    now.duration_since(*at) < REMEMBERED_TTL && bool::from(m.ct_eq(&mac))
                })
                .then_some(Err(AuthError::WrongPassword));
        };
        if c.read_at.elapsed() >= USER_TTL {
            return None;
        }
        match c.verdict(&mac)? {
            true => Some(admit(c.user.clone())),
            false => Some(Err(AuthError::WrongPassword)),
        }
    }

    /// Checks credentials without a slow check: a fresh user document (read from the store
    /// when the cached one is stale) and a password this cache has already verified or
    /// refused. `None`: the password is not known either way (or the user does not exist).
    /// Blocking (may read the store): call it from the offload pool.
    pub fn authenticate_known(
        &self,
        username: &str,
        password: &str,
    ) -> Option<Result<User, AuthError>> {
        let user = match self.get(username) {
            Ok(Some(user)) => user,
            Ok(None) => return None,
            Err(e) => return Some(Err(e.into())),
        };
        let mac = self.mac(username, password);
        let verdict = self
            .cache
            .lock()
            .get(username)
            .filter(|c| c.user.secret() == user.secret())
            .and_then(|c| c.verdict(&mac))?;
        Some(if verdict {
            admit(user)
        } else {
            Err(AuthError::WrongPassword)
        })
    }

    /// How many slow (argon2) password checks have run.
    pub fn slow_checks(&self) -> u64 {
        self.slow_checks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs the slow check and records its verdict in the cache. Returns the user as stored
    /// after the check (a plaintext moved to its hash on a store that is shoal's alone) when
    /// it passed, `None` when it failed.
    fn verify_and_remember(
        &self,
        user: &User,
        password: &str,
        mac: [u8; 32],
    ) -> Result<Option<User>, UserError> {
        let username = user.username.as_str();
        self.slow_checks
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        metrics::counter!("shoal_auth_slow_checks_total").increment(1);
        if !verify_slow(user.secret(), password) {
            let mut cache = self.cache.lock();
            if let Some(c) = cache
                .get_mut(username)
                .filter(|c| c.user.secret() == user.secret())
            {
                c.rejected.retain(|(_, at)| at.elapsed() < REMEMBERED_TTL);
                if c.rejected.len() >= REJECTED_KEPT {
                    c.rejected.remove(0);
                }
                c.rejected.push((mac, Instant::now()));
            }
            return Ok(None);
        }
        let mut user_now = user.clone();
        if user.has_fishtest_password() && self.mode()? == PasswordMode::Own {
            // Fishtest's field on a store that is shoal's alone: the hash moves to its own
            // field (made now from a plaintext) and the plaintext goes.
            move_to_hash(&mut user_now, Some(password))?;
            self.save(&user_now)?;
            tracing::info!(username, "password moved to password_hash");
        }
        self.cache.lock().insert(
            username.to_string(),
            Cached {
                user: user_now.clone(),
                read_at: Instant::now(),
                verified: Some(mac),
                rejected: Vec::new(),
            },
        );
        Ok(Some(user_now))
    }
}

/// A user whose password checked out may still be blocked or pending.
fn admit(user: User) -> Result<User, AuthError> {
    if user.blocked {
        return Err(AuthError::Blocked);
    }
    if user.pending {
        return Err(AuthError::Pending);
    }
    Ok(user)
}

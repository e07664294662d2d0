//! Passwords: argon2id hashing, the slow check, and where the hash lives ([`PasswordMode`]:
//! Fishtest's plaintext passwords still authenticate; on a store shoal has alone they move to
//! `password_hash` on first success, beside Fishtest they stay until `finalize_passwords`).
//!
//! Owns: hashing and verifying (an unknown user or a legacy plaintext costs what a wrong
//! password of a real user costs: one argon2 run against a dummy hash), the mode and its
//! `shoal_kvstore` marker, setting a password, and ending a trial beside Fishtest.
//! Must not: log or keep a password (only its hash is stored, and only the credential cache's
//! HMAC is kept in memory).

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Argon2, password_hash::rand_core::OsRng};
use parking_lot::Mutex;
use serde_json::Value;
use subtle::ConstantTimeEq;

use super::Users;
use crate::accounts::{User, UserError};
use crate::store::{Collection, Doc};

/// Where passwords are kept: decided by the store and by the operator
/// (docs/migrating-from-fishtest.md, "Running beside Fishtest").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PasswordMode {
    /// The store is shoal's alone (SQLite, or MongoDB after `shoal user finalize-passwords`):
    /// the argon2id hash is in `password_hash` and `password` is removed at the first
    /// successful login.
    Own,
    /// A MongoDB database shared with Fishtest, until the operator runs
    /// `shoal user finalize-passwords`: user documents stay exactly as Fishtest's schema wants
    /// them. Logins check Fishtest's plaintext and write nothing; a new account or a new
    /// password is written as Fishtest writes it (plaintext in `password`), so that Fishtest
    /// keeps working for every user.
    Beside,
}

/// The `shoal_kvstore` document that records the end of a trial beside Fishtest
/// (`{"_id": "shoal_passwords", "value": "finalized"}`): its presence makes
/// [`PasswordMode::Own`] on MongoDB.
pub const PASSWORDS_DOC: &str = "shoal_passwords";
/// The `value` of [`PASSWORDS_DOC`] once finalized.
pub const PASSWORDS_FINALIZED: &str = "finalized";

/// The longest password Fishtest accepts, in characters (the shortest has one).
pub const PASSWORD_MAX_CHARS: usize = 72;

/// Fishtest's length rule: 1 to [`PASSWORD_MAX_CHARS`] characters.
pub(super) fn password_length_ok(password: &str) -> bool {
    !password.is_empty() && password.chars().count() <= PASSWORD_MAX_CHARS
}

/// An argon2id PHC string of `password`, with a fresh random salt.
pub fn hash_password(password: &str) -> Result<String, UserError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(UserError::Hashing)
}

fn is_hashed(stored: &str) -> bool {
    stored.starts_with("$argon2")
}

/// The slow check: argon2 for hashes, constant-time equality for legacy plaintext. An empty
/// stored secret (a user without a password) matches nothing.
pub(super) fn verify_slow(stored: &str, password: &str) -> bool {
    if stored.is_empty() {
        let _ = verify_slow(dummy_hash(), password);
        false
    } else if is_hashed(stored) {
        #[cfg(test)]
        ARGON2_RUNS.with(|n| n.set(n.get() + 1));
        PasswordHash::new(stored)
            .map(|h| {
                Argon2::default()
                    .verify_password(password.as_bytes(), &h)
                    .is_ok()
            })
            .unwrap_or(false)
    } else {
        // As slow as a hashed one: a user whose legacy password was never re-hashed must not
        // be told from an unknown user by how fast a wrong password is refused.
        let _ = verify_slow(dummy_hash(), password);
        bool::from(stored.as_bytes().ct_eq(password.as_bytes()))
    }
}

#[cfg(test)]
thread_local! {
    /// argon2 verifications run on this thread (the cost a refusal has, counted exactly).
    pub(super) static ARGON2_RUNS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// An argon2 hash of a random password, made once: unknown users are checked against it so
/// that their refusal costs the same time as a wrong password of a real user.
pub(super) fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| {
        hash_password(&hex::encode(rand::random::<[u8; 16]>()))
            .unwrap_or_else(|_| "$argon2id$v=19$m=19456,t=2,p=1$invalid".to_string())
    })
}

impl Users {
    /// Where passwords are kept now. SQLite: always [`PasswordMode::Own`]. MongoDB:
    /// [`PasswordMode::Beside`] until [`PASSWORDS_DOC`] says finalized (read from the store
    /// each time: every instance sees the operator's command at once).
    pub fn mode(&self) -> Result<PasswordMode, UserError> {
        if !self.shared_with_fishtest {
            return Ok(PasswordMode::Own);
        }
        let doc = self.store.get(Collection::ShoalKv, PASSWORDS_DOC)?;
        let finalized = doc
            .as_ref()
            .and_then(|d| d.get("value"))
            .and_then(Value::as_str)
            == Some(PASSWORDS_FINALIZED);
        if finalized {
            return Ok(PasswordMode::Own);
        }
        // A database without a single user is nobody's Fishtest database: shoal's from the
        // start, recorded so (the first account would otherwise be written in plaintext).
        if self.store.count(Collection::Users, &[])? == 0 {
            self.store.put(Collection::ShoalKv, &finalized_marker())?;
            return Ok(PasswordMode::Own);
        }
        Ok(PasswordMode::Beside)
    }

    /// Sets a user's password as the current [`PasswordMode`] keeps it (the caller saves the
    /// user). Checks Fishtest's length rule (1 to [`PASSWORD_MAX_CHARS`] characters).
    pub fn set_password(&self, user: &mut User, password: &str) -> Result<(), UserError> {
        if !password_length_ok(password) {
            return Err(UserError::BadPasswordLength);
        }
        match self.mode()? {
            PasswordMode::Own => {
                user.password_hash = Some(hash_password(password)?);
                user.password = None;
            }
            PasswordMode::Beside => {
                // As Fishtest writes it; no field Fishtest's schema does not know.
                user.password = Some(password.to_string());
                user.password_hash = None;
            }
        }
        Ok(())
    }

    /// Ends a trial beside Fishtest (`shoal user finalize-passwords`): records the decision
    /// first (so that no instance writes another plaintext), then gives every user that
    /// still has Fishtest's `password` field its argon2id hash in `password_hash` and
    /// removes the field. Safe to run again: a second run finds nothing left to do.
    /// `progress` is told after each user. Hashing runs on `threads` threads.
    pub fn finalize_passwords(
        &self,
        threads: usize,
        progress: &(dyn Fn(usize, usize) + Sync),
    ) -> Result<FinalizeReport, UserError> {
        self.store.put(Collection::ShoalKv, &finalized_marker())?;
        let todo: Vec<User> = self
            .list()?
            .into_iter()
            .filter(User::has_fishtest_password)
            .collect();
        let total = todo.len();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let failed: Mutex<Vec<(String, UserError)>> = Mutex::new(Vec::new());
        let threads = threads.clamp(1, 64);
        let next = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|scope| {
            for _ in 0..threads {
                scope.spawn(|| {
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(user) = todo.get(i) else { break };
                        let mut user = user.clone();
                        let result = move_to_hash(&mut user, None).and_then(|()| self.save(&user));
                        if let Err(e) = result {
                            failed.lock().push((user.username.clone(), e));
                        }
                        let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                        progress(n, total);
                    }
                });
            }
        });
        let failed = failed.into_inner();
        Ok(FinalizeReport {
            hashed: total - failed.len(),
            failed,
        })
    }
}

/// The [`PASSWORDS_DOC`] that makes [`PasswordMode::Own`].
fn finalized_marker() -> Doc {
    let mut marker = Doc::new();
    marker.insert("_id".into(), Value::String(PASSWORDS_DOC.into()));
    marker.insert("value".into(), Value::String(PASSWORDS_FINALIZED.into()));
    marker
}

/// What [`Users::finalize_passwords`] did.
#[derive(Debug, Default)]
pub struct FinalizeReport {
    /// Users whose password moved to `password_hash`.
    pub hashed: usize,
    /// Users that could not be changed, with why (run the command again).
    pub failed: Vec<(String, UserError)>,
}

/// Moves a password out of Fishtest's field: a hash already there moves as it is, a plaintext
/// is hashed (with `verified`, the password that just matched it, when the caller has it).
pub(super) fn move_to_hash(user: &mut User, verified: Option<&str>) -> Result<(), UserError> {
    let Some(old) = user.password.take() else {
        return Ok(());
    };
    if user.password_hash.is_none() {
        user.password_hash = Some(if is_hashed(&old) {
            old
        } else {
            hash_password(verified.unwrap_or(&old))?
        });
    }
    Ok(())
}

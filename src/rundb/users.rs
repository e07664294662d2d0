//! Users: documents, password hashing, and the authentication every worker call makes.
//!
//! Owns: the `users` collection's document shape (Fishtest's fields plus `password_hash`),
//! argon2id hashing and where the hash lives ([`PasswordMode`]: Fishtest's plaintext
//! passwords still authenticate; on a store shoal has alone they move to `password_hash` on
//! first success, beside Fishtest they stay until `finalize_passwords`), the legacy user names
//! (`kvstore` `legacy_usernames`), and the credential cache. Every worker call carries the password, and an
//! argon2 verification costs tens of milliseconds by design; so after one successful
//! verification the cache keeps an HMAC of the password under a per-process random key, and
//! later calls compare HMACs (about a microsecond). The cache entry is bound to the stored
//! password hash, so a password change invalidates it; blocked/pending flags are re-read from
//! the store at most `USER_TTL` later (Fishtest caches them for 1–2 s).
//! Must not: know HTTP, or log passwords.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::{Argon2, password_hash::rand_core::OsRng};
use hmac::digest::KeyInit;
use hmac::{Hmac, Mac};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::Sha256;
use subtle::ConstantTimeEq;

use crate::store::{Collection, Cond, Date, Doc, Query, SharedStore, StoreError};

/// How long a cached user document is trusted before it is re-read.
pub const USER_TTL: Duration = Duration::from_secs(2);
pub const DEFAULT_MACHINE_LIMIT: u32 = 16;
pub const APPROVERS: &str = "group:approvers";

pub const MSG_INVALID: &str = "Invalid username or password.";
pub const MSG_BLOCKED: &str = "Your account is blocked.";
pub const MSG_PENDING: &str = "Your account is pending approval.";
/// Signup: the username or the email belongs to an account already.
pub const MSG_TAKEN: &str = "Username or email is already registered";

/// A user document (Fishtest's `users` fields; docs/fishtest-compatibility.md#data-model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    #[serde(rename = "_id")]
    pub id: String,
    pub username: String,
    /// Fishtest's field: the plaintext password, as Fishtest writes and compares it. shoal
    /// keeps it only while it shares a MongoDB database with Fishtest ([`PasswordMode::Beside`])
    /// and removes it otherwise (a successful login, `shoal user finalize-passwords`). Stores
    /// written by earlier shoal versions may hold an argon2id hash here instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// shoal's field: the argon2id PHC string of the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    pub registration_time: Date,
    #[serde(default)]
    pub pending: bool,
    #[serde(default)]
    pub blocked: bool,
    #[serde(default)]
    pub email: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub tests_repo: String,
    #[serde(default = "default_limit")]
    pub machine_limit: u32,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

fn default_limit() -> u32 {
    DEFAULT_MACHINE_LIMIT
}

impl User {
    pub fn is_approver(&self) -> bool {
        self.groups.iter().any(|g| g == APPROVERS)
    }

    /// What a password is checked against: the hash if there is one, else Fishtest's
    /// plaintext field (or the hash an earlier shoal kept there); empty when there is none,
    /// which no password matches.
    pub fn secret(&self) -> &str {
        self.password_hash
            .as_deref()
            .or(self.password.as_deref())
            .unwrap_or_default()
    }

    /// Whether the document still holds a password in Fishtest's field (plaintext, or a hash
    /// from an earlier shoal) that [`PasswordMode::Own`] moves to `password_hash`.
    pub fn has_fishtest_password(&self) -> bool {
        self.password.is_some()
    }
}

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

/// The `kvstore` document that records the end of a trial beside Fishtest
/// (`{"_id": "shoal_passwords", "value": "finalized"}`): its presence makes
/// [`PasswordMode::Own`] on MongoDB.
pub const PASSWORDS_DOC: &str = "shoal_passwords";
/// The `value` of [`PASSWORDS_DOC`] once finalized.
pub const PASSWORDS_FINALIZED: &str = "finalized";

/// Why a user operation failed.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// Credentials refused; the message is one of Fishtest's three (`MSG_*`).
    #[error("{0}")]
    Refused(&'static str),
    #[error("{0}")]
    Invalid(String),
    #[error("no such user: {0}")]
    NoSuchUser(String),
    /// The caller's [`SlowCheckGuard`] refused a slow check (too many failures); retry after
    /// this long.
    #[error("too many failed authentications")]
    Throttled(Duration),
    #[error(transparent)]
    Store(#[from] StoreError),
}

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

/// Fishtest's username rule: `[A-Za-z0-9]{2,}`.
pub fn valid_username(name: &str) -> bool {
    name.len() >= 2 && name.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The `kvstore` document listing the user names accepted although they break
/// [`valid_username`] (`{"_id": "legacy_usernames", "value": [name, ...]}`): accounts older
/// than the rule, which Fishtest records once and keeps accepting.
pub const LEGACY_USERNAMES_DOC: &str = "legacy_usernames";

/// The longest legacy name taken from the list (longer entries are ignored and logged).
pub const LEGACY_NAME_MAX: usize = 256;

pub fn hash_password(password: &str) -> Result<String, UserError> {
    let salt = SaltString::generate(&mut OsRng);
    Argon2::default()
        .hash_password(password.as_bytes(), &salt)
        .map(|h| h.to_string())
        .map_err(|e| UserError::Invalid(format!("cannot hash password: {e}")))
}

fn is_hashed(stored: &str) -> bool {
    stored.starts_with("$argon2")
}

/// The slow check: argon2 for hashes, constant-time equality for legacy plaintext. An empty
/// stored secret (a user without a password) matches nothing.
fn verify_slow(stored: &str, password: &str) -> bool {
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
    static ARGON2_RUNS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

struct Cached {
    user: User,
    read_at: Instant,
    /// HMAC of the password that last verified against `user.secret()`.
    verified: Option<[u8; 32]>,
    /// HMACs of the last few passwords that failed against `user.secret()`, and when: a
    /// worker fleet configured with an old password is refused without an argon2 run per
    /// request.
    rejected: Vec<([u8; 32], Instant)>,
}

/// How many failing passwords are remembered per user name, and for how long — the same for
/// a user that exists (in its cache entry) and for one that does not (in `unknown`): a
/// repeated attempt for a user that does not exist is refused as fast as a repeated wrong
/// password of one that does, and a forgotten one as slowly, so timing tells nothing (and a
/// repeat costs no second argon2 run).
const REJECTED_KEPT: usize = 4;
const REMEMBERED_TTL: Duration = Duration::from_secs(60);

/// How many (unknown user, password) attempts are remembered in all.
const UNKNOWN_KEPT: usize = 4096;

/// An argon2 hash of a random password, made once: unknown users are checked against it so
/// that their refusal costs the same time as a wrong password of a real user.
fn dummy_hash() -> &'static str {
    static DUMMY: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    DUMMY.get_or_init(|| {
        hash_password(&hex::encode(rand::random::<[u8; 16]>()))
            .unwrap_or_else(|_| "$argon2id$v=19$m=19456,t=2,p=1$invalid".to_string())
    })
}

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

/// The users collection with its authentication cache.
pub struct Users {
    store: SharedStore,
    /// HMAC-SHA256 keyed with 64 random bytes (one block: the infallible constructor).
    mac_key: Hmac<Sha256>,
    cache: Mutex<HashMap<String, Cached>>,
    /// One verification lock per username being verified right now (single flight): the
    /// first requests of a user's hundreds of workers, arriving together on a cold cache, run
    /// one argon2 verification (19 MiB, tens of ms) instead of one each.
    verifying: Mutex<HashMap<String, std::sync::Arc<Mutex<()>>>>,
    /// Recently refused (unknown user, password) MACs with their user name, oldest first.
    unknown: Mutex<std::collections::VecDeque<(String, [u8; 32], Instant)>>,
    /// Slow (argon2) verifications run so far, for metrics and tests.
    slow_checks: std::sync::atomic::AtomicU64,
    /// The number of pending accounts and when it was counted ([`PENDING_TTL`]).
    pending: Mutex<Option<(Instant, u64)>>,
    /// Whether the store may be shared with Fishtest (MongoDB): see [`Users::mode`].
    shared_with_fishtest: bool,
    /// The legacy user names ([`LEGACY_USERNAMES_DOC`]), as last read from the store.
    legacy: parking_lot::RwLock<std::sync::Arc<std::collections::HashSet<String>>>,
}

/// How long the count of pending accounts (the navigation's badge) is trusted.
pub const PENDING_TTL: Duration = Duration::from_secs(1);

impl Users {
    /// The users of a store; whether Fishtest may share it is the store's to say.
    pub fn new(store: SharedStore) -> Self {
        let shared = store.shared_with_fishtest();
        Self::with_sharing(store, shared)
    }

    /// The users of a store that Fishtest may share (`shared`: MongoDB), whose passwords
    /// stay in Fishtest's form until finalized ([`Users::mode`]).
    pub fn with_sharing(store: SharedStore, shared: bool) -> Self {
        Users {
            shared_with_fishtest: shared,
            store,
            mac_key: <Hmac<Sha256> as KeyInit>::new(&rand::random::<[u8; 64]>().into()),
            cache: Mutex::new(HashMap::new()),
            verifying: Mutex::new(HashMap::new()),
            unknown: Mutex::new(std::collections::VecDeque::new()),
            slow_checks: std::sync::atomic::AtomicU64::new(0),
            pending: Mutex::new(None),
            legacy: Default::default(),
        }
    }

    /// Whether a worker may call itself `name`: Fishtest's rule, or a legacy name.
    pub fn name_allowed(&self, name: &str) -> bool {
        valid_username(name) || self.legacy.read().contains(name)
    }

    /// Re-reads the legacy user names from the store (at start and then periodically, so a
    /// list changed by another instance or by Fishtest itself is followed). A missing document
    /// is an empty list; entries that are not strings, are empty or longer than
    /// [`LEGACY_NAME_MAX`] are skipped with a warning. Returns how many names are accepted.
    pub fn refresh_legacy_names(&self) -> Result<usize, UserError> {
        let doc = self.store.get(Collection::Kvstore, LEGACY_USERNAMES_DOC)?;
        let names = legacy_names_of(doc.as_ref());
        let n = names.len();
        let changed = **self.legacy.read() != names;
        if changed {
            tracing::info!(count = n, "legacy user names loaded");
            *self.legacy.write() = std::sync::Arc::new(names);
        }
        Ok(n)
    }

    /// Where passwords are kept now. SQLite: always [`PasswordMode::Own`]. MongoDB:
    /// [`PasswordMode::Beside`] until [`PASSWORDS_DOC`] says finalized (read from the store
    /// each time: every instance sees the operator's command at once).
    pub fn mode(&self) -> Result<PasswordMode, UserError> {
        if !self.shared_with_fishtest {
            return Ok(PasswordMode::Own);
        }
        let doc = self.store.get(Collection::Kvstore, PASSWORDS_DOC)?;
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
            self.store.put(Collection::Kvstore, &finalized_marker())?;
            return Ok(PasswordMode::Own);
        }
        Ok(PasswordMode::Beside)
    }

    /// Sets a user's password as the current [`PasswordMode`] keeps it (the caller saves the
    /// user). Checks Fishtest's length rule (1 to 72 characters).
    pub fn set_password(&self, user: &mut User, password: &str) -> Result<(), UserError> {
        if password.is_empty() || password.chars().count() > 72 {
            return Err(UserError::Invalid(
                "The password must be 1 to 72 characters long.".into(),
            ));
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
        self.store.put(Collection::Kvstore, &finalized_marker())?;
        let todo: Vec<User> = self
            .list()?
            .into_iter()
            .filter(User::has_fishtest_password)
            .collect();
        let total = todo.len();
        let done = std::sync::atomic::AtomicUsize::new(0);
        let failed: Mutex<Vec<(String, String)>> = Mutex::new(Vec::new());
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
                            failed.lock().push((user.username.clone(), e.to_string()));
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

    /// The legacy user names as last read, sorted.
    pub fn legacy_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.legacy.read().iter().cloned().collect();
        v.sort();
        v
    }

    /// Adds (`add`) or removes a legacy user name in the store's list and in memory. Returns
    /// whether the list changed. The name must be one the rule refuses (a name the rule
    /// accepts needs no entry) and at most [`LEGACY_NAME_MAX`] bytes, without control
    /// characters.
    pub fn set_legacy_name(&self, name: &str, add: bool) -> Result<bool, UserError> {
        if add {
            if valid_username(name) {
                return Err(UserError::Invalid(format!(
                    "{name:?} follows the username rule already: it needs no legacy entry"
                )));
            }
            if name.is_empty() || name.len() > LEGACY_NAME_MAX || name.chars().any(char::is_control)
            {
                return Err(UserError::Invalid(format!(
                    "{name:?} cannot be a user name (1 to {LEGACY_NAME_MAX} bytes, no control characters)"
                )));
            }
        }
        let doc = self.store.get(Collection::Kvstore, LEGACY_USERNAMES_DOC)?;
        // Keep the stored order (and anything this version skips) as it is.
        let mut list: Vec<Value> = doc
            .as_ref()
            .and_then(|d| d.get("value"))
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let present = list.iter().any(|v| v.as_str() == Some(name));
        let changed = if add && !present {
            list.push(Value::String(name.to_string()));
            true
        } else if !add && present {
            list.retain(|v| v.as_str() != Some(name));
            true
        } else {
            false
        };
        if changed {
            let mut doc = doc.unwrap_or_default();
            doc.insert("_id".into(), Value::String(LEGACY_USERNAMES_DOC.into()));
            doc.insert("value".into(), Value::Array(list));
            self.store.put(Collection::Kvstore, &doc)?;
        }
        self.refresh_legacy_names()?;
        Ok(changed)
    }

    fn mac(&self, username: &str, password: &str) -> [u8; 32] {
        // Keyed with a per-process secret: a leaked cache reveals nothing reusable.
        let mut mac = self.mac_key.clone();
        mac.update(username.as_bytes());
        mac.update(&[0]);
        mac.update(password.as_bytes());
        mac.finalize().into_bytes().into()
    }

    /// Reads a user document from the store.
    pub fn load(&self, username: &str) -> Result<Option<User>, UserError> {
        let docs = self.store.find(
            Collection::Users,
            &Query::new()
                .with(Cond::Eq("username".into(), Value::String(username.into())))
                .limit(1),
        )?;
        docs.into_iter()
            .next()
            .map(|d| {
                serde_json::from_value(Value::Object(d))
                    .map_err(|e| UserError::Invalid(format!("user {username}: {e}")))
            })
            .transpose()
    }

    /// A user, from the cache if fresh.
    pub fn get(&self, username: &str) -> Result<Option<User>, UserError> {
        if let Some(c) = self.cache.lock().get(username)
            && c.read_at.elapsed() < USER_TTL
        {
            return Ok(Some(c.user.clone()));
        }
        let user = self.load(username)?;
        let mut cache = self.cache.lock();
        match &user {
            Some(u) => {
                // What was verified (or refused) against the same password hash still holds.
                let (verified, rejected) = cache
                    .get_mut(username)
                    .filter(|c| c.user.secret() == u.secret())
                    .map(|c| (c.verified, std::mem::take(&mut c.rejected)))
                    .unwrap_or_default();
                cache.insert(
                    username.to_string(),
                    Cached {
                        user: u.clone(),
                        read_at: Instant::now(),
                        verified,
                        rejected,
                    },
                );
            }
            None => {
                cache.remove(username);
            }
        }
        Ok(user)
    }

    /// Checks credentials as the worker API does. Blocking (may read the store and run
    /// argon2): call it from the offload pool. Concurrent calls for one username verify once.
    pub fn authenticate(&self, username: &str, password: &str) -> Result<User, UserError> {
        self.authenticate_guarded(username, password, &NoGuard)
    }

    /// [`Users::authenticate`], asking `guard` before every slow check and telling it every
    /// password verdict (a remembered one too).
    pub fn authenticate_guarded(
        &self,
        username: &str,
        password: &str,
        guard: &dyn SlowCheckGuard,
    ) -> Result<User, UserError> {
        let mac = self.mac(username, password);
        let remembered_unknown = |this: &Self| {
            this.unknown
                .lock()
                .iter()
                .any(|(_, m, at)| at.elapsed() < REMEMBERED_TTL && bool::from(m.ct_eq(&mac)))
        };
        if remembered_unknown(self) {
            guard.checked(false);
            return Err(UserError::Refused(MSG_INVALID));
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
                Err(UserError::Refused(MSG_INVALID))
            };
        }
        // A slow check: one at a time per user name (single flight).
        let lock = self
            .verifying
            .lock()
            .entry(username.to_string())
            .or_default()
            .clone();
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
                    Err(retry_after) => Err(UserError::Throttled(retry_after)),
                    Ok(()) => {
                        let v = match &user {
                            Some(user) => self.verify_and_remember(user, password, mac),
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
        match (verdict?, user) {
            (true, Some(user)) => admit(user),
            _ => Err(UserError::Refused(MSG_INVALID)),
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
    ) -> Option<Result<User, UserError>> {
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
                .then_some(Err(UserError::Refused(MSG_INVALID)));
        };
        if c.read_at.elapsed() >= USER_TTL {
            return None;
        }
        match c.verdict(&mac)? {
            true => Some(admit(c.user.clone())),
            false => Some(Err(UserError::Refused(MSG_INVALID))),
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
    ) -> Option<Result<User, UserError>> {
        let user = match self.get(username) {
            Ok(Some(user)) => user,
            Ok(None) => return None,
            Err(e) => return Some(Err(e)),
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
            Err(UserError::Refused(MSG_INVALID))
        })
    }

    /// How many slow (argon2) password checks have run.
    pub fn slow_checks(&self) -> u64 {
        self.slow_checks.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Runs the slow check and records its verdict in the cache. Returns whether it passed.
    fn verify_and_remember(
        &self,
        user: &User,
        password: &str,
        mac: [u8; 32],
    ) -> Result<bool, UserError> {
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
            return Ok(false);
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
                user: user_now,
                read_at: Instant::now(),
                verified: Some(mac),
                rejected: Vec::new(),
            },
        );
        Ok(true)
    }

    /// Writes a user document and drops its cache entry.
    pub fn save(&self, user: &User) -> Result<(), UserError> {
        let doc = to_doc(user)?;
        self.store.put(Collection::Users, &doc)?;
        self.cache.lock().remove(&user.username);
        *self.pending.lock() = None;
        Ok(())
    }

    /// Creates a user (approved, not pending: the CLI is an administrator's tool).
    pub fn add(
        &self,
        username: &str,
        password: &str,
        email: &str,
        approver: bool,
        machine_limit: Option<u32>,
    ) -> Result<User, UserError> {
        if !valid_username(username) {
            return Err(UserError::Invalid(
                "Invalid username: use at least two letters or digits ([A-Za-z0-9]).".into(),
            ));
        }
        if password.is_empty() || password.chars().count() > 72 {
            return Err(UserError::Invalid(
                "The password must be 1 to 72 characters long.".into(),
            ));
        }
        if self.mode()? == PasswordMode::Beside && !plausible_email(email) {
            return Err(UserError::Invalid(
                "Beside Fishtest every user needs an email address (Fishtest's schema requires \
                 one): give --email."
                    .into(),
            ));
        }
        if self.load(username)?.is_some() {
            return Err(UserError::Invalid(format!(
                "The username {username} is already taken."
            )));
        }
        let mut user = User {
            id: crate::store::new_object_id(),
            username: username.to_string(),
            password: None,
            password_hash: None,
            registration_time: Date::now(),
            pending: false,
            blocked: false,
            email: email.to_string(),
            groups: if approver {
                vec![APPROVERS.to_string()]
            } else {
                Vec::new()
            },
            tests_repo: String::new(),
            machine_limit: machine_limit.unwrap_or(DEFAULT_MACHINE_LIMIT),
            extra: Default::default(),
        };
        self.set_password(&mut user, password)?;
        self.store.insert(Collection::Users, to_doc(&user)?)?;
        Ok(user)
    }

    /// Signs a user up from the web form: the account starts pending (an approver accepts
    /// it). The caller has validated the fields; a taken username or email is refused with
    /// [`MSG_TAKEN`].
    pub fn register(
        &self,
        username: &str,
        password: &str,
        email: &str,
        tests_repo: &str,
    ) -> Result<User, UserError> {
        if !valid_username(username) {
            return Err(UserError::Invalid(
                "Error! Invalid username or password".into(),
            ));
        }
        let email_taken = !email.is_empty()
            && !self
                .store
                .find(
                    Collection::Users,
                    &Query::new()
                        .with(Cond::Eq("email".into(), Value::String(email.into())))
                        .limit(1),
                )?
                .is_empty();
        if email_taken || self.load(username)?.is_some() {
            return Err(UserError::Invalid(MSG_TAKEN.into()));
        }
        let mut user = User {
            id: crate::store::new_object_id(),
            username: username.to_string(),
            password: None,
            password_hash: None,
            registration_time: Date::now(),
            pending: true,
            blocked: false,
            email: email.to_string(),
            groups: Vec::new(),
            tests_repo: tests_repo.trim_end_matches('/').to_string(),
            machine_limit: DEFAULT_MACHINE_LIMIT,
            extra: Default::default(),
        };
        self.set_password(&mut user, password)?;
        self.store.insert(Collection::Users, to_doc(&user)?)?;
        *self.pending.lock() = None;
        Ok(user)
    }

    pub fn list(&self) -> Result<Vec<User>, UserError> {
        let docs = self.store.find(
            Collection::Users,
            &Query::new().sort("username", crate::store::Order::Asc),
        )?;
        docs.into_iter()
            .map(|d| {
                serde_json::from_value(Value::Object(d))
                    .map_err(|e| UserError::Invalid(format!("bad user document: {e}")))
            })
            .collect()
    }

    /// Deletes a user document (a rejected signup); `false` if there was none.
    pub fn delete(&self, user: &User) -> Result<bool, UserError> {
        let gone = self.store.delete(Collection::Users, &user.id)?;
        self.cache.lock().remove(&user.username);
        *self.pending.lock() = None;
        Ok(gone)
    }

    /// How many accounts wait for approval (counted at most once per [`PENDING_TTL`]).
    pub fn pending_count(&self) -> Result<u64, UserError> {
        if let Some((at, n)) = *self.pending.lock()
            && at.elapsed() < PENDING_TTL
        {
            return Ok(n);
        }
        let n = self.store.count(
            Collection::Users,
            &[Cond::Eq("pending".into(), Value::Bool(true))],
        )?;
        *self.pending.lock() = Some((Instant::now(), n));
        Ok(n)
    }

    /// Drops every cached entry (after an administrative change).
    pub fn invalidate(&self, username: &str) {
        self.cache.lock().remove(username);
    }
}

/// An address Fishtest's email check can accept: one `@` with text on both sides and a dot
/// in the domain (the form's own checks are in the signup page).
fn plausible_email(email: &str) -> bool {
    match email.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && !domain.contains('@')
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
                && !email.chars().any(char::is_whitespace)
        }
        None => false,
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
    pub failed: Vec<(String, String)>,
}

/// Moves a password out of Fishtest's field: a hash already there moves as it is, a plaintext
/// is hashed (with `verified`, the password that just matched it, when the caller has it).
fn move_to_hash(user: &mut User, verified: Option<&str>) -> Result<(), UserError> {
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

/// The names listed in a `legacy_usernames` document (none when it is missing or malformed).
fn legacy_names_of(doc: Option<&Doc>) -> std::collections::HashSet<String> {
    let Some(doc) = doc else {
        return Default::default();
    };
    let Some(list) = doc.get("value").and_then(Value::as_array) else {
        tracing::warn!("kvstore legacy_usernames has no list as its value; no legacy names");
        return Default::default();
    };
    list.iter()
        .filter_map(|v| match v.as_str() {
            Some(name) if !name.is_empty() && name.len() <= LEGACY_NAME_MAX => {
                Some(name.to_string())
            }
            _ => {
                tracing::warn!(entry = %v, "kvstore legacy_usernames: entry skipped (not a name)");
                None
            }
        })
        .collect()
}

/// A user whose password checked out may still be blocked or pending.
fn admit(user: User) -> Result<User, UserError> {
    if user.blocked {
        return Err(UserError::Refused(MSG_BLOCKED));
    }
    if user.pending {
        return Err(UserError::Refused(MSG_PENDING));
    }
    Ok(user)
}

fn to_doc(user: &User) -> Result<Doc, UserError> {
    match serde_json::to_value(user) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(UserError::Invalid("user is not an object".into())),
        Err(e) => Err(UserError::Invalid(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rundb::testkit::temp_store;
    use std::sync::Arc;

    fn users() -> (tempfile::TempDir, Users) {
        let (dir, store) = temp_store();
        (dir, Users::new(store))
    }

    #[test]
    fn add_authenticate_and_refuse() {
        let (_d, u) = users();
        u.add("alice", "secret pw", "a@example.org", false, None)
            .expect("add");
        let user = u.authenticate("alice", "secret pw").expect("auth");
        assert!(user.secret().starts_with("$argon2id$"));
        assert_eq!(
            user.password, None,
            "no plaintext on a store that is shoal's alone"
        );
        assert_eq!(user.machine_limit, 16);
        // Second time: the fast path.
        u.authenticate("alice", "secret pw").expect("auth again");
        assert!(matches!(
            u.authenticate("alice", "wrong"),
            Err(UserError::Refused(MSG_INVALID))
        ));
        assert!(matches!(
            u.authenticate("nobody", "x"),
            Err(UserError::Refused(MSG_INVALID))
        ));
        assert!(u.add("alice", "x", "", false, None).is_err());
        assert!(u.add("a", "x", "", false, None).is_err());
        assert!(u.add("al ice", "x", "", false, None).is_err());
    }

    /// Allows `left` slow checks, counts verdicts.
    struct Budget {
        left: Mutex<u32>,
        wrong: std::sync::atomic::AtomicU32,
    }

    impl SlowCheckGuard for Budget {
        fn may_check(&self) -> Result<(), Duration> {
            let mut left = self.left.lock();
            if *left == 0 {
                return Err(Duration::from_secs(7));
            }
            *left -= 1;
            Ok(())
        }
        fn checked(&self, right: bool) {
            if !right {
                self.wrong
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
    }

    #[test]
    fn a_guard_bounds_the_slow_checks_of_concurrent_guesses() {
        let (_d, u) = users();
        u.add("erin", "right one", "", false, None).expect("add");
        let u = Arc::new(u);
        let guard = Arc::new(Budget {
            left: Mutex::new(3),
            wrong: Default::default(),
        });
        let threads: Vec<_> = (0..12)
            .map(|i| {
                let (u, g) = (u.clone(), guard.clone());
                std::thread::spawn(move || {
                    // Half the guesses are for a user that does not exist.
                    let name = if i % 2 == 0 { "erin" } else { "nobody" };
                    u.authenticate_guarded(name, &format!("guess {i}"), &*g)
                        .map(|x| x.username)
                })
            })
            .collect();
        let mut throttled = 0;
        for t in threads {
            match t.join().expect("join") {
                Err(UserError::Throttled(d)) => {
                    assert_eq!(d, Duration::from_secs(7));
                    throttled += 1;
                }
                Err(UserError::Refused(MSG_INVALID)) => {}
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(u.slow_checks() <= 3, "{} slow checks", u.slow_checks());
        assert_eq!(throttled, 12 - u.slow_checks());
        assert_eq!(
            u64::from(guard.wrong.load(std::sync::atomic::Ordering::Relaxed)),
            u.slow_checks()
        );
    }

    #[test]
    fn cold_cache_herd_verifies_once_and_failures_are_remembered() {
        let (_d, u) = users();
        u.add("dave", "right one", "", false, None).expect("add");
        let u = Arc::new(u);
        assert!(u.authenticate_cached("dave", "right one").is_none(), "cold");
        let threads: Vec<_> = (0..8)
            .map(|_| {
                let u = u.clone();
                std::thread::spawn(move || u.authenticate("dave", "right one").map(|x| x.username))
            })
            .collect();
        for t in threads {
            assert_eq!(t.join().expect("join").expect("auth"), "dave");
        }
        assert_eq!(
            u.slow_checks(),
            1,
            "one argon2 run for eight concurrent first calls"
        );
        assert!(matches!(
            u.authenticate_cached("dave", "right one"),
            Some(Ok(ref x)) if x.username == "dave"
        ));
        // A wrong password: checked slowly once, then refused from the cache.
        for _ in 0..3 {
            assert!(matches!(
                u.authenticate("dave", "old one"),
                Err(UserError::Refused(MSG_INVALID))
            ));
        }
        assert_eq!(u.slow_checks(), 2);
        assert!(matches!(
            u.authenticate_cached("dave", "old one"),
            Some(Err(UserError::Refused(MSG_INVALID)))
        ));
        assert!(u.authenticate_cached("dave", "never tried").is_none());
        assert!(u.verifying.lock().is_empty(), "per-user locks are dropped");
        // A password change forgets both verdicts.
        let mut user = u.load("dave").expect("load").expect("some");
        user.password_hash = Some(hash_password("old one").expect("hash"));
        u.save(&user).expect("save");
        u.authenticate("dave", "old one").expect("the new password");
        assert!(u.authenticate("dave", "right one").is_err());
        assert_eq!(u.slow_checks(), 4);
    }

    /// Slow checks run for `guesses` wrong passwords of `user`, then for the same again.
    fn slow_checks_of(u: &Users, user: &str, guesses: usize) -> u64 {
        let before = u.slow_checks();
        for round in 0..2 {
            for i in 0..guesses {
                assert!(
                    matches!(
                        u.authenticate(user, &format!("guess {i}")),
                        Err(UserError::Refused(MSG_INVALID))
                    ),
                    "{user}, round {round}, guess {i}"
                );
            }
        }
        u.slow_checks() - before
    }

    #[test]
    fn unknown_users_and_wrong_passwords_are_remembered_alike() {
        let (_d, u) = users();
        u.add("alice", "right", "", false, None).expect("add");
        // Whether a repeated guess is answered from memory (fast) or checked again (slow)
        // must not tell a real user from an unknown one: not for a few guesses, nor for more
        // than a user's memory keeps.
        for guesses in [2, REJECTED_KEPT + 2] {
            let known = slow_checks_of(&u, "alice", guesses);
            let unknown = slow_checks_of(&u, "nobody", guesses);
            assert_eq!(known, unknown, "{guesses} guesses");
        }
        // Nor after the memory has expired: both are checked again.
        let age = |u: &Users| {
            let old = Instant::now() - REMEMBERED_TTL - Duration::from_secs(1);
            for c in u.cache.lock().values_mut() {
                for r in &mut c.rejected {
                    r.1 = old;
                }
            }
            for r in u.unknown.lock().iter_mut() {
                r.2 = old;
            }
        };
        age(&u);
        assert_eq!(slow_checks_of(&u, "alice", 2), 2);
        assert_eq!(slow_checks_of(&u, "nobody", 2), 2);
    }

    #[test]
    fn a_legacy_plaintext_password_is_refused_as_slowly_as_an_unknown_user() {
        let (_d, u) = users();
        let mut user = u.add("erin", "temp", "", false, None).expect("add");
        user.password = Some("plain old".into());
        user.password_hash = None;
        u.save(&user).expect("save");
        // The cost of a refusal, counted: argon2 runs (timing would tell the same, noisily).
        let runs = |user: &str, i: usize| {
            let before = ARGON2_RUNS.with(std::cell::Cell::get);
            assert!(u.authenticate(user, &format!("wrong {i}")).is_err());
            ARGON2_RUNS.with(std::cell::Cell::get) - before
        };
        for i in 0..3 {
            assert_eq!(
                runs("erin", i),
                1,
                "a wrong plaintext password: one argon2 run"
            );
            assert_eq!(runs("nobody", i), 1, "an unknown user: one argon2 run");
        }
        // A remembered wrong guess costs none, for either.
        assert_eq!(runs("erin", 0), 0);
        assert_eq!(runs("nobody", 0), 0);
    }

    #[test]
    fn legacy_plaintext_is_accepted_and_rehashed() {
        let (_d, u) = users();
        let mut user = u.add("bob", "temp", "", false, Some(4)).expect("add");
        user.password = Some("plain old".into());
        user.password_hash = None;
        u.save(&user).expect("save");
        u.authenticate("bob", "plain old").expect("legacy auth");
        let stored = u.load("bob").expect("load").expect("some");
        assert_eq!(stored.password, None, "the plaintext is gone");
        assert!(stored.secret().starts_with("$argon2id$"));
        u.invalidate("bob");
        u.authenticate("bob", "plain old").expect("hashed auth");
        assert!(u.authenticate("bob", "plain").is_err());
    }

    #[test]
    fn blocked_and_pending_are_refused_and_password_change_invalidates() {
        let (_d, u) = users();
        let mut user = u.add("carol", "pw1", "", false, None).expect("add");
        u.authenticate("carol", "pw1").expect("auth");
        user.blocked = true;
        u.save(&user).expect("save");
        assert!(matches!(
            u.authenticate("carol", "pw1"),
            Err(UserError::Refused(MSG_BLOCKED))
        ));
        user.blocked = false;
        user.pending = true;
        u.save(&user).expect("save");
        assert!(matches!(
            u.authenticate("carol", "pw1"),
            Err(UserError::Refused(MSG_PENDING))
        ));
        user.pending = false;
        user.password_hash = Some(hash_password("pw2").expect("hash"));
        u.save(&user).expect("save");
        assert!(
            u.authenticate("carol", "pw1").is_err(),
            "old password refused"
        );
        u.authenticate("carol", "pw2").expect("new password");
    }

    /// A store shared with Fishtest (as on MongoDB), on the test SQLite store.
    fn beside() -> (tempfile::TempDir, Users) {
        let (dir, store) = temp_store();
        // A Fishtest database: it has users, with plaintext passwords.
        let doc = serde_json::json!({
            "username": "fishtester", "password": "fishtest's own", "pending": false,
            "blocked": false, "email": "f@example.org", "groups": [], "tests_repo": "",
            "machine_limit": 16, "registration_time": {"$date": "2025-05-21T16:00:00Z"},
        });
        let doc = doc.as_object().cloned().expect("an object");
        store.insert(Collection::Users, doc).expect("insert");
        (dir, Users::with_sharing(store, true))
    }

    #[test]
    fn a_shared_store_without_users_is_shoals_from_the_start() {
        let (_d, store) = temp_store();
        let u = Users::with_sharing(store, true);
        assert_eq!(u.mode().expect("mode"), PasswordMode::Own);
        u.add("first", "first pw", "", false, None)
            .expect("no email needed");
        assert!(!stored(&u, "first").contains_key("password"));
        assert_eq!(u.mode().expect("mode"), PasswordMode::Own, "recorded");
    }

    /// The user document exactly as stored.
    fn stored(u: &Users, name: &str) -> Doc {
        u.store
            .find(
                Collection::Users,
                &Query::new().with(Cond::Eq("username".into(), Value::String(name.into()))),
            )
            .expect("find")
            .pop()
            .expect("stored")
    }

    #[test]
    fn beside_fishtest_logins_write_nothing_and_new_passwords_are_fishtests() {
        let (_d, u) = beside();
        assert_eq!(u.mode().expect("mode"), PasswordMode::Beside);
        assert!(
            matches!(
                u.add("nomail", "temp", "", false, None),
                Err(UserError::Invalid(_))
            ),
            "beside Fishtest a user needs an email"
        );
        let mut fishtest = u
            .add("frank", "temp", "frank@example.org", false, None)
            .expect("add");
        // Written as Fishtest writes it: the plaintext, and no field Fishtest does not know.
        let doc = stored(&u, "frank");
        assert_eq!(doc.get("password"), Some(&Value::String("temp".into())));
        assert!(!doc.contains_key("password_hash"));
        // A document as Fishtest wrote it.
        fishtest.password = Some("fishtest pw".into());
        u.save(&fishtest).expect("save");
        let before = stored(&u, "frank");
        u.authenticate("frank", "fishtest pw").expect("login");
        u.invalidate("frank");
        u.authenticate("frank", "fishtest pw").expect("login again");
        assert!(u.authenticate("frank", "temp").is_err());
        assert_eq!(stored(&u, "frank"), before, "a login changes nothing");

        // The trial ends: every plaintext becomes a hash, and logins go on.
        u.add("gina", "gina pw", "gina@example.org", false, None)
            .expect("add");
        let seen = std::sync::atomic::AtomicUsize::new(0);
        let report = u
            .finalize_passwords(2, &|_, _| {
                seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            })
            .expect("finalize");
        assert_eq!(report.hashed, 3);
        assert!(report.failed.is_empty());
        assert_eq!(seen.into_inner(), 3);
        assert_eq!(u.mode().expect("mode"), PasswordMode::Own);
        for (name, pw) in [("frank", "fishtest pw"), ("gina", "gina pw")] {
            let doc = stored(&u, name);
            assert!(!doc.contains_key("password"), "{name}: plaintext removed");
            let hash = doc
                .get("password_hash")
                .and_then(Value::as_str)
                .expect("hash");
            assert!(hash.starts_with("$argon2id$"));
            u.invalidate(name);
            u.authenticate(name, pw).expect("login after finalize");
        }
        // Run again: nothing left to do.
        let again = u.finalize_passwords(1, &|_, _| {}).expect("again");
        assert_eq!(again.hashed, 0);
        // A new account now gets a hash only.
        u.add("hank", "hank pw", "", false, None).expect("add");
        assert!(!stored(&u, "hank").contains_key("password"));
    }

    #[test]
    fn an_earlier_shoals_hash_in_the_password_field_still_works_and_moves() {
        let (_d, u) = users();
        let mut user = u.add("ivy", "temp", "", false, None).expect("add");
        user.password = Some(hash_password("ivy pw").expect("hash"));
        user.password_hash = None;
        u.save(&user).expect("save");
        u.authenticate("ivy", "ivy pw").expect("login");
        let doc = stored(&u, "ivy");
        assert!(!doc.contains_key("password"));
        assert!(
            doc.get("password_hash")
                .and_then(Value::as_str)
                .is_some_and(|h| h.starts_with("$argon2id$"))
        );
    }

    #[test]
    fn a_user_without_any_password_never_logs_in() {
        let (_d, u) = users();
        let mut user = u.add("jo", "temp", "", false, None).expect("add");
        user.password = None;
        user.password_hash = None;
        u.save(&user).expect("save");
        assert!(u.authenticate("jo", "").is_err());
        assert!(u.authenticate("jo", "temp").is_err());
    }

    #[test]
    fn legacy_user_names_are_read_added_and_removed() {
        let (_d, u) = users();
        assert!(u.name_allowed("alice"));
        assert!(!u.name_allowed("old.timer"));
        // As Fishtest stores the list (kvstore), with an entry that is no name.
        let mut doc = Doc::new();
        doc.insert("_id".into(), Value::String(LEGACY_USERNAMES_DOC.into()));
        doc.insert("value".into(), serde_json::json!(["old.timer", 7, "a"]));
        u.store.put(Collection::Kvstore, &doc).expect("put");
        assert!(!u.name_allowed("old.timer"), "not before the list is read");
        assert_eq!(u.refresh_legacy_names().expect("refresh"), 2);
        assert!(u.name_allowed("old.timer"));
        assert!(u.name_allowed("a"));
        assert!(!u.name_allowed("b"));
        // Added and removed through shoal (the CLI), kept in the same document.
        assert!(u.set_legacy_name("x_y", true).expect("add"));
        assert!(!u.set_legacy_name("x_y", true).expect("again"));
        assert!(u.name_allowed("x_y"));
        assert!(matches!(
            u.set_legacy_name("fine", true),
            Err(UserError::Invalid(_))
        ));
        assert!(u.set_legacy_name("old.timer", false).expect("remove"));
        assert!(!u.name_allowed("old.timer"));
        let list = u
            .store
            .get(Collection::Kvstore, LEGACY_USERNAMES_DOC)
            .expect("get")
            .and_then(|d| d.get("value").cloned());
        assert_eq!(list, Some(serde_json::json!([7, "a", "x_y"])));
        // A removed document: no legacy names.
        u.store
            .delete(Collection::Kvstore, LEGACY_USERNAMES_DOC)
            .expect("delete");
        assert_eq!(u.refresh_legacy_names().expect("refresh"), 0);
        assert!(!u.name_allowed("a"));
    }
}

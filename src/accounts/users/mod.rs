//! The users collection: reading, caching, creating and changing accounts, and the legacy
//! user names (`kvstore` `legacy_usernames`).
//!
//! Owns: [`Users`] and its memory (cached user documents with what the credential cache knows
//! of their passwords, the count of pending accounts, the legacy names); `credentials.rs`, the
//! password checks every worker call makes, and `passwords.rs`, hashing and where the hash
//! lives, are its parts.
//! Must not: know HTTP, or log passwords.

mod credentials;
mod passwords;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use hmac::Hmac;
use hmac::digest::KeyInit;
use parking_lot::Mutex;
use serde_json::Value;
use sha2::Sha256;

pub use credentials::{NoGuard, SlowCheckGuard};
use passwords::password_length_ok;
pub use passwords::{
    FinalizeReport, PASSWORD_MAX_CHARS, PASSWORDS_DOC, PASSWORDS_FINALIZED, PasswordMode,
    hash_password,
};

use super::user::{LEGACY_NAME_MAX, LEGACY_USERNAMES_DOC, plausible_email, to_doc, valid_username};
use super::{APPROVERS, DEFAULT_MACHINE_LIMIT, NameRefusal, User, UserError};
use crate::store::{Collection, Cond, Date, Doc, Query, SharedStore, StoreError};

/// How long a cached user document is trusted before it is re-read.
pub const USER_TTL: Duration = Duration::from_secs(2);

/// A cached user document and what the credential cache knows of its password.
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
    /// The accounts' write lock: held from the check that a name or an address is free to
    /// the write that takes it (signup, a profile's new address), so two racing writes
    /// cannot both take it.
    writes: Mutex<()>,
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
            writes: Mutex::new(()),
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
                return Err(UserError::BadName {
                    name: name.to_string(),
                    why: NameRefusal::NeedsNoLegacyEntry,
                });
            }
            if name.is_empty() || name.len() > LEGACY_NAME_MAX || name.chars().any(char::is_control)
            {
                return Err(UserError::BadName {
                    name: name.to_string(),
                    why: NameRefusal::NotAName,
                });
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
                serde_json::from_value(Value::Object(d)).map_err(|source| UserError::CorruptUser {
                    username: Some(username.to_string()),
                    source,
                })
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
            return Err(UserError::BadName {
                name: username.to_string(),
                why: NameRefusal::BreaksRule,
            });
        }
        if !password_length_ok(password) {
            return Err(UserError::BadPasswordLength);
        }
        if self.mode()? == PasswordMode::Beside && !plausible_email(email) {
            return Err(UserError::BadEmail {
                username: username.to_string(),
            });
        }
        if self.load(username)?.is_some() {
            return Err(UserError::NameTaken {
                username: username.to_string(),
            });
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

    /// Whether an account other than `except` (a `users._id`) has `field` equal to `value`,
    /// ignoring ASCII case.
    pub fn taken(&self, field: &str, value: &str, except: Option<&str>) -> Result<bool, UserError> {
        let docs = self.store.find(
            Collection::Users,
            &Query::new().with(Cond::ContainsAny(
                vec![field.to_string()],
                vec![value.to_string()],
            )),
        )?;
        Ok(docs.iter().any(|d| {
            d.get(field)
                .and_then(Value::as_str)
                .is_some_and(|v| v.eq_ignore_ascii_case(value))
                && (except.is_none() || d.get("_id").and_then(Value::as_str) != except)
        }))
    }

    /// Saves `user` with `email` as its new address, unless another account has that
    /// address (ignoring case): [`UserError::EmailTaken`]. Checked and saved under the
    /// accounts' write lock.
    pub fn save_with_email(&self, user: &mut User, email: &str) -> Result<(), UserError> {
        let _held = self.writes.lock();
        if !email.is_empty()
            && !email.eq_ignore_ascii_case(&user.email)
            && self.taken("email", email, Some(&user.id))?
        {
            return Err(UserError::EmailTaken {
                username: user.username.clone(),
            });
        }
        user.email = email.to_string();
        self.save(user)
    }

    /// Signs a user up from the web form: the account starts pending (an approver accepts
    /// it). The caller has validated the fields; a username or email that an account has
    /// already, ignoring case, is refused ([`UserError::NameOrEmailTaken`]: Fishtest does
    /// not say which), checked and inserted under the accounts' write lock (and a duplicate
    /// key the store reports, from another instance, is the same refusal).
    pub fn register(
        &self,
        username: &str,
        password: &str,
        email: &str,
        tests_repo: &str,
    ) -> Result<User, UserError> {
        if !valid_username(username) {
            return Err(UserError::BadName {
                name: username.to_string(),
                why: NameRefusal::BreaksRuleAtSignup,
            });
        }
        let taken = || UserError::NameOrEmailTaken {
            username: username.to_string(),
        };
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
        // The slow hash first, outside the lock.
        self.set_password(&mut user, password)?;
        let doc = to_doc(&user)?;
        {
            let _held = self.writes.lock();
            if (!email.is_empty() && self.taken("email", email, None)?)
                || self.taken("username", username, None)?
            {
                return Err(taken());
            }
            match self.store.insert(Collection::Users, doc) {
                Err(StoreError::Duplicate(_)) => return Err(taken()),
                other => other?,
            };
        }
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
                serde_json::from_value(Value::Object(d)).map_err(|source| UserError::CorruptUser {
                    username: None,
                    source,
                })
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

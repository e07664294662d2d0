//! Browser sessions: server-side records, so that ending one on the server ends it for good.
//!
//! Owns: the logged-in sessions (random id → user, CSRF token, lifetime, a fingerprint of the
//! user's password hash), in memory behind one mutex, with a copy in the store's `kvstore`
//! (one document, rewritten on each login and logout) so that a restart keeps people logged in.
//! A session is ended when it is logged out, when it expires, and on its next use when its user
//! is gone, blocked, pending, or has a new password (the fingerprint no longer matches: the CLI
//! or another process changed it) — so a password change or a block ends all of a user's
//! sessions without a list per user.
//! Must not: know HTTP or cookies (the id it is given was already verified by `http::ui`), run
//! on the event loop (the first use reads the store, the lookups read users).

use std::collections::HashMap;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::users::User;
use super::{DbResult, RunDb};
use crate::store::Collection;

/// The `kvstore` document holding the sessions.
const KV_ID: &str = "sessions";
/// A remembered login lasts 400 days (Fishtest's cookie lifetime).
pub const REMEMBER_S: i64 = 400 * 24 * 3600;
/// A login that is not remembered ends with the browser, and on the server after a week.
pub const SHORT_S: i64 = 7 * 24 * 3600;
/// At most this many sessions are kept; beyond it the ones closest to expiry go first.
pub const MAX_SESSIONS: usize = 20_000;

/// One logged-in session.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Session {
    pub user: String,
    /// 64 lowercase hex characters.
    pub csrf: String,
    pub remember: bool,
    /// Unix seconds.
    pub expires: i64,
    /// A fingerprint of the user's password hash at login.
    pw: String,
}

/// What a session id stands for right now.
#[derive(Debug)]
pub enum SessionState {
    /// No live session with this id (never was, logged out, expired).
    Anonymous,
    /// The session was live but has just been ended: its user is blocked, pending or gone,
    /// or changed password.
    Ended,
    Active(Box<(Session, User)>),
}

/// The session table; `None` until first used (then read from the store).
#[derive(Default)]
pub(super) struct Sessions {
    map: Mutex<Option<HashMap<String, Session>>>,
    /// Serialises the store writes so that a newer copy is never overwritten by an older one.
    persist: Mutex<()>,
}

fn fingerprint(user: &User) -> String {
    hex::encode(&Sha256::digest(user.password.as_bytes())[..8])
}

fn now_s() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A new random id or token: 32 random bytes as 64 hex characters.
pub fn random_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

impl RunDb {
    fn with_sessions<R>(&self, f: impl FnOnce(&mut HashMap<String, Session>) -> R) -> DbResult<R> {
        let mut guard = self.sessions.map.lock();
        if guard.is_none() {
            let stored = self
                .store
                .get(Collection::Kvstore, KV_ID)?
                .and_then(|d| d.get("value").cloned())
                .and_then(|v| serde_json::from_value::<HashMap<String, Session>>(v).ok())
                .unwrap_or_default();
            *guard = Some(stored);
        }
        let map = guard.get_or_insert_with(HashMap::new);
        Ok(f(map))
    }

    fn persist_sessions(&self) -> DbResult<()> {
        let _order = self.sessions.persist.lock();
        let snapshot = self.with_sessions(|m| serde_json::to_value(&*m))?;
        let value = snapshot.unwrap_or(Value::Object(Default::default()));
        let doc = match json!({"_id": KV_ID, "value": value}) {
            Value::Object(m) => m,
            _ => return Ok(()),
        };
        self.store.put(Collection::Kvstore, &doc)?;
        Ok(())
    }

    /// The state of session `id`; a session that must end is removed here.
    pub fn session(&self, id: &str) -> DbResult<SessionState> {
        let Some(session) = self.with_sessions(|m| m.get(id).cloned())? else {
            return Ok(SessionState::Anonymous);
        };
        if session.expires <= now_s() {
            self.session_end(id)?;
            return Ok(SessionState::Anonymous);
        }
        match self.users.get(&session.user)? {
            Some(user) if !user.blocked && !user.pending && fingerprint(&user) == session.pw => {
                Ok(SessionState::Active(Box::new((session, user))))
            }
            _ => {
                self.session_end(id)?;
                Ok(SessionState::Ended)
            }
        }
    }

    /// Starts a session for `user` under a new id; returns the id and the session.
    pub fn session_start(&self, user: &User, remember: bool) -> DbResult<(String, Session)> {
        let id = random_token();
        let now = now_s();
        let session = Session {
            user: user.username.clone(),
            csrf: random_token(),
            remember,
            expires: now + if remember { REMEMBER_S } else { SHORT_S },
            pw: fingerprint(user),
        };
        self.with_sessions(|m| {
            if m.len() >= MAX_SESSIONS {
                m.retain(|_, s| s.expires > now);
            }
            while m.len() >= MAX_SESSIONS {
                let Some(first) = m
                    .iter()
                    .min_by_key(|(_, s)| s.expires)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                m.remove(&first);
            }
            m.insert(id.clone(), session.clone());
        })?;
        self.persist_sessions()?;
        Ok((id, session))
    }

    /// Ends session `id` (logout); an unknown id is fine.
    pub fn session_end(&self, id: &str) -> DbResult<()> {
        if self.with_sessions(|m| m.remove(id).is_some())? {
            self.persist_sessions()?;
        }
        Ok(())
    }

    /// Ends every session of `username` (for an administrative change made in this process;
    /// changes made elsewhere end them on next use, see the module docs).
    pub fn sessions_end_user(&self, username: &str) -> DbResult<usize> {
        let ended = self.with_sessions(|m| {
            let before = m.len();
            m.retain(|_, s| s.user != username);
            before - m.len()
        })?;
        if ended > 0 {
            self.persist_sessions()?;
        }
        Ok(ended)
    }
}

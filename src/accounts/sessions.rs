//! Browser sessions: server-side records, so that ending one on the server ends it for good.
//!
//! Owns: the logged-in sessions (random id → user, CSRF token, lifetime, a fingerprint of the
//! user's password hash), in memory behind one mutex, with a copy in the store's `shoal_kvstore`
//! (one document per session, `_id` `session:<id>`, written at login and deleted when the
//! session ends) so that a restart keeps people logged in.
//! On a shared store (several instances on one MongoDB database) the table is only a cache:
//! an id it does not know is read through from the store, and a cached session last checked
//! against the store more than `session_recheck_s` ago is read again, so a session made on
//! one instance is live on all and a logout on one ends it on all within that window. With
//! one process on its store (SQLite) the table is the truth and a page view reads no store.
//! A session is ended when it is logged out, when it expires, and on its next use when its user
//! is gone, blocked, pending, or has a new password (the fingerprint no longer matches: the CLI
//! or another process changed it) — so a password change or a block ends all of a user's
//! sessions without a list per user.
//! Must not: know HTTP or cookies (the id it is given was already verified by `http::ui`), run
//! on the event loop (the first use reads the store, the lookups read users).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::store::{Cond, Query};
use sha2::{Digest, Sha256};

use super::{Accounts, User, UserError};
use crate::store::Collection;

/// The `kind` of the `shoal_kvstore` documents holding sessions, and their `_id` prefix.
const KIND: &str = "session";
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

/// A cached session and when it was last read from (or written to) the store.
type Entry = (Session, Instant);

/// The session table; `None` until first used (then read from the store).
#[derive(Default)]
pub(super) struct Sessions {
    map: Mutex<Option<HashMap<String, Entry>>>,
    /// `Some(window)` when other instances share the store: misses are read through and
    /// entries older than the window are checked again (see the module docs).
    pub(super) recheck: Option<Duration>,
}

fn kv_id(id: &str) -> String {
    format!("{KIND}:{id}")
}

fn fingerprint(user: &User) -> String {
    hex::encode(&Sha256::digest(user.secret().as_bytes())[..8])
}

fn now_s() -> i64 {
    chrono::Utc::now().timestamp()
}

/// A new random id or token: 32 random bytes as 64 hex characters.
pub fn random_token() -> String {
    hex::encode(rand::random::<[u8; 32]>())
}

impl Accounts {
    fn with_sessions<R>(
        &self,
        f: impl FnOnce(&mut HashMap<String, Entry>) -> R,
    ) -> Result<R, UserError> {
        let mut guard = self.sessions.map.lock();
        if guard.is_none() {
            let docs = self.store.find(
                Collection::ShoalKv,
                &Query::new().with(Cond::Eq("kind".into(), Value::String(KIND.into()))),
            )?;
            let stored = docs
                .into_iter()
                .filter_map(|d| {
                    let id = d
                        .get("_id")?
                        .as_str()?
                        .strip_prefix("session:")?
                        .to_string();
                    let session = serde_json::from_value(d.get("session")?.clone()).ok()?;
                    Some((id, (session, Instant::now())))
                })
                .collect();
            *guard = Some(stored);
        }
        let map = guard.get_or_insert_with(HashMap::new);
        Ok(f(map))
    }

    fn store_session(&self, id: &str, session: &Session) -> Result<(), UserError> {
        let doc = json!({"_id": kv_id(id), "kind": KIND, "session": session});
        if let Value::Object(doc) = doc {
            self.store.put(Collection::ShoalKv, &doc)?;
        }
        Ok(())
    }

    fn forget_sessions(&self, ids: &[String]) -> Result<(), UserError> {
        for id in ids {
            self.store.delete(Collection::ShoalKv, &kv_id(id))?;
        }
        Ok(())
    }

    /// Session `id` as the store holds it now (`None`: no such session there).
    fn read_session(&self, id: &str) -> Result<Option<Session>, UserError> {
        let doc = self.store.get(Collection::ShoalKv, &kv_id(id))?;
        Ok(doc
            .and_then(|d| d.get("session").cloned())
            .and_then(|v| serde_json::from_value(v).ok()))
    }

    /// The state of session `id`; a session that must end is removed here.
    pub fn session(&self, id: &str) -> Result<SessionState, UserError> {
        let cached = self.with_sessions(|m| m.get(id).cloned())?;
        let session = match (cached, self.sessions.recheck) {
            (Some((session, _)), None) => session,
            (Some((session, at)), Some(window)) if at.elapsed() < window => session,
            (None, None) => return Ok(SessionState::Anonymous),
            // A shared store: a miss or a stale entry is read through.
            (_, Some(_)) => match self.read_session(id)? {
                Some(session) => {
                    let fresh = (session.clone(), Instant::now());
                    self.with_sessions(|m| m.insert(id.to_string(), fresh))?;
                    session
                }
                None => {
                    self.with_sessions(|m| m.remove(id))?;
                    return Ok(SessionState::Anonymous);
                }
            },
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
    pub fn session_start(
        &self,
        user: &User,
        remember: bool,
    ) -> Result<(String, Session), UserError> {
        let id = random_token();
        let now = now_s();
        let session = Session {
            user: user.username.clone(),
            csrf: random_token(),
            remember,
            expires: now + if remember { REMEMBER_S } else { SHORT_S },
            pw: fingerprint(user),
        };
        let dropped = self.with_sessions(|m| {
            let mut dropped = Vec::new();
            if m.len() >= MAX_SESSIONS {
                dropped.extend(
                    m.iter()
                        .filter(|(_, (s, _))| s.expires <= now)
                        .map(|(k, _)| k.clone()),
                );
                for k in &dropped {
                    m.remove(k);
                }
            }
            while m.len() >= MAX_SESSIONS {
                let Some(first) = m
                    .iter()
                    .min_by_key(|(_, (s, _))| s.expires)
                    .map(|(k, _)| k.clone())
                else {
                    break;
                };
                m.remove(&first);
                dropped.push(first);
            }
            m.insert(id.clone(), (session.clone(), Instant::now()));
            dropped
        })?;
        self.forget_sessions(&dropped)?;
        self.store_session(&id, &session)?;
        Ok((id, session))
    }

    /// Ends session `id` (logout); an unknown id is fine.
    pub fn session_end(&self, id: &str) -> Result<(), UserError> {
        let known = self.with_sessions(|m| m.remove(id).is_some())?;
        // On a shared store the session may live there without being cached here.
        if known || self.sessions.recheck.is_some() {
            self.forget_sessions(&[id.to_string()])?;
        }
        Ok(())
    }

    /// Ends every session of `username` (for an administrative change made in this process;
    /// changes made elsewhere end them on next use, see the module docs).
    pub fn sessions_end_user(&self, username: &str) -> Result<usize, UserError> {
        let ended: Vec<String> = self.with_sessions(|m| {
            let ids: Vec<String> = m
                .iter()
                .filter(|(_, (s, _))| s.user == username)
                .map(|(k, _)| k.clone())
                .collect();
            for k in &ids {
                m.remove(k);
            }
            ids
        })?;
        self.forget_sessions(&ended)?;
        Ok(ended.len())
    }
}

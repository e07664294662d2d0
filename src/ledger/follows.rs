//! Follows: the runs each user follows, how far they have read, and their feed token.
//!
//! Owns: the `shoal_kvstore` documents `follows:<user>` (`{kind: "follows", user, runs: [{run_id,
//! label, since}], read, feed}`: `since` and `read` are action times, seconds since the epoch;
//! `feed` is the SHA-256 of the user's feed token) and `feed:<sha256 of the token>` (`{kind:
//! "feed", user}`: the feed URL's lookup, keyed by the token's hash so that the store never
//! holds a working URL); the cap [`MAX_FOLLOWS`]; a per-user copy of the follows document in
//! memory, read again after [`REREAD`] (dropped whole past [`CACHED_USERS`] users).
//! Must not: know runs beyond their ids and labels, or HTTP; write the store under a run's
//! lock (nothing here is called under one).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Ledger, LedgerResult};
use crate::store::{Collection, Doc};

/// The most runs one user may follow.
pub const MAX_FOLLOWS: usize = 1000;
/// Users whose follows are kept in memory before the copy is dropped and read again.
const CACHED_USERS: usize = 10_000;
/// How long a follows document is trusted in memory before it is read again.
const REREAD: Duration = Duration::from_secs(30);
/// The `kind` of the follows documents and their `_id` prefix.
const KIND: &str = "follows";
/// The `kind` of the feed lookup documents and their `_id` prefix.
const FEED_KIND: &str = "feed";

/// One followed run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Followed {
    pub run_id: String,
    /// The run's name when it was followed (its `new_tag`).
    #[serde(default)]
    pub label: String,
    /// When it was followed (seconds since the epoch): only later actions are notices.
    pub since: f64,
}

/// A user's follows as stored.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Follows {
    #[serde(default)]
    pub runs: Vec<Followed>,
    /// Notices at or before this time are read.
    #[serde(default)]
    pub read: f64,
    /// The SHA-256 (hex) of the live feed token, if the user has one.
    #[serde(default)]
    pub feed: Option<String>,
}

impl Follows {
    /// Whether `run_id` is followed.
    pub fn follows(&self, run_id: &str) -> bool {
        self.runs.iter().any(|f| f.run_id == run_id)
    }
}

/// What [`Ledger::follow`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Follow {
    Added,
    /// The run was followed already: nothing changed.
    Already,
    /// The user follows [`MAX_FOLLOWS`] runs: nothing changed.
    Full,
}

/// The follows kept in memory (a copy of each user's document).
#[derive(Default)]
pub(super) struct FollowTable {
    /// Serialises each read-modify-write of a follows document.
    write: Mutex<()>,
    docs: Mutex<HashMap<String, (Arc<Follows>, Instant)>>,
}

fn doc_id(user: &str) -> String {
    format!("{KIND}:{user}")
}

fn feed_id(hash: &str) -> String {
    format!("{FEED_KIND}:{hash}")
}

/// The hex SHA-256 of a feed token.
fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// Seconds since the epoch, as action documents keep time.
pub(super) fn now_s() -> f64 {
    chrono::Utc::now().timestamp_micros() as f64 / 1e6
}

fn to_doc(v: Value) -> Doc {
    match v {
        Value::Object(m) => m,
        _ => Doc::new(),
    }
}

impl Ledger {
    /// `user`'s follows: from memory, read again from the store once [`REREAD`] old (another
    /// instance may have changed them); an unchanged document keeps its `Arc`.
    pub fn follows(&self, user: &str) -> LedgerResult<Arc<Follows>> {
        let kept = self.follows.docs.lock().get(user).cloned();
        if let Some((f, at)) = &kept
            && at.elapsed() < REREAD
        {
            return Ok(Arc::clone(f));
        }
        let stored = self.stored_follows(user)?;
        let stored = match kept {
            Some((f, _)) if *f == stored => f,
            _ => Arc::new(stored),
        };
        self.remember(user, Arc::clone(&stored));
        Ok(stored)
    }

    fn stored_follows(&self, user: &str) -> LedgerResult<Follows> {
        Ok(self
            .store
            .get(Collection::ShoalKv, &doc_id(user))?
            .and_then(|d| serde_json::from_value::<Follows>(Value::Object(d)).ok())
            .unwrap_or_default())
    }

    fn remember(&self, user: &str, f: Arc<Follows>) {
        let mut docs = self.follows.docs.lock();
        if docs.len() >= CACHED_USERS && !docs.contains_key(user) {
            docs.clear();
        }
        docs.insert(user.to_string(), (f, Instant::now()));
    }

    /// Changes `user`'s follows with `change` (which says whether it changed anything) and
    /// stores them; returns `change`'s answer.
    fn change_follows<R>(
        &self,
        user: &str,
        change: impl FnOnce(&mut Follows) -> (bool, R),
    ) -> LedgerResult<R> {
        let _write = self.follows.write.lock();
        // The stored document (another instance may have changed it), not the kept copy.
        let mut f = self.stored_follows(user)?;
        let (changed, answer) = change(&mut f);
        if changed {
            let mut doc = to_doc(json!({"_id": doc_id(user), "kind": KIND, "user": user}));
            if let Value::Object(fields) = serde_json::to_value(&f).unwrap_or(Value::Null) {
                doc.extend(fields);
            }
            self.store.put(Collection::ShoalKv, &doc)?;
            self.remember(user, Arc::new(f));
        }
        Ok(answer)
    }

    /// `user` follows `run_id` from now on (`label`: the run's name, for lists).
    pub fn follow(&self, user: &str, run_id: &str, label: &str) -> LedgerResult<Follow> {
        self.change_follows(user, |f| {
            if f.follows(run_id) {
                (false, Follow::Already)
            } else if f.runs.len() >= MAX_FOLLOWS {
                (false, Follow::Full)
            } else {
                f.runs.push(Followed {
                    run_id: run_id.to_string(),
                    label: label.chars().take(64).collect(),
                    since: now_s(),
                });
                (true, Follow::Added)
            }
        })
    }

    /// `user` no longer follows `run_id`; true if they did.
    pub fn unfollow(&self, user: &str, run_id: &str) -> LedgerResult<bool> {
        self.change_follows(user, |f| {
            let before = f.runs.len();
            f.runs.retain(|r| r.run_id != run_id);
            let changed = f.runs.len() != before;
            (changed, changed)
        })
    }

    /// Marks `user`'s notices up to `time` read (never moves the mark back).
    pub fn mark_read(&self, user: &str, time: f64) -> LedgerResult<()> {
        self.change_follows(user, |f| {
            let changed = time > f.read;
            if changed {
                f.read = time;
            }
            (changed, ())
        })
    }

    /// A new feed token for `user` (the old one, if any, stops working): the only time the
    /// token itself is seen; the store keeps its hash.
    pub fn new_feed(&self, user: &str) -> LedgerResult<String> {
        let token = hex::encode(rand::random::<[u8; 32]>());
        let hash = token_hash(&token);
        let lookup = to_doc(json!({"_id": feed_id(&hash), "kind": FEED_KIND, "user": user}));
        self.store.put(Collection::ShoalKv, &lookup)?;
        let old = self.change_follows(user, |f| (true, f.feed.replace(hash)))?;
        if let Some(old) = old {
            self.store.delete(Collection::ShoalKv, &feed_id(&old))?;
        }
        Ok(token)
    }

    /// Revokes `user`'s feed token; true if there was one.
    pub fn revoke_feed(&self, user: &str) -> LedgerResult<bool> {
        let old = self.change_follows(user, |f| {
            let old = f.feed.take();
            (old.is_some(), old)
        })?;
        if let Some(old) = &old {
            self.store.delete(Collection::ShoalKv, &feed_id(old))?;
        }
        Ok(old.is_some())
    }

    /// Deletes everything kept for `user` (a deleted account): the follows document and the
    /// feed URL's lookup.
    pub fn forget_follows(&self, user: &str) -> LedgerResult<()> {
        self.revoke_feed(user)?;
        let _write = self.follows.write.lock();
        self.store.delete(Collection::ShoalKv, &doc_id(user))?;
        self.follows.docs.lock().remove(user);
        Ok(())
    }

    /// The user whose live feed token `token` is, if any.
    pub fn feed_user(&self, token: &str) -> LedgerResult<Option<String>> {
        if token.len() != 64 || !token.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(None);
        }
        let hash = token_hash(&token.to_ascii_lowercase());
        let Some(doc) = self.store.get(Collection::ShoalKv, &feed_id(&hash))? else {
            return Ok(None);
        };
        let Some(user) = doc.get("user").and_then(Value::as_str) else {
            return Ok(None);
        };
        // The user's own document is the authority: a lookup left behind by a crash between
        // two writes is not a live token.
        Ok((self.follows(user)?.feed.as_deref() == Some(hash.as_str())).then(|| user.to_string()))
    }
}

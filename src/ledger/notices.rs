//! Notices: what a user is told about the runs they follow, derived from the action log.
//!
//! A notice is an action of a [`NOTICE_KINDS`] kind (a run finished, stopped by a user or by
//! a worker's fatal error, approved, deleted) about a followed run, logged after the user
//! followed it; it is unread while newer than the user's read mark. Nothing is written per
//! notice: the action log is the one record, and `/api/actions` keeps answering Fishtest's
//! follow script from it.
//! Owns: the unread counts kept per user (the header's number), each valid while the user's
//! follows are the ones it was counted from and no notice kind was logged since (an epoch
//! bumped once such an action is durable: [`Ledger::note_actions`]); on a secondary, which
//! does not see the primary's actions, for at most [`SECONDARY_UNREAD_S`] too.
//! Must not: write the store; read it under a run's lock.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::{Value, json};

use super::follows::Follows;
use super::{Ledger, LedgerResult};
use crate::store::{Collection, Cond, Doc, Order, Query};

/// The action kinds a follower is told about.
pub const NOTICE_KINDS: [&str; 4] = ["finished_run", "stop_run", "approve_run", "delete_run"];
/// The most notices read at once (a list, a feed, a count: "100+" beyond).
pub const MAX_NOTICES: usize = 100;
/// How long a secondary trusts an unread count.
pub const SECONDARY_UNREAD_S: u64 = 30;
/// The newest unread notices kept with a count (for the header's script).
pub const UNREAD_KEPT: usize = 10;
/// Users whose unread counts are kept before the table is emptied.
const CACHED_COUNTS: usize = 10_000;

/// One notice.
#[derive(Debug, Clone, PartialEq)]
pub struct Notice {
    /// The action's `_id`.
    pub id: String,
    /// The action kind (one of [`NOTICE_KINDS`]).
    pub action: String,
    pub run_id: String,
    /// The action's run label (`new_tag[:23]-md5[:7]`), else the label kept with the follow.
    pub run: String,
    /// Who did it.
    pub username: String,
    pub message: String,
    /// Seconds since the epoch.
    pub time: f64,
    pub unread: bool,
}

/// One user's unread count, and what it was counted from.
struct Count {
    n: u64,
    /// The newest unread notices (at most [`UNREAD_KEPT`]).
    newest: Arc<Vec<Notice>>,
    /// The notice epoch when it was counted.
    epoch: u64,
    /// The follows it was counted from (a change to them is a new `Arc`).
    follows: Arc<Follows>,
    at: Instant,
}

/// The unread counts, per user.
#[derive(Default)]
pub(super) struct UnreadCounts {
    counts: Mutex<HashMap<String, Count>>,
}

impl Ledger {
    /// Tells the ledger that these action documents are durable (the journal's group commit,
    /// or [`Ledger::log_action`]): a notice kind among them makes every unread count stale.
    /// Memory only.
    pub fn note_actions(&self, actions: &[Doc]) {
        for a in actions {
            if let Some(kind) = a.get("action").and_then(Value::as_str) {
                self.note_kind(kind);
            }
        }
    }

    /// An action of `kind` is durable (memory only).
    pub(super) fn note_kind(&self, kind: &str) {
        if NOTICE_KINDS.contains(&kind) {
            self.notice_epoch.fetch_add(1, Ordering::Release);
        }
    }

    /// `user`'s notices, newest first (at most [`MAX_NOTICES`]); with `unread_only`, only
    /// the unread ones.
    pub fn notices(&self, user: &str, unread_only: bool) -> LedgerResult<Vec<Notice>> {
        self.notices_of(&*self.follows(user)?, unread_only)
    }

    fn notices_of(&self, follows: &Follows, unread_only: bool) -> LedgerResult<Vec<Notice>> {
        if follows.runs.is_empty() {
            return Ok(Vec::new());
        }
        let since: HashMap<&str, (f64, &str)> = follows
            .runs
            .iter()
            .map(|f| (f.run_id.as_str(), (f.since, f.label.as_str())))
            .collect();
        let mut after = follows
            .runs
            .iter()
            .map(|f| f.since)
            .fold(f64::INFINITY, f64::min);
        if unread_only {
            after = after.max(follows.read);
        }
        let mut q = Query::new()
            .with(Cond::In(
                "run_id".into(),
                follows.runs.iter().map(|f| json!(f.run_id)).collect(),
            ))
            .with(Cond::In(
                "action".into(),
                NOTICE_KINDS.iter().map(|k| json!(k)).collect(),
            ))
            .with(Cond::Gt("time".into(), json!(after)))
            .sort("time", Order::Desc)
            .sort("_id", Order::Desc);
        // Room for the few left out below (actions before a later follow, refused stops).
        q.limit = Some(u64::try_from(MAX_NOTICES.saturating_mul(2)).unwrap_or(u64::MAX));
        let docs = self.store.find(Collection::Actions, &q)?;
        let text = |d: &Doc, k: &str| {
            d.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        let mut out = Vec::new();
        for d in &docs {
            let run_id = text(d, "run_id");
            let time = d.get("time").and_then(Value::as_f64).unwrap_or(0.0);
            let Some((followed, label)) = since.get(run_id.as_str()) else {
                continue;
            };
            let message = text(d, "message");
            // A worker's stop_run below the CPU-hour bar ended only its own task.
            if time <= *followed || message.ends_with("(not authorized)") {
                continue;
            }
            let unread = time > follows.read;
            if unread_only && !unread {
                continue;
            }
            let run = match text(d, "run") {
                r if r.is_empty() => label.to_string(),
                r => r,
            };
            out.push(Notice {
                id: text(d, "_id"),
                action: text(d, "action"),
                run_id,
                run,
                username: text(d, "username"),
                message,
                time,
                unread,
            });
            if out.len() >= MAX_NOTICES {
                break;
            }
        }
        Ok(out)
    }

    /// How many unread notices `user` has (at most [`MAX_NOTICES`]).
    pub fn unread_count(&self, user: &str) -> LedgerResult<u64> {
        Ok(self.unread(user)?.0)
    }

    /// How many unread notices `user` has (at most [`MAX_NOTICES`]) and the newest of them
    /// (at most [`UNREAD_KEPT`]): kept in memory until a notice kind is logged or the user's
    /// follows change, so a page or a poll costs no store read.
    pub fn unread(&self, user: &str) -> LedgerResult<(u64, Arc<Vec<Notice>>)> {
        let epoch = self.notice_epoch.load(Ordering::Acquire);
        let follows = self.follows(user)?;
        if follows.runs.is_empty() {
            return Ok((0, Arc::new(Vec::new())));
        }
        let ttl = Duration::from_secs(SECONDARY_UNREAD_S);
        if let Some(c) = self.unread.counts.lock().get(user)
            && c.epoch == epoch
            && Arc::ptr_eq(&c.follows, &follows)
            && (self.primary || c.at.elapsed() < ttl)
        {
            return Ok((c.n, Arc::clone(&c.newest)));
        }
        let mut unread = self.notices_of(&follows, true)?;
        let n = u64::try_from(unread.len()).unwrap_or(u64::MAX);
        unread.truncate(UNREAD_KEPT);
        let newest = Arc::new(unread);
        let mut counts = self.unread.counts.lock();
        if counts.len() >= CACHED_COUNTS && !counts.contains_key(user) {
            counts.clear();
        }
        counts.insert(
            user.to_string(),
            Count {
                n,
                newest: Arc::clone(&newest),
                epoch,
                follows,
                at: Instant::now(),
            },
        );
        Ok((n, newest))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::ledger::Follow;
    use crate::store::testkit::temp_store;

    fn run_action(ledger: &Ledger, action: &str, run: &str, message: &str) {
        let mut f = Doc::new();
        f.insert("run_id".into(), json!(run));
        f.insert("run".into(), json!(format!("{run}-label")));
        f.insert("message".into(), json!(message));
        ledger.log_action(action, "someone", f).expect("log");
    }

    #[test]
    fn notices_are_later_actions_of_followed_runs_and_the_count_follows_them() {
        let (_dir, store) = temp_store();
        let ledger = Ledger::new(store, true);
        let (a, b) = ("a".repeat(24), "b".repeat(24));
        run_action(&ledger, "finished_run", &a, "before the follow");
        assert_eq!(
            ledger.follow("bob", &a, "A").expect("follow"),
            Follow::Added
        );
        assert_eq!(
            ledger.follow("bob", &a, "A").expect("again"),
            Follow::Already
        );
        assert_eq!(ledger.unread_count("bob").expect("count"), 0);
        // A moment later than the follow (action times are microseconds).
        std::thread::sleep(Duration::from_millis(5));
        run_action(&ledger, "stop_run", &a, "bad bench (not authorized)");
        run_action(&ledger, "new_run", &a, "");
        run_action(&ledger, "finished_run", &b, "not followed");
        assert_eq!(ledger.unread_count("bob").expect("count"), 0);
        run_action(&ledger, "approve_run", &a, "approved");
        run_action(&ledger, "finished_run", &a, "done");
        // The epoch made the kept count stale.
        assert_eq!(ledger.unread_count("bob").expect("count"), 2);
        let all = ledger.notices("bob", false).expect("notices");
        let kinds: Vec<_> = all.iter().map(|n| n.action.as_str()).collect();
        assert_eq!(kinds, ["finished_run", "approve_run"]);
        assert!(
            all.iter()
                .all(|n| n.unread && n.run == format!("{a}-label"))
        );
        // Read up to the older one: one left.
        ledger.mark_read("bob", all[1].time).expect("read");
        assert_eq!(ledger.unread_count("bob").expect("count"), 1);
        assert_eq!(
            ledger.unread("bob").expect("unread").1[0].action,
            "finished_run"
        );
        // Unfollowed: nothing.
        assert!(ledger.unfollow("bob", &a).expect("unfollow"));
        assert_eq!(ledger.unread_count("bob").expect("count"), 0);
        assert!(ledger.notices("bob", false).expect("notices").is_empty());
    }

    #[test]
    fn actions_made_durable_by_the_journal_make_counts_stale() {
        let (_dir, store) = temp_store();
        let ledger = Ledger::new(store.clone(), true);
        let a = "a".repeat(24);
        ledger.follow("bob", &a, "A").expect("follow");
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(ledger.unread_count("bob").expect("count"), 0);
        // Written behind the ledger's back (as the journal does): not seen until noted.
        let mut f = Doc::new();
        f.insert("run_id".into(), json!(a));
        f.insert("_id".into(), json!(crate::store::new_object_id()));
        let doc = crate::ledger::document("stop_run", "w", f);
        store
            .journal_append(&[], std::slice::from_ref(&doc))
            .expect("append");
        assert_eq!(ledger.unread_count("bob").expect("kept"), 0);
        ledger.note_actions(&[doc]);
        assert_eq!(ledger.unread_count("bob").expect("count"), 1);
    }

    #[test]
    fn feed_tokens_are_stored_hashed_and_revocable() {
        let (_dir, store) = temp_store();
        let ledger = Ledger::new(store.clone(), true);
        let token = ledger.new_feed("bob").expect("feed");
        assert_eq!(token.len(), 64);
        assert_eq!(
            ledger.feed_user(&token).expect("user").as_deref(),
            Some("bob")
        );
        let docs = store
            .find(Collection::ShoalKv, &Query::new())
            .expect("kvstore");
        let text = serde_json::to_string(&docs).expect("json");
        assert!(!text.contains(&token), "the token itself is stored");
        let second = ledger.new_feed("bob").expect("again");
        assert_eq!(ledger.feed_user(&token).expect("old"), None);
        assert_eq!(
            ledger.feed_user(&second).expect("new").as_deref(),
            Some("bob")
        );
        assert!(ledger.revoke_feed("bob").expect("revoke"));
        assert_eq!(ledger.feed_user(&second).expect("revoked"), None);
        assert!(!ledger.revoke_feed("bob").expect("none left"));
        assert_eq!(ledger.feed_user("short").expect("malformed"), None);
    }
}

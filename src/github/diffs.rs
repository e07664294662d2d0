//! A run's diff: fetched from GitHub once, after the run is created, and kept in the store
//! beside the run (`shoal_kvstore` `run_diff:<run id>`), so the run page shows it while GitHub is
//! down and it costs the quota once.
//!
//! The kept diffs are bounded: a diff fetched more than [`DIFF_KEEP_DAYS`] days ago is
//! deleted once its run is finished (or gone), by the periodic `prune_github` job
//! ([`Github::prune_blocking`], which also bounds the kept GitHub replies).
//!
//! A run whose diff or ancestry could not be had at creation (GitHub slow or down) is asked
//! for again in the background when its page is viewed, at most every [`DIFF_RETRY`].
//!
//! The run page reads the kept diff from memory (`Kept`): a complete one (with the base's
//! ancestry, which nothing changes any more) is read from the store again only after
//! [`DIFF_REREAD_COMPLETE`], a missing or incomplete one (another instance may keep it
//! meanwhile) after [`DIFF_REREAD`]; what this instance keeps or prunes is in memory at once.
//! So a page view costs no store round trip but the first in a while (on MongoDB, a network
//! round trip each).
//!
//! Must not: fetch while a page waits (the run page reads only what is kept), or keep more
//! than [`MAX_DIFF_BYTES`] of one diff.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Github, GithubError, RepoName, parse};
use crate::store::{Collection, Doc};

/// The most of one diff kept (a longer one is cut at a line, and says so).
pub const MAX_DIFF_BYTES: usize = 1 << 20;

/// A kept diff older than this many days is deleted once its run is finished.
pub const DIFF_KEEP_DAYS: i64 = 30;
/// A run whose diff or base ancestry could not be fetched (GitHub slow or down at that
/// moment) is asked for again from its page, at most this often.
pub const DIFF_RETRY: std::time::Duration = std::time::Duration::from_secs(300);
/// The most runs remembered as retried (the oldest are forgotten).
const RETRY_MEMORY: usize = 10_000;

/// A missing or incomplete kept diff is read from the store again after this long.
pub const DIFF_REREAD: std::time::Duration = std::time::Duration::from_secs(30);
/// A complete kept diff is read from the store again after this long (only a pruning by
/// another instance can change it).
pub const DIFF_REREAD_COMPLETE: std::time::Duration = std::time::Duration::from_secs(3_600);
/// The most diff text kept in memory; past it the memory is dropped whole.
const KEPT_BYTES: usize = 32 << 20;

/// The kept diffs as last read or written, by run id, with when (`None`: none kept).
#[derive(Debug, Default)]
pub(super) struct Kept {
    runs: std::collections::HashMap<String, (Option<Arc<StoredDiff>>, std::time::Instant)>,
    bytes: usize,
}

impl Kept {
    /// What is known of `run_id`'s diff, if it is fresh enough to answer without the store.
    fn fresh(&self, run_id: &str) -> Option<Option<Arc<StoredDiff>>> {
        let (diff, at) = self.runs.get(run_id)?;
        let reread = match diff {
            Some(d) if d.ancestry.is_some() => DIFF_REREAD_COMPLETE,
            _ => DIFF_REREAD,
        };
        (at.elapsed() < reread).then(|| diff.clone())
    }

    /// Remembers what a store read begun at `started` found, unless something was remembered
    /// meanwhile (a diff kept during the read is not replaced by the read's older "none").
    fn remember_read(
        &mut self,
        run_id: &str,
        diff: Option<Arc<StoredDiff>>,
        started: std::time::Instant,
    ) {
        if self.runs.get(run_id).is_some_and(|(_, at)| *at >= started) {
            return;
        }
        self.remember(run_id, diff);
    }

    fn remember(&mut self, run_id: &str, diff: Option<Arc<StoredDiff>>) {
        let size = |d: &Option<Arc<StoredDiff>>| d.as_ref().map_or(0, |d| d.diff.len());
        let adding = size(&diff);
        if self.bytes + adding > KEPT_BYTES {
            self.runs.clear();
            self.bytes = 0;
        }
        self.bytes += adding;
        if let Some((old, _)) = self
            .runs
            .insert(run_id.to_string(), (diff, std::time::Instant::now()))
        {
            self.bytes = self.bytes.saturating_sub(size(&old));
        }
    }

    fn forget(&mut self, run_id: &str) {
        if let Some((old, _)) = self.runs.remove(run_id) {
            let size = old.as_ref().map_or(0, |d| d.diff.len());
            self.bytes = self.bytes.saturating_sub(size);
        }
    }
}

/// The runs whose diff is being fetched, and when each was last asked for again.
#[derive(Debug, Default)]
pub(super) struct Retries {
    busy: std::collections::HashSet<String>,
    last: std::collections::HashMap<String, std::time::Instant>,
}

/// The most diffs one pruning pass deletes (the next pass goes on).
const PRUNE_BATCH: u64 = 100;

/// What one pruning pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    pub replies: u64,
    pub diffs: u64,
}

/// A kept diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredDiff {
    /// `owner/name` of the repository compared in.
    pub repo: String,
    pub base: String,
    pub new: String,
    /// The unified diff (cut at [`MAX_DIFF_BYTES`] when `truncated`).
    pub diff: String,
    pub truncated: bool,
    /// When it was fetched (Unix seconds).
    pub fetched_at: i64,
    /// Where the base stood against official master when the diff was fetched (absent when
    /// master was not known yet or GitHub could not say).
    #[serde(default)]
    pub ancestry: Option<BaseAncestry>,
}

/// Where a run's base commit stands, as the run page warns about it (Fishtest's three
/// warnings).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct BaseAncestry {
    /// The base is official master or one of its ancestors.
    pub on_master: bool,
    /// The base is the new commit or one of its ancestors.
    pub ancestor_of_new: bool,
    /// The base is the newest commit both the new commit and master contain.
    pub latest_common: bool,
}

impl BaseAncestry {
    /// The run page's warnings, in Fishtest's words.
    pub fn warnings(&self) -> Vec<&'static str> {
        let mut w = Vec::new();
        if !self.on_master {
            w.push("base is not an ancestor of master");
        }
        if !self.ancestor_of_new {
            w.push("base is not an ancestor of new");
        } else if self.on_master && !self.latest_common {
            w.push("base is not the latest common ancestor of new and master");
        }
        w
    }
}

fn key(run_id: &str) -> String {
    format!("run_diff:{run_id}")
}

impl Github {
    /// Bounds what the component keeps in the store: the oldest GitHub replies beyond
    /// `client::MAX_STORED_REPLIES`, and the diffs fetched more than [`DIFF_KEEP_DAYS`] ago
    /// whose run `finished` says is finished (or gone). Blocking: the pool's.
    pub fn prune_blocking(
        &self,
        finished: impl Fn(&str) -> bool,
    ) -> Result<Pruned, crate::store::StoreError> {
        let replies =
            super::client::prune_replies(&*self.store, super::client::MAX_STORED_REPLIES)?;
        let before = chrono::Utc::now().timestamp() - DIFF_KEEP_DAYS * 86_400;
        let q = crate::store::Query::new()
            .with(crate::store::Cond::Lt(
                "value.fetched_at".into(),
                json!(before),
            ))
            .with(crate::store::Cond::Exists("value.diff".into(), true))
            .sort("value.fetched_at", crate::store::Order::Asc)
            .limit(PRUNE_BATCH);
        let mut diffs = 0;
        for doc in self.store.find(Collection::ShoalKv, &q)? {
            let Some(id) = doc.get("_id").and_then(Value::as_str) else {
                continue;
            };
            if let Some(run_id) = id.strip_prefix("run_diff:")
                && finished(run_id)
                && self.store.delete(Collection::ShoalKv, id)?
            {
                self.kept_diffs.lock().forget(run_id);
                diffs += 1;
            }
        }
        Ok(Pruned { replies, diffs })
    }

    /// The diff kept for a run, if any: from memory when fresh (module docs), else a
    /// blocking store read (call it in the pool). A store error answers none and is not
    /// remembered.
    pub fn stored_diff_blocking(&self, run_id: &str) -> Option<StoredDiff> {
        if let Some(known) = self.kept_diffs.lock().fresh(run_id) {
            return known.map(|d| (*d).clone());
        }
        let started = std::time::Instant::now();
        let doc = self.store.get(Collection::ShoalKv, &key(run_id)).ok()?;
        let diff: Option<StoredDiff> = doc.and_then(|doc| {
            serde_json::from_value(doc.get("value").cloned().unwrap_or(Value::Null)).ok()
        });
        let mut kept = self.kept_diffs.lock();
        kept.remember_read(run_id, diff.clone().map(Arc::new), started);
        match kept.fresh(run_id) {
            Some(known) => known.map(|d| (*d).clone()),
            None => diff,
        }
    }

    /// Fetches and keeps a run's diff in the background (after the run is created); nothing
    /// when an attempt for the run is under way.
    pub fn keep_diff_in_background(
        self: &Arc<Self>,
        run_id: String,
        tests_repo: String,
        base: String,
        new: String,
    ) {
        if !self.diff_retried.lock().busy.insert(run_id.clone()) {
            return;
        }
        let github = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(e) = github.keep_diff(&run_id, &tests_repo, &base, &new).await {
                tracing::info!(run = %run_id, error = %e, "no diff kept for the run");
            }
            github.diff_retried.lock().busy.remove(&run_id);
        });
    }

    /// A run page found no diff kept, or one without the base's ancestry: asks again in the
    /// background, at most every [`DIFF_RETRY`] per run and never while an attempt for the
    /// run is under way (the page never waits).
    pub fn retry_diff(
        self: &Arc<Self>,
        run_id: String,
        tests_repo: String,
        base: String,
        new: String,
    ) {
        {
            let now = std::time::Instant::now();
            let mut r = self.diff_retried.lock();
            if r.busy.contains(&run_id)
                || r.last
                    .get(&run_id)
                    .is_some_and(|at| now.duration_since(*at) < DIFF_RETRY)
            {
                return;
            }
            if r.last.len() >= RETRY_MEMORY {
                r.last.retain(|_, at| now.duration_since(*at) < DIFF_RETRY);
            }
            r.last.insert(run_id.clone(), now);
        }
        self.keep_diff_in_background(run_id, tests_repo, base, new);
    }

    /// Fetches a run's diff from GitHub and keeps it, unless one is kept already (one kept
    /// without the base's ancestry gets it, when GitHub can say now).
    pub async fn keep_diff(
        &self,
        run_id: &str,
        tests_repo: &str,
        base: &str,
        new: &str,
    ) -> Result<(), GithubError> {
        let repo = parse::repo_from_url(tests_repo)
            .or_else(|| RepoName::from_full(tests_repo))
            .ok_or_else(|| GithubError::BadInput(format!("not a repository: {tests_repo}")))?;
        let store = Arc::clone(&self.store);
        let id = key(run_id);
        let kept = self
            .offload
            .run(move || store.get(Collection::ShoalKv, &id))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        let kept: Option<StoredDiff> =
            kept.and_then(|doc| serde_json::from_value(doc.get("value").cloned()?).ok());
        let stored = match kept {
            Some(k) if k.ancestry.is_some() => return Ok(()),
            Some(mut k) => {
                let Some(a) = self.base_ancestry(&repo, base, new).await else {
                    return Ok(());
                };
                k.ancestry = Some(a);
                k
            }
            None => {
                let text = self.diff(&repo, base, new).await?;
                let ancestry = self.base_ancestry(&repo, base, new).await;
                let (diff, truncated) = cut(&text, MAX_DIFF_BYTES);
                StoredDiff {
                    repo: repo.full(),
                    base: base.to_string(),
                    new: new.to_string(),
                    diff: diff.to_string(),
                    truncated,
                    fetched_at: chrono::Utc::now().timestamp(),
                    ancestry,
                }
            }
        };
        let mut doc = Doc::new();
        doc.insert("_id".into(), json!(key(run_id)));
        doc.insert("value".into(), json!(stored));
        let store = Arc::clone(&self.store);
        match self
            .offload
            .run(move || store.put(Collection::ShoalKv, &doc))
            .await
        {
            Ok(Ok(())) => {
                self.kept_diffs
                    .lock()
                    .remember(run_id, Some(Arc::new(stored)));
                Ok(())
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "run diff not stored");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "run diff not stored");
                Ok(())
            }
        }
    }
}

impl Github {
    /// Where `base` stands against official master (as last refreshed) and `new`: three
    /// comparisons in `repo`'s network. `None` when master is not known or GitHub fails.
    pub async fn base_ancestry(
        &self,
        repo: &RepoName,
        base: &str,
        new: &str,
    ) -> Option<BaseAncestry> {
        let master = self.known_master().await?;
        let (to_master, to_new, master_to_new) = tokio::join!(
            self.ancestry(repo, &master.sha, base),
            self.ancestry(repo, base, new),
            self.ancestry(repo, &master.sha, new),
        );
        let (to_master, to_new, master_to_new) = match (to_master, to_new, master_to_new) {
            (Ok(a), Ok(b), Ok(c)) => (a, b, c),
            (a, b, c) => {
                for e in [a.err(), b.err(), c.err()].into_iter().flatten() {
                    tracing::info!(error = %e, "base's ancestry not known");
                }
                return None;
            }
        };
        // master...base ahead by nothing: base is in master. base...new behind by nothing:
        // base is in new. Then base is their newest common commit exactly when new has as
        // many commits of its own over base as over master.
        let on_master = to_master.ahead_by == 0;
        let ancestor_of_new = to_new.behind_by == 0;
        Some(BaseAncestry {
            on_master,
            ancestor_of_new,
            latest_common: on_master
                && ancestor_of_new
                && to_new.ahead_by == master_to_new.ahead_by,
        })
    }

    /// Official master as last refreshed, asked of GitHub first when it was never known
    /// (before the periodic refresh's first run).
    async fn known_master(&self) -> Option<Arc<super::Master>> {
        if self.master().is_none()
            && let Err(e) = self.refresh_master().await
        {
            tracing::info!(error = %e, "official master not known");
        }
        self.master()
    }

    /// Whether `sha` is official master or one of its ancestors (as master was last
    /// refreshed); `None` when that cannot be known now.
    pub async fn on_master(&self, sha: &str) -> Option<bool> {
        let master = self.known_master().await?;
        match self.ancestry(&self.official, &master.sha, sha).await {
            Ok(a) => Some(a.ahead_by == 0),
            Err(e) => {
                tracing::info!(error = %e, "whether the base is on master is not known");
                None
            }
        }
    }
}

/// `text` cut to at most `max` bytes at a line's end; whether it was cut.
fn cut(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = text[..end].rfind('\n').map_or(end, |i| i + 1);
    (&text[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn old_diffs_of_finished_runs_are_pruned() {
        let (_dir, store) = crate::store::testkit::temp_store();
        let ledger = Arc::new(crate::ledger::Ledger::new(Arc::clone(&store), true));
        let gh = Github::new(
            &super::super::GithubConfig::default(),
            Arc::clone(&store),
            crate::offload::Offload::new(1),
            ledger,
        )
        .unwrap();
        let now = chrono::Utc::now().timestamp();
        let old = now - (DIFF_KEEP_DAYS + 1) * 86_400;
        for (run, at) in [
            ("finished_old", old),
            ("running_old", old),
            ("gone_old", old),
            ("finished_new", now),
        ] {
            let d = StoredDiff {
                repo: "a/b".into(),
                base: "1".into(),
                new: "2".into(),
                diff: "x".into(),
                truncated: false,
                fetched_at: at,
                ancestry: None,
            };
            let mut doc = Doc::new();
            doc.insert("_id".into(), json!(key(run)));
            doc.insert("value".into(), json!(d));
            store.put(Collection::ShoalKv, &doc).unwrap();
        }
        let pruned = gh.prune_blocking(|run| run != "running_old").unwrap();
        assert_eq!(
            pruned,
            Pruned {
                replies: 0,
                diffs: 2
            }
        );
        assert!(gh.stored_diff_blocking("finished_old").is_none());
        assert!(gh.stored_diff_blocking("gone_old").is_none());
        assert!(gh.stored_diff_blocking("running_old").is_some());
        assert!(gh.stored_diff_blocking("finished_new").is_some());
    }

    /// The run page's read: from memory after the first (a diff deleted behind the
    /// component's back is still shown), dropped at once by this instance's pruning, read
    /// from the store again once old: a complete diff after an hour, a missing or incomplete
    /// one after 30 s. Fails on main: every read went to the store.
    /// A diff kept during a page's store read outlives the read's older "none" (on MongoDB
    /// the run page showed no diff for 30 s without `remember_read`).
    #[test]
    fn a_diff_kept_during_a_read_outlives_the_reads_none() {
        let mut kept = Kept::default();
        let started = std::time::Instant::now();
        let d = StoredDiff {
            repo: "a/b".into(),
            base: "1".into(),
            new: "2".into(),
            diff: "the diff".into(),
            truncated: false,
            fetched_at: 0,
            ancestry: None,
        };
        kept.remember("r", Some(Arc::new(d)));
        kept.remember_read("r", None, started);
        assert!(matches!(kept.fresh("r"), Some(Some(_))), "kept");
        kept.remember_read("r", None, std::time::Instant::now());
        assert!(matches!(kept.fresh("r"), Some(None)));
    }

    #[test]
    fn a_kept_diff_is_read_from_memory_until_it_is_old() {
        let (_dir, store) = crate::store::testkit::temp_store();
        let ledger = Arc::new(crate::ledger::Ledger::new(Arc::clone(&store), true));
        let gh = Github::new(
            &super::super::GithubConfig::default(),
            Arc::clone(&store),
            crate::offload::Offload::new(1),
            ledger,
        )
        .unwrap();
        let old = chrono::Utc::now().timestamp() - (DIFF_KEEP_DAYS + 1) * 86_400;
        let ancestry = Some(BaseAncestry {
            on_master: true,
            ancestor_of_new: true,
            latest_common: true,
        });
        for (run, ancestry) in [
            ("complete", ancestry),
            ("incomplete", None),
            ("pruned", None),
        ] {
            let d = StoredDiff {
                repo: "a/b".into(),
                base: "1".into(),
                new: "2".into(),
                diff: format!("diff of {run}"),
                truncated: false,
                fetched_at: old,
                ancestry,
            };
            let mut doc = Doc::new();
            doc.insert("_id".into(), json!(key(run)));
            doc.insert("value".into(), json!(d));
            store.put(Collection::ShoalKv, &doc).unwrap();
            assert_eq!(gh.stored_diff_blocking(run).unwrap().diff, d.diff);
        }
        assert!(gh.stored_diff_blocking("none").is_none());
        for run in ["complete", "incomplete"] {
            assert!(store.delete(Collection::ShoalKv, &key(run)).unwrap());
            assert!(gh.stored_diff_blocking(run).is_some(), "{run} from memory");
        }
        // Pruned here: forgotten at once (the other two are no longer in the store).
        assert_eq!(gh.prune_blocking(|_| true).unwrap().diffs, 1);
        assert!(gh.stored_diff_blocking("pruned").is_none());
        // Aged: read from the store again.
        let age = |run: &str, by: std::time::Duration| {
            let mut kept = gh.kept_diffs.lock();
            let entry = kept.runs.get_mut(run).unwrap();
            entry.1 = std::time::Instant::now().checked_sub(by).unwrap();
        };
        age(
            "incomplete",
            DIFF_REREAD + std::time::Duration::from_secs(1),
        );
        age("complete", DIFF_REREAD + std::time::Duration::from_secs(1));
        assert!(gh.stored_diff_blocking("incomplete").is_none());
        assert!(
            gh.stored_diff_blocking("complete").is_some(),
            "a complete one stays"
        );
        age(
            "complete",
            DIFF_REREAD_COMPLETE + std::time::Duration::from_secs(1),
        );
        assert!(gh.stored_diff_blocking("complete").is_none());
    }

    #[test]
    fn the_base_warnings_in_fishtests_words() {
        let a = |on_master, ancestor_of_new, latest_common| BaseAncestry {
            on_master,
            ancestor_of_new,
            latest_common,
        };
        assert!(a(true, true, true).warnings().is_empty());
        assert_eq!(
            a(false, false, false).warnings(),
            [
                "base is not an ancestor of master",
                "base is not an ancestor of new"
            ]
        );
        assert_eq!(
            a(true, true, false).warnings(),
            ["base is not the latest common ancestor of new and master"]
        );
    }

    #[test]
    fn a_long_diff_is_cut_at_a_line() {
        assert_eq!(cut("a\nb\n", 10), ("a\nb\n", false));
        assert_eq!(cut("abc\ndef\nghi\n", 9), ("abc\ndef\n", true));
        assert_eq!(cut("ééé", 3), ("é", true));
    }
}

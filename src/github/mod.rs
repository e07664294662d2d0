//! The GitHub component: what shoal asks GitHub so a developer can submit a test by branch
//! name. A branch, tag or SHA resolved to its commit; a commit's message (its subject and
//! `Bench: N`); master's current bench; the nets a commit's sources name; whether a tests
//! repository is the official one or a fork of it; the diff between two commits; the quota.
//!
//! Files: `books.rs` (the official book list read and each new book's checksum checked),
//! `submit.rs` (a submission by branch name resolved, every problem against its
//! field), `given.rs` (commits given by hand checked the same way when GitHub answers), `client.rs` (one careful GET: timeout, one safe retry, the quota's headers,
//! conditional requests with replies kept across restarts), `parse.rs` (the texts read out of
//! replies, pure), `diffs.rs` (a run's diff fetched once and kept with it), `master.rs` (official master and its bench, refreshed by a job, kept in the
//! store), `error.rs` (`GithubError`, in words a developer can act on).
//!
//! Must not: run on the event loop's hot paths or be awaited by anything in the worker API;
//! log or print the token; reach into another component's state.

mod books;
mod client;
mod diffs;
mod error;
mod given;
mod master;
pub mod parse;
mod submit;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

pub use books::{BOOKS_REPO, BookCheck, book_sri};
pub use client::Quota;
use client::{Client, Got};
pub use diffs::{BaseAncestry, DIFF_KEEP_DAYS, DIFF_RETRY, MAX_DIFF_BYTES, Pruned, StoredDiff};
pub use error::GithubError;
pub use given::{Given, Vetted};
pub use master::{Master, MasterRefresh};
pub use parse::RepoName;
pub use submit::{BEHIND_WARNING, FORK_REQUIRED_SINCE, Field, Problem, Resolved, Side, Wanted};

use crate::ledger::Ledger;
use crate::offload::Offload;
use crate::secret::Secret;
use crate::store::SharedStore;

const JSON: &str = "application/vnd.github+json";
const DIFF: &str = "application/vnd.github.diff";

/// How many recent master commits are searched for a bench.
pub(crate) const BENCH_SEARCH: u32 = 30;

/// The component's settings (`github_*` in settings.toml).
#[derive(Debug, Clone)]
pub struct GithubConfig {
    /// GitHub's REST API, without a trailing slash (`https://api.github.com`).
    pub api_url: String,
    /// Where raw files are served (`https://raw.githubusercontent.com`).
    pub raw_url: String,
    /// A token raises the quota from 60 to 5,000 calls an hour.
    pub token: Option<Secret>,
    pub timeout: Duration,
    /// The official repository, `owner/name`.
    pub official_repo: String,
}

impl Default for GithubConfig {
    fn default() -> Self {
        GithubConfig {
            api_url: "https://api.github.com".into(),
            raw_url: "https://raw.githubusercontent.com".into(),
            token: None,
            timeout: Duration::from_secs(5),
            official_repo: "official-stockfish/Stockfish".into(),
        }
    }
}

/// A commit as shoal uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub sha: String,
    pub message: String,
}

impl Commit {
    pub fn subject(&self) -> &str {
        parse::subject_of(&self.message)
    }

    pub fn bench(&self) -> Option<u64> {
        parse::bench_of(&self.message)
    }
}

/// A repository's place in the fork network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoInfo {
    /// `owner/name` as GitHub spells it now (a renamed repository answers under its new name).
    pub full_name: String,
    pub fork: bool,
    /// The root of the fork network, for a fork.
    pub source: Option<String>,
}

/// Where a commit stands against master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ancestry {
    /// Master commits the new commit does not contain.
    pub behind_by: u64,
    /// The new commit's own commits on top of their common base.
    pub ahead_by: u64,
}

/// The GitHub component.
pub struct Github {
    api_url: String,
    raw_url: String,
    official: RepoName,
    client: Client,
    /// Official master as last refreshed (`master.rs`).
    master: arc_swap::ArcSwapOption<Master>,
    /// The master SHA last written to the store (`master.rs`): a write that failed is made
    /// again at the next refresh, even when master did not change.
    master_stored: parking_lot::Mutex<Option<String>>,
    /// When a run's diff was last asked for again from its page (`diffs.rs`: a failed first
    /// attempt is retried at most every [`DIFF_RETRY`]).
    diff_retried: parking_lot::Mutex<diffs::Retries>,
    /// The kept diffs as last read or written (`diffs.rs`: the run page reads them from
    /// memory).
    kept_diffs: parking_lot::Mutex<diffs::Kept>,
    store: SharedStore,
    offload: Offload,
    ledger: Arc<Ledger>,
    /// The quota's refresh: one at a time (callers meanwhile wait for it and read what it
    /// found), and the last failure, when and what, so GitHub is not asked again for
    /// [`QUOTA_RETRY_AFTER`] after it (unless the known `reset` has passed since).
    quota_refresh: tokio::sync::Mutex<Option<(std::time::Instant, String)>>,
}

/// After asking GitHub for the quota failed, how long it is not asked again.
pub const QUOTA_RETRY_AFTER: Duration = Duration::from_secs(60);

impl Github {
    pub fn new(
        cfg: &GithubConfig,
        store: SharedStore,
        offload: Offload,
        ledger: Arc<Ledger>,
    ) -> Result<Github, GithubError> {
        let official = RepoName::from_full(&cfg.official_repo).ok_or_else(|| {
            GithubError::BadInput(format!("not a repository: {}", cfg.official_repo))
        })?;
        Ok(Github {
            api_url: cfg.api_url.trim_end_matches('/').to_string(),
            raw_url: cfg.raw_url.trim_end_matches('/').to_string(),
            official,
            client: Client::new(
                cfg.timeout,
                cfg.token.clone(),
                Arc::clone(&store),
                offload.clone(),
            )?,
            master: arc_swap::ArcSwapOption::empty(),
            master_stored: parking_lot::Mutex::new(None),
            diff_retried: parking_lot::Mutex::new(diffs::Retries::default()),
            kept_diffs: parking_lot::Mutex::new(diffs::Kept::default()),
            store,
            offload,
            ledger,
            quota_refresh: tokio::sync::Mutex::new(None),
        })
    }

    /// The official repository.
    pub fn official(&self) -> &RepoName {
        &self.official
    }

    /// GitHub's quota as its last reply stated it (none before the first call).
    pub fn quota(&self) -> Option<Quota> {
        self.client.quota()
    }

    /// The quota, asked of GitHub (`GET /rate_limit`, which costs none) unless a reply stated
    /// it less than `max_age` ago: a page or `/api/rate_limit` never makes shoal ask GitHub
    /// more than once per `max_age`, however often it is loaded. Concurrent callers share one
    /// request; after a failure GitHub is not asked again for [`QUOTA_RETRY_AFTER`] (the
    /// failure is answered meanwhile), unless the reset time GitHub last stated has passed
    /// since.
    pub async fn quota_within(&self, max_age: Duration) -> Result<Quota, GithubError> {
        if let Some(q) = self.client.quota_within(max_age) {
            return Ok(q);
        }
        // An async lock: waiting for the request under way is a wait on the loop.
        let mut last_failure = self.quota_refresh.lock().await;
        if let Some(q) = self.client.quota_within(max_age) {
            return Ok(q);
        }
        if let Some((at, why)) = last_failure.as_ref() {
            let now = chrono::Utc::now().timestamp();
            let failed_at = now.saturating_sub(i64::try_from(at.elapsed().as_secs()).unwrap_or(0));
            let reset_passed = self
                .client
                .quota()
                .is_some_and(|q| q.reset > failed_at && q.reset <= now);
            if at.elapsed() < QUOTA_RETRY_AFTER && !reset_passed {
                return Err(GithubError::Unreachable(why.clone()));
            }
        }
        match self.refresh_quota().await {
            Ok(q) => {
                *last_failure = None;
                Ok(q)
            }
            Err(e) => {
                *last_failure = Some((std::time::Instant::now(), e.to_string()));
                Err(e)
            }
        }
    }

    /// Asks GitHub for the quota now (`GET /rate_limit`, which costs none).
    pub async fn refresh_quota(&self) -> Result<Quota, GithubError> {
        let url = format!("{}/rate_limit", self.api_url);
        let v = self.json(&url).await?;
        let core = v
            .pointer("/resources/core")
            .ok_or_else(|| GithubError::Malformed("no resources.core".into()))?;
        let num = |k: &str| core.get(k).and_then(Value::as_i64);
        let (Some(limit), Some(remaining), Some(reset)) =
            (num("limit"), num("remaining"), num("reset"))
        else {
            return Err(GithubError::Malformed("resources.core's figures".into()));
        };
        let limit = u64::try_from(limit).unwrap_or(0);
        let remaining = u64::try_from(remaining).unwrap_or(0);
        let q = Quota {
            limit,
            remaining,
            used: num("used")
                .and_then(|u| u64::try_from(u).ok())
                .unwrap_or(limit.saturating_sub(remaining)),
            reset,
            resource: "core".into(),
        };
        self.client.set_quota(q.clone());
        Ok(q)
    }

    /// A branch, tag or SHA of `repo` resolved to its commit.
    pub async fn commit(&self, repo: &RepoName, reference: &str) -> Result<Commit, GithubError> {
        if !parse::valid_ref(reference) {
            return Err(GithubError::BadInput(format!(
                "\"{reference}\" is not a branch, tag or commit name"
            )));
        }
        let url = format!(
            "{}/repos/{}/{}/commits/{}",
            self.api_url, repo.owner, repo.name, reference
        );
        let v = match self.client.get(&url, JSON, true).await {
            Ok(Got::Body(b)) => parse_json(&b)?,
            Ok(Got::Missing) => return Err(self.unknown(repo, reference)),
            Err(GithubError::Refused { status: 422, .. }) => {
                return Err(self.unknown(repo, reference));
            }
            Err(e) => return Err(e),
        };
        commit_of(&v)
    }

    fn unknown(&self, repo: &RepoName, reference: &str) -> GithubError {
        GithubError::UnknownRef {
            repo: repo.full(),
            reference: reference.to_string(),
        }
    }

    /// The newest commits of `branch` in `repo`, newest first.
    pub async fn recent_commits(
        &self,
        repo: &RepoName,
        branch: &str,
        n: u32,
    ) -> Result<Vec<Commit>, GithubError> {
        if !parse::valid_ref(branch) {
            return Err(GithubError::BadInput(format!(
                "\"{branch}\" is not a branch name"
            )));
        }
        let url = format!(
            "{}/repos/{}/{}/commits?sha={}&per_page={}",
            self.api_url,
            repo.owner,
            repo.name,
            branch,
            n.clamp(1, 100)
        );
        let v = match self.client.get(&url, JSON, true).await? {
            Got::Body(b) => parse_json(&b)?,
            Got::Missing => return Err(self.unknown(repo, branch)),
        };
        let list = v
            .as_array()
            .ok_or_else(|| GithubError::Malformed("a commit list that is not a list".into()))?;
        list.iter().map(commit_of).collect()
    }

    /// Official master's newest commit, and the newest master commit whose message states a
    /// bench (with that bench): the base of a new test.
    pub async fn master_bench(&self) -> Result<(Commit, Option<(Commit, u64)>), GithubError> {
        let commits = self
            .recent_commits(&self.official, "master", BENCH_SEARCH)
            .await?;
        let head = commits
            .first()
            .cloned()
            .ok_or_else(|| GithubError::Malformed("master has no commits".into()))?;
        let bench = commits.into_iter().find_map(|c| c.bench().map(|b| (c, b)));
        Ok((head, bench))
    }

    /// The nets a commit's sources name: `src/evaluate.h`'s defaults, else the names quoted
    /// in `src/ucioption.cpp`.
    pub async fn nets(&self, repo: &RepoName, sha: &str) -> Result<Vec<String>, GithubError> {
        for (path, read) in [
            (
                "src/evaluate.h",
                parse::nets_in_evaluate_h as fn(&str) -> Vec<String>,
            ),
            ("src/ucioption.cpp", parse::nets_quoted),
        ] {
            if let Some(text) = self.raw(repo, sha, path).await? {
                let nets = read(&text);
                if !nets.is_empty() {
                    return Ok(nets);
                }
            }
        }
        Ok(Vec::new())
    }

    /// A file of `repo` at `sha`, if it exists there.
    pub async fn raw(
        &self,
        repo: &RepoName,
        sha: &str,
        path: &str,
    ) -> Result<Option<Arc<str>>, GithubError> {
        if !parse::valid_ref(sha) {
            return Err(GithubError::BadInput(format!("\"{sha}\" is not a commit")));
        }
        let url = format!(
            "{}/{}/{}/{}/{}",
            self.raw_url, repo.owner, repo.name, sha, path
        );
        match self.client.get(&url, "text/plain", false).await? {
            Got::Body(b) => Ok(Some(b)),
            Got::Missing => Ok(None),
        }
    }

    /// A repository's name as GitHub spells it now and its fork network's root.
    pub async fn repo(&self, repo: &RepoName) -> Result<RepoInfo, GithubError> {
        let url = format!("{}/repos/{}/{}", self.api_url, repo.owner, repo.name);
        let v = match self.client.get(&url, JSON, true).await? {
            Got::Body(b) => parse_json(&b)?,
            Got::Missing => return Err(GithubError::NoRepository(repo.full())),
        };
        let full_name = v
            .get("full_name")
            .and_then(Value::as_str)
            .ok_or_else(|| GithubError::Malformed("a repository without full_name".into()))?
            .to_string();
        Ok(RepoInfo {
            full_name,
            fork: v.get("fork").and_then(Value::as_bool).unwrap_or(false),
            source: v
                .pointer("/source/full_name")
                .and_then(Value::as_str)
                .map(str::to_string),
        })
    }

    /// Whether `repo` is the official repository or belongs to its fork network.
    pub async fn is_official_or_fork(&self, repo: &RepoName) -> Result<bool, GithubError> {
        Ok(self.in_official_network(&self.repo(repo).await?))
    }

    /// Whether a repository is the official one or a fork of it (names compared as GitHub
    /// does, without case).
    fn in_official_network(&self, info: &RepoInfo) -> bool {
        let official = self.official.full();
        info.full_name.eq_ignore_ascii_case(&official)
            || info
                .source
                .as_deref()
                .is_some_and(|s| s.eq_ignore_ascii_case(&official))
    }

    /// The unified diff from `base` to `head` (SHAs of `repo`'s network).
    pub async fn diff(
        &self,
        repo: &RepoName,
        base: &str,
        head: &str,
    ) -> Result<Arc<str>, GithubError> {
        let url = self.compare_url(repo, base, head)?;
        match self.client.get(&url, DIFF, true).await? {
            Got::Body(b) => Ok(b),
            Got::Missing => Err(GithubError::UnknownRef {
                repo: repo.full(),
                reference: format!("{base}...{head}"),
            }),
        }
    }

    /// How `head` stands against `base` (behind and ahead counts).
    pub async fn ancestry(
        &self,
        repo: &RepoName,
        base: &str,
        head: &str,
    ) -> Result<Ancestry, GithubError> {
        let url = self.compare_url(repo, base, head)?;
        let v = match self.client.get(&url, JSON, true).await? {
            Got::Body(b) => parse_json(&b)?,
            Got::Missing => {
                return Err(GithubError::UnknownRef {
                    repo: repo.full(),
                    reference: format!("{base}...{head}"),
                });
            }
        };
        let n = |k: &str| {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| GithubError::Malformed(format!("a comparison without {k}")))
        };
        Ok(Ancestry {
            behind_by: n("behind_by")?,
            ahead_by: n("ahead_by")?,
        })
    }

    fn compare_url(&self, repo: &RepoName, base: &str, head: &str) -> Result<String, GithubError> {
        for r in [base, head] {
            if !parse::valid_ref(r) {
                return Err(GithubError::BadInput(format!("\"{r}\" is not a commit")));
            }
        }
        Ok(format!(
            "{}/repos/{}/{}/compare/{}...{}",
            self.api_url, repo.owner, repo.name, base, head
        ))
    }

    async fn json(&self, url: &str) -> Result<Value, GithubError> {
        match self.client.get(url, JSON, true).await? {
            Got::Body(b) => parse_json(&b),
            Got::Missing => Err(GithubError::Refused {
                status: 404,
                message: "Not Found".into(),
            }),
        }
    }
}

fn parse_json(body: &str) -> Result<Value, GithubError> {
    serde_json::from_str(body).map_err(|e| GithubError::Malformed(e.to_string()))
}

/// A commit in GitHub's shape: `{"sha": …, "commit": {"message": …}}`.
fn commit_of(v: &Value) -> Result<Commit, GithubError> {
    let sha = v
        .get("sha")
        .and_then(Value::as_str)
        .filter(|s| parse::is_sha(s))
        .ok_or_else(|| GithubError::Malformed("a commit without a 40-hex sha".into()))?;
    let message = v
        .pointer("/commit/message")
        .and_then(Value::as_str)
        .ok_or_else(|| GithubError::Malformed("a commit without a message".into()))?;
    Ok(Commit {
        sha: sha.to_ascii_lowercase(),
        message: message.to_string(),
    })
}

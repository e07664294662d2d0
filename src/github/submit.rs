//! A test submitted by branch name, resolved through GitHub: the tests repository checked
//! (under the name GitHub spells now; outside the official fork network it is refused for
//! accounts registered from 2025-07-01 and warned about for older ones, its network's root
//! becoming the run's `master_repo`), both branches resolved to their commits, the benches
//! read from the messages (the base's from master when the base is master; one given by hand
//! for a master base checked against master's), the nets read from each commit's sources,
//! and how far the new commit is from master. Every problem is reported at once, each against
//! the field it belongs to, in words.
//!
//! Must not: check the nets against the ones uploaded (the caller asks `nets`), create
//! anything, or decide what the form shows.

use super::{Commit, Github, GithubError, RepoName, parse};

/// A new commit further behind official master than this is warned about.
pub const BEHIND_WARNING: u64 = 20;

/// Accounts registered from this moment on (2025-07-01 00:00 UTC, Unix seconds) must test
/// from a fork of the official repository; older accounts are warned (Fishtest's rule).
pub const FORK_REQUIRED_SINCE: i64 = 1_751_328_000;

/// What the developer typed (empty strings for what they left out).
#[derive(Debug, Clone, Default)]
pub struct Wanted {
    /// The tests repository's URL.
    pub tests_repo: String,
    pub new_tag: String,
    pub base_tag: String,
    /// Benches given by hand (they win over the messages').
    pub new_signature: Option<u64>,
    pub base_signature: Option<u64>,
    /// When the submitter's account was registered (Unix seconds): a repository outside the
    /// official fork network is refused from [`FORK_REQUIRED_SINCE`] on, warned about before.
    pub registered_at: i64,
}

/// The field a problem belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    TestsRepo,
    NewTag,
    BaseTag,
    NewSignature,
    BaseSignature,
    /// A commit given by hand (its SHA).
    NewCommit,
    BaseCommit,
}

impl Field {
    /// The argument of `/api/create_run` the field is.
    pub fn arg(self) -> &'static str {
        match self {
            Field::TestsRepo => "tests_repo",
            Field::NewTag => "new_tag",
            Field::BaseTag => "base_tag",
            Field::NewSignature => "new_signature",
            Field::BaseSignature => "base_signature",
            Field::NewCommit => "resolved_new",
            Field::BaseCommit => "resolved_base",
        }
    }
}

/// One problem, said for the field it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub field: Field,
    pub message: String,
    /// GitHub itself failed (the explicit fields are the way round it).
    pub outage: bool,
}

impl Problem {
    pub(super) fn new(field: Field, message: impl Into<String>) -> Problem {
        Problem {
            field,
            message: message.into(),
            outage: false,
        }
    }

    pub(super) fn github(field: Field, e: &GithubError) -> Problem {
        Problem {
            field,
            message: e.to_string(),
            outage: e.is_outage(),
        }
    }
}

/// One side of the test, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Side {
    pub tag: String,
    pub commit: Commit,
    pub bench: u64,
    pub nets: Vec<String>,
}

/// A submission, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// `https://github.com/<owner>/<name>`, as GitHub spells it now.
    pub tests_repo: String,
    pub new: Side,
    pub base: Side,
    /// Warnings the developer should read (the test is still created).
    pub warnings: Vec<String>,
    /// How many official master commits the new commit does not contain (when GitHub said).
    pub behind_by: Option<u64>,
    /// The root of the repository's fork network, when it is not the official repository
    /// (`https://github.com/<owner>/<name>`; the run's `master_repo`).
    pub master_repo: Option<String>,
}

impl Github {
    /// Resolves a submission (see the module's comment), within
    /// [`Github::submission_deadline`]. `Err` lists every problem found.
    pub async fn resolve_submission(&self, w: &Wanted) -> Result<Resolved, Vec<Problem>> {
        let deadline = self.submission_deadline();
        match tokio::time::timeout(deadline, self.resolve_submission_now(w)).await {
            Ok(out) => out,
            Err(_) => Err(vec![Problem::github(
                Field::TestsRepo,
                &GithubError::Timeout(deadline.as_secs().max(1)),
            )]),
        }
    }

    async fn resolve_submission_now(&self, w: &Wanted) -> Result<Resolved, Vec<Problem>> {
        let mut problems = Vec::new();
        let typed = w.tests_repo.trim();
        let repo = if typed.is_empty() {
            self.official.clone()
        } else {
            match parse::repo_from_url(typed) {
                Some(r) => r,
                None => {
                    problems.push(Problem::new(
                        Field::TestsRepo,
                        format!(
                            "\"{typed}\" is not a GitHub repository: give its address, https://github.com/<owner>/<name>"
                        ),
                    ));
                    return Err(problems);
                }
            }
        };
        let new_tag = w.new_tag.trim();
        let base_tag = match w.base_tag.trim() {
            "" => "master",
            t => t,
        };
        if new_tag.is_empty() {
            problems.push(Problem::new(
                Field::NewTag,
                "Give the branch, tag or commit to test",
            ));
        }
        let (info, new, base, master, history) = tokio::join!(
            self.repo(&repo),
            async {
                if new_tag.is_empty() {
                    None
                } else {
                    Some(self.commit(&repo, new_tag).await)
                }
            },
            self.commit(&repo, base_tag),
            self.master_bench(),
            // For a master base: the bench of the repository's own master (its newest stated).
            async {
                if base_tag == "master" {
                    self.recent_commits(&repo, "master", super::BENCH_SEARCH)
                        .await
                        .ok()
                        .and_then(|cs| cs.iter().find_map(Commit::bench))
                } else {
                    None
                }
            },
        );
        let mut warnings = Vec::new();
        let master_repo;
        let repo = match info {
            Ok(info) => {
                let verdict = self.fork_verdict(&info, w.registered_at);
                master_repo = verdict.master_repo;
                problems.extend(verdict.problem);
                warnings.extend(verdict.warning);
                RepoName::from_full(&info.full_name).unwrap_or(repo)
            }
            Err(e) => {
                problems.push(Problem::github(Field::TestsRepo, &e));
                return Err(problems);
            }
        };

        let new = match new {
            None => None,
            Some(Ok(c)) => Some(c),
            Some(Err(e)) => {
                problems.push(Problem::github(Field::NewTag, &e));
                None
            }
        };
        let base = match base {
            Ok(c) => Some(c),
            Err(e) => {
                problems.push(Problem::github(Field::BaseTag, &e));
                None
            }
        };
        let new_bench = new.as_ref().and_then(|c| {
            let b = w.new_signature.or_else(|| c.bench());
            if b.is_none() {
                problems.push(Problem::new(
                    Field::NewSignature,
                    format!(
                        "The commit {} of {new_tag} has no \"Bench: N\" line: give its bench by hand",
                        short(&c.sha)
                    ),
                ));
            }
            b
        });
        // The base's bench: by hand, else (for master) the newest one master states, else
        // the commit's own message.
        let official_bench = master
            .as_ref()
            .ok()
            .and_then(|(_, b)| b.as_ref().map(|(_, b)| *b));
        let base_bench = base.as_ref().and_then(|c| {
            let b = w.base_signature.or(history).or_else(|| c.bench());
            if b.is_none() {
                problems.push(Problem::new(
                    Field::BaseSignature,
                    format!(
                        "The commit {} of {base_tag} has no \"Bench: N\" line: give its bench by hand",
                        short(&c.sha)
                    ),
                ));
            }
            b
        });
        // A master base: a bench given by hand must be the bench of master in the tests
        // repository (Fishtest's check), else official master's; one read from the fork's
        // master must be official master's. Skipped when GitHub could not say.
        if base_tag == "master"
            && let Some(b) = base_bench
        {
            let (master_bench, whose) = match (w.base_signature, history) {
                (Some(_), Some(h)) => (Some(h), format!("master in {}", repo.full())),
                _ => (official_bench, "official master".to_string()),
            };
            if let Some(m) = master_bench
                && b != m
            {
                let message = if w.base_signature.is_some() {
                    typed_bench_message(b, m, &whose)
                } else {
                    format!(
                        "The bench of master in {} is {b}, official master's is {m}: run \"git pull upstream master\" and push, or give the base bench by hand",
                        repo.full()
                    )
                };
                let field = if w.base_signature.is_some() {
                    Field::BaseSignature
                } else {
                    Field::BaseTag
                };
                problems.push(Problem::new(field, message));
            }
        }
        let (Some(new), Some(base), Some(new_bench), Some(base_bench)) =
            (new, base, new_bench, base_bench)
        else {
            return Err(problems);
        };
        if !problems.is_empty() {
            return Err(problems);
        }

        let (new_nets, base_nets) =
            tokio::join!(self.nets(&repo, &new.sha), self.nets(&repo, &base.sha));
        let new_nets = new_nets.map_err(|e| vec![Problem::github(Field::NewTag, &e)])?;
        let base_nets = base_nets.map_err(|e| vec![Problem::github(Field::BaseTag, &e)])?;

        let mut behind_by = None;
        if let Ok((head, _)) = &master {
            match self.ancestry(&repo, &head.sha, &new.sha).await {
                Ok(a) => {
                    behind_by = Some(a.behind_by);
                    if a.behind_by > BEHIND_WARNING {
                        warnings.push(format!(
                            "{new_tag} is {} commits behind official master: consider rebasing it",
                            a.behind_by
                        ));
                    }
                }
                Err(e) => tracing::info!(error = %e, "no ancestry check"),
            }
        }
        Ok(Resolved {
            tests_repo: repo.url(),
            new: Side {
                tag: new_tag.to_string(),
                commit: new,
                bench: new_bench,
                nets: new_nets,
            },
            base: Side {
                tag: base_tag.to_string(),
                commit: base,
                bench: base_bench,
                nets: base_nets,
            },
            warnings,
            behind_by,
            master_repo,
        })
    }
}

impl Github {
    /// A master base's bench given by hand (the commits given by hand too): it must be the
    /// bench of master in the tests repository (the newest its messages state). `None` when
    /// it is, or when GitHub cannot say (the check is skipped, as Fishtest skips it).
    pub(super) async fn check_master_bench(&self, repo: &RepoName, typed: u64) -> Option<Problem> {
        let repo = repo.clone();
        let commits = match self
            .recent_commits(&repo, "master", super::BENCH_SEARCH)
            .await
        {
            Ok(c) => c,
            Err(e) => {
                tracing::info!(error = %e, "base bench not checked against master's");
                return None;
            }
        };
        let master = commits.iter().find_map(Commit::bench)?;
        (master != typed).then(|| {
            Problem::new(
                Field::BaseSignature,
                typed_bench_message(typed, master, &format!("master in {}", repo.full())),
            )
        })
    }
}

/// The refusal of a master base's bench given by hand that is not master's.
fn typed_bench_message(typed: u64, master: u64, whose: &str) -> String {
    format!(
        "The base bench {typed} is not the bench of {whose} ({master}): give {master}, or run \"git pull upstream master\" and push"
    )
}

fn short(sha: &str) -> &str {
    sha.get(..10).unwrap_or(sha)
}

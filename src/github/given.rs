//! Commits given by hand (the form's "Advanced" fields, a rerun, `/api/create_run`) checked
//! through GitHub when it can answer, with the same rules as a submission by branch name: the
//! tests repository's place in the official fork network (refused for accounts registered
//! from 2025-07-01, warned about for older ones, its network's root the run's `master_repo`),
//! both commits existing in the repository, the nets each side left empty read from the
//! commit's sources, and a master base's bench checked against master's. When GitHub cannot
//! answer (down, slow, rate-limited), nothing is checked: that is what the fields by hand are
//! for; after a call got no reply (GitHub known slow or down) they are not even tried for a minute.
//!
//! Must not: check the nets against the ones uploaded (the caller asks `nets`), create
//! anything, or wait longer than [`Github::submission_deadline`].

use super::submit::{FORK_REQUIRED_SINCE, Field, Problem};
use super::{Github, GithubError, RepoInfo, parse};

/// After a GitHub call got no reply (timed out, unreachable), for this long (unless a reply
/// came since) commits given by hand are not checked: the submission does not wait for a GitHub known to be down.
pub const KNOWN_DOWN: std::time::Duration = std::time::Duration::from_secs(60);

/// The commits of a submission given by hand.
#[derive(Debug, Clone, Default)]
pub struct Given {
    /// The tests repository's URL (empty: the official repository).
    pub tests_repo: String,
    pub new_sha: String,
    pub base_sha: String,
    /// The base is master (its bench typed by hand is checked against master's).
    pub base_is_master: bool,
    /// The base bench as typed (checked only when it is a bench).
    pub base_bench: String,
    /// The sides whose nets were left empty: read from the commit.
    pub read_new_nets: bool,
    pub read_base_nets: bool,
    /// When the submitter's account was registered (Unix seconds).
    pub registered_at: i64,
}

/// What GitHub said of commits given by hand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Vetted {
    /// GitHub answered (else nothing was checked).
    pub answered: bool,
    /// The root of the repository's fork network when it is not the official one.
    pub master_repo: Option<String>,
    /// The nets read from each commit's sources, for the sides left empty.
    pub new_nets: Option<Vec<String>>,
    pub base_nets: Option<Vec<String>>,
    /// Warnings the submitter should read (the test is still created).
    pub warnings: Vec<String>,
}

/// The fork rule's verdict on a repository.
pub(super) struct ForkVerdict {
    pub master_repo: Option<String>,
    pub problem: Option<Problem>,
    pub warning: Option<String>,
}

impl Github {
    /// How long a whole submission may wait for GitHub: twice the timeout of one call.
    pub fn submission_deadline(&self) -> std::time::Duration {
        self.client.timeout() * 2
    }

    /// The fork rule (see the module's comment) for a repository GitHub described.
    pub(super) fn fork_verdict(&self, info: &RepoInfo, registered_at: i64) -> ForkVerdict {
        if self.in_official_network(info) {
            return ForkVerdict {
                master_repo: None,
                problem: None,
                warning: None,
            };
        }
        let root = info.source.as_deref().unwrap_or(&info.full_name);
        let master_repo = Some(format!("https://github.com/{root}"));
        if registered_at >= FORK_REQUIRED_SINCE {
            ForkVerdict {
                master_repo,
                problem: Some(Problem::new(
                    Field::TestsRepo,
                    format!(
                        "{} is neither {} nor a fork of it: fork {} on GitHub and push your branch there",
                        info.full_name,
                        self.official.full(),
                        self.official.url()
                    ),
                )),
                warning: None,
            }
        } else {
            ForkVerdict {
                master_repo,
                problem: None,
                warning: Some(format!(
                    "{} is not a fork of {}: please fork {} on GitHub and test from your fork from now on",
                    info.full_name,
                    self.official.full(),
                    self.official.url()
                )),
            }
        }
    }

    /// Checks commits given by hand (see the module's comment), within
    /// [`Github::submission_deadline`]; `Err` lists every problem found.
    pub async fn vet_given(&self, g: &Given) -> Result<Vetted, Vec<Problem>> {
        // GitHub known slow or down (a call got no reply in the last minute, none since):
        // the submission by hand does not wait for it.
        if self.client.timed_out_within(KNOWN_DOWN) {
            tracing::info!("commits given by hand not checked: GitHub did not answer recently");
            return Ok(Vetted::default());
        }
        match tokio::time::timeout(self.submission_deadline(), self.vet_given_now(g)).await {
            Ok(out) => out,
            Err(_) => {
                tracing::info!("commits given by hand not checked: GitHub too slow");
                Ok(Vetted::default())
            }
        }
    }

    async fn vet_given_now(&self, g: &Given) -> Result<Vetted, Vec<Problem>> {
        let sha = |s: &str| s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit());
        if !(sha(&g.new_sha) && sha(&g.base_sha)) {
            // Not commits: the arguments' own check refuses them.
            return Ok(Vetted::default());
        }
        let repo = match g.tests_repo.trim() {
            "" => self.official.clone(),
            url => match parse::repo_from_url(url) {
                Some(r) => r,
                // Not a GitHub address: the arguments' own check refuses it.
                None => return Ok(Vetted::default()),
            },
        };
        let info = match self.repo(&repo).await {
            Ok(info) => info,
            Err(e) if e.is_outage() => {
                tracing::info!(error = %e, "commits given by hand not checked");
                return Ok(Vetted::default());
            }
            Err(e) => return Err(vec![Problem::github(Field::TestsRepo, &e)]),
        };
        let mut problems = Vec::new();
        let verdict = self.fork_verdict(&info, g.registered_at);
        problems.extend(verdict.problem);
        let repo = super::RepoName::from_full(&info.full_name).unwrap_or(repo);
        let read = |sha: &str, wanted: bool| {
            let repo = repo.clone();
            let sha = sha.to_string();
            async move {
                let commit = self.commit(&repo, &sha).await?;
                let nets = if wanted {
                    Some(self.nets(&repo, &commit.sha).await?)
                } else {
                    None
                };
                Ok::<_, GithubError>(nets)
            }
        };
        let typed_bench = g.base_bench.trim().parse::<u64>().ok();
        let (new, base, bench) = tokio::join!(
            read(&g.new_sha, g.read_new_nets),
            read(&g.base_sha, g.read_base_nets),
            async {
                match typed_bench {
                    Some(b) if g.base_is_master => self.check_master_bench(&repo, b).await,
                    _ => None,
                }
            }
        );
        let mut vetted = Vetted {
            answered: true,
            master_repo: verdict.master_repo,
            warnings: verdict.warning.into_iter().collect(),
            ..Vetted::default()
        };
        for (out, field, nets) in [
            (new, Field::NewCommit, &mut vetted.new_nets),
            (base, Field::BaseCommit, &mut vetted.base_nets),
        ] {
            match out {
                Ok(n) => *nets = n,
                // GitHub failed half way: what it could not say is not checked.
                Err(e) if e.is_outage() => {
                    tracing::info!(error = %e, "a commit given by hand not checked");
                    vetted.answered = false;
                }
                Err(e) => problems.push(Problem::github(field, &e)),
            }
        }
        problems.extend(bench);
        if problems.is_empty() {
            Ok(vetted)
        } else {
            Err(problems)
        }
    }
}

//! The primary's periodic jobs: the one table [`JOBS`], run by their periodic tasks and, on
//! request, by `POST /debug/job/{name}`, both through [`run_job`]; and PGN retention's
//! periodic pass. A job runs on the components in a [`JobContext`], so neither `app` (which
//! starts the jobs) nor the HTTP layer (whose debug route runs one) is needed here.
//!
//! Must not: run a job's work on the event loop (each run is one offload pool job), stop a
//! job's task because one run failed (it is logged, and the job runs again next period), or
//! name `app` or `http`.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;

use crate::accounts::{Accounts, UserError};
use crate::config::Config;
use crate::github::{Github, GithubError};
use crate::offload::{Offload, OffloadError};
use crate::rundb::books::{Book, Books};
use crate::rundb::retention::PgnRetention;
use crate::rundb::{RunDb, RunDbError};
use crate::scheduler::Scheduler;

/// What the jobs run on: the components, the pool and the settings.
pub struct JobContext {
    pub config: Arc<Config>,
    pub offload: Offload,
    pub rundb: Arc<RunDb>,
    pub scheduler: Arc<Scheduler>,
    /// Test groups (issue 39): decided again every second.
    pub groups: Arc<crate::groups::Groups>,
    pub accounts: Arc<Accounts>,
    pub github: Arc<Github>,
    pub ledger: Arc<crate::ledger::Ledger>,
    /// The book refusals already logged (`name sri`), so a bad book is logged once, not at
    /// every refresh.
    pub refused_books: parking_lot::Mutex<std::collections::HashSet<String>>,
    /// PGN retention, when any of its windows is set (`pgn_retention_*days`).
    pub pgn_retention: Option<Arc<PgnRetention>>,
    /// Whether each GitHub host ([`Host`]: the API, the raw files) is known to be out of
    /// reach: said once when it goes (a warning that says what still works), once when it is
    /// back, not at every job ([`run_job`]). One flag per host, so one reachable and one not
    /// do not flap the warning at every refresh.
    pub github_down: [std::sync::atomic::AtomicBool; 2],
}

/// Why one run of a job failed.
#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error("run database: {0}")]
    Runs(#[from] RunDbError),
    #[error("accounts: {0}")]
    Accounts(#[from] UserError),
    #[error("{0}")]
    Offload(#[from] OffloadError),
    #[error("GitHub: {0}")]
    Github(#[from] GithubError),
    #[error("test groups: {0}")]
    Groups(String),
}

/// When a periodic job runs: a fixed number of seconds, or `scavenge_interval_s`.
#[derive(Debug, Clone, Copy)]
enum Every {
    Secs(u64),
    ScavengeInterval,
}

impl Every {
    fn duration(self, config: &Config) -> Duration {
        match self {
            Every::Secs(s) => Duration::from_secs(s),
            Every::ScavengeInterval => config.scavenge_interval(),
        }
    }
}

/// One periodic job of the primary: its name (the `job` label of `shoal_job_seconds`, and
/// `POST /debug/job/{name}`), when it first runs, how often after that, and its work.
pub struct Job {
    pub name: &'static str,
    first: Every,
    period: Every,
    work: Work,
}

/// A job's work, on the component it needs.
#[derive(Clone, Copy)]
enum Work {
    Runs(fn(&RunDb) -> Result<(), RunDbError>),
    Scheduler(fn(&Scheduler) -> Result<(), RunDbError>),
    Accounts(fn(&Accounts) -> Result<(), UserError>),
    /// Network work: awaited on the event loop (it only waits for GitHub's replies; the
    /// store calls it makes go through the pool).
    Github(fn(Arc<Github>) -> BoxFuture<'static, Result<(), GithubError>>),
    /// Network work over several components (awaited like `Github`).
    Async(fn(&JobContext) -> BoxFuture<'_, Result<(), JobError>>),
}

/// The periodic jobs (docs/internals.md, "Background tasks"), the one list both the spawner
/// ([`spawn_jobs`]) and the debug route run from. PGN retention, a pass of many pool jobs, is
/// apart ([`spawn_pgn_retention`], `POST /debug/pgn_retention`).
pub const JOBS: &[Job] = &[
    Job {
        name: "flush_buffers",
        first: Every::Secs(1),
        period: Every::Secs(1),
        work: Work::Runs(|db| db.flush(false).map(|_| ())),
    },
    Job {
        name: "scavenge_dead_tasks",
        first: Every::ScavengeInterval,
        period: Every::ScavengeInterval,
        work: Work::Runs(|db| db.scavenge_dead_tasks().map(|_| ())),
    },
    Job {
        name: "update_itp",
        first: Every::Secs(60),
        period: Every::Secs(60),
        work: Work::Runs(|db| {
            db.update_itp();
            Ok(())
        }),
    },
    Job {
        name: "update_nps_gpm",
        first: Every::Secs(60),
        period: Every::Secs(60),
        work: Work::Runs(|db| {
            db.update_nps_gpm();
            Ok(())
        }),
    },
    Job {
        name: "clean_cache",
        first: Every::Secs(60),
        period: Every::Secs(60),
        work: Work::Runs(|db| {
            db.clean_cache();
            Ok(())
        }),
    },
    Job {
        name: "refresh_blocked_workers",
        first: Every::Secs(5),
        period: Every::Secs(5),
        work: Work::Scheduler(|s| s.refresh_blocked()),
    },
    Job {
        name: "refresh_legacy_usernames",
        first: Every::Secs(5),
        period: Every::Secs(5),
        work: Work::Accounts(|accounts| accounts.users().refresh_legacy_names().map(|_| ())),
    },
    Job {
        name: "clean_worker_runs",
        first: Every::Secs(60),
        period: Every::Secs(300),
        work: Work::Scheduler(|s| s.clean_worker_runs()),
    },
    Job {
        name: "validate_data_structures",
        first: Every::Secs(60),
        period: Every::Secs(900),
        work: Work::Runs(|db| {
            db.validate();
            Ok(())
        }),
    },
    Job {
        name: "refresh_limits",
        first: Every::Secs(1),
        period: Every::Secs(1),
        work: Work::Scheduler(|s| {
            s.refresh_floating()?;
            s.publish_limit_metrics();
            Ok(())
        }),
    },
    // Test groups (issue 39): shares, superseded takes, the groups' states.
    Job {
        name: "groups",
        first: Every::Secs(1),
        period: Every::Secs(1),
        work: Work::Async(|cx| Box::pin(groups_tick(cx))),
    },
    Job {
        name: "refresh_official_master",
        first: Every::Secs(60),
        period: Every::Secs(900),
        work: Work::Github(|gh| Box::pin(async move { gh.refresh_master().await.map(|_| ()) })),
    },
    Job {
        name: "prune_github",
        first: Every::Secs(300),
        period: Every::Secs(3600),
        work: Work::Async(|cx| Box::pin(prune_github(cx))),
    },
    Job {
        name: "refresh_books",
        first: Every::Secs(60),
        period: Every::Secs(900),
        work: Work::Async(|cx| Box::pin(refresh_books(cx))),
    },
];

/// The `groups` job: every active test group decided again, on the pool.
async fn groups_tick(cx: &JobContext) -> Result<(), JobError> {
    let groups = cx.groups.clone();
    cx.offload
        .run(move || groups.tick())
        .await?
        .map_err(|e| JobError::Groups(e.to_string()))
}

/// The periodic job called `name`.
pub fn job(name: &str) -> Option<&'static Job> {
    JOBS.iter().find(|j| j.name == name)
}

/// Runs `job` once in the offload pool and records its time in `shoal_job_seconds`; a failure
/// is logged and returned. What the periodic task does at each period, and what
/// `POST /debug/job/{name}` does on request.
pub async fn run_job(state: &JobContext, job: &'static Job) -> Result<(), JobError> {
    let started = Instant::now();
    let result = match job.work {
        Work::Runs(work) => offloaded(state, &state.rundb, work).await,
        Work::Scheduler(work) => offloaded(state, &state.scheduler, work).await,
        Work::Accounts(work) => offloaded(state, &state.accounts, work).await,
        Work::Github(work) => work(Arc::clone(&state.github))
            .await
            .map_err(JobError::from),
        Work::Async(work) => work(state).await,
    };
    metrics::histogram!("shoal_job_seconds", "job" => job.name)
        .record(started.elapsed().as_secs_f64());
    match &result {
        Err(JobError::Github(e)) if e.is_outage() => github_down(state, job, e),
        Err(e) => tracing::error!(job = job.name, error = %e, "periodic job failed"),
        Ok(()) => {
            if let Some(host) = Host::of(job)
                && state.github_down[host as usize].swap(false, Ordering::AcqRel)
            {
                tracing::info!(
                    job = job.name,
                    url = host.url(state),
                    "GitHub answers again"
                );
            }
        }
    }
    result
}

/// The GitHub host a job needs: the API (official master) or the raw files (the books).
#[derive(Debug, Clone, Copy)]
enum Host {
    Api = 0,
    Raw = 1,
}

impl Host {
    fn of(job: &Job) -> Option<Host> {
        match job.name {
            "refresh_books" => Some(Host::Raw),
            _ if matches!(job.work, Work::Github(_)) => Some(Host::Api),
            _ => None,
        }
    }

    fn url(self, state: &JobContext) -> &str {
        match self {
            Host::Api => &state.config.github_api_url,
            Host::Raw => &state.config.github_raw_url,
        }
    }

    /// What does not work while this host is out of reach.
    fn lost(self) -> &'static str {
        match self {
            Host::Api => {
                "official master is not refreshed and a new test's commits must be typed \
                 under \"Advanced\""
            }
            Host::Raw => "the book list is not refreshed",
        }
    }
}

/// What the GitHub component keeps, bounded (`Github::prune_blocking`): the oldest stored
/// replies beyond the cap, and old diffs of runs that are finished, deleted or gone.
async fn prune_github(cx: &JobContext) -> Result<(), JobError> {
    let github = Arc::clone(&cx.github);
    let rundb = Arc::clone(&cx.rundb);
    let pruned = cx
        .offload
        .run(move || {
            github.prune_blocking(|run_id| match rundb.get_run(run_id) {
                Ok(Some(run)) => run.finished || run.deleted,
                Ok(None) => true,
                Err(_) => false,
            })
        })
        .await?
        .map_err(|e| JobError::Runs(RunDbError::Store(e)))?;
    if pruned != crate::github::Pruned::default() {
        tracing::info!(
            replies = pruned.replies,
            diffs = pruned.diffs,
            "GitHub replies and diffs pruned"
        );
    }
    Ok(())
}

/// A job that needs GitHub found it out of reach: a warning the first time (saying what still
/// works), a debug line after that, until it answers again.
fn github_down(state: &JobContext, job: &Job, e: &GithubError) {
    let host = Host::of(job).unwrap_or(Host::Api);
    if state.github_down[host as usize].swap(true, Ordering::AcqRel) {
        tracing::debug!(job = job.name, error = %e, "GitHub still out of reach");
        return;
    }
    tracing::warn!(
        job = job.name,
        error = %e,
        "GitHub cannot be used ({}): {}; workers, runs and every page work as before. Said \
         once; retried every 15 minutes",
        host.url(state),
        host.lost()
    );
}

/// The book list refreshed from the official books repository: unchanged and checked books
/// make the new list; a refused book (its checksum, its archive) keeps its old entry, if it
/// had one, and is logged. A change of the list is logged as a `system_event`.
async fn refresh_books(cx: &JobContext) -> Result<(), JobError> {
    let current = cx.rundb.books();
    let known: HashMap<String, String> = current
        .0
        .iter()
        .map(|(name, b)| (name.clone(), b.sri.clone()))
        .collect();
    let check = cx.github.check_books(&known).await?;
    let mut refused = check.refused;
    let mut next = HashMap::new();
    for (name, entry) in check.accepted {
        match serde_json::from_value::<Book>(entry) {
            Ok(book) => {
                next.insert(name, book);
            }
            Err(e) => refused.push((name, format!("an unreadable entry: {e}"))),
        }
    }
    for (name, _) in &refused {
        if let Some(old) = current.0.get(name) {
            next.insert(name.clone(), old.clone());
        }
    }
    metrics::counter!("shoal_books_refused_total").increment(refused.len() as u64);
    let mut messages: Vec<String> = Vec::new();
    {
        let mut logged = cx.refused_books.lock();
        for (name, why) in &refused {
            if logged.insert(format!("{name} {why}")) {
                tracing::warn!(book = %name, reason = %why, "book refused");
                messages.push(format!("book {name} refused: {why}"));
            }
        }
    }
    if next != current.0 {
        let added = next.keys().filter(|k| !current.0.contains_key(*k)).count();
        let removed = current.0.keys().filter(|k| !next.contains_key(*k)).count();
        let changed = next
            .iter()
            .filter(|(k, b)| current.0.get(*k).is_some_and(|old| old != *b))
            .count();
        messages.push(format!(
            "book list refreshed: {} books ({added} added, {removed} removed, {changed} changed)",
            next.len()
        ));
        cx.rundb.set_books(Books(next));
    }
    // Stored at every refresh (not only on a change): a list that could not be stored once,
    // or one never stored (a first start), is stored the next time.
    let db = Arc::clone(&cx.rundb);
    cx.offload.run(move || db.save_books()).await??;
    metrics::gauge!("shoal_books").set(cx.rundb.books().0.len() as f64);
    if !messages.is_empty() {
        let ledger = Arc::clone(&cx.ledger);
        cx.offload
            .run(move || {
                for message in messages {
                    ledger.log_system_event(message)?;
                }
                Ok::<(), crate::store::StoreError>(())
            })
            .await?
            .map_err(|e| JobError::Runs(RunDbError::Store(e)))?;
    }
    Ok(())
}

/// A job's `work` on its `component`, in the offload pool.
async fn offloaded<C, E>(
    state: &JobContext,
    component: &Arc<C>,
    work: fn(&C) -> Result<(), E>,
) -> Result<(), JobError>
where
    C: Send + Sync + 'static,
    E: Send + 'static,
    JobError: From<E>,
{
    let component = component.clone();
    Ok(state.offload.run(move || work(&component)).await??)
}

/// A periodic job of the primary: first run after its `first`, then every `period`, both with
/// ±5% jitter, each run through [`run_job`].
fn spawn_job(state: &Arc<JobContext>, job: &'static Job) -> tokio::task::JoinHandle<()> {
    let state = state.clone();
    tokio::spawn(async move {
        let jitter = |d: Duration| d.mul_f64(0.95 + 0.1 * rand::random::<f64>());
        tokio::time::sleep(jitter(job.first.duration(&state.config))).await;
        loop {
            // A failure is logged by run_job; the job runs again next period.
            let _ = run_job(&state, job).await;
            tokio::time::sleep(jitter(job.period.duration(&state.config))).await;
        }
    })
}

/// Starts every periodic job of the primary (none with `periodic_jobs = false`, a test
/// setting: the tests run them with `POST /debug/job/{name}`).
pub fn spawn_jobs(state: &Arc<JobContext>) -> Vec<tokio::task::JoinHandle<()>> {
    if !state.config.periodic_jobs {
        tracing::warn!("periodic_jobs = false: no periodic job runs (a test setting)");
        return Vec::new();
    }
    let mut jobs: Vec<_> = JOBS.iter().map(|job| spawn_job(state, job)).collect();
    jobs.extend(spawn_pgn_retention(state));
    jobs
}

/// PGN retention's first pass after start, then its period.
const PGN_RETENTION_FIRST: Duration = Duration::from_secs(5);
const PGN_RETENTION_PERIOD: Duration = Duration::from_secs(3600);

/// PGN retention, when it is on: a pass after `PGN_RETENTION_FIRST`, then every
/// `PGN_RETENTION_PERIOD` (±5%). A pass is many short steps, each a pool job of its own
/// (`rundb::retention`); it takes none of the run database's locks.
fn spawn_pgn_retention(state: &Arc<JobContext>) -> Option<tokio::task::JoinHandle<()>> {
    let retention = state.pgn_retention.clone()?;
    let state = state.clone();
    Some(tokio::spawn(async move {
        let jitter = |d: Duration| d.mul_f64(0.95 + 0.1 * rand::random::<f64>());
        tokio::time::sleep(jitter(PGN_RETENTION_FIRST)).await;
        loop {
            let started = Instant::now();
            if let Err(e) = retention.pass(&state.rundb, &state.offload).await {
                tracing::error!(job = "pgn_retention", error = %e, "periodic job failed");
            }
            metrics::histogram!("shoal_job_seconds", "job" => "pgn_retention")
                .record(started.elapsed().as_secs_f64());
            tokio::time::sleep(jitter(PGN_RETENTION_PERIOD)).await;
        }
    }))
}

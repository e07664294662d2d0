//! The run core's verbs for the scheduler ([`crate::scheduler`]): everything request_task and
//! the scheduler's upkeep do to runs, said as what they do. A read-only scan of the cached
//! candidate runs (`scan_cached`), a read-only look at one run (`read_cached`, `read_run`), a
//! task added under the run's lock with the scheduler's grant decision run inside it
//! (`add_task`), and a task the scheduler gives up on ended (`fail_task`).
//!
//! Owns: the scheduler's whole access to runs: where its closures run in the lock order
//! (under the cache's read lock and one run's lock, never two runs at once), the task's
//! journal entry and its undoing when that fails, the reply's copy of the task.
//! A run's load counters and task list change only in `load.rs`.
//! Must not: decide what the scheduler decides (which run, how many games, which grants, who
//! is a duplicate); hand out a run's lock, its cache entry or a way to change a run other than
//! these verbs.

use std::sync::Arc;

use super::cache::{Prio, RunEntry};
use super::load;
use super::model::{Run, WorkerInfo};
use super::outcome::TaskAssignment;
use super::schedule::ArchFilter;
use super::{DbResult, RunDb, Ticket};

/// A cached run a scan saw, to add a task to (opaque outside the run core).
#[derive(Clone)]
pub(crate) struct RunRef(Arc<RunEntry>);

/// One run as [`RunDb::scan_cached`] shows it, under its lock: read-only.
pub(crate) struct Scanned<'a> {
    entry: &'a Arc<RunEntry>,
    /// The run, locked for the time of the look.
    pub(crate) run: &'a Run,
}

impl Scanned<'_> {
    /// The run's arch filter, compiled (kept with the cached run, compiled again only when
    /// the pattern changed); `None` when the run has none.
    pub(crate) fn arch_filter(&self) -> Option<ArchFilter> {
        self.run
            .args
            .arch_filter
            .as_deref()
            .map(|p| self.entry.arch_filter(p))
    }

    /// The run, to add a task to after the scan.
    pub(crate) fn run_ref(&self) -> RunRef {
        RunRef(self.entry.clone())
    }
}

/// Why the scheduler ends a task nobody will play.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TaskEnd {
    /// The worker asked for a new task while its previous one was still active: failed as
    /// stale (a `failed_task` action), if its run is cached. An error is the caller's.
    Stale,
    /// Its worker left before it was told of the task (the run loaded if needed). A journal
    /// failure is logged, not returned: the task is ended in memory either way.
    Withdrawn,
}

impl RunDb {
    /// Shows `f` each cached run of `ids`, in order, one run's lock at a time under the
    /// cache's read lock (the lock order: after the scheduler's `sched`, if held).
    pub(crate) fn scan_cached<'i>(
        &self,
        ids: &'i [String],
        mut f: impl FnMut(&'i str, &Scanned<'_>),
    ) {
        let cache = self.cache.read();
        for id in ids {
            let Some(entry) = cache.get(id) else { continue };
            let run = entry.run.lock();
            f(id, &Scanned { entry, run: &run });
        }
    }

    /// `f` of a cached run under its lock (never loaded from the store); `None` when the run
    /// is not cached.
    pub(crate) fn read_cached<T>(&self, run_id: &str, f: impl FnOnce(&Run) -> T) -> Option<T> {
        let entry = self.cache.read().get(run_id).cloned()?;
        let run = entry.run.lock();
        Some(f(&run))
    }

    /// `f` of a run under its lock, loaded into the cache if needed (on a secondary, read
    /// from the store); `None` when there is no such run.
    pub(crate) fn read_run<T>(
        &self,
        run_id: &str,
        f: impl FnOnce(&Run) -> T,
    ) -> DbResult<Option<T>> {
        let Some(entry) = self.entry(run_id)? else {
            return Ok(None);
        };
        let run = entry.run.lock();
        Ok(Some(f(&run)))
    }

    /// request_task's new task, under the run's lock: `decide` sees the run and the new
    /// task's id and answers the task's games with what it holds for it (`held`: the grants'
    /// guard), or why there is none (`R`). The task is then appended, counted in the run's
    /// load and journalled; the reply's copy of it is returned with the journal ticket and
    /// `held`. If the journal entry cannot be made, the task is taken back and `held` dropped,
    /// both before the run's lock is released: nothing of it counts.
    pub(crate) fn add_task<G, R>(
        &self,
        run: &RunRef,
        wi: &WorkerInfo,
        decide: impl FnOnce(&Run, usize) -> DbResult<Result<(u64, G), R>>,
    ) -> DbResult<Result<(TaskAssignment, Ticket, G), R>> {
        let entry = &run.0;
        let mut run = entry.run.lock();
        let (num_games, held) = match decide(&run, run.tasks.len())? {
            Ok(granted) => granted,
            Err(not) => return Ok(Err(not)),
        };
        let task_id = load::add_task(&mut run, wi, num_games);
        self.note_listed_change();
        let ticket = match self.commit(entry, &mut run, &[task_id], Prio::High) {
            Ok(t) => t,
            Err(e) => {
                // Not acknowledged: the task does not count, its grants go back.
                load::undo_add(&mut run);
                drop(held);
                return Err(e);
            }
        };
        let (start, stats) = run
            .tasks
            .get(task_id)
            .map(|t| (t.start, t.stats))
            .unwrap_or_default();
        let assignment = TaskAssignment {
            run_id: run.id.clone(),
            args: run.args.clone(),
            book_sri: self.books().get(&run.args.book).map(|b| b.sri.clone()),
            task_id,
            num_games,
            start,
            stats,
        };
        Ok(Ok((assignment, ticket, held)))
    }

    /// Ends an active task the scheduler gives up on (`end` says which and how), under its
    /// run's lock: inactive, out of the run's load, its grants released, journalled (nobody
    /// awaits the entry: it acknowledges nothing). `Ok(false)`: nothing to end (no such
    /// active task; for [`TaskEnd::Stale`], the run not cached).
    pub(crate) fn fail_task(&self, run_id: &str, task_id: usize, end: TaskEnd) -> DbResult<bool> {
        let entry = match end {
            TaskEnd::Stale => match self.cache.read().get(run_id).cloned() {
                Some(entry) => entry,
                None => return Ok(false),
            },
            TaskEnd::Withdrawn => self.run_entry(run_id)?,
        };
        let mut run = entry.run.lock();
        if !run.tasks.get(task_id).is_some_and(|t| t.active) {
            return Ok(false);
        }
        self.set_inactive(&mut run, task_id);
        match end {
            TaskEnd::Stale => {
                self.task_action("failed_task", &run, task_id, "Stale active task")?;
                drop(self.commit(&entry, &mut run, &[task_id], Prio::Medium)?);
            }
            TaskEnd::Withdrawn => match self.commit(&entry, &mut run, &[task_id], Prio::Medium) {
                Ok(ticket) => drop(ticket),
                Err(e) => {
                    tracing::warn!(run = run_id, task = task_id, error = %e, "withdrawn task not journalled")
                }
            },
        }
        Ok(true)
    }
}

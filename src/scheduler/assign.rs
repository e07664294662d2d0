//! request_task's critical section (docs/protocol.md#request_task), in its steps: a blocked
//! worker (`blocked_refusal`), a duplicate name (`check_name`), the worker-keyed limits, the
//! choice of a run (`choose`), the task's size and grants and creation under the run's lock
//! (`grant`), the worker's memory (`remember`); and taking back a task nobody was told of
//! (`withdraw_task`).
//!
//! Owns: the limits' checks (the per-address machine limit, configured limits, the run's
//! window), the grants the new task takes (released by the run core when the task ends), and
//! the decisions: which run, how many games, which grants, who is a duplicate.
//! The rules themselves are pure functions in `rules.rs`; the memory is `memory.rs`'s. Runs
//! are read and changed only through the run core's verbs (`scan_cached`, `read_cached`,
//! `add_task`, `fail_task`): the task, its journal entry and the run's counters are the run
//! core's.
//! Must not: call the run core's operations (tasks, lifecycle, control, jobs, queries); do
//! work proportional to all tasks ever created; hold a run's lock while taking another's.

use std::time::{Duration, Instant};

use serde_json::json;

use super::Scheduler;
use super::memory::Sched;
use super::rules::{self as schedule, Candidate, WorkerNeeds};
use crate::accounts::User;
use crate::limits::{Full, GrantRef, Holder};
use crate::rundb::model::{Run, WorkerInfo};
use crate::rundb::outcome::{Assignment, Refusal, TaskAssignment};
use crate::rundb::{DbResult, RunDbError, RunRef, TaskEnd, Ticket};
use crate::store::{Collection, Date};

/// Two workers with the same short name within this window are duplicates.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

impl Scheduler {
    /// request_task's critical section (docs/protocol.md#request_task). The caller holds the
    /// gate's slot (or is a test or a benchmark, alone).
    pub fn assign(&self, user: &User, wi: WorkerInfo) -> DbResult<(Assignment, Option<Ticket>)> {
        self.assign_reserved(user, wi, None)
    }

    /// request_task for a caller that waited in a full key's queue and holds `reservation`
    /// (its units become the new task's, or go back to the next waiter).
    pub fn assign_reserved(
        &self,
        user: &User,
        wi: WorkerInfo,
        reservation: Option<u64>,
    ) -> DbResult<(Assignment, Option<Ticket>)> {
        let started = Instant::now();
        // Whatever happens, an unused reservation goes back (to the key's next waiter).
        let _unused = reservation.map(|r| ReleaseGuard {
            engine: &self.limits,
            holder: Some(Holder::Reservation(r)),
        });
        let result = self.request_task_inner(user, wi, reservation);
        metrics::histogram!("shoal_request_task_critical_seconds")
            .record(started.elapsed().as_secs_f64());
        result
    }

    /// The section's steps, in the order of docs/protocol.md#request_task.
    fn request_task_inner(
        &self,
        user: &User,
        wi: WorkerInfo,
        reservation: Option<u64>,
    ) -> DbResult<(Assignment, Option<Ticket>)> {
        let short = wi.short_name();
        // 1. Blocked worker.
        if let Some(refusal) = self.blocked_refusal(&short)? {
            return Ok((Assignment::Refused(refusal), None));
        }
        let mut sched = self.sched.lock();
        // 2. Duplicate name; the worker's own stale task, credited below.
        let credit = match self.check_name(&sched, &short, &wi) {
            Ok(credit) => credit,
            Err(refusal) => return Ok((Assignment::Refused(refusal), None)),
        };
        // 3. The limits keyed by the worker: the machine limit (active tasks per address,
        // the user's machine_limit), then the configured ones. The worker's own stale task
        // is credited: it is failed below.
        let worker_grants = self.worker_grants(&wi, &short, Some(user.machine_limit));
        if let Some(full) = self.first_full(&worker_grants, credit.as_ref(), reservation) {
            self.limits.count_rejection(full.limit, &full.key);
            return Ok((Assignment::Refused(self.refusal(full, user)), None));
        }
        // 4-5. Order the unfinished runs and take the first that fits.
        let Some(chosen) = self.choose(&sched, &short, &wi) else {
            return Ok((Assignment::NoTask, None));
        };
        // 6-7. Size the task and create it under the run's lock, with every grant.
        let asked = Asked {
            user,
            wi: &wi,
            worker_grants,
            credit: credit.as_ref(),
            reservation,
        };
        let (assignment, ticket) = match self.grant(&chosen, asked)? {
            Ok(granted) => granted,
            Err(not) => return Ok((not, None)),
        };
        // 8. After the run's lock: the worker's map entry, a stale task, the worker's runs.
        self.remember(&mut sched, short, &assignment)?;
        drop(sched);
        Ok((Assignment::Task(Box::new(assignment)), Some(ticket)))
    }

    /// Step 1: a blocked worker is refused, its record touched. (The blocked set's read lock
    /// is held while the record is touched, so a concurrent unblock, which writes under the
    /// write lock, is not overwritten.)
    fn blocked_refusal(&self, short: &str) -> DbResult<Option<Refusal>> {
        let blocked = self.blocked.read();
        if !blocked.contains(short) {
            return Ok(None);
        }
        let store = self.runs.store();
        let mut doc = store.get(Collection::Workers, short)?.unwrap_or_default();
        let message = doc
            .get("message")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default()
            .to_string();
        doc.insert("_id".into(), json!(short));
        doc.insert("worker_name".into(), json!(short));
        doc.insert("last_updated".into(), Date::now().to_value());
        store.put(Collection::Workers, &doc)?;
        drop(blocked);
        Ok(Some(Refusal::BlockedWorker {
            name: short.to_string(),
            message,
        }))
    }

    /// Step 2: refuses a duplicate name (another key's task under this name, active and
    /// heard from within [`DUPLICATE_WINDOW`]); else the credit for this very worker's still
    /// active task from this address, which is failed as stale in step 8 and so must not
    /// count against the machine limit.
    fn check_name(
        &self,
        sched: &Sched,
        short: &str,
        wi: &WorkerInfo,
    ) -> Result<Option<Holder>, Refusal> {
        let mut own_stale_task = false;
        let previous = sched.wtt.get(short).cloned();
        let credit = previous
            .as_ref()
            .map(|(run_id, task_id)| Holder::Task(run_id.clone(), *task_id));
        if let Some((run_id, task_id)) = &previous {
            let seen = self.runs.read_cached(run_id, |run| {
                let t = run.tasks.get(*task_id)?;
                own_stale_task = t.active
                    && t.worker_info.unique_key == wi.unique_key
                    && t.worker_info.remote_addr == wi.remote_addr;
                let ago = t.seconds_since_update();
                (t.active
                    && t.worker_info.unique_key != wi.unique_key
                    && ago <= DUPLICATE_WINDOW.as_secs_f64())
                .then_some(ago)
            });
            if let Some(Some(ago)) = seen {
                return Err(Refusal::DuplicateName {
                    name: short.to_string(),
                    seconds_ago: ago.max(0.0) as u64,
                });
            }
        }
        Ok(credit.filter(|_| own_stale_task))
    }

    /// Steps 4-5: a snapshot of each cached unfinished run (one run's lock at a time, under
    /// the cache's read lock), ordered by the rules, the first that fits the worker and whose
    /// run-keyed limits are not full.
    fn choose(&self, sched: &Sched, short: &str, wi: &WorkerInfo) -> Option<RunRef> {
        let worker_runs = sched.worker_runs.get(short);
        let last_run = worker_runs.and_then(|w| w.last_run.clone());
        let ids = self.runs.unfinished_ids();
        let mut candidates = Vec::with_capacity(ids.len());
        let mut entries = Vec::with_capacity(ids.len());
        // Each candidate's run-keyed limits: `run_limits[index]`.
        let mut run_limits = Vec::with_capacity(ids.len());
        // Each candidate's run id, `cand_ids[index]` (test groups, below).
        let mut cand_ids: Vec<&str> = Vec::with_capacity(ids.len());
        self.runs.scan_cached(&ids, |id, seen| {
            let run = seen.run;
            let arch_filter = seen.arch_filter();
            candidates.push(Candidate {
                index: entries.len(),
                priority: run.args.priority,
                cores: run.cores,
                itp: run.args.itp,
                finished: run.finished,
                approved: run.approved,
                threads: run.args.threads,
                remaining: run.remaining_games(),
                hash_new: schedule::hash_mib(&run.args.new_options),
                hash_base: schedule::hash_mib(&run.args.base_options),
                spsa_params: run.args.spsa.as_ref().map(|s| s.params.len()),
                arch_filter,
                compiler: run.args.compiler.clone(),
                is_last_run: last_run.as_deref() == Some(id),
                in_worker_runs: worker_runs.is_some_and(|w| w.runs.contains(id)),
                limited: false,
            });
            cand_ids.push(id);
            run_limits.push(self.run_limits(run, id));
            entries.push(seen.run_ref());
        });
        // Test groups (issue 39, `group_shares.rs`): a group's takes placed as one run.
        self.group_shares
            .arrange(&cand_ids, &mut candidates, wi.concurrency);
        let needs = WorkerNeeds {
            concurrency: wi.concurrency,
            min_threads: wi.min_threads,
            max_memory: wi.max_memory,
            near_github_api_limit: wi.near_github_api_limit,
            worker_arch: &wi.worker_arch,
            compiler: &wi.compiler,
        };
        // The run-keyed limits (window, SPSA core cap, configured) of the runs `choose` would
        // pick, in its order: a full run is skipped and the worker gets another.
        let limited = |index: usize| {
            run_limits
                .get(index)
                .is_some_and(|r| self.run_full(r, wi.concurrency))
        };
        let (choice, _) = schedule::choose_with(candidates, &needs, limited);
        choice.map(|c| entries[c.index].clone())
    }

    /// Steps 6-7, under the chosen run's lock (the run core's `add_task` runs this decision
    /// there): the task's size, every grant at once; then the run core creates and journals
    /// the task. `Ok(Err(_))`: no task after all (the run needs no more games, or a limit
    /// filled up).
    fn grant(&self, chosen: &RunRef, asked: Asked<'_>) -> DbResult<Granted> {
        let Asked {
            user,
            wi,
            worker_grants,
            credit,
            reservation,
        } = asked;
        let added = self.runs.add_task(chosen, wi, |run, task_id| {
            let remaining = run.remaining_games();
            if run.finished || remaining == 0 {
                return Ok(Err(Assignment::RunNoLongerNeedsGames));
            }
            let num_games = task_size(run, wi.concurrency, remaining)?;
            // Every grant at once, under the run's lock (so the window counts exactly this
            // run's active tasks); released by the run core however the task ends, or by the
            // guard if the task is not created after all.
            let mut grants = worker_grants;
            grants.extend(self.run_grants(run, wi.concurrency));
            let holder = Holder::Task(run.id.clone(), task_id);
            if let Err(full) = self
                .limits
                .acquire(holder.clone(), &grants, credit, reservation)
            {
                return Ok(Err(Assignment::Refused(self.refusal(full, user))));
            }
            let granted = ReleaseGuard {
                engine: &self.limits,
                holder: Some(holder),
            };
            Ok(Ok((num_games, granted)))
        })?;
        Ok(added.map(|(assignment, ticket, mut granted)| {
            granted.keep();
            (assignment, ticket)
        }))
    }

    /// Step 8, after the run's lock: the worker's map entry; the worker's previous task, if
    /// still active in a cached run, failed as stale (journalled for nobody to await: it
    /// acknowledges nothing to anyone); the run noted among the worker's runs.
    fn remember(&self, sched: &mut Sched, short: String, task: &TaskAssignment) -> DbResult<()> {
        let (run_id, task_id) = (&task.run_id, task.task_id);
        if let Some((old_run, old_task)) =
            sched.wtt.insert(short.clone(), (run_id.clone(), task_id))
            && (old_run != *run_id || old_task != task_id)
        {
            self.runs.fail_task(&old_run, old_task, TaskEnd::Stale)?;
        }
        let wr = sched.worker_runs.entry(short).or_default();
        wr.runs.insert(run_id.clone());
        wr.last_run = Some(run_id.clone());
        Ok(())
    }

    /// Takes back a task whose worker left before it was told about it (request_task's caller
    /// disconnected while a batch served it): the task stops counting at once, its grants and
    /// its run's window place go back, as if the worker had failed it before playing. Its
    /// change is journalled; nobody awaits it. Logged, never an error: the task would
    /// otherwise be reaped by the dead-task scavenger.
    pub fn withdraw_task(&self, run_id: &str, task_id: usize) {
        match self.runs.fail_task(run_id, task_id, TaskEnd::Withdrawn) {
            Ok(true) => {}
            Ok(false) => return,
            Err(e) => {
                tracing::warn!(run = run_id, task = task_id, error = %e, "cannot withdraw task");
                return;
            }
        }
        tracing::info!(
            run = run_id,
            task = task_id,
            "task withdrawn: its worker left before the reply"
        );
        metrics::counter!("shoal_request_task_withdrawn_total").increment(1);
    }

    /// The first of `grants` that does not fit (a reservation's own key is not full to it).
    fn first_full(
        &self,
        grants: &[GrantRef<'_>],
        credit: Option<&Holder>,
        reservation: Option<u64>,
    ) -> Option<Full> {
        self.limits.check_all(grants, credit, reservation).err()
    }

    fn refusal(&self, full: Full, user: &User) -> Refusal {
        if Some(full.limit) == self.limit_ids.machine {
            Refusal::MachineLimit {
                limit: user.machine_limit,
                addr: full.key,
            }
        } else {
            Refusal::Limit {
                limit: full.limit,
                name: full.name,
                key: full.key,
                max: full.max,
            }
        }
    }
}

/// Releases a holder's grants when dropped, unless `keep` was called: the grants of a task
/// that was not created after all, a reservation that was not used.
struct ReleaseGuard<'a> {
    engine: &'a crate::limits::Engine,
    holder: Option<Holder>,
}

impl ReleaseGuard<'_> {
    fn keep(&mut self) {
        self.holder = None;
    }
}

impl Drop for ReleaseGuard<'_> {
    fn drop(&mut self) {
        if let Some(h) = self.holder.take() {
            self.engine.release(&h);
        }
    }
}

/// What the grant step needs of the steps before it.
struct Asked<'a> {
    user: &'a User,
    wi: &'a WorkerInfo,
    /// The grants keyed by the worker (step 3), to take with the run's.
    worker_grants: Vec<GrantRef<'a>>,
    /// The worker's own stale task (step 2), not counted against its limits.
    credit: Option<&'a Holder>,
    reservation: Option<u64>,
}

/// A task created, with its journal ticket; or, when none was after all, the answer.
type Granted = Result<(TaskAssignment, Ticket), Assignment>;

/// Step 6: the task's games (docs/protocol.md#request_task, task sizing). Err: the run's time
/// control does not parse.
fn task_size(run: &Run, concurrency: u32, remaining: u64) -> DbResult<u64> {
    let Some(tc) = schedule::parse_tc(&run.args.tc) else {
        return Err(RunDbError::Corrupt(run.id.clone(), "bad tc".into()));
    };
    Ok(schedule::task_games(
        &tc,
        concurrency,
        run.args.threads,
        run.batch_games(),
        remaining,
        run.args.sprt.is_some(),
    ))
}

//! request_task's critical section (docs/protocol.md#request_task) and the scheduler's memory.
//!
//! Owns: `Sched` (the worker -> task map and each worker's runs, rebuilt at start from the
//! active tasks and `kvstore`'s `worker_runs`, persisted by `clean_worker_runs`), the blocked
//! workers' refresh (`refresh_blocked`), the limits' checks (the per-address machine limit,
//! configured limits, the run's window) and the grants the new task takes (released by the
//! run core's `set_inactive`), the choice of a run and the task created in it, and taking
//! back a task nobody was told of (`withdraw_task`).
//! The rules themselves are pure functions in `rules.rs`.
//! Must not: call the run core's operations (tasks, lifecycle, control, jobs, queries); do
//! work proportional to all tasks ever created; hold a run's lock while taking another's.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use super::Scheduler;
use super::rules::{self as schedule, Candidate, WorkerNeeds};
use crate::accounts::User;
use crate::limits::{Full, GrantRef, Holder};
use crate::rundb::model::{Stats, Task, WorkerInfo};
use crate::rundb::outcome::{Assignment, Refusal, TaskAssignment};
use crate::rundb::{DbResult, Prio, RunDbError, Ticket, now, secs_since};
use crate::store::{Collection, Cond, Doc, Query};

/// Two workers with the same short name within this window are duplicates.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

#[derive(Default)]
pub(super) struct WorkerRuns {
    pub(super) runs: HashSet<String>,
    pub(super) last_run: Option<String>,
}

/// The scheduler's memory (primary only).
#[derive(Default)]
pub(super) struct Sched {
    /// short worker name -> (run id, task id) of its latest task.
    pub(super) wtt: HashMap<String, (String, usize)>,
    pub(super) worker_runs: HashMap<String, WorkerRuns>,
}

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

    fn request_task_inner(
        &self,
        user: &User,
        wi: WorkerInfo,
        reservation: Option<u64>,
    ) -> DbResult<(Assignment, Option<Ticket>)> {
        let short = wi.short_name();
        // 1. Blocked worker. (The read lock is held while the record is touched, so a
        // concurrent unblock, which writes under the write lock, is not overwritten.)
        let blocked = self.blocked.read();
        if blocked.contains(&short) {
            let store = self.runs.store();
            let mut doc = store.get(Collection::Workers, &short)?.unwrap_or_default();
            doc.insert("_id".into(), json!(short));
            doc.insert("worker_name".into(), json!(short));
            doc.insert("last_updated".into(), now().to_value());
            store.put(Collection::Workers, &doc)?;
            drop(blocked);
            return Ok((
                Assignment::Refused(Refusal::BlockedWorker { name: short }),
                None,
            ));
        }
        drop(blocked);
        let mut sched = self.sched.lock();
        // 2. Duplicate name. (Also notes whether this very worker still holds an active task
        // from this address: that task is failed as stale below, so it must not count
        // against the machine limit.)
        let mut own_stale_task = false;
        let previous = sched.wtt.get(&short).cloned();
        let credit = previous
            .as_ref()
            .map(|(run_id, task_id)| Holder::Task(run_id.clone(), *task_id));
        let previous_entry = previous
            .as_ref()
            .and_then(|(run_id, _)| self.runs.cached(run_id));
        if let (Some((_, task_id)), Some(entry)) = (&previous, previous_entry) {
            let task_id = *task_id;
            let run = entry.run.lock();
            if let Some(t) = run.tasks.get(task_id) {
                own_stale_task = t.active
                    && t.worker_info.unique_key == wi.unique_key
                    && t.worker_info.remote_addr == wi.remote_addr;
                let ago = secs_since(&t.last_updated);
                if t.active
                    && t.worker_info.unique_key != wi.unique_key
                    && ago <= DUPLICATE_WINDOW.as_secs_f64()
                {
                    let refusal = Refusal::DuplicateName {
                        name: short,
                        seconds_ago: ago.max(0.0) as u64,
                    };
                    return Ok((Assignment::Refused(refusal), None));
                }
            }
        }
        // 3. The limits keyed by the worker: the machine limit (active tasks per address,
        // the user's machine_limit), then the configured ones. The worker's own stale task
        // is credited: it is failed below.
        let credit = credit.filter(|_| own_stale_task);
        let worker_grants = self.worker_grants(&wi, &short, Some(user.machine_limit));
        if let Some(full) = self.first_full(&worker_grants, credit.as_ref(), reservation) {
            self.limits.count_rejection(full.limit, &full.key);
            return Ok((Assignment::Refused(self.refusal(full, user)), None));
        }
        // 4-5. Order the unfinished runs and take the first that fits.
        let worker_runs = sched.worker_runs.get(&short);
        let last_run = worker_runs.and_then(|w| w.last_run.clone());
        let ids = self.runs.unfinished_ids();
        let cache = self.runs.cache_read();
        let mut candidates = Vec::with_capacity(ids.len());
        let mut entries = Vec::with_capacity(ids.len());
        // Each candidate's run-keyed limits: `run_limits[index]`.
        let mut run_limits = Vec::with_capacity(ids.len());
        for id in &ids {
            let Some(entry) = cache.get(id) else { continue };
            let run = entry.run.lock();
            let arch_filter = run
                .args
                .arch_filter
                .as_deref()
                .map(|p| entry.arch_filter(p));
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
                is_last_run: last_run.as_deref() == Some(id.as_str()),
                in_worker_runs: worker_runs.is_some_and(|w| w.runs.contains(id)),
                limited: false,
            });
            run_limits.push(self.run_limits(&run, id));
            entries.push(entry.clone());
        }
        drop(cache);
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
        let Some(choice) = choice else {
            return Ok((Assignment::NoTask, None));
        };
        let entry = entries[choice.index].clone();

        // 7. Create the task under the run lock.
        let mut run = entry.run.lock();
        let remaining = run.remaining_games();
        if run.finished || remaining == 0 {
            return Ok((Assignment::RunNoLongerNeedsGames, None));
        }
        let Some(tc) = schedule::parse_tc(&run.args.tc) else {
            return Err(RunDbError::Corrupt(run.id.clone(), "bad tc".into()));
        };
        let sprt = run.args.sprt.is_some();
        let num_games = schedule::task_games(
            &tc,
            wi.concurrency,
            run.args.threads,
            run.batch_games(),
            remaining,
            sprt,
        );
        let task_id = run.tasks.len();
        // Every grant at once, under the run's lock (so the window counts exactly this run's
        // active tasks); released by `set_inactive` however the task ends, or by the guard if
        // the task is not created after all.
        let mut grants = worker_grants;
        grants.extend(self.run_grants(&run, wi.concurrency));
        let holder = Holder::Task(run.id.clone(), task_id);
        if let Err(full) =
            self.limits
                .acquire(holder.clone(), &grants, credit.as_ref(), reservation)
        {
            return Ok((Assignment::Refused(self.refusal(full, user)), None));
        }
        let mut granted = ReleaseGuard {
            engine: &self.limits,
            holder: Some(holder),
        };
        let task = Task {
            num_games,
            active: true,
            last_updated: now(),
            start: run.total_games,
            stats: Stats::default(),
            worker_info: wi.clone(),
            bad: false,
            spsa_params: None,
            extra: Default::default(),
        };
        run.tasks.push(task);
        run.workers += 1;
        run.cores += u64::from(wi.concurrency);
        self.runs.note_listed_change();
        run.committed_games += num_games;
        run.total_games += num_games;
        let ticket = match self.runs.commit(&entry, &mut run, &[task_id], Prio::High) {
            Ok(t) => t,
            Err(e) => {
                // Not acknowledged: the task does not count.
                run.tasks.pop();
                run.workers = run.workers.saturating_sub(1);
                run.cores = run.cores.saturating_sub(u64::from(wi.concurrency));
                run.committed_games = run.committed_games.saturating_sub(num_games);
                run.total_games = run.total_games.saturating_sub(num_games);
                return Err(e);
            }
        };
        granted.keep();
        let run_id = run.id.clone();
        let assignment = TaskAssignment {
            run_id: run_id.clone(),
            args: run.args.clone(),
            book_sri: self.runs.books.get(&run.args.book).map(|b| b.sri.clone()),
            task_id,
            num_games,
            start: run.tasks[task_id].start,
            stats: run.tasks[task_id].stats,
        };
        drop(run);

        // 8. After the run lock: the worker's map entry, a stale task, the worker's runs.
        let mut stale_ticket = None;
        if let Some((old_run, old_task)) =
            sched.wtt.insert(short.clone(), (run_id.clone(), task_id))
            && (old_run != run_id || old_task != task_id)
            && let Some(old_entry) = self.runs.cached(&old_run)
        {
            let mut old = old_entry.run.lock();
            if old.tasks.get(old_task).is_some_and(|t| t.active) {
                self.runs.set_inactive(&mut old, old_task);
                self.runs
                    .task_action("failed_task", &old, old_task, "Stale active task")?;
                stale_ticket =
                    Some(
                        self.runs
                            .commit(&old_entry, &mut old, &[old_task], Prio::Medium)?,
                    );
            }
        }
        let wr = sched.worker_runs.entry(short).or_default();
        wr.runs.insert(run_id.clone());
        wr.last_run = Some(run_id);
        drop(sched);
        // The stale task's change is journalled too; nobody awaits it (it acknowledges
        // nothing to anyone).
        drop(stale_ticket);
        Ok((Assignment::Task(Box::new(assignment)), Some(ticket)))
    }

    /// Takes back a task whose worker left before it was told about it (request_task's caller
    /// disconnected while a batch served it): the task stops counting at once, its grants and
    /// its run's window place go back, as if the worker had failed it before playing. Its
    /// change is journalled; nobody awaits it. Logged, never an error: the task would
    /// otherwise be reaped by the dead-task scavenger.
    pub fn withdraw_task(&self, run_id: &str, task_id: usize) {
        let entry = match self.runs.run_entry(run_id) {
            Ok(entry) => entry,
            Err(e) => {
                tracing::warn!(run = run_id, task = task_id, error = %e, "cannot withdraw task");
                return;
            }
        };
        let mut run = entry.run.lock();
        if !run.tasks.get(task_id).is_some_and(|t| t.active) {
            return;
        }
        self.runs.set_inactive(&mut run, task_id);
        match self.runs.commit(&entry, &mut run, &[task_id], Prio::Medium) {
            Ok(ticket) => drop(ticket),
            Err(e) => {
                tracing::warn!(run = run_id, task = task_id, error = %e, "withdrawn task not journalled")
            }
        }
        tracing::info!(
            run = run_id,
            task = task_id,
            "task withdrawn: its worker left before the reply"
        );
        metrics::counter!("shoal_request_task_withdrawn_total").increment(1);
    }

    /// Re-reads the blocked workers.
    pub fn refresh_blocked(&self) -> DbResult<()> {
        let docs = self.runs.store().find(
            Collection::Workers,
            &Query::new().with(Cond::Eq("blocked".into(), json!(true))),
        )?;
        let set = docs
            .iter()
            .filter_map(|d| d.get("worker_name").and_then(Value::as_str))
            .map(String::from)
            .collect();
        *self.blocked.write() = set;
        Ok(())
    }

    /// Persists `worker_runs` and forgets runs that are finished.
    pub fn clean_worker_runs(&self) -> DbResult<()> {
        let unfinished: HashSet<String> = self.runs.unfinished_ids().into_iter().collect();
        let value = {
            let mut sched = self.sched.lock();
            let mut value = Map::new();
            sched.worker_runs.retain(|_, w| {
                w.runs.retain(|r| unfinished.contains(r));
                !w.runs.is_empty()
            });
            for (name, w) in &sched.worker_runs {
                let mut m = Map::new();
                for r in &w.runs {
                    m.insert(r.clone(), json!(true));
                }
                if let Some(l) = &w.last_run {
                    m.insert("last_run".into(), json!(l));
                }
                value.insert(name.clone(), Value::Object(m));
            }
            sched.wtt.retain(|_, (run, _)| unfinished.contains(run));
            value
        };
        let mut doc = Doc::new();
        doc.insert("_id".into(), json!("worker_runs"));
        doc.insert("value".into(), Value::Object(value));
        self.runs.store().put(Collection::Kvstore, &doc)?;
        Ok(())
    }

    /// Start-up (primary): the memory rebuilt from the cached unfinished runs (each active
    /// task in the worker -> task map, holding its grants again whatever the maxima) and from
    /// `kvstore`'s `worker_runs`. Runs before anything can call the scheduler.
    pub(super) fn rebuild(&self) -> DbResult<()> {
        let mut sched = self.sched.lock();
        let ids = self.runs.unfinished_ids();
        let cache = self.runs.cache_read();
        for id in &ids {
            let Some(entry) = cache.get(id) else { continue };
            let run = entry.run.lock();
            self.rebuild_holders(&run);
            for (i, t) in run.tasks.iter().enumerate() {
                if t.active {
                    sched
                        .wtt
                        .insert(t.worker_info.short_name(), (run.id.clone(), i));
                }
            }
        }
        drop(cache);
        if let Some(doc) = self.runs.store().get(Collection::Kvstore, "worker_runs")?
            && let Some(Value::Object(map)) = doc.get("value")
        {
            for (name, v) in map {
                let mut wr = WorkerRuns::default();
                if let Value::Object(runs) = v {
                    for (k, val) in runs {
                        if k == "last_run" {
                            wr.last_run = val.as_str().map(String::from);
                        } else {
                            wr.runs.insert(k.clone());
                        }
                    }
                }
                sched.worker_runs.insert(name.clone(), wr);
            }
        }
        Ok(())
    }

    /// Number of active tasks per remote address (for tests and metrics).
    pub fn connections(&self, addr: &str) -> u32 {
        let held = self
            .limit_ids
            .machine
            .map_or(0, |m| self.limits.held_by_key(m, addr));
        u32::try_from(held).unwrap_or(u32::MAX)
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

//! The task-bound worker calls: update_task, beat, request_spsa, failed_task, worker_log and
//! upload_pgn (docs/protocol.md).
//!
//! Owns: checking and applying a worker's report on its task (deltas against the stored
//! totals, SPSA steps, the SPRT, a decided run finished and auto-purged), keeping tasks alive,
//! and the checks before a PGN is stored. Two calls have a form for the event loop that
//! never waits (`try_beat`, `try_update_task`: try-locks only, `None` means "take the pool
//! path"); update_task's two forms run one body: `plan_update` (every check and the
//! decision, changing nothing) then `apply_update`.
//! Must not: call the other operations (scheduler, lifecycle, jobs, queries) or recovery;
//! store anything under a run's lock but through `transitions` (`finish_run`, `purge_locked`);
//! in a `try_` form, wait for a lock, call the store, load a run or end a task.

use parking_lot::MutexGuard;
use serde_json::json;

use super::cache::{Prio, RunEntry};
use super::model::{Run, Stats, WorkerInfo};
use super::outcome::{TaskReply, UpdateRejection};
use super::records::{finished_run_message, run_fields, run_label};
use super::trajectory::Point;
use super::transitions::sprt_results;
use super::{DbResult, Op, RunDb, RunDbError, Ticket, now};
use crate::stats::SprtRecord;
use crate::store::{Collection, Doc};

/// What an update_task will do, decided under the run's lock before anything changes
/// ([`RunDb::plan_update`]) and then carried out under the same hold of the lock
/// ([`RunDb::apply_update`]). The pool's `update_task` and the event loop's
/// `try_update_task` run these same two steps; the event loop carries out only a plan that
/// [`UpdatePlan::is_light`] allows.
enum UpdatePlan {
    /// The task is no longer active: nothing changes.
    NotActive,
    /// One of Fishtest's rejections: the task ends.
    Rejected(UpdateRejection),
    /// New totals to apply.
    Apply(Box<Applied>),
}

/// An accepted update, with everything the decision depends on computed up front.
struct Applied {
    /// The task's new cumulative totals.
    stats: Stats,
    /// The run's totals with this update's delta added.
    results: Stats,
    /// The run is an SPSA tuning.
    spsa_run: bool,
    /// This batch's SPSA block (SPSA runs only).
    spsa: Option<crate::spsa::SpsaResult>,
    /// The task's games are done: it ends.
    ends_task: bool,
    /// The SPRT record after `results` (SPRT runs only).
    sprt: Option<SprtRecord>,
    /// The run is decided: it finishes and may be auto-purged.
    decided: bool,
}

impl UpdatePlan {
    /// Whether carrying the plan out is memory work and a journal submit only: no other
    /// lock, no store call, no action logged. A rejection or a task's last batch ends the
    /// task (`set_inactive` takes the limits', the CPU hours' and the contributors' locks; a
    /// crash is logged as an action); a decided run is written at once (`finish_run`) and
    /// maybe purged; an SPSA update's journal patch carries the run's whole parameter history
    /// (about 100 samples of every parameter late in a tuning, more beyond 1,000 parameters),
    /// a cost that grows with the tuning. Those take the pool path.
    fn is_light(&self) -> bool {
        match self {
            UpdatePlan::NotActive => true,
            UpdatePlan::Rejected(_) => false,
            UpdatePlan::Apply(a) => !a.spsa_run && !a.ends_task && !a.decided,
        }
    }
}

impl RunDb {
    /// update_task (docs/protocol.md#update_task).
    pub fn update_task(
        &self,
        run_id: &str,
        task_id: usize,
        stats: Stats,
        spsa: Option<crate::spsa::SpsaResult>,
        wi: WorkerInfo,
    ) -> DbResult<(TaskReply, Option<Ticket>)> {
        let entry = self.run_entry(run_id)?;
        let run = entry.run.lock();
        let plan = self.plan_update(&run, task_id, stats, spsa, &wi)?;
        self.apply_update(&entry, run, task_id, plan, wi)
    }

    /// update_task without waiting, for the event loop: `None` when it would have to wait or
    /// do more than memory work and a journal submit (the run is not in the cache, its lock
    /// or the cache's is held, or [`UpdatePlan::is_light`] refuses the update); the caller
    /// then takes the pool path ([`RunDb::update_task`]), which decides again from scratch.
    /// Nothing has changed when it returns `None`. Otherwise the same checks and changes as
    /// `update_task`, and the same ticket to await before replying.
    pub fn try_update_task(
        &self,
        run_id: &str,
        task_id: usize,
        stats: Stats,
        spsa: Option<crate::spsa::SpsaResult>,
        wi: &WorkerInfo,
    ) -> Option<DbResult<(TaskReply, Option<Ticket>)>> {
        let entry = self.cache.try_read()?.get(run_id).cloned()?;
        let run = entry.run.try_lock()?;
        let plan = match self.plan_update(&run, task_id, stats, spsa, wi) {
            Ok(plan) => plan,
            Err(e) => return Some(Err(e)),
        };
        if !plan.is_light() {
            return None;
        }
        Some(self.apply_update(&entry, run, task_id, plan, wi.clone()))
    }

    /// update_task's checks and decision, under the run's lock; changes nothing.
    fn plan_update(
        &self,
        run: &Run,
        task_id: usize,
        stats: Stats,
        spsa: Option<crate::spsa::SpsaResult>,
        wi: &WorkerInfo,
    ) -> DbResult<UpdatePlan> {
        let run_id = run.id.as_str();
        let task = self.task_of(run, task_id, wi)?;
        if !task.active {
            return Ok(UpdatePlan::NotActive);
        }
        // Impossible counts are refused outright and change nothing (not even the task):
        // they are a broken or hostile client, not a result.
        stats.check().map_err(|reason| RunDbError::BadStats {
            run_id: run_id.to_string(),
            task_id,
            reason,
        })?;
        let (g_new, size) = (stats.games(), task.num_games);
        if g_new > size {
            return Err(RunDbError::MoreGamesThanTask {
                run_id: run_id.to_string(),
                task_id,
                reported: g_new,
                size,
            });
        }
        let old = task.stats;
        let g_old = old.games();
        let is_spsa = run.args.spsa.is_some();
        let batch = run.batch_games();
        let rejection = if g_new < g_old {
            Some(UpdateRejection::GamesWentDown {
                from: g_old,
                to: g_new,
            })
        } else if is_spsa && g_new <= g_old {
            Some(UpdateRejection::SpsaMustAddGames {
                from: g_old,
                to: g_new,
            })
        } else if (g_new - g_old) % 2 != 0 {
            Some(UpdateRejection::OddIncrement(g_new - g_old))
        } else if run.args.sprt.is_some() && g_new % batch != 0 {
            Some(UpdateRejection::NotBatchMultiple {
                games: g_new,
                batch,
            })
        } else {
            None
        };
        if let (None, Some(result)) = (&rejection, &spsa)
            && result.num_games > g_new.saturating_sub(g_old)
        {
            return Err(RunDbError::SpsaGamesNotAdded {
                run_id: run_id.to_string(),
                task_id,
                counted: result.num_games,
                added: g_new.saturating_sub(g_old),
            });
        }
        let delta = match (rejection, stats.delta(&old)) {
            (None, Some(d)) => d,
            (rejection, _) => {
                return Ok(UpdatePlan::Rejected(
                    rejection.unwrap_or(UpdateRejection::CountWentDown),
                ));
            }
        };
        let Some(results) = run.results.checked_add(&delta) else {
            return Err(RunDbError::TotalsOverflow {
                run_id: run_id.to_string(),
                task_id,
            });
        };
        // The SPRT after the new totals, on a copy: the decision is known before anything
        // changes (microseconds: BENCHMARKS.md).
        let sprt = run.args.sprt.clone().map(|mut sprt| {
            if let Err(e) = crate::stats::update_sprt(&sprt_results(&results), &mut sprt) {
                tracing::error!(run = run_id, error = %e, "update_SPRT failed");
            }
            sprt
        });
        let decided = results.games() >= run.args.num_games
            || sprt
                .as_ref()
                .is_some_and(|s| s.state != crate::stats::SprtState::Running);
        Ok(UpdatePlan::Apply(Box::new(Applied {
            stats,
            results,
            spsa_run: is_spsa,
            spsa: spsa.filter(|_| is_spsa),
            ends_task: g_new >= size,
            sprt,
            decided,
        })))
    }

    /// Carries out a plan of [`RunDb::plan_update`] made under this same hold of the lock.
    fn apply_update(
        &self,
        entry: &RunEntry,
        mut run: MutexGuard<'_, Run>,
        task_id: usize,
        plan: UpdatePlan,
        mut wi: WorkerInfo,
    ) -> DbResult<(TaskReply, Option<Ticket>)> {
        let a = match plan {
            UpdatePlan::NotActive => return Ok((TaskReply::NotActive, None)),
            UpdatePlan::Rejected(why) => {
                self.set_inactive(&mut run, task_id);
                let ticket = self.commit(entry, &mut run, &[task_id], Prio::Medium)?;
                return Ok((TaskReply::Rejected(why), Some(ticket)));
            }
            UpdatePlan::Apply(a) => a,
        };
        // The run as it was, for a trajectory that begins now (trajectory.rs: two copies).
        let before = Point::of(&run.results, run.args.sprt.as_ref().map(|s| s.llr));
        run.results = a.results;
        {
            let task = &mut run.tasks[task_id];
            // The address and country are the ones the task was handed out to.
            wi.remote_addr = task.worker_info.remote_addr.clone();
            wi.country_code = task.worker_info.country_code.clone();
            task.stats = a.stats;
            task.last_updated = now();
            task.worker_info = std::sync::Arc::new(wi);
        }
        if let Some(result) = a.spsa {
            let Run {
                id, args, tasks, ..
            } = &mut *run;
            if let Some(s) = args.spsa.as_mut()
                && let Err(e) =
                    crate::spsa::update_spsa(s, &mut tasks[task_id].spsa_params, &result)
            {
                // Fishtest logs and skips a stale or forged signature; the games still count.
                tracing::warn!(run = %id, task = task_id, error = %e, "SPSA update skipped");
            }
        }
        if a.ends_task {
            self.set_inactive(&mut run, task_id);
            self.check_crash_or_time(&run, task_id)?;
        }
        if let Some(sprt) = a.sprt {
            run.last_updated = now();
            run.args.sprt = Some(sprt);
        }
        if !a.spsa_run {
            // A comparison and at most one push into a bounded vector (rundb/trajectory.rs);
            // `commit` below journals the point it changed.
            let llr = run.args.sprt.as_ref().map(|s| s.llr);
            let now = Point::of(&run.results, llr);
            run.trajectory.record(before, now);
        }
        if a.decided {
            let ticket = self.commit(entry, &mut run, &[task_id], Prio::High)?;
            self.finish_run(entry, &mut run)?;
            // Auto-purge (never for SPSA) runs inside the stop: it may revive the run. Logged
            // under the run's owner, whatever it did (Fishtest's words).
            if let Some((outcome, message)) = self.auto_purge_locked(entry, &mut run)? {
                let f = run_fields(&run, Some(message));
                let owner = run.args.username.clone();
                self.locked_action("purge_run", &owner, f);
                if outcome.revived {
                    return Ok((TaskReply::Alive(false), Some(ticket)));
                }
            }
            let f = run_fields(&run, Some(finished_run_message(&run)));
            let username = run.args.username.clone();
            drop(run);
            self.ledger.log_action("finished_run", &username, f)?;
            return Ok((TaskReply::Alive(false), Some(ticket)));
        }
        let alive = run.tasks[task_id].active;
        let prio = if alive { Prio::Normal } else { Prio::Medium };
        let ticket = self.commit(entry, &mut run, &[task_id], prio)?;
        Ok((TaskReply::Alive(alive), Some(ticket)))
    }

    /// beat: keeps an active task alive.
    pub fn beat(&self, run_id: &str, task_id: usize, wi: &WorkerInfo) -> DbResult<TaskReply> {
        let entry = self.run_entry(run_id)?;
        let mut run = entry.run.lock();
        let task = self.task_of(&run, task_id, wi)?;
        let alive = task.active;
        if alive {
            run.tasks[task_id].last_updated = now();
            entry.mark_dirty(Prio::Normal);
        }
        Ok(TaskReply::Alive(alive))
    }

    /// beat without waiting, for the event loop: `None` when it would have to (the run is not
    /// in the cache, or its lock or the cache's is held), and the caller then takes the pool
    /// path ([`RunDb::beat`]). A beat touches memory only (it is not journalled), so when
    /// both locks are free it costs a microsecond, less than the hop to a pool thread.
    pub fn try_beat(
        &self,
        run_id: &str,
        task_id: usize,
        wi: &WorkerInfo,
    ) -> Option<DbResult<TaskReply>> {
        let entry = self.cache.try_read()?.get(run_id).cloned()?;
        let mut run = entry.run.try_lock()?;
        let task = match self.task_of(&run, task_id, wi) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        let alive = task.active;
        if alive {
            run.tasks[task_id].last_updated = now();
            entry.mark_dirty(Prio::Normal);
        }
        Some(Ok(TaskReply::Alive(alive)))
    }

    /// request_spsa: the parameters for the next SPSA batch.
    pub fn request_spsa(
        &self,
        run_id: &str,
        task_id: usize,
        wi: &WorkerInfo,
    ) -> DbResult<(TaskReply, Option<Ticket>)> {
        let entry = self.run_entry(run_id)?;
        let mut run = entry.run.lock();
        let task = self.task_of(&run, task_id, wi)?;
        if !task.active {
            return Ok((TaskReply::NotActive, None));
        }
        let Some(spsa) = run.args.spsa.as_ref() else {
            return Err(RunDbError::NotSpsa {
                run_id: run_id.to_string(),
            });
        };
        let request =
            crate::spsa::request_spsa(spsa, &mut rand::rng()).map_err(RunDbError::Spsa)?;
        run.tasks[task_id].spsa_params = Some(request.spsa_params);
        let ticket = self.commit(&entry, &mut run, &[task_id], Prio::Normal)?;
        Ok((TaskReply::Spsa(request.reply), Some(ticket)))
    }

    /// failed_task: the worker gave up on its task.
    pub fn failed_task(
        &self,
        run_id: &str,
        task_id: usize,
        message: &str,
        wi: &WorkerInfo,
    ) -> DbResult<(TaskReply, Option<Ticket>)> {
        let entry = self.run_entry(run_id)?;
        let mut run = entry.run.lock();
        let task = self.task_of(&run, task_id, wi)?;
        if !task.active {
            return Ok((TaskReply::NotActive, None));
        }
        self.set_inactive(&mut run, task_id);
        self.check_crash_or_time(&run, task_id)?;
        self.task_action("failed_task", &run, task_id, message)?;
        let ticket = self.commit(&entry, &mut run, &[task_id], Prio::Medium)?;
        Ok((TaskReply::Done, Some(ticket)))
    }

    /// worker_log: a worker's warning, kept in the action log.
    pub fn worker_log(
        &self,
        message: &str,
        task: Option<(&str, usize)>,
        wi: &WorkerInfo,
    ) -> DbResult<TaskReply> {
        let mut f = Doc::new();
        f.insert("worker".into(), json!(wi.long_name()));
        f.insert("message".into(), json!(message));
        if let Some((run_id, task_id)) = task {
            let entry = self.run_entry(run_id)?;
            let run = entry.run.lock();
            self.task_of(&run, task_id, wi)?;
            f.insert("run_id".into(), json!(run_id));
            f.insert("run".into(), json!(run_label(&run)));
            f.insert("task_id".into(), json!(task_id));
        }
        self.ledger.log_action("worker_log", &wi.username, f)?;
        Ok(TaskReply::Done)
    }

    /// upload_pgn: stores a task's PGN (already base64-decoded and checked to be gzip).
    pub fn upload_pgn(
        &self,
        run_id: &str,
        task_id: usize,
        gz: &[u8],
        wi: &WorkerInfo,
    ) -> DbResult<TaskReply> {
        self.check_upload(run_id, task_id, wi)?;
        self.store.pgn_put(&format!("{run_id}-{task_id}"), gz)?;
        Ok(TaskReply::Done)
    }

    /// Whether this worker may upload the PGN of this task: the run exists and the task is
    /// the worker's (active or not). Checked before an upload's body is read.
    pub fn check_upload(&self, run_id: &str, task_id: usize, wi: &WorkerInfo) -> DbResult<()> {
        let entry = self.run_entry(run_id)?;
        {
            let run = entry.run.lock();
            // A secondary's copy of the run may predate the task: read the run again from the
            // store (the primary writes it behind, within seconds of a change) and check the
            // task there, as the primary would; a task the store does not hold is refused.
            if self.cfg.primary || task_id < run.tasks.len() {
                self.task_of(&run, task_id, wi)?;
                return Ok(());
            }
        }
        let Some(doc) = self.store.get(Collection::Runs, run_id)? else {
            return Err(RunDbError::UnknownRun {
                run_id: run_id.to_string(),
                op: Op::Task,
            });
        };
        let run = super::cache::parse_run(doc)?;
        self.task_of(&run, task_id, wi)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests;

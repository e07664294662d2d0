//! Transitions that several operations share: a task set inactive (with its load and CPU
//! hours), a crash or time-loss noted, a run finished, a finished run purged (and maybe
//! revived); and the checks every task-bound call starts with (`run_entry`, `task_of`).
//!
//! Owns: the bookkeeping that must be the same whoever ends a task or a run (update_task,
//! failed_task, stop_run, request_task's stale task, the dead-task job, a purge), and the
//! green/yellow flags of a finished run. The transitions are called with the run's lock held.
//! Must not: call the operations above it (scheduler, tasks, lifecycle, jobs, queries) or
//! recovery; build replies; take `sched` or the cache's write lock.

use std::sync::Arc;

use serde_json::{Value, json};

use super::cache::{RunEntry, to_doc};
use super::load;
use super::model::{PurgeView as _, Run, Stats, Task, WorkerInfo};
use super::{DbResult, Op, RunDb, RunDbError, now};

/// What a purge did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeOutcome {
    /// Ids of the tasks marked bad.
    pub purged: Vec<usize>,
    /// True if the run became undecided again and was put back to work.
    pub revived: bool,
}

impl RunDb {
    /// Looks up a task for a task-bound call and checks that it belongs to this worker.
    pub(super) fn task_of<'a>(
        &self,
        run: &'a Run,
        task_id: usize,
        wi: &WorkerInfo,
    ) -> DbResult<&'a Task> {
        let task = run
            .tasks
            .get(task_id)
            .ok_or_else(|| RunDbError::UnknownTask {
                run_id: run.id.clone(),
                task_id,
            })?;
        if task.worker_info.unique_key != wi.unique_key {
            return Err(RunDbError::TaskOfOtherWorker {
                run_id: run.id.clone(),
                task_id,
                unique_key: wi.unique_key.clone(),
            });
        }
        if task.worker_info.username != wi.username {
            return Err(RunDbError::TaskOfOtherUser {
                run_id: run.id.clone(),
                task_id,
                username: wi.username.clone(),
            });
        }
        Ok(task)
    }

    /// The cache entry of the run a worker's task-bound call names.
    pub(super) fn run_entry(&self, run_id: &str) -> DbResult<Arc<RunEntry>> {
        self.entry(run_id)?.ok_or_else(|| RunDbError::UnknownRun {
            run_id: run_id.to_string(),
            op: Op::Task,
        })
    }

    /// Fishtest's set_inactive_task: the task stops counting towards the run's load (workers,
    /// cores, committed games: `load.rs`; its address's task count) and its CPU hours go to
    /// its user.
    pub(super) fn set_inactive(&self, run: &mut Run, task_id: usize) {
        if !load::end_task(run, task_id) {
            return;
        }
        if let Some(task) = run.tasks.get_mut(task_id) {
            task.spsa_params = None;
        }
        self.note_listed_change();
        // Every grant the task held (machine limit, window, configured limits) goes back,
        // whoever ended it; waiters of those keys are served.
        self.limits
            .release(&crate::limits::Holder::Task(run.id.clone(), task_id));
        self.record_finished_task(run, task_id);
    }

    /// Logs a crash_or_time action if the task's stats say so.
    pub(super) fn check_crash_or_time(&self, run: &Run, task_id: usize) -> DbResult<()> {
        let Some(s) = run.tasks.get(task_id).map(|t| t.stats) else {
            return Ok(());
        };
        if s.crash_or_time() {
            let message = format!(
                "Time losses: {}, crashes: {}, games: {}",
                s.time_losses,
                s.crashes,
                s.games()
            );
            self.task_action("crash_or_time", run, task_id, &message)?;
        }
        Ok(())
    }

    /// Finishes a run: every task inactive, counters zeroed, flags set, out of the
    /// scheduler's list. Saved at once.
    pub(super) fn finish_run(&self, entry: &RunEntry, run: &mut Run) -> DbResult<()> {
        for i in 0..run.tasks.len() {
            self.set_inactive(run, i);
        }
        run.finished = true;
        load::finished(run);
        run.nps = 0.0;
        run.games_per_minute = 0.0;
        run.last_updated = now();
        let flags = run_flags(run);
        run.is_green = flags.is_green;
        run.is_yellow = flags.is_yellow;
        self.unfinished.write().retain(|id| id != &run.id);
        self.ledger.run_finished(&run.id);
        self.save_now(entry, run)
    }

    /// Marks the purge's bad tasks, recomputes results and the SPRT, and revives the run if
    /// it is undecided again. The run must be finished; it is saved at once.
    pub(super) fn purge_locked(
        &self,
        entry: &RunEntry,
        run: &mut Run,
        thresholds: crate::purge::PurgeThresholds,
    ) -> DbResult<PurgeOutcome> {
        let plan = {
            let pairs = run.counts_pairs();
            let view: Vec<crate::purge::PurgeTask<'_>> = run
                .tasks
                .iter()
                .map(|t| crate::purge::PurgeTask {
                    unique_key: &t.worker_info.unique_key,
                    stats: t.stats.to_purge(pairs),
                    bad: t.bad,
                })
                .collect();
            crate::purge::plan_purge(&view, thresholds, crate::purge::PURGE_ROUNDS)
        };
        let mut outcome = PurgeOutcome::default();
        for b in &plan.bad_tasks {
            let Some(task) = run.tasks.get_mut(b.index) else {
                continue;
            };
            let mut copy = to_doc(&*task)?;
            copy.insert("task_id".into(), json!(b.index));
            copy.insert("bad".into(), json!(true));
            // JSON has no infinity; Fishtest's API shows it as "inf" too.
            let residual = if b.residual.is_finite() {
                json!(b.residual)
            } else {
                json!("inf")
            };
            copy.insert("residual".into(), residual);
            copy.insert("residual_color".into(), json!(b.color));
            run.bad_tasks.push(Value::Object(copy));
            if task.active {
                self.limits
                    .release(&crate::limits::Holder::Task(run.id.clone(), b.index));
            }
            task.stats = Stats::default();
            task.bad = true;
            task.active = false;
            task.spsa_params = None;
            outcome.purged.push(b.index);
        }
        if outcome.purged.is_empty() {
            return Ok(outcome);
        }
        let mut results = Stats::default();
        for t in &run.tasks {
            results.add(&t.stats);
        }
        run.results = results;
        load::recount_committed(run);
        let undecided = match run.args.sprt.as_mut() {
            Some(sprt) => {
                if let Err(e) = crate::stats::update_sprt(&sprt_results(&results), sprt) {
                    tracing::error!(run = %run.id, error = %e, "update_SPRT after purge failed");
                }
                sprt.state == crate::stats::SprtState::Running
            }
            None => results.games() < run.args.num_games,
        };
        if undecided && run.finished {
            run.finished = false;
            run.is_green = false;
            run.is_yellow = false;
            let mut unfinished = self.unfinished.write();
            if !unfinished.contains(&run.id) {
                unfinished.push(run.id.clone());
            }
            outcome.revived = true;
        } else {
            let flags = run_flags(run);
            run.is_green = flags.is_green;
            run.is_yellow = flags.is_yellow;
        }
        run.last_updated = now();
        self.save_now(entry, run)?;
        Ok(outcome)
    }
}

/// Results as `update_SPRT` and `SPRT_elo` read them: the pair counts when the run counts
/// pairs ([`Stats::pairs`]), else W/L/D alone.
pub(super) fn sprt_results(s: &Stats) -> crate::stats::Results {
    crate::stats::Results {
        wins: s.wins,
        losses: s.losses,
        draws: s.draws,
        pentanomial: s.pairs(),
    }
}

/// What a fixed-games run's Elo and LOS are computed from (Fishtest's `get_elo` input): the
/// pair counts when the run counts pairs, else `[L, D, W]`.
pub(super) fn fixed_games_data(r: &Stats) -> Vec<f64> {
    match r.pairs() {
        Some(p) => p.iter().map(|c| *c as f64).collect(),
        None => vec![r.losses as f64, r.draws as f64, r.wins as f64],
    }
}

/// The green/yellow flags of a finished run (docs/protocol.md#dead-tasks-and-purge, Flags).
fn run_flags(run: &Run) -> crate::purge::RunFlags {
    use crate::purge::{RunKind, run_flags};
    let kind = if let Some(s) = &run.args.sprt {
        RunKind::Sprt {
            state: s.state,
            elo0: s.elo0,
            elo1: s.elo1,
        }
    } else if run.args.spsa.is_some() {
        RunKind::Spsa
    } else {
        let los = crate::stats::get_elo(&fixed_games_data(&run.results)).map_or(0.5, |e| e.los);
        RunKind::FixedGames { los }
    };
    run_flags(kind, run.results.wins, run.results.losses)
}

//! A run's load: the task list's growth and the counters that follow it (`workers`, `cores`,
//! `committed_games`, `total_games`).
//!
//! Owns: every change of those four counters and every task appended to a run, in one place:
//! a task added (request_task, `verbs.rs`) and taken back when its journal entry failed, a task
//! ended (`transitions.rs`'s `set_inactive`), a run finished, a purge's recount.
//! Must not: lock, journal, log or release grants (the callers do, with the run's lock held).

use super::model::{Run, Stats, Task, WorkerInfo};

/// Appends an active task of `num_games` for `wi`, starting after the run's last game, and
/// counts it in the run's load. Returns its id.
pub(super) fn add_task(run: &mut Run, wi: &WorkerInfo, num_games: u64) -> usize {
    let task_id = run.tasks.len();
    run.tasks.push(Task {
        num_games,
        active: true,
        last_updated: super::now(),
        start: run.total_games,
        stats: Stats::default(),
        worker_info: std::sync::Arc::new(wi.clone()),
        bad: false,
        spsa_params: None,
        extra: Default::default(),
    });
    run.workers += 1;
    run.cores += u64::from(wi.concurrency);
    run.committed_games += num_games;
    run.total_games += num_games;
    task_id
}

/// Takes back the task [`add_task`] just appended (its journal entry failed: it was never
/// acknowledged, so it does not count).
pub(super) fn undo_add(run: &mut Run) {
    let Some(task) = run.tasks.pop() else {
        return;
    };
    let concurrency = u64::from(task.worker_info.concurrency);
    run.workers = run.workers.saturating_sub(1);
    run.cores = run.cores.saturating_sub(concurrency);
    run.committed_games = run.committed_games.saturating_sub(task.num_games);
    run.total_games = run.total_games.saturating_sub(task.num_games);
}

/// An active task stops counting: inactive, its worker and cores out of the run's load, its
/// games committed only as far as played. False (and nothing changed) if it is not an active
/// task of the run.
pub(super) fn end_task(run: &mut Run, task_id: usize) -> bool {
    let Some(task) = run.tasks.get_mut(task_id) else {
        return false;
    };
    if !task.active {
        return false;
    }
    task.active = false;
    let played = task.stats.games();
    let num_games = task.num_games;
    let concurrency = u64::from(task.worker_info.concurrency);
    run.workers = run.workers.saturating_sub(1);
    run.cores = run.cores.saturating_sub(concurrency);
    run.committed_games = (run.committed_games + played).saturating_sub(num_games);
    true
}

/// A finished run carries no load.
pub(super) fn finished(run: &mut Run) {
    run.workers = 0;
    run.cores = 0;
}

/// After a purge: the committed games counted again from the tasks (an active task's whole
/// size, an ended one's played games).
pub(super) fn recount_committed(run: &mut Run) {
    run.committed_games = run
        .tasks
        .iter()
        .map(|t| {
            if t.active {
                t.num_games
            } else {
                t.stats.games()
            }
        })
        .sum();
}

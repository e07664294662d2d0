//! What the run database tells the ledger: the fields of an action about a run, the actions
//! it makes under a run's lock, a finished task's figures, and the stored runs for the
//! ledger's one-time rebuild of the contributors table.
//!
//! Owns: `run_fields` and the `run` label (`new_tag[:23]-md5(run_id)[:7]`), `locked_action`
//! and `task_action` (the document goes to the journal's next group commit, ahead of the
//! change the same request then commits and awaits), `record_finished_task` (the CPU hours
//! and the contribution of a task set inactive), and [`StoredRuns`] over the `runs`
//! collection.
//! Must not: call any other layer of `rundb` (it is below the cache); write the store under a
//! run's lock (the ledger's `add_*` calls touch memory only).

use serde_json::{Value, json};

use super::model::Run;
use super::schedule;
use super::{DbResult, RunDb};
use crate::ledger::{LedgerResult, RunContribution, StoredRuns, TaskContribution};
use crate::store::{Collection, Cond, Doc, Order, Query};

/// Runs read per page by the contributors table's one-time rebuild.
const REBUILD_PAGE: u64 = 500;

/// The fields of an action about a run: its id and label, and the message if any.
pub(super) fn run_fields(run: &Run, message: Option<String>) -> Doc {
    let mut f = Doc::new();
    f.insert("run_id".into(), json!(run.id));
    f.insert("run".into(), json!(run_label(run)));
    if let Some(m) = message {
        f.insert("message".into(), json!(m));
    }
    f
}

/// Fishtest's action `run` label: `new_tag[:23]-md5(run_id)[:7]`.
pub(super) fn run_label(run: &Run) -> String {
    use md5::{Digest, Md5};
    let tag: String = run.args.new_tag.chars().take(23).collect();
    let digest = hex::encode(Md5::digest(run.id.as_bytes()));
    format!("{tag}-{}", &digest[..7])
}

/// What task `task_id` contributed: its games and CPU hours (games × game duration ×
/// threads, none when the time control does not parse).
fn contribution(run: &Run, task_id: usize) -> Option<TaskContribution> {
    let task = run.tasks.get(task_id)?;
    let games = task.stats.games();
    let hours = schedule::parse_tc(&run.args.tc).map_or(0.0, |tc| {
        games as f64 * schedule::tc_duration(&tc) * f64::from(run.args.threads) / 3600.0
    });
    Some(TaskContribution {
        username: task.worker_info.username.clone(),
        games,
        cpu_hours: hours.max(0.0),
        ended: task.last_updated,
        run_started: run.start_time,
        run_id: run.id.clone(),
        run_finished: run.finished,
    })
}

impl RunDb {
    /// Logs an action from inside a run's lock, where no store write may happen: the document
    /// goes to the journal's next group commit, ahead of (and so durable no later than) the
    /// change that the same request then commits and awaits.
    pub(super) fn locked_action(&self, action: &str, username: &str, mut fields: Doc) {
        fields.insert("_id".into(), json!(crate::store::new_object_id()));
        drop(
            self.journal
                .submit_action(crate::ledger::document(action, username, fields)),
        );
    }

    /// Logs an action about a task (called with the run locked).
    pub(crate) fn task_action(
        &self,
        action: &str,
        run: &Run,
        task_id: usize,
        message: &str,
    ) -> DbResult<()> {
        let Some(task) = run.tasks.get(task_id) else {
            return Ok(());
        };
        let mut f = run_fields(run, Some(message.to_string()));
        f.insert("worker".into(), json!(task.worker_info.long_name()));
        f.insert("task_id".into(), json!(task_id));
        self.locked_action(action, &task.worker_info.username, f);
        Ok(())
    }

    /// Gives a task just set inactive to the ledger (under the run's lock: memory only): its
    /// CPU hours (the figure stop_run's 1000-hour rule reads) and its contribution.
    pub(super) fn record_finished_task(&self, run: &Run, task_id: usize) {
        if let Some(task) = run.tasks.get(task_id)
            && let Some(tc) = schedule::parse_tc(&run.args.tc)
        {
            let hours = task.stats.games() as f64
                * schedule::tc_duration(&tc)
                * f64::from(run.args.threads)
                / 3600.0;
            if hours > 0.0 {
                self.ledger.add_cpu_hours(&task.worker_info.username, hours);
            }
        }
        if let Some(c) = contribution(run, task_id) {
            self.ledger.add_contribution(&c);
        }
    }
}

impl StoredRuns for RunDb {
    fn each_stored_run(&self, each: &mut dyn FnMut(RunContribution)) -> LedgerResult<usize> {
        let mut after: Option<String> = None;
        let mut runs = 0usize;
        loop {
            // Keyset paging (by `_id`), so each page costs the same however far in it is.
            let mut q = Query::new().sort("_id", Order::Asc).limit(REBUILD_PAGE);
            if let Some(last) = &after {
                q = q.with(Cond::Gt("_id".into(), json!(last)));
            }
            let docs = self.store.find(Collection::Runs, &q)?;
            let n = docs.len() as u64;
            if let Some(last) = docs
                .last()
                .and_then(|d| d.get("_id"))
                .and_then(Value::as_str)
            {
                after = Some(last.to_string());
            }
            for doc in docs {
                let run = match serde_json::from_value::<Run>(Value::Object(doc)) {
                    Ok(run) => run,
                    Err(e) => {
                        tracing::warn!(error = %e, "contributors: an unreadable run skipped");
                        continue;
                    }
                };
                runs += 1;
                let tasks = (0..run.tasks.len())
                    .filter(|&i| !run.tasks[i].active)
                    .filter_map(|i| contribution(&run, i))
                    .collect();
                each(RunContribution {
                    username: run.args.username.clone(),
                    started: run.start_time,
                    run_id: run.id.clone(),
                    finished: run.finished,
                    tasks,
                });
            }
            if n < REBUILD_PAGE || after.is_none() {
                break;
            }
        }
        Ok(runs)
    }
}

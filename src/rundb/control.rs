//! The run controls people use (the run page's buttons and forms): modify, delete and the
//! user's stop (docs/fishtest-compatibility.md#run-controls).
//!
//! Owns: who may do each (the run's owner or an approver), the limits on what a non-approver
//! may change, the states each is allowed from, and the action each logs. A refusal says what
//! happened ([`super::RunDbError`], with the control in [`super::Op`]); the API edge words it
//! as Fishtest does, for the pages too.
//! Must not: word a refusal; call the other operations (scheduler, tasks, lifecycle, jobs,
//! queries) or recovery; change a run on a secondary instance; hold a run's lock while the
//! action log is written.

use super::model::Run;
use super::records::run_fields;
use super::transitions::PurgeOutcome;
use super::{ChangeRefused, DbResult, Op, RunDb, RunDbError, secs_since};
use crate::accounts::User;
use crate::protocol::MAX_GAMES;
use crate::stats::SprtState;

use super::lifecycle::PURGE_WINDOW;

/// What the modify form asks for. The numbers are the form's integers as entered (a leading
/// `-` included), so that the refusals are the domain's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunChanges {
    pub num_games: i64,
    pub priority: i64,
    pub throughput: i64,
    pub auto_purge: bool,
    /// The new info text; applied only when the modifier owns the run and it is not blank.
    pub info: Option<String>,
    /// The sliding window: None leaves it; `Some(None)` removes it; `Some(Some(n))` sets it
    /// (1..=100000). Lowering it below the active tasks ends none: no new task until under.
    pub max_active_tasks: Option<Option<u32>>,
}

/// Where a modified run stands with its approval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Approval {
    /// It was approved and still is.
    Approved,
    /// A non-approver raised it above the limits (or it had failed): it must be approved again.
    Unapproved,
    /// It was not approved before the change: it still waits for approval.
    Pending,
}

/// What a modify did.
#[derive(Debug, Clone, PartialEq)]
pub struct ModifyOutcome {
    pub approval: Approval,
    /// True if the run was finished (or deleted) and became undecided again: it is back at work.
    pub revived: bool,
    /// The `modify_run` action's message.
    pub message: String,
}

/// What a user's stop did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserStop {
    /// The auto-purge that followed the stop (runs with auto-purge that are not SPSA).
    pub auto_purge: Option<PurgeOutcome>,
}

/// Fishtest's checks of the modify form's values, in its order (the permission comes after).
fn check_changes(run: &Run, c: &RunChanges) -> Result<(), ChangeRefused> {
    let old = run.args.num_games;
    let new = c.num_games;
    let fixed_games = run.args.sprt.is_none() && run.args.spsa.is_none();
    if fixed_games && new > 0 && new.unsigned_abs() > old {
        return Err(ChangeRefused::FixedGamesRaised);
    }
    if run.args.spsa.is_some() && (new < 0 || new.unsigned_abs() != old) {
        return Err(ChangeRefused::SpsaGames);
    }
    if new < 0 {
        return Err(ChangeRefused::NegativeGames);
    }
    if let Some(Some(w)) = c.max_active_tasks
        && !(1..=super::create::MAX_ACTIVE_TASKS).contains(&w)
    {
        return Err(ChangeRefused::WindowOutOfRange(w));
    }
    if new % 1000 != 0 {
        return Err(ChangeRefused::GamesNotMultiple);
    }
    if new.unsigned_abs() > MAX_GAMES {
        return Err(ChangeRefused::TooManyGames);
    }
    if c.info
        .as_deref()
        .is_some_and(|i| !super::create::text_without_controls(i))
    {
        return Err(ChangeRefused::InfoControl);
    }
    Ok(())
}

/// A number as the action log shows it: integral values without a fraction.
fn num(x: f64) -> String {
    if x.is_finite() && x.fract() == 0.0 && x.abs() < 1e15 {
        format!("{}", x as i64)
    } else {
        x.to_string()
    }
}

/// Fishtest's booleans in messages.
fn boolean(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// The `modify_run` message: the changed keys in the order priority, num-games, throughput,
/// auto-purge ("modify: <k> changed from A to B, …"; info is not logged).
fn modify_message(run: &Run, c: &RunChanges) -> String {
    let a = &run.args;
    let mut parts = Vec::new();
    if a.priority != c.priority as f64 {
        parts.push(format!(
            "priority changed from {} to {}",
            num(a.priority),
            c.priority
        ));
    }
    if i64::try_from(a.num_games).ok() != Some(c.num_games) {
        parts.push(format!(
            "num-games changed from {} to {}",
            a.num_games, c.num_games
        ));
    }
    if a.throughput != c.throughput as f64 {
        parts.push(format!(
            "throughput changed from {} to {}",
            num(a.throughput),
            c.throughput
        ));
    }
    if a.auto_purge != c.auto_purge {
        parts.push(format!(
            "auto-purge changed from {} to {}",
            boolean(a.auto_purge),
            boolean(c.auto_purge)
        ));
    }
    if parts.is_empty() {
        "modify: no changes".into()
    } else {
        format!("modify: {}", parts.join(", "))
    }
}

/// Undecided: fewer games played than asked for, and no SPRT decision.
fn undecided(run: &Run) -> bool {
    run.results.games() < run.args.num_games
        && run
            .args
            .sprt
            .as_ref()
            .is_none_or(|s| s.state == SprtState::Running)
}

fn may_control(run: &Run, by: &User) -> bool {
    run.args.username == by.username || by.is_approver()
}

/// Why `by` may not delete `run` now (another user's run, a run already deleted).
fn delete_refusal(run: &Run, run_id: &str, by: &User) -> DbResult<()> {
    if !may_control(run, by) {
        return Err(RunDbError::NotYours {
            run_id: run_id.to_string(),
            op: Op::Delete,
        });
    }
    if run.deleted {
        return Err(RunDbError::RunDeleted {
            run_id: run_id.to_string(),
        });
    }
    Ok(())
}

/// Why `by` may not stop `run` now (another user's run, a finished run).
fn stop_refusal(run: &Run, run_id: &str, by: &User) -> DbResult<()> {
    if !may_control(run, by) {
        return Err(RunDbError::NotYours {
            run_id: run_id.to_string(),
            op: Op::UserStop,
        });
    }
    if run.finished {
        return Err(RunDbError::RunFinished {
            run_id: run_id.to_string(),
            op: Op::UserStop,
        });
    }
    Ok(())
}

impl RunDb {
    /// What [`RunDb::stop_run_by_user`] would refuse, checked without acting (a page asks
    /// the person to confirm first); `Ok` carries `look` of the run.
    pub fn check_stop<T>(
        &self,
        run_id: &str,
        by: &User,
        look: impl FnOnce(&Run) -> T,
    ) -> DbResult<T> {
        let entry = self.control_entry(run_id, Op::UserStop)?;
        let run = entry.run.lock();
        stop_refusal(&run, run_id, by)?;
        Ok(look(&run))
    }

    /// What [`RunDb::delete_run`] would refuse, checked without acting; `Ok` carries `look`
    /// of the run.
    pub fn check_delete<T>(
        &self,
        run_id: &str,
        by: &User,
        look: impl FnOnce(&Run) -> T,
    ) -> DbResult<T> {
        let entry = self.control_entry(run_id, Op::Delete)?;
        let run = entry.run.lock();
        delete_refusal(&run, run_id, by)?;
        Ok(look(&run))
    }

    /// The cache entry of a run control `op` acts on: primary only; an unknown id is refused.
    pub(super) fn control_entry(
        &self,
        run_id: &str,
        op: Op,
    ) -> DbResult<std::sync::Arc<super::cache::RunEntry>> {
        if !self.cfg.primary {
            return Err(RunDbError::NotPrimary);
        }
        self.entry(run_id)?.ok_or_else(|| RunDbError::UnknownRun {
            run_id: run_id.to_string(),
            op,
        })
    }

    /// `/tests/modify`: the run's owner or an approver changes its games, priority,
    /// throughput, auto-purge (and the owner its info), within 30 days of its start. A
    /// non-approver who raises throughput above max(old, 100) or priority above max(old, 0),
    /// or who modifies a failed run, unapproves it. A run left undecided is put back to work
    /// (a finished or deleted run revives). Saved at once; logs `modify_run` (and
    /// `approve_run` "unapproved").
    pub fn modify_run(
        &self,
        run_id: &str,
        changes: RunChanges,
        by: &User,
    ) -> DbResult<ModifyOutcome> {
        let entry = self.control_entry(run_id, Op::Modify)?;
        let mut run = entry.run.lock();
        if secs_since(&run.start_time) > PURGE_WINDOW.as_secs_f64() {
            return Err(RunDbError::RunTooOld {
                run_id: run_id.to_string(),
                op: Op::Modify,
            });
        }
        check_changes(&run, &changes).map_err(RunDbError::BadChange)?;
        if !may_control(&run, by) {
            return Err(RunDbError::NotYours {
                run_id: run_id.to_string(),
                op: Op::Modify,
            });
        }
        let mut message = modify_message(&run, &changes);
        if let Some(window) = changes.max_active_tasks
            && window != run.args.max_active_tasks
        {
            let show = |w: Option<u32>| w.map_or("none".to_string(), |n| n.to_string());
            message.push_str(&format!(
                " max_active_tasks: {} -> {}",
                show(run.args.max_active_tasks),
                show(window)
            ));
        }
        let new_throughput = changes.throughput as f64;
        let new_priority = changes.priority as f64;
        let was_approved = run.approved;
        let unapprove = was_approved
            && !by.is_approver()
            && (new_throughput > run.args.throughput.max(100.0)
                || new_priority > run.args.priority.max(0.0)
                || run.failed);
        if unapprove {
            run.approved = false;
            run.approver.clear();
        }
        run.args.num_games = changes.num_games.unsigned_abs();
        run.args.priority = new_priority;
        run.args.throughput = new_throughput;
        run.args.auto_purge = changes.auto_purge;
        if let Some(window) = changes.max_active_tasks {
            run.args.max_active_tasks = window;
        }
        if run.args.username == by.username
            && let Some(info) = changes.info.as_deref().map(str::trim)
            && !info.is_empty()
        {
            run.args.info = info.to_string();
        }
        let mut revived = false;
        if undecided(&run) {
            revived = run.finished || run.deleted;
            run.finished = false;
            run.deleted = false;
            run.failed = false;
            run.is_green = false;
            run.is_yellow = false;
            let mut unfinished = self.unfinished.write();
            if !unfinished.contains(&run.id) {
                unfinished.push(run.id.clone());
            }
        }
        run.last_updated = super::now();
        self.save_now(&entry, &run)?;
        let unapproved = run_fields(&run, Some("unapproved".into()));
        let modified = run_fields(&run, Some(message.clone()));
        drop(run);
        if unapprove {
            self.ledger
                .log_action("approve_run", &by.username, unapproved)?;
        }
        self.ledger
            .log_action("modify_run", &by.username, modified)?;
        let approval = match (was_approved, unapprove) {
            (true, false) => Approval::Approved,
            (true, true) => Approval::Unapproved,
            (false, _) => Approval::Pending,
        };
        Ok(ModifyOutcome {
            approval,
            revived,
            message,
        })
    }

    /// `/tests/delete`: the run's owner or an approver deletes a run: its tasks made
    /// inactive, finished, `deleted`, out of the scheduler's list; saved at once; logs
    /// `delete_run`. Deleted runs leave the finished lists but can still be read.
    pub fn delete_run(&self, run_id: &str, by: &User) -> DbResult<()> {
        let entry = self.control_entry(run_id, Op::Delete)?;
        let mut run = entry.run.lock();
        delete_refusal(&run, run_id, by)?;
        run.deleted = true;
        if run.finished {
            self.save_now(&entry, &run)?;
        } else {
            self.finish_run(&entry, &mut run)?;
        }
        let f = run_fields(&run, None);
        drop(run);
        self.ledger.log_action("delete_run", &by.username, f)?;
        Ok(())
    }

    /// `/tests/stop`: the run's owner or an approver stops an unfinished run: it is finished
    /// (saved at once), then auto-purged if it asks for that and is not SPSA (which may revive
    /// it; logged as `purge_run` under the submitter's name). Logs `stop_run` "User stop". The
    /// worker's `stop_run` (a fatal problem found by a worker) is `RunDb::stop_run`.
    pub fn stop_run_by_user(&self, run_id: &str, by: &User) -> DbResult<UserStop> {
        let entry = self.control_entry(run_id, Op::UserStop)?;
        let mut run = entry.run.lock();
        stop_refusal(&run, run_id, by)?;
        self.finish_run(&entry, &mut run)?;
        let purge = self
            .auto_purge_locked(&entry, &mut run)?
            .map(|(outcome, message)| (outcome, run_fields(&run, Some(message))));
        let submitter = run.args.username.clone();
        let stopped = run_fields(&run, Some("User stop".into()));
        drop(run);
        let auto_purge = match purge {
            Some((outcome, f)) => {
                self.ledger.log_action("purge_run", &submitter, f)?;
                Some(outcome)
            }
            None => None,
        };
        self.ledger.log_action("stop_run", &by.username, stopped)?;
        Ok(UserStop { auto_purge })
    }
}

#[cfg(test)]
mod tests;

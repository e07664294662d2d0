//! The run lifecycle: a run created, approved, stopped by a worker, purged by its owner or an
//! approver (modified, deleted or stopped by a person: `control.rs`).
//!
//! Owns: who may do each, the states each is allowed from, and the action each logs.
//! Must not: call the other operations (scheduler, tasks, jobs, queries) or recovery; change
//! a run on a secondary instance.

use std::time::Duration;

use super::cache::{Prio, RunEntry};
use super::model::{Run, WorkerInfo};
use super::outcome::TaskReply;
use super::records::{new_run_message, run_fields};
use super::transitions::PurgeOutcome;
use super::{DbResult, Op, RunDb, RunDbError, Ticket, create, secs_since};
use crate::accounts::User;

/// Why [`RunDb::submit_run`] created nothing: a refused argument, or the run database's error.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error(transparent)]
    Args(#[from] create::ArgError),
    #[error(transparent)]
    Db(#[from] RunDbError),
}

/// CPU hours a user needs before stop_run may fail a run.
pub const STOP_RUN_CPU_HOURS: f64 = 1000.0;

/// Runs older than this cannot be purged (or modified).
pub const PURGE_WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

impl RunDb {
    /// Creates a run from validated arguments; returns its id.
    pub fn create_run(&self, args: create::CreateArgs, user: &User) -> DbResult<String> {
        self.submit_run(args, user).map_err(|e| match e {
            SubmitError::Args(e) => RunDbError::BadArgs(e),
            SubmitError::Db(e) => e,
        })
    }

    /// [`RunDb::create_run`] with a refused argument kept typed (which argument, what message),
    /// for the submit form's per-field messages.
    pub fn submit_run(&self, args: create::CreateArgs, user: &User) -> Result<String, SubmitError> {
        if !self.cfg.primary {
            return Err(RunDbError::NotPrimary.into());
        }
        // A rerun names the run it reschedules: one that exists.
        if let Some(from) = args.rescheduled_from.as_deref()
            && !(from.len() == 24
                && from.bytes().all(|b| b.is_ascii_hexdigit())
                && self.get_run(from)?.is_some())
        {
            return Err(create::ArgError {
                field: "rescheduled_from",
                message: format!("rescheduled_from: there is no run {from:?} to reschedule"),
            }
            .into());
        }
        let run = create::build_run(args, &user.username, &self.books.load())?;
        let id = run.id.clone();
        let entry = RunEntry::new(run.clone());
        self.save_now(&entry, &run)?;
        self.cache.write().insert(id.clone(), entry);
        self.unfinished.write().push(id.clone());
        self.ledger
            .add_test_submitted(&run.args.username, &run.start_time, &run.id);
        let f = run_fields(&run, Some(new_run_message(&run)));
        self.ledger
            .log_action("new_run", &user.username, f)
            .map_err(RunDbError::from)?;
        Ok(id)
    }

    /// Approves a run: approvers only, never the submitter, only once.
    pub fn approve_run(&self, run_id: &str, approver: &User) -> DbResult<()> {
        if !self.cfg.primary {
            return Err(RunDbError::NotPrimary);
        }
        if !approver.is_approver() {
            return Err(RunDbError::NotApprover);
        }
        let entry = self.entry(run_id)?.ok_or_else(|| RunDbError::UnknownRun {
            run_id: run_id.to_string(),
            op: Op::Approve,
        })?;
        let mut run = entry.run.lock();
        if run.args.username == approver.username {
            return Err(RunDbError::SelfApproval {
                run_id: run_id.to_string(),
            });
        }
        if run.approved {
            return Err(RunDbError::AlreadyApproved {
                run_id: run_id.to_string(),
            });
        }
        if run.finished || run.deleted {
            return Err(RunDbError::RunFinished {
                run_id: run_id.to_string(),
                op: Op::Approve,
            });
        }
        run.approved = true;
        run.approver = approver.username.clone();
        self.save_now(&entry, &run)?;
        let f = run_fields(&run, Some("approved".into()));
        let (new_nets, base_nets) = (run.args.new_nets.clone(), run.args.base_nets.clone());
        drop(run);
        self.ledger
            .log_action("approve_run", &approver.username, f)?;
        // The nets' first and last tests (after the lock: store writes).
        if let Err(e) = crate::nets::record_tests(&self.store, &new_nets, &base_nets, run_id) {
            tracing::warn!(run = %run_id, error = %e, "nets' tests not recorded");
        }
        Ok(())
    }

    /// stop_run: a worker found a fatal problem with the run (wrong bench, engine bug).
    pub fn stop_run(
        &self,
        run_id: &str,
        task_id: usize,
        message: &str,
        wi: &WorkerInfo,
    ) -> DbResult<(TaskReply, Option<Ticket>)> {
        let entry = self.run_entry(run_id)?;
        let hours = self.ledger.cpu_hours(&wi.username)?;
        let mut run = entry.run.lock();
        self.task_of(&run, task_id, wi)?;
        if run.finished {
            return Err(RunDbError::RunFinished {
                run_id: run_id.to_string(),
                op: Op::WorkerStop,
            });
        }
        let short: String = message.chars().take(1024).collect();
        if hours < STOP_RUN_CPU_HOURS {
            self.set_inactive(&mut run, task_id);
            // The worker sends no failed_task after this; the task is made inactive here.
            let _ticket = self.commit(&entry, &mut run, &[task_id], Prio::Medium)?;
            self.task_action(
                "stop_run",
                &run,
                task_id,
                &format!("{short} (not authorized)"),
            )?;
            return Err(RunDbError::TooFewCpuHours {
                username: wi.username.clone(),
            });
        }
        run.failed = true;
        run.failures += 1;
        let ticket = self.commit(&entry, &mut run, &[task_id], Prio::High)?;
        self.finish_run(&entry, &mut run)?;
        // Logged before the auto-purge it runs, as Fishtest logs them.
        self.task_action("stop_run", &run, task_id, &short)?;
        // Fishtest's stop runs the auto-purge, which a failed run refuses (and logs so).
        if let Some((_, message)) = self.auto_purge_locked(&entry, &mut run)? {
            let owner = run.args.username.clone();
            self.locked_action("purge_run", &owner, run_fields(&run, Some(message)));
        }
        Ok((TaskReply::Done, Some(ticket)))
    }

    /// Fishtest's auto-purge inside a stop, for a run with `auto_purge` that is not SPSA (the
    /// run just finished, its lock held): the purge with the strict thresholds, unless the
    /// run is too old or failed. Returns what it did and the `purge_run` message, which the
    /// caller logs under the run's owner: `Auto purge`, or `Auto purge (not performed): <why>`
    /// (too old, failed, or no bad workers). `None`: the run is not auto-purged.
    pub(super) fn auto_purge_locked(
        &self,
        entry: &RunEntry,
        run: &mut Run,
    ) -> DbResult<Option<(PurgeOutcome, String)>> {
        if !run.args.auto_purge || run.args.spsa.is_some() {
            return Ok(None);
        }
        let refused = if secs_since(&run.start_time) > PURGE_WINDOW.as_secs_f64() {
            Some("Run too old to be purged")
        } else if run.failed {
            Some("You cannot purge a failed run")
        } else {
            None
        };
        if let Some(why) = refused {
            let message = format!("Auto purge (not performed): {why}");
            return Ok(Some((PurgeOutcome::default(), message)));
        }
        let outcome = self.purge_locked(entry, run, crate::purge::AUTO_PURGE)?;
        let message = if outcome.purged.is_empty() {
            "Auto purge (not performed): No bad workers"
        } else {
            "Auto purge"
        };
        Ok(Some((outcome, message.into())))
    }

    /// The manual purge (docs/protocol.md#dead-tasks-and-purge): run owner or approver; only
    /// finished, non-failed runs started within 30 days.
    pub fn purge_run(&self, run_id: &str, user: &User) -> DbResult<PurgeOutcome> {
        if !self.cfg.primary {
            return Err(RunDbError::NotPrimary);
        }
        let entry = self.entry(run_id)?.ok_or_else(|| RunDbError::UnknownRun {
            run_id: run_id.to_string(),
            op: Op::Purge,
        })?;
        let mut run = entry.run.lock();
        if run.args.username != user.username && !user.is_approver() {
            return Err(RunDbError::NotYours {
                run_id: run_id.to_string(),
                op: Op::Purge,
            });
        }
        if !run.finished {
            return Err(RunDbError::RunNotFinished {
                run_id: run_id.to_string(),
            });
        }
        if run.failed {
            return Err(RunDbError::RunFailed {
                run_id: run_id.to_string(),
            });
        }
        if secs_since(&run.start_time) > PURGE_WINDOW.as_secs_f64() {
            return Err(RunDbError::RunTooOld {
                run_id: run_id.to_string(),
                op: Op::Purge,
            });
        }
        let outcome = self.purge_locked(&entry, &mut run, crate::purge::MANUAL_PURGE)?;
        let f = run_fields(
            &run,
            Some(if outcome.purged.is_empty() {
                "Manual purge (not performed): No bad workers".into()
            } else {
                "Manual purge".into()
            }),
        );
        drop(run);
        self.ledger.log_action("purge_run", &user.username, f)?;
        Ok(outcome)
    }
}

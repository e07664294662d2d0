//! The run controls people use (the run page's buttons and forms): modify, delete and the
//! user's stop (docs/fishtest-compatibility.md#run-controls).
//!
//! Owns: who may do each (the run's owner or an approver), the limits on what a non-approver
//! may change, the states each is allowed from, and the action each logs. The messages of the
//! refusals are Fishtest's, so the pages can show them as they are.
//! Must not: call the other operations (scheduler, tasks, lifecycle, jobs, queries) or
//! recovery; change a run on a secondary instance; hold a run's lock while the action log is
//! written.

use super::model::Run;
use super::records::run_fields;
use super::transitions::PurgeOutcome;
use super::{DbResult, RunDb, RunDbError, secs_since};
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

const NO_SUCH_RUN: &str = "No run with this id";
const NOT_YOURS: &str = "Unable to modify another users run!";

/// Fishtest's checks of the modify form's values, in its order (the permission comes after).
fn check_changes(run: &Run, c: &RunChanges) -> Result<(), String> {
    let old = run.args.num_games;
    let new = c.num_games;
    let fixed_games = run.args.sprt.is_none() && run.args.spsa.is_none();
    if fixed_games && new > 0 && new.unsigned_abs() > old {
        return Err("Unable to modify number of games in a fixed game test!".into());
    }
    if run.args.spsa.is_some() && (new < 0 || new.unsigned_abs() != old) {
        return Err("Unable to modify number of games for SPSA tests, SPSA hyperparams are based off the initial number of games".into());
    }
    if new < 0 {
        return Err("Number of games must be >= 0".into());
    }
    if let Some(Some(w)) = c.max_active_tasks
        && !(1..=super::create::MAX_ACTIVE_TASKS).contains(&w)
    {
        return Err(format!(
            "max_active_tasks must be between 1 and {}",
            super::create::MAX_ACTIVE_TASKS
        ));
    }
    if new % 1000 != 0 {
        return Err("Number of games must be a multiple of 1000".into());
    }
    if new.unsigned_abs() > MAX_GAMES {
        return Err(format!("Number of games must be <= {MAX_GAMES}"));
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

impl RunDb {
    /// The cache entry of a run a control acts on: primary only; an unknown id is refused.
    fn control_entry(&self, run_id: &str) -> DbResult<std::sync::Arc<super::cache::RunEntry>> {
        if !self.cfg.primary {
            return Err(RunDbError::NotPrimary);
        }
        self.entry(run_id)?
            .ok_or_else(|| RunDbError::NotFound(NO_SUCH_RUN.into()))
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
        let entry = self.control_entry(run_id)?;
        let mut run = entry.run.lock();
        if secs_since(&run.start_time) > PURGE_WINDOW.as_secs_f64() {
            return Err(RunDbError::Invalid("Run too old to be modified".into()));
        }
        check_changes(&run, &changes).map_err(RunDbError::Invalid)?;
        if !may_control(&run, by) {
            return Err(RunDbError::Unauthorized(
                "Unable to modify another user's run!".into(),
            ));
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
        let entry = self.control_entry(run_id)?;
        let mut run = entry.run.lock();
        if !may_control(&run, by) {
            return Err(RunDbError::Unauthorized(NOT_YOURS.into()));
        }
        if run.deleted {
            return Err(RunDbError::Invalid(format!(
                "Run {run_id} is already deleted"
            )));
        }
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
        let entry = self.control_entry(run_id)?;
        let mut run = entry.run.lock();
        if !may_control(&run, by) {
            return Err(RunDbError::Unauthorized(NOT_YOURS.into()));
        }
        if run.finished {
            return Err(RunDbError::Invalid(format!(
                "Run {run_id} is already finished"
            )));
        }
        self.finish_run(&entry, &mut run)?;
        let mut purge = None;
        if run.args.auto_purge && run.args.spsa.is_none() {
            let outcome = self.purge_locked(&entry, &mut run, crate::purge::AUTO_PURGE)?;
            let message = if outcome.purged.is_empty() {
                "Auto purge (not performed): No bad workers".to_string()
            } else {
                "Auto purge".to_string()
            };
            purge = Some((outcome, run_fields(&run, Some(message))));
        }
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
mod tests {
    use serde_json::json;

    use super::*;
    use crate::rundb::model::Stats;
    use crate::rundb::outcome::Assignment;
    use crate::rundb::testkit::{args, fixture};
    use std::sync::Arc;

    use crate::config::SqliteSync;
    use crate::offload::Offload;
    use crate::rundb::RunDbConfig;
    use crate::rundb::books::Books;
    use crate::store::sqlite::SqliteStore;

    fn changes(num_games: i64, priority: i64, throughput: i64) -> RunChanges {
        RunChanges {
            num_games,
            priority,
            throughput,
            auto_purge: false,
            info: None,
            max_active_tasks: None,
        }
    }

    fn msg(r: DbResult<impl std::fmt::Debug>) -> String {
        r.expect_err("refused").to_string()
    }

    #[test]
    fn modify_by_owner_or_approver_only_and_info_by_owner_only() {
        let f = fixture();
        let id = f.run(json!({}), true);
        let mut c = changes(8000, 0, 100);
        c.info = Some("  second  ".into());
        let e = f.db.modify_run(&id, c.clone(), &f.other);
        assert!(matches!(e, Err(RunDbError::Unauthorized(_))));
        assert_eq!(msg(e), "Unable to modify another user's run!");
        assert_eq!(f.get(&id).args.num_games, 10_000);

        let out = f.db.modify_run(&id, c.clone(), &f.owner).expect("owner");
        assert_eq!(out.approval, Approval::Approved);
        assert!(!out.revived);
        let run = f.get(&id);
        assert_eq!(
            (run.args.num_games, run.args.info.as_str()),
            (8000, "second")
        );

        // An approver who is not the owner changes the numbers but not the info.
        c.num_games = 6000;
        c.info = Some("boss's words".into());
        f.db.modify_run(&id, c, &f.approver).expect("approver");
        let run = f.get(&id);
        assert_eq!(
            (run.args.num_games, run.args.info.as_str()),
            (6000, "second")
        );
        // Saved at once.
        assert_eq!(f.stored(&id)["args"]["num_games"], json!(6000));
        assert!(matches!(
            f.db.modify_run("nope", changes(0, 0, 100), &f.owner),
            Err(RunDbError::NotFound(_))
        ));
    }

    #[test]
    fn modify_checks_the_values_before_the_permission() {
        let f = fixture();
        let id = f.run(json!({}), true);
        let refused = |c: RunChanges, by: &User| msg(f.db.modify_run(&id, c, by));
        // Fixed games: never more than asked for at the start.
        assert_eq!(
            refused(changes(12_000, 0, 100), &f.other),
            "Unable to modify number of games in a fixed game test!"
        );
        assert_eq!(
            refused(changes(-1000, 0, 100), &f.owner),
            "Number of games must be >= 0"
        );
        assert_eq!(
            refused(changes(1500, 0, 100), &f.owner),
            "Number of games must be a multiple of 1000"
        );
        // An SPRT run may have more games, up to the maximum.
        let sprt = f.run(
            json!({"sprt": {"elo0": 0.0, "elo1": 2.0}, "num_games": null}),
            true,
        );
        assert_eq!(
            msg(f.db.modify_run(&sprt, changes(3_201_000, 0, 100), &f.owner)),
            "Number of games must be <= 3200000"
        );
        f.db.modify_run(&sprt, changes(1_000_000, 0, 100), &f.owner)
            .expect("more SPRT games");
        assert_eq!(f.get(&sprt).args.num_games, 1_000_000);
        // SPSA: the number of games is fixed, the rest may change.
        let spsa = f.run(
            json!({"spsa": {"raw_params": "Foo,100,0,200,10,0.002"}}),
            true,
        );
        assert_eq!(
            msg(f.db.modify_run(&spsa, changes(8000, 0, 100), &f.owner)),
            "Unable to modify number of games for SPSA tests, SPSA hyperparams are based off \
             the initial number of games"
        );
        f.db.modify_run(&spsa, changes(10_000, 0, 50), &f.owner)
            .expect("SPSA throughput");
        assert_eq!(f.get(&spsa).args.throughput, 50.0);
        // Older than 30 days: refused.
        {
            let entry = f.db.entry(&id).expect("entry").expect("run");
            let mut run = entry.run.lock();
            run.start_time = crate::store::Date(chrono::Utc::now() - chrono::Duration::days(31));
        }
        assert_eq!(
            refused(changes(1000, 0, 100), &f.owner),
            "Run too old to be modified"
        );
        assert_eq!(f.get(&id).args.num_games, 10_000);
    }

    #[test]
    fn a_non_approver_above_the_limits_unapproves_the_run() {
        let f = fixture();
        let id = f.run(json!({}), true);
        // Within the limits: still approved.
        let out = f.db.modify_run(&id, changes(10_000, -1, 100), &f.owner);
        assert_eq!(out.expect("modify").approval, Approval::Approved);
        // Throughput above max(old, 100): unapproved.
        let out = f.db.modify_run(&id, changes(10_000, -1, 150), &f.owner);
        let out = out.expect("modify");
        assert_eq!(out.approval, Approval::Unapproved);
        let run = f.checked(&id);
        assert!(!run.approved && run.approver.is_empty());
        let actions = f.actions(&id);
        let n = actions.len();
        assert_eq!(
            actions[n - 2],
            ("approve_run".into(), "owner".into(), "unapproved".into())
        );
        assert_eq!(
            actions[n - 1],
            (
                "modify_run".into(),
                "owner".into(),
                "modify: throughput changed from 100 to 150".into()
            )
        );
        // Not approved before: it stays pending.
        let out = f.db.modify_run(&id, changes(10_000, 5, 150), &f.owner);
        assert_eq!(out.expect("modify").approval, Approval::Pending);

        // Priority above max(old, 0) unapproves; an approver raising it does not.
        let id = f.run(json!({}), true);
        let out = f.db.modify_run(&id, changes(10_000, 3, 500), &f.approver);
        assert_eq!(out.expect("approver").approval, Approval::Approved);
        // The owner may keep what an approver set.
        let out = f.db.modify_run(&id, changes(10_000, 3, 500), &f.owner);
        assert_eq!(out.expect("same").approval, Approval::Approved);
        let out = f.db.modify_run(&id, changes(10_000, 4, 500), &f.owner);
        assert_eq!(out.expect("higher").approval, Approval::Unapproved);
    }

    #[test]
    fn modify_logs_the_changed_keys_in_order() {
        let f = fixture();
        let id = f.run(json!({}), true);
        let mut c = changes(9000, 1, 100);
        c.auto_purge = true;
        c.info = Some("new info".into());
        f.db.modify_run(&id, c, &f.approver).expect("modify");
        assert_eq!(
            f.last_action(&id),
            (
                "modify_run".into(),
                "boss".into(),
                "modify: priority changed from 0 to 1, num-games changed from 10000 to 9000, \
                 auto-purge changed from False to True"
                    .into()
            )
        );
        let run = f.get(&id);
        assert!(run.args.auto_purge);
        assert_eq!(run.args.priority, 1.0);
    }

    #[test]
    fn modify_revives_a_stopped_or_deleted_run_that_is_undecided() {
        let f = fixture();
        let id = f.run(json!({}), true);
        f.db.stop_run_by_user(&id, &f.owner).expect("stop");
        assert!(f.get(&id).finished);
        assert!(matches!(f.request(1), Assignment::NoTask));
        let out = f.db.modify_run(&id, changes(10_000, 0, 100), &f.owner);
        assert!(out.expect("modify").revived);
        let run = f.checked(&id);
        assert!(!run.finished && !run.deleted && !run.is_green && !run.is_yellow);
        assert_eq!(f.stored(&id)["finished"], json!(false));
        assert!(matches!(f.request(2), Assignment::Task(t) if t.run_id == id));

        let id = f.run(json!({}), true);
        f.db.delete_run(&id, &f.owner).expect("delete");
        let out = f.db.modify_run(&id, changes(10_000, 0, 100), &f.owner);
        assert!(out.expect("modify").revived);
        let run = f.checked(&id);
        assert!(!run.finished && !run.deleted);
    }

    #[test]
    fn modify_leaves_a_decided_run_finished() {
        let f = fixture();
        let id = f.run(json!({"num_games": 2000}), true);
        {
            let entry = f.db.entry(&id).expect("entry").expect("run");
            entry.run.lock().results = Stats {
                wins: 700,
                losses: 600,
                draws: 700,
                ..Stats::default()
            };
        }
        f.db.stop_run_by_user(&id, &f.owner).expect("stop");
        let out = f.db.modify_run(&id, changes(2000, 1, 100), &f.owner);
        assert!(!out.expect("modify").revived);
        assert!(f.get(&id).finished);
        // Fewer games asked for than were played: still decided.
        let out = f.db.modify_run(&id, changes(1000, 1, 100), &f.owner);
        assert!(!out.expect("fewer").revived);
    }

    #[test]
    fn delete_by_owner_or_approver_takes_the_run_off_the_schedule() {
        let f = fixture();
        let id = f.run(json!({}), true);
        let Assignment::Task(t) = f.request(1) else {
            panic!("no task");
        };
        assert_eq!(t.run_id, id);
        let e = f.db.delete_run(&id, &f.other);
        assert!(matches!(e, Err(RunDbError::Unauthorized(_))));
        assert_eq!(msg(e), "Unable to modify another users run!");
        assert!(!f.get(&id).deleted);

        f.db.delete_run(&id, &f.owner).expect("delete");
        let run = f.checked(&id);
        assert!(run.deleted && run.finished);
        assert!(run.tasks.iter().all(|t| !t.active));
        assert_eq!((run.workers, run.cores), (0, 0));
        assert!(!f.db.unfinished.read().contains(&id));
        let stored = f.stored(&id);
        assert_eq!(
            (&stored["deleted"], &stored["finished"]),
            (&json!(true), &json!(true))
        );
        assert_eq!(
            f.last_action(&id),
            ("delete_run".into(), "owner".into(), "".into())
        );
        // No task for it any more.
        assert!(matches!(f.request(2), Assignment::NoTask));
        assert!(f.db.delete_run(&id, &f.owner).is_err());

        // An approver deletes a pending run too.
        let id = f.run(json!({}), false);
        f.db.delete_run(&id, &f.approver).expect("approver deletes");
        assert!(f.get(&id).deleted);
        assert_eq!(f.last_action(&id).1, "boss");
    }

    #[test]
    fn user_stop_finishes_the_run_and_logs_it() {
        let f = fixture();
        let id = f.run(json!({}), true);
        assert!(matches!(f.request(1), Assignment::Task(_)));
        let e = f.db.stop_run_by_user(&id, &f.other);
        assert!(matches!(e, Err(RunDbError::Unauthorized(_))));
        assert!(!f.get(&id).finished);

        let stop = f.db.stop_run_by_user(&id, &f.approver).expect("stop");
        assert_eq!(stop.auto_purge, None);
        let run = f.checked(&id);
        assert!(run.finished && !run.deleted && !run.failed);
        assert!(run.tasks.iter().all(|t| !t.active));
        assert_eq!(f.stored(&id)["finished"], json!(true));
        assert_eq!(
            f.last_action(&id),
            ("stop_run".into(), "boss".into(), "User stop".into())
        );
        assert!(matches!(f.request(2), Assignment::NoTask));
        assert!(matches!(
            f.db.stop_run_by_user(&id, &f.owner),
            Err(RunDbError::Invalid(_))
        ));
    }

    #[test]
    fn user_stop_auto_purges_under_the_submitters_name() {
        let f = fixture();
        let id = f.run(json!({"auto_purge": true}), true);
        let stop = f.db.stop_run_by_user(&id, &f.approver).expect("stop");
        assert_eq!(stop.auto_purge, Some(PurgeOutcome::default()));
        let actions = f.actions(&id);
        let n = actions.len();
        assert_eq!(
            actions[n - 2],
            (
                "purge_run".into(),
                "owner".into(),
                "Auto purge (not performed): No bad workers".into()
            )
        );
        assert_eq!(actions[n - 1].0, "stop_run");
    }

    #[test]
    fn user_stop_auto_purge_can_revive_the_run() {
        let f = fixture();
        let id = f.run(json!({"auto_purge": true}), true);
        let Assignment::Task(t) = f.request(1) else {
            panic!("no task");
        };
        {
            // The task crashed often: the auto-purge takes it out, the run is undecided again.
            let entry = f.db.entry(&id).expect("entry").expect("run");
            let mut run = entry.run.lock();
            let stats = Stats {
                wins: 4,
                losses: 4,
                draws: 8,
                crashes: 4,
                pentanomial: [0, 2, 4, 2, 0],
                ..Stats::default()
            };
            run.tasks[t.task_id].stats = stats;
            run.results = stats;
        }
        let stop = f.db.stop_run_by_user(&id, &f.owner).expect("stop");
        let purge = stop.auto_purge.expect("auto-purged");
        assert_eq!(purge.purged, vec![t.task_id]);
        assert!(purge.revived);
        let run = f.checked(&id);
        assert!(!run.finished && run.tasks[t.task_id].bad);
        assert_eq!(run.results.games(), 0);
        let actions = f.actions(&id);
        let n = actions.len();
        assert_eq!(
            actions[n - 2],
            ("purge_run".into(), "owner".into(), "Auto purge".into())
        );
        assert_eq!(
            actions[n - 1],
            ("stop_run".into(), "owner".into(), "User stop".into())
        );
        // Back on the schedule.
        assert!(matches!(f.request(2), Assignment::Task(t) if t.run_id == id));
    }

    #[test]
    fn the_controls_are_refused_on_a_secondary() {
        let f = fixture();
        let id = f.run(json!({}), true);
        let _in_rt = f.rt.enter();
        let store = Arc::new(SqliteStore::open(f.dir.path(), SqliteSync::Normal).expect("store"));
        let cfg = RunDbConfig {
            primary: false,
            ..RunDbConfig::default()
        };
        let books = Books::shipped().expect("books");
        let ledger = Arc::new(crate::ledger::Ledger::new(store.clone(), false));
        let secondary = RunDb::open(store, Offload::new(2), books, cfg, ledger).expect("secondary");
        let modify = secondary.modify_run(&id, changes(1000, 0, 100), &f.owner);
        assert!(matches!(modify, Err(RunDbError::NotPrimary)));
        let delete = secondary.delete_run(&id, &f.owner);
        assert!(matches!(delete, Err(RunDbError::NotPrimary)));
        let stop = secondary.stop_run_by_user(&id, &f.owner);
        assert!(matches!(stop, Err(RunDbError::NotPrimary)));
        let run = f.checked(&id);
        assert!(!run.finished && !run.deleted && run.args.num_games == 10_000);
    }

    #[test]
    fn approve_needs_an_approver_other_than_the_submitter() {
        let f = fixture();
        let id = f.run(json!({}), false);
        // A non-approver cannot approve.
        assert!(matches!(
            f.db.approve_run(&id, &f.other),
            Err(RunDbError::Unauthorized(_))
        ));
        // An approver cannot approve their own run.
        let own =
            f.db.create_run(args(json!({})), &f.approver)
                .expect("create");
        assert!(matches!(
            f.db.approve_run(&own, &f.approver),
            Err(RunDbError::Unauthorized(_))
        ));
        assert!(!f.get(&own).approved);
        // Another approver can, once.
        f.db.approve_run(&id, &f.approver).expect("approve");
        let run = f.get(&id);
        assert!(run.approved);
        assert_eq!(run.approver, "boss");
        assert_eq!(
            f.last_action(&id),
            ("approve_run".into(), "boss".into(), "approved".into())
        );
        assert!(f.db.approve_run(&id, &f.approver).is_err());
    }
}

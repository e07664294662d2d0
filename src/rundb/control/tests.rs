//! The run controls' tests: who may modify, delete and stop a run, the modify form's
//! checks, and the texts the API edge gives their refusals.

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
    // The reply's text, as the API edge words it.
    crate::http::error::ApiError::from(r.expect_err("refused")).to_string()
}

#[test]
fn modify_by_owner_or_approver_only_and_info_by_owner_only() {
    let f = fixture();
    let id = f.run(json!({}), true);
    let mut c = changes(8000, 0, 100);
    c.info = Some("  second  ".into());
    let e = f.db.modify_run(&id, c.clone(), &f.other);
    assert!(matches!(
        e,
        Err(RunDbError::NotYours { op: Op::Modify, .. })
    ));
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
        Err(RunDbError::UnknownRun { op: Op::Modify, .. })
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
    assert!(matches!(
        e,
        Err(RunDbError::NotYours { op: Op::Delete, .. })
    ));
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
    assert!(matches!(
        e,
        Err(RunDbError::NotYours {
            op: Op::UserStop,
            ..
        })
    ));
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
        Err(RunDbError::RunFinished {
            op: Op::UserStop,
            ..
        })
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
        Err(RunDbError::NotApprover)
    ));
    // An approver cannot approve their own run.
    let own =
        f.db.create_run(args(json!({})), &f.approver)
            .expect("create");
    assert!(matches!(
        f.db.approve_run(&own, &f.approver),
        Err(RunDbError::SelfApproval { .. })
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

/// W/L/D with no pair counted (a task of a run from before Fishtest counted pairs).
fn no_pairs(w: u64, l: u64, d: u64, crashes: u64) -> Stats {
    Stats {
        wins: w,
        losses: l,
        draws: d,
        crashes,
        ..Stats::default()
    }
}

#[test]
fn purging_a_run_without_pair_counts_writes_no_pentanomial() {
    let f = fixture();
    let id = f.run(json!({}), true);
    for n in 1..=3 {
        f.request(n);
    }
    // Turn the run into one imported from before pairs were counted: its tasks and results
    // have W/L/D only; the third worker crashed (a crash_or_time purge).
    f.db.stop_run_by_user(&id, &f.owner).expect("stop");
    {
        let entry = f.db.entry(&id).expect("entry").expect("run");
        let mut run = entry.run.lock();
        let counts = [
            no_pairs(30, 20, 50, 0),
            no_pairs(25, 25, 50, 0),
            no_pairs(40, 10, 50, 5),
        ];
        let mut results = Stats::default();
        for (t, s) in run.tasks.iter_mut().zip(counts) {
            t.stats = s;
            results.add(&s);
        }
        run.results = results;
        run.committed_games = results.games();
        assert_eq!(run.check_invariants(), Vec::<String>::new());
        let doc = serde_json::to_value(&*run).expect("json");
        assert!(
            doc["results"].get("pentanomial").is_none(),
            "{}",
            doc["results"]
        );
    }
    let out = f.db.purge_run(&id, &f.approver).expect("purge");
    assert_eq!(out.purged.len(), 1, "the crashing task");
    let run = f.checked(&id);
    assert_eq!(run.results.games(), 200);
    let stored = f.stored(&id);
    assert!(
        stored["results"].get("pentanomial").is_none(),
        "{}",
        stored["results"]
    );
    for i in 0..2 {
        assert!(stored["tasks"][i]["stats"].get("pentanomial").is_none());
    }
    // The zeroed task is the all-zero stats (spec: a bad task's stats, pentanomial included);
    // its copy in bad_tasks keeps the counts it had, without a pentanomial.
    assert_eq!(
        stored["tasks"][2]["stats"]["pentanomial"],
        json!([0, 0, 0, 0, 0])
    );
    let copy = &stored["bad_tasks"][0]["stats"];
    assert_eq!(copy["crashes"], json!(5));
    assert!(copy.get("pentanomial").is_none(), "{copy}");
}

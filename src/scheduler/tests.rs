//! The scheduler's unit tests: batched service makes the same assignments as one caller at a
//! time; a withdrawn task stops counting.

use std::sync::Arc;

use serde_json::json;

use super::Scheduler;
use super::admission::{Admission, Batches, Gate, GateConfig, Service};
use crate::accounts::User;
use crate::rundb::model::WorkerInfo;
use crate::rundb::outcome::Assignment;
use crate::rundb::testkit::{Fixture, fixture, worker};

/// What an assignment is, independent of the run ids a database generated: the run's
/// index among the runs created, the task, its size and first game; or why none.
fn described(f: &Fixture, runs: &[String], a: &Assignment) -> String {
    match a {
        Assignment::Task(t) => {
            let run = runs.iter().position(|r| *r == t.run_id);
            let task =
                f.db.get_run(&t.run_id)
                    .expect("run")
                    .map(|r| r.tasks[t.task_id].worker_info.unique_key.clone());
            format!(
                "run {run:?} task {} games {} start {} worker {task:?}",
                t.task_id, t.num_games, t.start
            )
        }
        other => format!("{other:?}"),
    }
}

/// Three runs of different priorities and throughputs, approved.
fn runs(f: &Fixture) -> Vec<String> {
    vec![
        f.run(json!({"num_games": 2_000, "info": "a"}), true),
        f.run(
            json!({"num_games": 4_000, "priority": 1, "info": "b"}),
            true,
        ),
        f.run(
            json!({"num_games": 100_000, "throughput": 50, "info": "c"}),
            true,
        ),
    ]
}

/// The workers of the sequence: 30 distinct ones, then some asking again (their stale
/// task is failed and they get a new one), and one with a taken name from a new key.
fn sequence() -> Vec<WorkerInfo> {
    let mut seq: Vec<WorkerInfo> = (1..=30).map(worker).collect();
    seq.extend([3, 7, 3, 12].map(worker));
    let mut twin = worker(5);
    twin.unique_key = "00000005-9999-4222-8333-000000000099".into();
    seq.push(twin);
    seq
}

struct Direct<'a>(&'a Scheduler, User);

impl Service<WorkerInfo, Assignment> for Direct<'_> {
    fn serve(&mut self, wi: WorkerInfo) -> Assignment {
        self.0.assign(&self.1, wi).expect("request_task").0
    }
    fn assigned(&self, a: &Assignment) -> bool {
        matches!(a, Assignment::Task(_))
    }
    fn orphaned(&mut self, _: Assignment) {
        unreachable!("every waiter waits here");
    }
}

#[test]
fn batched_service_makes_the_same_assignments_as_one_caller_at_a_time() {
    // One at a time, as without batches.
    let one = fixture();
    let one_runs = runs(&one);
    let expected: Vec<String> = sequence()
        .into_iter()
        .map(|wi| {
            let (a, _) = one.sched.assign(&one.other, wi).expect("request_task");
            described(&one, &one_runs, &a)
        })
        .collect();
    assert!(expected.iter().filter(|a| a.starts_with("run")).count() >= 30);
    assert!(
        expected.iter().any(|a| a.contains("DuplicateName")),
        "{expected:?}"
    );

    // The same sequence handed in to a gate whose slot is held, then served in batches
    // of at most 8 by whichever waiter gets the slot.
    let batched = fixture();
    let batched_runs = runs(&batched);
    let gate = Gate::new(GateConfig {
        name: "test",
        slots: 1,
        capacity: 100,
        admission: Admission::Immediate,
    });
    let batches = Arc::new(Batches::new(&gate, 8));
    let (mut pending, holder) = batched.rt.block_on(async {
        let blocker = gate.enter().await.expect("the slot");
        let mut pending = Vec::new();
        let mut starter = None;
        for wi in sequence() {
            let place = gate.admit().await.expect("a place");
            let (p, s) = place.hand_in(&batches, wi);
            assert_eq!(
                s.is_some(),
                pending.is_empty(),
                "the first caller starts the holder"
            );
            pending.push(p);
            starter = starter.or(s);
        }
        drop(blocker);
        let holder = starter.expect("a starter").slot().await.expect("the slot");
        (pending, holder)
    });
    // The holder serves on a thread that may block, as the pool's would.
    let mut service = Direct(&batched.sched, batched.other.clone());
    assert_eq!(
        holder.serve(&mut service, batched.rt.handle()),
        sequence().len()
    );
    let got: Vec<String> = batched.rt.block_on(async {
        let mut got = Vec::new();
        for p in &mut pending {
            let a = p.result().await.expect("a result");
            got.push(described(&batched, &batched_runs, &a));
        }
        got
    });
    assert_eq!(got, expected);
}

#[test]
fn a_withdrawn_task_stops_counting_and_frees_its_run_window() {
    let f = fixture();
    let id = f.run(json!({"num_games": 2_000, "max_active_tasks": 1}), true);
    let (a, _) = f.sched.assign(&f.other, worker(1)).expect("request_task");
    let Assignment::Task(t) = a else {
        panic!("a task: {a:?}")
    };
    // The window is full: a second worker gets no task.
    let (b, _) = f.sched.assign(&f.other, worker(2)).expect("request_task");
    assert!(!matches!(b, Assignment::Task(_)), "{b:?}");
    f.sched.withdraw_task(&id, t.task_id);
    let run = f.checked(&id);
    assert!(!run.tasks[t.task_id].active);
    assert_eq!(run.workers, 0);
    // Withdrawing twice changes nothing more.
    f.sched.withdraw_task(&id, t.task_id);
    let (c, _) = f.sched.assign(&f.other, worker(2)).expect("request_task");
    assert!(matches!(c, Assignment::Task(_)), "{c:?}");
}

//! request_task served in batches (issue 15): callers queued behind the scheduler slot are
//! served by whoever holds it, in queue order, one hand-over for many; a caller that leaves
//! is skipped, loses nothing and leaks no place.

use crate::core::{
    gate_request, hang_up, poll_held, raw_request, read_all, replied, reply_json, task_request,
    too_slow, wait_idle, with_growing_holds,
};
use crate::fleet::{add_user, approve, create_run, fixed_args, user_cli};
use crate::harness::{Opts, TestServer};

/// A server in queue mode with a run that needs many tasks, and a user who may run many
/// machines from one address.
async fn server() -> (TestServer, String) {
    let server = TestServer::start_with(Opts::new().set("admission_timeout_s", 600)).await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    user_cli(&server, &["set", "alice", "--machine-limit", "10000"]);
    let run = create_run(&server, "alice", fixed_args(1_000_000)).await;
    approve(&server, "boss", &run).await;
    // alice's password is in the credential cache from here on.
    let v = reply_json(&read_all(raw_request(
        server.addr,
        &task_request("alice", 1),
    )));
    assert_eq!(v["run"]["_id"], run.as_str(), "{v}");
    (server, run)
}

struct Counts {
    served: f64,
    batches: f64,
    skipped: f64,
}

async fn counts(server: &TestServer) -> Counts {
    let gate = [("gate", "request_task")];
    Counts {
        served: server.metric("shoal_gate_served_total", &gate).await,
        batches: server.metric("shoal_gate_batches_total", &gate).await,
        skipped: server.metric("shoal_gate_skipped_total", &gate).await,
    }
}

/// Hands in the request_tasks of workers `workers`, one at a time (each queued behind the
/// slot before the next is sent), while `holder` holds the slot. None if the hold ended first.
async fn queue_behind(
    server: &TestServer,
    holder: &std::net::TcpStream,
    workers: impl Iterator<Item = u32>,
) -> Option<Vec<std::net::TcpStream>> {
    let mut calls = Vec::new();
    for n in workers {
        calls.push(raw_request(server.addr, &task_request("alice", n)));
        let want = calls.len();
        poll_held(
            server,
            "queued behind the slot",
            || !replied(holder),
            |h| h["gate"]["handed_in"] == want,
        )
        .await?;
    }
    Some(calls)
}

/// The slot held for `ms` by `/debug/gate`, then the request_tasks of `workers` queued
/// behind it in order. None (everything drained) if the hold ended first.
async fn held_queue(
    server: &TestServer,
    ms: u64,
    workers: std::ops::Range<u32>,
) -> Option<(std::net::TcpStream, Vec<std::net::TcpStream>)> {
    let holder = raw_request(server.addr, &gate_request(ms, "holder"));
    let inside = poll_held(
        server,
        "holder inside",
        || !replied(&holder),
        |h| h["gate"]["running"] == 1,
    )
    .await;
    let calls = match inside {
        Some(_) => queue_behind(server, &holder, workers).await,
        None => None,
    };
    match calls {
        Some(calls) => Some((holder, calls)),
        None => {
            read_all(holder);
            wait_idle(server, "idle").await;
            None
        }
    }
}

#[tokio::test]
async fn callers_queued_behind_the_slot_are_served_in_queue_order_in_one_batch() {
    let (server, run) = server().await;
    let mut next = 100;
    with_growing_holds(&server, |ms, last| {
        next += 100;
        let first = next;
        let (server, run) = (&server, run.clone());
        async move {
            let before = counts(server).await;
            let Some((holder, calls)) = held_queue(server, ms, first..first + 20).await else {
                return too_slow(last, "the slot held and twenty callers queued");
            };
            read_all(holder);
            let tasks: Vec<u64> = calls
                .into_iter()
                .map(|c| {
                    let v = reply_json(&read_all(c));
                    assert_eq!(v["run"]["_id"], run.as_str(), "{v}");
                    v["task_id"].as_u64().expect("task_id")
                })
                .collect();
            // Served in the order they queued: the run's tasks are numbered as created.
            let expected: Vec<u64> = (0..20).map(|i| tasks[0] + i).collect();
            assert_eq!(tasks, expected);
            let after = counts(server).await;
            assert_eq!(after.served - before.served, 20.0);
            // All twenty were queued when the slot came free: one holder served them all.
            assert_eq!(after.batches - before.batches, 1.0);
            true
        }
    })
    .await;
    wait_idle(&server, "every place back").await;
    // The hand-over's figures are exported.
    let text = server.metrics().await;
    for series in [
        "shoal_gate_batch_size_bucket{gate=\"request_task\",le=\"32\"}",
        "shoal_gate_admission_to_slot_seconds_bucket{gate=\"request_task\",le=",
        "shoal_gate_assignments_per_second_max{gate=\"request_task\"}",
    ] {
        assert!(text.contains(series), "missing {series}");
    }
}

#[tokio::test]
async fn a_caller_that_leaves_the_queue_is_skipped_and_leaks_nothing() {
    let (server, run) = server().await;
    let mut next = 100;
    with_growing_holds(&server, |ms, last| {
        next += 100;
        let first = next;
        let (server, run) = (&server, run.clone());
        async move {
            let before = counts(server).await;
            let active_before = active(server, &run).await;
            let Some((holder, mut calls)) = held_queue(server, ms, first..first + 6).await else {
                return too_slow(last, "the slot held and six callers queued");
            };
            // Workers 2 and 4 of the six go away while queued; their places come back at once.
            let gone = [calls.remove(4), calls.remove(1)];
            for c in gone {
                assert_eq!(hang_up(c), "", "no reply to a caller that left");
            }
            if poll_held(
                server,
                "places back",
                || !replied(&holder),
                |h| h["gate"]["queued"] == 4,
            )
            .await
            .is_none()
            {
                read_all(holder);
                for c in calls {
                    read_all(c);
                }
                wait_idle(server, "idle").await;
                return too_slow(last, "the places of the callers who left back");
            }
            read_all(holder);
            let mut keys = Vec::new();
            for c in calls {
                let v = reply_json(&read_all(c));
                assert_eq!(v["run"]["_id"], run.as_str(), "{v}");
                keys.push(v["task_id"].as_u64().expect("task"));
            }
            let after = counts(server).await;
            assert_eq!(after.served - before.served, 4.0);
            assert_eq!(after.skipped - before.skipped, 2.0);
            // Exactly the four who stayed hold a task: nothing was handed to those who left.
            assert_eq!(active(server, &run).await, active_before + 4);
            true
        }
    })
    .await;
    wait_idle(&server, "every place back").await;
    let h = server.health().await;
    assert_eq!(h["gate"]["handed_in"], 0, "{h}");
}

/// The run's active tasks (its `workers`), as the server sees them now.
async fn active(server: &TestServer, run: &str) -> u64 {
    let (status, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    v["workers"].as_u64().expect("workers")
}

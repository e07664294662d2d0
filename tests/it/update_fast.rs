//! update_task's fast path through real HTTP: plain mid-task updates answered on the event
//! loop (counted in `shoal_loop_fast_path_total{route="update_task"}`), the replies the same
//! as the pool path's, and every acknowledged update durable (a killed server gives the
//! acknowledged totals back after a restart, from its journal).

use serde_json::json;

use crate::fleet::{Totals, Worker, add_user, approve, create_run, fixed_args, stored_run};
use crate::harness::{Opts, TestServer};

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

#[tokio::test]
async fn mid_task_updates_are_answered_on_the_loop_and_journalled() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(100_000)).await;
    approve(&server, "boss", &run).await;
    let route = [("route", "update_task")];
    let before = server.metric("shoal_loop_fast_path_total", &route).await;

    // One worker plays its task in batches; every mid-task update goes on.
    let mut w = Worker::new("alice", 4, 1);
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("a task");
    let ids = |stats: serde_json::Value| json!({"run_id": run, "task_id": task_id, "stats": stats});
    let mut t = Totals::default();
    for _ in 0..10 {
        for _ in 0..4 {
            t.play_pair(&mut w.rng, EVEN);
        }
        let (status, v) = w.call(&server, "/api/update_task", ids(t.json())).await;
        assert_eq!((status, &v["task_alive"]), (200, &json!(true)), "{v}");
        assert!(v.get("error").is_none() && v.get("info").is_none(), "{v}");
    }
    // A retry of the same totals: harmless, and still an ordinary reply.
    let (status, v) = w.call(&server, "/api/update_task", ids(t.json())).await;
    assert_eq!((status, &v["task_alive"]), (200, &json!(true)), "{v}");
    let fast = server.metric("shoal_loop_fast_path_total", &route).await - before;
    assert!(fast > 0.0, "no update_task answered on the event loop");

    // Refused counts on the fast path: the same 400 as the pool's, and nothing changes.
    let mut wrong = t.json();
    wrong["wins"] = json!(t.wins + 2);
    let (status, v) = w.call(&server, "/api/update_task", ids(wrong)).await;
    assert_eq!(status, 400, "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(error.starts_with("/api/update_task: stats: "), "{v}");
    let mut stranger = Worker::new("alice", 4, 2);
    stranger.rng = w.rng.clone();
    let (status, v) = stranger
        .call(&server, "/api/update_task", ids(t.json()))
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("Invalid unique key"),
        "{v}"
    );

    // A second worker's task ends on a Fishtest rejection (the pool's path: the task ends).
    let mut w2 = Worker::new("alice", 4, 3);
    let reply2 = w2.request_task(&server).await;
    let task2 = reply2["task_id"].as_u64().expect("a task");
    let ids2 = |stats: serde_json::Value| json!({"run_id": run, "task_id": task2, "stats": stats});
    let mut t2 = Totals::default();
    for _ in 0..8 {
        t2.play_pair(&mut w2.rng, EVEN);
    }
    let (_, v) = w2.call(&server, "/api/update_task", ids2(t2.json())).await;
    assert_eq!(v["task_alive"], true, "{v}");
    let mut fewer = Totals::default();
    fewer.play_pair(&mut w2.rng, EVEN);
    let (status, v) = w2
        .call(&server, "/api/update_task", ids2(fewer.json()))
        .await;
    assert_eq!((status, &v["task_alive"]), (200, &json!(false)), "{v}");
    assert!(v["error"].as_str().is_some(), "{v}");
    let (_, v) = w2.call(&server, "/api/update_task", ids2(t2.json())).await;
    assert_eq!(v["task_alive"], false);
    assert!(v.get("info").is_some(), "an inactive task: {v}");

    // Acknowledged means journalled: killed at once, the server gives every acknowledged
    // total back after a restart.
    for _ in 0..4 {
        t.play_pair(&mut w.rng, EVEN);
    }
    let (_, v) = w.call(&server, "/api/update_task", ids(t.json())).await;
    assert_eq!(v["task_alive"], true, "{v}");
    server.signal(libc::SIGKILL);
    let _ = server.wait_exit(30);
    drop(server);
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let stored = stored_run(&server, &run);
    let task = &stored.tasks[task_id as usize];
    assert_eq!(task.stats.games(), t.games());
    assert_eq!(task.stats.pentanomial, t.pentanomial);
    assert!(task.active, "a mid-task update leaves the task active");
    let task2 = &stored.tasks[task2 as usize];
    assert_eq!(task2.stats.games(), t2.games());
    assert!(!task2.active);
    assert_eq!(stored.results.games(), t.games() + t2.games());
    assert_eq!(stored.check_invariants(), Vec::<String>::new());
}

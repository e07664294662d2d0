//! Statistics and tuning through the API: calc_elo / get_elo, purge, and SPSA runs.

use serde_json::{Value, json};

use crate::fleet::{
    PASSWORD, Totals, Worker, add_user, approve, create_run, fixed_args, sprt_args, stored_run,
};
use crate::harness::TestServer;

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];
const ALL_WINS: [f64; 5] = [0.0, 0.0, 0.0, 0.0, 1.0];

async fn server_with_users() -> TestServer {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    add_user(&server, "mallory", &[]);
    server
}

#[tokio::test]
async fn calc_elo_shapes_rules_and_numbers() {
    let server = TestServer::start().await;
    let (status, v) = server.get_json("/api/calc_elo?W=120&D=300&L=100").await;
    assert_eq!(status, 200, "{v}");
    let want = shoal::stats::get_elo(&[100.0, 300.0, 120.0]).expect("get_elo");
    assert_eq!(v["elo"].as_f64(), Some(want.elo));
    assert_eq!(v["LOS"].as_f64(), Some(want.los));
    let ci = v["ci"].as_array().expect("ci");
    assert_eq!(ci[0].as_f64(), Some(want.elo - want.elo95));
    assert!(v.get("LLR").is_none());

    // Pentanomial takes priority over W/D/L; with bounds the SPRT summary comes back.
    let (status, v) = server
        .get_json("/api/calc_elo?W=1&D=1&L=1&LL=10&LD=50&DDWL=120&WD=60&WW=12&elo0=0&elo1=2")
        .await;
    assert_eq!(status, 200, "{v}");
    for k in ["a", "b", "elo", "ci", "LOS", "LLR"] {
        assert!(v.get(k).is_some(), "missing {k}: {v}");
    }
    let r = shoal::stats::Results {
        wins: 0,
        losses: 0,
        draws: 0,
        pentanomial: Some([10, 50, 120, 60, 12]),
    };
    let s = shoal::stats::sprt_elo(
        &r,
        0.05,
        0.05,
        0.05,
        0.0,
        2.0,
        shoal::stats::EloModel::Normalized,
    )
    .expect("sprt_elo");
    assert_eq!(v["LLR"].as_f64(), Some(s.llr));
    assert_eq!(v["elo"].as_f64(), Some(s.elo));

    for (query, want) in [
        ("W=1&D=2", "W, D and L"),
        ("W=1&D=2&L=x", "non-negative integer"),
        ("W=1&D=2&L=-3", "non-negative integer"),
        ("LL=1&LD=2", "all of LL"),
        ("W=1&D=2&L=3&elo0=0", "both elo0 and elo1"),
        ("W=1&D=2&L=3&elo0=0&elo1=0.3", "elo0 + 0.5"),
        ("W=1&D=2&L=3&elo0=-11&elo1=2", "[-10, 10]"),
        ("W=1&D=2&L=3&elo0=0&elo1=2&elo_model=fancy", "elo_model"),
    ] {
        let (status, v) = server.get_json(&format!("/api/calc_elo?{query}")).await;
        assert_eq!(status, 400, "{query}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(
            e.starts_with("/api/calc_elo: ") && e.contains(want),
            "{query}: {e}"
        );
        assert!(v["duration"].is_number());
    }
}

#[tokio::test]
async fn get_elo_and_get_run() {
    let server = server_with_users().await;
    let fixed = create_run(&server, "alice", fixed_args(1000)).await;
    let sprt = create_run(&server, "alice", sprt_args(0.0, 2.0)).await;
    approve(&server, "boss", &sprt).await;
    let (status, v) = server.get_json(&format!("/api/get_elo/{fixed}")).await;
    assert_eq!(status, 200);
    assert_eq!(v, json!({}), "a run that is not an SPRT: {v}");
    // Play one task's worth of SPRT games, then compare.
    let mut w = Worker::new("alice", 8, 1);
    let reply = w.request_task(&server).await;
    w.play(&server, &reply, 32, EVEN).await;
    let r = server
        .client
        .get(server.url(&format!("/api/get_elo/{sprt}")))
        .send()
        .await
        .expect("get");
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .map(|v| v.as_bytes()),
        Some(&b"*"[..])
    );
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["_id"], sprt.as_str());
    assert_eq!(v["tasks"], json!([]), "tasks are stripped");
    let elo = &v["elo"];
    let llr = v["args"]["sprt"]["llr"].as_f64().expect("llr");
    assert!(
        (elo["LLR"].as_f64().expect("LLR") - llr).abs() < 1e-9,
        "{elo} vs {llr}"
    );
    // Dates as Python's str() of an aware datetime.
    let start = v["start_time"].as_str().expect("start_time");
    assert!(start.ends_with("+00:00") && start.len() == 32, "{start}");
    let (status, _) = server.get_json(&format!("/api/get_run/{fixed}")).await;
    assert_eq!(status, 200);
    let (status, v) = server
        .get_json("/api/get_run/0123456789abcdef01234567")
        .await;
    assert_eq!(status, 404, "{v}");
}

#[tokio::test]
async fn auto_purge_removes_a_cheating_worker_and_the_run_is_completed_by_honest_ones() {
    let server = server_with_users().await;
    let mut args = fixed_args(4000);
    args["auto_purge"] = json!(true);
    let run = create_run(&server, "alice", args).await;
    approve(&server, "boss", &run).await;
    // The cheater reports nothing but won pairs, on one task.
    let mut cheater = Worker::new("alice", 4, 666);
    let reply = cheater.request_task(&server).await;
    let cheat_task = reply["task_id"].as_u64().expect("task") as usize;
    let (_, cheat_totals, _) = cheater.play(&server, &reply, 16, ALL_WINS).await;
    assert!(cheat_totals.games() > 100);
    // Honest workers play until there is nothing left.
    let mut honest: Vec<Worker> = (0..8).map(|i| Worker::new("alice", 4, 10 + i)).collect();
    let mut rounds = 0;
    'outer: loop {
        rounds += 1;
        assert!(rounds < 40, "the run never finished");
        for w in honest.iter_mut() {
            let reply = w.request_task(&server).await;
            if reply.get("task_waiting").is_some() {
                break 'outer;
            }
            w.play(&server, &reply, 16, EVEN).await;
        }
    }
    let stored = stored_run(&server, &run);
    assert!(stored.finished);
    assert!(stored.tasks[cheat_task].bad, "the cheater's task is bad");
    let bad_ids: Vec<u64> = stored
        .bad_tasks
        .iter()
        .filter_map(|b| b["task_id"].as_u64())
        .collect();
    assert_eq!(
        bad_ids,
        vec![cheat_task as u64],
        "exactly the cheater's task"
    );
    assert_eq!(stored.bad_tasks[0]["stats"]["wins"], cheat_totals.wins);
    assert!(stored.tasks.iter().filter(|t| t.bad).count() == 1);
    // Results exclude the cheat, and the run was revived to reach its games honestly.
    assert_eq!(stored.results.games(), 4000);
    assert!(stored.results.wins < 4000 / 2);
    assert_eq!(stored.check_invariants(), Vec::<String>::new());
}

#[tokio::test]
async fn manual_purge_permissions() {
    let server = server_with_users().await;
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    let purge = |who: &'static str| {
        let server = &server;
        let run = run.clone();
        async move {
            server
                .post_json(
                    "/api/purge_run",
                    &json!({"username": who, "password": PASSWORD, "run_id": run}),
                )
                .await
        }
    };
    let (status, v) = purge("alice").await;
    assert_eq!(status, 400, "unfinished: {v}");
    let mut w = Worker::new("alice", 4, 3);
    loop {
        let reply = w.request_task(&server).await;
        if reply.get("task_waiting").is_some() {
            break;
        }
        w.play(&server, &reply, 16, EVEN).await;
    }
    let (status, v) = purge("mallory").await;
    assert_eq!(status, 401, "neither owner nor approver: {v}");
    let (status, v) = purge("alice").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["purged_tasks"],
        json!([]),
        "one honest worker: nothing to purge"
    );
    assert_eq!(v["revived"], false);
}

#[tokio::test]
async fn spsa_run_through_the_api_keeps_bounds_history_and_signatures() {
    let server = server_with_users().await;
    let mut args = fixed_args(4000);
    args["spsa"] = json!({
        "raw_params": "Alpha,50,0,100,5,0.002\nBeta,-20,-100,100,8,0.002",
    });
    let run = create_run(&server, "alice", args).await;
    approve(&server, "boss", &run).await;
    let mut w = Worker::new("alice", 4, 42);
    let reply = w.request_task(&server).await;
    assert!(reply["run"]["args"]["spsa"].is_object(), "{reply}");
    let task_id = reply["task_id"].as_u64().expect("task");
    let num_games = reply["run"]["my_task"]["num_games"].as_u64().expect("n");
    let ids = json!({"run_id": run, "task_id": task_id});
    let mut totals = Totals::default();
    let mut accepted_games = 0;
    let mut forged_done = false;
    let mut batches = 0;
    while totals.games() < num_games {
        let mut body = ids.clone();
        body["stats"] = totals.json();
        let (status, spsa) = w.call(&server, "/api/request_spsa", body).await;
        assert_eq!(status, 200, "{spsa}");
        assert_eq!(spsa["task_alive"], true);
        let sig = spsa["sig"].as_u64().expect("sig");
        for p in spsa["w_params"].as_array().expect("w_params") {
            let v = p["value"].as_f64().expect("value");
            let (lo, hi) = if p["name"] == "Alpha" {
                (0.0, 100.0)
            } else {
                (-100.0, 100.0)
            };
            assert!((lo..=hi).contains(&v), "{p}");
        }
        assert_eq!(spsa["b_params"].as_array().map(Vec::len), Some(2));
        let before = totals;
        // Batches of 16 games; the last one is shorter (a worker never plays more games
        // than its task has: the server refuses such an update).
        while totals.games() < (before.games() + 16).min(num_games) {
            totals.play_pair(&mut w.rng, EVEN);
        }
        let batch = json!({
            "num_games": totals.games() - before.games(),
            "wins": totals.wins - before.wins,
            "losses": totals.losses - before.losses,
            "draws": totals.draws - before.draws,
            // Once, a forged signature: the games count, the parameters do not move.
            "sig": if !forged_done && batches == 3 { sig ^ 1 } else { sig },
        });
        let forged = !forged_done && batches == 3;
        let mut body = ids.clone();
        body["stats"] = totals.json();
        body["spsa"] = batch;
        let iter_before = stored_iter(&server, &run).await;
        let (status, v) = w.call(&server, "/api/update_task", body).await;
        assert_eq!(status, 200, "{v}");
        let iter_after = stored_iter(&server, &run).await;
        if forged {
            assert_eq!(iter_after, iter_before, "a forged sig moves nothing");
            forged_done = true;
        } else {
            let pairs = (totals.games() - before.games()) / 2;
            assert_eq!(
                iter_after,
                iter_before + pairs,
                "iter advances by the batch's pairs"
            );
            accepted_games += 2 * pairs;
        }
        batches += 1;
        if v["task_alive"] == false {
            break;
        }
    }
    // A repeat of the last update is refused for SPSA (the count must grow).
    let mut body = ids.clone();
    body["stats"] = totals.json();
    let (_, v) = w.call(&server, "/api/update_task", body).await;
    assert_eq!(v["task_alive"], false);
    let (_, run_doc) = server.get_json(&format!("/api/get_run/{run}")).await;
    let spsa = &run_doc["args"]["spsa"];
    assert_eq!(spsa["iter"].as_u64(), Some(accepted_games / 2));
    for p in spsa["params"].as_array().expect("params") {
        let theta = p["theta"].as_f64().expect("theta");
        assert!(
            theta >= p["min"].as_f64().expect("min") && theta <= p["max"].as_f64().expect("max")
        );
    }
    assert_eq!(
        spsa["param_history"],
        json!([]),
        "the API strips the history"
    );
    let stored = stored_run_after_flush(&server, &run).await;
    let history = stored
        .args
        .spsa
        .as_ref()
        .and_then(|s| s.param_history.clone())
        .unwrap_or_default();
    assert!(!history.is_empty(), "history is sampled");
    assert!(history.iter().all(|h| h.len() == 2));
    // A stale sig from a task that is no longer active: request_spsa says the task is over.
    let mut body = ids.clone();
    body["stats"] = totals.json();
    let (_, v) = w.call(&server, "/api/request_spsa", body).await;
    assert_eq!(v["task_alive"], false, "{v}");
}

async fn stored_iter(server: &TestServer, run: &str) -> u64 {
    let (_, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    v["args"]["spsa"]["iter"].as_u64().expect("iter")
}

async fn stored_run_after_flush(server: &TestServer, run: &str) -> shoal::rundb::model::Run {
    // Write-behind flushes dirty runs every second (polled with a generous deadline: a busy
    // machine delays the flush, it does not fail the test).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    while std::time::Instant::now() < deadline {
        let stored = stored_run(server, run);
        if stored.args.spsa.as_ref().is_some_and(|s| s.iter > 0) {
            return stored;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    stored_run(server, run)
}

#[tokio::test]
async fn read_only_run_lists_and_tasks() {
    let server = server_with_users().await;
    let done = create_run(&server, "alice", fixed_args(1000)).await;
    let active = create_run(&server, "alice", fixed_args(2000)).await;
    approve(&server, "boss", &done).await;
    let mut w = Worker::new("alice", 4, 77);
    loop {
        let reply = w.request_task(&server).await;
        assert_eq!(reply["run"]["_id"], done.as_str(), "only the approved run");
        let (_, _, _) = w.play(&server, &reply, 16, EVEN).await;
        if stored_run(&server, &done).finished {
            break;
        }
    }
    let (status, v) = server.get_json("/api/active_runs").await;
    assert_eq!(status, 200);
    assert!(v.get(&active).is_some() && v.get(&done).is_none(), "{v}");
    assert!(v[&active].get("tasks").is_none(), "task lists are left out");
    let (status, v) = server.get_json("/api/finished_runs?page=1").await;
    assert_eq!(status, 200);
    assert!(v.get(&done).is_some() && v.get(&active).is_none(), "{v}");
    let (status, v) = server
        .get_json("/api/finished_runs?page=1&username=nobody")
        .await;
    assert_eq!((status, v), (200, json!({})));
    let (status, _) = server.get_json("/api/finished_runs?page=0").await;
    assert_eq!(status, 400);
    let (status, _) = server.get_json("/api/finished_runs?timestamp=12").await;
    assert_eq!(status, 400);
    let (status, t) = server.get_json(&format!("/api/get_task/{done}/0")).await;
    assert_eq!(status, 200, "{t}");
    assert_eq!(t["worker_info"]["remote_addr"], "?.?.?.?");
    assert_eq!(t["worker_info"]["unique_key"], "0000004d...");
    assert!(
        t["last_updated"]
            .as_str()
            .is_some_and(|d| d.ends_with("+00:00"))
    );
    for path in ["0bad", "999", "x"] {
        let (status, _) = server
            .get_json(&format!("/api/get_task/{done}/{path}"))
            .await;
        assert_eq!(status, 404, "{path}");
    }
}

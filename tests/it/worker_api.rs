//! The worker API against a real server: every endpoint, the error rules, the strict schema,
//! scripted workers playing runs to completion, and crash safety.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::fleet::{
    PASSWORD, Totals, Worker, add_user, approve, create_run, fixed_args, key, sprt_args,
    stored_run, user_cli, worker_info,
};
use crate::harness::{Opts, TestServer};

/// Fair-ish pair probabilities, and a strong patch.
const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];
const STRONG: [f64; 5] = [0.01, 0.09, 0.4, 0.3, 0.2];

async fn server_with_users() -> TestServer {
    server_with_users_on(Opts::new()).await
}

async fn server_with_users_on(opts: Opts) -> TestServer {
    let server = TestServer::start_with(opts).await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    server
}

/// Trusts a proxy on loopback, so that a test can give its workers addresses with
/// `X-Forwarded-For` (no proxy is trusted unless one is configured).
fn behind_local_proxy(opts: Opts) -> Opts {
    opts.set("trusted_proxies", r#"["127.0.0.1", "::1"]"#)
}

/// Actions of one kind, read straight from the store (oldest first).
fn stored_actions(server: &TestServer, action: &str) -> Vec<Value> {
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    store
        .find(
            shoal::store::Collection::Actions,
            &shoal::store::Query::new()
                .with(shoal::store::Cond::Eq("action".into(), json!(action)))
                .sort("time", shoal::store::Order::Asc),
        )
        .expect("find")
        .into_iter()
        .map(Value::Object)
        .collect()
}

/// Polls `probe` until it returns something (or panics after two minutes).
async fn eventually<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub fn gz(text: &str) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(text.as_bytes()).expect("gzip");
    e.finish().expect("gzip")
}

#[tokio::test]
async fn request_version_checks_credentials_with_the_spec_messages() {
    let server = server_with_users().await;
    let body = |user: &str, pw: &str| json!({"password": pw, "worker_info": {"username": user}});
    let (status, v) = server
        .post_json("/api/request_version", &body("alice", PASSWORD))
        .await;
    assert_eq!((status, v["version"].as_u64()), (200, Some(325)));
    let (status, v) = server
        .post_json("/api/request_version", &body("alice", "nope"))
        .await;
    assert_eq!(status, 401);
    assert_eq!(
        v["error"],
        "/api/request_version: Invalid username or password."
    );
    let (status, v) = server
        .post_json("/api/request_version", &body("ghost", PASSWORD))
        .await;
    assert_eq!(status, 401, "{v}");
    user_cli(&server, &["set", "alice", "--block"]);
    tokio::time::sleep(Duration::from_millis(2100)).await; // the user cache's lifetime
    let (status, v) = server
        .post_json("/api/request_version", &body("alice", PASSWORD))
        .await;
    assert_eq!(status, 401);
    assert_eq!(v["error"], "/api/request_version: Your account is blocked.");
    user_cli(&server, &["set", "alice", "--unblock", "--pending"]);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (_, v) = server
        .post_json("/api/request_version", &body("alice", PASSWORD))
        .await;
    assert_eq!(
        v["error"],
        "/api/request_version: Your account is pending approval."
    );
    let (status, v) = server
        .post_json("/api/request_version", &json!({"password": "x"}))
        .await;
    assert_eq!(status, 400, "{v}");
}

#[tokio::test]
async fn strict_schema_refuses_bad_bodies_with_400() {
    let server = server_with_users().await;
    let w = Worker::new("alice", 4, 1);
    let mut cases: Vec<(Value, &str)> = Vec::new();
    let mut extra_key = w.info.clone();
    extra_key["color"] = json!("blue");
    cases.push((
        json!({"password": PASSWORD, "worker_info": extra_key}),
        "worker_info: unknown key \"color\"",
    ));
    let mut missing = w.info.clone();
    missing.as_object_mut().expect("obj").remove("nps");
    cases.push((
        json!({"password": PASSWORD, "worker_info": missing}),
        "worker_info: missing key \"nps\"",
    ));
    let mut wrong_type = w.info.clone();
    wrong_type["concurrency"] = json!("four");
    cases.push((
        json!({"password": PASSWORD, "worker_info": wrong_type}),
        "worker_info:",
    ));
    let mut spoofed = w.info.clone();
    spoofed["remote_addr"] = json!("1.2.3.4");
    cases.push((
        json!({"password": PASSWORD, "worker_info": spoofed}),
        "worker_info: unknown key \"remote_addr\"",
    ));
    let mut bad_key = w.info.clone();
    bad_key["unique_key"] = json!("not-a-key");
    cases.push((
        json!({"password": PASSWORD, "worker_info": bad_key}),
        "unique_key",
    ));
    cases.push((
        json!({"password": PASSWORD, "worker_info": w.info, "extra": 1}),
        "invalid request body: unknown field `extra`",
    ));
    cases.push((
        json!({"password": PASSWORD, "worker_info": w.info, "task_id": 3}),
        "task_id requires run_id",
    ));
    for (body, want) in cases {
        let (status, v) = server.post_json("/api/request_task", &body).await;
        assert_eq!(status, 400, "{body}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(
            e.starts_with("/api/request_task: ") && e.contains(want),
            "{e:?} should contain {want:?}"
        );
    }
    // Malformed JSON.
    let r = server
        .client
        .post(server.url("/api/update_task"))
        .header("content-type", "application/json")
        .body("{\"password\": ")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status(), 400);
    let v: Value = r.json().await.expect("json");
    assert!(v["duration"].is_number());
}

#[tokio::test]
async fn no_runs_means_task_waiting() {
    let server = server_with_users().await;
    let w = Worker::new("alice", 4, 1);
    let v = w.request_task(&server).await;
    assert_eq!(v["task_waiting"], false, "{v}");
    // An unapproved run is not handed out either.
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    let v = w.request_task(&server).await;
    assert_eq!(v["task_waiting"], false, "{v}");
    approve(&server, "boss", &run).await;
    let v = w.request_task(&server).await;
    assert_eq!(v["run"]["_id"], run.as_str(), "{v}");
    let args = &v["run"]["args"];
    assert!(
        args["book_sri"].as_str().is_some_and(|s| s.len() > 40),
        "{v}"
    );
    assert_eq!(v["run"]["my_task"]["start"], 0);
    let n = v["run"]["my_task"]["num_games"]
        .as_u64()
        .expect("num_games");
    assert!(n > 0 && n % 2 == 0);
}

#[tokio::test]
async fn run_submission_rules() {
    let server = server_with_users().await;
    add_user(&server, "carol", &[]);
    let post = |body: Value| {
        let server = &server;
        async move { server.post_json("/api/create_run", &body).await }
    };
    let mut bad_sha = fixed_args(1000);
    bad_sha["resolved_new"] = json!("xyz");
    let mut bad_book = fixed_args(1000);
    bad_book["book"] = json!("nonexistent.epd");
    let mut bad_games = fixed_args(1000);
    bad_games["num_games"] = json!(1500);
    let mut bad_tc = fixed_args(1000);
    bad_tc["tc"] = json!("10+");
    let mut bad_arch = fixed_args(1000);
    bad_arch["arch_filter"] = json!("^sparc$");
    let mut unknown = fixed_args(1000);
    unknown["itp"] = json!(300);
    for (args, want) in [
        (bad_sha, "resolved_new"),
        (bad_book, "unknown book"),
        (bad_games, "num_games"),
        (bad_tc, "time control"),
        (bad_arch, "arch_filter"),
        (unknown, "unknown field `itp`"),
    ] {
        let (status, v) =
            post(json!({"username": "alice", "password": PASSWORD, "args": args})).await;
        assert_eq!(status, 400, "{v}");
        assert!(
            v["error"].as_str().unwrap_or_default().contains(want),
            "{v} should mention {want}"
        );
    }
    let (status, _) =
        post(json!({"username": "alice", "password": "bad", "args": fixed_args(1000)})).await;
    assert_eq!(status, 401);

    let run = create_run(&server, "alice", fixed_args(1000)).await;
    let approve_as = |who: &'static str| {
        let server = &server;
        let run = run.clone();
        async move {
            server
                .post_json(
                    "/api/approve_run",
                    &json!({"username": who, "password": PASSWORD, "run_id": run}),
                )
                .await
        }
    };
    let (status, v) = approve_as("carol").await;
    assert_eq!(status, 401, "not an approver: {v}");
    user_cli(&server, &["set", "alice", "--approver"]);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (status, v) = approve_as("alice").await;
    assert_eq!(status, 401, "never the submitter: {v}");
    assert_eq!(
        v["error"],
        format!("/api/approve_run: Run {run}: Self approval is disabled!")
    );
    let (status, _) = approve_as("boss").await;
    assert_eq!(status, 200);
    let (status, _) = approve_as("boss").await;
    assert_eq!(status, 400, "only once");
    let stored = stored_run(&server, &run);
    assert!(stored.approved);
    assert_eq!(stored.approver, "boss");
    assert_eq!(stored.args.username, "alice");
    assert_eq!(stored.version, 24);
}

#[tokio::test]
async fn fixed_games_run_played_to_completion_by_several_workers() {
    let server = server_with_users().await;
    let run = create_run(&server, "alice", fixed_args(2000)).await;
    approve(&server, "boss", &run).await;
    let mut workers: Vec<Worker> = (0..3).map(|i| Worker::new("alice", 4, 10 + i)).collect();
    let mut expected = Totals::default();
    let mut rounds = 0;
    'outer: loop {
        rounds += 1;
        assert!(rounds < 50, "run did not finish");
        for w in workers.iter_mut() {
            let reply = w.request_task(&server).await;
            if reply.get("task_waiting").is_some() {
                break 'outer;
            }
            let (last, totals, _) = w.play(&server, &reply, 16, EVEN).await;
            assert_eq!(last["task_alive"], false, "the final update ends the task");
            expected.wins += totals.wins;
            expected.losses += totals.losses;
            expected.draws += totals.draws;
            for i in 0..5 {
                expected.pentanomial[i] += totals.pentanomial[i];
            }
            // A late beat and failed_task on the finished task are accepted.
            let ids = json!({"run_id": run, "task_id": reply["task_id"]});
            let (status, v) = w.call(&server, "/api/beat", ids.clone()).await;
            assert_eq!((status, v["task_alive"].as_bool()), (200, Some(false)));
            let mut with_msg = ids.clone();
            with_msg["message"] = json!("late");
            let (status, v) = w.call(&server, "/api/failed_task", with_msg).await;
            assert_eq!(status, 200);
            assert_eq!(v["task_alive"], false, "{v}");
        }
    }
    let stored = stored_run(&server, &run);
    assert!(stored.finished, "run finished");
    assert_eq!(stored.results.games(), 2000);
    assert_eq!(stored.results.wins, expected.wins);
    assert_eq!(stored.results.losses, expected.losses);
    assert_eq!(stored.results.pentanomial, expected.pentanomial);
    assert_eq!(stored.check_invariants(), Vec::<String>::new());
    assert!(stored.tasks.len() >= 2);
    // Tasks were handed out back to back: start = games handed out before.
    let mut start = 0;
    for t in &stored.tasks {
        assert_eq!(t.start, start);
        start += t.num_games;
    }
    // Every finished task's CPU time reached alice's total (kept in memory under the run lock,
    // written behind within a tick): games × game duration × threads.
    let tc = shoal::rundb::schedule::parse_tc(&stored.args.tc).expect("tc");
    let want =
        2000.0 * shoal::rundb::schedule::tc_duration(&tc) * f64::from(stored.args.threads) / 3600.0;
    let mut got = 0.0;
    let deadline = Instant::now() + Duration::from_secs(120);
    while Instant::now() < deadline {
        let store = crate::harness::open_store(&server.data_dir).expect("open");
        got = store
            .get(shoal::store::Collection::ShoalKv, "cpu_hours:alice")
            .expect("get")
            .and_then(|d| d.get("value").and_then(Value::as_f64))
            .unwrap_or(0.0);
        if (got - want).abs() < 1e-9 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!((got - want).abs() < 1e-9, "cpu hours {got}, want {want}");
    // The late failed_task calls were logged (through the journal's group commit).
    let actions = {
        crate::harness::open_store(&server.data_dir)
            .expect("open")
            .count(
                shoal::store::Collection::Actions,
                &[shoal::store::Cond::Eq(
                    "action".into(),
                    json!("failed_task"),
                )],
            )
            .expect("count")
    };
    assert_eq!(
        actions, 0,
        "a failed_task on a finished task changes nothing"
    );
    // The action log in Fishtest's words (on either store): the new run's summary line and
    // the finished run's result line, from the stored counts.
    let logged = |kind: &str| -> Vec<(String, String)> {
        let store = crate::harness::open_store(&server.data_dir).expect("open");
        let q = shoal::store::Query::new()
            .with(shoal::store::Cond::Eq("action".into(), json!(kind)))
            .with(shoal::store::Cond::Eq("run_id".into(), json!(run)));
        store
            .find(shoal::store::Collection::Actions, &q)
            .expect("find")
            .iter()
            .map(|d| {
                let s = |k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_string();
                (s("username"), s("message"))
            })
            .collect()
    };
    assert_eq!(
        logged("new_run"),
        [(
            "alice".to_string(),
            "NumGames[2000] TC:10+0.1 Book:UHO_Lichess_4852_v1.epd Threads:1 Hash:16/16"
                .to_string()
        )]
    );
    let p = stored.results.pentanomial;
    let e = shoal::stats::get_elo(&p.map(|c| c as f64)).expect("elo");
    let result = if stored.is_green {
        "accepted"
    } else {
        "rejected"
    };
    assert_eq!(
        logged("finished_run"),
        [(
            "alice".to_string(),
            format!(
                "Result:{result} Elo:{:.2}[{:.2},{:.2}] LOS:{:.0}% Games:2000 \
                 Ptnml:[{},{},{},{},{}]",
                e.elo,
                e.elo - e.elo95,
                e.elo + e.elo95,
                e.los * 100.0,
                p[0],
                p[1],
                p[2],
                p[3],
                p[4]
            )
        )]
    );
}

#[tokio::test]
async fn sprt_run_stops_where_the_state_machine_says() {
    let server = server_with_users().await;
    let run = create_run(&server, "alice", sprt_args(0.0, 2.0)).await;
    approve(&server, "boss", &run).await;
    let stored = stored_run(&server, &run);
    let mut sprt = stored.args.sprt.clone().expect("sprt record");
    assert_eq!(sprt.batch_size, 16, "10+0.1 at 1 thread: 16 pairs");
    let batch = 2 * sprt.batch_size;
    let mut w = Worker::new("alice", 8, 7);
    let mut cumulative = shoal::rundb::model::Stats::default();
    let mut predicted_stop: Option<usize> = None;
    let mut updates = 0usize;
    let mut stopped = None;
    for _ in 0..200 {
        let reply = w.request_task(&server).await;
        if reply.get("task_waiting").is_some() {
            break;
        }
        let num_games = reply["run"]["my_task"]["num_games"].as_u64().expect("n");
        assert_eq!(num_games % batch, 0, "SPRT tasks are whole batches");
        let run_id = reply["run"]["_id"].as_str().expect("id").to_string();
        let task_id = reply["task_id"].clone();
        let mut totals = Totals::default();
        while totals.games() < num_games {
            for _ in 0..batch / 2 {
                totals.play_pair(&mut w.rng, STRONG);
            }
            let (status, v) = w
                .call(
                    &server,
                    "/api/update_task",
                    json!({"run_id": run_id, "task_id": task_id, "stats": totals.json()}),
                )
                .await;
            assert_eq!(status, 200, "{v}");
            updates += 1;
            // The same sequence through the state machine.
            let task_stats = shoal::rundb::model::Stats {
                wins: totals.wins,
                losses: totals.losses,
                draws: totals.draws,
                crashes: 0,
                time_losses: 0,
                pentanomial: totals.pentanomial,
            };
            let mut all = cumulative;
            all.add(&task_stats);
            let r = shoal::stats::Results {
                wins: all.wins,
                losses: all.losses,
                draws: all.draws,
                pentanomial: Some(all.pentanomial),
            };
            shoal::stats::update_sprt(&r, &mut sprt).expect("update_sprt");
            if predicted_stop.is_none() && sprt.state != shoal::stats::SprtState::Running {
                predicted_stop = Some(updates);
            }
            if v["task_alive"] == false {
                // Either the task is complete or the run was decided (saved at once).
                if stored_run(&server, &run).finished {
                    stopped = Some(updates);
                }
                break;
            }
        }
        cumulative.add(&shoal::rundb::model::Stats {
            wins: totals.wins,
            losses: totals.losses,
            draws: totals.draws,
            crashes: 0,
            time_losses: 0,
            pentanomial: totals.pentanomial,
        });
        if stopped.is_some() {
            break;
        }
    }
    let stored = stored_run(&server, &run);
    assert!(stored.finished, "the SPRT decided");
    let decided = stored.args.sprt.clone().expect("sprt");
    assert_eq!(decided.state, shoal::stats::SprtState::Accepted);
    assert_eq!(stopped, predicted_stop, "stopped at the predicted update");
    assert_eq!(decided.llr, sprt.llr, "same LLR as the state machine");
    assert!(stored.is_green && !stored.is_yellow);
    assert_eq!(stored.check_invariants(), Vec::<String>::new());
    // The worker is told there is nothing left.
    let v = w.request_task(&server).await;
    assert_eq!(v["task_waiting"], false);
}

#[tokio::test]
async fn update_task_rules_and_repeats() {
    let server = server_with_users().await;
    let run = create_run(&server, "alice", sprt_args(0.0, 2.0)).await;
    approve(&server, "boss", &run).await;
    let mut w = Worker::new("alice", 8, 3);
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("task");
    let ids = |stats: Value| json!({"run_id": run, "task_id": task_id, "stats": stats});
    let mut t = Totals::default();
    for _ in 0..16 {
        t.play_pair(&mut w.rng, EVEN);
    }
    let (status, v) = w.call(&server, "/api/update_task", ids(t.json())).await;
    assert_eq!((status, &v["task_alive"]), (200, &json!(true)), "{v}");
    // The same cumulative totals again (a worker retry): harmless.
    let (status, v) = w.call(&server, "/api/update_task", ids(t.json())).await;
    assert_eq!((status, &v["task_alive"]), (200, &json!(true)), "{v}");
    // Inconsistent pentanomial: 400, nothing changes.
    let mut wrong = t.json();
    wrong["wins"] = json!(t.wins + 2);
    let (status, v) = w.call(&server, "/api/update_task", ids(wrong)).await;
    assert_eq!(status, 400, "{v}");
    // Wrong unique key, unknown run, task out of range: 400.
    let mut other = Worker::new("alice", 8, 99);
    other.rng = w.rng.clone();
    let (status, v) = other.call(&server, "/api/update_task", ids(t.json())).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("unique key")
    );
    let (status, _) = w
        .call(
            &server,
            "/api/update_task",
            json!({"run_id": "0123456789abcdef01234567", "task_id": 0, "stats": t.json()}),
        )
        .await;
    assert_eq!(status, 400);
    let (status, _) = w
        .call(
            &server,
            "/api/update_task",
            json!({"run_id": run, "task_id": 999, "stats": t.json()}),
        )
        .await;
    assert_eq!(status, 400);
    // Not a multiple of the SPRT batch: the task is stopped with an error.
    let mut partial = t;
    partial.play_pair(&mut w.rng, EVEN);
    let (status, v) = w
        .call(&server, "/api/update_task", ids(partial.json()))
        .await;
    assert_eq!(status, 200);
    assert_eq!(v["task_alive"], false);
    assert!(
        v["error"].as_str().unwrap_or_default().contains("multiple"),
        "{v}"
    );
    // Now inactive: info, not error.
    let (_, v) = w.call(&server, "/api/update_task", ids(t.json())).await;
    assert_eq!(v["task_alive"], false);
    assert!(v.get("info").is_some() && v.get("error").is_none(), "{v}");
    // A new task: decreasing games are refused.
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("task");
    let ids = |stats: Value| json!({"run_id": run, "task_id": task_id, "stats": stats});
    let mut t2 = Totals::default();
    for _ in 0..32 {
        t2.play_pair(&mut w.rng, EVEN);
    }
    let (_, v) = w.call(&server, "/api/update_task", ids(t2.json())).await;
    assert_eq!(v["task_alive"], true, "{v}");
    let (_, v) = w.call(&server, "/api/update_task", ids(t.json())).await;
    assert_eq!(v["task_alive"], false);
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("went down"),
        "{v}"
    );
    // Results hold exactly the accepted updates: t (first task) and t2 (second).
    server.signal(libc::SIGTERM);
    let mut server = server;
    assert!(server.wait_exit(30).success());
    let stored = stored_run(&server, &run);
    assert_eq!(stored.results.games(), t.games() + t2.games());
    assert_eq!(stored.check_invariants(), Vec::<String>::new());
}

#[tokio::test]
async fn machine_limit_duplicates_and_worker_runs() {
    let server = server_with_users_on(behind_local_proxy(Opts::new())).await;
    user_cli(&server, &["set", "alice", "--machine-limit", "2"]);
    let run = create_run(&server, "alice", fixed_args(100_000)).await;
    approve(&server, "boss", &run).await;
    let mut ws: Vec<Worker> = (0..3).map(|i| Worker::new("alice", 1, 100 + i)).collect();
    for w in &mut ws {
        w.forwarded_for = Some("192.0.2.10".into());
    }
    let first = ws[0].request_task(&server).await;
    assert!(first.get("run").is_some(), "{first}");
    let old_task = first["task_id"].as_u64().expect("task");
    assert!(ws[1].request_task(&server).await.get("run").is_some());
    let v = ws[2].request_task(&server).await;
    assert_eq!(v["task_waiting"], false);
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("maximum number of connections"),
        "{v}"
    );
    // Another address is fine.
    ws[2].forwarded_for = Some("192.0.2.11".into());
    assert!(ws[2].request_task(&server).await.get("run").is_some());

    // Same short name (user, cores, key prefix), different key: a duplicate within 120 s.
    let mut twin = Worker::new("alice", 1, 100);
    twin.info["unique_key"] = json!(format!("{:08x}-2222-4222-8333-000000000001", 100));
    twin.forwarded_for = Some("192.0.2.12".into());
    let v = twin.request_task(&server).await;
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("already a worker running"),
        "{v}"
    );
    // The same worker asking again gets a new task; its old one is failed as stale.
    let v = ws[0].request_task(&server).await;
    assert!(v.get("run").is_some(), "{v}");
    assert_ne!(v["task_id"].as_u64(), Some(old_task), "{v}");
    let old = json!({"run_id": run, "task_id": old_task});
    let (status, b) = ws[0].call(&server, "/api/beat", old).await;
    assert_eq!((status, &b["task_alive"]), (200, &json!(false)), "{b}");
    let new = json!({"run_id": run, "task_id": v["task_id"]});
    let (_, b) = ws[0].call(&server, "/api/beat", new).await;
    assert_eq!(b["task_alive"], true, "the new task is alive: {b}");
    // Logged as a failed task, and saved inactive.
    let failed = eventually("the stale task's failed_task action", || {
        let a = stored_actions(&server, "failed_task");
        (!a.is_empty()).then_some(a)
    })
    .await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["task_id"], old_task);
    assert_eq!(failed[0]["run_id"], run.as_str());
    assert_eq!(failed[0]["message"], "Stale active task");
    eventually("the stale task saved inactive", || {
        let t = &stored_run(&server, &run).tasks;
        t.get(old_task as usize)
            .is_some_and(|t| !t.active)
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn request_task_follows_priority_filters_and_arch() {
    let server = server_with_users().await;
    let low = create_run(&server, "alice", fixed_args(10_000)).await;
    let mut high_args = fixed_args(10_000);
    high_args["priority"] = json!(1);
    let high = create_run(&server, "alice", high_args).await;
    let mut smp_args = fixed_args(10_000);
    smp_args["threads"] = json!(8);
    smp_args["priority"] = json!(5);
    let smp = create_run(&server, "alice", smp_args).await;
    let mut arm_args = fixed_args(10_000);
    arm_args["arch_filter"] = json!("^armv8");
    arm_args["priority"] = json!(9);
    let arm = create_run(&server, "alice", arm_args).await;
    for r in [&low, &high, &smp, &arm] {
        approve(&server, "boss", r).await;
    }
    // A 4-core x86 worker: the arm run and the 8-thread run do not fit; priority 1 wins.
    let w = Worker::new("alice", 4, 1);
    let v = w.request_task(&server).await;
    assert_eq!(v["run"]["_id"], high.as_str(), "{v}");
    // A 16-core worker can take the 8-thread run, which has higher priority.
    let big = Worker::new("alice", 16, 2);
    assert_eq!(big.request_task(&server).await["run"]["_id"], smp.as_str());
    // An arm worker goes to the arm run.
    let mut arm_worker = Worker::new("alice", 4, 3);
    arm_worker.info["worker_arch"] = json!("armv8-dotprod");
    assert_eq!(
        arm_worker.request_task(&server).await["run"]["_id"],
        arm.as_str()
    );
    // A worker with little memory gets nothing (Hash 16+16 at 4 slots needs ~1.8 GB).
    let mut small = Worker::new("alice", 4, 4);
    small.info["max_memory"] = json!(500);
    assert_eq!(small.request_task(&server).await["task_waiting"], false);
}

#[tokio::test]
async fn pgn_upload_and_downloads() {
    let server = server_with_users().await;
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    let mut w = Worker::new("alice", 4, 5);
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("task");
    w.play(&server, &reply, 16, EVEN).await;
    let pgn = gz("[Event \"t\"]\n1. e4 e5 *\n");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&pgn);
    let body = json!({"run_id": run, "task_id": task_id, "message": "", "pgn": b64});
    let (status, v) = w.call(&server, "/api/upload_pgn", body).await;
    assert_eq!(
        status, 200,
        "late upload on an inactive task is accepted: {v}"
    );
    for (bad, want) in [
        ("%%%", "base64"),
        ("aGVsbG8gd29ybGQgaGVsbG8gd29ybGQ=", "gzip"),
    ] {
        let body = json!({"run_id": run, "task_id": task_id, "message": "", "pgn": bad});
        let (status, v) = w.call(&server, "/api/upload_pgn", body).await;
        assert_eq!(status, 400, "{v}");
        assert!(
            v["error"].as_str().unwrap_or_default().contains(want),
            "{v}"
        );
    }
    let r = server
        .client
        .get(server.url(&format!("/api/pgn/{run}-{task_id}.pgn")))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.headers().get("content-encoding").map(|v| v.as_bytes()),
        Some(&b"gzip"[..])
    );
    // Saved under Fishtest's file name.
    let disposition = |r: &reqwest::Response| {
        r.headers()
            .get("content-disposition")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    };
    assert_eq!(
        disposition(&r),
        Some(format!("attachment; filename=\"{run}-{task_id}.pgn\""))
    );
    assert_eq!(r.bytes().await.expect("bytes").as_ref(), pgn.as_slice());
    // A second task's PGN, then the whole run: members concatenated in task order.
    let reply = w.request_task(&server).await;
    let task2 = reply["task_id"].as_u64().expect("task");
    let pgn2 = gz(&"[Event \"u\"]\n1. d4 d5 *\n".repeat(5000));
    let body = json!({"run_id": run, "task_id": task2, "message": "",
        "pgn": base64::engine::general_purpose::STANDARD.encode(&pgn2)});
    assert_eq!(w.call(&server, "/api/upload_pgn", body).await.0, 200);
    let r = server
        .client
        .get(server.url(&format!("/api/run_pgns/{run}.pgn.gz")))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 200);
    assert_eq!(
        disposition(&r),
        Some(format!("attachment; filename=\"{run}.pgn.gz\""))
    );
    let all = r.bytes().await.expect("bytes");
    assert_eq!(all.as_ref(), [pgn.clone(), pgn2].concat().as_slice());
    let (status, v) = server.get_json(&format!("/api/pgn/{run}-999.pgn")).await;
    assert_eq!(status, 404, "{v}");
}

#[tokio::test]
async fn stop_run_needs_cpu_hours_and_worker_log_is_recorded() {
    let server = server_with_users().await;
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    let w = Worker::new("alice", 4, 6);
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("task");
    let body = json!({"run_id": run, "task_id": task_id, "message": "Wrong bench in New"});
    let (status, v) = w.call(&server, "/api/stop_run", body).await;
    assert_eq!(status, 401, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("CPU hours")
    );
    // The task was made inactive by the server itself.
    let ids = json!({"run_id": run, "task_id": task_id});
    assert_eq!(
        w.call(&server, "/api/beat", ids).await.1["task_alive"],
        false
    );
    let body = json!({"run_id": run, "task_id": task_id, "message": "fastchess says: 'x'"});
    assert_eq!(w.call(&server, "/api/worker_log", body).await.0, 200);
    // Recorded before the reply: one worker_log action with the message, the task and the
    // worker.
    let logged = stored_actions(&server, "worker_log");
    assert_eq!(logged.len(), 1, "{logged:?}");
    let a = &logged[0];
    assert_eq!(a["message"], "fastchess says: 'x'");
    assert_eq!(a["username"], "alice");
    assert_eq!(a["run_id"], run.as_str());
    assert_eq!(a["task_id"], task_id);
    assert_eq!(a["worker"], format!("alice-4cores-{}", &key(6)[..13]));
    let (status, v) = w
        .call(
            &server,
            "/api/worker_log",
            json!({"message": "m", "run_id": run}),
        )
        .await;
    assert_eq!(status, 400, "run_id without task_id: {v}");
    // A refused log records nothing; one without a task records the message alone.
    assert_eq!(stored_actions(&server, "worker_log").len(), 1);
    let (status, v) = w
        .call(&server, "/api/worker_log", json!({"message": "no task"}))
        .await;
    assert_eq!(status, 200, "{v}");
    let logged = stored_actions(&server, "worker_log");
    assert_eq!(logged.len(), 2, "{logged:?}");
    assert_eq!(logged[1]["message"], "no task");
    assert!(logged[1].get("run_id").is_none(), "{logged:?}");
}

#[tokio::test]
async fn a_killed_server_loses_no_acknowledged_result() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(100_000)).await;
    approve(&server, "boss", &run).await;
    // Four workers update concurrently; each remembers what the server acknowledged.
    let mut handles = Vec::new();
    // How many workers have had an update acknowledged so far.
    let acked_workers = Arc::new(AtomicUsize::new(0));
    for i in 0..4u32 {
        let url = server.url("");
        let client = server.client.clone();
        let acked_workers = acked_workers.clone();
        handles.push(tokio::spawn(async move {
            let mut w = Worker::new("alice", 4, 200 + i);
            let post = |path: &str, extra: Value, info: &Value| {
                let mut body = json!({"password": PASSWORD, "worker_info": info});
                if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
                    b.extend(e);
                }
                client.post(format!("{url}{path}")).json(&body).send()
            };
            let Ok(r) = post("/api/request_task", json!({}), &w.info).await else {
                return None;
            };
            let reply: Value = r.json().await.ok()?;
            let task_id = reply["task_id"].as_u64()?;
            let mut acked = Totals::default();
            let mut t = Totals::default();
            loop {
                for _ in 0..8 {
                    t.play_pair(&mut w.rng, EVEN);
                }
                let body =
                    json!({"run_id": reply["run"]["_id"], "task_id": task_id, "stats": t.json()});
                match post("/api/update_task", body, &w.info).await {
                    Ok(r) => match r.json::<Value>().await {
                        Ok(v) if v["task_alive"] == true => {
                            if acked.games() == 0 {
                                acked_workers.fetch_add(1, Ordering::SeqCst);
                            }
                            acked = t;
                        }
                        _ => break,
                    },
                    Err(_) => break,
                }
            }
            Some((task_id, acked))
        }));
    }
    // Kill it in the middle of the stream, once every worker has had updates acknowledged
    // (however long this machine takes to get there).
    eventually("an acknowledged update from every worker", || {
        (acked_workers.load(Ordering::SeqCst) == 4).then_some(())
    })
    .await;
    server.signal(libc::SIGKILL);
    let mut acked = Vec::new();
    for h in handles {
        if let Some(a) = h.await.expect("join") {
            acked.push(a);
        }
    }
    assert_eq!(
        acked.len(),
        4,
        "every worker got a task and acknowledged games"
    );
    drop(server);
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let stored = stored_run(&server, &run);
    let mut total = 0;
    for (task_id, a) in &acked {
        assert!(a.games() > 0, "the workers got some updates acknowledged");
        let t = &stored.tasks[*task_id as usize];
        assert!(
            t.stats.games() >= a.games(),
            "task {task_id}: acknowledged {} games, store has {}",
            a.games(),
            t.stats.games()
        );
        total += t.stats.games();
    }
    assert_eq!(stored.results.games(), total);
    assert_eq!(stored.check_invariants(), Vec::<String>::new());
}

#[test]
fn worker_info_helper_matches_the_sixteen_keys() {
    let v = worker_info("alice", 4, &key(1));
    let keys: Vec<&str> = v
        .as_object()
        .expect("obj")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys.len(), shoal::rundb::model::WorkerInfo::KEYS.len());
    for k in shoal::rundb::model::WorkerInfo::KEYS {
        assert!(keys.contains(&k), "{k}");
    }
}

#[tokio::test]
async fn dead_tasks_are_scavenged_and_blocked_workers_refused() {
    let timeout = Duration::from_secs(4);
    let server = server_with_users_on(behind_local_proxy(
        Opts::new()
            .set("dead_task_timeout_s", timeout.as_secs_f64())
            .set("scavenge_interval_s", 0.5),
    ))
    .await;
    let run = create_run(&server, "alice", fixed_args(10_000)).await;
    approve(&server, "boss", &run).await;
    let mut w = Worker::new("alice", 4, 8);
    w.forwarded_for = Some("198.51.100.7".into());
    // Beats keep it alive past the timeout. A beat that finds the task dead is a failure
    // unless this machine let more than the timeout pass between two beats (then the task
    // really was silent that long: start again with a new task).
    let mut retries = 0u64;
    let mut prev_sent = Instant::now();
    let mut task_id = w.request_task(&server).await["task_id"]
        .as_u64()
        .expect("task");
    let mut alive_since = prev_sent;
    let mut alive_until = prev_sent;
    while alive_until.duration_since(alive_since) <= timeout + Duration::from_secs(1) {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let ids = json!({"run_id": run, "task_id": task_id});
        let sent = Instant::now();
        let (_, v) = w.call(&server, "/api/beat", ids).await;
        let got = Instant::now();
        if v["task_alive"] == true {
            (prev_sent, alive_until) = (sent, got);
            continue;
        }
        assert!(
            got.duration_since(prev_sent) > timeout,
            "task {task_id} declared dead though beaten within {:?}: {v}",
            got.duration_since(prev_sent)
        );
        retries += 1;
        prev_sent = Instant::now();
        task_id = w.request_task(&server).await["task_id"]
            .as_u64()
            .expect("task");
        (alive_since, alive_until) = (prev_sent, prev_sent);
    }
    let ids = json!({"run_id": run, "task_id": task_id});
    // Beats with a warm credential cache and a free run lock are answered on the event loop.
    assert!(
        server
            .metric("shoal_loop_fast_path_total", &[("route", "beat")])
            .await
            >= 1.0
    );
    // Silence: the scavenger declares it dead (however long this machine takes), keeping its
    // address and country.
    let dead_before = retries as f64;
    let deadline = Instant::now() + Duration::from_secs(120);
    while server.metric("shoal_dead_tasks_total", &[]).await < dead_before + 1.0 {
        assert!(
            Instant::now() < deadline,
            "the silent task was never declared dead"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (_, v) = w.call(&server, "/api/beat", ids.clone()).await;
    assert_eq!(v["task_alive"], false, "dead after silence: {v}");
    server.signal(libc::SIGTERM);
    let mut server = server;
    assert!(server.wait_exit(30).success());
    let stored = stored_run(&server, &run);
    let t = &stored.tasks[task_id as usize];
    assert!(!t.active);
    assert_eq!(t.worker_info.remote_addr, "198.51.100.7");
    assert_eq!(t.worker_info.country_code, "?");
    assert_eq!(stored.workers, 0);
    assert_eq!(stored.check_invariants(), Vec::<String>::new());
    {
        let store = crate::harness::open_store(&server.data_dir).expect("open");
        let dead = store
            .count(
                shoal::store::Collection::Actions,
                &[shoal::store::Cond::Eq("action".into(), json!("dead_task"))],
            )
            .expect("count");
        assert_eq!(dead, 1 + retries);
        // Block this worker by name, as the workers page will.
        let short = format!("alice-4cores-{}", &key(8)[..8]);
        let mut doc = shoal::store::Doc::new();
        doc.insert("_id".into(), json!(short));
        doc.insert("worker_name".into(), json!(short));
        doc.insert("blocked".into(), json!(true));
        doc.insert("message".into(), json!("bad hardware"));
        store
            .put(shoal::store::Collection::Workers, &doc)
            .expect("put");
        store.close().expect("close");
    }
    let server =
        TestServer::start_with(behind_local_proxy(Opts::new().data_dir(&server.data_dir))).await;
    let v = w.request_task(&server).await;
    assert_eq!(v["task_waiting"], false);
    assert!(
        v["error"].as_str().unwrap_or_default().contains("blocked"),
        "{v}"
    );
    // Another worker of the same user is not affected; a country header is recorded.
    let other = Worker::new("alice", 4, 9);
    let r = server
        .client
        .post(server.url("/api/request_task"))
        .header("X-Forwarded-For", "198.51.100.8")
        .header("X-Country-Code", "NL")
        .json(&json!({"password": PASSWORD, "worker_info": other.info}))
        .send()
        .await
        .expect("post");
    let v: Value = r.json().await.expect("json");
    assert!(v.get("run").is_some(), "{v}");
    let task_id = v["task_id"].as_u64().expect("task") as usize;
    let mut server = server;
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
    let t = &stored_run(&server, &run).tasks[task_id];
    assert_eq!(t.worker_info.country_code, "NL");
    assert_eq!(t.worker_info.remote_addr, "198.51.100.8");
}

#[tokio::test]
async fn stop_run_by_an_experienced_user_fails_the_run() {
    let server = server_with_users().await;
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    // alice has contributed 1500 CPU hours (the figure the server keeps per user).
    {
        let store = crate::harness::open_store(&server.data_dir).expect("open");
        let mut doc = shoal::store::Doc::new();
        doc.insert("_id".into(), json!("cpu_hours:alice"));
        doc.insert("value".into(), json!(1500.0));
        store
            .put(shoal::store::Collection::ShoalKv, &doc)
            .expect("put");
    }
    let w = Worker::new("alice", 4, 21);
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("task");
    let body = json!({"run_id": run, "task_id": task_id, "message": "Wrong bench in Base"});
    let (status, v) = w.call(&server, "/api/stop_run", body.clone()).await;
    assert_eq!(status, 200, "{v}");
    let stored = stored_run(&server, &run);
    assert!(stored.finished && stored.failed);
    assert_eq!(stored.failures, 1);
    assert_eq!(stored.check_invariants(), Vec::<String>::new());
    // Stopping a finished run is refused.
    let (status, _) = w.call(&server, "/api/stop_run", body).await;
    assert_eq!(status, 401);
    assert_eq!(w.request_task(&server).await["task_waiting"], false);
}

#[tokio::test]
async fn a_secondary_on_the_same_store_takes_pgns_and_serves_reads() {
    let primary = server_with_users().await;
    let secondary = TestServer::start_with(
        Opts::new()
            .data_dir(&primary.data_dir)
            .set("primary_port", 1),
    )
    .await;
    assert_eq!(secondary.health().await["primary"], false);
    let run = create_run(&primary, "alice", fixed_args(1000)).await;
    approve(&primary, "boss", &run).await;
    let mut w = Worker::new("alice", 4, 31);
    let reply = w.request_task(&primary).await;
    let task_id = reply["task_id"].as_u64().expect("task");
    w.play(&primary, &reply, 16, EVEN).await;
    // The secondary checks the task in the store: wait for the primary's write-behind.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    loop {
        if stored_run(&primary, &run).tasks.len() as u64 > task_id {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the task never reached the store"
        );
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    // The worker's PGN goes to the secondary (Fishtest's port 8003).
    let pgn = gz("[Event \"s\"]\n1. c4 *\n");
    let body = json!({"run_id": run, "task_id": task_id, "message": "",
        "pgn": base64::engine::general_purpose::STANDARD.encode(&pgn)});
    let (status, v) = w.call(&secondary, "/api/upload_pgn", body).await;
    assert_eq!(status, 200, "{v}");
    let r = primary
        .client
        .get(primary.url(&format!("/api/pgn/{run}-{task_id}.pgn")))
        .send()
        .await
        .expect("get");
    assert_eq!(r.bytes().await.expect("bytes").as_ref(), pgn.as_slice());
    // The secondary reads runs from the store: it sees what the primary saved.
    let (status, v) = secondary.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["approved"], true);
    // And it never runs the scheduler.
    let (status, _) = w.call(&secondary, "/api/request_task", json!({})).await;
    assert_eq!(status, 503);
}

#[tokio::test]
async fn nets_are_served_to_workers_or_redirected() {
    use sha2::Digest as _;
    let server = TestServer::start().await;
    let content: Vec<u8> = (0..700_000u32).map(|i| (i * 7 % 256) as u8).collect();
    let prefix = hex::encode(sha2::Sha256::digest(&content))[..12].to_string();
    let name = format!("nn-{prefix}.nnue");
    let file = server.data_dir.parent().expect("parent").join(&name);
    std::fs::write(&file, &content).expect("write");
    add_user(&server, "alice", &[]);
    let out = server
        .cli()
        .args(["nn", file.to_str().expect("utf8"), "--user", "alice"])
        .output()
        .expect("shoal nn");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // As Fishtest: a 302 to /nn/<name>, which sends the stored gzip with
    // `Content-Encoding: gzip`; the worker decodes it and checks the SHA-256 prefix.
    let body = crate::nets_store::download_as_worker(&server, &name).await;
    assert_eq!(hex::encode(sha2::Sha256::digest(&body))[..12], prefix);
    assert_eq!(body, content);
    for bad in ["nn-000000000000.nnue", "..%2F..%2Fsecret", "nn-XYZ.nnue"] {
        let (status, _) = server.get_json(&format!("/api/nn/{bad}")).await;
        assert_eq!(status, 404, "{bad}");
    }
    // With nn_url set, a redirect to <nn_url>/nn/<name>, like Fishtest's FISHTEST_NN_URL.
    let redirecting = TestServer::start_with(
        Opts::new()
            .data_dir(&server.data_dir)
            .set("primary_port", 1)
            .set("nn_url", "\"https://nets.example.org/\""),
    )
    .await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let r = client
        .get(redirecting.url(&format!("/api/nn/{name}")))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status(), 302);
    assert_eq!(
        r.headers().get("location").and_then(|v| v.to_str().ok()),
        Some(format!("https://nets.example.org/nn/{name}").as_str())
    );
}

//! Limits over HTTP against a real server: a per-user concurrency limit (refusal, release on
//! the ways a task ends, waiting instead of refusing), the per-run window under concurrent
//! requests, rate limits (429 with `Retry-After`, no password check), holders rebuilt after
//! `kill -9`, `/api/limits`, and an invalid `[[limits]]` entry stopping start-up.

use std::time::Duration;

use serde_json::{Value, json};

use crate::fleet::{PASSWORD, Worker, add_user, approve, create_run, fixed_args};
use crate::harness::{Opts, TestServer, metric_sum, run_bin};

async fn server(limits: &str, wait_s: f64) -> TestServer {
    server_on(Opts::new(), limits, wait_s).await
}

async fn server_on(opts: Opts, limits: &str, wait_s: f64) -> TestServer {
    let s = TestServer::start_with(opts.set("limits", limits).set("limits_wait_s", wait_s)).await;
    add_user(&s, "alice", &[]);
    add_user(&s, "bob", &[]);
    add_user(&s, "boss", &["--approver"]);
    s
}

async fn approved_run(s: &TestServer, user: &str, args: Value) -> String {
    let run = create_run(s, user, args).await;
    approve(s, "boss", &run).await;
    run
}

fn limit<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["limits"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == name))
        .unwrap_or_else(|| panic!("no limit {name} in {view}"))
}

fn key_holders(view: &Value, name: &str, key: &str) -> u64 {
    limit(view, name)["keys"]
        .as_array()
        .and_then(|k| k.iter().find(|k| k["key"] == key))
        .and_then(|k| k["holders"].as_u64())
        .unwrap_or(0)
}

async fn fail_task(s: &TestServer, w: &Worker, reply: &Value) {
    let body = json!({"run_id": reply["run"]["_id"], "task_id": reply["task_id"], "message": "x"});
    let (status, v) = w.call(s, "/api/failed_task", body).await;
    assert_eq!(status, 200, "{v}");
}

const USER_LIMIT: &str = r#"[{kind = "concurrency", key = "user", max = 2}]"#;

#[tokio::test]
async fn a_user_limit_refuses_then_releases_on_every_end() {
    let s = server(USER_LIMIT, 0.0).await;
    let run = approved_run(&s, "alice", fixed_args(100_000)).await;
    let ws: Vec<Worker> = (0..4).map(|i| Worker::new("alice", 1, 300 + i)).collect();
    let a = ws[0].request_task(&s).await;
    let b = ws[1].request_task(&s).await;
    assert!(a.get("run").is_some() && b.get("run").is_some(), "{a} {b}");
    let refused = ws[2].request_task(&s).await;
    assert_eq!(refused["task_waiting"], false, "{refused}");
    let msg = refused["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("limit concurrency:user is full for alice (2 active)"),
        "{refused}"
    );
    // Another user is not limited by alice's key.
    assert!(
        Worker::new("bob", 1, 400)
            .request_task(&s)
            .await
            .get("run")
            .is_some()
    );
    let (_, view) = s.get_json("/api/limits").await;
    assert_eq!(key_holders(&view, "concurrency:user", "alice"), 2, "{view}");
    assert!(limit(&view, "concurrency:user")["rejected"].as_u64() >= Some(1));
    assert_eq!(key_holders(&view, "run_window", &run), 3, "{view}");

    // failed_task gives the slot back.
    fail_task(&s, &ws[0], &a).await;
    let c = ws[2].request_task(&s).await;
    assert!(c.get("run").is_some(), "{c}");
    // A worker's new request replaces its own stale task: no refusal for the stale one.
    let b2 = ws[1].request_task(&s).await;
    assert!(b2.get("run").is_some(), "{b2}");
    let (_, view) = s.get_json("/api/limits").await;
    assert_eq!(key_holders(&view, "concurrency:user", "alice"), 2, "{view}");
    assert!(ws[3].request_task(&s).await.get("error").is_some());

    // The run deleted from the UI ends every task and frees the key.
    let mut web = crate::web::Browser::new(&s);
    let token = web.get("/login").await.csrf();
    let login = [
        ("username", "boss"),
        ("password", PASSWORD),
        ("csrf_token", &token),
    ];
    assert_eq!(web.post("/login", &login).await.status, 302);
    let token = web.get("/tests").await.csrf();
    let page = web
        .post(
            "/tests/delete",
            &[("run-id", &run), ("csrf_token", &token), ("confirm", "yes")],
        )
        .await;
    assert_eq!(page.status, 302, "delete: {}", page.body);
    let (_, view) = s.get_json("/api/limits").await;
    assert_eq!(key_holders(&view, "concurrency:user", "alice"), 0, "{view}");
    assert_eq!(key_holders(&view, "run_window", &run), 0, "{view}");
    // The Prometheus series (published every second): polled until they show it.
    let labels = [("limit", "concurrency:user")];
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let text = s.metrics().await;
        if metric_sum(&text, "shoal_limit_rejected_total", &labels) >= 1.0
            && text.contains("shoal_limit_holders{limit=\"concurrency:user\"} 0")
        {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
async fn a_full_key_waits_for_the_next_slot_instead_of_refusing() {
    let s = server(r#"[{kind = "concurrency", key = "user", max = 1}]"#, 8.0).await;
    approved_run(&s, "alice", fixed_args(100_000)).await;
    let first = Worker::new("alice", 1, 500);
    let a = first.request_task(&s).await;
    assert!(a.get("run").is_some(), "{a}");
    // The second worker waits in alice's queue; the first task fails a moment later.
    let second = Worker::new("alice", 1, 501);
    let s2 = &s;
    let waiting = async { second.request_task(s2).await };
    let ender = async {
        // Once the second request is seen waiting, the first task ends.
        let waiters = wait_for_waiters(s2, 1).await;
        fail_task(s2, &first, &a).await;
        Some(waiters)
    };
    let (got, waiters) = tokio::join!(waiting, ender);
    assert_eq!(waiters, Some(1), "the second request was queued");
    assert!(got.get("run").is_some(), "served after the wait: {got}");
    // A third one waits (seen in the queue) its bounded time, then is refused (and nothing
    // is left queued).
    let third_worker = Worker::new("alice", 1, 502);
    let (third, seen) = tokio::join!(third_worker.request_task(&s), wait_for_waiters(&s, 1));
    assert!(third.get("error").is_some(), "{third}");
    assert_eq!(seen, 1, "it waited in the queue before the refusal");
    let (_, view) = s.get_json("/api/limits").await;
    assert_eq!(limit(&view, "concurrency:user")["waiters"], 0, "{view}");
    assert_eq!(key_holders(&view, "concurrency:user", "alice"), 1, "{view}");
}

#[tokio::test]
async fn the_run_window_hands_out_exactly_its_size_under_concurrent_requests() {
    let s = server("[]", 0.0).await;
    let mut args = fixed_args(1_000_000);
    args["max_active_tasks"] = json!(3);
    args["priority"] = json!(1);
    let windowed = approved_run(&s, "alice", args).await;
    // An invalid window is refused and creates nothing.
    let mut bad = fixed_args(1000);
    bad["max_active_tasks"] = json!(0);
    let (status, v) = s
        .post_json(
            "/api/create_run",
            &json!({"username": "alice", "password": PASSWORD, "args": bad}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("max_active_tasks"),
        "{v}"
    );

    let ws: Vec<Worker> = (0..12).map(|i| Worker::new("bob", 1, 600 + i)).collect();
    let replies = futures::future::join_all(ws.iter().map(|w| w.request_task(&s))).await;
    let got: Vec<&Value> = replies.iter().filter(|r| r.get("run").is_some()).collect();
    assert_eq!(got.len(), 3, "exactly the window: {replies:#?}");
    let mut ids: Vec<u64> = got.iter().filter_map(|r| r["task_id"].as_u64()).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), 3, "no task handed out twice");
    // The full window sends the next worker to another run.
    let other = approved_run(&s, "alice", fixed_args(100_000)).await;
    let next = Worker::new("bob", 1, 700).request_task(&s).await;
    assert_eq!(next["run"]["_id"], other.as_str(), "{next}");
    // A task ending refills the window.
    let (i, first) = replies
        .iter()
        .enumerate()
        .find(|(_, r)| r.get("run").is_some())
        .expect("a task");
    fail_task(&s, &ws[i], first).await;
    let refill = Worker::new("bob", 1, 701).request_task(&s).await;
    assert_eq!(refill["run"]["_id"], windowed.as_str(), "{refill}");
    let (_, view) = s.get_json("/api/limits").await;
    assert_eq!(key_holders(&view, "run_window", &windowed), 3, "{view}");
    // The store agrees once the write-behind has caught up.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let stored = crate::fleet::stored_run(&s, &windowed);
        if stored.tasks.iter().filter(|t| t.active).count() == 3 && stored.tasks.len() == 4 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "store: {:?}",
            stored.tasks.len()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn rate_limits_answer_429_before_any_password_check() {
    let limits = r#"[{kind = "rate", key = "ip", scope = "request_task", max = 2, window_s = 60},
                     {kind = "rate", key = "user", scope = "create_run", max = 1, window_s = 60}]"#;
    let s = server(limits, 0.0).await;
    let w = Worker::new("alice", 1, 800);
    for _ in 0..2 {
        let (status, v) = w.call(&s, "/api/request_task", json!({})).await;
        assert_eq!(status, 200, "{v}");
    }
    // The third is refused at once, in the protocol's error shape, with Retry-After; a wrong
    // password is refused the same way (no argon2 work is spent on it).
    let mut liar = Worker::new("alice", 1, 801);
    liar.info["username"] = json!("alice");
    let body = json!({"password": "wrong", "worker_info": liar.info});
    let r = s
        .client
        .post(s.url("/api/request_task"))
        .json(&body)
        .send()
        .await
        .expect("call");
    assert_eq!(r.status().as_u16(), 429);
    let retry: u64 = r.headers()["retry-after"]
        .to_str()
        .expect("ascii")
        .parse()
        .expect("seconds");
    assert!((1..=60).contains(&retry));
    let v: Value = r.json().await.expect("json");
    let msg = v["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("request_task: rate limit rate:ip:request_task"),
        "{v}"
    );
    assert!(v["duration"].is_number(), "{v}");
    // create_run: one per user per minute.
    create_run(&s, "alice", fixed_args(1000)).await;
    let (status, v) = s
        .post_json(
            "/api/create_run",
            &json!({"username": "alice", "password": PASSWORD, "args": fixed_args(1000)}),
        )
        .await;
    assert_eq!(status, 429, "{v}");
    let (_, view) = s.get_json("/api/limits").await;
    assert_eq!(
        limit(&view, "rate:ip:request_task")["rejected"],
        1,
        "{view}"
    );
    assert_eq!(
        limit(&view, "rate:user:create_run")["rejected"],
        1,
        "{view}"
    );
}

#[tokio::test]
async fn holders_are_rebuilt_after_kill_9() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let limits = r#"[{kind = "concurrency", key = "user", max = 1}]"#;
    let s = server_on(Opts::new().data_dir(&data), limits, 0.0).await;
    let mut args = fixed_args(100_000);
    args["max_active_tasks"] = json!(5);
    let run = approved_run(&s, "alice", args).await;
    let a = Worker::new("alice", 1, 900).request_task(&s).await;
    assert!(a.get("run").is_some(), "{a}");
    s.signal(libc::SIGKILL);
    drop(s);
    let s = TestServer::start_with(
        Opts::new()
            .data_dir(&data)
            .set("limits", limits)
            .set("limits_wait_s", 0),
    )
    .await;
    let (_, view) = s.get_json("/api/limits").await;
    assert_eq!(key_holders(&view, "concurrency:user", "alice"), 1, "{view}");
    assert_eq!(key_holders(&view, "run_window", &run), 1, "{view}");
    // Keyed by the worker's address, shown hidden to anonymous callers (as the read API
    // hides remote_addr).
    assert_eq!(key_holders(&view, "machine", "?.?.?.?"), 1, "{view}");
    assert!(!view.to_string().contains("127.0.0.1"), "{view}");
    let refused = Worker::new("alice", 1, 901).request_task(&s).await;
    assert!(
        refused.get("error").is_some(),
        "the rebuilt holder still counts: {refused}"
    );
}

#[test]
fn an_invalid_limit_stops_start_up_naming_the_entry() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (status, stderr) = run_bin(
        &["check-config"],
        &[(
            "SHOAL_LIMITS",
            r#"[{kind = "concurrency", key = "user", max = 4}, {name = "oops", kind = "rate", key = "run", max = 1, scope = "api", window_s = 1}]"#,
        )],
        dir.path(),
    );
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("entry 2 (`oops`)"), "{stderr}");
}

async fn logged_in<'a>(s: &'a TestServer, user: &str) -> (crate::web::Browser<'a>, String) {
    let mut web = crate::web::Browser::new(s);
    let token = web.get("/login").await.csrf();
    let login = [
        ("username", user),
        ("password", PASSWORD),
        ("csrf_token", &token),
    ];
    assert_eq!(web.post("/login", &login).await.status, 302);
    let token = web.get("/tests").await.csrf();
    (web, token)
}

#[tokio::test]
async fn approvers_change_a_limit_from_the_page_and_it_persists() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let s = server_on(Opts::new().data_dir(&data), USER_LIMIT, 0.0).await;
    let (mut alice, token) = logged_in(&s, "alice").await;
    assert_eq!(alice.get("/limits").await.status, 403);
    let denied = alice
        .post(
            "/limits",
            &[
                ("name", "concurrency:user"),
                ("max", "9"),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(denied.status, 403, "{}", denied.body);
    let (mut boss, token) = logged_in(&s, "boss").await;
    let page = boss.get("/limits").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("concurrency:user") && page.body.contains("run_window"));
    // The run window limits only by each run's own max: it reads "no limit", not u32::MAX.
    assert!(page.body.contains("no limit"), "{}", page.body);
    assert!(!page.body.contains("4294967295"), "{}", page.body);
    // No token: refused before anything changes.
    let forged = boss
        .post("/limits", &[("name", "concurrency:user"), ("max", "9")])
        .await;
    assert_eq!(forged.status, 403);
    for (name, max) in [("machine", "5"), ("concurrency:user", "0"), ("nope", "3")] {
        let page = boss
            .post(
                "/limits",
                &[("name", name), ("max", max), ("csrf_token", &token)],
            )
            .await;
        assert_eq!(page.status, 400, "{name}={max}: {}", page.body);
    }
    let page = boss
        .post(
            "/limits",
            &[
                ("name", "concurrency:user"),
                ("max", "7"),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("concurrency:user: max 2 -&#62; 7"),
        "{}",
        page.body
    );
    let (_, view) = s.get_json("/api/limits").await;
    assert_eq!(limit(&view, "concurrency:user")["max"], 7);
    // Kept across a restart, over settings.toml's value.
    drop(alice);
    drop(boss);
    drop(s);
    let s = TestServer::start_with(Opts::new().data_dir(&data).set("limits", USER_LIMIT)).await;
    let (_, view) = s.get_json("/api/limits").await;
    assert_eq!(limit(&view, "concurrency:user")["max"], 7, "{view}");
}

/// Polls `/api/limits` until `concurrency:user` has `n` waiters (or panics after 30 s);
/// returns the count seen.
async fn wait_for_waiters(s: &TestServer, n: u64) -> u64 {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let (_, view) = s.get_json("/api/limits").await;
        let waiters = limit(&view, "concurrency:user")["waiters"]
            .as_u64()
            .unwrap_or(0);
        if waiters == n {
            return waiters;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "waiting for {n} waiters: {view}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

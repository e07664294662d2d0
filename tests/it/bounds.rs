//! docs/security.md's table of bounded client values, row by row: for each row, the values
//! just inside the bound are accepted and the values just outside are refused with the
//! protocol's error shape (`{"error": "<path>: …", "duration": …}` and the row's status), and
//! a refused request changes nothing (the run, the actions, the stored PGNs and runs). Each
//! assertion names its row and value. The periodic jobs are off, so nothing else changes the
//! run between two looks.

use serde_json::{Value, json};

use crate::fleet::{PASSWORD, Worker, add_user, approve, create_run, fixed_args, key, worker_info};
use crate::harness::{Opts, TestServer, open_store};

/// A server without periodic jobs, the submitter alice, the approver boss, the worker owner
/// bob (a machine limit large enough for every accepted request of a test) and an approved
/// run with games for all of them.
struct Ctx {
    server: TestServer,
    run: String,
}

async fn ctx() -> Ctx {
    let server = TestServer::start_with(Opts::new().set("periodic_jobs", false)).await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    add_user(&server, "bob", &["--machine-limit", "1000"]);
    let run = create_run(&server, "alice", fixed_args(3_200_000)).await;
    approve(&server, "boss", &run).await;
    Ctx { server, run }
}

/// What a refused request must leave as it was: the run as the API shows it, and the number
/// of actions, runs and stored PGNs.
async fn snapshot(c: &Ctx) -> (Value, [u64; 2], usize) {
    let (status, run) = c.server.get_json(&format!("/api/get_run/{}", c.run)).await;
    assert_eq!(status, 200, "{run}");
    let store = open_store(&c.server.data_dir).expect("open store");
    let counts = [
        store
            .count(shoal::store::Collection::Actions, &[])
            .expect("count"),
        store
            .count(shoal::store::Collection::Runs, &[])
            .expect("count"),
    ];
    let pgns = store.pgn_list_run(&c.run).expect("pgns").len();
    (run, counts, pgns)
}

/// Asserts the protocol's error shape: `status`, `error` = "<path>: …" containing `says`,
/// and `duration`.
fn refused(row: &str, value: &str, path: &str, (status, v): (u16, Value), want: u16, says: &str) {
    assert_eq!(status, want, "{row} = {value}: {v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with(&format!("{path}: ")) && error.contains(says),
        "{row} = {value}: error {error:?} should be \"{path}: …{says}…\""
    );
    assert!(v["duration"].is_number(), "{row} = {value}: {v}");
}

/// Sends `body` (raw JSON text) to `path`.
async fn post_raw(server: &TestServer, path: &str, body: String) -> (u16, Value) {
    let r = server
        .client
        .post(server.url(path))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("post");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

/// The worker_info of worker number `n` of bob's, changed by `set`.
fn info(n: u32, set: impl FnOnce(&mut Value)) -> Value {
    let mut wi = worker_info("bob", 4, &key(n));
    set(&mut wi);
    wi
}

async fn request_task(c: &Ctx, wi: &Value) -> (u16, Value) {
    c.server
        .post_json(
            "/api/request_task",
            &json!({"password": PASSWORD, "worker_info": wi}),
        )
        .await
}

/// One row of worker_info bounds through request_task: each inside value is accepted (200,
/// no `error`: a task, or no task for a worker that fits no run), each outside value is a 400
/// naming the key, and changes nothing.
async fn worker_info_row(
    c: &Ctx,
    row: &str,
    says: &str,
    set: impl Fn(&mut Value, &Value),
    inside: &[Value],
    outside: &[Value],
) {
    // Each request from a worker of its own (a new unique key), so no rule but the bound
    // decides.
    let n = std::sync::atomic::AtomicU32::new(0);
    let next = || 1000 + n.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    for value in inside {
        let wi = info(next(), |wi| set(wi, value));
        let (status, v) = request_task(c, &wi).await;
        assert_eq!(status, 200, "{row} = {value} is inside the bound: {v}");
        assert!(v.get("error").is_none(), "{row} = {value}: {v}");
    }
    for value in outside {
        let wi = info(next(), |wi| set(wi, value));
        let before = snapshot(c).await;
        let reply = request_task(c, &wi).await;
        refused(
            row,
            &value.to_string(),
            "/api/request_task",
            reply,
            400,
            says,
        );
        assert_eq!(
            snapshot(c).await,
            before,
            "{row} = {value} changed something"
        );
    }
}

#[tokio::test]
async fn concurrency_and_min_threads_are_1_to_1024() {
    let c = ctx().await;
    for key in ["concurrency", "min_threads"] {
        worker_info_row(
            &c,
            &format!("worker_info.{key}"),
            &format!("worker_info: {key} must be between 1 and 1024"),
            // Memory for 1024 cores, so the largest worker gets a task.
            |wi, v| {
                wi[key] = v.clone();
                wi["max_memory"] = json!(1 << 24);
            },
            &[json!(1), json!(1024)],
            &[json!(0), json!(1025)],
        )
        .await;
    }
    // Beyond the type (u32) it is refused all the same.
    worker_info_row(
        &c,
        "worker_info.concurrency",
        "worker_info: ",
        |wi, v| wi["concurrency"] = v.clone(),
        &[],
        &[json!(-1), json!(u64::from(u32::MAX) + 1)],
    )
    .await;
}

#[tokio::test]
async fn max_memory_is_at_most_2_pow_24_mib() {
    let c = ctx().await;
    worker_info_row(
        &c,
        "worker_info.max_memory",
        "worker_info: max_memory must be at most 16777216 MiB",
        |wi, v| wi["max_memory"] = v.clone(),
        &[json!(0), json!(1u64 << 24)],
        &[json!((1u64 << 24) + 1), json!(u64::MAX)],
    )
    .await;
    worker_info_row(
        &c,
        "worker_info.max_memory",
        "worker_info: ",
        |wi, v| wi["max_memory"] = v.clone(),
        &[],
        &[json!(-1)],
    )
    .await;
}

#[tokio::test]
async fn version_parts_are_0_to_100000() {
    let c = ctx().await;
    for (list, i) in [
        ("python_version", 0),
        ("python_version", 2),
        ("gcc_version", 0),
        ("gcc_version", 2),
    ] {
        worker_info_row(
            &c,
            &format!("worker_info.{list}[{i}]"),
            "worker_info: version numbers must be between 0 and 100000",
            |wi, v| wi[list][i] = v.clone(),
            &[json!(0), json!(100_000)],
            &[json!(-1), json!(100_001)],
        )
        .await;
    }
}

#[tokio::test]
async fn nps_is_finite_and_0_to_1e12() {
    let c = ctx().await;
    worker_info_row(
        &c,
        "worker_info.nps",
        "worker_info: nps must be a number between 0 and 1e12",
        |wi, v| wi["nps"] = v.clone(),
        &[json!(0.0), json!(1e12)],
        &[json!(-1.0), json!(1e12 + 1.0)],
    )
    .await;
    // Not finite: JSON has no infinity, and a number too large for an f64 is refused.
    let before = snapshot(&c).await;
    let body = format!(
        "{{\"password\": \"{PASSWORD}\", \"worker_info\": {}}}",
        info(1999, |_| {})
    )
    .replace("\"nps\":0.0", "\"nps\":1e400");
    assert!(body.contains("1e400"), "{body}");
    let reply = post_raw(&c.server, "/api/request_task", body).await;
    refused(
        "worker_info.nps",
        "1e400",
        "/api/request_task",
        reply,
        400,
        "",
    );
    assert_eq!(snapshot(&c).await, before);
}

#[tokio::test]
async fn worker_texts_are_at_most_256_characters() {
    let c = ctx().await;
    // Characters, not bytes: 256 two-byte characters are inside.
    let text = |n: usize| json!("é".repeat(n));
    for key in ["uname", "ARCH"] {
        worker_info_row(
            &c,
            &format!("worker_info.{key}"),
            &format!("worker_info: {key} is longer than 256 characters"),
            |wi, v| wi[key] = v.clone(),
            &[text(256)],
            &[text(257)],
        )
        .await;
    }
    for i in 0..2 {
        worker_info_row(
            &c,
            &format!("worker_info.architecture[{i}]"),
            "worker_info: architecture is longer than 256 characters",
            |wi, v| wi["architecture"][i] = v.clone(),
            &[text(256)],
            &[text(257)],
        )
        .await;
    }
    // username: a user with a 256-character name works; one character more is refused
    // before any password check.
    let long = "u".repeat(256);
    add_user(&c.server, &long, &[]);
    worker_info_row(
        &c,
        "worker_info.username",
        "worker_info: username is longer than 256 characters",
        |wi, v| wi["username"] = v.clone(),
        &[json!(long)],
        &[json!("u".repeat(257))],
    )
    .await;
    // worker_arch is one of the supported arches or "unknown": a length inside 256 is not
    // enough.
    worker_info_row(
        &c,
        "worker_info.worker_arch",
        "worker_info: unsupported worker_arch",
        |wi, v| wi["worker_arch"] = v.clone(),
        &[json!("unknown"), json!("x86-64-sse41-popcnt")],
        &[json!("x86-64-avx3"), json!("a".repeat(256))],
    )
    .await;
    worker_info_row(
        &c,
        "worker_info.worker_arch",
        "worker_info: worker_arch is longer than 256 characters",
        |wi, v| wi["worker_arch"] = v.clone(),
        &[],
        &[json!("a".repeat(257))],
    )
    .await;
}

/// A task of a worker of its own, for the message rows.
async fn task_of(c: &Ctx, n: u32) -> (Worker, u64) {
    let w = Worker::new("bob", 4, n);
    let v = w.request_task(&c.server).await;
    assert_eq!(v["run"]["_id"], c.run.as_str(), "{v}");
    (w, v["task_id"].as_u64().expect("task id"))
}

async fn task_active(c: &Ctx, task: u64) -> bool {
    let (status, v) = c
        .server
        .get_json(&format!("/api/get_task/{}/{task}", c.run))
        .await;
    assert_eq!(status, 200, "{v}");
    v["active"].as_bool().expect("active")
}

/// The stored actions of one kind, with their messages.
fn messages(c: &Ctx, action: &str) -> Vec<String> {
    let store = open_store(&c.server.data_dir).expect("open store");
    store
        .find(
            shoal::store::Collection::Actions,
            &shoal::store::Query::new()
                .with(shoal::store::Cond::Eq("action".into(), json!(action))),
        )
        .expect("find")
        .iter()
        .map(|d| {
            d.get("message")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
        .collect()
}

/// Waits until the store has `n` actions of a kind (an ended task's action reaches the store
/// through the journal, possibly after the reply).
async fn wait_actions(c: &Ctx, action: &str, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while messages(c, action).len() < n {
        assert!(
            std::time::Instant::now() < deadline,
            "never {n} {action} actions"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(messages(c, action).len(), n);
}

/// An upload_pgn body in the official worker's order, with `message`.
fn upload_body(w: &Worker, run: &str, task: u64, message: &str) -> String {
    use base64::Engine as _;
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(b"[Event \"bounds\"]\n1. e4 e5 *\n")
        .expect("gzip");
    let pgn = base64::engine::general_purpose::STANDARD.encode(e.finish().expect("gzip"));
    json!({
        "password": PASSWORD, "run_id": run, "task_id": task, "message": message,
        "worker_info": w.info, "pgn": pgn,
    })
    .to_string()
}

#[tokio::test]
async fn messages_are_at_most_4096_characters() {
    let c = ctx().await;
    let inside = "é".repeat(4096);
    let outside = "é".repeat(4097);
    let says = "message is longer than 4096 characters";
    let row = "message";

    // worker_log: the message is logged whole.
    let w = Worker::new("bob", 4, 1);
    let before = snapshot(&c).await;
    let reply = w
        .call(&c.server, "/api/worker_log", json!({"message": outside}))
        .await;
    refused(row, "worker_log 4097", "/api/worker_log", reply, 400, says);
    assert_eq!(
        snapshot(&c).await,
        before,
        "worker_log 4097 changed something"
    );
    let (status, v) = w
        .call(&c.server, "/api/worker_log", json!({"message": inside}))
        .await;
    assert_eq!(status, 200, "worker_log 4096: {v}");
    assert_eq!(messages(&c, "worker_log"), vec![inside.clone()]);

    // failed_task: refused, the task goes on; accepted, it ends.
    let (w, task) = task_of(&c, 2).await;
    let ids = |message: &str| json!({"run_id": c.run, "task_id": task, "message": message});
    let before = snapshot(&c).await;
    let reply = w.call(&c.server, "/api/failed_task", ids(&outside)).await;
    refused(
        row,
        "failed_task 4097",
        "/api/failed_task",
        reply,
        400,
        says,
    );
    assert_eq!(
        snapshot(&c).await,
        before,
        "failed_task 4097 changed something"
    );
    assert!(task_active(&c, task).await);
    let (status, v) = w.call(&c.server, "/api/failed_task", ids(&inside)).await;
    assert_eq!(status, 200, "failed_task 4096: {v}");
    assert!(
        !task_active(&c, task).await,
        "failed_task 4096 ends the task"
    );
    wait_actions(&c, "failed_task", 1).await;

    // stop_run: refused, the task goes on; accepted, bob (without 1000 CPU hours) is not
    // authorized to stop the run (401) and his task ends.
    let (w, task) = task_of(&c, 3).await;
    let ids = |message: &str| json!({"run_id": c.run, "task_id": task, "message": message});
    let before = snapshot(&c).await;
    let reply = w.call(&c.server, "/api/stop_run", ids(&outside)).await;
    refused(row, "stop_run 4097", "/api/stop_run", reply, 400, says);
    assert_eq!(
        snapshot(&c).await,
        before,
        "stop_run 4097 changed something"
    );
    assert!(task_active(&c, task).await);
    let (status, v) = w.call(&c.server, "/api/stop_run", ids(&inside)).await;
    assert_eq!(status, 401, "stop_run 4096 passes the bound: {v}");
    assert!(!task_active(&c, task).await, "stop_run 4096 ends the task");
    wait_actions(&c, "stop_run", 1).await;

    // upload_pgn: refused, nothing stored; accepted, the PGN is stored.
    let (w, task) = task_of(&c, 4).await;
    let before = snapshot(&c).await;
    let reply = post_raw(
        &c.server,
        "/api/upload_pgn",
        upload_body(&w, &c.run, task, &outside),
    )
    .await;
    refused(row, "upload_pgn 4097", "/api/upload_pgn", reply, 400, says);
    assert_eq!(
        snapshot(&c).await,
        before,
        "upload_pgn 4097 changed something"
    );
    let (status, v) = post_raw(
        &c.server,
        "/api/upload_pgn",
        upload_body(&w, &c.run, task, &inside),
    )
    .await;
    assert_eq!(status, 200, "upload_pgn 4096: {v}");
    let (status, _) = c
        .server
        .get_json(&format!("/api/pgn/{}-{task}.pgn", c.run))
        .await;
    assert_eq!(status, 200, "the PGN of upload_pgn 4096 is stored");
}

#[tokio::test]
async fn arch_filter_is_at_most_256_characters_and_compiled_within_256_kib() {
    let c = ctx().await;
    let create = |filter: String| {
        let mut args = fixed_args(1000);
        args["arch_filter"] = json!(filter);
        let body = json!({"username": "alice", "password": PASSWORD, "args": args});
        let server = &c.server;
        async move { server.post_json("/api/create_run", &body).await }
    };
    // 256 characters (two bytes each after the alternative that matches).
    let filter = |n: usize| format!("avx2|{}", "é".repeat(n - 5));
    for n in [6, 256] {
        let (status, v) = create(filter(n)).await;
        assert_eq!(status, 200, "arch_filter of {n} characters: {v}");
        let run = v["run_id"].as_str().expect("run id");
        let (_, stored) = c.server.get_json(&format!("/api/get_run/{run}")).await;
        assert_eq!(stored["args"]["arch_filter"], filter(n), "{stored}");
    }
    let too_long = "Invalid arch filter: longer than 256 characters";
    let too_big = "Invalid arch filter: ";
    for (what, f, says) in [
        ("257 characters", filter(257), too_long),
        (
            "257 ASCII characters",
            format!("avx2|{}", "a".repeat(252)),
            too_long,
        ),
        // Short, but its compiled program is over the 256 KiB size limit.
        (
            "a pattern too big to compile",
            "avx2|\\w{1000}".to_string(),
            too_big,
        ),
    ] {
        let before = snapshot(&c).await;
        let reply = create(f).await;
        refused("arch_filter", what, "/api/create_run", reply, 400, says);
        assert_eq!(
            snapshot(&c).await,
            before,
            "arch_filter {what} changed something"
        );
    }
}

#[tokio::test]
async fn finished_runs_page_is_1_to_1000000() {
    let c = ctx().await;
    for page in [1, 1_000_000] {
        let (status, v) = c
            .server
            .get_json(&format!("/api/finished_runs?page={page}"))
            .await;
        assert_eq!(status, 200, "page {page}: {v}");
        assert!(v.is_object(), "page {page}: {v}");
    }
    for page in ["0", "1000001", "18446744073709551616", "-1"] {
        let reply = c
            .server
            .get_json(&format!("/api/finished_runs?page={page}"))
            .await;
        refused(
            "finished_runs?page",
            page,
            "/api/finished_runs",
            reply,
            400,
            "Please provide a valid Page number.",
        );
    }
}

#[tokio::test]
async fn calc_elo_counts_are_0_to_2_pow_40() {
    let c = ctx().await;
    let max = 1u64 << 40;
    for query in [
        format!("W={max}&D={max}&L={max}"),
        format!("W={max}&D=0&L=1"),
        format!("LL=0&LD={max}&DDWL={max}&WD={max}&WW=1"),
    ] {
        let (status, v) = c.server.get_json(&format!("/api/calc_elo?{query}")).await;
        assert_eq!(status, 200, "calc_elo?{query}: {v}");
        assert!(v.get("error").is_none(), "calc_elo?{query}: {v}");
    }
    for (cell, query) in [
        ("W", format!("W={}&D=1&L=1", max + 1)),
        ("D", format!("W=1&D={}&L=1", max + 1)),
        ("L", "W=1&D=1&L=-1".to_string()),
        ("WW", format!("LL=1&LD=1&DDWL=1&WD=1&WW={}", max + 1)),
        ("LL", "LL=-1&LD=1&DDWL=1&WD=1&WW=1".to_string()),
    ] {
        let reply = c.server.get_json(&format!("/api/calc_elo?{query}")).await;
        refused(
            "calc_elo counts",
            &query,
            "/api/calc_elo",
            reply,
            400,
            &format!("{cell} must be a non-negative integer of at most {max}"),
        );
    }
}

#[tokio::test]
async fn json_bodies_are_at_most_api_body_limit_bytes() {
    let c = ctx().await;
    let limit = 1024 * 1024;
    let w = Worker::new("bob", 4, 1);
    // A worker_log body padded with whitespace (valid JSON) to a given length.
    let body = |len: usize, message: &str| {
        let text =
            json!({"password": PASSWORD, "worker_info": w.info, "message": message}).to_string();
        assert!(text.len() <= len);
        format!("{text}{}", " ".repeat(len - text.len()))
    };
    let before = snapshot(&c).await;
    let reply = post_raw(&c.server, "/api/worker_log", body(limit + 1, "outside")).await;
    refused(
        "JSON bodies",
        "1 MiB + 1 byte",
        "/api/worker_log",
        reply,
        413,
        "request body is too large (limit 1048576 bytes)",
    );
    assert_eq!(
        snapshot(&c).await,
        before,
        "a refused body changed something"
    );
    let (status, v) = post_raw(&c.server, "/api/worker_log", body(limit, "inside")).await;
    assert_eq!(status, 200, "a body of exactly 1 MiB: {v}");
    assert_eq!(messages(&c, "worker_log"), vec!["inside".to_string()]);
}

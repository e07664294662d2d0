//! The hostile-client findings, each reproduced: impossible results, silent connections,
//! unauthenticated upload memory, password spraying, over-trusted client values, and run
//! mutations on a secondary. Every assertion polls with a generous deadline where time is
//! involved: a slow machine delays these tests but cannot fail them.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::fleet::{
    PASSWORD, Totals, Worker, add_user, approve, create_run, fixed_args, sprt_args,
};
use crate::harness::{Opts, TestServer};

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

async fn users(server: &TestServer) {
    add_user(server, "owner", &[]);
    add_user(server, "boss", &["--approver"]);
    add_user(server, "mallory", &[]);
}

async fn run_json(server: &TestServer, run: &str) -> Value {
    let (status, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    v
}

async fn task_json(server: &TestServer, run: &str, task: u64) -> Value {
    let (status, v) = server
        .get_json(&format!("/api/get_task/{run}/{task}"))
        .await;
    assert_eq!(status, 200, "{v}");
    v
}

fn stats(w: u64, l: u64, d: u64, p: [u64; 5]) -> Value {
    json!({"wins": w, "losses": l, "draws": d, "crashes": 0, "time_losses": 0, "pentanomial": p})
}

#[tokio::test]
async fn impossible_results_are_refused_and_change_nothing() {
    let server = TestServer::start().await;
    users(&server).await;
    // Another user's SPRT run; mallory's worker gets a task on it.
    let run = create_run(&server, "owner", sprt_args(0.0, 2.0)).await;
    approve(&server, "boss", &run).await;
    let mut w = Worker::new("mallory", 4, 7);
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("task");
    let size = reply["run"]["my_task"]["num_games"]
        .as_u64()
        .expect("num_games");
    let ids = json!({"run_id": run, "task_id": task_id});
    let batch = 2 * reply["run"]["args"]["sprt"]["batch_size"]
        .as_u64()
        .expect("batch_size");
    // One honest batch first, so the totals are not zero.
    let mut honest = Totals::default();
    while honest.games() < batch {
        honest.play_pair(&mut w.rng, EVEN);
    }
    let mut body = ids.clone();
    body["stats"] = honest.json();
    let (status, v) = w.call(&server, "/api/update_task", body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["task_alive"], true, "{v}");
    let before_run = run_json(&server, &run).await;
    let before_task = task_json(&server, &run, task_id).await;

    let half = 1u64 << 63;
    let max = u64::MAX;
    let over = size + 2;
    let cases = [
        ("wins = losses = 2^63", stats(half, half, 0, [0; 5])),
        (
            "crafted pentanomial overflow",
            stats(0, half, 0, [half / 2, 0, 0, 0, 0]),
        ),
        ("pentanomial sum wraps", stats(2, 0, 0, [max, 0, 0, 0, 2])),
        (
            "more games than the task has",
            stats(over / 2, over / 2, 0, [0, 0, over / 2, 0, 0]),
        ),
        (
            "pentanomial does not match",
            stats(6, 2, 8, [0, 0, 8, 0, 0]),
        ),
        ("crashes above the games", {
            let mut s = honest.json();
            s["crashes"] = json!(1000);
            s
        }),
        ("time losses above the games", {
            let mut s = honest.json();
            s["time_losses"] = json!(max);
            s
        }),
    ];
    for (what, s) in cases {
        let mut body = ids.clone();
        body["stats"] = s;
        let (status, v) = w.call(&server, "/api/update_task", body).await;
        assert_eq!(status, 400, "{what}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.starts_with("/api/update_task: "), "{what}: {e}");
        // Nothing changed: the run's totals, its SPRT, the task.
        let after_run = run_json(&server, &run).await;
        assert_eq!(after_run["results"], before_run["results"], "{what}");
        assert_eq!(
            after_run["args"]["sprt"], before_run["args"]["sprt"],
            "{what}"
        );
        assert_eq!(after_run["finished"], false, "{what}");
        let after_task = task_json(&server, &run, task_id).await;
        assert_eq!(after_task["stats"], before_task["stats"], "{what}");
        assert_eq!(after_task["active"], true, "{what}: {after_task}");
    }
    // An SPSA block whose counts overflow is refused too (on any run).
    let mut body = ids.clone();
    body["stats"] = honest.json();
    body["spsa"] = json!({"num_games": 2, "wins": max, "losses": 3, "draws": 0, "sig": 0});
    let (status, v) = w.call(&server, "/api/update_task", body).await;
    assert_eq!(status, 400, "{v}");
    // The honest worker carries on.
    while honest.games() < 2 * batch {
        honest.play_pair(&mut w.rng, EVEN);
    }
    let mut body = ids.clone();
    body["stats"] = honest.json();
    let (status, v) = w.call(&server, "/api/update_task", body).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["task_alive"], true);
    let r = &run_json(&server, &run).await["results"];
    assert_eq!(r["wins"], honest.wins);
    assert_eq!(r["losses"], honest.losses);
    assert_eq!(r["draws"], honest.draws);
}

#[tokio::test]
async fn client_values_are_bounded() {
    let server = TestServer::start().await;
    users(&server).await;
    let run = create_run(&server, "owner", fixed_args(800_000)).await;
    approve(&server, "boss", &run).await;
    // concurrency 2^32 - 1 is refused, not given the whole run.
    let mut w = Worker::new("mallory", 4, 8);
    w.info["concurrency"] = json!(u32::MAX);
    let (status, v) = w.call(&server, "/api/request_task", json!({})).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("concurrency")
    );
    // Over-long free text.
    let mut w = Worker::new("mallory", 4, 9);
    w.info["uname"] = json!("x".repeat(100_000));
    let (status, v) = w.call(&server, "/api/request_task", json!({})).await;
    assert_eq!(status, 400, "{v}");
    let w = Worker::new("mallory", 4, 10);
    let (status, v) = w
        .call(
            &server,
            "/api/worker_log",
            json!({"message": "m".repeat(100_000)}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    // page = 2^64 - 1 and calc_elo with u64::MAX counts: clear 400s.
    let (status, v) = server
        .get_json("/api/finished_runs?page=18446744073709551615")
        .await;
    assert_eq!(status, 400, "{v}");
    let (status, v) = server
        .get_json("/api/calc_elo?W=18446744073709551615&D=1&L=18446744073709551615")
        .await;
    assert_eq!(status, 400, "{v}");
    // A huge arch_filter is refused at creation (never compiled under the scheduler lock).
    let mut args = fixed_args(1000);
    args["arch_filter"] = json!(format!("({})", "avx2|".repeat(180_000)));
    let (status, v) = server
        .post_json(
            "/api/create_run",
            &json!({"username": "owner", "password": PASSWORD, "args": args}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .contains("arch_filter"),
        "{v}"
    );
}

/// A server whose user mallory may have one machine per address, with a run to work on.
async fn machine_limited(opts: Opts) -> TestServer {
    let server = TestServer::start_with(opts).await;
    users(&server).await;
    crate::fleet::user_cli(&server, &["set", "mallory", "--machine-limit", "1"]);
    let run = create_run(&server, "owner", fixed_args(100_000)).await;
    approve(&server, "boss", &run).await;
    server
}

/// How many of four workers of mallory, each sending its own `X-Forwarded-For`, get a task.
async fn granted_with_forwarded(server: &TestServer, forwarded: impl Fn(u32) -> String) -> usize {
    let mut granted = 0;
    for n in 0..4 {
        let mut w = Worker::new("mallory", 1, 100 + n);
        w.forwarded_for = Some(forwarded(n));
        if w.request_task(server).await.get("run").is_some() {
            granted += 1;
        }
    }
    granted
}

#[tokio::test]
async fn forwarded_for_is_not_trusted_unless_configured() {
    let server = machine_limited(Opts::new()).await;
    let granted = granted_with_forwarded(&server, |n| format!("198.51.100.{n}")).await;
    assert_eq!(
        granted, 1,
        "the machine limit of 1 counts the socket's address"
    );
}

#[tokio::test]
async fn a_trusted_proxy_names_the_client_only_in_the_hop_it_added() {
    // nginx's `$proxy_add_x_forwarded_for` appends the address it saw to whatever the client
    // sent: only that last hop is the proxy's word; the ones before it are the client's.
    let server =
        machine_limited(Opts::new().set("trusted_proxies", r#"["127.0.0.1", "::1"]"#)).await;
    let granted = granted_with_forwarded(&server, |n| format!("198.51.100.{n}, 203.0.113.5")).await;
    assert_eq!(
        granted, 1,
        "the machine limit of 1 counts the address the proxy saw, not one the client claims"
    );
    // A chain of trusted proxies: the hop before them.
    let mut w = Worker::new("mallory", 1, 200);
    w.forwarded_for = Some("198.51.100.9, 203.0.113.6, 127.0.0.1".into());
    assert!(w.request_task(&server).await.get("run").is_some());
    let mut w = Worker::new("mallory", 1, 201);
    w.forwarded_for = Some("198.51.100.10, 203.0.113.6, 127.0.0.1".into());
    assert!(w.request_task(&server).await.get("run").is_none());
}

/// Reads from `s` until the peer closes (Ok) or `limit` passes (Err).
async fn read_until_closed(s: &mut TcpStream, limit: Duration) -> Result<Vec<u8>, ()> {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match tokio::time::timeout_at(deadline, s.read(&mut buf)).await {
            Err(_) => return Err(()),
            Ok(Ok(0)) | Ok(Err(_)) => return Ok(got),
            Ok(Ok(n)) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[tokio::test]
async fn silent_and_slow_connections_are_closed() {
    let server = TestServer::start_with(
        Opts::new()
            .set("header_read_timeout_s", 1)
            .set("keepalive_timeout_s", 1)
            .set("body_read_timeout_s", 1),
    )
    .await;
    let long = Duration::from_secs(60);
    // Nothing at all.
    let mut silent = TcpStream::connect(server.addr).await.expect("connect");
    // Half a header.
    let mut half = TcpStream::connect(server.addr).await.expect("connect");
    half.write_all(b"POST /api/beat HTTP/1.1\r\nHost: x\r\nContent-Le")
        .await
        .expect("write");
    // A complete header and a body that never comes.
    let mut slow = TcpStream::connect(server.addr).await.expect("connect");
    slow.write_all(
        b"POST /api/beat HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
          Content-Length: 100\r\n\r\n{\"password\":",
    )
    .await
    .expect("write");
    // A keep-alive connection after one answered request.
    let mut idle = TcpStream::connect(server.addr).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    assert!(read_until_closed(&mut silent, long).await.is_ok(), "silent");
    assert!(
        read_until_closed(&mut half, long).await.is_ok(),
        "half header"
    );
    let reply = read_until_closed(&mut slow, long).await.expect("slow body");
    let text = String::from_utf8_lossy(&reply);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        text.contains("/api/beat: request body not received"),
        "{text}"
    );
    let reply = read_until_closed(&mut idle, long).await.expect("idle");
    assert!(String::from_utf8_lossy(&reply).starts_with("HTTP/1.1 200"));
    // The server still serves.
    assert_eq!(server.health().await["status"], "ok");
    assert!(
        server
            .metric("shoal_connections_timed_out_total", &[("phase", "header")])
            .await
            >= 2.0
    );
}

#[tokio::test]
async fn shutdown_closes_idle_and_silent_connections_at_once() {
    // Long timeouts and grace: only closing at once can make the server exit early.
    let mut server = TestServer::start_with(
        Opts::new()
            .set("header_read_timeout_s", 600)
            .set("keepalive_timeout_s", 600)
            .set("shutdown_grace_s", 600),
    )
    .await;
    let mut conns = Vec::new();
    for _ in 0..5 {
        conns.push(TcpStream::connect(server.addr).await.expect("connect"));
    }
    let mut half = TcpStream::connect(server.addr).await.expect("connect");
    half.write_all(b"GET /healthz HTTP/1.1\r\nHo")
        .await
        .expect("write");
    let mut idle = TcpStream::connect(server.addr).await.expect("connect");
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .expect("write");
    let mut buf = [0u8; 512];
    let n = idle.read(&mut buf).await.expect("reply");
    assert!(n > 0);
    let started = Instant::now();
    server.signal(libc::SIGTERM);
    let status = server.wait_exit(120);
    assert!(status.success(), "{status:?}");
    // Far less than the 600 s the connections could have been held.
    assert!(
        started.elapsed() < Duration::from_secs(120),
        "{:?}",
        started.elapsed()
    );
    drop(conns);
}

fn gz(text: &[u8]) -> Vec<u8> {
    use std::io::Write as _;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    e.write_all(text).expect("write");
    e.finish().expect("finish")
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

/// The head of an upload body in the official worker's key order, up to the opening quote of
/// the pgn string.
fn upload_head(password: &str, wi: &Value, run: &str, task: u64) -> String {
    format!(
        "{{\"password\": {}, \"run_id\": \"{run}\", \"task_id\": {task}, \"message\": \"\", \
         \"worker_info\": {wi}, \"pgn\": \"",
        json!(password)
    )
}

/// Posts a raw upload_pgn body.
async fn post_upload(server: &TestServer, body: String) -> reqwest::Response {
    server
        .client
        .post(server.url("/api/upload_pgn"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("send")
}

#[tokio::test]
async fn uploads_are_authenticated_before_their_body_is_read() {
    let server = TestServer::start_with(
        Opts::new()
            .set("pgn_inflated_limit_bytes", 1 << 20)
            .set("api_body_limit_bytes", 64 * 1024),
    )
    .await;
    users(&server).await;
    let run = create_run(&server, "owner", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    let w = Worker::new("mallory", 4, 11);
    let reply = w.request_task(&server).await;
    let task = reply["task_id"].as_u64().expect("task");

    // A declared 30 MB body with a wrong password: refused after its head, the rest never sent.
    for (password, want) in [("wrong", "HTTP/1.1 401"), (PASSWORD, "HTTP/1.1 400")] {
        // (With the right password, an unknown task is refused the same way.)
        let task_id = if password == PASSWORD { 999 } else { task };
        let head = upload_head(password, &w.info, &run, task_id);
        let mut s = TcpStream::connect(server.addr).await.expect("connect");
        let request = format!(
            "POST /api/upload_pgn HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
             Content-Length: 30000000\r\n\r\n{head}AAAA"
        );
        s.write_all(request.as_bytes()).await.expect("write");
        let reply = read_until_closed(&mut s, Duration::from_secs(60))
            .await
            .expect("answered without the body");
        let text = String::from_utf8_lossy(&reply);
        assert!(text.starts_with(want), "{password}: {text}");
        assert!(text.contains("/api/upload_pgn: "), "{text}");
    }

    // pgn before the credentials: no more than api_body_limit_bytes is read unchecked.
    let big = "A".repeat(200 * 1024);
    let body = format!(
        "{{\"pgn\": \"{big}\", \"password\": \"wrong\", \"run_id\": \"{run}\", \"task_id\": {task}, \
         \"worker_info\": {}}}",
        w.info
    );
    let r = post_upload(&server, body).await;
    assert_eq!(r.status().as_u16(), 413);

    // A gzip bomb from the task's own worker: refused, not stored.
    let bomb = gz(&vec![b'0'; 4 << 20]);
    let body = format!(
        "{}{}\"}}",
        upload_head(PASSWORD, &w.info, &run, task),
        b64(&bomb)
    );
    let r = post_upload(&server, body).await;
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("json");
    assert!(
        v["error"].as_str().unwrap_or_default().contains("inflates"),
        "{v}"
    );
    let (status, _) = server.get_json(&format!("/api/pgn/{run}-{task}.pgn")).await;
    assert_eq!(status, 404, "the bomb was not stored");

    // A real PGN in the official order is stored and served.
    let pgn = gz(b"[Event \"x\"]\n1. e4 e5 *\n");
    let body = format!(
        "{}{}\"}}",
        upload_head(PASSWORD, &w.info, &run, task),
        b64(&pgn)
    );
    let r = post_upload(&server, body).await;
    assert_eq!(r.status().as_u16(), 200);
    let r = server
        .client
        .get(server.url(&format!("/api/pgn/{run}-{task}.pgn")))
        .send()
        .await
        .expect("get");
    assert_eq!(r.status().as_u16(), 200);
    let stored = r.bytes().await.expect("bytes");
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&stored[..]), &mut text)
        .expect("gzip");
    assert_eq!(text, "[Event \"x\"]\n1. e4 e5 *\n");
}

/// Posts a worker call from a chosen loopback source address.
async fn call_from(
    source: std::net::IpAddr,
    server: &TestServer,
    path: &str,
    body: &Value,
) -> (u16, Value, Option<String>) {
    let client = reqwest::Client::builder()
        .local_address(source)
        .build()
        .expect("client");
    let r = client
        .post(server.url(path))
        .json(body)
        .send()
        .await
        .expect("send");
    let status = r.status().as_u16();
    let retry = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (status, r.json().await.expect("json"), retry)
}

#[tokio::test]
async fn a_password_spray_is_throttled_and_real_workers_are_served() {
    let server = TestServer::start().await;
    users(&server).await;
    add_user(&server, "victim", &[]);
    crate::fleet::user_cli(&server, &["set", "owner", "--machine-limit", "100000"]);
    let run = create_run(&server, "owner", fixed_args(100_000)).await;
    approve(&server, "boss", &run).await;
    let sprayer: std::net::IpAddr = "127.0.0.1".parse().expect("ip");
    let other: std::net::IpAddr = "127.0.0.2".parse().expect("ip");
    let victim_info = Worker::new("victim", 1, 500).info;
    // 40 threads of wrong passwords for the victim, through request_task and request_version.
    let mut spray = Vec::new();
    for t in 0..40u32 {
        let api = server.url("/api/");
        let info = victim_info.clone();
        spray.push(tokio::spawn(async move {
            let client = reqwest::Client::builder()
                .local_address(sprayer)
                .build()
                .expect("client");
            let mut statuses = Vec::new();
            let mut i = 0u32;
            while i < 25 {
                let path = if i.is_multiple_of(2) {
                    "request_task"
                } else {
                    "request_version"
                };
                let body = json!({"password": format!("guess-{t}-{i}"), "worker_info": info});
                if let Ok(r) = client.post(format!("{api}{path}")).json(&body).send().await {
                    statuses.push(r.status().as_u16());
                }
                i += 1;
            }
            statuses
        }));
    }
    // Meanwhile real workers from the same address are served, not "too busy", for as long
    // as the spray lasts (and at least ten times).
    let mut n = 0;
    while n < 10 || spray.iter().any(|s| !s.is_finished()) {
        let w = Worker::new("owner", 1, 600 + n);
        let body = json!({"password": PASSWORD, "worker_info": w.info});
        let (status, v, _) = call_from(sprayer, &server, "/api/request_task", &body).await;
        assert_eq!(status, 200, "{v}");
        assert!(
            v.get("run").is_some(),
            "a real worker is served during the spray: {v}"
        );
        n += 1;
    }
    let mut statuses = Vec::new();
    for s in spray {
        statuses.extend(s.await.expect("spray task"));
    }
    let throttled = statuses.iter().filter(|s| **s == 429).count();
    let refused = statuses.iter().filter(|s| **s == 401).count();
    assert!(throttled > 0, "the spray was throttled: {statuses:?}");
    assert!(
        refused <= 10,
        "at most the pair limit of guesses was checked: {refused}"
    );
    assert!(!statuses.contains(&200), "no guess succeeded");
    // The sprayed address is refused for the victim even with the right password now.
    let body = json!({"password": PASSWORD, "worker_info": victim_info});
    let (status, v, retry) = call_from(sprayer, &server, "/api/request_task", &body).await;
    assert_eq!(status, 429, "{v}");
    assert!(retry.is_some_and(|r| r.parse::<u64>().is_ok_and(|s| s >= 1)));
    assert!(
        v["error"]
            .as_str()
            .unwrap_or_default()
            .starts_with("/api/request_task: too many failed authentications")
    );
    // The real password still works from another address.
    let (status, v, _) = call_from(other, &server, "/api/request_task", &body).await;
    assert_eq!(status, 200, "{v}");
    assert!(v.get("run").is_some(), "{v}");
}

#[tokio::test]
async fn unknown_users_and_wrong_passwords_cost_the_same_check() {
    let server = TestServer::start().await;
    users(&server).await;
    let slow_checks = || async { server.metric("shoal_auth_slow_checks_total", &[]).await };
    let before = slow_checks().await;
    for user in ["owner", "nobody"] {
        let body = json!({"password": "wrong", "worker_info": {"username": user}});
        let (status, v) = server.post_json("/api/request_version", &body).await;
        assert_eq!(status, 401, "{v}");
        assert_eq!(
            v["error"],
            "/api/request_version: Invalid username or password."
        );
    }
    // One argon2 check each: an unknown user is not answered faster.
    assert_eq!(slow_checks().await - before, 2.0);
}

#[tokio::test]
async fn run_mutations_are_primary_only() {
    let primary = TestServer::start().await;
    users(&primary).await;
    let run = create_run(&primary, "owner", fixed_args(1000)).await;
    let secondary = TestServer::start_with(
        Opts::new()
            .data_dir(&primary.data_dir)
            .set("primary_port", 1),
    )
    .await;
    for (path, body) in [
        (
            "create_run",
            json!({"username": "owner", "password": PASSWORD, "args": fixed_args(1000)}),
        ),
        (
            "approve_run",
            json!({"username": "boss", "password": PASSWORD, "run_id": run}),
        ),
        (
            "purge_run",
            json!({"username": "boss", "password": PASSWORD, "run_id": run}),
        ),
    ] {
        let (status, v) = secondary.post_json(&format!("/api/{path}"), &body).await;
        assert_eq!(status, 503, "{path}: {v}");
        assert_eq!(
            v["error"],
            format!("/api/{path}: primary instance required")
        );
    }
    // The primary still has the run unapproved, and approves it.
    assert_eq!(run_json(&primary, &run).await["approved"], false);
    approve(&primary, "boss", &run).await;
    assert_eq!(run_json(&primary, &run).await["approved"], true);
}

/// A worker call's body with a chosen password, for a task that need not exist (the
/// credentials are checked first).
fn beat_body(password: &str, info: &Value) -> Value {
    json!({"password": password, "worker_info": info, "run_id": "0".repeat(24), "task_id": 0})
}

#[tokio::test]
async fn each_wrong_password_counts_once_on_every_endpoint() {
    let server = TestServer::start().await;
    users(&server).await;
    let info = Worker::new("mallory", 1, 700).info;
    // beat first tries the event loop's fast path: a guess it cannot settle there must still
    // count once, not twice. The pair's limit is 10 guesses.
    for i in 0..10 {
        let (status, v) = server
            .post_json("/api/beat", &beat_body(&format!("guess-{i}"), &info))
            .await;
        assert_eq!(status, 401, "guess {i} is checked and refused: {v}");
    }
    let (status, v) = server
        .post_json("/api/beat", &beat_body("guess-10", &info))
        .await;
    assert_eq!(status, 429, "the eleventh guess is throttled: {v}");
}

/// One attempt of the test below: `n` logins of a user whose password the server has not
/// verified yet wait for a pool token (all general tokens held for `ms`) and go away.
async fn unchecked_logins_go_away(server: &TestServer, n: usize, ms: u64, last: bool) -> bool {
    use crate::core::{hang_up, poll_held, raw_request, read_all, replied, sleep_request};
    let h = server.health().await;
    let general = h["pool"]["tokens"].as_u64().expect("tokens")
        - h["pool"]["reserved"].as_u64().expect("reserved");
    let holders: Vec<std::net::TcpStream> = (0..general)
        .map(|i| raw_request(server.addr, &sleep_request(ms, &format!("hold{i}"))))
        .collect();
    let held = || holders.iter().all(|h| !replied(h));
    let give_up = |holders: Vec<std::net::TcpStream>, what: &str| {
        for h in holders {
            read_all(h);
        }
        crate::core::too_slow(last, what)
    };
    if poll_held(server, "general tokens held", held, |h| {
        h["pool"]["in_use"].as_u64() >= Some(general)
    })
    .await
    .is_none()
    {
        return give_up(holders, "general tokens held");
    }
    let before = server.health().await["pool"]["waiting"]
        .as_u64()
        .expect("waiting");
    let body =
        json!({"password": PASSWORD, "worker_info": Worker::new("owner", 1, 800).info}).to_string();
    let request = format!(
        "POST /api/request_version HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let logins: Vec<std::net::TcpStream> =
        (0..n).map(|_| raw_request(server.addr, &request)).collect();
    if poll_held(server, "the logins waiting", held, |h| {
        h["pool"]["waiting"].as_u64() >= Some(before + n as u64)
    })
    .await
    .is_none()
    {
        for l in logins {
            read_all(l);
        }
        return give_up(holders, "the logins waiting");
    }
    let replies: Vec<String> = logins.into_iter().map(hang_up).collect();
    if !held() {
        return give_up(holders, "the logins gone while the tokens are held");
    }
    assert!(replies.iter().all(String::is_empty), "{replies:?}");
    for h in holders {
        read_all(h);
    }
    true
}

#[tokio::test]
async fn a_login_that_goes_away_before_its_check_is_not_counted() {
    // Few tokens (the general ones are held by /debug/sleep), and a pair limit of 3.
    let server = TestServer::start_with(
        Opts::new()
            .set("threadpool_tokens", 4)
            .set("task_semaphore_size", 1)
            .set("auth_throttle_per_user_ip", 3),
    )
    .await;
    users(&server).await;
    // owner's real password, not yet verified by this server: each login waits for a pool
    // token to be checked (the throttle counts only checks that ran). Three of them go away.
    crate::core::with_growing_holds(&server, |ms, last| {
        unchecked_logins_go_away(&server, 3, ms, last)
    })
    .await;
    // Their checks never ran, so nothing was counted: the real password works.
    let body = json!({"password": PASSWORD, "worker_info": Worker::new("owner", 1, 801).info});
    let (status, v) = server.post_json("/api/request_version", &body).await;
    assert_eq!(status, 200, "{v}");
}

/// A gzip of `n` members, each of `member` zero bytes: cheap to make, slow to inflate.
fn gz_zeros(member: usize, n: usize) -> Vec<u8> {
    let one = gz(&vec![0u8; member]);
    one.repeat(n)
}

#[tokio::test]
async fn an_upload_keeps_its_turn_until_its_pool_work_ends() {
    use crate::core::{hang_up, raw_request};
    // One turn; a cap high enough for the slow gzip below to be accepted. No periodic job:
    // "a pool token in use" below must be A's upload, not a job's tick (which made this
    // test hang up on A before its body was read, on a loaded machine).
    let server = TestServer::start_with(
        Opts::new()
            .set("pgn_upload_concurrency", 1)
            .set("pgn_inflated_limit_bytes", 1u64 << 40)
            .set("periodic_jobs", false),
    )
    .await;
    users(&server).await;
    crate::fleet::user_cli(&server, &["set", "mallory", "--machine-limit", "100"]);
    let run = create_run(&server, "owner", fixed_args(100_000)).await;
    approve(&server, "boss", &run).await;
    let (wa, wb) = (
        Worker::new("mallory", 1, 900),
        Worker::new("mallory", 1, 901),
    );
    let ta = wa.request_task(&server).await["task_id"]
        .as_u64()
        .expect("task a");
    let tb = wb.request_task(&server).await["task_id"]
        .as_u64()
        .expect("task b");
    // A: a PGN that takes seconds to inflate; its sender goes away once the server has it.
    let slow = gz_zeros(64 << 20, 128);
    let body = format!(
        "{}{}\"}}",
        upload_head(PASSWORD, &wa.info, &run, ta),
        b64(&slow)
    );
    let request = format!(
        "POST /api/upload_pgn HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let a = tokio::task::spawn_blocking({
        let addr = server.addr;
        move || raw_request(addr, &request)
    })
    .await
    .expect("send a");
    server
        .wait_health(120, "a's PGN in the pool", |h| h["pool"]["in_use"] != 0)
        .await;
    tokio::task::spawn_blocking(move || hang_up(a))
        .await
        .expect("hang up");
    // B: a small PGN, from a worker that stays. It may be stored only once A's pool work
    // has ended (one turn): A's PGN is then already stored, or it never will be.
    let pgn = gz(b"[Event \"b\"]\n1. d4 d5 *\n");
    let body = format!(
        "{}{}\"}}",
        upload_head(PASSWORD, &wb.info, &run, tb),
        b64(&pgn)
    );
    let r = server
        .client
        .post(server.url("/api/upload_pgn"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("send b");
    let status_b = r.status().as_u16();
    let a_path = format!("/api/pgn/{run}-{ta}.pgn");
    let a_stored_then = server
        .client
        .get(server.url(&a_path))
        .send()
        .await
        .expect("get a")
        .status()
        == 200;
    assert!([200, 503].contains(&status_b), "{status_b}");
    server
        .wait_health(300, "the pool idle", |h| {
            h["pool"]["in_use"] == 0 && h["pool"]["waiting"] == 0
        })
        .await;
    let a_stored_later = server
        .client
        .get(server.url(&a_path))
        .send()
        .await
        .expect("get a")
        .status()
        == 200;
    // A's PGN reached the server whole: its pool work runs to the end and stores it, though
    // its sender is gone.
    assert!(a_stored_later, "A's upload was never stored");
    // B, stored, was stored only after A: the turn was not given back early.
    if status_b == 200 {
        assert!(
            a_stored_then,
            "B's upload was stored while A's upload still held the pool: the turn was given back early"
        );
    }
}

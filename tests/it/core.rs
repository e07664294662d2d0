//! The server core's contract: event loop, offload pool, admission gate, middleware stack,
//! secondaries, shutdown, configuration errors.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::{Value, json};

use crate::harness::{Opts, TestServer, run_bin};

const TOO_BUSY: &str = "Request_task: the server is currently too busy...";

fn has_duration(v: &Value) -> bool {
    v.get("duration")
        .and_then(Value::as_f64)
        .is_some_and(|d| d >= 0.0)
}

/// Sends a raw HTTP/1.1 request and leaves the connection open (to simulate a client that
/// goes away mid-wait by dropping the stream).
fn raw_request(addr: std::net::SocketAddr, request: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(request.as_bytes()).expect("write");
    s
}

fn read_all(mut s: TcpStream) -> String {
    s.set_read_timeout(Some(Duration::from_secs(20)))
        .expect("timeout");
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

#[tokio::test]
async fn defaults_start_and_healthz_answers() {
    let server = TestServer::start().await;
    let (status, body) = server.get_json("/healthz").await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ok");
    assert_eq!(body["primary"], true);
    assert_eq!(body["pool"]["tokens"], 200);
    assert_eq!(body["gate"]["mode"], "fast_reject");
    assert_eq!(body["gate"]["capacity"], 5);
    assert!(has_duration(&body));
    // The generated secret is private to the server's user.
    let meta = std::fs::metadata(server.data_dir.join("secret")).expect("secret file");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    assert!(server.data_dir.join("shoal.db").exists());
}

#[tokio::test]
async fn unknown_api_path_is_json_404_and_wrong_method_has_json_shape() {
    let server = TestServer::start().await;
    let (status, body) = server.post_json("/api/nope", &json!({})).await;
    assert_eq!(status, 404);
    assert_eq!(body["detail"], "Not Found");
    assert!(has_duration(&body));
    let (status, body) = server.get_json("/api/debug/panic").await;
    assert_eq!(status, 405);
    assert_eq!(body["error"], "/api/debug/panic: Method Not Allowed");
    assert!(has_duration(&body));
}

#[tokio::test]
async fn event_loop_and_light_work_stay_responsive_while_slow_work_holds_tokens() {
    // Six tokens: two reserved (request_task's slot holder, the journal writer), four general.
    let server = TestServer::start_with(Opts::new().set("threadpool_tokens", 6)).await;
    let mut slow = Vec::new();
    for i in 0..2 {
        let c = server.client.clone();
        let url = server.url(&format!("/debug/sleep?ms=4000&tag=slow{i}"));
        slow.push(tokio::spawn(async move { c.get(url).send().await }));
    }
    server
        .wait_health(10, "two slow jobs in the pool", |h| {
            h["pool"]["in_use"] == 2
        })
        .await;
    // Many light offloaded requests complete while the slow ones still hold their tokens.
    let mut light = Vec::new();
    for i in 0..40 {
        let c = server.client.clone();
        let url = server.url(&format!("/debug/sleep?ms=0&tag=l{i}"));
        light.push(tokio::spawn(async move { c.get(url).send().await }));
    }
    for l in light {
        let r = l.await.expect("join").expect("light request");
        assert_eq!(r.status(), 200);
    }
    assert!(
        slow.iter().all(|s| !s.is_finished()),
        "light work should finish before the slow work"
    );

    // Now hold every general token: a no-offload route still answers, and reports the
    // saturation.
    for i in 0..2 {
        let c = server.client.clone();
        let url = server.url(&format!("/debug/sleep?ms=3000&tag=fill{i}"));
        slow.push(tokio::spawn(async move { c.get(url).send().await }));
    }
    server
        .wait_health(10, "every general token held", |h| h["pool"]["in_use"] == 4)
        .await;
    let c = server.client.clone();
    let url = server.url("/debug/sleep?ms=0&tag=waiter");
    let waiter = tokio::spawn(async move { c.get(url).send().await });
    server
        .wait_health(10, "a request waiting for a token", |h| {
            h["pool"]["waiting"].as_u64() >= Some(1)
        })
        .await;
    // (Background jobs use the pool too, so "at least".)
    assert_eq!(server.metric("shoal_pool_tokens_in_use", &[]).await, 4.0);
    assert!(server.metric("shoal_pool_tokens_waiting", &[]).await >= 1.0);
    assert!(!waiter.is_finished());
    waiter.await.expect("join").expect("waiter finishes");
    for s in slow {
        assert_eq!(s.await.expect("join").expect("slow").status(), 200);
    }
    server
        .wait_health(5, "pool idle", |h| {
            h["pool"]["in_use"] == 0 && h["pool"]["waiting"] == 0
        })
        .await;
}

#[tokio::test]
async fn fast_reject_answers_excess_at_once_without_pool_tokens() {
    let server = TestServer::start_with(Opts::new().set("task_semaphore_size", 3)).await;
    let by_gate = [("caller", "/debug/gate")];
    let acquired_before = server.metric("shoal_pool_acquired_total", &by_gate).await;
    let mut calls = Vec::new();
    for i in 0..12 {
        let c = server.client.clone();
        let url = server.url(&format!("/debug/gate?ms=1500&tag={i}"));
        calls.push(tokio::spawn(async move {
            let r = c.post(url).send().await.expect("gate call");
            let v: Value = r.json().await.expect("json");
            (v, std::time::Instant::now())
        }));
    }
    let mut admitted = Vec::new();
    let mut rejected = Vec::new();
    for c in calls {
        let (v, at) = c.await.expect("join");
        assert!(has_duration(&v), "{v}");
        if v.get("task_waiting").is_some() {
            assert_eq!(v["task_waiting"], false);
            assert_eq!(v["info"], TOO_BUSY);
            rejected.push(at);
        } else {
            admitted.push((v["seq"].as_u64().expect("seq"), at));
        }
    }
    assert_eq!(admitted.len(), 3, "exactly the gate's capacity is admitted");
    assert_eq!(rejected.len(), 9);
    // Every refusal came back before the first admitted caller had finished its work.
    let first_done = admitted.iter().map(|(_, at)| *at).min().expect("some");
    assert!(rejected.iter().all(|at| *at < first_done));
    // Refused callers never took a pool token: only the three admitted ones did.
    let acquired = server.metric("shoal_pool_acquired_total", &by_gate).await - acquired_before;
    assert_eq!(acquired, 3.0);
    let rejected_metric = server
        .metric(
            "shoal_gate_rejected_total",
            &[("gate", "request_task"), ("mode", "fast_reject")],
        )
        .await;
    assert_eq!(rejected_metric, 9.0);
    let h = server.health().await;
    assert_eq!(
        (h["gate"]["running"].as_u64(), h["gate"]["queued"].as_u64()),
        (Some(0), Some(0))
    );
}

#[tokio::test]
async fn queue_mode_admits_up_to_capacity_in_fifo_order_and_times_out_the_rest() {
    let server = TestServer::start_with(
        Opts::new()
            .set("task_semaphore_size", 2)
            .set("admission_queue", 2)
            .set("admission_timeout_s", 1.0),
    )
    .await;
    let h = server.health().await;
    assert_eq!(h["gate"]["mode"], "queue");
    assert_eq!(h["gate"]["capacity"], 4);
    let mut calls = Vec::new();
    for i in 0..7u64 {
        let c = server.client.clone();
        let url = server.url(&format!("/debug/gate?ms=1500&tag={i}"));
        calls.push(tokio::spawn(async move {
            let r = c.post(url).send().await.expect("gate call");
            r.json::<Value>().await.expect("json")
        }));
        // Known arrival order.
        let expect_admitted = (i + 1).min(4);
        server
            .wait_health(5, "arrival", |h| {
                h["gate"]["running"].as_u64().unwrap_or(0)
                    + h["gate"]["queued"].as_u64().unwrap_or(0)
                    == expect_admitted
            })
            .await;
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    let mut served = Vec::new();
    for (i, c) in calls.into_iter().enumerate() {
        let v = c.await.expect("join");
        assert!(has_duration(&v), "{v}");
        if i < 4 {
            assert!(
                v.get("task_waiting").is_none(),
                "caller {i} should be served: {v}"
            );
            served.push((v["seq"].as_u64().expect("seq"), i));
        } else {
            assert_eq!(v["info"], TOO_BUSY, "caller {i} should time out: {v}");
        }
    }
    served.sort();
    let order: Vec<usize> = served.iter().map(|(_, i)| *i).collect();
    assert_eq!(order, vec![0, 1, 2, 3], "served in arrival order");
    let rejected = server
        .metric("shoal_gate_rejected_total", &[("mode", "queue")])
        .await;
    assert_eq!(rejected, 3.0);
}

#[tokio::test]
async fn disconnected_clients_give_back_every_permit() {
    let server = TestServer::start_with(Opts::new().set("task_semaphore_size", 4)).await;
    let request = |ms: u64, tag: &str| {
        format!(
            "POST /debug/gate?ms={ms}&tag={tag} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n"
        )
    };
    // One caller inside the critical section, then two queued behind it.
    let holder = raw_request(server.addr, &request(3000, "holder"));
    server
        .wait_health(5, "holder inside", |h| h["gate"]["running"] == 1)
        .await;
    let q1 = raw_request(server.addr, &request(10, "q1"));
    let q2 = raw_request(server.addr, &request(10, "q2"));
    server
        .wait_health(5, "two queued", |h| h["gate"]["queued"] == 2)
        .await;
    // The queued clients go away: their places come back while the holder still works.
    drop(q1);
    drop(q2);
    server
        .wait_health(5, "queue emptied by disconnects", |h| {
            h["gate"]["queued"] == 0 && h["gate"]["running"] == 1
        })
        .await;
    // The holder goes away too: its slot stays held until its work really ends, then frees.
    drop(holder);
    server
        .wait_health(10, "everything released", |h| {
            h["gate"]["running"] == 0
                && h["gate"]["queued"] == 0
                && h["pool"]["in_use"] == 0
                && h["pool"]["waiting"] == 0
        })
        .await;
    // And the gate is whole again: capacity callers are admitted.
    let (status, v) = server
        .post_json("/debug/gate?ms=0&tag=after", &json!({}))
        .await;
    assert_eq!(status, 200);
    assert!(v.get("seq").is_some(), "{v}");
}

#[tokio::test]
async fn secondary_refuses_primary_only_paths_in_json_shape() {
    // Port 0 is not primary_port 1: a secondary.
    let server = TestServer::start_with(Opts::new().set("primary_port", 1)).await;
    assert_eq!(server.health().await["primary"], false);
    for path in [
        "request_version",
        "request_task",
        "update_task",
        "beat",
        "request_spsa",
        "failed_task",
        "stop_run",
        "worker_log",
    ] {
        let (status, body) = server.post_json(&format!("/api/{path}"), &json!({})).await;
        assert_eq!(status, 503, "{path}");
        assert_eq!(
            body["error"],
            format!("/api/{path}: primary instance required"),
            "{path}"
        );
        assert!(has_duration(&body));
    }
    let (status, body) = server.post_json("/api/upload_pgn", &json!({})).await;
    assert_ne!(status, 503, "upload_pgn is served by secondaries: {body}");
    assert!(has_duration(&body));
}

#[tokio::test]
async fn bad_bodies_get_clear_errors_and_change_nothing() {
    let server = TestServer::start_with(Opts::new().set("api_body_limit_bytes", 2048)).await;
    let c = &server.client;
    let url = server.url("/debug/kv/probe");
    // Over the limit, declared.
    let big = json!({"value": "x".repeat(5000)});
    let r = c.put(&url).json(&big).send().await.expect("put");
    assert_eq!(r.status(), 413);
    let v: Value = r.json().await.expect("json");
    assert_eq!(
        v["error"],
        "/debug/kv/probe: request body is too large (limit 2048 bytes)"
    );
    assert!(has_duration(&v));
    // Over the limit, chunked (no Content-Length): the stream is cut at the limit.
    let chunk = "x".repeat(4000);
    let raw = format!(
        "PUT /debug/kv/probe HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n{:x}\r\n{{\"value\": \"{chunk}\"}}\r\n0\r\n\r\n",
        chunk.len() + 13
    );
    let reply = read_all(raw_request(server.addr, &raw));
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.contains("too large"), "{reply}");
    // Malformed JSON, wrong type, unknown field.
    for body in [
        "{not json",
        "[1, 2]",
        "{\"value\": 1, \"extra\": true}",
        "{}",
    ] {
        let r = c
            .put(&url)
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .expect("put");
        assert_eq!(r.status(), 400, "{body}");
        let v: Value = r.json().await.expect("json");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(
            e.starts_with("/debug/kv/probe: invalid request body"),
            "{e}"
        );
        assert!(has_duration(&v));
    }
    // Nothing was written.
    let (status, _) = server.get_json("/debug/kv/probe").await;
    assert_eq!(status, 404);
    // A good body still works.
    let r = c
        .put(&url)
        .json(&json!({"value": 7}))
        .send()
        .await
        .expect("put");
    assert_eq!(r.status(), 200);
    assert_eq!(server.get_json("/debug/kv/probe").await.1["value"], 7);
}

#[tokio::test]
async fn panics_become_json_500_and_head_is_served_as_get() {
    let server = TestServer::start().await;
    let (status, v) = server.post_json("/api/debug/panic", &json!({})).await;
    assert_eq!(status, 500);
    assert_eq!(v["error"], "/api/debug/panic: Internal Server Error");
    assert!(has_duration(&v));
    assert_eq!(server.health().await["status"], "ok");
    assert_eq!(server.metric("shoal_http_panics_total", &[]).await, 1.0);

    let r = server
        .client
        .head(server.url("/healthz"))
        .send()
        .await
        .expect("head");
    assert_eq!(r.status(), 200);
    assert_eq!(r.text().await.expect("body"), "");
}

#[tokio::test]
async fn metrics_expose_pool_gate_routes_and_store() {
    let server = TestServer::start().await;
    server.health().await;
    let _ = server
        .client
        .put(server.url("/debug/kv/m"))
        .json(&json!({"value": 1}))
        .send()
        .await
        .expect("put");
    let text = server.metrics().await;
    for series in [
        "shoal_pool_tokens_total 200",
        "shoal_pool_tokens_in_use",
        "shoal_pool_tokens_waiting",
        "shoal_gate_running{gate=\"request_task\"}",
        "shoal_gate_queued{gate=\"request_task\"}",
        "shoal_gate_rejected_total{gate=\"request_task\",mode=\"fast_reject\"}",
        "shoal_http_requests_total{route=\"/healthz\",method=\"GET\",status=\"200\"}",
        "shoal_http_request_duration_seconds_bucket{route=\"/healthz\",method=\"GET\",le=",
        "shoal_store_op_seconds_bucket{op=\"put\",collection=\"kvstore\",le=",
    ] {
        assert!(text.contains(series), "missing {series} in:\n{text}");
    }
}

#[tokio::test]
async fn sigterm_under_load_exits_cleanly_and_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let mut writers = Vec::new();
    for w in 0..8 {
        let c = server.client.clone();
        let base = server.url("/debug/kv/");
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            for n in 0.. {
                let key = format!("w{w}-{n}");
                let r = c
                    .put(format!("{base}{key}"))
                    .json(&json!({"value": n}))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 200 => {
                        let v: Value = r.json().await.unwrap_or(Value::Null);
                        if v["ok"] == true {
                            acked.push((key, n));
                        }
                    }
                    // 503 while draining, or the connection refused once the server is gone.
                    _ => break,
                }
            }
            acked
        }));
    }
    tokio::time::sleep(Duration::from_millis(800)).await;
    server.signal(libc::SIGTERM);
    let mut acked = Vec::new();
    for w in writers {
        acked.extend(w.await.expect("join"));
    }
    let status = server.wait_exit(30);
    assert!(
        status.success(),
        "exit status {status:?}\n{}",
        server.logs()
    );
    let logs = server.logs();
    for step in [
        "received SIGTERM",
        "shutdown: signal received",
        "shutdown: all in-flight requests finished",
        "shutdown: closing the store",
        "shutdown: store closed",
    ] {
        assert!(logs.contains(step), "missing log step {step:?}:\n{logs}");
    }
    assert!(acked.len() > 8, "the load should have written something");
    drop(server);

    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    for (key, n) in &acked {
        let (status, v) = server.get_json(&format!("/debug/kv/{key}")).await;
        assert_eq!(status, 200, "acknowledged {key} was lost");
        assert_eq!(v["value"], *n);
    }
}

#[test]
fn invalid_settings_stop_start_up_naming_the_key() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cases: &[(&[(&str, &str)], &str)] = &[
        (&[("SHOAL_THREADPOOL_TOKENS", "0")], "threadpool_tokens"),
        (
            &[("SHOAL_ADMISSION_TIMEOUT_S", "-3")],
            "admission_timeout_s",
        ),
        (
            &[("SHOAL_MAX_CONCURRENT_REQUESTS", "10")],
            "max_concurrent_requests",
        ),
        (&[("SHOAL_PORT", "http")], "port"),
        (&[("SHOAL_STORE", "postgres")], "store"),
    ];
    for (env, key) in cases {
        let (status, stderr) = run_bin(&["serve"], env, dir.path());
        assert_eq!(status.code(), Some(2), "{env:?}: {stderr}");
        assert!(stderr.contains(key), "{env:?}: {stderr}");
    }
    std::fs::write(dir.path().join("bad.toml"), "listen_backlog = 0\n").expect("write");
    let (status, stderr) = run_bin(&["serve", "--config", "bad.toml"], &[], dir.path());
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("listen_backlog"), "{stderr}");
    let (status, stderr) = run_bin(&["serve", "--config", "missing.toml"], &[], dir.path());
    assert_eq!(status.code(), Some(2));
    assert!(stderr.contains("missing.toml"), "{stderr}");
    // A backend this build does not have is a clear start-up failure, not a hang.
    let (status, stderr) = run_bin(
        &["serve"],
        &[("SHOAL_STORE", "mongodb"), ("SHOAL_PORT", "0")],
        dir.path(),
    );
    assert!(!status.success());
    assert!(stderr.contains("mongodb"), "{stderr}");
}

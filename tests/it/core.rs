//! The server core's contract: event loop, offload pool, admission gate, middleware stack,
//! secondaries, shutdown, configuration errors.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fleet::{
    PASSWORD, add_user, approve, create_run, fixed_args, key, user_cli, worker_info,
};
use crate::harness::{Opts, TestServer, bin, metric_sum, run_bin};

const TOO_BUSY: &str = "Request_task: the server is currently too busy...";

fn has_duration(v: &Value) -> bool {
    v.get("duration")
        .and_then(Value::as_f64)
        .is_some_and(|d| d >= 0.0)
}

/// Sends a raw HTTP/1.1 request and leaves the connection open (to simulate a client that
/// goes away mid-wait by dropping the stream).
pub(crate) fn raw_request(addr: std::net::SocketAddr, request: &str) -> TcpStream {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.write_all(request.as_bytes()).expect("write");
    s
}

/// Reads one reply: up to the end of its body (by Content-Length) or until the server closes
/// the connection.
pub(crate) fn read_all(mut s: TcpStream) -> String {
    // Long enough for the longest hold (`HOLD_MS`) to end.
    s.set_read_timeout(Some(Duration::from_secs(120)))
        .expect("timeout");
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if let Some(end) = out.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&out[..end]).to_ascii_lowercase();
            let length = head.lines().find_map(|l| {
                l.strip_prefix("content-length:")
                    .and_then(|v| v.trim().parse::<usize>().ok())
            });
            if length.is_some_and(|n| out.len() >= end + 4 + n) {
                break;
            }
        }
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// How long a test holds the gate's slot or pool tokens, attempt after attempt: a test whose
/// observations did not all fit inside the hold (a slow or busy machine) tries again with a
/// longer one, so a slow machine makes it slower but cannot make it fail. Only the last
/// attempt's outcome is final.
const HOLD_MS: [u64; 4] = [3_000, 10_000, 30_000, 60_000];

/// Runs `attempt(ms, last)` with the holds of [`HOLD_MS`] until one attempt completes
/// (returns true). An attempt returns false only when its hold ended before it could observe
/// what it needed (see [`too_slow`]); the last attempt never does.
pub(crate) async fn with_growing_holds<F, Fut>(server: &TestServer, mut attempt: F)
where
    F: FnMut(u64, bool) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for (i, ms) in HOLD_MS.into_iter().enumerate() {
        if attempt(ms, i + 1 == HOLD_MS.len()).await {
            return;
        }
        wait_idle(server, "gate and pool idle before trying again").await;
    }
    unreachable!("the last attempt is final");
}

/// Gives up an attempt whose hold ended before `what` could be observed; on the last attempt
/// (the longest hold) that is a failure.
pub(crate) fn too_slow(last: bool, what: &str) -> bool {
    eprintln!("hold ended before {what} was observed: trying again with a longer one");
    assert!(
        !last,
        "{what}: not observed within the longest hold ({} ms)",
        HOLD_MS[HOLD_MS.len() - 1]
    );
    false
}

/// Whether the server has answered `s` (or closed it) yet, without waiting.
pub(crate) fn replied(s: &TcpStream) -> bool {
    s.set_nonblocking(true).expect("nonblocking");
    let mut b = [0u8; 1];
    let r = s.peek(&mut b);
    s.set_nonblocking(false).expect("blocking");
    !matches!(r, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock)
}

/// Goes away in the middle of a request the server is still working on: closes our side and
/// waits until the server notices and closes the connection. Returns what the server had sent
/// (empty when it dropped the request without answering). Panics if the server never notices.
pub(crate) fn hang_up(mut s: TcpStream) -> String {
    let _ = s.shutdown(Shutdown::Write);
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => out.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("the server did not notice a client going away: {e}"),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Polls the health document until `cond` holds, while `held()` says the work that makes the
/// state reachable (a slot holder, token holders) is still running. `Some(snapshot)` when
/// `cond` held while that work still ran; `None` when the work ended first (the caller tries
/// again with a longer hold). Panics only if neither happens within two minutes.
pub(crate) async fn poll_held(
    server: &TestServer,
    what: &str,
    held: impl Fn() -> bool,
    cond: impl Fn(&Value) -> bool,
) -> Option<Value> {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let h = server.health().await;
        let ok = cond(&h);
        // Checked after the snapshot: if the work still runs now, it ran when `h` was taken.
        if !held() {
            return None;
        }
        if ok {
            return Some(h);
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {h}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Polls `/metrics` until `cond` holds (or panics after two minutes).
async fn wait_metrics(server: &TestServer, what: &str, cond: impl Fn(&str) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let m = server.metrics().await;
        if cond(&m) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}:\n{m}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits (generously) until the gate and the pool are idle: nothing running, queued, in use
/// or waiting. Background jobs take tokens now and then, so this polls for a quiet moment.
pub(crate) async fn wait_idle(server: &TestServer, what: &str) {
    server
        .wait_health(120, what, |h| {
            h["gate"]["running"] == 0
                && h["gate"]["queued"] == 0
                && h["pool"]["in_use"] == 0
                && h["pool"]["waiting"] == 0
        })
        .await;
}

pub(crate) fn gate_request(ms: u64, tag: &str) -> String {
    format!("POST /debug/gate?ms={ms}&tag={tag} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
}

pub(crate) fn sleep_request(ms: u64, tag: &str) -> String {
    format!("GET /debug/sleep?ms={ms}&tag={tag} HTTP/1.1\r\nHost: x\r\n\r\n")
}

/// A real `/api/request_task` of worker `n` of `user` (valid credentials).
pub(crate) fn task_request(user: &str, n: u32) -> String {
    let body =
        json!({"password": PASSWORD, "worker_info": worker_info(user, 1, &key(n))}).to_string();
    format!(
        "POST /api/request_task HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// The JSON body of a raw HTTP reply.
pub(crate) fn reply_json(reply: &str) -> Value {
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    let body = reply.split("\r\n\r\n").nth(1).unwrap_or_default();
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {reply}"))
}

/// Fills the gate: a holder inside the critical section for `ms`, then `capacity - 1` quick
/// callers queued behind it, all observed at once. `None` when the holder finished before
/// that could be observed (the connections are then drained).
async fn fill_gate(
    server: &TestServer,
    capacity: usize,
    ms: u64,
) -> Option<(TcpStream, Vec<TcpStream>)> {
    let holder = raw_request(server.addr, &gate_request(ms, "holder"));
    let mut queued = Vec::new();
    let mut ok = poll_held(
        server,
        "holder inside",
        || !replied(&holder),
        |h| h["gate"]["running"] == 1,
    )
    .await
    .is_some();
    if ok {
        for i in 1..capacity {
            queued.push(raw_request(server.addr, &gate_request(0, &format!("q{i}"))));
        }
        ok = poll_held(
            server,
            "the gate full",
            || !replied(&holder),
            |h| h["gate"]["running"] == 1 && h["gate"]["queued"] == capacity - 1,
        )
        .await
        .is_some();
    }
    if ok {
        return Some((holder, queued));
    }
    read_all(holder);
    for q in queued {
        read_all(q);
    }
    None
}

/// The gate admits exactly `capacity` callers at once (fast-reject mode): `capacity` are
/// held at the same moment, one more is refused, and every admitted one is served.
async fn gate_is_whole(server: &TestServer, capacity: usize, ms: u64, last: bool) -> bool {
    let Some((holder, queued)) = fill_gate(server, capacity, ms).await else {
        return too_slow(last, "the gate full");
    };
    let (status, v) = server
        .post_json("/debug/gate?ms=0&tag=extra", &json!({}))
        .await;
    let in_time = !replied(&holder);
    let replies: Vec<String> = std::iter::once(holder)
        .chain(queued)
        .map(read_all)
        .collect();
    if !in_time {
        return too_slow(last, "one caller more than the capacity");
    }
    assert_eq!(status, 200);
    assert_eq!(v["info"], TOO_BUSY, "one more than the capacity: {v}");
    for r in &replies {
        assert!(reply_json(r).get("seq").is_some(), "{r}");
    }
    true
}

type Pending = tokio::task::JoinHandle<reqwest::Result<reqwest::Response>>;

fn all_running(calls: &[Pending]) -> bool {
    calls.iter().all(|c| !c.is_finished())
}

async fn drain(calls: Vec<Pending>) {
    for c in calls {
        let _ = c.await;
    }
}

#[tokio::test]
async fn defaults_start_and_healthz_answers() {
    let server = TestServer::start().await;
    let (status, body) = server.get_json("/healthz").await;
    assert_eq!(status, 200);
    assert_eq!(body["status"], "ok");
    assert_eq!(body["primary"], true);
    assert_eq!(body["pool"]["tokens"], 200);
    // Queue mode by default (docs/capacity.md): S = 5 plus a queue of 20,000, served in
    // batches of at most 32.
    assert_eq!(body["gate"]["mode"], "queue");
    assert_eq!(body["gate"]["capacity"], 20_005);
    assert_eq!(body["gate"]["max_batch"], 32);
    assert!(has_duration(&body));
    // The generated secret is private to the server's user.
    let meta = std::fs::metadata(server.data_dir.join("secret")).expect("secret file");
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    if !crate::harness::sqlite_only("the SQLite file exists") {
        assert!(server.data_dir.join("shoal.db").exists());
    }
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
    with_growing_holds(&server, |ms, last| {
        light_work_passes_slow_work(&server, ms, last)
    })
    .await;
}

/// One attempt of the test above, with slow work of `ms`.
async fn light_work_passes_slow_work(server: &TestServer, ms: u64, last: bool) -> bool {
    let sleep = |ms: u64, tag: String| {
        let c = server.client.clone();
        let url = server.url(&format!("/debug/sleep?ms={ms}&tag={tag}"));
        tokio::spawn(async move { c.get(url).send().await })
    };
    let slow: Vec<Pending> = (0..2).map(|i| sleep(ms, format!("slow{i}"))).collect();
    if poll_held(
        server,
        "two slow jobs in the pool",
        || all_running(&slow),
        |h| h["pool"]["in_use"] == 2,
    )
    .await
    .is_none()
    {
        drain(slow).await;
        return too_slow(last, "two slow jobs in the pool");
    }
    // Many light offloaded requests complete while the slow ones still hold their tokens.
    let light: Vec<Pending> = (0..40).map(|i| sleep(0, format!("l{i}"))).collect();
    for l in light {
        let r = l.await.expect("join").expect("light request");
        assert_eq!(r.status(), 200);
    }
    if !all_running(&slow) {
        drain(slow).await;
        return too_slow(last, "light work should finish before the slow work");
    }

    // Now hold every general token: a no-offload route still answers, and reports the
    // saturation.
    let fill: Vec<Pending> = (0..2).map(|i| sleep(ms, format!("fill{i}"))).collect();
    let held = || all_running(&slow) && all_running(&fill);
    if poll_held(server, "every general token held", held, |h| {
        h["pool"]["in_use"] == 4
    })
    .await
    .is_none()
    {
        drain(slow).await;
        drain(fill).await;
        return too_slow(last, "every general token held");
    }
    let waiter = sleep(0, "waiter".into());
    let waiting = poll_held(server, "a request waiting for a token", held, |h| {
        h["pool"]["waiting"].as_u64() >= Some(1)
    })
    .await;
    // (Background jobs use the pool too, so "at least".)
    let in_use = server.metric("shoal_pool_tokens_in_use", &[]).await;
    let waiting_metric = server.metric("shoal_pool_tokens_waiting", &[]).await;
    let waiter_done = waiter.is_finished();
    if waiting.is_none() || !held() {
        drain(slow).await;
        drain(fill).await;
        let _ = waiter.await;
        return too_slow(last, "a request waiting for a token");
    }
    assert_eq!(in_use, 4.0);
    assert!(waiting_metric >= 1.0);
    assert!(!waiter_done);
    waiter.await.expect("join").expect("waiter finishes");
    for s in slow.into_iter().chain(fill) {
        assert_eq!(s.await.expect("join").expect("slow").status(), 200);
    }
    wait_idle(server, "pool idle").await;
    true
}

#[tokio::test]
async fn fast_reject_answers_excess_at_once_without_pool_tokens() {
    // Fishtest's fast-reject mode, chosen explicitly (the default is queue mode).
    let server = TestServer::start_with(
        Opts::new()
            .set("task_semaphore_size", 3)
            .set("admission_queue", 0),
    )
    .await;
    with_growing_holds(&server, |ms, last| fast_reject_attempt(&server, ms, last)).await;
}

/// One attempt of the test above: a caller holds the critical section for `ms` while eleven
/// more arrive.
async fn fast_reject_attempt(server: &TestServer, ms: u64, last: bool) -> bool {
    let by_gate = [("caller", "/debug/gate")];
    let fast_reject = [("gate", "request_task"), ("mode", "fast_reject")];
    let acquired_before = server.metric("shoal_pool_acquired_total", &by_gate).await;
    let rejected_before = server
        .metric("shoal_gate_rejected_total", &fast_reject)
        .await;
    let call = |ms: u64, tag: String| {
        let c = server.client.clone();
        let url = server.url(&format!("/debug/gate?ms={ms}&tag={tag}"));
        tokio::spawn(async move {
            let r = c.post(url).send().await.expect("gate call");
            let v: Value = r.json().await.expect("json");
            (v, Instant::now())
        })
    };
    let holder = call(ms, "holder".into());
    if poll_held(
        server,
        "holder inside",
        || !holder.is_finished(),
        |h| h["gate"]["running"] == 1,
    )
    .await
    .is_none()
    {
        let _ = holder.await;
        return too_slow(last, "holder inside");
    }
    let calls: Vec<_> = (0..11).map(|i| call(0, i.to_string())).collect();
    let mut admitted = Vec::new();
    let mut rejected = Vec::new();
    for c in std::iter::once(holder).chain(calls) {
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
    // Every refusal came back before the first admitted caller had finished its work.
    let first_done = admitted.iter().map(|(_, at)| *at).min().expect("some");
    if !rejected.iter().all(|at| *at < first_done) {
        return too_slow(
            last,
            "every refusal before the first admitted caller finished",
        );
    }
    assert_eq!(admitted.len(), 3, "exactly the gate's capacity is admitted");
    assert_eq!(rejected.len(), 9);
    // Refused callers never took a pool token: only the three admitted ones did.
    let acquired = server.metric("shoal_pool_acquired_total", &by_gate).await - acquired_before;
    assert_eq!(acquired, 3.0);
    let rejected_metric = server
        .metric("shoal_gate_rejected_total", &fast_reject)
        .await
        - rejected_before;
    assert_eq!(rejected_metric, 9.0);
    let h = server.health().await;
    assert_eq!(
        (h["gate"]["running"].as_u64(), h["gate"]["queued"].as_u64()),
        (Some(0), Some(0))
    );
    true
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
    with_growing_holds(&server, |ms, last| queue_mode_attempt(&server, ms, last)).await;
}

/// One attempt of the test above: caller 0 holds the critical section for `ms`, callers 1-3
/// queue behind it, callers 4-6 find the gate full and must time out (after 1 s) while it is.
async fn queue_mode_attempt(server: &TestServer, ms: u64, last: bool) -> bool {
    let rejected_before = server
        .metric("shoal_gate_rejected_total", &[("mode", "queue")])
        .await;
    let call = |ms: u64, tag: u64| {
        let c = server.client.clone();
        let url = server.url(&format!("/debug/gate?ms={ms}&tag={tag}"));
        tokio::spawn(async move {
            let r = c.post(url).send().await.expect("gate call");
            (r.json::<Value>().await.expect("json"), Instant::now())
        })
    };
    let holder = call(ms, 0);
    let mut calls = Vec::new();
    let mut in_order = true;
    for i in 1..7u64 {
        // Known arrival order of the callers that get a place.
        let arrived = |n: u64| {
            poll_held(
                server,
                "arrival",
                || !holder.is_finished(),
                move |h| {
                    h["gate"]["running"].as_u64().unwrap_or(0)
                        + h["gate"]["queued"].as_u64().unwrap_or(0)
                        == n
                },
            )
        };
        if i == 1 && arrived(1).await.is_none() {
            in_order = false;
            break;
        }
        calls.push(call(10, i));
        if i < 4 && arrived(i + 1).await.is_none() {
            in_order = false;
            break;
        }
    }
    let (v0, holder_done) = holder.await.expect("join");
    let mut replies = vec![(v0, holder_done)];
    for c in calls {
        replies.push(c.await.expect("join"));
    }
    if !in_order {
        return too_slow(last, "four callers admitted in a known order");
    }
    // The refusals are timeouts only if they came while every place was taken, that is
    // before caller 0 finished its work.
    if replies[4..].iter().any(|(_, at)| *at >= holder_done) {
        return too_slow(last, "callers 4-6 timing out while the gate is full");
    }
    let mut served = Vec::new();
    for (i, (v, _)) in replies.iter().enumerate() {
        assert!(has_duration(v), "{v}");
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
        .await
        - rejected_before;
    assert_eq!(rejected, 3.0);
    true
}

#[tokio::test]
async fn disconnected_clients_give_back_every_permit() {
    let server = TestServer::start_with(
        Opts::new()
            .set("task_semaphore_size", 4)
            .set("admission_queue", 0),
    )
    .await;
    with_growing_holds(&server, |ms, last| {
        queued_callers_go_away(&server, ms, last)
    })
    .await;
    // And the gate is whole again: capacity callers are admitted (at once, and no more).
    with_growing_holds(&server, |ms, last| gate_is_whole(&server, 4, ms, last)).await;
}

/// One attempt of the test above, with a holder of `ms`.
async fn queued_callers_go_away(server: &TestServer, ms: u64, last: bool) -> bool {
    let admitted_before = server.health().await["gate"]["admitted"]
        .as_u64()
        .expect("admitted");
    // One caller inside the critical section, then two queued behind it.
    let holder = raw_request(server.addr, &gate_request(ms, "holder"));
    let held = || !replied(&holder);
    if poll_held(server, "holder inside", held, |h| h["gate"]["running"] == 1)
        .await
        .is_none()
    {
        read_all(holder);
        return too_slow(last, "holder inside");
    }
    let q1 = raw_request(server.addr, &gate_request(10, "q1"));
    let q2 = raw_request(server.addr, &gate_request(10, "q2"));
    if poll_held(server, "two queued", held, |h| h["gate"]["queued"] == 2)
        .await
        .is_none()
    {
        read_all(holder);
        read_all(q1);
        read_all(q2);
        return too_slow(last, "two queued");
    }
    // The queued clients go away: their places come back while the holder still works.
    let (r1, r2) = (hang_up(q1), hang_up(q2));
    let Some(h) = poll_held(server, "queue emptied by disconnects", held, |h| {
        h["gate"]["queued"] == 0 && h["gate"]["running"] == 1
    })
    .await
    else {
        read_all(holder);
        return too_slow(last, "queue emptied by disconnects");
    };
    // Neither was answered nor ever entered the critical section: only the holder did.
    assert_eq!((r1.as_str(), r2.as_str()), ("", ""));
    assert_eq!(h["gate"]["admitted"].as_u64(), Some(admitted_before + 1));
    // The holder goes away too: its slot stays held until its work really ends, then frees.
    drop(holder);
    wait_idle(server, "everything released").await;
    true
}

/// The real request_task path, not the `/debug` routes: callers that go away while they wait
/// (for a pool token to check their password, for a gate place, for the scheduler slot) give
/// back every place and token, and the next request_task is served normally. The
/// observations hold whether a caller's credentials are checked before or after it takes its
/// gate place.
#[tokio::test]
async fn request_task_callers_that_go_away_give_back_every_place_and_token() {
    // Queue mode, 2 + 1 places; 4 tokens, 2 of them reserved (slot holder, journal writer).
    let server = TestServer::start_with(
        Opts::new()
            .set("task_semaphore_size", 2)
            .set("admission_queue", 1)
            .set("admission_timeout_s", 600)
            .set("threadpool_tokens", 4),
    )
    .await;
    let h = server.health().await;
    assert_eq!(h["gate"]["mode"], "queue");
    assert_eq!(h["gate"]["capacity"], 3);
    assert_eq!(h["pool"]["reserved"], 2);
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    add_user(&server, "bob", &[]);
    // Attempts that have to be repeated on a slow machine leave tasks behind.
    user_cli(&server, &["set", "alice", "--machine-limit", "1000"]);
    let run = create_run(&server, "alice", fixed_args(100_000)).await;
    approve(&server, "boss", &run).await;
    let workers = AtomicU32::new(0);
    let next = || workers.fetch_add(1, Ordering::Relaxed) + 1;
    // alice's credentials are known to the server, and request_task works.
    let v = reply_json(&read_all(raw_request(
        server.addr,
        &task_request("alice", next()),
    )));
    assert_eq!(v["run"]["_id"], run.as_str(), "{v}");

    // 1. Waiting for a pool token to check a password: bob's credentials are not in the
    // cache, so checking them takes a general token, and both are held.
    with_growing_holds(&server, |ms, last| {
        password_checks_go_away(&server, &next, ms, last)
    })
    .await;
    // 2. Waiting for the scheduler slot, and for a gate place.
    with_growing_holds(&server, |ms, last| {
        gate_waiters_go_away(&server, &next, ms, last)
    })
    .await;

    // Every place and token is back, in /healthz and in the gauges of /metrics.
    wait_idle(&server, "every place and token back").await;
    wait_metrics(&server, "the gauges at zero", |m| {
        let gate = [("gate", "request_task")];
        metric_sum(m, "shoal_gate_running", &gate) == 0.0
            && metric_sum(m, "shoal_gate_queued", &gate) == 0.0
            && metric_sum(m, "shoal_pool_tokens_in_use", &[]) == 0.0
            && metric_sum(m, "shoal_pool_tokens_waiting", &[]) == 0.0
    })
    .await;
    // And request_task serves both users normally; bob's password is checked now.
    let slow_checks = server.metric("shoal_auth_slow_checks_total", &[]).await;
    for user in ["bob", "alice"] {
        let v = reply_json(&read_all(raw_request(
            server.addr,
            &task_request(user, next()),
        )));
        assert_eq!(v["run"]["_id"], run.as_str(), "{user}: {v}");
    }
    assert!(server.metric("shoal_auth_slow_checks_total", &[]).await > slow_checks);
    wait_idle(&server, "idle at the end").await;
}

/// Part 1 of the test above, with the general tokens held for `ms`.
async fn password_checks_go_away(
    server: &TestServer,
    next: &impl Fn() -> u32,
    ms: u64,
    last: bool,
) -> bool {
    let by_task = [("caller", "/api/request_task")];
    let by_sleep = [("caller", "/debug/sleep")];
    let acquired_before = server.metric("shoal_pool_acquired_total", &by_task).await;
    let slow_before = server.metric("shoal_auth_slow_checks_total", &[]).await;
    let sleeps_before = server.metric("shoal_pool_acquired_total", &by_sleep).await;
    // Both general tokens held.
    let holders: Vec<TcpStream> = (0..2)
        .map(|i| raw_request(server.addr, &sleep_request(ms, &format!("hold{i}"))))
        .collect();
    let held = || holders.iter().all(|h| !replied(h));
    let give_up = |holders: Vec<TcpStream>, what: &str| {
        for h in holders {
            read_all(h);
        }
        too_slow(last, what)
    };
    wait_metrics(server, "both general tokens held", |m| {
        metric_sum(m, "shoal_pool_acquired_total", &by_sleep) == sleeps_before + 2.0 || !held()
    })
    .await;
    let Some(h) = poll_held(server, "tokens held", held, |_| true).await else {
        return give_up(holders, "both general tokens held");
    };
    // Nothing leaves the general queue while both are held, so two more waiters are bob's.
    let before = h["pool"]["waiting"].as_u64().expect("waiting");
    let bob: Vec<TcpStream> = (0..2)
        .map(|_| raw_request(server.addr, &task_request("bob", next())))
        .collect();
    if poll_held(server, "two password checks waiting", held, |h| {
        h["pool"]["waiting"].as_u64() >= Some(before + 2)
    })
    .await
    .is_none()
    {
        for b in bob {
            read_all(b);
        }
        return give_up(holders, "two password checks waiting");
    }
    // They go away.
    let replies: Vec<String> = bob.into_iter().map(hang_up).collect();
    if !held() {
        return give_up(
            holders,
            "the password checks gone while the tokens are held",
        );
    }
    assert_eq!(replies, ["", ""], "a caller that went away was answered");
    // The tokens come free: the checks of the callers that went away never run.
    for h in holders {
        read_all(h);
    }
    wait_idle(server, "the pool idle again").await;
    assert_eq!(
        server.metric("shoal_pool_acquired_total", &by_task).await,
        acquired_before,
        "a request_task that went away took a token"
    );
    assert_eq!(
        server.metric("shoal_auth_slow_checks_total", &[]).await,
        slow_before,
        "a password check ran for a caller that went away"
    );
    true
}

/// Part 2 of the test above, with the scheduler slot held for `ms` (by `/debug/gate`, which
/// enters the same gate).
async fn gate_waiters_go_away(
    server: &TestServer,
    next: &impl Fn() -> u32,
    ms: u64,
    last: bool,
) -> bool {
    let admitted_before = server.health().await["gate"]["admitted"]
        .as_u64()
        .expect("admitted");
    let holder = raw_request(server.addr, &gate_request(ms, "holder"));
    let held = || !replied(&holder);
    let give_up = |holder: TcpStream, waiting: Vec<TcpStream>, what: &str| {
        read_all(holder);
        for w in waiting {
            read_all(w);
        }
        too_slow(last, what)
    };
    if poll_held(server, "holder inside", held, |h| h["gate"]["running"] == 1)
        .await
        .is_none()
    {
        return give_up(holder, Vec::new(), "holder inside");
    }
    // Two callers take the other two places and wait for the slot.
    let slot_waiters: Vec<TcpStream> = (0..2)
        .map(|_| raw_request(server.addr, &task_request("alice", next())))
        .collect();
    if poll_held(server, "two callers waiting for the slot", held, |h| {
        h["gate"]["running"] == 1 && h["gate"]["queued"] == 2
    })
    .await
    .is_none()
    {
        return give_up(holder, slot_waiters, "two callers waiting for the slot");
    }
    // Two more find the gate full and wait for a place.
    let place_waiters: Vec<TcpStream> = (0..2)
        .map(|_| raw_request(server.addr, &task_request("alice", next())))
        .collect();
    // The slot waiters go away; the place waiters take their places.
    let mut replies: Vec<String> = slot_waiters.into_iter().map(hang_up).collect();
    if poll_held(server, "the place waiters in the gate", held, |h| {
        h["gate"]["running"] == 1 && h["gate"]["queued"] == 2
    })
    .await
    .is_none()
    {
        return give_up(holder, place_waiters, "the place waiters in the gate");
    }
    // They go away too.
    replies.extend(place_waiters.into_iter().map(hang_up));
    // The gate is whole: its full capacity is taken at once by new callers.
    let fresh: Vec<TcpStream> = (0..2)
        .map(|_| raw_request(server.addr, &task_request("alice", next())))
        .collect();
    let Some(h) = poll_held(server, "the gate full again", held, |h| {
        h["gate"]["running"] == 1 && h["gate"]["queued"] == 2
    })
    .await
    else {
        return give_up(holder, fresh, "the gate full again");
    };
    // Nobody who went away was answered or ever had the slot: only the holder did.
    assert_eq!(
        replies,
        ["", "", "", ""],
        "a caller that went away was answered"
    );
    assert_eq!(h["gate"]["admitted"].as_u64(), Some(admitted_before + 1));
    // The holder finishes, and the new callers are served in turn.
    assert!(reply_json(&read_all(holder)).get("seq").is_some());
    for f in fresh {
        let v = reply_json(&read_all(f));
        assert!(v.get("run").is_some(), "{v}");
    }
    true
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
    // upload_pgn is served by secondaries: an empty body is refused as invalid, not redirected
    // to the primary.
    let (status, body) = server.post_json("/api/upload_pgn", &json!({})).await;
    assert_eq!(status, 400, "upload_pgn is served by secondaries: {body}");
    let e = body["error"].as_str().unwrap_or_default();
    assert!(e.starts_with("/api/upload_pgn: "), "{body}");
    assert!(!e.contains("primary instance required"), "{body}");
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
        "shoal_gate_rejected_total{gate=\"request_task\",mode=\"queue\"}",
        "shoal_gate_served_total{gate=\"request_task\"}",
        "shoal_gate_batches_total{gate=\"request_task\"}",
        "shoal_gate_assignments_per_second{gate=\"request_task\"}",
        "shoal_gate_busy_seconds{gate=\"request_task\"}",
        "shoal_http_requests_total{route=\"/healthz\",method=\"GET\",status=\"200\"}",
        "shoal_http_request_duration_seconds_bucket{route=\"/healthz\",method=\"GET\",le=",
    ] {
        assert!(text.contains(series), "missing {series} in:\n{text}");
    }
    // The store's operations, by the SQLite store's labels or the MongoDB store's.
    let store_series = if crate::harness::on_mongodb() {
        "shoal_store_op_seconds_bucket{op=\"bulk\",collection=\"mongodb\",le="
    } else {
        "shoal_store_op_seconds_bucket{op=\"put\",collection=\"shoal_kvstore\",le="
    };
    assert!(
        text.contains(store_series),
        "missing {store_series} in:\n{text}"
    );
}

#[tokio::test]
async fn sigterm_under_load_exits_cleanly_and_keeps_every_acknowledged_write() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let mut writers = Vec::new();
    let acked_so_far = Arc::new(AtomicUsize::new(0));
    for w in 0..8 {
        let c = server.client.clone();
        let base = server.url("/debug/kv/");
        let acked_so_far = acked_so_far.clone();
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
                            acked_so_far.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    // 503 while draining, or the connection refused once the server is gone.
                    _ => break,
                }
            }
            acked
        }));
    }
    // Under load: wait (generously) until the writers have had more than a few writes
    // acknowledged, then stop the server in the middle of their stream.
    let deadline = Instant::now() + Duration::from_secs(120);
    while acked_so_far.load(Ordering::Relaxed) <= 16 {
        assert!(
            Instant::now() < deadline,
            "no writes acknowledged under load"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
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
    // A MongoDB server that cannot be reached is a clear start-up failure naming the setting,
    // not a hang.
    let (status, stderr) = run_bin(
        &["serve"],
        &[
            ("SHOAL_STORE", "mongodb"),
            ("SHOAL_PORT", "0"),
            (
                "SHOAL_MONGODB_URI",
                "mongodb://127.0.0.1:1/ft?serverSelectionTimeoutMS=500",
            ),
        ],
        dir.path(),
    );
    assert!(!status.success());
    assert!(stderr.contains("mongodb_uri"), "{stderr}");
}

/// Runs the binary in `cwd` with only `env`; returns (success, stdout + stderr).
fn run_bin_all(args: &[&str], env: &[(&str, &str)], cwd: &std::path::Path) -> (bool, String) {
    let out = std::process::Command::new(bin())
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(env.iter().copied())
        .output()
        .expect("run shoal");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn secrets_and_passwords_never_show() {
    const SECRET: &str = "0123-very-secret-cookie-key-4567-89ab";
    const DB_PASSWORD: &str = "db-pa55word-xyz";
    const USER_PASSWORD: &str = "user-pa55word-xyz";
    const GITHUB_TOKEN: &str = "github_pat_11AAAAsecret-token-xyz";
    let dir = tempfile::tempdir().expect("tempdir");
    let uri = format!("mongodb://fish:{DB_PASSWORD}@db.example.org:27017/fishtest");

    // check-config prints the effective values: the secret redacted, the URI without its
    // password, whether they came from the environment or from the file.
    let env = [
        ("SHOAL_SECRET", SECRET),
        ("SHOAL_MONGODB_URI", uri.as_str()),
        ("SHOAL_GITHUB_TOKEN", GITHUB_TOKEN),
    ];
    let (ok, out) = run_bin_all(&["check-config"], &env, dir.path());
    assert!(out.contains("github_token = \"[REDACTED]\""), "{out}");
    assert!(!out.contains(GITHUB_TOKEN), "{out}");
    assert!(ok, "{out}");
    assert!(
        out.contains("port = 8000"),
        "check-config prints the values: {out}"
    );
    assert!(out.contains("secret = \"[REDACTED]\""), "{out}");
    assert!(
        out.contains("mongodb_uri = \"mongodb://fish:[REDACTED]@db.example.org:27017/fishtest\""),
        "{out}"
    );
    assert!(!out.contains(SECRET) && !out.contains(DB_PASSWORD), "{out}");
    let file = format!("secret = \"{SECRET}\"\nmongodb_uri = \"{uri}\"\n");
    std::fs::write(dir.path().join("s.toml"), file).expect("write");
    let (ok, out) = run_bin_all(&["check-config", "--config", "s.toml"], &[], dir.path());
    assert!(ok, "{out}");
    assert!(out.contains("[REDACTED]"), "{out}");
    assert!(!out.contains(SECRET) && !out.contains(DB_PASSWORD), "{out}");
    // A refused secret is named, not quoted.
    let (ok, out) = run_bin_all(
        &["check-config"],
        &[("SHOAL_SECRET", "short-secret")],
        dir.path(),
    );
    assert!(
        !ok && out.contains("secret") && !out.contains("short-secret"),
        "{out}"
    );

    // Nor does the validated configuration's Debug.
    let config = shoal::config::Config::from_sources(
        None,
        "test",
        env.iter().map(|(k, v)| (k.to_string(), v.to_string())),
    )
    .expect("valid");
    let debug = format!("{config:?}");
    assert!(
        !debug.contains(SECRET) && !debug.contains(DB_PASSWORD),
        "{debug}"
    );
    assert!(debug.contains("[REDACTED]"), "{debug}");

    // A password given to `shoal user` is not echoed, whatever happens.
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    let env = [("SHOAL_DATA_DIR", data)];
    for (args, success) in [
        (
            &["user", "add", "alice", "--password", USER_PASSWORD][..],
            true,
        ),
        (&["user", "set", "alice", "--password", USER_PASSWORD], true),
        (
            &["user", "add", "alice", "--password", USER_PASSWORD],
            false,
        ),
        (
            &["user", "set", "nobody", "--password", USER_PASSWORD],
            false,
        ),
        (&["user", "list"], true),
    ] {
        let (ok, out) = run_bin_all(args, &env, dir.path());
        assert_eq!(ok, success, "{args:?}: {out}");
        assert!(!out.contains(USER_PASSWORD), "{args:?}: {out}");
    }
}

#[tokio::test]
async fn every_response_carries_a_request_id() {
    let server = TestServer::start().await;
    let c = &server.client;
    let mut ids = Vec::new();
    for path in [
        "/healthz",
        "/api/no_such_path",
        "/tests",
        "/api/active_runs",
    ] {
        let r = c.get(server.url(path)).send().await.expect("get");
        let id = r
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        assert_eq!(id.len(), 36, "{path}: a UUID request id, got {id:?}");
        ids.push(id);
    }
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 4, "each request its own id");
    // A client's own id is kept and echoed.
    let r = c
        .get(server.url("/healthz"))
        .header("x-request-id", "client-chosen-1")
        .send()
        .await
        .expect("get");
    assert_eq!(r.headers()["x-request-id"], "client-chosen-1");
}

/// The product's defaults, not the test harness's: no `/debug` route exists, and the
/// effective settings say so.
#[tokio::test]
async fn production_defaults_serve_no_debug_routes() {
    let server = TestServer::start_with(Opts::new().production()).await;
    for (method, path) in [
        ("GET", "/debug/sleep"),
        ("POST", "/debug/gate"),
        ("GET", "/debug/kv/any"),
        ("PUT", "/debug/kv/any"),
        ("POST", "/debug/pgn_retention"),
        ("POST", "/debug/job/flush_buffers"),
        ("POST", "/api/debug/panic"),
    ] {
        let m = reqwest::Method::from_bytes(method.as_bytes()).expect("method");
        let r = server
            .client
            .request(m, server.url(path))
            .json(&serde_json::json!({}))
            .send()
            .await
            .expect("request");
        assert_eq!(r.status().as_u16(), 404, "{method} {path}");
    }
    assert_eq!(server.health().await["status"], "ok");
    let dir = tempfile::tempdir().expect("tempdir");
    let (ok, text) = run_bin_all(&["check-config"], &[], dir.path());
    assert!(ok, "{text}");
    assert!(text.contains("debug_endpoints = false"), "{text}");
    assert!(text.contains("periodic_jobs = true"), "{text}");
}

//! Soak test (bounded, loopback only): stalled connections, a password spray and a storm of
//! valid workers, all at once, against one real server.
//!
//! - **Stalled connections**: waves of raw TCP connections to 127.0.0.1 that send half a
//!   request header and then nothing, nothing at all, or a header and half a body.
//! - **Password spray**: [`SPRAYERS`] tasks send wrong passwords for a real user (alice),
//!   mostly to request_task (and to request_version), half of them from the server's own
//!   address and half from rotating client addresses (`X-Forwarded-For` through the trusted
//!   loopback proxy). It starts two seconds before the valid workers.
//! - **Valid workers**: [`VALID_WORKERS`] workers of another user (bob), each with its own
//!   unique key and client address, loop request_version, request_task, update_task and beat
//!   with the correct password.
//!
//! It asserts that every valid worker's request is answered 200 (no transport failure, no
//! 429, and never "too busy": the gate has a place for every valid worker, so only the spray
//! could fill it), that every update acknowledged with 200 is in the run's totals at the end,
//! exactly (and in its task's stats), that the spray is refused (401, or 429 with
//! `Retry-After` and the API's error shape) and never takes a gate place (the gate's gauges
//! stay at zero while the spray runs alone), that /healthz
//! answers throughout and after, that the server closes the stalled connections, and that
//! alice's correct password still works from another address afterwards.
//!
//! Bounded by default ([`DEFAULT_SECS`] seconds of storm, about half a minute in all). To run
//! longer, set `SHOAL_SOAK_SECS` (at least 12):
//!
//!     SHOAL_SOAK_SECS=300 cargo test --test it soak -- --nocapture

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use crate::fleet::{PASSWORD, Totals, add_user, approve, create_run, fixed_args, key, worker_info};
use crate::harness::{Opts, TestServer};

/// Seconds of storm in a plain `cargo test` run.
const DEFAULT_SECS: u64 = 20;
const VALID_WORKERS: u32 = 100;
const SPRAYERS: u32 = 40;
/// Per wave of stalled connections.
const STALLED_HALF_HEADER: usize = 200;
const STALLED_SILENT: usize = 50;
const STALLED_HALF_BODY: usize = 20;
/// A new wave of stalled connections this often.
const WAVE_EVERY: Duration = Duration::from_secs(10);
/// Pair probabilities of the valid workers' games.
const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

/// Settings of the hardening controls (docs/security.md). Today's server ignores `SHOAL_*`
/// variables it does not know, so they are harmless until the settings exist. The read
/// timeouts are shorter than their defaults so that the stalled connections must be closed
/// well within the default storm; the throttle is set to its documented defaults, spelled out
/// so that a change of default does not silently change this test.
const HARDENING: &[(&str, &str)] = &[
    ("header_read_timeout_s", "5"),
    ("body_read_timeout_s", "5"),
    ("keepalive_timeout_s", "30"),
    ("auth_throttle_window_s", "300"),
    ("auth_throttle_per_user_ip", "10"),
    ("auth_throttle_per_ip", "100"),
    ("auth_throttle_per_user", "100"),
];

/// The longest read timeout above plus a margin: a stalled connection older than this at the
/// end of the storm must have been closed by the server.
const STALL_LIMIT: Duration = Duration::from_secs(5 + 4);

/// The server's answer to a request the gate refused.
const TOO_BUSY: &str = "too busy";

/// Everything the storm's tasks share.
struct Ctx {
    base: String,
    deadline: Instant,
    run_id: String,
}

/// POSTs `body` (a JSON object) with an optional `X-Forwarded-For`: (status, Retry-After,
/// reply) or a transport error.
async fn post(
    client: &reqwest::Client,
    url: String,
    body: &Value,
    forwarded_for: Option<&str>,
) -> Result<(u16, Option<String>, Value), String> {
    let mut req = client.post(url).json(body);
    if let Some(ip) = forwarded_for {
        req = req.header("X-Forwarded-For", ip);
    }
    let r = req.send().await.map_err(|e| format!("{e:?}"))?;
    let status = r.status().as_u16();
    let retry_after = r
        .headers()
        .get("retry-after")
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    let bytes = r.bytes().await.map_err(|e| format!("body: {e:?}"))?;
    let v = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| json!({"not_json": String::from_utf8_lossy(&bytes)}));
    Ok((status, retry_after, v))
}

/// What one valid worker saw.
#[derive(Default)]
struct WorkerLog {
    calls: u64,
    tasks: u64,
    no_task: u64,
    updates_acked: u64,
    /// Requests not answered 200, or answered without the protocol's fields.
    problems: Vec<String>,
    too_busy: u64,
    /// The last acknowledged cumulative stats of each task: (run_id, task_id).
    acked: HashMap<(String, u64), Totals>,
    /// Slowest request_task, seconds.
    slowest_request_task: f64,
}

async fn valid_worker(ctx: Arc<Ctx>, client: reqwest::Client, n: u32) -> WorkerLog {
    let info = worker_info("bob", 1, &key(10_000 + n));
    let ip = format!("198.18.{}.{}", n / 250, n % 250 + 1);
    let mut rng = StdRng::seed_from_u64(u64::from(n));
    let mut log = WorkerLog::default();
    let url = |path: &str| format!("{}{path}", ctx.base);
    let body = |extra: Value| {
        let mut b = json!({"password": PASSWORD, "worker_info": info});
        if let (Some(b), Value::Object(e)) = (b.as_object_mut(), extra) {
            b.extend(e);
        }
        b
    };
    let pause = |ms: u64| tokio::time::sleep(Duration::from_millis(ms));
    while Instant::now() < ctx.deadline {
        log.calls += 1;
        match post(
            &client,
            url("/api/request_version"),
            &body(json!({})),
            Some(&ip),
        )
        .await
        {
            Ok((200, _, v)) if v["version"].is_u64() => {}
            Ok((status, _, v)) => log.problems.push(format!("request_version: {status} {v}")),
            Err(e) => log.problems.push(format!("request_version: no reply: {e}")),
        }
        log.calls += 1;
        let started = Instant::now();
        let reply = post(
            &client,
            url("/api/request_task"),
            &body(json!({})),
            Some(&ip),
        )
        .await;
        log.slowest_request_task = log
            .slowest_request_task
            .max(started.elapsed().as_secs_f64());
        let v = match reply {
            Ok((200, _, v)) => v,
            Ok((status, _, v)) => {
                log.problems.push(format!("request_task: {status} {v}"));
                pause(200).await;
                continue;
            }
            Err(e) => {
                log.problems.push(format!("request_task: no reply: {e}"));
                pause(200).await;
                continue;
            }
        };
        let (Some(run_id), Some(task_id), Some(num_games)) = (
            v["run"]["_id"].as_str(),
            v["task_id"].as_u64(),
            v["run"]["my_task"]["num_games"].as_u64(),
        ) else {
            if v["info"].as_str().is_some_and(|i| i.contains(TOO_BUSY)) {
                log.too_busy += 1;
            } else if v["task_waiting"] == false && v.get("error").is_none() {
                log.no_task += 1;
            } else {
                log.problems.push(format!("request_task: {v}"));
            }
            pause(200).await;
            continue;
        };
        log.tasks += 1;
        let ids = json!({"run_id": run_id, "task_id": task_id});
        let mut totals = Totals::default();
        let mut updates = 0u32;
        while totals.games() < num_games && Instant::now() < ctx.deadline {
            let target = (totals.games() + 2 * rng.random_range(1..=4u64)).min(num_games);
            while totals.games() < target {
                totals.play_pair(&mut rng, EVEN);
            }
            let mut extra = ids.clone();
            extra["stats"] = totals.json();
            log.calls += 1;
            match post(&client, url("/api/update_task"), &body(extra), Some(&ip)).await {
                Ok((200, _, v))
                    if v["task_alive"].is_boolean()
                        && v.get("error").is_none()
                        && v.get("info").is_none() =>
                {
                    // Acknowledged: the server took these totals.
                    log.updates_acked += 1;
                    log.acked.insert((run_id.to_string(), task_id), totals);
                    if v["task_alive"] == false {
                        break;
                    }
                }
                Ok((status, _, v)) => {
                    log.problems.push(format!("update_task: {status} {v}"));
                    break;
                }
                Err(e) => {
                    log.problems.push(format!("update_task: no reply: {e}"));
                    break;
                }
            }
            updates += 1;
            if updates.is_multiple_of(3) {
                log.calls += 1;
                match post(&client, url("/api/beat"), &body(ids.clone()), Some(&ip)).await {
                    Ok((200, _, v)) if v["task_alive"] == true => {}
                    Ok((status, _, v)) => log.problems.push(format!("beat: {status} {v}")),
                    Err(e) => log.problems.push(format!("beat: no reply: {e}")),
                }
            }
            pause(rng.random_range(5..40)).await;
        }
    }
    log
}

/// What one sprayer saw.
#[derive(Default)]
struct SprayLog {
    statuses: BTreeMap<u16, u64>,
    /// Wrong passwords answered 200 with "too busy": they took a gate place.
    too_busy: u64,
    /// Wrong passwords answered anything else than 401 or a well-formed 429.
    problems: Vec<String>,
    transport_errors: u64,
    first_transport_error: Option<String>,
}

async fn sprayer(ctx: Arc<Ctx>, client: reqwest::Client, i: u32) -> SprayLog {
    let info = worker_info("alice", 8, &key(20_000 + i));
    let mut log = SprayLog::default();
    let mut k = 0u64;
    while Instant::now() < ctx.deadline {
        k += 1;
        // Mostly request_task: the endpoint with the admission gate.
        let path = if k.is_multiple_of(4) {
            "/api/request_version"
        } else {
            "/api/request_task"
        };
        let ip = (i % 2 == 1).then(|| format!("203.0.113.{}", k % 250 + 1));
        let body = json!({"password": format!("guess-{i}-{k}"), "worker_info": info});
        match post(&client, format!("{}{path}", ctx.base), &body, ip.as_deref()).await {
            Ok((status, retry_after, v)) => {
                *log.statuses.entry(status).or_default() += 1;
                let error_ok = v["error"]
                    .as_str()
                    .is_some_and(|e| e.starts_with(&format!("{path}: ")));
                match status {
                    401 if error_ok => {}
                    429 if error_ok && retry_after.is_some() && v["duration"].is_number() => {}
                    200 if v["info"].as_str().is_some_and(|s| s.contains(TOO_BUSY)) => {
                        log.too_busy += 1;
                    }
                    _ => {
                        if log.problems.len() < 5 {
                            log.problems.push(format!(
                                "{path}: {status} (Retry-After {retry_after:?}) {v}"
                            ));
                        }
                    }
                }
            }
            Err(e) => {
                log.transport_errors += 1;
                log.first_transport_error.get_or_insert(e);
            }
        }
        // An attacker would not wait; this only keeps a 2-core test machine responsive.
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    log
}

/// One stalled connection: when it was opened and what it sent.
struct Stalled {
    opened: Instant,
    kind: &'static str,
    stream: TcpStream,
}

async fn stall_wave(addr: std::net::SocketAddr) -> Vec<Stalled> {
    let mut out = Vec::new();
    let kinds = [
        ("half a header", STALLED_HALF_HEADER),
        ("nothing", STALLED_SILENT),
        ("half a body", STALLED_HALF_BODY),
    ];
    for (kind, count) in kinds {
        for _ in 0..count {
            let Ok(mut stream) = TcpStream::connect(addr).await else {
                continue;
            };
            let sent: &[u8] = match kind {
                "half a header" => {
                    b"POST /api/request_task HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty"
                }
                "half a body" => {
                    b"POST /api/update_task HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                      Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"password\": "
                }
                _ => b"",
            };
            if !sent.is_empty() && stream.write_all(sent).await.is_err() {
                continue;
            }
            out.push(Stalled {
                opened: Instant::now(),
                kind,
                stream,
            });
        }
    }
    out
}

/// Whether the server has given up on a stalled connection: it closed it, reset it, or
/// answered it (and is then free to close it).
async fn server_let_go(s: &mut Stalled) -> bool {
    let mut buf = [0u8; 1024];
    match tokio::time::timeout(Duration::from_millis(1500), s.stream.read(&mut buf)).await {
        Ok(Ok(_) | Err(_)) => true,
        Err(_) => false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn valid_workers_are_served_through_stalls_and_a_password_spray() {
    let secs = std::env::var("SHOAL_SOAK_SECS")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .unwrap_or(DEFAULT_SECS)
        // Long enough for the first wave of stalled connections to pass STALL_LIMIT.
        .max(12);
    // Fishtest's fast-reject gate (a caller that finds every place taken is told "too busy"
    // at once), with a place for every valid worker and a few more: the valid workers alone
    // can never fill it, so only the spray could. The loopback proxy is trusted so that each
    // client can have its own address.
    let mut opts = Opts::new()
        .set("trusted_proxies", "[\"127.0.0.1\"]")
        .set("task_semaphore_size", VALID_WORKERS + 5)
        .set("admission_queue", 0);
    for (k, v) in HARDENING {
        opts = opts.set(k, v);
    }
    let server = TestServer::start_with(opts).await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run_id = create_run(&server, "bob", fixed_args(3_200_000)).await;
    approve(&server, "boss", &run_id).await;
    let ctx = Arc::new(Ctx {
        base: server.url(""),
        deadline: Instant::now() + Duration::from_secs(secs),
        run_id,
    });
    eprintln!(
        "soak: {secs} s, {VALID_WORKERS} valid workers, {SPRAYERS} sprayers, waves of {} \
         stalled connections every {WAVE_EVERY:?}",
        STALLED_HALF_HEADER + STALLED_SILENT + STALLED_HALF_BODY
    );
    let client = || {
        reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client")
    };

    // Stalled connections: a wave now, and one every WAVE_EVERY while the storm lasts.
    let stalled: Arc<Mutex<Vec<Stalled>>> = Arc::new(Mutex::new(Vec::new()));
    let staller = {
        let (ctx, stalled, addr) = (ctx.clone(), stalled.clone(), server.addr);
        tokio::spawn(async move {
            while Instant::now() < ctx.deadline {
                let wave = stall_wave(addr).await;
                stalled.lock().extend(wave);
                tokio::time::sleep(
                    WAVE_EVERY.min(ctx.deadline.saturating_duration_since(Instant::now())),
                )
                .await;
            }
        })
    };
    // Wait for the first wave before the storm starts, so that it stalls through all of it.
    while stalled.lock().is_empty() {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // Health probe.
    let prober = {
        let (ctx, c) = (ctx.clone(), client());
        tokio::spawn(async move {
            let mut failures = Vec::new();
            let mut probes = 0u64;
            while Instant::now() < ctx.deadline {
                probes += 1;
                let started = Instant::now();
                let r = c
                    .get(format!("{}/healthz", ctx.base))
                    .timeout(Duration::from_secs(10))
                    .send()
                    .await;
                match r {
                    Ok(r) if r.status() == 200 => {}
                    Ok(r) => failures.push(format!("/healthz: {}", r.status())),
                    Err(e) => failures.push(format!(
                        "/healthz: no reply after {:.1} s: {e:?}",
                        started.elapsed().as_secs_f64()
                    )),
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            (probes, failures)
        })
    };

    let spray_client = client();
    let sprayers: Vec<_> = (0..SPRAYERS)
        .map(|i| tokio::spawn(sprayer(ctx.clone(), spray_client.clone(), i)))
        .collect();
    // The spray gets going first, alone: meanwhile, nobody with a valid password is at the
    // request_task gate, so every place taken is the spray's.
    let mut spray_places = 0.0f64;
    let alone = Instant::now() + Duration::from_secs(2);
    while Instant::now() < alone {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let gate = [("gate", "request_task")];
        let held = server.metric("shoal_gate_queued", &gate).await
            + server.metric("shoal_gate_running", &gate).await;
        spray_places = spray_places.max(held);
    }
    let worker_client = client();
    let workers: Vec<_> = (0..VALID_WORKERS)
        .map(|n| tokio::spawn(valid_worker(ctx.clone(), worker_client.clone(), n)))
        .collect();

    let join_deadline = ctx.deadline + Duration::from_secs(90);
    let mut problems: Vec<String> = Vec::new();
    let mut logs = Vec::new();
    for (n, h) in workers.into_iter().enumerate() {
        match tokio::time::timeout_at(join_deadline.into(), h).await {
            Ok(Ok(log)) => logs.push(log),
            Ok(Err(e)) => problems.push(format!("valid worker {n} panicked: {e}")),
            Err(_) => problems.push(format!("valid worker {n} still busy 90 s after the end")),
        }
    }
    let mut spray = Vec::new();
    for h in sprayers {
        match tokio::time::timeout_at(join_deadline.into(), h).await {
            Ok(Ok(log)) => spray.push(log),
            Ok(Err(e)) => problems.push(format!("a sprayer panicked: {e}")),
            Err(_) => problems.push("a sprayer still busy 90 s after the end".into()),
        }
    }
    let _ = staller.await;
    let (probes, probe_failures) = prober.await.expect("prober");

    // 1. Valid workers were served.
    let mut acked: HashMap<(String, u64), Totals> = HashMap::new();
    let (mut calls, mut tasks, mut no_task, mut updates, mut too_busy) = (0, 0, 0, 0, 0);
    let mut slowest = 0.0f64;
    let mut worker_problems = Vec::new();
    for (n, log) in logs.iter().enumerate() {
        calls += log.calls;
        tasks += log.tasks;
        no_task += log.no_task;
        updates += log.updates_acked;
        too_busy += log.too_busy;
        slowest = slowest.max(log.slowest_request_task);
        if log.tasks == 0 {
            worker_problems.push(format!("valid worker {n} never got a task"));
        }
        worker_problems.extend(
            log.problems
                .iter()
                .map(|p| format!("valid worker {n}: {p}")),
        );
        acked.extend(log.acked.iter().map(|(k, v)| (k.clone(), *v)));
    }
    if too_busy > 0 {
        problems.push(format!(
            "valid workers were told \"too busy\" {too_busy} times, though the gate has a \
             place for each of them: the spray took gate places"
        ));
    }
    if !worker_problems.is_empty() {
        problems.push(format!(
            "{} valid requests failed, e.g.:\n    {}",
            worker_problems.len(),
            worker_problems
                .iter()
                .take(8)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n    ")
        ));
    }
    if updates == 0 {
        problems.push("no update was acknowledged at all".into());
    }

    // 2. Nothing acknowledged is lost: the run's totals are exactly the acknowledged totals,
    // and each task holds its last acknowledged totals.
    let mut want = Totals::default();
    for t in acked.values() {
        want.wins += t.wins;
        want.losses += t.losses;
        want.draws += t.draws;
        for i in 0..5 {
            want.pentanomial[i] += t.pentanomial[i];
        }
    }
    let (status, run) = server
        .get_json(&format!("/api/get_run/{}", ctx.run_id))
        .await;
    let results = &run["results"];
    let got = (
        results["wins"].as_u64(),
        results["losses"].as_u64(),
        results["draws"].as_u64(),
        serde_json::from_value::<[u64; 5]>(results["pentanomial"].clone()).ok(),
    );
    if status != 200
        || got
            != (
                Some(want.wins),
                Some(want.losses),
                Some(want.draws),
                Some(want.pentanomial),
            )
    {
        problems.push(format!(
            "the run's totals are not the acknowledged totals: run {status} {results}, \
             acknowledged {want:?}"
        ));
    }
    let mut task_mismatches = Vec::new();
    for ((run_id, task_id), t) in &acked {
        let (status, task) = server
            .get_json(&format!("/api/get_task/{run_id}/{task_id}"))
            .await;
        let s = &task["stats"];
        if status != 200
            || s["wins"].as_u64() != Some(t.wins)
            || s["losses"].as_u64() != Some(t.losses)
            || s["draws"].as_u64() != Some(t.draws)
        {
            task_mismatches.push(format!("task {task_id}: {status} {s}, acknowledged {t:?}"));
        }
    }
    if !task_mismatches.is_empty() {
        problems.push(format!(
            "{} tasks do not hold their acknowledged totals, e.g. {}",
            task_mismatches.len(),
            task_mismatches[0]
        ));
    }

    // 3. The spray was refused, and never took a gate place.
    let mut spray_statuses: BTreeMap<u16, u64> = BTreeMap::new();
    let (mut spray_busy, mut spray_transport) = (0, 0);
    let mut spray_problems = Vec::new();
    let mut first_transport = None;
    for log in &spray {
        for (s, n) in &log.statuses {
            *spray_statuses.entry(*s).or_default() += n;
        }
        spray_busy += log.too_busy;
        spray_transport += log.transport_errors;
        spray_problems.extend(log.problems.iter().cloned());
        if first_transport.is_none() {
            first_transport = log.first_transport_error.clone();
        }
    }
    if spray_places > 0.0 {
        problems.push(format!(
            "wrong passwords held up to {spray_places} request_task gate places (before the \
             valid workers started): they entered the gate before their credentials were \
             checked"
        ));
    }
    if spray_busy > 0 {
        problems.push(format!(
            "wrong passwords were answered \"too busy\" {spray_busy} times: they took a gate \
             place before their credentials were checked"
        ));
    }
    if !spray_problems.is_empty() {
        problems.push(format!(
            "wrong passwords answered other than 401 or 429 (with Retry-After and the error \
             shape), e.g.:\n    {}",
            spray_problems
                .iter()
                .take(5)
                .cloned()
                .collect::<Vec<_>>()
                .join("\n    ")
        ));
    }

    // 4. /healthz answered throughout, and answers now.
    if !probe_failures.is_empty() {
        problems.push(format!(
            "{} of {probes} health probes failed, e.g. {}",
            probe_failures.len(),
            probe_failures[0]
        ));
    }
    let (status, health) = server.get_json("/healthz").await;
    if status != 200 {
        problems.push(format!("/healthz after the storm: {status} {health}"));
    }

    // 5. The server let go of every stalled connection older than its read timeouts.
    let mut stalled = std::mem::take(&mut *stalled.lock());
    let checks = stalled.iter_mut().map(|s| async move {
        if s.opened.elapsed() < STALL_LIMIT {
            return None;
        }
        Some((s.kind, server_let_go(s).await))
    });
    let verdicts = futures::future::join_all(checks).await;
    let mut still_open: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    for (kind, let_go) in verdicts.into_iter().flatten() {
        let e = still_open.entry(kind).or_default();
        e.1 += 1;
        if !let_go {
            e.0 += 1;
        }
    }
    if still_open.values().any(|(open, _)| *open > 0) {
        problems.push(format!(
            "stalled connections older than {STALL_LIMIT:?} still open (open, of): {still_open:?}"
        ));
    }
    drop(stalled);

    // 6. After the spray, alice's correct password works from another address.
    let alice = worker_info("alice", 8, &key(30_000));
    let r = post(
        &server.client,
        server.url("/api/request_version"),
        &json!({"password": PASSWORD, "worker_info": alice}),
        Some("192.0.2.77"),
    )
    .await;
    if !matches!(&r, Ok((200, _, _))) {
        problems.push(format!(
            "after the spray, alice's correct password from another address: {r:?}"
        ));
    }

    eprintln!(
        "soak: valid workers: {calls} requests, {tasks} tasks, {updates} updates acknowledged, \
         {no_task} \"no task\", {too_busy} \"too busy\", slowest request_task {slowest:.2} s; \
         spray: {spray_statuses:?}, {spray_busy} \"too busy\", {spray_transport} transport \
         errors {first_transport:?}; health probes: {probes}; stalled (open, of): \
         {still_open:?}"
    );
    assert!(
        problems.is_empty(),
        "soak test found {} problems:\n- {}",
        problems.len(),
        problems.join("\n- ")
    );
}

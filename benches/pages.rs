//! Pages under load: the dashboard, its live refresh (the panels part unchanged, answered 304
//! against the client's version, and changed, and the workers table) and a run page (when
//! the server has one) and its tasks table's refresh, each for 20 concurrent clients on a
//! run database of 200 approved runs and 10,000 active tasks, and `beat` measured over HTTP
//! in the same process (server, page clients and beat client on three runtimes of their
//! own), first alone, then during the page load.
//!
//! Run with `cargo bench --bench pages`. The server is the real one (state, router, middleware,
//! connection loop) on a loopback port of this process; the clients are `reqwest`. Numbers, not
//! assertions: BENCHMARKS.md records them.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

mod common;

use common::worker;
use hdrhistogram::Histogram;
use serde_json::{Value, json};
use shoal::config::Config;
use shoal::rundb::create::CreateArgs;
use shoal::rundb::model::WorkerInfo;
use shoal::rundb::outcome::Assignment;

const RUNS: usize = 200;
const ACTIVE_TASKS: usize = 10_000;
const PAGE_CLIENTS: usize = 20;
const PHASE: Duration = Duration::from_secs(10);
const PASSWORD: &str = "bench password";

/// The 16 keys a worker sends (without the server's own `remote_addr` and `country_code`).
fn worker_json(w: &WorkerInfo) -> Value {
    let mut v = serde_json::to_value(w).expect("worker_info");
    if let Value::Object(m) = &mut v {
        m.remove("remote_addr");
        m.remove("country_code");
    }
    v
}

fn report(name: &str, h: &Histogram<u64>) {
    let ms = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
    println!(
        "{name:<52} n={:<7} p50={:>8.2} ms p90={:>8.2} ms p99={:>8.2} ms max={:>8.2} ms",
        h.len(),
        ms(0.5),
        ms(0.9),
        ms(0.99),
        h.max() as f64 / 1000.0
    );
}

fn histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("histogram")
}

/// Requests `url` with `headers` in a loop until `stop`, recording latencies (µs).
async fn load(
    client: reqwest::Client,
    url: String,
    headers: Vec<(&'static str, String)>,
    stop: Arc<AtomicBool>,
) -> Histogram<u64> {
    let mut h = histogram();
    while !stop.load(Ordering::Relaxed) {
        let t = Instant::now();
        let mut req = client.get(&url);
        for (k, v) in &headers {
            req = req.header(*k, v);
        }
        let r = req.send().await.expect("page");
        let ok = r.status().is_success() || r.status() == reqwest::StatusCode::NOT_MODIFIED;
        assert!(ok, "{url}: {}", r.status());
        let _ = r.bytes().await.expect("page body");
        let _ = h.record(t.elapsed().as_micros().max(1) as u64);
    }
    h
}

/// Beats in a loop (one beat every 2 ms, cycling over tasks) for `d`, recording latencies.
async fn beats(
    client: reqwest::Client,
    url: String,
    bodies: Arc<Vec<Value>>,
    d: Duration,
) -> Histogram<u64> {
    let mut h = histogram();
    let end = Instant::now() + d;
    let mut i = 0;
    while Instant::now() < end {
        let t = Instant::now();
        let r = client
            .post(&url)
            .json(&bodies[i % bodies.len()])
            .send()
            .await
            .expect("beat");
        let v: Value = r.json().await.expect("beat reply");
        assert_eq!(v["task_alive"], true, "{v}");
        let _ = h.record(t.elapsed().as_micros().max(1) as u64);
        i += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    h
}

fn main() {
    // Three runtimes, as three machines would have: the server's (two event-loop threads, as
    // on a 2-core server), the page clients', and this one (set-up and the beat client), so a
    // beat's reply never waits in the same task queue as the page clients' work. They still
    // share the machine's cores.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("server")
        .enable_all()
        .build()
        .expect("server runtime");
    let load_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("page-clients")
        .enable_all()
        .build()
        .expect("client runtime");
    runtime.block_on(async {
        let dir = tempfile::tempdir().expect("tempdir");
        // SHOAL_* settings from the environment apply (e.g. SHOAL_PAGE_RENDER_CONCURRENCY).
        let mut env: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with("SHOAL_"))
            .collect();
        env.push(("SHOAL_DATA_DIR".into(), dir.path().display().to_string()));
        env.push(("SHOAL_LOG".into(), "warn".into()));
        let config = Config::from_sources(None, "bench", env).expect("config");
        let state = shoal::app::build_state(config).await.expect("state");
        let db = state.rundb.clone();
        let scheduler = state.scheduler.clone();
        let accounts = state.accounts.clone();
        let started = Instant::now();
        let (first_run, tasks) = state
            .offload
            .run(move || {
                let user = accounts
                    .users()
                    .add("bench", PASSWORD, "", false, Some(u32::MAX))
                    .expect("user");
                let boss = accounts
                    .users()
                    .add("boss", "pw", "", true, None)
                    .expect("boss");
                let mut first = String::new();
                for i in 0..RUNS {
                    let args: CreateArgs = serde_json::from_value(json!({
                        "base_tag": "master", "new_tag": format!("patch{i}"),
                        "resolved_base": "a".repeat(40), "resolved_new": "b".repeat(40),
                        "base_signature": "1", "new_signature": "2",
                        "base_options": "Hash=16", "new_options": "Hash=16",
                        "tc": "10+0.1", "book": "UHO_Lichess_4852_v1.epd", "threads": 1,
                        "tests_repo": "https://github.com/official-stockfish/Stockfish",
                        "num_games": 100_000, "throughput": 100 + i % 50,
                    }))
                    .expect("args");
                    let id = db.create_run(args, &user).expect("create");
                    db.approve_run(&id, &boss).expect("approve");
                    if first.is_empty() {
                        first = id;
                    }
                }
                let mut tasks = Vec::with_capacity(ACTIVE_TASKS);
                for n in 0..ACTIVE_TASKS {
                    let (reply, _) = scheduler.assign(&user, worker(n)).expect("request_task");
                    let Assignment::Task(t) = reply else {
                        panic!("no task: {reply:?}");
                    };
                    tasks.push((t.run_id, t.task_id, n));
                }
                (first, tasks)
            })
            .await
            .expect("set-up");
        let first_tasks = tasks.iter().filter(|(run, _, _)| *run == first_run).count();
        println!(
            "set-up: {RUNS} runs, {ACTIVE_TASKS} active tasks in {:.1?} (the run page's run has \
             {first_tasks})",
            started.elapsed()
        );

        let std_listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        std_listener.set_nonblocking(true).expect("nonblocking");
        let addr = std_listener.local_addr().expect("addr");
        let app = shoal::http::router(state.clone());
        let shutdown = shoal::http::conn::Shutdown::new();
        let timeouts = shoal::http::conn::ConnTimeouts {
            header_read: Duration::from_secs(10),
            keepalive: Duration::from_secs(30),
        };
        // The listener (and every connection it accepts) lives on the server's runtime.
        let server_shutdown = shutdown.clone();
        server_rt.spawn(async move {
            let listener = tokio::net::TcpListener::from_std(std_listener).expect("listener");
            shoal::http::conn::serve(listener, app, timeouts, server_shutdown).await
        });
        let base = format!("http://{addr}");
        let client = reqwest::Client::new();

        // Beats over HTTP for 1,000 of the tasks (the credential cache warms on the first).
        let bodies: Arc<Vec<Value>> = Arc::new(
            tasks
                .iter()
                .take(1000)
                .map(|(run, task, n)| {
                    json!({"password": PASSWORD, "worker_info": worker_json(&worker(*n)),
                           "run_id": run, "task_id": task})
                })
                .collect(),
        );
        let beat_url = format!("{base}/api/beat");
        let _ = beats(
            client.clone(),
            beat_url.clone(),
            bodies.clone(),
            Duration::from_secs(1),
        )
        .await;
        let alone = beats(client.clone(), beat_url.clone(), bodies.clone(), PHASE).await;

        let hx = || vec![("hx-request", "true".to_string())];
        let mut pages = vec![
            ("/tests".to_string(), "dashboard /tests", Vec::new()),
            (
                "/tests?live=panels".to_string(),
                "refresh ?live=panels, changed (200)",
                hx(),
            ),
            (
                "/tests?live=workers".to_string(),
                "refresh ?live=workers (200)",
                hx(),
            ),
        ];
        // The client's version: what the refresh sends when nothing changed (304).
        let etag = client
            .get(format!("{base}/tests?live=panels"))
            .header("hx-request", "true")
            .send()
            .await
            .ok()
            .and_then(|r| r.headers().get("etag")?.to_str().ok().map(str::to_string));
        if let Some(etag) = etag {
            let mut h = hx();
            h.push(("if-none-match", etag));
            pages.insert(
                1,
                (
                    "/tests?live=panels".to_string(),
                    "refresh ?live=panels, unchanged (304)",
                    h,
                ),
            );
        }
        let run_page = format!("/tests/view/{first_run}");
        if client
            .get(format!("{base}{run_page}"))
            .send()
            .await
            .is_ok_and(|r| r.status().is_success())
        {
            pages.push((run_page, "run page /tests/view/{id}", Vec::new()));
            pages.push((
                format!("/tests/tasks/{first_run}"),
                "refresh /tests/tasks/{id} (one page of tasks)",
                hx(),
            ));
        }
        for (path, name, headers) in &pages {
            // What one answer weighs (the body as sent, no compression asked).
            let mut probe = client.get(format!("{base}{path}"));
            for (k, v) in headers {
                probe = probe.header(*k, v);
            }
            let bytes = probe
                .send()
                .await
                .expect("probe")
                .bytes()
                .await
                .expect("body");
            println!("{name}: {} bytes", bytes.len());
            let stop = Arc::new(AtomicBool::new(false));
            let loaders: Vec<_> = (0..PAGE_CLIENTS)
                .map(|_| {
                    load_rt.spawn(load(
                        reqwest::Client::new(),
                        format!("{base}{path}"),
                        headers.clone(),
                        stop.clone(),
                    ))
                })
                .collect();
            let during = beats(client.clone(), beat_url.clone(), bodies.clone(), PHASE).await;
            stop.store(true, Ordering::Relaxed);
            let mut page = histogram();
            for l in loaders {
                page.add(l.await.expect("loader")).expect("merge");
            }
            report(&format!("{name}, {PAGE_CLIENTS} clients"), &page);
            report("beat during that page load", &during);
        }
        report("beat alone (no page load)", &alone);
        shutdown.trigger();
    });
}

//! The worker against a scripted server: the order of calls, the back-off, the
//! heartbeat, cumulative stats, and a reply that would kill the real worker.

use super::*;
use crate::client::{Client, ClientConfig, ConnMode};
use crate::schedule::TimeScale;
use crate::stats::GameModel;
use axum::Json;
use axum::extract::State;
use axum::routing::post;
use parking_lot::Mutex;

const RUN_ID: &str = "0123456789abcdef01234567";
const SCALE: f64 = 600.0;
const TASK_GAMES: u64 = 16;

type Call = (String, Instant, Value);

#[derive(Default)]
struct Script {
    calls: Vec<Call>,
    request_tasks: usize,
    /// Omit `duration` from request_task replies.
    broken: bool,
}

type Shared = Arc<Mutex<Script>>;

fn reply(mut v: Value) -> Json<Value> {
    v["duration"] = json!(0.001);
    Json(v)
}

fn games(stats: &Value) -> u64 {
    ["wins", "losses", "draws"]
        .iter()
        .map(|k| stats[k].as_u64().unwrap_or(0))
        .sum()
}

async fn handle(name: &'static str, state: Shared, body: Value) -> Json<Value> {
    let mut s = state.lock();
    s.calls
        .push((name.to_string(), Instant::now(), body.clone()));
    match name {
        "request_version" => reply(json!({"version": WORKER_VERSION})),
        "request_task" => {
            s.request_tasks += 1;
            if s.broken {
                return Json(json!({"task_waiting": false}));
            }
            match s.request_tasks {
                1 => reply(json!({"task_waiting": false,
                    "info": "Request_task: the server is currently too busy..."})),
                2 => reply(json!({
                    "run": {"_id": RUN_ID,
                            "args": {"tc": "10+0.1", "threads": 1, "sprt": {"batch_size": 2}},
                            "my_task": {"num_games": TASK_GAMES, "start": 0, "stats": {
                                "wins": 0, "losses": 0, "draws": 0, "crashes": 0,
                                "time_losses": 0, "pentanomial": [0, 0, 0, 0, 0]}}},
                    "task_id": 0,
                })),
                _ => reply(json!({"task_waiting": false})),
            }
        }
        "update_task" => reply(json!({"task_alive": games(&body["stats"]) < TASK_GAMES})),
        "beat" => reply(json!({"task_alive": true})),
        _ => reply(json!({})),
    }
}

/// Runs one worker for `seconds` against the scripted server; returns the calls it made.
async fn scripted(broken: bool, seconds: f64) -> (Vec<Call>, Arc<Fleet>) {
    let state: Shared = Arc::new(Mutex::new(Script {
        broken,
        ..Script::default()
    }));
    let mut app = axum::Router::new();
    for name in [
        "request_version",
        "request_task",
        "update_task",
        "beat",
        "failed_task",
        "upload_pgn",
    ] {
        app = app.route(
            &format!("/api/{name}"),
            post(move |State(s): State<Shared>, Json(b): Json<Value>| handle(name, s, b)),
        );
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = app.with_state(state.clone());
    let server = tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service()).await;
    });
    let t0 = Instant::now();
    let fleet = Arc::new(Fleet {
        client: Client::new(ClientConfig {
            server: addr,
            mode: ConnMode::Fresh,
            sources: Vec::new(),
            pool_idle: 0,
            max_open: 64,
            timeout: Duration::from_secs(10),
        }),
        rec: Recorder::new(t0).expect("recorder"),
        scale: TimeScale::new(SCALE).expect("scale"),
        deadline: t0 + Duration::from_secs_f64(seconds),
        password: "pw".into(),
        model: GameModel::new(0.0, 0.5),
        failed_rate: 0.0,
        seed: 3,
        ledger: Default::default(),
    });
    run(fleet.clone(), 0, Duration::ZERO, "simw00".into()).await;
    // A heartbeat still in flight finishes by itself.
    tokio::time::sleep(Duration::from_millis(50)).await;
    server.abort();
    let calls = state.lock().calls.clone();
    (calls, fleet)
}

#[tokio::test]
async fn follows_the_official_worker() {
    let (calls, fleet) = scripted(false, 2.0).await;
    let names: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
    // Start-up: the credential check and the version check.
    assert_eq!(&names[..3], &["request_version"; 3], "{names:?}");
    // request_version before every request_task; request_version carries only the username.
    for (i, n) in names.iter().enumerate() {
        if *n == "request_task" {
            assert_eq!(names[i - 1], "request_version", "{names:?}");
        }
    }
    let rv = &calls[0].2;
    assert_eq!(rv["worker_info"], json!({"username": "simw00"}));
    // Every other call carries the full 16-key worker_info.
    for (name, _, body) in &calls {
        if name != "request_version" {
            let wi = body["worker_info"].as_object().expect("worker_info");
            assert_eq!(wi.len(), 16, "{name}");
        }
    }
    // Too busy: 15 simulated seconds before the next iteration.
    let rt: Vec<&Call> = calls.iter().filter(|c| c.0 == "request_task").collect();
    assert!(rt.len() >= 4, "{names:?}");
    let next_rv = calls
        .iter()
        .find(|c| c.0 == "request_version" && c.1 > rt[0].1)
        .expect("next iteration");
    let min_gap = Duration::from_secs_f64(15.0 / SCALE);
    assert!(next_rv.1 - rt[0].1 >= min_gap);
    // The task: a beat during the engine build (more than 120 s without an update), then
    // updates at each 4-game batch with cumulative, consistent stats, then the PGN.
    let task_calls: Vec<&Call> = calls
        .iter()
        .filter(|c| c.2.get("run_id").is_some())
        .collect();
    assert_eq!(task_calls[0].0, "beat", "{names:?}");
    let updates: Vec<&Call> = task_calls
        .iter()
        .copied()
        .filter(|c| c.0 == "update_task")
        .collect();
    assert_eq!(updates.len() as u64, TASK_GAMES / 4);
    let mut last = 0;
    for u in &updates {
        let stats: Stats = serde_json::from_value(u.2["stats"].clone()).expect("stats");
        stats.check().expect("consistent");
        assert_eq!(stats.games(), last + 4);
        last = stats.games();
    }
    let upload = task_calls.last().expect("calls");
    assert_eq!(upload.0, "upload_pgn");
    assert_eq!(upload.2["message"], "");
    // After the task (a success), no back-off; then "no task" replies back off 15, 30,
    // 60… simulated seconds.
    let after: Vec<&&Call> = rt.iter().skip(2).collect();
    for (k, pair) in after.windows(2).enumerate() {
        let gap = pair[1].1 - pair[0].1;
        let want = Duration::from_secs_f64(15.0 * 2f64.powi(k as i32) / SCALE);
        assert!(gap >= want, "gap {k}: {gap:?} < {want:?}");
    }
    let r = fleet
        .rec
        .summarize(Duration::from_secs(2), 1, Default::default());
    assert_eq!(r.too_busy, 1);
    assert_eq!(r.tasks.completed, 1);
    assert_eq!(r.tasks.games_reported, TASK_GAMES);
    assert_eq!(r.errors_total, 0);
    assert_eq!(r.workers.exits.get("deadline"), Some(&1));
}

#[tokio::test]
async fn a_reply_without_duration_ends_the_worker() {
    let (calls, fleet) = scripted(true, 1.0).await;
    let names: Vec<&str> = calls.iter().map(|c| c.0.as_str()).collect();
    // The real worker dies with a KeyError on the first request_task: nothing follows.
    assert_eq!(names.last(), Some(&"request_task"), "{names:?}");
    assert_eq!(names.iter().filter(|n| **n == "request_task").count(), 1);
    let r = fleet
        .rec
        .summarize(Duration::from_secs(1), 1, Default::default());
    assert_eq!(r.workers.exits.get("protocol"), Some(&1));
    assert_eq!(r.errors.get("request_task:no_duration"), Some(&1));
}

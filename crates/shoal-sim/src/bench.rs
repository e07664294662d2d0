//! Baselines measured in the same run, against the same server, to put the fleet's figures
//! in context.
//!
//! Owns: (1) the open-loop replay of the fleet's own call schedule (the start time of every
//! call it made) against `GET /healthz`, which the server answers on its event loop without
//! the pool or the store: the ceiling of HTTP on this machine for the same load and the same
//! connection mode; (2) closed-loop saturation at a fixed number of keep-alive connections
//! (50 by default, as `wrk -c 50` would), of `POST /api/beat` (a real beat of a real task)
//! and of `GET /healthz`, so the beat figure can be compared with other servers.
//! Must not: share histograms with the fleet phase, or run longer than asked.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use hyper::Method;
use hyper::body::Bytes;
use parking_lot::Mutex;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::SimError;
use super::client::{Client, ClientConfig, ConnMode};
use super::latency::{LatencySummary, new_histogram};
use super::stats::Identity;

/// Attempts to get a task for the beat benchmark.
const TASK_ATTEMPTS: u32 = 200;

/// The fleet's call schedule replayed against `/healthz`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ReplayResult {
    pub path: String,
    /// The first `window_s` seconds of the fleet's schedule.
    pub window_s: f64,
    pub calls: u64,
    pub errors: u64,
    pub offered_per_second: f64,
    pub latency: LatencySummary,
    pub server_cpu_seconds: Option<f64>,
}

/// Closed-loop saturation at a fixed number of keep-alive connections.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClosedLoopResult {
    pub method: String,
    pub path: String,
    pub connections: usize,
    pub seconds: f64,
    pub requests: u64,
    pub errors: u64,
    pub requests_per_second: f64,
    pub latency: LatencySummary,
    pub server_cpu_seconds: Option<f64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Baselines {
    pub replay_healthz: Option<ReplayResult>,
    pub closed_loop_beat: Option<ClosedLoopResult>,
    pub closed_loop_healthz: Option<ClosedLoopResult>,
    /// beat requests/s ÷ healthz requests/s at the same connection count.
    pub beat_to_healthz: Option<f64>,
    pub notes: Vec<String>,
}

fn hist() -> Result<Histogram<u64>, SimError> {
    new_histogram(3).map_err(|e| SimError::Report(e.to_string()))
}

/// Replays the call start offsets (ms, ascending) that fall in the first `window` against
/// `GET /healthz`, open loop: each call starts on schedule whatever the others do.
pub async fn replay_healthz(
    client: Arc<Client>,
    starts_ms: &[u32],
    window: Duration,
    timeout: Duration,
) -> Result<ReplayResult, SimError> {
    let window_ms = u32::try_from(window.as_millis()).unwrap_or(u32::MAX);
    let h = Arc::new(Mutex::new(hist()?));
    let errors = Arc::new(AtomicU64::new(0));
    let t0 = Instant::now() + Duration::from_millis(50);
    let mut handles = Vec::new();
    for &ms in starts_ms.iter().take_while(|ms| **ms < window_ms) {
        let at = t0 + Duration::from_millis(u64::from(ms));
        if at > Instant::now() {
            tokio::time::sleep_until(at.into()).await;
        }
        let (client, h, errors) = (client.clone(), h.clone(), errors.clone());
        handles.push(tokio::spawn(async move {
            let started = Instant::now();
            match client.call(Method::GET, "/healthz", None).await {
                Ok(r) if r.status == 200 => {
                    let us = started.elapsed().as_micros() as u64;
                    h.lock().saturating_record(us.max(1));
                }
                _ => {
                    errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    let calls = handles.len() as u64;
    let _ = tokio::time::timeout(timeout + Duration::from_secs(2), async {
        for handle in handles {
            let _ = handle.await;
        }
    })
    .await;
    let latency = LatencySummary::from_histogram(&h.lock());
    let window_s = window.as_secs_f64();
    Ok(ReplayResult {
        path: "/healthz".into(),
        window_s,
        calls,
        errors: errors.load(Ordering::Relaxed),
        offered_per_second: if window_s > 0.0 {
            calls as f64 / window_s
        } else {
            0.0
        },
        latency,
        server_cpu_seconds: None,
    })
}

/// `connections` loops, each sending `method path` back to back on its own keep-alive
/// connection for `secs` seconds.
pub async fn closed_loop(
    server: std::net::SocketAddr,
    connections: usize,
    secs: f64,
    method: Method,
    path: &str,
    body: Option<Bytes>,
    timeout: Duration,
) -> Result<ClosedLoopResult, SimError> {
    let connections = connections.max(1);
    let client = Arc::new(Client::new(ClientConfig {
        server,
        mode: ConnMode::Pooled,
        sources: Vec::new(),
        pool_idle: connections,
        max_open: connections,
        timeout,
    }));
    let h = Arc::new(Mutex::new(hist()?));
    let errors = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let deadline = started + Duration::from_secs_f64(secs.max(0.0));
    let mut handles = Vec::with_capacity(connections);
    for _ in 0..connections {
        let (client, h, errors) = (client.clone(), h.clone(), errors.clone());
        let (method, path, body) = (method.clone(), path.to_string(), body.clone());
        handles.push(tokio::spawn(async move {
            let mut local = match new_histogram(3) {
                Ok(l) => l,
                Err(_) => return,
            };
            while Instant::now() < deadline {
                let t = Instant::now();
                match client.call(method.clone(), &path, body.clone()).await {
                    Ok(r) if r.status == 200 && !is_api_error(&r.body) => {
                        local.saturating_record((t.elapsed().as_micros() as u64).max(1));
                    }
                    _ => {
                        errors.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            let _ = h.lock().add(&local);
        }));
    }
    for handle in handles {
        let _ = handle.await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let h = h.lock();
    Ok(ClosedLoopResult {
        method: method.to_string(),
        path: path.to_string(),
        connections,
        seconds: elapsed,
        requests: h.len(),
        errors: errors.load(Ordering::Relaxed),
        requests_per_second: if elapsed > 0.0 {
            h.len() as f64 / elapsed
        } else {
            0.0
        },
        latency: LatencySummary::from_histogram(&h),
        server_cpu_seconds: None,
    })
}

fn is_api_error(body: &[u8]) -> bool {
    serde_json::from_slice::<Value>(body).is_ok_and(|v| v.get("error").is_some())
}

/// Gets a task for a dedicated benchmark worker and returns the body of its beat, or None
/// if no run hands out a task.
pub async fn beat_body(
    client: &Client,
    username: &str,
    password: &str,
    seed: u64,
) -> Result<Option<Bytes>, SimError> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0xBEA7);
    // An index no fleet worker uses, so its short name is its own.
    let id = Identity::generate(u32::MAX - 7, seed, username, &mut rng);
    let body = json!({"password": password, "worker_info": id.info});
    let bytes = Bytes::from(serde_json::to_vec(&body).map_err(|e| SimError::Setup(e.to_string()))?);
    for _ in 0..TASK_ATTEMPTS {
        if let Ok(r) = client
            .call(Method::POST, "/api/request_task", Some(bytes.clone()))
            .await
            && let Ok(v) = serde_json::from_slice::<Value>(&r.body)
        {
            if let (Some(run_id), Some(task_id)) = (
                v.pointer("/run/_id").and_then(Value::as_str),
                v.get("task_id").and_then(Value::as_u64),
            ) {
                let beat = json!({"password": password, "worker_info": id.info,
                                  "run_id": run_id, "task_id": task_id});
                let b = serde_json::to_vec(&beat).map_err(|e| SimError::Setup(e.to_string()))?;
                return Ok(Some(Bytes::from(b)));
            }
            if v.get("error").is_some() {
                return Ok(None);
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(None)
}

//! The heartbeat of one task (docs/protocol.md#heartbeat-and-back-off), beside the game loop
//! as the official worker's thread.
//!
//! Owns: the clock of the last update or beat attempt (`LastUpdated`), what the heartbeat
//! tells the game loop (`Heart`: the task is gone), and when a beat is due.
//! Must not: touch the task's games or stats, or outlive its task or the run's deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::sync::{Notify, oneshot};

use super::fleet::{Fleet, Reply};
use super::measure::{Endpoint, TaskEvent};
use super::schedule::HEARTBEAT_S;

/// Heartbeats per task, at most.
const MAX_BEATS_PER_TASK: u32 = 1_000_000;

/// The heartbeat's clock, shared by the worker and its heartbeat: when the last update or
/// beat attempt happened.
pub(super) struct LastUpdated {
    base: Instant,
    nanos: AtomicU64,
}

impl LastUpdated {
    pub(super) fn new(at: Instant) -> LastUpdated {
        LastUpdated {
            base: at,
            nanos: AtomicU64::new(0),
        }
    }

    pub(super) fn set(&self, at: Instant) {
        let n = at.saturating_duration_since(self.base).as_nanos();
        self.nanos
            .store(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }

    pub(super) fn get(&self) -> Instant {
        self.base + Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }
}

/// What the heartbeat of one task tells the game loop.
pub(super) struct Heart {
    /// A beat answered `error` or `task_alive: false`.
    pub(super) dropped: AtomicBool,
    pub(super) notify: Notify,
}

/// The heartbeat (docs/protocol.md#heartbeat-and-back-off): runs beside the task, from the
/// request_task reply to the end of the task's handling, and beats when 120 simulated seconds
/// pass without an update or a beat — also during a slow update_task, as the real worker's
/// thread does. It sleeps until the next beat is due rather than waking every second; the real
/// thread's 1 s tick is kept as up to one second of jitter.
pub(super) async fn heartbeat(
    fleet: Arc<Fleet>,
    last: Arc<LastUpdated>,
    heart: Arc<Heart>,
    body: Value,
    mut stop: oneshot::Receiver<()>,
    tick_jitter: f64,
) {
    let period = fleet.scale.real(HEARTBEAT_S);
    let jitter = fleet.scale.real(tick_jitter);
    for _ in 0..MAX_BEATS_PER_TASK {
        let due = last.get() + period + jitter;
        let wake = due.min(fleet.deadline);
        tokio::select! {
            () = tokio::time::sleep_until(wake.into()) => {}
            _ = &mut stop => return,
        }
        let now = Instant::now();
        if now >= fleet.deadline {
            return;
        }
        if now < last.get() + period {
            continue;
        }
        let reply = match fleet.call(Endpoint::Beat, &body).await {
            Ok(r) => r,
            Err(_) => return,
        };
        last.set(Instant::now());
        fleet.rec.event(TaskEvent::Beat);
        let alive = match reply {
            Reply::Ok(m) => m.get("task_alive").and_then(Value::as_bool).unwrap_or(true),
            Reply::Error(_) => false,
            Reply::Failed { .. } => true,
        };
        if !alive {
            heart.dropped.store(true, Ordering::Release);
            heart.notify.notify_one();
            return;
        }
    }
}

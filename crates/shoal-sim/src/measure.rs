//! Measurement: what the fleet saw, and the fleet's part of the report built from it.
//!
//! Owns: the recorder every simulated worker writes to (per-endpoint HDR latency histograms,
//! per-second timeline, too-busy replies, errors by kind, task and worker counters, the start
//! time of every call for the baseline replay), the schema of the fleet's part of the report
//! ([`FleetReport`]), and its arithmetic (rates, the time until every worker held a task).
//! Percentiles are `latency`'s; the server's Prometheus text is `metrics`'s; the human
//! summary is `report`'s.
//! Must not: do network or file I/O, or decide anything about the protocol: it only counts
//! what the worker module tells it.
//!
//! Files: `measure/tests.rs`: the unit tests.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::client::ClientCounters;
use super::latency::{LatencySummary, new_histogram};

/// Distinct error texts kept (others are counted under "(other)").
const MAX_MESSAGES: usize = 50;
/// Call start times kept for the replay baseline.
const MAX_CALL_STARTS: usize = 50_000_000;
/// Seconds of timeline kept.
const MAX_SECONDS: usize = 24 * 3600;

/// The worker endpoints the simulator calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Endpoint {
    RequestVersion,
    RequestTask,
    UpdateTask,
    Beat,
    RequestSpsa,
    FailedTask,
    UploadPgn,
}

impl Endpoint {
    pub const ALL: [Endpoint; 7] = [
        Endpoint::RequestVersion,
        Endpoint::RequestTask,
        Endpoint::UpdateTask,
        Endpoint::Beat,
        Endpoint::RequestSpsa,
        Endpoint::FailedTask,
        Endpoint::UploadPgn,
    ];

    pub fn path(self) -> &'static str {
        match self {
            Endpoint::RequestVersion => "/api/request_version",
            Endpoint::RequestTask => "/api/request_task",
            Endpoint::UpdateTask => "/api/update_task",
            Endpoint::Beat => "/api/beat",
            Endpoint::RequestSpsa => "/api/request_spsa",
            Endpoint::FailedTask => "/api/failed_task",
            Endpoint::UploadPgn => "/api/upload_pgn",
        }
    }

    pub fn name(self) -> &'static str {
        &self.path()[5..]
    }

    fn index(self) -> usize {
        self as usize
    }
}

fn us(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX).max(1)
}

struct Second {
    calls: u64,
    request_task: u64,
    too_busy: u64,
    errors: u64,
    assigned: i64,
    latency: Histogram<u64>,
    server: ServerGauges,
}

/// The server's pool and gate as `/healthz` shows them (the most seen in a second).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerGauges {
    pub pool_in_use: u64,
    pub pool_waiting: u64,
    pub gate_running: u64,
    pub gate_queued: u64,
}

impl ServerGauges {
    fn max(self, o: ServerGauges) -> ServerGauges {
        ServerGauges {
            pool_in_use: self.pool_in_use.max(o.pool_in_use),
            pool_waiting: self.pool_waiting.max(o.pool_waiting),
            gate_running: self.gate_running.max(o.gate_running),
            gate_queued: self.gate_queued.max(o.gate_queued),
        }
    }
}

impl Second {
    fn new(latency: Histogram<u64>) -> Second {
        Second {
            calls: 0,
            request_task: 0,
            too_busy: 0,
            errors: 0,
            assigned: 0,
            latency,
            server: ServerGauges::default(),
        }
    }
}

/// Why a simulated worker process ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum ExitReason {
    /// The run ended (the normal case).
    Deadline,
    /// request_version answered `error` or could not be checked at start-up.
    Credentials,
    /// A reply the official worker cannot handle (it would crash or exit).
    Protocol,
}

impl ExitReason {
    fn name(self) -> &'static str {
        match self {
            ExitReason::Deadline => "deadline",
            ExitReason::Credentials => "credentials",
            ExitReason::Protocol => "protocol",
        }
    }
}

/// Task-level counters.
#[derive(Debug, Clone, Copy)]
pub enum TaskEvent {
    Assigned,
    /// Played to the end (the last update was sent).
    Completed,
    /// Ended early because the server said `task_alive: false` (or a beat error).
    DroppedByServer,
    /// Ended with failed_task (injected failure or an update error).
    Failed,
    Update,
    Beat,
    PgnUploaded,
}

/// Everything the fleet records while it runs. Shared by all workers.
pub struct Recorder {
    t0: Instant,
    /// Empty histograms to clone: 3 significant digits (endpoints), 2 (per second).
    fine: Histogram<u64>,
    coarse: Histogram<u64>,
    endpoints: Vec<Mutex<Histogram<u64>>>,
    connect: Mutex<Histogram<u64>>,
    probe: Mutex<Histogram<u64>>,
    seconds: Mutex<Vec<Second>>,
    errors: Mutex<BTreeMap<String, u64>>,
    messages: Mutex<BTreeMap<String, u64>>,
    call_starts: Mutex<Vec<u32>>,
    too_busy: AtomicU64,
    no_task: AtomicU64,
    assigned_now: AtomicI64,
    tasks: [AtomicU64; 7],
    games: AtomicU64,
    games_by_run: Mutex<BTreeMap<String, u64>>,
    exits: Mutex<BTreeMap<ExitReason, u64>>,
    workers_started: AtomicU64,
    workers_with_task: AtomicU64,
    /// Milliseconds from t0 at which the last worker got its first task.
    last_first_task_ms: AtomicU64,
    first_task_wait: Mutex<Histogram<u64>>,
}

impl Recorder {
    pub fn new(t0: Instant) -> Result<Recorder, hdrhistogram::CreationError> {
        let fine = new_histogram(3)?;
        let coarse = new_histogram(2)?;
        Ok(Recorder {
            t0,
            endpoints: Endpoint::ALL
                .iter()
                .map(|_| Mutex::new(fine.clone()))
                .collect(),
            connect: Mutex::new(fine.clone()),
            probe: Mutex::new(fine.clone()),
            seconds: Mutex::new(Vec::new()),
            errors: Mutex::new(BTreeMap::new()),
            messages: Mutex::new(BTreeMap::new()),
            call_starts: Mutex::new(Vec::new()),
            too_busy: AtomicU64::new(0),
            no_task: AtomicU64::new(0),
            assigned_now: AtomicI64::new(0),
            tasks: Default::default(),
            games: AtomicU64::new(0),
            games_by_run: Mutex::new(BTreeMap::new()),
            exits: Mutex::new(BTreeMap::new()),
            workers_started: AtomicU64::new(0),
            workers_with_task: AtomicU64::new(0),
            last_first_task_ms: AtomicU64::new(0),
            first_task_wait: Mutex::new(fine.clone()),
            fine,
            coarse,
        })
    }

    pub fn t0(&self) -> Instant {
        self.t0
    }

    fn second_of(&self, at: Instant) -> usize {
        (at.saturating_duration_since(self.t0).as_secs() as usize).min(MAX_SECONDS - 1)
    }

    fn with_second(&self, at: Instant, f: impl FnOnce(&mut Second)) {
        let i = self.second_of(at);
        let mut secs = self.seconds.lock();
        while secs.len() <= i {
            secs.push(Second::new(self.coarse.clone()));
        }
        f(&mut secs[i]);
    }

    /// A call is about to start (kept for the replay baseline).
    pub fn call_started(&self, at: Instant) {
        let ms = at.saturating_duration_since(self.t0).as_millis();
        let mut starts = self.call_starts.lock();
        if starts.len() < MAX_CALL_STARTS {
            starts.push(u32::try_from(ms).unwrap_or(u32::MAX));
        }
    }

    /// A call got a reply after `latency` (including the connection, if one was opened).
    pub fn reply(
        &self,
        ep: Endpoint,
        started: Instant,
        latency: Duration,
        connect: Option<Duration>,
    ) {
        let v = us(latency);
        self.endpoints[ep.index()].lock().saturating_record(v);
        if let Some(c) = connect {
            self.connect.lock().saturating_record(us(c));
        }
        self.with_second(started + latency, |s| {
            s.calls += 1;
            if ep == Endpoint::RequestTask {
                s.request_task += 1;
            }
            s.latency.saturating_record(v);
        });
    }

    /// A call failed: `kind` is a transport or protocol failure, or "api_error".
    pub fn error(&self, ep: Endpoint, kind: &str, at: Instant) {
        *self
            .errors
            .lock()
            .entry(format!("{}:{kind}", ep.name()))
            .or_default() += 1;
        self.with_second(at, |s| s.errors += 1);
    }

    /// The text of an `error` reply or of a transport failure, grouped (digits removed).
    pub fn message(&self, ep: Endpoint, text: &str) {
        let normal: String = text
            .chars()
            .filter(|c| !c.is_ascii_digit())
            .take(160)
            .collect();
        let key = format!("{}: {normal}", ep.name());
        let mut m = self.messages.lock();
        if m.len() < MAX_MESSAGES || m.contains_key(&key) {
            *m.entry(key).or_default() += 1;
        } else {
            *m.entry("(other)".into()).or_default() += 1;
        }
    }

    pub fn too_busy(&self, at: Instant) {
        self.too_busy.fetch_add(1, Ordering::Relaxed);
        self.with_second(at, |s| s.too_busy += 1);
    }

    pub fn no_task(&self) {
        self.no_task.fetch_add(1, Ordering::Relaxed);
    }

    pub fn worker_started(&self) {
        self.workers_started.fetch_add(1, Ordering::Relaxed);
    }

    pub fn worker_exit(&self, reason: ExitReason) {
        *self.exits.lock().entry(reason).or_default() += 1;
    }

    /// A worker got a task; `first` with the time since the worker started if it is its first.
    pub fn task_assigned(&self, at: Instant, first_wait: Option<Duration>) {
        self.assigned_now.fetch_add(1, Ordering::Relaxed);
        self.event(TaskEvent::Assigned);
        if let Some(wait) = first_wait {
            self.workers_with_task.fetch_add(1, Ordering::Relaxed);
            self.first_task_wait.lock().saturating_record(us(wait));
            let ms = at.saturating_duration_since(self.t0).as_millis() as u64;
            self.last_first_task_ms.fetch_max(ms, Ordering::Relaxed);
        }
    }

    /// A worker's task handling ended (whatever the outcome).
    pub fn task_released(&self) {
        self.assigned_now.fetch_sub(1, Ordering::Relaxed);
    }

    pub fn event(&self, e: TaskEvent) {
        self.tasks[e as usize].fetch_add(1, Ordering::Relaxed);
    }

    /// `n` games of run `run_id` acknowledged by an update.
    pub fn games(&self, run_id: &str, n: u64) {
        self.games.fetch_add(n, Ordering::Relaxed);
        let mut by_run = self.games_by_run.lock();
        match by_run.get_mut(run_id) {
            Some(g) => *g += n,
            None => {
                by_run.insert(run_id.to_string(), n);
            }
        }
    }

    /// Games acknowledged per run so far.
    pub fn games_by_run(&self) -> BTreeMap<String, u64> {
        self.games_by_run.lock().clone()
    }

    pub fn assigned_now(&self) -> i64 {
        self.assigned_now.load(Ordering::Relaxed)
    }

    pub fn workers_with_task(&self) -> u64 {
        self.workers_with_task.load(Ordering::Relaxed)
    }

    pub fn calls_so_far(&self) -> u64 {
        self.endpoints.iter().map(|h| h.lock().len()).sum()
    }

    pub fn errors_so_far(&self) -> u64 {
        self.errors.lock().values().sum()
    }

    pub fn too_busy_so_far(&self) -> u64 {
        self.too_busy.load(Ordering::Relaxed)
    }

    /// Notes the number of workers holding a task now (called by a sampler).
    pub fn sample(&self, at: Instant) {
        let n = self.assigned_now();
        self.with_second(at, |s| s.assigned = s.assigned.max(n));
    }

    /// A `/healthz` probe made during the run answered after `latency`, showing `gauges`.
    pub fn probe(&self, at: Instant, latency: Duration, gauges: Option<ServerGauges>) {
        self.probe.lock().saturating_record(us(latency));
        if let Some(g) = gauges {
            self.with_second(at, |s| s.server = s.server.max(g));
        }
    }

    /// The call start offsets (ms since t0), in the order recorded.
    pub fn call_starts(&self) -> Vec<u32> {
        let mut v = self.call_starts.lock().clone();
        v.sort_unstable();
        v
    }

    /// The measured part of the report. `wall` is the length of the measured phase.
    pub fn summarize(&self, wall: Duration, workers: u64, client: ClientCounters) -> FleetReport {
        let mut endpoints = BTreeMap::new();
        let mut all = self.fine.clone();
        for ep in Endpoint::ALL {
            let h = self.endpoints[ep.index()].lock();
            if !h.is_empty() {
                let _ = all.add(&*h);
                endpoints.insert(ep.path().to_string(), LatencySummary::from_histogram(&h));
            }
        }
        let connect = {
            let h = self.connect.lock();
            (!h.is_empty()).then(|| LatencySummary::from_histogram(&h))
        };
        let healthz_probe = {
            let h = self.probe.lock();
            (!h.is_empty()).then(|| LatencySummary::from_histogram(&h))
        };
        let timeline = self
            .seconds
            .lock()
            .iter()
            .enumerate()
            .map(|(t, s)| SecondSample::from_second(t as u64, s))
            .collect();
        let errors = self.errors.lock().clone();
        let errors_total = errors.values().sum();
        let with_task = self.workers_with_task();
        let t = |e: TaskEvent| self.tasks[e as usize].load(Ordering::Relaxed);
        FleetReport {
            wall_seconds: wall.as_secs_f64(),
            calls: all.len(),
            calls_per_second: rate(all.len(), wall),
            all: LatencySummary::from_histogram(&all),
            endpoints,
            connect,
            healthz_probe,
            too_busy: self.too_busy.load(Ordering::Relaxed),
            no_task: self.no_task.load(Ordering::Relaxed),
            errors_total,
            errors,
            error_messages: self.messages.lock().clone(),
            workers: WorkerSummary {
                simulated: workers,
                started: self.workers_started.load(Ordering::Relaxed),
                got_a_task: with_task,
                all_assigned_after_s: (with_task == workers && workers > 0)
                    .then(|| self.last_first_task_ms.load(Ordering::Relaxed) as f64 / 1000.0),
                first_task_wait: LatencySummary::from_histogram(&self.first_task_wait.lock()),
                exits: self
                    .exits
                    .lock()
                    .iter()
                    .map(|(k, v)| (k.name().to_string(), *v))
                    .collect(),
            },
            tasks: TaskSummary {
                assigned: t(TaskEvent::Assigned),
                completed: t(TaskEvent::Completed),
                dropped_by_server: t(TaskEvent::DroppedByServer),
                failed: t(TaskEvent::Failed),
                updates: t(TaskEvent::Update),
                beats: t(TaskEvent::Beat),
                pgns_uploaded: t(TaskEvent::PgnUploaded),
                games_reported: self.games.load(Ordering::Relaxed),
                games_by_run: self.games_by_run(),
            },
            client,
            timeline,
        }
    }
}

/// `n` events over `wall`, per second (0 for an empty interval).
pub fn rate(n: u64, wall: Duration) -> f64 {
    let s = wall.as_secs_f64();
    if s > 0.0 { n as f64 / s } else { 0.0 }
}

/// One second of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SecondSample {
    pub t: u64,
    pub calls: u64,
    pub request_task: u64,
    pub too_busy: u64,
    pub errors: u64,
    /// Most workers holding a task at once during this second.
    pub assigned: i64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    /// The server's pool and gate during this second (from `/healthz` probes).
    #[serde(default)]
    pub server: ServerGauges,
}

impl SecondSample {
    fn from_second(t: u64, s: &Second) -> SecondSample {
        let l = LatencySummary::from_histogram(&s.latency);
        SecondSample {
            t,
            calls: s.calls,
            request_task: s.request_task,
            too_busy: s.too_busy,
            errors: s.errors,
            assigned: s.assigned,
            p50_ms: l.p50_ms,
            p90_ms: l.p90_ms,
            p99_ms: l.p99_ms,
            max_ms: l.max_ms,
            server: s.server,
        }
    }
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerSummary {
    pub simulated: u64,
    pub started: u64,
    pub got_a_task: u64,
    /// Seconds from the start of the run until the last worker got its first task (None if
    /// some worker never got one).
    pub all_assigned_after_s: Option<f64>,
    /// From each worker's own start to its first task.
    pub first_task_wait: LatencySummary,
    pub exits: BTreeMap<String, u64>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskSummary {
    pub assigned: u64,
    pub completed: u64,
    pub dropped_by_server: u64,
    pub failed: u64,
    pub updates: u64,
    pub beats: u64,
    pub pgns_uploaded: u64,
    pub games_reported: u64,
    pub games_by_run: BTreeMap<String, u64>,
}

/// What the fleet measured (the recorder's part of the report).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FleetReport {
    pub wall_seconds: f64,
    pub calls: u64,
    pub calls_per_second: f64,
    /// Every endpoint together.
    pub all: LatencySummary,
    pub endpoints: BTreeMap<String, LatencySummary>,
    /// Time to open a TCP connection (fresh connections and pool misses).
    pub connect: Option<LatencySummary>,
    /// `GET /healthz` (answered on the server's event loop) probed 10 times a second during
    /// the run, on its own keep-alive connection: the loop's responsiveness under this load.
    pub healthz_probe: Option<LatencySummary>,
    /// request_task replies "the server is currently too busy".
    pub too_busy: u64,
    /// request_task replies with `task_waiting` for another reason (no run needs games).
    pub no_task: u64,
    pub errors_total: u64,
    /// `endpoint:kind` → count: transport failures, replies the worker cannot use, `error`s.
    pub errors: BTreeMap<String, u64>,
    pub error_messages: BTreeMap<String, u64>,
    pub workers: WorkerSummary,
    pub tasks: TaskSummary,
    pub client: ClientCounters,
    pub timeline: Vec<SecondSample>,
}

#[cfg(test)]
mod tests;

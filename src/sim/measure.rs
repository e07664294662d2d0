//! Measurement: what the fleet saw, and the report built from it.
//!
//! Owns: the recorder every simulated worker writes to (per-endpoint HDR latency histograms,
//! per-second timeline, too-busy replies, errors by kind, task and worker counters, the start
//! time of every call for the baseline replay), the JSON report's schema, its arithmetic
//! (percentiles, rates, the time until every worker held a task), the parsing of the server's
//! Prometheus histograms, and the human summary.
//! Must not: do network or file I/O, or decide anything about the protocol: it only counts
//! what the worker module tells it.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use super::client::ClientCounters;

/// Highest latency a histogram holds (larger values saturate), in microseconds.
const MAX_US: u64 = 300_000_000;
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

/// An empty latency histogram in microseconds, from 1 µs to 300 s (larger values saturate).
pub fn new_histogram(sigfig: u8) -> Result<Histogram<u64>, hdrhistogram::CreationError> {
    Histogram::new_with_bounds(1, MAX_US, sigfig)
}

/// Percentiles of a latency histogram, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl LatencySummary {
    /// From a histogram of microseconds.
    pub fn from_histogram(h: &Histogram<u64>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
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

/// A Prometheus histogram read from `/metrics`: cumulative buckets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromHistogram {
    /// Observations (the `+Inf` bucket).
    pub count: f64,
    pub sum: f64,
    /// (upper bound `le` in the metric's unit, cumulative count), ascending, finite bounds
    /// only (the `+Inf` bucket is `count`).
    pub buckets: Vec<(f64, f64)>,
}

fn labels_match(labels: &str, want: &[(&str, &str)]) -> bool {
    want.iter()
        .all(|(k, v)| labels.contains(&format!("{k}=\"{v}\"")))
}

fn sample_value(line: &str) -> Option<f64> {
    line.rsplit(' ').next()?.parse().ok()
}

impl PromHistogram {
    /// Parses histogram `name` (summing the series whose labels contain `labels`).
    pub fn parse(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<PromHistogram> {
        let bucket_prefix = format!("{name}_bucket{{");
        let sum_name = format!("{name}_sum");
        let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        let mut h = PromHistogram::default();
        let mut seen = false;
        for line in text.lines().filter(|l| !l.starts_with('#')) {
            if let Some(rest) = line.strip_prefix(&bucket_prefix) {
                let Some((labels_text, _)) = rest.split_once('}') else {
                    continue;
                };
                if !labels_match(labels_text, labels) {
                    continue;
                }
                let Some(le) = labels_text
                    .split(',')
                    .find_map(|kv| kv.trim().strip_prefix("le=\""))
                    .map(|v| v.trim_end_matches('"'))
                else {
                    continue;
                };
                let Some(v) = sample_value(line) else {
                    continue;
                };
                seen = true;
                if le == "+Inf" {
                    h.count += v;
                } else if let Ok(le) = le.parse::<f64>() {
                    buckets.entry(le.to_bits()).or_insert((le, 0.0)).1 += v;
                }
            } else if let Some(rest) = line
                .strip_prefix(&sum_name)
                .filter(|r| r.starts_with(' ') || r.starts_with('{'))
                && labels_match(rest, labels)
            {
                h.sum += sample_value(line).unwrap_or(0.0);
            }
        }
        if !seen {
            return None;
        }
        let mut b: Vec<(f64, f64)> = buckets.into_values().collect();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        h.buckets = b;
        Some(h)
    }

    /// `self - earlier`, bucket by bucket (for a histogram scraped before and after a phase).
    pub fn since(&self, earlier: &PromHistogram) -> PromHistogram {
        let buckets = self
            .buckets
            .iter()
            .map(|(le, c)| {
                let before = earlier
                    .buckets
                    .iter()
                    .find(|(l, _)| l == le)
                    .map_or(0.0, |b| b.1);
                (*le, (c - before).max(0.0))
            })
            .collect();
        PromHistogram {
            count: (self.count - earlier.count).max(0.0),
            sum: (self.sum - earlier.sum).max(0.0),
            buckets,
        }
    }

    /// Upper bound of the bucket holding quantile `q` (None when empty); +Inf if it lies
    /// beyond the last finite bucket.
    pub fn quantile_upper_bound(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * self.count).ceil().max(1.0);
        Some(
            self.buckets
                .iter()
                .find(|b| b.1 >= rank)
                .map_or(f64::INFINITY, |b| b.0),
        )
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }
}

/// The sum of every sample of counter/gauge `name` whose labels contain `labels`.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) || !labels_match(rest, labels) {
            continue;
        }
        if let Some(v) = sample_value(line) {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_from_a_known_histogram() {
        let mut h = new_histogram(3).expect("histogram");
        // 1 ms, 2 ms, ..., 1000 ms: one each.
        for ms in 1..=1000u64 {
            h.saturating_record(ms * 1000);
        }
        let s = LatencySummary::from_histogram(&h);
        assert_eq!(s.count, 1000);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.002;
        assert!(close(s.p50_ms, 500.0), "{s:?}");
        assert!(close(s.p90_ms, 900.0), "{s:?}");
        assert!(close(s.p99_ms, 990.0), "{s:?}");
        assert!(close(s.p999_ms, 999.0), "{s:?}");
        assert!(close(s.max_ms, 1000.0), "{s:?}");
        assert!(close(s.mean_ms, 500.5), "{s:?}");
        let empty = new_histogram(3).expect("histogram");
        assert_eq!(LatencySummary::from_histogram(&empty).count, 0);
    }

    #[test]
    fn skewed_histogram_tail() {
        let mut h = new_histogram(3).expect("histogram");
        for _ in 0..9_990 {
            h.saturating_record(1_000);
        }
        for _ in 0..10 {
            h.saturating_record(2_000_000);
        }
        let s = LatencySummary::from_histogram(&h);
        assert!((s.p50_ms - 1.0).abs() < 0.01 && (s.p99_ms - 1.0).abs() < 0.01);
        // 0.1% of calls took 2 s: p99.9 is the last fast one, max the slow ones.
        assert!((s.p999_ms - 1.0).abs() < 0.01, "{s:?}");
        assert!((s.max_ms - 2000.0).abs() < 2.0, "{s:?}");
        // Values beyond the range saturate rather than fail.
        h.saturating_record(u64::MAX);
        assert!(LatencySummary::from_histogram(&h).max_ms >= 299_000.0);
    }

    #[test]
    fn recorder_arithmetic() {
        let t0 = Instant::now();
        let r = Recorder::new(t0).expect("recorder");
        let sec = |s: u64, ms: u64| t0 + Duration::from_secs(s) + Duration::from_millis(ms);
        r.reply(Endpoint::Beat, sec(0, 100), Duration::from_millis(2), None);
        r.reply(Endpoint::Beat, sec(0, 200), Duration::from_millis(4), None);
        r.reply(
            Endpoint::RequestTask,
            sec(1, 0),
            Duration::from_millis(10),
            Some(Duration::from_millis(1)),
        );
        r.too_busy(sec(1, 20));
        r.error(Endpoint::UpdateTask, "timeout", sec(2, 0));
        r.error(Endpoint::UpdateTask, "timeout", sec(2, 5));
        r.message(Endpoint::UpdateTask, "task 12 is gone 345");
        r.message(Endpoint::UpdateTask, "task 99 is gone 1");
        r.worker_started();
        r.worker_started();
        r.task_assigned(sec(1, 10), Some(Duration::from_millis(900)));
        r.sample(sec(1, 50));
        r.task_released();
        r.games("aa", 8);
        r.games("bb", 2);
        r.games("aa", 4);
        let rep = r.summarize(Duration::from_secs(4), 2, ClientCounters::default());
        assert_eq!(rep.calls, 3);
        assert!((rep.calls_per_second - 0.75).abs() < 1e-12);
        assert_eq!(rep.endpoints["/api/beat"].count, 2);
        assert!((rep.endpoints["/api/beat"].mean_ms - 3.0).abs() < 0.01);
        assert_eq!(rep.errors["update_task:timeout"], 2);
        assert_eq!(rep.errors_total, 2);
        // Digits are dropped so that the same message for different tasks groups together.
        assert_eq!(rep.error_messages["update_task: task  is gone "], 2);
        assert_eq!(rep.too_busy, 1);
        assert_eq!(rep.tasks.games_reported, 14);
        assert_eq!(rep.tasks.games_by_run["aa"], 12);
        assert_eq!(rep.timeline.len(), 3);
        assert_eq!(rep.timeline[0].calls, 2);
        assert_eq!(rep.timeline[1].request_task, 1);
        assert_eq!(rep.timeline[1].too_busy, 1);
        assert_eq!(rep.timeline[1].assigned, 1);
        assert_eq!(rep.timeline[2].errors, 2);
        assert!(rep.connect.is_some());
        // One of two workers got a task: not all assigned.
        assert_eq!(rep.workers.got_a_task, 1);
        assert_eq!(rep.workers.all_assigned_after_s, None);
        r.task_assigned(sec(3, 500), Some(Duration::from_millis(100)));
        let rep = r.summarize(Duration::from_secs(4), 2, ClientCounters::default());
        assert_eq!(rep.workers.all_assigned_after_s, Some(3.5));
        assert_eq!(rep.tasks.assigned, 2);
    }

    const METRICS: &str = "\
# TYPE shoal_request_task_critical_seconds histogram
shoal_request_task_critical_seconds_bucket{le=\"0.0001\"} 10
shoal_request_task_critical_seconds_bucket{le=\"0.001\"} 80
shoal_request_task_critical_seconds_bucket{le=\"0.01\"} 99
shoal_request_task_critical_seconds_bucket{le=\"+Inf\"} 100
shoal_request_task_critical_seconds_sum 0.2
shoal_request_task_critical_seconds_count 100
shoal_http_requests_total{route=\"/api/beat\",status=\"200\"} 7
shoal_http_requests_total{route=\"/api/beat\",status=\"500\"} 1
shoal_http_requests_total{route=\"/healthz\",status=\"200\"} 3
shoal_dead_tasks_total 4
";

    #[test]
    fn prometheus_parsing() {
        let h = PromHistogram::parse(METRICS, "shoal_request_task_critical_seconds", &[])
            .expect("histogram");
        assert_eq!(h.count, 100.0);
        assert_eq!(h.buckets.len(), 3);
        assert_eq!(h.quantile_upper_bound(0.5), Some(0.001));
        assert_eq!(h.quantile_upper_bound(0.99), Some(0.01));
        assert_eq!(h.quantile_upper_bound(1.0), Some(f64::INFINITY));
        assert_eq!(h.quantile_upper_bound(0.05), Some(0.0001));
        assert!((h.mean().expect("mean") - 0.002).abs() < 1e-12);
        let earlier = PromHistogram {
            count: 50.0,
            sum: 0.1,
            buckets: vec![(0.0001, 10.0), (0.001, 40.0), (0.01, 50.0)],
        };
        let d = h.since(&earlier);
        assert_eq!(d.count, 50.0);
        assert_eq!(d.buckets[0].1, 0.0);
        assert_eq!(d.quantile_upper_bound(0.5), Some(0.001));
        assert_eq!(
            metric_sum(
                METRICS,
                "shoal_http_requests_total",
                &[("route", "/api/beat")]
            ),
            Some(8.0)
        );
        assert_eq!(
            metric_sum(METRICS, "shoal_dead_tasks_total", &[]),
            Some(4.0)
        );
        assert_eq!(metric_sum(METRICS, "shoal_missing_total", &[]), None);
        assert!(PromHistogram::parse(METRICS, "shoal_missing_seconds", &[]).is_none());
    }
}

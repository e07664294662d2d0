//! One simulated worker: the official worker's behaviour (docs/protocol.md) over HTTP.
//!
//! Owns: the worker's lifecycle (credential and version checks, then the main loop:
//! request_version before every request_task, back-off on no task / too busy / errors, the
//! task: setup, batches of games, update_task at each batch boundary with cumulative stats,
//! the heartbeat (started beside the game loop, see `heartbeat`) for each task,
//! request_spsa for SPSA runs, failed_task at the configured rate or on an update error,
//! upload_pgn at the end of every non-SPSA task), and what each judged reply (`fleet::Reply`:
//! `task_waiting`, `task_alive`, ...) makes it do, including the replies that would make the
//! real worker exit.
//! Must not: call server internals or fake results: everything it knows about the server
//! comes from HTTP replies (through `Fleet::call`); everything it records goes through
//! `measure::Recorder`. Every loop is bounded, and every wait ends at the run's deadline.
//!
//! Files: `worker/tests.rs`: the worker against a scripted server.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::{Map, Value, json};
use tokio::sync::{Notify, oneshot};

use super::fleet::{Fleet, Reply};
use super::heartbeat::{Heart, LastUpdated, heartbeat};
use super::measure::{Endpoint, ExitReason, Recorder, TaskEvent};
use super::schedule::{BACKOFF_START_S, Backoff, UPDATE_ATTEMPTS, UPDATE_RETRY_S};
use super::stats::{Identity, game_seconds, games_at_once, pgn_payload, update_batch};
use shoal_protocol::{Stats, WORKER_VERSION};

/// Main-loop iterations per worker, at most (each takes at least one call or one back-off).
const MAX_ITERATIONS: u32 = 1_000_000;
/// Simulated seconds to build the engines before the first task's bench, and to bench later.
const FIRST_SETUP_S: (f64, f64) = (60.0, 180.0);
const LATER_SETUP_S: (f64, f64) = (10.0, 30.0);
/// The failure an injected failed_task reports (fastchess dying mid-batch).
pub const INJECTED_FAILURE: &str = "Fastchess failed with error code 3";

/// How a wait during a task ended.
enum Wake {
    Done,
    /// A beat answered `error` or `task_alive: false`: the worker forgets the task.
    Dropped,
}

enum UpdateOutcome {
    Alive,
    Stop,
    Error(String),
    TooManyFailures,
    /// No `task_alive` in the reply: the real worker posts failed_task and exits.
    Fatal,
}

struct TaskRef {
    run_id: String,
    task_id: u64,
}

/// Runs worker `index` of `fleet` from `start` (since the recorder's t0) to the deadline.
pub async fn run(fleet: Arc<Fleet>, index: u32, start: Duration, username: String) {
    let seed = fleet.seed ^ u64::from(index).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut rng = StdRng::seed_from_u64(seed);
    let id = Identity::generate(index, fleet.seed, &username, &mut rng);
    let at = fleet.rec.t0() + start;
    if at >= fleet.deadline {
        return;
    }
    tokio::time::sleep_until(at.into()).await;
    let now = Instant::now();
    let mut w = Worker {
        fleet,
        username,
        id,
        rng,
        backoff: Backoff::default(),
        started: now,
        last_updated: Arc::new(LastUpdated::new(now)),
        heart: None,
        had_task: false,
        benched: false,
        rate_limited_at: None,
    };
    let reason = match w.lifecycle().await {
        Ok(()) => ExitReason::Deadline,
        Err(r) => r,
    };
    w.fleet.rec.worker_exit(reason);
}

struct Worker {
    fleet: Arc<Fleet>,
    username: String,
    id: Identity,
    rng: StdRng,
    backoff: Backoff,
    started: Instant,
    /// Reset by every beat attempt and every successful update, as the official worker's.
    last_updated: Arc<LastUpdated>,
    /// The current task's heartbeat, while a task is held.
    heart: Option<Arc<Heart>>,
    had_task: bool,
    benched: bool,
    /// When request_task was last refused by a rate limit (429), until the next call.
    rate_limited_at: Option<Instant>,
}

fn as_u64_lenient(v: Option<&Value>) -> Option<u64> {
    match v? {
        Value::Number(n) => n.as_u64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

impl Worker {
    fn rec(&self) -> &Recorder {
        &self.fleet.rec
    }

    /// Sleeps `sim_s` simulated seconds; Err at the deadline.
    async fn sleep_sim(&self, sim_s: f64) -> Result<(), ExitReason> {
        let until = Instant::now() + self.fleet.scale.real(sim_s);
        if until >= self.fleet.deadline {
            tokio::time::sleep_until(self.fleet.deadline.into()).await;
            return Err(ExitReason::Deadline);
        }
        tokio::time::sleep_until(until.into()).await;
        Ok(())
    }

    fn body(&self, extra: Vec<(&str, Value)>) -> Value {
        let mut m = Map::new();
        m.insert("password".into(), json!(self.fleet.password));
        m.insert("worker_info".into(), Value::Object(self.id.info.clone()));
        for (k, v) in extra {
            m.insert(k.into(), v);
        }
        Value::Object(m)
    }

    fn task_body(&self, t: &TaskRef, extra: Vec<(&str, Value)>) -> Value {
        let mut e = vec![("run_id", json!(t.run_id)), ("task_id", json!(t.task_id))];
        e.extend(extra);
        self.body(e)
    }

    /// One HTTP call, recorded. Err(Deadline) if the run is over before it starts.
    async fn call(&self, ep: Endpoint, body: &Value) -> Result<Reply, ExitReason> {
        self.fleet.call(ep, body).await
    }

    fn version_body(&self) -> Value {
        json!({"password": self.fleet.password, "worker_info": {"username": self.username}})
    }

    async fn lifecycle(&mut self) -> Result<(), ExitReason> {
        self.rec().worker_started();
        // Credential check: any failure makes the worker exit.
        match self
            .call(Endpoint::RequestVersion, &self.version_body())
            .await?
        {
            Reply::Ok(_) => {}
            Reply::Error(_) | Reply::Failed { .. } => return Err(ExitReason::Credentials),
        }
        // Version check: an error exits; a network failure is tolerated.
        match self
            .call(Endpoint::RequestVersion, &self.version_body())
            .await?
        {
            Reply::Error(_) => return Err(ExitReason::Credentials),
            Reply::Failed { no_duration: true } => return Err(ExitReason::Protocol),
            Reply::Ok(_) | Reply::Failed { .. } => {}
        }
        for _ in 0..MAX_ITERATIONS {
            if self.iteration().await? {
                self.backoff.success();
            } else {
                let delay = self.backoff.failure();
                self.sleep_sim(delay).await?;
            }
        }
        Ok(())
    }

    /// One main-loop iteration: true if it ended well (no back-off).
    async fn iteration(&mut self) -> Result<bool, ExitReason> {
        if let Some(at) = self.rate_limited_at.take() {
            let min = self.fleet.scale.real(BACKOFF_START_S);
            self.fleet.ledger.backoff(at.elapsed(), min);
        }
        match self
            .call(Endpoint::RequestVersion, &self.version_body())
            .await?
        {
            Reply::Failed { no_duration: true } => return Err(ExitReason::Protocol),
            Reply::Failed { .. } => return Ok(false),
            Reply::Error(_) => return Err(ExitReason::Credentials),
            Reply::Ok(m) => match m.get("version").and_then(Value::as_u64) {
                // A newer version would make the real worker update itself and restart.
                Some(v) if v <= u64::from(WORKER_VERSION) => {}
                _ => return Err(ExitReason::Protocol),
            },
        }
        let m = match self
            .call(Endpoint::RequestTask, &self.body(Vec::new()))
            .await?
        {
            Reply::Failed { no_duration: true } => return Err(ExitReason::Protocol),
            Reply::Failed { .. } => return Ok(false),
            Reply::Error(e) => {
                if e.contains("rate limit") {
                    self.rate_limited_at = Some(Instant::now());
                }
                return Ok(false);
            }
            Reply::Ok(m) => m,
        };
        if m.contains_key("task_waiting") {
            let info = m.get("info").and_then(Value::as_str).unwrap_or("");
            if info.contains("too busy") {
                self.rec().too_busy(Instant::now());
            } else {
                self.rec().no_task();
            }
            return Ok(false);
        }
        let (Some(run), Some(task_id)) = (m.get("run"), m.get("task_id").and_then(Value::as_u64))
        else {
            return Err(ExitReason::Protocol);
        };
        let Some(run_id) = run.get("_id").and_then(Value::as_str) else {
            return Err(ExitReason::Protocol);
        };
        let task = TaskRef {
            run_id: run_id.to_string(),
            task_id,
        };
        let now = Instant::now();
        let first_wait = (!self.had_task).then(|| now.saturating_duration_since(self.started));
        self.had_task = true;
        self.rec().task_assigned(now, first_wait);
        let heart = Arc::new(Heart {
            dropped: AtomicBool::new(false),
            notify: Notify::new(),
        });
        let (stop, stopped) = oneshot::channel();
        let jitter = self.rng.random::<f64>();
        tokio::spawn(heartbeat(
            self.fleet.clone(),
            self.last_updated.clone(),
            heart.clone(),
            self.task_body(&task, Vec::new()),
            stopped,
            jitter,
        ));
        self.heart = Some(heart);
        let result = self.play_task(run, &task).await;
        self.heart = None;
        drop(stop);
        self.rec().task_released();
        result
    }

    /// Posts failed_task for an exception that makes the real worker exit, then exits.
    async fn fatal(&mut self, t: &TaskRef, what: &str) -> Result<bool, ExitReason> {
        let message = format!("Exception {what} at worker.py WorkerVersion: {WORKER_VERSION}");
        let body = self.task_body(t, vec![("message", json!(message))]);
        self.call(Endpoint::FailedTask, &body).await?;
        Err(ExitReason::Protocol)
    }

    /// Plays a task to its end. Ok(true): success (no back-off).
    async fn play_task(&mut self, run: &Value, t: &TaskRef) -> Result<bool, ExitReason> {
        let args = &run["args"];
        let my_task = &run["my_task"];
        let Some(num_games) = my_task.get("num_games").and_then(Value::as_u64) else {
            return self.fatal(t, "KeyError").await;
        };
        let resumed: Stats = match my_task.get("stats") {
            None | Some(Value::Null) => Stats::default(),
            Some(s) => match serde_json::from_value(s.clone()) {
                Ok(s) => s,
                Err(_) => return self.fatal(t, "KeyError").await,
            },
        };
        if resumed.check().is_err() {
            return self.fatal(t, "AssertionError").await;
        }
        let concurrency = self.id.concurrency;
        let threads = as_u64_lenient(args.get("threads")).unwrap_or(1).max(1);
        if threads > u64::from(concurrency) {
            return self.fatal(t, "ZeroDivisionError").await;
        }
        let threads = threads as u32;
        let tc_text = args.get("tc").and_then(Value::as_str).unwrap_or("");
        let Some(tc) = shoal_protocol::parse_tc(tc_text) else {
            return self.fatal(t, "ValueError").await;
        };
        let sprt_batch = args
            .get("sprt")
            .filter(|s| s.is_object())
            .map(|s| as_u64_lenient(s.get("batch_size")).unwrap_or(1));
        let spsa = args.get("spsa").is_some_and(Value::is_object);
        let remaining = num_games.saturating_sub(resumed.games());
        let batch = update_batch(&tc, concurrency, threads, sprt_batch, spsa).max(2);
        if remaining == 0
            || remaining % 2 != 0
            || sprt_batch.is_some_and(|b| remaining % (2 * b.max(1)) != 0)
        {
            return self.fatal(t, "AssertionError").await;
        }

        // Engines: built (first task) or cached, then the bench. The heartbeat runs meanwhile.
        let (lo, hi) = if self.benched {
            LATER_SETUP_S
        } else {
            FIRST_SETUP_S
        };
        let setup = self.rng.random_range(lo..hi);
        if let Wake::Dropped = self.wait_playing(setup).await? {
            self.rec().event(TaskEvent::DroppedByServer);
            return Ok(true);
        }
        if !self.benched {
            self.id.after_bench();
            self.benched = true;
        }
        let game_s = game_seconds(tc_text, self.id.bench_nps).unwrap_or(30.0);
        let at_once = games_at_once(concurrency, threads);
        let fail_at: Option<u64> = (self.rng.random::<f64>() < self.fleet.failed_rate)
            .then(|| self.rng.random_range(0..remaining.div_ceil(batch)));

        let mut stats = resumed;
        let mut played = 0u64;
        let mut batches = 0u64;
        let mut sig = 0u64;
        let mut prev_spsa: Option<Value> = None;
        while played < remaining {
            let this = batch.min(remaining - played);
            if spsa {
                let mut extra = vec![("stats", json!(stats))];
                if let Some(p) = prev_spsa.take() {
                    extra.push(("spsa", p));
                }
                let body = self.task_body(t, extra);
                match self.call(Endpoint::RequestSpsa, &body).await? {
                    Reply::Ok(m) => match m.get("task_alive").and_then(Value::as_bool) {
                        Some(true) => sig = m.get("sig").and_then(Value::as_u64).unwrap_or(0),
                        Some(false) => {
                            self.rec().event(TaskEvent::DroppedByServer);
                            return Ok(true);
                        }
                        None => return self.fatal(t, "KeyError").await,
                    },
                    Reply::Error(e) => return self.fail(t, &e, &stats, &resumed, spsa).await,
                    Reply::Failed { .. } => {
                        return self
                            .fail(t, "request_spsa failed", &stats, &resumed, spsa)
                            .await;
                    }
                }
            }
            let rounds = this.div_ceil(at_once) as f64;
            let secs = rounds * game_s * self.rng.random_range(0.9..1.1);
            if fail_at == Some(batches) {
                // fastchess dies halfway through the batch: the half-played games are in the
                // PGN but never reported.
                if let Wake::Dropped = self.wait_playing(secs / 2.0).await? {
                    self.rec().event(TaskEvent::DroppedByServer);
                    return Ok(true);
                }
                let mut partial = stats;
                let model = self.fleet.model;
                model.play(&mut partial, (this / 2).max(2), &mut self.rng);
                return self
                    .fail(t, INJECTED_FAILURE, &partial, &resumed, spsa)
                    .await;
            }
            if let Wake::Dropped = self.wait_playing(secs).await? {
                self.rec().event(TaskEvent::DroppedByServer);
                self.upload_pgn(t, "", &stats, &resumed, spsa).await?;
                return Ok(true);
            }
            let before = stats;
            let model = self.fleet.model;
            model.play(&mut stats, this, &mut self.rng);
            played += this;
            batches += 1;
            let spsa_block = spsa.then(|| {
                let d = stats.delta(&before).unwrap_or_default();
                json!({"num_games": d.games(), "wins": d.wins, "losses": d.losses,
                       "draws": d.draws, "sig": sig})
            });
            match self.update(t, &stats, spsa_block.clone()).await? {
                UpdateOutcome::Alive => {
                    self.rec().games(&t.run_id, this);
                    prev_spsa = spsa_block;
                }
                UpdateOutcome::Stop => {
                    self.rec().games(&t.run_id, this);
                    let e = if played >= remaining {
                        TaskEvent::Completed
                    } else {
                        TaskEvent::DroppedByServer
                    };
                    self.rec().event(e);
                    self.upload_pgn(t, "", &stats, &resumed, spsa).await?;
                    return Ok(true);
                }
                UpdateOutcome::Error(e) => return self.fail(t, &e, &stats, &resumed, spsa).await,
                UpdateOutcome::TooManyFailures => {
                    let m = "Too many failed update attempts.";
                    return self.fail(t, m, &stats, &resumed, spsa).await;
                }
                UpdateOutcome::Fatal => return self.fatal(t, "KeyError").await,
            }
        }
        self.rec().event(TaskEvent::Completed);
        self.upload_pgn(t, "", &stats, &resumed, spsa).await?;
        Ok(true)
    }

    /// Whether the heartbeat has been told that the task is gone.
    fn dropped(&self) -> bool {
        self.heart
            .as_ref()
            .is_some_and(|h| h.dropped.load(Ordering::Acquire))
    }

    /// Plays for `sim_s` simulated seconds, unless the heartbeat learns that the task is gone.
    async fn wait_playing(&mut self, sim_s: f64) -> Result<Wake, ExitReason> {
        let until = Instant::now() + self.fleet.scale.real(sim_s);
        let wake = until.min(self.fleet.deadline);
        if self.dropped() {
            return Ok(Wake::Dropped);
        }
        match &self.heart {
            Some(h) => {
                let h = h.clone();
                tokio::select! {
                    () = tokio::time::sleep_until(wake.into()) => {}
                    () = h.notify.notified() => {}
                }
            }
            None => tokio::time::sleep_until(wake.into()).await,
        }
        if self.dropped() {
            return Ok(Wake::Dropped);
        }
        if Instant::now() >= self.fleet.deadline {
            return Err(ExitReason::Deadline);
        }
        Ok(Wake::Done)
    }

    /// update_task with the worker's retries: 5 attempts, 15 simulated seconds apart.
    async fn update(
        &mut self,
        t: &TaskRef,
        stats: &Stats,
        spsa: Option<Value>,
    ) -> Result<UpdateOutcome, ExitReason> {
        let mut extra = vec![("stats", json!(stats))];
        if let Some(s) = spsa {
            extra.push(("spsa", s));
        }
        let body = self.task_body(t, extra);
        for attempt in 0..UPDATE_ATTEMPTS {
            if attempt > 0 {
                self.sleep_sim(UPDATE_RETRY_S).await?;
            }
            match self.call(Endpoint::UpdateTask, &body).await? {
                Reply::Ok(m) => {
                    self.rec().event(TaskEvent::Update);
                    return Ok(match m.get("task_alive").and_then(Value::as_bool) {
                        Some(true) => {
                            self.last_updated.set(Instant::now());
                            UpdateOutcome::Alive
                        }
                        Some(false) => UpdateOutcome::Stop,
                        None => UpdateOutcome::Fatal,
                    });
                }
                Reply::Error(e) => return Ok(UpdateOutcome::Error(e)),
                Reply::Failed { .. } => {}
            }
        }
        Ok(UpdateOutcome::TooManyFailures)
    }

    /// Ends a task with failed_task (and the partial PGN): an unsuccessful iteration.
    async fn fail(
        &mut self,
        t: &TaskRef,
        message: &str,
        stats: &Stats,
        resumed: &Stats,
        spsa: bool,
    ) -> Result<bool, ExitReason> {
        let body = self.task_body(t, vec![("message", json!(message))]);
        self.call(Endpoint::FailedTask, &body).await?;
        self.rec().event(TaskEvent::Failed);
        self.upload_pgn(t, message, stats, resumed, spsa).await?;
        Ok(false)
    }

    /// upload_pgn of the games played in this task (none for SPSA, nor for an empty PGN).
    async fn upload_pgn(
        &mut self,
        t: &TaskRef,
        message: &str,
        stats: &Stats,
        resumed: &Stats,
        spsa: bool,
    ) -> Result<(), ExitReason> {
        let played = stats.delta(resumed).unwrap_or_default();
        if spsa || played.games() == 0 {
            return Ok(());
        }
        let Ok(pgn) = pgn_payload(&t.run_id, t.task_id, &played) else {
            return Ok(());
        };
        let body = self.task_body(t, vec![("message", json!(message)), ("pgn", json!(pgn))]);
        if let Reply::Ok(_) = self.call(Endpoint::UploadPgn, &body).await? {
            self.rec().event(TaskEvent::PgnUploaded);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;

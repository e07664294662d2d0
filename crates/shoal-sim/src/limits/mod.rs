//! The simulator's limits check: configuring limits on a server it starts, watching them
//! during the storm, and judging them at the end (docs/limits.md, "The simulator's check").
//!
//! Owns: the `--limit-user` / `--rate-limit` options turned into the started server's
//! `SHOAL_LIMITS`; the [`Ledger`] of the tasks the simulated workers hold (filled from the
//! replies `Fleet::call` judges: a task handed out, ended by the server, or of uncertain fate
//! after a transport failure), of rate-limited replies and of the back-off after them; the
//! sampler of `GET /api/limits` (each key's peak holders against its max); the final
//! comparison of what the workers hold with the server's active tasks (`get_run`'s `workers`)
//! and the run window's holders; and [`LimitsReport`] with its verdicts and summary lines.
//! Must not: call server internals (everything comes over HTTP), change what a worker does
//! (it only records), or run unbounded: the sampler stops at the deadline.
//!
//! Files:
//! - `mod.rs`: the options turned into `SHOAL_LIMITS`, the [`Ledger`] of held tasks.
//! - `peaks.rs`: the sampler of `GET /api/limits` ([`Peaks`]).
//! - `report.rs`: the final comparison, the verdicts ([`LimitsReport`]) and summary lines.
//! - `tests.rs`: unit tests.

mod peaks;
mod report;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::{Map, Value};

use super::SimError;
use super::measure::Endpoint;
use super::options::SimOptions;

pub use peaks::{LimitPeak, Peaks, sample};
pub use report::{LimitsReport, TaskCheck, Verdict, finish, summary_lines};

/// A `max` at or above this is "no limit" (the engine's bound is u32::MAX).
const UNLIMITED: u64 = u32::MAX as u64;
/// Examples kept of each kind of problem.
const EXAMPLES: usize = 20;
/// `GET /api/limits` lists at most this many holders per key.
const HELD_BY_LISTED: u64 = 100;
/// How often the sampler reads `/api/limits`.
const SAMPLE_EVERY: Duration = Duration::from_millis(200);

/// One `--rate-limit SCOPE[:KEY]:MAX/WINDOW[s]`.
#[derive(Debug, Clone, PartialEq)]
pub struct RateSpec {
    pub scope: String,
    pub key: String,
    pub max: u64,
    pub window_s: f64,
}

fn plain(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == ':')
}

/// Parses `request_task:20/1s` (key `user`) or `request_task:ip:20/60`.
pub fn parse_rate(text: &str) -> Result<RateSpec, String> {
    let bad =
        || format!("--rate-limit {text}: expected SCOPE[:KEY]:MAX/WINDOW, e.g. request_task:20/1s");
    let (left, window) = text.split_once('/').ok_or_else(bad)?;
    let window_s: f64 = window.trim_end_matches('s').parse().map_err(|_| bad())?;
    if !(window_s.is_finite() && window_s > 0.0 && window_s <= 86_400.0) {
        return Err(format!(
            "--rate-limit {text}: the window must be 0 to 86,400 s"
        ));
    }
    let parts: Vec<&str> = left.split(':').collect();
    let (scope, key, max) = match parts.as_slice() {
        [scope, max] => (scope.to_string(), "user".to_string(), *max),
        [scope, key @ .., max] => (scope.to_string(), key.join(":"), *max),
        _ => return Err(bad()),
    };
    let max: u64 = max.parse().map_err(|_| bad())?;
    if max == 0 || max > UNLIMITED || !plain(&scope) || !plain(&key) {
        return Err(bad());
    }
    Ok(RateSpec {
        scope,
        key,
        max,
        window_s,
    })
}

/// Whether this simulation checks limits (any limit option, or `--check-limits`).
pub fn enabled(o: &SimOptions) -> bool {
    o.check_limits || o.limit_user.is_some() || o.run_window.is_some() || !o.rate_limit.is_empty()
}

/// The `SHOAL_LIMITS` value (an inline TOML array of `[[limits]]` entries) of the limit
/// options, for a server the simulator starts; None without any.
pub fn server_limits(o: &SimOptions) -> Result<Option<String>, SimError> {
    let mut entries = Vec::new();
    if let Some(n) = o.limit_user {
        if n == 0 || n > UNLIMITED {
            return Err(SimError::Options("--limit-user must be 1 to 2^32-1".into()));
        }
        entries.push(format!(
            "{{kind = \"concurrency\", key = \"user\", max = {n}}}"
        ));
    }
    for r in &o.rate_limit {
        let r = parse_rate(r).map_err(SimError::Options)?;
        entries.push(format!(
            "{{kind = \"rate\", key = \"{}\", scope = \"{}\", max = {}, window_s = {:?}}}",
            r.key, r.scope, r.max, r.window_s
        ));
    }
    if entries.is_empty() {
        return Ok(None);
    }
    if o.server.is_some() {
        return Err(SimError::Options(
            "--limit-user and --rate-limit configure a server the simulator starts; with \
             --server, configure its [[limits]] and use --check-limits"
                .into(),
        ));
    }
    if std::env::var_os("SHOAL_LIMITS").is_some() {
        return Err(SimError::Options(
            "SHOAL_LIMITS is set: give the limits either there or with --limit-user/--rate-limit"
                .into(),
        ));
    }
    Ok(Some(format!("[{}]", entries.join(", "))))
}

/// What a call's reply was, as the ledger sees it.
pub enum Seen<'a> {
    /// No reply (connection, timeout): its effect on the server is unknown.
    Transport,
    Reply {
        status: u16,
        object: Option<&'a Map<String, Value>>,
    },
}

#[derive(Default)]
struct LedgerInner {
    ever: HashSet<(String, u64)>,
    held: HashMap<(String, u64), String>,
    by_worker: HashMap<String, (String, u64)>,
    assigned: u64,
    twice: u64,
    twice_examples: Vec<String>,
    uncertain: u64,
    rate_limited: u64,
    rate_limited_shaped: u64,
    limit_refusals: u64,
    backoffs: u64,
    backoffs_ok: u64,
    min_backoff_s: Option<f64>,
}

/// The tasks the simulated workers hold, and what they saw of the limits.
#[derive(Default)]
pub struct Ledger {
    inner: Mutex<LedgerInner>,
}

fn task_of(body: &Value) -> Option<(String, u64)> {
    Some((
        body.get("run_id")?.as_str()?.to_string(),
        body.get("task_id")?.as_u64()?,
    ))
}

impl Ledger {
    /// Records what a worker call's reply means for the tasks held and the limits.
    pub fn observe(&self, ep: Endpoint, body: &Value, seen: Seen<'_>) {
        let mut l = self.inner.lock();
        let (status, object) = match seen {
            Seen::Transport => {
                match ep {
                    Endpoint::RequestTask => l.uncertain += 1,
                    Endpoint::UpdateTask | Endpoint::FailedTask | Endpoint::Beat => {
                        if let Some(t) = task_of(body)
                            && l.end(&t)
                        {
                            l.uncertain += 1;
                        }
                    }
                    _ => {}
                }
                return;
            }
            Seen::Reply { status, object } => (status, object),
        };
        let error = object.and_then(|m| m.get("error"));
        if status == 429 {
            // Refused before anything was done: the task (if any) is unchanged.
            l.rate_limited += 1;
            let shaped = object.is_some_and(|m| m.get("duration").is_some_and(Value::is_number))
                && error
                    .and_then(Value::as_str)
                    .is_some_and(|e| e.contains("rate limit"));
            if shaped {
                l.rate_limited_shaped += 1;
            }
            return;
        }
        let Some(m) = object else { return };
        let not_alive = m.get("task_alive").and_then(Value::as_bool) == Some(false);
        match ep {
            Endpoint::RequestTask => {
                if let Some(e) = error {
                    if e.as_str().is_some_and(|e| e.contains(" is full for ")) {
                        l.limit_refusals += 1;
                    }
                    return;
                }
                let run = m
                    .get("run")
                    .and_then(|r| r.get("_id"))
                    .and_then(Value::as_str);
                let (Some(run), Some(tid)) = (run, m.get("task_id").and_then(Value::as_u64)) else {
                    return;
                };
                let worker = body
                    .pointer("/worker_info/unique_key")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string();
                l.assign(worker, (run.to_string(), tid));
            }
            Endpoint::UpdateTask | Endpoint::Beat if error.is_some() || not_alive => {
                if let Some(t) = task_of(body) {
                    l.end(&t);
                }
            }
            Endpoint::FailedTask => {
                if let Some(t) = task_of(body) {
                    l.end(&t);
                }
            }
            _ => {}
        }
    }

    /// A worker's next call after a rate-limited reply came `gap` later; `min` is the
    /// official worker's shortest back-off.
    pub fn backoff(&self, gap: Duration, min: Duration) {
        let mut l = self.inner.lock();
        l.backoffs += 1;
        // A little slack for timer granularity.
        if gap + Duration::from_millis(1) >= min {
            l.backoffs_ok += 1;
        }
        let g = gap.as_secs_f64();
        l.min_backoff_s = Some(l.min_backoff_s.map_or(g, |m| m.min(g)));
    }

    /// The tasks the workers hold now, per run.
    pub fn held_by_run(&self) -> BTreeMap<String, BTreeSet<u64>> {
        let l = self.inner.lock();
        let mut out: BTreeMap<String, BTreeSet<u64>> = BTreeMap::new();
        for (run, task) in l.held.keys() {
            out.entry(run.clone()).or_default().insert(*task);
        }
        out
    }
}

impl LedgerInner {
    fn assign(&mut self, worker: String, task: (String, u64)) {
        self.assigned += 1;
        if !self.ever.insert(task.clone()) {
            self.twice += 1;
            if self.twice_examples.len() < EXAMPLES {
                self.twice_examples
                    .push(format!("task {}/{} to {worker}", task.0, task.1));
            }
        }
        // The server ends a worker's previous task when it hands the worker a new one.
        if let Some(old) = self.by_worker.insert(worker.clone(), task.clone()) {
            self.held.remove(&old);
        }
        // Handed out twice: the task is now the new worker's.
        if let Some(other) = self.held.insert(task, worker.clone())
            && other != worker
        {
            self.by_worker.remove(&other);
        }
    }

    /// Forgets a task the server ended; true if a worker held it.
    fn end(&mut self, task: &(String, u64)) -> bool {
        match self.held.remove(task) {
            Some(w) => {
                if self.by_worker.get(&w) == Some(task) {
                    self.by_worker.remove(&w);
                }
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests;

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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::time::{Duration, Instant};

use hyper::Method;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::SimError;
use super::client::Client;
use super::measure::Endpoint;
use super::options::SimOptions;

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

/// One limit's peaks, as the sampler saw them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitPeak {
    pub name: String,
    pub kind: String,
    pub key: String,
    /// The limit's max at the last sample (a key may have its own: a run's window).
    pub max: u64,
    /// The highest holders seen under one key, that key and its max then.
    pub peak_key_holders: u64,
    pub peak_key: String,
    pub peak_key_max: u64,
    /// The highest holders seen over all keys.
    pub peak_total_holders: u64,
    pub rejected: u64,
    /// Samples in which a key held more than its max (must be 0).
    pub over_max: u64,
    pub over_max_examples: Vec<String>,
}

/// What the sampler collects.
#[derive(Debug, Default)]
pub struct Peaks {
    pub samples: u64,
    pub failed_samples: u64,
    pub limits: BTreeMap<String, LimitPeak>,
}

fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

impl Peaks {
    /// Folds one `/api/limits` reply in.
    pub fn add(&mut self, reply: &Value) {
        let Some(limits) = reply.get("limits").and_then(Value::as_array) else {
            self.failed_samples += 1;
            return;
        };
        self.samples += 1;
        for l in limits {
            let name = s(l, "name");
            let p = self
                .limits
                .entry(name.clone())
                .or_insert_with(|| LimitPeak {
                    name,
                    kind: s(l, "kind"),
                    key: s(l, "key"),
                    ..LimitPeak::default()
                });
            p.max = u(l, "max");
            p.rejected = p.rejected.max(u(l, "rejected"));
            p.peak_total_holders = p.peak_total_holders.max(u(l, "holders"));
            for k in l
                .get("keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (held, max) = (u(k, "holders"), u(k, "max"));
                if held > p.peak_key_holders || p.peak_key.is_empty() {
                    p.peak_key_holders = held;
                    p.peak_key = s(k, "key");
                    p.peak_key_max = max;
                }
                if max < UNLIMITED && held > max {
                    p.over_max += 1;
                    if p.over_max_examples.len() < EXAMPLES {
                        p.over_max_examples
                            .push(format!("{} held {held} > max {max}", s(k, "key")));
                    }
                }
            }
        }
    }
}

/// Reads `/api/limits` every 200 ms into `peaks` until `deadline`.
pub async fn sample(client: Client, peaks: std::sync::Arc<Mutex<Peaks>>, deadline: Instant) {
    for _ in 0..100_000_000u64 {
        let t = Instant::now();
        if t >= deadline {
            return;
        }
        match get_json(&client, "/api/limits").await {
            Ok(v) => peaks.lock().add(&v),
            Err(_) => peaks.lock().failed_samples += 1,
        }
        tokio::time::sleep_until((t + SAMPLE_EVERY).into()).await;
    }
}

async fn get_json(client: &Client, path: &str) -> Result<Value, SimError> {
    let r = client
        .call(Method::GET, path, None)
        .await
        .map_err(|e| SimError::Server(format!("{path}: {e}")))?;
    serde_json::from_slice(&r.body).map_err(|e| SimError::Server(format!("{path}: {e}")))
}

/// The comparison of the tasks the workers hold with the server's, after the fleet stopped.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TaskCheck {
    /// Tasks handed out to the workers.
    pub assigned: u64,
    /// Tasks handed out although already handed out before (must be 0).
    pub handed_out_twice: u64,
    pub handed_out_twice_examples: Vec<String>,
    /// Tasks the workers held when they stopped.
    pub held_by_workers: u64,
    /// Active tasks of the runs (`get_run`'s `workers`), summed.
    pub active_on_server: u64,
    /// Holders of the run window (`run_window`), summed.
    pub window_holders: u64,
    /// Calls whose effect is unknown (transport failures of request_task, update_task,
    /// beat or failed_task).
    pub uncertain: u64,
    /// Tasks the server declared dead during the run (`shoal_dead_tasks_total`), e.g. those
    /// of workers stopped at the deadline while calls in flight finished. With `uncertain`,
    /// the largest mismatch they can explain.
    #[serde(default)]
    pub declared_dead: u64,
    /// Runs where the three counts (or, with at most 100 holders, the task sets) differ.
    pub mismatches: Vec<String>,
    /// Tasks in mismatches (the sum over runs of the largest difference).
    pub mismatched_tasks: u64,
}

/// The verdicts (each true when it holds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Verdict {
    /// No key of any limit was seen holding more than its max.
    pub max_respected: bool,
    /// No task handed out twice.
    pub no_task_twice: bool,
    /// The workers' tasks, the server's active tasks and the window's holders agree.
    pub no_task_lost: bool,
    /// Every 429 had the protocol's shape (`error` naming the rate limit, `duration`).
    pub rate_limited_in_shape: bool,
    /// Every worker waited at least the official back-off after a rate-limited reply.
    pub backed_off: bool,
    /// All of the above, and the sampler read `/api/limits` at least once.
    pub ok: bool,
}

/// The report's "limits" section.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitsReport {
    /// `SHOAL_LIMITS` given to a started server (None: the server's own settings).
    pub configured: Option<String>,
    /// `max_active_tasks` of the created runs.
    pub run_window: Option<u32>,
    pub samples: u64,
    pub failed_samples: u64,
    pub limits: Vec<LimitPeak>,
    pub rate_limited_calls: u64,
    pub rate_limited_in_shape: u64,
    /// request_task refusals by a full concurrency limit.
    pub limit_refusals: u64,
    pub backoffs_checked: u64,
    pub backoffs_ok: u64,
    pub min_backoff_s: Option<f64>,
    pub tasks: TaskCheck,
    pub verdict: Verdict,
}

/// After the fleet stopped: compares the ledger with the server and makes the report.
pub async fn finish(
    client: &Client,
    run_ids: &[String],
    ledger: &Ledger,
    peaks: &Mutex<Peaks>,
    configured: Option<String>,
    run_window: Option<u32>,
) -> LimitsReport {
    // The final state, sampled too.
    let last = get_json(client, "/api/limits").await.ok();
    if let Some(v) = &last {
        peaks.lock().add(v);
    }
    let mut window: HashMap<String, (u64, Option<BTreeSet<u64>>)> = HashMap::new();
    let limits = last
        .as_ref()
        .and_then(|v| v.get("limits"))
        .and_then(Value::as_array);
    for l in limits.into_iter().flatten() {
        if s(l, "name") != "run_window" {
            continue;
        }
        for k in l
            .get("keys")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let held = u(k, "holders");
            let listed: Vec<&str> = k
                .get("held_by")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            let set = (held <= HELD_BY_LISTED && listed.len() as u64 == held).then(|| {
                listed
                    .iter()
                    .filter_map(|h| h.rsplit_once('/').and_then(|(_, t)| t.parse().ok()))
                    .collect()
            });
            window.insert(s(k, "key"), (held, set));
        }
    }
    let held = ledger.held_by_run();
    let (mut t, ledger_numbers) = {
        let l = ledger.inner.lock();
        let t = TaskCheck {
            assigned: l.assigned,
            handed_out_twice: l.twice,
            handed_out_twice_examples: l.twice_examples.clone(),
            held_by_workers: held.values().map(|s| s.len() as u64).sum(),
            uncertain: l.uncertain,
            ..TaskCheck::default()
        };
        let numbers = (
            l.rate_limited,
            l.rate_limited_shaped,
            l.limit_refusals,
            l.backoffs,
            l.backoffs_ok,
            l.min_backoff_s,
        );
        (t, numbers)
    };
    let mut runs: BTreeSet<String> = run_ids.iter().cloned().collect();
    runs.extend(held.keys().cloned());
    for run in &runs {
        let server = match get_json(client, &format!("/api/get_run/{run}")).await {
            Ok(v) => v.get("workers").and_then(Value::as_u64),
            Err(_) => None,
        };
        let mine = held.get(run).cloned().unwrap_or_default();
        let (win, win_set) = window
            .get(run)
            .cloned()
            .unwrap_or((0, Some(BTreeSet::new())));
        let server = server.unwrap_or(0);
        t.active_on_server += server;
        t.window_holders += win;
        let n = mine.len() as u64;
        let diff = n
            .abs_diff(server)
            .max(n.abs_diff(win))
            .max(server.abs_diff(win));
        let sets_differ = win_set.as_ref().is_some_and(|s| *s != mine);
        if diff > 0 || sets_differ {
            t.mismatched_tasks += diff.max(u64::from(sets_differ));
            if t.mismatches.len() < EXAMPLES {
                let only_mine: Vec<u64> = win_set
                    .as_ref()
                    .map(|s| mine.difference(s).copied().take(5).collect())
                    .unwrap_or_default();
                let only_server: Vec<u64> = win_set
                    .as_ref()
                    .map(|s| s.difference(&mine).copied().take(5).collect())
                    .unwrap_or_default();
                t.mismatches.push(format!(
                    "run {run}: workers hold {n}, server active {server}, window holders {win}; \
                     only the workers': {only_mine:?}, only the server's: {only_server:?}"
                ));
            }
        }
    }
    let (rate_limited, shaped, refusals, backoffs, backoffs_ok, min_backoff_s) = ledger_numbers;
    let p = peaks.lock();
    let mut report = LimitsReport {
        configured,
        run_window,
        samples: p.samples,
        failed_samples: p.failed_samples,
        limits: p.limits.values().cloned().collect(),
        rate_limited_calls: rate_limited,
        rate_limited_in_shape: shaped,
        limit_refusals: refusals,
        backoffs_checked: backoffs,
        backoffs_ok,
        min_backoff_s,
        tasks: t,
        verdict: Verdict::default(),
    };
    report.judge();
    report
}

impl LimitsReport {
    /// Computes the verdicts from the numbers.
    pub fn judge(&mut self) {
        let t = &self.tasks;
        let mut v = Verdict {
            max_respected: self.limits.iter().all(|l| l.over_max == 0),
            no_task_twice: t.handed_out_twice == 0,
            no_task_lost: t.mismatched_tasks <= t.uncertain.saturating_add(t.declared_dead),
            rate_limited_in_shape: self.rate_limited_in_shape == self.rate_limited_calls,
            backed_off: self.backoffs_ok == self.backoffs_checked,
            ok: false,
        };
        v.ok = self.samples > 0
            && v.max_respected
            && v.no_task_twice
            && v.no_task_lost
            && v.rate_limited_in_shape
            && v.backed_off;
        self.verdict = v;
    }

    /// Tasks the server declared dead during the run may explain as many mismatches.
    pub fn allow_dead_tasks(&mut self, dead: u64) {
        self.tasks.declared_dead = dead;
        self.judge();
    }
}

fn max_text(m: u64) -> String {
    if m >= UNLIMITED {
        "-".to_string()
    } else {
        m.to_string()
    }
}

fn yes(b: bool) -> &'static str {
    if b { "ok" } else { "FAILED" }
}

/// The summary's "limits" lines.
pub fn summary_lines(r: &LimitsReport) -> Vec<String> {
    let mut out = vec![format!(
        "limits: {} samples of /api/limits ({} failed){}{}",
        r.samples,
        r.failed_samples,
        r.configured
            .as_ref()
            .map_or_else(String::new, |c| format!("; configured {c}")),
        r.run_window
            .map_or_else(String::new, |w| format!("; run window {w}")),
    )];
    out.push(format!(
        "  {:<28} {:<12} {:<12} {:>8} {:>10} {:>10} {:>9}  verdict",
        "limit", "kind", "key", "max", "peak/key", "peak/all", "rejected"
    ));
    for l in &r.limits {
        let key_max = if l.peak_key.is_empty() {
            max_text(l.max)
        } else {
            max_text(l.peak_key_max)
        };
        out.push(format!(
            "  {:<28} {:<12} {:<12} {:>8} {:>10} {:>10} {:>9}  {}",
            l.name,
            l.kind,
            l.key,
            key_max,
            l.peak_key_holders,
            l.peak_total_holders,
            l.rejected,
            if l.over_max == 0 {
                "ok".to_string()
            } else {
                format!("OVER MAX x{}: {:?}", l.over_max, l.over_max_examples)
            }
        ));
    }
    let t = &r.tasks;
    out.push(format!(
        "  tasks: {} handed out, {} twice; at the end workers held {}, the server had {} active, the window {} holders ({} mismatched; explained by {} calls of unknown outcome and {} tasks declared dead)",
        t.assigned,
        t.handed_out_twice,
        t.held_by_workers,
        t.active_on_server,
        t.window_holders,
        t.mismatched_tasks,
        t.uncertain,
        t.declared_dead
    ));
    for m in t.mismatches.iter().chain(&t.handed_out_twice_examples) {
        out.push(format!("    {m}"));
    }
    out.push(format!(
        "  rate-limited calls {} ({} in the protocol's shape), limit refusals {}, back-offs after a 429 {} ({} long enough, shortest {} s)",
        r.rate_limited_calls,
        r.rate_limited_in_shape,
        r.limit_refusals,
        r.backoffs_checked,
        r.backoffs_ok,
        r.min_backoff_s
            .map_or_else(|| "n/a".to_string(), |s| format!("{s:.3}"))
    ));
    let v = &r.verdict;
    out.push(format!(
        "  verdict: max respected {}, no task twice {}, no task lost {}, 429 shape {}, backed off {} => {}",
        yes(v.max_respected),
        yes(v.no_task_twice),
        yes(v.no_task_lost),
        yes(v.rate_limited_in_shape),
        yes(v.backed_off),
        if v.ok { "PASS" } else { "FAIL" }
    ));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rate_options_parse() {
        let r = parse_rate("request_task:20/1s").expect("parses");
        assert_eq!(
            (r.scope.as_str(), r.key.as_str(), r.max),
            ("request_task", "user", 20)
        );
        assert_eq!(r.window_s, 1.0);
        let r = parse_rate("api:resource:x:5/60").expect("parses");
        assert_eq!((r.key.as_str(), r.max, r.window_s), ("resource:x", 5, 60.0));
        for bad in [
            "request_task",
            "request_task:0/1",
            "x:1/0",
            "a b:1/1",
            ":1/1",
            "r:1/s",
        ] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    fn reply(v: Value) -> Map<String, Value> {
        match v {
            Value::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn the_ledger_follows_the_replies() {
        let ledger = Ledger::default();
        let req = |k: &str| json!({"worker_info": {"unique_key": k}});
        let got = |t: u64| reply(json!({"run": {"_id": "r"}, "task_id": t, "duration": 0.1}));
        fn ok(m: &Map<String, Value>) -> Seen<'_> {
            Seen::Reply {
                status: 200,
                object: Some(m),
            }
        }
        ledger.observe(Endpoint::RequestTask, &req("a"), ok(&got(0)));
        ledger.observe(Endpoint::RequestTask, &req("b"), ok(&got(1)));
        // A rate-limited update changes nothing; a not-alive one ends the task.
        let task0 = json!({"run_id": "r", "task_id": 0});
        let limited = reply(json!({"error": "x: rate limit r reached", "duration": 0.0}));
        ledger.observe(
            Endpoint::UpdateTask,
            &task0,
            Seen::Reply {
                status: 429,
                object: Some(&limited),
            },
        );
        assert_eq!(ledger.held_by_run()["r"].len(), 2);
        let dead = reply(json!({"task_alive": false, "duration": 0.0}));
        ledger.observe(Endpoint::UpdateTask, &task0, ok(&dead));
        assert_eq!(ledger.held_by_run()["r"], BTreeSet::from([1]));
        // A new task replaces the worker's old one; the same task again is a duplicate.
        ledger.observe(Endpoint::RequestTask, &req("b"), ok(&got(2)));
        assert_eq!(ledger.held_by_run()["r"], BTreeSet::from([2]));
        ledger.observe(Endpoint::RequestTask, &req("c"), ok(&got(2)));
        let l = ledger.inner.lock();
        assert_eq!(
            (l.assigned, l.twice, l.rate_limited, l.rate_limited_shaped),
            (4, 1, 1, 1)
        );
    }

    #[test]
    fn only_unknown_outcomes_and_dead_tasks_excuse_a_mismatch() {
        let mut r = LimitsReport {
            samples: 1,
            ..LimitsReport::default()
        };
        r.tasks.mismatched_tasks = 5;
        r.tasks.uncertain = 2;
        r.judge();
        assert!(!r.verdict.no_task_lost && !r.verdict.ok);
        r.allow_dead_tasks(3);
        assert!(r.verdict.no_task_lost && r.verdict.ok, "{:?}", r.verdict);
        r.rate_limited_calls = 1;
        r.judge();
        assert!(!r.verdict.rate_limited_in_shape && !r.verdict.ok);
    }

    #[test]
    fn peaks_see_a_key_over_its_max() {
        let mut p = Peaks::default();
        p.add(&json!({"limits": [{"name": "concurrency:user", "kind": "concurrency",
            "key": "user", "max": 4, "holders": 7, "rejected": 2,
            "keys": [{"key": "u1", "max": 4, "holders": 4}, {"key": "u2", "max": 4, "holders": 3}]}]}));
        let l = &p.limits["concurrency:user"];
        assert_eq!(
            (l.peak_key_holders, l.peak_total_holders, l.over_max),
            (4, 7, 0)
        );
        p.add(
            &json!({"limits": [{"name": "concurrency:user", "max": 4, "holders": 5,
            "keys": [{"key": "u1", "max": 4, "holders": 5}]}]}),
        );
        assert_eq!(p.limits["concurrency:user"].over_max, 1);
        p.add(&json!({"oops": 1}));
        assert_eq!((p.samples, p.failed_samples), (2, 1));
    }
}

//! The end of the limits check: what the workers hold against the server's active tasks and
//! the run window's holders, the verdicts, and the summary lines.
//!
//! Must not: call the server but to read (`get_run`, `/api/limits`).

use std::collections::{BTreeSet, HashMap};

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::peaks::{LimitPeak, Peaks, get_json, s, u};
use super::{EXAMPLES, HELD_BY_LISTED, Ledger, UNLIMITED};
use crate::client::Client;

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

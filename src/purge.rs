//! Purge: detecting broken or cheating workers in a finished run, as
//! Fishtest does it.
//!
//! This module owns:
//! - the crash/time rule for single tasks ([`crash_or_time`]);
//! - the homogeneity chi² over workers (grouped by `unique_key`), with each
//!   worker's residual as a z-score and the Bonferroni colour thresholds
//!   ([`get_chi2`], [`residual_to_color`]);
//! - the worst-worker removal loop ([`get_bad_workers`]) and the whole purge
//!   decision ([`plan_purge`]): which tasks become bad, with what residual and
//!   colour;
//! - the green/yellow flags of a finished run ([`run_flags`]).
//!
//! It must not do I/O, be async, touch the store or know about HTTP, and it
//! does not depend on the statistics module: values such as LOS come in as
//! parameters. The caller moves tasks to `bad_tasks`, zeroes them, recomputes
//! results and the SPRT, and decides about reviving the run.
//!
//! Files: `purge/tests.rs`: the unit tests.

use std::collections::{HashMap, HashSet};

use serde::{Deserialize, Serialize};
use statrs::distribution::{ChiSquared, ContinuousCDF, Normal};

/// Thresholds of one purge mode: a worker is removed while the whole table's
/// p-value is below `p` or the worker's residual is above `res`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PurgeThresholds {
    pub p: f64,
    pub res: f64,
}

/// Auto-purge (run from `stop_run`, never for SPSA runs).
pub const AUTO_PURGE: PurgeThresholds = PurgeThresholds { p: 0.001, res: 7.0 };
/// Manual purge from the run page: more relaxed.
pub const MANUAL_PURGE: PurgeThresholds = PurgeThresholds { p: 0.01, res: 4.5 };
/// chi² removal rounds per purge call. Fishtest calls `purge_run` with its
/// default `iters=1`, so one purge removes at most one worker by chi², and
/// none when a crash/time task was purged (the rounds drop to 0).
pub const PURGE_ROUNDS: usize = 1;
/// Residual recorded for a task purged for crashes or time losses.
pub const CRASH_OR_TIME_RESIDUAL: f64 = 10.0;

/// Workers whose expected count in any cell is at most this are dropped from
/// the table: the chi² approximation is not valid for them.
const MIN_EXPECTED: f64 = 5.0;

/// The result counters of one task, as stored in `tasks[i].stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PurgeStats {
    pub wins: u64,
    pub losses: u64,
    pub draws: u64,
    #[serde(default)]
    pub crashes: u64,
    #[serde(default)]
    pub time_losses: u64,
    /// Absent on very old runs; then the table uses W/L/D instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pentanomial: Option<[u64; 5]>,
}

impl PurgeStats {
    pub fn games(&self) -> u64 {
        self.wins
            .saturating_add(self.losses)
            .saturating_add(self.draws)
    }
}

/// One task as the purge sees it. Tasks without `worker_info` (never handed
/// out) carry no games; the caller can simply leave them out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PurgeTask<'a> {
    /// `worker_info.unique_key`: the identity chi² groups by.
    pub unique_key: &'a str,
    pub stats: PurgeStats,
    /// Already marked bad by an earlier purge: ignored entirely.
    pub bad: bool,
}

/// The residual colours stored in `residual_color`. Fishtest's older
/// documents hold the hex codes, which are accepted as aliases.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResidualColor {
    #[serde(alias = "#44EB44")]
    Green,
    Yellow,
    #[serde(alias = "#FF6A6A")]
    Red,
}

impl ResidualColor {
    /// The CSS colour the tasks table paints.
    pub fn display_color(self) -> &'static str {
        match self {
            ResidualColor::Green => "#44EB44",
            ResidualColor::Yellow => "yellow",
            ResidualColor::Red => "#FF6A6A",
        }
    }
}

/// `crashes > 3`, or more than 20 games of which more than 10% were lost on
/// time. The division is done in floating point like Fishtest's, so exactly
/// 10% is not enough.
pub fn crash_or_time(stats: &PurgeStats) -> bool {
    let total = stats.games();
    stats.crashes > 3 || (total > 20 && stats.time_losses as f64 / total as f64 > 0.1)
}

/// One worker's residual in a chi² table.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerResidual {
    pub unique_key: String,
    /// z-score of the worker's own 2×3 chi², floored at 0; may be `inf`.
    pub residual: f64,
}

/// The homogeneity test over workers.
#[derive(Debug, Clone, PartialEq)]
pub struct Chi2 {
    pub chi2: f64,
    pub dof: usize,
    /// p-value of the whole table (`1 − cdf`, so 0 once the cdf rounds to 1).
    pub p: f64,
    /// Qualifying workers in order of first appearance among the tasks (the
    /// order decides ties in [`get_bad_workers`]).
    pub residuals: Vec<WorkerResidual>,
    /// Bonferroni-corrected 95% / 99% thresholds for the residuals.
    pub z_95: f64,
    pub z_99: f64,
}

impl Chi2 {
    /// What Fishtest returns when there is no table to test: fewer than two
    /// qualifying workers, or no games. All comparisons with NaN are false,
    /// so nobody is removed, and every colour comes out red.
    fn empty() -> Self {
        Chi2 {
            chi2: f64::NAN,
            dof: 0,
            p: f64::NAN,
            residuals: Vec::new(),
            z_95: f64::NAN,
            z_99: f64::NAN,
        }
    }

    /// The residual of `unique_key`, if the worker qualified.
    pub fn residual(&self, unique_key: &str) -> Option<f64> {
        self.residuals
            .iter()
            .find(|w| w.unique_key == unique_key)
            .map(|w| w.residual)
    }

    /// What the tasks table shows for a worker: its residual, or `inf` when
    /// it did not qualify (Fishtest then prints "-").
    pub fn residual_or_inf(&self, unique_key: &str) -> f64 {
        self.residual(unique_key).unwrap_or(f64::INFINITY)
    }
}

/// Upper-tail quantile of N(0,1): `isf(q) = −ppf(q)`, exact in the far tail
/// (`q = 0` gives `+inf`). NaN in, NaN out, never a panic.
fn norm_isf(q: f64) -> f64 {
    if q.is_nan() {
        return f64::NAN;
    }
    -norm_ppf(q)
}

fn norm_ppf(p: f64) -> f64 {
    if !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    match Normal::new(0.0, 1.0) {
        Ok(n) => n.inverse_cdf(p),
        Err(_) => f64::NAN,
    }
}

fn chi2_dist(dof: f64) -> Option<ChiSquared> {
    ChiSquared::new(dof).ok()
}

/// The per-worker table cells: pentanomial pairs collapsed to
/// `[WW+WD, LD+LL, DD/WL]` (pair win, loss, draw), because the WW and LL
/// cells alone are usually too small for chi². Runs without pentanomial use
/// `[W, L, D]`.
fn cells(stats: &PurgeStats, pentanomial: bool) -> [f64; 3] {
    if pentanomial {
        let p = stats.pentanomial.unwrap_or([0; 5]);
        [
            p[4].saturating_add(p[3]) as f64,
            p[0].saturating_add(p[1]) as f64,
            p[2] as f64,
        ]
    } else {
        [stats.wins as f64, stats.losses as f64, stats.draws as f64]
    }
}

/// The chi² homogeneity test across workers.
///
/// Non-bad tasks are summed per `unique_key` (minus `exclude`). Whether the
/// table is pentanomial is decided by the first such task, as in Fishtest.
/// Workers with an expected cell ≤ 5 are dropped, repeatedly, until none is
/// left to drop; with fewer than two workers left, or no games, the result
/// is the NaN table. Each worker's residual is its adjusted row chi² (the
/// chi² of the 2×3 table "this worker vs everyone else", i.e.
/// `row_chi2 / (1 − row_total / grand_total)`) mapped through its
/// chi²(2) survival function to a standard-normal z, floored at 0.
pub fn get_chi2(tasks: &[PurgeTask<'_>], exclude: &HashSet<String>) -> Chi2 {
    // Aggregate by worker, keeping first-appearance order.
    let mut keys: Vec<&str> = Vec::new();
    let mut rows: Vec<[f64; 3]> = Vec::new();
    let mut index: HashMap<&str, usize> = HashMap::new();
    let mut pentanomial: Option<bool> = None;
    for task in tasks {
        if task.bad || exclude.contains(task.unique_key) {
            continue;
        }
        let penta = *pentanomial.get_or_insert(task.stats.pentanomial.is_some());
        let row = cells(&task.stats, penta);
        match index.get(task.unique_key).and_then(|&i| rows.get_mut(i)) {
            Some(acc) => {
                for (a, x) in acc.iter_mut().zip(row) {
                    *a += x;
                }
            }
            None => {
                index.insert(task.unique_key, rows.len());
                keys.push(task.unique_key);
                rows.push(row);
            }
        }
    }

    // Drop thin workers until the table is stable.
    let (expected, row_sums, grand_total) = loop {
        if rows.len() <= 1 {
            return Chi2::empty();
        }
        let mut col_sums = [0.0f64; 3];
        for row in &rows {
            for (acc, x) in col_sums.iter_mut().zip(row) {
                *acc += x;
            }
        }
        let row_sums: Vec<f64> = rows.iter().map(|r| r[0] + r[1] + r[2]).collect();
        let grand_total = col_sums[0] + col_sums[1] + col_sums[2];
        if grand_total == 0.0 {
            return Chi2::empty();
        }
        let expected: Vec<[f64; 3]> = row_sums
            .iter()
            .map(|&r| col_sums.map(|c| r * c / grand_total))
            .collect();
        let keep: Vec<bool> = expected
            .iter()
            .map(|e| e.iter().all(|&x| x > MIN_EXPECTED))
            .collect();
        if keep.iter().all(|&k| k) {
            break (expected, row_sums, grand_total);
        }
        let mut flags = keep.iter();
        keys.retain(|_| flags.next().copied().unwrap_or(false));
        let mut flags = keep.iter();
        rows.retain(|_| flags.next().copied().unwrap_or(false));
    };

    let n_rows = rows.len();
    let n_cols = 3usize;
    let dof = (n_rows - 1) * (n_cols - 1);
    let row_chi2: Vec<f64> = rows
        .iter()
        .zip(&expected)
        .map(|(obs, exp)| {
            obs.iter()
                .zip(exp)
                .map(|(o, e)| {
                    let d = o - e;
                    d * d / e
                })
                .sum()
        })
        .collect();
    let chi2: f64 = row_chi2.iter().sum();
    let p = match chi2_dist(dof as f64) {
        Some(d) => 1.0 - d.cdf(chi2),
        None => f64::NAN,
    };

    let row_dist = chi2_dist((n_cols - 1) as f64);
    let residuals = keys
        .iter()
        .zip(row_chi2.iter().zip(&row_sums))
        .map(|(key, (&rc, &rs))| {
            let adjusted = rc / (1.0 - rs / grand_total);
            let z = match &row_dist {
                Some(d) => norm_isf(d.sf(adjusted)),
                None => f64::NAN,
            };
            WorkerResidual {
                unique_key: (*key).to_owned(),
                // Negative z carries no information; NaN also becomes 0,
                // as Python's max(0, nan) does.
                residual: if z > 0.0 { z } else { 0.0 },
            }
        })
        .collect();

    let n = n_rows as f64;
    Chi2 {
        chi2,
        dof,
        p,
        residuals,
        z_95: norm_ppf(1.0 - 0.05 / n),
        z_99: norm_ppf(1.0 - 0.01 / n),
    }
}

/// Green below `z_95`, yellow below `z_99`, red otherwise (including the NaN
/// thresholds of an empty table and an `inf` residual).
pub fn residual_to_color(residual: f64, chi2: &Chi2) -> ResidualColor {
    if residual.abs() < chi2.z_95 {
        ResidualColor::Green
    } else if residual.abs() < chi2.z_99 {
        ResidualColor::Yellow
    } else {
        ResidualColor::Red
    }
}

/// What the tasks table shows for a task that is not (yet) bad: crash/time
/// tasks show 10 in red; others their worker's residual in `chi2` (`inf`
/// when the worker did not qualify) and its colour. Bad tasks show the
/// residual and colour stored in their `bad_tasks` record instead.
pub fn task_residual(task: &PurgeTask<'_>, chi2: &Chi2) -> (f64, ResidualColor) {
    if crash_or_time(&task.stats) {
        return (CRASH_OR_TIME_RESIDUAL, ResidualColor::Red);
    }
    let residual = chi2.residual_or_inf(task.unique_key);
    (residual, residual_to_color(residual, chi2))
}

/// A worker removed by the chi² rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct BadWorker {
    pub unique_key: String,
    /// Its residual in the table of the round that removed it.
    pub residual: f64,
    pub color: ResidualColor,
}

/// Up to `rounds` times: recompute the table without the workers removed so
/// far, and remove the worst worker (largest residual; the first in table
/// order on a tie) among those eligible — all workers if the table's p-value
/// is below `p`, otherwise those with residual above `res`. Stops early when
/// nobody is eligible.
pub fn get_bad_workers(
    tasks: &[PurgeTask<'_>],
    thresholds: PurgeThresholds,
    rounds: usize,
) -> Vec<BadWorker> {
    let mut removed: HashSet<String> = HashSet::new();
    let mut bad = Vec::new();
    for _ in 0..rounds {
        let chi2 = get_chi2(tasks, &removed);
        let mut worst: Option<&WorkerResidual> = None;
        for w in &chi2.residuals {
            if (chi2.p < thresholds.p || w.residual > thresholds.res)
                && worst.is_none_or(|cur| w.residual > cur.residual)
            {
                worst = Some(w);
            }
        }
        let Some(worst) = worst else { break };
        bad.push(BadWorker {
            unique_key: worst.unique_key.clone(),
            residual: worst.residual,
            color: residual_to_color(worst.residual, &chi2),
        });
        removed.insert(worst.unique_key.clone());
    }
    bad
}

/// Why a task is purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BadReason {
    CrashOrTime,
    Chi2,
}

/// A task the purge marks bad. The caller copies it into `bad_tasks` with
/// `task_id = index`, `bad = true`, this residual and colour, then zeroes the
/// original's stats, sets it inactive and flags it bad.
#[derive(Debug, Clone, PartialEq)]
pub struct BadTask {
    /// Index into the slice given to [`plan_purge`] (the task id when the
    /// caller passes the run's whole task list).
    pub index: usize,
    pub residual: f64,
    pub color: ResidualColor,
    pub reason: BadReason,
}

/// The outcome of one purge.
#[derive(Debug, Clone, PartialEq)]
pub struct PurgePlan {
    /// Crash/time tasks first, then chi² tasks, each group in task order —
    /// the order Fishtest appends them to `bad_tasks`.
    pub bad_tasks: Vec<BadTask>,
    /// The table after the crash/time tasks were set aside and before any
    /// chi² removal (what the run page's chi² summary shows).
    pub chi2: Chi2,
}

impl PurgePlan {
    /// Whether anything was purged. When false, Fishtest reports
    /// "No bad workers" and leaves the run untouched.
    pub fn purged(&self) -> bool {
        !self.bad_tasks.is_empty()
    }
}

/// Decide one purge of a finished run.
///
/// 1. Every non-bad task that [`crash_or_time`] flags is bad, with residual
///    10 and colour red.
/// 2. If any was, the chi² rounds are cut by one (to 0 with
///    [`PURGE_ROUNDS`]); otherwise [`get_bad_workers`] runs on the remaining
///    tasks with `rounds` rounds.
/// 3. Every remaining non-bad task of a removed worker is bad, with the
///    worker's residual and colour.
///
/// The run-level preconditions (finished, not failed, started ≤ 30 days
/// ago) are the caller's.
pub fn plan_purge(
    tasks: &[PurgeTask<'_>],
    thresholds: PurgeThresholds,
    rounds: usize,
) -> PurgePlan {
    let mut bad_tasks = Vec::new();
    let mut view: Vec<PurgeTask<'_>> = tasks.to_vec();
    for (index, task) in view.iter_mut().enumerate() {
        if !task.bad && crash_or_time(&task.stats) {
            task.bad = true;
            bad_tasks.push(BadTask {
                index,
                residual: CRASH_OR_TIME_RESIDUAL,
                color: ResidualColor::Red,
                reason: BadReason::CrashOrTime,
            });
        }
    }
    let chi2 = get_chi2(&view, &HashSet::new());
    let rounds = if bad_tasks.is_empty() {
        rounds
    } else {
        rounds.saturating_sub(1)
    };
    let workers = get_bad_workers(&view, thresholds, rounds);
    for (index, task) in view.iter().enumerate() {
        if task.bad {
            continue;
        }
        if let Some(w) = workers.iter().find(|w| w.unique_key == task.unique_key) {
            bad_tasks.push(BadTask {
                index,
                residual: w.residual,
                color: w.color,
                reason: BadReason::Chi2,
            });
        }
    }
    PurgePlan { bad_tasks, chi2 }
}

/// An SPRT's decision, `args.sprt.state` (the statistics module's type).
pub use crate::stats::SprtState;

/// What kind of run is being flagged.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum RunKind {
    /// `elo0`/`elo1`: an accepted SPRT whose bounds sum below zero is a non-regression test,
    /// painted blue on the pages; its flag is still `is_green` (Fishtest's flags mirror the
    /// colours with blue counted as green, and its run schema requires it).
    Sprt {
        state: SprtState,
        elo0: f64,
        elo1: f64,
    },
    /// A fixed-games run, with its LOS from the statistics module.
    FixedGames { los: f64 },
    /// SPSA runs are never green or yellow.
    Spsa,
}

/// `is_green` / `is_yellow` of a finished run (never both).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RunFlags {
    pub is_green: bool,
    pub is_yellow: bool,
}

/// Fishtest's flags: accepted → green (the blue non-regression case included);
/// rejected → yellow when wins > losses (a "good but not good enough" run),
/// otherwise red, which is no flag. A fixed-games run counts as accepted when
/// LOS > 0.95 and rejected when LOS < 0.05.
pub fn run_flags(kind: RunKind, wins: u64, losses: u64) -> RunFlags {
    let state = match kind {
        RunKind::Sprt { state, .. } => state,
        RunKind::FixedGames { los } if los < 0.05 => SprtState::Rejected,
        RunKind::FixedGames { los } if los > 0.95 => SprtState::Accepted,
        RunKind::FixedGames { .. } | RunKind::Spsa => SprtState::Running,
    };
    RunFlags {
        is_green: state == SprtState::Accepted,
        is_yellow: state == SprtState::Rejected && wins > losses,
    }
}

#[cfg(test)]
mod tests;

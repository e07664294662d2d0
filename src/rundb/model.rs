//! The run document and its parts, with Fishtest's field names and types
//! (docs/fishtest-compatibility.md#data-model).
//!
//! Owns: the typed `Run`, `RunArgs`, `Task`, `Stats`, `WorkerInfo`, the derived quantities
//! (worker names, games played) and the invariant checker.
//! Must not: do I/O or know HTTP. Documents written by Fishtest are read leniently (missing
//! optional fields default; unknown fields are kept in `extra` and written back unchanged).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::store::Date;

/// Fishtest's RUN_VERSION for documents this server writes.
pub const RUN_VERSION: u32 = 24;

/// Game results: {wins, losses, draws, crashes, time_losses, pentanomial[5]}.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stats {
    pub wins: u64,
    pub losses: u64,
    pub draws: u64,
    #[serde(default)]
    pub crashes: u64,
    #[serde(default)]
    pub time_losses: u64,
    #[serde(default)]
    pub pentanomial: [u64; 5],
}

/// The most games one stats block may count (2^40, about 10^12): far above any real task or
/// run, far below where sums of counts could overflow. Client counts above it are refused.
pub const MAX_GAMES: u64 = 1 << 40;

impl Stats {
    /// Games played (saturating: counts from a client are bounded by [`Stats::check`] first).
    pub fn games(&self) -> u64 {
        self.wins
            .saturating_add(self.losses)
            .saturating_add(self.draws)
    }

    /// The consistency rules between the trinomial and the pentanomial counts
    /// (w + l + d = 2·Σp; w − l = 2p4 + p3 − p1 − 2p0; p1 + p3 ≤ d ≤ p1 + 2p2 + p3), and
    /// the bounds that keep every later sum exact. Computed in 128 bits: no count a client can
    /// send overflows here.
    pub fn check(&self) -> Result<(), String> {
        let p = self.pentanomial.map(u128::from);
        let (w, l, d) = (
            u128::from(self.wins),
            u128::from(self.losses),
            u128::from(self.draws),
        );
        let games = w + l + d;
        if games > u128::from(MAX_GAMES) {
            return Err(format!(
                "wins + losses + draws ({games}) is more than {MAX_GAMES} games"
            ));
        }
        let pairs: u128 = p.iter().sum();
        if games != 2 * pairs {
            return Err(format!(
                "wins + losses + draws ({games}) must be twice the pentanomial total ({pairs})"
            ));
        }
        if u128::from(self.crashes) > games || u128::from(self.time_losses) > games {
            return Err(format!(
                "crashes ({}) and time_losses ({}) cannot exceed the games played ({games})",
                self.crashes, self.time_losses
            ));
        }
        let lhs = w as i128 - l as i128;
        let rhs = 2 * p[4] as i128 + p[3] as i128 - p[1] as i128 - 2 * p[0] as i128;
        if lhs != rhs {
            return Err(format!(
                "wins - losses ({lhs}) must equal 2*p4 + p3 - p1 - 2*p0 ({rhs})"
            ));
        }
        let lo = p[1] + p[3];
        let hi = p[1] + 2 * p[2] + p[3];
        let draws = d;
        if draws < lo || draws > hi {
            return Err(format!(
                "draws ({}) must lie between p1 + p3 ({lo}) and p1 + 2*p2 + p3 ({hi})",
                self.draws
            ));
        }
        Ok(())
    }

    /// `self - older`, field by field; None if any count went down.
    pub fn delta(&self, older: &Stats) -> Option<Stats> {
        let mut pentanomial = [0u64; 5];
        for (i, cell) in pentanomial.iter_mut().enumerate() {
            *cell = self.pentanomial[i].checked_sub(older.pentanomial[i])?;
        }
        Some(Stats {
            wins: self.wins.checked_sub(older.wins)?,
            losses: self.losses.checked_sub(older.losses)?,
            draws: self.draws.checked_sub(older.draws)?,
            crashes: self.crashes.checked_sub(older.crashes)?,
            time_losses: self.time_losses.checked_sub(older.time_losses)?,
            pentanomial,
        })
    }

    /// `self + d`, field by field; `None` (and `self` unchanged) if any sum overflows.
    pub fn checked_add(&self, d: &Stats) -> Option<Stats> {
        let mut pentanomial = [0u64; 5];
        for (i, cell) in pentanomial.iter_mut().enumerate() {
            *cell = self.pentanomial[i].checked_add(d.pentanomial[i])?;
        }
        Some(Stats {
            wins: self.wins.checked_add(d.wins)?,
            losses: self.losses.checked_add(d.losses)?,
            draws: self.draws.checked_add(d.draws)?,
            crashes: self.crashes.checked_add(d.crashes)?,
            time_losses: self.time_losses.checked_add(d.time_losses)?,
            pentanomial,
        })
    }

    /// Adds `d` into `self`, saturating at `u64::MAX` (for totals rebuilt from stored,
    /// already-validated tasks; request paths use [`Stats::checked_add`]).
    pub fn add(&mut self, d: &Stats) {
        self.wins = self.wins.saturating_add(d.wins);
        self.losses = self.losses.saturating_add(d.losses);
        self.draws = self.draws.saturating_add(d.draws);
        self.crashes = self.crashes.saturating_add(d.crashes);
        self.time_losses = self.time_losses.saturating_add(d.time_losses);
        for i in 0..5 {
            self.pentanomial[i] = self.pentanomial[i].saturating_add(d.pentanomial[i]);
        }
    }

    /// crash_or_time: more than 3 crashes, or over 20 games with more than 10% time losses.
    pub fn crash_or_time(&self) -> bool {
        crate::purge::crash_or_time(&self.to_purge())
    }

    /// The purge module's view of these counts.
    pub fn to_purge(&self) -> crate::purge::PurgeStats {
        crate::purge::PurgeStats {
            wins: self.wins,
            losses: self.losses,
            draws: self.draws,
            crashes: self.crashes,
            time_losses: self.time_losses,
            pentanomial: Some(self.pentanomial),
        }
    }
}

/// What a worker says about itself: exactly the 16 keys the official worker sends
/// (docs/protocol.md#worker_info), plus `remote_addr` and `country_code` which the server adds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkerInfo {
    #[serde(default)]
    pub uname: String,
    #[serde(default)]
    pub architecture: Vec<String>,
    #[serde(default)]
    pub concurrency: u32,
    #[serde(default)]
    pub max_memory: u64,
    #[serde(default = "one")]
    pub min_threads: u32,
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub version: u32,
    #[serde(default)]
    pub python_version: Vec<i64>,
    #[serde(default)]
    pub gcc_version: Vec<i64>,
    #[serde(default)]
    pub compiler: String,
    #[serde(default)]
    pub unique_key: String,
    #[serde(default)]
    pub modified: bool,
    #[serde(default)]
    pub worker_arch: String,
    #[serde(rename = "ARCH", default)]
    pub arch: String,
    #[serde(default)]
    pub nps: f64,
    #[serde(default)]
    pub near_github_api_limit: bool,
    #[serde(default)]
    pub remote_addr: String,
    #[serde(default)]
    pub country_code: String,
}

fn one() -> u32 {
    1
}

impl WorkerInfo {
    /// The keys a worker must send, no more, no fewer.
    pub const KEYS: [&'static str; 16] = [
        "uname",
        "architecture",
        "concurrency",
        "max_memory",
        "min_threads",
        "username",
        "version",
        "python_version",
        "gcc_version",
        "compiler",
        "unique_key",
        "modified",
        "worker_arch",
        "ARCH",
        "nps",
        "near_github_api_limit",
    ];

    /// First group of the unique key (up to the first '-').
    pub fn key_prefix(&self) -> &str {
        self.unique_key.split('-').next().unwrap_or("")
    }

    /// Short name: `user-Ncores-<uuid g1>`.
    pub fn short_name(&self) -> String {
        format!(
            "{}-{}cores-{}",
            self.username,
            self.concurrency,
            self.key_prefix()
        )
    }

    /// Long name: `user-Ncores-<uuid g1>-<uuid g2>[*]`.
    pub fn long_name(&self) -> String {
        let second = self.unique_key.split('-').nth(1).unwrap_or("");
        let star = if self.modified { "*" } else { "" };
        format!("{}-{second}{star}", self.short_name())
    }
}

/// The run's arguments (`args`; docs/fishtest-compatibility.md#data-model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunArgs {
    pub base_tag: String,
    pub new_tag: String,
    #[serde(default)]
    pub base_nets: Vec<String>,
    #[serde(default)]
    pub new_nets: Vec<String>,
    pub resolved_base: String,
    pub resolved_new: String,
    #[serde(default)]
    pub msg_base: String,
    #[serde(default)]
    pub msg_new: String,
    pub base_signature: String,
    pub new_signature: String,
    #[serde(default)]
    pub base_options: String,
    #[serde(default)]
    pub new_options: String,
    pub num_games: u64,
    pub tc: String,
    pub new_tc: String,
    pub book: String,
    pub book_depth: String,
    pub threads: u32,
    #[serde(default)]
    pub info: String,
    pub username: String,
    pub tests_repo: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub master_repo: Option<String>,
    #[serde(default)]
    pub auto_purge: bool,
    #[serde(default = "hundred")]
    pub throughput: f64,
    #[serde(default = "hundred")]
    pub itp: f64,
    #[serde(default)]
    pub priority: f64,
    #[serde(default = "yes")]
    pub adjudication: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch_filter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiler: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sprt: Option<crate::stats::SprtRecord>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spsa: Option<crate::spsa::SpsaArgs>,
    /// Anything else a stored document carries, kept as is.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

fn hundred() -> f64 {
    100.0
}

fn yes() -> bool {
    true
}

/// One task of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Task {
    pub num_games: u64,
    pub active: bool,
    pub last_updated: Date,
    #[serde(default)]
    pub start: u64,
    #[serde(default)]
    pub stats: Stats,
    #[serde(default)]
    pub worker_info: WorkerInfo,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bad: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spsa_params: Option<crate::spsa::SpsaTaskParams>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A run: a test of one patch against its base.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Run {
    #[serde(rename = "_id")]
    pub id: String,
    #[serde(default)]
    pub version: u32,
    pub start_time: Date,
    pub last_updated: Date,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rescheduled_from: Option<String>,
    #[serde(default)]
    pub tc_base: f64,
    #[serde(default)]
    pub approved: bool,
    #[serde(default)]
    pub approver: String,
    #[serde(default)]
    pub finished: bool,
    #[serde(default)]
    pub deleted: bool,
    #[serde(default)]
    pub failed: bool,
    #[serde(default)]
    pub failures: u64,
    #[serde(default)]
    pub is_green: bool,
    #[serde(default)]
    pub is_yellow: bool,
    #[serde(default)]
    pub workers: u64,
    #[serde(default)]
    pub cores: u64,
    #[serde(default)]
    pub committed_games: u64,
    #[serde(default)]
    pub total_games: u64,
    #[serde(default)]
    pub nps: f64,
    #[serde(default)]
    pub games_per_minute: f64,
    #[serde(default)]
    pub results: Stats,
    pub args: RunArgs,
    #[serde(default)]
    pub tasks: Vec<Task>,
    #[serde(default)]
    pub bad_tasks: Vec<Value>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Run {
    /// Games still to hand out.
    pub fn remaining_games(&self) -> u64 {
        self.args.num_games.saturating_sub(self.committed_games)
    }

    /// The SPRT batch in games (2 × batch_size pairs), or 2 for other runs.
    pub fn batch_games(&self) -> u64 {
        self.args
            .sprt
            .as_ref()
            .map_or(2, |s| 2 * s.batch_size.max(1))
    }

    /// Checks a run document's invariants (results are the sum of the task stats; workers,
    /// cores, committed and total games agree with the tasks; flags fit finished or not);
    /// returns every violation found.
    pub fn check_invariants(&self) -> Vec<String> {
        let mut errors = Vec::new();
        let mut results = Stats::default();
        let (mut workers, mut cores, mut committed, mut total) = (0u64, 0u64, 0u64, 0u64);
        for (i, t) in self.tasks.iter().enumerate() {
            results.add(&t.stats);
            total += t.num_games;
            if t.active {
                workers += 1;
                cores += u64::from(t.worker_info.concurrency);
                committed += t.num_games;
            } else {
                committed += t.stats.games();
            }
            if t.num_games % 2 != 0 {
                errors.push(format!("task {i}: odd num_games {}", t.num_games));
            }
        }
        if results != self.results {
            errors.push(format!(
                "results {:?} differ from the sum of task stats {:?}",
                self.results, results
            ));
        }
        if let Err(e) = self.results.check() {
            errors.push(format!("results: {e}"));
        }
        for (name, have, want) in [
            ("workers", self.workers, workers),
            ("cores", self.cores, cores),
            ("committed_games", self.committed_games, committed),
            ("total_games", self.total_games, total),
        ] {
            if have != want {
                errors.push(format!("{name} is {have}, tasks say {want}"));
            }
        }
        if self.finished {
            if self.workers != 0 || self.cores != 0 || self.nps != 0.0 {
                errors.push("finished run with workers, cores or nps".into());
            }
            if self.tasks.iter().any(|t| t.active) {
                errors.push("finished run with an active task".into());
            }
        } else {
            if self.is_green || self.is_yellow || self.failed || self.deleted {
                errors.push("unfinished run with a green/yellow/failed/deleted flag".into());
            }
            if self
                .args
                .sprt
                .as_ref()
                .is_some_and(|s| s.state != crate::stats::SprtState::Running)
            {
                errors.push("unfinished run with a decided SPRT".into());
            }
        }
        if self.is_green && self.is_yellow {
            errors.push("run is both green and yellow".into());
        }
        errors
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(w: u64, l: u64, d: u64, p: [u64; 5]) -> Stats {
        Stats {
            wins: w,
            losses: l,
            draws: d,
            crashes: 0,
            time_losses: 0,
            pentanomial: p,
        }
    }

    #[test]
    fn pentanomial_consistency() {
        // Pairs: WW, WL (counts as DD-or-WL), DD, LD.
        assert!(stats(3, 2, 3, [0, 1, 2, 0, 1]).check().is_ok());
        assert!(stats(3, 2, 2, [0, 1, 2, 0, 1]).check().is_err());
        assert!(stats(4, 1, 3, [0, 1, 2, 0, 1]).check().is_err());
        assert!(Stats::default().check().is_ok());
    }

    #[test]
    fn delta_refuses_decreases() {
        let a = stats(3, 2, 3, [0, 1, 2, 0, 1]);
        let b = stats(1, 1, 0, [0, 0, 1, 0, 0]);
        assert_eq!(a.delta(&b).map(|d| d.games()), Some(6), "3+2+3 - (1+1+0)");
        assert!(b.delta(&a).is_none());
    }

    #[test]
    fn crash_or_time_edges() {
        let mut s = stats(10, 10, 10, [0; 5]);
        s.crashes = 3;
        assert!(!s.crash_or_time());
        s.crashes = 4;
        assert!(s.crash_or_time());
        s.crashes = 0;
        s.time_losses = 3; // 30 games, 10% exactly: not more than 10%
        assert!(!s.crash_or_time());
        s.time_losses = 4;
        assert!(s.crash_or_time());
        let small = Stats {
            time_losses: 10,
            ..stats(10, 10, 0, [0; 5])
        };
        assert!(!small.crash_or_time(), "20 games is not over 20");
    }

    #[test]
    fn worker_names() {
        let w = WorkerInfo {
            username: "alice".into(),
            concurrency: 8,
            unique_key: "ab12cd34-1111-4222-8333-444455556666".into(),
            modified: true,
            ..WorkerInfo::default()
        };
        assert_eq!(w.short_name(), "alice-8cores-ab12cd34");
        assert_eq!(w.long_name(), "alice-8cores-ab12cd34-1111*");
    }
}

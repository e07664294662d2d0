//! The run document and its parts, with Fishtest's field names and types
//! (docs/fishtest-compatibility.md#data-model).
//!
//! Owns: the typed `Run`, `RunArgs`, `Task`, `WorkerInfo`, the derived quantities (worker
//! names, games played), the purge views of `Stats` (whose shape and rules are
//! [`crate::protocol`]'s) and the invariant checker.
//! Must not: do I/O or know HTTP. Documents written by Fishtest are read leniently (missing
//! optional fields default; unknown fields are kept in `extra` and written back unchanged).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// The document date type (UTC, Extended JSON `{"$date": …}` in storage).
pub use crate::store::Date;

/// Fishtest's RUN_VERSION for documents this server writes.
pub const RUN_VERSION: u32 = 24;

// Game results are the shape workers report: defined in `crate::protocol`, re-exported here;
// the server's purge views of them are added below.
pub use crate::protocol::Stats;

/// Server-side views of the protocol's game results (a trait: `Stats` is the
/// `shoal-protocol` crate's type, which knows nothing of the purge).
pub trait PurgeView {
    /// crash_or_time: more than 3 crashes, or over 20 games with more than 10% time losses.
    fn crash_or_time(&self) -> bool;

    /// The purge module's view of these counts: with the pair counts when the run counts
    /// pairs (`pairs`, [`Run::counts_pairs`]), else W/L/D alone, as Fishtest's purge sees a
    /// task without a `pentanomial` field.
    fn to_purge(&self, pairs: bool) -> crate::purge::PurgeStats;
}

impl PurgeView for Stats {
    fn crash_or_time(&self) -> bool {
        crate::purge::crash_or_time(&self.to_purge(false))
    }

    fn to_purge(&self, pairs: bool) -> crate::purge::PurgeStats {
        crate::purge::PurgeStats {
            wins: self.wins,
            losses: self.losses,
            draws: self.draws,
            crashes: self.crashes,
            time_losses: self.time_losses,
            pentanomial: pairs.then_some(self.pentanomial),
        }
    }
}

/// What a worker says about itself: exactly the 16 keys the official worker sends
/// (docs/protocol.md#worker_info), plus `remote_addr` and `country_code` which the server adds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
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
    /// Added by the server (a client's own is refused).
    #[serde(default)]
    #[schema(ignore)]
    pub remote_addr: String,
    /// Added by the server (a client's own is refused).
    #[serde(default)]
    #[schema(ignore)]
    pub country_code: String,
}

fn one() -> u32 {
    1
}

/// The sample of a run's totals (and its SPRT's LLR) for its trajectory. Here, beside the
/// totals, so that the trajectory (`trajectory.rs`) names no run model (the run names it).
impl super::trajectory::Point {
    pub fn of(results: &Stats, llr: Option<f64>) -> Self {
        Self {
            g: results.games(),
            w: results.wins,
            l: results.losses,
            d: results.draws,
            p: results.pentanomial,
            llr,
        }
    }
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
    /// An int in Fishtest's documents (its form reads it with `int()`): integral values go
    /// out as integers.
    #[serde(
        default = "hundred",
        serialize_with = "crate::spsa::serialize_integral_f64"
    )]
    pub throughput: f64,
    #[serde(default = "hundred")]
    pub itp: f64,
    /// An int in Fishtest's documents, like `throughput`.
    #[serde(default, serialize_with = "crate::spsa::serialize_integral_f64")]
    pub priority: f64,
    #[serde(default = "yes")]
    pub adjudication: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub arch_filter: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compiler: Option<String>,
    /// The sliding window: at most this many active tasks at once (None: no window).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_active_tasks: Option<u32>,
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
    pub worker_info: std::sync::Arc<WorkerInfo>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub bad: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spsa_params: Option<crate::spsa::SpsaTaskParams>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Task {
    /// Seconds since the task was last heard from (its `last_updated`).
    pub fn seconds_since_update(&self) -> f64 {
        super::secs_since(&self.last_updated)
    }
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
    /// The sampled results against games played (shoal's own field, for the charts).
    #[serde(
        default,
        skip_serializing_if = "super::trajectory::Trajectory::is_empty"
    )]
    pub trajectory: super::trajectory::Trajectory,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl Run {
    /// Whether the run counts game pairs ([`Stats::pairs`] of its results): the purge's table
    /// and the statistics then read the pentanomial, else W/L/D.
    pub fn counts_pairs(&self) -> bool {
        self.results.pairs().is_some()
    }

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
        // Results without pair counts (a run from before Fishtest counted pairs) have no
        // pentanomial to agree with; only their bounds are checked.
        let r = &self.results;
        let consistent = if r.pairs().is_some() {
            r.check()
        } else if r.games() > crate::protocol::STATS_MAX_GAMES
            || r.crashes > r.games()
            || r.time_losses > r.games()
        {
            Err(format!("counts out of bounds: {r:?}"))
        } else {
            Ok(())
        };
        if let Err(e) = consistent {
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

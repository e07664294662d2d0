//! `shoal sim`'s options: the command line, its validation, the `shoal` binary to run, and
//! the SHOAL_* environment of a server the simulator starts.
//!
//! Owns: [`SimOptions`] (every flag and its default), the bounds each flag must respect, and
//! the simulator's defaults for a server it starts (the dead-task timeout and the scavenger
//! scaled by the time scale).
//! Must not: do network I/O, start anything or decide the order of a run (that is `run`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use super::SimError;
use super::schedule::{StormShape, TimeScale};
use super::setup::RunKind;

/// Options of `shoal sim`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimOptions {
    /// Server to load, e.g. http://127.0.0.1:8000 (default: start one on a temporary
    /// embedded store; SHOAL_* variables in this environment configure it).
    #[arg(long)]
    pub server: Option<String>,
    /// PID of the --server process when it runs on this machine (for its CPU time and RSS).
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// The server's data directory. With --server: where `shoal user` creates the simulated
    /// users (needed unless --user is given). Without: the data directory of the server the
    /// simulator starts (default: a temporary one, removed at the end).
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Directory for report.json and chart.svg.
    #[arg(long, default_value = "sim-report")]
    pub report: PathBuf,
    /// Simulated workers.
    #[arg(long, default_value_t = 100)]
    pub workers: usize,
    /// Wall-clock seconds within which every worker starts.
    #[arg(long, default_value_t = 10.0)]
    pub storm: f64,
    /// How the starts spread over the storm window.
    #[arg(long, value_enum, default_value_t = StormShape::Uniform)]
    pub storm_shape: StormShape,
    /// Wall-clock seconds of the whole fleet phase (the storm included).
    #[arg(long, default_value_t = 60.0)]
    pub duration: f64,
    /// Simulated seconds per wall-clock second (games, back-off, heartbeat).
    #[arg(long, default_value_t = 60.0)]
    pub time_scale: f64,
    /// A new TCP connection per call, as the official worker does (default: pooled
    /// keep-alive connections).
    #[arg(long)]
    pub fresh_connections: bool,
    /// 127.0.0.x source addresses for fresh connections.
    #[arg(long, default_value_t = 32)]
    pub source_addrs: usize,
    /// Idle keep-alive connections kept in pooled mode.
    #[arg(long, default_value_t = 512)]
    pub pool_size: usize,
    /// Seed of every random choice (machines, results, start times).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Runs to create (default: enough for the fleet and the duration).
    #[arg(long)]
    pub runs: Option<usize>,
    /// Kind of the runs created: fixed-games runs (the default) never end early, so the
    /// fleet stays busy; SPRT runs may be decided during the simulation.
    #[arg(long, value_enum, default_value_t = RunKind::Fixed)]
    pub run_kind: RunKind,
    /// Use these existing, approved runs instead of creating runs.
    #[arg(long, value_delimiter = ',')]
    pub run_ids: Vec<String>,
    /// Use this existing user for every worker instead of creating users.
    #[arg(long, requires = "password")]
    pub user: Option<String>,
    /// The password of --user.
    #[arg(long)]
    pub password: Option<String>,
    /// Users to create for the workers (workers are spread over them).
    #[arg(long, default_value_t = 8)]
    pub users: usize,
    /// True Elo difference of every patch.
    #[arg(long, default_value_t = 1.0, allow_hyphen_values = true)]
    pub elo: f64,
    /// Draw rate of the games.
    #[arg(long, default_value_t = 0.6)]
    pub draw_rate: f64,
    /// SPRT bounds of created runs.
    #[arg(long, default_value_t = 0.0, allow_hyphen_values = true)]
    pub elo0: f64,
    #[arg(long, default_value_t = 2.0, allow_hyphen_values = true)]
    pub elo1: f64,
    /// Share of tasks that end with failed_task.
    #[arg(long, default_value_t = 0.01)]
    pub failed_rate: f64,
    /// Seconds to wait for a connection, and for a reply (the worker uses 30).
    #[arg(long, default_value_t = 30.0)]
    pub http_timeout: f64,
    /// Seconds of the fleet's call schedule to replay against /healthz (0: skip).
    #[arg(long, default_value_t = 10.0)]
    pub baseline_secs: f64,
    /// Seconds of closed-loop saturation of /api/beat and /healthz, each (0: skip).
    #[arg(long, default_value_t = 5.0)]
    pub closed_loop_secs: f64,
    /// Keep-alive connections of the closed-loop baseline.
    #[arg(long, default_value_t = 50)]
    pub closed_loop_conns: usize,
    /// No progress lines on stderr.
    #[arg(long)]
    pub quiet: bool,
    /// A per-user concurrency limit (active tasks per user) on the server the simulator
    /// starts; implies the limits check (docs/limits.md).
    #[arg(long)]
    pub limit_user: Option<u64>,
    /// `max_active_tasks` of the runs the simulator creates (the per-run window); implies
    /// the limits check.
    #[arg(long)]
    pub run_window: Option<u32>,
    /// A rate limit on the server the simulator starts, SCOPE[:KEY]:MAX/WINDOW (seconds; key
    /// `user` by default), e.g. request_task:20/1s; repeatable; implies the limits check.
    #[arg(long)]
    pub rate_limit: Vec<String>,
    /// Sample /api/limits during the storm and check the limits and the tasks at the end
    /// (the report's "limits" section), also without any limit option.
    #[arg(long)]
    pub check_limits: bool,
    /// The `shoal` binary used for `serve` and `user` (default: this executable).
    #[arg(long, hide = true)]
    pub shoal_bin: Option<PathBuf>,
}

pub(super) fn validate(o: &SimOptions) -> Result<TimeScale, SimError> {
    let bad = |m: &str| Err(SimError::Options(m.to_string()));
    if o.workers == 0 || o.workers > 1_000_000 {
        return bad("--workers must be 1 to 1,000,000");
    }
    if !(o.duration.is_finite() && o.duration > 0.0 && o.duration <= 86_400.0) {
        return bad("--duration must be 0 to 86,400 seconds");
    }
    if !(o.storm.is_finite() && o.storm >= 0.0 && o.storm <= o.duration) {
        return bad("--storm must be 0 to --duration seconds");
    }
    if !(0.0..=1.0).contains(&o.failed_rate) || !(0.0..=1.0).contains(&o.draw_rate) {
        return bad("--failed-rate and --draw-rate must be in [0, 1]");
    }
    if !(o.http_timeout.is_finite() && o.http_timeout > 0.0 && o.http_timeout <= 600.0) {
        return bad("--http-timeout must be 0 to 600 seconds");
    }
    for (name, v) in [
        ("--baseline-secs", o.baseline_secs),
        ("--closed-loop-secs", o.closed_loop_secs),
    ] {
        if !(v.is_finite() && (0.0..=3600.0).contains(&v)) {
            return Err(SimError::Options(format!("{name} must be 0 to 3600")));
        }
    }
    if o.users == 0 {
        return bad("--users must be at least 1");
    }
    if let Some(w) = o.run_window {
        if !(1..=100_000).contains(&w) {
            return bad("--run-window must be 1 to 100,000");
        }
        if !o.run_ids.is_empty() {
            return bad("--run-window applies to the runs the simulator creates, not --run-ids");
        }
    }
    TimeScale::new(o.time_scale)
        .ok_or_else(|| SimError::Options("--time-scale must be 0.001 to 1,000,000".into()))
}

pub(super) fn bin(o: &SimOptions) -> Result<PathBuf, SimError> {
    match &o.shoal_bin {
        Some(b) => Ok(b.clone()),
        None => Ok(std::env::current_exe()?),
    }
}

/// The SHOAL_* variables of this environment plus the simulator's defaults for a server it
/// starts: the dead-task timeout and the scavenger scaled by the time scale (so that a
/// worker missing three heartbeats is declared dead, as in production).
pub(super) fn server_env(scale: TimeScale) -> Vec<(String, String)> {
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("SHOAL_"))
        .collect();
    let f = scale.factor();
    env.entry("SHOAL_DEAD_TASK_TIMEOUT_S".into())
        .or_insert_with(|| format!("{}", (360.0 / f).max(1.0)));
    env.entry("SHOAL_SCAVENGE_INTERVAL_S".into())
        .or_insert_with(|| format!("{}", (60.0 / f).clamp(0.1, 3600.0)));
    env.entry("SHOAL_LOG".into())
        .or_insert_with(|| "warn,shoal::app=info".into());
    env.remove("SHOAL_PORT");
    env.remove("SHOAL_DATA_DIR");
    env.into_iter().collect()
}

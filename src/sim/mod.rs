//! The fleet simulator (`shoal sim`) and the demo (`shoal demo`).
//!
//! Owns: the options, the order of a simulation (server, users and runs, the fleet, the
//! server's numbers, the baselines, the report), the report's files and its human summary.
//! The parts, in reading order:
//! - [`schedule`]: time scale, back-off, heartbeat period, storm start times (pure);
//! - [`stats`]: worker_info spread, game results with consistent cumulative stats, batch
//!   sizes, the PGN (pure);
//! - [`client`]: the HTTP/1.1 client, fresh or pooled connections, spread source addresses;
//! - [`worker`]: one simulated official worker;
//! - [`measure`]: the recorder and the report's schema and arithmetic;
//! - [`setup`]: the local server process, users via the CLI, runs via the API, /proc, /metrics;
//! - [`bench`]: the /healthz replay and closed-loop baselines;
//! - [`chart`]: the SVG chart.
//!
//! Must not: call server internals (it is a client: everything goes over HTTP or through the
//! `shoal` CLI), block the runtime, or run unbounded: every loop has a count or a deadline.

pub mod bench;
pub mod chart;
pub mod client;
pub mod measure;
pub mod schedule;
pub mod setup;
pub mod stats;
pub mod worker;

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use bench::Baselines;
use client::{Client, ClientConfig, ConnMode};
use measure::{FleetReport, LatencySummary, PromHistogram, metric_sum};
use schedule::{StormShape, TimeScale};
use setup::{LocalServer, MachineInfo, RunKind};
use stats::GameModel;
use worker::Fleet;

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid options: {0}")]
    Options(String),
    #[error("server: {0}")]
    Server(String),
    #[error("setup: {0}")]
    Setup(String),
    #[error("report: {0}")]
    Report(String),
    #[error("chart: {0}")]
    Chart(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

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
    /// The `shoal` binary used for `serve` and `user` (default: this executable).
    #[arg(long, hide = true)]
    pub shoal_bin: Option<PathBuf>,
}

/// What was asked, as the report records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    pub workers: usize,
    pub storm_s: f64,
    pub storm_shape: String,
    pub duration_s: f64,
    pub time_scale: f64,
    pub connections: String,
    pub source_addresses: usize,
    pub seed: u64,
    pub runs: usize,
    pub run_kind: String,
    pub users: usize,
    pub elo: f64,
    pub draw_rate: f64,
    pub failed_rate: f64,
    /// SHOAL_* settings of a server the simulator started.
    pub server_env: BTreeMap<String, String>,
    pub command: String,
}

/// Server-side latency of a route, from its Prometheus histogram (bucket upper bounds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerRoute {
    pub count: f64,
    pub mean_ms: Option<f64>,
    pub p50_ms_at_most: Option<f64>,
    pub p99_ms_at_most: Option<f64>,
}

impl ServerRoute {
    fn from_hist(h: &PromHistogram) -> ServerRoute {
        let ms = |s: Option<f64>| s.map(|v| v * 1000.0);
        ServerRoute {
            count: h.count,
            mean_ms: ms(h.mean()),
            p50_ms_at_most: ms(h.quantile_upper_bound(0.5)),
            p99_ms_at_most: ms(h.quantile_upper_bound(0.99)),
        }
    }
}

/// What the server says about itself, for the fleet phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSummary {
    pub url: String,
    pub started_by_sim: bool,
    pub pid: Option<u32>,
    /// CPU seconds the server used during the fleet phase, and as cores busy on average.
    pub cpu_seconds: Option<f64>,
    pub cpu_cores_busy: Option<f64>,
    /// Peak RSS over the server's life (VmHWM).
    pub peak_rss_mib: Option<f64>,
    /// Tasks the server declared dead during the fleet phase (`shoal_dead_tasks_total`).
    pub dead_tasks: Option<f64>,
    /// request_task callers refused by the gate (`shoal_gate_rejected_total`).
    pub gate_rejected: Option<f64>,
    pub gate: Option<Value>,
    /// `shoal_request_task_critical_seconds` during the fleet phase.
    pub request_task_critical: Option<PromHistogram>,
    pub request_task_critical_summary: Option<ServerRoute>,
    /// `shoal_http_request_duration_seconds` per worker route, during the fleet phase.
    pub routes: BTreeMap<String, ServerRoute>,
    /// Other server histograms during the fleet phase: journal commits, write-behind flushes,
    /// the periodic jobs.
    pub internals: BTreeMap<String, ServerRoute>,
    pub log_warnings: Option<u64>,
}

/// The JSON report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub shoal_version: String,
    pub settings: RunSettings,
    pub machine: MachineInfo,
    pub fleet: FleetReport,
    pub server: ServerSummary,
    pub baselines: Baselines,
    /// CPU seconds the simulator itself used (it shares the machine with a local server).
    pub sim_cpu_seconds: Option<f64>,
}

const WORKER_PASSWORD: &str = "shoal-sim-password";

/// Runs per worker-hour of games needed: tasks of ~30 simulated minutes, ~5.6 cores each at
/// ~58 games per core at 10+0.1, with a margin.
fn auto_runs(workers: usize, sim_seconds: f64, kind: RunKind) -> usize {
    let games_per_task = 1800.0 / 30.9 * 5.6;
    let tasks = sim_seconds / 1800.0 + 1.5;
    let games = workers as f64 * games_per_task * tasks * 1.3;
    let per_run = match kind {
        RunKind::Sprt => crate::protocol::SPRT_MAX_GAMES,
        RunKind::Fixed => crate::protocol::MAX_GAMES,
    } as f64;
    ((games / per_run).ceil() as usize).clamp(1, 200)
}

async fn server_addr(url: &str) -> Result<SocketAddr, SimError> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| SimError::Options(format!("--server {url}: only http:// URLs")))?;
    let hostport = rest.trim_end_matches('/');
    let mut addrs = tokio::net::lookup_host(hostport)
        .await
        .map_err(|e| SimError::Options(format!("--server {url}: {e}")))?;
    addrs
        .next()
        .ok_or_else(|| SimError::Options(format!("--server {url}: no address")))
}

fn validate(o: &SimOptions) -> Result<TimeScale, SimError> {
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
    TimeScale::new(o.time_scale)
        .ok_or_else(|| SimError::Options("--time-scale must be 0.001 to 1,000,000".into()))
}

fn bin(o: &SimOptions) -> Result<PathBuf, SimError> {
    match &o.shoal_bin {
        Some(b) => Ok(b.clone()),
        None => Ok(std::env::current_exe()?),
    }
}

/// The SHOAL_* variables of this environment plus the simulator's defaults for a server it
/// starts: the dead-task timeout and the scavenger scaled by the time scale (so that a
/// worker missing three heartbeats is declared dead, as in production).
fn server_env(scale: TimeScale) -> Vec<(String, String)> {
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

struct ServerSide {
    addr: SocketAddr,
    url: String,
    local: Option<LocalServer>,
    data_dir: Option<PathBuf>,
    pid: Option<String>,
    env: Vec<(String, String)>,
}

async fn start_or_connect(o: &SimOptions, scale: TimeScale) -> Result<ServerSide, SimError> {
    match &o.server {
        Some(url) => {
            let addr = server_addr(url).await?;
            Ok(ServerSide {
                addr,
                url: url.clone(),
                local: None,
                data_dir: o.data_dir.clone(),
                pid: o.server_pid.map(|p| p.to_string()),
                env: Vec::new(),
            })
        }
        None => {
            let env = server_env(scale);
            let local = LocalServer::start(&bin(o)?, o.data_dir.as_deref(), 0, &env).await?;
            Ok(ServerSide {
                addr: local.addr,
                url: format!("http://{}", local.addr),
                data_dir: Some(local.data_dir.clone()),
                pid: local.pid().map(|p| p.to_string()),
                local: Some(local),
                env,
            })
        }
    }
}

async fn scrape(client: &Client) -> Option<String> {
    setup::get_text(client, "/metrics").await.ok()
}

/// A server histogram worth reporting: (key in the report, metric name, labels).
type Internal = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const ROUTES: [&str; 6] = [
    "/api/request_version",
    "/api/request_task",
    "/api/update_task",
    "/api/beat",
    "/api/upload_pgn",
    "/healthz",
];

fn server_numbers(before: Option<&str>, after: Option<&str>, s: &mut ServerSummary) {
    let (Some(before), Some(after)) = (before, after) else {
        return;
    };
    let delta = |name: &str, labels: &[(&str, &str)]| {
        let a = metric_sum(after, name, labels);
        let b = metric_sum(before, name, labels).unwrap_or(0.0);
        Some(a.unwrap_or(0.0) - b)
    };
    s.dead_tasks = delta("shoal_dead_tasks_total", &[]);
    s.gate_rejected = delta("shoal_gate_rejected_total", &[("gate", "request_task")]);
    let hist = |name: &str, labels: &[(&str, &str)]| {
        let a = PromHistogram::parse(after, name, labels)?;
        Some(match PromHistogram::parse(before, name, labels) {
            Some(b) => a.since(&b),
            None => a,
        })
    };
    if let Some(h) = hist("shoal_request_task_critical_seconds", &[]) {
        s.request_task_critical_summary = Some(ServerRoute::from_hist(&h));
        s.request_task_critical = Some(h);
    }
    for route in ROUTES {
        if let Some(h) = hist("shoal_http_request_duration_seconds", &[("route", route)]) {
            s.routes
                .insert(route.to_string(), ServerRoute::from_hist(&h));
        }
    }
    let internals: [Internal; 5] = [
        ("journal_commit", "shoal_journal_commit_seconds", &[]),
        ("flush", "shoal_flush_seconds", &[]),
        (
            "job_flush_buffers",
            "shoal_job_seconds",
            &[("job", "flush_buffers")],
        ),
        (
            "job_scavenge_dead_tasks",
            "shoal_job_seconds",
            &[("job", "scavenge_dead_tasks")],
        ),
        (
            "job_update_itp",
            "shoal_job_seconds",
            &[("job", "update_itp")],
        ),
    ];
    for (key, name, labels) in internals {
        if let Some(h) = hist(name, labels)
            && h.count > 0.0
        {
            s.internals
                .insert(key.to_string(), ServerRoute::from_hist(&h));
        }
    }
}

/// Runs a simulation: the fleet phase, then the baselines. Returns the report (the caller
/// writes it).
pub async fn run(o: &SimOptions) -> Result<Report, SimError> {
    let scale = validate(o)?;
    let machine = MachineInfo::read().await;
    let sim_cpu_start = setup::cpu_seconds("self").await;
    let server = start_or_connect(o, scale).await?;
    let result = run_with_server(o, scale, &server).await;
    let peak_rss = match &server.pid {
        Some(pid) => setup::peak_rss_mib(pid).await,
        None => None,
    };
    let warnings = server.local.as_ref().map(LocalServer::warnings);
    let log_tail = server.local.as_ref().map(LocalServer::log_tail);
    if let Some(local) = server.local {
        local.stop(Duration::from_secs(20)).await?;
    }
    let mut report = match result {
        Ok(r) => r,
        Err(e) => {
            return Err(match log_tail {
                Some(tail) if !tail.is_empty() => {
                    SimError::Server(format!("{e}\nserver log (last lines):\n{tail}"))
                }
                _ => e,
            });
        }
    };
    report.machine = machine;
    report.server.peak_rss_mib = peak_rss;
    report.server.log_warnings = warnings;
    report.sim_cpu_seconds = match (sim_cpu_start, setup::cpu_seconds("self").await) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    Ok(report)
}

async fn run_with_server(
    o: &SimOptions,
    scale: TimeScale,
    server: &ServerSide,
) -> Result<Report, SimError> {
    let timeout = Duration::from_secs_f64(o.http_timeout);
    let setup_client = Client::new(ClientConfig {
        server: server.addr,
        mode: ConnMode::Pooled,
        sources: Vec::new(),
        pool_idle: 4,
        max_open: 16,
        timeout,
    });
    let mut rng = StdRng::seed_from_u64(o.seed);

    // Users.
    let (usernames, password) = match (&o.user, &o.password) {
        (Some(u), Some(p)) => (vec![u.clone()], p.clone()),
        _ => {
            let data_dir = server.data_dir.as_deref().ok_or_else(|| {
                SimError::Options(
                    "with --server, give --data-dir (to create users) or --user/--password".into(),
                )
            })?;
            let bin = bin(o)?;
            let n = o.users.min(o.workers);
            let mut names = Vec::with_capacity(n);
            for i in 0..n {
                let name = format!("simw{i:02}");
                setup::ensure_user(&bin, data_dir, &name, WORKER_PASSWORD, false, 1_000_000)
                    .await?;
                names.push(name);
            }
            if o.run_ids.is_empty() {
                for (name, approver) in [("simdev", false), ("simapprover", true)] {
                    setup::ensure_user(&bin, data_dir, name, WORKER_PASSWORD, approver, 16).await?;
                }
            }
            (names, WORKER_PASSWORD.to_string())
        }
    };

    // Runs.
    let run_ids = if o.run_ids.is_empty() {
        if o.user.is_some() && server.data_dir.is_none() {
            return Err(SimError::Options(
                "creating runs needs --data-dir (for the submitter and approver users) or --run-ids"
                    .into(),
            ));
        }
        let n = o
            .runs
            .unwrap_or_else(|| auto_runs(o.workers, o.duration * scale.factor(), o.run_kind));
        setup::create_runs(
            &setup_client,
            "simdev",
            "simapprover",
            WORKER_PASSWORD,
            n,
            o.run_kind,
            (o.elo0, o.elo1),
            &mut rng,
        )
        .await?
    } else {
        o.run_ids.clone()
    };

    let metrics_before = scrape(&setup_client).await;
    let cpu = |pid: Option<String>| async move {
        match pid {
            Some(p) => setup::cpu_seconds(&p).await,
            None => None,
        }
    };
    let cpu_before = cpu(server.pid.clone()).await;

    // The fleet.
    let mode = if o.fresh_connections {
        ConnMode::Fresh
    } else {
        ConnMode::Pooled
    };
    let fd_limit = client::open_files_limit().await.unwrap_or(1024);
    let max_open = fd_limit.saturating_sub(o.pool_size + 256).max(64);
    let client = Client::new(ClientConfig {
        server: server.addr,
        mode,
        sources: client::loopback_sources(&server.addr, o.source_addrs),
        pool_idle: o.pool_size,
        max_open,
        timeout,
    });
    let t0 = Instant::now() + Duration::from_millis(100);
    let deadline = t0 + Duration::from_secs_f64(o.duration);
    let fleet = Arc::new(Fleet {
        client,
        rec: measure::Recorder::new(t0).map_err(|e| SimError::Report(e.to_string()))?,
        scale,
        deadline,
        password: password.clone(),
        model: GameModel::new(o.elo, o.draw_rate),
        failed_rate: o.failed_rate,
        seed: o.seed,
    });
    let offsets = schedule::start_offsets(
        o.workers,
        Duration::from_secs_f64(o.storm),
        o.storm_shape,
        &mut rng,
    );
    let mut handles = Vec::with_capacity(o.workers);
    for (i, start) in offsets.into_iter().enumerate() {
        let user = usernames[i % usernames.len()].clone();
        handles.push(tokio::spawn(worker::run(
            fleet.clone(),
            i as u32,
            start,
            user,
        )));
    }
    let sampler = tokio::spawn(sample_and_report(fleet.clone(), o.workers, o.quiet));
    let probe_client = Client::new(ClientConfig {
        server: server.addr,
        mode: ConnMode::Pooled,
        sources: Vec::new(),
        pool_idle: 1,
        max_open: 2,
        timeout,
    });
    let prober = tokio::spawn(probe_health(fleet.clone(), probe_client));
    tokio::time::sleep_until(deadline.into()).await;
    // In-flight calls finish (each is bounded by the HTTP timeout); then the rest is dropped.
    let grace = Instant::now() + timeout + Duration::from_secs(2);
    for h in &mut handles {
        if tokio::time::timeout_at(grace.into(), &mut *h)
            .await
            .is_err()
        {
            h.abort();
        }
    }
    sampler.abort();
    prober.abort();
    let wall = deadline.saturating_duration_since(t0);
    let cpu_after = cpu(server.pid.clone()).await;
    let metrics_after = scrape(&setup_client).await;
    let gate = setup::get_text(&setup_client, "/healthz")
        .await
        .ok()
        .and_then(|t| serde_json::from_str::<Value>(&t).ok())
        .and_then(|v| v.get("gate").cloned());
    fleet.client.close_idle();
    let fleet_report = fleet
        .rec
        .summarize(wall, o.workers as u64, fleet.client.counters());

    let mut server_summary = ServerSummary {
        url: server.url.clone(),
        started_by_sim: server.local.is_some(),
        pid: server.pid.as_ref().and_then(|p| p.parse().ok()),
        gate,
        ..ServerSummary::default()
    };
    if let (Some(a), Some(b)) = (cpu_before, cpu_after) {
        server_summary.cpu_seconds = Some(b - a);
        server_summary.cpu_cores_busy = Some((b - a) / wall.as_secs_f64().max(1e-9));
    }
    server_numbers(
        metrics_before.as_deref(),
        metrics_after.as_deref(),
        &mut server_summary,
    );

    // Baselines.
    let mut baselines = Baselines::default();
    if o.baseline_secs > 0.0 {
        let starts = fleet.rec.call_starts();
        let c0 = cpu(server.pid.clone()).await;
        let client = Arc::new(Client::new(ClientConfig {
            server: server.addr,
            mode,
            sources: client::loopback_sources(&server.addr, o.source_addrs),
            pool_idle: o.pool_size,
            max_open,
            timeout,
        }));
        let window = Duration::from_secs_f64(o.baseline_secs.min(o.duration));
        let mut r = bench::replay_healthz(client, &starts, window, timeout).await?;
        if let (Some(a), Some(b)) = (c0, cpu(server.pid.clone()).await) {
            r.server_cpu_seconds = Some(b - a);
        }
        baselines.replay_healthz = Some(r);
    }
    if o.closed_loop_secs > 0.0 {
        let beat = bench::beat_body(&setup_client, &usernames[0], &password, o.seed).await?;
        if beat.is_none() {
            baselines
                .notes
                .push("no run handed out a task: the /api/beat closed loop was skipped".into());
        }
        let targets = [
            (Method::POST, "/api/beat", beat),
            (Method::GET, "/healthz", Some(Default::default())),
        ];
        for (method, path, body) in targets {
            let Some(body) = body else { continue };
            let body = (method == Method::POST).then_some(body);
            let c0 = cpu(server.pid.clone()).await;
            let mut r = bench::closed_loop(
                server.addr,
                o.closed_loop_conns,
                o.closed_loop_secs,
                method,
                path,
                body,
                timeout,
            )
            .await?;
            if let (Some(a), Some(b)) = (c0, cpu(server.pid.clone()).await) {
                r.server_cpu_seconds = Some(b - a);
            }
            if path == "/api/beat" {
                baselines.closed_loop_beat = Some(r);
            } else {
                baselines.closed_loop_healthz = Some(r);
            }
        }
        if let (Some(b), Some(h)) = (&baselines.closed_loop_beat, &baselines.closed_loop_healthz)
            && h.requests_per_second > 0.0
        {
            baselines.beat_to_healthz = Some(b.requests_per_second / h.requests_per_second);
        }
    }

    Ok(Report {
        shoal_version: env!("CARGO_PKG_VERSION").to_string(),
        settings: RunSettings {
            workers: o.workers,
            storm_s: o.storm,
            storm_shape: format!("{:?}", o.storm_shape).to_lowercase(),
            duration_s: o.duration,
            time_scale: scale.factor(),
            connections: format!("{mode:?}").to_lowercase(),
            source_addresses: if mode == ConnMode::Fresh {
                client::loopback_sources(&server.addr, o.source_addrs).len()
            } else {
                0
            },
            seed: o.seed,
            runs: run_ids.len(),
            run_kind: format!("{:?}", o.run_kind).to_lowercase(),
            users: usernames.len(),
            elo: o.elo,
            draw_rate: o.draw_rate,
            failed_rate: o.failed_rate,
            server_env: server.env.iter().cloned().collect(),
            command: std::env::args().collect::<Vec<_>>().join(" "),
        },
        machine: MachineInfo::default(),
        fleet: fleet_report,
        server: server_summary,
        baselines,
        sim_cpu_seconds: None,
    })
}

/// Samples the number of workers holding a task (10 times a second) and prints a progress
/// line every 5 seconds, until aborted.
async fn sample_and_report(fleet: Arc<Fleet>, workers: usize, quiet: bool) {
    let t0 = fleet.rec.t0();
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    let mut last_calls = 0;
    // Bounded: one tick per 100 ms until the deadline (plus the grace period).
    for i in 0u64..10_000_000 {
        tick.tick().await;
        let now = Instant::now();
        if now > fleet.deadline {
            return;
        }
        fleet.rec.sample(now);
        if !quiet && i % 50 == 49 {
            let calls = fleet.rec.calls_so_far();
            eprintln!(
                "sim t={:>5.0}s holding={:>7}/{workers} got_task={:>7} calls={:>9} ({:>6.0}/s) too_busy={} errors={}",
                now.saturating_duration_since(t0).as_secs_f64(),
                fleet.rec.assigned_now(),
                fleet.rec.workers_with_task(),
                calls,
                (calls - last_calls) as f64 / 5.0,
                fleet.rec.too_busy_so_far(),
                fleet.rec.errors_so_far(),
            );
            last_calls = calls;
        }
    }
}

/// Probes `GET /healthz` 10 times a second until the deadline: its latency under load, and
/// the server's pool and gate gauges.
async fn probe_health(fleet: Arc<Fleet>, client: Client) {
    for _ in 0..100_000_000u64 {
        let t = Instant::now();
        if t >= fleet.deadline {
            return;
        }
        if let Ok(r) = client.call(Method::GET, "/healthz", None).await {
            let latency = t.elapsed();
            let gauges = serde_json::from_slice::<Value>(&r.body).ok().map(|v| {
                let n = |p: &str| v.pointer(p).and_then(Value::as_u64).unwrap_or(0);
                measure::ServerGauges {
                    pool_in_use: n("/pool/in_use"),
                    pool_waiting: n("/pool/waiting"),
                    gate_running: n("/gate/running"),
                    gate_queued: n("/gate/queued"),
                }
            });
            fleet.rec.probe(Instant::now(), latency, gauges);
        }
        tokio::time::sleep_until((t + Duration::from_millis(100)).into()).await;
    }
}

fn fmt_lat(l: &LatencySummary) -> String {
    format!(
        "{:>9} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.2}",
        l.count, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
    )
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.digits$}"))
}

/// The human summary of a report.
pub fn summary(r: &Report) -> String {
    let s = &r.settings;
    let f = &r.fleet;
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    line(format!(
        "shoal sim: {} workers, storm {} s ({}), {} s at time scale {}, {} connections, {} runs",
        s.workers, s.storm_s, s.storm_shape, s.duration_s, s.time_scale, s.connections, s.runs
    ));
    line(format!(
        "machine: {} cores, {} GiB, {}",
        r.machine.cores, r.machine.memory_gib, r.machine.cpu
    ));
    line(String::new());
    line(format!(
        "{:<22} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "endpoint (ms)", "calls", "p50", "p90", "p99", "p99.9", "max"
    ));
    for (path, l) in &f.endpoints {
        line(format!("{path:<22} {}", fmt_lat(l)));
    }
    line(format!("{:<22} {}", "all", fmt_lat(&f.all)));
    if let Some(c) = &f.connect {
        line(format!("{:<22} {}", "(tcp connect)", fmt_lat(c)));
    }
    if let Some(c) = &f.healthz_probe {
        line(format!("{:<22} {}", "(/healthz probe)", fmt_lat(c)));
    }
    let peak = |g: fn(&measure::ServerGauges) -> u64| {
        f.timeline.iter().map(|s| g(&s.server)).max().unwrap_or(0)
    };
    line(format!(
        "server gauges (peak): pool tokens in use {}, waiting for a token {}, gate running {}, queued {}",
        peak(|g| g.pool_in_use),
        peak(|g| g.pool_waiting),
        peak(|g| g.gate_running),
        peak(|g| g.gate_queued)
    ));
    line(String::new());
    line(format!(
        "throughput: {:.0} calls/s over {:.0} s; too busy: {}; no task: {}; errors: {}",
        f.calls_per_second, f.wall_seconds, f.too_busy, f.no_task, f.errors_total
    ));
    for (k, v) in &f.errors {
        line(format!("  error {k}: {v}"));
    }
    for (k, v) in f.error_messages.iter().take(10) {
        line(format!("  message x{v}: {k}"));
    }
    let w = &f.workers;
    line(format!(
        "workers: {} started, {} got a task; all held a task after {}; first-task wait p50 {:.1} s, p99 {:.1} s, max {:.1} s",
        w.started,
        w.got_a_task,
        w.all_assigned_after_s
            .map_or_else(|| "never".to_string(), |t| format!("{t:.1} s")),
        w.first_task_wait.p50_ms / 1000.0,
        w.first_task_wait.p99_ms / 1000.0,
        w.first_task_wait.max_ms / 1000.0,
    ));
    if w.exits.keys().any(|k| k != "deadline") {
        line(format!("  worker exits: {:?}", w.exits));
    }
    let t = &f.tasks;
    line(format!(
        "tasks: {} assigned, {} completed, {} stopped by the server, {} failed; {} updates, {} beats, {} PGNs, {} games",
        t.assigned,
        t.completed,
        t.dropped_by_server,
        t.failed,
        t.updates,
        t.beats,
        t.pgns_uploaded,
        t.games_reported
    ));
    let sv = &r.server;
    line(format!(
        "server: CPU {} s ({} cores busy), peak RSS {} MiB, dead tasks {}, gate rejections {}",
        opt(sv.cpu_seconds, 1),
        opt(sv.cpu_cores_busy, 2),
        opt(sv.peak_rss_mib, 0),
        opt(sv.dead_tasks, 0),
        opt(sv.gate_rejected, 0),
    ));
    if let Some(c) = &sv.request_task_critical_summary {
        line(format!(
            "  request_task critical section: {} calls, mean {} ms, p50 <= {} ms, p99 <= {} ms",
            c.count,
            opt(c.mean_ms, 3),
            opt(c.p50_ms_at_most, 3),
            opt(c.p99_ms_at_most, 3)
        ));
    }
    for (name, c) in sv.routes.iter().chain(sv.internals.iter()) {
        line(format!(
            "  server-side {name}: {} observations, mean {} ms, p50 <= {} ms, p99 <= {} ms",
            c.count,
            opt(c.mean_ms, 3),
            opt(c.p50_ms_at_most, 3),
            opt(c.p99_ms_at_most, 3)
        ));
    }
    line(format!(
        "simulator CPU: {} s; client: {:?}",
        opt(r.sim_cpu_seconds, 1),
        f.client
    ));
    let b = &r.baselines;
    if let Some(rp) = &b.replay_healthz {
        line(format!(
            "baseline, same schedule on /healthz ({:.0} s, {:.0} calls/s): p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2} ms, {} errors",
            rp.window_s,
            rp.offered_per_second,
            rp.latency.p50_ms,
            rp.latency.p99_ms,
            rp.latency.p999_ms,
            rp.latency.max_ms,
            rp.errors
        ));
    }
    for c in [&b.closed_loop_beat, &b.closed_loop_healthz]
        .into_iter()
        .flatten()
    {
        line(format!(
            "baseline, closed loop {} {} x{} for {:.0} s: {:.0} req/s, p50 {:.2} p99 {:.2} ms, {} errors",
            c.method,
            c.path,
            c.connections,
            c.seconds,
            c.requests_per_second,
            c.latency.p50_ms,
            c.latency.p99_ms,
            c.errors
        ));
    }
    if let Some(ratio) = b.beat_to_healthz {
        line(format!("  beat/healthz throughput ratio: {ratio:.3}"));
    }
    for n in &b.notes {
        line(format!("  note: {n}"));
    }
    out
}

/// Writes report.json and chart.svg into `dir`.
pub async fn write_report(r: &Report, dir: &Path) -> Result<(), SimError> {
    tokio::fs::create_dir_all(dir).await?;
    let json = serde_json::to_vec_pretty(r).map_err(|e| SimError::Report(e.to_string()))?;
    tokio::fs::write(dir.join("report.json"), json).await?;
    let title = format!(
        "shoal sim: {} workers, {} s storm, x{} time, {} connections",
        r.settings.workers, r.settings.storm_s, r.settings.time_scale, r.settings.connections
    );
    let svg = chart::render_svg(&r.fleet.timeline, &title)?;
    tokio::fs::write(dir.join("chart.svg"), svg).await?;
    Ok(())
}

/// `shoal sim`: runs, prints the summary, writes the report.
pub async fn main(o: SimOptions) -> Result<Report, SimError> {
    // Two sockets per worker at worst (a call and a connection still closing), plus slack;
    // the server this starts inherits the limit. Raising the hard limit needs root.
    let want = (o.workers as u64).saturating_mul(2).saturating_add(8192);
    match crate::process::raise_open_files_limit(want, true) {
        Ok((soft, _)) if soft < want => eprintln!(
            "shoal sim: open-files limit {soft} is below the {want} this fleet may need; \
             calls will queue for sockets (raise it with ulimit -n)"
        ),
        Ok(_) => {}
        Err(e) => eprintln!("shoal sim: cannot raise the open-files limit: {e}"),
    }
    let report = run(&o).await?;
    print!("{}", summary(&report));
    write_report(&report, &o.report).await?;
    println!(
        "report: {}, chart: {}",
        o.report.join("report.json").display(),
        o.report.join("chart.svg").display()
    );
    Ok(report)
}

/// Options of `shoal demo`.
#[derive(Debug, Clone, clap::Args)]
pub struct DemoOptions {
    /// Port of the demo server.
    #[arg(long, default_value_t = 8000)]
    pub port: u16,
    /// Data directory of the demo server (kept, so the demo's history stays).
    #[arg(long, default_value = "data-demo")]
    pub data_dir: PathBuf,
    /// Simulated workers.
    #[arg(long, default_value_t = 24)]
    pub workers: usize,
    /// Simulated seconds per second.
    #[arg(long, default_value_t = 30.0)]
    pub time_scale: f64,
    /// Seconds until the demo stops by itself (Ctrl-C stops it earlier).
    #[arg(long, default_value_t = 3600.0)]
    pub duration: f64,
    /// The `shoal` binary (default: this executable).
    #[arg(long, hide = true)]
    pub shoal_bin: Option<PathBuf>,
}

/// The demo's user, printed for the newcomer.
pub const DEMO_USER: &str = "demo";
pub const DEMO_PASSWORD: &str = "demo-password";

/// `shoal demo`: a server on its embedded store with a seeded user, three runs and a small
/// fleet, so that tests progress at once.
pub async fn demo(o: DemoOptions) -> Result<(), SimError> {
    let scale = TimeScale::new(o.time_scale)
        .ok_or_else(|| SimError::Options("--time-scale must be 0.001 to 1,000,000".into()))?;
    if o.workers == 0 || o.workers > 10_000 || !(o.duration > 0.0 && o.duration <= 7.0 * 86_400.0) {
        return Err(SimError::Options(
            "--workers must be 1 to 10,000 and --duration 0 to 604,800 s".into(),
        ));
    }
    let bin = match &o.shoal_bin {
        Some(b) => b.clone(),
        None => std::env::current_exe()?,
    };
    let mut env = server_env(scale);
    env.retain(|(k, _)| k != "SHOAL_LOG");
    let server = LocalServer::start(&bin, Some(&o.data_dir), o.port, &env).await?;
    let result = demo_fleet(&o, &bin, &server, scale).await;
    server.stop(Duration::from_secs(20)).await?;
    result
}

async fn demo_fleet(
    o: &DemoOptions,
    bin: &Path,
    server: &LocalServer,
    scale: TimeScale,
) -> Result<(), SimError> {
    let dir = &server.data_dir;
    setup::ensure_user(bin, dir, DEMO_USER, DEMO_PASSWORD, true, 1_000_000).await?;
    setup::ensure_user(bin, dir, "demoapprover", DEMO_PASSWORD, true, 16).await?;
    let client = Client::new(ClientConfig {
        server: server.addr,
        mode: ConnMode::Pooled,
        sources: Vec::new(),
        pool_idle: 64,
        max_open: 1024,
        timeout: Duration::from_secs(30),
    });
    let mut rng = StdRng::seed_from_u64(rand::random());
    let runs = setup::create_runs(
        &client,
        DEMO_USER,
        "demoapprover",
        DEMO_PASSWORD,
        3,
        RunKind::Sprt,
        (0.0, 2.0),
        &mut rng,
    )
    .await?;
    println!("shoal demo: server at http://{}", server.addr);
    println!("  user {DEMO_USER} / password {DEMO_PASSWORD} (an approver)");
    println!("  runs: {}", runs.join(", "));
    println!(
        "  {} simulated workers at {}x time; /metrics shows the load. Ctrl-C stops.",
        o.workers,
        scale.factor()
    );
    let t0 = Instant::now();
    let deadline = t0 + Duration::from_secs_f64(o.duration);
    let fleet = Arc::new(Fleet {
        client,
        rec: measure::Recorder::new(t0).map_err(|e| SimError::Report(e.to_string()))?,
        scale,
        deadline,
        password: DEMO_PASSWORD.to_string(),
        model: GameModel::new(1.0, 0.6),
        failed_rate: 0.02,
        seed: rand::random(),
    });
    let mut handles: HashMap<usize, tokio::task::JoinHandle<()>> = HashMap::new();
    let offsets = schedule::start_offsets(
        o.workers,
        Duration::from_secs(5),
        StormShape::Uniform,
        &mut rng,
    );
    for (i, start) in offsets.into_iter().enumerate() {
        handles.insert(
            i,
            tokio::spawn(worker::run(
                fleet.clone(),
                i as u32,
                start,
                DEMO_USER.into(),
            )),
        );
    }
    let progress = async {
        let mut tick = tokio::time::interval(Duration::from_secs(10));
        tick.tick().await;
        for _ in 0..1_000_000u32 {
            tick.tick().await;
            if Instant::now() >= deadline {
                break;
            }
            let by_run = fleet.rec.games_by_run();
            let games: Vec<String> = runs
                .iter()
                .map(|id| {
                    format!(
                        "{}: {}",
                        id.get(id.len().saturating_sub(6)..).unwrap_or(id),
                        by_run.get(id).unwrap_or(&0)
                    )
                })
                .collect();
            println!(
                "demo t={:>5.0}s: {} workers holding a task; games reported per run: {}",
                t0.elapsed().as_secs_f64(),
                fleet.rec.assigned_now(),
                games.join(", ")
            );
        }
    };
    tokio::select! {
        () = progress => {}
        _ = tokio::signal::ctrl_c() => println!("shoal demo: stopping"),
    }
    for h in handles.values() {
        h.abort();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_runs_cover_the_fleet() {
        assert_eq!(auto_runs(300, 600.0, RunKind::Sprt), 1);
        let n = auto_runs(10_000, 3600.0, RunKind::Sprt);
        // 10,000 workers for an hour need millions of games: several 800,000-game runs.
        assert!((10..=30).contains(&n), "{n}");
        assert!(auto_runs(10_000, 3600.0, RunKind::Fixed) < n);
        assert_eq!(auto_runs(10_000_000, 1e6, RunKind::Sprt), 200);
    }

    #[test]
    fn summary_mentions_every_part() {
        let mut r = Report::default();
        r.fleet.endpoints.insert(
            "/api/beat".into(),
            LatencySummary {
                count: 3,
                p50_ms: 1.0,
                ..LatencySummary::default()
            },
        );
        r.fleet.workers.all_assigned_after_s = Some(2.5);
        r.baselines.beat_to_healthz = Some(0.5);
        let s = summary(&r);
        assert!(s.contains("/api/beat") && s.contains("after 2.5 s") && s.contains("0.500"));
        // The report survives a JSON round trip.
        let text = serde_json::to_string(&r).expect("json");
        let back: Report = serde_json::from_str(&text).expect("parse");
        assert_eq!(back, r);
    }
}

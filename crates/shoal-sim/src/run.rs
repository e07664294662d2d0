//! The order of a simulation: the server (started or given), the users and runs, the fleet
//! phase with its sampler and `/healthz` probe, the server's numbers before and after, the
//! baselines, and the report they make.
//!
//! Owns: [`run`], the number of runs created by default, the clients of each phase, and how
//! long in-flight calls may finish after the deadline.
//! Must not: judge replies or count calls itself (that is `worker`/`fleet` and `measure`),
//! parse the server's metrics (that is `metrics`), or print the report (that is `report`).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use hyper::Method;
use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::Value;

use super::SimError;
use super::bench::{self, Baselines};
use super::client::{self, Client, ClientConfig, ConnMode};
use super::fleet::Fleet;
use super::limits::{self, Peaks};
use super::measure;
use super::metrics::server_numbers;
use super::options::{SimOptions, bin, server_env, validate};
use super::report::{Report, RunSettings, ServerSummary};
use super::schedule::{self, TimeScale};
use super::setup::{self, LocalServer, MachineInfo, RunKind};
use super::stats::GameModel;
use super::worker;

const WORKER_PASSWORD: &str = "shoal-sim-password";

/// Runs per worker-hour of games needed: tasks of ~30 simulated minutes, ~5.6 cores each at
/// ~58 games per core at 10+0.1, with a margin.
fn auto_runs(workers: usize, sim_seconds: f64, kind: RunKind) -> usize {
    let games_per_task = 1800.0 / 30.9 * 5.6;
    let tasks = sim_seconds / 1800.0 + 1.5;
    let games = workers as f64 * games_per_task * tasks * 1.3;
    let per_run = match kind {
        RunKind::Sprt => shoal_protocol::SPRT_MAX_GAMES,
        RunKind::Fixed => shoal_protocol::MAX_GAMES,
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
            let mut env = server_env(scale);
            if let Some(l) = limits::server_limits(o)? {
                env.push(("SHOAL_LIMITS".to_string(), l));
            }
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

/// Runs a simulation: the fleet phase, then the baselines. Returns the report (the caller
/// writes it).
pub async fn run(o: &SimOptions) -> Result<Report, SimError> {
    let scale = validate(o)?;
    // The limit options checked here, not in `validate` (limits names the options; the
    // options name no limits).
    limits::server_limits(o)?;
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
            o.run_window,
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
        ledger: Default::default(),
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
    let check_limits = limits::enabled(o);
    let peaks = Arc::new(parking_lot::Mutex::new(Peaks::default()));
    let limits_client = || {
        Client::new(ClientConfig {
            server: server.addr,
            mode: ConnMode::Pooled,
            sources: Vec::new(),
            pool_idle: 1,
            max_open: 2,
            timeout,
        })
    };
    let limit_sampler = check_limits
        .then(|| tokio::spawn(limits::sample(limits_client(), peaks.clone(), deadline)));
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
    if let Some(s) = limit_sampler {
        s.abort();
    }
    // Right after the fleet stopped, before the server declares its tasks dead.
    let mut limits_report = if check_limits {
        let configured = server.env.iter().find(|(k, _)| k == "SHOAL_LIMITS");
        Some(
            limits::finish(
                &limits_client(),
                &run_ids,
                &fleet.ledger,
                &peaks,
                configured.map(|(_, v)| v.clone()),
                o.run_window,
            )
            .await,
        )
    } else {
        None
    };
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
    if let Some(l) = &mut limits_report {
        l.allow_dead_tasks(server_summary.dead_tasks.unwrap_or(0.0).max(0.0) as u64);
    }

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
        limits: limits_report,
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
}

//! `shoal demo`: a server on its embedded store with a seeded user, three SPRT runs and a
//! small fleet, printing progress until Ctrl-C or its duration.
//!
//! Owns: the demo's options, its user and password, and its progress lines.
//! Must not: measure or write a report (that is `shoal sim`), or delete the data directory
//! (the demo's history stays).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use rand::rngs::StdRng;

use super::SimError;
use super::client::{Client, ClientConfig, ConnMode};
use super::fleet::Fleet;
use super::measure;
use super::options::server_env;
use super::schedule::{self, StormShape, TimeScale};
use super::setup::{self, LocalServer, RunKind};
use super::stats::GameModel;
use super::worker;

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
    // Listening for SIGTERM from the start, so that one sent while the demo sets up stops it
    // in order too (the default action would end the demo and leave its server running).
    let terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    let server = LocalServer::start(&bin, Some(&o.data_dir), o.port, &env).await?;
    let result = demo_fleet(&o, &bin, &server, scale, terminate).await;
    server.stop(Duration::from_secs(20)).await?;
    result
}

async fn demo_fleet(
    o: &DemoOptions,
    bin: &Path,
    server: &LocalServer,
    scale: TimeScale,
    terminate: Option<tokio::signal::unix::Signal>,
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
        None,
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
        ledger: Default::default(),
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
    // Ctrl-C or SIGTERM: stop the fleet, then the server (in `demo`). Killed outright, the
    // server is ended by the kernel (LocalServer, SHOAL_EXIT_WITH_PARENT).
    let terminate = async move {
        match terminate {
            Some(mut s) => {
                s.recv().await;
            }
            None => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        () = progress => {}
        _ = tokio::signal::ctrl_c() => println!("shoal demo: stopping"),
        () = terminate => println!("shoal demo: stopping (SIGTERM)"),
    }
    for h in handles.values() {
        h.abort();
    }
    Ok(())
}

//! The process: builds the state, binds the listener, serves until told to stop, then shuts
//! down in order.
//!
//! Owns: start-up (data directory, secret, store, pool, gate, listener with the configured
//! backlog) and the shutdown sequence: stop accepting and answer 503 to new requests, let
//! in-flight requests finish within `shutdown_grace_s`, close the store, with a log line at
//! each step; starting the primary's periodic jobs ([`crate::jobs`]).
//! Must not: contain request logic (that is `http`), or block the runtime: start-up's blocking
//! steps (files, opening the store) go through the offload pool like everything else.

use std::future::Future;
use std::io::Write as _;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::Semaphore;

use crate::accounts::{Accounts, ThrottleConfig, UserError};
use crate::config::{Config, StoreKind};
use crate::http::{self, AppState};
use crate::ledger::Ledger;
use crate::nets::Nets;
use crate::offload::{Offload, OffloadError};
use crate::rundb::books::Books;
use crate::rundb::{RunDb, RunDbConfig, RunDbError};
use crate::scheduler::{Scheduler, SchedulerConfig, admission::GateConfig};
use crate::store::sqlite::SqliteStore;
use crate::store::{SharedStore, StoreError};
use crate::telemetry;

pub use crate::jobs::{JOBS, Job, JobContext, job, run_job};

/// Why the server could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    #[error("store: {0}")]
    Store(#[from] StoreError),
    #[error("{what}: {source}")]
    Io {
        what: String,
        source: std::io::Error,
    },
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("start-up work failed: {0}")]
    Offload(#[from] OffloadError),
    #[error("run database: {0}")]
    RunDb(#[from] RunDbError),
    #[error("accounts: {0}")]
    Accounts(#[from] UserError),
    #[error("{0}")]
    Books(#[from] crate::rundb::books::BooksError),
    #[error("GitHub: {0}")]
    Github(#[from] crate::github::GithubError),
    #[error("test groups: {0}")]
    Groups(String),
}

/// Opens the configured store backend.
pub fn open_store(config: &Config) -> Result<SharedStore, StoreError> {
    match config.store {
        StoreKind::Sqlite => Ok(Arc::new(SqliteStore::open(
            &config.data_dir,
            config.sqlite_synchronous,
        )?)),
        StoreKind::Mongodb => Ok(Arc::new(crate::store::mongo::MongoStore::open(
            &config.mongodb_uri,
        )?)),
    }
}

/// The configured secret, or the one kept in `<data_dir>/secret`, created (mode 0600) with
/// 32 random bytes on first start.
fn load_or_create_secret(config: &Config) -> Result<Vec<u8>, AppError> {
    if let Some(secret) = &config.secret {
        return Ok(secret.expose().as_bytes().to_vec());
    }
    let path = config.data_dir.join("secret");
    let io = |what: &str, source| AppError::Io {
        what: format!("{what} {}", path.display()),
        source,
    };
    match std::fs::read_to_string(&path) {
        Ok(text) if text.trim().len() >= 32 => return Ok(text.trim().as_bytes().to_vec()),
        Ok(_) => {
            return Err(io(
                "secret file is too short (want 32+ characters; delete it to regenerate)",
                std::io::Error::from(std::io::ErrorKind::InvalidData),
            ));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(io("cannot read", e)),
    }
    let secret = hex::encode(rand::random::<[u8; 32]>());
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options.open(&path).map_err(|e| io("cannot create", e))?;
    file.write_all(secret.as_bytes())
        .and_then(|_| file.sync_all())
        .map_err(|e| io("cannot write", e))?;
    tracing::info!(path = %path.display(), "generated a new secret");
    Ok(secret.into_bytes())
}

fn bind(config: &Config) -> Result<TcpListener, AppError> {
    let ip: IpAddr = if config.host == "localhost" {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    } else {
        config
            .host
            .parse()
            .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
    };
    let addr = SocketAddr::new(ip, config.port);
    let err = |source| AppError::Bind { addr, source };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(err)?;
    socket.set_reuseaddr(true).map_err(err)?;
    socket.bind(addr).map_err(err)?;
    // The backlog is where a reconnect storm waits: no connection is refused by the app.
    socket.listen(config.listen_backlog).map_err(err)
}

/// Builds the shared state: pool, gate, store, secret, metrics.
pub async fn build_state(config: Config) -> Result<Arc<AppState>, AppError> {
    // The recorder first: the pool and the gate register their series as they are built.
    let metrics = telemetry::metrics_handle();
    let config = Arc::new(config);
    // Reserved tokens for the serial callers everybody waits on: the request_task slot holder
    // (one per gate slot) and the journal writer (see `offload`).
    let reserve = GateConfig::request_task(&config).slots + 1;
    let offload = Offload::with_reserved(config.threadpool_tokens, reserve);
    let c = config.clone();
    let pool = offload.clone();
    let (secret, rundb, scheduler, ledger, accounts, nets, github, groups) = offload
        .run(move || -> Result<_, AppError> {
            std::fs::create_dir_all(&c.data_dir).map_err(|source| AppError::Io {
                what: format!("cannot create data directory {}", c.data_dir.display()),
                source,
            })?;
            let secret = load_or_create_secret(&c)?;
            crate::nets::sweep_stale_parts(&c.nets_dir());
            if let Some(url) = &c.nn_url
                && url.trim_end_matches('/').ends_with("/nn")
            {
                // nn_url is Fishtest's FISHTEST_NN_URL: the base address, `/nn/` is appended.
                tracing::warn!(nn_url = %url, "nn_url ends in /nn: workers are sent to <nn_url>/nn/<name>");
            }
            let store = open_store(&c)?;
            let books = Books::at_start(c.books_file.as_deref(), &*store)?;
            let cfg = RunDbConfig {
                primary: c.is_primary(),
                dead_task: c.dead_task_timeout(),
                flush_runs_per_tick: c.flush_runs_per_tick,
                cache_keep: c.cache_keep(),
                limits: c.limit_defs(),
            };
            let ledger = Arc::new(Ledger::new(store.clone(), cfg.primary));
            let throttle = ThrottleConfig {
                window: c.auth_throttle_window(),
                per_user_ip: c.auth_throttle_per_user_ip,
                per_ip: c.auth_throttle_per_ip,
                per_user: c.auth_throttle_per_user,
            };
            let accounts = Accounts::open(store.clone(), ledger.clone(), throttle)?
                .with_shared_sessions(c.session_recheck());
            let nets = Nets::new(store.clone(), c.nets_dir(), ledger.clone());
            let github = Arc::new(crate::github::Github::new(
                &c.github(),
                store.clone(),
                pool.clone(),
                ledger.clone(),
            )?);
            github.load_master_blocking();
            let rundb = Arc::new(RunDb::open(store, pool.clone(), books, cfg, ledger.clone())?);
            let sched_cfg = SchedulerConfig::of(&c);
            let scheduler = Arc::new(Scheduler::open(rundb.clone(), sched_cfg, pool)?);
            // Test groups (issue 39).
            let groups = Arc::new(
                crate::groups::Groups::open(rundb.clone(), scheduler.clone(), c.groups.clone())
                    .map_err(|e| AppError::Groups(e.to_string()))?,
            );
            let (accounts, nets) = (Arc::new(accounts), Arc::new(nets));
            Ok((secret, rundb, scheduler, ledger, accounts, nets, github, groups))
        })
        .await??;
    let pgn_uploads = Arc::new(Semaphore::new(config.pgn_upload_concurrency));
    // Pages render on their own lane of lower-priority threads (offload::Lane).
    let page_renders = Arc::new(
        crate::offload::Lane::start("render", config.page_renders(), config.page_render_nice)
            .map_err(|source| AppError::Io {
                what: "cannot start the page-render threads".into(),
                source,
            })?,
    );
    let pgn_retention = if config.is_primary() {
        use crate::store::PgnClass;
        let d = config.pgn_retention();
        crate::rundb::retention::PgnRetention::new(
            &[
                (PgnClass::Stc, d.stc),
                (PgnClass::Ltc, d.ltc),
                (PgnClass::Deleted, d.deleted),
                (PgnClass::Unfinished, d.unfinished),
            ],
            d.lookback,
        )
        .map(Arc::new)
    } else {
        None
    };
    let jobs = Arc::new(crate::jobs::JobContext {
        config: Arc::clone(&config),
        offload: offload.clone(),
        rundb: Arc::clone(&rundb),
        scheduler: Arc::clone(&scheduler),
        groups: Arc::clone(&groups),
        accounts: Arc::clone(&accounts),
        github: Arc::clone(&github),
        ledger: Arc::clone(&ledger),
        refused_books: Default::default(),
        github_down: Default::default(),
        pgn_retention: pgn_retention.clone(),
    });
    // Validation has tried the same URL: a failure here is only logged (reset mail off).
    let mailer = match config.smtp_url.expose() {
        "" => None,
        url => match crate::mail::Mailer::new(url, &config.smtp_from) {
            Ok(m) => Some(Arc::new(m)),
            Err(e) => {
                tracing::error!(error = %e, "smtp_url: password-reset mail is off");
                None
            }
        },
    };
    // `public_url` is required with `smtp_url` (validation): links never come from a Host.
    let forgot = match (&mailer, config.public_base()) {
        (Some(mailer), Some(base)) => Some(crate::http::forgot_queue::ForgotQueue::start(
            Arc::clone(&accounts),
            offload.clone(),
            Arc::clone(mailer),
            base.to_string(),
        )),
        _ => None,
    };
    Ok(Arc::new(AppState {
        dashboard: Default::default(),
        mailer,
        forgot,
        jobs,
        primary: config.is_primary(),
        request_cap: config
            .max_concurrent_requests
            .map(|n| Arc::new(Semaphore::new(n))),
        config,
        offload,
        rundb,
        scheduler,
        groups,
        accounts,
        ledger,
        nets,
        github,
        metrics,
        draining: Default::default(),
        started: Instant::now(),
        secret,
        pgn_uploads,
        page_renders,
        debug: Default::default(),
        pgn_retention,
    }))
}

/// Runs the server until `shutdown` completes, then shuts down in order.
pub async fn serve(
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), AppError> {
    // Poll the shutdown future once now, so that signal handlers are installed before the
    // listener exists: a SIGTERM that arrives during start-up is a graceful stop, not death.
    let mut shutdown = Box::pin(shutdown);
    let early = tokio::select! {
        biased;
        () = &mut shutdown => true,
        () = std::future::ready(()) => false,
    };
    if early {
        tracing::info!("shutdown requested during start-up");
        return Ok(());
    }
    // Every connection waiting in a storm is a file descriptor: use all the system allows
    // (the soft limit is often 1,024 while the hard one is far higher).
    match crate::process::raise_open_files_limit(u64::MAX, false) {
        Ok((soft, _)) if soft < 16_384 => tracing::warn!(
            open_files = soft,
            "the open-files limit is low for a large fleet: raise it (ulimit -n / LimitNOFILE)"
        ),
        Ok((soft, _)) => tracing::info!(open_files = soft, "open-files limit"),
        Err(e) => tracing::warn!(error = %e, "cannot read or raise the open-files limit"),
    }
    let listener = bind(&config)?;
    let addr = listener.local_addr().map_err(|source| AppError::Io {
        what: "cannot read the bound address".into(),
        source,
    })?;
    let state = build_state(config).await?;
    let grace = state.config.shutdown_grace();
    let app = http::router(state.clone());

    let shutdown_conns = http::conn::Shutdown::new();
    let timeouts = http::conn::ConnTimeouts {
        header_read: state.config.header_read_timeout(),
        keepalive: state.config.keepalive_timeout(),
    };
    let server = http::conn::serve(listener, app, timeouts, shutdown_conns.clone());
    let mut server = tokio::spawn(server);

    let upkeep_handle = state.metrics.clone();
    let upkeep = tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(5));
        loop {
            tick.tick().await;
            upkeep_handle.run_upkeep();
        }
    });

    system_event(&state, format!("start shoal@{}", addr.port())).await;
    let jobs = if state.primary {
        crate::jobs::spawn_jobs(&state.jobs)
    } else {
        Vec::new()
    };

    tracing::info!(
        primary = state.primary,
        store = state.config.store.name(),
        tokens = state.config.threadpool_tokens,
        gate_mode = state.scheduler.gate().config().admission.mode(),
        gate_capacity = state.scheduler.gate().config().capacity,
        "listening on http://{addr}"
    );

    tokio::select! {
        () = &mut shutdown => {}
        result = &mut server => {
            // The server stopped on its own: only an I/O failure of the listener does that.
            upkeep.abort();
            return match result {
                Ok(Ok(())) => Ok(()),
                Ok(Err(source)) => Err(AppError::Io { what: "server failed".into(), source }),
                Err(e) => Err(AppError::Io {
                    what: "server task failed".into(),
                    source: std::io::Error::other(e.to_string()),
                }),
            };
        }
    }

    tracing::info!(
        "shutdown: signal received; no longer accepting connections, answering 503 to new requests"
    );
    state.draining.store(true, Ordering::Release);
    // Stop accepting; idle connections and those still sending a header close at once.
    shutdown_conns.trigger();
    match tokio::time::timeout(grace, &mut server).await {
        Ok(_) => tracing::info!("shutdown: all in-flight requests finished"),
        Err(_) => {
            tracing::warn!(
                grace_s = grace.as_secs_f64(),
                in_use = state.offload.in_use(),
                "shutdown: grace period over; closing remaining connections"
            );
            server.abort();
        }
    }
    upkeep.abort();
    for job in &jobs {
        job.abort();
    }
    // Work already running in the pool finishes (it may be committing an acknowledged
    // write); only then is the store closed. Nothing waits for a token any more.
    let deadline = Instant::now() + grace;
    while state.offload.in_use() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    if state.primary {
        tracing::info!(
            dirty = state.rundb.dirty_count(),
            "shutdown: flushing pending run writes"
        );
        let db = state.rundb.clone();
        match state.offload.run(move || db.flush(true)).await {
            Ok(Ok(n)) => tracing::info!(runs = n, "shutdown: run writes flushed"),
            Ok(Err(e)) => {
                tracing::error!(error = %e, "shutdown: flush failed (the journal keeps every acknowledged change)")
            }
            Err(e) => tracing::error!(error = %e, "shutdown: flush failed"),
        }
    }
    system_event(&state, format!("stop shoal@{}", addr.port())).await;
    tracing::info!("shutdown: closing the store");
    let db = state.rundb.clone();
    let closed = state.offload.run(move || db.close_store()).await;
    state.offload.close();
    state.page_renders.close();
    match closed {
        Ok(Ok(())) => tracing::info!("shutdown: store closed; bye"),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "shutdown: store close failed");
            return Err(e.into());
        }
        Err(e) => return Err(e.into()),
    }
    Ok(())
}

/// Logs a `system_event` action (start and stop of an instance, as Fishtest does).
async fn system_event(state: &Arc<AppState>, message: String) {
    let ledger = state.ledger.clone();
    let result = state
        .offload
        .run(move || ledger.log_system_event(message))
        .await;
    if let Err(e) = result
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()))
    {
        tracing::warn!(error = %e, "cannot log system event");
    }
}

/// Resolves when the process receives SIGTERM or Ctrl-C (SIGINT).
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => tracing::info!("received Ctrl-C"),
        () = term => tracing::info!("received SIGTERM"),
    }
}

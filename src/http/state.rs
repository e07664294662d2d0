//! What every handler shares ([`AppState`]), below every handler module: the HTTP modules
//! import it from here and nothing here imports a handler, so `http/` has no import cycle.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::time::Instant;

use metrics_exporter_prometheus::PrometheusHandle;
use tokio::sync::Semaphore;

use crate::accounts::Accounts;
use crate::config::Config;
use crate::http::ui::dashboard::cache::DashboardCache;
use crate::ledger::Ledger;
use crate::nets::Nets;
use crate::offload::Offload;
use crate::rundb::RunDb;
use crate::scheduler::Scheduler;

/// Everything handlers share. Cheap to clone through `Arc`.
pub struct AppState {
    /// The dashboard's first page, rendered at most once a second for everybody.
    pub dashboard: Arc<DashboardCache>,
    pub config: Arc<Config>,
    pub primary: bool,
    pub offload: Offload,
    /// The run core: runs, tasks, the run cache and journal (it records into `ledger`).
    pub rundb: Arc<RunDb>,
    /// request_task's path (the gate, its batches, the critical section), the blocked
    /// workers and the limits.
    pub scheduler: Arc<Scheduler>,
    /// Test groups (issue 39).
    pub groups: Arc<crate::groups::Groups>,
    /// Users, sessions and the login throttle (the login policy).
    pub accounts: Arc<Accounts>,
    /// The action log, CPU hours and contributors (the run database writes to it too).
    pub ledger: Arc<Ledger>,
    /// Password-reset mail, when `smtp_url` is set.
    pub mailer: Option<Arc<crate::mail::Mailer>>,
    /// `/forgot`'s queue of requests, when mail and `public_url` are set.
    pub forgot: Option<crate::http::forgot_queue::ForgotQueue>,
    /// The net directory and the nets' records.
    pub nets: Arc<Nets>,
    /// What shoal asks GitHub (never awaited by the worker API).
    pub github: Arc<crate::github::Github>,
    pub metrics: PrometheusHandle,
    /// Set when shutdown begins: new requests on open connections get an empty 503.
    pub draining: AtomicBool,
    /// `max_concurrent_requests`, if set: a waiting (never rejecting) cap.
    pub request_cap: Option<Arc<Semaphore>>,
    pub started: Instant,
    /// Turns for reading large PGN upload bodies (`pgn_upload_concurrency`).
    pub pgn_uploads: Arc<Semaphore>,
    /// Turns for rendering web pages (`page_render_concurrency`): pages queue for these
    /// before taking a pool token, so a page storm cannot take every core.
    /// The page-render lane: its own low-priority threads, one turn per thread.
    pub page_renders: Arc<crate::offload::Lane>,
    /// Key for signing cookies (loaded or generated at start).
    pub secret: Vec<u8>,
    /// Debug routes' bookkeeping.
    pub debug: DebugState,
    /// What the periodic jobs run on (the same components, for `jobs::run_job`).
    pub jobs: Arc<crate::jobs::JobContext>,
    /// PGN retention, on the primary when a `pgn_retention_*days` window is set (`app` runs
    /// its passes).
    pub pgn_retention: Option<Arc<crate::rundb::retention::PgnRetention>>,
}

/// Counters of the debug routes (`http::debug`).
#[derive(Debug, Default)]
pub struct DebugState {
    /// Order in which callers entered the gate's critical section.
    pub gate_seq: AtomicU64,
}

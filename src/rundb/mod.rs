//! The run database: runs, tasks and the rules of the worker protocol (docs/protocol.md).
//!
//! `RunDb` is one struct whose methods live in layers, one file each; a file calls only the
//! layers below it (ARCHITECTURE.md, "Layers of rundb"), from the top:
//!
//! - `recovery.rs`: `RunDb::open`: the journal replayed over the stored runs, the cache and
//!   the scheduler's memory rebuilt (start-up only);
//! - the operations, which never call one another: `scheduler.rs` (request_task and its
//!   memory: worker -> task map, worker runs, blocked workers; the limits' checks), `tasks.rs` (the
//!   task-bound worker calls), `lifecycle.rs` (create, approve, a worker's stop, purge),
//!   `control.rs` (the controls people use: modify, delete, a user's stop), `jobs.rs` (the
//!   periodic jobs over runs), `retention.rs` (PGN retention: the store alone, no lock of
//!   ours), `queries.rs` (what the HTTP layer and the UI read), `workers.rs` (the workers
//!   people block);
//! - `transitions.rs`: the changes several operations share (a task set inactive, a run
//!   finished or purged) and the task-ownership check;
//! - `cache.rs`: the run cache (every unfinished run in memory, each behind its own lock),
//!   commit to the journal, `save_now`, the write-behind and eviction;
//! - `records.rs`: what the run database tells the ledger ([`crate::ledger`]: the action log,
//!   CPU hours, contributors): a run's action fields, actions made under a run's lock (through
//!   the journal), a finished task's figures, the stored runs for the one-time rebuild;
//! - `outcome.rs`: the typed outcomes the worker operations return (the HTTP layer turns them
//!   into Fishtest's JSON and messages);
//! - `error.rs`: why an operation failed ([`RunDbError`]), said as what happened; the HTTP
//!   layer words it as Fishtest does;
//! - this file: the struct and its fields and the settings; and the
//!   building blocks that know nothing of `RunDb`: [`model`], [`schedule`], [`journal`],
//!   [`books`], [`create`].
//!
//! Users, sessions and logins are [`crate::accounts`]'s (the run database takes a checked
//! [`crate::accounts::User`]); the action log, CPU hours and contributors are
//! [`crate::ledger`]'s; the net files and their records are [`crate::nets`]'s.
//!
//! The fields of `RunDb` are private to this module, so the layers (its submodules) reach them
//! and nothing outside `rundb` does. Callers outside name what they need as `crate::rundb::…`;
//! what moved into a layer is re-exported here under its old path.
//!
//! Durability: every change acknowledged to a worker is journalled ([`journal`]); the caller
//! awaits the returned [`Ticket`] before replying. Whole run documents are written behind, in
//! batches, by [`RunDb::flush`]; on start the journal is replayed over the stored documents.
//!
//! Locks nest only as `sched` -> the run cache (read) -> one run's lock -> `arch`, `conns`,
//! the ledger's (its pending CPU hours, its contributors table), `unfinished`, `last_sync`,
//! the journal, the store; never two run locks at once; the cache is written only with no
//! other lock held. ARCHITECTURE.md, "Lock order", has every lock and the one start-up exception (`load_unfinished`). None is held across an
//! `.await` (everything here is blocking code run in the offload pool).
//! Must not: know HTTP or a store backend; do work proportional to all tasks ever created on
//! request_task's path.

pub mod books;
mod cache;
mod control;
pub mod create;
mod error;
mod jobs;
pub mod journal;
mod lifecycle;
mod limiter;
pub mod model;
pub mod outcome;
pub mod queries;
mod records;
mod recovery;
pub mod retention;
pub mod schedule;
mod scheduler;
mod tasks;
#[cfg(test)]
pub(crate) mod testkit;
pub mod trajectory;
mod transitions;
pub mod workers;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::ledger::Ledger;
pub use crate::protocol::WORKER_VERSION;
use crate::store::{Date, SharedStore};
use books::Books;
use cache::RunEntry;
pub use cache::apply_patch;
pub use control::{Approval, ModifyOutcome, RunChanges, UserStop};
pub use error::{ChangeRefused, DbResult, Op, RunDbError};
pub use journal::{JournalError, Ticket};
pub use lifecycle::SubmitError;
pub use lifecycle::{PURGE_WINDOW, STOP_RUN_CPU_HOURS};
pub use scheduler::DUPLICATE_WINDOW;
use scheduler::Sched;
pub use transitions::PurgeOutcome;

/// A task silent for longer than this is dead.
pub const DEAD_TASK: Duration = Duration::from_secs(360);

/// How long a finished run stays cached after it was last loaded or written, by default
/// (Fishtest's 300 s; `cache_keep_s`).
pub const CACHE_KEEP: Duration = Duration::from_secs(300);

/// Settings the run database needs.
#[derive(Debug, Clone)]
pub struct RunDbConfig {
    /// Only the primary replays the journal, caches runs and changes them.
    pub primary: bool,
    pub dead_task: Duration,
    pub flush_runs_per_tick: usize,
    /// How long a finished run stays cached after it was last loaded or written
    /// (`clean_cache`).
    pub cache_keep: Duration,
    /// The limits (built-ins first; `Config::limit_defs`).
    pub limits: Vec<crate::limits::LimitDef>,
}

impl Default for RunDbConfig {
    fn default() -> Self {
        RunDbConfig {
            primary: true,
            dead_task: DEAD_TASK,
            flush_runs_per_tick: 8,
            cache_keep: CACHE_KEEP,
            limits: crate::limits::LimitDef::builtins(u64::from(
                crate::accounts::DEFAULT_MACHINE_LIMIT,
            )),
        }
    }
}

/// The run database.
pub struct RunDb {
    store: SharedStore,
    pub books: Books,
    cfg: RunDbConfig,
    journal: Arc<journal::Journal>,
    cache: RwLock<HashMap<String, Arc<RunEntry>>>,
    /// Ids of unfinished runs, in creation order.
    unfinished: RwLock<Vec<String>>,
    sched: Mutex<Sched>,
    /// The limits engine: every active task holds its grants (the machine limit per address,
    /// the run's window, configured limits) until `set_inactive` releases them.
    limits: Arc<crate::limits::Engine>,
    limit_ids: limiter::LimitIds,
    /// Blocked short worker names, refreshed from the store.
    blocked: RwLock<HashSet<String>>,
    /// The action log, the CPU-hour totals and the contributors table: told of every run
    /// change they record (`records.rs`), written behind by `flush`.
    ledger: Arc<Ledger>,
    /// Changes a run list shows at once ([`RunDb::listed_changes`]).
    listed_changes: std::sync::atomic::AtomicU64,
}

fn now() -> Date {
    Date::now()
}

fn secs_since(d: &Date) -> f64 {
    (chrono::Utc::now() - d.0).num_milliseconds() as f64 / 1000.0
}

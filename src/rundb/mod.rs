//! The run core: runs, tasks and the rules of the worker protocol's task-bound calls
//! (docs/protocol.md), the run cache and the journal.
//!
//! request_task is not here: the scheduler ([`crate::scheduler`]) owns its whole path (the
//! gate, the batches, the critical section and its memory, the blocked workers, the limits'
//! grants) and works on the runs through the run core's verbs (`verbs.rs`: a read-only scan of
//! the candidate runs, `add_task` with the scheduler's grant decision run under the run's
//! lock, `fail_task`, read-only looks at one run); `seam.rs` lends it the store, the ledger
//! and the limits engine. The cache, its entries, `commit` and `set_inactive` are private to
//! the run core (`tests/it/layout.rs` checks it). The run core never calls the scheduler.
//!
//! `RunDb` is one struct whose methods live in layers, one file each; a file calls only the
//! layers below it, so the operations never call one another and what two of them share
//! goes down into `transitions.rs`. From the top:
//!
//! - `recovery.rs`: `RunDb::open`: the journal replayed over the stored runs, the cache
//!   rebuilt (start-up only; the scheduler rebuilds its memory after it);
//! - the operations, which never call one another: `tasks.rs` (the task-bound worker calls),
//!   `lifecycle.rs` (create, approve, a worker's stop, purge), `control.rs` (the controls
//!   people use: modify, delete, a user's stop), `jobs.rs` (the periodic jobs over runs),
//!   `retention.rs` (PGN retention: the store alone, no lock of ours), `queries.rs` (what the
//!   HTTP layer and the UI read), `verbs.rs` (what the scheduler does to runs, above);
//! - `transitions.rs`: the changes several operations share (a task set inactive, its grants
//!   released; a run finished or purged) and the task-ownership check;
//! - `load.rs`: a run's load, the one place its task list grows and its counters (`workers`,
//!   `cores`, `committed_games`, `total_games`) rise and fall;
//! - `cache.rs`: the run cache (every unfinished run in memory, each behind its own lock),
//!   commit to the journal, `save_now`, the write-behind and eviction;
//! - `records.rs`: what the run database tells the ledger ([`crate::ledger`]: the action log,
//!   CPU hours, contributors): a run's action fields, actions made under a run's lock (through
//!   the journal), a finished task's figures, the stored runs for the one-time rebuild;
//! - `outcome.rs`: the typed outcomes the worker operations and request_task return (the
//!   HTTP layer turns them into Fishtest's JSON and messages);
//! - `error.rs`: why an operation failed ([`RunDbError`]), said as what happened; the HTTP
//!   layer words it as Fishtest does;
//! - `seam.rs`: what the scheduler borrows to keep (above);
//! - this file: the struct and its fields and the settings; and the building blocks that
//!   know nothing of `RunDb`: [`model`], [`schedule`] (the pure rules of time controls, task
//!   sizes, itp, run order and the arch filter, which the scheduler applies), [`journal`],
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
//! Locks nest only as (the scheduler's `sched`, `crate::scheduler`) -> the run cache (read)
//! -> one run's lock -> `arch`, the limits engine, the ledger's (its pending CPU hours, its
//! contributors table), `unfinished`, `last_sync`, the journal, the store; never two run
//! locks at once; the cache is written only with no other lock held. docs/internals.md, "Lock
//! order", has every lock and what each is taken under. None is held across an `.await` (everything here is blocking code run in the offload pool).
//! Must not: know HTTP or a store backend; call the scheduler; do work proportional to all
//! tasks ever created on request_task's path.

pub mod arch_filter;
pub mod books;
mod cache;
mod control;
pub mod create;
mod error;
mod jobs;
pub mod journal;
mod lifecycle;
mod load;
pub mod model;
pub mod outcome;
pub mod queries;
mod records;
mod recovery;
pub mod retention;
pub mod schedule;
mod seam;
mod tasks;
#[cfg(test)]
pub(crate) mod testkit;
pub mod trajectory;
// A take stopped by its test group (issue 39).
mod superseded;
mod transitions;
mod verbs;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use crate::ledger::Ledger;
// The pure rules of time controls, task sizes and run order are the scheduler's; the run
// core uses the time-control arithmetic, itp and the arch filter from there.
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
pub use transitions::PurgeOutcome;
pub(crate) use verbs::{RunRef, TaskEnd};

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
    /// The opening books (swapped whole when the list is refreshed).
    books: arc_swap::ArcSwap<Books>,
    cfg: RunDbConfig,
    journal: Arc<journal::Journal>,
    cache: RwLock<HashMap<String, Arc<RunEntry>>>,
    /// Ids of unfinished runs, in creation order.
    unfinished: RwLock<Vec<String>>,
    /// The limits engine: every active task holds its grants (the machine limit per address,
    /// the run's window, configured limits) until `set_inactive` releases them. The
    /// scheduler takes the grants and owns every other use of the engine.
    limits: Arc<crate::limits::Engine>,
    /// The action log, the CPU-hour totals and the contributors table: told of every run
    /// change they record (`records.rs`), written behind by `flush`.
    ledger: Arc<Ledger>,
    /// Changes a run list shows at once ([`RunDb::listed_changes`]).
    listed_changes: std::sync::atomic::AtomicU64,
    /// Run id → (when, size): the run pages' document sizes, each computed at most once per
    /// [`queries::DOC_SIZE_FRESH`] (three conversions of the whole run; a leaf lock).
    doc_sizes: parking_lot::Mutex<HashMap<String, (std::time::Instant, Option<u64>)>>,
}

fn now() -> Date {
    Date::now()
}

fn secs_since(d: &Date) -> f64 {
    (chrono::Utc::now() - d.0).num_milliseconds() as f64 / 1000.0
}

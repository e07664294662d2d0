//! What the run core lends the scheduler ([`crate::scheduler`]): the store, the ledger, the
//! limits engine and the run cache read-locked (the ids of the unfinished runs are a public
//! query, `queries.rs`).
//!
//! Owns: nothing but these accessors. (The scheduler also calls, as `pub(crate)`, `entry`,
//! `commit` and `note_listed_change` in `cache.rs`, `run_entry` and `set_inactive` in
//! `transitions.rs`, `task_action` in `records.rs`.)
//! Must not: lock anything for longer than the call, except the cache's read guard, which
//! the caller holds as the lock order says (after `sched`, before one run's lock).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLockReadGuard;

use super::RunDb;
use super::cache::RunEntry;
use crate::ledger::Ledger;
use crate::limits::Engine;
use crate::store::SharedStore;

impl RunDb {
    /// The store under the runs (the scheduler keeps its own documents there: `workers`,
    /// `kvstore`'s `worker_runs`, `shoal_kvstore`'s `limits`).
    pub(crate) fn store(&self) -> &SharedStore {
        &self.store
    }

    /// The ledger the run core records into (the scheduler logs `set_limit` and
    /// `block_worker` there).
    pub(crate) fn ledger(&self) -> &Arc<Ledger> {
        &self.ledger
    }

    /// Whether this instance is the primary (only the primary schedules).
    pub(crate) fn is_primary(&self) -> bool {
        self.cfg.primary
    }

    /// The limits engine: the run core releases a task's grants when the task ends
    /// (`set_inactive`); the scheduler takes them and owns everything else about limits.
    pub(crate) fn limits(&self) -> &Arc<Engine> {
        &self.limits
    }

    /// A cached run (never loaded from the store: the scheduler only looks at cached runs).
    pub(crate) fn cached(&self, run_id: &str) -> Option<Arc<RunEntry>> {
        self.cache.read().get(run_id).cloned()
    }

    /// The run cache, read-locked: the caller may lock runs one at a time while holding it.
    pub(crate) fn cache_read(&self) -> RwLockReadGuard<'_, HashMap<String, Arc<RunEntry>>> {
        self.cache.read()
    }
}

//! What the run core lends the scheduler ([`crate::scheduler`]) to keep: the store (for its
//! own documents), the ledger (for its own actions) and the limits engine (the grants a task
//! holds, which the run core releases when the task ends).
//!
//! Owns: nothing but these three accessors. Runs and tasks are reached only through the verbs
//! (`verbs.rs`); the cache, its entries, `commit` and `set_inactive` stay inside the run core.
//! Must not: lend anything that holds a lock or a run.

use std::sync::Arc;

use super::RunDb;
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

    /// The limits engine: the run core releases a task's grants when the task ends
    /// (`set_inactive`); the scheduler takes them and owns everything else about limits.
    pub(crate) fn limits(&self) -> &Arc<Engine> {
        &self.limits
    }
}

//! The ledger: what happened and who contributed. The action log (Fishtest's `actions`
//! documents), the CPU-hour totals stop_run's 1000-hour rule reads, and the contributors
//! table.
//!
//! Owns: its state and locks (the pending CPU hours and their write lock, the contributors
//! table), the action document's shape ([`document`]), its reads ([`ActionFilter`]) and the
//! `kvstore` documents of the totals (`cpu_hours:<user>`, `contributor:<user>`,
//! `contributors:built:2`). It is told facts in plain values ([`TaskContribution`], a user and
//! their hours), so it knows nothing of runs: the run database computes a finished task's
//! figures and hands them over, and the one-time rebuild of the contributors table reads the
//! stored runs through [`StoredRuns`], which the run database implements.
//! Must not: know runs, tasks, HTTP or another component's state; call back into anything
//! that holds a run's lock (its locks are leaves: the `add_*` calls, made under a run's lock,
//! touch memory only); write the store under a run's lock.

mod actions;
mod contributors;
mod cpu_hours;

use std::collections::HashMap;

use parking_lot::Mutex;

pub use actions::{ACTION_KINDS, ActionFilter, HIDDEN_KINDS, MAX_IN, document};
pub use contributors::{
    Contributor, ContributorRow, DayTotals, MONTH_DAYS, RunContribution, SECONDARY_RELOAD,
    StoredRuns, TaskContribution,
};

use crate::store::{SharedStore, StoreError};

/// Why a ledger operation failed: the store is its only way to fail.
pub type LedgerError = StoreError;
/// What the ledger's operations return.
pub type LedgerResult<T> = Result<T, LedgerError>;

/// The action log, the CPU-hour totals and the contributors table.
pub struct Ledger {
    store: SharedStore,
    /// Only the primary rebuilds the contributors table; a secondary re-reads it.
    primary: bool,
    /// Serialises the read-modify-write of the stored CPU-hour totals.
    cpu_hours_lock: Mutex<()>,
    /// CPU hours of finished tasks not yet added to the stored totals (username -> hours).
    /// Tasks finish under their run's lock, where no store write may happen; the write-behind
    /// adds these to the store each tick (and at shutdown).
    cpu_hours_pending: Mutex<HashMap<String, f64>>,
    /// The contributors table, kept up to date as tasks end and runs start.
    contributors: contributors::ContributorTable,
}

impl Ledger {
    /// The ledger of a store; nothing is read until [`Ledger::load_contributors`].
    pub fn new(store: SharedStore, primary: bool) -> Ledger {
        Ledger {
            store,
            primary,
            cpu_hours_lock: Mutex::new(()),
            cpu_hours_pending: Mutex::new(HashMap::new()),
            contributors: Default::default(),
        }
    }
}

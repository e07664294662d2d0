//! The ledger: what happened and who contributed. The action log (Fishtest's `actions`
//! documents), the CPU-hour totals stop_run's 1000-hour rule reads, and the contributors
//! table; the runs each user follows and the notices derived from the action log for them
//! (`follows.rs`, `notices.rs`).
//!
//! Owns: its state and locks (the pending CPU hours and their write lock, the contributors
//! table), the action document's shape ([`document`]), its reads ([`ActionFilter`]) and the
//! `shoal_kvstore` documents of the totals (`cpu_hours:<user>`, `contributor:<user>`,
//! `contributors:built:3`). It is told facts in plain values ([`TaskContribution`], a user and
//! their hours), so it knows nothing of runs: the run database computes a finished task's
//! figures and hands them over, and the one-time rebuild of the contributors table reads the
//! stored runs through [`StoredRuns`], which the run database implements.
//! Must not: know runs, tasks, HTTP or another component's state; call back into anything
//! that holds a run's lock (its locks are leaves: the `add_*` calls, made under a run's lock,
//! touch memory only); write the store under a run's lock.

mod actions;
mod contributors;
mod cpu_hours;
mod follows;
mod notices;

use std::collections::HashMap;
use std::sync::atomic::AtomicU64;

use parking_lot::Mutex;

pub use actions::{ACTION_KINDS, ActionFilter, HIDDEN_KINDS, MAX_IN, document};
pub use contributors::{
    Contributor, ContributorRow, DayTotals, MONTH_DAYS, RunContribution, SECONDARY_RELOAD,
    StoredRuns, TaskContribution,
};
pub use follows::{Follow, Followed, Follows, MAX_FOLLOWS};
pub use notices::{MAX_NOTICES, NOTICE_KINDS, Notice, SECONDARY_UNREAD_S, UNREAD_KEPT};

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
    /// Each user's follows (`follows.rs`).
    follows: follows::FollowTable,
    /// Bumped when an action of a notice kind is durable (`notices.rs`).
    notice_epoch: AtomicU64,
    /// Each user's unread count (`notices.rs`).
    unread: notices::UnreadCounts,
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
            follows: Default::default(),
            notice_epoch: AtomicU64::new(0),
            unread: Default::default(),
        }
    }
}

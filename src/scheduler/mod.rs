//! The scheduler: request_task's whole path in one place (docs/protocol.md#request_task),
//! from the admission gate to the answer, and the memory and policies only it needs.
//!
//! [`Scheduler::request_task`] is the path, in order:
//! 1. the gate's phase 1, a place ([`admission`]; refused at once or after the admission
//!    timeout: [`Outcome::TooBusy`], having cost nothing);
//! 2. the job handed in to the batches ([`batches`]), served by one slot holder on the pool's
//!    reserved token;
//! 3. the critical section ([`Scheduler::assign`], `assign.rs`): blocked worker, duplicate
//!    name, the worker-keyed limits, the choice of a run ([`rules`]: the run core's pure rules), the run-keyed
//!    limits, the task created under the run's lock and journalled;
//! 4. refused by a full configured limit: a bounded wait in that key's queue, then another
//!    pass with the reservation ([`batches::Waiting`]).
//!
//! Owns: `Sched` (the worker -> task map and each worker's runs, `memory.rs`), the blocked
//! workers (`workers.rs`), the limits' ids and grants, the maxima approvers set and the
//! floating limits' refresh (`limiter.rs`), the gate and its batches.
//! The run core ([`crate::rundb`]) owns the runs, their cache and journal, the tasks and a
//! run's counters; the scheduler reaches runs only through its verbs (a read-only scan of the
//! candidate runs, `add_task` with this module's grant decision run under the run's lock,
//! `fail_task`, read-only looks at one run). The run core releases a task's grants in the
//! limits engine, which both hold, when the task ends. The core never calls the scheduler:
//! what the scheduler remembers of a task it finds stale at the next request_task (the worker
//! -> task map is checked against the run) or forgets in `clean_worker_runs`.
//!
//! Lock order: this module is the only place where it crosses a module line. `sched` (here)
//! -> the run cache, read (`rundb`, taken by its verbs) -> one run's lock (the verbs run this
//! module's closures under it: they read the run and take grants in the limits engine, a
//! leaf) -> what the run core takes under it (`arch`, the limits engine, the ledger's,
//! `unfinished`, the journal, the store); never two run locks at once. The blocked set's lock (held across its store read and write) is
//! never held with `sched`: request_task drops it before taking `sched`. Nothing is held
//! across an `.await`: the critical section is blocking code on the slot holder's thread.
//! Must not: know HTTP (Fishtest's texts are the handler's); do work proportional to all tasks
//! ever created on request_task's path; run blocking code on the event loop.

pub mod admission;
mod assign;
pub mod batches;
// Test groups (issue 39): a group's takes placed as one run, its shares set by `groups`.
pub mod group_shares;
mod limiter;
mod memory;
/// The pure rules the scheduler applies (time controls, task sizes, itp, run order, the arch
/// filter) live in the run core, which needs them too.
pub use crate::rundb::schedule as rules;
#[cfg(test)]
mod tests;
pub mod workers;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::{Mutex, RwLock};

use crate::accounts::User;
use crate::config::Config;
use crate::limits::{Engine, Grant};
use crate::offload::Offload;
use crate::rundb::model::WorkerInfo;
use crate::rundb::outcome::{Assignment, Refusal};
use crate::rundb::{DbResult, RunDb, RunDbError, Ticket};
use admission::{Batches, Gate, GateConfig, Rejected};
pub use assign::DUPLICATE_WINDOW;
use batches::{Reserved, SchedBatches, Waiting};
use memory::Sched;

/// The scheduler's settings.
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// request_task's gate.
    pub gate: GateConfig,
    /// Jobs a slot holder serves before it lets the slot's other users in
    /// (`request_task_batch`).
    pub max_batch: usize,
    /// How long request_task waits in a full configured limit's queue (`limits_wait`).
    pub limits_wait: Duration,
}

impl SchedulerConfig {
    /// The settings from the configuration.
    pub fn of(config: &Config) -> Self {
        SchedulerConfig {
            gate: GateConfig::request_task(config),
            max_batch: config.request_task_batch,
            limits_wait: config.limits_wait(),
        }
    }
}

/// What request_task comes to.
#[derive(Debug)]
pub enum Outcome {
    /// The gate turned the caller away.
    TooBusy,
    /// The critical section's answer, with the ticket of its journal entry (a task) to await
    /// before replying.
    Served(Assignment, Option<Ticket>),
}

/// Why request_task failed.
#[derive(Debug, thiserror::Error)]
pub enum SchedError {
    /// The critical section failed.
    #[error(transparent)]
    Runs(#[from] RunDbError),
    /// The slot holder serving this caller failed before answering it.
    #[error(transparent)]
    Lost(Rejected),
}

/// The scheduler (module docs).
pub struct Scheduler {
    runs: Arc<RunDb>,
    sched: Mutex<Sched>,
    /// Blocked short worker names, refreshed from the store.
    blocked: RwLock<HashSet<String>>,
    /// The limits engine (the run core's, shared: it releases a task's grants).
    limits: Arc<Engine>,
    limit_ids: limiter::LimitIds,
    gate: Gate,
    /// request_task's jobs handed in to the gate, served in batches by the slot holder.
    batches: Arc<SchedBatches>,
    offload: Offload,
    limits_wait: Duration,
    /// Test groups' shares (issue 39), set by the groups component.
    group_shares: group_shares::GroupShares,
}

impl Scheduler {
    /// The scheduler over `runs`: the maxima approvers set applied; on the primary, its
    /// memory rebuilt from the unfinished runs and the blocked workers read. Blocking; call
    /// from the offload pool, after `RunDb::open` and before anything serves.
    pub fn open(runs: Arc<RunDb>, cfg: SchedulerConfig, offload: Offload) -> DbResult<Scheduler> {
        let limits = runs.limits().clone();
        let gate = Gate::new(cfg.gate);
        let batches = Arc::new(Batches::new(&gate, cfg.max_batch));
        let scheduler = Scheduler {
            limit_ids: limiter::LimitIds::of(&limits),
            limits,
            runs,
            sched: Mutex::new(Sched::default()),
            blocked: RwLock::new(HashSet::new()),
            gate,
            batches,
            offload,
            limits_wait: cfg.limits_wait,
            group_shares: Default::default(),
        };
        scheduler.load_limit_maxima()?;
        if scheduler.runs.is_primary() {
            scheduler.rebuild()?;
            scheduler.refresh_blocked()?;
        }
        Ok(scheduler)
    }

    /// request_task for an authenticated `user`: the gate, the batches, the critical section
    /// and, if a full configured limit refused the worker, a wait in that key's queue (well
    /// inside the worker's 30 s timeout, rather than sending it into its back-off) and
    /// another pass.
    pub async fn request_task(
        self: &Arc<Self>,
        user: &User,
        wi: WorkerInfo,
    ) -> Result<Outcome, SchedError> {
        let wait = self.limits_wait;
        let deadline = tokio::time::Instant::now() + wait;
        let mut reservation = None;
        loop {
            let _held = reservation.map(|r| Reserved::new(self.limits.clone(), r));
            let Some((reply, ticket)) = self.gated(user, wi.clone(), reservation).await? else {
                return Ok(Outcome::TooBusy);
            };
            if let Assignment::Refused(Refusal::Limit { limit, key, .. }) = &reply
                && !wait.is_zero()
                && tokio::time::Instant::now() < deadline
            {
                let grant = Grant {
                    limit: *limit,
                    key: key.clone(),
                    units: self.limits.units(*limit, wi.concurrency),
                    max: None,
                };
                if let Some(r) = Waiting::new(self.limits.clone(), &grant)
                    .reserved(deadline)
                    .await
                {
                    reservation = Some(r);
                    continue;
                }
            }
            return Ok(Outcome::Served(reply, ticket));
        }
    }

    /// request_task's gate (the debug routes and the ops view use it too).
    pub fn gate(&self) -> &Gate {
        &self.gate
    }

    /// request_task's batches.
    pub fn batches(&self) -> &SchedBatches {
        &self.batches
    }

    /// Test groups' shares (issue 39): set by the groups component, read by the choice.
    pub fn group_shares(&self) -> &group_shares::GroupShares {
        &self.group_shares
    }

    /// The limits engine (views, rate checks, waiting, edits).
    pub fn limits(&self) -> &Arc<Engine> {
        &self.limits
    }
}

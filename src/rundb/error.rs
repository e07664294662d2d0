//! Why a run database operation failed ([`RunDbError`]): what happened, with the ids and
//! values that say to what, and the operation it happened in ([`Op`]) where the callers'
//! answers differ by operation.
//!
//! Owns: the kinds of refusal (an unknown run or task, a task that is another worker's, a
//! run in the wrong state, a person without the right, a value out of range) and of failure
//! (the store, a corrupt document, a change asked of a secondary instance).
//! Must not: word replies or pick status codes. Fishtest's clients expect exact texts, and
//! one mapping at the API edge (`http::error`) makes them for the JSON API and the pages
//! alike, so a text is never written twice. The `Display` texts here are for logs.

use crate::spsa::SpsaError;
use crate::store::StoreError;

use super::create::ArgError;

/// The operation a refusal happened in: Fishtest words the same refusal (an unknown run, a
/// finished run, a run of another user) differently for each.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A worker's task-bound call (update_task, beat, request_spsa, failed_task, worker_log,
    /// upload_pgn, stop_run's look-ups).
    Task,
    /// A worker's stop_run (a fatal problem found by a worker).
    WorkerStop,
    /// An approver approves a run.
    Approve,
    /// The manual purge.
    Purge,
    /// `/tests/modify`.
    Modify,
    /// `/tests/delete`.
    Delete,
    /// `/tests/stop`: a person stops a run.
    UserStop,
}

/// A modify form's value the run database refuses (Fishtest's checks, in its order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ChangeRefused {
    /// More games asked of a fixed-games test.
    #[error("more games asked of a fixed-games test")]
    FixedGamesRaised,
    /// The games of an SPSA test changed (its hyperparameters depend on them).
    #[error("the games of an SPSA test changed")]
    SpsaGames,
    #[error("a negative number of games")]
    NegativeGames,
    /// The sliding window outside 1..=`create::MAX_ACTIVE_TASKS`.
    #[error("max_active_tasks {0} out of range")]
    WindowOutOfRange(u32),
    #[error("games not a multiple of 1000")]
    GamesNotMultiple,
    /// More games than `protocol::MAX_GAMES`.
    #[error("too many games")]
    TooManyGames,
    /// A new info with a control character other than a tab or a line break (the rule at
    /// creation, `create::text_without_controls`).
    #[error("control characters in the info")]
    InfoControl,
}

/// Why an operation failed. `http::error` maps each to its status code and Fishtest's text.
#[derive(Debug, thiserror::Error)]
pub enum RunDbError {
    /// The id names no run (or no run this instance has).
    #[error("no run {run_id} ({op:?})")]
    UnknownRun { run_id: String, op: Op },
    /// The run has no task with this id.
    #[error("run {run_id} has no task {task_id}")]
    UnknownTask { run_id: String, task_id: usize },
    /// The task is another worker's: its unique key is not this one.
    #[error("task {run_id}/{task_id} is not worker {unique_key}'s")]
    TaskOfOtherWorker {
        run_id: String,
        task_id: usize,
        unique_key: String,
    },
    /// The task is another user's.
    #[error("task {run_id}/{task_id} is not user {username}'s")]
    TaskOfOtherUser {
        run_id: String,
        task_id: usize,
        username: String,
    },
    /// Only approvers may do this.
    #[error("not an approver")]
    NotApprover,
    /// The submitter may not approve their own run.
    #[error("run {run_id}: self approval")]
    SelfApproval { run_id: String },
    #[error("run {run_id} is approved already")]
    AlreadyApproved { run_id: String },
    /// The run is finished (or deleted), and the operation needs it unfinished.
    #[error("run {run_id} is finished ({op:?})")]
    RunFinished { run_id: String, op: Op },
    #[error("run {run_id} is deleted already")]
    RunDeleted { run_id: String },
    /// Only a finished run can be purged.
    #[error("run {run_id} is not finished")]
    RunNotFinished { run_id: String },
    /// A failed run cannot be purged.
    #[error("run {run_id} failed")]
    RunFailed { run_id: String },
    /// The run started more than `PURGE_WINDOW` ago.
    #[error("run {run_id} is too old ({op:?})")]
    RunTooOld { run_id: String, op: Op },
    /// Neither the run's owner nor an approver.
    #[error("run {run_id} is not this user's ({op:?})")]
    NotYours { run_id: String, op: Op },
    /// A worker's user with fewer than `STOP_RUN_CPU_HOURS` may not fail a run.
    #[error("user {username} has too few CPU hours to stop a run")]
    TooFewCpuHours { username: String },
    /// A new run's argument refused (which one, and the message for the submitter).
    #[error("bad run argument {}: {}", .0.field, .0.message)]
    BadArgs(ArgError),
    /// A modify form's value refused.
    #[error("modify refused: {0}")]
    BadChange(ChangeRefused),
    /// A worker's counts that cannot be (`protocol::Stats::check` says why).
    #[error("task {run_id}/{task_id}: impossible stats: {reason}")]
    BadStats {
        run_id: String,
        task_id: usize,
        reason: String,
    },
    /// More games reported than the task has.
    #[error("task {run_id}/{task_id}: {reported} games reported of {size}")]
    MoreGamesThanTask {
        run_id: String,
        task_id: usize,
        reported: u64,
        size: u64,
    },
    /// An SPSA block counts more games than the update adds.
    #[error("task {run_id}/{task_id}: spsa block of {counted} games, {added} added")]
    SpsaGamesNotAdded {
        run_id: String,
        task_id: usize,
        counted: u64,
        added: u64,
    },
    /// The update would overflow the run's totals.
    #[error("task {run_id}/{task_id}: the run's totals would overflow")]
    TotalsOverflow { run_id: String, task_id: usize },
    /// request_spsa on a run that is not SPSA.
    #[error("run {run_id} is not SPSA")]
    NotSpsa { run_id: String },
    /// The SPSA step could not be drawn.
    #[error("request_spsa failed: {0}")]
    Spsa(SpsaError),
    /// A retention pass asked for a date before the calendar's start.
    #[error("no date {days} days before now")]
    NoDateBefore { days: u32 },
    /// A worker record named by something that is not a worker's name.
    #[error("{name:?} is not a worker name")]
    NotAWorkerName { name: String },
    /// Blocking a worker: neither its owner nor an approver.
    #[error("{username} may not block or unblock {worker}")]
    NotWorkerOwner { worker: String, username: String },
    /// Changing a limit: not an approver.
    #[error("{username} may not change limits")]
    LimitsNeedApprover { username: String },
    /// No configured limit of that name.
    #[error("no limit named {name}")]
    UnknownLimit { name: String },
    /// The limits engine refused the new max (its reason).
    #[error("limit {name}: {reason}")]
    BadLimitMax { name: String, reason: String },
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("corrupt run document {0}: {1}")]
    Corrupt(String, String),
    /// A run mutation asked of a secondary instance (only the primary changes runs).
    #[error("primary instance required")]
    NotPrimary,
}

pub type DbResult<T> = Result<T, RunDbError>;

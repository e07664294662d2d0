//! Typed outcomes of the worker operations: what the domain decided, in domain terms.
//!
//! Owns: [`Assignment`] (request_task: a task, or why there is none), [`TaskReply`] (what a
//! task-bound call learns about its task) and [`UpdateRejection`] (why update_task refused an
//! update the way Fishtest does).
//! Must not: carry wire shapes or message strings: Fishtest's JSON and its messages are built
//! in one place in the HTTP layer (`http::api::replies`), from these.

use super::model::{RunArgs, Stats};

/// What request_task decided for a worker.
#[derive(Debug, Clone)]
pub enum Assignment {
    /// A new task.
    Task(Box<TaskAssignment>),
    /// No run needs this worker now.
    NoTask,
    /// The chosen run stopped needing games between the choice and the task.
    RunNoLongerNeedsGames,
    /// The worker, its name or its address was refused.
    Refused(Refusal),
}

/// A task handed to a worker, with what the worker needs of its run.
#[derive(Debug, Clone)]
pub struct TaskAssignment {
    pub run_id: String,
    pub args: RunArgs,
    /// The opening book's subresource-integrity string, if the book is known.
    pub book_sri: Option<String>,
    pub task_id: usize,
    pub num_games: u64,
    /// The task's first game number in the run.
    pub start: u64,
    pub stats: Stats,
}

/// Why request_task refused a worker (a 200 reply with `error`: the worker backs off).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The worker's short name is blocked; `message` is the one its blocker left.
    BlockedWorker { name: String, message: String },
    /// Another worker with the same name sent an update recently.
    DuplicateName { name: String, seconds_ago: u64 },
    /// The user's machine limit from this address is reached.
    MachineLimit { limit: u32, addr: String },
    /// A configured limit keyed by the worker (user, address, worker, resource) is full.
    /// `limit` is the engine's id: the caller may wait in that key's queue.
    Limit {
        limit: usize,
        name: String,
        key: String,
        max: u64,
    },
}

/// What a task-bound call (update_task, beat, request_spsa, failed_task, stop_run,
/// worker_log, upload_pgn) learned about its task.
#[derive(Debug, Clone)]
pub enum TaskReply {
    /// The task lives on (`true`), or it has ended (`false`: the task's games are done, the
    /// run was decided, or a purge revived it for others).
    Alive(bool),
    /// The call came for a task that is no longer active; nothing changed.
    NotActive,
    /// update_task refused the update; the task was set inactive (Fishtest's rules).
    Rejected(UpdateRejection),
    /// request_spsa: the next batch's parameters.
    Spsa(crate::spsa::SpsaReply),
    /// Done, nothing to report.
    Done,
}

/// Why update_task refused an update (Fishtest's rejections; impossible counts are errors).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateRejection {
    GamesWentDown { from: u64, to: u64 },
    SpsaMustAddGames { from: u64, to: u64 },
    OddIncrement(u64),
    NotBatchMultiple { games: u64, batch: u64 },
    CountWentDown,
}

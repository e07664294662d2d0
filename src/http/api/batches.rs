//! request_task's queue as the gate's batches serve it: the job a caller hands in
//! ([`SchedJob`]), its result, and the scheduler's critical section run for each job by the
//! slot holder ([`Scheduler`]). A leaf under the handlers, since `AppState` holds the queue.

use std::sync::Arc;

use crate::accounts::User;
use crate::admission::{Batches, Service};
use crate::rundb::model::WorkerInfo;
use crate::rundb::outcome::Assignment;
use crate::rundb::{RunDb, RunDbError, Ticket};

/// A request_task handed in to the gate: what its critical section needs.
pub struct SchedJob {
    user: User,
    wi: WorkerInfo,
    reservation: Option<u64>,
}

impl SchedJob {
    pub fn new(user: User, wi: WorkerInfo, reservation: Option<u64>) -> Self {
        SchedJob {
            user,
            wi,
            reservation,
        }
    }
}

/// What a request_task's critical section answers.
pub type SchedResult = Result<(Assignment, Option<Ticket>), RunDbError>;

/// request_task's batches (`crate::admission::Batches`).
pub type SchedBatches = Batches<SchedJob, SchedResult>;

/// The scheduler as the slot holder runs it: one critical section per job.
pub struct Scheduler {
    db: Arc<RunDb>,
}

impl Scheduler {
    pub fn new(db: Arc<RunDb>) -> Self {
        Scheduler { db }
    }
}

impl Service<SchedJob, SchedResult> for Scheduler {
    fn serve(&mut self, job: SchedJob) -> SchedResult {
        self.db
            .request_task_reserved(&job.user, job.wi, job.reservation)
    }

    fn assigned(&self, result: &SchedResult) -> bool {
        matches!(result, Ok((Assignment::Task(_), _)))
    }

    fn orphaned(&mut self, result: SchedResult) {
        // The worker left while its section ran: nobody will play this task, so it does not
        // hold its run's window, its limits or the worker's name until the scavenger.
        if let Ok((Assignment::Task(t), _)) = result {
            self.db.withdraw_task(&t.run_id, t.task_id);
        }
    }
}

//! request_task's queue as the gate's batches serve it, and its bounded wait in a full
//! limit's queue: the job a caller hands in ([`SchedJob`]), its result, the critical section
//! run for each job by the slot holder ([`Serve`]), one pass through the gate
//! (`Scheduler::gated`), and the guards of a reservation ([`Waiting`], [`Reserved`]).
//!
//! Owns: starting the slot holder (detached from the caller's request, on the pool's reserved
//! token), taking back a task whose caller left while its section ran, and giving back a
//! reservation however a wait or a pass ends.
//! Must not: know HTTP (the handler turns the outcome into Fishtest's reply); hold a lock
//! across an `.await` (the critical section runs on the slot holder's pool thread).

use std::sync::Arc;

use tokio::time::timeout_at;

use super::admission::Service;
use super::{SchedError, Scheduler};
use crate::accounts::User;
use crate::limits::engine::WaitTicket;
use crate::limits::{Engine, Grant, Holder};
use crate::rundb::model::WorkerInfo;
use crate::rundb::outcome::Assignment;
use crate::rundb::{RunDbError, Ticket};

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

/// request_task's batches (`admission::Batches`).
pub type SchedBatches = super::admission::Batches<SchedJob, SchedResult>;

/// The scheduler as the slot holder runs it: one critical section per job.
pub struct Serve {
    scheduler: Arc<Scheduler>,
}

impl Serve {
    pub fn new(scheduler: Arc<Scheduler>) -> Self {
        Serve { scheduler }
    }
}

impl Service<SchedJob, SchedResult> for Serve {
    fn serve(&mut self, job: SchedJob) -> SchedResult {
        self.scheduler
            .assign_reserved(&job.user, job.wi, job.reservation)
    }

    fn assigned(&self, result: &SchedResult) -> bool {
        matches!(result, Ok((Assignment::Task(_), _)))
    }

    fn orphaned(&mut self, result: SchedResult) {
        // The worker left while its section ran: nobody will play this task, so it does not
        // hold its run's window, its limits or the worker's name until the scavenger.
        if let Ok((Assignment::Task(t), _)) = result {
            self.scheduler.withdraw_task(&t.run_id, t.task_id);
        }
    }
}

impl Scheduler {
    /// One pass through the gate and the critical section; `None`: the gate refused (too
    /// busy).
    pub(super) async fn gated(
        self: &Arc<Self>,
        user: &User,
        wi: WorkerInfo,
        reservation: Option<u64>,
    ) -> Result<Option<(Assignment, Option<Ticket>)>, SchedError> {
        // Phase 1 of the gate before any pool token: a refused caller costs nothing (no token,
        // no thread; docs/capacity.md).
        let Ok(place) = self.gate.admit().await else {
            return Ok(None);
        };
        // Phase 2: the job joins the queue (arrival order) and its caller waits for its
        // result; the slot holder serves the queue in order.
        let job = SchedJob::new(user.clone(), wi, reservation);
        let (mut pending, starter) = place.hand_in(&self.batches, job);
        if let Some(starter) = starter {
            // Nobody was serving: this caller starts the holder, detached from its own
            // request (its reply, like everyone's, goes out as soon as its own section is
            // done).
            let scheduler = self.clone();
            tokio::spawn(async move {
                let Ok(holder) = starter.slot().await else {
                    return;
                };
                let runtime = tokio::runtime::Handle::current();
                let offload = scheduler.offload.clone();
                let mut serve = Serve::new(scheduler);
                // The slot holder takes the pool's reserved token: it never queues behind
                // other traffic. The holder lives in the closure: the slot is held until it
                // is done.
                if let Err(e) = offload
                    .run_reserved(move || holder.serve(&mut serve, &runtime))
                    .await
                {
                    tracing::error!(error = %e, "request_task's slot holder failed");
                }
            });
        }
        match pending.result().await {
            Ok(result) => Ok(Some(result?)),
            Err(e) => Err(SchedError::Lost(e)),
        }
    }
}

/// A request_task queued in a full key: gives its reservation back however it ends (served
/// and not used, timed out, or the client gone).
pub struct Waiting {
    engine: Arc<Engine>,
    ticket: Option<WaitTicket>,
}

impl Waiting {
    /// Queues for `grant`'s key.
    pub fn new(engine: Arc<Engine>, grant: &Grant) -> Waiting {
        let ticket = engine.wait(grant, 0);
        Waiting {
            engine,
            ticket: Some(ticket),
        }
    }

    /// Waits until `deadline` for a reservation.
    pub async fn reserved(mut self, deadline: tokio::time::Instant) -> Option<u64> {
        let ticket = self.ticket.as_mut()?;
        match timeout_at(deadline, &mut ticket.rx).await {
            Ok(Ok(r)) => {
                self.ticket = None;
                Some(r)
            }
            _ => None,
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        if let Some(mut t) = self.ticket.take() {
            // Out of the queue first: after this nothing more can be sent.
            self.engine.cancel(&t);
            if let Ok(r) = t.rx.try_recv() {
                self.engine.release(&Holder::Reservation(r));
            } else {
                self.engine.count_rejection(t.limit, &t.key);
            }
        }
    }
}

/// A reservation a served waiter carries into its next pass: given back when dropped, however
/// the pass ended (a no-op once the scheduler turned it into a task or gave it back itself).
pub struct Reserved {
    engine: Arc<Engine>,
    id: u64,
}

impl Reserved {
    pub fn new(engine: Arc<Engine>, id: u64) -> Reserved {
        Reserved { engine, id }
    }
}

impl Drop for Reserved {
    fn drop(&mut self) {
        self.engine.release(&Holder::Reservation(self.id));
    }
}

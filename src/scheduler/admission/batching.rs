//! The gate's batches: callers hand their jobs in, one slot holder serves them in arrival
//! order (the module docs of [`super`] say how and why).
//!
//! Owns: the queue of handed-in jobs, the serving duty ([`Starter`], [`SlotHolder`]), the
//! [`Service`] a holder runs, and the throughput bookkeeping and its metrics.
//! Must not: take offload tokens or know what a job is (request_task's jobs are
//! `scheduler::batches`'s); hold the queue's lock while a job is served.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, oneshot};

use super::{Gate, GatePlace, Inner, Rejected, Tracked};

impl GatePlace {
    /// Phase 2 with batches: hands `job` in to `batches` (the queue's order is the order of
    /// hand-in) and returns the waiter, who awaits the job's result ([`Pending::result`]).
    /// When no holder is serving, the caller also gets the duty to start one ([`Starter`]):
    /// it must take the slot and serve (usually detached from its own request, so that its
    /// reply does not wait for the others'). The place stays held by the [`Pending`].
    pub fn hand_in<J, R>(
        self,
        batches: &Arc<Batches<J, R>>,
        job: J,
    ) -> (Pending<R>, Option<Starter<J, R>>) {
        debug_assert!(
            Arc::ptr_eq(&self.inner, &batches.gate),
            "batches belong to another gate"
        );
        let (tx, rx) = oneshot::channel();
        let start = {
            let mut q = batches.queue.lock();
            q.jobs.push_back(Queued {
                job,
                tx,
                since: self.since,
            });
            !std::mem::replace(&mut q.serving, true)
        };
        let GatePlace { entry, _queued, .. } = self;
        let pending = Pending {
            rx,
            _entry: entry,
            _queued,
        };
        let starter = start.then(|| Starter {
            duty: Duty::new(batches),
        });
        (pending, starter)
    }
}

/// What serves a batch's jobs (the critical section), and what happens to a result nobody
/// waits for any more.
pub trait Service<J, R> {
    /// Runs one job's critical section.
    fn serve(&mut self, job: J) -> R;
    /// Whether `result` counts as an assignment (`shoal_gate_assignments_per_second`).
    fn assigned(&self, result: &R) -> bool;
    /// The waiter left while its job was being served: `result` reached nobody. Undo what
    /// must not outlive the caller (request_task: the task handed to nobody).
    fn orphaned(&mut self, result: R);
}

/// One job handed in, waiting for the holder.
struct Queued<J, R> {
    job: J,
    tx: oneshot::Sender<R>,
    since: Instant,
}

/// The queue and whether a holder is serving it (started, waiting for the slot or serving),
/// under one small lock: hand-in and "nothing left, stop" are atomic with respect to each
/// other, so a job is never left without a holder.
struct Queue<J, R> {
    jobs: VecDeque<Queued<J, R>>,
    serving: bool,
}

/// The gate's throughput bookkeeping, under its own small lock (a few arithmetic operations
/// per batch).
#[derive(Debug)]
struct Throughput {
    second_start: Instant,
    in_second: u64,
    /// The rate of the last closed second, and the highest so far.
    last_rate: f64,
    peak: f64,
    /// Seconds a holder spent serving (from taking the slot until the queue was empty).
    busy: f64,
}

/// The jobs handed in to one gate, served in batches by the slot holder (module docs).
pub struct Batches<J, R> {
    gate: Arc<Inner>,
    max_batch: usize,
    queue: parking_lot::Mutex<Queue<J, R>>,
    throughput: parking_lot::Mutex<Throughput>,
}

impl<J, R> std::fmt::Debug for Batches<J, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let q = self.queue.lock();
        f.debug_struct("Batches")
            .field("gate", &self.gate.config.name)
            .field("max_batch", &self.max_batch)
            .field("queued", &q.jobs.len())
            .field("serving", &q.serving)
            .finish()
    }
}

/// A snapshot of a gate's batches.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BatchSnapshot {
    /// Jobs handed in and not yet taken by the holder (including those whose waiter has
    /// gone), and whether a holder is serving.
    pub queued: usize,
    pub serving: bool,
    /// Assignments over the last closed second (the gauge's value).
    pub per_second: f64,
}

impl<J, R> Batches<J, R> {
    /// The batches of `gate`: between two looks at the slot's other users, the holder serves
    /// at most `max_batch` jobs (at least 1).
    pub fn new(gate: &Gate, max_batch: usize) -> Self {
        let name = gate.inner.config.name;
        metrics::counter!("shoal_gate_served_total", "gate" => name).absolute(0);
        metrics::counter!("shoal_gate_skipped_total", "gate" => name).absolute(0);
        metrics::counter!("shoal_gate_batches_total", "gate" => name).absolute(0);
        metrics::counter!("shoal_gate_assigned_total", "gate" => name).absolute(0);
        metrics::gauge!("shoal_gate_assignments_per_second", "gate" => name).set(0.0);
        metrics::gauge!("shoal_gate_assignments_per_second_max", "gate" => name).set(0.0);
        metrics::gauge!("shoal_gate_busy_seconds", "gate" => name).set(0.0);
        metrics::gauge!("shoal_gate_max_batch", "gate" => name).set(max_batch.max(1) as f64);
        Batches {
            gate: gate.inner.clone(),
            max_batch: max_batch.max(1),
            queue: parking_lot::Mutex::new(Queue {
                jobs: VecDeque::new(),
                serving: false,
            }),
            throughput: parking_lot::Mutex::new(Throughput {
                second_start: Instant::now(),
                in_second: 0,
                last_rate: 0.0,
                peak: 0.0,
                busy: 0.0,
            }),
        }
    }

    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Closes the current second if it is over (also when nothing was assigned in it, so an
    /// idle gate reads 0/s): called per batch and by `/metrics`.
    pub fn refresh(&self) -> BatchSnapshot {
        let mut t = self.throughput.lock();
        Self::roll(&mut t, self.gate.config.name, Instant::now(), 0);
        let q = self.queue.lock();
        BatchSnapshot {
            queued: q.jobs.len(),
            serving: q.serving,
            per_second: t.last_rate,
        }
    }

    fn roll(t: &mut Throughput, name: &'static str, now: Instant, add: u64) {
        let elapsed = now.saturating_duration_since(t.second_start).as_secs_f64();
        if elapsed >= 1.0 {
            let rate = t.in_second as f64 / elapsed;
            t.last_rate = rate;
            t.peak = t.peak.max(rate);
            metrics::gauge!("shoal_gate_assignments_per_second", "gate" => name).set(rate);
            metrics::gauge!("shoal_gate_assignments_per_second_max", "gate" => name).set(t.peak);
            t.second_start = now;
            t.in_second = 0;
        }
        t.in_second += add;
    }
}

/// A caller whose job is handed in: holds its place until its result is in (or it leaves).
/// Dropping it (the client went away) gives the place back at once; the holder skips the
/// job.
pub struct Pending<R> {
    rx: oneshot::Receiver<R>,
    _entry: OwnedSemaphorePermit,
    _queued: Tracked,
}

impl<R> Pending<R> {
    /// The job's result. Cancellation-safe. [`Rejected::Lost`] if the holder failed
    /// (panicked) before answering it.
    pub async fn result(&mut self) -> Result<R, Rejected> {
        (&mut self.rx).await.map_err(|_| Rejected::Lost)
    }
}

/// "A holder is serving" until disarmed: if the holder ends any other way (a panic in a
/// section, a runtime shutting down before it got the slot), the queue is marked idle and
/// the jobs in it fail ([`Rejected::Lost`] for their waiters), so none waits forever.
struct Duty<J, R> {
    batches: Arc<Batches<J, R>>,
    armed: bool,
}

impl<J, R> Duty<J, R> {
    fn new(batches: &Arc<Batches<J, R>>) -> Self {
        Duty {
            batches: batches.clone(),
            armed: true,
        }
    }
}

impl<J, R> Drop for Duty<J, R> {
    fn drop(&mut self) {
        if self.armed {
            let lost = {
                let mut q = self.batches.queue.lock();
                q.serving = false;
                std::mem::take(&mut q.jobs)
            };
            if !lost.is_empty() {
                tracing::error!(
                    gate = self.batches.gate.config.name,
                    jobs = lost.len(),
                    "the slot holder ended without serving the queue; its callers are failed"
                );
            }
            // Dropped outside the lock: each waiter sees its sender gone.
            drop(lost);
        }
    }
}

/// The duty to serve the queue, given to the caller that found no holder serving.
pub struct Starter<J, R> {
    duty: Duty<J, R>,
}

impl<J, R> Starter<J, R> {
    /// Waits for the scheduler slot (in FIFO order with its other users, such as
    /// [`Gate::enter`]'s callers). Cancellation-safe: a dropped future fails the queue (see
    /// [`Duty`]) rather than strand it.
    pub async fn slot(self) -> Result<SlotHolder<J, R>, Rejected> {
        let inner = self.duty.batches.gate.clone();
        let permit = inner
            .slot
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Rejected::Full)?;
        Ok(SlotHolder {
            permit: Some(permit),
            _running: Tracked::new(&inner, true),
            duty: self.duty,
        })
    }
}

/// The scheduler slot, held to serve the queue. Dropping it frees the slot.
pub struct SlotHolder<J, R> {
    permit: Option<OwnedSemaphorePermit>,
    _running: Tracked,
    duty: Duty<J, R>,
}

impl<J, R> SlotHolder<J, R> {
    /// Serves the queue in arrival order until it is empty, one critical section after
    /// another on the calling thread (call it where blocking is allowed), each result handed
    /// to its waiter the moment it is ready; a job whose waiter has gone is skipped (its place
    /// is already free). After every `max_batch` jobs the slot is given back and taken again
    /// (`runtime` waits for it), so its other users are not shut out by a long queue. Returns
    /// how many jobs were served.
    pub fn serve<S: Service<J, R>>(mut self, service: &mut S, runtime: &Handle) -> usize {
        let batches = self.duty.batches.clone();
        let b = &*batches;
        let name = b.gate.config.name;
        let started = Instant::now();
        let mut total = 0usize;
        loop {
            let (served, skipped, assigned) = Self::batch(b, service);
            total += served;
            let counts = &b.gate.counts;
            counts.admitted.fetch_add(served as u64, Ordering::Relaxed);
            metrics::counter!("shoal_gate_admitted_total", "gate" => name).increment(served as u64);
            metrics::counter!("shoal_gate_served_total", "gate" => name).increment(served as u64);
            metrics::counter!("shoal_gate_assigned_total", "gate" => name).increment(assigned);
            if skipped > 0 {
                metrics::counter!("shoal_gate_skipped_total", "gate" => name).increment(skipped);
            }
            if served > 0 {
                metrics::counter!("shoal_gate_batches_total", "gate" => name).increment(1);
                metrics::histogram!("shoal_gate_batch_size", "gate" => name).record(served as f64);
            }
            {
                let mut t = b.throughput.lock();
                Batches::<J, R>::roll(&mut t, name, Instant::now(), assigned);
            }
            // The slot's other users get their turn between batches.
            drop(self.permit.take());
            {
                let mut q = b.queue.lock();
                if q.jobs.is_empty() {
                    q.serving = false;
                    self.duty.armed = false;
                    break;
                }
            }
            match runtime.block_on(b.gate.slot.clone().acquire_owned()) {
                Ok(permit) => self.permit = Some(permit),
                // The slot semaphore is never closed; if it were, the duty fails the queue.
                Err(_) => break,
            }
        }
        let mut t = b.throughput.lock();
        t.busy += started.elapsed().as_secs_f64();
        metrics::gauge!("shoal_gate_busy_seconds", "gate" => name).set(t.busy);
        total
    }

    /// One batch: at most `max_batch` jobs served, in queue order. (served, skipped, assigned)
    fn batch<S: Service<J, R>>(b: &Batches<J, R>, service: &mut S) -> (usize, u64, u64) {
        let name = b.gate.config.name;
        let waited = metrics::histogram!("shoal_gate_admission_to_slot_seconds", "gate" => name);
        let (mut served, mut skipped, mut assigned) = (0usize, 0u64, 0u64);
        while served < b.max_batch {
            let Some(q) = b.queue.lock().jobs.pop_front() else {
                break;
            };
            if q.tx.is_closed() {
                skipped += 1;
                continue;
            }
            waited.record(q.since.elapsed().as_secs_f64());
            let result = service.serve(q.job);
            if service.assigned(&result) {
                assigned += 1;
            }
            if let Err(result) = q.tx.send(result) {
                service.orphaned(result);
            }
            served += 1;
        }
        (served, skipped, assigned)
    }
}

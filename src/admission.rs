//! The admission gate: who may enter a critical section, who waits, who is turned away.
//!
//! Owns: the two-phase gate of seeds 000/001 and 003, as one reusable type.
//! - Phase 1, **entry**: a semaphore of `capacity` places (running + queued). In
//!   [`Admission::Immediate`] mode (Fishtest's fast-reject, `admission_queue = 0`) it is a
//!   non-blocking try-acquire; in [`Admission::Within`] mode (queue mode) the caller waits up
//!   to the admission timeout for a place. Either way a refused caller is answered at once
//!   and has cost nothing but a semaphore check.
//! - Phase 2, **slot**: a FIFO semaphore of `slots` permits (1 for request_task: the
//!   scheduler mutex). Admitted callers wait here patiently, asynchronously, holding no
//!   thread and no pool token.
//!
//! - **Batches** ([`Batches`], issue 15): instead of each admitted caller taking the slot for
//!   its own critical section, a caller hands its job in ([`GatePlace::hand_in`]) and awaits
//!   its result. The caller that finds nobody serving also gets the duty to serve
//!   ([`Starter`]): it takes the slot ([`SlotHolder`]) and, on one thread, serves the queue in
//!   arrival order, one critical section after another, each result handed to its waiter as
//!   soon as it is ready, until the queue is empty; jobs whose waiter has gone are skipped.
//!   Every `max_batch` jobs it gives the slot back and takes it again, so the slot's other
//!   users (a [`Gate::enter`] caller) get their turn. No hand-over between callers (slot
//!   released, next waiter woken on a busy event loop, a pool thread woken) is paid per
//!   caller: under a backlog there is none at all.
//!
//! Every place and slot lives in a guard, so it is given back on every path: success, error,
//! panic, and a future dropped because the client went away (cancellation-safe).
//! Must not: take offload tokens, know about HTTP or the scheduler. Callers take their pool
//! token *after* they hold a [`GatePermit`], and move the permit into the offloaded closure
//! so the slot stays held until the critical section's work really ends.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::runtime::Handle;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

/// How phase 1 treats a caller that finds the gate full.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Admission {
    /// Refuse at once (fast-reject mode).
    Immediate,
    /// Wait up to this long for a place, then refuse (queue mode).
    Within(Duration),
}

impl Admission {
    /// The label used in metrics.
    pub fn mode(&self) -> &'static str {
        match self {
            Admission::Immediate => "fast_reject",
            Admission::Within(_) => "queue",
        }
    }
}

/// The shape of a gate.
#[derive(Debug, Clone)]
pub struct GateConfig {
    /// Metrics label, e.g. "request_task".
    pub name: &'static str,
    /// Callers inside the critical section at once (phase 2 permits).
    pub slots: usize,
    /// Callers admitted at once, running plus queued (phase 1 places). At least `slots`.
    pub capacity: usize,
    pub admission: Admission,
}

impl GateConfig {
    /// The request_task gate from the settings: one scheduler slot; `task_semaphore_size`
    /// places in fast-reject mode, `task_semaphore_size + admission_queue` in queue mode.
    pub fn request_task(config: &crate::config::Config) -> Self {
        let admission = if config.admission_queue == 0 {
            Admission::Immediate
        } else {
            Admission::Within(config.admission_timeout())
        };
        GateConfig {
            name: "request_task",
            slots: 1,
            capacity: config.gate_capacity(),
            admission,
        }
    }
}

/// Why a caller was not admitted.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Rejected {
    #[error("the gate is full")]
    Full,
    #[error("no place in the gate within {0:?}")]
    Timeout(Duration),
    /// The slot holder serving this caller's job failed (panicked) before answering it.
    #[error("the critical section serving this request failed")]
    Lost,
}

#[derive(Debug, Default)]
struct Counts {
    running: AtomicUsize,
    queued: AtomicUsize,
    admitted: AtomicU64,
    rejected: AtomicU64,
}

/// A snapshot of a gate's counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GateSnapshot {
    pub running: usize,
    pub queued: usize,
    pub admitted: u64,
    pub rejected: u64,
}

#[derive(Debug)]
struct Inner {
    config: GateConfig,
    entry: Arc<Semaphore>,
    slot: Arc<Semaphore>,
    counts: Counts,
}

/// A cloneable handle to one gate.
#[derive(Debug, Clone)]
pub struct Gate {
    inner: Arc<Inner>,
}

/// Proof of being inside the critical section. Dropping it frees the slot and the place.
#[derive(Debug)]
pub struct GatePermit {
    _slot: OwnedSemaphorePermit,
    _entry: OwnedSemaphorePermit,
    _running: Tracked,
}

/// A place in the gate (phase 1), not yet the slot. Dropping it gives the place back.
#[derive(Debug)]
pub struct GatePlace {
    inner: Arc<Inner>,
    entry: OwnedSemaphorePermit,
    _queued: Tracked,
    /// When the place was given: the start of the admission-to-slot wait.
    since: Instant,
}

impl GatePlace {
    /// Phase 2: waits patiently, in FIFO order, for a slot. Cancellation-safe: a dropped
    /// future gives back the place.
    pub async fn slot(self) -> Result<GatePermit, Rejected> {
        // The slot semaphore is never closed, so this only fails if that invariant breaks;
        // treat it as a refusal rather than a panic.
        let slot = self
            .inner
            .slot
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| Rejected::Full)?;
        let GatePlace {
            inner,
            entry,
            _queued,
            ..
        } = self;
        drop(_queued);
        inner.counts.admitted.fetch_add(1, Ordering::Relaxed);
        metrics::counter!("shoal_gate_admitted_total", "gate" => inner.config.name).increment(1);
        Ok(GatePermit {
            _slot: slot,
            _entry: entry,
            _running: Tracked::new(&inner, true),
        })
    }
}

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

/// Increments a counter + gauge on creation and decrements both on drop.
#[derive(Debug)]
struct Tracked {
    inner: Arc<Inner>,
    running: bool,
}

impl Tracked {
    fn new(inner: &Arc<Inner>, running: bool) -> Self {
        let t = Tracked {
            inner: inner.clone(),
            running,
        };
        t.counter().fetch_add(1, Ordering::Relaxed);
        metrics::gauge!(t.gauge(), "gate" => inner.config.name).increment(1.0);
        t
    }

    fn counter(&self) -> &AtomicUsize {
        if self.running {
            &self.inner.counts.running
        } else {
            &self.inner.counts.queued
        }
    }

    fn gauge(&self) -> &'static str {
        if self.running {
            "shoal_gate_running"
        } else {
            "shoal_gate_queued"
        }
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.counter().fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!(self.gauge(), "gate" => self.inner.config.name).decrement(1.0);
    }
}

impl Gate {
    /// Builds a gate. `capacity` is raised to `slots` if smaller, and both to at least 1.
    pub fn new(mut config: GateConfig) -> Self {
        config.slots = config.slots.max(1);
        config.capacity = config.capacity.max(config.slots);
        let name = config.name;
        let mode = config.admission.mode();
        // Register the series so /metrics shows them at zero before the first caller.
        metrics::gauge!("shoal_gate_running", "gate" => name).set(0.0);
        metrics::gauge!("shoal_gate_queued", "gate" => name).set(0.0);
        metrics::gauge!("shoal_gate_capacity", "gate" => name).set(config.capacity as f64);
        metrics::counter!("shoal_gate_rejected_total", "gate" => name, "mode" => mode).absolute(0);
        metrics::counter!("shoal_gate_admitted_total", "gate" => name).absolute(0);
        Gate {
            inner: Arc::new(Inner {
                entry: Arc::new(Semaphore::new(config.capacity)),
                slot: Arc::new(Semaphore::new(config.slots)),
                config,
                counts: Counts::default(),
            }),
        }
    }

    pub fn config(&self) -> &GateConfig {
        &self.inner.config
    }

    /// Enters the gate: phase 1 (a place, immediately or within the timeout), then phase 2
    /// (a slot, patiently, in FIFO order). Cancellation-safe at every await.
    pub async fn enter(&self) -> Result<GatePermit, Rejected> {
        self.admit().await?.slot().await
    }

    /// Phase 1 alone: a place in the gate (running + queued), immediately or within the
    /// timeout. The caller may do admission-time work holding it (request_task checks the
    /// worker's credentials here, before any pool token and outside the critical section),
    /// then takes the slot with [`GatePlace::slot`]. Dropping the place gives it back.
    pub async fn admit(&self) -> Result<GatePlace, Rejected> {
        let inner = &self.inner;
        let entry = match inner.config.admission {
            Admission::Immediate => inner.entry.clone().try_acquire_owned().ok(),
            Admission::Within(limit) => {
                tokio::time::timeout(limit, inner.entry.clone().acquire_owned())
                    .await
                    .ok()
                    .and_then(Result::ok)
            }
        };
        let Some(entry) = entry else {
            inner.counts.rejected.fetch_add(1, Ordering::Relaxed);
            metrics::counter!(
                "shoal_gate_rejected_total",
                "gate" => inner.config.name,
                "mode" => inner.config.admission.mode()
            )
            .increment(1);
            return Err(match inner.config.admission {
                Admission::Immediate => Rejected::Full,
                Admission::Within(limit) => Rejected::Timeout(limit),
            });
        };
        Ok(GatePlace {
            inner: inner.clone(),
            entry,
            _queued: Tracked::new(inner, false),
            since: Instant::now(),
        })
    }

    pub fn snapshot(&self) -> GateSnapshot {
        let c = &self.inner.counts;
        GateSnapshot {
            running: c.running.load(Ordering::Relaxed),
            queued: c.queued.load(Ordering::Relaxed),
            admitted: c.admitted.load(Ordering::Relaxed),
            rejected: c.rejected.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn gate(slots: usize, capacity: usize, admission: Admission) -> Gate {
        Gate::new(GateConfig {
            name: "test",
            slots,
            capacity,
            admission,
        })
    }

    async fn settle<F: Fn() -> bool>(cond: F) {
        for _ in 0..2000 {
            if cond() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        panic!("condition not reached");
    }

    #[tokio::test]
    async fn fast_reject_refuses_beyond_capacity_at_once() {
        let g = gate(1, 3, Admission::Immediate);
        let first = g.enter().await.expect("admitted");
        let mut waiting = Vec::new();
        for _ in 0..2 {
            let g = g.clone();
            waiting.push(tokio::spawn(async move { g.enter().await.map(drop) }));
        }
        settle(|| g.snapshot().queued == 2).await;
        assert_eq!(g.enter().await.err(), Some(Rejected::Full));
        assert_eq!(g.snapshot().rejected, 1);
        drop(first);
        for w in waiting {
            w.await.expect("join").expect("admitted in turn");
        }
        let s = g.snapshot();
        assert_eq!((s.running, s.queued, s.admitted), (0, 0, 3));
    }

    #[tokio::test]
    async fn queue_mode_serves_in_fifo_order_and_times_out_the_rest() {
        let g = gate(1, 3, Admission::Within(Duration::from_millis(200)));
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let first = g.enter().await.expect("admitted");
        let mut tasks = Vec::new();
        for i in 0..4 {
            let gc = g.clone();
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                let permit = gc.enter().await?;
                order.lock().push(i);
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(permit);
                Ok::<_, Rejected>(())
            }));
            // Arrivals in a known order: the first two take the free places (callers 2 and 3
            // find none and wait for one).
            if i < 2 {
                settle(|| g.snapshot().queued == i + 1).await;
            }
        }
        // Callers 2 and 3 found no place: after 200 ms they are refused, while 0 and 1 wait
        // (nothing frees a place until `first` is dropped).
        settle(|| g.snapshot().rejected == 2).await;
        assert_eq!(g.snapshot().queued, 2);
        drop(first);
        let mut results = Vec::new();
        for t in tasks {
            results.push(t.await.expect("join"));
        }
        assert!(results[0].is_ok() && results[1].is_ok());
        assert!(matches!(results[2], Err(Rejected::Timeout(_))));
        assert_eq!(*order.lock(), vec![0, 1]);
        assert_eq!(g.snapshot().running + g.snapshot().queued, 0);
    }

    #[tokio::test]
    async fn dropped_waiter_gives_its_place_back() {
        let g = gate(1, 2, Admission::Immediate);
        let held = g.enter().await.expect("admitted");
        let g2 = g.clone();
        let waiter = tokio::spawn(async move { g2.enter().await.map(drop) });
        settle(|| g.snapshot().queued == 1).await;
        assert_eq!(g.enter().await.err(), Some(Rejected::Full));
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(g.snapshot().queued, 0);
        drop(held);
        // Both places are free again.
        let a = g.enter().await.expect("admitted");
        drop(a);
        assert_eq!(g.snapshot().running, 0);
    }

    #[tokio::test]
    async fn a_place_is_held_between_admission_and_slot_and_given_back_when_dropped() {
        let g = gate(1, 2, Admission::Immediate);
        let place = g.admit().await.expect("a place");
        assert_eq!((g.snapshot().queued, g.snapshot().running), (1, 0));
        let other = g.admit().await.expect("the second place");
        assert_eq!(g.admit().await.err(), Some(Rejected::Full));
        drop(other);
        let permit = place.slot().await.expect("the slot");
        assert_eq!((g.snapshot().queued, g.snapshot().running), (0, 1));
        // A place whose slot wait is cancelled gives the place back too.
        let waiting = g.admit().await.expect("a place");
        let wait = tokio::spawn(waiting.slot());
        settle(|| g.snapshot().queued == 1).await;
        wait.abort();
        let _ = wait.await;
        assert_eq!(g.snapshot().queued, 0);
        drop(permit);
        let s = g.snapshot();
        assert_eq!((s.running, s.queued, s.admitted, s.rejected), (0, 0, 1, 1));
    }

    /// A service that records the jobs it serves (job = number), answers `job * 10`, and
    /// can stop at a chosen job until the test lets it go on.
    #[derive(Clone, Default)]
    struct Recorder {
        served: Arc<parking_lot::Mutex<Vec<u32>>>,
        orphans: Arc<parking_lot::Mutex<Vec<u32>>>,
        batches: Arc<parking_lot::Mutex<Vec<usize>>>,
        /// (job, reached, go on): serving `job` signals `reached` and waits for `go on`.
        pause: Option<(u32, Arc<std::sync::Barrier>)>,
    }

    impl Service<u32, u32> for Recorder {
        fn serve(&mut self, job: u32) -> u32 {
            self.served.lock().push(job);
            if let Some((at, barrier)) = &self.pause
                && *at == job
            {
                barrier.wait(); // the test knows the batch is inside `job`
                barrier.wait(); // and lets it go on
            }
            job * 10
        }
        fn assigned(&self, _: &u32) -> bool {
            true
        }
        fn orphaned(&mut self, result: u32) {
            self.orphans.lock().push(result / 10);
        }
    }

    /// A caller as request_task's handler is one: a place, the job handed in, the holder
    /// started (detached) if nobody serves, then the result.
    async fn call(g: Gate, b: Arc<Batches<u32, u32>>, job: u32, svc: Recorder) -> u32 {
        let place = g.admit().await.expect("a place");
        let (mut pending, starter) = place.hand_in(&b, job);
        if let Some(starter) = starter {
            let mut svc = svc.clone();
            let record = svc.batches.clone();
            tokio::spawn(async move {
                let holder = starter.slot().await.expect("the slot");
                let runtime = Handle::current();
                let n = tokio::task::spawn_blocking(move || holder.serve(&mut svc, &runtime))
                    .await
                    .expect("join");
                record.lock().push(n);
            });
        }
        pending.result().await.expect("a result")
    }

    /// Hands in jobs `jobs` one after another (each queued before the next starts) while the
    /// slot is held by `blocker`, so the queue order is known.
    async fn queue_behind(
        g: &Gate,
        b: &Arc<Batches<u32, u32>>,
        jobs: std::ops::Range<u32>,
        svc: &Recorder,
    ) -> Vec<tokio::task::JoinHandle<u32>> {
        let mut handles = Vec::new();
        for job in jobs {
            let before = b.refresh().queued;
            handles.push(tokio::spawn(call(g.clone(), b.clone(), job, svc.clone())));
            settle(|| b.refresh().queued == before + 1).await;
        }
        handles
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_queue_is_served_in_order_by_one_holder() {
        let g = gate(1, 20, Admission::Immediate);
        let b = Arc::new(Batches::new(&g, 32));
        let svc = Recorder::default();
        let blocker = g.enter().await.expect("the slot");
        let handles = queue_behind(&g, &b, 0..8, &svc).await;
        assert!(b.refresh().serving, "the first caller started a holder");
        drop(blocker);
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(
                h.await.expect("join"),
                i as u32 * 10,
                "each waiter gets its own result"
            );
        }
        assert_eq!(*svc.served.lock(), (0..8).collect::<Vec<_>>());
        idle(&g, &b).await;
        // One holder served all eight (recorded once its thread is joined).
        settle(|| !svc.batches.lock().is_empty()).await;
        assert_eq!(*svc.batches.lock(), vec![8]);
        assert_eq!(g.inner.entry.available_permits(), 20);
        assert_eq!(g.inner.slot.available_permits(), 1);
        let s = g.snapshot();
        // The blocker and the eight.
        assert_eq!((s.running, s.queued, s.admitted), (0, 0, 9));
        // The next caller finds nobody serving and starts a holder again.
        assert_eq!(call(g.clone(), b.clone(), 9, svc.clone()).await, 90);
    }

    /// Polls `fut` once, with the calling task's waker: a future that awaits a semaphore is
    /// in the semaphore's FIFO queue once this returns `Pending` (tokio enqueues a waiter at
    /// its first poll), which is how a test knows the order of two waiters without sleeping.
    async fn poll_once<F: Future + Unpin>(fut: &mut F) -> std::task::Poll<F::Output> {
        std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *fut).poll(cx)))
            .await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn between_batches_the_slot_goes_to_its_other_users() {
        let g = gate(1, 20, Admission::Immediate);
        let b = Arc::new(Batches::new(&g, 3));
        let svc = Recorder::default();
        let blocker = g.enter().await.expect("the slot");
        // Eight jobs handed in, in order; the first caller gets the duty to serve them.
        let mut pendings = Vec::new();
        let mut starter = None;
        for job in 0..8 {
            let (pending, s) = g.admit().await.expect("a place").hand_in(&b, job);
            pendings.push(pending);
            starter = starter.or(s);
        }
        assert_eq!(b.refresh().queued, 8);
        // The holder waits for the slot first ...
        let mut holder = Box::pin(starter.expect("a holder to start").slot());
        assert!(
            poll_once(&mut holder).await.is_pending(),
            "the slot is held"
        );
        // ... then another user of the slot queues behind it (FIFO).
        let g2 = g.clone();
        let mut other = Box::pin(async move { g2.enter().await });
        assert!(poll_once(&mut other).await.is_pending(), "the slot is held");
        let served = svc.served.clone();
        let other = tokio::spawn(async move {
            let permit = other.await.expect("the slot");
            let seen = served.lock().len();
            drop(permit);
            seen
        });
        let mut service = svc.clone();
        let holder = tokio::spawn(async move {
            let holder = holder.await.expect("the slot");
            let runtime = Handle::current();
            tokio::task::spawn_blocking(move || holder.serve(&mut service, &runtime))
                .await
                .expect("join")
        });
        drop(blocker);
        for (i, pending) in pendings.iter_mut().enumerate() {
            assert_eq!(pending.result().await, Ok(i as u32 * 10));
        }
        // The other user got the slot after the first batch of three, then the holder went on.
        assert_eq!(other.await.expect("join"), 3);
        assert_eq!(
            holder.await.expect("join"),
            8,
            "one holder served all eight"
        );
        assert_eq!(*svc.served.lock(), (0..8).collect::<Vec<_>>());
        drop(pendings);
        idle(&g, &b).await;
        assert_eq!(b.refresh().queued, 0);
        assert_eq!(g.inner.slot.available_permits(), 1);
        assert_eq!(g.inner.entry.available_permits(), 20);
    }

    /// Waits until no holder serves and its slot and running count are given back (the
    /// holder marks the queue idle a moment before it is dropped).
    async fn idle(g: &Gate, b: &Batches<u32, u32>) {
        settle(|| !b.refresh().serving && g.snapshot().running == 0).await;
    }

    /// Both sides of the pause in [`Recorder::serve`] meet here (the test on a blocking thread).
    async fn meet(barrier: &Arc<std::sync::Barrier>) {
        let wait = barrier.clone();
        tokio::task::spawn_blocking(move || wait.wait())
            .await
            .expect("join");
    }

    type Paused = (
        Gate,
        Arc<Batches<u32, u32>>,
        Recorder,
        Arc<std::sync::Barrier>,
        Vec<tokio::task::JoinHandle<u32>>,
    );

    /// `jobs` callers queued in order behind a held slot, the slot then freed; the holder
    /// will pause inside job `at` until the test meets it twice.
    async fn paused_at(at: u32, jobs: u32) -> Paused {
        let g = gate(1, 20, Admission::Immediate);
        let b = Arc::new(Batches::new(&g, 32));
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let svc = Recorder {
            pause: Some((at, barrier.clone())),
            ..Recorder::default()
        };
        let blocker = g.enter().await.expect("the slot");
        let handles = queue_behind(&g, &b, 0..jobs, &svc).await;
        drop(blocker);
        (g, b, svc, barrier, handles)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_gone_mid_batch_is_skipped_and_its_place_freed() {
        let (g, b, svc, barrier, mut handles) = paused_at(1, 6).await;
        // The holder is inside job 1: job 3's client goes away now.
        meet(&barrier).await;
        let gone = handles.remove(3);
        gone.abort();
        assert!(gone.await.is_err(), "aborted");
        // Its place is back at once, while the holder still serves. (Job 0 answered: 5
        // places are still held.)
        settle(|| g.inner.entry.available_permits() == 20 - 4).await;
        meet(&barrier).await;
        let results: Vec<u32> = futures_results(handles).await;
        assert_eq!(results, vec![0, 10, 20, 40, 50]);
        assert_eq!(*svc.served.lock(), vec![0, 1, 2, 4, 5], "job 3 skipped");
        assert!(svc.orphans.lock().is_empty());
        idle(&g, &b).await;
        assert_eq!(g.inner.entry.available_permits(), 20, "no place leaked");
        assert_eq!(g.inner.slot.available_permits(), 1);
        let s = g.snapshot();
        assert_eq!((s.running, s.queued), (0, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_waiter_gone_during_its_own_section_gets_its_result_orphaned() {
        let (g, b, svc, barrier, mut handles) = paused_at(2, 4).await;
        meet(&barrier).await;
        // Job 2 is being served; its client leaves before the result is sent.
        let gone = handles.remove(2);
        gone.abort();
        assert!(gone.await.is_err());
        meet(&barrier).await;
        assert_eq!(futures_results(handles).await, vec![0, 10, 30]);
        assert_eq!(
            *svc.orphans.lock(),
            vec![2],
            "the result nobody received is undone"
        );
        idle(&g, &b).await;
        assert_eq!(g.inner.entry.available_permits(), 20);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_panicking_section_fails_the_queue_not_the_gate() {
        struct Panics;
        impl Service<u32, u32> for Panics {
            fn serve(&mut self, job: u32) -> u32 {
                assert!(job != 1, "deliberate panic in the section");
                job
            }
            fn assigned(&self, _: &u32) -> bool {
                false
            }
            fn orphaned(&mut self, _: u32) {}
        }
        let g = gate(1, 20, Admission::Immediate);
        let b: Arc<Batches<u32, u32>> = Arc::new(Batches::new(&g, 32));
        let blocker = g.enter().await.expect("the slot");
        let mut pendings = Vec::new();
        let mut starter = None;
        for job in 0..3 {
            let place = g.admit().await.expect("a place");
            let (pending, s) = place.hand_in(&b, job);
            pendings.push(pending);
            starter = starter.or(s);
        }
        drop(blocker);
        let holder = starter
            .expect("the first caller starts a holder")
            .slot()
            .await
            .expect("the slot");
        let runtime = Handle::current();
        let joined = tokio::task::spawn_blocking(move || holder.serve(&mut Panics, &runtime)).await;
        assert!(joined.is_err(), "the holder panicked");
        // Job 0 was answered before the panic; jobs 1 and 2 fail rather than wait forever.
        assert_eq!(pendings[0].result().await, Ok(0));
        assert_eq!(pendings[1].result().await, Err(Rejected::Lost));
        assert_eq!(pendings[2].result().await, Err(Rejected::Lost));
        assert!(!b.refresh().serving);
        drop(pendings);
        // The gate is whole, and the next caller starts a new holder.
        assert_eq!(g.inner.entry.available_permits(), 20);
        assert_eq!(g.inner.slot.available_permits(), 1);
        let place = g.admit().await.expect("a place");
        let (mut pending, starter) = place.hand_in(&b, 7);
        let holder = starter
            .expect("a new holder")
            .slot()
            .await
            .expect("the slot");
        let runtime = Handle::current();
        tokio::task::spawn_blocking(move || holder.serve(&mut Panics, &runtime))
            .await
            .expect("no panic");
        assert_eq!(pending.result().await, Ok(7));
    }

    async fn futures_results(handles: Vec<tokio::task::JoinHandle<u32>>) -> Vec<u32> {
        let mut out = Vec::new();
        for h in handles {
            out.push(h.await.expect("join"));
        }
        out
    }

    #[derive(Debug, Clone)]
    struct Caller {
        delay_ms: u64,
        hold_ms: u64,
        cancel_after_ms: Option<u64>,
    }

    fn caller() -> impl Strategy<Value = Caller> {
        (0u64..20, 0u64..10, proptest::option::of(0u64..15)).prop_map(
            |(delay_ms, hold_ms, cancel_after_ms)| Caller {
                delay_ms,
                hold_ms,
                cancel_after_ms,
            },
        )
    }

    struct Inside(Arc<AtomicUsize>);

    impl Inside {
        fn enter(inside: &Arc<AtomicUsize>, max: &AtomicUsize) -> Inside {
            let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
            max.fetch_max(now, Ordering::SeqCst);
            Inside(inside.clone())
        }
    }

    impl Drop for Inside {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, .. ProptestConfig::default() })]

        /// Whatever the arrivals, holds and cancellations: never more than `slots` inside,
        /// never more than `capacity` admitted, and every count back at zero at the end.
        #[test]
        fn gate_invariants_hold_under_random_traffic(
            slots in 1usize..3,
            extra in 0usize..4,
            queue_mode in any::<bool>(),
            callers in proptest::collection::vec(caller(), 1..24),
        ) {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let admission = if queue_mode {
                    Admission::Within(Duration::from_millis(5))
                } else {
                    Admission::Immediate
                };
                let g = gate(slots, slots + extra, admission);
                let inside = Arc::new(AtomicUsize::new(0));
                let max_inside = Arc::new(AtomicUsize::new(0));
                let mut handles = Vec::new();
                for c in callers {
                    let g = g.clone();
                    let inside = inside.clone();
                    let max_inside = max_inside.clone();
                    let fut = async move {
                        tokio::time::sleep(Duration::from_millis(c.delay_ms)).await;
                        if let Ok(permit) = g.enter().await {
                            // Declared after the permit, so dropped before it, on abort too.
                            let _inside = Inside::enter(&inside, &max_inside);
                            let s = g.snapshot();
                            assert!(s.running + s.queued <= g.config().capacity);
                            tokio::time::sleep(Duration::from_millis(c.hold_ms)).await;
                            drop(_inside);
                            drop(permit);
                        }
                    };
                    let h = tokio::spawn(fut);
                    handles.push((h, c.cancel_after_ms));
                }
                for (h, cancel) in handles {
                    if let Some(ms) = cancel {
                        tokio::time::sleep(Duration::from_millis(ms)).await;
                        h.abort();
                    }
                    let _ = h.await;
                }
                assert!(max_inside.load(Ordering::SeqCst) <= slots);
                let s = g.snapshot();
                assert_eq!((s.running, s.queued), (0, 0));
                // Every place and slot is free again.
                assert_eq!(g.inner.entry.available_permits(), slots + extra);
                assert_eq!(g.inner.slot.available_permits(), slots);
            });
        }
    }
}

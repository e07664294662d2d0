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
//!   its own critical section, a caller hands its job in ([`GatePlace::hand_in`]) and waits
//!   for either its result or the slot. The caller that gets the slot ([`SlotHolder`]) serves
//!   the queued jobs in queue order, one after another on one thread, up to a bounded batch,
//!   handing each result back to its waiter; jobs whose waiter has gone are skipped. One
//!   hand-over (slot released, next holder woken, a pool thread woken) then serves a batch,
//!   not one caller.
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
    /// Phase 2 with batches: hands `job` in to `batches` (queue order is the order of
    /// hand-in) and returns the waiter, who gets either the job's result from whichever caller
    /// holds the slot, or the slot itself and then serves a batch ([`Pending::turn`]). The
    /// place stays held by the [`Pending`] until it is dropped.
    pub fn hand_in<J, R>(self, batches: &Arc<Batches<J, R>>, job: J) -> Pending<J, R> {
        debug_assert!(
            Arc::ptr_eq(&self.inner, &batches.gate),
            "batches belong to another gate"
        );
        let (tx, rx) = oneshot::channel();
        batches.queue.lock().push_back(Queued {
            job,
            tx,
            since: self.since,
        });
        let GatePlace {
            inner,
            entry,
            _queued,
            ..
        } = self;
        Pending {
            inner,
            batches: batches.clone(),
            rx,
            _entry: entry,
            _queued,
        }
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

/// One job handed in, waiting for a slot holder.
struct Queued<J, R> {
    job: J,
    tx: oneshot::Sender<R>,
    since: Instant,
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
    /// Seconds the slot was held by batch holders, plus the hand-overs between batches while
    /// jobs were waiting.
    busy: f64,
    /// When the last batch ended, and whether jobs were still waiting then.
    last_end: Option<(Instant, bool)>,
}

/// The jobs handed in to one gate, served in batches by whoever holds its slot (module docs).
pub struct Batches<J, R> {
    gate: Arc<Inner>,
    max_batch: usize,
    queue: parking_lot::Mutex<VecDeque<Queued<J, R>>>,
    throughput: parking_lot::Mutex<Throughput>,
}

impl<J, R> std::fmt::Debug for Batches<J, R> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batches")
            .field("gate", &self.gate.config.name)
            .field("max_batch", &self.max_batch)
            .field("queued", &self.queue.lock().len())
            .finish()
    }
}

/// A snapshot of a gate's batches.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct BatchSnapshot {
    /// Jobs handed in and not yet taken by a holder (including those whose waiter has gone).
    pub queued: usize,
    /// Assignments over the last full second, and the most seen in one second.
    pub per_second: f64,
    pub peak_per_second: f64,
    /// Seconds the slot spent serving batches or handing over while jobs waited.
    pub busy_seconds: f64,
}

impl<J, R> Batches<J, R> {
    /// The batches of `gate`: each holder serves at most `max_batch` jobs (at least 1).
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
            queue: parking_lot::Mutex::new(VecDeque::new()),
            throughput: parking_lot::Mutex::new(Throughput {
                second_start: Instant::now(),
                in_second: 0,
                last_rate: 0.0,
                peak: 0.0,
                busy: 0.0,
                last_end: None,
            }),
        }
    }

    pub fn max_batch(&self) -> usize {
        self.max_batch
    }

    /// Closes the current second if it is over (also when nothing was assigned in it, so an
    /// idle gate reads 0/s): called per assignment and by `/metrics`.
    pub fn refresh(&self) -> BatchSnapshot {
        let mut t = self.throughput.lock();
        Self::roll(&mut t, self.gate.config.name, Instant::now(), 0);
        BatchSnapshot {
            queued: self.queue.lock().len(),
            per_second: t.last_rate,
            peak_per_second: t.peak,
            busy_seconds: t.busy,
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
/// Dropping it (the client went away) gives the place back at once; a holder skips the job.
pub struct Pending<J, R> {
    inner: Arc<Inner>,
    batches: Arc<Batches<J, R>>,
    rx: oneshot::Receiver<R>,
    _entry: OwnedSemaphorePermit,
    _queued: Tracked,
}

/// What a waiter's turn brings.
pub enum Turn<J, R> {
    /// A holder served the job: here is its result.
    Served(R),
    /// The slot: serve a batch ([`SlotHolder::serve`], on a thread that may block), then call
    /// [`Pending::turn`] again (the job is usually in the batch; if it was beyond the batch's
    /// bound, the caller waits again in queue order).
    Hold(SlotHolder<J, R>),
}

impl<J, R> Pending<J, R> {
    /// Waits for the job's result or the slot, whichever comes first (a result that is
    /// already in wins). Cancellation-safe: dropping the future or the `Pending` leaves
    /// the job to be skipped and gives the place back.
    pub async fn turn(&mut self) -> Result<Turn<J, R>, Rejected> {
        let slot = self.inner.slot.clone();
        tokio::select! {
            biased;
            result = &mut self.rx => result.map(Turn::Served).map_err(|_| Rejected::Lost),
            permit = slot.acquire_owned() => {
                let permit = permit.map_err(|_| Rejected::Full)?;
                match self.rx.try_recv() {
                    // Served while the slot came: give the slot straight back.
                    Ok(result) => Ok(Turn::Served(result)),
                    Err(oneshot::error::TryRecvError::Closed) => Err(Rejected::Lost),
                    Err(oneshot::error::TryRecvError::Empty) => Ok(Turn::Hold(SlotHolder {
                        _slot: permit,
                        _running: Tracked::new(&self.inner, true),
                        batches: self.batches.clone(),
                        since: Instant::now(),
                    })),
                }
            }
        }
    }
}

/// The scheduler slot, held to serve one batch. Dropping it (after [`SlotHolder::serve`], or
/// on a panic inside it) frees the slot for the next waiter.
pub struct SlotHolder<J, R> {
    _slot: OwnedSemaphorePermit,
    _running: Tracked,
    batches: Arc<Batches<J, R>>,
    since: Instant,
}

impl<J, R> SlotHolder<J, R> {
    /// Serves up to the bound's jobs in queue order, each result handed to its waiter;
    /// a job whose waiter has gone is skipped (its place is already free). Runs the
    /// critical sections on the calling thread: call it where blocking is allowed. Returns
    /// how many jobs were served.
    pub fn serve<S: Service<J, R>>(self, service: &mut S) -> usize {
        let b = &*self.batches;
        let name = b.gate.config.name;
        let mut served = 0usize;
        let mut skipped = 0u64;
        let mut assigned = 0u64;
        while served < b.max_batch {
            let Some(q) = b.queue.lock().pop_front() else {
                break;
            };
            if q.tx.is_closed() {
                skipped += 1;
                continue;
            }
            metrics::histogram!("shoal_gate_admission_to_slot_seconds", "gate" => name)
                .record(q.since.elapsed().as_secs_f64());
            let result = service.serve(q.job);
            if service.assigned(&result) {
                assigned += 1;
            }
            if let Err(result) = q.tx.send(result) {
                service.orphaned(result);
            }
            served += 1;
        }
        let end = Instant::now();
        let waiting = !b.queue.lock().is_empty();
        {
            let mut t = b.throughput.lock();
            if let Some((last, true)) = t.last_end {
                // The hand-over from the previous batch, during which jobs waited.
                t.busy += self.since.saturating_duration_since(last).as_secs_f64();
            }
            t.busy += end.saturating_duration_since(self.since).as_secs_f64();
            t.last_end = Some((end, waiting));
            Batches::<J, R>::roll(&mut t, name, end, assigned);
            metrics::gauge!("shoal_gate_busy_seconds", "gate" => name).set(t.busy);
        }
        let counts = &b.gate.counts;
        counts.admitted.fetch_add(served as u64, Ordering::Relaxed);
        metrics::counter!("shoal_gate_admitted_total", "gate" => name).increment(served as u64);
        metrics::counter!("shoal_gate_served_total", "gate" => name).increment(served as u64);
        metrics::counter!("shoal_gate_batches_total", "gate" => name).increment(1);
        if skipped > 0 {
            metrics::counter!("shoal_gate_skipped_total", "gate" => name).increment(skipped);
        }
        metrics::counter!("shoal_gate_assigned_total", "gate" => name).increment(assigned);
        metrics::histogram!("shoal_gate_batch_size", "gate" => name).record(served as f64);
        served
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
            // Arrivals in a known order: the first two take the free places.
            if i < 2 {
                settle(|| g.snapshot().queued == i + 1).await;
            } else {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }
        // Callers 2 and 3 found no place; after 200 ms they are refused, while 0 and 1 wait.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(g.snapshot().rejected, 2);
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

    /// A caller as request_task's handler is one: a place, the job handed in, then turns
    /// until the result is in; a holder serves its batch on a blocking thread.
    async fn call(g: Gate, b: Arc<Batches<u32, u32>>, job: u32, svc: Recorder) -> u32 {
        let place = g.admit().await.expect("a place");
        let mut pending = place.hand_in(&b, job);
        loop {
            match pending.turn().await.expect("a turn") {
                Turn::Served(r) => return r,
                Turn::Hold(holder) => {
                    let mut svc = svc.clone();
                    let record = svc.batches.clone();
                    let n = tokio::task::spawn_blocking(move || holder.serve(&mut svc))
                        .await
                        .expect("join");
                    record.lock().push(n);
                }
            }
        }
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

    #[tokio::test]
    async fn a_batch_is_served_in_queue_order_by_one_holder() {
        let g = gate(1, 20, Admission::Immediate);
        let b = Arc::new(Batches::new(&g, 32));
        let svc = Recorder::default();
        let blocker = g.enter().await.expect("the slot");
        let handles = queue_behind(&g, &b, 0..8, &svc).await;
        drop(blocker);
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(
                h.await.expect("join"),
                i as u32 * 10,
                "each waiter gets its own result"
            );
        }
        assert_eq!(*svc.served.lock(), (0..8).collect::<Vec<_>>());
        // One hand-over served all eight.
        assert_eq!(*svc.batches.lock(), vec![8]);
        assert_eq!(g.inner.entry.available_permits(), 20);
        assert_eq!(g.inner.slot.available_permits(), 1);
        let s = g.snapshot();
        // The blocker and the eight.
        assert_eq!((s.running, s.queued, s.admitted), (0, 0, 9));
    }

    #[tokio::test]
    async fn the_batch_bound_hands_the_rest_to_the_next_holder_in_order() {
        let g = gate(1, 20, Admission::Immediate);
        let b = Arc::new(Batches::new(&g, 3));
        let svc = Recorder::default();
        let blocker = g.enter().await.expect("the slot");
        let handles = queue_behind(&g, &b, 0..8, &svc).await;
        drop(blocker);
        for (i, h) in handles.into_iter().enumerate() {
            assert_eq!(h.await.expect("join"), i as u32 * 10);
        }
        assert_eq!(*svc.served.lock(), (0..8).collect::<Vec<_>>());
        let batches = svc.batches.lock().clone();
        assert!(batches.iter().all(|&n| n <= 3), "{batches:?}");
        assert_eq!(batches.iter().sum::<usize>(), 8, "{batches:?}");
        assert_eq!(b.refresh().queued, 0);
    }

    #[tokio::test]
    async fn a_waiter_gone_mid_batch_is_skipped_and_its_place_freed() {
        let g = gate(1, 20, Admission::Immediate);
        let b = Arc::new(Batches::new(&g, 32));
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let svc = Recorder {
            pause: Some((1, barrier.clone())),
            ..Recorder::default()
        };
        let blocker = g.enter().await.expect("the slot");
        let mut handles = queue_behind(&g, &b, 0..6, &svc).await;
        drop(blocker);
        // The batch is inside job 1: job 3's client goes away now.
        let wait = barrier.clone();
        tokio::task::spawn_blocking(move || wait.wait())
            .await
            .expect("join");
        let gone = handles.remove(3);
        gone.abort();
        assert!(gone.await.is_err(), "aborted");
        // Its place is back at once, while the batch still runs.
        settle(|| g.inner.entry.available_permits() == 20 - 5).await;
        let wait = barrier.clone();
        tokio::task::spawn_blocking(move || wait.wait())
            .await
            .expect("join");
        let results: Vec<u32> = futures_results(handles).await;
        assert_eq!(results, vec![0, 10, 20, 40, 50]);
        assert_eq!(*svc.served.lock(), vec![0, 1, 2, 4, 5], "job 3 skipped");
        assert!(svc.orphans.lock().is_empty());
        assert_eq!(g.inner.entry.available_permits(), 20, "no place leaked");
        assert_eq!(g.inner.slot.available_permits(), 1);
        let s = g.snapshot();
        assert_eq!((s.running, s.queued), (0, 0));
    }

    #[tokio::test]
    async fn a_waiter_gone_during_its_own_section_gets_its_result_orphaned() {
        let g = gate(1, 20, Admission::Immediate);
        let b = Arc::new(Batches::new(&g, 32));
        let barrier = Arc::new(std::sync::Barrier::new(2));
        let svc = Recorder {
            pause: Some((2, barrier.clone())),
            ..Recorder::default()
        };
        let blocker = g.enter().await.expect("the slot");
        let mut handles = queue_behind(&g, &b, 0..4, &svc).await;
        drop(blocker);
        let wait = barrier.clone();
        tokio::task::spawn_blocking(move || wait.wait())
            .await
            .expect("join");
        // Job 2 is being served; its client leaves before the result is sent.
        let gone = handles.remove(2);
        gone.abort();
        assert!(gone.await.is_err());
        let wait = barrier.clone();
        tokio::task::spawn_blocking(move || wait.wait())
            .await
            .expect("join");
        assert_eq!(futures_results(handles).await, vec![0, 10, 30]);
        assert_eq!(
            *svc.orphans.lock(),
            vec![2],
            "the result nobody received is undone"
        );
        assert_eq!(g.inner.entry.available_permits(), 20);
    }

    #[tokio::test]
    async fn a_panicking_section_fails_its_batch_not_the_gate() {
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
        for job in 0..3 {
            let place = g.admit().await.expect("a place");
            pendings.push(place.hand_in(&b, job));
        }
        drop(blocker);
        let Turn::Hold(holder) = pendings[0].turn().await.expect("turn") else {
            panic!("the first waiter holds the slot");
        };
        let joined = tokio::task::spawn_blocking(move || holder.serve(&mut Panics)).await;
        assert!(joined.is_err(), "the batch panicked");
        // Job 0 was answered before the panic, job 1 is lost, job 2 is served next.
        assert!(matches!(pendings[0].turn().await, Ok(Turn::Served(0))));
        assert_eq!(pendings[1].turn().await.err(), Some(Rejected::Lost));
        let Turn::Hold(holder) = pendings[2].turn().await.expect("turn") else {
            panic!("the slot is free again");
        };
        tokio::task::spawn_blocking(move || holder.serve(&mut Panics))
            .await
            .expect("no panic");
        assert!(matches!(pendings[2].turn().await, Ok(Turn::Served(2))));
        drop(pendings);
        assert_eq!(g.inner.entry.available_permits(), 20);
        assert_eq!(g.inner.slot.available_permits(), 1);
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

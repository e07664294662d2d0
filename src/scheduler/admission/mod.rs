//! The admission gate: who may enter a critical section, who waits, who is turned away.
//!
//! Owns: the two-phase gate, as one reusable type.
//! - Phase 1, **entry**: a semaphore of `capacity` places (running + queued). In
//!   [`Admission::Immediate`] mode (Fishtest's fast-reject, `admission_queue = 0`) it is a
//!   non-blocking try-acquire; in [`Admission::Within`] mode (queue mode) the caller waits up
//!   to the admission timeout for a place. Either way a refused caller is answered at once
//!   and has cost nothing but a semaphore check.
//! - Phase 2, **slot**: a FIFO semaphore of `slots` permits (1 for request_task: the
//!   scheduler mutex). Admitted callers wait here patiently, asynchronously, holding no
//!   thread and no pool token.
//!
//! - **Batches** ([`Batches`], `batching.rs`): instead of each admitted caller taking the slot
//!   for its own critical section, a caller hands its job in ([`GatePlace::hand_in`]) and
//!   awaits its result. The caller that finds nobody serving also gets the duty to serve
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
//! Must not: take offload tokens, know about HTTP or what a job is (request_task's jobs are
//! `scheduler::batches`'s). Callers take their pool token *after* they hold a
//! [`GatePermit`], and move the permit into the offloaded closure so the slot stays held
//! until the critical section's work really ends.

mod batching;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

pub use batching::{BatchSnapshot, Batches, Pending, Service, SlotHolder, Starter};

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

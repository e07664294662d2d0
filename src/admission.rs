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
//! Every place and slot lives in a guard, so it is given back on every path: success, error,
//! panic, and a future dropped because the client went away (cancellation-safe).
//! Must not: take offload tokens, know about HTTP or the scheduler. Callers take their pool
//! token *after* they hold a [`GatePermit`], and move the permit into the offloaded closure
//! so the slot stays held until the critical section's work really ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

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

//! The gate's and the batches' unit tests: places, slots, timeouts, cancellation, the queue
//! served in order by one holder, waiters gone or orphaned, a panicking section, and the
//! gate's invariants under random traffic.

use super::*;
use proptest::prelude::*;
use tokio::runtime::Handle;

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
    std::future::poll_fn(|cx| std::task::Poll::Ready(std::pin::Pin::new(&mut *fut).poll(cx))).await
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

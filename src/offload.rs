//! The offload pool: the one door through which blocking work leaves the event loop.
//!
//! Owns: `threadpool_tokens` permits (a fair, FIFO `tokio::sync::Semaphore`), the only call to
//! `tokio::task::spawn_blocking` in the code base, and the pool's gauges.
//!
//! A few of the tokens can be *reserved* ([`Offload::with_reserved`]) for work that is already
//! serialised elsewhere and that everybody else waits for: the request_task gate's slot holder
//! and the journal's group-commit writer take their tokens from the reserve
//! ([`Offload::run_reserved`]). Otherwise, with the pool saturated, the one caller inside the
//! scheduler's critical section queued behind thousands of beats and updates for a token while
//! every other request_task waited on it (measured in the 10k storm before this existed: a
//! 0.5 ms section held for seconds), and every acknowledgement waited for a journal writer that
//! waited behind the very requests awaiting it. The reserve is sized to those serial callers
//! (gate slots + 1), so a reserved token is always free when one asks, give or take the instant
//! between a previous holder releasing its slot and its token.
//! Must not: know what the work is (store, lock, CPU), retry, or time out work. A caller that
//! is cancelled while waiting for a token simply leaves the queue; once a closure has started,
//! it runs to completion and keeps its token until it returns, whatever happens to the caller.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Semaphore;
use tracing::Instrument as _;

/// Why offloaded work produced no value.
#[derive(Debug, thiserror::Error)]
pub enum OffloadError {
    /// The closure panicked; the panic message is kept for the log.
    #[error("offloaded work panicked: {0}")]
    Panicked(String),
    /// The runtime is shutting down and dropped the work.
    #[error("offloaded work was cancelled by runtime shutdown")]
    Cancelled,
    /// The pool was closed (only during shutdown).
    #[error("offload pool is closed")]
    Closed,
}

tokio::task_local! {
    /// Who is asking for tokens: the matched route of the request being served (set by the
    /// HTTP layer), so `/metrics` can say which routes use the pool. Unset for background
    /// jobs.
    pub static POOL_CALLER: std::sync::Arc<str>;
}

#[derive(Debug)]
struct Inner {
    tokens: usize,
    /// The general tokens (`tokens - reserved`).
    sem: Arc<Semaphore>,
    /// The reserved tokens (see the module docs), `reserve` of them.
    reserved: Arc<Semaphore>,
    reserve: usize,
    in_use: AtomicUsize,
    waiting: AtomicUsize,
}

/// A cheap, cloneable handle to the pool.
#[derive(Debug, Clone)]
pub struct Offload {
    inner: Arc<Inner>,
}

/// Decrements a counter and its gauge when dropped, so every path (including a cancelled
/// future or a panicking closure) gives back what it took.
struct CountGuard {
    inner: Arc<Inner>,
    which: Which,
}

#[derive(Clone, Copy)]
enum Which {
    InUse,
    Waiting,
}

impl CountGuard {
    fn new(inner: &Arc<Inner>, which: Which) -> Self {
        let (counter, gauge) = Self::parts(inner, which);
        counter.fetch_add(1, Ordering::Relaxed);
        metrics::gauge!(gauge).increment(1.0);
        CountGuard {
            inner: inner.clone(),
            which,
        }
    }

    fn parts(inner: &Inner, which: Which) -> (&AtomicUsize, &'static str) {
        match which {
            Which::InUse => (&inner.in_use, "shoal_pool_tokens_in_use"),
            Which::Waiting => (&inner.waiting, "shoal_pool_tokens_waiting"),
        }
    }
}

impl Drop for CountGuard {
    fn drop(&mut self) {
        let (counter, gauge) = Self::parts(&self.inner, self.which);
        counter.fetch_sub(1, Ordering::Relaxed);
        metrics::gauge!(gauge).decrement(1.0);
    }
}

impl Offload {
    /// A pool of `tokens` permits, none reserved. The runtime's `max_blocking_threads` must be
    /// at least this (see `Config::max_blocking_threads`), so a token always finds a thread.
    pub fn new(tokens: usize) -> Self {
        Self::with_reserved(tokens, 0)
    }

    /// A pool of `tokens` permits of which `reserved` (fewer than `tokens`) are kept for
    /// [`Offload::run_reserved`].
    pub fn with_reserved(tokens: usize, reserved: usize) -> Self {
        let reserved = reserved.min(tokens.saturating_sub(1));
        metrics::gauge!("shoal_pool_tokens_total").set(tokens as f64);
        Offload {
            inner: Arc::new(Inner {
                tokens,
                sem: Arc::new(Semaphore::new(tokens - reserved)),
                reserved: Arc::new(Semaphore::new(reserved)),
                reserve: reserved,
                in_use: AtomicUsize::new(0),
                waiting: AtomicUsize::new(0),
            }),
        }
    }

    /// Runs `work` on the blocking pool once a token is free, holding the token until `work`
    /// returns. Waiting costs no thread. The caller's tracing span is kept. A panic in `work`
    /// comes back as [`OffloadError::Panicked`].
    pub async fn run<F, R>(&self, work: F) -> Result<R, OffloadError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        self.run_on(&self.inner.sem, work).await
    }

    /// Like [`Offload::run`], but takes one of the reserved tokens (falling back to the general
    /// ones when the pool has no reserve). Only for callers that are serialised already (the
    /// request_task gate's slot holder), so the reserve is never oversubscribed.
    pub async fn run_reserved<F, R>(&self, work: F) -> Result<R, OffloadError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        if self.inner.reserve == 0 {
            return self.run(work).await;
        }
        self.run_on(&self.inner.reserved, work).await
    }

    /// Tokens kept for [`Offload::run_reserved`].
    pub fn reserve(&self) -> usize {
        self.inner.reserve
    }

    async fn run_on<F, R>(&self, sem: &Arc<Semaphore>, work: F) -> Result<R, OffloadError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let span = tracing::Span::current();
        let waiting = CountGuard::new(&self.inner, Which::Waiting);
        let permit = sem
            .clone()
            .acquire_owned()
            .instrument(span.clone())
            .await
            .map_err(|_| OffloadError::Closed)?;
        drop(waiting);
        let caller = POOL_CALLER
            .try_with(|c| c.to_string())
            .unwrap_or_else(|_| "background".to_string());
        metrics::counter!("shoal_pool_acquired_total", "caller" => caller).increment(1);
        let in_use = CountGuard::new(&self.inner, Which::InUse);
        // spawn_blocking: the only call in the code base (an invariant of ARCHITECTURE.md).
        let handle = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let _in_use = in_use;
            span.in_scope(work)
        });
        match handle.await {
            Ok(value) => Ok(value),
            Err(e) if e.is_panic() => {
                let message = panic_message(e.into_panic());
                metrics::counter!("shoal_pool_panics_total").increment(1);
                tracing::error!(%message, "offloaded work panicked");
                Err(OffloadError::Panicked(message))
            }
            Err(_) => Err(OffloadError::Cancelled),
        }
    }

    /// Total tokens.
    pub fn tokens(&self) -> usize {
        self.inner.tokens
    }

    /// Tokens held by running work right now.
    pub fn in_use(&self) -> usize {
        self.inner.in_use.load(Ordering::Relaxed)
    }

    /// Callers waiting for a token right now.
    pub fn waiting(&self) -> usize {
        self.inner.waiting.load(Ordering::Relaxed)
    }

    /// Stops handing out tokens: callers still waiting get [`OffloadError::Closed`]; running
    /// work finishes normally.
    pub fn close(&self) {
        self.inner.sem.close();
        self.inner.reserved.close();
    }
}

/// A panic's message (`&str` or `String` payloads), for the log and the error.
fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_string())
}

/// One job of a [`Lane`].
type Job = Box<dyn FnOnce() + Send + 'static>;

/// A lane of the offload pool with threads of its own, for work that must never take CPU from
/// the event loop when both want it: page renders. Its threads run at a lower scheduling
/// priority (a positive nice value, Linux), so under a CPU-bound page load the event loop
/// (beats, updates, every acknowledgement) is served first and pages take what is left.
/// Callers take one of `threads` turns (FIFO, waiting costs no thread) and hold it until the
/// work returns, so at most `threads` jobs run and none queue inside the lane.
#[derive(Debug)]
pub struct Lane {
    name: String,
    turns: Arc<Semaphore>,
    jobs: parking_lot::Mutex<Option<std::sync::mpsc::Sender<Job>>>,
    threads: usize,
    nice: i32,
}

impl Lane {
    /// Starts `threads` threads named `shoal-<name>-N`, each lowering its own priority to
    /// `nice` (0 keeps the default; a refusal is logged once per thread and the thread runs
    /// at the default priority).
    pub fn start(name: &str, threads: usize, nice: i32) -> std::io::Result<Lane> {
        let threads = threads.max(1);
        let (tx, rx) = std::sync::mpsc::channel::<Job>();
        let rx = Arc::new(parking_lot::Mutex::new(rx));
        for i in 0..threads {
            let rx = Arc::clone(&rx);
            std::thread::Builder::new()
                .name(format!("shoal-{name}-{i}"))
                .spawn(move || {
                    if nice != 0 {
                        let tid = rustix::thread::gettid();
                        if let Err(e) = rustix::process::setpriority_process(Some(tid), nice) {
                            tracing::warn!(error = %e, nice, "could not lower a lane thread's priority");
                        }
                    }
                    loop {
                        let job = rx.lock().recv();
                        match job {
                            Ok(job) => job(),
                            Err(_) => break,
                        }
                    }
                })?;
        }
        Ok(Lane {
            name: name.to_string(),
            turns: Arc::new(Semaphore::new(threads)),
            jobs: parking_lot::Mutex::new(Some(tx)),
            threads,
            nice,
        })
    }

    /// Runs `work` on one of the lane's threads once a turn is free. The caller's tracing span
    /// is kept; a panic comes back as [`OffloadError::Panicked`]; a cancelled caller leaves
    /// the queue, or, once its work started, lets it finish (the turn is held to the end).
    pub async fn run<F, R>(&self, work: F) -> Result<R, OffloadError>
    where
        F: FnOnce() -> R + Send + 'static,
        R: Send + 'static,
    {
        let span = tracing::Span::current();
        let turn = self
            .turns
            .clone()
            .acquire_owned()
            .instrument(span.clone())
            .await
            .map_err(|_| OffloadError::Closed)?;
        let caller = POOL_CALLER
            .try_with(|c| c.to_string())
            .unwrap_or_else(|_| "background".to_string());
        metrics::counter!("shoal_lane_runs_total", "lane" => self.name.clone(), "caller" => caller)
            .increment(1);
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _turn = turn;
            let out =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| span.in_scope(work)));
            let _ = tx.send(out);
        });
        {
            let jobs = self.jobs.lock();
            let sender = jobs.as_ref().ok_or(OffloadError::Closed)?;
            sender.send(job).map_err(|_| OffloadError::Closed)?;
        }
        match rx.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(payload)) => {
                let message = panic_message(payload);
                metrics::counter!("shoal_pool_panics_total").increment(1);
                tracing::error!(%message, "lane work panicked");
                Err(OffloadError::Panicked(message))
            }
            Err(_) => Err(OffloadError::Cancelled),
        }
    }

    /// The lane's threads (and turns).
    pub fn threads(&self) -> usize {
        self.threads
    }

    /// The nice value its threads asked for.
    pub fn nice(&self) -> i32 {
        self.nice
    }

    /// Stops taking work: waiting callers get [`OffloadError::Closed`], running work finishes,
    /// and the threads end once the queue is empty.
    pub fn close(&self) {
        self.turns.close();
        self.jobs.lock().take();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_lane_runs_work_on_its_own_threads_and_catches_panics() {
        let lane = Lane::start("test", 2, 5).unwrap();
        let name = lane
            .run(|| std::thread::current().name().map(str::to_string))
            .await
            .unwrap();
        assert!(name.unwrap().starts_with("shoal-test-"));
        // Its threads run below the default priority (lowering one's own is always allowed).
        let nice = lane
            .run(|| rustix::process::getpriority_process(Some(rustix::thread::gettid())))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(nice, 5);
        let e = lane.run(|| -> u32 { panic!("boom") }).await.unwrap_err();
        assert!(matches!(e, OffloadError::Panicked(m) if m == "boom"));
        // Two turns: a third caller waits until one returns; all finish.
        let lane = Arc::new(lane);
        let mut handles = Vec::new();
        for i in 0..6u64 {
            let lane = Arc::clone(&lane);
            handles.push(tokio::spawn(async move {
                lane.run(move || {
                    std::thread::sleep(Duration::from_millis(20));
                    i
                })
                .await
            }));
        }
        let mut sum = 0;
        for h in handles {
            sum += h.await.unwrap().unwrap();
        }
        assert_eq!(sum, 15);
        lane.close();
        assert!(matches!(lane.run(|| 1).await, Err(OffloadError::Closed)));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn runs_work_and_returns_value() {
        let pool = Offload::new(2);
        assert_eq!(pool.run(|| 40 + 2).await.expect("runs"), 42);
        assert_eq!(pool.in_use(), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn panic_becomes_error_and_frees_token() {
        let pool = Offload::new(1);
        let r = pool.run(|| -> u32 { panic!("boom") }).await;
        assert!(matches!(r, Err(OffloadError::Panicked(m)) if m == "boom"));
        assert_eq!(pool.in_use(), 0);
        assert_eq!(pool.run(|| 1).await.expect("token came back"), 1);
    }

    type Held = Vec<tokio::task::JoinHandle<Result<(), OffloadError>>>;

    /// Starts `n` pool jobs that hold their general tokens until one `()` each is sent.
    async fn hold_tokens(pool: &Offload, n: usize) -> (std::sync::mpsc::Sender<()>, Held) {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let rx = Arc::new(parking_lot::Mutex::new(rx));
        let mut held = Vec::new();
        for _ in 0..n {
            let rx = rx.clone();
            let p = pool.clone();
            held.push(tokio::spawn(async move {
                p.run(move || {
                    let _ = rx.lock().recv();
                })
                .await
            }));
        }
        while pool.in_use() < n {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        (tx, held)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tokens_bound_concurrency_and_waiters_are_counted() {
        let pool = Offload::new(2);
        let (tx, held) = hold_tokens(&pool, 2).await;
        let p = pool.clone();
        let third = tokio::spawn(async move { p.run(|| 3).await });
        while pool.waiting() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(pool.in_use(), 2);
        tx.send(()).expect("send");
        tx.send(()).expect("send");
        assert_eq!(third.await.expect("join").expect("runs"), 3);
        for h in held {
            h.await.expect("join").expect("runs");
        }
        assert_eq!((pool.in_use(), pool.waiting()), (0, 0));
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn reserved_token_is_free_while_general_tokens_are_exhausted() {
        let pool = Offload::with_reserved(3, 1);
        assert_eq!((pool.tokens(), pool.reserve()), (3, 1));
        let (tx, held) = hold_tokens(&pool, 2).await;
        // The general tokens are gone: a plain caller waits...
        let p = pool.clone();
        let queued = tokio::spawn(async move { p.run(|| "general").await });
        while pool.waiting() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        // ...but the reserved lane still runs at once, and its token comes back.
        assert_eq!(pool.run_reserved(|| 7).await.expect("reserved"), 7);
        assert_eq!(pool.run_reserved(|| 8).await.expect("reserved again"), 8);
        assert!(!queued.is_finished());
        tx.send(()).expect("send");
        tx.send(()).expect("send");
        assert_eq!(queued.await.expect("join").expect("runs"), "general");
        for h in held {
            h.await.expect("join").expect("runs");
        }
        assert_eq!((pool.in_use(), pool.waiting()), (0, 0));
        // Without a reserve, run_reserved is a plain run.
        assert_eq!(Offload::new(1).run_reserved(|| 9).await.expect("plain"), 9);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cancelled_waiter_leaves_the_queue() {
        let pool = Offload::new(1);
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let p = pool.clone();
        let holder = tokio::spawn(async move {
            p.run(move || {
                let _ = rx.recv();
            })
            .await
        });
        while pool.in_use() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let p = pool.clone();
        let waiter = tokio::spawn(async move { p.run(|| ()).await });
        while pool.waiting() < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        waiter.abort();
        let _ = waiter.await;
        assert_eq!(pool.waiting(), 0);
        tx.send(()).expect("send");
        holder.await.expect("join").expect("runs");
        assert_eq!(pool.in_use(), 0);
    }
}

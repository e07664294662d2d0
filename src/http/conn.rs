//! Connections: the accept loop and each connection's clock (header-read, keep-alive idle and
//! shutdown rules).
//!
//! Owns: accepting TCP connections, serving each with hyper's HTTP/1.1 connection driver, and
//! closing connections that hold a file descriptor without doing any work:
//! - a connection that has not delivered a complete request header within
//!   `header_read_timeout_s` (counted from the accept, or from the first byte of a later
//!   request) is dropped — this covers clients that send nothing or half a header;
//! - a keep-alive connection idle for `keepalive_timeout_s` after its last response is closed
//!   (gracefully: a response still being written is finished first; a client that stops
//!   reading it is dropped after twice the timeout);
//! - on shutdown, connections that are idle or still sending a header are closed at once;
//!   those with a request in flight finish it and close.
//!
//! Request bodies have their own deadline (`body_read_timeout_s`), enforced where bodies are
//! read (`extract::read_body`), so that a slow body becomes a 408 in the API's JSON shape.
//! Must not: contain request logic, or block (every step here is an await or an atomic).

use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;
use tower::ServiceExt as _;

/// The connection timeouts, from settings.
#[derive(Debug, Clone, Copy)]
pub struct ConnTimeouts {
    pub header_read: Duration,
    pub keepalive: Duration,
}

/// Where a connection is in its request cycle.
const FRESH: u8 = 0; // accepted, no byte yet
const HEAD: u8 = 1; // receiving a request header
const BUSY: u8 = 2; // a request is being handled
const IDLE: u8 = 3; // its response is done or being written; waiting for the next request

/// A connection's phase and the moment it entered it (or last wrote), in milliseconds since
/// the connection was accepted. Shared by the I/O wrapper, the service and the watchdog.
struct Clock {
    start: Instant,
    phase: AtomicU8,
    since_ms: AtomicU64,
}

impl Clock {
    fn new() -> Self {
        Clock {
            start: Instant::now(),
            phase: AtomicU8::new(FRESH),
            since_ms: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn enter(&self, phase: u8) {
        self.since_ms.store(self.now_ms(), Ordering::Release);
        self.phase.store(phase, Ordering::Release);
    }

    /// Bytes arrived: the first bytes of a request start (or continue) its header.
    fn on_read(&self) {
        match self.phase.load(Ordering::Acquire) {
            // The header deadline counts from the accept.
            FRESH => self.phase.store(HEAD, Ordering::Release),
            IDLE => self.enter(HEAD),
            _ => {}
        }
    }

    /// Bytes left: a response being written is progress.
    fn on_write(&self) {
        if self.phase.load(Ordering::Acquire) == IDLE {
            self.since_ms.store(self.now_ms(), Ordering::Release);
        }
    }

    /// The phase and when its deadline falls (`None`: no deadline while busy).
    fn deadline(&self, t: &ConnTimeouts) -> (u8, Option<Instant>) {
        let phase = self.phase.load(Ordering::Acquire);
        let since = self.start + Duration::from_millis(self.since_ms.load(Ordering::Acquire));
        let limit = match phase {
            FRESH | HEAD => Some(t.header_read),
            IDLE => Some(t.keepalive),
            _ => None,
        };
        (phase, limit.map(|l| since + l))
    }
}

/// A TCP stream that tells its clock when bytes move.
struct ClockedStream {
    inner: TcpStream,
    clock: Arc<Clock>,
}

impl AsyncRead for ClockedStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(polled, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.clock.on_read();
        }
        polled
    }
}

impl AsyncWrite for ClockedStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.clock.on_write();
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(polled, Poll::Ready(Ok(n)) if n > 0) {
            self.clock.on_write();
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Tells `serve` to stop accepting and wind connections down.
#[derive(Clone)]
pub struct Shutdown(watch::Sender<bool>);

impl Shutdown {
    pub fn new() -> Self {
        Shutdown(watch::channel(false).0)
    }

    pub fn trigger(&self) {
        self.0.send_replace(true);
    }

    fn subscribe(&self) -> watch::Receiver<bool> {
        self.0.subscribe()
    }
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

/// Counts live connections; notifies when the last one ends.
#[derive(Default)]
struct Live {
    count: AtomicUsize,
    empty: Notify,
}

struct LiveGuard(Arc<Live>);

impl Drop for LiveGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.empty.notify_waiters();
        }
    }
}

/// Serves `app` on `listener` until `shutdown` is triggered, then stops accepting, winds the
/// connections down (see the module docs) and returns once none is left. The caller bounds
/// the wait with its grace period (dropping this future drops every connection).
pub async fn serve(
    listener: TcpListener,
    app: Router,
    timeouts: ConnTimeouts,
    shutdown: Shutdown,
) -> io::Result<()> {
    let live = Arc::new(Live::default());
    let mut stop = shutdown.subscribe();
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            accepted = listener.accept() => accepted,
            // Reap finished connection tasks so the set does not grow.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: wait a little (the timeouts above are
                // what frees descriptors) rather than spin.
                tracing::warn!(error = %e, "accept failed");
                metrics::counter!("shoal_accept_errors_total").increment(1);
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // Small JSON replies: send them now rather than waiting for Nagle.
        let _ = tcp.set_nodelay(true);
        live.count.fetch_add(1, Ordering::AcqRel);
        let guard = LiveGuard(live.clone());
        let app = app.clone();
        let stop = shutdown.subscribe();
        connections.spawn(async move {
            let _guard = guard;
            serve_connection(tcp, peer, app, timeouts, stop).await;
        });
    }
    drop(listener);
    // Wait for every connection to end (each closes at once when idle).
    loop {
        let notified = live.empty.notified();
        if live.count.load(Ordering::Acquire) == 0 {
            break;
        }
        tokio::select! {
            () = notified => {}
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    Ok(())
}

async fn serve_connection(
    tcp: TcpStream,
    peer: SocketAddr,
    app: Router,
    timeouts: ConnTimeouts,
    mut stop: watch::Receiver<bool>,
) {
    let clock = Arc::new(Clock::new());
    let io = TokioIo::new(ClockedStream {
        inner: tcp,
        clock: clock.clone(),
    });
    let service_clock = clock.clone();
    let service = hyper::service::service_fn(move |mut req: hyper::Request<Incoming>| {
        service_clock.enter(BUSY);
        req.extensions_mut().insert(ConnectInfo(peer));
        let app = app.clone();
        let clock = service_clock.clone();
        async move {
            let response = app.oneshot(req.map(axum::body::Body::new)).await;
            clock.enter(IDLE);
            response
        }
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    // Our clock enforces the header deadline (hyper's would also cut idle keep-alives).
    builder.timer(TokioTimer::new()).header_read_timeout(None);
    let conn = builder.serve_connection(io, service);
    let mut conn = std::pin::pin!(conn);
    let mut winding_down = false;
    let mut stopping = *stop.borrow();
    loop {
        let (phase, deadline) = clock.deadline(&timeouts);
        if stopping {
            match phase {
                // Nothing in flight: close now.
                FRESH | HEAD => return,
                _ if !winding_down => {
                    // Finish the request or response in flight, then close.
                    conn.as_mut().graceful_shutdown();
                    winding_down = true;
                }
                _ => {}
            }
        }
        let sleep = async {
            match deadline {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            result = conn.as_mut() => {
                if let Err(e) = result {
                    tracing::debug!(error = %e, %peer, "connection ended with an error");
                }
                return;
            }
            () = sleep => {
                // The deadline may have moved (bytes arrived): look again.
                let (phase_now, deadline_now) = clock.deadline(&timeouts);
                if phase_now != phase || deadline_now.is_some_and(|d| d > Instant::now()) {
                    continue;
                }
                match phase {
                    FRESH | HEAD => {
                        metrics::counter!("shoal_connections_timed_out_total", "phase" => "header")
                            .increment(1);
                        tracing::debug!(%peer, "closing a connection that sent no complete header in time");
                        return;
                    }
                    IDLE if !winding_down => {
                        metrics::counter!("shoal_connections_timed_out_total", "phase" => "idle")
                            .increment(1);
                        conn.as_mut().graceful_shutdown();
                        winding_down = true;
                        // A client that does not read the rest of its response gets as long
                        // again before the connection is dropped.
                        clock.enter(IDLE);
                    }
                    _ => return,
                }
            }
            changed = stop.changed(), if !stopping => {
                stopping = changed.is_err() || *stop.borrow();
            }
        }
    }
}

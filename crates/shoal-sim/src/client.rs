//! The simulator's HTTP/1.1 client: one call = one request and its whole reply.
//!
//! Owns: connections. In `Fresh` mode every call opens a new TCP connection and the client
//! closes it after the reply, as the official worker does (a new requests session per call);
//! those connections are spread round-robin over several 127.0.0.x source addresses so that a
//! storm of short connections does not run out of ephemeral ports (each source address has
//! its own ~28k ports, and the client side keeps the TIME_WAIT). In `Pooled` mode calls reuse
//! idle keep-alive connections (at most `pool_idle` kept). Open sockets are bounded below the
//! process's file limit: a call waits for a socket rather than failing with EMFILE, and those
//! waits are counted.
//! Must not: interpret replies (that is `worker`), retry (the worker's rules decide), or talk
//! to anything but the loopback server it was given.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt as _, Full};
use hyper::body::Bytes;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::{Method, Request, header};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use tokio::net::TcpSocket;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How calls get their connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ConnMode {
    /// A new TCP connection per call, closed by the client after the reply.
    Fresh,
    /// Keep-alive connections shared by all calls.
    Pooled,
}

#[derive(Debug, Clone)]
pub struct ClientConfig {
    pub server: SocketAddr,
    pub mode: ConnMode,
    /// Source addresses for fresh connections (empty: let the kernel choose).
    pub sources: Vec<IpAddr>,
    /// Idle keep-alive connections kept in pooled mode.
    pub pool_idle: usize,
    /// Sockets open at once, at most.
    pub max_open: usize,
    /// Connect timeout, and the timeout for the reply once the request is sent.
    pub timeout: Duration,
}

/// `n` loopback source addresses 127.0.0.2, 127.0.0.3, … (none if the server is not on an
/// IPv4 loopback address, since a 127.0.0.x source cannot reach anything else).
pub fn loopback_sources(server: &SocketAddr, n: usize) -> Vec<IpAddr> {
    match server.ip() {
        IpAddr::V4(ip) if ip.is_loopback() => (0..n.min(250))
            .map(|i| IpAddr::V4(Ipv4Addr::new(127, 0, 0, 2 + i as u8)))
            .collect(),
        _ => Vec::new(),
    }
}

/// The soft limit on open files in the text of `/proc/self/limits` (None if unknown).
pub fn parse_open_files_limit(limits: &str) -> Option<usize> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line.split_whitespace().nth(3)?.parse().ok()
}

/// The soft limit on open files of this process.
pub async fn open_files_limit() -> Option<usize> {
    let text = tokio::fs::read_to_string("/proc/self/limits").await.ok()?;
    parse_open_files_limit(&text)
}

/// Why a call got no reply.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("connect: {0}")]
    Connect(std::io::Error),
    #[error("connect timed out")]
    ConnectTimeout,
    #[error("no reply within the timeout")]
    Timeout,
    #[error("http: {0}")]
    Http(String),
}

impl CallError {
    /// A short stable name for counting errors by kind.
    pub fn kind(&self) -> &'static str {
        match self {
            CallError::Connect(e) if e.kind() == std::io::ErrorKind::AddrNotAvailable => {
                "connect_addr_not_available"
            }
            CallError::Connect(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => {
                "connect_refused"
            }
            CallError::Connect(_) => "connect_error",
            CallError::ConnectTimeout => "connect_timeout",
            CallError::Timeout => "timeout",
            CallError::Http(_) => "connection_error",
        }
    }
}

/// A reply: status, body, and how long connecting took (None for a reused connection).
#[derive(Debug)]
pub struct HttpReply {
    pub status: u16,
    pub body: Bytes,
    pub connect: Option<Duration>,
}

/// Counters about the client itself.
#[derive(Debug, Default, Serialize, Deserialize, Clone, PartialEq)]
pub struct ClientCounters {
    pub connections_opened: u64,
    pub connections_reused: u64,
    /// Calls that had to wait for a free socket (the file limit).
    pub socket_waits: u64,
}

pub struct Client {
    cfg: ClientConfig,
    host: String,
    next_source: AtomicUsize,
    idle: Mutex<Vec<SendRequest<Full<Bytes>>>>,
    open: Arc<Semaphore>,
    opened: AtomicU64,
    reused: AtomicU64,
    socket_waits: AtomicU64,
}

impl Client {
    pub fn new(cfg: ClientConfig) -> Client {
        let host = cfg.server.to_string();
        let open = Arc::new(Semaphore::new(cfg.max_open.max(1)));
        Client {
            cfg,
            host,
            next_source: AtomicUsize::new(0),
            idle: Mutex::new(Vec::new()),
            open,
            opened: AtomicU64::new(0),
            reused: AtomicU64::new(0),
            socket_waits: AtomicU64::new(0),
        }
    }

    pub fn mode(&self) -> ConnMode {
        self.cfg.mode
    }

    pub fn counters(&self) -> ClientCounters {
        ClientCounters {
            connections_opened: self.opened.load(Ordering::Relaxed),
            connections_reused: self.reused.load(Ordering::Relaxed),
            socket_waits: self.socket_waits.load(Ordering::Relaxed),
        }
    }

    /// Drops every idle keep-alive connection.
    pub fn close_idle(&self) {
        self.idle.lock().clear();
    }

    /// A place for one more open socket. Waits (counted) when `max_open` are open.
    async fn socket_permit(&self) -> Result<OwnedSemaphorePermit, CallError> {
        match self.open.clone().try_acquire_owned() {
            Ok(p) => Ok(p),
            Err(_) => {
                self.socket_waits.fetch_add(1, Ordering::Relaxed);
                self.open
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(|e| CallError::Http(e.to_string()))
            }
        }
    }

    /// Opens a connection. `permit` is held by the connection's task until the socket is
    /// really closed, so `max_open` bounds file descriptors, not just calls in flight.
    async fn connect(
        &self,
        permit: OwnedSemaphorePermit,
    ) -> Result<SendRequest<Full<Bytes>>, CallError> {
        let server = self.cfg.server;
        let socket = if server.is_ipv4() {
            TcpSocket::new_v4()
        } else {
            TcpSocket::new_v6()
        }
        .map_err(CallError::Connect)?;
        if self.cfg.mode == ConnMode::Fresh && !self.cfg.sources.is_empty() {
            let i = self.next_source.fetch_add(1, Ordering::Relaxed) % self.cfg.sources.len();
            // SO_REUSEADDR lets bind(addr:0) pick a port whose old connection is in
            // TIME_WAIT; connect() then checks the 4-tuple (tcp_tw_reuse applies on loopback).
            socket.set_reuseaddr(true).map_err(CallError::Connect)?;
            socket
                .bind(SocketAddr::new(self.cfg.sources[i], 0))
                .map_err(CallError::Connect)?;
        }
        let stream = tokio::time::timeout(self.cfg.timeout, socket.connect(server))
            .await
            .map_err(|_| CallError::ConnectTimeout)?
            .map_err(CallError::Connect)?;
        let _ = stream.set_nodelay(true);
        let (sender, conn) = http1::handshake(TokioIo::new(stream))
            .await
            .map_err(|e| CallError::Http(e.to_string()))?;
        tokio::spawn(async move {
            let _ = conn.await;
            drop(permit);
        });
        self.opened.fetch_add(1, Ordering::Relaxed);
        Ok(sender)
    }

    fn take_idle(&self) -> Option<SendRequest<Full<Bytes>>> {
        let mut idle = self.idle.lock();
        while let Some(s) = idle.pop() {
            if !s.is_closed() {
                return Some(s);
            }
        }
        None
    }

    /// One call: `POST path` with a JSON body, or `GET path` without one.
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<HttpReply, CallError> {
        let pooled = self.cfg.mode == ConnMode::Pooled;
        // A reused connection the server has just closed fails without a reply: try once
        // more on a new connection.
        for attempt in 0..2 {
            let reused = if pooled && attempt == 0 {
                self.take_idle()
            } else {
                None
            };
            let (mut sender, connect) = match reused {
                Some(s) => {
                    self.reused.fetch_add(1, Ordering::Relaxed);
                    (s, None)
                }
                None => {
                    let permit = self.socket_permit().await?;
                    let t = Instant::now();
                    let s = self.connect(permit).await?;
                    (s, Some(t.elapsed()))
                }
            };
            let was_reused = connect.is_none();
            let mut req = Request::builder()
                .method(method.clone())
                .uri(path)
                .header(header::HOST, &self.host)
                .header(header::USER_AGENT, "shoal-sim")
                .header(header::ACCEPT, "*/*");
            if body.is_some() {
                req = req.header(header::CONTENT_TYPE, "application/json");
            }
            let req = req
                .body(Full::new(body.clone().unwrap_or_default()))
                .map_err(|e| CallError::Http(e.to_string()))?;
            let exchange = async {
                sender.ready().await?;
                let resp = sender.send_request(req).await?;
                let status = resp.status().as_u16();
                let body = resp.into_body().collect().await?.to_bytes();
                Ok::<_, hyper::Error>((status, body))
            };
            match tokio::time::timeout(self.cfg.timeout, exchange).await {
                Err(_) => return Err(CallError::Timeout),
                Ok(Err(e)) if was_reused && (e.is_canceled() || e.is_incomplete_message()) => {
                    continue;
                }
                Ok(Err(e)) => return Err(CallError::Http(e.to_string())),
                Ok(Ok((status, body))) => {
                    if pooled && !sender.is_closed() {
                        let mut idle = self.idle.lock();
                        if idle.len() < self.cfg.pool_idle {
                            idle.push(sender);
                        }
                    }
                    return Ok(HttpReply {
                        status,
                        body,
                        connect,
                    });
                }
            }
        }
        Err(CallError::Http("connection closed twice".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_only_for_ipv4_loopback() {
        let v4: SocketAddr = "127.0.0.1:8000".parse().expect("addr");
        let s = loopback_sources(&v4, 3);
        assert_eq!(
            s,
            vec![
                "127.0.0.2".parse::<IpAddr>().expect("ip"),
                "127.0.0.3".parse().expect("ip"),
                "127.0.0.4".parse().expect("ip"),
            ]
        );
        assert_eq!(loopback_sources(&v4, 1000).len(), 250);
        let v6: SocketAddr = "[::1]:8000".parse().expect("addr");
        assert!(loopback_sources(&v6, 3).is_empty());
    }

    #[test]
    fn reads_the_file_limit() {
        let text = "Limit                     Soft Limit           Hard Limit           Units\n\
                    Max open files            20000                20000                files\n";
        assert_eq!(parse_open_files_limit(text), Some(20000));
        assert_eq!(parse_open_files_limit(""), None);
    }
}

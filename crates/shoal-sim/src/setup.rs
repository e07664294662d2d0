//! The server side of a simulation, seen from outside: starting a local server, preparing
//! users and runs, and reading the server's own numbers.
//!
//! Owns: the child `shoal serve` process (port 0, its address read from the "listening on
//! http://ADDR" log line, stopped with SIGTERM), users through the `shoal user` CLI, runs
//! through the public `/api/create_run` + `/api/approve_run`, `/metrics` and `/healthz`
//! scrapes, and the server's CPU time and peak RSS from `/proc` when it runs on this machine.
//! Must not: open the server's store or call its internals: the simulator is a client, and
//! the only writes it makes go through the same CLI and API an operator would use.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use hyper::Method;
use parking_lot::Mutex;
use rand::Rng;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

use super::SimError;
use super::client::Client;

/// Log lines of the child server kept for error messages.
const LOG_TAIL: usize = 200;

/// A `shoal serve` started by the simulator.
pub struct LocalServer {
    child: Child,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// A temporary data directory to remove at the end.
    owned_dir: Option<PathBuf>,
    tail: Arc<Mutex<VecDeque<String>>>,
    warnings: Arc<AtomicU64>,
}

/// Strips ANSI colour sequences from a log line.
fn strip_ansi(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// The address in a "listening on http://ADDR" line.
pub fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = line.split("listening on http://").nth(1)?;
    rest.split_whitespace().next()?.parse().ok()
}

impl LocalServer {
    /// Starts `bin serve` on `port` (0: any free port) with `data_dir` (None: a new temporary
    /// directory). The process inherits this environment (so `SHOAL_*` overrides apply),
    /// plus `env`.
    pub async fn start(
        bin: &Path,
        data_dir: Option<&Path>,
        port: u16,
        env: &[(String, String)],
    ) -> Result<LocalServer, SimError> {
        let (data_dir, owned_dir) = match data_dir {
            Some(d) => (d.to_path_buf(), None),
            None => {
                let nonce: u64 = rand::rng().random();
                let dir = std::env::temp_dir()
                    .join(format!("shoal-sim-{}-{nonce:016x}", std::process::id()));
                (dir.join("data"), Some(dir))
            }
        };
        tokio::fs::create_dir_all(&data_dir).await?;
        let mut cmd = Command::new(bin);
        cmd.arg("serve")
            .env("SHOAL_PORT", port.to_string())
            .env("SHOAL_DATA_DIR", &data_dir)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            // Dropped with us, and ended by the kernel (SIGTERM) if we die without dropping
            // it (killed, SIGKILL): src/main.rs, exit_with_parent.
            .env("SHOAL_EXIT_WITH_PARENT", std::process::id().to_string())
            .kill_on_drop(true);
        // The simulated runs' commits are made up: a GitHub that answers would refuse them
        // (commits given by hand are checked when it can), so the local server's GitHub is a
        // closed port unless the environment says otherwise.
        for key in ["SHOAL_GITHUB_API_URL", "SHOAL_GITHUB_RAW_URL"] {
            if std::env::var_os(key).is_none() {
                cmd.env(key, "http://127.0.0.1:9");
            }
        }
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| SimError::Server(format!("cannot start {}: {e}", bin.display())))?;
        let stderr = child
            .stderr
            .take()
            .ok_or_else(|| SimError::Server("no stderr pipe".into()))?;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let warnings = Arc::new(AtomicU64::new(0));
        let (tx, rx) = tokio::sync::oneshot::channel::<SocketAddr>();
        {
            let tail = tail.clone();
            let warnings = warnings.clone();
            tokio::spawn(async move {
                let mut tx = Some(tx);
                let mut lines = BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    let line = strip_ansi(&line);
                    if line.contains(" WARN ") || line.contains(" ERROR ") {
                        warnings.fetch_add(1, Ordering::Relaxed);
                    }
                    if let Some(addr) = listening_addr(&line)
                        && let Some(tx) = tx.take()
                    {
                        let _ = tx.send(addr);
                    }
                    let mut t = tail.lock();
                    if t.len() >= LOG_TAIL {
                        t.pop_front();
                    }
                    t.push_back(line);
                }
            });
        }
        let addr = match tokio::time::timeout(Duration::from_secs(60), rx).await {
            Ok(Ok(addr)) => addr,
            _ => {
                let _ = child.start_kill();
                let log: Vec<String> = tail.lock().iter().cloned().collect();
                return Err(SimError::Server(format!(
                    "the server did not start; its log:\n{}",
                    log.join("\n")
                )));
            }
        };
        Ok(LocalServer {
            child,
            addr,
            data_dir,
            owned_dir,
            tail,
            warnings,
        })
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// WARN and ERROR lines the server logged so far.
    pub fn warnings(&self) -> u64 {
        self.warnings.load(Ordering::Relaxed)
    }

    pub fn log_tail(&self) -> String {
        self.tail
            .lock()
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// SIGTERM, then up to `grace` for an orderly exit, then SIGKILL; removes a temporary
    /// data directory.
    pub async fn stop(mut self, grace: Duration) -> Result<(), SimError> {
        if let Some(pid) = self.child.id() {
            let _ = Command::new("kill")
                .arg("-TERM")
                .arg(pid.to_string())
                .status()
                .await;
            if tokio::time::timeout(grace, self.child.wait())
                .await
                .is_err()
            {
                let _ = self.child.kill().await;
            }
        }
        if let Some(dir) = self.owned_dir.take() {
            let _ = tokio::fs::remove_dir_all(dir).await;
        }
        Ok(())
    }
}

/// Creates (or, if it exists, updates) a user through `bin user`, on `data_dir`'s store.
pub async fn ensure_user(
    bin: &Path,
    data_dir: &Path,
    name: &str,
    password: &str,
    approver: bool,
    machine_limit: u32,
) -> Result<(), SimError> {
    let limit = machine_limit.to_string();
    let run = |args: Vec<&str>| {
        let mut cmd = Command::new(bin);
        cmd.arg("user")
            .args(args)
            .env("SHOAL_DATA_DIR", data_dir)
            .env("SHOAL_LOG", "error")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        cmd
    };
    let mut args = vec![
        "add",
        name,
        "--password",
        password,
        "--machine-limit",
        &limit,
    ];
    if approver {
        args.push("--approver");
    }
    let out = run(args).output().await?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    if !err.contains("already taken") {
        return Err(SimError::Setup(format!("shoal user add {name}: {err}")));
    }
    let mut args = vec![
        "set",
        name,
        "--password",
        password,
        "--machine-limit",
        &limit,
        "--unblock",
    ];
    if approver {
        args.push("--approver");
    }
    let out = run(args).output().await?;
    if out.status.success() {
        Ok(())
    } else {
        Err(SimError::Setup(format!(
            "shoal user set {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        )))
    }
}

/// POSTs a JSON body and returns the reply object; an `error` in it is an Err.
pub async fn api(client: &Client, path: &str, body: &Value) -> Result<Value, SimError> {
    let bytes = serde_json::to_vec(body).map_err(|e| SimError::Setup(e.to_string()))?;
    let reply = client
        .call(Method::POST, path, Some(bytes.into()))
        .await
        .map_err(|e| SimError::Setup(format!("{path}: {e}")))?;
    let v: Value = serde_json::from_slice(&reply.body)
        .map_err(|e| SimError::Setup(format!("{path}: reply is not JSON: {e}")))?;
    if let Some(e) = v.get("error") {
        return Err(SimError::Setup(format!("{path}: {e}")));
    }
    Ok(v)
}

/// GETs a text resource (`/metrics`, `/healthz`).
pub async fn get_text(client: &Client, path: &str) -> Result<String, SimError> {
    let reply = client
        .call(Method::GET, path, None)
        .await
        .map_err(|e| SimError::Server(format!("{path}: {e}")))?;
    Ok(String::from_utf8_lossy(&reply.body).into_owned())
}

/// What kind of runs the simulator creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum RunKind {
    /// SPRT runs (800,000 games at most, may stop early when the test is decided).
    Sprt,
    /// Fixed-games runs of 3,200,000 games.
    Fixed,
}

fn hex40<R: Rng>(rng: &mut R) -> String {
    (0..40)
        .map(|_| char::from_digit(rng.random_range(0..16), 16).unwrap_or('0'))
        .collect()
}

/// The arguments of run number `i`.
pub fn run_args<R: Rng>(i: usize, kind: RunKind, elo0: f64, elo1: f64, rng: &mut R) -> Value {
    let mut args = json!({
        "base_tag": "master",
        "new_tag": format!("sim-patch-{i}"),
        "resolved_base": hex40(rng),
        "resolved_new": hex40(rng),
        "base_signature": rng.random_range(1_000_000u32..9_999_999).to_string(),
        "new_signature": rng.random_range(1_000_000u32..9_999_999).to_string(),
        "base_options": "Hash=16",
        "new_options": "Hash=16",
        "tc": "10+0.1",
        "book": "UHO_Lichess_4852_v1.epd",
        "book_depth": "8",
        "threads": 1,
        "tests_repo": "https://github.com/official-stockfish/Stockfish",
        "info": format!("shoal sim run {i}"),
    });
    if let Value::Object(m) = &mut args {
        match kind {
            RunKind::Sprt => {
                m.insert("sprt".into(), json!({"elo0": elo0, "elo1": elo1}));
            }
            RunKind::Fixed => {
                m.insert("num_games".into(), json!(shoal_protocol::MAX_GAMES));
            }
        }
    }
    args
}

/// Creates `n` runs as `submitter` and approves them as `approver`; returns their ids.
/// `window`: the runs' `max_active_tasks` (None: unlimited).
#[allow(clippy::too_many_arguments)]
pub async fn create_runs<R: Rng>(
    client: &Client,
    submitter: &str,
    approver: &str,
    password: &str,
    n: usize,
    kind: RunKind,
    bounds: (f64, f64),
    window: Option<u32>,
    rng: &mut R,
) -> Result<Vec<String>, SimError> {
    let mut ids = Vec::with_capacity(n);
    for i in 0..n {
        let mut args = run_args(i, kind, bounds.0, bounds.1, rng);
        if let (Some(w), Value::Object(m)) = (window, &mut args) {
            m.insert("max_active_tasks".into(), json!(w));
        }
        let v = api(
            client,
            "/api/create_run",
            &json!({"username": submitter, "password": password, "args": args}),
        )
        .await?;
        let id = v
            .get("run_id")
            .and_then(Value::as_str)
            .ok_or_else(|| SimError::Setup(format!("create_run: no run_id in {v}")))?
            .to_string();
        api(
            client,
            "/api/approve_run",
            &json!({"username": approver, "password": password, "run_id": id}),
        )
        .await?;
        ids.push(id);
    }
    Ok(ids)
}

/// CPU seconds (user + system) in the text of `/proc/PID/stat`.
pub fn parse_cpu_seconds(stat: &str) -> Option<f64> {
    let after = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // After the command: state (3rd field), …, utime (14th), stime (15th).
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    // /proc reports clock ticks of USER_HZ, 100 on Linux.
    Some((utime + stime) / 100.0)
}

/// Peak resident set size in MiB (VmHWM) in the text of `/proc/PID/status`.
pub fn parse_peak_rss_mib(status: &str) -> Option<f64> {
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

/// CPU seconds used so far by process `pid` ("self" for this one).
pub async fn cpu_seconds(pid: &str) -> Option<f64> {
    let text = tokio::fs::read_to_string(format!("/proc/{pid}/stat"))
        .await
        .ok()?;
    parse_cpu_seconds(&text)
}

/// Peak RSS of process `pid` in MiB.
pub async fn peak_rss_mib(pid: &str) -> Option<f64> {
    let text = tokio::fs::read_to_string(format!("/proc/{pid}/status"))
        .await
        .ok()?;
    parse_peak_rss_mib(&text)
}

/// The machine the simulation ran on.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MachineInfo {
    pub cores: usize,
    pub memory_gib: f64,
    pub cpu: String,
    pub kernel: String,
}

impl MachineInfo {
    pub async fn read() -> MachineInfo {
        let read =
            |p: &'static str| async move { tokio::fs::read_to_string(p).await.unwrap_or_default() };
        let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
        let memory_gib = read("/proc/meminfo")
            .await
            .lines()
            .find(|l| l.starts_with("MemTotal:"))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<f64>().ok())
            .map_or(0.0, |kib| (kib / 1024.0 / 1024.0 * 10.0).round() / 10.0);
        let cpu = read("/proc/cpuinfo")
            .await
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
            .unwrap_or_default();
        let kernel = read("/proc/sys/kernel/osrelease").await.trim().to_string();
        MachineInfo {
            cores,
            memory_gib,
            cpu,
            kernel,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_listening_line() {
        let line = strip_ansi(
            "2024-01-01T00:00:00Z \x1b[32m INFO\x1b[0m shoal::app: listening on http://127.0.0.1:40123 primary=true",
        );
        assert_eq!(
            listening_addr(&line),
            Some("127.0.0.1:40123".parse().expect("addr"))
        );
        assert_eq!(listening_addr("nothing here"), None);
    }

    #[test]
    fn parses_proc_files() {
        let stat = "1234 (shoal (x)) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 9 0";
        assert_eq!(parse_cpu_seconds(stat), Some(3.25));
        assert_eq!(parse_cpu_seconds("garbage"), None);
        let status = "Name:\tshoal\nVmPeak:\t  100 kB\nVmHWM:\t   20480 kB\nVmRSS:\t 1 kB\n";
        assert_eq!(parse_peak_rss_mib(status), Some(20.0));
        let own = std::fs::read_to_string("/proc/self/stat").expect("stat");
        assert!(parse_cpu_seconds(&own).is_some());
    }

    #[test]
    fn run_arguments_have_the_shape_of_their_kind() {
        // That the server accepts them is checked against a real server by the integration
        // test `sim::run_arguments_are_accepted_by_a_real_server`.
        let mut rng = rand::rng();
        for kind in [RunKind::Sprt, RunKind::Fixed] {
            let args = run_args(3, kind, 0.0, 2.0, &mut rng);
            assert_eq!(args.get("sprt").is_some(), kind == RunKind::Sprt);
            assert_eq!(
                args.get("num_games").and_then(Value::as_u64),
                (kind == RunKind::Fixed).then_some(shoal_protocol::MAX_GAMES)
            );
        }
    }
}

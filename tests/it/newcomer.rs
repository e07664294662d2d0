//! What a newcomer and the suite itself rely on: `shoal demo`'s server ends with the demo
//! however the demo ends (SIGTERM, or killed outright), and `SHOAL_EXPECT_STORE`, the guard the
//! harness gives every server and command on the MongoDB pass, refuses a command whose store
//! is another (so that pass cannot quietly run on SQLite).

use std::io::BufRead as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::browser::alive;
use crate::harness::{bin, run_bin, store_in_log};

/// The parent pid of a process (`/proc/<pid>/stat`'s fourth field).
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, rest) = stat.rsplit_once(')')?;
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The `shoal serve` child of `parent`.
fn server_child(parent: i32) -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .find(|&pid| {
            parent_of(pid) == Some(parent)
                && std::fs::read(format!("/proc/{pid}/cmdline"))
                    .is_ok_and(|c| c.split(|b| *b == 0).any(|a| a == b"serve"))
        })
}

/// Starts `shoal demo` (a port of its own choosing, one worker) and returns it with its
/// server's pid once the demo says where the server is.
fn start_demo(dir: &std::path::Path) -> (std::process::Child, i32) {
    let mut demo = Command::new(bin())
        .args(["demo", "--port", "0", "--workers", "1", "--duration", "300"])
        .arg("--data-dir")
        .arg(dir.join("data"))
        .current_dir(dir)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("shoal demo");
    let stdout = demo.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if line.starts_with("shoal demo: server at") {
                let _ = tx.send(());
            }
        }
    });
    if rx.recv_timeout(Duration::from_secs(120)).is_err() {
        let _ = demo.kill();
        panic!("the demo never said where its server is");
    }
    let pid = i32::try_from(demo.id()).expect("a pid");
    let server = server_child(pid).expect("the demo's server process");
    assert!(alive(server));
    (demo, server)
}

fn wait_gone(pid: i32, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while alive(pid) {
        assert!(
            Instant::now() < deadline,
            "{what}: its server {pid} still runs"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_demos_server_ends_with_the_demo() {
    for (signal, what) in [
        (libc::SIGTERM, "demo ended by SIGTERM"),
        (libc::SIGKILL, "demo killed"),
    ] {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut demo, server) = start_demo(dir.path());
        let pid = i32::try_from(demo.id()).expect("a pid");
        // SAFETY: kill(2) on our own child (not yet reaped); no memory is touched.
        assert_eq!(unsafe { libc::kill(pid, signal) }, 0);
        let status = demo.wait().expect("the demo's end");
        if signal == libc::SIGTERM {
            assert!(status.success(), "{what}: {status}");
        }
        wait_gone(server, what);
    }
}

#[test]
fn a_command_on_another_store_than_expected_refuses_to_run() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8");
    let base = [
        ("SHOAL_DATA_DIR", data),
        ("SHOAL_STORE", "sqlite"),
        ("SHOAL_MONGODB_URI", "mongodb://127.0.0.1:9/x"),
    ];
    let with = |expect: &str| {
        let mut env = base.to_vec();
        env.push(("SHOAL_EXPECT_STORE", expect));
        run_bin(&["check-config"], &env, dir.path())
    };
    let (status, err) = with("mongodb");
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(
        err.contains("SHOAL_EXPECT_STORE=mongodb but this configuration's store is \"sqlite\""),
        "{err}"
    );
    let (status, err) = with("sqlite");
    assert!(status.success(), "{err}");
    // The server's "listening on" line names its store, which the harness checks.
    let line = "2026-01-01T00:00:00Z  INFO shoal::app: listening on http://127.0.0.1:1 \
                primary=true store=\"mongodb\" tokens=8";
    assert_eq!(store_in_log(line), Some("mongodb"));
    assert_eq!(store_in_log("listening on http://127.0.0.1:1"), None);
}

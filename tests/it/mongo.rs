//! A MongoDB-compatible server for the tests: SecantusDB (PyPI `SecantusDB`, its
//! `secantusd-py` command), started once per test binary on an ephemeral loopback port with
//! in-memory storage, and killed with the test binary. Each test takes a database of its own
//! ([`fresh_uri`]).
//!
//! `./test.sh` installs it (the pinned version, under `target/`) and points
//! `SHOAL_TEST_SECANTUSD` at it; without that variable the harness looks for the same
//! install under `target/` ([`SECANTUS_VERSION`]), then for `secantusd-py` on `PATH`. On a
//! machine without it these tests fail with one line saying how to install it.

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use bson::Document;

static PORT: OnceLock<Result<u16, String>> = OnceLock::new();

/// The SecantusDB version `./test.sh` installs (its `SECANTUS_VERSION`; a test checks they
/// agree), in `target/secantusdb-<version>`.
pub const SECANTUS_VERSION: &str = "0.7.0b3";

/// The command that starts the server: `SHOAL_TEST_SECANTUSD`, else the one `./test.sh`
/// installed under the repository's `target/`, else `secantusd-py` from `PATH`.
fn command() -> String {
    command_in(
        std::env::var("SHOAL_TEST_SECANTUSD").ok(),
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")),
    )
}

/// [`command`] for a given `SHOAL_TEST_SECANTUSD` and repository root.
fn command_in(var: Option<String>, root: &std::path::Path) -> String {
    if let Some(cmd) = var.filter(|c| !c.is_empty()) {
        return cmd;
    }
    let installed = root.join(format!(
        "target/secantusdb-{SECANTUS_VERSION}/bin/secantusd-py"
    ));
    if installed.is_file() {
        return installed.to_string_lossy().into_owned();
    }
    "secantusd-py".to_string()
}

/// Starts the server from a thread of its own, which spawns it (the child is killed when
/// that thread ends: it lives as long as the test binary) and keeps draining its log.
fn start() -> Result<u16, String> {
    let (tx, rx) = std::sync::mpsc::channel::<Result<u16, String>>();
    let cmd = command();
    std::thread::Builder::new()
        .name("secantusd".into())
        .spawn(move || {
            let mut c = Command::new(&cmd);
            c.args([
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--storage-path",
                ":memory:",
                "--log-level",
                "INFO",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
            // SAFETY: prctl(2) in the child between fork and exec, touching no memory of
            // ours: the server gets SIGKILL when this thread (which forked it) ends.
            unsafe {
                std::os::unix::process::CommandExt::pre_exec(&mut c, || {
                    libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
                    Ok(())
                });
            }
            let mut child = match c.spawn() {
                Ok(child) => child,
                Err(e) => {
                    let _ = tx.send(Err(format!(
                        "SecantusDB is not installed ({cmd}: {e}): run ./test.sh (it installs \
                         it under target/), or set SHOAL_TEST_SECANTUSD to a secantusd-py of \
                         `pip install SecantusDB=={SECANTUS_VERSION}`"
                    )));
                    return;
                }
            };
            let Some(stderr) = child.stderr.take() else {
                let _ = tx.send(Err("no stderr".into()));
                return;
            };
            let mut sent = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !sent
                    && let Some(port) = line
                        .split("listening on 127.0.0.1:")
                        .nth(1)
                        .and_then(|p| p.trim().parse::<u16>().ok())
                {
                    let _ = tx.send(Ok(port));
                    sent = true;
                }
            }
            let status = child.wait();
            if !sent {
                let _ = tx.send(Err(format!("{cmd} ended before listening: {status:?}")));
            }
            // Parked, not returned: the death signal is tied to this thread.
            loop {
                std::thread::park();
            }
        })
        .map_err(|e| e.to_string())?;
    rx.recv_timeout(Duration::from_secs(60))
        .map_err(|_| "SecantusDB did not say where it listens within 60 s".to_string())?
}

/// The port of the shared server (started on first use).
pub fn port() -> u16 {
    match PORT.get_or_init(start) {
        Ok(port) => *port,
        Err(e) => panic!("{e}"),
    }
}

/// A connection string to a database no other test uses (`<tag>_<random>`).
pub fn fresh_uri(tag: &str) -> String {
    format!(
        "mongodb://127.0.0.1:{}/{tag}_{:016x}",
        port(),
        rand::random::<u64>()
    )
}

/// The database of `uri`, through the driver's blocking API (call it off the async runtime:
/// [`docs`], [`run`]).
pub fn database(uri: &str) -> mongodb::sync::Database {
    let client = mongodb::sync::Client::with_uri_str(uri).expect("client");
    let name = uri
        .rsplit('/')
        .next()
        .and_then(|n| n.split('?').next())
        .expect("a database in the URI");
    client.database(name)
}

/// Runs blocking driver calls on a blocking thread.
pub async fn run<T: Send + 'static>(
    uri: &str,
    f: impl FnOnce(mongodb::sync::Database) -> T + Send + 'static,
) -> T {
    let uri = uri.to_string();
    tokio::task::spawn_blocking(move || f(database(&uri)))
        .await
        .expect("blocking task")
}

/// Every document of `coll` matching `filter`.
pub async fn docs(uri: &str, coll: &'static str, filter: Document) -> Vec<Document> {
    run(uri, move |db| {
        db.collection::<Document>(coll)
            .find(filter)
            .run()
            .expect("find")
            .map(|d| d.expect("document"))
            .collect()
    })
    .await
}

/// `cargo nextest run` without `./test.sh` finds the SecantusDB that `./test.sh` installed,
/// at the version `./test.sh` pins.
#[test]
fn the_harness_finds_the_secantusdb_test_sh_installs() {
    let script =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/test.sh")).expect("test.sh");
    assert!(
        script.contains(&format!("SECANTUS_VERSION=\"{SECANTUS_VERSION}\"")),
        "test.sh pins another SecantusDB version than tests/it/mongo.rs ({SECANTUS_VERSION})"
    );
    assert!(script.contains("VENV=\"target/secantusdb-$SECANTUS_VERSION\""));
    let root = tempfile::tempdir().expect("tempdir");
    assert_eq!(command_in(None, root.path()), "secantusd-py");
    let bin = root
        .path()
        .join(format!("target/secantusdb-{SECANTUS_VERSION}/bin"));
    std::fs::create_dir_all(&bin).expect("bin");
    std::fs::write(bin.join("secantusd-py"), "").expect("file");
    assert_eq!(
        command_in(None, root.path()),
        bin.join("secantusd-py").to_string_lossy()
    );
    assert_eq!(command_in(Some("/x/y".into()), root.path()), "/x/y");
    assert_eq!(
        command_in(Some(String::new()), root.path()),
        bin.join("secantusd-py").to_string_lossy()
    );
}

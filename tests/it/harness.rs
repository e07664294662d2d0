//! The test harness: runs the real `shoal` binary on an ephemeral port with a temporary data
//! directory, and talks HTTP to it.
//!
//! Each server is its own process, so metrics, signals and crashes are those of a real
//! deployment and tests cannot disturb each other. A server ends with its test: dropped with
//! it, or told by the kernel when the test process dies without unwinding (nextest's timeout:
//! `SHOAL_EXIT_WITH_PARENT`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde_json::Value;

pub struct TestServer {
    child: Option<Child>,
    pub addr: SocketAddr,
    pub data_dir: PathBuf,
    /// Keeps the temporary directory alive when the server made its own.
    _dir: Option<tempfile::TempDir>,
    logs: Arc<Mutex<String>>,
    pub client: reqwest::Client,
    /// The store settings the server runs with (`SHOAL_STORE`, `SHOAL_MONGODB_URI`), which
    /// [`TestServer::cli`] gives the commands run beside it.
    store_env: Vec<(String, String)>,
}

/// Settings for a test server: `SHOAL_*` overrides on top of test defaults.
#[derive(Clone, Default)]
pub struct Opts {
    pub env: Vec<(String, String)>,
    pub data_dir: Option<PathBuf>,
    /// Run with the product's defaults for what the harness otherwise turns on for tests
    /// (the `/debug` routes).
    pub production: bool,
}

impl Opts {
    pub fn new() -> Self {
        Opts::default()
    }

    pub fn set(mut self, key: &str, value: impl ToString) -> Self {
        self.env
            .push((format!("SHOAL_{}", key.to_uppercase()), value.to_string()));
        self
    }

    pub fn data_dir(mut self, dir: &Path) -> Self {
        self.data_dir = Some(dir.to_path_buf());
        self
    }

    /// The product's defaults: no `/debug` routes.
    pub fn production(mut self) -> Self {
        self.production = true;
        self
    }
}

/// With `SHOAL_TEST_MONGODB_URI` set (e.g. `mongodb://localhost:27017`), every server and
/// CLI run of the tests uses `store = "mongodb"`, in a database of its own per data directory
/// (`shoal_it_<hash of the path>`), so tests stay apart. The databases are not dropped: use a
/// throwaway server.
pub fn mongo_env(data_dir: &Path) -> Vec<(String, String)> {
    let Ok(base) = std::env::var("SHOAL_TEST_MONGODB_URI") else {
        return Vec::new();
    };
    let (base, params) = base.split_once('?').unwrap_or((base.as_str(), ""));
    let hosts_at = base.find("://").map_or(0, |i| i + 3);
    let base = match base[hosts_at..].find('/') {
        Some(i) => &base[..hosts_at + i],
        None => base,
    };
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    data_dir.hash(&mut h);
    let mut uri = format!("{base}/shoal_it_{:016x}", h.finish());
    if !params.is_empty() {
        uri = format!("{uri}?{params}");
    }
    vec![
        ("SHOAL_STORE".to_string(), "mongodb".to_string()),
        ("SHOAL_MONGODB_URI".to_string(), uri),
    ]
}

/// Whether this run of the suite uses the MongoDB store (`SHOAL_TEST_MONGODB_URI`).
pub fn on_mongodb() -> bool {
    std::env::var_os("SHOAL_TEST_MONGODB_URI").is_some()
}

/// On the MongoDB pass, the guard every server and `shoal` command the harness starts gets:
/// `SHOAL_EXPECT_STORE` (the binary refuses to run on another store, so a test fails), and a
/// mark that this test ran something on MongoDB ([`tally_mongodb`]). Empty on SQLite.
fn expect_store_env(store_env: &[(String, String)]) -> Vec<(String, String)> {
    if !on_mongodb() {
        return Vec::new();
    }
    let store = store_env
        .iter()
        .rev()
        .find(|(k, _)| k == "SHOAL_STORE")
        .map_or("sqlite", |(_, v)| v.as_str());
    if store == "mongodb" {
        tally_mongodb();
    }
    vec![("SHOAL_EXPECT_STORE".to_string(), store.to_string())]
}

/// Leaves this test's mark in `SHOAL_TEST_MONGODB_TALLY` (a directory; `./test.sh` counts
/// its files): one file per test process, which nextest gives every test.
pub fn tally_mongodb() {
    let Some(dir) = std::env::var_os("SHOAL_TEST_MONGODB_TALLY") else {
        return;
    };
    let name = std::thread::current()
        .name()
        .unwrap_or("unnamed")
        .to_string();
    let path = Path::new(&dir).join(std::process::id().to_string());
    std::fs::write(&path, name).expect("the MongoDB tally directory");
}

/// The store named in a server's "listening on" line (`store="mongodb"`).
pub fn store_in_log(line: &str) -> Option<&str> {
    let rest = line.split(" store=").nth(1)?;
    Some(rest.split_whitespace().next()?.trim_matches('"'))
}

/// Returns true, after saying so, when the test is about the SQLite store itself and the
/// suite runs on MongoDB: the caller returns early.
pub fn sqlite_only(what: &str) -> bool {
    if on_mongodb() {
        eprintln!("skipped on the MongoDB store: {what}");
    }
    on_mongodb()
}

/// The store of a test server's data directory, opened beside it: SQLite, or MongoDB when
/// `SHOAL_TEST_MONGODB_URI` is set (see [`mongo_env`]). Every call runs on a thread of its
/// own, so the store can be used from async tests too (the MongoDB driver's blocking API
/// refuses to run inside the tests' runtime).
pub fn open_store(data_dir: &Path) -> shoal::store::StoreResult<Box<dyn shoal::store::Store>> {
    let data_dir = data_dir.to_path_buf();
    let store = off_thread(
        move || -> shoal::store::StoreResult<Box<dyn shoal::store::Store>> {
            if let Some((_, uri)) = mongo_env(&data_dir)
                .into_iter()
                .find(|(k, _)| k == "SHOAL_MONGODB_URI")
            {
                let uri = shoal::secret::SecretUri::new(uri);
                return Ok(Box::new(shoal::store::mongo::MongoStore::open(&uri)?));
            }
            Ok(Box::new(shoal::store::sqlite::SqliteStore::open(
                &data_dir,
                shoal::config::SqliteSync::Normal,
            )?))
        },
    )?;
    Ok(Box::new(OffThread(Arc::from(store))))
}

/// Runs `f` on a new thread (outside any async runtime) and waits for it.
fn off_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| s.spawn(f).join().expect("store call panicked"))
}

/// A store whose every call runs on a thread of its own ([`open_store`]).
struct OffThread(Arc<dyn shoal::store::Store>);

impl shoal::store::Store for OffThread {
    fn get(
        &self,
        coll: shoal::store::Collection,
        id: &str,
    ) -> shoal::store::StoreResult<Option<shoal::store::Doc>> {
        off_thread(|| self.0.get(coll, id))
    }
    fn put(
        &self,
        coll: shoal::store::Collection,
        doc: &shoal::store::Doc,
    ) -> shoal::store::StoreResult<()> {
        off_thread(|| self.0.put(coll, doc))
    }
    fn put_many(
        &self,
        coll: shoal::store::Collection,
        docs: &[shoal::store::Doc],
    ) -> shoal::store::StoreResult<()> {
        off_thread(|| self.0.put_many(coll, docs))
    }
    fn insert(
        &self,
        coll: shoal::store::Collection,
        doc: shoal::store::Doc,
    ) -> shoal::store::StoreResult<String> {
        off_thread(|| self.0.insert(coll, doc))
    }
    fn delete(&self, coll: shoal::store::Collection, id: &str) -> shoal::store::StoreResult<bool> {
        off_thread(|| self.0.delete(coll, id))
    }
    fn increment(
        &self,
        coll: shoal::store::Collection,
        id: &str,
        field: &str,
        by: i64,
    ) -> shoal::store::StoreResult<bool> {
        off_thread(|| self.0.increment(coll, id, field, by))
    }
    fn find(
        &self,
        coll: shoal::store::Collection,
        query: &shoal::store::Query,
    ) -> shoal::store::StoreResult<Vec<shoal::store::Doc>> {
        off_thread(|| self.0.find(coll, query))
    }
    fn count(
        &self,
        coll: shoal::store::Collection,
        filter: &[shoal::store::Cond],
    ) -> shoal::store::StoreResult<u64> {
        off_thread(|| self.0.count(coll, filter))
    }
    fn pgn_put(&self, run_task: &str, gz: &[u8]) -> shoal::store::StoreResult<()> {
        off_thread(|| self.0.pgn_put(run_task, gz))
    }
    fn pgn_find(&self, run_task: &str) -> shoal::store::StoreResult<Vec<shoal::store::PgnInfo>> {
        off_thread(|| self.0.pgn_find(run_task))
    }
    fn pgn_list_run(&self, run_id: &str) -> shoal::store::StoreResult<Vec<shoal::store::PgnInfo>> {
        off_thread(|| self.0.pgn_list_run(run_id))
    }
    fn pgn_read(
        &self,
        handle: &shoal::store::PgnHandle,
        offset: u64,
        len: usize,
    ) -> shoal::store::StoreResult<Vec<u8>> {
        off_thread(|| self.0.pgn_read(handle, offset, len))
    }
    fn pgn_import(&self, id: &str, run_task: &str, gz: &[u8]) -> shoal::store::StoreResult<bool> {
        off_thread(|| self.0.pgn_import(id, run_task, gz))
    }
    fn pgn_scan(
        &self,
        after: Option<&shoal::store::PgnHandle>,
        limit: usize,
    ) -> shoal::store::StoreResult<Vec<(String, shoal::store::PgnInfo)>> {
        off_thread(|| self.0.pgn_scan(after, limit))
    }
    fn expired_pgn_runs(
        &self,
        window: &shoal::store::RetentionWindow,
        after: Option<&shoal::store::RunPosition>,
        limit: usize,
    ) -> shoal::store::StoreResult<shoal::store::ExpiredRuns> {
        off_thread(|| self.0.expired_pgn_runs(window, after, limit))
    }
    fn pgn_delete_expired(
        &self,
        run_id: &str,
        window: &shoal::store::RetentionWindow,
        limit: usize,
        max_bytes: u64,
    ) -> shoal::store::StoreResult<shoal::store::PgnsDeleted> {
        off_thread(|| self.0.pgn_delete_expired(run_id, window, limit, max_bytes))
    }
    fn reclaim_space(&self, max_pages: u32) -> shoal::store::StoreResult<u64> {
        off_thread(|| self.0.reclaim_space(max_pages))
    }
    fn journal_append(
        &self,
        entries: &[shoal::store::JournalEntry],
        actions: &[shoal::store::Doc],
    ) -> shoal::store::StoreResult<()> {
        off_thread(|| self.0.journal_append(entries, actions))
    }
    fn journal_pending(&self) -> shoal::store::StoreResult<(Vec<shoal::store::JournalEntry>, u64)> {
        off_thread(|| self.0.journal_pending())
    }
    fn flush_runs(&self, runs: &[shoal::store::RunRecord]) -> shoal::store::StoreResult<()> {
        off_thread(|| self.0.flush_runs(runs))
    }
    fn close(&self) -> shoal::store::StoreResult<()> {
        off_thread(|| self.0.close())
    }
    fn shared_with_fishtest(&self) -> bool {
        self.0.shared_with_fishtest()
    }
}

/// The `shoal` command for a data directory, as an operator runs it: environment cleared but
/// for `PATH`, `SHOAL_DATA_DIR`, the store of this run of the suite (SQLite, or MongoDB:
/// [`mongo_env`]) and `SHOAL_LOG=warn`, from the data directory's parent (never the
/// repository, whose `settings.toml` would apply). Add arguments and more environment.
pub fn cli(data_dir: &Path) -> Command {
    let cwd = data_dir.parent().unwrap_or(data_dir).to_path_buf();
    std::fs::create_dir_all(&cwd).expect("cwd");
    let mut cmd = Command::new(bin());
    cmd.current_dir(cwd)
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("SHOAL_DATA_DIR", data_dir)
        .env("SHOAL_LOG", "warn")
        .envs(mongo_env(data_dir))
        .envs(expect_store_env(&mongo_env(data_dir)));
    cmd
}

/// Where test servers find "GitHub" unless told otherwise: the discard port on loopback,
/// which nothing listens on, so a call fails at once as GitHub being unreachable.
pub const NO_GITHUB: &str = "http://127.0.0.1:9";

pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_shoal")
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(Opts::new()).await
    }

    pub async fn start_with(opts: Opts) -> TestServer {
        let (dir, data_dir) = match &opts.data_dir {
            Some(d) => (None, d.clone()),
            None => {
                let dir = tempfile::tempdir().expect("tempdir");
                let data = dir.path().join("data");
                (Some(dir), data)
            }
        };
        let cwd = data_dir.parent().unwrap_or(&data_dir).to_path_buf();
        std::fs::create_dir_all(&cwd).expect("cwd");
        let mut cmd = Command::new(bin());
        cmd.arg("serve")
            .current_dir(&cwd)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("SHOAL_PORT", "0")
            // SIGTERM from the kernel when the test process dies, however it dies.
            .env("SHOAL_EXIT_WITH_PARENT", std::process::id().to_string())
            .env("SHOAL_DATA_DIR", &data_dir)
            .env("SHOAL_LOG", "info")
            .env("SHOAL_SHUTDOWN_GRACE_S", "5")
            // No test reaches the internet: GitHub is a closed port unless a test starts
            // its stand-in (`fake_github.rs`) and points these at it.
            .env("SHOAL_GITHUB_API_URL", NO_GITHUB)
            .env("SHOAL_GITHUB_RAW_URL", NO_GITHUB)
            .env("SHOAL_GITHUB_TIMEOUT_S", "2")
            // Test clients fill the signup form in milliseconds: no minimum age unless a
            // test asks for one (`signup_guard.rs` tests the default).
            .env("SHOAL_SIGNUP_MIN_FORM_AGE_S", "0")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if !opts.production {
            cmd.env("SHOAL_DEBUG_ENDPOINTS", "true");
        }
        cmd.envs(mongo_env(&data_dir));
        for (k, v) in &opts.env {
            cmd.env(k, v);
        }
        let mut store_env: Vec<(String, String)> = mongo_env(&data_dir);
        for (k, v) in &opts.env {
            if k == "SHOAL_STORE" || k == "SHOAL_MONGODB_URI" {
                store_env.retain(|(key, _)| key != k);
                store_env.push((k.clone(), v.clone()));
            }
        }
        let expect = expect_store_env(&store_env);
        cmd.envs(expect.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut child = cmd.spawn().expect("spawn shoal");
        let stderr = child.stderr.take().expect("stderr");
        let logs = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = std::sync::mpsc::channel::<(SocketAddr, String)>();
        let sink = logs.clone();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if !sent && let Some(rest) = line.split("listening on http://").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or_default();
                    if let Ok(addr) = addr.parse() {
                        let store = store_in_log(&line).unwrap_or_default().to_string();
                        let _ = tx.send((addr, store));
                        sent = true;
                    }
                }
                let mut l = sink.lock();
                l.push_str(&line);
                l.push('\n');
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok((addr, store)) => {
                // On the MongoDB pass the server says which store it opened: the one asked for.
                if let Some((_, expected)) = expect.first()
                    && store != *expected
                {
                    let _ = child.kill();
                    panic!(
                        "the server runs on store {store:?}, not {expected:?}; log:\n{}",
                        logs.lock()
                    );
                }
                addr
            }
            Err(_) => {
                let _ = child.kill();
                panic!("server did not start; log:\n{}", logs.lock());
            }
        };
        let client = reqwest::Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .expect("client");
        TestServer {
            child: Some(child),
            addr,
            data_dir,
            _dir: dir,
            logs,
            client,
            store_env,
        }
    }

    /// [`cli`] for this server's data directory and store.
    pub fn cli(&self) -> Command {
        let mut cmd = cli(&self.data_dir);
        cmd.envs(self.store_env.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        cmd.envs(expect_store_env(&self.store_env));
        cmd
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    pub fn logs(&self) -> String {
        self.logs.lock().clone()
    }

    pub async fn get_json(&self, path: &str) -> (u16, Value) {
        let r = self.client.get(self.url(path)).send().await.expect("GET");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> (u16, Value) {
        let r = self
            .client
            .post(self.url(path))
            .json(body)
            .send()
            .await
            .expect("POST");
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    pub async fn health(&self) -> Value {
        self.get_json("/healthz").await.1
    }

    pub async fn metrics(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics text")
    }

    /// Sum of every sample of `name` whose labels contain all of `labels` (`k="v"` pairs).
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        metric_sum(&self.metrics().await, name, labels)
    }

    /// Polls `cond` on the health document until it holds (or panics after `secs`).
    pub async fn wait_health(&self, secs: u64, what: &str, cond: impl Fn(&Value) -> bool) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let h = self.health().await;
            if cond(&h) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}: {h}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid; no memory is touched.
        let rc = unsafe { libc::kill(self.pid() as i32, sig) };
        assert_eq!(rc, 0, "kill failed");
    }

    /// Waits for the process to exit and returns its status.
    pub fn wait_exit(&mut self, secs: u64) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let child = self.child.as_mut().expect("running");
        loop {
            if let Some(status) = child.try_wait().expect("try_wait") {
                self.child = None;
                // Let the log reader catch the last lines.
                std::thread::sleep(Duration::from_millis(100));
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("server did not exit; log:\n{}", self.logs());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    let mut total = 0.0;
    for line in text.lines() {
        if line.starts_with('#') {
            continue;
        }
        let Some(rest) = line.strip_prefix(name) else {
            continue;
        };
        if !(rest.starts_with('{') || rest.starts_with(' ')) {
            continue;
        }
        if !labels
            .iter()
            .all(|(k, v)| rest.contains(&format!("{k}=\"{v}\"")))
        {
            continue;
        }
        if let Some(value) = line.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) {
            total += value;
        }
    }
    total
}

/// Runs the binary with extra environment and returns (exit status, stderr).
pub fn run_bin(args: &[&str], env: &[(&str, &str)], cwd: &Path) -> (ExitStatus, String) {
    let mongo = env
        .iter()
        .find(|(k, _)| *k == "SHOAL_DATA_DIR")
        .map(|(_, dir)| mongo_env(Path::new(dir)))
        .unwrap_or_default();
    // The store guard when the harness chose the store (a data directory was given), for the
    // store the command ends up with (the test's own SHOAL_STORE wins).
    let expect = if mongo.is_empty() {
        Vec::new()
    } else {
        let mut chosen = mongo.clone();
        chosen.extend(
            env.iter()
                .filter(|(k, _)| *k == "SHOAL_STORE")
                .map(|(k, v)| (k.to_string(), v.to_string())),
        );
        expect_store_env(&chosen)
    };
    let out = Command::new(bin())
        .args(args)
        .current_dir(cwd)
        .env_clear()
        .envs(mongo)
        .envs(expect)
        .envs(env.iter().copied())
        .output()
        .expect("run shoal");
    (
        out.status,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A test killed without unwinding (as nextest kills one past its time limit), holding a
/// server: run in a process of its own by `a_killed_test_leaves_no_server_behind`, which kills
/// it. Does nothing when run otherwise.
#[tokio::test]
#[ignore = "run by a_killed_test_leaves_no_server_behind"]
async fn hold_a_server() {
    if std::env::var_os("SHOAL_TEST_HOLD_SERVER").is_none() {
        return;
    }
    let server = TestServer::start().await;
    println!("HOLDING {}", server.pid());
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[test]
fn a_killed_test_leaves_no_server_behind() {
    let exe = std::env::current_exe().expect("the test binary");
    let mut child = Command::new(exe)
        .args([
            "harness::hold_a_server",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("SHOAL_TEST_HOLD_SERVER", "1")
        .env_remove("SHOAL_TEST_MONGODB_TALLY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the test binary");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<i32>();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(pid) = line.strip_prefix("HOLDING ").and_then(|p| p.parse().ok()) {
                let _ = tx.send(pid);
            }
        }
    });
    let pid = match rx.recv_timeout(Duration::from_secs(60)) {
        Ok(pid) => pid,
        Err(e) => {
            let _ = child.kill();
            panic!("the held test never started its server: {e}");
        }
    };
    assert!(crate::browser::alive(pid), "the held server runs");
    // SIGKILL: no unwinding, no Drop.
    child.kill().expect("kill the held test");
    child.wait().expect("reap it");
    let killed = Instant::now();
    while crate::browser::alive(pid) {
        assert!(
            killed.elapsed() < Duration::from_secs(5),
            "the server {pid} outlives its killed test"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

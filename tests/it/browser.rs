//! Browser tests in real Chromium: Debian's `chromium` and `chromium-driver` (installed by
//! `.ci/run`), driven over WebDriver with `fantoccini`. Each test starts its own server and its
//! own chromedriver on ephemeral ports, and saves screenshots under `target/screenshots/` for a
//! person to look at. A missing chromedriver fails the test (it is not skipped): CI installs it.
//! chromedriver and the Chromium it starts are killed together when the test ends, fails or
//! dies ([`Driver`]; test: `a_failing_browser_test_leaves_no_browser_behind`).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::{Client, ClientBuilder, Locator};
use serde_json::json;

use crate::fleet::{Totals, Worker, add_user, approve, create_run, fixed_args, user_cli};
use crate::harness::TestServer;

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

/// The environment variable that marks chromedriver and everything it starts
/// ([`Driver::mark`]).
const MARK_VAR: &str = "SHOAL_TEST_CHROMEDRIVER";

/// A chromedriver and every Chromium process it starts, all killed when it is dropped, also
/// while a failing test unwinds.
///
/// chromedriver runs in a process group of its own, under a small `sh` that leads the group;
/// Chromium's processes stay in that group, so dropping the driver kills the whole group
/// (SIGKILL) and reaps the leader. Chromium's crash handlers (`chrome_crashpad_handler`) leave
/// the group (they call `setsid`), so the driver's environment carries a marker
/// ([`MARK_VAR`]) they inherit, and every process that carries it is killed too. If the
/// test process dies without unwinding (nextest's timeout), the leader is told by the kernel
/// (`PR_SET_PDEATHSIG`) and kills the marked processes and its group itself ([`LEADER`]); so
/// it does when chromedriver ends (test: `a_killed_browser_test_leaves_no_browser_behind`).
pub(crate) struct Driver {
    /// The group leader (`sh`).
    child: Child,
    pub(crate) port: u16,
    /// The process group: the leader's pid.
    pub(crate) pgid: i32,
    /// The value of [`MARK_VAR`] in the environment of every process this driver started.
    pub(crate) mark: String,
}

impl Drop for Driver {
    fn drop(&mut self) {
        // SAFETY: killpg(2) and kill(2) with plain integers; no memory is touched. The group
        // is our child's (it leads it until it is reaped below), the pids carry our marker.
        unsafe {
            libc::killpg(self.pgid, libc::SIGKILL);
        }
        for pid in marked(&self.mark) {
            // SAFETY: as above.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        let _ = self.child.wait();
    }
}

/// A live process as `/proc/<pid>/stat` shows it: its process group and state (a zombie, `Z`,
/// is dead and only waits to be reaped by its parent).
pub(crate) fn process_group_of(pid: i32) -> Option<(i32, char)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid pgrp ...": comm may contain anything but ends at the last ')'.
    let (_, rest) = stat.rsplit_once(')')?;
    let mut fields = rest.split_whitespace();
    let state = fields.next()?.chars().next()?;
    let _ppid = fields.next()?;
    let pgrp = fields.next()?.parse().ok()?;
    Some((pgrp, state))
}

/// Every pid in `/proc`.
fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .map(|dir| {
            dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Whether a process is alive (not gone, not a zombie).
pub(crate) fn alive(pid: i32) -> bool {
    process_group_of(pid).is_some_and(|(_, state)| state != 'Z' && state != 'X')
}

/// The live processes of process group `pgid`.
pub(crate) fn live_in_group(pgid: i32) -> Vec<i32> {
    pids()
        .into_iter()
        .filter(|&pid| {
            process_group_of(pid)
                .is_some_and(|(g, state)| g == pgid && state != 'Z' && state != 'X')
        })
        .collect()
}

/// The processes whose environment has `MARK_VAR=mark`.
pub(crate) fn marked(mark: &str) -> Vec<i32> {
    let needle = format!("{MARK_VAR}={mark}");
    pids()
        .into_iter()
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|v| v == needle.as_bytes()))
        })
        .collect()
}

/// Whether `name` is an executable file in a directory of `PATH`.
pub(crate) fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt as _;
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|dir| {
            std::fs::metadata(dir.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Fails the test with one line naming the command that installs what is missing.
pub(crate) fn require_browser() {
    for name in ["chromium", "chromedriver"] {
        assert!(
            on_path(name),
            "{name} is not installed: run ./test.sh (it installs it), or apt-get install \
             chromium chromium-driver"
        );
    }
}

/// The leader of a driver's process group (`sh`): starts chromedriver (its output and errors
/// on the leader's standard output) on a port it picks
/// itself (`--port=0`, so no other process can take the port between our choice and its
/// bind), waits for it, and when chromedriver ends or the leader is told to stop (SIGTERM:
/// the test process died, `PR_SET_PDEATHSIG`) kills every process carrying the marker (the
/// crash handlers that left the group), then the group, itself included.
const LEADER: &str = r#"sweep() {
  for p in /proc/[0-9]*; do
    pid=${p#/proc/}
    [ "$pid" = $$ ] && continue
    grep -qxzF "$1" "$p/environ" 2>/dev/null && kill -9 "$pid" 2>/dev/null
  done
  kill -9 0
}
marker="$1"
trap 'sweep "$marker"' TERM
"$2" --port=0 2>&1 &
wait
sweep "$marker""#;

/// How many lines of what chromedriver printed a failure to start shows.
const TAIL_LINES: usize = 6;

pub(crate) async fn start_driver() -> Driver {
    require_browser();
    match try_start_driver("chromedriver").await {
        Ok(driver) => driver,
        Err(e) => panic!("{e}"),
    }
}

/// Starts `program` as chromedriver ([`LEADER`]); a chromedriver that ends before it listens
/// is one line of error with the last lines it printed.
pub(crate) async fn try_start_driver(program: &str) -> Result<Driver, String> {
    use std::io::BufRead as _;
    use std::os::unix::process::CommandExt as _;
    use std::sync::atomic::{AtomicU64, Ordering};
    static STARTED: AtomicU64 = AtomicU64::new(0);
    let mark = format!(
        "{}-{}",
        std::process::id(),
        STARTED.fetch_add(1, Ordering::Relaxed)
    );
    // SAFETY: getpid(2) has no preconditions.
    let parent = unsafe { libc::getpid() };
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(LEADER)
        .arg("sh")
        .arg(format!("{MARK_VAR}={mark}"))
        .arg(program)
        .env(MARK_VAR, &mark)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    // SAFETY: the closure runs in the child between fork and exec and calls only
    // async-signal-safe functions (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The test process died before the line above: nobody would tell us.
            if libc::getppid() != parent {
                return Err(std::io::Error::other("the test process is gone"));
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("sh");
    let pgid = i32::try_from(child.id()).expect("a pid");
    // chromedriver says where it listens ("... started successfully on port N."); until then
    // the last lines it printed are kept (what a chromedriver that cannot start says), after
    // that its output (and Chromium's) is read and dropped, so no writer blocks on the pipe.
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = tokio::sync::oneshot::channel::<Result<u16, Vec<String>>>();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        let mut tail = std::collections::VecDeque::with_capacity(TAIL_LINES);
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            let Some(sender) = tx.take() else { continue };
            if let Some(port) = line
                .split("started successfully on port ")
                .nth(1)
                .and_then(|p| p.trim_end_matches('.').trim().parse::<u16>().ok())
            {
                let _ = sender.send(Ok(port));
                continue;
            }
            tx = Some(sender);
            if tail.len() == TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
        if let Some(sender) = tx {
            let _ = sender.send(Err(tail.into()));
        }
    });
    let mut driver = Driver {
        child,
        port: 0,
        pgid,
        mark,
    };
    let install = "run ./test.sh (it installs it), or apt-get install chromium chromium-driver";
    match tokio::time::timeout(Duration::from_secs(60), rx).await {
        Ok(Ok(Ok(port))) => driver.port = port,
        Ok(Ok(Err(tail))) => {
            let printed = if tail.is_empty() {
                "nothing".to_string()
            } else {
                tail.join(" | ")
            };
            return Err(format!(
                "{program} ended before it listened; it printed: {printed}; {install}"
            ));
        }
        Ok(Err(_)) => return Err(format!("{program}: its output could not be read")),
        Err(_) => {
            return Err(format!(
                "{program} did not say where it listens within 60 s; {install}"
            ));
        }
    }
    Ok(driver)
}

/// A chromedriver that is installed but cannot start fails with one line: what it printed
/// and how to install it (not the status of the `sh` that led it).
#[tokio::test]
async fn a_chromedriver_that_cannot_start_says_what_it_printed() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let fake = dir.path().join("chromedriver");
    std::fs::write(
        &fake,
        "#!/bin/sh\necho 'Starting ChromeDriver'\necho 'chromedriver: error while loading \
         shared libraries: libnss3.so: cannot open shared object file' >&2\nexit 127\n",
    )
    .expect("write");
    std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let err = match try_start_driver(&fake.to_string_lossy()).await {
        Ok(_) => panic!("a chromedriver that exits at once was taken as started"),
        Err(e) => e,
    };
    assert!(!err.contains('\n'), "one line: {err}");
    assert!(
        err.contains("libnss3.so: cannot open shared object file"),
        "{err}"
    );
    assert!(err.contains("Starting ChromeDriver"), "{err}");
    assert!(
        err.contains("./test.sh") && err.contains("chromium-driver"),
        "{err}"
    );
    assert!(!err.contains("signal"), "{err}");
}

pub(crate) async fn browser(driver: &Driver) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        json!({"args": [
            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
            "--window-size=1280,900",
        ]}),
    );
    let connector = hyper_util::client::legacy::connect::HttpConnector::new();
    ClientBuilder::new(connector)
        .capabilities(caps)
        .connect(&format!("http://127.0.0.1:{}", driver.port))
        .await
        .expect("a Chromium session")
}

pub(crate) async fn screenshot(c: &Client, name: &str) {
    let png = c.screenshot().await.expect("screenshot");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/screenshots");
    std::fs::create_dir_all(&dir).expect("screenshot dir");
    std::fs::write(dir.join(format!("{name}.png")), png).expect("write screenshot");
}

pub(crate) async fn fill(c: &Client, name: &str, value: &str) {
    c.find(Locator::Css(&format!("input[name=\"{name}\"]")))
        .await
        .unwrap_or_else(|e| panic!("input {name}: {e}"))
        .send_keys(value)
        .await
        .expect("type");
}

pub(crate) async fn submit(c: &Client, form: &str) {
    c.find(Locator::Css(&format!("{form} button[type=\"submit\"]")))
        .await
        .expect("submit button")
        .click()
        .await
        .expect("click");
}

/// The page's text, retried while the browser is between documents (after a click).
pub(crate) async fn body_text(c: &Client) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(body) = c.find(Locator::Css("body")).await
            && let Ok(text) = body.text().await
        {
            return text;
        }
        assert!(Instant::now() < deadline, "the page never had a body");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls the page without reloading it (a form's answer) until its text contains `want`.
pub(crate) async fn wait_for_answer(c: &Client, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = body_text(c).await;
        if text.contains(want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed {want:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until a login form was answered: a page that has left `/login`, or one that says why
/// not.
async fn wait_to_leave_or_answer(c: &Client) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = c.current_url().await.is_ok_and(|u| u.path() != "/login");
        if left || body_text(c).await.contains("pending") {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the login form was never answered"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Waits until the browser has left `path` (a form was submitted and answered elsewhere).
pub(crate) async fn wait_to_leave(c: &Client, path: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while c.current_url().await.is_ok_and(|u| u.path() == path) {
        assert!(Instant::now() < deadline, "still on {path}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Polls the page (reloading it) until its text contains `want`.
pub(crate) async fn wait_for_text(c: &Client, want: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let text = body_text(c).await;
        if text.contains(want) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "page never showed {want:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
        c.refresh().await.expect("refresh");
    }
}

#[tokio::test]
async fn sign_up_get_approved_log_in_watch_results_and_log_out() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    let driver = start_driver().await;
    let c = browser(&driver).await;

    // Sign up: the account starts pending.
    c.goto(&server.url("/signup")).await.expect("signup page");
    fill(&c, "username", "carol").await;
    fill(&c, "password", "a long passphrase of horses").await;
    fill(&c, "password2", "a long passphrase of horses").await;
    fill(&c, "email", "carol@example.org").await;
    submit(&c, "main form").await;
    wait_to_leave(&c, "/signup").await;
    // A pending account cannot log in yet.
    c.goto(&server.url("/login")).await.expect("login page");
    fill(&c, "username", "carol").await;
    fill(&c, "password", "a long passphrase of horses").await;
    submit(&c, "main form").await;
    wait_for_answer(&c, "pending").await;
    // An approver approves it; now the login works (the server sees the approval within its
    // 2-second user cache, so the login is tried again until then).
    user_cli(&server, &["set", "carol", "--approve"]);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        c.goto(&server.url("/login")).await.expect("login page");
        fill(&c, "username", "carol").await;
        fill(&c, "password", "a long passphrase of horses").await;
        submit(&c, "main form").await;
        wait_to_leave_or_answer(&c).await;
        let text = body_text(&c).await;
        if text.contains("Logout") {
            assert!(text.contains("carol"), "{text}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the approved account cannot log in:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }

    // The dashboard shows the run; a worker plays games and the results change.
    c.goto(&server.url("/tests")).await.expect("dashboard");
    wait_for_text(&c, "patch").await;
    let mut w = Worker::new("alice", 4, 77);
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("task");
    let mut totals = Totals::default();
    while totals.games() < 16 {
        totals.play_pair(&mut w.rng, EVEN);
    }
    let body = json!({"run_id": run, "task_id": task_id, "stats": totals.json()});
    let (status, v) = w.call(&server, "/api/update_task", body).await;
    assert_eq!(status, 200, "{v}");
    let wld = format!(
        "Total: {} W: {} L: {} D: {}",
        totals.games(),
        totals.wins,
        totals.losses,
        totals.draws
    );
    wait_for_text(&c, &wld).await;
    screenshot(&c, "dashboard").await;

    // Made an approver, carol stops the run with its button on the run page.
    user_cli(&server, &["set", "carol", "--approver"]);
    let page = server.url(&format!("/tests/view/{run}"));
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        c.goto(&page).await.expect("run page");
        if c.find(Locator::Css("form[action=\"/tests/stop\"]"))
            .await
            .is_ok()
        {
            break;
        }
        assert!(Instant::now() < deadline, "no Stop button for an approver");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    screenshot(&c, "run_approver").await;
    submit(&c, "form[action=\"/tests/stop\"]").await;
    wait_to_leave(&c, &format!("/tests/view/{run}")).await;
    // Stop asks first: nothing has changed until the person confirms.
    let text = wait_for_answer(&c, "Stop this run?").await;
    assert!(text.contains("Cancel"), "{text}");
    let (status, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["finished"], false,
        "Stop stopped before it was confirmed: {v}"
    );
    screenshot(&c, "run_stop_confirm").await;
    submit(&c, "form[action=\"/tests/stop\"]").await;
    wait_to_leave(&c, "/tests/stop").await;
    let (status, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["finished"], true, "the Stop button stopped the run: {v}");

    // Log out: the page is anonymous again.
    submit(&c, "form[action=\"/logout\"]").await;
    wait_for_answer(&c, "Register").await;
    let text = body_text(&c).await;
    assert!(!text.contains("Logout"), "{text}");
    c.close().await.expect("close the browser");
}

#[tokio::test]
async fn the_run_page_refreshes_itself_without_a_reload() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    c.goto(&server.url(&format!("/tests/view/{run}")))
        .await
        .expect("run page");
    let text = body_text(&c).await;
    assert!(text.contains("Total: 0 W: 0 L: 0 D: 0"), "{text}");
    assert!(text.contains("No games played yet."), "{text}");

    let mut w = Worker::new("alice", 4, 78);
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("task");
    let mut totals = Totals::default();
    while totals.games() < 16 {
        totals.play_pair(&mut w.rng, EVEN);
    }
    let body = json!({"run_id": run, "task_id": task_id, "stats": totals.json()});
    let (status, v) = w.call(&server, "/api/update_task", body).await;
    assert_eq!(status, 200, "{v}");

    // static/refresh.js swaps the fragments in (no reload): the results, the task's worker
    // and the chart, whose image URL names the games it shows.
    let want = format!(
        "W: {} L: {} D: {}",
        totals.wins, totals.losses, totals.draws
    );
    let chart = format!(
        "img[src=\"/tests/chart/{run}/elo.svg?g={}\"]",
        totals.games()
    );
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let text = body_text(&c).await;
        let charts = c.find_all(Locator::Css(&chart)).await.unwrap_or_default();
        if text.contains(&want) && text.contains("alice-4cores-") && charts.len() == 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page never refreshed to {want:?}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    screenshot(&c, "run").await;
    c.close().await.expect("close the browser");
}

#[tokio::test]
async fn the_owner_modifies_a_run_and_watches_it_finish() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(2000)).await;
    approve(&server, "boss", &run).await;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    c.goto(&server.url("/login")).await.expect("login page");
    fill(&c, "username", "alice").await;
    fill(&c, "password", crate::fleet::PASSWORD).await;
    submit(&c, "main form").await;
    wait_to_leave(&c, "/login").await;

    // The Modify box: fewer games (a fixed-games run cannot grow), through its own button.
    let page = server.url(&format!("/tests/view/{run}"));
    c.goto(&page).await.expect("run page");
    c.find(Locator::Css("details.modify summary"))
        .await
        .expect("the Modify box")
        .click()
        .await
        .expect("open it");
    let games = c
        .find(Locator::Css("input[name=\"num-games\"]"))
        .await
        .expect("num-games");
    games.clear().await.expect("clear");
    games.send_keys("1000").await.expect("type");
    submit(&c, "details.modify form").await;
    wait_for_answer(&c, "The test was successfully modified!").await;
    let (_, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(v["args"]["num_games"], 1000, "{v}");

    // A worker plays every game while the page is open: it turns to finished by itself.
    c.goto(&page).await.expect("run page");
    wait_for_answer(&c, "Total: 0 W: 0").await;
    let mut w = Worker::new("alice", 8, 79);
    for _ in 0..20 {
        let reply = w.request_task(&server).await;
        if reply.get("task_waiting").is_some() {
            break;
        }
        w.play(&server, &reply, 1000, [0.05, 0.2, 0.5, 0.2, 0.05])
            .await;
    }
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        let text = body_text(&c).await;
        if text.contains("Status: finished") && text.contains("Total: 1000") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the page never showed the finished run:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    screenshot(&c, "run-finished").await;
    c.close().await.expect("close the browser");
}

/// The processes of `driver` still alive: its group's and those carrying its marker.
fn left_behind(pgid: i32, mark: &str) -> Vec<i32> {
    let mut left = live_in_group(pgid);
    left.extend(marked(mark).into_iter().filter(|&pid| alive(pid)));
    left.sort_unstable();
    left.dedup();
    left
}

/// `ps`-like lines for `pids` (for a failure's message).
fn describe(pids: &[i32]) -> String {
    pids.iter()
        .map(|pid| {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            format!("{pid} {:?} {}", process_group_of(*pid), comm.trim())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[tokio::test]
async fn a_failing_browser_test_leaves_no_browser_behind() {
    let server = TestServer::start().await;
    let driver = start_driver().await;
    let (pgid, mark) = (driver.pgid, driver.mark.clone());
    let c = browser(&driver).await;
    c.goto(&server.url("/tests")).await.expect("dashboard");
    body_text(&c).await;
    // Chromium runs: its processes are in the driver's group, or carry its marker.
    let running = left_behind(pgid, &mark);
    let chromium = running
        .iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "chromium")
        })
        .count();
    assert!(
        chromium >= 2,
        "Chromium's processes:\n{}",
        describe(&running)
    );
    eprintln!("the driver's processes:\n{}", describe(&running));
    assert!(
        running.contains(&pgid),
        "the group's leader:\n{}",
        describe(&running)
    );
    // A test that fails with the browser open: the driver is dropped while it unwinds. (The
    // WebDriver session stays open meanwhile: nothing asks chromedriver to close Chromium.)
    let failed = tokio::spawn(async move {
        let _driver = driver;
        panic!("a browser test fails with its browser open");
    })
    .await;
    assert!(failed.is_err_and(|e| e.is_panic()));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left = left_behind(pgid, &mark);
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind by the failed test:\n{}",
            describe(&left)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    drop(c);
}

/// A browser test killed without unwinding (as nextest kills one past its time limit): run in
/// a process of its own by `a_killed_browser_test_leaves_no_browser_behind`, which kills it.
/// Does nothing when run otherwise.
#[tokio::test]
#[ignore = "run by a_killed_browser_test_leaves_no_browser_behind"]
async fn hold_a_browser_open() {
    if std::env::var_os("SHOAL_TEST_HOLD_BROWSER").is_none() {
        return;
    }
    let server = TestServer::start().await;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    c.goto(&server.url("/tests")).await.expect("dashboard");
    body_text(&c).await;
    println!("HOLDING {}", driver.mark);
    tokio::time::sleep(Duration::from_secs(120)).await;
}

#[test]
fn a_killed_browser_test_leaves_no_browser_behind() {
    use std::io::BufRead as _;
    require_browser();
    use std::os::unix::process::CommandExt as _;
    let exe = std::env::current_exe().expect("the test binary");
    // In a process group of its own, killed whole, as nextest runs and kills a test.
    let mut child = Command::new(exe)
        .process_group(0)
        .args([
            "browser::hold_a_browser_open",
            "--exact",
            "--ignored",
            "--nocapture",
        ])
        .env("SHOAL_TEST_HOLD_BROWSER", "1")
        .env_remove("SHOAL_TEST_MONGODB_TALLY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the test binary");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(mark) = line.strip_prefix("HOLDING ") {
                let _ = tx.send(mark.to_string());
            }
        }
    });
    let mark = match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(mark) => mark,
        Err(e) => {
            let _ = child.kill();
            panic!("the held browser test never opened its page: {e}");
        }
    };
    let running: Vec<i32> = marked(&mark).into_iter().filter(|&p| alive(p)).collect();
    eprintln!("the held test's browser:\n{}", describe(&running));
    assert!(
        running.iter().any(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .is_ok_and(|c| c.trim() == "chromium")
        }),
        "Chromium runs:\n{}",
        describe(&running)
    );
    // SIGKILL: no unwinding, no Drop; only the kernel's death signal to the driver's leader.
    let pgid = i32::try_from(child.id()).expect("a pid");
    // SAFETY: killpg(2) on the group our child leads (not reaped yet); no memory is touched.
    unsafe {
        libc::killpg(pgid, libc::SIGKILL);
    }
    child.wait().expect("reap it");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let left: Vec<i32> = marked(&mark).into_iter().filter(|&p| alive(p)).collect();
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "left behind by the killed test:\n{}",
            describe(&left)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

//! The fleet simulator end to end: a few hundred simulated official workers, on fresh
//! connections, against a real server started by the harness. Asserts behaviour (every worker
//! got a task, no errors, the report and the chart exist and parse), never speed.
//!
//! Also where what the simulator sends is checked against the server's own rules: `sim` is a
//! client and does not import `rundb` or `app`; the tests see both sides.

use std::collections::HashSet;
use std::process::Command;

use rand::SeedableRng;
use rand::rngs::StdRng;
use serde_json::Value;
use shoal::rundb::model::WorkerInfo;
use shoal_sim::setup::{RunKind, run_args};
use shoal_sim::stats::Identity;

use crate::fleet::{add_user, create_run};
use crate::harness::{TestServer, bin};

#[test]
fn simulated_worker_infos_pass_the_servers_validator() {
    let mut rng = StdRng::seed_from_u64(42);
    let mut short_names = HashSet::new();
    let mut concurrencies = HashSet::new();
    let mut arches = HashSet::new();
    for i in 0..5_000u32 {
        let id = Identity::generate(i, 42, "simw00", &mut rng);
        // Exactly the 16 keys, accepted by the server's own validator.
        let keys: HashSet<&str> = id.info.keys().map(String::as_str).collect();
        let expected: HashSet<&str> = WorkerInfo::KEYS.into_iter().collect();
        assert_eq!(keys, expected);
        let wi = shoal::http::api::call::parse_worker_info(id.info.clone())
            .unwrap_or_else(|e| panic!("worker {i} rejected: {e:?}"));
        assert!((1..=16).contains(&wi.concurrency));
        assert!(wi.concurrency as u64 <= (wi.max_memory - 444) / 396);
        assert!(short_names.insert(wi.short_name()), "duplicate short name");
        concurrencies.insert(wi.concurrency);
        arches.insert(wi.worker_arch.clone());
        // After the bench, still valid.
        let mut id = id;
        id.after_bench();
        let wi = shoal::http::api::call::parse_worker_info(id.info.clone()).expect("valid");
        assert!(wi.nps > 0.0 && wi.arch != "?");
    }
    assert!(concurrencies.contains(&1) && concurrencies.contains(&16));
    assert!(concurrencies.len() >= 8);
    assert!(arches.len() >= 6);
}

#[tokio::test]
async fn run_arguments_are_accepted_by_a_real_server() {
    let server = TestServer::start().await;
    add_user(&server, "simdev", &[]);
    let mut rng = rand::rng();
    for (kind, games) in [
        (RunKind::Sprt, shoal::protocol::SPRT_MAX_GAMES),
        (RunKind::Fixed, shoal::protocol::MAX_GAMES),
    ] {
        let id = create_run(&server, "simdev", run_args(3, kind, 0.0, 2.0, &mut rng)).await;
        let (status, run) = server.get_json(&format!("/api/get_run/{id}")).await;
        assert_eq!(status, 200, "{run}");
        let args = &run["args"];
        assert_eq!(
            args.get("sprt").is_some_and(|s| !s.is_null()),
            kind == RunKind::Sprt,
            "{run}"
        );
        assert_eq!(args["num_games"].as_u64(), Some(games), "{run}");
        assert_eq!(args["tc"], Value::from("10+0.1"), "{run}");
    }
}

#[tokio::test]
async fn a_short_storm_assigns_every_worker_without_errors() {
    // Queue mode: the gate serves the storm in order instead of refusing callers, so every
    // worker is assigned within the run even when the rest of the suite loads the machine
    // (in fast-reject mode an unlucky worker can be told "too busy" until the deadline).
    let server = TestServer::start_with(
        crate::harness::Opts::new()
            .set("admission_queue", 1000)
            .set("admission_timeout_s", 60),
    )
    .await;
    let dir = tempfile::tempdir().expect("tempdir");
    let report_dir = dir.path().join("report");
    let url = server.url("");
    let pid = server.pid().to_string();
    let data_dir = server.data_dir.to_string_lossy().into_owned();
    let report_arg = report_dir.to_string_lossy().into_owned();
    let args: Vec<String> = [
        "sim",
        "--server",
        &url,
        "--server-pid",
        &pid,
        "--data-dir",
        &data_dir,
        "--report",
        &report_arg,
        "--workers",
        "300",
        "--storm",
        "1",
        // Long enough that every worker is assigned even when the machine is busy with the
        // rest of the suite (the storm itself is 1 s; the run ends at the deadline).
        "--duration",
        "30",
        "--time-scale",
        "600",
        "--fresh-connections",
        "--source-addrs",
        "4",
        "--users",
        "3",
        "--baseline-secs",
        "1",
        "--closed-loop-secs",
        "0.5",
        "--closed-loop-conns",
        "8",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    // The users the simulator makes go to the store of the server it drives.
    let mongo_key = server.data_dir.clone();
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin())
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(crate::harness::mongo_env(&mongo_key))
            .output()
            .expect("run shoal sim")
    })
    .await
    .expect("join");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "shoal sim failed\nstdout:\n{stdout}\nstderr:\n{stderr}"
    );

    let text = std::fs::read_to_string(report_dir.join("report.json")).expect("report.json");
    let r: shoal_sim::Report = serde_json::from_str(&text).expect("the report parses");
    let f = &r.fleet;
    assert_eq!(f.workers.simulated, 300);
    assert_eq!(f.workers.started, 300, "{stdout}");
    assert_eq!(f.workers.got_a_task, 300, "{stdout}");
    assert!(f.workers.all_assigned_after_s.is_some(), "{stdout}");
    assert_eq!(f.errors_total, 0, "errors: {:?}\n{stdout}", f.errors);
    assert!(
        f.workers.exits.keys().all(|k| k == "deadline"),
        "{:?}",
        f.workers.exits
    );
    for path in [
        "/api/request_version",
        "/api/request_task",
        "/api/update_task",
    ] {
        assert!(f.endpoints.get(path).is_some_and(|l| l.count > 0), "{path}");
    }
    assert!(f.tasks.updates > 0 && f.tasks.games_reported > 0);
    assert!(f.client.connections_opened >= f.calls, "fresh connections");
    assert_eq!(r.settings.source_addresses, 4);
    // The server, seen from outside: it ran, declared nothing dead, and measured request_task.
    assert_eq!(r.server.dead_tasks, Some(0.0));
    assert!(r.server.cpu_seconds.is_some() && r.server.peak_rss_mib.is_some());
    assert!(
        r.server
            .request_task_critical
            .as_ref()
            .is_some_and(|h| h.count > 0.0)
    );
    // The baselines ran against the same server.
    let replay = r.baselines.replay_healthz.as_ref().expect("replay");
    assert_eq!(replay.errors, 0);
    assert!(r.baselines.closed_loop_beat.is_some());
    assert!(r.baselines.beat_to_healthz.is_some_and(|x| x > 0.0));
    let svg = std::fs::read_to_string(report_dir.join("chart.svg")).expect("chart.svg");
    assert!(svg.starts_with("<svg"));
    assert!(stdout.contains("request_task"));
}

/// Runs `shoal sim` with `args` in an empty directory (so no settings.toml is read) and the
/// SHOAL_* variables `env`; returns (success, stdout, stderr).
async fn run_sim(
    args: Vec<String>,
    env: Vec<(&'static str, &'static str)>,
) -> (bool, String, String) {
    let cwd = tempfile::tempdir().expect("tempdir");
    let out = tokio::task::spawn_blocking(move || {
        let mut cmd = Command::new(bin());
        cmd.args(&args)
            .current_dir(cwd.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .envs(crate::harness::mongo_env(&cwd.path().join("data")));
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run shoal sim")
    })
    .await
    .expect("join");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test]
async fn a_storm_under_limits_keeps_every_max_and_every_task() {
    // The simulator starts its own server with a per-user concurrency limit of 20 and a
    // request_task rate limit of 25 calls per second per user, on 3 runs with a window of 30
    // each: 4 users x 75 workers want 300 tasks, at most 80 are active at once.
    let dir = tempfile::tempdir().expect("tempdir");
    let report_dir = dir.path().join("report");
    let report_arg = report_dir.to_string_lossy().into_owned();
    let args: Vec<String> = [
        "sim",
        "--shoal-bin",
        bin(),
        "--report",
        &report_arg,
        "--workers",
        "300",
        "--storm",
        "1",
        "--duration",
        "12",
        "--time-scale",
        "600",
        "--users",
        "4",
        "--runs",
        "3",
        "--limit-user",
        "20",
        "--run-window",
        "30",
        "--rate-limit",
        "request_task:25/1s",
        "--baseline-secs",
        "0",
        "--closed-loop-secs",
        "0",
        "--quiet",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let env = vec![
        // Queue mode (see the storm above); a short wait in a full key's queue; no task is
        // declared dead between the deadline and the final comparison.
        ("SHOAL_ADMISSION_QUEUE", "1000"),
        ("SHOAL_ADMISSION_TIMEOUT_S", "60"),
        ("SHOAL_LIMITS_WAIT_S", "1"),
        ("SHOAL_DEAD_TASK_TIMEOUT_S", "120"),
    ];
    let (ok, stdout, stderr) = run_sim(args, env).await;
    assert!(ok, "shoal sim failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert!(
        stdout.contains("verdict:") && stdout.contains("PASS"),
        "{stdout}"
    );

    let text = std::fs::read_to_string(report_dir.join("report.json")).expect("report.json");
    let r: shoal_sim::Report = serde_json::from_str(&text).expect("the report parses");
    assert!(
        r.settings
            .server_env
            .get("SHOAL_LIMITS")
            .is_some_and(|l| l.contains("request_task")),
        "{:?}",
        r.settings.server_env
    );
    let l = r.limits.as_ref().expect("the limits section");
    let v = &l.verdict;
    assert!(
        v.ok && v.max_respected
            && v.no_task_twice
            && v.no_task_lost
            && v.rate_limited_in_shape
            && v.backed_off,
        "{v:?}\n{stdout}"
    );
    assert!(l.samples >= 10, "{stdout}");
    let limit = |name: &str| {
        l.limits
            .iter()
            .find(|x| x.name == name)
            .unwrap_or_else(|| panic!("no limit {name} in {:?}", l.limits))
    };
    // The user limit was reached and never exceeded; the window never exceeded.
    let user = limit("concurrency:user");
    assert_eq!(
        (user.max, user.peak_key_holders, user.over_max),
        (20, 20, 0),
        "{stdout}"
    );
    assert!(user.peak_total_holders <= 80, "{stdout}");
    assert!(user.rejected > 0, "{stdout}");
    let window = limit("run_window");
    assert_eq!(window.peak_key_max, 30, "{stdout}");
    assert!((1..=30).contains(&window.peak_key_holders), "{stdout}");
    assert_eq!(window.over_max, 0);
    // The rate limit refused calls, each answered in the protocol's shape, and the workers
    // backed off.
    let rate = limit("rate:user:request_task");
    assert!(rate.rejected > 0 && rate.peak_key_holders <= 25, "{stdout}");
    assert!(l.rate_limited_calls > 0, "{stdout}");
    assert_eq!(l.rate_limited_in_shape, l.rate_limited_calls);
    assert!(
        l.backoffs_checked > 0 && l.backoffs_ok == l.backoffs_checked,
        "{stdout}"
    );
    // Every task is accounted for: what the workers held at the end is what the server had
    // active and what the window held; none was handed out twice.
    let t = &l.tasks;
    assert!(t.assigned > 80, "tasks churned: {stdout}");
    assert_eq!(t.handed_out_twice, 0, "{:?}", t.handed_out_twice_examples);
    assert!(t.held_by_workers > 0 && t.held_by_workers <= 80, "{stdout}");
    assert_eq!(t.held_by_workers, t.active_on_server, "{:?}", t.mismatches);
    assert_eq!(t.held_by_workers, t.window_holders, "{:?}", t.mismatches);
    assert_eq!(t.mismatched_tasks, 0, "{:?}", t.mismatches);
    // The only errors the workers saw are the limits' refusals of request_task.
    for k in r.fleet.errors.keys() {
        assert!(
            k == "request_task:error_429" || k == "request_task:error_200",
            "unexpected error {k}: {:?}\n{stdout}",
            r.fleet.errors
        );
    }
    assert!(l.limit_refusals > 0, "{stdout}");
}

#[tokio::test]
async fn limit_options_need_a_server_the_simulator_starts() {
    let args: Vec<String> = [
        "sim",
        "--server",
        "http://127.0.0.1:9",
        "--user",
        "u",
        "--password",
        "p",
        "--limit-user",
        "5",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let (ok, _, stderr) = run_sim(args.clone(), Vec::new()).await;
    assert!(!ok && stderr.contains("--check-limits"), "{stderr}");
    let mut bad = args;
    bad.truncate(7);
    bad.extend(["--rate-limit".to_string(), "request_task:0/1s".to_string()]);
    let (ok, _, stderr) = run_sim(bad, Vec::new()).await;
    assert!(!ok && stderr.contains("--rate-limit"), "{stderr}");
}

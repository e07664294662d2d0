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
use shoal::sim::setup::{RunKind, run_args};
use shoal::sim::stats::Identity;

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
    let out = tokio::task::spawn_blocking(move || {
        Command::new(bin())
            .args(args)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
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
    let r: shoal::sim::Report = serde_json::from_str(&text).expect("the report parses");
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

//! The fleet simulator end to end: a few hundred simulated official workers, on fresh
//! connections, against a real server started by the harness. Asserts behaviour (every worker
//! got a task, no errors, the report and the chart exist and parse), never speed.

use std::process::Command;

use crate::harness::{TestServer, bin};

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

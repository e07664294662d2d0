//! The report: its JSON schema, its human summary, and its files (report.json, chart.svg).
//!
//! Owns: [`Report`] and its top-level parts ([`RunSettings`], [`ServerSummary`],
//! [`ServerRoute`]; the fleet's part is `measure::FleetReport`, the baselines'
//! `bench::Baselines`), the text `shoal sim` prints, and writing the report's directory.
//! Must not: measure, scrape or compute anything: it renders numbers others produced.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::SimError;
use super::bench::Baselines;
use super::chart;
use super::latency::LatencySummary;
use super::limits::{self, LimitsReport};
use super::measure::{self, FleetReport};
use super::setup::MachineInfo;

/// What was asked, as the report records it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RunSettings {
    pub workers: usize,
    pub storm_s: f64,
    pub storm_shape: String,
    pub duration_s: f64,
    pub time_scale: f64,
    pub connections: String,
    pub source_addresses: usize,
    pub seed: u64,
    pub runs: usize,
    pub run_kind: String,
    pub users: usize,
    pub elo: f64,
    pub draw_rate: f64,
    pub failed_rate: f64,
    /// SHOAL_* settings of a server the simulator started.
    pub server_env: BTreeMap<String, String>,
    pub command: String,
}

/// Server-side latency of a route, from its Prometheus histogram (bucket upper bounds).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerRoute {
    pub count: f64,
    pub mean_ms: Option<f64>,
    pub p50_ms_at_most: Option<f64>,
    pub p99_ms_at_most: Option<f64>,
}

/// What the server says about itself, for the fleet phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ServerSummary {
    pub url: String,
    pub started_by_sim: bool,
    pub pid: Option<u32>,
    /// CPU seconds the server used during the fleet phase, and as cores busy on average.
    pub cpu_seconds: Option<f64>,
    pub cpu_cores_busy: Option<f64>,
    /// Peak RSS over the server's life (VmHWM).
    pub peak_rss_mib: Option<f64>,
    /// Tasks the server declared dead during the fleet phase (`shoal_dead_tasks_total`).
    pub dead_tasks: Option<f64>,
    /// request_task callers refused by the gate (`shoal_gate_rejected_total`).
    pub gate_rejected: Option<f64>,
    pub gate: Option<Value>,
    /// `shoal_request_task_critical_seconds` during the fleet phase.
    pub request_task_critical: Option<PromHistogram>,
    pub request_task_critical_summary: Option<ServerRoute>,
    /// `shoal_http_request_duration_seconds` per worker route, during the fleet phase.
    pub routes: BTreeMap<String, ServerRoute>,
    /// Other server histograms during the fleet phase: journal commits, write-behind flushes,
    /// the periodic jobs.
    pub internals: BTreeMap<String, ServerRoute>,
    pub log_warnings: Option<u64>,
    /// Calls answered on the server's event loop without a pool token during the fleet phase,
    /// by route (`shoal_loop_fast_path_total`: beats, plain updates).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub loop_fast_path: BTreeMap<String, f64>,
    /// The scheduler's hand-over during the fleet phase (request_task served in batches).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler: Option<SchedulerReport>,
}

/// How the scheduler kept up: batches, the wait from admission to the slot, and its rate
/// against what the critical section alone would allow (`shoal_gate_*{gate="request_task"}`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SchedulerReport {
    /// request_task calls the critical section answered, and those that got a task.
    pub served: f64,
    pub assigned: f64,
    /// Callers skipped because they had gone before their turn.
    pub skipped: f64,
    pub batches: f64,
    pub mean_batch: Option<f64>,
    /// Upper bound of the bucket holding the largest batch.
    pub max_batch_at_most: Option<f64>,
    /// The most tasks assigned in one second (the server's own count).
    pub peak_assignments_per_second: Option<f64>,
    /// Seconds the slot spent serving batches or handing over while callers waited.
    pub busy_seconds: Option<f64>,
    /// Calls served per busy second: the scheduler's rate while it had work.
    pub served_per_busy_second: Option<f64>,
    /// 1 / the mean critical section: the rate the section alone would allow.
    pub section_rate: Option<f64>,
    /// `served_per_busy_second / section_rate` (1.0: no hand-over cost at all).
    pub efficiency: Option<f64>,
    /// Admission (a place in the gate) to the start of the caller's critical section.
    pub admission_to_slot: Option<ServerRoute>,
}

/// The JSON report.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub shoal_version: String,
    pub settings: RunSettings,
    pub machine: MachineInfo,
    pub fleet: FleetReport,
    pub server: ServerSummary,
    pub baselines: Baselines,
    /// CPU seconds the simulator itself used (it shares the machine with a local server).
    pub sim_cpu_seconds: Option<f64>,
    /// The limits check (with `--check-limits` or any limit option).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsReport>,
}

fn fmt_lat(l: &LatencySummary) -> String {
    format!(
        "{:>9} {:>8.2} {:>8.2} {:>8.2} {:>9.2} {:>9.2}",
        l.count, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
    )
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or_else(|| "n/a".to_string(), |x| format!("{x:.digits$}"))
}

/// The human summary of a report.
pub fn summary(r: &Report) -> String {
    let s = &r.settings;
    let f = &r.fleet;
    let mut out = String::new();
    let mut line = |l: String| {
        out.push_str(&l);
        out.push('\n');
    };
    line(format!(
        "shoal sim: {} workers, storm {} s ({}), {} s at time scale {}, {} connections, {} runs",
        s.workers, s.storm_s, s.storm_shape, s.duration_s, s.time_scale, s.connections, s.runs
    ));
    line(format!(
        "machine: {} cores, {} GiB, {}",
        r.machine.cores, r.machine.memory_gib, r.machine.cpu
    ));
    line(String::new());
    line(format!(
        "{:<22} {:>9} {:>8} {:>8} {:>8} {:>9} {:>9}",
        "endpoint (ms)", "calls", "p50", "p90", "p99", "p99.9", "max"
    ));
    for (path, l) in &f.endpoints {
        line(format!("{path:<22} {}", fmt_lat(l)));
    }
    line(format!("{:<22} {}", "all", fmt_lat(&f.all)));
    if let Some(c) = &f.connect {
        line(format!("{:<22} {}", "(tcp connect)", fmt_lat(c)));
    }
    if let Some(c) = &f.healthz_probe {
        line(format!("{:<22} {}", "(/healthz probe)", fmt_lat(c)));
    }
    let peak = |g: fn(&measure::ServerGauges) -> u64| {
        f.timeline.iter().map(|s| g(&s.server)).max().unwrap_or(0)
    };
    line(format!(
        "server gauges (peak): pool tokens in use {}, waiting for a token {}, gate running {}, queued {}",
        peak(|g| g.pool_in_use),
        peak(|g| g.pool_waiting),
        peak(|g| g.gate_running),
        peak(|g| g.gate_queued)
    ));
    line(String::new());
    line(format!(
        "throughput: {:.0} calls/s over {:.0} s; too busy: {}; no task: {}; errors: {}",
        f.calls_per_second, f.wall_seconds, f.too_busy, f.no_task, f.errors_total
    ));
    for (k, v) in &f.errors {
        line(format!("  error {k}: {v}"));
    }
    for (k, v) in f.error_messages.iter().take(10) {
        line(format!("  message x{v}: {k}"));
    }
    let w = &f.workers;
    line(format!(
        "workers: {} started, {} got a task; all held a task after {}; first-task wait p50 {:.1} s, p99 {:.1} s, max {:.1} s",
        w.started,
        w.got_a_task,
        w.all_assigned_after_s
            .map_or_else(|| "never".to_string(), |t| format!("{t:.1} s")),
        w.first_task_wait.p50_ms / 1000.0,
        w.first_task_wait.p99_ms / 1000.0,
        w.first_task_wait.max_ms / 1000.0,
    ));
    if w.exits.keys().any(|k| k != "deadline") {
        line(format!("  worker exits: {:?}", w.exits));
    }
    let t = &f.tasks;
    line(format!(
        "tasks: {} assigned, {} completed, {} stopped by the server, {} failed; {} updates, {} beats, {} PGNs, {} games",
        t.assigned,
        t.completed,
        t.dropped_by_server,
        t.failed,
        t.updates,
        t.beats,
        t.pgns_uploaded,
        t.games_reported
    ));
    let sv = &r.server;
    line(format!(
        "server: CPU {} s ({} cores busy), peak RSS {} MiB, dead tasks {}, gate rejections {}",
        opt(sv.cpu_seconds, 1),
        opt(sv.cpu_cores_busy, 2),
        opt(sv.peak_rss_mib, 0),
        opt(sv.dead_tasks, 0),
        opt(sv.gate_rejected, 0),
    ));
    if !sv.loop_fast_path.is_empty() {
        let parts: Vec<String> = sv
            .loop_fast_path
            .iter()
            .map(|(route, n)| format!("{route} {n}"))
            .collect();
        line(format!(
            "  answered on the event loop (no pool token): {}",
            parts.join(", ")
        ));
    }
    if let Some(sc) = &sv.scheduler {
        line(format!(
            "  scheduler: {} served ({} tasks) in {} batches (mean {}, max <= {}), {} skipped; \
             peak {} tasks/s; {} served per busy second = {} of the section's 1/mean ({} /s); \
             admission to slot p50 <= {} ms, p99 <= {} ms",
            sc.served,
            sc.assigned,
            sc.batches,
            opt(sc.mean_batch, 1),
            opt(sc.max_batch_at_most, 0),
            sc.skipped,
            opt(sc.peak_assignments_per_second, 0),
            opt(sc.served_per_busy_second, 0),
            opt(sc.efficiency, 2),
            opt(sc.section_rate, 0),
            opt(
                sc.admission_to_slot.as_ref().and_then(|a| a.p50_ms_at_most),
                2
            ),
            opt(
                sc.admission_to_slot.as_ref().and_then(|a| a.p99_ms_at_most),
                2
            ),
        ));
    }
    if let Some(c) = &sv.request_task_critical_summary {
        line(format!(
            "  request_task critical section: {} calls, mean {} ms, p50 <= {} ms, p99 <= {} ms",
            c.count,
            opt(c.mean_ms, 3),
            opt(c.p50_ms_at_most, 3),
            opt(c.p99_ms_at_most, 3)
        ));
    }
    for (name, c) in sv.routes.iter().chain(sv.internals.iter()) {
        line(format!(
            "  server-side {name}: {} observations, mean {} ms, p50 <= {} ms, p99 <= {} ms",
            c.count,
            opt(c.mean_ms, 3),
            opt(c.p50_ms_at_most, 3),
            opt(c.p99_ms_at_most, 3)
        ));
    }
    line(format!(
        "simulator CPU: {} s; client: {:?}",
        opt(r.sim_cpu_seconds, 1),
        f.client
    ));
    let b = &r.baselines;
    if let Some(rp) = &b.replay_healthz {
        line(format!(
            "baseline, same schedule on /healthz ({:.0} s, {:.0} calls/s): p50 {:.2} p99 {:.2} p99.9 {:.2} max {:.2} ms, {} errors",
            rp.window_s,
            rp.offered_per_second,
            rp.latency.p50_ms,
            rp.latency.p99_ms,
            rp.latency.p999_ms,
            rp.latency.max_ms,
            rp.errors
        ));
    }
    for c in [&b.closed_loop_beat, &b.closed_loop_healthz]
        .into_iter()
        .flatten()
    {
        line(format!(
            "baseline, closed loop {} {} x{} for {:.0} s: {:.0} req/s, p50 {:.2} p99 {:.2} ms, {} errors",
            c.method,
            c.path,
            c.connections,
            c.seconds,
            c.requests_per_second,
            c.latency.p50_ms,
            c.latency.p99_ms,
            c.errors
        ));
    }
    if let Some(ratio) = b.beat_to_healthz {
        line(format!("  beat/healthz throughput ratio: {ratio:.3}"));
    }
    for n in &b.notes {
        line(format!("  note: {n}"));
    }
    if let Some(l) = &r.limits {
        for l in limits::summary_lines(l) {
            line(l);
        }
    }
    out
}

/// Writes report.json and chart.svg into `dir`.
pub async fn write_report(r: &Report, dir: &Path) -> Result<(), SimError> {
    tokio::fs::create_dir_all(dir).await?;
    let json = serde_json::to_vec_pretty(r).map_err(|e| SimError::Report(e.to_string()))?;
    tokio::fs::write(dir.join("report.json"), json).await?;
    let title = format!(
        "shoal sim: {} workers, {} s storm, x{} time, {} connections",
        r.settings.workers, r.settings.storm_s, r.settings.time_scale, r.settings.connections
    );
    let svg = chart::render_svg(&r.fleet.timeline, &title)?;
    tokio::fs::write(dir.join("chart.svg"), svg).await?;
    Ok(())
}

/// A Prometheus histogram read from `/metrics`: cumulative buckets (read and summarised by
/// `metrics.rs`, which names the report; the report names no metrics code).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PromHistogram {
    /// Observations (the `+Inf` bucket).
    pub count: f64,
    pub sum: f64,
    /// (upper bound `le` in the metric's unit, cumulative count), ascending, finite bounds
    /// only (the `+Inf` bucket is `count`).
    pub buckets: Vec<(f64, f64)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_mentions_every_part() {
        let mut r = Report::default();
        r.fleet.endpoints.insert(
            "/api/beat".into(),
            LatencySummary {
                count: 3,
                p50_ms: 1.0,
                ..LatencySummary::default()
            },
        );
        r.fleet.workers.all_assigned_after_s = Some(2.5);
        r.baselines.beat_to_healthz = Some(0.5);
        let mut l = LimitsReport {
            samples: 3,
            ..LimitsReport::default()
        };
        l.judge();
        r.limits = Some(l);
        let s = summary(&r);
        assert!(s.contains("limits: 3 samples") && s.contains("PASS"), "{s}");
        assert!(s.contains("/api/beat") && s.contains("after 2.5 s") && s.contains("0.500"));
        // The report survives a JSON round trip.
        let text = serde_json::to_string(&r).expect("json");
        let back: Report = serde_json::from_str(&text).expect("parse");
        assert_eq!(back, r);
    }
}

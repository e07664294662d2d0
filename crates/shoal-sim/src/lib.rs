//! The fleet simulator (`shoal sim`) and the demo (`shoal demo`).
//!
//! Owns: the module tree, the simulator's error type, `shoal sim`'s entry point ([`main`]:
//! the open-files limit, the run, the summary, the report's files, failing when the limits
//! check fails) and the re-exports the
//! binary and the integration tests use (`shoal_sim::{SimOptions, Report, ...}`).
//! The parts, in reading order:
//! - [`options`]: `shoal sim`'s options, their validation, the started server's SHOAL_* env;
//! - [`schedule`]: time scale, back-off, heartbeat period, storm start times (pure);
//! - [`stats`]: worker_info spread, game results with consistent cumulative stats, batch
//!   sizes, the PGN (pure);
//! - [`client`]: the HTTP/1.1 client, fresh or pooled connections, spread source addresses;
//! - [`fleet`]: what the workers share, and the one recorded call with its reply judged;
//! - [`worker`]: one simulated official worker (its lifecycle and the task loop);
//! - [`heartbeat`]: the heartbeat beside a task;
//! - [`latency`]: HDR latency histograms and their percentiles;
//! - [`limits`](mod@limits): the limits options, the ledger of held tasks, the `/api/limits`
//!   sampler, the end-of-run comparison and the report's "limits" section;
//! - [`measure`]: the recorder and the fleet's part of the report;
//! - [`metrics`]: the server's Prometheus text and the server-side numbers drawn from it;
//! - [`setup`]: the local server process, users via the CLI, runs via the API, /proc, /metrics;
//! - [`bench`](mod@bench): the /healthz replay and closed-loop baselines;
//! - [`run`](mod@run): the order of a simulation (server, users and runs, the fleet, the server's
//!   numbers, the baselines, the report);
//! - [`report`]: the report's schema, its human summary and its files;
//! - [`chart`]: the SVG chart;
//! - [`demo`](mod@demo): `shoal demo`.
//!
//! Must not: call server internals (it is a client: everything goes over HTTP or through the
//! `shoal` CLI; it imports neither `rundb`, `app` nor `http`), block the runtime, or run
//! unbounded: every loop has a count or a deadline.

pub mod bench;
pub mod chart;
pub mod client;
pub mod demo;
pub mod fleet;
pub mod heartbeat;
pub mod latency;
pub mod limits;
pub mod measure;
pub mod metrics;
pub mod options;
pub mod report;
pub mod run;
pub mod schedule;
pub mod setup;
pub mod stats;
pub mod worker;

pub use demo::{DEMO_PASSWORD, DEMO_USER, DemoOptions, demo};
pub use options::SimOptions;
pub use report::{Report, RunSettings, ServerRoute, ServerSummary, summary, write_report};
pub use run::run;

/// Errors of the simulator.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("invalid options: {0}")]
    Options(String),
    #[error("server: {0}")]
    Server(String),
    #[error("setup: {0}")]
    Setup(String),
    #[error("report: {0}")]
    Report(String),
    #[error("chart: {0}")]
    Chart(String),
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

/// `shoal sim`: runs, prints the summary, writes the report.
pub async fn main(o: SimOptions) -> Result<Report, SimError> {
    // Two sockets per worker at worst (a call and a connection still closing), plus slack;
    // the server this starts inherits the limit. Raising the hard limit needs root.
    let want = (o.workers as u64).saturating_mul(2).saturating_add(8192);
    match shoal_protocol::process::raise_open_files_limit(want, true) {
        Ok((soft, _)) if soft < want => eprintln!(
            "shoal sim: open-files limit {soft} is below the {want} this fleet may need; \
             calls will queue for sockets (raise it with ulimit -n)"
        ),
        Ok(_) => {}
        Err(e) => eprintln!("shoal sim: cannot raise the open-files limit: {e}"),
    }
    let report = run(&o).await?;
    print!("{}", summary(&report));
    write_report(&report, &o.report).await?;
    println!(
        "report: {}, chart: {}",
        o.report.join("report.json").display(),
        o.report.join("chart.svg").display()
    );
    if report.limits.as_ref().is_some_and(|l| !l.verdict.ok) {
        return Err(SimError::Report(
            "the limits check FAILED (see the report's \"limits\" section)".into(),
        ));
    }
    Ok(report)
}

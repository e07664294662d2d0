//! Logs and metrics plumbing: the `tracing` subscriber and the Prometheus recorder.
//!
//! Owns: process-wide telemetry set-up, done once per process.
//! Must not: be called from library code paths other than start-up; modules emit metrics
//! through the `metrics` macros and logs through `tracing`, never through this module.

use std::sync::OnceLock;

use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};

/// Latency buckets in seconds: from 100 µs (a beat on a warm cache) to 30 s (the worker's
/// HTTP timeout), roughly ×2.5 apart.
const BUCKETS: &[f64] = &[
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
    5.0, 10.0, 30.0,
];

/// Batch-size buckets (jobs per batch) for `shoal_gate_batch_size`.
const BATCH_BUCKETS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0, 10000.0,
];

/// Installs the `tracing` subscriber with `filter` (a level or directives). Logs go to
/// stderr. Calling it twice is harmless.
pub fn init_logging(filter: &str) {
    let filter = tracing_subscriber::EnvFilter::try_new(filter)
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(true)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}

/// The process's Prometheus recorder, installed on first use. Histograms are exported as
/// real histograms (buckets above) so percentiles can be aggregated across instances.
pub fn metrics_handle() -> PrometheusHandle {
    static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets(BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("shoal_gate_batch_size".into()),
                        BATCH_BUCKETS,
                    )
                })
                .unwrap_or_else(|_| PrometheusBuilder::new());
            let recorder = builder.build_recorder();
            let handle = recorder.handle();
            // Fails only if a host program installed its own recorder first; the metrics
            // then go to that recorder and our /metrics shows none of them.
            if metrics::set_global_recorder(recorder).is_err() {
                tracing::warn!("another metrics recorder is installed; /metrics will be empty");
            }
            handle
        })
        .clone()
}

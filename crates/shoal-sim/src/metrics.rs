//! The server's `/metrics` text: Prometheus histograms and counters, and the server-side
//! numbers of the report drawn from two scrapes (before and after the fleet phase).
//!
//! Owns: reading the text exposition format (parsed by `prometheus-parse`; kept: only what the
//! report needs: histogram buckets, sums and counts, counter sums by label), the difference
//! of two scrapes, and which server metrics the report keeps (the worker routes, the
//! request_task critical section, the journal, the flushes, the periodic jobs).
//! Must not: do network or file I/O (the caller scrapes), or read anything but the text.

use std::collections::BTreeMap;

use prometheus_parse::{Labels, Sample, Scrape, Value};

use super::report::{SchedulerReport, ServerRoute, ServerSummary};

// The histogram's type is the report's (report.rs); its reading and arithmetic are here.
pub use super::report::PromHistogram;

/// Every sample of a scrape's text (none when it is not the exposition format).
fn samples(text: &str) -> Vec<Sample> {
    Scrape::parse(text.lines().map(|l| Ok(l.to_string())))
        .map(|s| s.samples)
        .unwrap_or_default()
}

/// Whether a sample carries every label of `want`, with its value.
fn labels_match(labels: &Labels, want: &[(&str, &str)]) -> bool {
    want.iter().all(|(k, v)| labels.get(k) == Some(*v))
}

/// The value of a counter, a gauge or an untyped sample.
fn plain(v: &Value) -> Option<f64> {
    match v {
        Value::Counter(x) | Value::Gauge(x) | Value::Untyped(x) => Some(*x),
        Value::Histogram(_) | Value::Summary(_) => None,
    }
}

impl PromHistogram {
    /// Parses histogram `name` (summing the series whose labels contain `labels`).
    pub fn parse(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<PromHistogram> {
        let bucket_name = format!("{name}_bucket");
        let sum_name = format!("{name}_sum");
        let mut buckets: BTreeMap<u64, (f64, f64)> = BTreeMap::new();
        let mut h = PromHistogram::default();
        let mut seen = false;
        let mut add = |h: &mut PromHistogram, le: f64, v: f64| {
            seen = true;
            if le == f64::INFINITY {
                h.count += v;
            } else {
                buckets.entry(le.to_bits()).or_insert((le, 0.0)).1 += v;
            }
        };
        for sample in samples(text) {
            if !labels_match(&sample.labels, labels) {
                continue;
            }
            match &sample.value {
                // Announced by `# TYPE name histogram`: the buckets come grouped.
                Value::Histogram(counts) if sample.metric == name => {
                    for c in counts {
                        add(&mut h, c.less_than, c.count);
                    }
                }
                // Buckets without the type line: plain samples with an `le` label.
                v if sample.metric == bucket_name => {
                    let le = sample
                        .labels
                        .get("le")
                        .and_then(|le| le.parse::<f64>().ok());
                    if let (Some(le), Some(v)) = (le, plain(v)) {
                        add(&mut h, le, v);
                    }
                }
                v if sample.metric == sum_name => h.sum += plain(v).unwrap_or(0.0),
                _ => {}
            }
        }
        if !seen {
            return None;
        }
        let mut b: Vec<(f64, f64)> = buckets.into_values().collect();
        b.sort_by(|x, y| x.0.total_cmp(&y.0));
        h.buckets = b;
        Some(h)
    }

    /// `self - earlier`, bucket by bucket (for a histogram scraped before and after a phase).
    pub fn since(&self, earlier: &PromHistogram) -> PromHistogram {
        let buckets = self
            .buckets
            .iter()
            .map(|(le, c)| {
                let before = earlier
                    .buckets
                    .iter()
                    .find(|(l, _)| l == le)
                    .map_or(0.0, |b| b.1);
                (*le, (c - before).max(0.0))
            })
            .collect();
        PromHistogram {
            count: (self.count - earlier.count).max(0.0),
            sum: (self.sum - earlier.sum).max(0.0),
            buckets,
        }
    }

    /// Upper bound of the bucket holding quantile `q` (None when empty); +Inf if it lies
    /// beyond the last finite bucket.
    pub fn quantile_upper_bound(&self, q: f64) -> Option<f64> {
        if self.count <= 0.0 {
            return None;
        }
        let rank = (q.clamp(0.0, 1.0) * self.count).ceil().max(1.0);
        Some(
            self.buckets
                .iter()
                .find(|b| b.1 >= rank)
                .map_or(f64::INFINITY, |b| b.0),
        )
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0.0).then(|| self.sum / self.count)
    }
}

/// The sum of every sample of counter/gauge `name` whose labels contain `labels`.
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    let mut total = None;
    for sample in samples(text) {
        if sample.metric != name || !labels_match(&sample.labels, labels) {
            continue;
        }
        if let Some(v) = plain(&sample.value) {
            *total.get_or_insert(0.0) += v;
        }
    }
    total
}

impl ServerRoute {
    fn from_hist(h: &PromHistogram) -> ServerRoute {
        let ms = |s: Option<f64>| s.map(|v| v * 1000.0);
        ServerRoute {
            count: h.count,
            mean_ms: ms(h.mean()),
            p50_ms_at_most: ms(h.quantile_upper_bound(0.5)),
            p99_ms_at_most: ms(h.quantile_upper_bound(0.99)),
        }
    }
}

/// A server histogram worth reporting: (key in the report, metric name, labels).
type Internal = (
    &'static str,
    &'static str,
    &'static [(&'static str, &'static str)],
);

const ROUTES: [&str; 6] = [
    "/api/request_version",
    "/api/request_task",
    "/api/update_task",
    "/api/beat",
    "/api/upload_pgn",
    "/healthz",
];

pub(super) fn server_numbers(before: Option<&str>, after: Option<&str>, s: &mut ServerSummary) {
    let (Some(before), Some(after)) = (before, after) else {
        return;
    };
    let delta = |name: &str, labels: &[(&str, &str)]| {
        let a = metric_sum(after, name, labels);
        let b = metric_sum(before, name, labels).unwrap_or(0.0);
        Some(a.unwrap_or(0.0) - b)
    };
    s.dead_tasks = delta("shoal_dead_tasks_total", &[]);
    s.gate_rejected = delta("shoal_gate_rejected_total", &[("gate", "request_task")]);
    let hist = |name: &str, labels: &[(&str, &str)]| {
        let a = PromHistogram::parse(after, name, labels)?;
        Some(match PromHistogram::parse(before, name, labels) {
            Some(b) => a.since(&b),
            None => a,
        })
    };
    if let Some(h) = hist("shoal_request_task_critical_seconds", &[]) {
        s.request_task_critical_summary = Some(ServerRoute::from_hist(&h));
        s.request_task_critical = Some(h);
    }
    s.scheduler = scheduler(before, after, s.request_task_critical.as_ref());
    for route in ["beat", "update_task"] {
        let labels = [("route", route)];
        let a = metric_sum(after, "shoal_loop_fast_path_total", &labels);
        if let Some(a) = a {
            let b = metric_sum(before, "shoal_loop_fast_path_total", &labels).unwrap_or(0.0);
            s.loop_fast_path.insert(route.to_string(), a - b);
        }
    }
    for route in ROUTES {
        if let Some(h) = hist("shoal_http_request_duration_seconds", &[("route", route)]) {
            s.routes
                .insert(route.to_string(), ServerRoute::from_hist(&h));
        }
    }
    let internals: [Internal; 5] = [
        ("journal_commit", "shoal_journal_commit_seconds", &[]),
        ("flush", "shoal_flush_seconds", &[]),
        (
            "job_flush_buffers",
            "shoal_job_seconds",
            &[("job", "flush_buffers")],
        ),
        (
            "job_scavenge_dead_tasks",
            "shoal_job_seconds",
            &[("job", "scavenge_dead_tasks")],
        ),
        (
            "job_update_itp",
            "shoal_job_seconds",
            &[("job", "update_itp")],
        ),
    ];
    for (key, name, labels) in internals {
        if let Some(h) = hist(name, labels)
            && h.count > 0.0
        {
            s.internals
                .insert(key.to_string(), ServerRoute::from_hist(&h));
        }
    }
}

/// The scheduler's figures between two scrapes; None when the server exports none (an
/// older server).
fn scheduler(
    before: &str,
    after: &str,
    critical: Option<&PromHistogram>,
) -> Option<SchedulerReport> {
    const GATE: &[(&str, &str)] = &[("gate", "request_task")];
    let delta = |name: &str| {
        metric_sum(after, name, GATE).map(|a| a - metric_sum(before, name, GATE).unwrap_or(0.0))
    };
    let served = delta("shoal_gate_served_total")?;
    let batches = delta("shoal_gate_batches_total").unwrap_or(0.0);
    let hist = |name: &str| {
        let a = PromHistogram::parse(after, name, GATE)?;
        Some(match PromHistogram::parse(before, name, GATE) {
            Some(b) => a.since(&b),
            None => a,
        })
    };
    let busy = delta("shoal_gate_busy_seconds");
    let served_per_busy_second = busy.filter(|b| *b > 0.0).map(|b| served / b);
    let section_rate = critical
        .and_then(PromHistogram::mean)
        .filter(|m| *m > 0.0)
        .map(|m| 1.0 / m);
    let efficiency = served_per_busy_second
        .zip(section_rate)
        .map(|(rate, max)| rate / max);
    Some(SchedulerReport {
        served,
        assigned: delta("shoal_gate_assigned_total").unwrap_or(0.0),
        skipped: delta("shoal_gate_skipped_total").unwrap_or(0.0),
        batches,
        mean_batch: (batches > 0.0).then(|| served / batches),
        max_batch_at_most: hist("shoal_gate_batch_size").and_then(|h| h.quantile_upper_bound(1.0)),
        peak_assignments_per_second: metric_sum(
            after,
            "shoal_gate_assignments_per_second_max",
            GATE,
        ),
        busy_seconds: busy,
        served_per_busy_second,
        section_rate,
        efficiency,
        admission_to_slot: hist("shoal_gate_admission_to_slot_seconds")
            .filter(|h| h.count > 0.0)
            .map(|h| ServerRoute::from_hist(&h)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const METRICS: &str = "\
# TYPE shoal_request_task_critical_seconds histogram
shoal_request_task_critical_seconds_bucket{le=\"0.0001\"} 10
shoal_request_task_critical_seconds_bucket{le=\"0.001\"} 80
shoal_request_task_critical_seconds_bucket{le=\"0.01\"} 99
shoal_request_task_critical_seconds_bucket{le=\"+Inf\"} 100
shoal_request_task_critical_seconds_sum 0.2
shoal_request_task_critical_seconds_count 100
shoal_http_requests_total{route=\"/api/beat\",status=\"200\"} 7
shoal_http_requests_total{route=\"/api/beat\",status=\"500\"} 1
shoal_http_requests_total{route=\"/healthz\",status=\"200\"} 3
shoal_dead_tasks_total 4
shoal_loop_fast_path_total{route=\"update_task\"} 5
";

    #[test]
    fn scheduler_figures_between_two_scrapes() {
        let before = "\
shoal_gate_served_total{gate=\"request_task\"} 100
shoal_gate_batches_total{gate=\"request_task\"} 50
shoal_gate_busy_seconds{gate=\"request_task\"} 1
";
        let after = "\
shoal_gate_served_total{gate=\"request_task\"} 1100
shoal_gate_assigned_total{gate=\"request_task\"} 900
shoal_gate_skipped_total{gate=\"request_task\"} 3
shoal_gate_batches_total{gate=\"request_task\"} 150
shoal_gate_busy_seconds{gate=\"request_task\"} 3
shoal_gate_assignments_per_second_max{gate=\"request_task\"} 640
shoal_gate_batch_size_bucket{gate=\"request_task\",le=\"8\"} 100
shoal_gate_batch_size_bucket{gate=\"request_task\",le=\"16\"} 150
shoal_gate_batch_size_bucket{gate=\"request_task\",le=\"+Inf\"} 150
";
        let critical = PromHistogram {
            count: 1000.0,
            sum: 0.25,
            buckets: vec![],
        };
        let s = scheduler(before, after, Some(&critical)).expect("figures");
        assert_eq!(
            (s.served, s.assigned, s.skipped, s.batches),
            (1000.0, 900.0, 3.0, 100.0)
        );
        assert_eq!(s.mean_batch, Some(10.0));
        assert_eq!(s.max_batch_at_most, Some(16.0));
        assert_eq!(s.peak_assignments_per_second, Some(640.0));
        assert_eq!(s.served_per_busy_second, Some(500.0));
        assert_eq!(s.section_rate, Some(4000.0));
        assert_eq!(s.efficiency, Some(0.125));
        assert!(
            scheduler("", "", None).is_none(),
            "an older server exports none"
        );
    }

    #[test]
    fn prometheus_parsing() {
        let h = PromHistogram::parse(METRICS, "shoal_request_task_critical_seconds", &[])
            .expect("histogram");
        assert_eq!(h.count, 100.0);
        assert_eq!(h.buckets.len(), 3);
        assert_eq!(h.quantile_upper_bound(0.5), Some(0.001));
        assert_eq!(h.quantile_upper_bound(0.99), Some(0.01));
        assert_eq!(h.quantile_upper_bound(1.0), Some(f64::INFINITY));
        assert_eq!(h.quantile_upper_bound(0.05), Some(0.0001));
        assert!((h.mean().expect("mean") - 0.002).abs() < 1e-12);
        let earlier = PromHistogram {
            count: 50.0,
            sum: 0.1,
            buckets: vec![(0.0001, 10.0), (0.001, 40.0), (0.01, 50.0)],
        };
        let d = h.since(&earlier);
        assert_eq!(d.count, 50.0);
        assert_eq!(d.buckets[0].1, 0.0);
        assert_eq!(d.quantile_upper_bound(0.5), Some(0.001));
        assert_eq!(
            metric_sum(
                METRICS,
                "shoal_http_requests_total",
                &[("route", "/api/beat")]
            ),
            Some(8.0)
        );
        assert_eq!(
            metric_sum(METRICS, "shoal_dead_tasks_total", &[]),
            Some(4.0)
        );
        assert_eq!(metric_sum(METRICS, "shoal_missing_total", &[]), None);
        assert!(PromHistogram::parse(METRICS, "shoal_missing_seconds", &[]).is_none());
        let mut summary = ServerSummary::default();
        server_numbers(Some(""), Some(METRICS), &mut summary);
        assert_eq!(summary.loop_fast_path.get("update_task"), Some(&5.0));
        assert_eq!(summary.loop_fast_path.get("beat"), None);
    }
}

//! Latency histograms: HDR histograms of microseconds and their percentiles in milliseconds.
//!
//! Owns: the histograms' range (1 µs to 300 s, larger values saturate) and
//! [`LatencySummary`], the percentiles every part of the report uses.
//! Must not: record calls or keep state (that is `measure::Recorder`), or do I/O.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Highest latency a histogram holds (larger values saturate), in microseconds.
const MAX_US: u64 = 300_000_000;

/// An empty latency histogram in microseconds, from 1 µs to 300 s (larger values saturate).
pub fn new_histogram(sigfig: u8) -> Result<Histogram<u64>, hdrhistogram::CreationError> {
    Histogram::new_with_bounds(1, MAX_US, sigfig)
}

/// Percentiles of a latency histogram, in milliseconds.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummary {
    pub count: u64,
    pub mean_ms: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl LatencySummary {
    /// From a histogram of microseconds.
    pub fn from_histogram(h: &Histogram<u64>) -> LatencySummary {
        if h.is_empty() {
            return LatencySummary::default();
        }
        let ms = |us: u64| us as f64 / 1000.0;
        LatencySummary {
            count: h.len(),
            mean_ms: h.mean() / 1000.0,
            p50_ms: ms(h.value_at_quantile(0.50)),
            p90_ms: ms(h.value_at_quantile(0.90)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_from_a_known_histogram() {
        let mut h = new_histogram(3).expect("histogram");
        // 1 ms, 2 ms, ..., 1000 ms: one each.
        for ms in 1..=1000u64 {
            h.saturating_record(ms * 1000);
        }
        let s = LatencySummary::from_histogram(&h);
        assert_eq!(s.count, 1000);
        let close = |got: f64, want: f64| (got - want).abs() <= want * 0.002;
        assert!(close(s.p50_ms, 500.0), "{s:?}");
        assert!(close(s.p90_ms, 900.0), "{s:?}");
        assert!(close(s.p99_ms, 990.0), "{s:?}");
        assert!(close(s.p999_ms, 999.0), "{s:?}");
        assert!(close(s.max_ms, 1000.0), "{s:?}");
        assert!(close(s.mean_ms, 500.5), "{s:?}");
        let empty = new_histogram(3).expect("histogram");
        assert_eq!(LatencySummary::from_histogram(&empty).count, 0);
    }

    #[test]
    fn skewed_histogram_tail() {
        let mut h = new_histogram(3).expect("histogram");
        for _ in 0..9_990 {
            h.saturating_record(1_000);
        }
        for _ in 0..10 {
            h.saturating_record(2_000_000);
        }
        let s = LatencySummary::from_histogram(&h);
        assert!((s.p50_ms - 1.0).abs() < 0.01 && (s.p99_ms - 1.0).abs() < 0.01);
        // 0.1% of calls took 2 s: p99.9 is the last fast one, max the slow ones.
        assert!((s.p999_ms - 1.0).abs() < 0.01, "{s:?}");
        assert!((s.max_ms - 2000.0).abs() < 2.0, "{s:?}");
        // Values beyond the range saturate rather than fail.
        h.saturating_record(u64::MAX);
        assert!(LatencySummary::from_histogram(&h).max_ms >= 299_000.0);
    }
}

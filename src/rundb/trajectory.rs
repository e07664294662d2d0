//! A run's trajectory: its cumulative results (and, for an SPRT, its LLR) sampled against
//! games played as the run progresses, for the charts of the statistics page.
//!
//! Owns: [`Trajectory`] (stored in the run document under `trajectory`, a field Fishtest does
//! not have), the sampling rule and the decimation that keeps it bounded.
//! Must not: allocate once full, compute statistics (the charts do that outside the run's
//! lock, from the stored counts), do I/O. `record` runs inside update_task's critical
//! section: it is a comparison and, at most, one push into a vector whose capacity never
//! grows past [`MAX_POINTS`] (decimation is an in-place `retain`).
//!
//! Sampling: a point is kept when the run has played at least `stride` games more than at
//! the last point (the newest point is otherwise overwritten, so the last point always holds
//! the current totals). When [`MAX_POINTS`] are held, every other point is dropped and the
//! stride doubles, so a run of any length keeps between `MAX_POINTS / 2` and `MAX_POINTS`
//! points spread evenly over its games. A purge that lowers the totals drops the points past
//! the new total.

use serde::{Deserialize, Serialize};

use super::model::Stats;

/// The most points a trajectory holds.
pub const MAX_POINTS: usize = 128;
/// The first stride in games (one game pair).
pub const FIRST_STRIDE: u64 = 2;

/// One sample: cumulative counts after `g` games.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Games played.
    pub g: u64,
    pub w: u64,
    pub l: u64,
    pub d: u64,
    /// Pentanomial counts (all zero for runs without).
    #[serde(default)]
    pub p: [u64; 5],
    /// The SPRT's LLR at that moment (SPRT runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llr: Option<f64>,
}

/// The sampled history of a run's results.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Trajectory {
    /// Games between two kept points (doubles at each decimation).
    #[serde(default)]
    pub stride: u64,
    #[serde(default)]
    pub points: Vec<Point>,
}

impl Trajectory {
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Records the run's totals after an update (cheap; see the module doc).
    pub fn record(&mut self, results: &Stats, llr: Option<f64>) {
        let point = Point {
            g: results.games(),
            w: results.wins,
            l: results.losses,
            d: results.draws,
            p: results.pentanomial,
            llr,
        };
        if self.stride == 0 {
            self.stride = FIRST_STRIDE;
        }
        // A purge lowered the totals: the points past them no longer describe this run.
        if self.points.last().is_some_and(|last| last.g > point.g) {
            self.points.retain(|p| p.g <= point.g);
        }
        let n = self.points.len();
        let before_last = if n >= 2 { self.points[n - 2].g } else { 0 };
        match self.points.last_mut() {
            Some(last) if last.g == point.g => *last = point,
            // The newest point is still within a stride of the one before: move it forward.
            Some(last) if n >= 2 && last.g.saturating_sub(before_last) < self.stride => {
                *last = point
            }
            _ => {
                if self.points.len() >= MAX_POINTS {
                    self.decimate();
                }
                if self.points.capacity() < MAX_POINTS {
                    let room = MAX_POINTS.saturating_sub(self.points.len());
                    self.points.reserve_exact(room);
                }
                self.points.push(point);
            }
        }
    }

    /// Keeps every other point (the first one, the third, …; and the newest), doubles the
    /// stride. In place.
    fn decimate(&mut self) {
        let last = self.points.len().saturating_sub(1);
        let mut i = 0usize;
        self.points.retain(|_| {
            let keep = i.is_multiple_of(2) || i == last;
            i += 1;
            keep
        });
        self.stride = self.stride.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(games: u64) -> Stats {
        Stats {
            wins: games / 2,
            losses: games / 4,
            draws: games - games / 2 - games / 4,
            ..Stats::default()
        }
    }

    #[test]
    fn grows_then_stays_bounded_and_spread() {
        let mut t = Trajectory::default();
        for k in 1..=10_000u64 {
            t.record(&stats(2 * k), None);
            assert!(t.points.len() <= MAX_POINTS);
            assert!(t.points.capacity() <= MAX_POINTS);
        }
        assert!(t.points.len() >= MAX_POINTS / 2, "{}", t.points.len());
        assert_eq!(
            t.points.last().map(|p| p.g),
            Some(20_000),
            "the newest point is current"
        );
        assert!(t.points.windows(2).all(|w| w[0].g < w[1].g));
        assert!(t.stride > FIRST_STRIDE);
    }

    #[test]
    fn the_same_total_overwrites_and_a_purge_drops_later_points() {
        let mut t = Trajectory::default();
        t.record(&stats(100), Some(0.5));
        t.record(&stats(100), Some(0.7));
        assert_eq!(t.points.len(), 1);
        assert_eq!(t.points[0].llr, Some(0.7));
        t.record(&stats(200), None);
        t.record(&stats(300), None);
        t.record(&stats(150), None);
        assert!(t.points.iter().all(|p| p.g <= 150));
        assert_eq!(t.points.last().map(|p| p.g), Some(150));
    }

    #[test]
    fn serde_round_trip_and_default() {
        let mut t = Trajectory::default();
        t.record(&stats(64), Some(1.25));
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["points"][0]["llr"], serde_json::json!(1.25));
        let back: Trajectory = serde_json::from_value(v).unwrap();
        assert_eq!(back, t);
        let empty: Trajectory = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(empty.is_empty());
    }
}

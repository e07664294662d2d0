//! Time in the simulator: the time scale, the worker's back-off schedule, and the storm's
//! start times.
//!
//! Owns: the conversion between simulated and wall-clock seconds (`--time-scale`), the
//! official worker's main-loop back-off (15 s doubling to 900 s, reset by one successful
//! iteration), its heartbeat period (docs/protocol.md#heartbeat-and-back-off), and when each
//! simulated worker starts (`--storm`, uniformly or in waves shaped like a reconnect storm
//! recorded on Fishtest, see docs/capacity.md).
//! Must not: sleep, do I/O or know HTTP; everything here is a pure function of its inputs.

use std::time::Duration;

use rand::Rng;
use serde::{Deserialize, Serialize};

/// First back-off after an unsuccessful iteration, in simulated seconds.
pub const BACKOFF_START_S: f64 = 15.0;
/// The back-off never exceeds this, in simulated seconds.
pub const BACKOFF_MAX_S: f64 = 900.0;
/// A beat is due when this many simulated seconds pass without an update or a beat.
pub const HEARTBEAT_S: f64 = 120.0;
/// update_task is tried this many times, `UPDATE_RETRY_S` apart, before the task fails.
pub const UPDATE_ATTEMPTS: u32 = 5;
pub const UPDATE_RETRY_S: f64 = 15.0;

/// How many simulated seconds pass per wall-clock second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeScale(f64);

impl TimeScale {
    /// A scale of at least 1e-3 and at most 1e6 simulated seconds per second.
    pub fn new(factor: f64) -> Option<TimeScale> {
        (factor.is_finite() && (1e-3..=1e6).contains(&factor)).then_some(TimeScale(factor))
    }

    pub fn factor(self) -> f64 {
        self.0
    }

    /// The wall-clock duration of `sim_s` simulated seconds.
    pub fn real(self, sim_s: f64) -> Duration {
        Duration::from_secs_f64((sim_s / self.0).clamp(0.0, 1e9))
    }

    /// The simulated seconds in a wall-clock duration.
    pub fn sim(self, real: Duration) -> f64 {
        real.as_secs_f64() * self.0
    }
}

/// The main loop's back-off: 15 s after the first unsuccessful iteration, doubling after each
/// further one up to 900 s, back to 15 s after one successful iteration.
#[derive(Debug, Clone, PartialEq)]
pub struct Backoff {
    next_s: f64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            next_s: BACKOFF_START_S,
        }
    }
}

impl Backoff {
    /// An unsuccessful iteration: returns the delay to sleep now (simulated seconds).
    pub fn failure(&mut self) -> f64 {
        let delay = self.next_s;
        self.next_s = (self.next_s * 2.0).min(BACKOFF_MAX_S);
        delay
    }

    /// A successful iteration: the next failure waits 15 s again.
    pub fn success(&mut self) {
        self.next_s = BACKOFF_START_S;
    }
}

/// How the workers' start times spread over the storm window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum StormShape {
    /// Every worker starts at a uniformly random moment of the window.
    Uniform,
    /// The reconnect storm recorded on Fishtest, compressed into the window: 205 workers at
    /// once, then +4,403 over 18 minutes, +4,508 over 15 minutes, +302 over 3 minutes.
    Waves,
}

/// Fishtest's recorded reconnect storm as (share of the window, workers in that phase). The
/// first phase has no length: the workers already connected start together.
pub const FISHTEST_STORM_WAVES: [(f64, u64); 4] = [
    (0.0, 205),
    (18.0 / 36.0, 4_403),
    (15.0 / 36.0, 4_508),
    (3.0 / 36.0, 302),
];

/// How many of `n` workers start in each phase of `phases` (shares proportional to the
/// phases' worker counts; the rounding remainder goes to the largest phase).
pub fn phase_counts(n: usize, phases: &[(f64, u64)]) -> Vec<usize> {
    let total: u64 = phases.iter().map(|p| p.1).sum();
    if total == 0 || phases.is_empty() {
        return vec![n];
    }
    let mut counts: Vec<usize> = phases
        .iter()
        .map(|p| ((n as u128 * u128::from(p.1)) / u128::from(total)) as usize)
        .collect();
    let assigned: usize = counts.iter().sum();
    let largest = phases
        .iter()
        .enumerate()
        .max_by_key(|(_, p)| p.1)
        .map_or(0, |(i, _)| i);
    counts[largest] += n - assigned;
    counts
}

/// Start offsets (from the beginning of the run) for `n` workers, in worker order.
/// Every offset lies in `[0, window]`.
pub fn start_offsets<R: Rng>(
    n: usize,
    window: Duration,
    shape: StormShape,
    rng: &mut R,
) -> Vec<Duration> {
    let w = window.as_secs_f64();
    match shape {
        StormShape::Uniform => (0..n)
            .map(|_| Duration::from_secs_f64(w * rng.random::<f64>()))
            .collect(),
        StormShape::Waves => {
            let counts = phase_counts(n, &FISHTEST_STORM_WAVES);
            let mut out = Vec::with_capacity(n);
            let mut phase_start = 0.0;
            for (count, (share, _)) in counts.iter().zip(FISHTEST_STORM_WAVES) {
                for _ in 0..*count {
                    let at = phase_start + share * w * rng.random::<f64>();
                    out.push(Duration::from_secs_f64(at.min(w)));
                }
                phase_start += share * w;
            }
            out
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn backoff_doubles_to_the_cap_and_resets() {
        let mut b = Backoff::default();
        let delays: Vec<f64> = (0..9).map(|_| b.failure()).collect();
        assert_eq!(
            delays,
            vec![15.0, 30.0, 60.0, 120.0, 240.0, 480.0, 900.0, 900.0, 900.0]
        );
        b.success();
        assert_eq!(b.failure(), 15.0);
        assert_eq!(b.failure(), 30.0);
        b.success();
        b.success();
        assert_eq!(b.failure(), 15.0);
    }

    #[test]
    fn time_scale_converts_both_ways() {
        let s = TimeScale::new(60.0).expect("scale");
        assert_eq!(s.real(15.0), Duration::from_millis(250));
        assert_eq!(s.real(HEARTBEAT_S), Duration::from_secs(2));
        assert!((s.sim(Duration::from_secs(30)) - 1800.0).abs() < 1e-9);
        assert!(TimeScale::new(0.0).is_none());
        assert!(TimeScale::new(f64::NAN).is_none());
        assert_eq!(
            TimeScale::new(1.0).expect("scale").real(-1.0),
            Duration::ZERO
        );
    }

    #[test]
    fn uniform_starts_fill_the_window() {
        let mut rng = StdRng::seed_from_u64(7);
        let window = Duration::from_secs(60);
        let offsets = start_offsets(10_000, window, StormShape::Uniform, &mut rng);
        assert_eq!(offsets.len(), 10_000);
        assert!(offsets.iter().all(|o| *o <= window));
        // Roughly uniform: each sixth of the window holds about a sixth of the workers.
        for k in 0..6 {
            let lo = Duration::from_secs(10 * k);
            let hi = Duration::from_secs(10 * (k + 1));
            let c = offsets.iter().filter(|o| **o >= lo && **o < hi).count();
            assert!((1_400..=1_950).contains(&c), "bucket {k}: {c}");
        }
    }

    #[test]
    fn waves_follow_the_recorded_storm() {
        let counts = phase_counts(9_418, &FISHTEST_STORM_WAVES);
        assert_eq!(counts, vec![205, 4_403, 4_508, 302]);
        let counts = phase_counts(1_000, &FISHTEST_STORM_WAVES);
        assert_eq!(counts.iter().sum::<usize>(), 1_000);

        let mut rng = StdRng::seed_from_u64(3);
        let window = Duration::from_secs(36);
        let offsets = start_offsets(9_418, window, StormShape::Waves, &mut rng);
        assert_eq!(offsets.len(), 9_418);
        assert!(offsets.iter().all(|o| *o <= window));
        // The first 205 start together at 0; the next wave fills the first 18 "minutes".
        assert!(offsets[..205].iter().all(|o| o.is_zero()));
        let first_wave = &offsets[205..205 + 4_403];
        assert!(first_wave.iter().all(|o| *o <= Duration::from_secs(18)));
        let last_wave = &offsets[9_418 - 302..];
        assert!(last_wave.iter().all(|o| *o >= Duration::from_secs(33)));
    }

    #[test]
    fn same_seed_same_storm() {
        let a = start_offsets(
            100,
            Duration::from_secs(5),
            StormShape::Waves,
            &mut StdRng::seed_from_u64(1),
        );
        let b = start_offsets(
            100,
            Duration::from_secs(5),
            StormShape::Waves,
            &mut StdRng::seed_from_u64(1),
        );
        assert_eq!(a, b);
    }
}

//! Brownian motion with drift between two absorbing barriers
//! (`brownian.py`): the probability that a path ends "to the right of"
//! (T, y), used by the `sprt` class to turn an SPRT outcome into a
//! median-unbiased Elo and a confidence interval.
//!
//! `outcome_cdf` dispatches, like the reference, between the eigenfunction
//! series (`alt1`) and Siegmund's approximation (`alt2`) with the same
//! thresholds (0.01, 15, 30, 1e-8, 5) and the same 1e-9 series cutoff. No
//! I/O, no async, no logging, no panics; the series is bounded so that a NaN
//! input cannot loop forever (the reference would).

use super::normal::phi;
use super::pyfloat::{self, div};
use super::{StatsError, StatsResult};

/// Terms after which the series gives up (the reference has no cap; with
/// finite inputs it stops after a handful of terms).
const MAX_SERIES_TERMS: u32 = 1_000_000;

/// Primitive of e^(γy)·sin(nπy/A), times (2/A)·e^(−γy) (`brownian.U`):
/// [2Aγ·sin(nπy/A) − 2πn·cos(nπy/A)]/(A²γ² + π²n²).
pub fn u(n: f64, gamma: f64, a: f64, y: f64) -> StatsResult<f64> {
    let pi = std::f64::consts::PI;
    let arg = pi * n * y / a;
    let num = 2.0 * a * gamma * arg.sin() - 2.0 * pi * n * arg.cos();
    let den = pyfloat::sq(a)? * pyfloat::sq(gamma)? + pyfloat::sq(pi)? * pyfloat::sq(n)?;
    div(num, den, "brownian.U")
}

/// A Brownian motion started at 0 with drift `mu` and standard deviation
/// `sigma` per unit time, absorbed at `a < 0 < b`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Brownian {
    /// Lower (failing) barrier, negative.
    pub a: f64,
    /// Upper (passing) barrier, positive.
    pub b: f64,
    /// Drift per unit time.
    pub mu: f64,
    /// Standard deviation per unit time.
    pub sigma: f64,
}

impl Brownian {
    /// Constructs the model.
    pub fn new(a: f64, b: f64, mu: f64, sigma: f64) -> Self {
        Brownian { a, b, mu, sigma }
    }

    fn sigma2(&self) -> StatsResult<f64> {
        pyfloat::sq(self.sigma)
    }

    /// P(τ_a < min(τ_b, T)) + P(τ > T, X_T < y): the path fails before T or
    /// is still running at T below y. Uses Siegmund's approximation when
    /// σ²T/A² < 0.01 or |γA| > 15 (slow series), the series otherwise.
    /// Asserts the result lies in [−0.001, 1.001].
    pub fn outcome_cdf(&self, t: f64, y: f64) -> StatsResult<f64> {
        let sigma2 = self.sigma2()?;
        let gamma = div(self.mu, sigma2, "Brownian with zero variance")?;
        let big_a = self.b - self.a;
        let ratio = div(
            sigma2 * t,
            pyfloat::sq(big_a)?,
            "Brownian with equal barriers",
        )?;
        let ret = if ratio < 1e-2 || (gamma * big_a).abs() > 15.0 {
            self.outcome_cdf_alt2(t, y)?
        } else {
            self.outcome_cdf_alt1(t, y)?
        };
        // `contains` is false for NaN, which fails the reference's assert too.
        if !(-1e-3..=1.0 + 1e-3).contains(&ret) {
            return Err(StatsError::Assertion("outcome_cdf outside [-0.001, 1.001]"));
        }
        Ok(ret)
    }

    /// The eigenfunction series (exact, but slow when σ²T/A² is small).
    pub fn outcome_cdf_alt1(&self, t: f64, y: f64) -> StatsResult<f64> {
        let pi = std::f64::consts::PI;
        let mu = self.mu;
        let sigma2 = self.sigma2()?;
        let big_a = self.b - self.a;
        let x = 0.0 - self.a;
        let y = y - self.a;
        let gamma = div(mu, sigma2, "Brownian with zero variance")?;
        let drift_term = div(pyfloat::sq(mu)?, sigma2, "Brownian with zero variance")? / 2.0;
        let pi_over_a = div(pi, big_a, "Brownian with equal barriers")?;
        let lambda_1 = pyfloat::sq(pi_over_a)? * sigma2 / 2.0 + drift_term;
        let t0 = pyfloat::exp(-lambda_1 * t - x * gamma + y * gamma)?;
        let mut s = 0.0;
        let mut n: u32 = 1;
        loop {
            let nf = f64::from(n);
            let lambda_n = pyfloat::sq(nf * pi / big_a)? * sigma2 / 2.0 + drift_term;
            let t1 = pyfloat::exp(-(lambda_n - lambda_1) * t)?;
            let t3 = u(nf, gamma, big_a, y)?;
            let t4 = (nf * pi * x / big_a).sin();
            s += t1 * t3 * t4;
            // The sine factor is deliberately not part of the stopping test.
            let size = (t0 * t1 * t3).abs();
            if size <= 1e-9 {
                break;
            }
            if size.is_nan() {
                // The reference would loop forever here.
                return Err(StatsError::NotConverged("Brownian series on NaN input"));
            }
            n += 1;
            if n > MAX_SERIES_TERMS {
                return Err(StatsError::NotConverged("Brownian series"));
            }
        }
        let pre = if gamma * big_a > 30.0 {
            // avoid overflow of e^(2γA)
            pyfloat::exp(-2.0 * gamma * x)?
        } else if (gamma * big_a).abs() < 1e-8 {
            // driftless limit, avoids 0/0
            (big_a - x) / big_a
        } else {
            div(
                1.0 - pyfloat::exp(2.0 * gamma * (big_a - x))?,
                1.0 - pyfloat::exp(2.0 * gamma * big_a)?,
                "Brownian hitting probability",
            )?
        };
        Ok(pre + t0 * s)
    }

    /// Siegmund's approximation, with the tail asymptotic of Φ where
    /// e^(2γc)·Φ(z_c) would overflow (γc ≥ 5).
    pub fn outcome_cdf_alt2(&self, t: f64, y: f64) -> StatsResult<f64> {
        let sigma2 = self.sigma2()?;
        let denom = pyfloat::sqrt(t * sigma2)?;
        let offset = self.mu * t;
        let gamma = div(self.mu, sigma2, "Brownian with zero variance")?;
        let (a, b) = (self.a, self.b);
        let z = div(y - offset, denom, "Brownian at time 0")?;
        let za = div(-y + offset + 2.0 * a, denom, "Brownian at time 0")?;
        let zb = div(y - offset - 2.0 * b, denom, "Brownian at time 0")?;
        let t1 = phi(z);
        let t2 = if gamma * a >= 5.0 {
            tail_term(za, gamma, a)?
        } else {
            pyfloat::exp(2.0 * gamma * a)? * phi(za)
        };
        let t3 = if gamma * b >= 5.0 {
            tail_term(zb, gamma, b)?
        } else {
            pyfloat::exp(2.0 * gamma * b)? * phi(zb)
        };
        Ok(t1 + t2 - t3)
    }
}

/// Asymptotic e^(2γc)·Φ(z) for z → −∞:
/// −e^(−z²/2 + 2γc)/√(2π)·(1/z − 1/z³).
fn tail_term(z: f64, gamma: f64, c: f64) -> StatsResult<f64> {
    let sqrt_2pi = (2.0 * std::f64::consts::PI).sqrt();
    let e = pyfloat::exp(-pyfloat::sq(z)? / 2.0 + 2.0 * gamma * c)?;
    let inv = div(1.0, z, "Brownian tail at z = 0")?;
    let inv3 = div(1.0, pyfloat::pow(z, 3.0)?, "Brownian tail at z = 0")?;
    Ok(-e / sqrt_2pi * (inv - inv3))
}

/// `brownian.Phi`: the standard normal cdf.
pub fn brownian_phi(x: f64) -> f64 {
    phi(x)
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: f64 = -2.944_438_979_166_440_3;

    #[test]
    fn u_matches_reference_example() {
        let v = u(2.0, -1.5, 5.9, 4.0).unwrap();
        assert!((v - 0.181_774_395_316_737_53).abs() < 1e-15);
    }

    #[test]
    fn series_and_siegmund_agree_in_their_overlap() {
        let bm = Brownian::new(A, -A, 0.0003, 0.02);
        let s = bm.outcome_cdf_alt1(3000.0, 1.0).unwrap();
        let g = bm.outcome_cdf_alt2(3000.0, 1.0).unwrap();
        assert!((s - g).abs() < 1e-3, "{s} vs {g}");
    }

    #[test]
    fn outcome_cdf_is_a_probability_and_monotone_in_y() {
        let bm = Brownian::new(A, -A, -0.0006, 0.01);
        let mut prev = -1.0;
        for i in 0..=10 {
            let y = A + (-2.0 * A) * f64::from(i) / 10.0;
            let p = bm.outcome_cdf(20000.0, y).unwrap();
            assert!((-1e-3..=1.001).contains(&p));
            assert!(p >= prev - 1e-12);
            prev = p;
        }
    }

    #[test]
    fn degenerate_inputs_are_errors_not_panics() {
        assert!(
            Brownian::new(A, -A, 0.0, 0.0)
                .outcome_cdf(1.0, 0.0)
                .is_err()
        );
        assert!(
            Brownian::new(1.0, 1.0, 0.1, 0.1)
                .outcome_cdf(1.0, 0.0)
                .is_err()
        );
        assert!(
            Brownian::new(A, -A, 0.1, 0.1)
                .outcome_cdf(f64::NAN, 0.0)
                .is_err()
        );
    }
}

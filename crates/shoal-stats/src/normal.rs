//! The standard normal cdf Φ and quantile Φ⁻¹ (`stat_util.Phi`,
//! `stat_util.Phi_inv`, `brownian.Phi`).
//!
//! Φ is computed from `erfc` for both tails so that the lower tail keeps its
//! relative accuracy (`½(1 + erf)` loses it to cancellation: about 2% off at Φ(−8)).
//! `erfc` comes from the `libm` crate (a port of musl/FreeBSD, < 1 ulp), not
//! from statrs: statrs 0.19.1's `erfc` carries interval constants truncated to
//! 10 digits and is only ~1e-10 relative accurate (fixed upstream in
//! statrs-dev/statrs#412, not yet released), which breaks the 1e-12 relative
//! tolerance of Φ. statrs' `erfc_inv` is accurate (< 1e-15 relative) and is
//! used for Φ⁻¹.
//! Φ⁻¹ maps 0 and 1 to ∓∞ and anything outside [0, 1] (or NaN) to NaN, like
//! scipy's `ndtri`; statrs' `Normal::inverse_cdf` would panic there instead.
//! Pure functions: no I/O, no async, no logging, no panics.

use libm::erfc;
use statrs::function::erf::erfc_inv;

/// Standard normal cdf Φ(x) (scipy `norm.cdf`).
pub fn phi(x: f64) -> f64 {
    0.5 * erfc(-x / std::f64::consts::SQRT_2)
}

/// Standard normal quantile Φ⁻¹(p) (scipy `norm.ppf`): −∞ at 0, +∞ at 1,
/// NaN outside [0, 1].
pub fn phi_inv(p: f64) -> f64 {
    if p.is_nan() || !(0.0..=1.0).contains(&p) {
        return f64::NAN;
    }
    if p == 0.0 {
        return f64::NEG_INFINITY;
    }
    if p == 1.0 {
        return f64::INFINITY;
    }
    -std::f64::consts::SQRT_2 * erfc_inv(2.0 * p)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_values() {
        assert_eq!(phi(0.0), 0.5);
        assert!((phi_inv(0.975) - 1.959_963_984_540_054).abs() < 1e-15);
        let p = phi(1.959_963_984_540_054);
        assert!((p - 0.975).abs() < 1e-15, "{p:e}");
        // Lower tail keeps relative accuracy: Φ(−8) = 6.22096057427178e-16.
        assert!((phi(-8.0) / 6.220_960_574_271_78e-16 - 1.0).abs() < 1e-12);
        assert!(phi(-40.0) < 1e-300);
        assert_eq!(phi(40.0), 1.0);
    }

    #[test]
    fn quantile_edges() {
        assert_eq!(phi_inv(0.0), f64::NEG_INFINITY);
        assert_eq!(phi_inv(1.0), f64::INFINITY);
        assert!(phi_inv(-0.1).is_nan());
        assert!(phi_inv(1.5).is_nan());
        assert!(phi_inv(f64::NAN).is_nan());
        assert!((phi_inv(0.5)).abs() < 1e-16);
    }
}

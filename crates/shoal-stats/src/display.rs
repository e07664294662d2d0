//! Run-page display helpers from Fishtest's `template_helpers.py`: `t_conf`
//! (a t-value and the variance of its estimate from four moments) and the
//! nElo summary of fixed-games pentanomial runs.
//!
//! Display only: nothing decides with these. No I/O, no async, no logging,
//! no panics.

use super::NELO_DIVIDED_BY_NT;
use super::normal::phi_inv;
use super::pdf::{results_to_pdf, stats_ex};
use super::pyfloat::{self, div};
use super::{StatsError, StatsResult};

/// `(t, var_t)`: t = (avg − ½)/√var and
/// var_t = max(1 − t·skew + ¼t²(exkurt + 2), 0) (clamped against rounding).
pub fn t_conf(avg: f64, var: f64, skewness: f64, exkurt: f64) -> StatsResult<(f64, f64)> {
    let t = div(avg - 0.5, pyfloat::sqrt(var)?, "t_conf with zero variance")?;
    let var_t = pyfloat::py_max(
        1.0 - t * skewness + 0.25 * pyfloat::sq(t)? * (exkurt + 2.0),
        0.0,
    );
    Ok((t, var_t))
}

/// nElo of a pentanomial run and its 95% half-width.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NeloSummary {
    /// Normalized Elo, (800/ln 10)/√2 · t of the pair scores.
    pub nelo5: f64,
    /// 95% half-width, (800/ln 10)/√2 · Φ⁻¹(0.975) · √(var_t/N).
    pub nelo5_delta: f64,
}

/// The run page's nElo line for a (regularised) pentanomial results vector.
pub fn nelo_pentanomial(results5: &[f64]) -> StatsResult<NeloSummary> {
    if results5.len() != 5 {
        return Err(StatsError::InvalidInput("nelo_pentanomial needs 5 cells"));
    }
    let (n5, pdf5) = results_to_pdf(results5)?;
    let (avg, var, skew, exkurt) = stats_ex(&pdf5)?;
    let (t, var_t) = t_conf(avg, var, skew, exkurt)?;
    let scale = NELO_DIVIDED_BY_NT / std::f64::consts::SQRT_2;
    let nelo5 = scale * t;
    let nelo5_delta = scale * phi_inv(0.975) * pyfloat::sqrt(div(var_t, n5, "no pairs")?)?;
    Ok(NeloSummary { nelo5, nelo5_delta })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flat_pentanomial() {
        let s = nelo_pentanomial(&[1.0; 5]).unwrap();
        assert_eq!(s.nelo5, 0.0);
        assert!((s.nelo5_delta - 215.338_849_952_735_05).abs() < 1e-10);
    }

    #[test]
    fn t_conf_clamps_at_zero() {
        let (_, v) = t_conf(0.9, 0.01, 100.0, -2.0).unwrap();
        assert_eq!(v, 0.0);
        assert!(t_conf(0.5, 0.0, 0.0, 0.0).is_err());
    }
}

//! Results vectors and discrete distributions: `regularize`,
//! `results_to_pdf`, `uniform` and the moment functions `stats` / `stats_ex`
//! of `LLRcalc`.
//!
//! A distribution ("pdf") is a list of `(value, probability)` pairs. Results
//! vectors are `[losses, draws, wins]` (trinomial) or the five pentanomial
//! pair counts `[LL, LD+DL, LW+DD+WL, DW+WD, WW]`; they are `f64` because
//! regularisation makes them non-integral.
//!
//! Sums run left to right like Python's `sum` (before 3.12), which is what
//! the reference numbers were produced with. No I/O, no async, no logging,
//! no panics.

use super::pyfloat::{self, div};
use super::{StatsError, StatsResult};

/// A discrete distribution: `(value, probability)` pairs.
pub type Pdf = Vec<(f64, f64)>;

/// What a zero count is replaced with (`LLRcalc.regularize`).
pub const REGULARIZE_EPSILON: f64 = 1e-3;

/// Tolerance of the validity assertions in `stats`.
const PDF_EPSILON: f64 = 1e-3;

/// Returns a copy of `results` with every zero replaced by 0.001, so that
/// likelihoods never divide by zero.
pub fn regularize(results: &[f64]) -> Vec<f64> {
    results
        .iter()
        .map(|&x| if x == 0.0 { REGULARIZE_EPSILON } else { x })
        .collect()
}

/// `(N, pdf)` of the regularised results: support `i/(k−1)`, probabilities
/// `n_i/N`. `N` is the regularised total, so `[0,0,0]` gives `N = 0.003`.
pub fn results_to_pdf(results: &[f64]) -> StatsResult<(f64, Pdf)> {
    let r = regularize(results);
    let n = pyfloat::sum(r.iter().copied());
    let k = r.len();
    let mut pdf = Vec::with_capacity(k);
    for (i, &ri) in r.iter().enumerate() {
        // A one-cell vector has no spread: Python divides by len − 1 = 0.
        let a = div(i as f64, (k as f64) - 1.0, "results_to_pdf with one cell")?;
        pdf.push((a, div(ri, n, "results_to_pdf with zero total")?));
    }
    Ok((n, pdf))
}

/// Same support, equal probabilities `1/n`.
pub fn uniform(pdf: &[(f64, f64)]) -> Pdf {
    let n = pdf.len() as f64;
    pdf.iter().map(|&(a, _)| (a, 1.0 / n)).collect()
}

/// Asserts that `pdf` is a probability distribution up to 1e-3, as
/// `LLRcalc.stats` does before computing anything.
fn validate(pdf: &[(f64, f64)]) -> StatsResult<()> {
    for &(_, p) in pdf {
        // `contains` is false for NaN, like Python's chained comparison.
        if !(-PDF_EPSILON..=1.0 + PDF_EPSILON).contains(&p) {
            return Err(StatsError::Assertion(
                "pdf probability outside [-0.001, 1.001]",
            ));
        }
    }
    let total = pyfloat::sum(pdf.iter().map(|&(_, p)| p));
    let sums_to_one = (total - 1.0).abs() < PDF_EPSILON;
    if !sums_to_one {
        return Err(StatsError::Assertion("pdf does not sum to 1"));
    }
    Ok(())
}

/// Mean and population variance of a distribution (`LLRcalc.stats`), after
/// validating it (AssertionError in the reference).
pub fn stats(pdf: &[(f64, f64)]) -> StatsResult<(f64, f64)> {
    validate(pdf)?;
    let s = pyfloat::sum(pdf.iter().map(|&(a, p)| p * a));
    let mut var = 0.0;
    for &(a, p) in pdf {
        var += p * pyfloat::sq(a - s)?;
    }
    Ok((s, var))
}

/// Mean, variance, skewness and excess kurtosis (`LLRcalc.stats_ex`).
pub fn stats_ex(pdf: &[(f64, f64)]) -> StatsResult<(f64, f64, f64, f64)> {
    let (s, var) = stats(pdf)?;
    let mut m3 = 0.0;
    let mut m4 = 0.0;
    for &(a, p) in pdf {
        m3 += p * pyfloat::pow(a - s, 3.0)?;
    }
    for &(a, p) in pdf {
        m4 += p * pyfloat::pow(a - s, 4.0)?;
    }
    let skewness = div(m3, pyfloat::pow(var, 1.5)?, "skewness of a point mass")?;
    let exkurt = div(m4, pyfloat::pow(var, 2.0)?, "kurtosis of a point mass")? - 3.0;
    Ok((s, var, skewness, exkurt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regularize_only_touches_zeros() {
        assert_eq!(regularize(&[1.0, 0.0, 0.0]), vec![1.0, 0.001, 0.001]);
        assert_eq!(regularize(&[]), Vec::<f64>::new());
    }

    #[test]
    fn empty_results_give_a_tiny_n() {
        let (n, pdf) = results_to_pdf(&[0.0, 0.0, 0.0]).unwrap();
        assert!((n - 0.003).abs() < 1e-18);
        assert_eq!(pdf[1].0, 0.5);
        assert!((pdf[1].1 - 1.0 / 3.0).abs() < 1e-15);
        assert!(results_to_pdf(&[5.0]).is_err());
    }

    #[test]
    fn stats_validates_and_computes() {
        let (m, v) = stats(&[(0.0, 0.25), (0.5, 0.5), (1.0, 0.25)]).unwrap();
        assert_eq!(m, 0.5);
        assert_eq!(v, 0.125);
        assert!(stats(&[(0.0, 0.5), (1.0, 0.6)]).is_err());
        assert!(stats(&[(0.0, f64::NAN), (1.0, 1.0)]).is_err());
        assert!(stats(&[]).is_err());
        let (_, _, skew, exkurt) = stats_ex(&[(0.0, 0.25), (0.5, 0.5), (1.0, 0.25)]).unwrap();
        assert_eq!(skew, 0.0);
        assert!((exkurt + 1.0).abs() < 1e-15);
        assert!(stats_ex(&[(0.5, 1.0)]).is_err());
    }
}

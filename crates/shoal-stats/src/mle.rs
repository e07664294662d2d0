//! Constrained multinomial maximum-likelihood estimates (`LLRcalc.secular`,
//! `MLE_expected`, `MLE_t_value`).
//!
//! The MLE of a distribution on a fixed support under one linear constraint
//! reduces to the scalar secular equation Σ pᵢaᵢ/(1 + x·aᵢ) = 0, solved with
//! scipy-compatible Brent between the two poles. The constants (1e-9 bracket
//! inset, 10 fixed-point rounds, 1e-9 stop rule, 1e-6/1e-5 validation
//! asserts) are the reference's and decide edge behaviour, so they are copied
//! exactly. No I/O, no async, no logging, no panics.

use super::pdf::{Pdf, stats, uniform};
use super::pyfloat::{self, div};
use super::roots::brentq;
use super::{StatsError, StatsResult};

/// How far inside the poles the secular bracket starts.
const SECULAR_INSET: f64 = 1e-9;
/// Fixed-point rounds of `MLE_t_value` (the reference stops here even if not
/// converged).
const T_VALUE_ROUNDS: usize = 10;
/// `MLE_t_value` stops early when no probability moved by this much.
const T_VALUE_STOP: f64 = 1e-9;

/// Solves Σ pᵢaᵢ/(1 + x·aᵢ) = 0 for x in the open interval between the poles
/// `−1/max a` and `−1/min a`.
///
/// The values must straddle zero (`ValueError` otherwise). When the root lies
/// within 1e-9 of a pole Brent sees no sign change and this fails, as in the
/// reference.
pub fn secular(pdf: &[(f64, f64)]) -> StatsResult<f64> {
    let mut it = pdf.iter().map(|&(a, _)| a);
    let first = it
        .next()
        .ok_or(StatsError::Domain("secular of an empty distribution"))?;
    let (v, w) = it.fold((first, first), |(lo, hi), a| {
        (pyfloat::py_min(lo, a), pyfloat::py_max(hi, a))
    });
    if !(v < 0.0 && 0.0 < w) {
        return Err(StatsError::Domain("secular: values do not straddle 0"));
    }
    let l = -1.0 / w;
    let u = -1.0 / v;
    let f = |x: f64| -> StatsResult<f64> {
        let mut s = 0.0;
        for &(a, p) in pdf {
            s += div(p * a, 1.0 + x * a, "secular evaluated on a pole")?;
        }
        Ok(s)
    };
    let out = brentq(f, l + SECULAR_INSET, u - SECULAR_INSET)?;
    if !out.converged {
        return Err(StatsError::NotConverged("secular"));
    }
    Ok(out.root)
}

/// MLE on the support of `pdfhat` with mean `s`: pᵢ = p̂ᵢ/(1 + x(aᵢ − s)),
/// x the secular root of the shifted values. Asserts |mean − s| < 1e-6.
pub fn mle_expected(pdfhat: &[(f64, f64)], s: f64) -> StatsResult<Pdf> {
    let shifted: Pdf = pdfhat.iter().map(|&(a, p)| (a - s, p)).collect();
    let x = secular(&shifted)?;
    let mut pdf_mle = Vec::with_capacity(pdfhat.len());
    for (&(a, p), &(b, _)) in pdfhat.iter().zip(&shifted) {
        pdf_mle.push((a, div(p, 1.0 + x * b, "MLE_expected on a pole")?));
    }
    let (s_, _) = stats(&pdf_mle)?;
    // Written so that NaN fails, like Python's assert.
    let met = (s - s_).abs() < 1e-6;
    if !met {
        return Err(StatsError::Assertion(
            "MLE_expected: mean constraint not met",
        ));
    }
    Ok(pdf_mle)
}

/// MLE on the support of `pdfhat` with t-value (mean − `reference`)/sd = `s`,
/// by the reference's fixed-point iteration: at most 10 rounds, stopping once
/// no probability moves by 1e-9. Asserts |s − t| < 1e-5 at the end.
pub fn mle_t_value(pdfhat: &[(f64, f64)], reference: f64, s: f64) -> StatsResult<Pdf> {
    let n = pdfhat.len();
    let mut pdf_mle = uniform(pdfhat);
    let mut shifted: Pdf = Vec::with_capacity(n);
    let mut next: Pdf = Vec::with_capacity(n);
    for _ in 0..T_VALUE_ROUNDS {
        let (mu, var) = stats(&pdf_mle)?;
        let sigma = pyfloat::sqrt(var)?;
        shifted.clear();
        for &(a, p) in pdfhat {
            let z = div(mu - a, sigma, "MLE_t_value on a point mass")?;
            // Same association as the reference expression
            // `ai - ref - s * sigma * (1 + z ** 2) / 2`.
            let b = a - reference - s * sigma * (1.0 + pyfloat::sq(z)?) / 2.0;
            shifted.push((b, p));
        }
        let x = secular(&shifted)?;
        next.clear();
        for (&(a, p), &(b, _)) in pdfhat.iter().zip(&shifted) {
            next.push((a, div(p, 1.0 + x * b, "MLE_t_value on a pole")?));
        }
        // Python's `max(list)`: the first element, replaced by any larger one.
        let mut diffs = pdf_mle
            .iter()
            .zip(&next)
            .map(|(&(_, p0), &(_, p1))| (p0 - p1).abs());
        let first = diffs.next().unwrap_or(f64::NAN);
        let moved = diffs.fold(first, pyfloat::py_max);
        std::mem::swap(&mut pdf_mle, &mut next);
        if moved < T_VALUE_STOP {
            break;
        }
    }
    let (mu, var) = stats(&pdf_mle)?;
    let t = div(
        mu - reference,
        pyfloat::sqrt(var)?,
        "MLE_t_value on a point mass",
    )?;
    let met = (s - t).abs() < 1e-5;
    if !met {
        return Err(StatsError::Assertion(
            "MLE_t_value: t-value constraint not met",
        ));
    }
    Ok(pdf_mle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secular_matches_reference_example() {
        // Corpus: secular([[-0.9, 0.001], [0.1, 0.999]]) = 1.09999999999997.
        let x = secular(&[(-0.9, 0.001), (0.1, 0.999)]).unwrap();
        assert!((x - 1.099_999_999_999_97).abs() < 1e-12);
    }

    #[test]
    fn secular_needs_straddling_values() {
        assert!(
            secular(&[(0.1, 0.5), (0.2, 0.5)])
                .unwrap_err()
                .is_value_error()
        );
        assert!(secular(&[]).is_err());
    }

    #[test]
    fn mle_expected_hits_the_mean() {
        let pdf = [(0.0, 0.2), (0.5, 0.5), (1.0, 0.3)];
        let q = mle_expected(&pdf, 0.52).unwrap();
        let (m, _) = stats(&q).unwrap();
        assert!((m - 0.52).abs() < 1e-12);
        // At its own mean the MLE is the input.
        let q = mle_expected(&pdf, 0.55).unwrap();
        for (a, b) in q.iter().zip(&pdf) {
            assert!((a.1 - b.1).abs() < 1e-12);
        }
    }

    #[test]
    fn mle_t_value_hits_the_t_value() {
        let pdf = [(0.0, 0.2113), (0.5, 0.5750), (1.0, 0.2137)];
        let q = mle_t_value(&pdf, 0.5, 0.01).unwrap();
        let (m, v) = stats(&q).unwrap();
        assert!(((m - 0.5) / v.sqrt() - 0.01).abs() < 1e-9);
    }
}

//! Log-likelihood ratios of `LLRcalc`: the generalized (GSPRT) LLR through
//! constrained MLEs (`LLRjumps`, `LLR`, `LLR_logistic`, `LLR_normalized`),
//! its approximations (`LLR_alt`, `LLR_alt2`, `LLR_normalized_alt`) and the
//! per-sample drift/variance used by the Brownian model.
//!
//! `LLR_logistic` / `LLR_normalized` are what `update_SPRT` and `SPRT_elo`
//! decide with, so they follow the reference's arithmetic closely. Inputs are
//! regularised by `results_to_pdf`, so zero cells never fail. No I/O, no
//! async, no logging, no panics.

use super::NELO_DIVIDED_BY_NT;
use super::elo::logistic;
use super::mle::{mle_expected, mle_t_value};
use super::pdf::{Pdf, results_to_pdf, stats};
use super::pyfloat::{self, div};
use super::{StatsError, StatsResult};

/// Which constraint the two hypotheses put on the distribution.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Statistic {
    /// Hypotheses fix the mean score (`statistic="expectation"`).
    Expectation,
    /// Hypotheses fix the t-value (mean − `reference`)/sd
    /// (`statistic="t_value"`, `ref=reference`).
    TValue {
        /// The reference score, ½ for normalized Elo.
        reference: f64,
    },
}

fn mle(pdf: &[(f64, f64)], s: f64, statistic: Statistic) -> StatsResult<Pdf> {
    match statistic {
        Statistic::Expectation => mle_expected(pdf, s),
        Statistic::TValue { reference } => mle_t_value(pdf, reference, s),
    }
}

/// The LLR jump of every cell: `(log p¹ᵢ − log p⁰ᵢ, p̂ᵢ)`, with p⁰/p¹ the MLEs
/// under `s0`/`s1`.
pub fn llr_jumps(pdf: &[(f64, f64)], s0: f64, s1: f64, statistic: Statistic) -> StatsResult<Pdf> {
    let pdf0 = mle(pdf, s0, statistic)?;
    let pdf1 = mle(pdf, s1, statistic)?;
    let mut out = Vec::with_capacity(pdf.len());
    for ((&(_, p), &(_, p0)), &(_, p1)) in pdf.iter().zip(&pdf0).zip(&pdf1) {
        out.push((pyfloat::ln(p1)? - pyfloat::ln(p0)?, p));
    }
    Ok(out)
}

/// Generalized LLR per sample: the mean of the jumps under `pdf` (through
/// `stats`, so its validity asserts apply).
pub fn llr(pdf: &[(f64, f64)], s0: f64, s1: f64, statistic: Statistic) -> StatsResult<f64> {
    Ok(stats(&llr_jumps(pdf, s0, s1, statistic)?)?.0)
}

/// Per-sample approximation ½·log(r0/r1), r_k = Σ p̂ᵢ(aᵢ − s_k)².
pub fn llr_alt(pdf: &[(f64, f64)], s0: f64, s1: f64) -> StatsResult<f64> {
    let r = |s: f64| -> StatsResult<f64> {
        let mut acc = 0.0;
        for &(a, p) in pdf {
            acc += p * pyfloat::sq(a - s)?;
        }
        Ok(acc)
    };
    let (r0, r1) = (r(s0)?, r(s1)?);
    Ok(0.5 * pyfloat::ln(div(r0, r1, "LLR_alt with zero spread")?)?)
}

/// Quadratic (Brownian) approximation (s1 − s0)(2μ − s0 − s1)/(2·var).
pub fn llr_alt2(pdf: &[(f64, f64)], s0: f64, s1: f64) -> StatsResult<f64> {
    let (s, var) = stats(pdf)?;
    Ok(div(
        (s1 - s0) * (2.0 * s - s0 - s1),
        var,
        "LLR_alt2 with zero variance",
    )? / 2.0)
}

/// `[drift, variance]` of the per-sample LLR: the variance of the jumps of
/// `pdf` under `pdf`, and the drift as the mean jump under q =
/// MLE_expected(pdf, s) with the jumps recomputed from q. `s = None` means the
/// mean of `pdf`.
pub fn llr_drift_variance(
    pdf: &[(f64, f64)],
    s0: f64,
    s1: f64,
    s: Option<f64>,
) -> StatsResult<(f64, f64)> {
    let s = match s {
        Some(s) => s,
        None => stats(pdf)?.0,
    };
    let (_, variance) = stats(&llr_jumps(pdf, s0, s1, Statistic::Expectation)?)?;
    let q = mle_expected(pdf, s)?;
    let (drift, _) = stats(&llr_jumps(&q, s0, s1, Statistic::Expectation)?)?;
    Ok((drift, variance))
}

/// Brownian approximation of `[drift, variance]`: drift
/// (s − (s0+s1)/2)(s1 − s0)/v and variance (s1 − s0)²/v with v = var(pdf);
/// `s = None` means the mean of `pdf`.
pub fn llr_drift_variance_alt2(
    pdf: &[(f64, f64)],
    s0: f64,
    s1: f64,
    s: Option<f64>,
) -> StatsResult<(f64, f64)> {
    let (mean, v) = stats(pdf)?;
    let s = s.unwrap_or(mean);
    let drift = div(
        (s - (s0 + s1) / 2.0) * (s1 - s0),
        v,
        "drift with zero variance",
    )?;
    let variance = div(pyfloat::sq(s1 - s0)?, v, "variance with zero variance")?;
    Ok((drift, variance))
}

/// Total LLR of `results` for logistic Elo bounds: N·LLR(pdf, L(elo0),
/// L(elo1)), N and pdf from `results_to_pdf` (regularised).
pub fn llr_logistic(elo0: f64, elo1: f64, results: &[f64]) -> StatsResult<f64> {
    let s0 = logistic(elo0)?;
    let s1 = logistic(elo1)?;
    let (n, pdf) = results_to_pdf(results)?;
    Ok(n * llr(&pdf, s0, s1, Statistic::Expectation)?)
}

/// Total LLR of `results` for normalized Elo bounds: N·LLR with t-value
/// hypotheses t_k = nelo_k/(800/ln 10) about ½, ×√2 for pentanomial data
/// (a pair's t-value is √2 times a game's).
pub fn llr_normalized(nelo0: f64, nelo1: f64, results: &[f64]) -> StatsResult<f64> {
    let nt0 = nelo0 / NELO_DIVIDED_BY_NT;
    let nt1 = nelo1 / NELO_DIVIDED_BY_NT;
    let (t0, t1) = if results.len() == 3 {
        (nt0, nt1)
    } else {
        let sqrt2 = std::f64::consts::SQRT_2;
        (nt0 * sqrt2, nt1 * sqrt2)
    };
    let (n, pdf) = results_to_pdf(results)?;
    Ok(n * llr(&pdf, t0, t1, Statistic::TValue { reference: 0.5 })?)
}

/// Closed-form approximation of [`llr_normalized`]:
/// (games/2)·ln[(1 + (nt − nt0)²)/(1 + (nt − nt1)²)].
pub fn llr_normalized_alt(nelo0: f64, nelo1: f64, results: &[f64]) -> StatsResult<f64> {
    let (count, pdf) = results_to_pdf(results)?;
    let (mu, var) = stats(&pdf)?;
    let (games, sigma_pg) = match results.len() {
        5 => (2.0 * count, pyfloat::sqrt(2.0 * var)?),
        3 => (count, pyfloat::sqrt(var)?),
        _ => {
            return Err(StatsError::InvalidInput(
                "LLR_normalized_alt needs 3 or 5 cells",
            ));
        }
    };
    let nt = div(mu - 0.5, sigma_pg, "LLR_normalized_alt with zero variance")?;
    let nt0 = nelo0 / NELO_DIVIDED_BY_NT;
    let nt1 = nelo1 / NELO_DIVIDED_BY_NT;
    let ratio = (1.0 + pyfloat::sq(nt - nt0)?) / (1.0 + pyfloat::sq(nt - nt1)?);
    Ok((games / 2.0) * pyfloat::ln(ratio)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn llr_of_empty_results_is_noise() {
        let v = llr_logistic(0.0, 2.0, &[0.0, 0.0, 0.0]).unwrap();
        assert!(v.abs() < 1e-5);
        let v = llr_normalized(0.0, 2.0, &[0.0; 5]).unwrap();
        assert!(v.abs() < 1e-5);
    }

    #[test]
    fn llr_sign_follows_the_data() {
        let good = [9000.0, 20000.0, 11000.0];
        let bad = [11000.0, 20000.0, 9000.0];
        assert!(llr_logistic(0.0, 5.0, &good).unwrap() > 0.0);
        assert!(llr_logistic(0.0, 5.0, &bad).unwrap() < 0.0);
        assert!(llr_normalized(0.0, 5.0, &good).unwrap() > 0.0);
    }

    #[test]
    fn alt2_approximates_exact_llr() {
        let (n, pdf) = results_to_pdf(&[21228.0, 88672.0, 18826.0]).unwrap();
        let (s0, s1) = (logistic(-3.0).unwrap(), logistic(1.0).unwrap());
        let exact = n * llr(&pdf, s0, s1, Statistic::Expectation).unwrap();
        let approx = n * llr_alt2(&pdf, s0, s1).unwrap();
        assert!((exact - approx).abs() / exact.abs() < 0.02);
    }
}

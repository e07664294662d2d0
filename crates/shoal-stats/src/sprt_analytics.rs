//! Post-SPRT analytics: Fishtest's `sprt` class (`sprt.py`) — a Brownian
//! model of the LLR that yields a median-unbiased Elo, a confidence interval
//! and the LOS of a (possibly finished) SPRT — and `stat_util.SPRT_elo`,
//! which the server shows for every SPRT run.
//!
//! Quirks kept on purpose because the reference has them: `outcome_prob`
//! maps Elo to a score with the *logistic* formula whatever the model, so the
//! reported elo/ci are logistic Elo even for normalized runs; `lower_cb`
//! retries with a doubled bracket only on `ValueError`s and gives ±1000 when
//! no root exists in [−1000, 1000]. No I/O, no async, no logging, no panics.

use super::NELO_DIVIDED_BY_NT;
use super::brownian::Brownian;
use super::elo::{bayeselo_to_elo, logistic};
use super::llr::{llr_drift_variance_alt2, llr_logistic, llr_normalized};
use super::pdf::{Pdf, regularize, results_to_pdf, stats};
use super::pyfloat::{self, div};
use super::roots::brentq;
use super::sprt_state::{EloModel, Results, drawelo_of};
use super::{StatsError, StatsResult};

/// `clamped` is set when the approximate LLR overshoots a bound by 3%.
const CLAMP_FACTOR: f64 = 1.03;
/// `lower_cb` limits its search to [−ELO_LIMIT, ELO_LIMIT].
const ELO_LIMIT: f64 = 1000.0;
/// `lower_cb`'s first bracket half-width, in units of elo1 − elo0.
const FIRST_BRACKET: f64 = 30.0;
/// Doublings after which `lower_cb` gives up on a bracket that never reaches
/// ±1000 (elo0 == elo1, NaN bounds, …; the reference would loop forever).
const MAX_BRACKET_DOUBLINGS: u32 = 200;

/// The state of Fishtest's `sprt` class after `set_state`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sprt {
    /// ln(β/(1−α)).
    pub a: f64,
    /// ln((1−β)/α).
    pub b: f64,
    /// Lower bound in `elo_model` units.
    pub elo0: f64,
    /// Upper bound in `elo_model` units.
    pub elo1: f64,
    /// `Logistic` or `Normalized` (BayesElo is rejected by [`Sprt::new`]).
    pub elo_model: EloModel,
    /// The approximate LLR overshot a bound by more than 3%.
    pub clamped: bool,
    /// Distribution of the results (after `set_state`).
    pub pdf: Pdf,
    /// Per-game σ (normalized model only, after `set_state`).
    pub sigma_pg: Option<f64>,
    /// Score of `elo0` (after `set_state`).
    pub s0: f64,
    /// Score of `elo1` (after `set_state`).
    pub s1: f64,
    /// Approximate LLR, moved onto a bound if it crossed one.
    pub llr: f64,
    /// Sample count, or the estimated hitting time when the LLR was moved.
    pub t: f64,
}

/// What `sprt.analytics(p)` returns.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Analytics {
    /// See [`Sprt::clamped`].
    pub clamped: bool,
    /// Lower LLR bound.
    pub a: f64,
    /// Upper LLR bound.
    pub b: f64,
    /// Median-unbiased Elo (logistic Elo, whatever the model).
    pub elo: f64,
    /// `[lower, upper]` confidence bounds at level 1 − p (logistic Elo).
    pub ci: [f64; 2],
    /// Likelihood of superiority.
    pub los: f64,
    /// The (clamped) approximate LLR.
    pub llr: f64,
}

impl Sprt {
    /// The class constructor: a = ln(β/(1−α)), b = ln((1−β)/α). Only the
    /// logistic and normalized models are accepted (AssertionError in the
    /// reference). Call [`Sprt::set_state`] before using it.
    pub fn new(
        alpha: f64,
        beta: f64,
        elo0: f64,
        elo1: f64,
        elo_model: EloModel,
    ) -> StatsResult<Self> {
        if elo_model == EloModel::BayesElo {
            return Err(StatsError::Assertion(
                "sprt needs a logistic or normalized model",
            ));
        }
        let a = pyfloat::ln(div(beta, 1.0 - alpha, "sprt with alpha = 1")?)?;
        let b = pyfloat::ln(div(1.0 - beta, alpha, "sprt with alpha = 0")?)?;
        Ok(Sprt {
            a,
            b,
            elo0,
            elo1,
            elo_model,
            clamped: false,
            pdf: Vec::new(),
            sigma_pg: None,
            s0: f64::NAN,
            s1: f64::NAN,
            llr: 0.0,
            t: 0.0,
        })
    }

    /// Constructor plus `set_state(results)`.
    pub fn with_results(
        alpha: f64,
        beta: f64,
        elo0: f64,
        elo1: f64,
        elo_model: EloModel,
        results: &[f64],
    ) -> StatsResult<Self> {
        let mut s = Sprt::new(alpha, beta, elo0, elo1, elo_model)?;
        s.set_state(results)?;
        Ok(s)
    }

    /// Model Elo → score: L(elo) for logistic, nelo/(800/ln 10)·σ_pg + ½ for
    /// normalized (needs `set_state` first).
    pub fn elo_to_score(&self, elo: f64) -> StatsResult<f64> {
        match self.elo_model {
            EloModel::Normalized => {
                let sigma_pg = self
                    .sigma_pg
                    .ok_or(StatsError::InvalidInput("sprt.set_state was not called"))?;
                Ok(elo / NELO_DIVIDED_BY_NT * sigma_pg + 0.5)
            }
            _ => logistic(elo),
        }
    }

    /// Logistic Elo → model Elo (identity for logistic). Neither the server
    /// nor `SPRT_elo` uses it; kept for completeness.
    pub fn lelo_to_elo(&self, lelo: f64) -> StatsResult<f64> {
        match self.elo_model {
            EloModel::Normalized => {
                let sigma_pg = self
                    .sigma_pg
                    .ok_or(StatsError::InvalidInput("sprt.set_state was not called"))?;
                let score = logistic(lelo)?;
                let nt = div(score - 0.5, sigma_pg, "lelo_to_elo with zero variance")?;
                Ok(nt * NELO_DIVIDED_BY_NT)
            }
            _ => Ok(lelo),
        }
    }

    /// Loads results: pdf, σ_pg (normalized), score bounds, and the
    /// approximate LLR N·μ_LLR with T = N. If that LLR crossed a bound it is
    /// moved onto the bound and T becomes the hitting time bound/μ_LLR.
    pub fn set_state(&mut self, results: &[f64]) -> StatsResult<()> {
        let (n, pdf) = results_to_pdf(results)?;
        self.pdf = pdf;
        if self.elo_model == EloModel::Normalized {
            let (_, var) = stats(&self.pdf)?;
            self.sigma_pg = Some(match results.len() {
                5 => pyfloat::sqrt(2.0 * var)?,
                3 => pyfloat::sqrt(var)?,
                _ => return Err(StatsError::InvalidInput("sprt needs 3 or 5 cells")),
            });
        }
        self.s0 = self.elo_to_score(self.elo0)?;
        self.s1 = self.elo_to_score(self.elo1)?;
        let (mu_llr, _) = llr_drift_variance_alt2(&self.pdf, self.s0, self.s1, None)?;
        self.llr = n * mu_llr;
        self.t = n;
        let slope = div(self.llr, n, "sprt with no samples")?;
        if self.llr > CLAMP_FACTOR * self.b || self.llr < CLAMP_FACTOR * self.a {
            self.clamped = true;
        }
        if self.llr < self.a {
            self.t = div(self.a, slope, "sprt with zero drift")?;
            self.llr = self.a;
        } else if self.llr > self.b {
            self.t = div(self.b, slope, "sprt with zero drift")?;
            self.llr = self.b;
        }
        Ok(())
    }

    /// Probability that a test at logistic Elo `elo` ends with a worse outcome
    /// than the observed one (faster fail, slower pass, or a fail instead of
    /// a pass). The Elo → score map is always logistic here.
    pub fn outcome_prob(&self, elo: f64) -> StatsResult<f64> {
        let s = logistic(elo)?;
        let (mu_llr, var_llr) = llr_drift_variance_alt2(&self.pdf, self.s0, self.s1, Some(s))?;
        let sigma_llr = pyfloat::sqrt(var_llr)?;
        Brownian::new(self.a, self.b, mu_llr, sigma_llr).outcome_cdf(self.t, self.llr)
    }

    /// The Elo at which `outcome_prob` equals 1 − p, by Brent on a bracket
    /// of ±30·(elo1 − elo0) around the midpoint, doubled on every
    /// `ValueError` until it reaches [−1000, 1000]; ±1000 when there is no
    /// root there.
    pub fn lower_cb(&self, p: f64) -> StatsResult<f64> {
        let avg_elo = (self.elo0 + self.elo1) / 2.0;
        let delta = self.elo1 - self.elo0;
        let mut width = FIRST_BRACKET;
        let f = |elo: f64| -> StatsResult<f64> { Ok(self.outcome_prob(elo)? - (1.0 - p)) };
        for _ in 0..MAX_BRACKET_DOUBLINGS {
            let lo = pyfloat::py_max(avg_elo - width * delta, -ELO_LIMIT);
            let hi = pyfloat::py_min(avg_elo + width * delta, ELO_LIMIT);
            match brentq(f, lo, hi) {
                Ok(out) => {
                    if !out.converged {
                        return Err(StatsError::NotConverged("sprt.lower_cb"));
                    }
                    return Ok(out.root);
                }
                Err(e) if e.is_value_error() => {
                    if lo > -ELO_LIMIT || hi < ELO_LIMIT {
                        width *= 2.0;
                        continue;
                    }
                    return Ok(if f(lo)? > 0.0 { hi } else { lo });
                }
                Err(e) => return Err(e),
            }
        }
        Err(StatsError::NotConverged(
            "sprt.lower_cb bracket never reached ±1000",
        ))
    }

    /// `{clamped, a, b, elo, ci, LOS, LLR}` with elo = lower_cb(0.5),
    /// ci = [lower_cb(p/2), lower_cb(1 − p/2)], LOS = outcome_prob(0).
    pub fn analytics(&self, p: f64) -> StatsResult<Analytics> {
        let elo = self.lower_cb(0.5)?;
        let ci = [self.lower_cb(p / 2.0)?, self.lower_cb(1.0 - p / 2.0)?];
        let los = self.outcome_prob(0.0)?;
        Ok(Analytics {
            clamped: self.clamped,
            a: self.a,
            b: self.b,
            elo,
            ci,
            los,
            llr: self.llr,
        })
    }
}

/// What `SPRT_elo` returns (the run page's Elo line of an SPRT).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SprtElo {
    /// Lower LLR bound.
    pub a: f64,
    /// Upper LLR bound.
    pub b: f64,
    /// Median-unbiased logistic Elo.
    pub elo: f64,
    /// Confidence interval (logistic Elo).
    pub ci: [f64; 2],
    /// Likelihood of superiority.
    pub los: f64,
    /// The exact LLR of the data (`LLR_logistic` / `LLR_normalized`).
    pub llr: f64,
}

/// Fishtest's `SPRT_elo(R, alpha, beta, p, elo0, elo1, elo_model)`.
///
/// drawelo comes from the regularised `[L, D, W]` (absent counts are 0, so a
/// pentanomial-only `R` gets 200·log10 4); BayesElo bounds are converted to
/// logistic with it. The `sprt` model is fed the pentanomial if present, else
/// the regularised trinomial; `LLR` is then replaced by the exact LLR of the
/// same data.
pub fn sprt_elo(
    r: &Results,
    alpha: f64,
    beta: f64,
    p: f64,
    elo0: f64,
    elo1: f64,
    elo_model: EloModel,
) -> StatsResult<SprtElo> {
    let drawelo = drawelo_of(r)?;
    let (elo0, elo1, model) = if elo_model == EloModel::BayesElo {
        (
            bayeselo_to_elo(elo0, drawelo)?,
            bayeselo_to_elo(elo1, drawelo)?,
            EloModel::Logistic,
        )
    } else {
        (elo0, elo1, elo_model)
    };
    let data: Vec<f64> = match r.pentanomial_f64() {
        Some(p5) => p5.to_vec(),
        None => regularize(&r.trinomial()),
    };
    let sp = Sprt::with_results(alpha, beta, elo0, elo1, model, &data)?;
    let an = sp.analytics(p)?;
    let llr = match model {
        EloModel::Normalized => llr_normalized(elo0, elo1, &data)?,
        _ => llr_logistic(elo0, elo1, &data)?,
    };
    Ok(SprtElo {
        a: an.a,
        b: an.b,
        elo: an.elo,
        ci: an.ci,
        los: an.los,
        llr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bayeselo_model_is_rejected_by_the_class() {
        assert!(Sprt::new(0.05, 0.05, 0.0, 5.0, EloModel::BayesElo).is_err());
    }

    #[test]
    fn equal_bounds_do_not_hang() {
        let sp = Sprt::with_results(
            0.05,
            0.05,
            1.0,
            1.0,
            EloModel::Logistic,
            &[100.0, 200.0, 120.0],
        );
        // Either a value or an error, but it returns.
        let _ = sp.and_then(|s| s.lower_cb(0.5));
    }

    #[test]
    fn all_wins_gives_plus_1000() {
        let r = Results {
            wins: 1000,
            ..Results::default()
        };
        let e = sprt_elo(&r, 0.05, 0.05, 0.05, 0.0, 2.0, EloModel::Logistic).unwrap();
        assert_eq!(e.elo, 1000.0);
        assert_eq!(e.ci[1], 1000.0);
        assert!(e.ci[0] > 400.0);
    }

    #[test]
    fn lower_cb_is_monotone_in_p() {
        let sp = Sprt::with_results(
            0.05,
            0.05,
            0.0,
            2.0,
            EloModel::Logistic,
            &[28283.0, 116_489.0, 25148.0],
        )
        .unwrap();
        let lo = sp.lower_cb(0.025).unwrap();
        let mid = sp.lower_cb(0.5).unwrap();
        let hi = sp.lower_cb(0.975).unwrap();
        assert!(lo < mid && mid < hi);
    }
}

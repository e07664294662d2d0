//! Fishtest-compatible statistics: the semantics of Fishtest's `LLRcalc.py`,
//! `stat_util.py`, `sprt.py`, `brownian.py` and two display helpers of
//! `template_helpers.py` (server/fishtest in official-stockfish/fishtest), in
//! pure Rust. `tests/data/stats-sample.json` holds input/output pairs of those
//! modules that every function here must match (`tests/it/stats_corpus.rs`, in the
//! workspace of the shoal server, which re-exports this crate as `shoal::stats`).
//!
//! This crate owns every number the server shows or decides with: Elo
//! conversions, likelihood ratios, the SPRT state machine stored in a run
//! (`args.sprt`), the post-SPRT Elo estimate and the fixed-games Elo.
//!
//! It must not do I/O, must not be async, must not log, must not panic, and
//! must not depend on the server (any testing framework may use it):
//! every place where the Python reference raises (or where an input is
//! invalid) returns a [`StatsError`] instead. Everything here is a plain
//! synchronous computation that a server can run on an offload pool.
//!
//! Layout:
//! - `pyfloat` (private): Python float semantics (which operations raise).
//! - [`roots`]: scipy-compatible Brent root finder.
//! - [`normal`]: standard normal cdf/quantile.
//! - [`pdf`]: regularisation, results → distribution, moments.
//! - [`mle`]: constrained maximum-likelihood estimates and the secular equation.
//! - [`mod@llr`]: every log-likelihood-ratio variant of `LLRcalc`.
//! - [`mod@elo`]: `stat_util` conversions, BayesElo, legacy LLR and `get_elo`.
//! - [`brownian`]: Brownian motion with two absorbing barriers.
//! - [`sprt_analytics`]: the `sprt` class and `SPRT_elo`.
//! - [`sprt_state`]: the run's SPRT record, `SPRT(...)` and `update_SPRT`.
//! - [`display`]: the run-page helpers `t_conf` and the pentanomial nElo summary.
//! - [`raw`]: the numbers of the raw statistics page.
//! - [`sprt_calc`]: the SPRT calculator (pass probability and expected length).

pub mod brownian;
pub mod display;
pub mod elo;
pub mod llr;
pub mod mle;
pub mod normal;
pub mod pdf;
mod pyfloat;
pub mod raw;
pub mod roots;
pub mod sprt_analytics;
pub mod sprt_calc;
pub mod sprt_state;

pub use brownian::Brownian;
pub use display::{NeloSummary, nelo_pentanomial, t_conf};
pub use elo::{
    EloEstimate, bayeselo_to_elo, bayeselo_to_proba, draw_elo_calc, elo, elo_to_bayeselo,
    game_stats, get_elo, llr_legacy, logistic, proba_to_bayeselo,
};
pub use llr::{
    Statistic, llr, llr_alt, llr_alt2, llr_drift_variance, llr_drift_variance_alt2, llr_jumps,
    llr_logistic, llr_normalized, llr_normalized_alt,
};
pub use mle::{mle_expected, mle_t_value, secular};
pub use normal::{phi, phi_inv};
pub use pdf::{Pdf, regularize, results_to_pdf, stats, stats_ex, uniform};
pub use sprt_analytics::{Analytics, Sprt, SprtElo, sprt_elo};
pub use sprt_state::{EloModel, Overshoot, Results, SprtRecord, SprtState, update_sprt};

/// `800 / ln 10`: the factor between a normalized Elo and a per-game t-value
/// (`LLRcalc.nelo_divided_by_nt`). Written as the literal Python prints so that
/// it is bit-identical; a unit test checks it against `800.0 / 10f64.ln()`.
pub const NELO_DIVIDED_BY_NT: f64 = 347.435_585_522_601_46;

/// Result alias used throughout the module.
pub type StatsResult<T> = Result<T, StatsError>;

/// Why a statistics function produced no value.
///
/// The variants mirror the Python exception the reference raises in the same
/// situation, because one caller (`sprt::lower_cb`) must behave differently
/// for a `ValueError` than for anything else. [`StatsError::python_exception`]
/// names the class.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StatsError {
    /// Python `ValueError` from a math domain error (log of a non-positive
    /// number, square root of a negative number, …).
    #[error("math domain error: {0}")]
    Domain(&'static str),
    /// Python `ValueError` raised by scipy's `brentq` when the bracket ends
    /// have the same sign.
    #[error("f(a) and f(b) must have different signs")]
    NoSignChange,
    /// Python `ValueError` raised by scipy's `brentq` when the function
    /// returns NaN.
    #[error("the function value is NaN; solver cannot continue")]
    NanFunctionValue,
    /// A root finder (or a bounded series) did not converge; the reference
    /// fails an assertion (or raises `RuntimeError`).
    #[error("failed to converge: {0}")]
    NotConverged(&'static str),
    /// Python `AssertionError`: a validation check of the reference failed.
    #[error("assertion failed: {0}")]
    Assertion(&'static str),
    /// Python `ZeroDivisionError`.
    #[error("division by zero: {0}")]
    DivisionByZero(&'static str),
    /// Python `OverflowError` (float `**` or `math.exp` out of range).
    #[error("numerical result out of range: {0}")]
    Overflow(&'static str),
    /// An input the reference would reject in some other way (wrong vector
    /// length, unsupported model, …).
    #[error("invalid input: {0}")]
    InvalidInput(&'static str),
}

impl StatsError {
    /// The Python exception class the reference raises in this situation.
    pub fn python_exception(&self) -> &'static str {
        match self {
            StatsError::Domain(_) | StatsError::NoSignChange | StatsError::NanFunctionValue => {
                "ValueError"
            }
            StatsError::NotConverged(_) | StatsError::Assertion(_) => "AssertionError",
            StatsError::DivisionByZero(_) => "ZeroDivisionError",
            StatsError::Overflow(_) => "OverflowError",
            StatsError::InvalidInput(_) => "AssertionError",
        }
    }

    /// Whether the reference raises a `ValueError` here; `sprt::lower_cb`
    /// widens its bracket on exactly these errors.
    pub fn is_value_error(&self) -> bool {
        self.python_exception() == "ValueError"
    }
}

#[cfg(test)]
mod tests {
    /// The README's example, as written there.
    #[test]
    fn the_readme_example_runs() -> Result<(), StatsError> {
        let e = get_elo(&[100.0, 300.0, 120.0])?;
        assert!(e.elo > 0.0 && e.los > 0.5, "more wins than losses: {e:?}");
        let mut sprt = SprtRecord::new(0.05, 0.05, 0.0, 2.0, EloModel::Normalized, 2)?;
        let r = Results {
            wins: 0,
            losses: 0,
            draws: 0,
            pentanomial: Some([10, 50, 120, 60, 12]),
        };
        update_sprt(&r, &mut sprt)?;
        assert!(sprt.llr > 0.0, "more won pairs than lost: {sprt:?}");
        assert!(sprt.state != SprtState::Running || sprt.llr < sprt.upper_bound);
        Ok(())
    }

    use super::*;

    #[test]
    fn nelo_constant_matches_python() {
        assert_eq!(NELO_DIVIDED_BY_NT, 800.0 / 10f64.ln());
    }

    #[test]
    fn error_classes() {
        assert!(StatsError::NoSignChange.is_value_error());
        assert!(StatsError::Domain("x").is_value_error());
        assert!(!StatsError::Assertion("x").is_value_error());
        assert_eq!(
            StatsError::DivisionByZero("x").python_exception(),
            "ZeroDivisionError"
        );
    }
}

//! The SPRT calculator (`/sprt_calc`): for an SPRT(elo0, elo1) with α = β = 0.05 on game
//! pairs, the probability that a patch of a given true Elo passes and the expected number of
//! games the test takes, over a range of true Elo values.
//!
//! The model (the Brownian approximation of the LLR that `sprt_analytics` also uses):
//! - a game pair is played from one opening with the colours swapped; the opening favours
//!   one colour by ±`rms_bias` logistic Elo, so a game's expected score is s = L(rms_bias)
//!   for one colour and 1 − s for the other, and with draw ratio d a game's variance is
//!   s(1 − s) − d/4 (win probability s − d/2, which must be positive: otherwise the draw
//!   ratio and the bias are incompatible). A pair's mean score has half that variance (the
//!   bias cancels in the pair);
//! - per pair, the LLR moves with drift (s1 − s0)(2μ − s0 − s1)/(2σ²) and variance
//!   (s1 − s0)²/σ² (Fishtest's `LLR_drift_variance_alt2`), in scores for logistic bounds
//!   (μ = L(elo), s_k = L(elo_k), σ² the pair variance) and in pair t-values for normalized
//!   bounds (μ = t = √2·nelo/(800/ln 10), σ² = 1);
//! - a Brownian motion with that drift and variance between ln(β/(1−α)) and ln((1−β)/α)
//!   passes with probability (e^{2γa} − 1)/(e^{2γ(a−b)} − 1), γ = drift/variance, and ends
//!   after (P·b + (1−P)·a)/drift pairs on average (−a·b/variance without drift).
//!
//! Must not: do I/O, log, panic. Invalid inputs are a [`CalcError`] with the message shown
//! on the page.

use super::NELO_DIVIDED_BY_NT;
use super::elo::logistic;

/// The error bounds of every SPRT the calculator shows (Fishtest's defaults).
pub const ALPHA: f64 = 0.05;
pub const BETA: f64 = 0.05;
/// The number of true-Elo points computed.
pub const POINTS: usize = 61;

/// The calculator's inputs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalcInput {
    /// Normalized (true) or logistic (false) Elo.
    pub normalized: bool,
    pub elo0: f64,
    pub elo1: f64,
    pub draw_ratio: f64,
    pub rms_bias: f64,
}

impl Default for CalcInput {
    /// The form's defaults: normalized, 0.0, 2.0, draw ratio 0.49, RMS bias 191.
    fn default() -> Self {
        CalcInput {
            normalized: true,
            elo0: 0.0,
            elo1: 2.0,
            draw_ratio: 0.49,
            rms_bias: 191.0,
        }
    }
}

/// Why the calculator refuses its inputs.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CalcError {
    #[error("Elo1 must be at least Elo0 + 0.5")]
    BoundsTooClose,
    #[error("Elo0 and Elo1 must be within [-10, 10]")]
    BoundsTooLarge,
    #[error("The draw ratio must be strictly between 0 and 1")]
    DrawRatio,
    #[error("The RMS bias must not be negative")]
    NegativeBias,
    #[error("The draw ratio and the RMS bias are incompatible")]
    Incompatible,
    #[error("The inputs give no usable model")]
    Degenerate,
}

/// One point of the curves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CalcPoint {
    /// True Elo, in the model's units.
    pub elo: f64,
    /// Probability that the test passes.
    pub pass: f64,
    /// Expected number of games.
    pub games: f64,
}

/// The calculator's answer.
#[derive(Debug, Clone, PartialEq)]
pub struct CalcOutput {
    /// LLR bounds ln(β/(1−α)) and ln((1−β)/α).
    pub a: f64,
    pub b: f64,
    /// Variance of one game's score at the given draw ratio and bias.
    pub game_variance: f64,
    pub points: Vec<CalcPoint>,
}

/// Checks the inputs, in the order the page reports them.
pub fn validate(input: &CalcInput) -> Result<(), CalcError> {
    let CalcInput {
        elo0,
        elo1,
        draw_ratio,
        rms_bias,
        ..
    } = *input;
    if !(elo0.is_finite() && elo1.is_finite() && draw_ratio.is_finite() && rms_bias.is_finite()) {
        return Err(CalcError::Degenerate);
    }
    if elo1 < elo0 + 0.5 {
        return Err(CalcError::BoundsTooClose);
    }
    if elo0.abs() > 10.0 || elo1.abs() > 10.0 {
        return Err(CalcError::BoundsTooLarge);
    }
    if draw_ratio <= 0.0 || draw_ratio >= 1.0 {
        return Err(CalcError::DrawRatio);
    }
    if rms_bias < 0.0 {
        return Err(CalcError::NegativeBias);
    }
    game_variance(draw_ratio, rms_bias).map(|_| ())
}

/// s(1 − s) − d/4 with s = L(rms_bias): a game's variance; refused when the win (or loss)
/// probability it implies is not positive.
fn game_variance(draw_ratio: f64, rms_bias: f64) -> Result<f64, CalcError> {
    let s = logistic(rms_bias).map_err(|_| CalcError::Degenerate)?;
    let (win, loss) = (s - draw_ratio / 2.0, 1.0 - s - draw_ratio / 2.0);
    if win <= 0.0 || loss <= 0.0 {
        return Err(CalcError::Incompatible);
    }
    let v = s * (1.0 - s) - draw_ratio / 4.0;
    if v > 0.0 && v.is_finite() {
        Ok(v)
    } else {
        Err(CalcError::Incompatible)
    }
}

/// P(pass) and the expected length in pairs of a Brownian SPRT.
fn brownian(a: f64, b: f64, drift: f64, variance: f64) -> (f64, f64) {
    let gamma = drift / variance;
    if (gamma * (b - a)).abs() < 1e-9 {
        let pass = -a / (b - a);
        return (pass, -a * b / variance);
    }
    let pass = if gamma > 0.0 {
        ((2.0 * gamma * a).exp() - 1.0) / ((2.0 * gamma * (a - b)).exp() - 1.0)
    } else {
        1.0 - ((2.0 * gamma * b).exp() - 1.0) / ((2.0 * gamma * (b - a)).exp() - 1.0)
    };
    let pass = pass.clamp(0.0, 1.0);
    let length = (pass * b + (1.0 - pass) * a) / drift;
    (pass, length.max(0.0))
}

/// The pass probability and expected games at one true Elo.
fn point(input: &CalcInput, v_game: f64, a: f64, b: f64, x: f64) -> Result<CalcPoint, CalcError> {
    let (drift, variance) = if input.normalized {
        let k = std::f64::consts::SQRT_2 / NELO_DIVIDED_BY_NT;
        let (t0, t1, t) = (input.elo0 * k, input.elo1 * k, x * k);
        ((t1 - t0) * (2.0 * t - t0 - t1) / 2.0, (t1 - t0).powi(2))
    } else {
        let l = |e: f64| logistic(e).map_err(|_| CalcError::Degenerate);
        let (s0, s1, mu) = (l(input.elo0)?, l(input.elo1)?, l(x)?);
        let v_pair = v_game / 2.0;
        (
            (s1 - s0) * (2.0 * mu - s0 - s1) / (2.0 * v_pair),
            (s1 - s0).powi(2) / v_pair,
        )
    };
    if !(variance > 0.0 && drift.is_finite()) {
        return Err(CalcError::Degenerate);
    }
    let (pass, pairs) = brownian(a, b, drift, variance);
    Ok(CalcPoint {
        elo: x,
        pass,
        games: 2.0 * pairs,
    })
}

/// The curves over true Elo from elo0 − (elo1 − elo0) to elo1 + (elo1 − elo0).
pub fn calculate(input: &CalcInput) -> Result<CalcOutput, CalcError> {
    validate(input)?;
    let v_game = game_variance(input.draw_ratio, input.rms_bias)?;
    let a = (BETA / (1.0 - ALPHA)).ln();
    let b = ((1.0 - BETA) / ALPHA).ln();
    let width = input.elo1 - input.elo0;
    let (lo, hi) = (input.elo0 - width, input.elo1 + width);
    let mut points = Vec::with_capacity(POINTS);
    for i in 0..POINTS {
        let x = lo + (hi - lo) * i as f64 / (POINTS - 1) as f64;
        points.push(point(input, v_game, a, b, x)?);
    }
    Ok(CalcOutput {
        a,
        b,
        game_variance: v_game,
        points,
    })
}

/// The pass probability and expected games at one true Elo (for the summary lines).
pub fn at(input: &CalcInput, elo: f64) -> Result<CalcPoint, CalcError> {
    validate(input)?;
    let v_game = game_variance(input.draw_ratio, input.rms_bias)?;
    let a = (BETA / (1.0 - ALPHA)).ln();
    let b = ((1.0 - BETA) / ALPHA).ln();
    point(input, v_game, a, b, elo)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bounds_pass_with_alpha_and_one_minus_beta() {
        for normalized in [true, false] {
            let input = CalcInput {
                normalized,
                ..CalcInput::default()
            };
            let p0 = at(&input, input.elo0).unwrap();
            let p1 = at(&input, input.elo1).unwrap();
            assert!((p0.pass - ALPHA).abs() < 1e-9, "{p0:?}");
            assert!((p1.pass - (1.0 - BETA)).abs() < 1e-9, "{p1:?}");
            let mid = at(&input, 1.0).unwrap();
            assert!((mid.pass - 0.5).abs() < 1e-3, "{mid:?}");
            assert!(mid.games > p0.games && mid.games > p1.games);
            let out = calculate(&input).unwrap();
            assert_eq!(out.points.len(), POINTS);
            assert!(out.points.windows(2).all(|w| w[0].pass <= w[1].pass));
        }
    }

    #[test]
    fn normalized_length_is_known() {
        // At the midpoint the drift is 0: −a·b/(t1 − t0)² pairs.
        let input = CalcInput::default();
        let k = std::f64::consts::SQRT_2 / NELO_DIVIDED_BY_NT;
        let a = (0.05f64 / 0.95).ln();
        let b = (0.95f64 / 0.05).ln();
        let want = 2.0 * (-a * b) / (2.0 * k).powi(2);
        let got = at(&input, 1.0).unwrap().games;
        assert!((got - want).abs() / want < 1e-6, "{got} vs {want}");
    }

    #[test]
    fn bad_inputs_are_refused() {
        let d = CalcInput::default();
        let bad = |i: CalcInput| validate(&i).unwrap_err();
        assert_eq!(bad(CalcInput { elo1: 0.4, ..d }), CalcError::BoundsTooClose);
        assert_eq!(
            bad(CalcInput { elo1: 11.0, ..d }),
            CalcError::BoundsTooLarge
        );
        assert_eq!(
            bad(CalcInput {
                draw_ratio: 1.0,
                ..d
            }),
            CalcError::DrawRatio
        );
        assert_eq!(
            bad(CalcInput {
                draw_ratio: 0.0,
                ..d
            }),
            CalcError::DrawRatio
        );
        assert_eq!(
            bad(CalcInput {
                rms_bias: -1.0,
                ..d
            }),
            CalcError::NegativeBias
        );
        assert_eq!(
            bad(CalcInput {
                draw_ratio: 0.99,
                rms_bias: 400.0,
                ..d
            }),
            CalcError::Incompatible
        );
        assert_eq!(
            bad(CalcInput {
                elo0: f64::NAN,
                ..d
            }),
            CalcError::Degenerate
        );
    }
}

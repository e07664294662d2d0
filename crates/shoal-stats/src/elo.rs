//! Elo conversions and fixed-games estimates of `stat_util` (plus
//! `LLRcalc.L_`): the logistic map and its clamped inverse, BayesElo ↔
//! probabilities, `draw_elo_calc`, the legacy BayesElo LLR, the unregularised
//! `stats` of a results vector and `get_elo` (Elo, 95% half-width, LOS).
//!
//! These feed the run pages and the green/red LOS flag of fixed-games runs.
//! No I/O, no async, no logging, no panics: the reference's asserts and
//! Python arithmetic errors become [`StatsError`]s.

use super::normal::{phi, phi_inv};
use super::pdf::regularize;
use super::pyfloat::{self, div};
use super::{StatsError, StatsResult};

/// `elo` clamps scores to [ELO_CLAMP, 1 − ELO_CLAMP] before inverting, so
/// |elo| ≤ 1199.826…
const ELO_CLAMP: f64 = 1e-3;

/// Logistic score of an Elo difference, 1/(1 + 10^(−x/400))
/// (`LLRcalc.L_`, `stat_util.L`). Fails like Python's `**` when 10^(−x/400)
/// overflows (x below about −123 000).
pub fn logistic(x: f64) -> StatsResult<f64> {
    Ok(1.0 / (1.0 + pyfloat::pow(10.0, -x / 400.0)?))
}

/// Elo of a score, −400·log10(1/x − 1), after clamping x to [0.001, 0.999].
pub fn elo(x: f64) -> f64 {
    let x = pyfloat::py_max(x, ELO_CLAMP);
    let x = pyfloat::py_min(x, 1.0 - ELO_CLAMP);
    // After the clamp 1/x − 1 is in [0.001, 999], so log10 cannot fail; a NaN
    // input stays NaN.
    -400.0 * (1.0 / x - 1.0).log10()
}

/// `[P_loss, P_draw, P_win]` of the BayesElo model.
pub fn bayeselo_to_proba(elo: f64, drawelo: f64) -> StatsResult<[f64; 3]> {
    let pwin = 1.0 / (1.0 + pyfloat::pow(10.0, (-elo + drawelo) / 400.0)?);
    let ploss = 1.0 / (1.0 + pyfloat::pow(10.0, (elo + drawelo) / 400.0)?);
    let pdraw = 1.0 - pwin - ploss;
    Ok([ploss, pdraw, pwin])
}

/// `(belo, drawelo)` of `[P_loss, P_draw, P_win]`; requires
/// 0 < P_win < 1 and 0 < P_loss < 1 (AssertionError otherwise).
pub fn proba_to_bayeselo(p: [f64; 3]) -> StatsResult<(f64, f64)> {
    let [ploss, _, pwin] = p;
    if !(0.0 < pwin && pwin < 1.0 && 0.0 < ploss && ploss < 1.0) {
        return Err(StatsError::Assertion(
            "proba_to_bayeselo needs 0 < P_win, P_loss < 1",
        ));
    }
    let elo = 200.0 * pyfloat::log10(pwin / ploss * (1.0 - ploss) / (1.0 - pwin))?;
    let draw_elo = 200.0 * pyfloat::log10((1.0 - ploss) / ploss * (1.0 - pwin) / pwin)?;
    Ok((elo, draw_elo))
}

/// drawelo of `[L, D, W]` counts (not regularised here: callers that want it
/// regularise first).
pub fn draw_elo_calc(r: [f64; 3]) -> StatsResult<f64> {
    let n = pyfloat::sum(r);
    let p = [
        div(r[0], n, "draw_elo_calc of no games")?,
        div(r[1], n, "draw_elo_calc of no games")?,
        div(r[2], n, "draw_elo_calc of no games")?,
    ];
    Ok(proba_to_bayeselo(p)?.1)
}

/// Logistic Elo of a BayesElo difference at a given drawelo:
/// elo(P_win + P_draw/2).
pub fn bayeselo_to_elo(belo: f64, drawelo: f64) -> StatsResult<f64> {
    let p = bayeselo_to_proba(belo, drawelo)?;
    Ok(elo(p[2] + 0.5 * p[1]))
}

/// `(belo, drawelo)` of a logistic Elo at a draw ratio; `(NaN, NaN)` when the
/// implied win or loss probability is not positive.
pub fn elo_to_bayeselo(elo: f64, draw_ratio: f64) -> StatsResult<(f64, f64)> {
    // NaN fails the reference's `assert draw_ratio >= 0` too.
    let valid = draw_ratio >= 0.0;
    if !valid {
        return Err(StatsError::Assertion(
            "elo_to_bayeselo needs draw_ratio >= 0",
        ));
    }
    let s = logistic(elo)?;
    let pwin = s - draw_ratio / 2.0;
    let pdraw = draw_ratio;
    let ploss = 1.0 - pdraw - pwin;
    if ploss <= 0.0 || pwin <= 0.0 {
        return Ok((f64::NAN, f64::NAN));
    }
    proba_to_bayeselo([ploss, pdraw, pwin])
}

/// Legacy BayesElo LLR Σ nᵢ·ln(P¹ᵢ/P⁰ᵢ) of `[L, D, W]`, drawelo estimated
/// from the (unregularised) results themselves.
pub fn llr_legacy(belo0: f64, belo1: f64, results: [f64; 3]) -> StatsResult<f64> {
    let drawelo = draw_elo_calc(results)?;
    let p0 = bayeselo_to_proba(belo0, drawelo)?;
    let p1 = bayeselo_to_proba(belo1, drawelo)?;
    let mut total = 0.0;
    for ((n, q1), q0) in results.iter().zip(p1).zip(p0) {
        // Python evaluates the log even for a zero count, so a zero (or
        // negative) draw probability fails here even when D = 0.
        total += n * pyfloat::ln(div(q1, q0, "LLRlegacy ratio")?)?;
    }
    Ok(total)
}

/// `stat_util.stats`: `(games, mean score per game, variance per game)` of a
/// trinomial or pentanomial results vector, without regularisation (so
/// all-zero input is a division by zero).
pub fn game_stats(results: &[f64]) -> StatsResult<(f64, f64, f64)> {
    let l = results.len() as f64;
    let n = pyfloat::sum(results.iter().copied());
    let games = n * (l - 1.0) / 2.0;
    let mu = div(
        pyfloat::sum(
            results
                .iter()
                .enumerate()
                .map(|(i, &r)| r * (i as f64 / 2.0)),
        ),
        games,
        "stats of no games",
    )?;
    let mu_ = (l - 1.0) / 2.0 * mu;
    let mut acc = 0.0;
    for (i, &r) in results.iter().enumerate() {
        acc += r * pyfloat::sq(i as f64 / 2.0 - mu_)?;
    }
    let var = div(acc, games, "stats of no games")?;
    Ok((games, mu, var))
}

/// Fixed-games Elo estimate of `get_elo`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EloEstimate {
    /// Logistic Elo of the mean score (clamped to ±1199.83).
    pub elo: f64,
    /// Half-width of the 95% confidence interval, in Elo.
    pub elo95: f64,
    /// Likelihood of superiority, Φ((μ − ½)/se).
    pub los: f64,
}

/// Elo, 95% half-width and LOS of a (regularised) trinomial or pentanomial
/// results vector, from a normal approximation of the mean score.
pub fn get_elo(results: &[f64]) -> StatsResult<EloEstimate> {
    let r = regularize(results);
    let (games, mu, var) = game_stats(&r)?;
    let stdev = pyfloat::sqrt(var)?;
    let sqrt_games = pyfloat::sqrt(games)?;
    let mu_min = mu + div(phi_inv(0.025) * stdev, sqrt_games, "get_elo of no games")?;
    let mu_max = mu + div(phi_inv(0.975) * stdev, sqrt_games, "get_elo of no games")?;
    let el = elo(mu);
    let elo95 = (elo(mu_max) - elo(mu_min)) / 2.0;
    let se = div(stdev, sqrt_games, "get_elo of no games")?;
    let los = phi(div(mu - 0.5, se, "get_elo with zero variance")?);
    Ok(EloEstimate {
        elo: el,
        elo95,
        los,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elo_clamps_like_python() {
        assert_eq!(elo(0.0), -1199.826195290393);
        assert_eq!(elo(1.0), 1199.8261952903777);
        assert_eq!(elo(0.5), 0.0);
        assert!((elo(0.75) - 190.848501887865).abs() < 1e-12);
        assert!(elo(f64::NAN).is_nan());
    }

    #[test]
    fn logistic_inverts_elo() {
        for x in [-300.0, -5.0, 0.0, 7.5, 400.0] {
            assert!((elo(logistic(x).unwrap()) - x).abs() < 1e-9);
        }
        assert!(logistic(-1e6).is_err());
        assert_eq!(logistic(1e6).unwrap(), 1.0);
    }

    #[test]
    fn bayeselo_round_trip() {
        let p = bayeselo_to_proba(30.0, 200.0).unwrap();
        let (b, d) = proba_to_bayeselo(p).unwrap();
        assert!((b - 30.0).abs() < 1e-9);
        assert!((d - 200.0).abs() < 1e-9);
        let (b, _) = elo_to_bayeselo(500.0, 0.5).unwrap();
        assert!(b.is_nan());
        assert!(elo_to_bayeselo(0.0, -0.1).is_err());
    }

    #[test]
    fn get_elo_edges() {
        let e = get_elo(&[0.0, 0.0, 0.0]).unwrap();
        assert_eq!(e.elo, 0.0);
        assert!((e.elo95 - 1199.826195290393).abs() < 1e-9);
        assert_eq!(e.los, 0.5);
        let e = get_elo(&[0.0, 0.0, 1000.0]).unwrap();
        assert_eq!(e.elo, 1199.8261952903777);
        assert_eq!(e.elo95, 0.0);
        assert_eq!(e.los, 1.0);
        assert!(game_stats(&[0.0, 0.0, 0.0]).is_err());
    }

    #[test]
    fn legacy_llr_failures() {
        assert!(llr_legacy(0.0, 5.0, [3.0, 9.0, 0.0]).is_err());
        assert!(llr_legacy(0.0, 5.0, [7.0, 0.0, 3.0]).is_err());
        assert!(llr_legacy(0.0, 5.0, [0.0, 0.0, 0.0]).is_err());
    }
}

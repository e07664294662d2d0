//! The numbers of a run's "raw statistics" page (`/tests/stats/{id}`), as Fishtest's page
//! computes them: the trinomial and pentanomial views of the results (moments, confidence
//! ranges, normalized Elo), the SPRT bounds in every Elo model, the Elo, LOS and LLRs of
//! each view, and the comparison of the two views.
//!
//! Each field is named after the number Fishtest's page shows (`var3_l`, `belo1`,
//! `llr5_alt2`, …), so a field here, the page's `data-field` attribute and the reference
//! `tests/data/stats-page-reference.json` use one vocabulary.
//!
//! Fishtest's conventions, which the page keeps:
//! - every view is of the *regularized* counts (a zero count is 0.001), so a run without
//!   games still has a distribution (uniform), moments and neutral values;
//! - the SPRT bounds are converted with σ, the per-game standard deviation of the data the
//!   SPRT decides with (pentanomial when present, else trinomial): `score`, `lelo`, `nelo`.
//!   The trinomial-only numbers use the trinomial σ₃ instead (`score03`, `lelo03`,
//!   `nelo03`): the BayesElo bounds (`belo`), the trinomial LLR and the generalized
//!   trinomial LLRs;
//! - the LLR jumps of both views are under the expectation statistic, between `score0` and
//!   `score1`;
//! - the Elo, CI and LOS of an SPRT, in both views, come from the `sprt` class in the
//!   logistic model with the bounds `lelo0`, `lelo1` (σ of the deciding data), p = 0.05;
//!   a fixed-games run's come from `get_elo`;
//! - the expected overshoot is −sq0/(2·m0) and sq1/(2·m1) of the run's overshoot record,
//!   0 when the record is gone (after a purge, `lost_samples`) or a sum is 0.
//!
//! Must not: do I/O, log, panic. A number whose computation fails (a degenerate
//! distribution, where Fishtest's page raises) is `None`.
//!
//! Files: `raw/tests.rs`: the unit tests.

use super::elo::{
    bayeselo_to_elo, draw_elo_calc, elo, elo_to_bayeselo, get_elo, llr_legacy, logistic,
};
use super::llr::{
    Statistic, llr, llr_alt, llr_alt2, llr_jumps, llr_logistic, llr_normalized, llr_normalized_alt,
};
use super::normal::phi_inv;
use super::pdf::{Pdf, regularize, results_to_pdf, stats_ex};
use super::sprt_analytics::Sprt;
use super::sprt_state::{EloModel, Overshoot};
use super::{NELO_DIVIDED_BY_NT, StatsResult, t_conf};

/// The SPRT of a run, as the page needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SprtParams {
    pub alpha: f64,
    pub beta: f64,
    pub elo0: f64,
    pub elo1: f64,
    pub elo_model: EloModel,
    /// Samples per update (pairs for pentanomial runs).
    pub batch_size: u64,
    /// The overshoot record; `None` once removed (`lost_samples`, `illegal_update`).
    pub overshoot: Option<Overshoot>,
}

/// The counts the page reads.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Counts {
    /// `[losses, draws, wins]`.
    pub trinomial: [u64; 3],
    /// `[LL, LD, DD+WL, WD, WW]`, when the run records pairs.
    pub pentanomial: Option<[u64; 5]>,
}

/// The trinomial view (`tri.*`). Every number is of the regularized counts.
#[derive(Debug, Clone, PartialEq)]
pub struct Trinomial {
    pub results3: [u64; 3],
    /// Draws over the regularized total.
    pub draw_ratio: f64,
    /// The regularized total (Fishtest shows its integer part as the games).
    pub games3: f64,
    /// The probabilities of loss, draw and win.
    pub pdf3: Vec<f64>,
    pub avg3: f64,
    pub avg3_l: f64,
    pub avg3_u: f64,
    pub var3: f64,
    pub var3_l: f64,
    pub var3_u: f64,
    pub stdev3: f64,
    pub stdev3_l: f64,
    pub stdev3_u: f64,
    pub skewness3: f64,
    pub exkurt3: f64,
    /// Normalized Elo and its 95% range; `None` for a zero variance.
    pub nelo3: Option<f64>,
    pub nelo3_l: Option<f64>,
    pub nelo3_u: Option<f64>,
}

/// The pentanomial view (`pent.*`) and the comparison with the trinomial one.
#[derive(Debug, Clone, PartialEq)]
pub struct Pentanomial {
    pub results5: [u64; 5],
    /// The middle cell over the regularized total.
    pub draw_ratio: f64,
    /// Twice the regularized total of pairs.
    pub games5: f64,
    pub pdf5: Vec<f64>,
    /// Mean score per game (a pair's mean).
    pub avg5: f64,
    pub avg5_l: f64,
    pub avg5_u: f64,
    /// Variance of a pair's mean score.
    pub var5: f64,
    pub skewness5: f64,
    pub exkurt5: f64,
    /// Per game: twice `var5`, its range; the standard deviation and its range.
    pub var5_per_game: f64,
    pub var5_per_game_l: f64,
    pub var5_per_game_u: f64,
    pub stdev5_per_game: f64,
    pub stdev5_per_game_l: f64,
    pub stdev5_per_game_u: f64,
    pub nelo5: Option<f64>,
    pub nelo5_l: Option<f64>,
    pub nelo5_u: Option<f64>,
    /// The (DD, WL) split of the middle cell, as probabilities of a pair.
    pub results5_dd_prob: f64,
    pub results5_wl_prob: f64,
    /// Comparison: `var5_per_game / var3`, `var3 − var5_per_game`, the RMS bias
    /// √max(var_diff, 0) and `elo(½ + rms_bias)`.
    pub ratio: f64,
    pub var_diff: f64,
    pub rms_bias: f64,
    pub rms_bias_elo: f64,
}

/// The SPRT's parameters and bounds in every model (`sprt.*`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub alpha: f64,
    pub beta: f64,
    pub elo0: f64,
    pub elo1: f64,
    pub elo_model: EloModel,
    /// Twice the batch size for pentanomial runs, 1 otherwise.
    pub batch_size_games: u64,
    /// The bounds with σ of the deciding data.
    pub lelo0: f64,
    pub lelo1: f64,
    pub nelo0: f64,
    pub nelo1: f64,
    pub score0: f64,
    pub score1: f64,
    /// The bounds with the trinomial σ₃ (the trinomial LLRs use them).
    pub lelo03: f64,
    pub lelo13: f64,
    pub nelo03: f64,
    pub nelo13: f64,
    pub score03: f64,
    pub score13: f64,
    /// BayesElo bounds: the run's for a BayesElo SPRT, else from `lelo03`/`lelo13` at the
    /// draw ratio (`None` where `elo_to_bayeselo` has no answer).
    pub belo0: Option<f64>,
    pub belo1: Option<f64>,
}

/// Elo, its 95% interval and LOS of one view (`elo3`, `elo3_l`, `elo3_u`, `los3`, …).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EloLos {
    pub elo: f64,
    pub lower: f64,
    pub upper: f64,
    pub los: f64,
}

/// The LLRs of one view of an SPRT (`llr3*` or `llr5*`).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Llrs {
    /// The exact LLR in the SPRT's model, and the bounds a, b.
    pub llr: Option<f64>,
    pub llr_l: Option<f64>,
    pub llr_u: Option<f64>,
    pub exact: Option<f64>,
    pub alt: Option<f64>,
    pub alt2: Option<f64>,
    pub normalized: Option<f64>,
    pub normalized_alt: Option<f64>,
    /// The legacy BayesElo LLR (trinomial only).
    pub be: Option<f64>,
    /// The jump of each cell.
    pub jumps: Option<Vec<f64>>,
}

/// Everything the page shows.
#[derive(Debug, Clone, PartialEq)]
pub struct RawStats {
    pub trinomial: Trinomial,
    pub pentanomial: Option<Pentanomial>,
    /// DrawElo of the regularized trinomial counts.
    pub drawelo: Option<f64>,
    pub bounds: Option<Bounds>,
    pub elo3: Option<EloLos>,
    pub elo5: Option<EloLos>,
    /// SPRT only.
    pub llr3: Option<Llrs>,
    pub llr5: Option<Llrs>,
    /// The expected overshoot [H0, H1] (SPRT runs with pairs only, as Fishtest shows it).
    pub overshoot: Option<[f64; 2]>,
}

/// Φ⁻¹(0.975), computed as Fishtest does.
fn z975() -> f64 {
    phi_inv(0.975)
}

/// Python's `x ** 0.5`.
fn sqrt(x: f64) -> f64 {
    x.sqrt()
}

/// The trinomial view of `[losses, draws, wins]`.
pub fn trinomial(results3: [u64; 3]) -> StatsResult<Trinomial> {
    let data = results3.map(|c| c as f64);
    let reg = regularize(&data);
    let draw_ratio = reg[1] / reg.iter().sum::<f64>();
    let (n3, pdf3) = results_to_pdf(&data)?;
    let (avg3, var3, skewness3, exkurt3) = stats_ex(&pdf3)?;
    let z = z975();
    let stdev3 = sqrt(var3);
    let var3_l = var3 * (1.0 - z * sqrt((exkurt3 + 2.0) / n3));
    let var3_u = var3 * (1.0 + z * sqrt((exkurt3 + 2.0) / n3));
    let nelo = t_conf(avg3, var3, skewness3, exkurt3)
        .ok()
        .map(|(t, var_t)| {
            let half = z * sqrt(var_t / n3);
            [t, t - half, t + half].map(|t| NELO_DIVIDED_BY_NT * t)
        });
    Ok(Trinomial {
        results3,
        draw_ratio,
        games3: n3,
        pdf3: pdf3.iter().map(|(_, p)| *p).collect(),
        avg3,
        avg3_l: avg3 - z * sqrt(var3 / n3),
        avg3_u: avg3 + z * sqrt(var3 / n3),
        var3,
        var3_l,
        var3_u,
        stdev3,
        stdev3_l: if var3_l >= 0.0 { sqrt(var3_l) } else { 0.0 },
        stdev3_u: sqrt(var3_u),
        skewness3,
        exkurt3,
        nelo3: nelo.map(|n| n[0]),
        nelo3_l: nelo.map(|n| n[1]),
        nelo3_u: nelo.map(|n| n[2]),
    })
}

/// The pentanomial view of the pair counts, compared with the trinomial view `tri`.
pub fn pentanomial(results5: [u64; 5], tri: &Trinomial) -> StatsResult<Pentanomial> {
    let data = results5.map(|c| c as f64);
    let reg = regularize(&data);
    let draw_ratio = reg[2] / reg.iter().sum::<f64>();
    let (n5, pdf5) = results_to_pdf(&data)?;
    let (avg5, var5, skewness5, exkurt5) = stats_ex(&pdf5)?;
    let z = z975();
    let var5_per_game = 2.0 * var5;
    let var5_per_game_l = var5_per_game * (1.0 - z * sqrt((exkurt5 + 2.0) / n5));
    let var5_per_game_u = var5_per_game * (1.0 + z * sqrt((exkurt5 + 2.0) / n5));
    let sqrt2 = sqrt(2.0);
    let nelo = t_conf(avg5, var5, skewness5, exkurt5)
        .ok()
        .map(|(t, var_t)| {
            let half = z * sqrt(var_t / n5);
            [t, t - half, t + half].map(|t| NELO_DIVIDED_BY_NT * (t / sqrt2))
        });
    let results5_dd_prob = tri.draw_ratio - (reg[1] + reg[3]) / (2.0 * n5);
    let var_diff = tri.var3 - var5_per_game;
    let rms_bias = if var_diff >= 0.0 { sqrt(var_diff) } else { 0.0 };
    Ok(Pentanomial {
        results5,
        draw_ratio,
        games5: 2.0 * n5,
        pdf5: pdf5.iter().map(|(_, p)| *p).collect(),
        avg5,
        avg5_l: avg5 - z * sqrt(var5 / n5),
        avg5_u: avg5 + z * sqrt(var5 / n5),
        var5,
        skewness5,
        exkurt5,
        var5_per_game,
        var5_per_game_l,
        var5_per_game_u,
        stdev5_per_game: sqrt(var5_per_game),
        stdev5_per_game_l: if var5_per_game_l >= 0.0 {
            sqrt(var5_per_game_l)
        } else {
            0.0
        },
        stdev5_per_game_u: sqrt(var5_per_game_u),
        nelo5: nelo.map(|n| n[0]),
        nelo5_l: nelo.map(|n| n[1]),
        nelo5_u: nelo.map(|n| n[2]),
        results5_dd_prob,
        results5_wl_prob: reg[2] / n5 - results5_dd_prob,
        ratio: var5_per_game / tri.var3,
        var_diff,
        rms_bias,
        rms_bias_elo: elo(0.5 + rms_bias),
    })
}

/// The SPRT bounds in every model. `sigma` is the per-game σ of the data the SPRT decides
/// with, `stdev3` the trinomial one, `drawelo` and `draw_ratio` the trinomial draw figures.
pub fn bounds(
    s: &SprtParams,
    pairs: bool,
    sigma: f64,
    stdev3: f64,
    drawelo: f64,
    draw_ratio: f64,
) -> StatsResult<Bounds> {
    let (mut belo0, mut belo1) = (None, None);
    let ([e0, e1], logistic_bounds) = match s.elo_model {
        EloModel::BayesElo => {
            belo0 = Some(s.elo0);
            belo1 = Some(s.elo1);
            (
                [
                    bayeselo_to_elo(s.elo0, drawelo)?,
                    bayeselo_to_elo(s.elo1, drawelo)?,
                ],
                true,
            )
        }
        EloModel::Logistic => ([s.elo0, s.elo1], true),
        EloModel::Normalized => ([s.elo0, s.elo1], false),
    };
    let k = NELO_DIVIDED_BY_NT;
    let (lelo, nelo, score, lelo3, nelo3, score3);
    if logistic_bounds {
        lelo = [e0, e1];
        score = [logistic(e0)?, logistic(e1)?];
        nelo = score.map(|sc| k * (sc - 0.5) / sigma);
        nelo3 = score.map(|sc| k * (sc - 0.5) / stdev3);
        lelo3 = lelo;
        score3 = score;
    } else {
        nelo = [e0, e1];
        nelo3 = nelo;
        score = nelo.map(|n| n / k * sigma + 0.5);
        score3 = nelo3.map(|n| n / k * stdev3 + 0.5);
        lelo = score.map(elo);
        lelo3 = score3.map(elo);
    }
    if belo0.is_none() {
        belo0 = elo_to_bayeselo(lelo3[0], draw_ratio)
            .ok()
            .map(|b| b.0)
            .filter(|b| !b.is_nan());
        belo1 = elo_to_bayeselo(lelo3[1], draw_ratio)
            .ok()
            .map(|b| b.0)
            .filter(|b| !b.is_nan());
    }
    Ok(Bounds {
        alpha: s.alpha,
        beta: s.beta,
        elo0: s.elo0,
        elo1: s.elo1,
        elo_model: s.elo_model,
        batch_size_games: if pairs {
            s.batch_size.saturating_mul(2)
        } else {
            1
        },
        lelo0: lelo[0],
        lelo1: lelo[1],
        nelo0: nelo[0],
        nelo1: nelo[1],
        score0: score[0],
        score1: score[1],
        lelo03: lelo3[0],
        lelo13: lelo3[1],
        nelo03: nelo3[0],
        nelo13: nelo3[1],
        score03: score3[0],
        score13: score3[1],
        belo0,
        belo1,
    })
}

/// The expected overshoot corrections of an overshoot record (0 without one).
pub fn expected_overshoot(o: Option<&Overshoot>) -> [f64; 2] {
    let Some(o) = o else {
        return [0.0, 0.0];
    };
    let o0 = if o.m0 != 0.0 {
        -o.sq0 / o.m0 / 2.0
    } else {
        0.0
    };
    let o1 = if o.m1 != 0.0 { o.sq1 / o.m1 / 2.0 } else { 0.0 };
    [o0, o1]
}

/// Elo, CI and LOS of an SPRT on `data` (regularized by the `sprt` class): logistic
/// bounds `lelo0`, `lelo1`, p = 0.05.
fn sprt_elo_los(s: &SprtParams, b: &Bounds, data: &[f64]) -> Option<(EloLos, f64, f64)> {
    let sp = Sprt::with_results(
        s.alpha,
        s.beta,
        b.lelo0,
        b.lelo1,
        EloModel::Logistic,
        &regularize(data),
    )
    .ok()?;
    let a = sp.analytics(0.05).ok()?;
    Some((
        EloLos {
            elo: a.elo,
            lower: a.ci[0],
            upper: a.ci[1],
            los: a.los,
        },
        a.a,
        a.b,
    ))
}

/// The LLRs of one view. `trinomial` selects the σ₃ bounds (and the BayesElo LLR).
fn llrs(
    s: &SprtParams,
    b: &Bounds,
    data: &[f64],
    n: f64,
    pdf: &Pdf,
    trinomial: bool,
    ab: Option<(f64, f64)>,
) -> Llrs {
    let reg = regularize(data);
    let (lelo, nelo, score) = if trinomial {
        (
            [b.lelo03, b.lelo13],
            [b.nelo03, b.nelo13],
            [b.score03, b.score13],
        )
    } else {
        ([b.lelo0, b.lelo1], [b.nelo0, b.nelo1], [b.score0, b.score1])
    };
    let logistic_model = s.elo_model != EloModel::Normalized;
    let exact_llr = if logistic_model {
        llr_logistic(lelo[0], lelo[1], &reg)
    } else {
        llr_normalized(nelo[0], nelo[1], &reg)
    };
    let per_sample = |x: StatsResult<f64>| x.ok().map(|x| n * x);
    Llrs {
        llr: exact_llr.ok(),
        llr_l: ab.map(|(a, _)| a),
        llr_u: ab.map(|(_, b)| b),
        exact: per_sample(llr(pdf, score[0], score[1], Statistic::Expectation)),
        alt: per_sample(llr_alt(pdf, score[0], score[1])),
        alt2: per_sample(llr_alt2(pdf, score[0], score[1])),
        normalized: llr_normalized(nelo[0], nelo[1], &reg).ok(),
        normalized_alt: llr_normalized_alt(nelo[0], nelo[1], &reg).ok(),
        be: match (trinomial, b.belo0, b.belo1) {
            (true, Some(b0), Some(b1)) => llr_legacy(b0, b1, [reg[0], reg[1], reg[2]]).ok(),
            _ => None,
        },
        jumps: llr_jumps(pdf, b.score0, b.score1, Statistic::Expectation)
            .ok()
            .map(|j| j.iter().map(|(x, _)| *x).collect()),
    }
}

/// `get_elo` of the regularized counts as an [`EloLos`].
fn fixed_elo(data: &[f64]) -> Option<EloLos> {
    let e = get_elo(&regularize(data)).ok()?;
    Some(EloLos {
        elo: e.elo,
        lower: e.elo - e.elo95,
        upper: e.elo + e.elo95,
        los: e.los,
    })
}

/// The page's numbers for a run's counts and, for an SPRT, its parameters. `None` only when
/// the trinomial view itself cannot be computed (it always can for counts of games).
pub fn raw_stats(c: &Counts, sprt: Option<&SprtParams>) -> Option<RawStats> {
    let tri = trinomial(c.trinomial).ok()?;
    let pent = c.pentanomial.and_then(|p| pentanomial(p, &tri).ok());
    let data3 = c.trinomial.map(|x| x as f64);
    let reg3 = regularize(&data3);
    let drawelo = draw_elo_calc([reg3[0], reg3[1], reg3[2]]).ok();
    let data5 = c.pentanomial.map(|p| p.map(|x| x as f64));
    let mut raw = RawStats {
        trinomial: tri,
        pentanomial: pent,
        drawelo,
        bounds: None,
        elo3: None,
        elo5: None,
        llr3: None,
        llr5: None,
        overshoot: None,
    };
    let Some(s) = sprt else {
        raw.elo3 = fixed_elo(&data3);
        raw.elo5 = data5.as_ref().and_then(|d| fixed_elo(d));
        return Some(raw);
    };
    let tri = &raw.trinomial;
    let sigma = raw
        .pentanomial
        .as_ref()
        .map_or(tri.stdev3, |p| p.stdev5_per_game);
    let b = drawelo.and_then(|de| {
        bounds(
            s,
            c.pentanomial.is_some(),
            sigma,
            tri.stdev3,
            de,
            tri.draw_ratio,
        )
        .ok()
    });
    let Some(b) = b else {
        return Some(raw);
    };
    let (n3, pdf3) = match results_to_pdf(&data3) {
        Ok(x) => x,
        Err(_) => return Some(raw),
    };
    let e3 = sprt_elo_los(s, &b, &data3);
    raw.elo3 = e3.map(|e| e.0);
    raw.llr3 = Some(llrs(s, &b, &data3, n3, &pdf3, true, e3.map(|e| (e.1, e.2))));
    if let Some(d5) = &data5 {
        if let Ok((n5, pdf5)) = results_to_pdf(d5) {
            let e5 = sprt_elo_los(s, &b, d5);
            raw.elo5 = e5.map(|e| e.0);
            raw.llr5 = Some(llrs(s, &b, d5, n5, &pdf5, false, e5.map(|e| (e.1, e.2))));
        }
        raw.overshoot = Some(expected_overshoot(s.overshoot.as_ref()));
    }
    raw.bounds = Some(b);
    Some(raw)
}

#[cfg(test)]
mod tests;

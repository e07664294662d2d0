//! The numbers of a run's "raw statistics" page (`/tests/stats/{id}`): draw ratios, the SPRT
//! bounds in every Elo model, and for the pentanomial and the trinomial view of the results
//! the Elo estimate, LLRs, moments, normalized Elo, LLR jumps and expected overshoot, plus a
//! comparison of the two views (variance ratio and the RMS opening bias it implies).
//!
//! Everything is built from the functions of this module's siblings, so a number shown here
//! is the number `/api/get_elo` and the run page show for the same data (the SPRT's Elo, CI,
//! LOS and LLR come from [`sprt_elo`]). Formulas beyond Fishtest's functions:
//! - per-game variance: the trinomial variance; for pairs, twice the variance of a pair's
//!   mean score (a pair is two games);
//! - the (DD, WL) split of the pentanomial middle cell: DD = (D − LD − WD)/2 pairs;
//! - the comparison: ratio and difference of the per-game variances; the RMS bias is
//!   √max(var₃ − var₅, 0) in score units (the variance the colour of the opening adds to a
//!   single game and a pair cancels), and `elo(½ + bias)` in Elo;
//! - the expected overshoot [H0, H1]: −sq0/(2·m0) and sq1/(2·m1) of the run's overshoot
//!   record, the corrections `update_SPRT` decides with.
//!
//! Must not: do I/O, log, panic. Computations that fail (no games, a degenerate
//! distribution) leave their value `None`.

use super::elo::{
    bayeselo_to_elo, draw_elo_calc, elo, elo_to_bayeselo, get_elo, llr_legacy, logistic,
};
use super::llr::{
    Statistic, llr, llr_alt, llr_alt2, llr_jumps, llr_normalized, llr_normalized_alt,
};
use super::normal::phi_inv;
use super::pdf::{regularize, results_to_pdf, stats_ex};
use super::sprt_analytics::sprt_elo;
use super::sprt_state::{EloModel, Overshoot, Results};
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
    pub overshoot: Option<Overshoot>,
}

/// One hypothesis's bound in every model.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bound {
    pub logistic: f64,
    pub normalized: f64,
    pub bayeselo: f64,
    pub score: f64,
}

/// The SPRT bounds: H0 and H1, and the LLR bounds a and b.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bounds {
    pub h0: Bound,
    pub h1: Bound,
    pub a: f64,
    pub b: f64,
}

/// The generalized LLRs of an SPRT.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Generalized {
    pub logistic_exact: f64,
    pub logistic_alt: f64,
    pub logistic_alt2: f64,
    pub normalized_exact: f64,
    pub normalized_alt: f64,
}

/// The statistics of one view of the results (pentanomial pairs or trinomial games).
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// Games (pairs count two).
    pub games: u64,
    /// The counts, `[L, D, W]` or `[LL, LD, DD+WL, WD, WW]`.
    pub results: Vec<u64>,
    /// The regularised distribution's probabilities.
    pub distribution: Vec<f64>,
    /// Elo (logistic), its 95% interval and LOS: `SPRT_elo` for an SPRT, `get_elo` otherwise.
    pub elo: Option<(f64, [f64; 2], f64)>,
    /// The exact LLR in the SPRT's model.
    pub llr: Option<f64>,
    pub generalized: Option<Generalized>,
    /// The legacy BayesElo LLR (trinomial only).
    pub bayeselo_llr: Option<f64>,
    /// Mean score per game, variance and standard deviation per game.
    pub score: Option<f64>,
    pub variance: Option<f64>,
    pub stdev: Option<f64>,
    /// Skewness and excess kurtosis of the sample (a pair's or a game's score).
    pub skewness: Option<f64>,
    pub exkurt: Option<f64>,
    /// Normalized Elo and its 95% half-width.
    pub nelo: Option<(f64, f64)>,
    /// The LLR jump of each outcome cell (SPRT only).
    pub llr_jumps: Option<Vec<f64>>,
    /// The expected overshoot [H0, H1] (SPRT only, on the view the SPRT decides with).
    pub overshoot: Option<[f64; 2]>,
}

/// The comparison of the two views.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Comparison {
    pub variance_ratio: f64,
    pub variance_difference: f64,
    pub rms_bias: f64,
    pub rms_bias_elo: f64,
}

/// Everything the page shows.
#[derive(Debug, Clone, PartialEq)]
pub struct RawStats {
    pub draw_ratio: f64,
    pub pentanomial_draw_ratio: Option<f64>,
    /// (DD, WL) pair counts of the pentanomial middle cell.
    pub dd_wl: Option<(f64, f64)>,
    pub drawelo: Option<f64>,
    pub bounds: Option<Bounds>,
    pub pentanomial: Option<View>,
    pub trinomial: View,
    pub comparison: Option<Comparison>,
}

/// The bounds converted to logistic and normalized Elo (what the LLRs need).
struct Converted {
    lelo: [f64; 2],
    nelo: [f64; 2],
    belo: [f64; 2],
}

fn convert(s: &SprtParams, drawelo: f64, draw_ratio: f64, sigma_pg: f64) -> StatsResult<Converted> {
    let to_nelo = |lelo: f64| -> StatsResult<f64> {
        Ok((logistic(lelo)? - 0.5) / sigma_pg * NELO_DIVIDED_BY_NT)
    };
    let from_nelo = |nelo: f64| elo(nelo / NELO_DIVIDED_BY_NT * sigma_pg + 0.5);
    let to_belo = |lelo: f64| -> StatsResult<f64> { Ok(elo_to_bayeselo(lelo, draw_ratio)?.0) };
    let (e0, e1) = (s.elo0, s.elo1);
    Ok(match s.elo_model {
        EloModel::BayesElo => {
            let lelo = [bayeselo_to_elo(e0, drawelo)?, bayeselo_to_elo(e1, drawelo)?];
            Converted {
                nelo: [to_nelo(lelo[0])?, to_nelo(lelo[1])?],
                belo: [e0, e1],
                lelo,
            }
        }
        EloModel::Logistic => Converted {
            lelo: [e0, e1],
            nelo: [to_nelo(e0)?, to_nelo(e1)?],
            belo: [to_belo(e0)?, to_belo(e1)?],
        },
        EloModel::Normalized => {
            let lelo = [from_nelo(e0), from_nelo(e1)];
            Converted {
                belo: [to_belo(lelo[0])?, to_belo(lelo[1])?],
                nelo: [e0, e1],
                lelo,
            }
        }
    })
}

/// The expected overshoot corrections of an overshoot record.
pub fn expected_overshoot(o: &Overshoot) -> [f64; 2] {
    let o0 = if o.m0 != 0.0 {
        -o.sq0 / (2.0 * o.m0)
    } else {
        0.0
    };
    let o1 = if o.m1 != 0.0 {
        o.sq1 / (2.0 * o.m1)
    } else {
        0.0
    };
    [o0, o1]
}

/// Per-game variance of a view's data (pairs: twice the variance of a pair's mean score).
fn per_game_variance(data: &[f64]) -> Option<f64> {
    let (_, pdf) = results_to_pdf(data).ok()?;
    let (_, var, _, _) = stats_ex(&pdf).ok()?;
    Some(if data.len() == 5 { 2.0 * var } else { var })
}

fn view(
    counts: &[u64],
    r: &Results,
    sprt: Option<(&SprtParams, &Converted)>,
    decides: bool,
) -> View {
    let data: Vec<f64> = counts.iter().map(|c| *c as f64).collect();
    let penta = data.len() == 5;
    let pairs_factor = if penta { 2 } else { 1 };
    let games = counts
        .iter()
        .fold(0u64, |acc, c| acc.saturating_add(*c))
        .saturating_mul(pairs_factor);
    let mut v = View {
        games,
        results: counts.to_vec(),
        distribution: Vec::new(),
        elo: None,
        llr: None,
        generalized: None,
        bayeselo_llr: None,
        score: None,
        variance: None,
        stdev: None,
        skewness: None,
        exkurt: None,
        nelo: None,
        llr_jumps: None,
        overshoot: None,
    };
    let Ok((n, pdf)) = results_to_pdf(&data) else {
        return v;
    };
    v.distribution = pdf.iter().map(|(_, p)| *p).collect();
    if games == 0 {
        return v;
    }
    if let Ok((avg, var, skew, exkurt)) = stats_ex(&pdf) {
        let var_pg = if penta { 2.0 * var } else { var };
        v.score = Some(avg);
        v.variance = Some(var_pg);
        v.stdev = Some(var_pg.sqrt());
        v.skewness = Some(skew);
        v.exkurt = Some(exkurt);
        if let Ok((t, var_t)) = t_conf(avg, var, skew, exkurt) {
            let scale = if penta {
                NELO_DIVIDED_BY_NT / std::f64::consts::SQRT_2
            } else {
                NELO_DIVIDED_BY_NT
            };
            v.nelo = Some((scale * t, scale * phi_inv(0.975) * (var_t / n).sqrt()));
        }
    }
    match sprt {
        None => {
            if let Ok(e) = get_elo(&data) {
                v.elo = Some((e.elo, [e.elo - e.elo95, e.elo + e.elo95], e.los));
            }
        }
        Some((s, c)) => {
            let results = Results {
                pentanomial: if penta { r.pentanomial } else { None },
                ..*r
            };
            if let Ok(e) = sprt_elo(&results, s.alpha, s.beta, 0.05, s.elo0, s.elo1, s.elo_model) {
                v.elo = Some((e.elo, e.ci, e.los));
                v.llr = Some(e.llr);
            }
            let (s0, s1) = (logistic(c.lelo[0]), logistic(c.lelo[1]));
            if let (Ok(s0), Ok(s1)) = (s0, s1) {
                let g = (|| -> StatsResult<Generalized> {
                    Ok(Generalized {
                        logistic_exact: n * llr(&pdf, s0, s1, Statistic::Expectation)?,
                        logistic_alt: n * llr_alt(&pdf, s0, s1)?,
                        logistic_alt2: n * llr_alt2(&pdf, s0, s1)?,
                        normalized_exact: llr_normalized(c.nelo[0], c.nelo[1], &data)?,
                        normalized_alt: llr_normalized_alt(c.nelo[0], c.nelo[1], &data)?,
                    })
                })();
                v.generalized = g.ok();
                let jumps = match s.elo_model {
                    EloModel::Normalized => {
                        let k = if penta { std::f64::consts::SQRT_2 } else { 1.0 };
                        let t0 = c.nelo[0] / NELO_DIVIDED_BY_NT * k;
                        let t1 = c.nelo[1] / NELO_DIVIDED_BY_NT * k;
                        llr_jumps(&pdf, t0, t1, Statistic::TValue { reference: 0.5 })
                    }
                    _ => llr_jumps(&pdf, s0, s1, Statistic::Expectation),
                };
                v.llr_jumps = jumps.ok().map(|j| j.iter().map(|(x, _)| *x).collect());
            }
            if !penta {
                v.bayeselo_llr = llr_legacy(c.belo[0], c.belo[1], [data[0], data[1], data[2]]).ok();
            }
            if decides {
                v.overshoot = s.overshoot.as_ref().map(expected_overshoot);
            }
        }
    }
    v
}

/// The page's numbers for a run's results and, for an SPRT, its parameters.
pub fn raw_stats(r: &Results, sprt: Option<&SprtParams>) -> RawStats {
    let tri = [r.losses, r.draws, r.wins];
    let tri_reg = regularize(&r.trinomial());
    let tri_sum: f64 = tri_reg.iter().sum();
    let draw_ratio = tri_reg[1] / tri_sum;
    let penta = r.pentanomial;
    let (pentanomial_draw_ratio, dd_wl) = match penta {
        Some(p) => {
            let reg = regularize(&p.map(|x| x as f64));
            let sum: f64 = reg.iter().sum();
            let dd = (r.draws as f64 - p[1] as f64 - p[3] as f64) / 2.0;
            (Some(reg[2] / sum), Some((dd, p[2] as f64 - dd)))
        }
        None => (None, None),
    };
    let drawelo = draw_elo_calc([tri_reg[0], tri_reg[1], tri_reg[2]]).ok();
    // σ per game of the data the SPRT decides with (for the normalized conversions).
    let decisive: Vec<f64> = match penta {
        Some(p) => p.map(|x| x as f64).to_vec(),
        None => tri.map(|x| x as f64).to_vec(),
    };
    let sigma_pg = per_game_variance(&decisive).map(f64::sqrt);
    let converted = match (sprt, drawelo, sigma_pg) {
        (Some(s), Some(de), Some(sg)) => convert(s, de, draw_ratio, sg).ok(),
        _ => None,
    };
    let bounds = match (sprt, &converted) {
        (Some(s), Some(c)) => {
            let bound = |k: usize| Bound {
                logistic: c.lelo[k],
                normalized: c.nelo[k],
                bayeselo: c.belo[k],
                score: logistic(c.lelo[k]).unwrap_or(f64::NAN),
            };
            Some(Bounds {
                h0: bound(0),
                h1: bound(1),
                a: (s.beta / (1.0 - s.alpha)).ln(),
                b: ((1.0 - s.beta) / s.alpha).ln(),
            })
        }
        _ => None,
    };
    let pair = sprt.zip(converted.as_ref());
    let pentanomial = penta.map(|p| view(&p, r, pair, true));
    let trinomial = view(&tri, r, pair, penta.is_none());
    let comparison = match (penta, &pentanomial) {
        (Some(_), Some(pv)) => match (trinomial.variance, pv.variance) {
            (Some(v3), Some(v5)) if v3 > 0.0 => {
                let rms_bias = (v3 - v5).max(0.0).sqrt();
                Some(Comparison {
                    variance_ratio: v5 / v3,
                    variance_difference: v3 - v5,
                    rms_bias,
                    rms_bias_elo: elo(0.5 + rms_bias),
                })
            }
            _ => None,
        },
        _ => None,
    };
    RawStats {
        draw_ratio,
        pentanomial_draw_ratio,
        dd_wl,
        drawelo,
        bounds,
        pentanomial,
        trinomial,
        comparison,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Results {
        // 1000 pairs: consistent W/L/D and pentanomial.
        Results {
            wins: 560,
            losses: 500,
            draws: 940,
            pentanomial: Some([40, 200, 480, 220, 60]),
        }
    }

    fn sprt() -> SprtParams {
        SprtParams {
            alpha: 0.05,
            beta: 0.05,
            elo0: 0.0,
            elo1: 2.0,
            elo_model: EloModel::Normalized,
            batch_size: 8,
            overshoot: Some(Overshoot {
                m0: -2.0,
                sq0: 1.0,
                m1: 4.0,
                sq1: 2.0,
                ..Overshoot::default()
            }),
        }
    }

    #[test]
    fn sprt_numbers_are_sprt_elo_s() {
        let r = sample();
        let s = sprt();
        let raw = raw_stats(&r, Some(&s));
        let want = sprt_elo(&r, 0.05, 0.05, 0.05, 0.0, 2.0, EloModel::Normalized).unwrap();
        let p = raw.pentanomial.as_ref().unwrap();
        assert_eq!(p.elo, Some((want.elo, want.ci, want.los)));
        assert_eq!(p.llr, Some(want.llr));
        assert_eq!(p.games, 2000);
        assert_eq!(p.overshoot, Some([0.25, 0.25]));
        assert_eq!(raw.trinomial.overshoot, None);
        let g = p.generalized.unwrap();
        assert!((g.normalized_exact - want.llr).abs() < 1e-12);
        let b = raw.bounds.unwrap();
        assert!((b.h1.normalized - 2.0).abs() < 1e-9, "{b:?}");
        assert!(b.h1.logistic > 0.0 && b.h0.logistic.abs() < 1e-9);
        assert!((b.b - 19f64.ln()).abs() < 1e-12);
        assert!(raw.trinomial.bayeselo_llr.is_some());
        let c = raw.comparison.unwrap();
        assert!(c.rms_bias >= 0.0 && c.variance_ratio > 0.0);
        assert_eq!(raw.dd_wl, Some((260.0, 220.0)));
    }

    #[test]
    fn fixed_games_numbers_are_get_elo_s() {
        let r = sample();
        let raw = raw_stats(&r, None);
        let e = get_elo(&[40.0, 200.0, 480.0, 220.0, 60.0]).unwrap();
        let p = raw.pentanomial.unwrap();
        assert_eq!(
            p.elo,
            Some((e.elo, [e.elo - e.elo95, e.elo + e.elo95], e.los))
        );
        assert!(p.llr.is_none() && raw.bounds.is_none());
        let n = crate::stats::nelo_pentanomial(&[40.0, 200.0, 480.0, 220.0, 60.0]).unwrap();
        assert_eq!(p.nelo, Some((n.nelo5, n.nelo5_delta)));
    }

    #[test]
    fn no_games_is_not_an_error() {
        let raw = raw_stats(&Results::default(), Some(&sprt()));
        assert_eq!(raw.trinomial.games, 0);
        assert!(raw.trinomial.elo.is_none());
        assert!(raw.pentanomial.is_none());
    }
}

//! A group's decisions as pure functions (docs/test-groups.md): the posterior strength of each
//! take, the probability that each is the best, the share of the group's games each running
//! take gets, and which takes stop because another passed or because they cannot realistically
//! overtake the leader.
//!
//! Owns: the allocation rule and the group's stopping rule over plain values, so the server
//! (`Groups::tick`) and the simulation (`simulate.rs`) decide with the same code.
//! Must not: lock, do I/O, or ever decide that a take passed or failed: that is each take's
//! own SPRT, in the run core.

use crate::config::{GroupRule, GroupSettings};
use crate::stats::phi;

/// Where a take stands, as its run says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TakeState {
    /// Approved and unfinished.
    Running,
    /// Unfinished and waiting for approval: it gets no share and plays no games yet.
    Pending,
    /// Its SPRT accepted H1.
    Passed,
    /// Its SPRT accepted H0 (or a worker failed the run).
    Failed,
    /// Stopped for another reason (superseded, by a person, deleted).
    Stopped,
}

impl TakeState {
    pub fn name(self) -> &'static str {
        match self {
            TakeState::Running => "running",
            TakeState::Pending => "pending",
            TakeState::Passed => "passed",
            TakeState::Failed => "failed",
            TakeState::Stopped => "stopped",
        }
    }
}

/// One take's numbers: its state and its game pairs `[LL, LD+DL, LW+DD+WL, DW+WD, WW]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TakeView {
    pub state: TakeState,
    pub pentanomial: [u64; 5],
}

impl TakeView {
    pub fn games(&self) -> u64 {
        2 * self.pentanomial.iter().sum::<u64>()
    }
}

/// A normal posterior of a take's Elo against the base.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Posterior {
    pub mean: f64,
    pub sd: f64,
}

/// The posterior of a take's logistic Elo: the pairs' mean score and its standard error turned
/// into Elo (delta method), combined with a normal prior N(0, prior_sd²).
pub fn posterior(pentanomial: &[u64; 5], prior_sd: f64) -> Posterior {
    let prior_prec = 1.0 / (prior_sd * prior_sd);
    let n: f64 = pentanomial.iter().map(|&c| c as f64).sum();
    if n < 1.0 {
        return Posterior {
            mean: 0.0,
            sd: prior_sd,
        };
    }
    let scores = [0.0, 0.25, 0.5, 0.75, 1.0];
    let mean: f64 = pentanomial
        .iter()
        .zip(scores)
        .map(|(&c, s)| c as f64 * s)
        .sum::<f64>()
        / n;
    let var: f64 = pentanomial
        .iter()
        .zip(scores)
        .map(|(&c, s)| c as f64 * (s - mean) * (s - mean))
        .sum::<f64>()
        / n;
    // A few pairs can all score the same: the variance is floored at a realistic one
    // (a per-pair score's variance at STC is about 0.03-0.05).
    let var = var.max(0.01);
    let m = mean.clamp(0.01, 0.99);
    let elo = -400.0 * (1.0 / m - 1.0).log10();
    let slope = 400.0 / (std::f64::consts::LN_10 * m * (1.0 - m));
    let se = slope * (var / n).sqrt();
    let data_prec = 1.0 / (se * se);
    let prec = prior_prec + data_prec;
    Posterior {
        mean: elo * data_prec / prec,
        sd: (1.0 / prec).sqrt(),
    }
}

/// The probability that each take is the best of `posts` (independent normals), by the
/// integral ∫ f_i(x) Π_{j≠i} Φ((x − μ_j)/σ_j) dx on a grid; the values add up to 1.
pub fn p_best(posts: &[Posterior]) -> Vec<f64> {
    let k = posts.len();
    if k == 0 {
        return Vec::new();
    }
    if k == 1 {
        return vec![1.0];
    }
    let lo = posts
        .iter()
        .map(|p| p.mean - 8.0 * p.sd)
        .fold(f64::INFINITY, f64::min);
    let hi = posts
        .iter()
        .map(|p| p.mean + 8.0 * p.sd)
        .fold(f64::NEG_INFINITY, f64::max);
    const STEPS: usize = 600;
    let h = (hi - lo) / STEPS as f64;
    let mut out = vec![0.0; k];
    for s in 0..=STEPS {
        let x = lo + h * s as f64;
        let cdfs: Vec<f64> = posts.iter().map(|p| phi((x - p.mean) / p.sd)).collect();
        for (i, p) in posts.iter().enumerate() {
            let z = (x - p.mean) / p.sd;
            let density = (-0.5 * z * z).exp() / (p.sd * (2.0 * std::f64::consts::PI).sqrt());
            if density < 1e-300 {
                continue;
            }
            let others: f64 = cdfs
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, c)| *c)
                .product();
            let w = if s == 0 || s == STEPS { 0.5 } else { 1.0 };
            out[i] += w * h * density * others;
        }
    }
    let total: f64 = out.iter().sum();
    if total > 0.0 && total.is_finite() {
        for v in &mut out {
            *v /= total;
        }
    } else {
        out = vec![1.0 / k as f64; k];
    }
    out
}

/// Why a take is stopped by its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopWhy {
    /// Another take (the index) passed its SPRT.
    Superseded(usize),
    /// The take cannot realistically overtake the leader (the index).
    Hopeless(usize),
}

/// What the group decides now.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Each take's share of the group's next games (0 for takes not running); they add up to
    /// 1 when any take runs.
    pub weights: Vec<f64>,
    /// Each take's probability of being the best of the running takes (0 for the others).
    pub p_best: Vec<f64>,
    /// Takes to stop, and why.
    pub stops: Vec<(usize, StopWhy)>,
    /// The take that passed (the first one, by index), if any.
    pub winner: Option<usize>,
}

/// The group's decision: a passed take supersedes every running or pending one; otherwise the running
/// takes share the games by the rule, and with `stop_hopeless` a take that cannot
/// realistically overtake the leader is stopped.
pub fn decide(takes: &[TakeView], s: &GroupSettings) -> Decision {
    let k = takes.len();
    let mut d = Decision {
        weights: vec![0.0; k],
        p_best: vec![0.0; k],
        stops: Vec::new(),
        winner: takes.iter().position(|t| t.state == TakeState::Passed),
    };
    if let Some(w) = d.winner {
        for (i, t) in takes.iter().enumerate() {
            if matches!(t.state, TakeState::Running | TakeState::Pending) {
                d.stops.push((i, StopWhy::Superseded(w)));
            }
        }
        return d;
    }
    let running: Vec<usize> = (0..k)
        .filter(|&i| takes[i].state == TakeState::Running)
        .collect();
    if running.is_empty() {
        return d;
    }
    let posts: Vec<Posterior> = running
        .iter()
        .map(|&i| posterior(&takes[i].pentanomial, s.prior_elo_sd))
        .collect();
    let pb = p_best(&posts);
    for (slot, &i) in running.iter().enumerate() {
        d.p_best[i] = pb[slot];
    }
    let n = running.len() as f64;
    for (slot, &i) in running.iter().enumerate() {
        d.weights[i] = match s.rule {
            GroupRule::Equal => 1.0 / n,
            GroupRule::Best => s.floor / n + (1.0 - s.floor) * pb[slot],
        };
    }
    if s.stop_hopeless && running.len() > 1 {
        // The leader: the highest posterior mean among the running takes.
        let (lead_slot, lead) = posts
            .iter()
            .enumerate()
            .max_by(|a, b| a.1.mean.total_cmp(&b.1.mean))
            .map(|(slot, p)| (slot, *p))
            .unwrap_or((0, posts[0]));
        let lead_take = running[lead_slot];
        if takes[lead_take].games() >= s.hopeless_min_games {
            for (slot, &i) in running.iter().enumerate() {
                if slot == lead_slot || takes[i].games() < s.hopeless_min_games {
                    continue;
                }
                let p = posts[slot];
                let z = (p.mean - lead.mean) / (p.sd * p.sd + lead.sd * lead.sd).sqrt();
                if phi(z) < s.hopeless_below {
                    d.stops.push((i, StopWhy::Hopeless(lead_take)));
                }
            }
        }
    }
    // Shares of the takes stopped now go to the others.
    if !d.stops.is_empty() {
        for (i, _) in &d.stops {
            d.weights[*i] = 0.0;
        }
        let total: f64 = d.weights.iter().sum();
        if total > 0.0 {
            for w in &mut d.weights {
                *w /= total;
            }
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    fn take(p: [u64; 5]) -> TakeView {
        TakeView {
            state: TakeState::Running,
            pentanomial: p,
        }
    }

    #[test]
    fn p_best_is_symmetric_and_sums_to_one() {
        let a = Posterior { mean: 0.0, sd: 1.0 };
        let pb = p_best(&[a, a, a, a]);
        for v in &pb {
            assert!((v - 0.25).abs() < 1e-3, "{pb:?}");
        }
        let pb = p_best(&[a, Posterior { mean: 1.0, sd: 1.0 }]);
        // P(X2 > X1) with difference N(1, 2): Φ(1/√2) = 0.7602.
        assert!((pb[1] - 0.7602).abs() < 2e-3, "{pb:?}");
    }

    #[test]
    fn the_stronger_take_gets_more_and_none_starves() {
        let s = GroupSettings::default();
        // 10000 pairs each: one scoring about 51 %, one 50 %.
        let strong = take([900, 2300, 3400, 2400, 1000]);
        let even = take([1000, 2400, 3200, 2400, 1000]);
        let d = decide(&[even, strong], &s);
        assert!(d.weights[1] > 0.8, "{d:?}");
        assert!(d.weights[0] >= s.floor / 2.0 - 1e-12, "{d:?}");
        assert!((d.weights.iter().sum::<f64>() - 1.0).abs() < 1e-9);
        let eq = GroupSettings {
            rule: GroupRule::Equal,
            ..s.clone()
        };
        assert_eq!(decide(&[even, strong], &eq).weights, vec![0.5, 0.5]);
    }

    #[test]
    fn a_pass_supersedes_the_running_takes_only() {
        let s = GroupSettings::default();
        let mut passed = take([0; 5]);
        passed.state = TakeState::Passed;
        let mut failed = take([0; 5]);
        failed.state = TakeState::Failed;
        let d = decide(&[take([0; 5]), passed, failed, take([1; 5])], &s);
        assert_eq!(d.winner, Some(1));
        assert_eq!(
            d.stops,
            vec![(0, StopWhy::Superseded(1)), (3, StopWhy::Superseded(1))]
        );
    }

    #[test]
    fn hopeless_needs_games_and_a_clear_gap() {
        let s = GroupSettings::default();
        let strong = take([900, 2300, 3400, 2400, 1000]);
        let weak = take([1100, 2500, 3400, 2200, 900]);
        let d = decide(&[weak, strong], &s);
        assert_eq!(d.stops, vec![(0, StopWhy::Hopeless(1))], "{d:?}");
        // Few games: never.
        let d = decide(&[take([11, 25, 34, 22, 9]), take([9, 23, 34, 24, 10])], &s);
        assert!(d.stops.is_empty());
        let off = GroupSettings {
            stop_hopeless: false,
            ..s
        };
        assert!(decide(&[weak, strong], &off).stops.is_empty());
    }
}

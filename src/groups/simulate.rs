//! `shoal simulate-groups` (docs/test-groups.md, BENCHMARKS.md): groups of takes played
//! through the scheduler's choice (Fishtest's order over the candidates, with a group's
//! arrangement, `scheduler::group_shares::arrange`), the groups' rules (`alloc::decide`) and
//! the run core's SPRT (`stats::update_sprt`), with game pairs drawn from each take's true
//! Elo; and the same takes as independent tests, for comparison.
//!
//! The fleet plays in rounds: each of `workers` workers asks for a task in turn (the
//! scheduler's choice, its cores counted as it would count them), every task then reports its
//! games, each take's SPRT is updated on its own games, and (grouped) the group decides:
//! shares, superseded takes, hopeless ones.
//!
//! Owns: the simulation and its report. Must not: touch a store, a clock or the network: a
//! run is a pure function of its options and seed.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;

use super::alloc::{self, TakeState, TakeView};
use crate::config::GroupSettings;
use crate::scheduler::group_shares::arrange;
use crate::scheduler::rules::{Candidate, WorkerNeeds, choose};
use crate::stats::{EloModel, Results, SprtRecord, SprtState, update_sprt};

/// What to simulate.
#[derive(Debug, Clone, Serialize)]
pub struct SimSpec {
    /// The true logistic Elo of each take against the base (2 to 8 takes).
    pub elo: Vec<f64>,
    pub elo0: f64,
    pub elo1: f64,
    pub alpha: f64,
    pub beta: f64,
    /// `normalized` or `logistic`: the model of `elo0`/`elo1`.
    pub elo_model: String,
    /// Draws among all games (a realistic STC figure: 0.56).
    pub draw_ratio: f64,
    pub groups: usize,
    pub seed: u64,
    /// Workers in the fleet that plays one group.
    pub workers: usize,
    /// Games per task (even).
    pub task_games: u64,
    /// A take still undecided after this many games is stopped (counted as no pass).
    pub max_games: u64,
}

/// What one way of testing (grouped or independent) came to.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ModeReport {
    /// Games played per group, on average (all takes).
    pub games_per_group: f64,
    /// Games the group had played when its first take passed, on average over the groups
    /// with a pass.
    pub games_to_first_pass: Option<f64>,
    /// Groups where some take passed.
    pub groups_with_pass: u64,
    /// Of those, the part where the (first) passing take is a best one (highest true Elo).
    pub pass_is_best: Option<f64>,
    /// Takes whose true Elo is at or below elo0, and how many of them passed.
    pub null_takes: u64,
    pub null_passes: u64,
    /// null_passes / null_takes, with its Wilson 95 % interval.
    pub false_positive_rate: Option<f64>,
    pub false_positive_ci95: Option<(f64, f64)>,
}

/// The whole report.
#[derive(Debug, Clone, Serialize)]
pub struct SimReport {
    pub spec: SimSpec,
    pub rule: String,
    pub grouped: ModeReport,
    pub independent: ModeReport,
}

/// Why the simulation cannot run.
#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("{0}")]
    Bad(String),
}

/// Pair outcome probabilities `[LL, LD, LW+DD, DW, WW]` of a take (two independent games
/// from the BayesElo model at `draw_ratio`).
fn pair_probs(elo: f64, draw_ratio: f64) -> Result<[f64; 5], SimError> {
    let bad = |e: crate::stats::StatsError| SimError::Bad(format!("elo {elo}: {e}"));
    let (belo, drawelo) = crate::stats::elo_to_bayeselo(elo, draw_ratio).map_err(bad)?;
    let [l, d, w] = crate::stats::bayeselo_to_proba(belo, drawelo).map_err(bad)?;
    Ok([l * l, 2.0 * l * d, 2.0 * l * w + d * d, 2.0 * d * w, w * w])
}

/// A take's true strength in the SPRT's model (nElo of its pair distribution, or its Elo).
fn true_strength(elo: f64, probs: &[f64; 5], model: EloModel) -> f64 {
    match model {
        EloModel::Normalized => {
            let scaled: Vec<f64> = probs.iter().map(|p| p * 1e9).collect();
            crate::stats::nelo_pentanomial(&scaled)
                .map(|s| s.nelo5)
                .unwrap_or(elo)
        }
        _ => elo,
    }
}

struct SimTake {
    cum: [f64; 5],
    pent: [u64; 5],
    sprt: SprtRecord,
    state: TakeState,
    cores: u64,
}

impl SimTake {
    fn games(&self) -> u64 {
        2 * self.pent.iter().sum::<u64>()
    }

    fn play(&mut self, pairs: u64, rng: &mut StdRng) {
        for _ in 0..pairs {
            let u: f64 = rng.random();
            let k = self.cum.iter().position(|&c| u < c).unwrap_or(4);
            self.pent[k] += 1;
        }
    }
}

/// One group played, grouped or independent: (games played, games at the first pass, the
/// first take that passed, which takes passed).
struct Played {
    games: u64,
    first_pass: Option<(u64, usize)>,
    passed: Vec<bool>,
}

const CONCURRENCY: u32 = 8;

fn play_group(
    spec: &SimSpec,
    model: EloModel,
    probs: &[[f64; 5]],
    grouped: Option<&GroupSettings>,
    rng: &mut StdRng,
) -> Result<Played, SimError> {
    let sprt = SprtRecord::new(spec.alpha, spec.beta, spec.elo0, spec.elo1, model, 1)
        .map_err(|e| SimError::Bad(format!("SPRT bounds: {e}")))?;
    let mut takes: Vec<SimTake> = probs
        .iter()
        .map(|p| {
            let mut cum = [0.0; 5];
            let mut acc = 0.0;
            for (c, x) in cum.iter_mut().zip(p) {
                acc += x;
                *c = acc;
            }
            SimTake {
                cum,
                pent: [0; 5],
                sprt: sprt.clone(),
                state: TakeState::Running,
                cores: 0,
            }
        })
        .collect();
    let group: Arc<str> = Arc::from("g");
    let mut weights = vec![1.0 / takes.len() as f64; takes.len()];
    let mut first_pass = None;
    let needs = WorkerNeeds {
        concurrency: CONCURRENCY,
        min_threads: 1,
        max_memory: 1 << 20,
        near_github_api_limit: false,
        worker_arch: "x86-64",
        compiler: "g++",
    };
    loop {
        // Every worker asks for a task in turn: the scheduler's choice.
        for t in &mut takes {
            t.cores = 0;
        }
        let mut tasks = vec![0u64; takes.len()];
        for _ in 0..spec.workers {
            let mut candidates: Vec<Candidate> = takes
                .iter()
                .enumerate()
                .map(|(i, t)| Candidate {
                    index: i,
                    priority: 0.0,
                    cores: t.cores,
                    itp: 100.0,
                    finished: t.state != TakeState::Running,
                    approved: true,
                    threads: 1,
                    remaining: 1,
                    hash_new: 16,
                    hash_base: 16,
                    spsa_params: None,
                    arch_filter: None,
                    compiler: None,
                    is_last_run: false,
                    in_worker_runs: false,
                    limited: false,
                })
                .collect();
            if grouped.is_some() {
                arrange(
                    &mut candidates,
                    |i| Some((group.clone(), weights.get(i).copied().unwrap_or(0.0))),
                    CONCURRENCY,
                    rng.random(),
                );
            }
            let Some(pick) = choose(candidates, &needs).0 else {
                break;
            };
            takes[pick.index].cores += u64::from(CONCURRENCY);
            tasks[pick.index] += 1;
        }
        if tasks.iter().all(|&n| n == 0) {
            break;
        }
        // The tasks report; each take's SPRT on its own games.
        for (i, t) in takes.iter_mut().enumerate() {
            if tasks[i] == 0 {
                continue;
            }
            let pairs = tasks[i] * (spec.task_games / 2).max(1);
            t.play(pairs, rng);
            let r = Results {
                wins: 0,
                losses: 0,
                draws: 0,
                pentanomial: Some(t.pent),
            };
            update_sprt(&r, &mut t.sprt).map_err(|e| SimError::Bad(format!("SPRT: {e}")))?;
            t.state = match t.sprt.state {
                SprtState::Accepted => TakeState::Passed,
                SprtState::Rejected => TakeState::Failed,
                SprtState::Running if t.games() >= spec.max_games => TakeState::Stopped,
                SprtState::Running => TakeState::Running,
            };
        }
        let total: u64 = takes.iter().map(SimTake::games).sum();
        if first_pass.is_none()
            && let Some(i) = takes.iter().position(|t| t.state == TakeState::Passed)
        {
            first_pass = Some((total, i));
        }
        if let Some(settings) = grouped {
            let views: Vec<TakeView> = takes
                .iter()
                .map(|t| TakeView {
                    state: t.state,
                    pentanomial: t.pent,
                })
                .collect();
            let d = alloc::decide(&views, settings);
            for (i, _) in &d.stops {
                takes[*i].state = TakeState::Stopped;
            }
            weights = d.weights;
        }
        if takes.iter().all(|t| t.state != TakeState::Running) {
            break;
        }
    }
    Ok(Played {
        games: takes.iter().map(SimTake::games).sum(),
        first_pass,
        passed: takes.iter().map(|t| t.state == TakeState::Passed).collect(),
    })
}

/// Wilson's 95 % interval of `k` successes in `n`.
pub fn wilson(k: u64, n: u64) -> Option<(f64, f64)> {
    if n == 0 {
        return None;
    }
    let (k, n) = (k as f64, n as f64);
    let z = 1.959_963_984_540_054;
    let p = k / n;
    let denom = 1.0 + z * z / n;
    let centre = (p + z * z / (2.0 * n)) / denom;
    let half = z * ((p * (1.0 - p) + z * z / (4.0 * n)) / n).sqrt() / denom;
    Some(((centre - half).max(0.0), (centre + half).min(1.0)))
}

/// The arguments a simulation refuses, each with the option named.
pub fn check_spec(spec: &SimSpec) -> Result<(), SimError> {
    let bad = |m: &str| Err(SimError::Bad(m.to_string()));
    if spec.groups == 0 || spec.workers == 0 {
        return bad("--groups and --workers must be at least 1");
    }
    if spec.task_games == 0 || !spec.task_games.is_multiple_of(2) {
        return bad("--task-games must be even and above 0 (games are played in pairs)");
    }
    if !(0.0..1.0).contains(&spec.draw_ratio) {
        return bad("--draw-ratio must be in [0, 1)");
    }
    if !(spec.elo0.is_finite() && spec.elo1.is_finite() && spec.elo0 < spec.elo1) {
        return bad("--elo0 must be below --elo1");
    }
    if !(spec.alpha > 0.0 && spec.alpha < 1.0 && spec.beta > 0.0 && spec.beta < 1.0) {
        return bad("--alpha and --beta must be in (0, 1)");
    }
    if spec.elo.iter().any(|e| !e.is_finite()) {
        return bad("--elo: each value must be a number");
    }
    Ok(())
}

/// Runs the simulation: every group played grouped (with `settings`) and, from the same
/// seed, independent.
pub fn run(spec: &SimSpec, settings: &GroupSettings) -> Result<SimReport, SimError> {
    let k = spec.elo.len();
    if !(super::MIN_TAKES..=super::MAX_TAKES).contains(&k) {
        return Err(SimError::Bad(format!(
            "--elo: {} to {} takes, not {k}",
            super::MIN_TAKES,
            super::MAX_TAKES
        )));
    }
    check_spec(spec)?;
    let model = EloModel::parse(&spec.elo_model)
        .ok_or_else(|| SimError::Bad(format!("unknown elo model {:?}", spec.elo_model)))?;
    let probs: Vec<[f64; 5]> = spec
        .elo
        .iter()
        .map(|&e| pair_probs(e, spec.draw_ratio))
        .collect::<Result<_, _>>()?;
    let strength: Vec<f64> = spec
        .elo
        .iter()
        .zip(&probs)
        .map(|(&e, p)| true_strength(e, p, model))
        .collect();
    let best = spec.elo.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mut out = Vec::new();
    for grouped in [Some(settings), None] {
        let mut rng = StdRng::seed_from_u64(spec.seed);
        let mut rep = ModeReport::default();
        let (mut games, mut to_pass, mut best_pass) = (0u64, 0u64, 0u64);
        for _ in 0..spec.groups {
            let p = play_group(spec, model, &probs, grouped, &mut rng)?;
            games += p.games;
            if let Some((g, i)) = p.first_pass {
                rep.groups_with_pass += 1;
                to_pass += g;
                if spec.elo[i] >= best {
                    best_pass += 1;
                }
            }
            for (i, passed) in p.passed.iter().enumerate() {
                // (A take at the bound computes to within rounding of it.)
                if strength[i] <= spec.elo0 + 1e-6 {
                    rep.null_takes += 1;
                    rep.null_passes += u64::from(*passed);
                }
            }
        }
        let n = spec.groups as f64;
        rep.games_per_group = games as f64 / n;
        if rep.groups_with_pass > 0 {
            rep.games_to_first_pass = Some(to_pass as f64 / rep.groups_with_pass as f64);
            rep.pass_is_best = Some(best_pass as f64 / rep.groups_with_pass as f64);
        }
        if rep.null_takes > 0 {
            rep.false_positive_rate = Some(rep.null_passes as f64 / rep.null_takes as f64);
            rep.false_positive_ci95 = wilson(rep.null_passes, rep.null_takes);
        }
        out.push(rep);
    }
    let independent = out.pop().unwrap_or_default();
    let grouped = out.pop().unwrap_or_default();
    Ok(SimReport {
        spec: spec.clone(),
        rule: settings.rule.name().to_string(),
        grouped,
        independent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pair_probabilities_add_up_and_follow_elo() {
        let even = pair_probs(0.0, 0.56).expect("valid");
        assert!((even.iter().sum::<f64>() - 1.0).abs() < 1e-12);
        assert!((even[0] - even[4]).abs() < 1e-12);
        let strong = pair_probs(10.0, 0.56).expect("valid");
        assert!(strong[4] > strong[0]);
        assert!(true_strength(0.0, &even, EloModel::Normalized).abs() < 1e-6);
    }

    #[test]
    fn a_simulation_refuses_bad_arguments() {
        let ok = SimSpec {
            elo: vec![0.0, 1.0],
            elo0: 0.0,
            elo1: 2.0,
            alpha: 0.05,
            beta: 0.05,
            elo_model: "normalized".into(),
            draw_ratio: 0.56,
            groups: 1,
            seed: 1,
            workers: 1,
            task_games: 400,
            max_games: 1000,
        };
        assert!(check_spec(&ok).is_ok());
        let cases: Vec<(SimSpec, &str)> = vec![
            (
                SimSpec {
                    draw_ratio: 1.0,
                    ..ok.clone()
                },
                "--draw-ratio",
            ),
            (
                SimSpec {
                    draw_ratio: -0.1,
                    ..ok.clone()
                },
                "--draw-ratio",
            ),
            (
                SimSpec {
                    elo0: 2.0,
                    ..ok.clone()
                },
                "--elo0",
            ),
            (
                SimSpec {
                    task_games: 0,
                    ..ok.clone()
                },
                "--task-games",
            ),
            (
                SimSpec {
                    task_games: 401,
                    ..ok.clone()
                },
                "--task-games",
            ),
            (
                SimSpec {
                    groups: 0,
                    ..ok.clone()
                },
                "--groups",
            ),
        ];
        for (spec, word) in cases {
            let e = check_spec(&spec).expect_err(word).to_string();
            assert!(e.contains(word), "{word} in {e}");
            let e = run(&spec, &GroupSettings::default())
                .expect_err(word)
                .to_string();
            assert!(e.contains(word), "{word} in {e}");
        }
        let nine = SimSpec {
            elo: vec![0.0; 9],
            ..ok.clone()
        };
        assert!(run(&nine, &GroupSettings::default()).is_err());
    }

    #[test]
    fn wilson_interval() {
        let (lo, hi) = wilson(5, 100).expect("n > 0");
        assert!(lo < 0.05 && hi > 0.05 && hi < 0.12, "{lo} {hi}");
        assert_eq!(wilson(0, 0), None);
    }
}

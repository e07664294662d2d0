//! The running SPSA tuning: the `request_spsa` draw ([`request_spsa`]: a ±1 flip per
//! parameter, the white/black values, the task's `spsa_params`, packed as numpy does
//! ([`pack_flips`]), and their CRC32 signature) and the update a worker's batch applies
//! ([`update_spsa`]: the signature check, the step rebuilt from the stored iteration and
//! flips, theta clipped to its bounds, the `param_history` sampling), with their errors
//! ([`SpsaError`]).
//!
//! Must not: do I/O, touch the store or know HTTP; draw randomness other than from the
//! caller's RNG; leave the run changed when an update fails.

use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{CLASSIC_ALGORITHM, HistoryEntry, SpsaArgs, SpsaParam, SpsaResult, SpsaTaskParams};

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

/// Why a `request_spsa` draw or an SPSA update could not be applied.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SpsaError {
    #[error("unknown SPSA algorithm: {0:?}")]
    UnknownAlgorithm(String),
    #[error("the SPSA run has no parameters")]
    NoParams,
    #[error("spsa_params not found for this task; skipping the update")]
    NoStoredParams,
    #[error(
        "the stored spsa_params do not match the signature sent by the worker ({got} != {expected})"
    )]
    SigMismatch { expected: u32, got: u64 },
    #[error("spsa num_games {num_games} != wins + losses + draws ({sum})")]
    GameCountMismatch { num_games: u64, sum: u64 },
    #[error("spsa num_games {0} is odd")]
    OddGames(u64),
    #[error("stored flips cover {stored} parameters but the run has {params}")]
    FlipCountMismatch { stored: usize, params: usize },
    #[error(
        "parameter '{name}' gives a degenerate step at iteration {k} (c_k = {c_k}, R_k = {r_k})"
    )]
    DegenerateStep {
        name: String,
        k: u64,
        c_k: f64,
        r_k: f64,
    },
}

// ---------------------------------------------------------------------------
// Flip packing and signature
// ---------------------------------------------------------------------------

/// numpy `packbits(flips == 1)`: MSB first, bit 1 for `+1`, zero padding.
/// Any flip other than `+1` packs as a 0 bit, exactly like numpy's `== 1`.
pub fn pack_flips(flips: &[i8]) -> Vec<u8> {
    flips
        .chunks(8)
        .map(|chunk| {
            chunk.iter().enumerate().fold(0u8, |byte, (bit, &flip)| {
                if flip == 1 {
                    byte | (0x80 >> bit)
                } else {
                    byte
                }
            })
        })
        .collect()
}

/// The inverse of [`pack_flips`], keeping the first `len` flips. Returns
/// `None` when `packed` holds fewer than `len` bits.
pub fn unpack_flips(packed: &[u8], len: usize) -> Option<Vec<i8>> {
    if packed.len().checked_mul(8)? < len {
        return None;
    }
    Some(
        (0..len)
            .map(|i| {
                let set = packed
                    .get(i / 8)
                    .is_some_and(|byte| byte & (0x80 >> (i % 8)) != 0);
                if set { 1 } else { -1 }
            })
            .collect(),
    )
}

/// `zlib.crc32(packed_flips)`, as the unsigned int Python returns.
pub fn flips_signature(packed_flips: &[u8]) -> u32 {
    crc32fast::hash(packed_flips)
}

// ---------------------------------------------------------------------------
// The step at one iteration
// ---------------------------------------------------------------------------

/// Python's `min(max(x, lo), hi)`, keeping its argument order so that even
/// odd inputs resolve the same way.
fn clip(x: f64, lo: f64, hi: f64) -> f64 {
    let v = if lo > x { lo } else { x };
    if hi < v { hi } else { v }
}

/// Perturbation size `c_k` and learning rate `R_k` of one parameter at
/// iteration `k = iter + 1` (Fishtest counts from 1 to avoid a zero divisor).
fn step(spsa: &SpsaArgs, param: &SpsaParam, iter: u64) -> Result<(f64, f64), SpsaError> {
    let k = iter.saturating_add(1);
    let kf = k as f64;
    let c_k = param.c / kf.powf(spsa.gamma);
    let r_k = param.a / (spsa.stability + kf).powf(spsa.alpha) / c_k.powf(2.0);
    // Fishtest would raise ZeroDivisionError here and answer 500; refusing
    // keeps NaN out of theta (and out of the JSON reply, where serde_json
    // would turn it into null).
    if !(c_k.is_finite() && c_k > 0.0 && r_k.is_finite()) {
        return Err(SpsaError::DegenerateStep {
            name: param.name.clone(),
            k,
            c_k,
            r_k,
        });
    }
    Ok((c_k, r_k))
}

fn check_algorithm(spsa: &SpsaArgs) -> Result<(), SpsaError> {
    match spsa.algorithm.as_deref() {
        None | Some(CLASSIC_ALGORITHM) => Ok(()),
        Some(other) => Err(SpsaError::UnknownAlgorithm(other.to_owned())),
    }
}

// ---------------------------------------------------------------------------
// request_spsa
// ---------------------------------------------------------------------------

/// One entry of `w_params` (the New engine's values). The worker only reads
/// `name` and `value`; `c`, `R` and `flip` are informational.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WhiteParam {
    pub name: String,
    pub value: f64,
    #[serde(rename = "R")]
    pub r: f64,
    pub c: f64,
    pub flip: i8,
}

/// One entry of `b_params` (the Base engine's values).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct BlackParam {
    pub name: String,
    pub value: f64,
}

/// The JSON body of a successful `request_spsa` reply (the server adds
/// `duration`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SpsaReply {
    pub w_params: Vec<WhiteParam>,
    pub b_params: Vec<BlackParam>,
    pub sig: u32,
    pub task_alive: bool,
}

/// Everything a `request_spsa` produces: the reply, and the record to store
/// as the task's `spsa_params` (replacing any earlier one).
#[derive(Debug, Clone, PartialEq)]
pub struct SpsaRequest {
    pub reply: SpsaReply,
    pub spsa_params: SpsaTaskParams,
}

/// Draw the next perturbation: a random ±1 flip per parameter and, at
/// `k = iter + 1`, `c_k = c / k^γ`, `R_k = a / (A + k)^α / c_k²`; the New
/// engine plays `clip(theta + c_k·flip)` and Base `clip(theta − c_k·flip)`.
pub fn request_spsa(spsa: &SpsaArgs, rng: &mut impl rand::Rng) -> Result<SpsaRequest, SpsaError> {
    check_algorithm(spsa)?;
    if spsa.params.is_empty() {
        return Err(SpsaError::NoParams);
    }
    let mut w_params = Vec::with_capacity(spsa.params.len());
    let mut b_params = Vec::with_capacity(spsa.params.len());
    let mut flips = Vec::with_capacity(spsa.params.len());
    for param in &spsa.params {
        let (c_k, r_k) = step(spsa, param, spsa.iter)?;
        let flip: i8 = if rng.random::<bool>() { 1 } else { -1 };
        let f = f64::from(flip);
        w_params.push(WhiteParam {
            name: param.name.clone(),
            value: clip(param.theta + c_k * f, param.min, param.max),
            r: r_k,
            c: c_k,
            flip,
        });
        b_params.push(BlackParam {
            name: param.name.clone(),
            value: clip(param.theta + -c_k * f, param.min, param.max),
        });
        flips.push(flip);
    }
    let packed_flips = pack_flips(&flips);
    let sig = flips_signature(&packed_flips);
    Ok(SpsaRequest {
        reply: SpsaReply {
            w_params,
            b_params,
            sig,
            task_alive: true,
        },
        spsa_params: SpsaTaskParams {
            iter: spsa.iter,
            packed_flips,
        },
    })
}

// ---------------------------------------------------------------------------
// update
// ---------------------------------------------------------------------------

/// The checks the request schema makes on an `spsa` block: `num_games` even
/// and equal to `wins + losses + draws`. They touch no state, so a block that
/// fails them leaves the task's `spsa_params` in place.
pub fn validate_result(result: &SpsaResult) -> Result<(), SpsaError> {
    let sum = result
        .wins
        .checked_add(result.losses)
        .and_then(|s| s.checked_add(result.draws));
    match sum {
        Some(sum) if sum == result.num_games => {}
        // An overflowing sum cannot equal any u64, so report it saturated.
        _ => {
            return Err(SpsaError::GameCountMismatch {
                num_games: result.num_games,
                sum: sum.unwrap_or(u64::MAX),
            });
        }
    }
    if !result.num_games.is_multiple_of(2) {
        return Err(SpsaError::OddGames(result.num_games));
    }
    Ok(())
}

/// `param_history` sampling period in iterations: the history keeps about
/// 100 samples (fewer when there are ≥ 100 params, so its size stays bounded).
/// Zero when there is nothing to sample.
pub fn history_period(num_iter: u64, n_params: usize) -> f64 {
    if num_iter == 0 || n_params == 0 {
        return 0.0;
    }
    let samples = if n_params < 100 {
        100.0
    } else if n_params < 1000 {
        10_000.0 / n_params as f64
    } else {
        1.0
    };
    num_iter as f64 / samples
}

/// Apply a worker's batch to the run.
///
/// Order, as in Fishtest: the block is validated (no state touched on
/// failure); the task's stored `spsa_params` are then **consumed** (taken out
/// of `task_params` even if the signature turns out wrong, so the same batch
/// can never be applied twice); the signature must equal
/// `crc32(packed_flips)`; `c_k`/`R_k` are rebuilt from the stored iteration
/// and flips; `iter += num_games / 2`; each
/// `theta = clip(theta + R_k·c_k·(wins − losses)·flip)`; finally one history
/// sample `[{theta (new), R: R_k, c: c_k}]` is appended if
/// `len + 1 ≤ iter / period`.
///
/// On any error `spsa` is left unchanged. Fishtest only logs
/// `NoStoredParams` and `SigMismatch` and carries on, so a caller that wants
/// its behaviour should log those two and still treat the update as accepted.
pub fn update_spsa(
    spsa: &mut SpsaArgs,
    task_params: &mut Option<SpsaTaskParams>,
    result: &SpsaResult,
) -> Result<(), SpsaError> {
    validate_result(result)?;
    check_algorithm(spsa)?;
    let stored = task_params.take().ok_or(SpsaError::NoStoredParams)?;
    let expected = flips_signature(&stored.packed_flips);
    if result.sig != u64::from(expected) {
        return Err(SpsaError::SigMismatch {
            expected,
            got: result.sig,
        });
    }
    let n = spsa.params.len();
    let flips = unpack_flips(&stored.packed_flips, n).ok_or(SpsaError::FlipCountMismatch {
        stored: stored.packed_flips.len().saturating_mul(8),
        params: n,
    })?;

    // Compute everything first, so an error leaves the run untouched.
    // Python subtracts exact ints and converts at the multiply; i128 keeps the
    // difference exact for any u64 inputs.
    let score = (i128::from(result.wins) - i128::from(result.losses)) as f64;
    let mut steps = Vec::with_capacity(n);
    for (param, &flip) in spsa.params.iter().zip(&flips) {
        let (c_k, r_k) = step(spsa, param, stored.iter)?;
        let theta = clip(
            param.theta + r_k * c_k * score * f64::from(flip),
            param.min,
            param.max,
        );
        steps.push((theta, r_k, c_k));
    }

    spsa.iter = spsa.iter.saturating_add(result.num_games / 2);
    for (param, &(theta, _, _)) in spsa.params.iter_mut().zip(&steps) {
        param.theta = theta;
    }

    // Fishtest appends at most one sample per update (an `if`, not a loop):
    // a batch that spans several periods leaves the history to catch up on
    // later updates.
    let period = history_period(spsa.num_iter, n);
    if period > 0.0 {
        let history = spsa.param_history.get_or_insert_with(Vec::new);
        if (history.len() + 1) as f64 <= spsa.iter as f64 / period {
            history.push(
                steps
                    .iter()
                    .map(|&(theta, r, c)| HistoryEntry { theta, r, c })
                    .collect(),
            );
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spsa::tests::{RAW, setup};
    use crate::spsa::{SpsaSettings, setup_spsa};
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    /// Golden values from Fishtest's formulas evaluated by CPython 3.11 with
    /// numpy's packbits and zlib's crc32 (same libm `pow`, so bit-exact).
    #[test]
    fn golden_values_match_python() {
        let mut spsa = setup();
        assert_eq!(spsa.params[0].c, 28.326260626654786);
        assert_eq!(spsa.params[0].a, 104.99663662650573);
        assert_eq!(spsa.params[1].c, 4.248939093998217);
        assert_eq!(spsa.params[1].a, 2.3624243240963794);
        let packed = pack_flips(&[1, -1]);
        assert_eq!(packed, vec![128]);
        assert_eq!(flips_signature(&packed), 1_069_182_125);
        let mut stored = Some(SpsaTaskParams {
            iter: 100,
            packed_flips: packed,
        });
        update_spsa(&mut spsa, &mut stored, &result(7, 3, 2, 1_069_182_125)).expect("update");
        assert_eq!(spsa.params[0].theta, 100.18689536350583);
        assert_eq!(spsa.params[1].theta, -5.528034304525875);
        assert_eq!(spsa.iter, 6);
        let history = spsa.param_history.unwrap_or_default();
        // iter 6 < period 300: no sample yet.
        assert!(history.is_empty());
    }

    #[test]
    fn history_sample_records_the_step() {
        let mut spsa = setup();
        spsa.iter = 299;
        let mut stored = Some(SpsaTaskParams {
            iter: 100,
            packed_flips: pack_flips(&[1, -1]),
        });
        update_spsa(&mut spsa, &mut stored, &result(7, 3, 2, 1_069_182_125)).expect("update");
        // iter 305 ≥ period 300: one sample of the new theta and the step.
        let history = spsa.param_history.unwrap_or_default();
        assert_eq!(history.len(), 1);
        assert_eq!(
            history[0][0],
            HistoryEntry {
                theta: 100.18689536350583,
                r: 0.0026289707141956904,
                c: 17.772674539188277,
            }
        );
        assert_eq!(history[0][1].c, 2.6659011808782407);
        assert_eq!(history[0][1].r, 0.0026289707141956926);
    }

    #[test]
    fn packbits_matches_numpy_layout() {
        // np.packbits(np.array([1,-1,1,1,-1,-1,-1,1,1]) == 1) -> [0b10110001, 0b10000000]
        let flips = [1, -1, 1, 1, -1, -1, -1, 1, 1];
        assert_eq!(pack_flips(&flips), vec![0b1011_0001, 0b1000_0000]);
        assert_eq!(unpack_flips(&[0b1011_0001, 0x80], 9), Some(flips.to_vec()));
        assert_eq!(pack_flips(&[]), Vec::<u8>::new());
        assert_eq!(unpack_flips(&[0xff], 9), None);
        // Values from Python's zlib.crc32, and the classic CRC-32 check value.
        assert_eq!(flips_signature(b""), 0);
        assert_eq!(flips_signature(&[0x80]), 1_069_182_125);
        assert_eq!(flips_signature(&[0b1011_0001, 0x80]), 1_371_475_494);
        assert_eq!(flips_signature(b"123456789"), 0xCBF4_3926);
    }

    #[test]
    fn request_spsa_values_and_signature() {
        let spsa = setup();
        let mut rng = StdRng::seed_from_u64(7);
        let req = request_spsa(&spsa, &mut rng).expect("draw");
        let reply = &req.reply;
        assert!(reply.task_alive);
        assert_eq!(req.spsa_params.iter, 0);
        assert_eq!(reply.sig, flips_signature(&req.spsa_params.packed_flips));
        let flips: Vec<i8> = reply.w_params.iter().map(|w| w.flip).collect();
        assert_eq!(pack_flips(&flips), req.spsa_params.packed_flips);
        for ((w, b), p) in reply.w_params.iter().zip(&reply.b_params).zip(&spsa.params) {
            let c_k = p.c; // k = 1: 1^γ = 1
            let r_k = p.a / (spsa.stability + 1.0).powf(spsa.alpha) / (c_k * c_k);
            assert_eq!(w.c, c_k);
            assert!((w.r - r_k).abs() <= 1e-15 * r_k.abs());
            assert_eq!(w.name, b.name);
            let f = f64::from(w.flip);
            assert_eq!(w.value, (p.theta + c_k * f).clamp(p.min, p.max));
            assert_eq!(b.value, (p.theta - c_k * f).clamp(p.min, p.max));
        }
        // Wire shape: Fishtest's key names.
        let json = serde_json::to_value(reply).expect("json");
        assert!(json["w_params"][0].get("R").is_some());
        assert!(json["b_params"][0].get("R").is_none());
    }

    #[test]
    fn values_are_clipped_at_the_bounds() {
        let mut spsa = setup_spsa("P,0,0,1,5,0.002", &SpsaSettings::default(), 1000).expect("ok");
        spsa.params[0].theta = 0.0;
        let mut rng = StdRng::seed_from_u64(1);
        let req = request_spsa(&spsa, &mut rng).expect("draw");
        let (w, b) = (&req.reply.w_params[0], &req.reply.b_params[0]);
        let values = [w.value, b.value];
        assert!(values.contains(&0.0) && values.contains(&1.0));
    }

    fn result(wins: u64, losses: u64, draws: u64, sig: u32) -> SpsaResult {
        SpsaResult {
            num_games: wins + losses + draws,
            wins,
            losses,
            draws,
            sig: u64::from(sig),
        }
    }

    #[test]
    fn update_moves_theta_and_consumes_params() {
        let mut spsa = setup();
        let before = spsa.clone();
        let mut rng = StdRng::seed_from_u64(3);
        let req = request_spsa(&spsa, &mut rng).expect("draw");
        let mut stored = Some(req.spsa_params.clone());
        update_spsa(&mut spsa, &mut stored, &result(5, 2, 5, req.reply.sig)).expect("update");
        assert_eq!(stored, None);
        assert_eq!(spsa.iter, 6);
        for ((p, old), w) in spsa
            .params
            .iter()
            .zip(&before.params)
            .zip(&req.reply.w_params)
        {
            let want = old.theta + w.r * w.c * 3.0 * f64::from(w.flip);
            assert_eq!(p.theta, want.clamp(old.min, old.max));
        }
        // The same batch again: params are gone.
        assert_eq!(
            update_spsa(&mut spsa, &mut stored, &result(5, 2, 5, req.reply.sig)),
            Err(SpsaError::NoStoredParams)
        );
    }

    #[test]
    fn update_rebuilds_the_step_from_the_stored_iteration() {
        let mut spsa = setup();
        spsa.iter = 100;
        let mut rng = StdRng::seed_from_u64(11);
        let req = request_spsa(&spsa, &mut rng).expect("draw");
        // Other workers advance the run before this batch comes back.
        spsa.iter = 5000;
        let theta0 = spsa.params[0].theta;
        let mut stored = Some(req.spsa_params);
        update_spsa(&mut spsa, &mut stored, &result(3, 0, 1, req.reply.sig)).expect("update");
        let w = &req.reply.w_params[0];
        assert_eq!(
            spsa.params[0].theta,
            theta0 + w.r * w.c * 3.0 * f64::from(w.flip)
        );
        assert_eq!(spsa.iter, 5002);
    }

    #[test]
    fn update_errors_leave_the_run_alone() {
        let mut spsa = setup();
        let mut rng = StdRng::seed_from_u64(5);
        let req = request_spsa(&spsa, &mut rng).expect("draw");
        let snapshot = spsa.clone();

        // Schema-level failures do not consume the stored params.
        let mut stored = Some(req.spsa_params.clone());
        let mut bad = result(2, 2, 2, req.reply.sig);
        bad.num_games = 8;
        assert_eq!(
            update_spsa(&mut spsa, &mut stored, &bad),
            Err(SpsaError::GameCountMismatch {
                num_games: 8,
                sum: 6
            })
        );
        assert_eq!(
            update_spsa(&mut spsa, &mut stored, &result(2, 0, 1, req.reply.sig)),
            Err(SpsaError::OddGames(3))
        );
        let overflow = SpsaResult {
            num_games: 2,
            wins: u64::MAX,
            losses: 1,
            draws: 1,
            sig: 0,
        };
        assert!(matches!(
            update_spsa(&mut spsa, &mut stored, &overflow),
            Err(SpsaError::GameCountMismatch { .. })
        ));
        assert!(stored.is_some());

        // A wrong signature consumes them (like Fishtest) but changes nothing.
        let wrong = req.reply.sig.wrapping_add(1);
        assert_eq!(
            update_spsa(&mut spsa, &mut stored, &result(1, 1, 0, wrong)),
            Err(SpsaError::SigMismatch {
                expected: req.reply.sig,
                got: u64::from(wrong)
            })
        );
        assert_eq!(stored, None);
        assert_eq!(spsa, snapshot);

        // Truncated flips.
        let mut stored = Some(SpsaTaskParams {
            iter: 0,
            packed_flips: vec![],
        });
        assert_eq!(
            update_spsa(&mut spsa, &mut stored, &result(1, 1, 0, 0)),
            Err(SpsaError::FlipCountMismatch {
                stored: 0,
                params: 2
            })
        );
        assert_eq!(spsa, snapshot);
    }

    #[test]
    fn unknown_algorithm_is_refused() {
        let mut spsa = setup();
        spsa.algorithm = Some("sf-sgd".into());
        let mut rng = StdRng::seed_from_u64(0);
        assert_eq!(
            request_spsa(&spsa, &mut rng).err(),
            Some(SpsaError::UnknownAlgorithm("sf-sgd".into()))
        );
        spsa.algorithm = None; // legacy runs: classic
        assert!(request_spsa(&spsa, &mut rng).is_ok());
    }

    #[test]
    fn degenerate_step_is_an_error_not_nan() {
        let mut spsa = setup();
        spsa.params[0].c = 0.0;
        let mut rng = StdRng::seed_from_u64(0);
        assert!(matches!(
            request_spsa(&spsa, &mut rng),
            Err(SpsaError::DegenerateStep { .. })
        ));
    }

    #[test]
    fn history_is_sampled_once_per_period() {
        // 2 params, 400 games: num_iter 200, 100 samples, period 2 iterations.
        let mut spsa = setup_spsa(RAW, &SpsaSettings::default(), 400).expect("ok");
        assert_eq!(history_period(spsa.num_iter, 2), 2.0);
        let mut rng = StdRng::seed_from_u64(9);
        let mut lens = Vec::new();
        for games in [2u64, 2, 8, 2, 2] {
            let req = request_spsa(&spsa, &mut rng).expect("draw");
            let mut stored = Some(req.spsa_params);
            let res = SpsaResult {
                num_games: games,
                wins: games,
                losses: 0,
                draws: 0,
                sig: u64::from(req.reply.sig),
            };
            update_spsa(&mut spsa, &mut stored, &res).expect("update");
            lens.push(spsa.param_history.as_ref().map_or(0, Vec::len));
            // Each sample records the new theta and the step it was made with.
            if let Some(last) = spsa.param_history.as_ref().and_then(|h| h.last()) {
                assert_eq!(last[0].theta, spsa.params[0].theta);
                assert_eq!(last[0].c, req.reply.w_params[0].c);
                assert_eq!(last[0].r, req.reply.w_params[0].r);
            }
        }
        // iter: 1, 2, 6, 7, 8 -> iter/period: 0.5, 1, 3, 3.5, 4;
        // at most one sample per update, so it catches up on later ones.
        assert_eq!(lens, vec![0, 1, 2, 3, 4]);
        assert_eq!(history_period(1000, 200), 20.0);
        assert_eq!(history_period(1000, 5000), 1000.0);
        assert_eq!(history_period(0, 5), 0.0);
    }
}

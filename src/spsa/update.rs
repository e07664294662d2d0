//! The running SPSA tuning: the `request_spsa` draw ([`request_spsa`]: a ±1 flip per
//! parameter, the white/black values, the task's `spsa_params`, packed as numpy does
//! ([`pack_flips`]), and their CRC32 signature) and the update a worker's batch applies
//! ([`update_spsa`]: the signature check, the step rebuilt from the stored iteration and
//! flips, theta clipped to its bounds, the `param_history` sampling), with their errors
//! ([`SpsaError`]).
//!
//! Must not: do I/O, touch the store or know HTTP; draw randomness other than from the
//! caller's RNG; leave the run changed when an update fails.
//!
//! Files: `update/tests.rs`: the unit tests.

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
mod tests;

//! Classic SPSA tuner mathematics, as Fishtest runs it.
//!
//! This module owns:
//! - the serde shape of a run's `args.spsa` record ([`SpsaArgs`]) and of a
//!   task's `spsa_params` record ([`SpsaTaskParams`]), with Fishtest's field
//!   names;
//! - parsing the submit form's `raw_params` text and building a fresh
//!   `args.spsa` ([`setup_spsa`]);
//! - the `request_spsa` draw ([`request_spsa`]): random ±1 flips, the
//!   white/black parameter values, the `spsa_params` to store on the task and
//!   the CRC32 signature the worker echoes back;
//! - the update that `update_task` applies with a worker's `spsa` block
//!   ([`update_spsa`]), including the `param_history` sampling;
//! - the per-run core cap for SPSA runs ([`max_cores`]).
//!
//!
//! Layout: this file holds the constants, the stored records (shared by both
//! halves) and the core cap, and re-exports the rest so that callers name
//! everything `crate::spsa::…`; `setup.rs` parses `raw_params` and builds a
//! fresh `args.spsa`; `update.rs` draws and signs the flips and applies a
//! worker's batch (with the history sampling).
//! It must not do I/O, be async, touch the store or know about HTTP: every
//! function is a pure computation on the values it is handed (plus the
//! caller's RNG), so that the server can call it under its per-run lock and
//! persist the result however it likes.
//!
//! Numbers follow Fishtest's Python formulas in the same operation order, so
//! that a run moved between the two servers evolves identically.

mod setup;
mod update;

pub use setup::{ParamsError, RawParam, SpsaSettings, Stability, parse_raw_params, setup_spsa};
pub use update::{
    BlackParam, SpsaError, SpsaReply, SpsaRequest, WhiteParam, flips_signature, history_period,
    pack_flips, request_spsa, unpack_flips, update_spsa, validate_result,
};

use serde::{Deserialize, Serialize, Serializer};

/// The only algorithm this module implements. Fishtest writes it into new
/// runs; older runs have no `algorithm` key and are classic too.
pub const CLASSIC_ALGORITHM: &str = "classic";
/// Default `A` ratio of the submit form: `A = int(ratio · num_games / 2)`.
pub const DEFAULT_A_RATIO: f64 = 0.1;
/// Default learning-rate decay exponent α of the submit form.
pub const DEFAULT_ALPHA: f64 = 0.602;
/// Default perturbation decay exponent γ of the submit form.
pub const DEFAULT_GAMMA: f64 = 0.101;
/// Core budget of an SPSA run: at most `SPSA_CORE_BUDGET / √params` cores.
pub const SPSA_CORE_BUDGET: f64 = 200_000.0;

// ---------------------------------------------------------------------------
// Stored records
// ---------------------------------------------------------------------------

/// One tuned parameter inside `args.spsa.params`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpsaParam {
    pub name: String,
    pub start: f64,
    pub min: f64,
    pub max: f64,
    /// Perturbation size wanted at the last iteration.
    pub c_end: f64,
    /// Learning rate wanted at the last iteration.
    pub r_end: f64,
    /// `c_end · num_iter^γ`: the perturbation scale at iteration 1.
    pub c: f64,
    /// `r_end · c_end²`.
    pub a_end: f64,
    /// `a_end · (A + num_iter)^α`.
    pub a: f64,
    /// Current estimate; always within `[min, max]`.
    pub theta: f64,
}

/// One parameter's sample in `param_history`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistoryEntry {
    pub theta: f64,
    #[serde(rename = "R")]
    pub r: f64,
    pub c: f64,
}

/// A run's `args.spsa` record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpsaArgs {
    /// `"classic"` or absent (older runs); anything else is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub algorithm: Option<String>,
    /// Fishtest's `A` (the stability constant). Fishtest stores it as an
    /// int; we keep an `f64` so that odd legacy documents still load, and we
    /// write it back as an integer whenever it is integral.
    #[serde(rename = "A", serialize_with = "serialize_integral_f64")]
    pub stability: f64,
    pub alpha: f64,
    pub gamma: f64,
    /// The submit form's text, kept verbatim for the modify form.
    pub raw_params: String,
    /// Iterations done so far (one iteration = one game pair).
    pub iter: u64,
    /// Planned iterations: `num_games / 2`.
    pub num_iter: u64,
    pub params: Vec<SpsaParam>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub param_history: Option<Vec<Vec<HistoryEntry>>>,
}

/// A task's `spsa_params` record: what `request_spsa` handed out, so that the
/// next update can rebuild exactly the same step.
///
/// `packed_flips` is numpy's `packbits` of `flips == +1`: one bit per param,
/// most significant bit first, bit 1 meaning `+1`, the last byte padded with
/// zero bits. Fishtest stores it as BSON binary; here it is a `Vec<u8>`,
/// which serde_json writes as a list of ints — the same shape as Fishtest's
/// `/api/get_task` output. A store that wants a blob can encode the bytes
/// itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpsaTaskParams {
    pub iter: u64,
    pub packed_flips: Vec<u8>,
}

/// The `spsa` block of an `update_task` (and of a later `request_spsa`):
/// this batch's results only, plus the echoed signature.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpsaResult {
    pub num_games: u64,
    pub wins: u64,
    pub losses: u64,
    pub draws: u64,
    /// Fishtest reads a missing `sig` as 0, which then fails the check.
    #[serde(default)]
    pub sig: u64,
}

/// Fishtest stores `A` as a Python int; writing `10.0` would turn it into a
/// float there and break its `{A:d}` formatting, so integral values go out as
/// integers. (Also the run's `throughput` and `priority`, ints in Fishtest.)
pub fn serialize_integral_f64<S: Serializer>(
    value: &f64,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    // 2^53: beyond it not every integer is representable, so stay a float.
    const EXACT_INT_LIMIT: f64 = 9_007_199_254_740_992.0;
    if value.is_finite() && value.fract() == 0.0 && value.abs() <= EXACT_INT_LIMIT {
        // The guard above makes this cast exact.
        serializer.serialize_i64(*value as i64)
    } else {
        serializer.serialize_f64(*value)
    }
}

// ---------------------------------------------------------------------------
// Scheduling cap
// ---------------------------------------------------------------------------

/// Most cores an SPSA run with `n_params` parameters may hold:
/// `200000 / √n_params` (infinite for a run without parameters).
pub fn max_cores(n_params: usize) -> f64 {
    if n_params == 0 {
        return f64::INFINITY;
    }
    SPSA_CORE_BUDGET / (n_params as f64).sqrt()
}

/// `request_task`'s SPSA filter: the run is skipped once the cores it already
/// holds exceed [`max_cores`] (the check is on the run before the new
/// worker's cores are added, as in Fishtest).
pub fn core_limit_reached(run_cores: u64, n_params: usize) -> bool {
    run_cores as f64 > max_cores(n_params)
}

// ---------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use super::*;

    pub(super) const RAW: &str = "Foo,100,0,200,10,0.0020\nBar,-5.5,-10,10,1.5,0.002\n";

    pub(super) fn setup() -> SpsaArgs {
        setup_spsa(RAW, &SpsaSettings::default(), 60_000).expect("valid setup")
    }

    #[test]
    fn core_cap() {
        assert_eq!(max_cores(1), 200_000.0);
        assert_eq!(max_cores(4), 100_000.0);
        assert_eq!(max_cores(0), f64::INFINITY);
        assert!(!core_limit_reached(100_000, 4));
        assert!(core_limit_reached(100_001, 4));
    }

    #[test]
    fn json_round_trip_uses_fishtest_names() {
        let mut spsa = setup();
        spsa.param_history = Some(vec![vec![HistoryEntry {
            theta: 1.0,
            r: 0.5,
            c: 2.0,
        }]]);
        let json = serde_json::to_value(&spsa).expect("ser");
        assert_eq!(json["A"], serde_json::json!(3000));
        assert!(json["A"].is_u64() || json["A"].is_i64());
        assert_eq!(json["param_history"][0][0]["R"], serde_json::json!(0.5));
        assert_eq!(json["params"][0]["c_end"], serde_json::json!(10.0));
        let back: SpsaArgs = serde_json::from_value(json).expect("de");
        assert_eq!(back, spsa);

        // A legacy document: no algorithm, no history, A written as a float.
        let legacy = serde_json::json!({
            "A": 3000.0, "alpha": 0.602, "gamma": 0.101, "raw_params": "",
            "iter": 0, "num_iter": 100, "params": []
        });
        let spsa: SpsaArgs = serde_json::from_value(legacy).expect("legacy");
        assert_eq!(spsa.algorithm, None);
        assert_eq!(spsa.param_history, None);
        let out = serde_json::to_value(&spsa).expect("ser");
        assert!(out.get("algorithm").is_none() && out.get("param_history").is_none());

        let tp = SpsaTaskParams {
            iter: 4,
            packed_flips: vec![0x80, 0],
        };
        assert_eq!(
            serde_json::to_value(&tp).expect("ser"),
            serde_json::json!({"iter": 4, "packed_flips": [128, 0]})
        );
        let r: SpsaResult = serde_json::from_value(
            serde_json::json!({"num_games": 2, "wins": 1, "losses": 0, "draws": 1}),
        )
        .expect("no sig");
        assert_eq!(r.sig, 0);
    }
}

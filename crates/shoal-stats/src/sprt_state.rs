//! The SPRT state machine of a run: the record stored as `args.sprt`
//! ([`SprtRecord`], built by Fishtest's `SPRT(...)`) and its update after
//! every batch of results ([`update_sprt`], Fishtest's `update_SPRT`), with
//! the Siegmund overshoot correction and the audit fields `lost_samples` and
//! `illegal_update`.
//!
//! The record's serde field names are Fishtest's, so it can be stored in and
//! read from run documents unchanged. This module owns the decision
//! (`state`); it must not do I/O, be async, log or panic. Unlike the Python
//! original, which mutates the dict in place and can leave it half-updated
//! when it raises, [`update_sprt`] changes nothing when it returns an error.

use serde::{Deserialize, Serialize, Serializer};

use super::elo::{bayeselo_to_elo, draw_elo_calc};
use super::llr::{llr_logistic, llr_normalized};
use super::pdf::regularize;
use super::pyfloat;
use super::{StatsError, StatsResult};

/// The Elo model of an SPRT's bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum EloModel {
    /// Old-style BayesElo bounds; converted to logistic with a drawelo
    /// estimated from the data at every update.
    #[serde(rename = "BayesElo")]
    BayesElo,
    /// Logistic Elo: bounds on the expected score.
    #[serde(rename = "logistic")]
    Logistic,
    /// Normalized Elo: bounds on the t-value (mean − ½)/σ.
    #[serde(rename = "normalized")]
    Normalized,
}

impl EloModel {
    /// Fishtest's spelling (`"BayesElo"`, `"logistic"`, `"normalized"`).
    pub fn as_str(self) -> &'static str {
        match self {
            EloModel::BayesElo => "BayesElo",
            EloModel::Logistic => "logistic",
            EloModel::Normalized => "normalized",
        }
    }

    /// The brackets Fishtest writes a model's bounds in: BayesElo `[…]`, logistic `{…}`,
    /// normalized `<…>`.
    pub fn brackets(self) -> (char, char) {
        match self {
            EloModel::BayesElo => ('[', ']'),
            EloModel::Logistic => ('{', '}'),
            EloModel::Normalized => ('<', '>'),
        }
    }

    /// Parses Fishtest's spelling; `None` for anything else (the reference
    /// asserts).
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "BayesElo" => Some(EloModel::BayesElo),
            "logistic" => Some(EloModel::Logistic),
            "normalized" => Some(EloModel::Normalized),
            _ => None,
        }
    }
}

/// The decision of an SPRT: stored as `""`, `"accepted"` or `"rejected"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum SprtState {
    /// Still running (`""`).
    #[default]
    #[serde(rename = "")]
    Running,
    /// H1 accepted: the LLR passed the upper bound.
    #[serde(rename = "accepted")]
    Accepted,
    /// H0 accepted (the patch is rejected): the LLR passed the lower bound.
    #[serde(rename = "rejected")]
    Rejected,
}

impl SprtState {
    /// Fishtest's spelling.
    pub fn as_str(self) -> &'static str {
        match self {
            SprtState::Running => "",
            SprtState::Accepted => "accepted",
            SprtState::Rejected => "rejected",
        }
    }
}

/// Siegmund overshoot bookkeeping (`sprt.overshoot`).
///
/// `m0`/`sq0` accumulate the sum and sum of squares of the LLR's new minima
/// (`ref0`), `m1`/`sq1` those of its new maxima (`ref1`), over exact batch
/// steps; the expected overshoot is sq/(2m).
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Overshoot {
    /// Sample count (games, or game pairs for pentanomial) at the last update.
    pub last_update: u64,
    /// Samples that arrived outside exact batch steps (audit only).
    pub skipped_updates: u64,
    /// Running minimum of the LLR since the last reset.
    #[serde(serialize_with = "zero_as_int")]
    pub ref0: f64,
    /// Sum of the downward jumps of `ref0`.
    #[serde(serialize_with = "zero_as_int")]
    pub m0: f64,
    /// Sum of the squares of those jumps.
    #[serde(serialize_with = "zero_as_int")]
    pub sq0: f64,
    /// Running maximum of the LLR since the last reset.
    #[serde(serialize_with = "zero_as_int")]
    pub ref1: f64,
    /// Sum of the upward jumps of `ref1`.
    #[serde(serialize_with = "zero_as_int")]
    pub m1: f64,
    /// Sum of the squares of those jumps.
    #[serde(serialize_with = "zero_as_int")]
    pub sq1: f64,
}

/// A zero as Python's int `0`, any other value as a float: Fishtest's `SPRT()` starts `llr`
/// and the overshoot sums at the int 0, and they stay ints until an update moves them, so a
/// zero goes out (and through the read API) as Fishtest shows it.
fn zero_as_int<S: Serializer>(value: &f64, serializer: S) -> Result<S::Ok, S::Error> {
    if *value == 0.0 && value.is_sign_positive() {
        serializer.serialize_i64(0)
    } else {
        serializer.serialize_f64(*value)
    }
}

fn default_batch_size() -> u64 {
    1
}

/// A run's `args.sprt` record, field for field as Fishtest stores it.
///
/// `overshoot` disappears for good once the batch contract is broken
/// (`illegal_update`) or results were purged (`lost_samples`); the optional
/// fields are omitted from the serialized form when absent, as in Fishtest.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SprtRecord {
    /// Type I error bound.
    pub alpha: f64,
    /// Type II error bound.
    pub beta: f64,
    /// Lower Elo bound (H0), in `elo_model` units.
    pub elo0: f64,
    /// Upper Elo bound (H1), in `elo_model` units.
    pub elo1: f64,
    /// Model of `elo0`/`elo1`.
    pub elo_model: EloModel,
    /// The decision after the last update.
    #[serde(default)]
    pub state: SprtState,
    /// The exact LLR after the last update.
    #[serde(default, serialize_with = "zero_as_int")]
    pub llr: f64,
    /// Samples per update (game pairs for pentanomial runs); Fishtest reads it
    /// with a default of 1.
    #[serde(default = "default_batch_size")]
    pub batch_size: u64,
    /// ln(β/(1−α)).
    pub lower_bound: f64,
    /// ln((1−β)/α).
    pub upper_bound: f64,
    /// Overshoot bookkeeping; absent once the batch contract was violated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overshoot: Option<Overshoot>,
    /// Set when the sample count went down (a purge): how many were lost.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lost_samples: Option<u64>,
    /// Set when the sample count was not a multiple of `batch_size`: the count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub illegal_update: Option<u64>,
}

impl SprtRecord {
    /// The bounds as Fishtest writes them (`format_bounds`): `elo0,elo1` with two decimals in
    /// the model's brackets, e.g. `<0.00,2.00>`.
    pub fn bounds_text(&self) -> String {
        let (open, close) = self.elo_model.brackets();
        format!("{open}{:.2},{:.2}{close}", self.elo0, self.elo1)
    }

    /// Fishtest's `SPRT(alpha, beta, elo0, elo1, elo_model, batch_size)`: a
    /// fresh record with state `""`, llr 0, the bounds ln(β/(1−α)) and
    /// ln((1−β)/α), and a zeroed overshoot record.
    pub fn new(
        alpha: f64,
        beta: f64,
        elo0: f64,
        elo1: f64,
        elo_model: EloModel,
        batch_size: u64,
    ) -> StatsResult<Self> {
        let lower_bound = pyfloat::ln(pyfloat::div(beta, 1.0 - alpha, "SPRT with alpha = 1")?)?;
        let upper_bound = pyfloat::ln(pyfloat::div(1.0 - beta, alpha, "SPRT with alpha = 0")?)?;
        Ok(SprtRecord {
            alpha,
            beta,
            elo0,
            elo1,
            elo_model,
            state: SprtState::Running,
            llr: 0.0,
            batch_size,
            lower_bound,
            upper_bound,
            overshoot: Some(Overshoot::default()),
            lost_samples: None,
            illegal_update: None,
        })
    }
}

/// A run's cumulative results as `update_SPRT` and `SPRT_elo` read them:
/// game counts and, for pentanomial runs, the five pair counts
/// `[LL, LD+DL, LW+DD+WL, DW+WD, WW]`. Absent counts read as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Results {
    /// Games won.
    #[serde(default)]
    pub wins: u64,
    /// Games lost.
    #[serde(default)]
    pub losses: u64,
    /// Games drawn.
    #[serde(default)]
    pub draws: u64,
    /// Game-pair counts, when the run records them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pentanomial: Option<[u64; 5]>,
}

impl Results {
    /// `[losses, draws, wins]` as floats (unregularised).
    pub fn trinomial(&self) -> [f64; 3] {
        [self.losses as f64, self.draws as f64, self.wins as f64]
    }

    /// The pentanomial counts as floats, if present.
    pub fn pentanomial_f64(&self) -> Option<[f64; 5]> {
        self.pentanomial.map(|p| p.map(|x| x as f64))
    }

    /// Total games (saturating).
    pub fn games(&self) -> u64 {
        self.wins
            .saturating_add(self.losses)
            .saturating_add(self.draws)
    }
}

/// drawelo of the regularised `[L, D, W]` of `r`, as both `update_SPRT` and
/// `SPRT_elo` estimate it "out of sample".
pub(crate) fn drawelo_of(r: &Results) -> StatsResult<f64> {
    let reg = regularize(&r.trinomial());
    draw_elo_calc([reg[0], reg[1], reg[2]])
}

/// Fishtest's `update_SPRT(R, sprt)`: recomputes the LLR of the cumulative
/// results `r`, updates the overshoot bookkeeping and the decision.
///
/// Steps, as Fishtest's: BayesElo bounds become logistic with drawelo of
/// the regularised `[L, D, W]`; the data is the pentanomial if present, else
/// the raw trinomial; a count that is not a multiple of `batch_size` sets
/// `illegal_update` and drops `overshoot`; a count below `last_update` sets
/// `lost_samples` and drops `overshoot`; an exact batch step updates
/// ref/m/sq; any other step resets the refs and adds to `skipped_updates`.
/// Finally `state` = rejected if llr < lower + o0, accepted if
/// llr > upper − o1, else running, with o0 = −sq0/(2·m0), o1 = sq1/(2·m1).
///
/// On error (`batch_size` 0, or an LLR the reference cannot compute) the
/// record is left unchanged.
pub fn update_sprt(r: &Results, sprt: &mut SprtRecord) -> StatsResult<()> {
    let mut elo0 = sprt.elo0;
    let mut elo1 = sprt.elo1;
    let mut model = sprt.elo_model;
    if model == EloModel::BayesElo {
        let drawelo = drawelo_of(r)?;
        elo0 = bayeselo_to_elo(elo0, drawelo)?;
        elo1 = bayeselo_to_elo(elo1, drawelo)?;
        model = EloModel::Logistic;
    }

    let (data, num_samples): (Vec<f64>, u64) = match r.pentanomial {
        Some(p) => (
            p.iter().map(|&x| x as f64).collect(),
            p.iter().fold(0u64, |acc, &x| acc.saturating_add(x)),
        ),
        None => (r.trinomial().to_vec(), r.games()),
    };

    if sprt.batch_size == 0 {
        return Err(StatsError::DivisionByZero("SPRT batch_size is 0"));
    }
    let illegal = num_samples % sprt.batch_size != 0;

    let llr = match model {
        EloModel::Normalized => llr_normalized(elo0, elo1, &data)?,
        _ => llr_logistic(elo0, elo1, &data)?,
    };

    // Nothing below can fail: commit.
    if illegal {
        sprt.illegal_update = Some(num_samples);
        sprt.overshoot = None;
    }
    sprt.llr = llr;

    if let Some(o) = sprt.overshoot.as_mut() {
        if num_samples < o.last_update {
            // A purge removed samples: the overshoot history no longer
            // describes this data.
            sprt.lost_samples = Some(o.last_update - num_samples);
            sprt.overshoot = None;
        } else {
            if num_samples == o.last_update {
                // Same data again: nothing to record.
            } else if num_samples == o.last_update.saturating_add(sprt.batch_size) {
                if llr < o.ref0 {
                    let delta = llr - o.ref0;
                    o.m0 += delta;
                    o.sq0 += delta * delta;
                    o.ref0 = llr;
                }
                if llr > o.ref1 {
                    let delta = llr - o.ref1;
                    o.m1 += delta;
                    o.sq1 += delta * delta;
                    o.ref1 = llr;
                }
            } else {
                // Updates were missed: restart the running extremes here.
                o.ref0 = llr;
                o.ref1 = llr;
                o.skipped_updates = o
                    .skipped_updates
                    .saturating_add((num_samples - o.last_update) - 1);
            }
            o.last_update = num_samples;
        }
    }

    let (o0, o1) = match &sprt.overshoot {
        Some(o) => (
            if o.m0 != 0.0 {
                -o.sq0 / o.m0 / 2.0
            } else {
                0.0
            },
            if o.m1 != 0.0 { o.sq1 / o.m1 / 2.0 } else { 0.0 },
        ),
        None => (0.0, 0.0),
    };

    sprt.state = if sprt.llr < sprt.lower_bound + o0 {
        SprtState::Rejected
    } else if sprt.llr > sprt.upper_bound - o1 {
        SprtState::Accepted
    } else {
        SprtState::Running
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh(batch: u64) -> SprtRecord {
        SprtRecord::new(0.05, 0.05, 0.0, 2.0, EloModel::Logistic, batch).unwrap()
    }

    fn penta(p: [u64; 5]) -> Results {
        Results {
            pentanomial: Some(p),
            ..Results::default()
        }
    }

    #[test]
    fn constructor_bounds() {
        let s = fresh(8);
        assert_eq!(s.lower_bound, -2.944_438_979_166_440_3);
        assert_eq!(s.upper_bound, 2.944_438_979_166_440_3);
        assert_eq!(s.overshoot, Some(Overshoot::default()));
        assert!(SprtRecord::new(0.0, 0.05, 0.0, 2.0, EloModel::Logistic, 1).is_err());
    }

    #[test]
    fn illegal_update_drops_overshoot_for_good() {
        let mut s = fresh(2);
        update_sprt(&penta([1, 1, 1, 0, 0]), &mut s).unwrap();
        assert_eq!(s.illegal_update, Some(3));
        assert!(s.overshoot.is_none());
        update_sprt(&penta([1, 1, 1, 1, 0]), &mut s).unwrap();
        assert_eq!(s.illegal_update, Some(3));
        assert!(s.overshoot.is_none());
    }

    #[test]
    fn purge_sets_lost_samples() {
        let mut s = fresh(1);
        update_sprt(&penta([1, 2, 3, 2, 1]), &mut s).unwrap();
        update_sprt(&penta([1, 2, 2, 2, 1]), &mut s).unwrap();
        assert_eq!(s.lost_samples, Some(1));
        assert!(s.overshoot.is_none());
    }

    #[test]
    fn batch_steps_and_skips() {
        let mut s = fresh(2);
        update_sprt(&penta([0, 0, 2, 0, 0]), &mut s).unwrap();
        let o = s.overshoot.unwrap();
        assert_eq!(o.last_update, 2);
        assert_eq!(o.skipped_updates, 0);
        update_sprt(&penta([0, 0, 2, 0, 0]), &mut s).unwrap();
        assert_eq!(s.overshoot.unwrap(), o);
        update_sprt(&penta([0, 0, 2, 4, 0]), &mut s).unwrap();
        let o = s.overshoot.unwrap();
        assert_eq!(o.skipped_updates, 3);
        assert_eq!(o.ref0, s.llr);
        assert_eq!(o.ref1, s.llr);
    }

    #[test]
    fn zero_batch_size_is_an_error_and_changes_nothing() {
        let mut s = fresh(0);
        let before = s.clone();
        assert!(update_sprt(&penta([1, 1, 1, 1, 1]), &mut s).is_err());
        assert_eq!(s, before);
    }

    /// The keys of a serialized JSON object, sorted.
    fn keys(v: &serde_json::Value) -> Vec<String> {
        let mut k: Vec<String> = v
            .as_object()
            .expect("a JSON object")
            .keys()
            .cloned()
            .collect();
        k.sort();
        k
    }

    fn sorted(names: &[&str]) -> Vec<String> {
        let mut v: Vec<String> = names.iter().map(|s| s.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn serde_names_are_fishtests() {
        // Fishtest's `SPRT(...)` dict, key for key (stat_util.py).
        let s = fresh(8);
        let v = serde_json::to_value(&s).expect("serialize");
        assert_eq!(
            keys(&v),
            sorted(&[
                "alpha",
                "beta",
                "elo0",
                "elo1",
                "elo_model",
                "state",
                "llr",
                "batch_size",
                "lower_bound",
                "upper_bound",
                "overshoot",
            ])
        );
        assert_eq!(
            keys(&v["overshoot"]),
            sorted(&[
                "last_update",
                "skipped_updates",
                "ref0",
                "m0",
                "sq0",
                "ref1",
                "m1",
                "sq1",
            ])
        );
        assert_eq!(v["elo_model"], "logistic");
        assert_eq!(v["state"], "");
        assert_eq!(v["batch_size"], 8);
        for (model, name) in [
            (EloModel::BayesElo, "BayesElo"),
            (EloModel::Logistic, "logistic"),
            (EloModel::Normalized, "normalized"),
        ] {
            assert_eq!(serde_json::to_value(model).expect("model"), name);
        }
        for (state, name) in [
            (SprtState::Running, ""),
            (SprtState::Accepted, "accepted"),
            (SprtState::Rejected, "rejected"),
        ] {
            assert_eq!(serde_json::to_value(state).expect("state"), name);
        }
        // The audit fields appear under their Fishtest names once set, and `overshoot` goes.
        let mut s = fresh(2);
        update_sprt(&penta([1, 1, 1, 0, 0]), &mut s).unwrap();
        let v = serde_json::to_value(&s).expect("serialize");
        assert!(v.get("illegal_update").is_some(), "{v}");
        assert!(v.get("overshoot").is_none(), "{v}");
        let mut s = fresh(1);
        update_sprt(&penta([1, 2, 3, 2, 1]), &mut s).unwrap();
        update_sprt(&penta([1, 2, 2, 2, 1]), &mut s).unwrap();
        let v = serde_json::to_value(&s).expect("serialize");
        assert_eq!(v["lost_samples"], 1, "{v}");
        // A record as Fishtest stores it reads back (llr as the integer 0, as SPRT() writes).
        let stored = serde_json::json!({
            "alpha": 0.05, "beta": 0.05, "elo0": 0.0, "elo1": 2.0, "elo_model": "normalized",
            "state": "rejected", "llr": 0, "batch_size": 8,
            "lower_bound": -2.944_438_979_166_440_3, "upper_bound": 2.944_438_979_166_440_3,
            "overshoot": {"last_update": 0, "skipped_updates": 0, "ref0": 0, "m0": 0,
                          "sq0": 0, "ref1": 0, "m1": 0, "sq1": 0},
        });
        let r: SprtRecord = serde_json::from_value(stored).expect("Fishtest's record parses");
        assert_eq!(r.elo_model, EloModel::Normalized);
        assert_eq!(r.state, SprtState::Rejected);
        assert_eq!(r.batch_size, 8);
        assert_eq!(r.overshoot, Some(Overshoot::default()));
        assert_eq!(EloModel::parse("BayesElo"), Some(EloModel::BayesElo));
        assert_eq!(EloModel::parse("nope"), None);
        assert_eq!(SprtState::Running.as_str(), "");
    }
}

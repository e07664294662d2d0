//! The `[groups]` settings: how a test group shares its games among its takes and when a take
//! is stopped early (docs/test-groups.md explains each choice).
//!
//! Owns: the knobs, their defaults and their rules. Must not: compute anything (the groups
//! component, `src/groups/`, reads these).

use serde::{Deserialize, Serialize};

/// How a group's games are shared among its running takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum GroupRule {
    /// Each running take's share: an equal part of `floor`, plus `1 - floor` in proportion
    /// to the posterior probability that it is the best take.
    Best,
    /// Every running take the same share (as independent tests; for comparisons).
    Equal,
}

impl GroupRule {
    /// The setting's value.
    pub fn name(self) -> &'static str {
        match self {
            GroupRule::Best => "best",
            GroupRule::Equal => "equal",
        }
    }
}

/// `[groups]` in `settings.toml`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct GroupSettings {
    /// The allocation rule.
    pub rule: GroupRule,
    /// The part of a group's games shared equally among its running takes whatever their
    /// results (0..=1): no take starves.
    pub floor: f64,
    /// The prior's standard deviation, in Elo, of a take's strength around the base: how much
    /// early games are trusted (small: shares move only after many games).
    pub prior_elo_sd: f64,
    /// Whether a take that cannot realistically overtake the leader is stopped early (as
    /// superseded, never failed).
    pub stop_hopeless: bool,
    /// "Cannot realistically overtake": the posterior probability that the take is better
    /// than the leader is below this.
    pub hopeless_below: f64,
    /// Both the take and the leader have played at least this many games before a take is
    /// judged hopeless.
    pub hopeless_min_games: u64,
}

impl Default for GroupSettings {
    fn default() -> Self {
        GroupSettings {
            rule: GroupRule::Best,
            floor: 0.25,
            prior_elo_sd: 5.0,
            stop_hopeless: true,
            hopeless_below: 0.001,
            hopeless_min_games: 20_000,
        }
    }
}

impl GroupSettings {
    /// Every rule a value must satisfy: `Err((key, rule))`.
    pub fn validate(&self) -> Result<(), (&'static str, &'static str)> {
        if !self.floor.is_finite() || !(0.0..=1.0).contains(&self.floor) {
            return Err(("groups.floor", "must be between 0 and 1"));
        }
        if !self.prior_elo_sd.is_finite() || !(0.1..=1000.0).contains(&self.prior_elo_sd) {
            return Err(("groups.prior_elo_sd", "must be between 0.1 and 1000"));
        }
        if !self.hopeless_below.is_finite() || !(0.0..0.5).contains(&self.hopeless_below) {
            return Err(("groups.hopeless_below", "must be at least 0 and below 0.5"));
        }
        Ok(())
    }
}

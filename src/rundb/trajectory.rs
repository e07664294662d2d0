//! A run's trajectory: its cumulative results (and, for an SPRT, its LLR) sampled against
//! games played as the run progresses, for the charts of the run and statistics pages.
//!
//! Owns: [`Trajectory`] (stored in the run document under `trajectory`, a field Fishtest does
//! not have), the sampling rule and the decimation that keeps it bounded, and what an update
//! journals of it (its patch keys and their replay, [`Trajectory::journal_into`],
//! [`apply_patch_key`]).
//! Must not: allocate once full, compute statistics (the charts do that outside the run's
//! lock, from the stored counts), do I/O. `record` runs inside update_task's critical
//! section: it is a comparison and, at most, one push into a vector whose capacity never
//! grows past [`MAX_POINTS`] (decimation is an in-place `retain`).
//!
//! Sampling: a point is kept when the run has played at least `stride` games more than at
//! the last point (the newest point is otherwise overwritten, so the last point always holds
//! the current totals). When [`MAX_POINTS`] are held, every other point is dropped and the
//! stride doubles, so a run of any length keeps between `MAX_POINTS / 2` and `MAX_POINTS`
//! points spread evenly over its games. A purge that lowers the totals drops the points past
//! the new total.
//!
//! Where it begins: a run created here records from its first update, so its history starts
//! at the origin (0 games, LLR 0). A run that already had games when recording began (one
//! imported from Fishtest, which keeps no such history) records the totals it had as its
//! first point and `since` = those games: the charts draw from there, never a line from zero.
//!
//! The journal: every acknowledged update must survive `kill -9`, its samples included, but
//! the whole trajectory in every update's patch would make the journal several times heavier
//! (measured by `cache::tests::a_trajectory_delta_is_a_small_part_of_a_patch`: a mid-run SPRT
//! patch is about 2.2 KB; the trajectory is 6 KB at 70 points, 11 KB full). So an update
//! journals only what it changed: the point it overwrote or pushed (`trajectory.points.<i>`)
//! and the stride (`trajectory.stride`), about 140 bytes; the whole trajectory (`trajectory`)
//! only when its shape changed (the first point, a decimation once per `MAX_POINTS / 2`
//! pushes, a purge's cut). Re-deriving the samples on replay from each patch's totals was the
//! other way; it would tie recovery to the sampling rule and to which commits record.
//! Each patch is relative to the state the previous patch left, which is what the store holds
//! at the run's stored seq (the trajectory changes only under the run's lock, right before a
//! `commit`), so replaying the entries in order rebuilds it exactly.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::store::Doc;

/// The most points a trajectory holds.
pub const MAX_POINTS: usize = 128;
/// The first stride in games (one game pair).
pub const FIRST_STRIDE: u64 = 2;
/// The patch key prefix of the journaled changes (`trajectory.stride`,
/// `trajectory.points.<i>`).
const KEY_PREFIX: &str = "trajectory.";

/// One sample: cumulative counts after `g` games.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Point {
    /// Games played.
    pub g: u64,
    pub w: u64,
    pub l: u64,
    pub d: u64,
    /// Pentanomial counts (all zero for runs without).
    #[serde(default)]
    pub p: [u64; 5],
    /// The SPRT's LLR at that moment (SPRT runs only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llr: Option<f64>,
}

/// What changed since the last journal patch (not stored).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
enum Unjournaled {
    #[default]
    Nothing,
    /// The points from this index on (and the stride).
    From(usize),
    /// The shape changed: the whole trajectory.
    All,
}

/// The sampled history of a run's results.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Trajectory {
    /// Games between two kept points (doubles at each decimation).
    #[serde(default)]
    pub stride: u64,
    /// The games the run had when recording began: 0 when the history covers the whole run;
    /// otherwise the first point holds the totals of that moment and nothing before it is
    /// known.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub since: u64,
    #[serde(default)]
    pub points: Vec<Point>,
    #[serde(skip)]
    unjournaled: Unjournaled,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Equal when the stored parts are (what is still to journal does not count).
impl PartialEq for Trajectory {
    fn eq(&self, other: &Self) -> bool {
        self.stride == other.stride && self.since == other.since && self.points == other.points
    }
}

impl Trajectory {
    pub fn is_empty(&self) -> bool {
        self.points.is_empty()
    }

    /// Whether the history covers the run from its first game.
    pub fn from_origin(&self) -> bool {
        self.since == 0
    }

    fn touched(&mut self, index: usize) {
        self.unjournaled = match self.unjournaled {
            Unjournaled::All => Unjournaled::All,
            Unjournaled::From(i) => Unjournaled::From(i.min(index)),
            Unjournaled::Nothing => Unjournaled::From(index),
        };
    }

    /// Records the run's totals after an update (cheap; see the module doc). `before` is the
    /// run as it was before the update: it becomes the first point when recording begins on
    /// a run that already has games.
    pub fn record(&mut self, before: Point, point: Point) {
        if self.stride == 0 {
            self.stride = FIRST_STRIDE;
        }
        if self.points.is_empty() {
            self.unjournaled = Unjournaled::All;
            if self.points.capacity() < MAX_POINTS {
                self.points.reserve_exact(MAX_POINTS);
            }
            if before.g > 0 {
                self.since = before.g;
                if before.g < point.g {
                    self.points.push(before);
                }
            }
        }
        // A purge lowered the totals: the points past them no longer describe this run.
        if self.points.last().is_some_and(|last| last.g > point.g) {
            self.points.retain(|p| p.g <= point.g);
            self.since = self.since.min(point.g);
            self.unjournaled = Unjournaled::All;
        }
        let n = self.points.len();
        let before_last = if n >= 2 { self.points[n - 2].g } else { 0 };
        match self.points.last_mut() {
            Some(last) if last.g == point.g => {
                *last = point;
                self.touched(n - 1);
            }
            // The newest point is still within a stride of the one before: move it forward.
            Some(last) if n >= 2 && last.g.saturating_sub(before_last) < self.stride => {
                *last = point;
                self.touched(n - 1);
            }
            _ => {
                if self.points.len() >= MAX_POINTS {
                    self.decimate();
                    self.unjournaled = Unjournaled::All;
                }
                if self.points.capacity() < MAX_POINTS {
                    let room = MAX_POINTS.saturating_sub(self.points.len());
                    self.points.reserve_exact(room);
                }
                self.points.push(point);
                self.touched(self.points.len() - 1);
            }
        }
    }

    /// Keeps every other point (the first one, the third, …; and the newest), doubles the
    /// stride. In place.
    fn decimate(&mut self) {
        let last = self.points.len().saturating_sub(1);
        let mut i = 0usize;
        self.points.retain(|_| {
            let keep = i.is_multiple_of(2) || i == last;
            i += 1;
            keep
        });
        self.stride = self.stride.saturating_mul(2);
    }

    /// Adds what changed since the last call to a journal patch (module doc: the newest
    /// point(s) and the stride, or the whole trajectory when its shape changed) and marks it
    /// journaled. Nothing when nothing changed.
    pub fn journal_into(&mut self, patch: &mut Doc) -> Result<(), serde_json::Error> {
        match self.unjournaled {
            Unjournaled::Nothing => {}
            Unjournaled::All => {
                patch.insert("trajectory".into(), serde_json::to_value(&*self)?);
            }
            Unjournaled::From(from) => {
                patch.insert(format!("{KEY_PREFIX}stride"), Value::from(self.stride));
                for (i, p) in self.points.iter().enumerate().skip(from) {
                    patch.insert(format!("{KEY_PREFIX}points.{i}"), serde_json::to_value(p)?);
                }
            }
        }
        self.unjournaled = Unjournaled::Nothing;
        Ok(())
    }
}

/// Applies one journaled trajectory key (`trajectory.stride`, `trajectory.since`,
/// `trajectory.points.<i>`) to a stored run document; `false` when `key` is not one (the
/// caller applies it as a plain field). A point past the end is pushed (entries are replayed
/// in order, so it is always the next one); a key it does not understand is ignored.
pub fn apply_patch_key(doc: &mut Doc, key: &str, value: &Value) -> bool {
    let Some(rest) = key.strip_prefix(KEY_PREFIX) else {
        return false;
    };
    let slot = doc
        .entry("trajectory")
        .or_insert_with(|| Value::Object(Doc::new()));
    if !slot.is_object() {
        *slot = Value::Object(Doc::new());
    }
    let Value::Object(t) = slot else {
        return true;
    };
    match rest.strip_prefix("points.") {
        None if rest == "stride" || rest == "since" => {
            t.insert(rest.to_string(), value.clone());
        }
        None => {}
        Some(index) => {
            let Ok(i) = index.parse::<usize>() else {
                return true;
            };
            let points = t
                .entry("points")
                .or_insert_with(|| Value::Array(Vec::new()));
            if !points.is_array() {
                *points = Value::Array(Vec::new());
            }
            if let Value::Array(list) = points {
                if i < list.len() {
                    list[i] = value.clone();
                } else if i == list.len() {
                    list.push(value.clone());
                }
            }
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rundb::model::Stats;

    fn stats(games: u64) -> Stats {
        Stats {
            wins: games / 2,
            losses: games / 4,
            draws: games - games / 2 - games / 4,
            ..Stats::default()
        }
    }

    fn at(games: u64, llr: Option<f64>) -> Point {
        Point::of(&stats(games), llr)
    }

    /// Records `games` after `prev` games.
    fn step(t: &mut Trajectory, prev: u64, games: u64, llr: Option<f64>) {
        t.record(at(prev, None), at(games, llr));
    }

    /// A stored run document's trajectory after the journal patches, replayed as recovery
    /// does (`cache::apply_patch`'s rule for these keys).
    fn replay(doc: &mut Doc, patch: &Doc) {
        for (k, v) in patch {
            if !apply_patch_key(doc, k, v) {
                doc.insert(k.clone(), v.clone());
            }
        }
    }

    fn stored(doc: &Doc) -> Trajectory {
        doc.get("trajectory")
            .map(|v| serde_json::from_value(v.clone()).unwrap())
            .unwrap_or_default()
    }

    #[test]
    fn grows_then_stays_bounded_and_spread() {
        let mut t = Trajectory::default();
        for k in 1..=10_000u64 {
            step(&mut t, 2 * (k - 1), 2 * k, None);
            assert!(t.points.len() <= MAX_POINTS);
            assert!(t.points.capacity() <= MAX_POINTS);
        }
        assert!(t.points.len() >= MAX_POINTS / 2, "{}", t.points.len());
        assert_eq!(
            t.points.last().map(|p| p.g),
            Some(20_000),
            "the newest point is current"
        );
        assert!(t.points.windows(2).all(|w| w[0].g < w[1].g));
        assert!(t.stride > FIRST_STRIDE);
        assert!(t.from_origin());
    }

    #[test]
    fn the_same_total_overwrites_and_a_purge_drops_later_points() {
        let mut t = Trajectory::default();
        step(&mut t, 0, 100, Some(0.5));
        step(&mut t, 100, 100, Some(0.7));
        assert_eq!(t.points.len(), 1);
        assert_eq!(t.points[0].llr, Some(0.7));
        step(&mut t, 100, 200, None);
        step(&mut t, 200, 300, None);
        step(&mut t, 300, 150, None);
        assert!(t.points.iter().all(|p| p.g <= 150));
        assert_eq!(t.points.last().map(|p| p.g), Some(150));
    }

    #[test]
    fn recording_that_begins_mid_run_starts_from_the_totals_it_found() {
        let mut t = Trajectory::default();
        t.record(at(6000, Some(1.0)), at(6016, Some(1.1)));
        assert_eq!(t.since, 6000);
        assert!(!t.from_origin());
        assert_eq!(t.points.first(), Some(&at(6000, Some(1.0))));
        assert_eq!(t.points.last().map(|p| p.g), Some(6016));
        // A run without games yet records from the origin.
        let mut fresh = Trajectory::default();
        step(&mut fresh, 0, 16, Some(0.1));
        assert!(fresh.from_origin());
        assert_eq!(fresh.points.len(), 1);
    }

    #[test]
    fn serde_round_trip_and_default() {
        let mut t = Trajectory::default();
        step(&mut t, 0, 64, Some(1.25));
        let v = serde_json::to_value(&t).unwrap();
        assert_eq!(v["points"][0]["llr"], serde_json::json!(1.25));
        assert!(v.get("since").is_none(), "0 is not written: {v}");
        let back: Trajectory = serde_json::from_value(v).unwrap();
        assert_eq!(back, t);
        let empty: Trajectory = serde_json::from_value(serde_json::json!({})).unwrap();
        assert!(empty.is_empty());
    }

    /// Every update's patch, replayed in order over the document the run started from, gives
    /// the trajectory in memory; the patches are a point or two, the whole trajectory only
    /// when its shape changes.
    #[test]
    fn journal_patches_replay_to_the_same_trajectory_and_stay_small() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for since in [0u64, 5000] {
            let mut t = Trajectory::default();
            let mut doc = Doc::new();
            let mut games = since;
            let (mut deltas, mut wholes) = (0usize, 0usize);
            for n in 0..3000 {
                let prev = games;
                games = if n % 700 == 699 {
                    // A purge took games away.
                    games - games / 10
                } else {
                    games + 2 * rng.random_range(0..20u64)
                };
                step(&mut t, prev, games, Some(games as f64 / 1e4));
                let mut patch = Doc::new();
                t.journal_into(&mut patch).unwrap();
                if patch.contains_key("trajectory") {
                    wholes += 1;
                } else {
                    deltas += 1;
                    let points = patch.keys().filter(|k| k.contains("points.")).count();
                    assert!(points <= 1, "{patch:?}");
                }
                replay(&mut doc, &patch);
                assert_eq!(stored(&doc), t, "after update {n}");
                // Nothing new: nothing to journal.
                let mut again = Doc::new();
                t.journal_into(&mut again).unwrap();
                assert!(again.is_empty());
            }
            assert!(wholes * 20 < deltas, "{wholes} whole, {deltas} deltas");
            assert_eq!(stored(&doc).since, since);
        }
    }

    #[test]
    fn unknown_or_broken_keys_are_ignored() {
        let mut doc = Doc::new();
        assert!(!apply_patch_key(&mut doc, "results", &Value::Null));
        assert!(apply_patch_key(
            &mut doc,
            "trajectory.points.x",
            &Value::Null
        ));
        assert!(apply_patch_key(
            &mut doc,
            "trajectory.points.5",
            &Value::from(1)
        ));
        assert!(apply_patch_key(
            &mut doc,
            "trajectory.other",
            &Value::from(1)
        ));
        assert_eq!(stored(&doc), Trajectory::default());
    }
}

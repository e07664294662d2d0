//! The vocabulary the server and its clients share: what both sides of the worker protocol
//! must agree on, defined once.
//!
//! Owns: the worker version the server announces, the stats shape a worker reports (`Stats`,
//! with its consistency rules and arithmetic), time-control parsing and the game-duration
//! estimate, the reference nps, and the game-count maxima (per run, per stats block).
//! The server (`shoal`, which re-exports this crate as `shoal::protocol`; `rundb` re-exports
//! these where the server has always named them) and its client, the fleet simulator
//! (`shoal-sim`), both depend on this crate; it depends on neither, so the simulator cannot
//! reach the server's internals. Beside the vocabulary, [`process`]: the open-files limit both
//! raise.
//! Must not: do I/O (but [`process`]'s limit), know HTTP, the store, or the server's state;
//! grow server-only rules (those stay in `rundb`).

pub mod process;

use serde::{Deserialize, Serialize};

/// The worker version this server announces (never above the official worker's).
pub const WORKER_VERSION: u32 = 325;

/// Reference nps of the time-control scaling.
pub const REFERENCE_NPS: f64 = 628_000.0;

/// SPRT runs are scheduled for at most this many games.
pub const SPRT_MAX_GAMES: u64 = 800_000;
/// Other runs: 1000 to 3.2M games in steps of 1000.
pub const MAX_GAMES: u64 = 3_200_000;
/// The most games one stats block may count (2^40, about 10^12): far above any real task or
/// run, far below where sums of counts could overflow. Client counts above it are refused.
pub const STATS_MAX_GAMES: u64 = 1 << 40;

/// Game results: {wins, losses, draws, crashes, time_losses, pentanomial[5]}.
///
/// A missing `pentanomial` reads as zeros. Counts of games without any pair counted (results
/// of runs from before Fishtest counted pairs) are written back without the key, as Fishtest
/// keeps them: the key is absent exactly when games were played and no pair was counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields, into = "StatsDoc")]
pub struct Stats {
    pub wins: u64,
    pub losses: u64,
    pub draws: u64,
    #[serde(default)]
    pub crashes: u64,
    #[serde(default)]
    pub time_losses: u64,
    #[serde(default)]
    pub pentanomial: [u64; 5],
}

/// How [`Stats`] is written: the `pentanomial` key only when pairs were counted or no game
/// was played.
#[derive(Serialize)]
struct StatsDoc {
    wins: u64,
    losses: u64,
    draws: u64,
    crashes: u64,
    time_losses: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pentanomial: Option<[u64; 5]>,
}

impl From<Stats> for StatsDoc {
    fn from(s: Stats) -> Self {
        StatsDoc {
            wins: s.wins,
            losses: s.losses,
            draws: s.draws,
            crashes: s.crashes,
            time_losses: s.time_losses,
            pentanomial: s.pairs(),
        }
    }
}

impl Stats {
    /// The pair counts when these results record them: any pair counted, or no game played
    /// yet. Every run shoal creates counts pairs; a run imported from before Fishtest counted
    /// them has games and no pair counts (its missing `pentanomial` reads as zeros).
    pub fn pairs(&self) -> Option<[u64; 5]> {
        (self.pentanomial.iter().any(|c| *c > 0) || self.games() == 0).then_some(self.pentanomial)
    }

    /// Games played (saturating: counts from a client are bounded by [`Stats::check`] first).
    pub fn games(&self) -> u64 {
        self.wins
            .saturating_add(self.losses)
            .saturating_add(self.draws)
    }

    /// The consistency rules between the trinomial and the pentanomial counts
    /// (w + l + d = 2·Σp; w − l = 2p4 + p3 − p1 − 2p0; p1 + p3 ≤ d ≤ p1 + 2p2 + p3), and
    /// the bounds that keep every later sum exact. Computed in 128 bits: no count a client can
    /// send overflows here.
    pub fn check(&self) -> Result<(), String> {
        let p = self.pentanomial.map(u128::from);
        let (w, l, d) = (
            u128::from(self.wins),
            u128::from(self.losses),
            u128::from(self.draws),
        );
        let games = w + l + d;
        if games > u128::from(STATS_MAX_GAMES) {
            return Err(format!(
                "wins + losses + draws ({games}) is more than {STATS_MAX_GAMES} games"
            ));
        }
        let pairs: u128 = p.iter().sum();
        if games != 2 * pairs {
            return Err(format!(
                "wins + losses + draws ({games}) must be twice the pentanomial total ({pairs})"
            ));
        }
        if u128::from(self.crashes) > games || u128::from(self.time_losses) > games {
            return Err(format!(
                "crashes ({}) and time_losses ({}) cannot exceed the games played ({games})",
                self.crashes, self.time_losses
            ));
        }
        let lhs = w as i128 - l as i128;
        let rhs = 2 * p[4] as i128 + p[3] as i128 - p[1] as i128 - 2 * p[0] as i128;
        if lhs != rhs {
            return Err(format!(
                "wins - losses ({lhs}) must equal 2*p4 + p3 - p1 - 2*p0 ({rhs})"
            ));
        }
        let lo = p[1] + p[3];
        let hi = p[1] + 2 * p[2] + p[3];
        let draws = d;
        if draws < lo || draws > hi {
            return Err(format!(
                "draws ({}) must lie between p1 + p3 ({lo}) and p1 + 2*p2 + p3 ({hi})",
                self.draws
            ));
        }
        Ok(())
    }

    /// `self - older`, field by field; None if any count went down.
    pub fn delta(&self, older: &Stats) -> Option<Stats> {
        let mut pentanomial = [0u64; 5];
        for (i, cell) in pentanomial.iter_mut().enumerate() {
            *cell = self.pentanomial[i].checked_sub(older.pentanomial[i])?;
        }
        Some(Stats {
            wins: self.wins.checked_sub(older.wins)?,
            losses: self.losses.checked_sub(older.losses)?,
            draws: self.draws.checked_sub(older.draws)?,
            crashes: self.crashes.checked_sub(older.crashes)?,
            time_losses: self.time_losses.checked_sub(older.time_losses)?,
            pentanomial,
        })
    }

    /// `self + d`, field by field; `None` (and `self` unchanged) if any sum overflows.
    pub fn checked_add(&self, d: &Stats) -> Option<Stats> {
        let mut pentanomial = [0u64; 5];
        for (i, cell) in pentanomial.iter_mut().enumerate() {
            *cell = self.pentanomial[i].checked_add(d.pentanomial[i])?;
        }
        Some(Stats {
            wins: self.wins.checked_add(d.wins)?,
            losses: self.losses.checked_add(d.losses)?,
            draws: self.draws.checked_add(d.draws)?,
            crashes: self.crashes.checked_add(d.crashes)?,
            time_losses: self.time_losses.checked_add(d.time_losses)?,
            pentanomial,
        })
    }

    /// Adds `d` into `self`, saturating at `u64::MAX` (for totals rebuilt from stored,
    /// already-validated tasks; request paths use [`Stats::checked_add`]).
    pub fn add(&mut self, d: &Stats) {
        self.wins = self.wins.saturating_add(d.wins);
        self.losses = self.losses.saturating_add(d.losses);
        self.draws = self.draws.saturating_add(d.draws);
        self.crashes = self.crashes.saturating_add(d.crashes);
        self.time_losses = self.time_losses.saturating_add(d.time_losses);
        for i in 0..5 {
            self.pentanomial[i] = self.pentanomial[i].saturating_add(d.pentanomial[i]);
        }
    }
}

/// A parsed time control `[moves/]base[+inc]`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TimeControl {
    pub moves: Option<u32>,
    pub base_s: f64,
    pub inc_s: f64,
}

/// Parses a time control as the submit form's regex allows:
/// `([1-9]\d*/)?\d+(\.\d+)?(\+\d+(\.\d+)?)?`.
pub fn parse_tc(tc: &str) -> Option<TimeControl> {
    let (moves, rest) = match tc.split_once('/') {
        Some((m, rest)) => {
            if m.is_empty() || m.starts_with('0') || !m.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            (Some(m.parse().ok()?), rest)
        }
        None => (None, tc),
    };
    let (base, inc) = match rest.split_once('+') {
        Some((b, i)) => (b, Some(i)),
        None => (rest, None),
    };
    let number = |s: &str| -> Option<f64> {
        let (int, frac) = match s.split_once('.') {
            Some((i, f)) => (i, Some(f)),
            None => (s, None),
        };
        let digits = |x: &str| !x.is_empty() && x.bytes().all(|b| b.is_ascii_digit());
        if !digits(int) || frac.is_some_and(|f| !digits(f)) {
            return None;
        }
        s.parse().ok()
    };
    Some(TimeControl {
        moves,
        base_s: number(base)?,
        inc_s: match inc {
            Some(i) => number(i)?,
            None => 0.0,
        },
    })
}

/// Fishtest's game-duration estimate in seconds:
/// (base · (68/moves if a moves prefix) + 68 · inc) · 1.84.
pub fn tc_duration(tc: &TimeControl) -> f64 {
    let base = match tc.moves {
        Some(m) if m > 0 => tc.base_s * 68.0 / f64::from(m),
        _ => tc.base_s,
    };
    (base + 68.0 * tc.inc_s) * 1.84
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(w: u64, l: u64, d: u64, p: [u64; 5]) -> Stats {
        Stats {
            wins: w,
            losses: l,
            draws: d,
            crashes: 0,
            time_losses: 0,
            pentanomial: p,
        }
    }

    fn tc(s: &str) -> TimeControl {
        parse_tc(s).expect("valid tc")
    }

    #[test]
    fn pentanomial_consistency() {
        // Pairs: WW, WL (counts as DD-or-WL), DD, LD.
        assert!(stats(3, 2, 3, [0, 1, 2, 0, 1]).check().is_ok());
        assert!(stats(3, 2, 2, [0, 1, 2, 0, 1]).check().is_err());
        assert!(stats(4, 1, 3, [0, 1, 2, 0, 1]).check().is_err());
        assert!(Stats::default().check().is_ok());
    }

    #[test]
    fn delta_refuses_decreases() {
        let a = stats(3, 2, 3, [0, 1, 2, 0, 1]);
        let b = stats(1, 1, 0, [0, 0, 1, 0, 0]);
        assert_eq!(a.delta(&b).map(|d| d.games()), Some(6), "3+2+3 - (1+1+0)");
        assert!(b.delta(&a).is_none());
    }

    #[test]
    fn time_controls_parse_as_the_form_allows() {
        assert_eq!(
            tc("10+0.1"),
            TimeControl {
                moves: None,
                base_s: 10.0,
                inc_s: 0.1
            }
        );
        assert_eq!(tc("40/60").moves, Some(40));
        assert_eq!(tc("60").inc_s, 0.0);
        for bad in [
            "", "+1", "10+", "0/10", "a+1", "10+0.1.2", "1:30+1", "10 +1", "-5",
        ] {
            assert!(parse_tc(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn durations() {
        assert!((tc_duration(&tc("10+0.1")) - (10.0 + 6.8) * 1.84).abs() < 1e-9);
        // 40 moves in 60 s: base scaled by 68/40.
        assert!((tc_duration(&tc("40/60")) - 60.0 * 68.0 / 40.0 * 1.84).abs() < 1e-9);
    }
}

//! The display rules every run table and the run page share: the status label, the results
//! box (its lines and colour), the SPRT bounds notation and the row format of the run
//! tables (start date, submitter, tag, diff link, results, live column, info).
//!
//! Owns: turning a [`Run`] into the words and colours people read. Everything comes from
//! the run as stored (the SPRT's LLR is the one the last update computed), so a table of
//! hundreds of runs costs no statistics beyond one Elo estimate per fixed-games run.
//! Must not: read the store or decide anything (display only).

use crate::rundb::model::Run;
use crate::rundb::schedule::{parse_tc, tc_duration, tc_ratio};
use crate::stats::{EloModel, SprtRecord, SprtState, get_elo, nelo_pentanomial};

/// The run's status label: `failed`, `finished`, `active`, `paused` or `pending`.
pub fn status_label(run: &Run) -> &'static str {
    if run.finished {
        if run.failed { "failed" } else { "finished" }
    } else if run.workers > 0 {
        "active"
    } else if run.approved {
        "paused"
    } else {
        "pending"
    }
}

/// The bounds as `elo0,elo1` with two decimals, wrapped by model: BayesElo `[…]`,
/// logistic `{…}`, normalized `<…>`.
pub fn bounds(sprt: &SprtRecord) -> String {
    let (open, close) = match sprt.elo_model {
        EloModel::BayesElo => ('[', ']'),
        EloModel::Logistic => ('{', '}'),
        EloModel::Normalized => ('<', '>'),
    };
    format!("{open}{:.2},{:.2}{close}", sprt.elo0, sprt.elo1)
}

/// The results box: one line per item and the background colour.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultsBox {
    pub lines: Vec<String>,
    /// `green`, `blue`, `yellow`, `red`, or empty (the default grey).
    pub colour: &'static str,
    /// `tc ≠ new_tc`: the box gets a pink border.
    pub time_odds: bool,
}

/// Formats a ratio as Fishtest prints floats that may be infinite or undefined.
fn ratio(num: u64, den: u64) -> String {
    match (num, den) {
        (0, 0) => "nan".into(),
        (_, 0) => "inf".into(),
        (n, d) => format!("{:.2}", n as f64 / d as f64),
    }
}

/// The results box of `run` (§ display rules): SPSA progress, or the SPRT's LLR line, or a
/// fixed-games run's Elo and LOS; then the totals and the pentanomial counts.
pub fn results_box(run: &Run) -> ResultsBox {
    let a = &run.args;
    let r = &run.results;
    let time_odds = !a.new_tc.is_empty() && a.new_tc != a.tc;
    let games = r.games();
    if let Some(spsa) = &a.spsa {
        return ResultsBox {
            lines: vec![
                format!("{}/{} iterations", spsa.iter, spsa.num_iter),
                format!("{games}/{} games played", a.num_games),
            ],
            colour: "",
            time_odds,
        };
    }
    let penta = Some(r.pentanomial).filter(|p| p.iter().any(|c| *c > 0));
    let mut lines = Vec::with_capacity(4);
    let mut state = "";
    if let Some(sprt) = &a.sprt {
        lines.push(format!(
            "LLR: {:.2} ({:.2},{:.2}) {}",
            sprt.llr,
            sprt.lower_bound,
            sprt.upper_bound,
            bounds(sprt)
        ));
        state = match sprt.state {
            SprtState::Accepted => "accepted",
            SprtState::Rejected => "rejected",
            _ => "",
        };
    } else {
        let data: Vec<f64> = match penta {
            Some(p) => p.iter().map(|c| *c as f64).collect(),
            None => vec![r.losses as f64, r.draws as f64, r.wins as f64],
        };
        match get_elo(&data) {
            Ok(e) if games > 0 => {
                lines.push(format!(
                    "Elo: {:.2} ± {:.1} (95%) LOS: {:.1}%",
                    e.elo,
                    e.elo95,
                    e.los * 100.0
                ));
                if e.los < 0.05 {
                    state = "rejected";
                } else if e.los > 0.95 {
                    state = "accepted";
                }
            }
            _ => lines.push("Elo: - LOS: -".into()),
        }
    }
    lines.push(format!(
        "Total: {games} W: {} L: {} D: {}",
        r.wins, r.losses, r.draws
    ));
    if let Some(p) = penta {
        lines.push(format!(
            "Ptnml(0-2): {}, {}, {}, {}, {}",
            p[0], p[1], p[2], p[3], p[4]
        ));
        if a.sprt.is_none() {
            let data: Vec<f64> = p.iter().map(|c| *c as f64).collect();
            if let Ok(n) = nelo_pentanomial(&data) {
                lines.push(format!(
                    "nElo: {:.2} ± {:.1} (95%) PairsRatio: {}",
                    n.nelo5,
                    n.nelo5_delta,
                    ratio(p[3].saturating_add(p[4]), p[0].saturating_add(p[1]))
                ));
            }
        }
    }
    let colour = match state {
        "accepted" if a.sprt.as_ref().is_some_and(|s| s.elo0 + s.elo1 < 0.0) => "blue",
        "accepted" => "green",
        "rejected" if r.wins > r.losses => "yellow",
        "rejected" => "red",
        _ => "",
    };
    ResultsBox {
        lines,
        colour,
        time_odds,
    }
}

/// Up to `n` characters of `s`.
pub fn prefix(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

/// The compare URL of a run's diff (`<repo>/compare/<base>...<new>`), or empty when the run
/// names no web repository.
pub fn diff_url(run: &Run) -> String {
    let a = &run.args;
    let repo = a.tests_repo.trim_end_matches('/');
    if !(repo.starts_with("https://") || repo.starts_with("http://")) {
        return String::new();
    }
    format!("{repo}/compare/{}...{}", a.resolved_base, a.resolved_new)
}

/// One row of a run table (the dashboard's panels, the finished and per-user lists).
pub struct RunRow {
    pub id: String,
    /// Start date, `yy-mm-dd` (UTC).
    pub start: String,
    pub username: String,
    /// The submitter's first three characters (the full name is the cell's title).
    pub user_short: String,
    /// `new_tag`, at most 23 characters.
    pub new_tag: String,
    /// The compare URL, or empty.
    pub diff: String,
    pub results: ResultsBox,
    pub sprt: bool,
    pub num_games: u64,
    pub tc: String,
    pub threads: u32,
    pub unfinished: bool,
    pub workers: u64,
    pub cores: u64,
    /// An active LTC SPRT: its live column is drawn in the link colour.
    pub ltc_sprt: bool,
    /// The info text's lines (rendered with line breaks, escaped).
    pub info: Vec<String>,
}

impl RunRow {
    pub fn of(run: &Run) -> Self {
        let a = &run.args;
        RunRow {
            id: run.id.clone(),
            start: run.start_time.0.format("%y-%m-%d").to_string(),
            username: a.username.clone(),
            user_short: prefix(&a.username, 3),
            new_tag: prefix(&a.new_tag, 23),
            diff: diff_url(run),
            results: results_box(run),
            sprt: a.sprt.is_some(),
            num_games: a.num_games,
            tc: a.tc.clone(),
            threads: a.threads,
            unfinished: !run.finished,
            workers: run.workers,
            cores: run.cores,
            ltc_sprt: a.sprt.is_some() && !run.finished && tc_ratio_of(run) > 4.0,
            info: a.info.lines().map(str::to_string).collect(),
        }
    }
}

/// The run's tc ratio (threads · game duration over 10+0.1's), 0 for an unreadable tc.
pub fn tc_ratio_of(run: &Run) -> f64 {
    parse_tc(&run.args.tc).map_or(0.0, |tc| tc_ratio(&tc, run.args.threads))
}

/// Average games of an SPRT run (the estimate the remaining time uses).
const SPRT_EXPECTED_GAMES: f64 = 95_000.0;

/// Core-hours a run still needs: the remaining games (an SPRT's are estimated from the
/// average SPRT length) times a game's duration times its threads.
pub fn remaining_hours(run: &Run) -> f64 {
    let a = &run.args;
    let played = run.results.games() as f64;
    let remaining = if a.sprt.is_some() {
        (SPRT_EXPECTED_GAMES - played).max(0.0)
    } else {
        (a.num_games as f64 - played).max(0.0)
    };
    let game_s = parse_tc(&a.tc).map_or(0.0, |tc| tc_duration(&tc));
    game_s * remaining * f64::from(a.threads.max(1)) / 3600.0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_ratio_edges() {
        assert_eq!(ratio(0, 0), "nan");
        assert_eq!(ratio(3, 0), "inf");
        assert_eq!(ratio(3, 2), "1.50");
    }

    #[test]
    fn bounds_by_model() {
        let mut s = SprtRecord::new(0.05, 0.05, 0.5, 2.5, EloModel::Normalized, 2).unwrap();
        assert_eq!(bounds(&s), "<0.50,2.50>");
        s.elo_model = EloModel::Logistic;
        assert_eq!(bounds(&s), "{0.50,2.50}");
        s.elo_model = EloModel::BayesElo;
        assert_eq!(bounds(&s), "[0.50,2.50]");
    }
}

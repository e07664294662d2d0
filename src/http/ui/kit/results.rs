//! The display rules every run table and the run page share: the status label, the results
//! box (its lines and colour), the SPRT bounds notation and the row format of the run
//! tables (start date, submitter, tag, diff link, results, live column, info).
//!
//! Owns: turning a [`Run`] into the words and colours people read. Each number of the results
//! box is a [`Piece`] naming the statistic it shows (the page renders it as
//! `<span data-field>`; the run tables print the plain text). Everything comes from
//! the run as stored (the SPRT's LLR is the one the last update computed), so a table of
//! hundreds of runs costs no statistics beyond one Elo estimate per fixed-games run.
//! Must not: read the store or decide anything (display only).

use crate::rundb::model::Run;
use crate::rundb::schedule::{parse_tc, tc_duration, tc_ratio};
use crate::stats::{SprtRecord, SprtState, get_elo, nelo_pentanomial};

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
    sprt.bounds_text()
}

/// One piece of a displayed line: text, or a number with the name of the statistic it shows
/// (`field`, the name `tests/data/stats-page-reference.json` gives it), rendered as
/// `<span data-field="…">` so that tests find every displayed number without scraping text.
#[derive(Debug, Clone, PartialEq)]
pub struct Piece {
    /// Empty for plain text.
    pub field: String,
    pub text: String,
    /// The displayed number is the statistic times this (`100` for a percentage), as the
    /// span's `data-scale`; 1 otherwise (no attribute).
    pub scale: u32,
}

impl Piece {
    pub fn text(text: impl Into<String>) -> Self {
        Piece {
            field: String::new(),
            text: text.into(),
            scale: 1,
        }
    }

    pub fn num(field: impl Into<String>, text: impl Into<String>) -> Self {
        Piece {
            field: field.into(),
            text: text.into(),
            scale: 1,
        }
    }

    /// A fraction shown as a percentage (the `%` sign is not part of the number).
    pub fn percent(field: impl Into<String>, text: impl Into<String>) -> Self {
        Piece {
            scale: 100,
            ..Piece::num(field, text)
        }
    }
}

/// A line of pieces; `Display` gives its plain text (the run tables show that).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Line(pub Vec<Piece>);

impl Line {
    pub fn t(mut self, text: impl Into<String>) -> Self {
        self.0.push(Piece::text(text));
        self
    }

    pub fn n(mut self, field: &str, text: impl Into<String>) -> Self {
        self.0.push(Piece::num(field, text));
        self
    }
}

impl Line {
    /// A fraction shown as a percentage with one decimal, named `field`.
    pub fn pct(mut self, field: &str, fraction: f64) -> Self {
        self.0
            .push(Piece::percent(field, format!("{:.1}", fraction * 100.0)));
        self
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.iter().try_for_each(|p| f.write_str(&p.text))
    }
}

/// The results box: one line per item and the background colour.
#[derive(Debug, Clone, PartialEq)]
pub struct ResultsBox {
    pub lines: Vec<Line>,
    /// `green`, `blue`, `yellow`, `red`, or empty (the default grey).
    pub colour: &'static str,
    /// `tc ≠ new_tc`: the box gets a pink border.
    pub time_odds: bool,
}

impl ResultsBox {
    /// The box as one line of plain text (a link preview's description).
    pub fn plain(&self) -> String {
        self.lines
            .iter()
            .map(|l| {
                l.0.iter()
                    .map(|p| p.text.as_str())
                    .collect::<String>()
                    .split_whitespace()
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .filter(|l| !l.is_empty())
            .collect::<Vec<_>>()
            .join(" · ")
    }
}

/// Formats a ratio as Fishtest prints floats that may be infinite or undefined.
fn ratio(num: u64, den: u64) -> String {
    match (num, den) {
        (0, 0) => "nan".into(),
        (_, 0) => "inf".into(),
        (n, d) => format!("{:.2}", n as f64 / d as f64),
    }
}

/// The run's pentanomial counts when it records them ([`crate::rundb::model::Stats::pairs`]).
pub fn pentanomial_of(run: &Run) -> Option<[u64; 5]> {
    run.results.pairs()
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
                Line::default()
                    .n("results.iter", spsa.iter.to_string())
                    .t("/")
                    .n("results.num_iter", spsa.num_iter.to_string())
                    .t(" iterations"),
                Line::default()
                    .n("results.games", games.to_string())
                    .t("/")
                    .n("results.num_games", a.num_games.to_string())
                    .t(" games played"),
            ],
            colour: "",
            time_odds,
        };
    }
    let penta = pentanomial_of(run);
    let mut lines = Vec::with_capacity(4);
    let mut state = "";
    if let Some(sprt) = &a.sprt {
        let (open, close) = sprt.elo_model.brackets();
        lines.push(
            Line::default()
                .t("LLR: ")
                .n("results.llr", format!("{:.2}", sprt.llr))
                .t(" (")
                .n("results.lower_bound", format!("{:.2}", sprt.lower_bound))
                .t(",")
                .n("results.upper_bound", format!("{:.2}", sprt.upper_bound))
                .t(format!(") {open}"))
                .n("results.elo0", format!("{:.2}", sprt.elo0))
                .t(",")
                .n("results.elo1", format!("{:.2}", sprt.elo1))
                .t(close.to_string()),
        );
        state = match sprt.state {
            SprtState::Accepted => "accepted",
            SprtState::Rejected => "rejected",
            _ => "",
        };
    } else {
        // Fishtest's get_elo regularizes: a run without games shows its neutral values.
        let data: Vec<f64> = match penta {
            Some(p) => p.iter().map(|c| *c as f64).collect(),
            None => vec![r.losses as f64, r.draws as f64, r.wins as f64],
        };
        match get_elo(&data) {
            Ok(e) => {
                let mut line = Line::default()
                    .t("Elo: ")
                    .n("results.elo", format!("{:.2}", e.elo))
                    .t(" ± ")
                    .n("results.elo95", format!("{:.1}", e.elo95))
                    .t(" (95%) LOS: ");
                line.0.push(Piece::percent(
                    "results.los",
                    format!("{:.1}", e.los * 100.0),
                ));
                lines.push(line.t("%"));
                if e.los < 0.05 {
                    state = "rejected";
                } else if e.los > 0.95 {
                    state = "accepted";
                }
            }
            Err(_) => lines.push(Line::default().t("Elo: - LOS: -")),
        }
    }
    lines.push(
        Line::default()
            .t("Total: ")
            .n("results.games", games.to_string())
            .t(" W: ")
            .n("results.wins", r.wins.to_string())
            .t(" L: ")
            .n("results.losses", r.losses.to_string())
            .t(" D: ")
            .n("results.draws", r.draws.to_string()),
    );
    if let Some(p) = penta {
        let mut line = Line::default().t("Ptnml(0-2): ");
        for (i, c) in p.iter().enumerate() {
            if i > 0 {
                line = line.t(", ");
            }
            line = line.n(&format!("results.pentanomial.{i}"), c.to_string());
        }
        lines.push(line);
        if a.sprt.is_none() {
            let data: Vec<f64> = p.iter().map(|c| *c as f64).collect();
            if let Ok(n) = nelo_pentanomial(&data) {
                lines.push(
                    Line::default()
                        .t("nElo: ")
                        .n("results.nelo5", format!("{:.2}", n.nelo5))
                        .t(" ± ")
                        .n("results.nelo5_delta", format!("{:.1}", n.nelo5_delta))
                        .t(" (95%) PairsRatio: ")
                        .n(
                            "results.pairs_ratio",
                            ratio(p[3].saturating_add(p[4]), p[0].saturating_add(p[1])),
                        ),
                );
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
    /// The active-run filters' words: test type, time control, threads (the row's
    /// `data-test-type`, `data-time-control` and `data-threads`).
    pub kind: [&'static str; 3],
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
            kind: super::run_filters::words(run),
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
    use crate::stats::EloModel;

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

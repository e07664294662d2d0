//! The run page's results and statistics part, computed from a run's copy (the `detail`
//! fragment: the results box, the SPRT's Elo and LLR as `/api/get_elo` computes them). The
//! arguments and SPSA tables are `run_args.rs`'s; the page and its fragments `run.rs`'s.
//!
//! Must not: compute statistics itself (`crate::stats` does) or read the store.

use crate::http::ui::kit::results::{Line, ResultsBox, results_box};
use crate::rundb::model::Run;
use crate::stats::{Results, SprtState, sprt_elo};

/// The results and statistics part (the `detail` fragment).
pub struct Detail {
    pub id: String,
    /// The results box of every run table (the same lines and colour).
    pub rbox: ResultsBox,
    /// `running`, `green`, `yellow`, `red` or `neutral`.
    pub colour: &'static str,
    pub status: String,
    pub games: u64,
    pub num_games: u64,
    pub wins: u64,
    pub losses: u64,
    pub draws: u64,
    pub crashes: u64,
    pub time_losses: u64,
    /// `LL, LD, DD+WL, WD, WW` counts, when the run has any.
    pub penta: Option<[u64; 5]>,
    /// The SPRT's `Elo: … [lo, hi] (95%) LOS: …%` (the raw statistics page's numbers of the
    /// data the SPRT decides with, `sprt.elo5`… or `sprt.elo3`…); empty before any game.
    pub sprt_elo: Line,
    /// `LLR: x (a, b) [elo0, elo1]` for an SPRT.
    pub llr: String,
    pub sprt_state: String,
}

/// The results and statistics, computed as `/api/get_elo` does.
pub(in crate::http::ui) fn detail(run: &Run) -> Detail {
    let r = &run.results;
    let penta = Some(r.pentanomial).filter(|p| p.iter().any(|c| *c > 0));
    let games = r.games();
    let sprt = run.args.sprt.as_ref();
    let mut d = Detail {
        id: run.id.clone(),
        rbox: results_box(run),
        colour: colour(run),
        status: status(run),
        games,
        num_games: run.args.num_games,
        wins: r.wins,
        losses: r.losses,
        draws: r.draws,
        crashes: r.crashes,
        time_losses: r.time_losses,
        penta,
        sprt_elo: Line::default(),
        llr: String::new(),
        sprt_state: String::new(),
    };
    if let Some(s) = sprt {
        let results = Results {
            wins: r.wins,
            losses: r.losses,
            draws: r.draws,
            pentanomial: penta,
        };
        match sprt_elo(&results, s.alpha, s.beta, 0.05, s.elo0, s.elo1, s.elo_model) {
            Ok(e) => {
                d.llr = format!(
                    "LLR: {:.2} ({:.2}, {:.2}) [{:.2}, {:.2}]",
                    e.llr, e.a, e.b, s.elo0, s.elo1
                );
                if games > 0 {
                    let v = if penta.is_some() { 5 } else { 3 };
                    d.sprt_elo = Line::default()
                        .t("Elo: ")
                        .n(&format!("sprt.elo{v}"), format!("{:.2}", e.elo))
                        .t(" [")
                        .n(&format!("sprt.elo{v}_l"), format!("{:.2}", e.ci[0]))
                        .t(", ")
                        .n(&format!("sprt.elo{v}_u"), format!("{:.2}", e.ci[1]))
                        .t("] (95%) LOS: ")
                        .pct(&format!("sprt.los{v}"), e.los)
                        .t("%");
                }
            }
            Err(e) => d.llr = format!("LLR: unavailable ({e})"),
        }
        // A test still running says so in its status: the SPRT's own state is added only
        // once it decided, so the status line never reads two things at once.
        if s.state != SprtState::Running {
            d.sprt_state = s.state.as_str().into();
        }
    }
    d
}

fn colour(run: &Run) -> &'static str {
    if !run.finished {
        return "running";
    }
    let state = run.args.sprt.as_ref().map(|s| s.state);
    if run.is_green || state == Some(SprtState::Accepted) {
        "green"
    } else if run.is_yellow {
        "yellow"
    } else if state == Some(SprtState::Rejected) {
        "red"
    } else {
        "neutral"
    }
}

fn status(run: &Run) -> String {
    if run.finished {
        if run.failed { "failed" } else { "finished" }.into()
    } else if !run.approved {
        "pending approval".into()
    } else if run.workers > 0 {
        format!("running on {} workers ({} cores)", run.workers, run.cores)
    } else {
        "waiting for workers".into()
    }
}

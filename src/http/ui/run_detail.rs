//! What the run page shows of a run, computed from its copy: the arguments table (commit
//! and diff links to the tests repository only), the results and statistics part (the
//! `detail` fragment: the results box, the SPRT's Elo and LLR as `/api/get_elo` computes
//! them) and the SPSA parameters. The page and its fragments are `run.rs`'s.
//!
//! Must not: compute statistics itself (`crate::stats` does) or read the store.

use super::results::{Line, ResultsBox, results_box};
use crate::rundb::model::Run;
use crate::stats::{Results, SprtState, sprt_elo};

/// One line of the arguments table; `href` empty when the value is not a link.
pub struct ArgRow {
    pub name: &'static str,
    pub value: String,
    pub href: String,
}

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

/// One SPSA parameter.
pub struct SpsaRow {
    pub name: String,
    pub value: String,
    pub start: String,
    pub min: String,
    pub max: String,
    pub c: String,
    pub r: String,
}

/// A link only to a web address (never `javascript:` or the like).
fn web(url: String) -> String {
    if url.starts_with("https://") || url.starts_with("http://") {
        url
    } else {
        String::new()
    }
}

/// The arguments table.
pub(super) fn arg_rows(run: &Run) -> Vec<ArgRow> {
    let a = &run.args;
    let repo = a.tests_repo.trim_end_matches('/');
    let row = |name, value: String| ArgRow {
        name,
        value,
        href: String::new(),
    };
    let link = |name, value: String, href: String| ArgRow {
        name,
        value,
        href: if repo.is_empty() {
            String::new()
        } else {
            web(href)
        },
    };
    let mut rows = vec![row("username", a.username.clone()), row("tc", a.tc.clone())];
    if !a.new_tc.is_empty() && a.new_tc != a.tc {
        rows.push(row("new_tc", a.new_tc.clone()));
    }
    rows.push(row("threads", a.threads.to_string()));
    rows.push(row("book", format!("{} (depth {})", a.book, a.book_depth)));
    if let Some(sprt) = &a.sprt {
        rows.push(row(
            "sprt",
            format!(
                "elo0: {:.2} alpha: {:.2} elo1: {:.2} beta: {:.2} ({})",
                sprt.elo0,
                sprt.alpha,
                sprt.elo1,
                sprt.beta,
                sprt.elo_model.as_str()
            ),
        ));
    } else {
        rows.push(row("num_games", a.num_games.to_string()));
    }
    rows.push(link(
        "new_tag",
        format!("{} ({})", a.new_tag, short(&a.resolved_new)),
        format!("{repo}/commit/{}", a.resolved_new),
    ));
    rows.push(link(
        "base_tag",
        format!("{} ({})", a.base_tag, short(&a.resolved_base)),
        format!("{repo}/commit/{}", a.resolved_base),
    ));
    rows.push(link(
        "diff",
        format!("{}...{}", short(&a.resolved_base), short(&a.resolved_new)),
        format!("{repo}/compare/{}...{}", a.resolved_base, a.resolved_new),
    ));
    // The commits' subjects, as GitHub gave them (or the submitter typed them).
    if !a.msg_new.is_empty() {
        rows.push(row("msg_new", a.msg_new.clone()));
    }
    if !a.msg_base.is_empty() {
        rows.push(row("msg_base", a.msg_base.clone()));
    }
    rows.push(row("new_options", a.new_options.clone()));
    rows.push(row("base_options", a.base_options.clone()));
    if !a.new_signature.is_empty() || !a.base_signature.is_empty() {
        rows.push(row(
            "bench",
            format!("new {} / base {}", a.new_signature, a.base_signature),
        ));
    }
    rows.push(link(
        "tests_repo",
        a.tests_repo.clone(),
        a.tests_repo.clone(),
    ));
    rows.push(row("priority", format!("{}", a.priority)));
    rows.push(row("throughput", format!("{}%", a.throughput)));
    if let Some(w) = a.max_active_tasks {
        rows.push(row("max_active_tasks", w.to_string()));
    }
    rows.push(row("auto_purge", a.auto_purge.to_string()));
    rows.push(row(
        "approved",
        if run.approved {
            format!("yes ({})", run.approver)
        } else {
            "no".into()
        },
    ));
    rows.push(row(
        "start_time",
        run.start_time.0.format("%Y-%m-%d %H:%M:%S").to_string(),
    ));
    rows.push(row("info", a.info.clone()));
    let local = |name, value: &str, href: String| ArgRow {
        name,
        value: value.into(),
        href,
    };
    rows.push(local(
        "events",
        "events",
        format!("/actions?run_id={}", run.id),
    ));
    if a.spsa.is_none() {
        rows.push(local(
            "raw statistics",
            "raw statistics",
            format!("/tests/stats/{}", run.id),
        ));
    }
    rows
}

fn short(sha: &str) -> &str {
    sha.get(..10).unwrap_or(sha)
}

/// The results and statistics, computed as `/api/get_elo` does.
pub(super) fn detail(run: &Run) -> Detail {
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

/// The SPSA parameters with the current `c_k` and `R_k` (as the worker gets them next).
pub(super) fn spsa_rows(run: &Run) -> (Vec<SpsaRow>, String) {
    let Some(s) = &run.args.spsa else {
        return (Vec::new(), String::new());
    };
    let k = s.iter as f64 + 1.0;
    let rows = s
        .params
        .iter()
        .map(|p| {
            let c = p.c / k.powf(s.gamma);
            let a = p.a / (s.stability + k).powf(s.alpha);
            let r = if c != 0.0 { a / (c * c) } else { 0.0 };
            SpsaRow {
                name: p.name.clone(),
                value: format!("{:.2}", p.theta),
                start: format!("{}", p.start),
                min: format!("{}", p.min),
                max: format!("{}", p.max),
                c: format!("{c:.3}"),
                r: format!("{r:.2e}"),
            }
        })
        .collect();
    (rows, format!("{} / {}", s.iter, s.num_iter))
}

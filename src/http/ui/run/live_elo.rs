//! `/tests/live_elo/{id}` and `/tests/live_elo_update/{id}`: an SPRT's gauges (LLR, LOS,
//! Elo, server-rendered SVG) and details, refreshed every 10 s; 286 once decided (or the run
//! finished undecided); the 404 page unless an SPRT run. Every answer carries
//! `Vary: HX-Request`.
//!
//! Must not: compute statistics itself (`sprt_elo` does).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::page::{load, page_title};
use super::stats_tables::{fixed, results_of};
use crate::http::run_id::{InvalidRunId, RunId};
use crate::http::state::AppState;
use crate::http::ui::kit::vary;
use crate::http::ui::kit::{Input, Layout, Page, PageError, STOP_POLLING, asset, page};
use crate::rundb::model::Run;
use crate::stats::{SprtState, sprt_elo};

/// One gauge: a bar from `lo` to `hi` with the value's position (0–300 px) and the marks.
pub struct Gauge {
    pub label: &'static str,
    pub value: String,
    pub lo: String,
    pub hi: String,
    /// The value's x position in the 300-px bar.
    pub x: i64,
    /// The zero mark (Elo) or the midpoint, in px.
    pub mark: i64,
}

/// The live Elo gauges and details.
pub struct LiveElo {
    pub id: String,
    pub gauges: Vec<Gauge>,
    pub rows: Vec<(String, String, String)>,
}

#[derive(Template)]
#[template(path = "live_elo.html")]
pub struct LiveEloPage {
    pub l: Layout,
    pub id: String,
    pub live: bool,
    pub e: LiveElo,
    pub script: String,
}

#[derive(Template)]
#[template(source = "{% include \"live_elo_content.html\" %}", ext = "html")]
pub struct LiveEloFragment {
    pub e: LiveElo,
}

/// The position of `value` on a 300-px bar from `lo` to `hi`.
fn px(value: f64, lo: f64, hi: f64) -> i64 {
    if !(value.is_finite() && hi > lo) {
        return 0;
    }
    ((value - lo) / (hi - lo) * 300.0).clamp(0.0, 300.0).round() as i64
}

fn live_elo(run: &Run) -> Option<LiveElo> {
    let s = run.args.sprt.as_ref()?;
    let a = &run.args;
    let results = results_of(run);
    let e = sprt_elo(&results, s.alpha, s.beta, 0.05, s.elo0, s.elo1, s.elo_model).ok();
    let (lower, upper) = (s.lower_bound, s.upper_bound);
    let llr = e.as_ref().map_or(s.llr, |e| e.llr);
    let mut gauges = vec![Gauge {
        label: "LLR",
        value: fixed(llr, 2),
        lo: fixed(lower, 2),
        hi: fixed(upper, 2),
        x: px(llr, lower, upper),
        mark: px(0.0, lower, upper),
    }];
    let games = run.results.games();
    if let Some(e) = &e {
        gauges.push(Gauge {
            label: "LOS",
            value: format!("{}%", fixed(e.los * 100.0, 1)),
            lo: "0%".into(),
            hi: "100%".into(),
            x: px(e.los, 0.0, 1.0),
            mark: 150,
        });
        // Fixed ±4 Elo, widened to hold the interval.
        let reach = e.ci[0].abs().max(e.ci[1].abs()).clamp(4.0, 1000.0).ceil();
        gauges.push(Gauge {
            label: "Elo",
            value: fixed(e.elo, 2),
            lo: fixed(-reach, 0),
            hi: fixed(reach, 0),
            x: px(e.elo, -reach, reach),
            mark: 150,
        });
    }
    let repo = a.tests_repo.trim_end_matches('/');
    let compare = if repo.starts_with("https://") || repo.starts_with("http://") {
        format!("{repo}/compare/{}...{}", a.resolved_base, a.resolved_new)
    } else {
        String::new()
    };
    let commit = if a.msg_new.is_empty() {
        a.new_tag.clone()
    } else {
        format!("{} ({})", a.new_tag, a.msg_new)
    };
    let decided = match s.state {
        SprtState::Running => String::new(),
        other => format!(" ({})", other.as_str()),
    };
    let r = &run.results;
    let pct = |x: u64| {
        if games == 0 {
            0.0
        } else {
            x as f64 * 100.0 / games as f64
        }
    };
    let row = |name: &str, value: String| (name.to_string(), value, String::new());
    let mut rows = vec![
        (String::from("Commit"), commit, compare),
        row("Info", a.info.clone()),
        (
            "Submitter".into(),
            a.username.clone(),
            format!("/tests/user/{}", a.username),
        ),
        row("TC", a.tc.clone()),
        row(
            "SPRT",
            format!(
                "elo0: {} alpha: {} elo1: {} beta: {} ({})",
                fixed(s.elo0, 2),
                fixed(s.alpha, 2),
                fixed(s.elo1, 2),
                fixed(s.beta, 2),
                s.elo_model.as_str()
            ),
        ),
        row(
            "LLR",
            format!(
                "{} [{}, {}]{decided}",
                fixed(llr, 2),
                fixed(lower, 2),
                fixed(upper, 2)
            ),
        ),
    ];
    match &e {
        Some(e) if games > 0 => {
            rows.push(row(
                "Elo",
                format!(
                    "{} [{}, {}] (95%)",
                    fixed(e.elo, 2),
                    fixed(e.ci[0], 2),
                    fixed(e.ci[1], 2)
                ),
            ));
            rows.push(row("LOS", format!("{}%", fixed(e.los * 100.0, 1))));
        }
        _ => {
            rows.push(row("Elo", "-".into()));
            rows.push(row("LOS", "-".into()));
        }
    }
    rows.push(row(
        "Games",
        format!(
            "{games} [w:{}%, l:{}%, d:{}%]",
            fixed(pct(r.wins), 1),
            fixed(pct(r.losses), 1),
            fixed(pct(r.draws), 1)
        ),
    ));
    if let Some(p) = results.pentanomial {
        rows.push(row(
            "Pentanomial",
            format!("[{}, {}, {}, {}, {}]", p[0], p[1], p[2], p[3], p[4]),
        ));
    }
    Some(LiveElo {
        id: run.id.clone(),
        gauges,
        rows,
    })
}

/// The run of a live Elo route, its gauges and whether nothing will change any more (decided,
/// or stopped undecided); the HTML 404 unless an SPRT run.
fn load_live(
    db: &crate::rundb::RunDb,
    id: Result<RunId, InvalidRunId>,
) -> Result<(Run, LiveElo, bool), PageError> {
    let run = load(db, id?)?;
    let e = live_elo(&run).ok_or(PageError::NotFound)?;
    let decided = run.finished
        || run
            .args
            .sprt
            .as_ref()
            .is_some_and(|s| s.state != SprtState::Running);
    Ok((run, e, decided))
}

/// `GET /tests/live_elo/{id}`: 404 unless an SPRT run.
pub async fn live_elo_page(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let id = id.parse::<RunId>();
    let r = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let (run, e, decided) = load_live(db, id)?;
        let live = !decided;
        let p = LiveEloPage {
            l: Layout::new(ctx, &format!("Live Elo - {}", page_title(&run))),
            id: run.id.clone(),
            live,
            e,
            script: asset("refresh.js"),
        };
        Page::ok(&p)
    })
    .await;
    vary(r)
}

/// `GET /tests/live_elo_update/{id}`: the gauges and the table; 286 once decided (or the run
/// finished undecided).
pub async fn live_elo_update(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let id = id.parse::<RunId>();
    let r = page(&state, Input::get(&state, &headers), move |db, _, _| {
        let (_, e, decided) = load_live(db, id)?;
        let status = if decided {
            STOP_POLLING
        } else {
            StatusCode::OK
        };
        Page::render(status, &LiveEloFragment { e })
    })
    .await;
    vary(r)
}

//! The dashboard: `/` (a redirect) and `/tests`: the stats cards (cores, Mnps, games per
//! minute, time remaining), the workers count, and the panels pending approval, paused,
//! failed (among this page's finished runs), active and finished (25 a page, with the
//! finished lists' colour filters); `?page=N` past 1 shows only the finished runs.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use std::collections::HashMap;

use super::controls;
use super::kit::{Href, Input, Layout, OrInternal, Page, PageError, Pager, page};
use super::lists::{ListQuery, Panel, failed_panel, finished_part, parse_query, unfinished_panels};
use super::results::{RunRow, remaining_hours};
use crate::http::state::AppState;
use crate::rundb::RunDb;

#[derive(Template)]
#[template(path = "tests.html")]
pub struct TestsPage {
    pub l: Layout,
    /// The flash of a control that just succeeded (its run linked).
    pub done: Option<controls::Done>,
    /// The rendered content ([`TestsBody`]), with this viewer's CSRF token in its forms.
    pub body: String,
    /// The runs the viewer follows (not in the shared content: it is per viewer).
    pub following: Vec<super::follows::FollowRow>,
}

/// The forms' token as the content's templates read it (`l.csrf`).
pub struct FormToken {
    pub csrf: String,
}

/// The dashboard's content: the cards and panels (page 1) and the finished runs.
#[derive(Template)]
#[template(path = "tests_body.html")]
pub struct TestsBody {
    pub l: FormToken,
    /// Page 1 shows the cards and the unfinished panels; later pages only the finished.
    pub first: bool,
    pub panels: Vec<Panel>,
    pub cores: u64,
    pub workers: u64,
    /// Σ nps of the active runs, in millions.
    pub mnps: u64,
    /// Σ games per minute of the active runs.
    pub games_per_minute: u64,
    /// Σ remaining core-hours of the pending and active runs over the cores, `X.Yh`.
    pub time_remaining: String,
    pub finished_heading: String,
    pub count_line: String,
    pub finished: Vec<RunRow>,
    pub pager: Pager,
}

/// Stands for the viewer's CSRF token in a cached rendering (replaced per request).
const TOKEN_SLOT: &str = "__shoal_csrf_token__";

/// `GET /`: a 302 to the dashboard (no session work).
pub async fn root() -> Response {
    (StatusCode::FOUND, [(header::LOCATION, "/tests")]).into_response()
}

/// `GET /tests[?page=N&success_only=1|yellow_only=1|ltc_only=1]`: the dashboard. `done`
/// names a run control that just succeeded (only known codes are flashed, so a link cannot
/// put words on the page); `user` or `text` go to the finished runs' search.
pub async fn tests(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let q = parse_query(&params);
    let search = ["user", "text"]
        .iter()
        .any(|k| params.get(*k).is_some_and(|v| !v.trim().is_empty()));
    if search {
        let mut to = Href::new("/tests/finished").param("mode", "search");
        for k in ["user", "text"] {
            if let Some(v) = params.get(k).filter(|v| !v.trim().is_empty()) {
                to = to.param(k, v.trim());
            }
        }
        return (StatusCode::FOUND, [(header::LOCATION, to.build())]).into_response();
    }
    let done = params
        .get("done")
        .and_then(|code| controls::done_message(code, params.get("run").map(String::as_str)));
    let cacheable = q == ListQuery::default_first() && done.is_none();
    let cache = Arc::clone(&state.dashboard);
    let ledger = state.ledger.clone();
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let l = Layout::new(ctx, "Tests");
        let body = if cacheable {
            // Read before rendering: a save during the render leaves the entry stale.
            let saves = db.listed_changes();
            let html = match cache.fresh(saves) {
                Some(html) => html,
                None => {
                    let html = Arc::new(body(db, q, TOKEN_SLOT)?);
                    cache.store(saves, Arc::clone(&html));
                    html
                }
            };
            html.replace(TOKEN_SLOT, &ctx.csrf)
        } else {
            body(db, q, &ctx.csrf)?
        };
        let following = super::follows::dashboard_rows(&ledger, ctx)?;
        Page::ok(&TestsPage {
            l,
            done,
            body,
            following,
        })
    })
    .await
}

/// Renders the dashboard's content for query `q` with `token` in its forms (the rendered
/// HTML, or why not: a redirect past the last page, a failure).
fn body(db: &RunDb, q: ListQuery, token: &str) -> Result<String, PageError> {
    let f = finished_part(db, "/tests", None, q)?;
    let mut p = TestsBody {
        l: FormToken {
            csrf: token.to_string(),
        },
        first: q.page == 1,
        panels: Vec::new(),
        cores: 0,
        workers: 0,
        mnps: 0,
        games_per_minute: 0,
        time_remaining: String::new(),
        finished_heading: f.heading.clone(),
        count_line: f.count_line.clone(),
        finished: f.runs.iter().map(RunRow::of).collect(),
        pager: f.pager,
    };
    if q.page == 1 {
        let runs = db.active_heads().or_internal("active runs")?;
        let open = || runs.iter().filter(|r| !r.finished && !r.deleted);
        let busy = || open().filter(|r| r.workers > 0);
        p.cores = busy().map(|r| r.cores).sum();
        p.workers = busy().map(|r| r.workers).sum();
        p.mnps = (busy().map(|r| r.nps).sum::<f64>() / 1e6).round() as u64;
        p.games_per_minute = busy().map(|r| r.games_per_minute).sum::<f64>().round() as u64;
        let hours: f64 = open()
            .filter(|r| r.workers > 0 || !r.approved)
            .map(remaining_hours)
            .sum();
        let remaining = if p.cores == 0 {
            0.0
        } else {
            hours / p.cores as f64
        };
        p.time_remaining = format!("{remaining:.1}h");
        let mut panels = unfinished_panels(open());
        panels.insert(2, failed_panel(&f.runs));
        p.panels = panels;
    }
    Ok(p.render()?)
}

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

use super::lists::{
    self, PageLink, Panel, failed_panel, finished_part, parse_query, unfinished_panels,
};
use super::results::{RunRow, remaining_hours};
use super::{Flash, Input, Layout, Out, controls, errors, page};
use crate::http::AppState;

#[derive(Template)]
#[template(path = "tests.html")]
pub struct TestsPage {
    pub l: Layout,
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
    pub pager: Vec<PageLink>,
}

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
        let mut to = String::from("/tests/finished?mode=search");
        for k in ["user", "text"] {
            if let Some(v) = params.get(k).filter(|v| !v.trim().is_empty()) {
                to.push_str(&format!("&{k}={}", lists::url_encode(v.trim())));
            }
        }
        return (StatusCode::FOUND, [(header::LOCATION, to)]).into_response();
    }
    let done = params
        .get("done")
        .and_then(|code| controls::done_message(code, params.get("run").map(String::as_str)));
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let base = "/tests";
        let f = match finished_part(db, base, None, q) {
            Ok(f) => f,
            Err(out) => return out,
        };
        let mut l = Layout::new(ctx, "Tests");
        if let Some(text) = done {
            l = l.flash(Flash::info(text));
        }
        let mut p = TestsPage {
            l,
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
            let runs = match db.active_heads() {
                Ok(runs) => runs,
                Err(e) => {
                    tracing::error!(error = %e, "active runs");
                    return errors::internal();
                }
            };
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
        Out::render(StatusCode::OK, &p)
    })
    .await
}

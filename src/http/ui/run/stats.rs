//! A run's statistics page, `/tests/stats/{id}` (its raw statistics, as a page or, for the
//! live refresh, its content alone; the tables themselves are `stats_tables.rs`'s), and its
//! charts, `/tests/chart/{id}/{name}` (SVG drawn by `charts.rs`, `image/svg+xml`). The other
//! statistics pages are `live_elo.rs` and `sprt_calc.rs`.
//!
//! Must not: compute statistics itself (`crate::stats::raw` does), read a run but through
//! `RunDb::get_run` inside a page job, or render outside the pool.
//!
//! Live refresh (`static/refresh.js` sends `HX-Request: true`): a fragment answers 286 once
//! nothing will change any more (a finished run, a decided SPRT), 204 while the run waits
//! (pending or paused; the stats page only) and 200 with the new content otherwise. Without
//! the header the same URL is the full page; every answer carries `Vary: HX-Request`.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;

use super::charts;
use super::page::{load, page_title};
use super::stats_tables::{StatsContent, stats_content};
use crate::http::run_id::RunId;
use crate::http::state::AppState;
use crate::http::ui::kit::{
    Input, Layout, Page, PageError, STOP_POLLING, asset, is_fragment, page, vary,
};

#[derive(Template)]
#[template(path = "stats.html")]
pub struct StatsPage {
    pub l: Layout,
    pub id: String,
    pub heading: String,
    pub spsa: bool,
    pub live: bool,
    pub c: StatsContent,
    pub script: String,
}

#[derive(Template)]
#[template(source = "{% include \"stats_content.html\" %}", ext = "html")]
pub struct StatsFragment {
    pub c: StatsContent,
}

/// `GET /tests/stats/{id}`: the page, or its content for the live refresh.
pub async fn stats_page(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let fragment = is_fragment(&headers);
    let id = id.parse::<RunId>();
    let r = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let run = load(db, id?)?;
        let spsa = run.args.spsa.is_some();
        if fragment {
            if spsa || run.finished {
                let c = stats_content(&run);
                return Page::render(STOP_POLLING, &StatsFragment { c });
            }
            if run.workers == 0 {
                return Ok(Page::Html(StatusCode::NO_CONTENT, String::new()));
            }
            return Page::render(
                StatusCode::OK,
                &StatsFragment {
                    c: stats_content(&run),
                },
            );
        }
        let title = page_title(&run);
        let p = StatsPage {
            l: Layout::new(ctx, &format!("Statistics - {title}")),
            id: run.id.clone(),
            heading: title,
            spsa,
            live: !spsa && !run.finished,
            c: stats_content(&run),
            script: asset("refresh.js"),
        };
        Page::ok(&p)
    })
    .await;
    vary(r)
}

/// `GET /tests/chart/{id}/{name}`: `llr.svg`, `elo.svg` or `spsa.svg`, drawn in the pool;
/// the HTML 404 page for an unknown run or a chart the run does not have.
pub async fn chart(
    State(state): State<Arc<AppState>>,
    Path((id, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let kind = charts::Chart::parse_with_look(&name);
    let id = id.parse::<RunId>();
    let mut r = page(&state, Input::get(&state, &headers), move |db, _, _| {
        let run = load(db, id?)?;
        let (kind, look) = kind
            .filter(|(k, _)| k.applies(&run))
            .ok_or(PageError::NotFound)?;
        let svg = charts::render_as(&run, kind, look)
            .map_err(|e| PageError::internal("chart", format!("run {}: {e}", run.id)))?;
        Ok(Page::Html(StatusCode::OK, svg))
    })
    .await;
    if r.status() == StatusCode::OK {
        r.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("image/svg+xml"),
        );
    }
    r
}

//! The dashboard: `/` (a redirect) and `/tests`: the stats cards (cores, Mnps, games per
//! minute, time remaining), the workers panel (a searchable table of the machines at work),
//! and the panels pending approval, paused, failed (among this page's finished runs), active
//! (with the active-run filters) and finished (25 a page, with the finished lists' colour
//! filters); `?page=N` past 1 shows only the finished runs. Every panel folds.
//!
//! Live refresh (`static/refresh.js`, `HX-Request: true`): `?live=panels` (the cards and the
//! unfinished panels), `?live=finished` and `?live=workers[&workers_q=…]` answer one part
//! with its version as `ETag`; a request whose `If-None-Match` names the current version gets
//! 304 without a body. The default view's parts are the shared renderings of
//! [`DashboardCache`] (at most one render a second), so a refresh costs at most what the
//! cached page costs, and an unchanged one is answered on the event loop from the cache
//! alone (no session, no pool job). A `live` request that is a navigation is sent to
//! `/tests`. Every answer carries `Vary: HX-Request`.
//!
//! Must not: render or read the run core outside a page job; let a viewer's choice (filters,
//! search, token) into a shared rendering (those are slots filled per request).

use std::collections::HashMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::controls;
use super::dashboard_cache::{Dash, DashboardCache, Piece};
use super::dashboard_filters::{self as filters, ALL};
use super::dashboard_workers as workers;
use super::kit::{Href, Input, Layout, OrInternal, Page, PageError, Pager, asset, page};
use super::lists::{ListQuery, Panel, failed_panel, finished_part, parse_query, unfinished_panels};
use super::results::{RunRow, remaining_hours};
use crate::http::state::AppState;
use crate::rundb::RunDb;
use crate::scheduler::Scheduler;

#[derive(Template)]
#[template(path = "tests.html")]
pub struct TestsPage {
    pub l: Layout,
    /// The flash of a control that just succeeded (its run linked).
    pub done: Option<controls::Done>,
    /// The wrapper's classes hiding the active rows the filters leave out.
    pub hide: String,
    /// The live part (page 1 only), its slots filled.
    pub live: Option<String>,
    pub finished: String,
    /// The default view refreshes in place.
    pub refresh: bool,
    pub live_etag: String,
    pub finished_etag: String,
    pub refresh_js: String,
    pub dashboard_js: String,
    /// The runs the viewer follows (not in the shared content: it is per viewer).
    pub following: Vec<super::follows::FollowRow>,
}

/// The forms' token as the content's templates read it (`l.csrf`).
pub struct FormToken {
    pub csrf: String,
}

/// The live part: the cards, the workers panel's frame and the unfinished panels.
#[derive(Template)]
#[template(path = "tests_live.html")]
pub struct TestsLive {
    pub l: FormToken,
    pub panels: Vec<Panel>,
    pub cores: u64,
    pub workers: u64,
    /// Σ nps of the active runs, in millions.
    pub mnps: u64,
    /// Σ games per minute of the active runs.
    pub games_per_minute: u64,
    /// Σ remaining core-hours of the pending and active runs over the cores, `X.Yh`.
    pub time_remaining: String,
}

/// The finished panel.
#[derive(Template)]
#[template(path = "tests_finished.html")]
pub struct TestsFinished {
    pub l: FormToken,
    pub finished_heading: String,
    pub count_line: String,
    pub finished: Vec<RunRow>,
    pub pager: Pager,
}

/// The workers panel's content: the search form and the table.
#[derive(Template)]
#[template(path = "dashboard_workers_box.html")]
pub struct WorkersBox {
    pub q: String,
    pub refresh: String,
    pub etag: String,
    pub table: String,
}

/// The slots of the shared renderings, filled per request ([`fill`]).
const TOKEN_SLOT: &str = "__shoal_csrf_token__";
const WORKERS_SLOT: &str = "__shoal_workers__";
const WORKERS_OPEN_SLOT: &str = "__shoal_workers_open__";
const FILTERS_SLOT: &str = "__shoal_filters__";
const SHOWN_SLOT: &str = "__shoal_shown__";

/// What a live refresh puts in the workers panel: the page keeps its own (`data-keep`), so
/// a search being typed and the table's own refresh are left alone.
const WORKERS_KEPT: &str = "<div id=\"workers-body\" data-keep></div>";

/// `GET /`: a 302 to the dashboard (no session work).
pub async fn root() -> Response {
    (StatusCode::FOUND, [(header::LOCATION, "/tests")]).into_response()
}

/// `GET /tests[?page=N&success_only=1|yellow_only=1|ltc_only=1][&filters=1&sprt=1…]
/// [&workers_q=…]`: the dashboard. `done` names a run control that just succeeded (only
/// known codes are flashed, so a link cannot put words on the page); `user` or `text` go to
/// the finished runs' search; `live` asks for one part (the module's comment).
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
    if let Some(part) = params.get("live") {
        let part = part.clone();
        return vary(live(state, headers, params, part).await);
    }
    let done = params
        .get("done")
        .and_then(|code| controls::done_message(code, params.get("run").map(String::as_str)));
    let cacheable = q == ListQuery::default_first() && done.is_none();
    let (mask, cookie) = filters::choice(&params, &headers);
    let wq = workers::query(&params);
    let cache = Arc::clone(&state.dashboard);
    let ledger = state.ledger.clone();
    let scheduler = Arc::clone(&state.scheduler);
    let mut r = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let l = Layout::new(ctx, "Tests");
        let dash = dash_for(db, &cache, q, cacheable)?;
        let live = if q.page == 1 {
            let table = workers_table(db, &scheduler, &cache, &wq)?;
            let boxed = WorkersBox {
                refresh: workers_href(&wq),
                etag: workers_etag(&table),
                q: wq.clone(),
                table: table.html.clone(),
            }
            .render()?;
            Some(fill_live(&dash, &ctx.csrf, mask, &boxed, !wq.is_empty())?)
        } else {
            None
        };
        let following = super::follows::dashboard_rows(&ledger, ctx)?;
        let p = TestsPage {
            l,
            done,
            following,
            hide: filters::hide_classes(mask),
            live,
            finished: fill(&dash.finished.html, &[(TOKEN_SLOT, &ctx.csrf)]),
            refresh: cacheable,
            live_etag: live_etag(&dash, mask),
            finished_etag: finished_etag(&dash),
            refresh_js: asset("refresh.js"),
            dashboard_js: asset("dashboard.js"),
        };
        Page::ok(&p)
    })
    .await;
    if let Some(c) = cookie {
        r.headers_mut().append(header::SET_COOKIE, c);
    }
    vary(r)
}

/// One part for the live refresh: 304 when the client's version is current, else the part
/// and its version.
async fn live(
    state: Arc<AppState>,
    headers: HeaderMap,
    params: HashMap<String, String>,
    part: String,
) -> Response {
    if !is_fragment(&headers) {
        return (StatusCode::FOUND, [(header::LOCATION, "/tests")]).into_response();
    }
    let mask = filters::from_cookie(&headers);
    let wq = workers::query(&params);
    let have = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    // On the loop: an atomic and the shared renderings, nothing that waits.
    let saves = state.rundb.listed_changes();
    let current = match part.as_str() {
        "panels" => state.dashboard.fresh(saves).map(|d| live_etag(&d, mask)),
        "finished" => state.dashboard.fresh(saves).map(|d| finished_etag(&d)),
        "workers" if wq.is_empty() => state
            .dashboard
            .fresh_workers(saves)
            .map(|p| workers_etag(&p)),
        _ => None,
    };
    if let (Some(etag), Some(have)) = (current, have.as_deref())
        && etag == have
    {
        return not_modified(etag);
    }
    let cache = Arc::clone(&state.dashboard);
    let scheduler = Arc::clone(&state.scheduler);
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let first = ListQuery::default_first();
        let (etag, html) = match part.as_str() {
            "panels" => {
                let dash = dash_for(db, &cache, first, true)?;
                let html = fill_live(&dash, &ctx.csrf, mask, WORKERS_KEPT, false)?;
                (live_etag(&dash, mask), html)
            }
            "finished" => {
                let dash = dash_for(db, &cache, first, true)?;
                let html = fill(&dash.finished.html, &[(TOKEN_SLOT, &ctx.csrf)]);
                (finished_etag(&dash), html)
            }
            "workers" => {
                let table = workers_table(db, &scheduler, &cache, &wq)?;
                (workers_etag(&table), table.html.clone())
            }
            _ => return Err(PageError::NotFound),
        };
        if have.as_deref() == Some(etag.as_str()) {
            return Ok(Page::Versioned(
                StatusCode::NOT_MODIFIED,
                String::new(),
                etag,
            ));
        }
        Ok(Page::Versioned(StatusCode::OK, html, etag))
    })
    .await
}

/// The answer "you have the current version" (no body).
fn not_modified(etag: String) -> Response {
    let mut r = StatusCode::NOT_MODIFIED.into_response();
    let h = r.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, v);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// Whether the request is the live refresh's (`HX-Request: true`, not a navigation).
fn is_fragment(headers: &HeaderMap) -> bool {
    let hx = headers
        .get("hx-request")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let navigate = headers
        .get("sec-fetch-mode")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "navigate");
    hx && !navigate
}

/// Marks an answer that differs with `HX-Request` (page or part).
fn vary(mut r: Response) -> Response {
    r.headers_mut()
        .append(header::VARY, HeaderValue::from_static("HX-Request"));
    r
}

fn live_etag(dash: &Dash, mask: u8) -> String {
    format!("\"L{:x}-{mask:x}\"", dash.live.version)
}

fn finished_etag(dash: &Dash) -> String {
    format!("\"F{:x}\"", dash.finished.version)
}

fn workers_etag(p: &Piece) -> String {
    format!("\"W{:x}\"", p.version)
}

/// The workers table's refresh URL for the search `q`.
fn workers_href(q: &str) -> String {
    Href::new("/tests")
        .param("live", "workers")
        .param_nonempty("workers_q", q)
        .build()
}

/// The rendering for `q`: the shared one for the default view (fresh, or rendered now and
/// kept), else one for this request.
fn dash_for(
    db: &RunDb,
    cache: &DashboardCache,
    q: ListQuery,
    cacheable: bool,
) -> Result<Arc<Dash>, PageError> {
    if !cacheable {
        return Ok(Arc::new(render(db, q)?));
    }
    // Read before rendering: a save during the render leaves the entry stale.
    let saves = db.listed_changes();
    if let Some(dash) = cache.fresh(saves) {
        return Ok(dash);
    }
    let dash = Arc::new(render(db, q)?);
    cache.store(saves, Arc::clone(&dash));
    Ok(dash)
}

/// The workers table for the search `q`: the shared one without a search.
fn workers_table(
    db: &RunDb,
    scheduler: &Scheduler,
    cache: &DashboardCache,
    q: &str,
) -> Result<Arc<Piece>, PageError> {
    if !q.is_empty() {
        return Ok(Arc::new(Piece::new(workers::render(scheduler, q)?)));
    }
    let saves = db.listed_changes();
    if let Some(p) = cache.fresh_workers(saves) {
        return Ok(p);
    }
    let p = Arc::new(Piece::new(workers::render(scheduler, "")?));
    cache.store_workers(saves, Arc::clone(&p));
    Ok(p)
}

/// The live part for one viewer: its token, the workers panel's content (`boxed`, open when
/// searched), the filters' form and the count they show.
fn fill_live(
    dash: &Dash,
    token: &str,
    mask: u8,
    boxed: &str,
    open: bool,
) -> Result<String, PageError> {
    let form = filters::form(mask, &dash.kinds);
    let shown = if mask == ALL {
        String::new()
    } else {
        format!(" ({})", form.shown)
    };
    let form = form.render()?;
    Ok(fill(
        &dash.live.html,
        &[
            (TOKEN_SLOT, token),
            (WORKERS_SLOT, boxed),
            (WORKERS_OPEN_SLOT, if open { " open" } else { "" }),
            (FILTERS_SLOT, &form),
            (SHOWN_SLOT, &shown),
        ],
    ))
}

/// `html` with each slot replaced by its value, in one pass.
fn fill(html: &str, slots: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(html.len() + 4096);
    let mut rest = html;
    while let Some(at) = rest.find("__shoal_") {
        out.push_str(&rest[..at]);
        let tail = &rest[at..];
        match slots.iter().find(|(slot, _)| tail.starts_with(slot)) {
            Some((slot, value)) => {
                out.push_str(value);
                rest = &tail[slot.len()..];
            }
            None => {
                out.push_str("__shoal_");
                rest = &tail["__shoal_".len()..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Renders the dashboard's parts for query `q`, with slots for each viewer's choices (the
/// HTML, or why not: a redirect past the last page, a failure).
fn render(db: &RunDb, q: ListQuery) -> Result<Dash, PageError> {
    let f = finished_part(db, "/tests", None, q)?;
    let token = || FormToken {
        csrf: TOKEN_SLOT.to_string(),
    };
    let finished = TestsFinished {
        l: token(),
        finished_heading: f.heading.clone(),
        count_line: f.count_line.clone(),
        finished: f.runs.iter().map(RunRow::of).collect(),
        pager: f.pager,
    }
    .render()?;
    if q.page != 1 {
        return Ok(Dash {
            live: Piece::new(String::new()),
            finished: Piece::new(finished),
            kinds: Vec::new(),
        });
    }
    let runs = db.active_heads().or_internal("active runs")?;
    let open = || runs.iter().filter(|r| !r.finished && !r.deleted);
    let busy = || open().filter(|r| r.workers > 0);
    let cores: u64 = busy().map(|r| r.cores).sum();
    let hours: f64 = open()
        .filter(|r| r.workers > 0 || !r.approved)
        .map(remaining_hours)
        .sum();
    let remaining = if cores == 0 {
        0.0
    } else {
        hours / cores as f64
    };
    let mut panels = unfinished_panels(open());
    panels.insert(2, failed_panel(&f.runs));
    if let Some(active) = panels.iter_mut().find(|p| p.key == "active") {
        active.heading = format!("Active - {}{SHOWN_SLOT} tests", active.rows.len());
        active.intro = FILTERS_SLOT;
    }
    let live = TestsLive {
        l: token(),
        panels,
        cores,
        workers: busy().map(|r| r.workers).sum(),
        mnps: (busy().map(|r| r.nps).sum::<f64>() / 1e6).round() as u64,
        games_per_minute: busy().map(|r| r.games_per_minute).sum::<f64>().round() as u64,
        time_remaining: format!("{remaining:.1}h"),
    }
    .render()?;
    Ok(Dash {
        live: Piece::new(live),
        finished: Piece::new(finished),
        kinds: busy().map(filters::kind).collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_filled_in_one_pass_and_others_left_alone() {
        let html = "a __shoal_csrf_token__ b __shoal_x__ c __shoal_shown__";
        let out = fill(html, &[(TOKEN_SLOT, "T"), (SHOWN_SLOT, " (2)")]);
        assert_eq!(out, "a T b __shoal_x__ c  (2)");
        assert_eq!(fill("plain", &[(TOKEN_SLOT, "T")]), "plain");
    }
}

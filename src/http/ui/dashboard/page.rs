//! The dashboard: `/` (a redirect) and `/tests`: the stats cards (cores, Mnps, games per
//! minute, time remaining), the workers panel (a searchable table of the machines at work,
//! folded, and sent only when it is opened: `?live=workers`, or `?workers=1` without
//! JavaScript),
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
use headers::{ETag, HeaderMapExt as _, IfNoneMatch};

use super::cache::{Dash, DashboardCache, Piece};
use super::workers;
use crate::http::state::AppState;
use crate::http::ui::kit::done as controls;
use crate::http::ui::kit::results::{RunRow, remaining_hours};
use crate::http::ui::kit::run_filters::{self as filters, ALL};
use crate::http::ui::kit::run_lists::{
    ListQuery, Panel, failed_panel, finished_part, parse_query, unfinished_panels,
};
use crate::http::ui::kit::{
    Href, Input, Layout, OrInternal, Page, PageError, Pager, asset, is_fragment, page, vary,
};
use crate::rundb::RunDb;
use crate::scheduler::Scheduler;

#[derive(Template)]
#[template(path = "tests.html")]
pub struct TestsPage<'a> {
    pub l: Layout,
    /// The flash of a control that just succeeded (its run linked).
    pub done: Option<controls::Done>,
    /// The wrapper's classes hiding the active rows the filters leave out.
    pub hide: String,
    /// The live part (page 1 only), its slots filled as it is written out.
    pub live: Option<Filled<'a>>,
    pub finished: Filled<'a>,
    /// The default view refreshes in place.
    pub refresh: bool,
    pub live_etag: String,
    pub finished_etag: String,
    pub refresh_js: String,
    pub dashboard_js: String,
    /// The runs the viewer follows (not in the shared content: it is per viewer).
    pub following: Vec<crate::http::ui::kit::follows::FollowRow>,
    /// The active test groups (issue 39): (id, its submitter), linked to their pages.
    pub groups: Vec<(String, String)>,
}

/// A shared rendering and one viewer's slot values: written straight into the page (the
/// shared HTML is copied once per request, never searched).
pub struct Filled<'a> {
    piece: &'a Piece,
    slots: Vec<(&'static str, String)>,
}

impl Filled<'_> {
    fn slots(&self) -> Vec<(&str, &str)> {
        self.slots.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }

    /// As a string (a live fragment's answer).
    fn into_string(self) -> String {
        self.piece.filled(&self.slots())
    }
}

impl std::fmt::Display for Filled<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.piece.write_filled(f, &self.slots())
    }
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
/// [&workers=1|workers_q=…]`: the dashboard; the workers table is in it (its panel open)
/// only with `workers=1` or a search, else fetched when the panel is opened. `done` names a run control that just succeeded (only
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
    let show_workers = !wq.is_empty() || params.get("workers").is_some_and(|v| v == "1");
    let cache = Arc::clone(&state.dashboard);
    let ledger = state.ledger.clone();
    let scheduler = Arc::clone(&state.scheduler);
    let test_groups = Arc::clone(&state.groups);
    let mut r = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let l = Layout::new(ctx, "Tests");
        let dash = dash_for(db, &cache, q, cacheable)?;
        let live = if q.page == 1 {
            let boxed = if show_workers {
                let table = workers_table(db, &scheduler, &cache, &wq)?;
                WorkersBox {
                    refresh: workers_href(&wq),
                    etag: workers_etag(&table),
                    q: wq.clone(),
                    table: table.html.clone(),
                }
            } else {
                // Folded: the table comes when the panel is opened (no version yet, so the
                // first refresh fetches it), or with `workers=1` without JavaScript.
                WorkersBox {
                    refresh: workers_href(""),
                    etag: String::new(),
                    q: String::new(),
                    table: WORKERS_LATER.to_string(),
                }
            }
            .render()?;
            Some(fill_live(&dash, &ctx.csrf, mask, boxed, show_workers)?)
        } else {
            None
        };
        let following = crate::http::ui::kit::follows::dashboard_rows(&ledger, ctx)?;
        let p = TestsPage {
            l,
            done,
            following,
            groups: test_groups
                .active()
                .into_iter()
                .map(|g| (g.group_id, g.username))
                .collect(),
            hide: filters::hide_classes(mask),
            live,
            finished: Filled {
                piece: &dash.finished,
                slots: vec![(TOKEN_SLOT, ctx.csrf.clone())],
            },
            refresh: cacheable,
            live_etag: live_etag(&dash, mask),
            finished_etag: finished_etag(&dash),
            refresh_js: asset("refresh.js"),
            dashboard_js: asset("dashboard.js"),
        };
        // Sized for the shared parts, so they are copied once, with no regrowth.
        let mut html =
            String::with_capacity(dash.live.html.len() + dash.finished.html.len() + 32 * 1024);
        p.render_into(&mut html)?;
        Ok(Page::Html(StatusCode::OK, html))
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
    let have: Option<IfNoneMatch> = headers.typed_get();
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
    if let Some(etag) = current
        && names(have.as_ref(), &etag)
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
                let html = fill_live(&dash, &ctx.csrf, mask, WORKERS_KEPT.to_string(), false)?;
                (live_etag(&dash, mask), html.into_string())
            }
            "finished" => {
                let dash = dash_for(db, &cache, first, true)?;
                let html = dash.finished.filled(&[(TOKEN_SLOT, &ctx.csrf)]);
                (finished_etag(&dash), html)
            }
            "workers" => {
                let table = workers_table(db, &scheduler, &cache, &wq)?;
                (workers_etag(&table), table.html.clone())
            }
            _ => return Err(PageError::NotFound),
        };
        if names(have.as_ref(), &etag) {
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

/// Whether the client's `If-None-Match` names `etag` (weak comparison, a list or `*`, as
/// RFC 9110 says): then it has the current version.
fn names(have: Option<&IfNoneMatch>, etag: &str) -> bool {
    let (Some(have), Ok(etag)) = (have, etag.parse::<ETag>()) else {
        return false;
    };
    !have.precondition_passes(&etag)
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

/// The folded workers panel's content until it is opened: the whole table (up to 100 rows)
/// is not sent with every dashboard.
const WORKERS_LATER: &str = "<p class=\"count lazy\">The table is fetched when this panel is \
     opened. <a href=\"/tests?workers=1#workers\">Show the workers</a> \
     (without JavaScript) or <a href=\"/tests/machines\">every machine, sorted and paged</a>.</p>";

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
/// shown), the filters' form and the count they show.
fn fill_live<'a>(
    dash: &'a Dash,
    token: &str,
    mask: u8,
    boxed: String,
    open: bool,
) -> Result<Filled<'a>, PageError> {
    let form = filters::form(mask, &dash.kinds);
    let shown = if mask == ALL {
        String::new()
    } else {
        format!(" ({})", form.shown)
    };
    Ok(Filled {
        piece: &dash.live,
        slots: vec![
            (TOKEN_SLOT, token.to_string()),
            (WORKERS_SLOT, boxed),
            (
                WORKERS_OPEN_SLOT,
                if open { " open" } else { "" }.to_string(),
            ),
            (FILTERS_SLOT, form.render()?),
            (SHOWN_SLOT, shown),
        ],
    })
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
    use axum::http::{HeaderMap, HeaderValue, header};
    use headers::{HeaderMapExt as _, IfNoneMatch};

    use super::names;

    fn have(v: &str) -> Option<IfNoneMatch> {
        let mut h = HeaderMap::new();
        h.insert(header::IF_NONE_MATCH, HeaderValue::from_str(v).unwrap());
        h.typed_get()
    }

    #[test]
    fn if_none_match_names_the_version_exactly_in_a_list_or_weakly() {
        assert!(names(have("\"F1a\"").as_ref(), "\"F1a\""));
        assert!(names(have("\"x\", W/\"F1a\"").as_ref(), "\"F1a\""));
        assert!(names(have("*").as_ref(), "\"F1a\""));
        assert!(!names(have("\"F1b\"").as_ref(), "\"F1a\""));
        assert!(!names(have("F1a").as_ref(), "\"F1a\""));
        assert!(!names(None, "\"F1a\""));
    }
}

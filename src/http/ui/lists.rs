//! The run lists: `/tests/finished` (finished runs, paged, with the All/Green/Yellow/LTC
//! tabs) and `/tests/user/{name}` (one submitter's unfinished runs and finished runs).
//!
//! Owns: reading the list query (`page`, `success_only`, `yellow_only`, `ltc_only`), the
//! count line and the pager. Must not: call the store (only `RunDb` queries), or run outside
//! [`page`].

use std::collections::HashMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::dashboard::RunRow;
use super::session::Ctx;
use super::{Input, Layout, Out, errors, page};
use crate::http::AppState;
use crate::rundb::RunDb;
use crate::rundb::queries::FinishedFilter;

/// Finished runs a page of these lists holds.
pub const PAGE_SIZE: u64 = 25;

/// The last page that may be asked for (the same bound as `/api/finished_runs`).
pub const MAX_PAGE: u64 = 1_000_000;

/// One tab (All, Green, Yellow, LTC).
pub struct Tab {
    pub label: &'static str,
    pub href: String,
    pub current: bool,
}

/// One pager item: a page link, a disabled Prev/Next (empty `href`) or a gap ("…").
pub struct PageLink {
    pub label: String,
    pub href: String,
    pub current: bool,
}

#[derive(Template)]
#[template(path = "lists.html")]
pub struct ListPage {
    pub l: Layout,
    pub heading: String,
    pub tabs: Vec<Tab>,
    /// The user page's first page shows the unfinished runs too.
    pub show_active: bool,
    pub pending: Vec<RunRow>,
    pub paused: Vec<RunRow>,
    pub active: Vec<RunRow>,
    pub finished_heading: String,
    pub count_line: String,
    pub finished: Vec<RunRow>,
    pub pager: Vec<PageLink>,
}

/// The list query: the page (1-based; anything not a number from 1 on means 1; capped at
/// [`MAX_PAGE`]) and the colour/LTC filter (at most one, as the tabs set them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ListQuery {
    page: u64,
    filter: Which,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Which {
    All,
    Green,
    Yellow,
    Ltc,
}

impl Which {
    const ALL: [Which; 4] = [Which::All, Which::Green, Which::Yellow, Which::Ltc];

    fn label(self) -> &'static str {
        match self {
            Which::All => "All",
            Which::Green => "Green",
            Which::Yellow => "Yellow",
            Which::Ltc => "LTC",
        }
    }

    /// The query parameter that selects the tab.
    fn param(self) -> Option<&'static str> {
        match self {
            Which::All => None,
            Which::Green => Some("success_only=1"),
            Which::Yellow => Some("yellow_only=1"),
            Which::Ltc => Some("ltc_only=1"),
        }
    }

    /// The heading suffix.
    fn suffix(self) -> &'static str {
        match self {
            Which::All => "",
            Which::Green => " - Green",
            Which::Yellow => " - Yellow",
            Which::Ltc => " - LTC",
        }
    }

    /// The browser title suffix.
    fn title_suffix(self) -> &'static str {
        match self {
            Which::All => "",
            Which::Green => " - Greens",
            Which::Yellow => " - Yellows",
            Which::Ltc => " - LTC",
        }
    }
}

fn flag(params: &HashMap<String, String>, key: &str) -> bool {
    params
        .get(key)
        .is_some_and(|v| !v.is_empty() && v != "0" && v != "false")
}

fn parse_query(params: &HashMap<String, String>) -> ListQuery {
    let page = params
        .get("page")
        .and_then(|p| p.trim().parse::<u64>().ok())
        .filter(|p| *p >= 1)
        .map_or(1, |p| p.min(MAX_PAGE));
    let filter = if flag(params, "success_only") {
        Which::Green
    } else if flag(params, "yellow_only") {
        Which::Yellow
    } else if flag(params, "ltc_only") {
        Which::Ltc
    } else {
        Which::All
    };
    ListQuery { page, filter }
}

/// `base` with the filter's parameter and, past page 1, the page.
fn href(base: &str, filter: Which, page: u64) -> String {
    let mut params: Vec<String> = filter.param().map(str::to_string).into_iter().collect();
    if page > 1 {
        params.push(format!("page={page}"));
    }
    if params.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", params.join("&"))
    }
}

fn tabs(base: &str, current: Which) -> Vec<Tab> {
    Which::ALL
        .iter()
        .map(|&t| Tab {
            label: t.label(),
            href: href(base, t, 1),
            current: t == current,
        })
        .collect()
}

/// The pages a pager shows: page 1 always, the last page, and either pages 2–4 (near the
/// start), the last four (near the end) or the current page with its neighbours; `None` marks
/// a gap.
pub(super) fn pager_pages(page: u64, last: u64) -> Vec<Option<u64>> {
    let mut pages = vec![1, last];
    if page <= 3 {
        pages.extend(2..=4);
    } else if page + 2 >= last {
        pages.extend(last.saturating_sub(3)..=last);
    } else {
        pages.extend(page - 1..=page + 1);
    }
    pages.retain(|p| (1..=last).contains(p));
    pages.sort_unstable();
    pages.dedup();
    let mut out = Vec::new();
    let mut prev = 0;
    for p in pages {
        if p > prev + 1 {
            out.push(None);
        }
        out.push(Some(p));
        prev = p;
    }
    out
}

/// The pager: Prev · pages · Next; empty (hidden) when there is one page.
fn pager(base: &str, filter: Which, page: u64, last: u64) -> Vec<PageLink> {
    if last <= 1 {
        return Vec::new();
    }
    let link = |label: String, target: Option<u64>, current: bool| PageLink {
        label,
        href: target.map_or_else(String::new, |p| href(base, filter, p)),
        current,
    };
    let mut out = vec![link("Prev".into(), (page > 1).then(|| page - 1), false)];
    for p in pager_pages(page, last) {
        out.push(match p {
            Some(p) => link(p.to_string(), Some(p), p == page),
            None => link("…".into(), None, false),
        });
    }
    out.push(link("Next".into(), (page < last).then(|| page + 1), false));
    out
}

/// The last page of `total` runs (1 when there are none).
fn last_page(total: u64) -> u64 {
    total.div_ceil(PAGE_SIZE).clamp(1, MAX_PAGE)
}

/// The finished part of a list: its heading, count line, rows and pager; or the redirect to
/// the last page when the asked page is past it.
struct Finished {
    heading: String,
    count_line: String,
    rows: Vec<RunRow>,
    pager: Vec<PageLink>,
}

fn finished_part(
    db: &RunDb,
    base: &str,
    username: Option<&str>,
    q: ListQuery,
) -> Result<Finished, Out> {
    let mut filter = FinishedFilter {
        page: q.page,
        page_size: PAGE_SIZE,
        username: username.map(str::to_string),
        success_only: q.filter == Which::Green,
        yellow_only: q.filter == Which::Yellow,
        ltc_only: q.filter == Which::Ltc,
        since: None,
    };
    let total = db.count_finished_runs(&filter).map_err(|e| {
        tracing::error!(error = %e, "finished runs count");
        errors::internal()
    })?;
    let last = last_page(total);
    if q.page > last {
        return Err(Out::Redirect(href(base, q.filter, last)));
    }
    filter.page = q.page;
    let runs = db.finished_runs(&filter).map_err(|e| {
        tracing::error!(error = %e, "finished runs");
        errors::internal()
    })?;
    let rows: Vec<RunRow> = runs.iter().map(RunRow::of).collect();
    Ok(Finished {
        heading: format!("Finished - {total} tests"),
        count_line: format!(
            "Showing {} of {total} matching finished test(s) on page {} of {last}.",
            rows.len(),
            q.page
        ),
        rows,
        pager: pager(base, q.filter, q.page, last),
    })
}

fn list_page(ctx: &Ctx, title: &str, heading: String, base: &str, q: ListQuery) -> ListPage {
    ListPage {
        l: Layout::new(ctx, title),
        heading,
        tabs: tabs(base, q.filter),
        show_active: false,
        pending: Vec::new(),
        paused: Vec::new(),
        active: Vec::new(),
        finished_heading: String::new(),
        count_line: String::new(),
        finished: Vec::new(),
        pager: Vec::new(),
    }
}

fn fill(p: &mut ListPage, f: Finished) {
    p.finished_heading = f.heading;
    p.count_line = f.count_line;
    p.finished = f.rows;
    p.pager = f.pager;
}

/// `GET /tests/finished[?page=N&success_only=1|yellow_only=1|ltc_only=1]`: 25 finished runs a
/// page, newest first; a page past the last redirects to the last.
pub async fn finished(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let q = parse_query(&params);
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let base = "/tests/finished";
        let f = match finished_part(db, base, None, q) {
            Ok(f) => f,
            Err(out) => return out,
        };
        let title = format!("Finished Tests{}", q.filter.title_suffix());
        let heading = format!("Finished Tests{}", q.filter.suffix());
        let mut p = list_page(ctx, &title, heading, base, q);
        fill(&mut p, f);
        Out::render(StatusCode::OK, &p)
    })
    .await
}

/// `GET /tests/user/{name}`: that submitter's pending, paused and active runs (page 1) and
/// finished runs (paged as `/tests/finished`); 404 for an unknown user.
pub async fn user(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let q = parse_query(&params);
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        match db.users.get(&name) {
            Ok(Some(_)) => {}
            Ok(None) => return errors::not_found_page(ctx),
            Err(e) => {
                tracing::error!(error = %e, "user lookup");
                return errors::internal();
            }
        }
        let base = format!("/tests/user/{name}");
        let f = match finished_part(db, &base, Some(&name), q) {
            Ok(f) => f,
            Err(out) => return out,
        };
        let mut p = list_page(ctx, &name, format!("{name} - Tests"), &base, q);
        if q.page == 1 {
            let runs = match db.active_heads() {
                Ok(runs) => runs,
                Err(e) => {
                    tracing::error!(error = %e, "active runs");
                    return errors::internal();
                }
            };
            let mine = || {
                runs.iter()
                    .filter(|r| !r.finished && !r.deleted && r.args.username == name)
            };
            p.show_active = true;
            p.pending = mine()
                .filter(|r| !r.approved && r.workers == 0)
                .map(RunRow::of)
                .collect();
            p.paused = mine()
                .filter(|r| r.approved && r.workers == 0)
                .map(RunRow::of)
                .collect();
            p.active = mine().filter(|r| r.workers > 0).map(RunRow::of).collect();
        }
        fill(&mut p, f);
        Out::render(StatusCode::OK, &p)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> ListQuery {
        parse_query(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        )
    }

    #[test]
    fn the_page_is_one_unless_a_number_and_is_capped() {
        assert_eq!(q(&[]).page, 1);
        assert_eq!(q(&[("page", "x")]).page, 1);
        assert_eq!(q(&[("page", "0")]).page, 1);
        assert_eq!(q(&[("page", "-3")]).page, 1);
        assert_eq!(q(&[("page", "7")]).page, 7);
        assert_eq!(q(&[("page", "99999999999")]).page, MAX_PAGE);
        assert_eq!(q(&[("page", "99999999999999999999999")]).page, 1);
        assert_eq!(q(&[("success_only", "1")]).filter, Which::Green);
        assert_eq!(q(&[("yellow_only", "0")]).filter, Which::All);
        assert_eq!(q(&[("ltc_only", "1")]).filter, Which::Ltc);
    }

    #[test]
    fn the_pager_follows_the_spec_layout() {
        let show = |page, last| {
            pager_pages(page, last)
                .into_iter()
                .map(|p| p.map_or("…".to_string(), |p| p.to_string()))
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert_eq!(show(1, 1), "1");
        assert_eq!(show(1, 3), "1 2 3");
        assert_eq!(show(1, 10), "1 2 3 4 … 10");
        assert_eq!(show(3, 10), "1 2 3 4 … 10");
        assert_eq!(show(5, 10), "1 … 4 5 6 … 10");
        assert_eq!(show(9, 10), "1 … 7 8 9 10");
        assert_eq!(show(10, 10), "1 … 7 8 9 10");
        assert!(pager("/x", Which::All, 1, 1).is_empty());
        let p = pager("/x", Which::Green, 1, 2);
        assert_eq!(p[0].href, "", "Prev disabled on page 1");
        assert_eq!(
            p.last().map(|l| l.href.as_str()),
            Some("/x?success_only=1&page=2")
        );
        assert_eq!(last_page(0), 1);
        assert_eq!(last_page(25), 1);
        assert_eq!(last_page(26), 2);
    }
}

//! The run lists: the page `/tests/finished` and `/tests/user/{name}` share (tabs, panels,
//! the finished part), and the panels the dashboard shares with them (pending, paused,
//! failed, active, finished). The pages themselves are the lists room's (`lists/`).
//!
//! Owns: reading the list query (`page`, `success_only`, `yellow_only`, `ltc_only`), the
//! panels' order, the count line and the pager. Must not: call the store (only `RunDb`
//! queries), or run outside [`page`].

use std::collections::HashMap;

use askama::Template;

use super::pager::{MAX_PAGE, page_param};
use super::results::RunRow;
use super::session::Ctx;
use super::{Href, Layout, OrInternal, PageError, Pager};
use crate::rundb::RunDb;
use crate::rundb::model::Run;
use crate::rundb::queries::FinishedFilter;

/// Finished runs a page of these lists holds.
pub const PAGE_SIZE: u64 = 25;

/// One tab (All, Green, Yellow, LTC).
pub struct Tab {
    pub label: &'static str,
    pub href: String,
    pub current: bool,
}

#[derive(Template)]
#[template(path = "lists.html")]
pub struct ListPage {
    pub l: Layout,
    pub heading: String,
    pub tabs: Vec<Tab>,
    /// Search mode's form (`None` in navigation mode).
    pub search: Option<SearchForm>,
    /// The user page's first page: pending, paused, failed and active.
    pub panels: Vec<Panel>,
    pub finished_heading: String,
    pub count_line: String,
    pub finished: Vec<RunRow>,
    pub pager: Pager,
}

/// The list query: the page (1-based; anything not a number from 1 on means 1; capped at
/// [`MAX_PAGE`]) and the colour/LTC filter (at most one, as the tabs set them).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListQuery {
    pub page: u64,
    pub filter: Which,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Which {
    All,
    Green,
    Yellow,
    Ltc,
}

impl ListQuery {
    /// Page 1 without a filter: the dashboard's default view.
    pub fn default_first() -> ListQuery {
        ListQuery {
            page: 1,
            filter: Which::All,
        }
    }
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

    /// The query parameter that selects the tab (its value is 1).
    fn param(self) -> Option<&'static str> {
        match self {
            Which::All => None,
            Which::Green => Some("success_only"),
            Which::Yellow => Some("yellow_only"),
            Which::Ltc => Some("ltc_only"),
        }
    }

    /// The heading suffix.
    pub(in crate::http::ui) fn suffix(self) -> &'static str {
        match self {
            Which::All => "",
            Which::Green => " - Green",
            Which::Yellow => " - Yellow",
            Which::Ltc => " - LTC",
        }
    }

    /// The browser title suffix.
    pub(in crate::http::ui) fn title_suffix(self) -> &'static str {
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

pub fn parse_query(params: &HashMap<String, String>) -> ListQuery {
    let page = page_param(params.get("page").map(String::as_str));
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
pub fn href(base: &str, filter: Which, page: u64) -> String {
    let mut h = Href::new(base);
    if let Some(key) = filter.param() {
        h = h.param(key, 1);
    }
    h.param_if(page > 1, "page", page).build()
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

/// The pager: Prev · pages · Next; empty (hidden) when there is one page.
fn pager(base: &str, filter: Which, page: u64, last: u64) -> Pager {
    Pager::new(page, last, |p| href(base, filter, p))
}

/// The last page of `total` runs (1 when there are none).
pub(in crate::http::ui) fn last_page(total: u64) -> u64 {
    total.div_ceil(PAGE_SIZE).clamp(1, MAX_PAGE)
}

/// One panel of unfinished (or failed) runs: its element id, heading, rows and empty text.
pub struct Panel {
    pub key: &'static str,
    pub heading: String,
    pub rows: Vec<RunRow>,
    pub empty: &'static str,
    /// Pending, paused and failed rows carry a Delete button.
    pub delete: bool,
    /// HTML shown between the heading and the table (the dashboard's active-run filters).
    pub intro: &'static str,
}

fn panel(key: &'static str, name: &str, rows: Vec<RunRow>, empty: &'static str) -> Panel {
    Panel {
        key,
        heading: format!("{name} - {} tests", rows.len()),
        delete: key != "active",
        rows,
        empty,
        intro: "",
    }
}

/// The pending, paused and active panels of `runs` (unfinished, undeleted runs only):
/// pending and paused by (priority, itp), active by SPRT first, then LLR, then non-SPSA,
/// then games played, all descending.
pub fn unfinished_panels<'a>(runs: impl Iterator<Item = &'a Run>) -> Vec<Panel> {
    let mut pending: Vec<&Run> = Vec::new();
    let mut paused: Vec<&Run> = Vec::new();
    let mut active: Vec<&Run> = Vec::new();
    for r in runs.filter(|r| !r.finished && !r.deleted) {
        if r.workers > 0 {
            active.push(r);
        } else if r.approved {
            paused.push(r);
        } else {
            pending.push(r);
        }
    }
    let by_priority = |a: &&Run, b: &&Run| {
        (a.args.priority, a.args.itp)
            .partial_cmp(&(b.args.priority, b.args.itp))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.id.cmp(&b.id))
    };
    pending.sort_by(by_priority);
    paused.sort_by(by_priority);
    let key = |r: &Run| {
        (
            r.args.sprt.is_some(),
            r.args.sprt.as_ref().map_or(0.0, |s| s.llr),
            r.args.spsa.is_none(),
            r.results.games(),
        )
    };
    active.sort_by(|a, b| {
        key(b)
            .partial_cmp(&key(a))
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.id.cmp(&b.id))
    });
    let rows = |v: Vec<&Run>| v.into_iter().map(RunRow::of).collect::<Vec<_>>();
    vec![
        panel(
            "pending",
            "Pending approval",
            rows(pending),
            "No tests pending approval",
        ),
        panel("paused", "Paused", rows(paused), "No paused tests"),
        panel("active", "Active", rows(active), "No active tests"),
    ]
}

/// The failed panel: the failed runs among a page's finished rows.
pub fn failed_panel(finished: &[Run]) -> Panel {
    panel(
        "failed",
        "Failed",
        finished
            .iter()
            .filter(|r| r.failed)
            .map(RunRow::of)
            .collect(),
        "No failed tests on this page",
    )
}

/// The finished part of a list: its heading, count line, rows and pager; or the redirect to
/// the last page when the asked page is past it.
pub struct Finished {
    pub heading: String,
    pub count_line: String,
    pub runs: Vec<Run>,
    pub pager: Pager,
}

pub fn finished_part(
    db: &RunDb,
    base: &str,
    username: Option<&str>,
    q: ListQuery,
) -> Result<Finished, PageError> {
    let mut filter = FinishedFilter {
        page: q.page,
        page_size: PAGE_SIZE,
        username: username.map(str::to_string),
        success_only: q.filter == Which::Green,
        yellow_only: q.filter == Which::Yellow,
        ltc_only: q.filter == Which::Ltc,
        since: None,
    };
    let total = db
        .count_finished_runs(&filter)
        .or_internal("finished runs count")?;
    let last = last_page(total);
    if q.page > last {
        return Err(PageError::Redirect(href(base, q.filter, last)));
    }
    filter.page = q.page;
    let runs = db.finished_runs(&filter).or_internal("finished runs")?;
    Ok(Finished {
        heading: format!("Finished - {total} tests"),
        count_line: format!(
            "Showing {} of {total} matching finished test(s) on page {} of {last}.",
            runs.len(),
            q.page
        ),
        runs,
        pager: pager(base, q.filter, q.page, last),
    })
}

pub(in crate::http::ui) fn list_page(
    ctx: &Ctx,
    title: &str,
    heading: String,
    base: &str,
    q: ListQuery,
) -> ListPage {
    ListPage {
        l: Layout::new(ctx, title),
        heading,
        tabs: tabs(base, q.filter),
        search: None,
        panels: Vec::new(),
        finished_heading: String::new(),
        count_line: String::new(),
        finished: Vec::new(),
        pager: Pager::default(),
    }
}

pub(in crate::http::ui) fn fill(p: &mut ListPage, f: Finished) {
    p.finished_heading = f.heading;
    p.count_line = f.count_line;
    p.finished = f.runs.iter().map(RunRow::of).collect();
    p.pager = f.pager;
}

/// The search form's values (search mode only).
pub struct SearchForm {
    pub user: String,
    pub text: String,
    pub max_count: u64,
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
    fn the_pager_links_the_filter() {
        assert!(pager("/x", Which::All, 1, 1).links.is_empty());
        let p = pager("/x", Which::Green, 1, 2);
        assert_eq!(p.links[0].href, "", "Prev disabled on page 1");
        assert_eq!(
            p.links.last().map(|l| l.href.as_str()),
            Some("/x?success_only=1&page=2")
        );
        assert_eq!(last_page(0), 1);
        assert_eq!(last_page(25), 1);
        assert_eq!(last_page(26), 2);
    }
}

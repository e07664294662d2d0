//! The run lists: `/tests/finished` (finished runs, paged, with the All/Green/Yellow/LTC
//! tabs, and its search mode `mode=search` over submitters and info texts) and
//! `/tests/user/{name}` (one submitter's panels), and the panels the dashboard shares with
//! them (pending, paused, failed, active, finished).
//!
//! Owns: reading the list query (`page`, `success_only`, `yellow_only`, `ltc_only`, `mode`,
//! `user`, `text`, `max_count`), the canonicalising redirects, the panels' order, the count
//! line and the pager. Must not: call the store (only `RunDb` queries), or run outside
//! [`page`].

use std::collections::HashMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::results::RunRow;
use super::session::Ctx;
use super::{Input, Layout, Out, errors, page};
use crate::accounts::Users;
use crate::http::AppState;
use crate::rundb::RunDb;
use crate::rundb::model::Run;
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
    /// Search mode's form (`None` in navigation mode).
    pub search: Option<SearchForm>,
    /// The user page's first page: pending, paused, failed and active.
    pub panels: Vec<Panel>,
    pub finished_heading: String,
    pub count_line: String,
    pub finished: Vec<RunRow>,
    pub pager: Vec<PageLink>,
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

pub fn parse_query(params: &HashMap<String, String>) -> ListQuery {
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
pub fn href(base: &str, filter: Which, page: u64) -> String {
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
    pager_by(page, last, |p| href(base, filter, p))
}

/// The pager with each page's link from `href_of`.
pub fn pager_by(page: u64, last: u64, href_of: impl Fn(u64) -> String) -> Vec<PageLink> {
    if last <= 1 {
        return Vec::new();
    }
    let link = |label: String, target: Option<u64>, current: bool| PageLink {
        label,
        href: target.map_or_else(String::new, &href_of),
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

/// One panel of unfinished (or failed) runs: its element id, heading, rows and empty text.
pub struct Panel {
    pub key: &'static str,
    pub heading: String,
    pub rows: Vec<RunRow>,
    pub empty: &'static str,
    /// Pending, paused and failed rows carry a Delete button.
    pub delete: bool,
}

fn panel(key: &'static str, name: &str, rows: Vec<RunRow>, empty: &'static str) -> Panel {
    Panel {
        key,
        heading: format!("{name} - {} tests", rows.len()),
        delete: key != "active",
        rows,
        empty,
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
    pub pager: Vec<PageLink>,
}

pub fn finished_part(
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

fn list_page(ctx: &Ctx, title: &str, heading: String, base: &str, q: ListQuery) -> ListPage {
    ListPage {
        l: Layout::new(ctx, title),
        heading,
        tabs: tabs(base, q.filter),
        search: None,
        panels: Vec::new(),
        finished_heading: String::new(),
        count_line: String::new(),
        finished: Vec::new(),
        pager: Vec::new(),
    }
}

fn fill(p: &mut ListPage, f: Finished) {
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

/// Search mode's result cap: anonymous visitors at most this many.
pub const ANONYMOUS_MAX_COUNT: u64 = 1000;
/// Search mode's default cap for logged-in users.
pub const DEFAULT_MAX_COUNT: u64 = 10_000;

/// A search's parameters, read from the query (typographic quotes normalised, `info_regex`
/// an alias of `text`).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Search {
    user: String,
    text: String,
    /// `max_count` as given (a positive integer), else `None`.
    max_count: Option<u64>,
}

fn search_of(params: &HashMap<String, String>) -> Search {
    let text = params
        .get("text")
        .filter(|t| !t.trim().is_empty())
        .or_else(|| params.get("info_regex"))
        .cloned()
        .unwrap_or_default();
    Search {
        user: params
            .get("user")
            .map(|u| u.trim().to_string())
            .unwrap_or_default(),
        text: text
            .replace(
                ['\u{201c}', '\u{201d}', '\u{201e}', '\u{00ab}', '\u{00bb}'],
                "\"",
            )
            .trim()
            .to_string(),
        max_count: params
            .get("max_count")
            .and_then(|m| m.trim().parse::<u64>().ok())
            .filter(|m| *m >= 1),
    }
}

/// The canonical search URL: `mode, max_count, user, text, page` in that order.
fn search_href(s: &Search, page: u64) -> String {
    let mut params = vec!["mode=search".to_string()];
    if let Some(m) = s.max_count {
        params.push(format!("max_count={m}"));
    }
    if !s.user.is_empty() {
        params.push(format!("user={}", url_encode(&s.user)));
    }
    if !s.text.is_empty() {
        params.push(format!("text={}", url_encode(&s.text)));
    }
    if page > 1 {
        params.push(format!("page={page}"));
    }
    format!("/tests/finished?{}", params.join("&"))
}

/// Percent-encodes a query value (everything but unreserved characters).
pub fn url_encode(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The parsed `text` query: words (any may match), `"phrases"` (all must match) and
/// `-words` (none may match); all whole words, case-insensitive.
#[derive(Debug, Default, PartialEq, Eq)]
struct TextQuery {
    words: Vec<String>,
    phrases: Vec<Vec<String>>,
    excluded: Vec<String>,
}

/// Lower-cased whole words of `s` (letters, digits and `_`).
fn words_of(s: &str) -> Vec<String> {
    s.split(|c: char| !(c.is_alphanumeric() || c == '_'))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

impl TextQuery {
    fn parse(text: &str) -> TextQuery {
        let mut q = TextQuery::default();
        for (i, part) in text.split('"').enumerate() {
            if i % 2 == 1 {
                let phrase = words_of(part);
                if !phrase.is_empty() {
                    q.phrases.push(phrase);
                }
                continue;
            }
            for token in part.split_whitespace() {
                if let Some(rest) = token.strip_prefix('-') {
                    q.excluded.extend(words_of(rest));
                } else {
                    q.words.extend(words_of(token));
                }
            }
        }
        q
    }

    fn is_empty(&self) -> bool {
        self.words.is_empty() && self.phrases.is_empty()
    }

    fn matches(&self, info: &str) -> bool {
        let words = words_of(info);
        let has = |w: &String| words.contains(w);
        let has_phrase = |p: &Vec<String>| words.windows(p.len()).any(|win| win == p.as_slice());
        !self.excluded.iter().any(has)
            && self.phrases.iter().all(has_phrase)
            && (self.words.is_empty() || !self.phrases.is_empty() || self.words.iter().any(has))
    }
}

/// Registered usernames containing `query` (case-insensitive): names starting with it first,
/// then by the match's position, then alphabetically.
fn ranked_users(names: Vec<String>, query: &str) -> Vec<String> {
    let q = query.to_lowercase();
    let mut hits: Vec<(bool, usize, String)> = names
        .into_iter()
        .filter_map(|n| {
            let pos = n.to_lowercase().find(&q)?;
            Some((pos != 0, pos, n))
        })
        .collect();
    hits.sort();
    hits.into_iter().map(|(_, _, n)| n).collect()
}

/// Finished runs scanned a batch at a time by the search.
const SEARCH_BATCH: u64 = 500;

/// The search's matches, in order, at most `cap`: per matching submitter (ranked) newest
/// first, or every finished run newest first; filtered by the text query.
fn search_runs(users: &Users, db: &RunDb, s: &Search, cap: u64) -> Result<Vec<Run>, Out> {
    let fail = |e: crate::rundb::RunDbError| {
        tracing::error!(error = %e, "finished runs search");
        errors::internal()
    };
    let text = TextQuery::parse(&s.text);
    let users: Vec<Option<String>> = if s.user.is_empty() {
        vec![None]
    } else {
        let names = users
            .list()
            .map_err(|e| {
                tracing::error!(error = %e, "users list");
                errors::internal()
            })?
            .into_iter()
            .map(|u| u.username)
            .collect();
        ranked_users(names, &s.user).into_iter().map(Some).collect()
    };
    let mut out = Vec::new();
    for user in users {
        let mut filter = FinishedFilter {
            page: 1,
            page_size: SEARCH_BATCH,
            username: user,
            ..FinishedFilter::default()
        };
        loop {
            let batch = db.finished_runs(&filter).map_err(fail)?;
            let done = (batch.len() as u64) < SEARCH_BATCH;
            for run in batch {
                if text.is_empty() || text.matches(&run.args.info) {
                    out.push(run);
                    if out.len() as u64 >= cap {
                        return Ok(out);
                    }
                }
            }
            if done {
                break;
            }
            filter.page = filter.page.saturating_add(1);
        }
    }
    Ok(out)
}

/// Search mode: the matches (capped), paged 25 at a time.
fn search_page(users: &Users, db: &RunDb, ctx: &Ctx, s: Search, page_no: u64) -> Out {
    let cap = match (&ctx.user, s.max_count) {
        (None, m) => m.unwrap_or(ANONYMOUS_MAX_COUNT).min(ANONYMOUS_MAX_COUNT),
        (Some(_), m) => m.unwrap_or(DEFAULT_MAX_COUNT),
    };
    let searching = !s.user.is_empty() || !s.text.is_empty();
    let runs = if searching {
        match search_runs(users, db, &s, cap) {
            Ok(runs) => runs,
            Err(out) => return out,
        }
    } else {
        Vec::new()
    };
    let total = runs.len() as u64;
    let last = last_page(total);
    if page_no > last {
        return Out::Redirect(search_href(&s, last));
    }
    let first = usize::try_from((page_no - 1) * PAGE_SIZE).unwrap_or(usize::MAX);
    let rows: Vec<RunRow> = runs
        .iter()
        .skip(first)
        .take(PAGE_SIZE as usize)
        .map(RunRow::of)
        .collect();
    let p = ListPage {
        l: Layout::new(ctx, "Search Finished Tests"),
        heading: "Search Finished Tests".into(),
        tabs: Vec::new(),
        search: Some(SearchForm {
            user: s.user.clone(),
            text: s.text.clone(),
            max_count: cap,
        }),
        panels: Vec::new(),
        finished_heading: format!("Finished - {total} tests"),
        count_line: if searching {
            format!(
                "Showing {} of {total} matching finished test(s) on page {page_no} of {last}.",
                rows.len()
            )
        } else {
            "Type a user name or words of the info to search.".into()
        },
        finished: rows,
        pager: pager_by(page_no, last, |t| search_href(&s, t)),
    };
    Out::render(StatusCode::OK, &p)
}

/// `GET /tests/finished`: navigation mode (25 finished runs a page, newest first, with the
/// All/Green/Yellow/LTC tabs; a page past the last redirects to the last) or search mode
/// (`mode=search`, with `user`, `text` and `max_count`), after the canonicalising
/// redirects: a `user`/`text` outside search mode goes to the search, a search drops the
/// colour flags, navigation drops `max_count`.
pub async fn finished(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let q = parse_query(&params);
    let search = search_of(&params);
    let search_mode = params.get("mode").is_some_and(|m| m == "search");
    let has_terms = !search.user.is_empty() || !search.text.is_empty();
    let redirect = if search_mode {
        let flags = ["success_only", "yellow_only", "ltc_only", "info_regex"]
            .iter()
            .any(|k| params.contains_key(*k));
        flags.then(|| search_href(&search, q.page))
    } else if has_terms {
        Some(search_href(&search, 1))
    } else if params.contains_key("max_count") {
        Some(href("/tests/finished", q.filter, q.page))
    } else {
        None
    };
    let accounts = state.accounts.clone();
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        if let Some(to) = redirect {
            return Out::Redirect(to);
        }
        if search_mode {
            return search_page(accounts.users(), db, ctx, search, q.page);
        }
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

/// `GET /tests/user/{name}`: that submitter's pending, paused, failed and active panels
/// (page 1) and finished runs (paged as `/tests/finished`); 404 for an unknown user.
pub async fn user(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let q = parse_query(&params);
    let accounts = state.accounts.clone();
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        match accounts.users().get(&name) {
            Ok(Some(_)) => {}
            Ok(None) => return errors::not_found_page(ctx),
            Err(e) => {
                tracing::error!(error = %e, "user lookup");
                return errors::internal();
            }
        }
        let base = format!("/tests/user/{}", url_encode(&name));
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
            let mut panels = unfinished_panels(runs.iter().filter(|r| r.args.username == name));
            panels.insert(2, failed_panel(&f.runs));
            p.panels = panels;
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

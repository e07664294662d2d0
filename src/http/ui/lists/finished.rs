//! `/tests/finished`: finished runs, 25 a page, newest first, with the All/Green/Yellow/LTC
//! tabs (the list page of `lists.rs`), or its search mode `mode=search`: by submitter (`user`:
//! any part of a name, ranked) and by whole words of the info (`text`: any word, `"quoted
//! phrases"` must appear, `-word` excludes), capped by `max_count`.
//!
//! Owns: the search's query (`mode`, `user`, `text`, `info_regex`, `max_count`) and the
//! canonicalising redirects between the two modes. Must not: call the store (only `RunDb`
//! queries), or run outside [`page`].

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;

use crate::accounts::Users;
use crate::http::state::AppState;
use crate::http::ui::kit::results::RunRow;
use crate::http::ui::kit::run_lists::{
    ListPage, PAGE_SIZE, SearchForm, fill, finished_part, href, last_page, list_page, parse_query,
};
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::{
    Href, Input, Layout, OrInternal, Page, PageError, PageResult, Pager, page,
};
use crate::rundb::RunDb;
use crate::rundb::model::Run;
use crate::rundb::queries::FinishedFilter;

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
    let mut h = Href::new("/tests/finished").param("mode", "search");
    if let Some(m) = s.max_count {
        h = h.param("max_count", m);
    }
    h.param_nonempty("user", &s.user)
        .param_nonempty("text", &s.text)
        .param_if(page > 1, "page", page)
        .build()
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
fn search_runs(users: &Users, db: &RunDb, s: &Search, cap: u64) -> Result<Vec<Run>, PageError> {
    let text = TextQuery::parse(&s.text);
    let users: Vec<Option<String>> = if s.user.is_empty() {
        vec![None]
    } else {
        let names = users
            .list()
            .or_internal("users list")?
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
            let batch = db
                .finished_runs(&filter)
                .or_internal("finished runs search")?;
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
fn search_page(users: &Users, db: &RunDb, ctx: &Ctx, s: Search, page_no: u64) -> PageResult {
    let cap = match (&ctx.user, s.max_count) {
        (None, m) => m.unwrap_or(ANONYMOUS_MAX_COUNT).min(ANONYMOUS_MAX_COUNT),
        (Some(_), m) => m.unwrap_or(DEFAULT_MAX_COUNT),
    };
    let searching = !s.user.is_empty() || !s.text.is_empty();
    let runs = if searching {
        search_runs(users, db, &s, cap)?
    } else {
        Vec::new()
    };
    let total = runs.len() as u64;
    let last = last_page(total);
    if page_no > last {
        return Page::redirect(search_href(&s, last));
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
        pager: Pager::new(page_no, last, |t| search_href(&s, t)),
    };
    Page::ok(&p)
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
            return Page::redirect(to);
        }
        if search_mode {
            return search_page(accounts.users(), db, ctx, search, q.page);
        }
        let base = "/tests/finished";
        let f = finished_part(db, base, None, q)?;
        let title = format!("Finished Tests{}", q.filter.title_suffix());
        let heading = format!("Finished Tests{}", q.filter.suffix());
        let mut p = list_page(ctx, &title, heading, base, q);
        fill(&mut p, f);
        Page::ok(&p)
    })
    .await
}

//! `GET /actions`: the action log with its filters (event kind `action`, `user` substring,
//! a `text` search over the events' words, `run_id`, `before`, `max_count`), 25 a page, newest first, system events hidden unless
//! asked for.
//!
//! Owns: the query parameters, their validation (a bad one is a 400 page that says which),
//! and the rows as the page shows them (sources and targets linked to the worker, user, run
//! or net). Must not: read the store outside [`page`].

use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;
use serde_json::Value;

use crate::accounts::Users;
use crate::http::state::AppState;
use crate::http::ui::kit::pager::page_param;
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::table::{order_param, order_text, sort_columns};
use crate::http::ui::kit::url::user_href;
use crate::http::ui::kit::{
    Column, Flash, Href, Input, Layout, OrInternal, Page, PageResult, Pager, page,
};
use crate::ledger::{ACTION_KINDS, ActionFilter, HIDDEN_KINDS, Ledger};
/// An action document as the ledger returns it.
type Doc = serde_json::Map<String, serde_json::Value>;

/// Actions per page.
pub const ACTIONS_PAGE: u64 = 25;
/// The most matching actions an anonymous visitor may page through.
pub const ANON_MAX_COUNT: u64 = 5000;
/// The default for a logged-in user (who may ask for more).
pub const USER_MAX_COUNT: u64 = 50_000;
/// The system's username in the action log.
const SYSTEM_USER: &str = "fishtest.system";

/// One row of the action log.
pub struct ActionRow {
    pub time: String,
    pub permalink: String,
    pub event: String,
    pub source: String,
    pub source_href: String,
    pub target: String,
    pub target_href: String,
    pub comment: String,
}

#[derive(Template)]
#[template(path = "actions.html")]
pub struct ActionsPage {
    pub l: Layout,
    /// (kind, selected)
    pub kinds: Vec<(&'static str, bool)>,
    pub action: String,
    pub user: String,
    /// The text search as typed.
    pub text: String,
    pub run_id: String,
    pub count_line: String,
    pub rows: Vec<ActionRow>,
    pub pager: Pager,
    /// The sortable column headers.
    pub headers: Vec<Column>,
}

/// The sortable columns: key, label, descending first; and the document paths each sorts by.
const COLUMNS: [(&str, &str, bool); 5] = [
    ("time", "Time", true),
    ("event", "Event", false),
    ("source", "Source", false),
    ("target", "Target", false),
    ("comment", "Comment", false),
];

fn sort_paths(key: &str) -> &'static [&'static str] {
    match key {
        "event" => &["action"],
        "source" => &["username"],
        // A target is a run, a worker or a user, whichever the event names.
        "target" => &["run", "worker", "user"],
        "comment" => &["message"],
        _ => &[],
    }
}

#[derive(Deserialize, Default, Clone)]
pub struct ActionsQuery {
    #[serde(default)]
    action: Option<String>,
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    run_id: Option<String>,
    /// Words (any may match), `"phrases"` (all must) and `-words` (none may).
    #[serde(default)]
    text: Option<String>,
    #[serde(default)]
    before: Option<String>,
    #[serde(default)]
    max_count: Option<String>,
    #[serde(default)]
    page: Option<String>,
    /// A [`COLUMNS`] key (default `time`) and `asc` / `desc`.
    #[serde(default)]
    sort: Option<String>,
    #[serde(default)]
    order: Option<String>,
}

impl ActionsQuery {
    /// The sort key (an unknown one is the default, newest first) and its direction.
    fn sorting(&self) -> (&'static str, bool) {
        let key = COLUMNS
            .iter()
            .find(|c| Some(c.0) == self.sort.as_deref().map(str::trim))
            .unwrap_or(&COLUMNS[0]);
        (key.0, order_param(self.order.as_deref(), key.2))
    }
}

/// The short worker name: the first three dash-separated parts of the long one.
fn short_worker(worker: &str) -> String {
    worker.split('-').take(3).collect::<Vec<_>>().join("-")
}

fn text(doc: &Doc, key: &str) -> String {
    match doc.get(key) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => String::new(),
    }
}

/// An action document as a row (target users link to their page for approvers only).
fn action_row(doc: &Doc, approver: bool, q: &ActionsQuery) -> ActionRow {
    let time = doc.get("time").and_then(Value::as_f64).unwrap_or(0.0);
    let when = chrono::DateTime::from_timestamp_micros((time * 1e6) as i64)
        .map(|t| t.format("%y-%m-%d %H:%M:%S").to_string())
        .unwrap_or_default()
        .replace('-', "\u{2011}");
    let permalink = Href::new("/actions")
        .param("max_count", 1)
        .param("before", time)
        .param_nonempty("action", q.action.as_deref().unwrap_or_default())
        .param_nonempty("run_id", q.run_id.as_deref().unwrap_or_default())
        .build();
    let event = text(doc, "action");
    let username = text(doc, "username");
    let worker = text(doc, "worker");
    let (source, source_href) = if matches!(event.as_str(), "system_event" | "log_message") {
        (
            if worker.is_empty() {
                username
            } else {
                worker.clone()
            },
            String::new(),
        )
    } else if !worker.is_empty() && event != "block_worker" {
        let href = Href::new("/workers").seg(&short_worker(&worker)).build();
        (worker.clone(), href)
    } else {
        let href = user_href(&username);
        (username, href)
    };
    let (nn, run, run_id, user) = (
        text(doc, "nn"),
        text(doc, "run"),
        text(doc, "run_id"),
        text(doc, "user"),
    );
    let task = text(doc, "task_id");
    let (target, target_href) = if !nn.is_empty() {
        let href = Href::new("/api/nn").seg(&nn).build();
        (nn, href)
    } else if !run.is_empty() && !run_id.is_empty() {
        let view = Href::new("/tests/view").seg(&run_id);
        if task.is_empty() {
            (run, view.build())
        } else {
            (
                format!("{run}/{task}"),
                view.param("show_task", &task).build(),
            )
        }
    } else if !user.is_empty() && approver {
        let href = user_href(&user);
        (user, href)
    } else if event == "block_worker" && !worker.is_empty() {
        let href = Href::new("/workers").seg(&short_worker(&worker)).build();
        (worker, href)
    } else {
        (user, String::new())
    };
    ActionRow {
        time: when,
        permalink,
        event,
        source,
        source_href,
        target,
        target_href,
        comment: text(doc, "message"),
    }
}

/// The filter the query asks for; `Err` says what is wrong; `Ok(None)` matches nothing (a
/// `user` that names nobody).
fn action_filter(users: &Users, q: &ActionsQuery) -> Result<Option<ActionFilter>, String> {
    let mut f = ActionFilter::all();
    f = match q.action.as_deref().map(str::trim).unwrap_or_default() {
        "" => {
            let shown: Vec<&str> = ACTION_KINDS
                .iter()
                .copied()
                .filter(|k| !HIDDEN_KINDS.contains(k))
                .collect();
            f.kinds(&shown)
        }
        "system_event" => f.kinds(&["system_event", "update_stats"]),
        k if ACTION_KINDS.contains(&k) => f.kinds(&[k]),
        k => return Err(format!("Unknown event kind {k:?}.")),
    };
    if let Some(run_id) = q.run_id.as_deref().map(str::trim).filter(|r| !r.is_empty()) {
        if run_id.len() > 64 || !run_id.bytes().all(|b| b.is_ascii_alphanumeric()) {
            return Err(format!("Invalid run id {run_id:?}."));
        }
        f = f.run_id(run_id);
    }
    if let Some(before) = q.before.as_deref().map(str::trim).filter(|b| !b.is_empty()) {
        let t = before
            .parse::<f64>()
            .ok()
            .filter(|t| t.is_finite())
            .ok_or_else(|| format!("before must be a Unix time, not {before:?}."))?;
        f = f.before(t);
    }
    if let Some(text) = q.text.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
        let (any, all, none) = text_terms(text)?;
        f = f.text(any, all, none);
    }
    if let Some(user) = q.user.as_deref().map(str::trim).filter(|u| !u.is_empty()) {
        let needle = user.to_lowercase();
        let mut names: Vec<String> = users
            .list()
            .map_err(|e| e.to_string())?
            .into_iter()
            .map(|u| u.username)
            .chain(std::iter::once(SYSTEM_USER.to_string()))
            .filter(|n| n.to_lowercase().contains(&needle))
            .collect();
        if names.is_empty() {
            return Ok(None);
        }
        names.truncate(crate::ledger::MAX_IN);
        f = f.usernames(names);
    }
    Ok(Some(f))
}

/// The most terms a text search may have, and the longest term.
const MAX_TERMS: usize = 20;
const MAX_TERM_LEN: usize = 100;

/// A search's words (any), phrases (all) and excluded words.
type Terms = (Vec<String>, Vec<String>, Vec<String>);

/// A text search's terms, lower-cased: words (any may match), `"phrases"` (all must match;
/// then the words are optional, as in Fishtest's search) and `-words` (none may match).
fn text_terms(text: &str) -> Result<Terms, String> {
    let (mut any, mut all, mut none) = (Vec::new(), Vec::new(), Vec::new());
    for (i, part) in text.split('"').enumerate() {
        if i % 2 == 1 {
            let phrase = part.split_whitespace().collect::<Vec<_>>().join(" ");
            if !phrase.is_empty() {
                all.push(phrase.to_lowercase());
            }
            continue;
        }
        for token in part.split_whitespace() {
            match token.strip_prefix('-') {
                Some("") => {}
                Some(rest) => none.push(rest.to_lowercase()),
                None => any.push(token.to_lowercase()),
            }
        }
    }
    let terms = any.iter().chain(&all).chain(&none);
    if terms.clone().count() > MAX_TERMS {
        return Err(format!(
            "A search may have at most {MAX_TERMS} words and phrases."
        ));
    }
    if terms.clone().any(|t| t.chars().count() > MAX_TERM_LEN) {
        return Err(format!(
            "A search word or phrase may be at most {MAX_TERM_LEN} characters long."
        ));
    }
    Ok((any, all, none))
}

fn max_count(ctx: &Ctx, q: &ActionsQuery) -> Result<u64, String> {
    let asked = match q
        .max_count
        .as_deref()
        .map(str::trim)
        .filter(|m| !m.is_empty())
    {
        None => None,
        Some(m) => Some(
            m.parse::<u64>()
                .map_err(|_| format!("max_count must be a whole number, not {m:?}."))?,
        ),
    };
    Ok(if ctx.user.is_some() {
        asked.unwrap_or(USER_MAX_COUNT)
    } else {
        asked.unwrap_or(ANON_MAX_COUNT).min(ANON_MAX_COUNT)
    })
}

fn actions_href(q: &ActionsQuery, page: u64) -> String {
    let (sort, desc) = q.sorting();
    sorted_href(q, sort, desc)
        .param_if(page > 1, "page", page)
        .build()
}

/// The filters, and the sort unless it is the default.
fn sorted_href(q: &ActionsQuery, sort: &str, desc: bool) -> Href {
    let mut h = Href::new("/actions");
    for (k, v) in [
        ("action", &q.action),
        ("user", &q.user),
        ("run_id", &q.run_id),
        ("text", &q.text),
        ("before", &q.before),
        ("max_count", &q.max_count),
    ] {
        h = h.param_nonempty(k, v.as_deref().unwrap_or_default());
    }
    let default = sort == COLUMNS[0].0 && desc == COLUMNS[0].2;
    h.param_if(!default, "sort", sort)
        .param_if(!default, "order", order_text(desc))
}

fn actions_page(ledger: &Ledger, users: &Users, ctx: &Ctx, q: ActionsQuery) -> PageResult {
    let approver = ctx.user.as_ref().is_some_and(|u| u.is_approver());
    let render = |status, count_line: String, rows, pager, flash: Option<String>| {
        let mut l = Layout::new(ctx, "Events");
        if let Some(f) = flash {
            l = l.flash(Flash::error(f));
        }
        Page::render(
            status,
            &ActionsPage {
                l,
                kinds: ACTION_KINDS
                    .iter()
                    .map(|k| (*k, q.action.as_deref() == Some(*k)))
                    .collect(),
                action: q.action.clone().unwrap_or_default(),
                user: q.user.clone().unwrap_or_default(),
                text: q.text.clone().unwrap_or_default(),
                run_id: q.run_id.clone().unwrap_or_default(),
                count_line,
                rows,
                pager,
                headers: {
                    let (sort, desc) = q.sorting();
                    sort_columns(COLUMNS, sort, desc, |key, next_desc| {
                        sorted_href(&q, key, next_desc).build()
                    })
                },
            },
        )
    };
    let bad = |text: String| {
        render(
            StatusCode::BAD_REQUEST,
            String::new(),
            Vec::new(),
            Pager::default(),
            Some(text),
        )
    };
    let cap = match max_count(ctx, &q) {
        Ok(c) => c,
        Err(text) => return bad(text),
    };
    let filter = match action_filter(users, &q) {
        Ok(f) => f,
        Err(text) => return bad(text),
    };
    let total = match &filter {
        Some(f) => ledger
            .count_actions(f)
            .or_internal("actions: count failed")?
            .min(cap),
        None => 0,
    };
    let last = total.div_ceil(ACTIONS_PAGE).max(1);
    let page = page_param(q.page.as_deref()).min(last);
    let skip = (page - 1) * ACTIONS_PAGE;
    let take = ACTIONS_PAGE.min(total.saturating_sub(skip));
    let (sort, desc) = q.sorting();
    // Newest first is the default order (time, descending): the ledger's own tie-break.
    let (by, desc) = match sort_paths(sort) {
        [] if desc => (&[][..], false),
        [] => (&["time"][..], false),
        paths => (paths, desc),
    };
    let docs = match &filter {
        Some(f) if take > 0 => ledger
            .find_actions_sorted(f, by, desc, skip, take)
            .or_internal("actions: read failed")?,
        _ => Vec::new(),
    };
    let rows: Vec<ActionRow> = docs.iter().map(|d| action_row(d, approver, &q)).collect();
    let count_line = format!(
        "Showing {} of {total} matching action{} on page {page} of {last}.",
        rows.len(),
        if total == 1 { "" } else { "s" }
    );
    let pager = Pager::new(page, last, |p| actions_href(&q, p));
    render(StatusCode::OK, count_line, rows, pager, None)
}

/// `GET /actions`: anyone.
pub async fn actions(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<ActionsQuery>,
) -> Response {
    let (ledger, accounts) = (state.ledger.clone(), state.accounts.clone());
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        actions_page(&ledger, accounts.users(), ctx, q)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ui::kit::time::ago;

    #[test]
    fn worker_short_names_and_ages() {
        assert_eq!(
            short_worker("alice-4cores-1a2b3c4d-5e6f"),
            "alice-4cores-1a2b3c4d"
        );
        assert_eq!(ago(None), "Never");
        let hour_ago =
            crate::rundb::model::Date(chrono::Utc::now() - chrono::Duration::seconds(3700));
        assert_eq!(ago(Some(&hour_ago)), "1 hour ago");
    }

    #[test]
    fn text_searches_have_words_phrases_and_exclusions() {
        let (any, all, none) = text_terms(r#"Crash  "Time Loss"  -alice -"#).expect("terms");
        assert_eq!(any, vec!["crash"]);
        assert_eq!(all, vec!["time loss"]);
        assert_eq!(none, vec!["alice"]);
        assert!(text_terms(&"w ".repeat(21)).is_err());
        assert!(text_terms(&"x".repeat(101)).is_err());
    }

    #[test]
    fn action_rows_link_runs_and_workers() {
        let doc: Doc = serde_json::from_value(serde_json::json!({
            "action": "failed_task", "username": "alice", "worker": "alice-4cores-1a2b-5e6f",
            "run_id": "abc", "run": "patch-1234567", "task_id": 3, "message": "crash",
            "time": 1_700_000_000.5,
        }))
        .expect("doc");
        let row = action_row(&doc, false, &ActionsQuery::default());
        assert_eq!(row.source_href, "/workers/alice-4cores-1a2b");
        assert_eq!(row.target, "patch-1234567/3");
        assert_eq!(row.target_href, "/tests/view/abc?show_task=3");
        assert!(
            row.permalink
                .starts_with("/actions?max_count=1&before=1700000000.5")
        );
        let block: Doc = serde_json::from_value(serde_json::json!({
            "action": "block_user", "username": "boss", "user": "carol", "message": "blocked",
            "time": 1.0,
        }))
        .expect("doc");
        assert_eq!(
            action_row(&block, true, &ActionsQuery::default()).target_href,
            "/user/carol"
        );
        assert_eq!(
            action_row(&block, false, &ActionsQuery::default()).target_href,
            ""
        );
    }
}

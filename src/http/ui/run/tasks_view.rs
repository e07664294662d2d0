//! One page of the run page's tasks table: the search, the sort and the paging, all on the
//! server, so that a run with thousands of tasks sends (and re-sends every 10 s) one page.
//!
//! The query parameters, the same on the run page `/tests/view/{id}` and on its fragment
//! `/tests/tasks/{id}`:
//! - `tasks_q`: a search, case-insensitive, in the worker's name, its user, the task's state
//!   (`active`, `done`, `dead`, `bad`, `purged`) and the worker's details (system, compiler,
//!   versions…), or a task's number; at most [`MAX_SEARCH_CHARS`] characters;
//! - `tasks_sort`: `updated` (the last update, the default), `idx`, `worker`, `games` or
//!   `state` (active first); `tasks_order`: `asc` or `desc` (each key has its own default:
//!   newest update first, most games first, the others ascending);
//! - `tasks_page`: 1-based, [`TASKS_PAGE_SIZE`] tasks a page; a page past the last is the last.
//!
//! An unknown key, order or page number is a 400 page that names the parameter. The links
//! (column headers, pager, search form) go to the run page at `#tasks`, so they work without
//! JavaScript; the page's live refresh asks the fragment for the page being looked at.
//!
//! Owns: those parameters, the selection and the links. Must not: compute rows or residuals
//! (`run_tasks.rs` does, over every task, before the page is cut) or read the store.

use axum::http::StatusCode;
use serde::Deserialize;

use super::tasks::{Chi2Box, Details, Entry, TaskRow, Tasks, state_label};
use crate::http::ui::kit::pager::MAX_PAGE;
use crate::http::ui::kit::table::{next_desc, order_text};
use crate::http::ui::kit::{Href, PageError, Pager};

/// Tasks a page of the table holds (Fishtest's 25).
pub const TASKS_PAGE_SIZE: usize = 25;
/// The longest search accepted, in characters.
pub const MAX_SEARCH_CHARS: usize = 100;

/// The sort keys: key, header label, descending first. The first is the default (Fishtest's:
/// the highest task number first).
const SORTS: [(&str, &str, bool); 10] = [
    ("idx", "Idx", true),
    ("worker", "Worker", false),
    ("residual", "Residual", true),
    ("games", "Games", true),
    ("crashes", "Crashes", true),
    ("time", "Time losses", true),
    ("updated", "Last updated", true),
    ("state", "State", false),
    // Keys without a column of their own (Fishtest's): the details text, the pentanomial.
    ("info", "Info", false),
    ("pentanomial", "Pentanomial [0-2]", true),
];

/// Fishtest's names for two of the keys.
const SORT_ALIASES: [(&str, &str); 2] = [("last_updated", "updated"), ("played", "games")];

/// The tasks table's query parameters, as sent: `tasks_*` (the run page's), or Fishtest's
/// names `page`, `sort`, `order` and `q` (a `tasks_*` one wins when both are given), and
/// `show_task`.
#[derive(Deserialize, Default, Clone, Debug)]
pub struct TasksQuery {
    #[serde(default)]
    pub tasks_page: Option<String>,
    #[serde(default)]
    pub tasks_sort: Option<String>,
    #[serde(default)]
    pub tasks_order: Option<String>,
    #[serde(default)]
    pub tasks_q: Option<String>,
    #[serde(default)]
    pub page: Option<String>,
    #[serde(default)]
    pub sort: Option<String>,
    #[serde(default)]
    pub order: Option<String>,
    #[serde(default)]
    pub q: Option<String>,
    #[serde(default)]
    pub show_task: Option<String>,
}

/// What the viewer asked to see: checked parameters.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TasksView {
    pub page: u64,
    /// The page was asked for (else `show` picks the page holding its task).
    pub page_given: bool,
    pub sort: &'static str,
    pub desc: bool,
    pub q: String,
    /// `show_task`: the task to show (its page, highlighted).
    pub show: Option<usize>,
}

impl Default for TasksView {
    /// The highest task number first (the newest tasks), page 1.
    fn default() -> Self {
        TasksView {
            page: 1,
            page_given: false,
            sort: SORTS[0].0,
            desc: SORTS[0].2,
            q: String::new(),
            show: None,
        }
    }
}

fn bad(detail: String) -> PageError {
    PageError::refused(
        StatusCode::BAD_REQUEST,
        "Bad tasks table parameters",
        detail,
    )
}

impl TasksQuery {
    /// The checked view; a parameter that is not understood is a 400 page saying which.
    pub fn view(&self) -> Result<TasksView, PageError> {
        let one = |v: &Option<String>| {
            v.as_deref()
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
        };
        let given = |ours: &Option<String>, fishtest: &Option<String>| one(ours).or(one(fishtest));
        let sort_given = given(&self.tasks_sort, &self.sort).map(|s| {
            SORT_ALIASES
                .iter()
                .find(|(alias, _)| *alias == s)
                .map_or(s, |(_, key)| (*key).to_string())
        });
        let (sort, default_desc) = match sort_given {
            None => (SORTS[0].0, SORTS[0].2),
            Some(s) => match SORTS.iter().find(|c| c.0 == s) {
                Some(c) => (c.0, c.2),
                None => {
                    let keys: Vec<&str> = SORTS.iter().map(|c| c.0).collect();
                    return Err(bad(format!(
                        "tasks_sort must be one of {}.",
                        keys.join(", ")
                    )));
                }
            },
        };
        let desc = match given(&self.tasks_order, &self.order).as_deref() {
            None => default_desc,
            Some("asc") => false,
            Some("desc") => true,
            Some(_) => return Err(bad("tasks_order must be asc or desc.".into())),
        };
        let page_given = given(&self.tasks_page, &self.page);
        let page = match page_given.as_deref() {
            None => 1,
            Some(p) => match p.parse::<u64>() {
                Ok(n) if (1..=MAX_PAGE).contains(&n) => n,
                _ => {
                    return Err(bad(format!(
                        "tasks_page must be a page number from 1 to {MAX_PAGE}."
                    )));
                }
            },
        };
        let q = given(&self.tasks_q, &self.q).unwrap_or_default();
        // A task number that does not parse shows no task (it is only a highlight).
        let show = one(&self.show_task).and_then(|s| s.parse::<usize>().ok());
        if q.chars().count() > MAX_SEARCH_CHARS {
            return Err(bad(format!(
                "tasks_q (the search) is longer than {MAX_SEARCH_CHARS} characters."
            )));
        }
        Ok(TasksView {
            page,
            page_given: page_given.is_some(),
            sort,
            desc,
            q,
            show,
        })
    }
}

/// One column header: sortable ones link to the table sorted by them.
pub struct Header {
    pub label: &'static str,
    /// Empty for a column that does not sort.
    pub href: String,
    /// `ascending`, `descending` or `none` (for `aria-sort`); empty when not sortable.
    pub aria_sort: &'static str,
    /// `▲`, `▼` or empty.
    pub arrow: &'static str,
}

/// One page of the tasks table, ready to draw (`run_tasks.html`).
pub struct TasksPage<'a> {
    pub id: String,
    /// This page's rows.
    pub rows: Vec<TaskRow<'a>>,
    /// The chi² box, over every task (not only this page's).
    pub chi2: Option<&'a Chi2Box>,
    /// Every task of the run, and those the search matches.
    pub total: usize,
    pub matched: usize,
    /// The 1-based numbers of this page's first and last rows among the matches.
    pub first: usize,
    pub last: usize,
    pub pager: Pager,
    /// The columns' headers, in order (Residual only with a chi² box).
    pub headers: Vec<Header>,
    pub q: String,
    pub sort: &'static str,
    pub order: &'static str,
    /// Sort and order differ from the default (the search form keeps them).
    pub sorted: bool,
    /// The order in words ("last update, newest first").
    pub sorted_by: String,
    /// The run page, where the search form goes.
    pub action: String,
    /// The run page without the search (sort kept), at `#tasks`.
    pub clear: String,
    /// This very page as a fragment: what the live refresh asks for.
    pub refresh: String,
    pub page_size: usize,
    /// The run records pentanomial counts: the table shows them instead of W/L/D.
    pub penta: bool,
}

/// A link to the table in state (`sort`, `desc`, `q`, `page`): the default values left out,
/// so the default table's links are the bare path.
fn with_state(path: Href, sort: &str, desc: bool, q: &str, page: u64) -> Href {
    let default = TasksView::default();
    let sorted = sort != default.sort || desc != default.desc;
    path.param_if(sorted, "tasks_sort", sort)
        .param_if(sorted, "tasks_order", order_text(desc))
        .param_nonempty("tasks_q", q)
        .param_if(page > 1, "tasks_page", page)
}

fn view_path(id: &str) -> Href {
    Href::new("/tests/view").seg(id)
}

/// The rank of a state when sorting by state: active first, then the ones to look at.
fn state_rank(mark: &str) -> u8 {
    match mark {
        "active" => 0,
        "bad" => 1,
        "dead" => 2,
        "purged" => 3,
        _ => 4,
    }
}

/// Whether a task matches the lowercased search: its number, worker name, user, state or
/// any of the details its row shows.
fn matches(e: &Entry<'_>, needle: &str) -> bool {
    if needle.parse::<usize>().ok() == Some(e.idx) {
        return true;
    }
    let has = |s: &str| s.to_lowercase().contains(needle);
    has(&e.worker())
        || has(&e.info().username)
        || state_label(e.mark()).contains(needle)
        || Details(e.info()).strings().iter().any(|d| has(d))
}

/// Sorts in place: by `key`, ties by task number; `desc` reverses the whole order.
fn sort_entries(entries: &mut [&Entry<'_>], key: &str, desc: bool) {
    match key {
        "idx" => entries.sort_by_key(|e| e.idx),
        "worker" => entries.sort_by_cached_key(|e| (e.worker().to_lowercase(), e.idx)),
        "games" => entries.sort_by_key(|e| (e.played(), e.idx)),
        "state" => entries.sort_by_key(|e| (state_rank(e.mark()), e.idx)),
        "crashes" => entries.sort_by_key(|e| (e.stats().crashes, e.idx)),
        "time" => entries.sort_by_key(|e| (e.stats().time_losses, e.idx)),
        "pentanomial" => entries.sort_by_key(|e| (e.stats().pentanomial, e.idx)),
        "info" => {
            entries.sort_by_cached_key(|e| (Details(e.info()).to_string().to_lowercase(), e.idx))
        }
        // No residual ("-") below every number.
        "residual" => entries.sort_by(|a, b| {
            let r = |e: &Entry<'_>| e.shown_residual().unwrap_or(f64::NEG_INFINITY);
            r(a).total_cmp(&r(b)).then(a.idx.cmp(&b.idx))
        }),
        // Whole seconds, as the column shows them.
        _ => entries.sort_by_key(|e| (e.updated(), e.idx)),
    }
    if desc {
        entries.reverse();
    }
}

fn sorted_by(key: &str, desc: bool) -> String {
    let (what, asc, dsc) = match key {
        "idx" => ("task number", "lowest first", "highest first"),
        "worker" => ("worker name", "A to Z", "Z to A"),
        "games" => ("games played", "fewest first", "most first"),
        "state" => ("state", "active first", "done first"),
        "crashes" => ("crashes", "fewest first", "most first"),
        "time" => ("time losses", "fewest first", "most first"),
        "residual" => ("residual", "lowest first", "highest first"),
        "info" => ("worker details", "A to Z", "Z to A"),
        "pentanomial" => ("pentanomial counts", "lowest first", "highest first"),
        _ => ("last update", "oldest first", "newest first"),
    };
    format!("{what}, {}", if desc { dsc } else { asc })
}

/// The page of `all` that `v` asks for (a page past the last is the last).
pub fn page_of<'a>(all: &'a Tasks<'_>, v: &TasksView, approver: bool) -> TasksPage<'a> {
    let id = all.id.clone();
    let chi2 = all.chi2.as_ref();
    let total = all.entries.len();
    let needle = v.q.to_lowercase();
    // Only the page's rows are drawn (a search looks in each task's details).
    let mut entries: Vec<&Entry<'_>> = all
        .entries
        .iter()
        .filter(|e| needle.is_empty() || matches(e, &needle))
        .collect();
    sort_entries(&mut entries, v.sort, v.desc);
    let matched = entries.len();
    let last_page = u64::try_from(matched.div_ceil(TASKS_PAGE_SIZE))
        .unwrap_or(u64::MAX)
        .max(1);
    // `show_task` without a page: the page that holds it.
    let shown_at = v
        .show
        .and_then(|k| entries.iter().position(|e| e.idx == k))
        .filter(|_| !v.page_given)
        .and_then(|at| u64::try_from(at / TASKS_PAGE_SIZE + 1).ok());
    let page = shown_at.unwrap_or(v.page).min(last_page);
    let skip = usize::try_from(page - 1)
        .ok()
        .and_then(|p| p.checked_mul(TASKS_PAGE_SIZE))
        .unwrap_or(usize::MAX);
    let rows: Vec<TaskRow<'a>> = entries
        .iter()
        .skip(skip)
        .take(TASKS_PAGE_SIZE)
        .map(|e| {
            let mut row = e.row(approver);
            row.shown = v.show == Some(e.idx);
            row
        })
        .collect();
    let first = if rows.is_empty() { 0 } else { skip + 1 };
    // The pentanomial column when the run records pairs, else wins/losses/draws.
    let penta = all
        .entries
        .iter()
        .any(|e| e.stats().pentanomial.iter().any(|c| *c > 0));
    let last = skip.saturating_add(rows.len());

    let at_tasks = |h: Href| format!("{h}#tasks");
    let sortable = |key: &str| {
        let (label, default_desc) = SORTS
            .iter()
            .find(|c| c.0 == key)
            .map_or(("", false), |c| (c.1, c.2));
        let to = next_desc(key, default_desc, v.sort, v.desc);
        let on = key == v.sort;
        Header {
            label,
            href: at_tasks(with_state(view_path(&id), key, to, &v.q, 1)),
            aria_sort: match (on, v.desc) {
                (false, _) => "none",
                (true, true) => "descending",
                (true, false) => "ascending",
            },
            arrow: match (on, v.desc) {
                (false, _) => "",
                (true, true) => " ▼",
                (true, false) => " ▲",
            },
        }
    };
    let plain = |label| Header {
        label,
        href: String::new(),
        aria_sort: "",
        arrow: "",
    };
    let mut headers = vec![sortable("idx"), sortable("worker")];
    if chi2.is_some() {
        headers.push(sortable("residual"));
    }
    headers.extend([
        sortable("games"),
        if penta {
            sortable("pentanomial")
        } else {
            plain("W/L/D")
        },
        sortable("crashes"),
        sortable("time"),
        sortable("updated"),
        sortable("state"),
    ]);
    let pager = Pager::new(page, last_page, |p| {
        at_tasks(with_state(view_path(&id), v.sort, v.desc, &v.q, p))
    });
    let default = TasksView::default();
    TasksPage {
        refresh: with_state(
            Href::new("/tests/tasks").seg(&id),
            v.sort,
            v.desc,
            &v.q,
            page,
        )
        .param_if(v.show.is_some(), "show_task", v.show.unwrap_or_default())
        .to_string(),
        action: view_path(&id).to_string(),
        clear: at_tasks(with_state(view_path(&id), v.sort, v.desc, "", 1)),
        rows,
        chi2,
        total,
        matched,
        first,
        last,
        pager,
        headers,
        q: v.q.clone(),
        sort: v.sort,
        order: order_text(v.desc),
        sorted: v.sort != default.sort || v.desc != default.desc,
        sorted_by: sorted_by(v.sort, v.desc),
        page_size: TASKS_PAGE_SIZE,
        penta,
        id,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(page: &str, sort: &str, order: &str, search: &str) -> TasksQuery {
        let some = |s: &str| Some(s.to_string());
        TasksQuery {
            tasks_page: some(page),
            tasks_sort: some(sort),
            tasks_order: some(order),
            tasks_q: some(search),
            ..TasksQuery::default()
        }
    }

    #[test]
    fn parameters_are_checked_and_default() {
        assert_eq!(
            TasksQuery::default().view().ok(),
            Some(TasksView::default())
        );
        assert_eq!(q("", " ", "", "").view().ok(), Some(TasksView::default()));
        let v = q("3", "worker", "", " Bob ").view().ok();
        assert_eq!(
            v,
            Some(TasksView {
                page: 3,
                page_given: true,
                sort: "worker",
                desc: false,
                q: "Bob".into(),
                show: None,
            })
        );
        // Fishtest's names, and its key names.
        let fishtest = TasksQuery {
            sort: Some("last_updated".into()),
            order: Some("asc".into()),
            page: Some("2".into()),
            q: Some("x".into()),
            show_task: Some("7".into()),
            ..TasksQuery::default()
        };
        assert_eq!(
            fishtest.view().ok(),
            Some(TasksView {
                page: 2,
                page_given: true,
                sort: "updated",
                desc: false,
                q: "x".into(),
                show: Some(7),
            })
        );
        for bad in [
            q("0", "", "", ""),
            q("-1", "", "", ""),
            q("x", "", "", ""),
            q("99999999999999999999999", "", "", ""),
            q("", "nope", "", ""),
            q("", "", "up", ""),
            q("", "", "", &"x".repeat(MAX_SEARCH_CHARS + 1)),
        ] {
            assert!(bad.view().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn links_leave_the_defaults_out() {
        let h = |sort, desc, q, page| {
            with_state(Href::new("/tests/tasks/ab"), sort, desc, q, page).to_string()
        };
        assert_eq!(h("idx", true, "", 1), "/tests/tasks/ab");
        assert_eq!(
            h("worker", false, "a b", 2),
            "/tests/tasks/ab?tasks_sort=worker&tasks_order=asc&tasks_q=a%20b&tasks_page=2"
        );
        assert_eq!(
            h("updated", false, "", 1),
            "/tests/tasks/ab?tasks_sort=updated&tasks_order=asc"
        );
    }
}

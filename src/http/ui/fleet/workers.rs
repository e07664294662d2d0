//! The workers: `GET/POST /workers/{name}` (`show` or a short worker name: the list of worker
//! records with `filter`, `q`, `sort`, `order`, `page`; for a worker's owner or an approver, a
//! form to block or unblock it with an issue message, fields `message`, `blocked`, `submit`).
//! The workers holding a task now are `machines.rs`'s.
//!
//! Owns: reading that query and form, and the rows. Who may change a
//! worker, and what a change does (the action log, request_task's blocked set), is the
//! scheduler's (`Scheduler::set_worker`).
//! Must not: call the store (only the `Scheduler`), run outside [`page`], or change anything
//! before the CSRF check.

use std::collections::HashMap;
use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use crate::accounts::Users;
use crate::http::state::AppState;
use crate::http::ui::kit::pager::page_param;
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::table::{next_desc, order_param, order_text};
use crate::http::ui::kit::time::ago;
use crate::http::ui::kit::url::encode;
use crate::http::ui::kit::{
    Flash, Href, Input, Layout, OrInternal, Page, PageError, PageResult, Pager, form_or_default,
    page,
};
use crate::scheduler::Scheduler;
use crate::scheduler::workers::{WorkerRecord, editable_name, owner_of, valid_short_name};

/// Worker records a page of `/workers/show` shows.
pub const WORKERS_PAGE: usize = 25;
/// Longest `q` read (longer ones are cut).
const MAX_QUERY: usize = 200;

/// The page number (1-based; anything else is 1).
pub(in crate::http::ui) fn page_of(params: &HashMap<String, String>) -> usize {
    usize::try_from(page_param(params.get("page").map(String::as_str))).unwrap_or(1)
}

/// The search text `q`, trimmed and cut at 200 characters.
pub(in crate::http::ui) fn query_text(params: &HashMap<String, String>) -> String {
    params
        .get("q")
        .map(|q| q.trim().chars().take(MAX_QUERY).collect())
        .unwrap_or_default()
}

/// The pager of page `page` of `last`, each page's link from `href`.
pub(in crate::http::ui) fn pager(
    page: usize,
    last: usize,
    href: impl Fn(usize) -> String,
) -> Pager {
    Pager::new(page as u64, last as u64, |p| {
        href(usize::try_from(p).unwrap_or(usize::MAX))
    })
}

/// The list's time filter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Since {
    /// Changed at most 5 days ago, or never (the default).
    Recent,
    /// Changed more than 5 days ago.
    Older,
    All,
}

impl Since {
    fn parse(v: Option<&String>) -> Since {
        match v.map(String::as_str) {
            Some("gt-5days") => Since::Older,
            Some("all-workers") => Since::All,
            _ => Since::Recent,
        }
    }

    fn param(self) -> &'static str {
        match self {
            Since::Recent => "le-5days",
            Since::Older => "gt-5days",
            Since::All => "all-workers",
        }
    }

    fn keeps(self, r: &WorkerRecord) -> bool {
        let recent = r
            .last_updated
            .is_none_or(|d| (chrono::Utc::now() - d.0).num_seconds() <= 5 * 86_400);
        match self {
            Since::Recent => recent,
            Since::Older => !recent,
            Since::All => true,
        }
    }
}

/// One worker record row.
pub struct WorkerRow {
    pub name: String,
    pub blocked: bool,
    pub last_changed: String,
    pub message: String,
    /// The owner's address (approvers only; empty otherwise).
    pub email: String,
}

/// One option of the list's filter.
pub struct FilterOption {
    pub value: &'static str,
    pub label: &'static str,
    pub selected: bool,
}

/// The edit form of one worker.
pub struct EditForm {
    pub name: String,
    pub last_changed: String,
    pub message: String,
    pub blocked: bool,
}

#[derive(Template)]
#[template(path = "workers.html")]
pub struct WorkersPage {
    pub l: Layout,
    pub edit: Option<EditForm>,
    pub filters: Vec<FilterOption>,
    pub q: String,
    pub sort: &'static str,
    pub order: &'static str,
    pub rows: Vec<WorkerRow>,
    pub approver: bool,
    pub worker_href: String,
    pub changed_href: String,
    pub pager: Pager,
}

/// The list's query: filter, q, sort (`worker` ascending or `last_changed` descending by
/// default), order and page.
struct ListQuery {
    since: Since,
    q: String,
    sort: &'static str,
    desc: bool,
    page: usize,
}

impl ListQuery {
    fn parse(params: &HashMap<String, String>) -> Self {
        let sort = match params.get("sort").map(String::as_str) {
            Some("worker") => "worker",
            _ => "last_changed",
        };
        let desc = order_param(
            params.get("order").map(String::as_str),
            sort == "last_changed",
        );
        ListQuery {
            since: Since::parse(params.get("filter")),
            q: query_text(params),
            sort,
            desc,
            page: page_of(params),
        }
    }

    fn href(&self, sort: &str, desc: bool, page: usize) -> String {
        Href::new("/workers/show")
            .param("filter", self.since.param())
            .param("q", &self.q)
            .param("sort", sort)
            .param("order", order_text(desc))
            .param("page", page)
            .build()
    }
}

fn list_page(
    users: &Users,
    scheduler: &Scheduler,
    ctx: &Ctx,
    lq: &ListQuery,
) -> Result<WorkersPage, PageError> {
    let records = scheduler.worker_records().or_internal("worker records")?;
    let needle = lq.q.to_lowercase();
    let mut records: Vec<WorkerRecord> = records
        .into_iter()
        .filter(|r| lq.since.keeps(r))
        .filter(|r| needle.is_empty() || r.worker_name.to_lowercase().contains(&needle))
        .collect();
    match lq.sort {
        "worker" => records.sort_by(|a, b| a.worker_name.cmp(&b.worker_name)),
        _ => records.sort_by(|a, b| {
            a.last_updated
                .cmp(&b.last_updated)
                .then_with(|| a.worker_name.cmp(&b.worker_name))
        }),
    }
    if lq.desc {
        records.reverse();
    }
    let last = records.len().div_ceil(WORKERS_PAGE).max(1);
    let page_no = lq.page.min(last);
    let approver = ctx.user.as_ref().is_some_and(|u| u.is_approver());
    let mut rows = Vec::new();
    for r in records
        .iter()
        .skip((page_no - 1).saturating_mul(WORKERS_PAGE))
        .take(WORKERS_PAGE)
    {
        let email = if approver {
            match users.get(owner_of(&r.worker_name)) {
                Ok(Some(u)) => u.email,
                Ok(None) => String::new(),
                Err(e) => {
                    tracing::warn!(error = %e, "worker owner lookup");
                    String::new()
                }
            }
        } else {
            String::new()
        };
        rows.push(WorkerRow {
            name: r.worker_name.clone(),
            blocked: r.blocked,
            last_changed: ago(r.last_updated.as_ref()),
            message: r.message.clone(),
            email,
        });
    }
    let filters = [Since::Recent, Since::Older, Since::All]
        .into_iter()
        .map(|s| FilterOption {
            value: s.param(),
            label: match s {
                Since::Recent => "Modified ≤ 5 days ago",
                Since::Older => "Modified > 5 days ago",
                Since::All => "All workers",
            },
            selected: s == lq.since,
        })
        .collect();
    let flip = |col: &str, default_desc: bool| {
        lq.href(col, next_desc(col, default_desc, lq.sort, lq.desc), 1)
    };
    Ok(WorkersPage {
        l: Layout::new(ctx, "Blocked workers"),
        edit: None,
        filters,
        q: lq.q.clone(),
        sort: lq.sort,
        order: order_text(lq.desc),
        rows,
        approver,
        worker_href: flip("worker", false),
        changed_href: flip("last_changed", true),
        pager: pager(page_no, last, |n| lq.href(lq.sort, lq.desc, n)),
    })
}

/// The login wall in front of worker `name`'s form.
fn to_login(name: &str) -> PageResult {
    Page::redirect(format!("/login?next=/workers/{}", encode(name)))
}

/// The flash a `?done=` after a change asks for.
fn done_flash(params: &HashMap<String, String>) -> Vec<Flash> {
    let mut out = Vec::new();
    if params.get("truncated").is_some_and(|v| v == "1") {
        out.push(Flash::error(
            "Warning: your description of the issue has been truncated to 500 characters",
        ));
    }
    let worker = params
        .get("worker")
        .filter(|w| valid_short_name(w))
        .cloned()
        .unwrap_or_default();
    match params.get("done").map(String::as_str) {
        Some("blocked") if !worker.is_empty() => {
            out.push(Flash::info(format!("Worker {worker} blocked!")));
        }
        Some("unblocked") if !worker.is_empty() => {
            out.push(Flash::info(format!("Worker {worker} unblocked!")));
        }
        _ => {}
    }
    out
}

/// `GET /workers/{name}`: `show` (or any name) lists the worker records; a short name of
/// three parts also shows its edit form to its owner or an approver (anonymous visitors go to
/// `/login`; others see why not).
pub async fn worker_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let lq = ListQuery::parse(&params);
    let flashes = done_flash(&params);
    let accounts = state.accounts.clone();
    let scheduler = state.scheduler.clone();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let mut flash: Vec<Flash> = flashes;
        let mut edit = None;
        if name != "show" {
            if !valid_short_name(&name) {
                flash.push(Flash::error(format!(
                    "{name:?} is not a worker name (<user>-<N>cores-<uuid prefix>)"
                )));
            } else if editable_name(&name) {
                let Some(user) = ctx.user.as_ref() else {
                    return to_login(&name);
                };
                if owner_of(&name) == user.username || user.is_approver() {
                    let record = scheduler
                        .worker_record(&name)
                        .or_internal("worker record")?;
                    edit = Some(EditForm {
                        name: name.clone(),
                        last_changed: ago(record.as_ref().and_then(|r| r.last_updated.as_ref())),
                        message: record
                            .as_ref()
                            .map(|r| r.message.clone())
                            .unwrap_or_default(),
                        blocked: record.as_ref().is_some_and(|r| r.blocked),
                    });
                } else {
                    flash.push(Flash::error("Only owners and approvers can block/unblock"));
                }
            }
        }
        let mut p = list_page(accounts.users(), &scheduler, ctx, &lq)?;
        p.edit = edit;
        p.l.flashes = flash;
        Page::ok(&p)
    })
    .await
}

/// The edit form's fields.
#[derive(Deserialize, Default)]
pub struct WorkerForm {
    #[serde(default)]
    message: String,
    /// The checkbox: present means blocked.
    #[serde(default)]
    blocked: Option<String>,
    #[serde(default)]
    submit: String,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /workers/{name}`: token, then login, then (only for `submit=Submit`) the change by
/// its owner or an approver; → `/workers/show` (with the outcome), a refusal is a page with
/// the domain's message and changes nothing.
pub async fn worker_post(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    form: Result<Form<WorkerForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    let token = f.csrf_token.clone();
    let scheduler = state.scheduler.clone();
    page(
        &state,
        Input::post(&state, &headers, token),
        move |_, ctx, _| {
            let Some(user) = ctx.user.clone() else {
                return to_login(&name);
            };
            if f.submit != "Submit" {
                return Page::redirect("/workers/show");
            }
            let change = scheduler.set_worker(&name, f.blocked.is_some(), &f.message, &user)?;
            let mut to = Href::new("/workers/show");
            if change.toggled {
                let done = if change.blocked {
                    "blocked"
                } else {
                    "unblocked"
                };
                to = to.param("done", done).param("worker", &name);
            }
            Page::redirect(to.param_if(change.truncated, "truncated", 1).build())
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_query_defaults_and_flash_names() {
        let q = ListQuery::parse(&HashMap::new());
        assert_eq!(
            (q.since, q.sort, q.desc, q.page),
            (Since::Recent, "last_changed", true, 1)
        );
        let params: HashMap<String, String> = [("sort", "worker"), ("filter", "all-workers")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let q = ListQuery::parse(&params);
        assert_eq!((q.since, q.sort, q.desc), (Since::All, "worker", false));
        let bad: HashMap<String, String> = [("done", "blocked"), ("worker", "<b>")]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        assert!(done_flash(&bad).is_empty());
    }
}

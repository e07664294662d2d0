//! `GET /user_management` (approvers: the accounts by group — pending, blocked, idle,
//! approvers, all — searched, sorted and paged, or all at once) and
//! `GET /user_management/pending_count` (the navigation's "Users (N)" link, for anyone). The
//! pending group's rows carry checkboxes for `pending_bulk` (accept or reject several).
//!
//! Must not: change an account (that is `/user/{name}`, `people.rs`).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;

use super::profile::{done_message, groups_label, not_allowed, to_login};
use crate::accounts::User;
use crate::http::state::AppState;
use crate::http::ui::kit::pager::page_param;
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::table::{order_param, order_text, sort_columns};
use crate::http::ui::kit::url::user_href;
use crate::http::ui::kit::{
    Column, Flash, Href, Input, Layout, OrInternal, Page, PageResult, Pager, page,
};

/// Rows per page of `/user_management`.
pub const USERS_PAGE: usize = 25;
/// `view=all` shows at most this many rows.
pub const VIEW_ALL_MAX: usize = 5000;
/// The message for a non-approver on `/user_management`.
pub const MSG_CANNOT_MANAGE: &str = "You cannot view user management";

/// One summary card (a link to its group).
pub struct Card {
    pub label: &'static str,
    pub count: usize,
    pub href: String,
}

/// One row of `/user_management`.
pub struct UserRow {
    pub username: String,
    pub registered: String,
    pub groups: String,
    pub email: String,
}

impl UserRow {
    /// The address of this user's page.
    pub fn page(&self) -> String {
        user_href(&self.username)
    }
}

#[derive(Template)]
#[template(path = "user_management.html")]
pub struct UserManagementPage {
    pub l: Layout,
    pub cards: Vec<Card>,
    /// (name, selected)
    pub groups: Vec<(&'static str, bool)>,
    pub q: String,
    pub headers: Vec<Column>,
    pub rows: Vec<UserRow>,
    pub empty: &'static str,
    /// The pending group: rows carry checkboxes to accept or reject several at once.
    pub bulk: bool,
    pub pager: Pager,
    /// "Show all (N users)" or "Show paginated", and its link.
    pub view_toggle: (String, String),
}

#[derive(Deserialize, Default, Clone)]
pub struct UsersQuery {
    #[serde(default)]
    group: Option<String>,
    #[serde(default)]
    q: Option<String>,
    #[serde(default)]
    sort: Option<String>,
    #[serde(default)]
    order: Option<String>,
    #[serde(default)]
    view: Option<String>,
    #[serde(default)]
    page: Option<String>,
    #[serde(default)]
    done: Option<String>,
    /// After a bulk decision: how many accounts it decided, and skipped (decided meanwhile).
    #[serde(default)]
    n: Option<u64>,
    #[serde(default)]
    skipped: Option<u64>,
}

const GROUPS: [&str; 5] = ["all", "pending", "blocked", "idle", "approvers"];

/// `GET /user_management`: approvers only.
pub async fn user_management(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<UsersQuery>,
) -> Response {
    let (ledger, accounts) = (state.ledger.clone(), state.accounts.clone());
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let Some(me) = ctx.user.clone() else {
            return to_login("/user_management");
        };
        if !me.is_approver() {
            return Err(not_allowed(MSG_CANNOT_MANAGE));
        }
        let users = accounts.users().list()?;
        let contributors: std::collections::HashSet<String> = ledger
            .contributors(false)
            .or_internal("contributors failed")?
            .into_iter()
            .map(|r| r.username)
            .collect();
        user_management_page(ctx, users, &contributors, q)
    })
    .await
}

fn user_management_page(
    ctx: &Ctx,
    users: Vec<User>,
    contributors: &std::collections::HashSet<String>,
    q: UsersQuery,
) -> PageResult {
    let group = q
        .group
        .as_deref()
        .filter(|g| GROUPS.contains(g))
        .unwrap_or("pending");
    let in_group = |u: &User, g: &str| match g {
        "pending" => u.pending,
        "blocked" => u.blocked,
        "idle" => !contributors.contains(&u.username),
        "approvers" => u.is_approver(),
        _ => true,
    };
    let text = q.q.clone().unwrap_or_default();
    let needle = text.trim().to_lowercase();
    let cards = [
        ("All", "all"),
        ("Pending", "pending"),
        ("Blocked", "blocked"),
        ("Idle", "idle"),
        ("Approvers", "approvers"),
    ]
    .into_iter()
    .map(|(label, g)| Card {
        label,
        count: users.iter().filter(|u| in_group(u, g)).count(),
        href: format!("/user_management?group={g}"),
    })
    .collect();
    let mut rows: Vec<&User> = users
        .iter()
        .filter(|u| in_group(u, group))
        .filter(|u| needle.is_empty() || u.username.to_lowercase().contains(&needle))
        .collect();
    let sort = q
        .sort
        .as_deref()
        .filter(|s| ["username", "registration", "groups", "email"].contains(s))
        .unwrap_or("registration");
    let desc = order_param(q.order.as_deref(), sort == "registration");
    rows.sort_by(|a, b| {
        let o = match sort {
            "username" => a.username.cmp(&b.username),
            "groups" => groups_label(a).cmp(&groups_label(b)),
            "email" => a.email.cmp(&b.email),
            _ => a.registration_time.0.cmp(&b.registration_time.0),
        };
        let o = if desc { o.reverse() } else { o };
        o.then_with(|| a.username.cmp(&b.username))
    });
    let all = q.view.as_deref() == Some("all");
    let total = rows.len() as u64;
    let size = if all { VIEW_ALL_MAX } else { USERS_PAGE } as u64;
    let last = total.div_ceil(size).max(1);
    let page = page_param(q.page.as_deref()).min(last);
    let base = |p: u64, sort: &str, desc: bool| {
        Href::new("/user_management")
            .param("group", group)
            .param("q", &text)
            .param("sort", sort)
            .param("order", order_text(desc))
            .param("page", p)
            .param_if(all, "view", "all")
            .build()
    };
    let skip = ((page - 1) * size) as usize;
    let rows: Vec<UserRow> = rows
        .into_iter()
        .skip(skip)
        .take(size as usize)
        .map(|u| UserRow {
            username: u.username.clone(),
            registered: u
                .registration_time
                .0
                .format("%y-%m-%d %H:%M:%S")
                .to_string(),
            groups: groups_label(u),
            email: u.email.clone(),
        })
        .collect();
    let headers = sort_columns(
        [
            ("username", "Username", false),
            ("registration", "Registration Time", true),
            ("groups", "Groups", false),
            ("email", "Email", false),
        ],
        sort,
        desc,
        |key, next_desc| base(1, key, next_desc),
    );
    let empty = match group {
        "pending" => "No pending users",
        "blocked" => "No blocked users",
        "idle" => "No idle users",
        "approvers" => "No approver users",
        _ => "No users",
    };
    let toggle = Href::new("/user_management")
        .param("group", group)
        .param("q", &text);
    let view_toggle = if all {
        ("Show paginated".to_string(), toggle.build())
    } else {
        (
            format!("Show all ({total} users)"),
            toggle.param("view", "all").build(),
        )
    };
    let mut l = Layout::new(ctx, "Users");
    if let Some(text) = q.done.as_deref().and_then(|c| done_message(c, "")) {
        l = l.flash(Flash::info(text));
    }
    if let Some(verb) = match q.done.as_deref() {
        Some("bulk-accepted") => Some("Accepted"),
        Some("bulk-rejected") => Some("Rejected (deleted)"),
        _ => None,
    } {
        let n = q.n.unwrap_or(0);
        let mut text = format!("{verb} {n} account{}", if n == 1 { "" } else { "s" });
        if let Some(k) = q.skipped.filter(|k| *k > 0) {
            text.push_str(&format!("; {k} no longer pending (decided meanwhile)"));
        }
        l = l.flash(Flash::info(text));
    }
    Page::ok(&UserManagementPage {
        l,
        cards,
        groups: GROUPS.iter().map(|g| (*g, *g == group)).collect(),
        q: text.clone(),
        headers,
        rows,
        empty,
        bulk: group == "pending",
        pager: Pager::new(page, last, |p| base(p, sort, desc)),
        view_toggle,
    })
}

/// `GET /user_management/pending_count`: the navigation link alone, "Users" or
/// "Users (N)" (anyone; the count is cached for a second).
pub async fn pending_count(State(state): State<Arc<AppState>>) -> Response {
    let accounts = state.accounts.clone();
    match state
        .offload
        .run(move || accounts.users().pending_count())
        .await
    {
        Ok(Ok(n)) => {
            let html = if n > 0 {
                format!("<a href=\"/user_management\" class=\"pending\">Users ({n})</a>")
            } else {
                "<a href=\"/user_management\">Users</a>".to_string()
            };
            let mut r = (StatusCode::OK, axum::response::Html(html)).into_response();
            r.headers_mut().insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("no-cache, private"),
            );
            r
        }
        Ok(Err(e)) => {
            tracing::error!(error = %e, "pending count failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "pending count not computed");
            (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable").into_response()
        }
    }
}

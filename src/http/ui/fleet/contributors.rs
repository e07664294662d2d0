//! `GET /contributors` and `GET /contributors/monthly` (runs of the last 30 days): the
//! contributors table (rank, last active, games per hour, CPU hours, games, tests,
//! repository), sortable, 100 a page or all at once, with "go to username" and "jump to my
//! rank" (→ the page with `highlight=<name>#me`).
//!
//! Must not: scan runs (the table comes from `RunDb::contributors`, kept up to date as tasks
//! end) or read the store outside [`page`].

use std::collections::HashMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use crate::accounts::Users;
use crate::http::state::AppState;
use crate::http::ui::kit::pager::page_param;
use crate::http::ui::kit::repo::repo_label;
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::table::{order_param, order_text, sort_columns};
use crate::http::ui::kit::time::ago;
use crate::http::ui::kit::url::user_href;
use crate::http::ui::kit::{
    Column, Flash, Href, Input, Layout, OrInternal, Page, PageResult, Pager, page,
};
use crate::ledger::{ContributorRow, Ledger};

/// Contributors per page.
pub const CONTRIBUTORS_PAGE: usize = 100;
/// `view=all` shows at most this many contributors.
pub const CONTRIBUTORS_ALL: usize = 5000;
/// One contributor as the page shows them.
pub struct ContributorView {
    pub rank: usize,
    pub username: String,
    pub last_active: String,
    pub games_per_hour: u64,
    pub cpu_hours: u64,
    pub games: u64,
    pub tests: u64,
    pub tests_repo: String,
    pub repo_label: String,
    pub highlight: bool,
}

impl ContributorView {
    /// The address of the contributor's user page.
    pub fn page(&self) -> String {
        user_href(&self.username)
    }
}

#[derive(Template)]
#[template(path = "contributors.html")]
pub struct ContributorsPage {
    pub l: Layout,
    pub heading: &'static str,
    pub base: &'static str,
    pub cards: Vec<(&'static str, String)>,
    pub search: String,
    pub headers: Vec<Column>,
    pub rows: Vec<ContributorView>,
    pub approver: bool,
    /// Logged in: the "Jump to my rank" link is shown.
    pub logged_in: bool,
    pub pager: Pager,
    /// "Show all (N contributors)" or "Show paginated", and its link.
    pub view_toggle: (String, String),
}

#[derive(Deserialize, Default, Clone)]
pub struct ContributorsQuery {
    #[serde(default)]
    sort: Option<String>,
    #[serde(default)]
    order: Option<String>,
    #[serde(default)]
    view: Option<String>,
    #[serde(default)]
    page: Option<String>,
    #[serde(default)]
    search: Option<String>,
    #[serde(default)]
    highlight: Option<String>,
    /// `1`: go to the viewer's own row ("Jump to my rank").
    #[serde(default)]
    findme: Option<String>,
}

/// The sort keys with their label and whether they sort descending by default.
const COLUMNS: [(&str, &str, bool); 7] = [
    ("username", "Username", false),
    ("last_updated", "Last active", true),
    ("games_per_hour", "Games/Hour", true),
    ("cpu_hours", "CPU Hours", true),
    ("games", "Games played", true),
    ("tests", "Tests submitted", true),
    ("tests_repo", "Tests repository", false),
];

fn contributors_page(
    ledger: &Ledger,
    users: &Users,
    ctx: &Ctx,
    q: ContributorsQuery,
    monthly: bool,
) -> PageResult {
    let (heading, base) = if monthly {
        ("Contributors - Top Month", "/contributors/monthly")
    } else {
        ("Contributors", "/contributors")
    };
    let rows = ledger
        .contributors(monthly)
        .or_internal("contributors failed")?;
    let repos: HashMap<String, String> = users
        .list()
        .or_internal("contributors: users failed")?
        .into_iter()
        .map(|u| (u.username, u.tests_repo))
        .collect();
    let cpu_total: f64 = rows.iter().map(|r| r.cpu_hours).sum();
    let cards = vec![
        (
            "Testers",
            rows.iter()
                .filter(|r| r.last_updated.is_some())
                .count()
                .to_string(),
        ),
        (
            "Developers",
            rows.iter().filter(|r| r.tests > 0).count().to_string(),
        ),
        (
            "Active testers",
            rows.iter()
                .filter(|r| r.games_per_hour > 0.0)
                .count()
                .to_string(),
        ),
        ("CPU years", format!("{:.2}", cpu_total / 8760.0)),
        (
            "Games played",
            rows.iter().map(|r| r.games).sum::<u64>().to_string(),
        ),
        (
            "Tests submitted",
            rows.iter().map(|r| r.tests).sum::<u64>().to_string(),
        ),
    ];
    let (sort, default_desc) = COLUMNS
        .iter()
        .find(|c| Some(c.0) == q.sort.as_deref())
        .map_or(("cpu_hours", true), |c| (c.0, c.2));
    let desc = order_param(q.order.as_deref(), default_desc);
    let repo = |r: &ContributorRow| repos.get(&r.username).cloned().unwrap_or_default();
    let mut rows = rows;
    rows.sort_by(|a, b| {
        let o = match sort {
            "username" => a.username.to_lowercase().cmp(&b.username.to_lowercase()),
            "last_updated" => a
                .last_updated
                .as_ref()
                .map(|d| d.0)
                .cmp(&b.last_updated.as_ref().map(|d| d.0)),
            "games_per_hour" => a.games_per_hour.total_cmp(&b.games_per_hour),
            "games" => a.games.cmp(&b.games),
            "tests" => a.tests.cmp(&b.tests),
            "tests_repo" => repo(a).cmp(&repo(b)),
            _ => a.cpu_hours.total_cmp(&b.cpu_hours),
        };
        let o = if desc { o.reverse() } else { o };
        o.then_with(|| a.username.cmp(&b.username))
    });
    let all = q.view.as_deref() == Some("all");
    let size = if all {
        CONTRIBUTORS_ALL
    } else {
        CONTRIBUTORS_PAGE
    };
    let href = |page: usize, highlight: Option<&str>| {
        let h = Href::new(base)
            .param("sort", sort)
            .param("order", order_text(desc))
            .param_if(all, "view", "all")
            .param_if(page > 1, "page", page);
        match highlight {
            Some(name) => h.param("highlight", name).fragment("me").build(),
            None => h.build(),
        }
    };
    let mut page = page_param(q.page.as_deref()) as usize;
    let last = rows.len().div_ceil(size).max(1);
    let toggle = Href::new(base).param("sort", sort);
    let view_toggle = if all {
        ("Show paginated".to_string(), toggle.build())
    } else {
        (
            format!("Show all ({} contributors)", rows.len()),
            toggle.param("view", "all").build(),
        )
    };
    // "Jump to my rank": the viewer's own name, searched exactly.
    let me = ctx.username().filter(|_| q.findme.as_deref() == Some("1"));
    let search = me.or_else(|| q.search.clone());
    // "Go to username": an exact (case-insensitive) match, else the first containing it.
    if let Some(search) = search.as_deref().map(str::trim).filter(|s| !s.is_empty()) {
        let needle = search.to_lowercase();
        let at = rows
            .iter()
            .position(|r| r.username.to_lowercase() == needle)
            .or_else(|| {
                rows.iter()
                    .position(|r| r.username.to_lowercase().contains(&needle))
            });
        let Some(at) = at else {
            let mut l = Layout::new(ctx, heading);
            l = l.flash(Flash::error(format!("No contributor matches {search:?}.")));
            return render_contributors(
                ctx,
                l,
                (heading, base),
                cards,
                search,
                (Vec::new(), Vec::new(), Pager::default()),
                view_toggle,
            );
        };
        let target_page = at / size + 1;
        let name = rows[at].username.clone();
        if target_page != page || q.highlight.as_deref() != Some(name.as_str()) {
            return Page::redirect(href(target_page, Some(&name)));
        }
    }
    page = page.min(last);
    let headers = sort_columns(COLUMNS, sort, desc, |key, next_desc| {
        Href::new(base)
            .param("sort", key)
            .param("order", order_text(next_desc))
            .param_if(all, "view", "all")
            .build()
    });
    let highlight = q.highlight.clone().unwrap_or_default();
    let skip = (page - 1) * size;
    let views: Vec<ContributorView> = rows
        .iter()
        .enumerate()
        .skip(skip)
        .take(size)
        .map(|(i, r)| {
            let tests_repo = repo(r);
            ContributorView {
                rank: i + 1,
                username: r.username.clone(),
                last_active: ago(r.last_updated.as_ref()),
                games_per_hour: r.games_per_hour.max(0.0) as u64,
                cpu_hours: r.cpu_hours.max(0.0) as u64,
                games: r.games,
                tests: r.tests,
                repo_label: repo_label(&tests_repo),
                tests_repo,
                highlight: !highlight.is_empty() && r.username == highlight,
            }
        })
        .collect();
    let pager = Pager::new(page as u64, last as u64, |p| href(p as usize, None));
    let l = Layout::new(ctx, heading);
    render_contributors(
        ctx,
        l,
        (heading, base),
        cards,
        q.search.as_deref().unwrap_or_default(),
        (headers, views, pager),
        view_toggle,
    )
}

/// The table's parts: its headers, rows and pager.
type Table = (Vec<Column>, Vec<ContributorView>, Pager);

fn render_contributors(
    ctx: &Ctx,
    l: Layout,
    (heading, base): (&'static str, &'static str),
    cards: Vec<(&'static str, String)>,
    search: &str,
    (headers, rows, pager): Table,
    view_toggle: (String, String),
) -> PageResult {
    let approver = ctx.user.as_ref().is_some_and(|u| u.is_approver());
    let status = if rows.is_empty() && !search.is_empty() {
        StatusCode::NOT_FOUND
    } else {
        StatusCode::OK
    };
    Page::render(
        status,
        &ContributorsPage {
            l,
            heading,
            base,
            cards,
            search: search.to_string(),
            headers,
            rows,
            approver,
            logged_in: ctx.user.is_some(),
            pager,
            view_toggle,
        },
    )
}

/// `GET /contributors`: all time.
pub async fn contributors(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<ContributorsQuery>,
) -> Response {
    let (ledger, accounts) = (state.ledger.clone(), state.accounts.clone());
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        contributors_page(&ledger, accounts.users(), ctx, q, false)
    })
    .await
}

/// `GET /contributors/monthly`: runs started in the last 30 days.
pub async fn contributors_monthly(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<ContributorsQuery>,
) -> Response {
    let (ledger, accounts) = (state.ledger.clone(), state.accounts.clone());
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        contributors_page(&ledger, accounts.users(), ctx, q, true)
    })
    .await
}

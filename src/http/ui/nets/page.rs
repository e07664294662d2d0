//! The nets: `GET /nns` (the recorded nets with their download counts; filters
//! `network_name`, `user`, `master_only`; `sort`, `order`, `page`, `view=all`; a net whose
//! file is missing from the net directory is shown as such, not as a link that would 404).
//! Uploading one is `net_upload.rs`'s.
//! Must not: read a net file or the store outside the page job.

use std::collections::HashSet;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;

use crate::http::state::AppState;
use crate::http::ui::kit::pager::page_param;
use crate::http::ui::kit::table::{order_param, order_text, sort_columns};
use crate::http::ui::kit::{Column, Href, Input, Layout, OrInternal, Page, Pager, page};
use crate::nets::NetRecord;

/// Nets a page of `/nns` shows; `view=all` shows up to [`ALL_ROWS`].
pub const NETS_PAGE: usize = 25;
pub const ALL_ROWS: usize = 5000;
/// One net row.
pub struct NetRow {
    pub time: String,
    pub name: String,
    pub user: String,
    pub is_master: bool,
    pub first_test: Option<(String, String)>,
    pub last_test: Option<(String, String)>,
    pub downloads: u64,
    /// The net is recorded but has no file in the net directory.
    pub missing: bool,
}

fn test_link(t: &Option<(String, Option<crate::rundb::model::Date>)>) -> Option<(String, String)> {
    t.as_ref().map(|(id, date)| {
        let label = date.as_ref().map_or_else(
            || id.clone(),
            |d| d.0.format("%Y-%m-%d %H:%M:%S").to_string(),
        );
        (id.clone(), label)
    })
}

impl NetRow {
    fn of(n: &NetRecord, files: Option<&HashSet<String>>) -> Self {
        NetRow {
            time: n
                .time
                .as_ref()
                .map(|d| d.0.format("%y-%m-%d %H:%M:%S").to_string())
                .unwrap_or_else(|| "—".into()),
            name: n.name.clone(),
            user: n.user.clone(),
            is_master: n.is_master,
            first_test: test_link(&n.first_test),
            last_test: test_link(&n.last_test),
            downloads: n.downloads,
            missing: files.is_some_and(|f| !f.contains(&n.name)),
        }
    }
}

#[derive(Template)]
#[template(path = "nns.html")]
pub struct NetsPage {
    pub l: Layout,
    pub network_name: String,
    pub user: String,
    pub master_only: bool,
    pub nets: usize,
    pub master_nets: usize,
    pub contributors: usize,
    pub downloads: u64,
    /// Nets of the filtered set without a file in the net directory.
    pub missing: usize,
    pub columns: Vec<Column>,
    pub rows: Vec<NetRow>,
    pub all: bool,
    pub all_href: String,
    pub pager: Pager,
}

/// The `/nns` query.
#[derive(Debug, Clone, PartialEq)]
struct NetsQuery {
    network_name: String,
    user: String,
    master_only: bool,
    sort: &'static str,
    desc: bool,
    all: bool,
    page: usize,
}

const SORTS: [(&str, &str); 6] = [
    ("time", "Time"),
    ("name", "Network"),
    ("user", "Username"),
    ("first_test", "First test"),
    ("last_test", "Last test"),
    ("downloads", "Downloads"),
];

/// Newest, most downloaded first; names in alphabetical order.
fn default_desc(sort: &str) -> bool {
    matches!(sort, "time" | "downloads" | "first_test" | "last_test")
}

fn truthy(v: &str) -> bool {
    matches!(v, "1" | "true" | "on" | "yes")
}

impl NetsQuery {
    fn parse(raw: &[(String, String)]) -> Self {
        let get = |k: &str| {
            raw.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.as_str())
        };
        let text = |k: &str| {
            get(k)
                .map(|v| v.trim().chars().take(200).collect())
                .unwrap_or_default()
        };
        let sort = get("sort")
            .and_then(|s| SORTS.iter().find(|(k, _)| *k == s))
            .map_or("time", |(k, _)| k);
        let desc = order_param(get("order"), default_desc(sort));
        NetsQuery {
            network_name: text("network_name"),
            user: text("user"),
            master_only: raw.iter().any(|(k, v)| k == "master_only" && truthy(v)),
            sort,
            desc,
            all: get("view") == Some("all"),
            page: usize::try_from(page_param(get("page"))).unwrap_or(1),
        }
    }

    fn href(&self, sort: &str, desc: bool, all: bool, page: usize) -> String {
        Href::new("/nns")
            .param_nonempty("network_name", &self.network_name)
            .param_nonempty("user", &self.user)
            .param_if(self.master_only, "master_only", 1)
            .param("sort", sort)
            .param("order", order_text(desc))
            .param_if(all, "view", "all")
            .param_if(page > 1, "page", page)
            .build()
    }

    fn keeps(&self, n: &NetRecord) -> bool {
        (self.network_name.is_empty()
            || n.name
                .to_lowercase()
                .contains(&self.network_name.to_lowercase()))
            && (self.user.is_empty() || n.user.to_lowercase().contains(&self.user.to_lowercase()))
            && (!self.master_only || n.is_master)
    }
}

fn sort_nets(nets: &mut [NetRecord], sort: &str, desc: bool) {
    let first = |n: &NetRecord| n.first_test.as_ref().and_then(|t| t.1);
    let last = |n: &NetRecord| n.last_test.as_ref().and_then(|t| t.1);
    nets.sort_by(|a, b| {
        let by = match sort {
            "name" => a.name.cmp(&b.name),
            "user" => a.user.cmp(&b.user),
            "downloads" => a.downloads.cmp(&b.downloads),
            "first_test" => first(a).cmp(&first(b)),
            "last_test" => last(a).cmp(&last(b)),
            _ => a.time.cmp(&b.time),
        };
        let by = if desc { by.reverse() } else { by };
        by.then_with(|| a.name.cmp(&b.name))
    });
}

/// `GET /nns`: the recorded nets, filtered, sorted (time, newest first, by default) and
/// paged (25, or up to 5000 with `view=all`), with the summary over the filtered set.
pub async fn nns(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(raw): Query<Vec<(String, String)>>,
) -> Response {
    let q = NetsQuery::parse(&raw);
    let store = state.nets.clone();
    let elsewhere = state.config.nn_url.is_some();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let dir = store.dir();
        let mut nets: Vec<NetRecord> = store
            .list()
            .or_internal("nets")?
            .into_iter()
            .filter(|n| q.keeps(n))
            .collect();
        // One listing of the net directory. If it cannot be read, or if `nn_url` sends the
        // workers elsewhere and there is no local directory (the files live on another
        // host), no net is called missing.
        let files = if elsewhere && !dir.is_dir() {
            None
        } else {
            store
                .files()
                .map_err(
                    |e| tracing::warn!(error = %e, dir = %dir.display(), "net directory not read"),
                )
                .ok()
        };
        let missing = files
            .as_ref()
            .map_or(0, |f| nets.iter().filter(|n| !f.contains(&n.name)).count());
        sort_nets(&mut nets, q.sort, q.desc);
        let contributors = nets
            .iter()
            .map(|n| n.user.as_str())
            .collect::<std::collections::HashSet<_>>()
            .len();
        let downloads = nets.iter().fold(0u64, |s, n| s.saturating_add(n.downloads));
        let per_page = if q.all { ALL_ROWS } else { NETS_PAGE };
        let last = if q.all {
            1
        } else {
            nets.len().div_ceil(per_page).max(1)
        };
        let page_no = q.page.min(last);
        let rows = nets
            .iter()
            .skip((page_no - 1).saturating_mul(per_page))
            .take(per_page)
            .map(|n| NetRow::of(n, files.as_ref()))
            .collect();
        let columns = sort_columns(
            SORTS.map(|(key, label)| (key, label, default_desc(key))),
            q.sort,
            q.desc,
            |key, desc| q.href(key, desc, q.all, 1),
        );
        let p = NetsPage {
            l: Layout::new(ctx, "Neural network repository"),
            network_name: q.network_name.clone(),
            user: q.user.clone(),
            master_only: q.master_only,
            nets: nets.len(),
            master_nets: nets.iter().filter(|n| n.is_master).count(),
            contributors,
            downloads,
            missing,
            columns,
            rows,
            all: q.all,
            all_href: q.href(q.sort, q.desc, !q.all, 1),
            pager: Pager::new(page_no as u64, last as u64, |n| {
                q.href(
                    q.sort,
                    q.desc,
                    false,
                    usize::try_from(n).unwrap_or(usize::MAX),
                )
            }),
        };
        Page::ok(&p)
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> NetsQuery {
        NetsQuery::parse(
            &pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<Vec<_>>(),
        )
    }

    #[test]
    fn query_defaults_and_repeated_master_only() {
        let d = q(&[]);
        assert_eq!((d.sort, d.desc, d.all, d.page), ("time", true, false, 1));
        assert!(q(&[("master_only", "0"), ("master_only", "1")]).master_only);
        assert_eq!(q(&[("sort", "bogus")]).sort, "time");
        let n = q(&[("sort", "name")]);
        assert!(!n.desc);
        assert_eq!(
            n.href("name", false, false, 2),
            "/nns?sort=name&order=asc&page=2"
        );
    }
}

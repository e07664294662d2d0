//! `GET /tests/machines`: the workers holding an active task (user, cores, arch, country,
//! version, run, last seen), searched (`q`, `my_workers`), sorted (`sort`, `order`) and paged
//! (`page`, 500 a page).
//!
//! Must not: call the store (only `Scheduler::active_machines`), or run outside [`page`].

use std::collections::HashMap;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;

use super::workers::{page_of, pager, query_text};
use crate::http::state::AppState;
use crate::http::ui::kit::machine_row::MachineRow;
use crate::http::ui::kit::table::{order_param, order_text, sort_columns};
use crate::http::ui::kit::{Column, Href, Input, Layout, OrInternal, Page, Pager, page};
use crate::scheduler::workers::Machine;

/// Machines a page of `/tests/machines` shows.
pub const MACHINES_PAGE: usize = 500;

#[derive(Template)]
#[template(path = "machines.html")]
pub struct MachinesPage {
    pub l: Layout,
    pub heading: String,
    pub q: String,
    pub my_workers: bool,
    pub sort: &'static str,
    pub order: &'static str,
    pub columns: Vec<Column>,
    pub rows: Vec<MachineRow>,
    pub pager: Pager,
}

/// The machines table's sort keys: (key, header, descending by default). `last_active` is
/// the default.
const MACHINE_SORTS: [(&str, &str, bool); 12] = [
    ("machine", "Machine", false),
    ("cores", "Cores", true),
    ("uuid", "UUID", false),
    ("mnps", "MNps", true),
    ("ram", "RAM", true),
    ("system", "System", false),
    ("arch", "Arch", false),
    ("compiler", "Compiler", false),
    ("python", "Python", false),
    ("worker", "Worker", true),
    ("running_on", "Running on", false),
    ("last_active", "Last active", true),
];

/// Sorts machines by `key` (ties by short name, so rows do not jitter).
fn sort_machines(machines: &mut [Machine], key: &str, desc: bool) {
    machines.sort_by(|a, b| {
        let by = match key {
            "machine" => a.username.cmp(&b.username),
            "cores" => a.concurrency.cmp(&b.concurrency),
            "uuid" => a.short_name.cmp(&b.short_name),
            "mnps" => a.nps.total_cmp(&b.nps),
            "ram" => a.max_memory.cmp(&b.max_memory),
            "system" => a.uname.cmp(&b.uname),
            "arch" => a.worker_arch.cmp(&b.worker_arch),
            "compiler" => (&a.compiler_name, &a.compiler_version)
                .cmp(&(&b.compiler_name, &b.compiler_version)),
            "python" => a.python_version.cmp(&b.python_version),
            "worker" => (a.version, a.modified).cmp(&(b.version, b.modified)),
            "running_on" => (&a.new_tag, a.task_id).cmp(&(&b.new_tag, b.task_id)),
            _ => a.last_updated.cmp(&b.last_updated),
        };
        let by = if desc { by.reverse() } else { by };
        by.then_with(|| a.short_name.cmp(&b.short_name))
    });
}

/// `GET /tests/machines[?q=…&my_workers=1&sort=…&order=…&page=N]`: one row per active task
/// of every unfinished run, the most recently heard from first unless sorted otherwise, 500 a
/// page (a page past the end shows the last).
pub async fn machines(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let q = query_text(&params);
    let mine = params.get("my_workers").is_some_and(|v| v == "1");
    let asked = page_of(&params);
    let (sort, default_desc) = params
        .get("sort")
        .and_then(|s| MACHINE_SORTS.iter().find(|(k, _, _)| k == s))
        .map_or(("last_active", true), |(k, _, d)| (*k, *d));
    let desc = order_param(params.get("order").map(String::as_str), default_desc);
    let scheduler = state.scheduler.clone();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let mut machines = scheduler.active_machines().or_internal("active machines")?;
        sort_machines(&mut machines, sort, desc);
        let total = machines.len();
        let me = ctx.username();
        let needle = q.to_lowercase();
        let my_workers = mine && me.is_some();
        let rows: Vec<MachineRow> = machines
            .iter()
            .filter(|m| !my_workers || Some(&m.username) == me.as_ref())
            .map(MachineRow::of)
            .filter(|r| r.matches(&needle))
            .collect();
        let shown = rows.len();
        let last = shown.div_ceil(MACHINES_PAGE).max(1);
        let page_no = asked.min(last);
        let rows: Vec<MachineRow> = rows
            .into_iter()
            .skip((page_no - 1).saturating_mul(MACHINES_PAGE))
            .take(MACHINES_PAGE)
            .collect();
        let filtered = !needle.is_empty() || my_workers;
        let heading = if filtered {
            format!("Workers - {total} ({shown})")
        } else {
            format!("Workers - {total}")
        };
        let base =
            Href::new("/tests/machines")
                .param("q", &q)
                .param_if(my_workers, "my_workers", 1);
        let columns = sort_columns(MACHINE_SORTS, sort, desc, |key, d| {
            base.clone()
                .param("sort", key)
                .param("order", order_text(d))
                .build()
        });
        let p = MachinesPage {
            l: Layout::new(ctx, "Machines"),
            heading,
            q: q.clone(),
            my_workers,
            sort,
            order: order_text(desc),
            columns,
            rows,
            pager: pager(page_no, last, |n| {
                base.clone()
                    .param("sort", sort)
                    .param("order", order_text(desc))
                    .param("page", n)
                    .build()
            }),
        };
        Page::ok(&p)
    })
    .await
}

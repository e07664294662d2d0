//! The dashboard's workers table: the machines holding an active task (one row per task, as
//! `/tests/machines`), the most recently active first, at most [`SHOWN`] rows, searched by
//! `workers_q` (the same columns `/tests/machines` searches). The unfiltered table is shared
//! (`DashboardCache::fresh_workers`); a searched one is rendered for its request.
//!
//! Must not: call the store (only `Scheduler::active_machines`), or run outside a page job.

use std::collections::HashMap;

use askama::Template;

use crate::http::ui::kit::machine_row::MachineRow;
use crate::http::ui::kit::{Href, OrInternal, PageError};
use crate::scheduler::Scheduler;

/// Rows the dashboard's workers table shows at most (`/tests/machines` shows them all).
pub const SHOWN: usize = 100;

/// The longest search kept.
const MAX_QUERY: usize = 200;

#[derive(Template)]
#[template(path = "dashboard_workers.html")]
pub struct WorkersTable {
    pub rows: Vec<MachineRow>,
    /// Machines with an active task.
    pub total: usize,
    /// Those the search matches.
    pub matching: usize,
    pub q: String,
    /// `/tests/machines` with the same search.
    pub all_href: String,
}

/// The search `workers_q`, trimmed and cut at 200 characters (empty: none).
pub fn query(params: &HashMap<String, String>) -> String {
    params
        .get("workers_q")
        .map(|q| q.trim().chars().take(MAX_QUERY).collect())
        .unwrap_or_default()
}

/// The table for the search `q` (blocking: the run locks, one after the other).
pub fn render(scheduler: &Scheduler, q: &str) -> Result<String, PageError> {
    let machines = scheduler.active_machines().or_internal("active machines")?;
    let needle = q.to_lowercase();
    let total = machines.len();
    let mut matching = 0;
    let mut rows = Vec::new();
    for m in &machines {
        let row = MachineRow::of(m);
        if row.matches(&needle) {
            matching += 1;
            if rows.len() < SHOWN {
                rows.push(row);
            }
        }
    }
    let t = WorkersTable {
        rows,
        total,
        matching,
        q: q.to_string(),
        all_href: Href::new("/tests/machines")
            .param_if(!q.is_empty(), "q", q)
            .build(),
    };
    Ok(t.render()?)
}

//! The run's room: the run page (arguments, tasks, results box, charts, detail, diff), its
//! statistics pages (stats, live Elo, the SPRT calculator) and the run controls.

pub mod args;
pub mod charts;
pub mod charts_look;
pub mod controls;
pub mod detail;
pub mod diff;
pub mod group;
pub mod live_elo;
pub mod page;
pub mod sprt_calc;
pub mod stats;
pub mod stats_tables;
pub mod tasks;
pub mod tasks_view;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use crate::http::state::AppState;

/// The room's routes (merged with the other rooms' in `ui::router`).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/tests/view/{id}", get(page::view))
        // Test groups (issue 39).
        .route("/tests/group/{id}", get(group::group_page))
        .route("/tests/view/{id}/detail", get(page::detail_fragment))
        .route("/tests/view/{id}/charts", get(page::charts_fragment))
        .route("/tests/tasks/{id}", get(page::tasks_fragment))
        .route("/tests/approve", post(controls::approve))
        .route("/tests/stop", post(controls::stop))
        .route("/tests/purge", post(controls::purge))
        .route("/tests/delete", post(controls::delete))
        .route("/tests/modify", post(controls::modify))
        .route("/tests/stats/{id}", get(stats::stats_page))
        .route("/tests/live_elo/{id}", get(live_elo::live_elo_page))
        .route(
            "/tests/live_elo_update/{id}",
            get(live_elo::live_elo_update),
        )
        .route("/tests/chart/{id}/{name}", get(stats::chart))
        .route("/sprt_calc", get(sprt_calc::sprt_calc))
}

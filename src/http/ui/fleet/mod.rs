//! The fleet room: machines, workers, limits, contributors and rate limits.

pub mod contributors;
pub mod limits;
pub mod machines;
pub mod rate_limits;
pub mod workers;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

use crate::http::state::AppState;

/// The room's routes (merged with the other rooms' in `ui::router`).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/contributors", get(contributors::contributors))
        .route(
            "/contributors/monthly",
            get(contributors::contributors_monthly),
        )
        .route("/tests/machines", get(machines::machines))
        .route(
            "/workers/{name}",
            get(workers::worker_page).post(workers::worker_post),
        )
        .route("/rate_limits", get(rate_limits::rate_limits))
        .route("/rate_limits/server", get(rate_limits::server))
        .route("/limits", get(limits::view).post(limits::set_max))
}

//! The dashboard room: `/tests` (its panels, filters, workers table and cache).

pub mod cache;
pub mod page;
pub mod workers;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

use crate::http::state::AppState;

/// The room's routes (merged with the other rooms' in `ui::router`).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(page::root))
        .route("/tests", get(page::tests))
}

//! The submit room: the new-run form (`/tests/run`), its fields, arguments and GitHub checks.

pub mod args;
pub mod form;
pub mod github;
pub mod group;
pub mod page;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

use crate::http::state::AppState;

/// The room's routes (merged with the other rooms' in `ui::router`).
pub fn router() -> Router<Arc<AppState>> {
    Router::new().route("/tests/run", get(page::form).post(page::submit))
}

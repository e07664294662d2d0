//! The lists room: finished runs and the actions log.

pub mod actions;
pub mod finished;
pub mod user;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

use crate::http::state::AppState;

/// The room's routes (merged with the other rooms' in `ui::router`).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/tests/finished", get(finished::finished))
        .route("/tests/user/{name}", get(user::user))
        .route("/actions", get(actions::actions))
}

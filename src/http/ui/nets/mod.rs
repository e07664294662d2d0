//! The nets room: the net list (`/nns`) and the net upload (`/upload`).

pub mod page;
pub mod upload;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;

use crate::http::state::AppState;

/// The room's routes (merged with the other rooms' in `ui::router`).
pub fn router() -> Router<Arc<AppState>> {
    Router::new().route("/nns", get(page::nns)).route(
        "/upload",
        get(upload::upload_form)
            .post(upload::upload)
            .layer(axum::extract::DefaultBodyLimit::disable()),
    )
}

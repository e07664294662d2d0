//! The web UI: HTML pages rendered from `askama` templates (`templates/`), in rooms by what a
//! person does there, each a folder with its own `router()`:
//!
//! - [`run`]: a run's page (arguments, tasks, results, charts, detail, diff), its statistics
//!   (stats, live Elo, the SPRT calculator) and the run controls;
//! - [`submit`]: the new-run form;
//! - [`dashboard`]: `/tests`, its panels, filters, workers table and cache;
//! - [`people`]: log in, sign up, profile, users, user management, tokens, reset, follows,
//!   notices;
//! - [`fleet`]: machines, workers, limits, contributors, rate limits;
//! - [`nets`]: the net list and upload;
//! - [`lists`]: finished runs, one submitter's runs, the actions log;
//!
//! all built from the kit ([`kit`]: the page job, `Page`/`PageError`, the session, the pager,
//! column headers, time and URL helpers, and what two rooms share). A page never names a page
//! of another room and the kit names no room (`tests/it/layout.rs`), so a new page touches its
//! room and the kit only.
//!
//! Owns: merging the rooms' routes ([`router`]), the UI's own layers (compression) and static
//! files (`/static/…?v=<content hash>`, cached for a year).
//! Must not: call the store, render a template or resolve a session outside `Offload::run`
//! (the event loop only parses forms and verifies the cookie's signature).

pub mod dashboard;
pub mod fleet;
pub mod kit;
pub mod lists;
pub mod nets;
pub mod people;
pub mod run;
pub mod submit;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use tower_http::compression::CompressionLayer;
use tower_http::services::ServeDir;
use tower_http::set_header::SetResponseHeaderLayer;

use super::state::AppState;
use kit::assets::static_dir;

/// The UI's routes (merged into `http::router` beside `api::router`).
pub fn router() -> Router<Arc<AppState>> {
    let statics = Router::new()
        .nest_service("/static", ServeDir::new(static_dir()))
        .layer(SetResponseHeaderLayer::overriding(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        ));
    Router::new()
        .merge(dashboard::router())
        .merge(run::router())
        .merge(submit::router())
        .merge(people::router())
        .merge(fleet::router())
        .merge(nets::router())
        .merge(lists::router())
        .route("/theme", axum::routing::post(kit::theme::switch))
        .merge(statics)
        .layer(CompressionLayer::new())
}

//! The JSON API, one file and one router per resource, merged here.
//!
//! - [`worker`]: the worker protocol (primary only);
//! - [`runs`]: run submission and control for scripts (primary only);
//! - [`groups`]: test groups: `create_group` (primary only) and `get_group` (read);
//! - [`public`]: the read-only API ([`run_view`]: runs and tasks as it shows them);
//! - [`files`] and [`upload`]: PGN uploads and the streamed downloads of PGNs and nets;
//! - [`call`]: the worker call's schema, bounds and extractors, shared by the above;
//! - [`rate_limit`]: the GitHub quota in Fishtest's shape (shoal calls no GitHub);
//! - [`openapi`] and [`schema`]: `/api/openapi.json`, generated from the handlers'
//!   annotations (every route added here must be annotated: a test compares both ways).
//!
//! The primary-only rule is a layer on the worker and run routers
//! ([`primary::primary_only`]), not a list of paths.

use std::sync::Arc;

use axum::Router;

use super::state::AppState;

pub mod actions;
pub mod call;
pub mod files;
pub mod groups;
pub mod openapi;
pub mod primary;
pub mod public;
pub mod rate_limit;
pub mod replies;
pub mod run_view;
pub mod runs;
pub mod schema;
pub mod upload;
pub mod worker;

/// Every API route.
pub fn router(state: &Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .merge(worker::router(state))
        .merge(runs::router(state))
        // Test groups (issue 39).
        .merge(groups::router(state))
        .merge(groups::read_router())
        .merge(public::router())
        .merge(files::router())
        .merge(actions::router())
        .merge(rate_limit::router())
        .merge(openapi::router())
}

//! The web UI: HTML pages rendered from `askama` templates (`templates/`), one file per page
//! group with its handlers and template structs side by side, built from the kit ([`kit`]:
//! the page job, `Page`/`PageError`, the pager, column headers, time and URL helpers).
//!
//! Owns: the UI routes ([`router`]) and static files (`/static/…?v=<content hash>`, cached
//! for a year). This file is only the router: pages import the kit and their siblings, never
//! this module, so the router can name them all without an import cycle.
//! Must not: call the store, render a template or resolve a session outside `Offload::run`
//! (the event loop only parses forms and verifies the cookie's signature).

pub mod accounts;
pub mod actions;
pub mod charts;
pub mod charts_look;
pub mod contributors;
pub mod controls;
pub mod dashboard;
pub mod dashboard_cache;
pub mod dashboard_filters;
pub mod dashboard_workers;
pub mod finished;
pub mod follows;
pub mod forgot;
pub mod kit;
pub mod limits;
pub mod lists;
pub mod live_elo;
pub mod machines;
pub mod net_upload;
pub mod nets;
pub mod notices;
pub mod pending_bulk;
pub mod people;
pub mod rate_limits;
pub mod reset;
pub mod results;
pub mod run;
pub mod run_args;
pub mod run_detail;
pub mod run_diff;
pub mod run_tasks;
pub mod run_tasks_view;
pub mod session;
pub mod signup_guard;
pub mod sprt_calc;
pub mod stats;
pub mod stats_tables;
pub mod submit;
pub mod submit_args;
pub mod submit_form;
pub mod submit_github;
pub mod tokens;
pub mod user_management;
pub mod workers;

use std::sync::Arc;

use axum::Router;
use axum::http::{HeaderValue, header};
use axum::routing::get;
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
        .route("/", get(dashboard::root))
        .route("/tests", get(dashboard::tests))
        .route("/tests/finished", get(finished::finished))
        .route("/tests/user/{name}", get(lists::user))
        .route("/tests/view/{id}", get(run::view))
        .route("/tests/view/{id}/detail", get(run::detail_fragment))
        .route("/tests/view/{id}/charts", get(run::charts_fragment))
        .route("/tests/tasks/{id}", get(run::tasks_fragment))
        .route("/login", get(accounts::login_form).post(accounts::login))
        .route("/logout", axum::routing::post(accounts::logout))
        .route("/theme", axum::routing::post(kit::theme::switch))
        .route("/signup", get(accounts::signup_form).post(accounts::signup))
        .route("/tests/approve", axum::routing::post(controls::approve))
        .route("/tests/stop", axum::routing::post(controls::stop))
        .route("/tests/purge", axum::routing::post(controls::purge))
        .route("/tests/delete", axum::routing::post(controls::delete))
        .route("/tests/modify", axum::routing::post(controls::modify))
        .route("/tests/follow", axum::routing::post(follows::follow))
        .route("/tests/unfollow", axum::routing::post(follows::unfollow))
        .route(
            "/notifications/feed",
            axum::routing::post(follows::feed_action),
        )
        .route("/notifications", get(notices::notifications))
        .route(
            "/notifications/read",
            axum::routing::post(notices::mark_read),
        )
        .route("/notifications/unread.json", get(notices::unread_json))
        .route("/feeds/{file}", get(notices::feed))
        .route("/tests/run", get(submit::form).post(submit::submit))
        .route("/tests/stats/{id}", get(stats::stats_page))
        .route("/tests/live_elo/{id}", get(live_elo::live_elo_page))
        .route(
            "/tests/live_elo_update/{id}",
            get(live_elo::live_elo_update),
        )
        .route("/tests/chart/{id}/{name}", get(stats::chart))
        .route("/sprt_calc", get(sprt_calc::sprt_calc))
        .route(
            "/user",
            get(people::own_profile).post(people::change_profile),
        )
        .route("/user/tokens", get(tokens::list).post(tokens::create))
        .route("/user/tokens/revoke", axum::routing::post(tokens::revoke))
        .route(
            "/user/tokens/revoke_all",
            axum::routing::post(tokens::revoke_all),
        )
        .route(
            "/user/{name}",
            get(people::user_page).post(people::user_action),
        )
        .route("/user/{name}/reset_link", axum::routing::post(reset::issue))
        .route("/reset/{secret}", get(reset::form).post(reset::set))
        .route("/forgot", get(forgot::forgot_form).post(forgot::forgot))
        .route("/user_management", get(user_management::user_management))
        .route(
            "/user_management/pending",
            axum::routing::post(pending_bulk::decide_pending),
        )
        .route(
            "/user_management/pending_count",
            get(user_management::pending_count),
        )
        .route("/actions", get(actions::actions))
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
        .route("/nns", get(nets::nns))
        .route(
            "/upload",
            get(net_upload::upload_form)
                .post(net_upload::upload)
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/rate_limits", get(rate_limits::rate_limits))
        .route("/rate_limits/server", get(rate_limits::server))
        .route("/limits", get(limits::view).post(limits::set_max))
        .merge(statics)
        .layer(CompressionLayer::new())
}

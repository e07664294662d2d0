//! The web UI: HTML pages rendered from `askama` templates (`templates/`), one file per page
//! group with its handlers and template structs side by side, built from the kit ([`kit`]:
//! the page job, `Page`/`PageError`, the pager, column headers, time and URL helpers).
//!
//! Owns: the UI routes ([`router`]) and static files (`/static/…?v=<content hash>`, cached
//! for a year). This file is only the router: pages import the kit and their siblings, never
//! this module, so the router can name them all without an import cycle.
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
        .route("/", get(dashboard::page::root))
        .route("/tests", get(dashboard::page::tests))
        .route("/tests/finished", get(lists::finished::finished))
        .route("/tests/user/{name}", get(lists::user::user))
        .route("/tests/view/{id}", get(run::page::view))
        .route("/tests/view/{id}/detail", get(run::page::detail_fragment))
        .route("/tests/view/{id}/charts", get(run::page::charts_fragment))
        .route("/tests/tasks/{id}", get(run::page::tasks_fragment))
        .route(
            "/login",
            get(people::accounts::login_form).post(people::accounts::login),
        )
        .route("/logout", axum::routing::post(people::accounts::logout))
        .route(
            "/signup",
            get(people::accounts::signup_form).post(people::accounts::signup),
        )
        .route(
            "/tests/approve",
            axum::routing::post(run::controls::approve),
        )
        .route("/tests/stop", axum::routing::post(run::controls::stop))
        .route("/tests/purge", axum::routing::post(run::controls::purge))
        .route("/tests/delete", axum::routing::post(run::controls::delete))
        .route("/tests/modify", axum::routing::post(run::controls::modify))
        .route(
            "/tests/follow",
            axum::routing::post(people::follows::follow),
        )
        .route(
            "/tests/unfollow",
            axum::routing::post(people::follows::unfollow),
        )
        .route(
            "/notifications/feed",
            axum::routing::post(people::follows::feed_action),
        )
        .route("/notifications", get(people::notices::notifications))
        .route(
            "/notifications/read",
            axum::routing::post(people::notices::mark_read),
        )
        .route(
            "/notifications/unread.json",
            get(people::notices::unread_json),
        )
        .route("/feeds/{file}", get(people::notices::feed))
        .route(
            "/tests/run",
            get(submit::page::form).post(submit::page::submit),
        )
        .route("/tests/stats/{id}", get(run::stats::stats_page))
        .route("/tests/live_elo/{id}", get(run::live_elo::live_elo_page))
        .route(
            "/tests/live_elo_update/{id}",
            get(run::live_elo::live_elo_update),
        )
        .route("/tests/chart/{id}/{name}", get(run::stats::chart))
        .route("/sprt_calc", get(run::sprt_calc::sprt_calc))
        .route(
            "/user",
            get(people::profile::own_profile).post(people::profile::change_profile),
        )
        .route(
            "/user/tokens",
            get(people::tokens::list).post(people::tokens::create),
        )
        .route(
            "/user/tokens/revoke",
            axum::routing::post(people::tokens::revoke),
        )
        .route(
            "/user/tokens/revoke_all",
            axum::routing::post(people::tokens::revoke_all),
        )
        .route(
            "/user/{name}",
            get(people::profile::user_page).post(people::profile::user_action),
        )
        .route(
            "/user/{name}/reset_link",
            axum::routing::post(people::reset::issue),
        )
        .route(
            "/reset/{secret}",
            get(people::reset::form).post(people::reset::set),
        )
        .route(
            "/forgot",
            get(people::forgot::forgot_form).post(people::forgot::forgot),
        )
        .route(
            "/user_management",
            get(people::user_management::user_management),
        )
        .route(
            "/user_management/pending",
            axum::routing::post(people::pending_bulk::decide_pending),
        )
        .route(
            "/user_management/pending_count",
            get(people::user_management::pending_count),
        )
        .route("/actions", get(lists::actions::actions))
        .route("/contributors", get(fleet::contributors::contributors))
        .route(
            "/contributors/monthly",
            get(fleet::contributors::contributors_monthly),
        )
        .route("/tests/machines", get(fleet::machines::machines))
        .route(
            "/workers/{name}",
            get(fleet::workers::worker_page).post(fleet::workers::worker_post),
        )
        .route("/nns", get(nets::page::nns))
        .route(
            "/upload",
            get(nets::upload::upload_form)
                .post(nets::upload::upload)
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/rate_limits", get(fleet::rate_limits::rate_limits))
        .route("/rate_limits/server", get(fleet::rate_limits::server))
        .route(
            "/limits",
            get(fleet::limits::view).post(fleet::limits::set_max),
        )
        .merge(statics)
        .layer(CompressionLayer::new())
}

//! The people room: log in, sign up, profile, users, user management, tokens, password
//! reset, follows and notices.

pub mod accounts;
pub mod follows;
pub mod forgot;
pub mod notices;
pub mod pending_bulk;
pub mod profile;
pub mod reset;
pub mod signup_guard;
pub mod tokens;
pub mod user_management;

use std::sync::Arc;

use axum::Router;
use axum::routing::{get, post};

use crate::http::state::AppState;

/// The room's routes (merged with the other rooms' in `ui::router`).
pub fn router() -> Router<Arc<AppState>> {
    Router::new()
        .route("/login", get(accounts::login_form).post(accounts::login))
        .route("/logout", post(accounts::logout))
        .route("/signup", get(accounts::signup_form).post(accounts::signup))
        .route("/tests/follow", post(follows::follow))
        .route("/tests/unfollow", post(follows::unfollow))
        .route("/notifications/feed", post(follows::feed_action))
        .route("/notifications", get(notices::notifications))
        .route("/notifications/read", post(notices::mark_read))
        .route("/notifications/unread.json", get(notices::unread_json))
        .route("/feeds/{file}", get(notices::feed))
        .route(
            "/user",
            get(profile::own_profile).post(profile::change_profile),
        )
        .route("/user/tokens", get(tokens::list).post(tokens::create))
        .route("/user/tokens/revoke", post(tokens::revoke))
        .route("/user/tokens/revoke_all", post(tokens::revoke_all))
        .route(
            "/user/{name}",
            get(profile::user_page).post(profile::user_action),
        )
        .route("/user/{name}/reset_link", post(reset::issue))
        // Every user's page, whatever the name (`kit::url::user_href`).
        .route(
            "/users/{name}",
            get(profile::user_page).post(profile::user_action),
        )
        .route("/users/{name}/reset_link", post(reset::issue))
        .route("/reset/{secret}", get(reset::form).post(reset::set))
        .route("/forgot", get(forgot::forgot_form).post(forgot::forgot))
        .route("/user_management", get(user_management::user_management))
        .route(
            "/user_management/pending",
            post(pending_bulk::decide_pending),
        )
        .route(
            "/user_management/pending_count",
            get(user_management::pending_count),
        )
}

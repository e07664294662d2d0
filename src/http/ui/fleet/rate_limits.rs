//! `/rate_limits` (the GitHub rate-limit page) and `/rate_limits/server` (its server figures
//! as a fragment: the remaining calls, then an out-of-band `server_reset` span with the reset
//! time, `HH:MM:SS` UTC).
//!
//! The server's figures are `/api/rate_limit`'s ([`known_quota`]): GitHub's, as it last
//! stated them to the `github` component (asked again, at no cost, when older than
//! [`QUOTA_MAX_AGE`](crate::http::api::rate_limit::QUOTA_MAX_AGE)), or Fishtest's initial
//! ones before GitHub was ever reached, which the page then says, with why.
//! The browser's own quota, which Fishtest's page asks GitHub for from the browser, is shown
//! unknown: shoal's pages never send the browser to GitHub.
//!
//! Owns: those two handlers and their templates.
//! Must not: render outside the pool (`page`), or ask GitHub more than `/api/rate_limit`
//! does.

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use crate::http::api::rate_limit::{GithubQuota, known_quota};
use crate::http::state::AppState;
use crate::http::ui::kit::{Input, Layout, Page, page};

/// The server's figures as shown: the quota and, when asking GitHub failed, why.
pub struct Shown {
    pub remaining: String,
    pub reset: String,
    pub q: GithubQuota,
    /// GitHub stated these figures (false: Fishtest's initial ones).
    pub reached: bool,
    pub failed: Option<String>,
}

async fn shown(state: &AppState) -> Shown {
    let k = known_quota(state).await;
    Shown {
        remaining: k.quota.remaining.to_string(),
        reset: k.quota.reset_hms(),
        q: k.quota,
        reached: k.reached,
        failed: k.failed,
    }
}

#[derive(Template)]
#[template(path = "rate_limits.html")]
pub struct RateLimitsPage {
    pub l: Layout,
    pub s: Shown,
    pub token: bool,
}

#[derive(Template)]
#[template(
    source = "{{ s.remaining }}<span id=\"server_reset\" hx-swap-oob=\"true\">{{ s.reset }}</span>",
    ext = "html"
)]
pub struct ServerFragment {
    pub s: Shown,
}

/// GET /rate_limits.
pub async fn rate_limits(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let s = shown(&state).await;
    let token = state.config.github_token.is_some();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        Page::ok(&RateLimitsPage {
            l: Layout::new(ctx, "GitHub rate limits"),
            s,
            token,
        })
    })
    .await
}

/// GET /rate_limits/server: the fragment.
pub async fn server(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let s = shown(&state).await;
    page(&state, Input::get(&state, &headers), move |_, _, _| {
        Page::ok(&ServerFragment { s })
    })
    .await
}

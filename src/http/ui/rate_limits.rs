//! `/rate_limits` (the GitHub rate-limit page) and `/rate_limits/server` (its server figures
//! as a fragment: the remaining calls, then an out-of-band `server_reset` span with the reset
//! time, `HH:MM:SS` UTC).
//!
//! shoal calls no GitHub, so the server's figures are its own ([`GithubQuota`], the same as
//! `/api/rate_limit`): nothing is ever used. The page says so. The browser's own quota, which
//! Fishtest's page asks GitHub for from the browser, is shown unknown (`-1`, `00:00:00`): shoal's
//! pages never send the browser to GitHub.
//!
//! Owns: those two handlers and their templates.
//! Must not: call GitHub, or render outside the pool (`page`).

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::kit::{Input, Layout, Page, page};
use crate::http::api::rate_limit::GithubQuota;
use crate::http::state::AppState;

#[derive(Template)]
#[template(path = "rate_limits.html")]
pub struct RateLimitsPage {
    pub l: Layout,
    pub q: GithubQuota,
    pub reset: String,
}

#[derive(Template)]
#[template(
    source = "{{ q.remaining }}<span id=\"server_reset\" hx-swap-oob=\"true\">{{ reset }}</span>",
    ext = "html"
)]
pub struct ServerFragment {
    pub q: GithubQuota,
    pub reset: String,
}

/// GET /rate_limits.
pub async fn rate_limits(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    page(&state, Input::get(&state, &headers), |_, ctx, _| {
        let q = GithubQuota::now();
        let reset = q.reset_hms();
        Page::ok(&RateLimitsPage {
            l: Layout::new(ctx, "GitHub rate limits"),
            q,
            reset,
        })
    })
    .await
}

/// GET /rate_limits/server: the fragment.
pub async fn server(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    page(&state, Input::get(&state, &headers), |_, _, _| {
        let q = GithubQuota::now();
        let reset = q.reset_hms();
        Page::ok(&ServerFragment { q, reset })
    })
    .await
}

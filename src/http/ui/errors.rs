//! The HTML error pages: 404 for unknown browser paths, 403 for a refused form (bad or missing
//! CSRF token), 429 for a throttled login. API paths keep their JSON errors (`http::not_found`).

use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::session::Ctx;
use super::{Input, Layout, Out, page};
use crate::http::AppState;

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub l: Layout,
    pub heading: String,
    pub detail: String,
}

fn error_page(ctx: &Ctx, heading: &str, detail: &str) -> ErrorPage {
    ErrorPage {
        l: Layout::new(ctx, heading),
        heading: heading.into(),
        detail: detail.into(),
    }
}

/// 403: a form without a valid CSRF token (nothing was changed).
pub fn forbidden(ctx: &Ctx) -> Out {
    let p = error_page(
        ctx,
        "Forbidden",
        "The form was refused: its security token is missing or out of date. Reload the page and try again.",
    );
    Out::render(StatusCode::FORBIDDEN, &p)
}

/// A refused action (a run control the domain turned down, a secondary instance): the
/// domain's message on a page with `status`; nothing was changed.
pub fn refused(ctx: &Ctx, status: StatusCode, heading: &str, detail: &str) -> Out {
    Out::render(status, &error_page(ctx, heading, detail))
}

/// 429: too many failed logins; try again after `retry_after_s`.
pub fn throttled(ctx: &Ctx, retry_after_s: u64) -> Out {
    let p = error_page(
        ctx,
        "Too many attempts",
        &format!("Too many failed logins. Try again in {retry_after_s} s."),
    );
    match Out::render(StatusCode::TOO_MANY_REQUESTS, &p) {
        Out::Html(_, html) => Out::Throttled(retry_after_s, html),
        other => other,
    }
}

/// 500 without a session (the session itself could not be read).
pub fn internal() -> Out {
    Out::Html(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal Server Error".into(),
    )
}

/// The 404 page (an unknown user or run).
pub fn not_found_page(ctx: &Ctx) -> Out {
    let p = error_page(
        ctx,
        "Page not found",
        "Oops! There is nothing at this address.",
    );
    Out::render(StatusCode::NOT_FOUND, &p)
}

/// 404 for a browser path.
pub async fn not_found(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    page(&state, Input::get(&state, &headers), |_, ctx, _| {
        not_found_page(ctx)
    })
    .await
}

/// The 404 page from inside a page body (an unknown run): [`not_found_page`].
pub fn missing(ctx: &Ctx) -> Out {
    not_found_page(ctx)
}

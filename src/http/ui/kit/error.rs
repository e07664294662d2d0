//! Why a page body produced no page ([`PageError`]), and the one place that turns each reason
//! into the HTML answer: the 404 page, a refusal with the domain's message (403, 400, 503),
//! the 403 of a stale form, the 429 of a throttled login, or a 500 that is logged here and
//! never explained to the browser. API paths keep their JSON errors (`http::error`).
//!
//! A body returns `Result<Page, PageError>` and uses `?`: a domain error (`RunDbError`, a
//! user-store error) converts through [`From`], a bad run id is the 404 page, and a failed
//! read is a 500 through [`OrInternal::or_internal`], which names what failed in the log.

use std::fmt::Display;
use std::sync::Arc;

use askama::Template;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::page::{Input, Layout, Page, page};
use crate::http::AppState;
use crate::http::run_id::InvalidRunId;
use crate::http::ui::session::Ctx;
use crate::rundb::RunDbError;
use crate::rundb::users::UserError;

/// Why a page body gave no page; [`PageError::into_page`] is the answer instead.
#[derive(Debug)]
pub enum PageError {
    /// 404: the "Page not found" page (an unknown run, user or path).
    NotFound,
    /// A refused request (the domain said no, or the input is unusable): the error page
    /// with `heading` and the message, with `status`. Nothing was changed.
    Refused {
        status: StatusCode,
        heading: &'static str,
        detail: String,
    },
    /// 503: a change only the primary instance makes.
    NotPrimary,
    /// 403: a form whose CSRF token is missing or out of date (nothing was changed).
    Forbidden,
    /// 429: too many failed logins; try again after this many seconds (`Retry-After`).
    Throttled { retry_after_s: u64 },
    /// 500: `what` failed; the detail is logged, never sent.
    Internal { what: &'static str, detail: String },
    /// Not a failure: what was asked for is at another address (a page past the last one
    /// of a list is the last one), a 302 there.
    Redirect(String),
}

/// What a page body returns.
pub type PageResult = Result<Page, PageError>;

impl PageError {
    /// A refusal page: `heading`, then `detail`, with `status`.
    pub fn refused(status: StatusCode, heading: &'static str, detail: impl Into<String>) -> Self {
        PageError::Refused {
            status,
            heading,
            detail: detail.into(),
        }
    }

    /// A 500 for `what`, logged with `e`.
    pub fn internal(what: &'static str, e: impl Display) -> Self {
        PageError::Internal {
            what,
            detail: e.to_string(),
        }
    }

    /// The answer for the session `ctx`.
    pub fn into_page(self, ctx: &Ctx) -> Page {
        match self {
            PageError::NotFound => error_page(
                ctx,
                StatusCode::NOT_FOUND,
                "Page not found",
                "Oops! There is nothing at this address.",
            ),
            PageError::Refused {
                status,
                heading,
                detail,
            } => error_page(ctx, status, heading, &detail),
            PageError::NotPrimary => error_page(
                ctx,
                StatusCode::SERVICE_UNAVAILABLE,
                "Service unavailable",
                "Primary instance required.",
            ),
            PageError::Forbidden => error_page(
                ctx,
                StatusCode::FORBIDDEN,
                "Forbidden",
                "The form was refused: its security token is missing or out of date. Reload the page and try again.",
            ),
            PageError::Throttled { retry_after_s } => {
                let text = format!("Too many failed logins. Try again in {retry_after_s} s.");
                match error_page(
                    ctx,
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many attempts",
                    &text,
                ) {
                    Page::Html(_, html) => Page::Throttled(retry_after_s, html),
                    other => other,
                }
            }
            PageError::Internal { what, detail } => {
                tracing::error!(error = %detail, "{what}");
                internal_page()
            }
            PageError::Redirect(to) => Page::Redirect(to),
        }
    }
}

/// The domain's refusals as pages: who may not (403), what is not possible (400), what does
/// not exist (404), a secondary (503); the store failing is a 500.
impl From<RunDbError> for PageError {
    fn from(e: RunDbError) -> Self {
        match e {
            RunDbError::Unauthorized(m) => {
                PageError::refused(StatusCode::FORBIDDEN, "Not allowed", m)
            }
            RunDbError::Invalid(m) => PageError::refused(StatusCode::BAD_REQUEST, "Not done", m),
            RunDbError::NotFound(_) => PageError::NotFound,
            RunDbError::NotPrimary => PageError::NotPrimary,
            e @ (RunDbError::Store(_) | RunDbError::Corrupt(..)) => {
                PageError::internal("page failed", e)
            }
        }
    }
}

/// A malformed run id names no run: the 404 page.
impl From<InvalidRunId> for PageError {
    fn from(_: InvalidRunId) -> Self {
        PageError::NotFound
    }
}

impl From<UserError> for PageError {
    fn from(e: UserError) -> Self {
        RunDbError::from(e).into()
    }
}

impl From<askama::Error> for PageError {
    fn from(e: askama::Error) -> Self {
        PageError::internal("template failed", e)
    }
}

/// A failed read as a 500 that names what failed, whatever the error says.
pub trait OrInternal<T> {
    fn or_internal(self, what: &'static str) -> Result<T, PageError>;
}

impl<T, E: Display> OrInternal<T> for Result<T, E> {
    fn or_internal(self, what: &'static str) -> Result<T, PageError> {
        self.map_err(|e| PageError::internal(what, e))
    }
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub l: Layout,
    pub heading: String,
    pub detail: String,
}

fn error_page(ctx: &Ctx, status: StatusCode, heading: &str, detail: &str) -> Page {
    let p = ErrorPage {
        l: Layout::new(ctx, heading),
        heading: heading.into(),
        detail: detail.into(),
    };
    match p.render() {
        Ok(html) => Page::Html(status, html),
        Err(e) => {
            tracing::error!(error = %e, "template failed");
            internal_page()
        }
    }
}

/// The 500 answer, without a layout (it also stands in when the session could not be read).
pub fn internal_page() -> Page {
    Page::Html(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal Server Error".into(),
    )
}

/// 404 for a browser path nothing else answers.
pub async fn not_found(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    page(&state, Input::get(&state, &headers), |_, _, _| {
        Err(PageError::NotFound)
    })
    .await
}

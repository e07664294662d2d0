//! Why a page body produced no page ([`PageError`]): the page does not exist, the request
//! is refused (with the domain's message), the form is stale, the login throttled, something
//! failed (a 500, logged, never explained to the browser), or the page is elsewhere. Each
//! reason's HTML answer is made in one place, `PageError::into_page` (`page.rs`); API paths
//! keep their JSON errors (`http::error`).
//!
//! A body returns `Result<Page, PageError>` and uses `?`: a domain error (`RunDbError`, a
//! user-store error) converts through [`From`] (both through the API edge's texts,
//! `http::error`, so a refusal reads the same on a page and in the JSON API), a bad run id is
//! the 404 page, and a failed read is a 500 through [`OrInternal::or_internal`], which names what failed in the log.

use std::fmt::Display;

use axum::http::StatusCode;

use crate::accounts::UserError;
use crate::http::error::ApiError;
use crate::http::run_id::InvalidRunId;
use crate::rundb::RunDbError;

/// Why a page body gave no page; `PageError::into_page` is the answer instead.
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
    /// 429: a rate limit reached (`text` says which, in words); try again after this many
    /// seconds (`Retry-After`).
    RateLimited {
        retry_after_s: u64,
        text: &'static str,
    },
    /// 500: `what` failed; the detail is logged, never sent.
    Internal { what: &'static str, detail: String },
    /// Not a failure: what was asked for is at another address (a page past the last one
    /// of a list is the last one), a 302 there.
    Redirect(String),
}

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
}

/// The run database's refusals as pages, in the words the API edge gives them
/// (`http::error`): who may not (403), what is not possible (400), what does not exist (404),
/// a secondary (503); the store failing is a 500.
impl From<RunDbError> for PageError {
    fn from(e: RunDbError) -> Self {
        ApiError::from(e).into()
    }
}

/// An API refusal as a page: 401 becomes 403 "Not allowed" (a page's visitor is logged in or
/// sent to log in), 400 "Not done", 404 the plain 404 page; anything else is a 500.
impl From<ApiError> for PageError {
    fn from(e: ApiError) -> Self {
        match e {
            ApiError::Unauthorized(m) | ApiError::Forbidden(m) => {
                PageError::refused(StatusCode::FORBIDDEN, "Not allowed", m)
            }
            ApiError::BadRequest(m) => PageError::refused(StatusCode::BAD_REQUEST, "Not done", m),
            ApiError::NotFound(_) => PageError::NotFound,
            ApiError::PrimaryRequired => PageError::NotPrimary,
            ApiError::Internal(detail) => PageError::Internal {
                what: "page failed",
                detail,
            },
            e => PageError::internal("page failed", e),
        }
    }
}

/// A malformed run id names no run: the 404 page.
impl From<InvalidRunId> for PageError {
    fn from(_: InvalidRunId) -> Self {
        PageError::NotFound
    }
}

/// The accounts' refusals as pages, as the run database's, in the words the API edge gives
/// them (`http::error::user_error_text`): who may not (403), what is not possible (400), what
/// does not exist (404); the store failing is a 500.
impl From<UserError> for PageError {
    fn from(e: UserError) -> Self {
        ApiError::from(e).into()
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

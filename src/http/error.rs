//! The one mapping from errors to HTTP responses: [`ApiError`], its status codes, and the
//! conversion of every domain error (run database, offload pool) into it.
//!
//! Owns: which status each failure gets (400 validation, 401 credentials, 404 look-ups, 408
//! slow bodies, 413 large bodies, 429 throttled logins with `Retry-After`, 503 busy or not
//! the primary, 500 the unexpected — logged, never sent).
//! Must not: do I/O or decide business outcomes (scheduling outcomes are 200 replies).

use axum::response::{IntoResponse, Response};

use super::envelope::ApiReply;
use crate::accounts::{AuthError, UserError};
use crate::ledger::LedgerError;
use crate::nets::NetError;
use crate::offload::OffloadError;
use crate::rundb::RunDbError;

/// Errors a handler can return. The status codes are Fishtest's where it has one
/// (docs/protocol.md#errors lists them all).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: body not JSON, schema failure, unknown ids, missing field.
    #[error("{0}")]
    BadRequest(String),
    /// 401: credentials, blocked or pending account, unauthorised action.
    #[error("{0}")]
    Unauthorized(String),
    /// 404: read-only lookups.
    #[error("{0}")]
    NotFound(String),
    /// 413: body over the route's limit.
    #[error("request body is too large (limit {limit} bytes)")]
    TooLarge { limit: usize },
    /// 408: the client did not send its body within `body_read_timeout_s`.
    #[error("request body not received within {0} s")]
    BodyTimeout(f64),
    /// 429: too many failed authentications for this user or address; retry after the
    /// given number of seconds (also sent as `Retry-After`).
    #[error("too many failed authentications; try again in {retry_after_s} s")]
    Throttled { retry_after_s: u64 },
    /// 429: a rate limit (`[[limits]]`, kind rate) is full; retry after the given seconds.
    #[error("{message}")]
    RateLimited { message: String, retry_after_s: u64 },
    /// 503: a bounded resource (PGN upload slots) stayed busy; retry later.
    #[error("{0}")]
    Busy(String),
    /// 503 on a secondary instance for the primary-only worker paths.
    #[error("primary instance required")]
    PrimaryRequired,
    /// 500: anything unexpected. The detail is logged, never sent.
    #[error("Internal Server Error")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::PrimaryRequired => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<OffloadError> for ApiError {
    fn from(e: OffloadError) -> Self {
        ApiError::Internal(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        let retry_after = match &self {
            ApiError::Throttled { retry_after_s } => Some(*retry_after_s),
            ApiError::RateLimited { retry_after_s, .. } => Some(*retry_after_s),
            ApiError::Busy(_) => Some(5),
            _ => None,
        };
        let mut response = ApiReply::error(self.status(), self.to_string()).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        if matches!(self, ApiError::BodyTimeout(_)) {
            // The rest of the body may never come: do not keep the connection.
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

pub type ApiResult<T = ApiReply> = Result<T, ApiError>;

/// A refused login: Fishtest's texts (`http::auth`), 401; a throttled one 429.
impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::WrongPassword => ApiError::Unauthorized(MSG_INVALID.into()),
            AuthError::Blocked => ApiError::Unauthorized(MSG_BLOCKED.into()),
            AuthError::Pending => ApiError::Unauthorized(MSG_PENDING.into()),
            AuthError::Throttled { retry_after } => ApiError::Throttled {
                retry_after_s: retry_after_s(retry_after),
            },
            AuthError::Account(e) => e.into(),
        }
    }
}

/// An account operation's failure.
impl From<UserError> for ApiError {
    fn from(e: UserError) -> Self {
        match e {
            UserError::Invalid(m) => ApiError::BadRequest(m),
            UserError::NotApprover => ApiError::Unauthorized(e.to_string()),
            UserError::NoSuchUser(_) => ApiError::NotFound(e.to_string()),
            UserError::NotPending(_) => ApiError::BadRequest(e.to_string()),
            UserError::Store(e) => e.into(),
        }
    }
}

/// A failure of the net store (a look-up or a download count): 500, with the store's text.
impl From<NetError> for ApiError {
    fn from(e: NetError) -> Self {
        match e {
            NetError::Store(e) => e.into(),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// A store failure (the ledger's only one): 500, as the run database's.
impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        ApiError::Internal(e.to_string())
    }
}

impl From<RunDbError> for ApiError {
    fn from(e: RunDbError) -> Self {
        match e {
            RunDbError::Invalid(m) => ApiError::BadRequest(m),
            RunDbError::Unauthorized(m) => ApiError::Unauthorized(m),
            RunDbError::NotFound(m) => ApiError::NotFound(m),
            RunDbError::NotPrimary => ApiError::PrimaryRequired,
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// Fishtest's text for a wrong password or an unknown user.
pub const MSG_INVALID: &str = "Invalid username or password.";
/// Fishtest's text for a blocked account that gave its right password.
pub const MSG_BLOCKED: &str = "Your account is blocked.";
/// Fishtest's text for an account that waits for approval.
pub const MSG_PENDING: &str = "Your account is pending approval.";

/// A throttled login's `Retry-After`: whole seconds, at least one.
pub fn retry_after_s(retry_after: std::time::Duration) -> u64 {
    retry_after.as_secs_f64().ceil().max(1.0) as u64
}

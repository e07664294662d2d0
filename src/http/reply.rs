//! API replies and the one mapping from errors to HTTP responses.
//!
//! Owns: [`ApiReply`] (a JSON object whose `duration` and error path prefix are filled in by
//! the envelope middleware, so no handler can forget them), [`ApiError`] and its status codes,
//! and the markers the envelope reads.
//! Must not: do I/O or decide business outcomes; scheduling outcomes (no task, task not alive)
//! are ordinary 200 replies built by the handlers with [`ApiReply::ok`].

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use crate::offload::OffloadError;

/// A JSON object waiting in the response extensions for the envelope middleware, which adds
/// `duration` and, when `prefix_error` is set, prefixes `error` with the request path (the
/// worker API's `"<path>: <message>"` shape).
#[derive(Debug, Clone)]
pub struct PendingJson {
    pub body: Map<String, Value>,
    pub prefix_error: bool,
}

/// Marks a response whose body must be left exactly as it is (the empty 503 of a draining
/// server, streams).
#[derive(Debug, Clone, Copy)]
pub struct RawBody;

/// A JSON API reply.
#[derive(Debug, Clone)]
pub struct ApiReply {
    pub status: StatusCode,
    pub body: Map<String, Value>,
    pub prefix_error: bool,
}

impl ApiReply {
    /// A 200 reply with these fields (business outcomes included).
    pub fn ok(body: Map<String, Value>) -> Self {
        ApiReply {
            status: StatusCode::OK,
            body,
            prefix_error: false,
        }
    }

    /// A 200 reply from a `json!({...})` object; anything else becomes an empty object.
    pub fn json(value: Value) -> Self {
        match value {
            Value::Object(body) => ApiReply::ok(body),
            _ => ApiReply::ok(Map::new()),
        }
    }

    /// `{"error": "<path>: <message>"}` with this status.
    pub fn error(status: StatusCode, message: impl Into<String>) -> Self {
        let mut body = Map::new();
        body.insert("error".into(), Value::String(message.into()));
        ApiReply {
            status,
            body,
            prefix_error: true,
        }
    }
}

impl IntoResponse for ApiReply {
    fn into_response(self) -> Response {
        let mut response = self.status.into_response();
        response.extensions_mut().insert(PendingJson {
            body: self.body,
            prefix_error: self.prefix_error,
        });
        response
    }
}

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
    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
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

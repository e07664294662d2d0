//! API replies and the one mapping from errors to HTTP responses.
//!
//! Owns: [`ApiReply`] (a JSON object whose `duration` and error path prefix are filled in by
//! the envelope middleware, so no handler can forget them), [`BareJson`] (a finished JSON body
//! the envelope leaves alone: the replies Fishtest sends without `duration`) and the markers
//! the envelope reads. Errors and their statuses are `error.rs`'s.
//! Must not: do I/O or decide business outcomes; scheduling outcomes (no task, task not alive)
//! are ordinary 200 replies built by the handlers with [`ApiReply::ok`].

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Map, Value};

/// A JSON object waiting in the response extensions for the envelope middleware, which adds
/// `duration` and, when `prefix_error` is set, prefixes `error` with the request path (the
/// worker API's `"<path>: <message>"` shape).
#[derive(Debug, Clone)]
pub struct PendingJson {
    pub body: Map<String, Value>,
    pub prefix_error: bool,
}

/// Marks a response whose body must be left exactly as it is (the empty 503 of a draining
/// server, streams, [`BareJson`]).
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

/// A successful JSON reply whose body is final: marked [`RawBody`], so the envelope adds no
/// `duration` (and no error prefix). This is how the replies Fishtest sends without
/// `duration` are built: the read API's successes (`active_runs`, `finished_runs`, `get_run`,
/// `get_task`, `get_elo`, `calc_elo`, `actions`, `rate_limit`) and the OpenAPI document. Their
/// errors are [`ApiError`]s, which carry `duration` like every other error.
#[derive(Debug, Clone)]
pub struct BareJson {
    body: Vec<u8>,
    cors: bool,
}

impl BareJson {
    /// `value` serialised (a large body: call it in the pool, where the value was built).
    pub fn of<T: Serialize + ?Sized>(value: &T) -> Result<Self, ApiError> {
        serde_json::to_vec(value)
            .map(Self::from_bytes)
            .map_err(|e| ApiError::Internal(format!("serialising a reply: {e}")))
    }

    /// A body that is JSON already.
    pub fn from_bytes(body: Vec<u8>) -> Self {
        BareJson { body, cors: false }
    }

    /// With `Access-Control-Allow-Origin: *`.
    pub fn cors(mut self) -> Self {
        self.cors = true;
        self
    }
}

impl IntoResponse for BareJson {
    fn into_response(self) -> Response {
        let mut response = (StatusCode::OK, self.body).into_response();
        let headers = response.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if self.cors {
            headers.insert(
                header::ACCESS_CONTROL_ALLOW_ORIGIN,
                HeaderValue::from_static("*"),
            );
        }
        response.extensions_mut().insert(RawBody);
        response
    }
}

pub use super::error::{ApiError, ApiResult};

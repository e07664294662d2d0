//! What the envelope middleware reads from a response: the JSON object it completes
//! ([`PendingJson`], put there by [`ApiReply`]) and the mark of a body it must leave alone
//! ([`RawBody`]). A leaf, so errors (`error.rs`) and replies (`reply.rs`) both build on it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
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
/// server, streams, `reply::BareJson`).
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

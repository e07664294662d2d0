//! API replies as handlers name them: [`ApiReply`] (a JSON object whose `duration` and error
//! path prefix are filled in by the envelope middleware, so no handler can forget them;
//! defined in `envelope.rs`), [`BareJson`] (a finished JSON body the envelope leaves alone:
//! the replies Fishtest sends without `duration`) and [`ApiError`] (`error.rs`).
//! Must not: do I/O or decide business outcomes; scheduling outcomes (no task, task not alive)
//! are ordinary 200 replies built by the handlers with [`ApiReply::ok`].

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

pub use super::envelope::{ApiReply, PendingJson, RawBody};

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

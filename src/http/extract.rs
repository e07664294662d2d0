//! Extractors for API bodies: read within the route's size limit, parse strictly.
//!
//! Owns: [`ApiJson`], which turns every malformed body into the API's JSON error shape
//! (413 over the limit, 408 past `body_read_timeout_s`, 400 for invalid JSON, a wrong type or an unknown field) before a
//! handler runs, so handlers only ever see valid input.
//! Must not: do blocking work. Parsing small JSON bodies on the event loop is allowed by the
//! execution domains (ARCHITECTURE.md); the body limit keeps them small.

use std::error::Error as _;

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use http_body_util::LengthLimitError;
use serde::de::DeserializeOwned;

use super::middleware::BodyLimit;
use super::reply::ApiError;

/// A JSON body of type `T` (use `#[serde(deny_unknown_fields)]` for strict schemas).
#[derive(Debug)]
pub struct ApiJson<T>(pub T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, Self::Rejection> {
        let limit = req.extensions().get::<BodyLimit>().copied();
        let bytes = read_body(req.into_body(), limit).await?;
        let value = serde_json::from_slice::<T>(&bytes)
            .map_err(|e| ApiError::BadRequest(format!("invalid request body: {e}")))?;
        Ok(ApiJson(value))
    }
}

/// Reads a whole body, mapping an exceeded limit to 413, a body that has not arrived by the
/// deadline to 408, and a broken stream to 400.
pub async fn read_body(
    body: Body,
    limit: Option<BodyLimit>,
) -> Result<axum::body::Bytes, ApiError> {
    let Some(l) = limit else {
        return collect(body, usize::MAX).await;
    };
    match tokio::time::timeout_at(l.deadline, collect(body, l.bytes)).await {
        Ok(read) => read,
        Err(_) => {
            metrics::counter!("shoal_body_timeouts_total").increment(1);
            Err(ApiError::BodyTimeout(l.timeout_s))
        }
    }
}

async fn collect(body: Body, limit: usize) -> Result<axum::body::Bytes, ApiError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let mut source = e.source();
        while let Some(s) = source {
            if s.is::<LengthLimitError>() {
                return ApiError::TooLarge { limit };
            }
            source = s.source();
        }
        ApiError::BadRequest(format!("cannot read request body: {e}"))
    })
}

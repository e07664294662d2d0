//! The primary-only rule, as a route layer of the worker and run routers.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::http::reply::ApiError;
use crate::http::state::AppState;

/// Routes that change runs or serve workers answer 503 `primary instance required` on a
/// secondary (runs live in the primary's cache and journal).
pub async fn primary_only(
    State(state): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
    if !state.primary {
        return ApiError::PrimaryRequired.into_response();
    }
    next.run(req).await
}

//! `GET /api/rate_limit`: the server's GitHub quota in Fishtest's shape (GitHub's `core`
//! resource: `limit`, `used`, `remaining`, `reset`, `resource`), as GitHub last stated it to
//! the `github` component, asked again (which costs no quota) when older than
//! [`QUOTA_MAX_AGE`]. The `/rate_limits` page shows the same figures.
//!
//! Owns: the shape and the route.
//! Must not: ask GitHub more than once per [`QUOTA_MAX_AGE`], however often it is called.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use crate::github::Quota;
use crate::http::reply::{ApiError, BareJson};
use crate::http::state::AppState;

/// How old a quota may be before GitHub is asked again.
pub const QUOTA_MAX_AGE: Duration = Duration::from_secs(10);

/// The GitHub quota as Fishtest's `/api/rate_limit` reports it (GitHub's `core` resource as
/// GitHub sends it: no `duration`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct GithubQuota {
    /// Calls allowed per hour.
    pub limit: u64,
    /// Calls made this hour.
    pub used: u64,
    /// Calls left this hour.
    pub remaining: u64,
    /// When the hour's window ends, in Unix seconds.
    pub reset: i64,
    /// Always `core`.
    pub resource: String,
}

impl From<Quota> for GithubQuota {
    fn from(q: Quota) -> Self {
        GithubQuota {
            limit: q.limit,
            used: q.used,
            remaining: q.remaining,
            reset: q.reset,
            resource: q.resource,
        }
    }
}

impl GithubQuota {
    /// The reset time as the `/rate_limits` page shows it: `HH:MM:SS`, UTC.
    pub fn reset_hms(&self) -> String {
        chrono::DateTime::from_timestamp(self.reset, 0)
            .map_or_else(|| "00:00:00".into(), |d| d.format("%H:%M:%S").to_string())
    }
}

/// The route (any instance; anonymous).
pub fn router() -> Router<Arc<AppState>> {
    Router::new().route("/api/rate_limit", get(rate_limit))
}

/// GET /api/rate_limit.
#[utoipa::path(
    get,
    path = "/api/rate_limit",
    tag = "read",
    responses(
        (status = 200, description = "The server's GitHub quota as GitHub last stated it \
            (no `duration`)", body = GithubQuota),
        (status = 503, description = "GitHub could not be asked and never stated it",
            body = crate::http::api::schema::ErrorReply)
    )
)]
pub async fn rate_limit(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    // Awaiting GitHub here holds no token and no lock: it is a network wait on the loop.
    match state.github.quota_within(QUOTA_MAX_AGE).await {
        Ok(q) => Ok(BareJson::of(&GithubQuota::from(q))?.into_response()),
        Err(e) => Err(ApiError::Unavailable(format!(
            "the GitHub quota is unknown: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_reset_time_reads_as_utc() {
        let q = GithubQuota {
            limit: 5000,
            used: 1,
            remaining: 4999,
            reset: 10800,
            resource: "core".into(),
        };
        assert_eq!(q.reset_hms(), "03:00:00");
    }
}

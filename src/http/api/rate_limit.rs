//! `GET /api/rate_limit`: the server's GitHub quota in Fishtest's shape (GitHub's `core`
//! resource: `limit`, `used`, `remaining`, `reset`, `resource`), with shoal's own figures.
//!
//! shoal never calls GitHub (a submitter gives the resolved commits, their subjects and the
//! nets), so its quota is never spent: `used` is 0, `remaining` equals `limit`, and `reset` is
//! the next full hour, as GitHub's hourly window would be. The `/rate_limits` page shows the
//! same figures ([`GithubQuota::now`]).
//!
//! Owns: the figures and the route.
//! Must not: call GitHub or anything else outside the process.

use std::sync::Arc;

use axum::Router;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use utoipa::ToSchema;

use crate::http::reply::{ApiError, BareJson};
use crate::http::state::AppState;

/// The hourly quota GitHub grants an authenticated caller on its `core` resource, which
/// Fishtest's server spends; shoal reports it whole.
pub const NOMINAL_LIMIT: u64 = 5000;

/// The GitHub quota as Fishtest's `/api/rate_limit` reports it (GitHub's `core` resource as
/// GitHub sends it: no `duration`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, ToSchema)]
pub struct GithubQuota {
    /// Calls allowed per hour.
    pub limit: u64,
    /// Calls made this hour (shoal makes none).
    pub used: u64,
    /// Calls left this hour.
    pub remaining: u64,
    /// When the hour's window ends, in Unix seconds.
    pub reset: i64,
    /// Always `core`.
    pub resource: &'static str,
}

impl GithubQuota {
    /// shoal's figures at Unix time `now`: nothing used, the window ending at the next hour.
    pub fn at(now: i64) -> Self {
        let reset = now
            .div_euclid(3600)
            .checked_add(1)
            .and_then(|h| h.checked_mul(3600))
            .unwrap_or(now);
        GithubQuota {
            limit: NOMINAL_LIMIT,
            used: 0,
            remaining: NOMINAL_LIMIT,
            reset,
            resource: "core",
        }
    }

    /// shoal's figures now.
    pub fn now() -> Self {
        Self::at(chrono::Utc::now().timestamp())
    }

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
    responses((status = 200, description = "The server's GitHub quota (shoal calls no GitHub: \
        nothing is ever used; no `duration`)", body = GithubQuota))
)]
pub async fn rate_limit() -> Result<Response, ApiError> {
    // A clock read and a small object: nothing here can block.
    Ok(BareJson::of(&GithubQuota::now())?.into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_window_ends_at_the_next_hour() {
        let q = GithubQuota::at(7200 + 59);
        assert_eq!(q.reset, 10800);
        assert_eq!(q.remaining, q.limit);
        assert_eq!(q.used, 0);
        assert_eq!(q.reset_hms(), "03:00:00");
        assert_eq!(GithubQuota::at(3600).reset, 7200);
    }
}

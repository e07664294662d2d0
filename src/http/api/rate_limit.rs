//! `GET /api/rate_limit`: the server's GitHub quota in Fishtest's shape (GitHub's `core`
//! resource: `limit`, `used`, `remaining`, `reset`, `resource`), as GitHub last stated it to
//! the `github` component, asked again (which costs no quota) when older than
//! [`QUOTA_MAX_AGE`]. Always 200, as Fishtest's: when GitHub cannot be asked, the figures it
//! last stated; before it ever could be, Fishtest's initial ones ([`INITIAL_LIMIT`] calls, all
//! left, none used, resetting at the server's start, and Fishtest's `"_uninitialized": true`).
//! Concurrent requests share one question to GitHub, and after a failed one GitHub is not
//! asked again for a minute ([`crate::github::QUOTA_RETRY_AFTER`]). The `/rate_limits` page shows the same
//! figures ([`known_quota`]) and says when GitHub has not been reached.
//!
//! Owns: the shape, the initial figures and the route.
//! Must not: ask GitHub more than once per [`QUOTA_MAX_AGE`] while it answers, however often
//! it is called.

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

/// Fishtest's figures before GitHub stated any (`INITIAL_RATELIMIT`): this many calls, all
/// left.
pub const INITIAL_LIMIT: u64 = 5000;

/// The quota as far as the server knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KnownQuota {
    pub quota: GithubQuota,
    /// Whether GitHub ever stated the figures (false: Fishtest's initial ones).
    pub reached: bool,
    /// Why asking GitHub just now failed, if it did (the figures are then older ones).
    pub failed: Option<String>,
}

/// The quota: GitHub's (asked again when older than [`QUOTA_MAX_AGE`]); when asking fails,
/// the figures GitHub last stated; before it ever stated any, Fishtest's initial ones,
/// resetting at the server's start.
pub async fn known_quota(state: &AppState) -> KnownQuota {
    // Awaiting GitHub here holds no token and no lock: it is a network wait on the loop.
    match state.github.quota_within(QUOTA_MAX_AGE).await {
        Ok(q) => KnownQuota {
            quota: q.into(),
            reached: true,
            failed: None,
        },
        Err(e) => match state.github.quota() {
            Some(q) => KnownQuota {
                quota: q.into(),
                reached: true,
                failed: Some(e.to_string()),
            },
            None => KnownQuota {
                quota: GithubQuota::initial(state.started.elapsed()),
                reached: false,
                failed: Some(e.to_string()),
            },
        },
    }
}

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
    /// `true` (as Fishtest's `_uninitialized`) while GitHub was never reached: the figures
    /// are the initial ones. Absent otherwise.
    #[serde(rename = "_uninitialized", skip_serializing_if = "std::ops::Not::not")]
    #[schema(rename = "_uninitialized")]
    pub uninitialized: bool,
}

impl From<Quota> for GithubQuota {
    fn from(q: Quota) -> Self {
        GithubQuota {
            limit: q.limit,
            used: q.used,
            remaining: q.remaining,
            reset: q.reset,
            resource: q.resource,
            uninitialized: false,
        }
    }
}

impl GithubQuota {
    /// Fishtest's figures before GitHub stated any: [`INITIAL_LIMIT`] calls, all left, the
    /// window resetting when the server started (`uptime` ago).
    pub fn initial(uptime: Duration) -> GithubQuota {
        let up = i64::try_from(uptime.as_secs()).unwrap_or(i64::MAX);
        GithubQuota {
            limit: INITIAL_LIMIT,
            used: 0,
            remaining: INITIAL_LIMIT,
            reset: chrono::Utc::now().timestamp().saturating_sub(up),
            resource: "core".into(),
            uninitialized: true,
        }
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
    responses(
        (status = 200, description = "The server's GitHub quota as GitHub last stated it, or \
            Fishtest's initial figures (5000 of 5000, with `_uninitialized: true`) before \
            GitHub was ever reached (no `duration`)", body = GithubQuota),
    )
)]
pub async fn rate_limit(State(state): State<Arc<AppState>>) -> Result<Response, ApiError> {
    let known = known_quota(&state).await;
    Ok(BareJson::of(&known.quota)?.into_response())
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
            uninitialized: false,
        };
        assert_eq!(q.reset_hms(), "03:00:00");
    }

    #[test]
    fn the_initial_figures_are_fishtests() {
        let q = GithubQuota::initial(Duration::from_secs(60));
        assert_eq!((q.limit, q.used, q.remaining), (5000, 0, 5000));
        assert_eq!(q.resource, "core");
        let started = chrono::Utc::now().timestamp() - 60;
        assert!((q.reset - started).abs() <= 1, "{} vs {started}", q.reset);
    }
}

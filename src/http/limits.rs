//! Limits over HTTP: rate limits counted on the event loop before any login, pool token or
//! argon2 work; request_task's bounded wait in a full key's queue; `GET /api/limits`.
//!
//! Owns: `rate_layer` (scopes `api` and `ui`, keyed by the client's address), the checks of
//! the named scopes (`request_task`, `create_run`, `login`) that handlers call once they know
//! the user's name, the 429 answers (JSON with `Retry-After` under `/api`, a small page
//! elsewhere) and the JSON view of every limit. (request_task's wait in a full key's queue is
//! the scheduler's: `crate::scheduler::batches`.)
//! Must not: decide who holds what (that is `crate::limits` and `crate::scheduler`), block the
//! loop (the engine's lock is held for a few map operations), or read the store.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use crate::http::api::call::client_addr;
use crate::http::reply::{ApiError, ApiReply, ApiResult};
use crate::http::state::AppState;
use crate::limits::{KeyCtx, RateLimited, Scope};

fn retry_s(r: &RateLimited) -> u64 {
    r.retry_after.as_secs_f64().ceil().max(1.0) as u64
}

impl From<RateLimited> for ApiError {
    fn from(r: RateLimited) -> Self {
        ApiError::RateLimited {
            retry_after_s: retry_s(&r),
            message: format!(
                "rate limit {} reached for {}; try again in {} s",
                r.name,
                r.key,
                retry_s(&r)
            ),
        }
    }
}

/// A page's 429: a fixed page (no template, no session: it costs nothing) with `Retry-After`.
pub fn page_429(r: &RateLimited) -> Response {
    page_429_saying(r, "")
}

/// [`page_429`] with a sentence saying which limit (fixed text of ours, not escaped).
pub fn page_429_saying(r: &RateLimited, why: &'static str) -> Response {
    let secs = retry_s(r);
    let wait = if secs >= 120 {
        format!("{} minutes", secs.div_ceil(60))
    } else {
        format!("{secs} seconds")
    };
    let why = if why.is_empty() {
        String::new()
    } else {
        format!("<p>{why}</p>")
    };
    let body = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>Too many requests</title></head><body><h1>Too many requests</h1>{why}\
         <p>Please wait {wait} and try again.</p></body></html>"
    );
    (
        StatusCode::TOO_MANY_REQUESTS,
        [
            (header::RETRY_AFTER, secs.to_string()),
            (header::CONTENT_TYPE, "text/html; charset=utf-8".to_string()),
            (header::CACHE_CONTROL, "no-store".to_string()),
        ],
        body,
    )
        .into_response()
}

/// Counts a call of `scope` against its rate limits.
pub fn check(state: &AppState, scope: &Scope, ctx: &KeyCtx<'_>) -> Result<(), RateLimited> {
    state
        .scheduler
        .limits()
        .rate_check(scope, ctx, Instant::now())
}

/// Takes back a call [`check`] counted, in the limits whose key `ctx` gives (see
/// `Engine::rate_refund`).
pub fn refund(state: &AppState, scope: &Scope, ctx: &KeyCtx<'_>) {
    state
        .scheduler
        .limits()
        .rate_refund(scope, ctx, Instant::now());
}

/// Scopes `api` (every `/api` path) and `ui` (every page; not `/healthz`, `/metrics`, static
/// files or the net files under `/nn/`, which nginx would serve), keyed by the client's
/// address; checked before the handler.
pub async fn rate_layer(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let path = req.uri().path();
    let scope = if path.starts_with("/api/") {
        Scope::Api
    } else if path == "/healthz"
        || path == "/metrics"
        || path.starts_with("/static/")
        || path.starts_with("/nn/")
    {
        return next.run(req).await;
    } else {
        Scope::Ui
    };
    let engine = state.scheduler.limits();
    if !engine.has_rate(&scope) {
        return next.run(req).await;
    }
    let Some(peer) = req
        .extensions()
        .get::<ConnectInfo<std::net::SocketAddr>>()
        .map(|c| c.0)
    else {
        return next.run(req).await;
    };
    let ip = client_addr(&state, peer, req.headers());
    let ctx = KeyCtx {
        ip: Some(&ip),
        ..Default::default()
    };
    match engine.rate_check(&scope, &ctx, Instant::now()) {
        Ok(()) => next.run(req).await,
        Err(r) if scope == Scope::Api => ApiError::from(r).into_response(),
        Err(r) => page_429(&r),
    }
}

/// `GET /api/limits`: every limit with its keys (max, holders, waiters, rejected) and, for
/// floating limits, the refresh state. Keys counted per client address show it as `?.?.?.?`.
#[utoipa::path(
    get,
    path = "/api/limits",
    tag = "read",
    responses((status = 200, description = "`{\"limits\": [...]}`: each configured or built-in \
        limit (name, kind, key, max) with its keys' holders, waiters and rejected counts, and \
        for floating limits the refresh state (current max, retries, next refresh); the \
        envelope adds `duration`", body = Object))
)]
pub async fn api_limits(State(state): State<Arc<AppState>>) -> ApiResult {
    let scheduler = state.scheduler.clone();
    let view = state
        .offload
        .run(move || scheduler.limits().view(Instant::now()))
        .await?;
    let view: Vec<_> = view.into_iter().map(mask_addresses).collect();
    let limits = serde_json::to_value(view).map_err(|e| ApiError::Internal(e.to_string()))?;
    Ok(ApiReply::json(json!({ "limits": limits })))
}

/// The address a public reply shows in place of a client's (as the read API shows a worker's
/// `remote_addr`).
const HIDDEN_ADDR: &str = "?.?.?.?";

/// A limit as anonymous callers may see it: the keys of limits counted per client address
/// (`ip`: the address; `user_ip`: `<user>@<address>`) have the address hidden. Approvers see
/// them on the `/limits` page.
fn mask_addresses(mut limit: crate::limits::LimitView) -> crate::limits::LimitView {
    match limit.key.as_str() {
        "ip" => {
            for k in &mut limit.keys {
                k.key = HIDDEN_ADDR.to_string();
            }
        }
        "user_ip" => {
            for k in &mut limit.keys {
                let user = k.key.rsplit_once('@').map_or("", |(u, _)| u);
                k.key = format!("{user}@{HIDDEN_ADDR}");
            }
        }
        _ => {}
    }
    limit
}

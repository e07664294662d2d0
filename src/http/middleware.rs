//! The middleware stack, built in one place ([`apply`]), outermost first:
//!
//! 0. **request id** (`tower-http`): an `x-request-id` on every request (a client's own is
//!    kept) and its response, and a debug-level tracing span per request carrying it and
//!    the matched route (never the raw path, which may hold a secret).
//! 1. **envelope**: stamps the start time; on the way out serialises [`PendingJson`] with
//!    `duration` (and the `"<path>: "` error prefix), turns any bare error status under `/api`
//!    into the JSON shape, strips bodies of HEAD replies, and records per-route metrics. A
//!    response marked `RawBody` (a `BareJson` read reply, a stream) keeps its body as it is.
//! 2. **shutdown guard**: an empty 503 while draining (an empty body makes the official worker
//!    retry later; a JSON `error` would make it fail its task or exit).
//! 3. **HEAD as GET**.
//! 4. **concurrency cap** (only if `max_concurrent_requests` is set): excess requests *wait*;
//!    nothing is refused at the front door.
//! 5. **body limit**: 413 JSON before reading when Content-Length is over the route's limit,
//!    and a hard cap on the stream otherwise.
//! 6. **security headers** ([`security_headers`]): CSP, nosniff, `X-Frame-Options`,
//!    Referrer-Policy on every response outside `/api` (`no-referrer` on `/reset/{secret}`,
//!    `same-origin` elsewhere).
//! 7. **panic catcher**: a panicking handler becomes a 500 in the API's JSON shape instead of
//!    a dropped connection.
//!
//!
//! The primary-only rule is not here: it is a route layer of the worker and run routers
//! (`api::primary::primary_only`).
//! Must not: block, touch the store, or take pool tokens (everything here runs on the event
//! loop and costs microseconds).

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use axum::Router;
use axum::body::Body;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::{Next, from_fn, from_fn_with_state};
use axum::response::{IntoResponse, Response};
use futures::FutureExt as _;
use serde_json::Value;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::trace::TraceLayer;

use super::reply::{ApiError, ApiReply, PendingJson, RawBody};
use super::state::AppState;

/// The body limit that applies to this request, and the moment by which its body must have
/// arrived (`body_read_timeout_s` after the request reached the stack), for extractors.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit {
    pub bytes: usize,
    pub deadline: tokio::time::Instant,
    pub timeout_s: f64,
}

/// The matched route template, carried from the router to the envelope for metrics labels.
#[derive(Debug, Clone)]
struct RouteLabel(String);

/// Set on requests that arrived as HEAD.
#[derive(Debug, Clone, Copy)]
struct WasHead;

/// Wraps the router in the stack described in the module docs.
pub fn apply(router: Router, state: Arc<AppState>) -> Router {
    // `layer` wraps from the inside out: the last one added is the outermost.
    router
        .route_layer(from_fn(route_label))
        .layer(from_fn(catch_panic))
        .layer(from_fn(security_headers))
        .layer(from_fn_with_state(state.clone(), body_limit))
        .layer(from_fn_with_state(state.clone(), concurrency_cap))
        .layer(from_fn(head_as_get))
        .layer(from_fn_with_state(state.clone(), shutdown_guard))
        .layer(from_fn(envelope))
        // Request ids (outermost): every request gets an `x-request-id` (a client's own is
        // kept), every request's tracing span carries it, and every response echoes it.
        .layer(PropagateRequestIdLayer::x_request_id())
        .layer(TraceLayer::new_for_http().make_span_with(request_span))
        .layer(SetRequestIdLayer::x_request_id(MakeRequestUuid))
}

/// The tracing span of one request (at debug: one line per request when enabled). It names
/// the matched route (`/feeds/{file}`), filled in once the router matched it, never the raw
/// path: paths carry secrets (a feed token, a reset link).
fn request_span(req: &Request) -> tracing::Span {
    let id = req
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    tracing::debug_span!(
        "request",
        method = %req.method(),
        route = tracing::field::Empty,
        id
    )
}

async fn route_label(req: Request, next: Next) -> Response {
    let label = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    if let Some(label) = &label {
        tracing::Span::current().record("route", label.as_str());
    }
    let caller: std::sync::Arc<str> = label.as_deref().unwrap_or("unmatched").into();
    let mut response = crate::offload::POOL_CALLER
        .scope(caller, next.run(req))
        .await;
    if let Some(label) = label {
        response.extensions_mut().insert(RouteLabel(label));
    }
    response
}

async fn envelope(req: Request, next: Next) -> Response {
    let started = Instant::now();
    let path = req.uri().path().to_string();
    let method = req.method().clone();
    let mut response = next.run(req).await;
    let is_api = path.starts_with("/api/") || path == "/api";

    if let Some(pending) = response.extensions_mut().remove::<PendingJson>() {
        set_json(&mut response, pending, &path, started);
    } else if is_api
        && (response.status().is_client_error() || response.status().is_server_error())
        && response.extensions().get::<RawBody>().is_none()
        && !is_json(&response)
    {
        // A status produced below us without our shape (e.g. 405 from the router).
        let status = response.status();
        let reason = status.canonical_reason().unwrap_or("Error");
        let pending = PendingJson {
            body: ApiReply::error(status, reason).body,
            prefix_error: true,
        };
        set_json(&mut response, pending, &path, started);
    }
    if response.extensions().get::<WasHead>().is_some() || method == Method::HEAD {
        *response.body_mut() = Body::empty();
    }

    let route = response
        .extensions()
        .get::<RouteLabel>()
        .map_or("unmatched", |r| r.0.as_str())
        .to_string();
    let status = response.status().as_u16().to_string();
    let elapsed = started.elapsed().as_secs_f64();
    let method = method.as_str().to_string();
    metrics::counter!("shoal_http_requests_total", "route" => route.clone(),
        "method" => method.clone(), "status" => status)
    .increment(1);
    metrics::histogram!("shoal_http_request_duration_seconds", "route" => route.clone(),
        "method" => method)
    .record(elapsed);
    // The route, not the path (a path may carry a secret).
    tracing::debug!(%route, status = response.status().as_u16(), elapsed, "request");
    response
}

fn is_json(response: &Response) -> bool {
    response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"))
}

fn set_json(response: &mut Response, pending: PendingJson, path: &str, started: Instant) {
    let mut body = pending.body;
    if pending.prefix_error
        && let Some(Value::String(message)) = body.get_mut("error")
    {
        *message = format!("{path}: {message}");
    }
    let duration = serde_json::Number::from_f64(started.elapsed().as_secs_f64())
        .unwrap_or_else(|| serde_json::Number::from(0));
    body.insert("duration".into(), Value::Number(duration));
    let bytes = serde_json::to_vec(&body).unwrap_or_else(|_| b"{\"duration\": 0}".to_vec());
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    headers.remove(header::CONTENT_LENGTH);
    *response.body_mut() = Body::from(bytes);
}

async fn shutdown_guard(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    if state.draining.load(Ordering::Acquire) {
        let mut response = StatusCode::SERVICE_UNAVAILABLE.into_response();
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        response.extensions_mut().insert(RawBody);
        return response;
    }
    next.run(req).await
}

async fn head_as_get(mut req: Request, next: Next) -> Response {
    let was_head = req.method() == Method::HEAD;
    if was_head {
        *req.method_mut() = Method::GET;
    }
    let mut response = next.run(req).await;
    if was_head {
        response.extensions_mut().insert(WasHead);
    }
    response
}

async fn concurrency_cap(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    match &state.request_cap {
        // Waits (FIFO) for a place; the permit is held until the handler's response is built.
        Some(cap) => match cap.clone().acquire_owned().await {
            Ok(_permit) => next.run(req).await,
            Err(_) => ApiError::Internal("request cap closed".into()).into_response(),
        },
        None => next.run(req).await,
    }
}

/// Room for the multipart framing and the small fields around the net in `/upload`'s body
/// limit.
pub const UPLOAD_SLACK: u64 = 64 * 1024;

/// The body limit of `POST /upload`: the net's limit plus [`UPLOAD_SLACK`].
pub fn upload_body_limit(nn_upload_limit_bytes: u64) -> usize {
    usize::try_from(nn_upload_limit_bytes.saturating_add(UPLOAD_SLACK)).unwrap_or(usize::MAX)
}

/// The Content-Security-Policy of every page: nothing inline, nothing from elsewhere.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

/// Adds the security headers to every response outside `/api` (pages, errors, static files).
pub async fn security_headers(req: Request, next: Next) -> Response {
    let api = req.uri().path().starts_with("/api");
    // A reset link's secret is in its path: same-origin requests must not carry it either.
    let secret_path = req.uri().path().starts_with("/reset/");
    let mut response = next.run(req).await;
    if !api {
        let h = response.headers_mut();
        h.insert(
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CSP),
        );
        h.insert(
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        );
        h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
        h.insert(
            header::REFERRER_POLICY,
            HeaderValue::from_static(if secret_path {
                "no-referrer"
            } else {
                "same-origin"
            }),
        );
    }
    response
}

async fn body_limit(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    // A net upload's page answers an oversized declared body itself (an HTML form with the
    // message, not the API's JSON); its stream is still capped here.
    let net_upload = req.uri().path() == "/upload";
    let limit = if req.uri().path() == "/api/upload_pgn" {
        state.config.pgn_body_limit_bytes
    } else if net_upload {
        upload_body_limit(state.config.nn_upload_limit_bytes)
    } else {
        state.config.api_body_limit_bytes
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if !net_upload && declared.is_some_and(|n| n > limit as u64) {
        let mut response = ApiError::TooLarge { limit }.into_response();
        // The client may still be sending; do not keep reading a body we refused.
        response
            .headers_mut()
            .insert(header::CONNECTION, HeaderValue::from_static("close"));
        return response;
    }
    let (mut parts, body) = req.into_parts();
    parts.extensions.insert(BodyLimit {
        bytes: limit,
        deadline: tokio::time::Instant::now() + state.config.body_read_timeout(),
        timeout_s: state.config.body_read_timeout().as_secs_f64(),
    });
    let body = Body::new(http_body_util::Limited::new(body, limit));
    next.run(Request::from_parts(parts, body)).await
}

async fn catch_panic(req: Request, next: Next) -> Response {
    let is_api = req.uri().path().starts_with("/api");
    match AssertUnwindSafe(next.run(req)).catch_unwind().await {
        Ok(response) => response,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(%message, "handler panicked");
            metrics::counter!("shoal_http_panics_total").increment(1);
            if is_api {
                ApiError::Internal(message).into_response()
            } else {
                (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
            }
        }
    }
}

//! The web UI: HTML pages rendered from `askama` templates (`templates/`), one file per page
//! group with its handlers and template structs side by side.
//!
//! Owns: the UI routes ([`router`]), the page machinery ([`page`]: the session resolved, the
//! CSRF token checked and the handler body run and rendered in **one pool job**), the HTML
//! error pages, static files (`/static/…?v=<content hash>`, cached for a year), and the
//! security headers every non-API response carries ([`security_headers`]).
//! Must not: call the store, render a template or resolve a session outside `Offload::run`
//! (the event loop only parses forms and verifies the cookie's signature).

pub mod accounts;
pub mod charts;
pub mod controls;
pub mod dashboard;
pub mod errors;
pub mod limits;
pub mod lists;
pub mod nets;
pub mod people;
pub mod rate_limits;
pub mod record;
pub mod results;
pub mod run;
pub mod run_tasks;
pub mod session;
pub mod stats;
pub mod submit;
pub mod workers;

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use askama::Template;
use axum::Router;
use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use sha2::{Digest, Sha256};
use tower_http::compression::CompressionLayer;
use tower_http::services::ServeDir;
use tower_http::set_header::SetResponseHeaderLayer;

use super::AppState;
use crate::accounts::Accounts;
use crate::rundb::RunDb;
use session::{CookieKeys, Ctx};

/// The Content-Security-Policy of every page: nothing inline, nothing from elsewhere.
pub const CSP: &str = "default-src 'self'; script-src 'self'; style-src 'self'; \
    img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; \
    frame-ancestors 'none'";

/// The UI's routes (merged into `http::router` beside `api::router`).
pub fn router() -> Router<Arc<AppState>> {
    let statics = Router::new()
        .nest_service("/static", ServeDir::new(static_dir()))
        .layer(SetResponseHeaderLayer::overriding(
            header::CACHE_CONTROL,
            HeaderValue::from_static("public, max-age=31536000, immutable"),
        ));
    Router::new()
        .route("/", get(dashboard::root))
        .route("/tests", get(dashboard::tests))
        .route("/tests/finished", get(lists::finished))
        .route("/tests/user/{name}", get(lists::user))
        .route("/tests/view/{id}", get(run::view))
        .route("/tests/view/{id}/detail", get(run::detail_fragment))
        .route("/tests/view/{id}/charts", get(run::charts_fragment))
        .route("/tests/tasks/{id}", get(run::tasks_fragment))
        .route("/login", get(accounts::login_form).post(accounts::login))
        .route("/logout", axum::routing::post(accounts::logout))
        .route("/signup", get(accounts::signup_form).post(accounts::signup))
        .route("/tests/approve", axum::routing::post(controls::approve))
        .route("/tests/stop", axum::routing::post(controls::stop))
        .route("/tests/purge", axum::routing::post(controls::purge))
        .route("/tests/delete", axum::routing::post(controls::delete))
        .route("/tests/modify", axum::routing::post(controls::modify))
        .route("/tests/run", get(submit::form).post(submit::submit))
        .route("/tests/stats/{id}", get(stats::stats_page))
        .route("/tests/live_elo/{id}", get(stats::live_elo_page))
        .route("/tests/live_elo_update/{id}", get(stats::live_elo_update))
        .route("/tests/chart/{id}/{name}", get(stats::chart))
        .route("/sprt_calc", get(stats::sprt_calc))
        .route(
            "/user",
            get(people::own_profile).post(people::change_profile),
        )
        .route(
            "/user/{name}",
            get(people::user_page).post(people::user_action),
        )
        .route("/user_management", get(people::user_management))
        .route("/user_management/pending_count", get(people::pending_count))
        .route("/actions", get(record::actions))
        .route("/contributors", get(record::contributors))
        .route("/contributors/monthly", get(record::contributors_monthly))
        .route("/tests/machines", get(workers::machines))
        .route(
            "/workers/{name}",
            get(workers::worker_page).post(workers::worker_post),
        )
        .route("/nns", get(nets::nns))
        .route(
            "/upload",
            get(nets::upload_form)
                .post(nets::upload)
                .layer(axum::extract::DefaultBodyLimit::disable()),
        )
        .route("/rate_limits", get(rate_limits::rate_limits))
        .route("/rate_limits/server", get(rate_limits::server))
        .route("/limits", get(limits::view).post(limits::set_max))
        .merge(statics)
        .layer(CompressionLayer::new())
}

/// Adds the security headers to every response outside `/api` (pages, errors, static files).
pub async fn security_headers(req: Request, next: Next) -> Response {
    let api = req.uri().path().starts_with("/api");
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
            HeaderValue::from_static("same-origin"),
        );
    }
    response
}

/// Where the static files are: `./static` when the server runs from a checkout or an
/// installation that has one, else the source tree's `static/` (tests, `cargo run`).
fn static_dir() -> PathBuf {
    let local = PathBuf::from("static");
    if local.join("style.css").is_file() {
        local
    } else {
        PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/static"))
    }
}

/// The URL of a static file with its content hash (`?v=`), computed once (in the pool: pages
/// call it while rendering).
pub fn asset(name: &'static str) -> String {
    static HASHES: OnceLock<parking_lot::Mutex<std::collections::HashMap<&'static str, String>>> =
        OnceLock::new();
    let map = HASHES.get_or_init(Default::default);
    let mut map = map.lock();
    let v = map.entry(name).or_insert_with(|| {
        let bytes = std::fs::read(static_dir().join(name)).unwrap_or_default();
        hex::encode(&Sha256::digest(&bytes)[..6])
    });
    format!("/static/{name}?v={v}")
}

/// One flash message on a page.
pub struct Flash {
    /// `error`, `warning` or `info`.
    pub kind: &'static str,
    pub text: String,
}

impl Flash {
    pub fn error(text: impl Into<String>) -> Self {
        Flash {
            kind: "error",
            text: text.into(),
        }
    }
    pub fn info(text: impl Into<String>) -> Self {
        Flash {
            kind: "info",
            text: text.into(),
        }
    }
}

/// What the base layout needs from every page.
pub struct Layout {
    pub title: String,
    pub user: Option<String>,
    pub csrf: String,
    pub css: String,
    pub flashes: Vec<Flash>,
    /// For an approver: accounts waiting for approval (shown in the navigation).
    pub pending_users: Option<u64>,
}

impl Layout {
    pub fn new(ctx: &Ctx, title: &str) -> Self {
        Layout {
            title: if title.is_empty() {
                "shoal testing framework".into()
            } else {
                format!("{title} | shoal testing")
            },
            user: ctx.username(),
            csrf: ctx.csrf.clone(),
            css: asset("style.css"),
            flashes: Vec::new(),
            pending_users: ctx.pending_users,
        }
    }

    pub fn flash(mut self, flash: Flash) -> Self {
        self.flashes.push(flash);
        self
    }
}

/// What a page handler produces (in the pool).
pub enum Out {
    Html(StatusCode, String),
    Redirect(String),
    /// 429 with `Retry-After` (seconds) and a page.
    Throttled(u64, String),
}

impl Out {
    /// Renders a template with a status.
    pub fn render(status: StatusCode, t: &impl Template) -> Out {
        match t.render() {
            Ok(html) => Out::Html(status, html),
            Err(e) => {
                tracing::error!(error = %e, "template failed");
                Out::Html(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "Internal Server Error".into(),
                )
            }
        }
    }
}

/// What the event loop passes to [`page`]: the verified cookie id and, for a POST, the
/// submitted CSRF token (the `X-CSRF-Token` header, else the form's `csrf_token`).
pub struct Input {
    pub keys: CookieKeys,
    pub id: Option<String>,
    pub csrf: Option<Option<String>>,
}

impl Input {
    /// A GET: no token to check.
    pub fn get(state: &AppState, headers: &HeaderMap) -> Self {
        let keys = keys(state);
        Input {
            id: keys.read_id(headers),
            keys,
            csrf: None,
        }
    }

    /// A state-changing POST: its token must match the session's.
    pub fn post(state: &AppState, headers: &HeaderMap, form_token: Option<String>) -> Self {
        let header_token = headers
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        Input {
            csrf: Some(header_token.or(form_token)),
            ..Input::get(state, headers)
        }
    }
}

fn keys(state: &AppState) -> CookieKeys {
    let secure = state
        .config
        .public_url
        .as_deref()
        .is_some_and(|u| u.starts_with("https://"));
    CookieKeys::new(&state.secret, secure)
}

/// The session and, for a POST, the token (blocking: in the pool). `Err` is the answer
/// instead of the page: a session ended on this request → `/tests`; a POST whose CSRF token
/// does not match → the 403 page (the handler never runs).
fn open(
    accounts: &Accounts,
    keys: &CookieKeys,
    input: Input,
) -> Result<Ctx, (Option<(String, bool)>, Out)> {
    let ctx = match session::resolve(accounts, keys, input.id) {
        Ok(ctx) => ctx,
        Err(e) => {
            tracing::error!(error = %e, "session lookup failed");
            return Err((None, errors::internal()));
        }
    };
    if ctx.ended {
        return Err((ctx.set_cookie, Out::Redirect("/tests".into())));
    }
    if let Some(token) = &input.csrf
        && !ctx.csrf_ok(token.as_deref())
    {
        metrics::counter!("shoal_ui_csrf_refused_total").increment(1);
        let out = errors::forbidden(&ctx);
        return Err((ctx.set_cookie, out));
    }
    Ok(ctx)
}

/// Runs a page in the pool: [`open`], then `body`, which renders. Returns the response with
/// the session cookie if it changed.
pub async fn page<F>(state: &AppState, input: Input, body: F) -> Response
where
    F: FnOnce(&RunDb, &mut Ctx, &CookieKeys) -> Out + Send + 'static,
{
    let db = state.rundb.clone();
    let accounts = state.accounts.clone();
    let keys = input.keys.clone();
    let k = keys.clone();
    let job = move || match open(&accounts, &k, input) {
        Ok(mut ctx) => {
            let out = body(&db, &mut ctx, &k);
            (ctx.set_cookie, out)
        }
        Err(answer) => answer,
    };
    finish(state, &keys, job).await
}

/// The first half of a page whose body must await something else first (the login's
/// credential check): [`open`] in the pool. `Ok` to go on with [`continue_page`].
pub async fn open_page(state: &AppState, input: Input) -> Result<Ctx, Response> {
    let accounts = state.accounts.clone();
    let keys = input.keys.clone();
    let k = keys.clone();
    match state.offload.run(move || open(&accounts, &k, input)).await {
        Ok(Ok(ctx)) => Ok(ctx),
        Ok(Err((cookie, out))) => Err(respond(&keys, cookie, out)),
        Err(e) => Err(unavailable(e)),
    }
}

/// The second half: `body` in the pool with the session [`open_page`] resolved.
pub async fn continue_page<F>(state: &AppState, keys: CookieKeys, mut ctx: Ctx, body: F) -> Response
where
    F: FnOnce(&RunDb, &mut Ctx, &CookieKeys) -> Out + Send + 'static,
{
    let db = state.rundb.clone();
    let k = keys.clone();
    let job = move || {
        let out = body(&db, &mut ctx, &k);
        (ctx.set_cookie, out)
    };
    finish(state, &keys, job).await
}

async fn finish<J>(state: &AppState, keys: &CookieKeys, job: J) -> Response
where
    J: FnOnce() -> (Option<(String, bool)>, Out) + Send + 'static,
{
    // The render lane: a turn first (waiting costs no thread), then one of its low-priority
    // threads, so pages never take CPU or pool tokens from the worker API.
    match state.page_renders.run(job).await {
        Ok((cookie, out)) => respond(keys, cookie, out),
        Err(e) => unavailable(e),
    }
}

fn unavailable(e: crate::offload::OffloadError) -> Response {
    tracing::warn!(error = %e, "page not rendered");
    (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable").into_response()
}

/// Builds the response on the event loop: status, body, cookie, `no-store`.
pub fn respond(keys: &CookieKeys, cookie: Option<(String, bool)>, out: Out) -> Response {
    let mut response = match out {
        Out::Html(status, html) => (status, axum::response::Html(html)).into_response(),
        Out::Redirect(to) => {
            let mut r = StatusCode::FOUND.into_response();
            if let Ok(v) = HeaderValue::from_str(&to) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
        Out::Throttled(retry_after, html) => {
            let mut r = (StatusCode::TOO_MANY_REQUESTS, axum::response::Html(html)).into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
            r
        }
    };
    let h = response.headers_mut();
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    if let Some((id, remember)) = cookie
        && let Some(v) = keys.set_cookie(&id, remember)
    {
        h.append(header::SET_COOKIE, v);
    }
    response
}

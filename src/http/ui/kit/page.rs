//! The page machinery: every page is one job on the render lane — the session resolved, the
//! CSRF token checked (a POST with a bad one never reaches its body), the body run and its
//! template rendered — and the response built back on the event loop (status, body,
//! `Cache-Control: no-store`, the session cookie when its id changed).
//!
//! A body is `FnOnce(&RunDb, &mut Ctx, &CookieKeys) -> Result<Page, PageError>`; a
//! `PageError` becomes its page here ([`PageError::into_page`]), for the session at hand.
//! [`Layout`] is what the base template needs from every page. An error page links each run
//! id its message names (a 404 names without linking: the link would lead nowhere).

use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::assets::asset;
use super::error::PageError;
use super::session::{self, CookieKeys, Ctx};
use crate::accounts::Accounts;
use crate::http::state::AppState;
use crate::ledger::Ledger;
use crate::rundb::RunDb;

/// Whether the request is the live refresh's (`HX-Request: true`, not a navigation).
pub fn is_fragment(headers: &HeaderMap) -> bool {
    let hx = headers
        .get("hx-request")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("true"));
    let navigate = headers
        .get("sec-fetch-mode")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == "navigate");
    hx && !navigate
}

/// Marks an answer that differs with `HX-Request` (a page or its live fragment).
pub fn vary(mut r: Response) -> Response {
    r.headers_mut()
        .append(header::VARY, HeaderValue::from_static("HX-Request"));
    r
}

/// The status of a live fragment that will not change any more: "here is the last update,
/// stop polling" (Fishtest's 286, which htmx understands and `static/refresh.js` too).
pub const STOP_POLLING: StatusCode = match StatusCode::from_u16(286) {
    Ok(s) => s,
    Err(_) => StatusCode::OK,
};

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
    pub fn warning(text: impl Into<String>) -> Self {
        Flash {
            kind: "warning",
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
    /// What a link preview shows under the title (`og:description`), when the page says.
    pub description: Option<String>,
    /// For a logged-in user: unread notices about followed runs (the header's link).
    pub unread: Option<u64>,
    /// The notices' script (the header's count kept fresh, browser notifications).
    pub notify_js: String,
    /// The theme picked by hand (`dark`, `light`), or `None` for the system's.
    pub theme: Option<&'static str>,
    /// The theme shown (`dark`, `light` or `auto`) and the one the header's button picks.
    pub theme_label: &'static str,
    pub theme_next: &'static str,
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
            description: None,
            unread: ctx.unread,
            notify_js: asset("notify.js"),
            theme: ctx.theme,
            theme_label: ctx.theme.unwrap_or("auto"),
            theme_next: super::theme::next(ctx.theme),
        }
    }

    /// The page's one-line summary for link previews (`og:description`).
    pub fn describe(mut self, text: impl Into<String>) -> Self {
        self.description = Some(text.into());
        self
    }

    pub fn flash(mut self, flash: Flash) -> Self {
        self.flashes.push(flash);
        self
    }
}

/// What a page body returns.
pub type PageResult = Result<Page, PageError>;

/// What a page body produces (in the pool).
pub enum Page {
    Html(StatusCode, String),
    Redirect(String),
    /// 429 with `Retry-After` (seconds) and a page.
    Throttled(u64, String),
    /// A live fragment with its version (`ETag`): 200 with the HTML, or 304 with none when
    /// the client already has that version.
    Versioned(StatusCode, String, String),
}

impl Page {
    /// A template rendered, with a status (a template that fails is a logged 500).
    pub fn render(status: StatusCode, t: &impl Template) -> PageResult {
        Ok(Page::Html(status, t.render()?))
    }

    /// A template rendered, 200.
    pub fn ok(t: &impl Template) -> PageResult {
        Page::render(StatusCode::OK, t)
    }

    /// A 302 to `to`.
    pub fn redirect(to: impl Into<String>) -> PageResult {
        Ok(Page::Redirect(to.into()))
    }
}

/// The one mapping of each [`PageError`] to its answer.
impl PageError {
    /// The answer for the session `ctx`.
    pub fn into_page(self, ctx: &Ctx) -> Page {
        match self {
            PageError::NotFound => error_page(
                ctx,
                StatusCode::NOT_FOUND,
                "Page not found",
                "Oops! There is nothing at this address.",
            ),
            PageError::Refused {
                status,
                heading,
                detail,
            } => error_page(ctx, status, heading, &detail),
            PageError::NotPrimary => error_page(
                ctx,
                StatusCode::SERVICE_UNAVAILABLE,
                "Service unavailable",
                "Primary instance required.",
            ),
            PageError::Forbidden => error_page(
                ctx,
                StatusCode::FORBIDDEN,
                "Forbidden",
                "The form was refused: its security token is missing or out of date. Reload the page and try again.",
            ),
            PageError::Throttled { retry_after_s } => {
                let text = format!("Too many failed logins. Try again in {retry_after_s} s.");
                match error_page(
                    ctx,
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many attempts",
                    &text,
                ) {
                    Page::Html(_, html) => Page::Throttled(retry_after_s, html),
                    other => other,
                }
            }
            PageError::RateLimited {
                retry_after_s,
                text,
            } => {
                let text = format!("{text} Please wait {retry_after_s} s and try again.");
                match error_page(
                    ctx,
                    StatusCode::TOO_MANY_REQUESTS,
                    "Too many requests",
                    &text,
                ) {
                    Page::Html(_, html) => Page::Throttled(retry_after_s, html),
                    other => other,
                }
            }
            PageError::Internal { what, detail } => {
                tracing::error!(error = %detail, "{what}");
                internal_page()
            }
            PageError::Redirect(to) => Page::Redirect(to),
        }
    }
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub l: Layout,
    pub heading: String,
    /// The message, its run ids apart so that each links to its run.
    pub detail: Vec<TextPart>,
}

/// A piece of a message: plain text, or a run id (`run`) shown as a link to the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TextPart {
    pub text: String,
    pub run: bool,
}

/// `text` cut around the run ids it names (24 hex digits standing alone).
pub fn link_runs(text: &str) -> Vec<TextPart> {
    let mut parts = Vec::new();
    let mut plain = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(|c: char| c.is_ascii_alphanumeric()) {
        let word_len = rest[start..]
            .find(|c: char| !c.is_ascii_alphanumeric())
            .unwrap_or(rest.len() - start);
        let word = &rest[start..start + word_len];
        plain.push_str(&rest[..start]);
        if word.len() == 24 && word.chars().all(|c| c.is_ascii_hexdigit()) {
            if !plain.is_empty() {
                parts.push(TextPart {
                    text: std::mem::take(&mut plain),
                    run: false,
                });
            }
            parts.push(TextPart {
                text: word.to_string(),
                run: true,
            });
        } else {
            plain.push_str(word);
        }
        rest = &rest[start + word_len..];
    }
    plain.push_str(rest);
    if !plain.is_empty() {
        parts.push(TextPart {
            text: plain,
            run: false,
        });
    }
    parts
}

fn error_page(ctx: &Ctx, status: StatusCode, heading: &str, detail: &str) -> Page {
    let p = ErrorPage {
        l: Layout::new(ctx, heading),
        heading: heading.into(),
        // A run that does not exist is named, not linked (the link would lead nowhere).
        detail: if status == StatusCode::NOT_FOUND {
            vec![TextPart {
                text: detail.into(),
                run: false,
            }]
        } else {
            link_runs(detail)
        },
    };
    match p.render() {
        Ok(html) => Page::Html(status, html),
        Err(e) => {
            tracing::error!(error = %e, "template failed");
            internal_page()
        }
    }
}

/// The 500 answer, without a layout (it also stands in when the session could not be read).
pub fn internal_page() -> Page {
    Page::Html(
        StatusCode::INTERNAL_SERVER_ERROR,
        "Internal Server Error".into(),
    )
}

/// 404 for a browser path nothing else answers.
pub async fn not_found(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    page(&state, Input::get(&state, &headers), |_, _, _| {
        Err(PageError::NotFound)
    })
    .await
}

/// A body that is not the expected form is an empty one (whose missing token refuses it).
pub fn form_or_default<T: Default>(form: Result<Form<T>, FormRejection>) -> T {
    form.map(|Form(f)| f).unwrap_or_default()
}

/// What the event loop passes to [`page`]: the verified cookie id and, for a POST, the
/// submitted CSRF token (the `X-CSRF-Token` header, else the form's `csrf_token`).
pub struct Input {
    pub keys: CookieKeys,
    pub id: Option<String>,
    pub csrf: Option<Option<String>>,
    /// The `theme` cookie's value, when it is one of the two themes.
    pub theme: Option<&'static str>,
}

impl Input {
    /// A GET: no token to check.
    pub fn get(state: &AppState, headers: &HeaderMap) -> Self {
        let keys = keys(state);
        Input {
            id: keys.read_id(headers),
            keys,
            csrf: None,
            theme: super::theme::from_headers(headers),
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
    ledger: &Ledger,
    keys: &CookieKeys,
    input: Input,
) -> Result<Ctx, (Option<(String, bool)>, Page)> {
    let mut ctx = match session::resolve(accounts, keys, input.id) {
        Ok(ctx) => ctx,
        Err(e) => {
            tracing::error!(error = %e, "session lookup failed");
            return Err((None, internal_page()));
        }
    };
    if let Some(user) = &ctx.user {
        // Kept in memory by the ledger until something changes: no store read per page.
        ctx.unread = match ledger.unread_count(&user.username) {
            Ok(n) => Some(n),
            Err(e) => {
                tracing::warn!(error = %e, "unread notices not counted");
                Some(0)
            }
        };
    }
    ctx.theme = input.theme;
    if ctx.ended {
        return Err((ctx.set_cookie, Page::Redirect("/tests".into())));
    }
    if let Some(token) = &input.csrf
        && !ctx.csrf_ok(token.as_deref())
    {
        metrics::counter!("shoal_ui_csrf_refused_total").increment(1);
        let out = PageError::Forbidden.into_page(&ctx);
        return Err((ctx.set_cookie, out));
    }
    Ok(ctx)
}

/// Runs `body` for the session `ctx`: its page, or the answer for why there is none.
fn run_body<F>(db: &RunDb, ctx: &mut Ctx, keys: &CookieKeys, body: F) -> Page
where
    F: FnOnce(&RunDb, &mut Ctx, &CookieKeys) -> PageResult,
{
    match body(db, ctx, keys) {
        Ok(page) => page,
        Err(e) => e.into_page(ctx),
    }
}

/// Runs a page in the pool: [`open`], then `body`, which renders. Returns the response with
/// the session cookie if it changed.
pub async fn page<F>(state: &AppState, input: Input, body: F) -> Response
where
    F: FnOnce(&RunDb, &mut Ctx, &CookieKeys) -> PageResult + Send + 'static,
{
    let db = state.rundb.clone();
    let accounts = state.accounts.clone();
    let ledger = state.ledger.clone();
    let keys = input.keys.clone();
    let k = keys.clone();
    let job = move || match open(&accounts, &ledger, &k, input) {
        Ok(mut ctx) => {
            let out = run_body(&db, &mut ctx, &k, body);
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
    let ledger = state.ledger.clone();
    let keys = input.keys.clone();
    let k = keys.clone();
    match state
        .offload
        .run(move || open(&accounts, &ledger, &k, input))
        .await
    {
        Ok(Ok(ctx)) => Ok(ctx),
        Ok(Err((cookie, out))) => Err(respond(&keys, cookie, out)),
        Err(e) => Err(unavailable(e)),
    }
}

/// The second half: `body` in the pool with the session [`open_page`] resolved.
pub async fn continue_page<F>(state: &AppState, keys: CookieKeys, mut ctx: Ctx, body: F) -> Response
where
    F: FnOnce(&RunDb, &mut Ctx, &CookieKeys) -> PageResult + Send + 'static,
{
    let db = state.rundb.clone();
    let k = keys.clone();
    let job = move || {
        let out = run_body(&db, &mut ctx, &k, body);
        (ctx.set_cookie, out)
    };
    finish(state, &keys, job).await
}

async fn finish<J>(state: &AppState, keys: &CookieKeys, job: J) -> Response
where
    J: FnOnce() -> (Option<(String, bool)>, Page) + Send + 'static,
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
pub fn respond(keys: &CookieKeys, cookie: Option<(String, bool)>, out: Page) -> Response {
    let mut response = match out {
        Page::Html(status, html) => (status, axum::response::Html(html)).into_response(),
        Page::Redirect(to) => {
            let mut r = StatusCode::FOUND.into_response();
            if let Ok(v) = HeaderValue::from_str(&to) {
                r.headers_mut().insert(header::LOCATION, v);
            }
            r
        }
        Page::Throttled(retry_after, html) => {
            let mut r = (StatusCode::TOO_MANY_REQUESTS, axum::response::Html(html)).into_response();
            r.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
            r
        }
        Page::Versioned(status, html, etag) => {
            let mut r = (status, axum::response::Html(html)).into_response();
            if let Ok(v) = HeaderValue::from_str(&etag) {
                r.headers_mut().insert(header::ETAG, v);
            }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_ids_in_a_message_are_cut_out_to_be_linked() {
        let id = "0123456789abcdef01234567";
        let parts = link_runs(&format!("Stop_run: run {id} is already finished"));
        let texts: Vec<_> = parts.iter().map(|p| (p.text.as_str(), p.run)).collect();
        assert_eq!(
            texts,
            [
                ("Stop_run: run ", false),
                (id, true),
                (" is already finished", false)
            ]
        );
        let task = link_runs(&format!("Invalid task {id}/3"));
        assert_eq!(task.iter().filter(|p| p.run).count(), 1);
        // Longer or shorter hex words, and words with other letters, stay text.
        for text in [
            "a 0123456789abcdef012345678 b",
            "deadbeef",
            "0123456789abcdef0123456z",
            "",
        ] {
            assert!(link_runs(text).iter().all(|p| !p.run), "{text}");
            let joined: String = link_runs(text).iter().map(|p| p.text.as_str()).collect();
            assert_eq!(joined, text);
        }
    }
}

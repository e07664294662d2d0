//! `GET/POST /forgot` (when `smtp_url` is set): a user asks for a password-reset link by
//! username or email, and the link is mailed.
//!
//! Owns: the form's fields (`username`, `csrf_token`) and its one answer (the queue of
//! requests and the mail are `http::forgot_queue`). The handler does the same work for every
//! input up to the answer: the per-address rate limit (scope `password_reset`: the built-in
//! `forgot_ip`, `forgot_per_ip_per_hour`, IPv6 by /64), the CSRF check, the page, and one
//! `try_send` of the name asked for into the bounded queue. One background task drains the
//! queue and takes each request no sooner than a second after it was queued (by then the
//! answer has long been written), then does the look-up in the pool and sends the mail: so
//! neither the words nor the time of the answer tell whether an account exists. Nothing goes
//! to the public action log. A full queue drops the request (logged, answered the same).
//! Must not: make, store or check links (`Accounts` does), or log a link.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use crate::http::state::AppState;
use crate::http::ui::kit::{Flash, Input, Layout, Page, form_or_default, page};
use crate::limits::{KeyCtx, Scope};

/// What `/forgot` answers to every request.
pub const MSG_SENT: &str = "If an account has this name or address, a reset link is on its \
    way to the account's email address. It is valid for 24 hours. If no mail comes within a \
    few minutes, look in the spam folder, then ask an approver: they can issue a link from \
    your user page.";

#[derive(Template)]
#[template(path = "forgot.html")]
pub struct ForgotPage {
    pub l: Layout,
    /// Mail is configured: the form is offered.
    pub mail: bool,
}

/// `GET /forgot`: the form (when mail is configured) or how to get a link without it.
pub async fn forgot_form(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let mail = state.mailer.is_some() && state.forgot.is_some();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let l = Layout::new(ctx, "Forgot password");
        Page::ok(&ForgotPage { l, mail })
    })
    .await
}

#[derive(Deserialize, Default)]
pub struct ForgotForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /forgot`: queues the request and answers the same words whatever it names.
pub async fn forgot(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<ForgotForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    if state.forgot.is_none() {
        // No mail (or no `public_url`, refused at start): the form says whom to ask.
        return forgot_form(State(state), headers).await;
    }
    let ip = crate::limits::rate_addr(&crate::http::api::call::client_addr(&state, peer, &headers));
    let asked: String = form.username.trim().chars().take(256).collect();
    let ctx = KeyCtx {
        ip: Some(&ip),
        user: Some(&asked),
        ..Default::default()
    };
    if let Err(r) =
        crate::http::limits::check(&state, &Scope::Endpoint("password_reset".into()), &ctx)
    {
        return crate::http::limits::page_429(&r);
    }
    let answer = page(
        &state,
        Input::post(&state, &headers, form.csrf_token),
        move |_, ctx, _| {
            let l = Layout::new(ctx, "Forgot password").flash(Flash::info(MSG_SENT));
            Page::ok(&ForgotPage { l, mail: true })
        },
    )
    .await;
    // A refused form (a 403) queues nothing; every accepted one is queued the same way.
    if answer.status() == StatusCode::OK
        && let Some(queue) = &state.forgot
    {
        queue.push(asked);
    }
    answer
}

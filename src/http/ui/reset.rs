//! Password reset: an approver's one-time link for a user (`POST /user/{name}/reset_link`,
//! from the user's admin page), the link itself (`GET/POST /reset/{secret}`: a new password,
//! checked as at signup), and, when `smtp_url` is set, `GET/POST /forgot` (a user asks for
//! the link by username or email).
//!
//! Owns: the forms' fields (`password`, `password2`; `username`; `csrf_token` on each), their
//! messages, the link's URL (on `public_url` only; without it the approver's page shows a path
//! and says why, and mail cannot be configured at all), the mail's words, and
//! the pages. `/forgot` answers the same words whether an account exists or not, and does
//! everything else after answering (a spawned task: the look-up in the pool, then the mail),
//! so neither the words nor the time tell; it writes nothing to the public action log.
//! It is counted against the rate scope `password_reset` (keyed by address or by the name
//! asked for) on the event loop.
//! Must not: make, store or check links (`Accounts` does), or log a link.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::accounts::weak_password;
use super::kit::url::{NO_PUBLIC_URL, outside_link};
use super::kit::{Flash, Input, Layout, Page, PageError, form_or_default, page};
use crate::accounts::{RESET_TTL_S, UserError};
use crate::http::state::AppState;
use crate::limits::{KeyCtx, Scope};

/// What `/forgot` answers to every request.
pub const MSG_SENT: &str = "If an account has this name or address, a reset link is on its \
    way to the account's email address. It is valid for 24 hours.";

#[derive(Template)]
#[template(path = "reset_link.html")]
pub struct ResetLinkPage {
    pub l: Layout,
    pub username: String,
    pub link: String,
    pub hours: i64,
}

#[derive(Template)]
#[template(path = "reset.html")]
pub struct ResetPage {
    pub l: Layout,
    pub username: String,
    pub action: String,
    pub done: bool,
}

#[derive(Template)]
#[template(path = "forgot.html")]
pub struct ForgotPage {
    pub l: Layout,
    /// Mail is configured: the form is offered.
    pub mail: bool,
}

#[derive(Deserialize, Default)]
pub struct CsrfForm {
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /user/{name}/reset_link`: an approver issues a one-time link for `name`, shown once.
pub async fn issue(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    form: Result<Form<CsrfForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    let accounts = state.accounts.clone();
    let base = state.config.public_base().map(str::to_string);
    page(
        &state,
        Input::post(&state, &headers, form.csrf_token),
        move |_, ctx, _| {
            let Some(me) = ctx.user.clone() else {
                return Page::redirect(super::kit::url::login_next(&format!("/user/{name}")));
            };
            if !me.is_approver() {
                return Err(UserError::NotApprover.into());
            }
            let secret = accounts.reset_issue(&me, &name)?;
            let mut l = Layout::new(ctx, "Password reset link");
            if base.is_none() {
                l = l.flash(Flash::warning(NO_PUBLIC_URL));
            }
            Page::ok(&ResetLinkPage {
                l,
                username: name,
                link: outside_link(base.as_deref(), &format!("/reset/{secret}")),
                hours: RESET_TTL_S / 3600,
            })
        },
    )
    .await
}

fn link_not_valid() -> PageError {
    PageError::refused(
        StatusCode::NOT_FOUND,
        "Link not valid",
        "This password reset link was used already, has expired, or never existed. Ask an \
         approver for a new one.",
    )
}

/// `GET /reset/{secret}`: the new-password form of a live link.
pub async fn form(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(secret): Path<String>,
) -> Response {
    let accounts = state.accounts.clone();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let user = accounts.reset_user(&secret)?.ok_or_else(link_not_valid)?;
        let l = Layout::new(ctx, "Reset password");
        Page::ok(&ResetPage {
            l,
            username: user.username,
            action: format!("/reset/{secret}"),
            done: false,
        })
    })
    .await
}

#[derive(Deserialize, Default)]
pub struct ResetForm {
    #[serde(default)]
    password: String,
    #[serde(default)]
    password2: String,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /reset/{secret}`: sets the new password (checked as at signup), uses the link up and
/// ends every session of the user.
pub async fn set(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(secret): Path<String>,
    form: Result<Form<ResetForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    let token = form.csrf_token.clone();
    let accounts = state.accounts.clone();
    page(
        &state,
        Input::post(&state, &headers, token),
        move |_, ctx, _| {
            let user = accounts.reset_user(&secret)?.ok_or_else(link_not_valid)?;
            let password = form.password.trim();
            let refusal = if password != form.password2.trim() {
                Some("Error! Matching verify password required".to_string())
            } else if password.chars().count() > 72 {
                Some("Error! Password too long (max 72 characters)".to_string())
            } else {
                weak_password(password, &[&user.username, &user.email])
            };
            let again = |ctx: &super::session::Ctx, flash: Flash, done: bool| {
                let mut l = Layout::new(ctx, "Reset password");
                l.flashes = vec![flash];
                Page::ok(&ResetPage {
                    l,
                    username: user.username.clone(),
                    action: format!("/reset/{secret}"),
                    done,
                })
            };
            if let Some(text) = refusal {
                return again(ctx, Flash::error(text), false);
            }
            if !accounts.reset_use(&secret, &user, password)? {
                return Err(link_not_valid());
            }
            again(
                ctx,
                Flash::info("Success! Password updated: log in with the new one."),
                true,
            )
        },
    )
    .await
}

/// `GET /forgot`: the form (when mail is configured) or how to get a link without it.
pub async fn forgot_form(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let mail = state.mailer.is_some();
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

/// `POST /forgot`: mails a link to the account named (by username or email), if there is one
/// to mail; the answer is the same either way.
pub async fn forgot(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<ForgotForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    let Some(mailer) = state.mailer.clone() else {
        return forgot_form(State(state), headers).await;
    };
    let ip = crate::http::api::call::client_addr(&state, peer, &headers);
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
    let Some(base) = state.config.public_base().map(str::to_string) else {
        // Refused at start (validation); never a link from the request's Host header.
        return forgot_form(State(state), headers).await;
    };
    let answer = page(
        &state,
        Input::post(&state, &headers, form.csrf_token),
        move |_, ctx, _| {
            let l = Layout::new(ctx, "Forgot password").flash(Flash::info(MSG_SENT));
            Page::ok(&ForgotPage { l, mail: true })
        },
    )
    .await;
    // The answer is made first, the same for every input (a refused form is a 403 and does
    // nothing); the look-up, the link and the mail come after it, so neither the words nor
    // the time tell who has an account.
    if answer.status() == StatusCode::OK {
        tokio::spawn(mail_link(state, mailer, base, asked));
    }
    answer
}

/// After `/forgot` answered: a link for the account `asked` names, if there is one to mail
/// (`Accounts::reset_request`, in the pool), mailed on `base` (`public_url`).
async fn mail_link(
    state: Arc<AppState>,
    mailer: Arc<crate::mail::Mailer>,
    base: String,
    asked: String,
) {
    let accounts = state.accounts.clone();
    let found = match state
        .offload
        .run(move || accounts.reset_request(&asked))
        .await
    {
        Ok(Ok(found)) => found,
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "reset request failed");
            return;
        }
        Err(e) => {
            tracing::warn!(error = %e, "reset request not handled");
            return;
        }
    };
    let Some((user, secret)) = found else { return };
    let body = format!(
        "Hello {},\n\nsomeone (hopefully you) asked for a new password on {base}.\n\
         Set one here within 24 hours; the link works once:\n\n\
         {base}/reset/{secret}\n\n\
         If you did not ask, ignore this mail: your password stays as it is.\n",
        user.username
    );
    if let Err(e) = mailer
        .send(&user.email, "Your password reset link", body)
        .await
    {
        tracing::warn!(error = %e, user = %user.username, "reset mail not sent");
    }
}

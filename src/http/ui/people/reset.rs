//! Password reset: an approver's one-time link for a user (`POST /user/{name}/reset_link`,
//! from the user's admin page) and the link itself (`GET/POST /reset/{secret}`: a new
//! password, checked as at signup). (`/forgot`, asking for a link by mail, is `forgot`.)
//!
//! Owns: the forms' fields (`password`, `password2`; `csrf_token` on each), their messages,
//! the link's URL (on `public_url` only; without it the approver's page shows a path and says
//! why, and mail cannot be configured at all), and the pages.
//! Must not: make, store or check links (`Accounts` does), or log a link.

use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::accounts::weak_password;
use crate::accounts::{RESET_TTL_S, UserError};
use crate::http::state::AppState;
use crate::http::ui::kit::url::{NO_PUBLIC_URL, outside_link, user_href};
use crate::http::ui::kit::{Flash, Input, Layout, Page, PageError, form_or_default, page};

#[derive(Template)]
#[template(path = "reset_link.html")]
pub struct ResetLinkPage {
    pub l: Layout,
    pub username: String,
    pub link: String,
    pub hours: i64,
}

impl ResetLinkPage {
    /// The address of the user's page.
    pub fn user_page(&self) -> String {
        user_href(&self.username)
    }
}

#[derive(Template)]
#[template(path = "reset.html")]
pub struct ResetPage {
    pub l: Layout,
    pub username: String,
    pub action: String,
    pub done: bool,
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
                return Page::redirect(crate::http::ui::kit::url::login_next(&format!(
                    "/user/{name}"
                )));
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
            let again = |ctx: &crate::http::ui::kit::session::Ctx, flash: Flash, done: bool| {
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
                Flash::info(
                    "Success! Password updated: log in with the new one. Every session of \
                     the account has ended, and its API tokens and feed URL were revoked \
                     (make new ones once logged in).",
                ),
                true,
            )
        },
    )
    .await
}

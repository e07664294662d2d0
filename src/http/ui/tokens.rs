//! API tokens: `GET/POST /user/tokens` (one's own tokens listed, a new one made and shown
//! once) and `POST /user/tokens/revoke`.
//!
//! Owns: the forms' fields (`name`, `read_only`; `token_id` to revoke; `csrf_token` on each),
//! their messages, and the pages. Every POST goes through [`page`], so the CSRF token is
//! checked before anything else. A new token is shown in the answer to the POST that made it
//! (`Cache-Control: no-store`, like every page) and never again.
//! Must not: make, store or check tokens (`Accounts` does), or show a token twice.

use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use super::kit::time::ago;
use super::kit::url::login_next;
use super::kit::{Flash, Input, Layout, Page, PageResult, form_or_default, page};
use super::session::Ctx;
use crate::accounts::{Accounts, TOKEN_NAME_MAX, TokenRefusal, User};
use crate::http::state::AppState;

/// One token as the page lists it.
pub struct TokenRow {
    pub token_id: String,
    pub name: String,
    pub read_only: bool,
    pub created: String,
    pub last_used: String,
}

#[derive(Template)]
#[template(path = "tokens.html")]
pub struct TokensPage {
    pub l: Layout,
    pub tokens: Vec<TokenRow>,
    /// The token just made: shown this once.
    pub new_token: Option<String>,
    pub name_max: usize,
}

fn tokens_page(
    accounts: &Accounts,
    ctx: &Ctx,
    user: &User,
    new_token: Option<String>,
    flashes: Vec<Flash>,
) -> PageResult {
    let tokens = accounts
        .tokens_of(&user.username)?
        .into_iter()
        .map(|t| TokenRow {
            created: ago(Some(&t.created)),
            last_used: ago(t.last_used.as_ref()),
            token_id: t.token_id,
            name: t.name,
            read_only: t.read_only,
        })
        .collect();
    let mut l = Layout::new(ctx, "API tokens");
    l.flashes = flashes;
    Page::ok(&TokensPage {
        l,
        tokens,
        new_token,
        name_max: TOKEN_NAME_MAX,
    })
}

#[derive(Deserialize, Default)]
pub struct DoneQuery {
    #[serde(default)]
    done: Option<String>,
}

/// `GET /user/tokens`: one's tokens and the form for a new one (login-gated).
pub async fn list(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<DoneQuery>,
) -> Response {
    let accounts = state.accounts.clone();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let Some(user) = ctx.user.clone() else {
            return Page::redirect(login_next("/user/tokens"));
        };
        let flashes = match q.done.as_deref() {
            Some("revoked") => vec![Flash::info("Token revoked")],
            _ => Vec::new(),
        };
        tokens_page(&accounts, ctx, &user, None, flashes)
    })
    .await
}

#[derive(Deserialize, Default)]
pub struct CreateForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    read_only: Option<String>,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /user/tokens`: makes a token and shows it once.
pub async fn create(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<CreateForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    let token = form.csrf_token.clone();
    let accounts = state.accounts.clone();
    page(
        &state,
        Input::post(&state, &headers, token),
        move |_, ctx, _| {
            let Some(user) = ctx.user.clone() else {
                return Page::redirect(login_next("/user/tokens"));
            };
            let read_only = form.read_only.as_deref().is_some_and(|v| !v.is_empty());
            match accounts.token_create(&user, &form.name, read_only) {
                Ok((secret, _)) => {
                    let shown = Flash::info(
                        "Token created. Copy it now: it is shown only this once.".to_string(),
                    );
                    tokens_page(&accounts, ctx, &user, Some(secret), vec![shown])
                }
                Err(TokenRefusal::Account(e)) => Err(e.into()),
                Err(refusal) => tokens_page(
                    &accounts,
                    ctx,
                    &user,
                    None,
                    vec![Flash::error(format!("Error! {refusal}"))],
                ),
            }
        },
    )
    .await
}

#[derive(Deserialize, Default)]
pub struct RevokeForm {
    #[serde(default)]
    token_id: String,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /user/tokens/revoke`: revokes one of one's tokens.
pub async fn revoke(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RevokeForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    let token = form.csrf_token.clone();
    let accounts = state.accounts.clone();
    page(
        &state,
        Input::post(&state, &headers, token),
        move |_, ctx, _| {
            let Some(user) = ctx.user.clone() else {
                return Page::redirect(login_next("/user/tokens"));
            };
            if !accounts.token_revoke(&user, &form.token_id)? {
                let flash = Flash::error("Error! No such token");
                return tokens_page(&accounts, ctx, &user, None, vec![flash]);
            }
            Page::redirect("/user/tokens?done=revoked")
        },
    )
    .await
}

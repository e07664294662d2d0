//! API tokens: `GET/POST /user/tokens` (one's own tokens listed, a new one made and shown
//! once), `POST /user/tokens/revoke` and `POST /user/tokens/revoke_all`.
//!
//! Owns: the forms' fields (`name`, `read_only`, `password`: the current one; `token_id` to
//! revoke; `csrf_token` on each), their messages, and the pages. Every POST checks the CSRF
//! token before anything else. Making a token also asks for the current password, checked
//! through the login path (the throttle, as `/login`), so a stolen session cannot turn itself
//! into a lasting credential. A new token is shown in the answer to the POST that made it
//! (`Cache-Control: no-store`, like every page) and never again.
//! Must not: make, store or check tokens (`Accounts` does), or show a token twice.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use crate::accounts::{Accounts, AuthError, TOKEN_NAME_MAX, TokenRefusal, User};
use crate::http::auth::{self, Login};
use crate::http::state::AppState;
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::time::ago;
use crate::http::ui::kit::url::login_next;
use crate::http::ui::kit::{
    Flash, Input, Layout, Page, PageError, PageResult, continue_page, form_or_default, open_page,
    page, respond,
};

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
            Some("revoked_all") => vec![Flash::info("Every token revoked")],
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
    /// The current password.
    #[serde(default)]
    password: String,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /user/tokens`: the CSRF token, then the current password through the login path,
/// then a token made and shown once.
pub async fn create(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<CreateForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    let input = Input::post(&state, &headers, form.csrf_token.clone());
    let keys = input.keys.clone();
    let ctx = match open_page(&state, input).await {
        Ok(ctx) => ctx,
        Err(answer) => return answer,
    };
    let Some(user) = ctx.user.clone() else {
        return respond(
            &keys,
            ctx.set_cookie,
            Page::Redirect(login_next("/user/tokens")),
        );
    };
    let ip = crate::http::api::call::client_addr(&state, peer, &headers);
    let verdict = auth::authenticate(
        &state,
        Login::at(ip, user.username.clone(), form.password.clone()),
    )
    .await;
    let accounts = state.accounts.clone();
    continue_page(&state, keys, ctx, move |_, ctx, _| {
        let refuse = |ctx: &Ctx, text: &str| {
            tokens_page(&accounts, ctx, &user, None, vec![Flash::error(text)])
        };
        // The user as read with the password check: the token is stored only if that
        // password is still the stored one.
        let checked = match verdict {
            Ok(Ok(checked)) => checked,
            Ok(Err(AuthError::Throttled { retry_after })) => {
                return Err(PageError::Throttled {
                    retry_after_s: auth::retry_after_s(retry_after),
                });
            }
            Ok(Err(AuthError::WrongPassword | AuthError::Blocked | AuthError::Pending)) => {
                return refuse(ctx, "Error! Invalid password: no token was made");
            }
            Ok(Err(AuthError::Account(e))) => {
                return Err(PageError::internal("token: password check failed", e));
            }
            Err(e) => return Err(PageError::internal("token: password check failed", e)),
        };
        let read_only = form.read_only.as_deref().is_some_and(|v| !v.is_empty());
        match accounts.token_create(&checked, &form.name, read_only) {
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
    })
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

/// The confirmation asked before every token is revoked.
#[derive(Template)]
#[template(path = "tokens_revoke_all.html")]
pub struct RevokeAllPage {
    pub l: Layout,
    /// How many tokens would go.
    pub count: usize,
}

#[derive(Deserialize, Default)]
pub struct RevokeAllForm {
    /// `yes` once confirmed; anything else shows the confirmation.
    #[serde(default)]
    confirm: String,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /user/tokens/revoke_all`: asks for confirmation (a page with a second form, no
/// JavaScript), then, with `confirm=yes`, revokes every token of one's own.
pub async fn revoke_all(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RevokeAllForm>, FormRejection>,
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
            if form.confirm != "yes" {
                let count = accounts.tokens_of(&user.username)?.len();
                return Page::ok(&RevokeAllPage {
                    l: Layout::new(ctx, "Revoke all tokens?"),
                    count,
                });
            }
            accounts.tokens_revoke_all_logged(&user)?;
            Page::redirect("/user/tokens?done=revoked_all")
        },
    )
    .await
}

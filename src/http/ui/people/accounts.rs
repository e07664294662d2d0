//! Accounts: `/login`, `/logout`, `/signup`.
//!
//! Signup runs the cheap bot checks first (`signup_guard`: the honeypot, the form's signed
//! age), then the signup rate limits (scope `signup`: per address, for everybody), then
//! Fishtest's field checks, and only then argon2 and the store.
//!
//! Login goes through the same path as every API login (`http::auth`, running the accounts'
//! login policy: the throttle, the credential cache, argon2 in the pool), after the CSRF
//! check, so a refused form is never counted as a failed login. A refusal is matched by its
//! type (`AuthError`) and shown with Fishtest's text. A login starts a new server-side
//! session under a new cookie id.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use super::signup_guard;
use crate::accounts::{AuthError, UserError};
use crate::http::auth::{self, Login, MSG_BLOCKED, MSG_INVALID, MSG_PENDING};
use crate::http::error::user_error_text;
use crate::http::state::AppState;
use crate::http::ui::kit::repo::valid_tests_repo;
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::url::same_site_path;
use crate::http::ui::kit::{
    Flash, Href, Input, Layout, OrInternal, Page, PageError, PageResult, continue_page,
    form_or_default, open_page, page, respond,
};

/// Shown after a successful signup (Fishtest's words).
pub const MSG_CREATED: &str = "Account created! To avoid spam, a person will now manually \
    approve your new account. This is usually quick but sometimes takes a few hours. Thank you \
    for contributing!";
/// Appended to the pending message at login, as Fishtest does.
const PENDING_MORE: &str = " To avoid spam, a person will now manually approve your new \
    account. This is usually quick but sometimes takes a few hours.";

#[derive(Template)]
#[template(path = "login.html")]
pub struct LoginPage {
    pub l: Layout,
    /// The form's action (keeps `?next=`).
    pub action: String,
    pub remember: bool,
}

#[derive(Template)]
#[template(path = "signup.html")]
pub struct SignupPage {
    pub l: Layout,
    /// A fresh signed token of when this form was shown (`signup_guard`).
    pub form_token: String,
    pub form_token_field: &'static str,
    pub honeypot_field: &'static str,
}

#[derive(Deserialize, Default)]
pub struct NextQuery {
    #[serde(default)]
    next: Option<String>,
    #[serde(default)]
    came_from: Option<String>,
    #[serde(default)]
    created: Option<String>,
}

/// Only a same-origin path is a place to go after login (`url::same_site_path`).
fn safe_next(q: &NextQuery) -> String {
    [q.next.as_deref(), q.came_from.as_deref()]
        .into_iter()
        .flatten()
        .find_map(same_site_path)
        .unwrap_or_else(|| "/".to_string())
}

fn login_action(q: &NextQuery) -> String {
    match &q.next {
        Some(_) => Href::new("/login")
            .path_param("next", &safe_next(q))
            .build(),
        None => "/login".into(),
    }
}

fn login_page(ctx: &Ctx, q: &NextQuery, remember: bool, flash: Option<Flash>) -> PageResult {
    let mut l = Layout::new(ctx, "Login");
    if let Some(f) = flash {
        l = l.flash(f);
    }
    Page::ok(&LoginPage {
        l,
        action: login_action(q),
        remember,
    })
}

/// `GET /login`.
pub async fn login_form(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<NextQuery>,
) -> Response {
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        if ctx.user.is_some() {
            return Page::redirect("/tests");
        }
        let flash = q.created.is_some().then(|| Flash::info(MSG_CREATED));
        login_page(ctx, &q, true, flash)
    })
    .await
}

#[derive(Deserialize, Default)]
pub struct LoginForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    /// The checkbox (`1` when ticked); absent means not remembered.
    #[serde(default)]
    stay_logged_in: Option<String>,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /login`: CSRF, then the throttled credential check, then a new session.
pub async fn login(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    Query(q): Query<NextQuery>,
    form: Result<Form<LoginForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    // Rate limits (scope `login`) on the loop: a limited attempt costs no token, no argon2.
    let ip = crate::http::api::call::client_addr(&state, peer, &headers);
    let counted = crate::limits::rate_addr(&ip);
    let ctx = crate::limits::KeyCtx {
        user: Some(form.username.trim()),
        ip: Some(&counted),
        ..Default::default()
    };
    if let Err(r) = crate::http::limits::check(&state, &crate::limits::Scope::Login, &ctx) {
        return crate::http::limits::page_429(&r);
    }
    let input = Input::post(&state, &headers, form.csrf_token.clone());
    let keys = input.keys.clone();
    // The session and the token first: a refused form is not a failed login.
    let ctx = match open_page(&state, input).await {
        Ok(ctx) if ctx.user.is_some() => return redirect_home(&keys),
        Ok(ctx) => ctx,
        Err(answer) => return answer,
    };
    let remember = form
        .stay_logged_in
        .as_deref()
        .is_some_and(|v| matches!(v, "1" | "true" | "on" | "yes"));
    let verdict = auth::authenticate(
        &state,
        Login::at(ip, form.username.trim().to_string(), form.password),
    )
    .await;
    let accounts = state.accounts.clone();
    continue_page(&state, keys, ctx, move |_, ctx, _| {
        let refused =
            |ctx: &Ctx, text: String| login_page(ctx, &q, remember, Some(Flash::error(text)));
        match verdict {
            Ok(Ok(user)) => {
                ctx.login(&accounts, user, remember)
                    .or_internal("session not started")?;
                Page::redirect(safe_next(&q))
            }
            Ok(Err(AuthError::Throttled { retry_after })) => Err(PageError::Throttled {
                retry_after_s: auth::retry_after_s(retry_after),
            }),
            Ok(Err(AuthError::WrongPassword)) => refused(ctx, MSG_INVALID.into()),
            Ok(Err(AuthError::Blocked)) => refused(ctx, MSG_BLOCKED.into()),
            Ok(Err(AuthError::Pending)) => refused(ctx, format!("{MSG_PENDING}{PENDING_MORE}")),
            Ok(Err(AuthError::Account(e))) => {
                tracing::warn!(error = %e, "login failed");
                refused(ctx, MSG_INVALID.into())
            }
            Err(e) => {
                tracing::warn!(error = %e, "login failed");
                refused(ctx, MSG_INVALID.into())
            }
        }
    })
    .await
}

fn redirect_home(keys: &crate::http::ui::kit::session::CookieKeys) -> Response {
    respond(keys, None, Page::Redirect("/tests".into()))
}

#[derive(Deserialize, Default)]
pub struct TokenForm {
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /logout`: ends the session on the server; the old cookie is worthless after it.
pub async fn logout(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<TokenForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    let accounts = state.accounts.clone();
    page(
        &state,
        Input::post(&state, &headers, form.csrf_token),
        move |_, ctx, keys| {
            ctx.logout(&accounts, keys).or_internal("logout failed")?;
            Page::redirect("/tests")
        },
    )
    .await
}

fn signup_page(ctx: &Ctx, secret: &[u8], flashes: Vec<Flash>) -> PageResult {
    let mut l = Layout::new(ctx, "Register");
    l.flashes = flashes;
    Page::ok(&SignupPage {
        l,
        form_token: signup_guard::issue(secret, &ctx.id, signup_guard::now_ms()),
        form_token_field: signup_guard::FORM_TOKEN_FIELD,
        honeypot_field: signup_guard::HONEYPOT_FIELD,
    })
}

/// `GET /signup`.
pub async fn signup_form(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let secret = state.secret.clone();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        if ctx.user.is_some() {
            return Page::redirect("/tests");
        }
        signup_page(ctx, &secret, Vec::new())
    })
    .await
}

#[derive(Deserialize, Default)]
pub struct SignupForm {
    #[serde(default)]
    username: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    password2: String,
    #[serde(default)]
    email: String,
    #[serde(default)]
    tests_repo: String,
    #[serde(default)]
    csrf_token: Option<String>,
    /// `signup_guard::FORM_TOKEN_FIELD`.
    #[serde(default)]
    form_token: String,
    /// `signup_guard::HONEYPOT_FIELD`: people leave it empty.
    #[serde(default)]
    website: String,
}

/// The signup checks, all of them (Fishtest reports every failure at once).
pub fn signup_errors(f: &SignupForm) -> Vec<String> {
    let mut errors = Vec::new();
    let (username, password, email) = (f.username.trim(), f.password.trim(), f.email.trim());
    if password.is_empty() {
        errors.push("Error! Non-empty password required".to_string());
    } else if password.chars().count() > 72 {
        errors.push("Error! Password too long (max 72 characters)".into());
    } else {
        if let Some(text) = weak_password(password, &[username, email]) {
            errors.push(text);
        }
    }
    if password != f.password2.trim() {
        errors.push("Error! Matching verify password required".into());
    }
    if let Err(reason) = check_email(email) {
        errors.push(format!("Error! Invalid email: {reason}"));
    }
    if username.is_empty() {
        errors.push("Error! Username required".into());
    } else if !username.chars().all(|c| c.is_ascii_alphanumeric()) {
        errors.push("Error! Alphanumeric username required".into());
    }
    let repo = f.tests_repo.trim();
    if !repo.is_empty() && !valid_tests_repo(repo) {
        errors.push(format!(
            "Error! Invalid tests repo {repo}: expected https://github.com/<owner>/<repo>"
        ));
    }
    errors
}

/// zxcvbn's verdict (score 3 or more passes; the user's own words are `inputs`): `None`, or
/// Fishtest's "Error! Weak password: <suggestion> <warning>".
pub(in crate::http::ui) fn weak_password(password: &str, inputs: &[&str]) -> Option<String> {
    let strength = zxcvbn::zxcvbn(password, inputs);
    if (strength.score() as u8) >= 3 {
        return None;
    }
    let mut text = String::from("Error! Weak password");
    if let Some(fb) = strength.feedback() {
        if let Some(s) = fb.suggestions().first() {
            text.push_str(&format!(": {s}"));
        }
        if let Some(w) = fb.warning() {
            text.push_str(&format!(" {w}"));
        }
    }
    Some(text)
}

/// Email syntax only (shoal calls no outside service, so no deliverability check).
pub(in crate::http::ui) fn check_email(email: &str) -> Result<(), &'static str> {
    let Some((local, domain)) = email.split_once('@') else {
        return Err("The email address is not valid. It must have exactly one @-sign.");
    };
    if local.is_empty() || domain.contains('@') || email.chars().any(char::is_whitespace) {
        return Err("The email address is not valid.");
    }
    let labels: Vec<&str> = domain.split('.').collect();
    if labels.len() < 2 || labels.iter().any(|l| l.is_empty()) {
        return Err("The part after the @-sign is not valid.");
    }
    Ok(())
}

/// `POST /signup`: a pending account, then `/login` with the "account created" message.
///
/// In order, each cheaper than the next and none counted before it passed: the CSRF token
/// (the session), the bot checks (`signup_guard`: the honeypot; the form token, bound to this
/// session and sent once; a form younger than `signup_min_form_age_s` is answered once it is
/// that old, so a password manager is never refused), Fishtest's field checks, then the
/// rate limits (scope `signup`: per address and for everybody), then argon2 and the store.
/// A signup that creates nothing (the name or address taken) is taken back from everybody's
/// window, so addresses that create nothing cannot close signup for everyone.
pub async fn signup(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<SignupForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    let input = Input::post(&state, &headers, form.csrf_token.clone());
    let keys = input.keys.clone();
    // The session and the CSRF token first: a refused form is counted nowhere.
    let ctx = match open_page(&state, input).await {
        Ok(ctx) if ctx.user.is_some() => return redirect_home(&keys),
        Ok(ctx) => ctx,
        Err(answer) => return answer,
    };
    let secret = state.secret.clone();
    let (min_age, max_age) = state.config.signup_form_ages();
    // The bot checks cost a MAC; a refused form never reaches the rate limits or argon2.
    let guard = signup_guard::check(
        &secret,
        &ctx.id,
        &form.website,
        &form.form_token,
        signup_guard::now_ms(),
        min_age,
        max_age,
    );
    if let Ok(passed) = &guard
        && !passed.wait.is_zero()
    {
        // Too young: answered once old enough (costs a timer, not a thread).
        tokio::time::sleep(passed.wait).await;
    }
    let ip = crate::http::api::call::client_addr(&state, peer, &headers);
    let accounts = state.accounts.clone();
    let limits = state.clone();
    continue_page(&state, keys, ctx, move |_, ctx, _| {
        // Each form is accepted once.
        let guard = guard.and_then(|p| {
            accounts
                .signup_form_spend(&p.nonce, p.expires_ms, signup_guard::now_ms())
                .then_some(())
                .ok_or(signup_guard::Refusal::Used)
        });
        if let Err(refusal) = guard {
            tracing::info!(?refusal, "signup form refused");
            return signup_page(ctx, &secret, vec![Flash::error(refusal.text())]);
        }
        let errors = signup_errors(&form);
        if !errors.is_empty() {
            return signup_page(ctx, &secret, errors.into_iter().map(Flash::error).collect());
        }
        // The signup rate limits, for forms past every check above.
        // Per address: an IPv6 client by its /64.
        let counted = crate::limits::rate_addr(&ip);
        let key = crate::limits::KeyCtx {
            ip: Some(&counted),
            ..Default::default()
        };
        let scope = crate::limits::Scope::Signup;
        if let Err(r) = crate::http::limits::check(&limits, &scope, &key) {
            tracing::info!(%ip, limit = %r.name, "signup rate-limited");
            return Err(PageError::RateLimited {
                retry_after_s: r.retry_after.as_secs_f64().ceil().max(1.0) as u64,
                text: "Too many sign-ups from your address, or from everybody, in the last \
                       hour.",
            });
        }
        let refused = |ctx: &Ctx, e: &UserError| {
            // Nothing created: not counted in everybody's window (the address's stays).
            crate::http::limits::refund(&limits, &scope, &crate::limits::KeyCtx::default());
            signup_page(ctx, &secret, vec![Flash::error(user_error_text(e))])
        };
        match accounts.users().register(
            form.username.trim(),
            form.password.trim(),
            form.email.trim(),
            form.tests_repo.trim(),
        ) {
            Ok(_) => Page::redirect("/login?created=1"),
            // A refused signup: the form again, with the edge's text (`http::error`).
            Err(
                e @ (UserError::BadName { .. }
                | UserError::NameTaken { .. }
                | UserError::NameOrEmailTaken { .. }
                | UserError::BadPasswordLength
                | UserError::BadEmail { .. }
                | UserError::CorruptUser { .. }
                | UserError::Unstorable { .. }
                | UserError::Hashing(_)),
            ) => refused(ctx, &e),
            Err(e) => {
                crate::http::limits::refund(&limits, &scope, &crate::limits::KeyCtx::default());
                Err(PageError::internal("signup failed", e))
            }
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(username: &str, password: &str, email: &str, repo: &str) -> SignupForm {
        SignupForm {
            username: username.into(),
            password: password.into(),
            password2: password.into(),
            email: email.into(),
            tests_repo: repo.into(),
            ..SignupForm::default()
        }
    }

    #[test]
    fn signup_checks() {
        let good = form(
            "bob",
            "violet otter juggles nine lamps",
            "bob@example.org",
            "",
        );
        assert!(signup_errors(&good).is_empty());
        let weak = form("bob", "bob12345", "bob@example.org", "");
        assert!(signup_errors(&weak)[0].starts_with("Error! Weak password"));
        let long = form("bob", &"x".repeat(73), "bob@example.org", "");
        assert_eq!(
            signup_errors(&long),
            ["Error! Password too long (max 72 characters)"]
        );
        let empty = form("", "", "", "");
        let errors = signup_errors(&empty);
        assert!(errors.contains(&"Error! Non-empty password required".to_string()));
        assert!(errors.contains(&"Error! Username required".to_string()));
        assert!(errors.iter().any(|e| e.starts_with("Error! Invalid email")));
        for repo in [
            "https://github.com/bob/Stockfish",
            "https://www.github.com/bob/Stockfish/",
        ] {
            assert!(valid_tests_repo(repo), "{repo}");
        }
        for repo in [
            "http://github.com/bob/Stockfish",
            "https://github.com/bob",
            "https://github.com/bob/Stockfish/tree/x",
            "https://gitlab.com/bob/Stockfish",
        ] {
            assert!(!valid_tests_repo(repo), "{repo}");
        }
        for email in ["a@b", "@b.org", "a b@c.org", "a@@b.org", "a@b..org"] {
            assert!(check_email(email).is_err(), "{email}");
        }
    }

    #[test]
    fn next_is_a_same_site_path() {
        let q = |next: &str| NextQuery {
            next: Some(next.into()),
            ..NextQuery::default()
        };
        assert_eq!(safe_next(&q("/tests/view/1?x=2")), "/tests/view/1?x=2");
        for bad in [
            "//evil.org",
            "https://evil.org",
            "/\\evil.org",
            "tests",
            "/\t/evil.org",
            "/\n/evil.org",
        ] {
            assert_eq!(safe_next(&q(bad)), "/", "{bad}");
        }
        assert_eq!(login_action(&q("/a b")), "/login?next=/a%20b");
    }
}

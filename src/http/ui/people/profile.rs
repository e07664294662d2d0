//! People: `GET/POST /user` (one's own profile) and `GET/POST /user/{name}` (an approver's
//! view of another account: accept or reject a pending signup, block or unblock). The list of
//! accounts is `user_management.rs`'s.
//!
//! Owns: the forms' fields (Fishtest's names: `user`, `email`, `old_password`, `password`,
//! `password2`, `tests_repo`; `blocked`, `pending`), their validation and messages, and the
//! pages. Every POST goes through [`page`], so the CSRF token is checked before anything else.
//! The old password is checked through the login path (`http::auth`: the failed-login
//! throttle, the credential cache), so the form is no unthrottled password oracle.
//! A profile change is all or nothing (Fishtest's quirk of flashing "Password updated" and
//! then discarding the change is not kept); a new password ends every session of the user and
//! starts a fresh one for the browser that changed it.
//! Must not: decide who may administer accounts (`Accounts::administer_user` does) or change
//! a user other than through `Accounts`.

use std::net::SocketAddr;
use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{ConnectInfo, Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::accounts::{check_email, weak_password};
use crate::accounts::{
    Accounts, AuthError, DEFAULT_MACHINE_LIMIT, ProfileChange, SessionState, User, UserAction,
    UserError,
};
use crate::http::auth::{self, Login};
use crate::http::state::AppState;
use crate::http::ui::kit::follows::{FollowsView, profile_view};
use crate::http::ui::kit::repo::{repo_label, valid_tests_repo};
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::url::{login_next, user_href};
use crate::http::ui::kit::{
    Flash, Href, Input, Layout, OrInternal, Page, PageError, PageResult, continue_page,
    form_or_default, open_page, page, respond,
};
use crate::ledger::Ledger;

/// What the profile and admin pages show of a user.
pub struct UserView {
    pub username: String,
    pub registered: String,
    pub groups: String,
    pub machine_limit: u32,
    pub cpu_hours: u64,
    pub email: String,
    pub tests_repo: String,
    /// `owner/repo` of a GitHub tests repository, or empty.
    pub repo_label: String,
    pub pending: bool,
    pub blocked: bool,
}

impl UserView {
    /// The address of this user's page (its forms post there).
    pub fn page(&self) -> String {
        user_href(&self.username)
    }
}

/// Groups without their `group:` prefix, or "No group".
pub fn groups_label(user: &User) -> String {
    if user.groups.is_empty() {
        return "No group".into();
    }
    user.groups
        .iter()
        .map(|g| g.strip_prefix("group:").unwrap_or(g))
        .collect::<Vec<_>>()
        .join(", ")
}

fn view_of(ledger: &Ledger, user: &User) -> Result<UserView, UserError> {
    let cpu = ledger
        .contributor(&user.username)?
        .map_or(0.0, |c| c.cpu_hours);
    Ok(UserView {
        username: user.username.clone(),
        registered: user
            .registration_time
            .0
            .format("%B %-d, %Y, at %-I:%M %p (UTC)")
            .to_string(),
        groups: groups_label(user),
        machine_limit: if user.machine_limit == 0 {
            DEFAULT_MACHINE_LIMIT
        } else {
            user.machine_limit
        },
        cpu_hours: cpu.max(0.0) as u64,
        email: user.email.clone(),
        tests_repo: user.tests_repo.clone(),
        repo_label: repo_label(&user.tests_repo),
        pending: user.pending,
        blocked: user.blocked,
    })
}

#[derive(Template)]
#[template(path = "profile.html")]
pub struct ProfilePage {
    pub l: Layout,
    pub u: UserView,
    /// The runs followed and the feed URL (`follows.rs`).
    pub f: FollowsView,
    /// The names of one's API tokens (the tokens page manages them).
    pub tokens: Vec<String>,
}

#[derive(Template)]
#[template(path = "user_admin.html")]
pub struct UserAdminPage {
    pub l: Layout,
    pub u: UserView,
    /// The account's live reset links, in words ("mailed on request, 5 minutes ago"): only
    /// approvers see that someone asked.
    pub reset_links: Vec<String>,
}

/// A non-approver on an approver's page.
pub(in crate::http::ui) fn not_allowed(message: &str) -> PageError {
    PageError::refused(StatusCode::FORBIDDEN, "Not allowed", message)
}

/// The login wall: → `/login?next=<path>`.
pub(in crate::http::ui) fn to_login(path: &str) -> PageResult {
    Page::redirect(login_next(path))
}

#[derive(Deserialize, Default)]
pub struct DoneQuery {
    #[serde(default)]
    done: Option<String>,
}

/// The flash for `?done=<code>` after a change on these pages.
pub(in crate::http::ui) fn done_message(code: &str, name: &str) -> Option<String> {
    Some(match code {
        "saved" => "Success! Profile saved".into(),
        "password" => "Success! Password updated".into(),
        "blocked" => format!("Blocked user {name}"),
        "unblocked" => format!("Unblocked user {name}"),
        "accepted" => format!("Accepted user {name}"),
        "rejected" => "Rejected the signup: the account was deleted".into(),
        _ => return None,
    })
}

fn profile_page(
    (ledger, accounts): (&Ledger, &Accounts),
    ctx: &Ctx,
    user: &User,
    flashes: Vec<Flash>,
) -> PageResult {
    let u = view_of(ledger, user)?;
    let mut l = Layout::new(ctx, "Profile");
    l.flashes = flashes;
    let f = profile_view(ledger, &user.username)?;
    let tokens = accounts
        .tokens_of(&user.username)?
        .into_iter()
        .map(|t| t.name)
        .collect();
    Page::ok(&ProfilePage { l, u, f, tokens })
}

/// `GET /user`: one's own profile (login-gated).
pub async fn own_profile(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<DoneQuery>,
) -> Response {
    let (ledger, accounts) = (state.ledger.clone(), state.accounts.clone());
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let Some(user) = ctx.user.clone() else {
            return to_login("/user");
        };
        let flashes = q
            .done
            .as_deref()
            .and_then(|c| done_message(c, &user.username))
            .map(Flash::info)
            .into_iter()
            .collect();
        profile_page((&ledger, &accounts), ctx, &user, flashes)
    })
    .await
}

#[derive(Deserialize, Default)]
pub struct ProfileForm {
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    email: String,
    #[serde(default)]
    old_password: String,
    #[serde(default)]
    password: String,
    #[serde(default)]
    password2: String,
    #[serde(default)]
    tests_repo: String,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// The profile form's checks, in Fishtest's order, stopping at the first failure; `Ok` is
/// the change to save. The old password is checked by the caller first.
pub fn profile_change(user: &User, f: &ProfileForm) -> Result<ProfileChange, String> {
    let password = f.password.trim();
    let email = f.email.trim();
    let new_password = if password.is_empty() {
        None
    } else {
        if password != f.password2.trim() {
            return Err("Error! Matching verify password required".into());
        }
        if password.chars().count() > 72 {
            return Err("Error! Password too long (max 72 characters)".into());
        }
        if let Some(weak) = weak_password(password, &[&user.username, &user.email, email]) {
            return Err(weak);
        }
        Some(password.to_string())
    };
    let repo = f.tests_repo.trim();
    if !repo.is_empty() && !valid_tests_repo(repo) {
        return Err(format!(
            "Error! Invalid test repo {repo}: expected https://github.com/<owner>/<repo>"
        ));
    }
    let email = if email.is_empty() || email == user.email {
        user.email.clone()
    } else {
        check_email(email).map_err(|reason| format!("Error! Invalid email: {reason}"))?;
        email.to_string()
    };
    Ok(ProfileChange {
        email,
        tests_repo: repo.to_string(),
        new_password,
    })
}

/// `POST /user`: the CSRF token, then the old password through the login path (the throttle
/// and the credential cache, as `/login`), then the changes, all or nothing.
pub async fn change_profile(
    State(state): State<Arc<AppState>>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    headers: HeaderMap,
    form: Result<Form<ProfileForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    let input = Input::post(&state, &headers, form.csrf_token.clone());
    let keys = input.keys.clone();
    let ctx = match open_page(&state, input).await {
        Ok(ctx) => ctx,
        Err(answer) => return answer,
    };
    let Some(user) = ctx.user.clone() else {
        return respond(&keys, ctx.set_cookie, Page::Redirect(login_next("/user")));
    };
    // Fishtest: without the hidden `user` field (or naming someone else) nothing happens.
    if form.user.as_deref() != Some(user.username.as_str()) {
        return respond(&keys, ctx.set_cookie, Page::Redirect("/user".into()));
    }
    let ip = crate::http::api::call::client_addr(&state, peer, &headers);
    let verdict = auth::authenticate(
        &state,
        Login::at(ip, user.username.clone(), form.old_password.clone()),
    )
    .await;
    let (ledger, accounts) = (state.ledger.clone(), state.accounts.clone());
    continue_page(&state, keys, ctx, move |_, ctx, _| {
        let refuse = |ctx: &Ctx, text: String| {
            profile_page((&ledger, &accounts), ctx, &user, vec![Flash::error(text)])
        };
        match verdict {
            Ok(Ok(_)) => {}
            Ok(Err(AuthError::Throttled { retry_after })) => {
                return Err(PageError::Throttled {
                    retry_after_s: auth::retry_after_s(retry_after),
                });
            }
            Ok(Err(AuthError::WrongPassword | AuthError::Blocked | AuthError::Pending)) => {
                return refuse(ctx, "Invalid password!".into());
            }
            Ok(Err(AuthError::Account(e))) => {
                return Err(PageError::internal("profile: password check failed", e));
            }
            Err(e) => return Err(PageError::internal("profile: password check failed", e)),
        }
        let change = match profile_change(&user, &form) {
            Ok(c) => c,
            Err(text) => return refuse(ctx, text),
        };
        let new_password = change.new_password.is_some();
        // The browser that changed the password keeps a session: a fresh one, with the
        // lifetime of the one it had.
        let remember = match accounts.session(&ctx.id) {
            Ok(SessionState::Active(s)) => s.0.remember,
            _ => false,
        };
        let saved = match accounts.change_profile(&user, change) {
            Err(e @ UserError::EmailTaken { .. }) => {
                return refuse(ctx, crate::http::error::user_error_text(&e));
            }
            other => other?,
        };
        if new_password {
            ctx.login(&accounts, saved, remember)
                .or_internal("profile: new session not started")?;
            return Page::redirect("/user?done=password");
        }
        Page::redirect("/user?done=saved")
    })
    .await
}

/// `GET /user/{name}`: an approver's view of an account; one's own name is the profile.
pub async fn user_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(q): Query<DoneQuery>,
) -> Response {
    let (ledger, accounts) = (state.ledger.clone(), state.accounts.clone());
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let Some(me) = ctx.user.clone() else {
            return to_login(&user_href(&name));
        };
        let flashes: Vec<Flash> = q
            .done
            .as_deref()
            .and_then(|c| done_message(c, &name))
            .map(Flash::info)
            .into_iter()
            .collect();
        if me.username == name {
            return profile_page((&ledger, &accounts), ctx, &me, flashes);
        }
        if !me.is_approver() {
            // The accounts' refusal, in the edge's words (`http::error`).
            return Err(UserError::NotApprover.into());
        }
        let user = accounts.users().load(&name)?.ok_or(PageError::NotFound)?;
        let u = view_of(&ledger, &user)?;
        let reset_links = accounts
            .reset_links_of(&user.username)?
            .into_iter()
            .map(|(mailed, by, created)| {
                let when = crate::http::ui::kit::time::ago(Some(&created));
                if mailed {
                    format!("mailed on request, {when}")
                } else {
                    format!("issued by {by}, {when}")
                }
            })
            .collect();
        let mut l = Layout::new(ctx, "User Management");
        l.flashes = flashes;
        Page::ok(&UserAdminPage { l, u, reset_links })
    })
    .await
}

#[derive(Deserialize, Default)]
pub struct UserActionForm {
    #[serde(default)]
    user: Option<String>,
    #[serde(default)]
    blocked: Option<String>,
    #[serde(default)]
    pending: Option<String>,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// What a user-action form asks for, or why it is not understood.
fn user_action_of(f: &UserActionForm, name: &str) -> Result<UserAction, String> {
    if f.user.as_deref().is_some_and(|u| u != name) {
        return Err(format!("The form names another user than {name}."));
    }
    if let Some(b) = f.blocked.as_deref() {
        let b = b.trim();
        if b.is_empty() || !b.bytes().all(|c| c.is_ascii_digit()) {
            return Err("blocked must be 0 or 1.".into());
        }
        return Ok(if b.bytes().all(|c| c == b'0') {
            UserAction::Unblock
        } else {
            UserAction::Block
        });
    }
    match f.pending.as_deref() {
        Some("0") => Ok(UserAction::Accept),
        Some(_) => Ok(UserAction::Reject),
        None => Err("Nothing to do: the form has neither blocked nor pending.".into()),
    }
}

/// `POST /user/{name}`: block/unblock (`blocked`), accept (`pending=0`) or reject
/// (`pending=1`), approvers only.
pub async fn user_action(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    form: Result<Form<UserActionForm>, FormRejection>,
) -> Response {
    let form = form_or_default(form);
    let token = form.csrf_token.clone();
    let accounts = state.accounts.clone();
    page(
        &state,
        Input::post(&state, &headers, token),
        move |_, ctx, _| {
            let Some(me) = ctx.user.clone() else {
                return to_login(&user_href(&name));
            };
            if !me.is_approver() {
                return Err(UserError::NotApprover.into());
            }
            let action = user_action_of(&form, &name)
                .map_err(|text| PageError::refused(StatusCode::BAD_REQUEST, "Not done", text))?;
            accounts.administer_user(&me, &name, action)?;
            if action == UserAction::Block && me.username == name {
                // Blocking oneself ends one's own session.
                return Page::redirect("/tests");
            }
            let code = match action {
                UserAction::Accept => "accepted",
                UserAction::Block => "blocked",
                UserAction::Unblock => "unblocked",
                UserAction::Reject => return Page::redirect("/user_management?done=rejected"),
            };
            Page::redirect(Href::new(user_href(&name)).param("done", code).build())
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user() -> User {
        User {
            id: "1".into(),
            username: "bob".into(),
            password: None,
            password_hash: None,
            registration_time: crate::rundb::model::Date::now(),
            pending: false,
            blocked: false,
            email: "bob@example.org".into(),
            groups: vec![],
            tests_repo: String::new(),
            machine_limit: 16,
            extra: Default::default(),
        }
    }

    fn form(password: &str, password2: &str, email: &str, repo: &str) -> ProfileForm {
        ProfileForm {
            user: Some("bob".into()),
            email: email.into(),
            old_password: "x".into(),
            password: password.into(),
            password2: password2.into(),
            tests_repo: repo.into(),
            csrf_token: None,
        }
    }

    #[test]
    fn profile_checks_in_order() {
        let u = user();
        let ok = profile_change(&u, &form("", "", "bob@example.org", "")).expect("ok");
        assert!(ok.new_password.is_none());
        let strong = "violet otter juggles nine lamps";
        let ok = profile_change(&u, &form(strong, strong, "new@example.org", "")).expect("ok");
        assert_eq!(ok.new_password.as_deref(), Some(strong));
        assert_eq!(ok.email, "new@example.org");
        assert_eq!(
            profile_change(&u, &form(strong, "other", "", "")).unwrap_err(),
            "Error! Matching verify password required"
        );
        assert!(
            profile_change(&u, &form("bob12345", "bob12345", "", ""))
                .unwrap_err()
                .starts_with("Error! Weak password")
        );
        assert!(
            profile_change(&u, &form("", "", "", "https://gitlab.com/a/b"))
                .unwrap_err()
                .starts_with("Error! Invalid test repo")
        );
        assert!(
            profile_change(&u, &form("", "", "not-an-email", ""))
                .unwrap_err()
                .starts_with("Error! Invalid email")
        );
    }

    #[test]
    fn user_actions() {
        let f = |user: Option<&str>, blocked: Option<&str>, pending: Option<&str>| UserActionForm {
            user: user.map(String::from),
            blocked: blocked.map(String::from),
            pending: pending.map(String::from),
            csrf_token: None,
        };
        assert_eq!(
            user_action_of(&f(Some("a"), Some("1"), None), "a"),
            Ok(UserAction::Block)
        );
        assert_eq!(
            user_action_of(&f(None, Some("0"), None), "a"),
            Ok(UserAction::Unblock)
        );
        assert_eq!(
            user_action_of(&f(None, None, Some("0")), "a"),
            Ok(UserAction::Accept)
        );
        assert_eq!(
            user_action_of(&f(None, None, Some("1")), "a"),
            Ok(UserAction::Reject)
        );
        assert!(user_action_of(&f(Some("b"), Some("1"), None), "a").is_err());
        assert!(user_action_of(&f(None, Some("yes"), None), "a").is_err());
        assert!(user_action_of(&f(None, None, None), "a").is_err());
    }

    #[test]
    fn labels() {
        assert_eq!(
            repo_label("https://github.com/bob/Stockfish/"),
            "bob/Stockfish"
        );
        assert_eq!(repo_label("https://evil.org/x"), "");
        let mut u = user();
        assert_eq!(groups_label(&u), "No group");
        u.groups = vec!["group:approvers".into()];
        assert_eq!(groups_label(&u), "approvers");
    }
}

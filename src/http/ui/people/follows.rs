//! Following runs: `POST /tests/follow` and `POST /tests/unfollow` (form fields `run` and
//! `csrf_token`, optional `back`: the same-site path to return to, else the run's page), the
//! run page's and the dashboard's buttons; the profile's list of follows and its feed URL
//! (`POST /notifications/feed`, `action=new|revoke`).
//!
//! Each goes through [`page`] (session and CSRF token checked in the pool first); an
//! anonymous visitor goes to `/login`. The ledger keeps the follows (`ledger/follows.rs`)
//! and enforces nothing but the cap ([`MAX_FOLLOWS`]): a run that does not exist cannot be
//! followed (404), one followed already is left as it is.
//! Must not: read the action log (that is `notices.rs`), or change a run.

use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use crate::http::run_id::RunId;
use crate::http::state::AppState;
use crate::http::ui::kit::url::{NO_PUBLIC_URL, outside_link, same_site_path};
use crate::http::ui::kit::{
    Flash, Input, Layout, OrInternal, Page, PageError, form_or_default, page,
};
use crate::ledger::{Follow, MAX_FOLLOWS};

/// The follow and unfollow form.
#[derive(Deserialize, Default)]
pub struct FollowForm {
    #[serde(default)]
    run: String,
    #[serde(default)]
    back: Option<String>,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// Where to go after a follow or an unfollow: `back` if it is a same-site path, else the
/// run's page.
fn back_to(back: Option<&str>, run: &str) -> String {
    back.and_then(same_site_path)
        .unwrap_or_else(|| format!("/tests/view/{run}"))
}

/// The refusal past the cap.
fn too_many() -> PageError {
    PageError::refused(
        StatusCode::BAD_REQUEST,
        "Too many follows",
        format!(
            "You follow {MAX_FOLLOWS} runs, the most one account may follow. Unfollow some (your profile lists them) and try again."
        ),
    )
}

/// `POST /tests/follow`: the user follows the run from now on.
pub async fn follow(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<FollowForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    let ledger = state.ledger.clone();
    let input = Input::post(&state, &headers, f.csrf_token.clone());
    page(&state, input, move |db, ctx, _| {
        let Some(user) = ctx.user.clone() else {
            return Page::redirect("/login");
        };
        let id = f.run.parse::<RunId>()?;
        let run = db
            .run_head(id.as_str())
            .or_internal("follow: run")?
            .ok_or(PageError::NotFound)?;
        match ledger
            .follow(&user.username, &run.id, &run.args.new_tag)
            .or_internal("follow")?
        {
            Follow::Added | Follow::Already => {
                Page::redirect(back_to(f.back.as_deref(), id.as_str()))
            }
            Follow::Full => Err(too_many()),
        }
    })
    .await
}

/// `POST /tests/unfollow`: the user stops following the run (a run not followed is fine).
pub async fn unfollow(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<FollowForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    let ledger = state.ledger.clone();
    let input = Input::post(&state, &headers, f.csrf_token.clone());
    page(&state, input, move |_, ctx, _| {
        let Some(user) = ctx.user.clone() else {
            return Page::redirect("/login");
        };
        let id = f.run.parse::<RunId>()?;
        ledger
            .unfollow(&user.username, id.as_str())
            .or_internal("unfollow")?;
        Page::redirect(back_to(f.back.as_deref(), id.as_str()))
    })
    .await
}

/// The page that shows a new feed URL, once.
#[derive(Template)]
#[template(path = "feed_url.html")]
pub struct FeedUrlPage {
    pub l: Layout,
    /// The whole URL (a path without `public_url`), or empty when the feed was revoked.
    pub url: String,
    /// `url` is a whole URL (`public_url` is set), to paste into a reader as it is.
    pub whole: bool,
}

/// The feed form.
#[derive(Deserialize, Default)]
pub struct FeedForm {
    #[serde(default)]
    action: String,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /notifications/feed`: `action=new` makes a new feed URL (the old one stops working) and shows
/// it once; `action=revoke` revokes the feed URL.
pub async fn feed_action(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<FeedForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    let ledger = state.ledger.clone();
    let accounts = state.accounts.clone();
    let base = state.config.public_base().map(str::to_string);
    let input = Input::post(&state, &headers, f.csrf_token.clone());
    page(&state, input, move |_, ctx, _| {
        let Some(user) = ctx.user.clone() else {
            return Page::redirect("/login");
        };
        match f.action.as_str() {
            "new" => {
                let Some(token) = accounts.feed_create(&user).or_internal("new feed")? else {
                    return Err(PageError::refused(
                        StatusCode::CONFLICT,
                        "Not done",
                        "Your password changed meanwhile: log in again to make a feed URL.",
                    ));
                };
                let mut l = Layout::new(ctx, "Your feed URL").flash(Flash::info(
                    "A new feed URL: copy it now, it is not shown again. Any older one no longer works.",
                ));
                if base.is_none() {
                    l = l.flash(Flash::warning(NO_PUBLIC_URL));
                }
                Page::ok(&FeedUrlPage {
                    l,
                    url: outside_link(base.as_deref(), &format!("/feeds/{token}.atom")),
                    whole: base.is_some(),
                })
            }
            "revoke" => {
                ledger
                    .revoke_feed(&user.username)
                    .or_internal("revoke feed")?;
                Page::ok(&FeedUrlPage {
                    l: Layout::new(ctx, "Feed revoked")
                        .flash(Flash::info("Your feed URL was revoked: it now answers 404.")),
                    url: String::new(),
                    whole: false,
                })
            }
            _ => Err(PageError::refused(
                StatusCode::BAD_REQUEST,
                "Not done",
                "Unknown feed action",
            )),
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn back_is_a_same_site_path_or_the_run() {
        let run = "0123456789abcdef01234567";
        assert_eq!(back_to(Some("/tests?x=1"), run), "/tests?x=1");
        for bad in [
            "//evil.example",
            "https://evil.example",
            "/\\evil",
            "",
            "/\t/evil.example",
        ] {
            assert_eq!(
                back_to(Some(bad), run),
                format!("/tests/view/{run}"),
                "{bad}"
            );
        }
        assert_eq!(back_to(None, run), format!("/tests/view/{run}"));
    }
}

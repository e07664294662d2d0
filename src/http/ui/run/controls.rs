//! The run controls: `POST /tests/approve`, `/tests/stop`, `/tests/purge`, `/tests/delete`
//! (form field `run-id`) and `/tests/modify` (fields `run`, `num-games`, `priority`,
//! `throughput`, `auto_purge`, `info`), the run page's buttons and form.
//!
//! Each goes through [`page`]: the session and the CSRF token are checked in the pool before
//! anything else (a bad token is a 403 and changes nothing); then a secondary instance answers
//! 503, an anonymous visitor goes to `/login`, and the domain (`RunDb::approve_run`,
//! `stop_run_by_user`, `purge_run`, `delete_run`, `modify_run`) decides who may do what and
//! logs the action. Success → `/tests?done=<what>` (the dashboard shows [`done_message`]);
//! a refusal is a page with the domain's refusal in the API edge's words (`http::error`: 403,
//! 400 or 404), never a 500.
//! Stop and delete cannot be undone by a click, so without `confirm=yes` they only ask: the
//! domain's refusals are checked as for the real thing (`RunDb::check_stop`/`check_delete`),
//! then a page names the run and posts the same request with `confirm=yes` (no JavaScript).
//! Must not: decide permissions itself (the domain does, for the JSON API too).

use std::sync::Arc;

use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use askama::Template;

use super::page::page_title;
use crate::accounts::User;
use crate::http::error::ApiError;
use crate::http::run_id::RunId;
use crate::http::state::AppState;
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::{Input, Layout, Page, PageError, PageResult, form_or_default, page};
use crate::rundb::{Approval, RunChanges, RunDb, RunDbError};

/// The `run-id` form of approve, stop, purge and delete.
#[derive(Deserialize, Default)]
pub struct RunIdForm {
    #[serde(default, rename = "run-id")]
    run_id: String,
    #[serde(default)]
    csrf_token: Option<String>,
    /// `yes` when the person confirmed a stop or a delete.
    #[serde(default)]
    confirm: Option<String>,
}

impl RunIdForm {
    fn confirmed(&self) -> bool {
        self.confirm.as_deref() == Some("yes")
    }
}

/// The page that asks before a stop or a delete.
#[derive(Template)]
#[template(path = "confirm.html")]
struct ConfirmPage {
    l: Layout,
    question: &'static str,
    id: String,
    /// The run's title, as its page heads it.
    name: String,
    /// What will happen, in a sentence.
    effect: &'static str,
    action: &'static str,
    button: &'static str,
}

/// The modify form (Fishtest's field names).
#[derive(Deserialize, Default)]
pub struct ModifyForm {
    #[serde(default)]
    run: String,
    #[serde(default, rename = "num-games")]
    num_games: Option<String>,
    #[serde(default)]
    priority: Option<String>,
    #[serde(default)]
    throughput: Option<String>,
    /// The checkbox: present means on.
    #[serde(default)]
    auto_purge: Option<String>,
    #[serde(default)]
    info: Option<String>,
    /// The sliding window: empty for none; absent leaves it as it is.
    #[serde(default)]
    max_active_tasks: Option<String>,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// A control's refusal: the domain's message on the error page, a run that does not exist
/// named as such (with the domain's words) rather than the plain 404 page.
fn refusal(e: RunDbError) -> PageError {
    match ApiError::from(e) {
        ApiError::NotFound(m) => PageError::refused(StatusCode::NOT_FOUND, "No such run", m),
        e => e.into(),
    }
}

/// Runs one control: token (in [`page`]), primary, login, then `act`, whose `Ok` names the
/// `?done=` code.
async fn control<F>(
    state: Arc<AppState>,
    headers: HeaderMap,
    token: Option<String>,
    act: F,
) -> Response
where
    F: FnOnce(&RunDb, &User) -> Result<String, PageError> + Send + 'static,
{
    asking(state, headers, token, move |db, _, user| {
        let code = act(db, user)?;
        Page::redirect(format!("/tests?done={code}"))
    })
    .await
}

/// As [`control`], for a control that may answer a page of its own (the confirmation).
async fn asking<F>(
    state: Arc<AppState>,
    headers: HeaderMap,
    token: Option<String>,
    act: F,
) -> Response
where
    F: FnOnce(&RunDb, &Ctx, &User) -> PageResult + Send + 'static,
{
    let primary = state.primary;
    page(
        &state,
        Input::post(&state, &headers, token),
        move |db, ctx, _| {
            if !primary {
                return Err(PageError::NotPrimary);
            }
            let Some(user) = ctx.user.clone() else {
                return Page::redirect("/login");
            };
            act(db, ctx, &user)
        },
    )
    .await
}

/// The confirmation page of `what` on run `f.run_id` once the domain's `check` passed (it
/// gives the run's title).
fn confirm_page(ctx: &Ctx, f: &RunIdForm, what: Confirm, name: String) -> PageResult {
    let (question, effect, action, button) = match what {
        Confirm::Stop => (
            "Stop this run?",
            "it will be finished now: its workers stop playing it and it leaves the active \
             runs. Stopping cannot be undone from this page.",
            "/tests/stop",
            "Stop the run",
        ),
        Confirm::Delete => (
            "Delete this run?",
            "it will be finished (if it is not) and deleted: it leaves every list of runs, \
             though its page can still be read.",
            "/tests/delete",
            "Delete the run",
        ),
    };
    Page::ok(&ConfirmPage {
        l: Layout::new(ctx, question),
        question,
        id: f.run_id.clone(),
        name,
        effect,
        action,
        button,
    })
}

/// Which control a confirmation page asks for.
#[derive(Clone, Copy)]
enum Confirm {
    Stop,
    Delete,
}

/// `POST /tests/approve`: an approver other than the submitter.
pub async fn approve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RunIdForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    let (approved_tx, approved_rx) = tokio::sync::oneshot::channel::<String>();
    let st = state.clone();
    let response = control(state, headers, f.csrf_token, move |db, user| {
        db.approve_run(&f.run_id, user)
            .map(|()| {
                let _ = approved_tx.send(f.run_id.clone());
                if f.run_id.parse::<RunId>().is_ok() {
                    format!("approved&run={}", f.run_id)
                } else {
                    "approved".into()
                }
            })
            .map_err(refusal)
    })
    .await;
    if let Ok(id) = approved_rx.await {
        crate::http::api::runs::mark_master_nets(&st, id);
    }
    response
}

/// `POST /tests/stop`: the owner or an approver finishes an unfinished run, once confirmed.
pub async fn stop(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RunIdForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    let token = f.csrf_token.clone();
    asking(state, headers, token, move |db, ctx, user| {
        if !f.confirmed() {
            let name = db
                .check_stop(&f.run_id, user, page_title)
                .map_err(refusal)?;
            return confirm_page(ctx, &f, Confirm::Stop, name);
        }
        db.stop_run_by_user(&f.run_id, user).map_err(refusal)?;
        Page::redirect(format!("/tests?done=stopped&run={}", f.run_id))
    })
    .await
}

/// `POST /tests/purge`: the owner or an approver purges a finished run's bad workers.
pub async fn purge(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RunIdForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    control(state, headers, f.csrf_token, move |db, user| {
        db.purge_run(&f.run_id, user)
            .map(|outcome| {
                if outcome.purged.is_empty() {
                    "purged-none".into()
                } else {
                    format!("purged&run={}", f.run_id)
                }
            })
            .map_err(refusal)
    })
    .await
}

/// `POST /tests/delete`: the owner or an approver deletes a run, once confirmed.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RunIdForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    let token = f.csrf_token.clone();
    asking(state, headers, token, move |db, ctx, user| {
        if !f.confirmed() {
            let name = db
                .check_delete(&f.run_id, user, page_title)
                .map_err(refusal)?;
            return confirm_page(ctx, &f, Confirm::Delete, name);
        }
        db.delete_run(&f.run_id, user).map_err(refusal)?;
        Page::redirect(format!("/tests?done=deleted&run={}", f.run_id))
    })
    .await
}

/// An integer as the modify form gives it (a leading `-` allowed).
fn integer(v: Option<&str>) -> Option<i64> {
    v.map(str::trim)?.parse().ok()
}

/// The modify form's values, checked as Fishtest does before the domain's checks.
fn changes(f: &ModifyForm) -> Result<RunChanges, String> {
    let games = f.num_games.as_deref().map(str::trim).unwrap_or_default();
    if games.is_empty() {
        return Err("Unable to modify with no number of games!".into());
    }
    let bad = || "Bad values!".to_string();
    Ok(RunChanges {
        num_games: integer(Some(games)).ok_or_else(bad)?,
        priority: integer(f.priority.as_deref()).ok_or_else(bad)?,
        throughput: integer(f.throughput.as_deref()).ok_or_else(bad)?,
        auto_purge: f.auto_purge.is_some(),
        info: f.info.clone(),
        max_active_tasks: match f.max_active_tasks.as_deref().map(str::trim) {
            None => None,
            Some("") => Some(None),
            Some(v) => Some(Some(v.parse().map_err(|_| {
                "max_active_tasks must be a whole number or empty".to_string()
            })?)),
        },
    })
}

/// `POST /tests/modify`: the owner or an approver changes games, priority, throughput,
/// auto-purge (and the owner the info).
pub async fn modify(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<ModifyForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    let token = f.csrf_token.clone();
    control(state, headers, token, move |db, user| {
        // The form's own refusals read as the domain's (400 "Not done").
        let c = changes(&f).map_err(|m| PageError::from(ApiError::BadRequest(m)))?;
        let outcome = db.modify_run(f.run.trim(), c, user).map_err(refusal)?;
        Ok(match outcome.approval {
            Approval::Approved => "modified",
            Approval::Unapproved => "modified-unapproved",
            Approval::Pending => "modified-pending",
        }
        .into())
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::ui::kit::done::done_message;

    #[test]
    fn modify_values() {
        let form = |games: Option<&str>, priority: &str| ModifyForm {
            run: "r".into(),
            num_games: games.map(str::to_string),
            priority: Some(priority.into()),
            throughput: Some("100".into()),
            auto_purge: None,
            info: None,
            max_active_tasks: None,
            csrf_token: None,
        };
        assert_eq!(
            changes(&form(None, "0")).unwrap_err(),
            "Unable to modify with no number of games!"
        );
        assert_eq!(changes(&form(Some("x"), "0")).unwrap_err(), "Bad values!");
        assert_eq!(
            changes(&form(Some("1000"), "1.5")).unwrap_err(),
            "Bad values!"
        );
        let c = changes(&form(Some(" 2000 "), "-1")).unwrap();
        assert_eq!((c.num_games, c.priority, c.throughput), (2000, -1, 100));
        assert!(!c.auto_purge);
        let text = |code: &str, run: Option<&str>| done_message(code, run).map(|d| d.text());
        assert_eq!(text("stopped", None).as_deref(), Some("Stopped run"));
        let id = "0123456789abcdef01234567";
        assert_eq!(
            text("stopped", Some(id)).as_deref(),
            Some("Run 0123456789abcdef01234567 stopped")
        );
        assert_eq!(done_message("<script>", None), None);
        let id = "0123456789abcdef01234567";
        assert_eq!(
            text("approved", Some(id)),
            Some(format!("Run {id} approved"))
        );
        assert_eq!(
            done_message("approved", Some(id)).and_then(|d| d.run),
            Some(id.to_string())
        );
        assert_eq!(
            text("approved", Some("<b>")).as_deref(),
            Some("Run approved")
        );
        assert_eq!(
            done_message("approved", Some("<b>")).and_then(|d| d.run),
            None
        );
    }
}

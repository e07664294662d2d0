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
//! Must not: decide permissions itself (the domain does, for the JSON API too).

use std::sync::Arc;

use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use super::kit::{Input, Page, PageError, form_or_default, page};
use crate::accounts::User;
use crate::http::error::ApiError;
use crate::http::run_id::RunId;
use crate::http::state::AppState;
use crate::rundb::{Approval, RunChanges, RunDb, RunDbError};

/// The `run-id` form of approve, stop, purge and delete.
#[derive(Deserialize, Default)]
pub struct RunIdForm {
    #[serde(default, rename = "run-id")]
    run_id: String,
    #[serde(default)]
    csrf_token: Option<String>,
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

/// The message the dashboard flashes for `?done=<code>` (and `&run=<id>`) after a control
/// succeeded; `None` for an unknown code (a link cannot put words on the page).
pub fn done_message(code: &str, run: Option<&str>) -> Option<String> {
    if code == "approved" {
        return Some(match run.and_then(|id| id.parse::<RunId>().ok()) {
            Some(id) => format!("Run {id} approved"),
            None => "Run approved".into(),
        });
    }
    Some(
        match code {
            "stopped" => "Stopped run",
            "purged" => "Purged run",
            "purged-none" => "No bad workers",
            "deleted" => "Deleted run",
            "modified" => "The test was successfully modified!",
            "modified-unapproved" => {
                "The test was successfully modified but it will have to be reapproved..."
            }
            "modified-pending" => "The test was successfully modified. Please wait for approval.",
            _ => return None,
        }
        .to_string(),
    )
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
            let code = act(db, &user)?;
            Page::redirect(format!("/tests?done={code}"))
        },
    )
    .await
}

/// `POST /tests/approve`: an approver other than the submitter.
pub async fn approve(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RunIdForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    control(state, headers, f.csrf_token, move |db, user| {
        db.approve_run(&f.run_id, user)
            .map(|()| {
                if f.run_id.parse::<RunId>().is_ok() {
                    format!("approved&run={}", f.run_id)
                } else {
                    "approved".into()
                }
            })
            .map_err(refusal)
    })
    .await
}

/// `POST /tests/stop`: the owner or an approver finishes an unfinished run.
pub async fn stop(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RunIdForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    control(state, headers, f.csrf_token, move |db, user| {
        db.stop_run_by_user(&f.run_id, user)
            .map(|_| "stopped".into())
            .map_err(refusal)
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
                    "purged".into()
                }
            })
            .map_err(refusal)
    })
    .await
}

/// `POST /tests/delete`: the owner or an approver deletes a run.
pub async fn delete(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RunIdForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    control(state, headers, f.csrf_token, move |db, user| {
        db.delete_run(&f.run_id, user)
            .map(|()| "deleted".into())
            .map_err(refusal)
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
        assert_eq!(
            done_message("stopped", None).as_deref(),
            Some("Stopped run")
        );
        assert_eq!(done_message("<script>", None), None);
        let id = "0123456789abcdef01234567";
        assert_eq!(
            done_message("approved", Some(id)),
            Some(format!("Run {id} approved"))
        );
        assert_eq!(
            done_message("approved", Some("<b>")).as_deref(),
            Some("Run approved")
        );
    }
}

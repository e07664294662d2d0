//! The new-test form's test groups (issue 39, docs/test-groups.md): a `takes` field with
//! several branches, one per line (the test branch, if typed and not among them, is the
//! first take). Each take is resolved through GitHub as a single submission is, checked as
//! one is (nets uploaded, every argument), and only then are the runs and the group created
//! (`Groups::create`); the browser goes to the group's page. Any problem brings the form back
//! with the take it concerns named, and nothing is created.
//!
//! Must not: hold group rules (`groups`), or create anything before every take is checked.

use std::sync::Arc;

use axum::response::Response;

use super::kit::{Flash, Page, PageError};
use super::session::{CookieKeys, Ctx};
use super::submit::form_again;
use super::submit_args::to_args;
use super::submit_form::RunForm;
use super::submit_github;
use crate::groups::{MAX_TAKES, MIN_TAKES};
use crate::http::error::ApiError;
use crate::http::state::AppState;

/// The takes' branches: the `takes` lines, after the test branch if it is not among them.
pub fn branches(f: &RunForm) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let first = f.test_branch.trim();
    let lines = f.takes.lines().map(str::trim).filter(|l| !l.is_empty());
    for b in std::iter::once(first)
        .filter(|b| !b.is_empty())
        .chain(lines)
    {
        if !out.iter().any(|o| o == b) {
            out.push(b.to_string());
        }
    }
    out
}

/// `POST /tests/run` with `takes`: the group submitted (see the module docs). `ctx` is the
/// opened page (its token checked).
pub async fn submit_group(
    state: &Arc<AppState>,
    keys: CookieKeys,
    ctx: Ctx,
    f: RunForm,
) -> Response {
    let names = branches(&f);
    let github = state.github.clone();
    let mut problem: Option<String> = None;
    let mut forms = Vec::with_capacity(names.len());
    if !(MIN_TAKES..=MAX_TAKES).contains(&names.len()) {
        problem = Some(format!(
            "Takes: a group has {MIN_TAKES} to {MAX_TAKES} takes (one branch a line), not {}",
            names.len()
        ));
    } else if !submit_github::needs_github(&f) {
        problem = Some(
            "Takes: a group is submitted by branch names; leave the commits under \
             \"Advanced\" empty"
                .into(),
        );
    } else if let Some(user) = &ctx.user {
        for (i, name) in names.iter().enumerate() {
            let mut take = f.clone();
            take.takes.clear();
            take.test_branch = name.clone();
            match github
                .resolve_submission(&submit_github::wanted(&take, user))
                .await
            {
                Ok(r) => {
                    submit_github::apply(&mut take, &r);
                    forms.push(take);
                }
                Err(p) => {
                    let words: Vec<String> = p.iter().map(|p| p.message.clone()).collect();
                    problem = Some(format!("Take {} ({name}): {}", i + 1, words.join("; ")));
                    break;
                }
            }
        }
    }
    let primary = state.primary;
    let nets = state.nets.clone();
    let groups = state.groups.clone();
    let (created_tx, created_rx) = tokio::sync::oneshot::channel::<Vec<(String, RunForm)>>();
    let response = super::kit::continue_page(state, keys, ctx, move |db, ctx, _| {
        if !primary {
            return Err(PageError::NotPrimary);
        }
        let Some(user) = ctx.user.clone() else {
            return Page::redirect("/login?next=/tests/run");
        };
        let again = |message: String| {
            let flashes = vec![
                Flash::error("The test group was not submitted: see the message below."),
                Flash::error(message),
            ];
            form_again(db, ctx, f.clone(), flashes, &github)
        };
        if let Some(p) = problem {
            return again(p);
        }
        let mut all = Vec::with_capacity(forms.len());
        for (i, take) in forms.iter().enumerate() {
            let missing = submit_github::missing_nets(take, |n| nets.known(n).unwrap_or(false));
            if let Some(m) = missing.values().next() {
                return again(format!("Take {} ({}): {m}", i + 1, take.test_branch));
            }
            match to_args(take) {
                Ok(args) => all.push(args),
                Err(errors) => {
                    let words: Vec<String> =
                        errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                    return again(format!(
                        "Take {} ({}): {}",
                        i + 1,
                        take.test_branch,
                        words.join("; ")
                    ));
                }
            }
        }
        match groups.create(all, &user) {
            Ok((group_id, run_ids)) => {
                tracing::info!(group = %group_id, user = %user.username, "test group submitted");
                let _ = created_tx.send(run_ids.into_iter().zip(forms).collect());
                Page::redirect(format!("/tests/group/{group_id}"))
            }
            Err(e) => match ApiError::from(e) {
                ApiError::PrimaryRequired => Err(PageError::NotPrimary),
                ApiError::BadRequest(m) | ApiError::Unauthorized(m) | ApiError::NotFound(m) => {
                    again(m)
                }
                e => Err(PageError::internal("test group not submitted", e)),
            },
        }
    })
    .await;
    if let Ok(created) = created_rx.await {
        for (id, take) in created {
            state.github.keep_diff_in_background(
                id,
                take.tests_repo.trim().to_string(),
                take.resolved_base.trim().to_string(),
                take.resolved_new.trim().to_string(),
            );
        }
    }
    response
}

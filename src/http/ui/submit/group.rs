//! The new-test form's test groups (issue 39, docs/test-groups.md): a `takes` field with
//! several branches, one per line (the test branch, if typed and not among them, is the
//! first take). Each take is resolved through GitHub as a single submission is ([`resolve`]),
//! checked as one is (nets uploaded, every argument), and only then are the runs and the
//! group created ([`create`]). The form's handler (`submit.rs`) runs both and brings the form
//! back with the take a problem concerns named, at the field the problem is about.
//! The typed test bench and test nets are not copied to the takes: each take's bench and nets
//! are read from its own commit (the form says so at those fields).
//!
//! Must not: hold group rules (`groups`), create anything before every take is checked, or
//! render the form (the handler does).

use super::args::{form_field, to_args};
use super::form::RunForm;
use super::github as submit_github;
use crate::accounts::User;
use crate::github::Github;
use crate::groups::{GroupError, Groups, MAX_TAKES, MIN_TAKES};
use crate::http::error::ApiError;
use crate::http::ui::kit::PageError;
use crate::nets::Nets;

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

/// A problem for the developer: the form field it shows at (`takes` when it is about the
/// group as a whole) and the words.
pub type Problem = (&'static str, String);

/// Each take's form, resolved through GitHub (awaited on the event loop, holding nothing);
/// `Err`: what to tell the developer.
pub async fn resolve(github: &Github, f: &RunForm, user: &User) -> Result<Vec<RunForm>, Problem> {
    let names = branches(f);
    if !(MIN_TAKES..=MAX_TAKES).contains(&names.len()) {
        return Err((
            "takes",
            format!(
                "Takes: a group has {MIN_TAKES} to {MAX_TAKES} takes (one branch a line), not {}",
                names.len()
            ),
        ));
    }
    if !submit_github::needs_github(f) {
        return Err((
            "takes",
            "Takes: a group is submitted by branch names; leave the commits under \
             \"Advanced\" empty"
                .into(),
        ));
    }
    let mut forms = Vec::with_capacity(names.len());
    for (i, name) in names.iter().enumerate() {
        let mut take = f.clone();
        take.takes.clear();
        // Each take's bench and nets are its own commit's, never the typed ones.
        take.test_signature.clear();
        take.new_nets.clear();
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
                return Err((
                    "takes",
                    format!("Take {} ({name}): {}", i + 1, words.join("; ")),
                ));
            }
        }
    }
    Ok(forms)
}

/// A group created: its id, and each run with its take's form.
pub type Created = (String, Vec<(String, RunForm)>);

/// The resolved takes checked and, if every one passes, the group created (blocking: in the
/// page job). `Ok(Err(_))`: what to tell the developer (nothing created); `Ok(Ok(_))`: the
/// group's id and each run with its take's form.
pub fn create(
    groups: &Groups,
    nets: &Nets,
    forms: Vec<RunForm>,
    user: &User,
) -> Result<Result<Created, Problem>, PageError> {
    let mut all = Vec::with_capacity(forms.len());
    for (i, take) in forms.iter().enumerate() {
        let missing = submit_github::missing_nets(take, |n| nets.known(n).unwrap_or(false));
        if let Some(m) = missing.values().next() {
            return Ok(Err((
                "takes",
                format!("Take {} ({}): {m}", i + 1, take.test_branch),
            )));
        }
        match to_args(take) {
            Ok(args) => all.push(args),
            Err(errors) => {
                let words: Vec<String> = errors.iter().map(|(k, v)| format!("{k}: {v}")).collect();
                let at = errors.keys().next().map_or("takes", |k| form_field(k));
                return Ok(Err((
                    if at.is_empty() { "takes" } else { at },
                    format!(
                        "Take {} ({}): {}",
                        i + 1,
                        take.test_branch,
                        words.join("; ")
                    ),
                )));
            }
        }
    }
    match groups.create(all, user) {
        Ok((group_id, run_ids)) => {
            tracing::info!(group = %group_id, user = %user.username, "test group submitted");
            Ok(Ok((group_id, run_ids.into_iter().zip(forms).collect())))
        }
        Err(GroupError::Take { take, error }) => {
            let branch = forms
                .get(take.saturating_sub(1))
                .map(|f| f.test_branch.clone())
                .unwrap_or_default();
            let at = match form_field(error.field) {
                "" => "takes",
                f => f,
            };
            Ok(Err((
                at,
                format!("Take {take} ({branch}): {}", error.message),
            )))
        }
        Err(e) => match ApiError::from(e) {
            ApiError::PrimaryRequired => Err(PageError::NotPrimary),
            ApiError::BadRequest(m) | ApiError::Unauthorized(m) | ApiError::NotFound(m) => {
                Ok(Err(("takes", m)))
            }
            e => Err(PageError::internal("test group not submitted", e)),
        },
    }
}

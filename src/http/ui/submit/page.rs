//! Submitting tests: `GET /tests/run` (the new-test form: its defaults, a preset with
//! `?preset=<key>`, or a rerun of run `?id=<run>` pre-filled from it) and `POST /tests/run`
//! (create the run).
//!
//! Owns: the page (the selects, the preset links) and the two handlers; each refusal is
//! shown next to its field with the user's input kept; a test whose nets resolve to none on
//! a side comes back with a warning there and is created only with the "Create without
//! nets" button (`confirm_no_nets=1`). The form's values are
//! `submit_form.rs`'s, reading a posted form into run arguments `submit_args.rs`'s.
//! Must not: check a run's arguments itself. The run is created by `RunDb::submit_run`, the
//! same code as `/api/create_run`; its refusals name the argument, mapped to a form field.

use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::Response;
use serde::Deserialize;

use super::args::{FieldErrors, form_field, to_args};
use super::form::{BOUNDS, PRESETS, RunForm, THROUGHPUTS};
use super::github as submit_github;
use super::group as submit_group;
use crate::github::Github;
use crate::http::error::ApiError;
use crate::http::run_id::RunId;
use crate::http::state::AppState;
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::{
    Flash, Href, Input, Layout, OrInternal, Page, PageError, PageResult, continue_page,
    form_or_default, open_page, page,
};
use crate::rundb::{RunDb, SubmitError};

/// One option of a select.
pub struct Choice {
    pub value: String,
    pub label: String,
    pub selected: bool,
}

/// One preset link.
pub struct PresetLink {
    pub key: &'static str,
    pub href: String,
    pub label: &'static str,
    pub active: bool,
}

#[derive(Template)]
#[template(path = "tests_run.html")]
pub struct RunFormPage {
    pub l: Layout,
    pub f: RunForm,
    pub errors: FieldErrors,
    /// Warnings by field (nets that resolved to none), with the "Create without nets" button.
    pub warnings: FieldErrors,
    /// A rerun: the commits are fixed (read-only).
    pub rerun: bool,
    /// The "advanced" fields shown unfolded (GitHub failed, or they hold values).
    pub advanced_open: bool,
    /// A refusal names nets that were never uploaded (the page links `/upload`).
    pub missing_nets: bool,
    /// Official master as last refreshed: its subject and bench (the base bench's default).
    pub master: Option<(String, String)>,
    pub presets: Vec<PresetLink>,
    pub books: Vec<Choice>,
    pub bounds: Vec<Choice>,
    pub throughputs: Vec<Choice>,
    pub compilers: Vec<Choice>,
}

fn choices<'a>(items: impl IntoIterator<Item = (&'a str, &'a str)>, current: &str) -> Vec<Choice> {
    let mut out: Vec<Choice> = items
        .into_iter()
        .map(|(value, label)| Choice {
            value: value.to_string(),
            label: label.to_string(),
            selected: value == current,
        })
        .collect();
    // A value from elsewhere (a rerun, another client) stays selectable.
    if !current.is_empty() && !out.iter().any(|c| c.selected) {
        out.push(Choice {
            value: current.to_string(),
            label: current.to_string(),
            selected: true,
        });
    }
    out
}

/// What the page shows beside the form's values and refusals.
#[derive(Default, Clone)]
pub struct Extras {
    pub advanced_open: bool,
    pub missing_nets: bool,
    pub master: Option<(String, String)>,
    /// Warnings by field: a side whose nets resolved to none (confirmed by the
    /// "Create without nets" button, `confirm_no_nets=1`).
    pub warnings: FieldErrors,
}

impl Extras {
    fn of(github: &Github) -> Extras {
        Extras {
            master: github.master().map(|m| {
                (
                    m.subject.clone(),
                    m.bench.map(|b| b.to_string()).unwrap_or_default(),
                )
            }),
            ..Extras::default()
        }
    }
}

fn render(
    db: &RunDb,
    ctx: &Ctx,
    f: RunForm,
    errors: FieldErrors,
    flashes: Vec<Flash>,
    extras: Extras,
) -> PageResult {
    let rerun = !f.rescheduled_from.is_empty();
    let title = if rerun { "Reschedule test" } else { "New test" };
    let mut l = Layout::new(ctx, title);
    for flash in flashes {
        l = l.flash(flash);
    }
    let base = if rerun {
        Href::new("/tests/run").path_param("id", &f.rescheduled_from)
    } else {
        Href::new("/tests/run")
    };
    let active = f.preset();
    let presets = PRESETS
        .iter()
        .map(|p| PresetLink {
            key: p.key,
            href: base.clone().param("preset", p.key).build(),
            label: p.label,
            active: active == Some(p.key),
        })
        .collect();
    let books = db.books();
    let mut names: Vec<&str> = books.0.keys().map(String::as_str).collect();
    names.sort_unstable();
    let books = choices(names.iter().map(|n| (*n, *n)), f.book.trim());
    let bounds = choices(
        BOUNDS
            .iter()
            .map(|b| (b.0, b.1))
            .chain([("custom", "Custom bounds…")]),
        f.bounds.trim(),
    );
    let throughputs = choices(THROUGHPUTS.iter().map(|t| (*t, *t)), f.throughput.trim());
    let compilers = choices([("clang++", "clang++"), ("g++", "g++")], f.compiler.trim());
    let advanced_open = extras.advanced_open
        || !extras.warnings.is_empty()
        || [&f.resolved_new, &f.resolved_base, &f.new_nets, &f.base_nets]
            .iter()
            .any(|v| !v.trim().is_empty())
        || [
            "resolved_new",
            "resolved_base",
            "msg_new",
            "msg_base",
            "new_nets",
            "base_nets",
        ]
        .iter()
        .any(|k| errors.contains_key(*k));
    let page = RunFormPage {
        l,
        errors,
        warnings: extras.warnings,
        rerun,
        advanced_open,
        missing_nets: extras.missing_nets,
        master: extras.master,
        presets,
        books,
        bounds,
        throughputs,
        compilers,
        f,
    };
    Page::ok(&page)
}

/// `POST /tests/run` with `takes`: a test group (issue 39, `submit_group.rs`): every take
/// resolved and checked, then the runs and the group created and the browser sent to the
/// group's page; or the form back as typed with the problem, the take named, nothing created.
async fn submit_takes(
    state: &Arc<AppState>,
    keys: crate::http::ui::kit::session::CookieKeys,
    ctx: Ctx,
    f: RunForm,
) -> Response {
    let resolved = match &ctx.user {
        Some(user) => submit_group::resolve(&state.github, &f, user).await,
        None => Err(("takes", String::new())),
    };
    let (primary, github) = (state.primary, state.github.clone());
    let (nets, groups) = (state.nets.clone(), state.groups.clone());
    let (created_tx, created_rx) = tokio::sync::oneshot::channel::<Vec<(String, RunForm)>>();
    let response = continue_page(state, keys, ctx, move |db, ctx, _| {
        if !primary {
            return Err(PageError::NotPrimary);
        }
        let Some(user) = ctx.user.clone() else {
            return login_first("/tests/run");
        };
        let outcome = match resolved {
            Ok(forms) => submit_group::create(&groups, &nets, forms, &user)?,
            Err(problem) => Err(problem),
        };
        match outcome {
            Ok((group_id, created)) => {
                let _ = created_tx.send(created);
                Page::redirect(format!("/tests/group/{group_id}"))
            }
            Err((field, problem)) => {
                let flashes = vec![
                    Flash::error("The test group was not submitted: see the message below."),
                    Flash::error(problem.clone()),
                ];
                let mut errors = FieldErrors::new();
                errors.insert(field.to_string(), problem);
                render(db, ctx, f, errors, flashes, Extras::of(&github))
            }
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

/// The warnings for the sides whose nets resolved to none, at their fields.
fn no_nets(args: &crate::rundb::create::CreateArgs) -> FieldErrors {
    let mut warnings = FieldErrors::new();
    for (key, nets, side) in [
        ("new_nets", &args.new_nets, "test"),
        ("base_nets", &args.base_nets, "base"),
    ] {
        if nets.is_empty() {
            warnings.insert(
                key.to_string(),
                format!(
                    "No {side} nets: none were given and none could be read from the {side} \
                     commit. Give them here, or create the test without nets."
                ),
            );
        }
    }
    warnings
}

/// The query of `GET /tests/run`.
#[derive(Deserialize, Default)]
pub struct RunQuery {
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    preset: Option<String>,
}

fn login_first(next: &str) -> PageResult {
    Page::redirect(Href::new("/login").path_param("next", next).build())
}

/// `GET /tests/run`: the form (logged-in users), at its defaults, a rerun's values
/// (`?id=`), with a preset applied (`?preset=`).
pub async fn form(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    query: Result<Query<RunQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let q = query.map(|Query(q)| q).unwrap_or_default();
    let rerun = q.id.as_deref().map(str::parse::<RunId>);
    let extras = Extras::of(&state.github);
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let Some(user) = ctx.user.clone() else {
            let mut next = "/tests/run".to_string();
            if let Some(id) = &q.id {
                next = Href::new(next).path_param("id", id).build();
            }
            return login_first(&next);
        };
        let mut f = match rerun {
            None => RunForm::defaults(&user.tests_repo),
            Some(id) => {
                let run = db
                    .get_run(id?.as_str())
                    .or_internal("rerun form")?
                    .ok_or(PageError::NotFound)?;
                RunForm::rerun(&run)
            }
        };
        let mut flashes = Vec::new();
        if let Some(key) = &q.preset {
            match PRESETS.iter().find(|p| p.key == key) {
                Some(p) => f.apply(p),
                None => flashes.push(Flash::error(format!("Unknown preset {key:?}"))),
            }
        }
        render(db, ctx, f, FieldErrors::new(), flashes, extras)
    })
    .await
}

/// `POST /tests/run`: the token (a bad one is a 403 and creates nothing), then a secondary
/// answers 503 and an anonymous visitor goes to `/login`. A submission by branch name is
/// resolved through GitHub (awaited here, between the two page jobs: a network wait that
/// holds no token and no lock), its values written into the form and its nets checked
/// against the uploaded ones; then the run is created through `RunDb::submit_run` and the
/// browser goes to its page, or the form comes back (200) with each problem next to its
/// field and the input kept.
pub async fn submit(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<RunForm>, FormRejection>,
) -> Response {
    // A body that is not this form is an empty one: its missing token refuses it.
    let mut f = form_or_default(form);
    // `master_repo` is the server's to compute (GitHub's fork network), never the client's.
    f.master_repo.clear();
    let token = f.csrf_token.clone();
    let input = Input::post(&state, &headers, token);
    let keys = input.keys.clone();
    let ctx = match open_page(&state, input).await {
        Ok(ctx) => ctx,
        Err(refused) => return refused,
    };
    // Several branches in `takes`: a test group (issue 39, `submit_group.rs`).
    if f.apply_preset.trim().is_empty() && !f.takes.trim().is_empty() && ctx.user.is_some() {
        return submit_takes(&state, keys, ctx, f).await;
    }
    let primary = state.primary;
    let mut extras = Extras::of(&state.github);
    let mut problems = None;
    let mut from_github = false;
    let mut behind = None;
    let presetting = !f.apply_preset.trim().is_empty();
    let typed_repo = !f.tests_repo.trim().is_empty();
    // What the developer typed: a refused submission by branch name comes back with these
    // alone, never with what GitHub resolved (SHAs, subjects, benches, nets) written into
    // "Advanced", which would make the next submission a by-hand one with stale commits.
    let mut typed = None;
    if primary
        && !presetting
        && let Some(user) = &ctx.user
    {
        if submit_github::needs_github(&f) {
            let wanted = submit_github::wanted(&f, user);
            match state.github.resolve_submission(&wanted).await {
                Ok(r) => {
                    typed = Some(f.clone());
                    submit_github::apply(&mut f, &r);
                    from_github = true;
                    behind = r.behind_by.filter(|b| *b > crate::github::BEHIND_WARNING);
                }
                Err(p) => problems = Some(p),
            }
        } else {
            // Commits given by hand, or a rerun's: no resolution, but the same tests
            // repository default and, when GitHub answers, the same rules (the fork rule,
            // the commits exist, nets left empty read from them, a master base's bench).
            submit_github::default_repo(&mut f, user, &state.github.official().url());
            match state
                .github
                .vet_given(&submit_github::given(&f, user))
                .await
            {
                Ok(v) => submit_github::apply_vetted(&mut f, &v),
                Err(p) => problems = Some(p),
            }
        }
    }
    let compared = (
        f.tests_repo.trim().to_string(),
        f.resolved_base.trim().to_string(),
        f.resolved_new.trim().to_string(),
    );
    let nets = state.nets.clone();
    let accounts = state.accounts.clone();
    let (created_tx, created_rx) = tokio::sync::oneshot::channel::<String>();
    let response = continue_page(&state, keys, ctx, move |db, ctx, _| {
        if !primary {
            return Err(PageError::NotPrimary);
        }
        let Some(user) = ctx.user.clone() else {
            return login_first("/tests/run");
        };
        if presetting {
            // A preset button: applied over what was typed; nothing is submitted.
            let mut f = f;
            let key = std::mem::take(&mut f.apply_preset);
            let mut flashes = Vec::new();
            match PRESETS.iter().find(|p| p.key == key.trim()) {
                Some(p) => f.apply(p),
                None => flashes.push(Flash::error(format!("Unknown preset {key:?}"))),
            }
            return render(db, ctx, f, FieldErrors::new(), flashes, extras);
        }
        let refused = |f: RunForm, errors: FieldErrors, general: Vec<Flash>, extras: Extras| {
            let f = typed.clone().unwrap_or(f);
            let mut flashes = vec![Flash::error(
                "The test was not submitted: see the messages below.",
            )];
            flashes.extend(general);
            render(db, ctx, f, errors, flashes, extras)
        };
        if let Some(p) = problems {
            let (errors, general, outage) = submit_github::problems(&p);
            extras.advanced_open = outage;
            return refused(f, errors, general, extras);
        }
        // Every net named must have been uploaded, however the form was filled (GitHub, by
        // hand, a rerun).
        let missing = submit_github::missing_nets(&f, |n| nets.known(n).unwrap_or(false));
        if !missing.is_empty() {
            extras.missing_nets = true;
            extras.advanced_open = true;
            return refused(f, missing, Vec::new(), extras);
        }
        let args = match to_args(&f) {
            Ok(args) => args,
            Err(errors) => {
                let general = errors.get("rescheduled_from").cloned();
                return refused(
                    f,
                    errors,
                    general.into_iter().map(Flash::error).collect(),
                    extras,
                );
            }
        };
        // A side whose nets resolved to none (none typed, none read from its commit): the
        // form comes back with a warning at the nets and a "Create without nets" button,
        // unless that button was pressed; only a run that would otherwise be created.
        if f.confirm_no_nets.trim() != "1" {
            let warnings = no_nets(&args);
            if !warnings.is_empty()
                && crate::rundb::create::build_run(args.clone(), &user.username, &db.books())
                    .is_ok()
            {
                extras.warnings = warnings;
                let f = typed.clone().unwrap_or(f);
                let flash = Flash::warning(
                    "The test was not created yet: it has no nets on a side (see the warning \
                     under \"Advanced\"). Give the nets, or press \"Create without nets\".",
                );
                return render(db, ctx, f, FieldErrors::new(), vec![flash], extras);
            }
        }
        let repo = args.tests_repo.clone();
        match db.submit_run(args, &user) {
            Ok(id) => {
                tracing::info!(run = %id, user = %user.username, "run submitted");
                // The repository a submission by branch name used becomes the profile's
                // (Fishtest saves a changed `tests_repo`).
                if from_github && typed_repo && repo != user.tests_repo {
                    match accounts.set_tests_repo(&user.username, &repo) {
                        Ok(()) => tracing::info!(user = %user.username, repo, "profile's tests repository saved"),
                        Err(e) => tracing::warn!(user = %user.username, error = %e, "profile's tests repository not saved"),
                    }
                }
                let _ = created_tx.send(id.clone());
                match behind {
                    Some(n) => Page::redirect(format!("/tests/view/{id}?follow=1&behind={n}")),
                    None => Page::redirect(format!("/tests/view/{id}?follow=1")),
                }
            }
            Err(SubmitError::Args(e)) => {
                let field = form_field(e.field);
                let message = super::args::in_words(e.field, &e.message);
                if field.is_empty() {
                    refused(f, FieldErrors::new(), vec![Flash::error(message)], extras)
                } else {
                    refused(
                        f,
                        FieldErrors::from([(field.to_string(), message)]),
                        Vec::new(),
                        extras,
                    )
                }
            }
            // Refusals in the API edge's words (`http::error`).
            Err(SubmitError::Db(e)) => match ApiError::from(e) {
                ApiError::PrimaryRequired => Err(PageError::NotPrimary),
                ApiError::BadRequest(m) | ApiError::Unauthorized(m) | ApiError::NotFound(m) => {
                    refused(f, FieldErrors::new(), vec![Flash::error(m)], extras)
                }
                ApiError::Internal(detail) => Err(PageError::Internal {
                    what: "run not submitted",
                    detail,
                }),
                e => Err(PageError::internal("run not submitted", e)),
            },
        }
    })
    .await;
    if let Ok(id) = created_rx.await {
        // The diff between base and new, fetched once and kept with the run, in the
        // background: the developer does not wait for it.
        let (repo, base, new) = compared;
        state.github.keep_diff_in_background(id, repo, base, new);
    }
    response
}

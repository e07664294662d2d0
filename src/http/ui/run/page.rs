//! The run page: `/tests/view/{id}` (arguments, results, Elo/SPRT, SPSA parameters, charts,
//! the chi² box and tasks, control buttons) and its three live fragments,
//! `/tests/view/{id}/detail` (results and statistics), `/tests/view/{id}/charts` (the chart
//! images, their URLs changing with the run's games so the browser fetches them anew) and
//! `/tests/tasks/{id}` (the chi² box and one page of the tasks table, `run_tasks.rs` and
//! `run_tasks_view.rs`, whose `tasks_*` parameters the page takes too), which render the
//! same partial templates without the layout (`static/refresh.js` re-fetches them on
//! unfinished runs; without JavaScript the page is whole as served).
//!
//! The run is read through `RunDb::get_run` (a copy: no lock held while rendering); what is
//! shown of it is computed by `run_args.rs` (arguments, SPSA), `run_detail.rs` (results,
//! statistics), `run_tasks.rs` and `run_tasks_view.rs`.

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::args::{ArgRow, SpsaView, arg_rows, spsa_view};
use super::charts::{RunCharts, run_charts};
use super::detail::{Detail, detail};
use super::tasks::tasks;
use super::tasks_view::{TasksPage, TasksQuery, TasksView, page_of};
use crate::http::run_id::RunId;
use crate::http::state::AppState;
use crate::http::ui::kit::results::status_label;
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::{
    Input, Layout, OrInternal, Page, PageError, PageResult, STOP_POLLING, asset, page,
};
use crate::rundb::RunDb;
use crate::rundb::books::Books;
use crate::rundb::model::Run;
use crate::rundb::schedule::hash_mib;

/// What the modify form starts with (POSTed to `/tests/modify`).
pub struct ModifyValues {
    pub num_games: u64,
    pub priority: i64,
    pub throughput: String,
    pub auto_purge: bool,
    pub info: String,
    /// The sliding window (`max_active_tasks`), empty for none.
    pub max_active_tasks: String,
}

/// The modify form's values for the owner or an approver of a run that is not deleted.
fn modify_values(run: &Run, ctx: &Ctx) -> Option<ModifyValues> {
    let user = ctx.user.as_ref()?;
    if run.deleted || (user.username != run.args.username && !user.is_approver()) {
        return None;
    }
    Some(ModifyValues {
        num_games: run.args.num_games,
        priority: run.args.priority as i64,
        throughput: format!("{}", run.args.throughput),
        auto_purge: run.args.auto_purge,
        info: run.args.info.clone(),
        max_active_tasks: run
            .args
            .max_active_tasks
            .map(|n| n.to_string())
            .unwrap_or_default(),
    })
}

/// Which control buttons the viewer gets.
pub struct Controls {
    pub stop: bool,
    pub approve: bool,
    pub purge: bool,
    pub delete: bool,
}

#[derive(Template)]
#[template(path = "run.html")]
pub struct RunPage<'a> {
    pub l: Layout,
    pub id: String,
    pub heading: String,
    pub args: Vec<ArgRow>,
    pub d: Detail,
    /// The page of the tasks table asked for (`run_tasks_view.rs`'s parameters).
    pub t: TasksPage<'a>,
    pub c: RunCharts,
    /// SPSA runs: the settings and the parameter table.
    pub spsa: Option<SpsaView>,
    pub controls: Controls,
    /// The modify form's current values, for the owner or an approver (`None` otherwise).
    pub modify: Option<ModifyValues>,
    /// The blue "Note:" lines (a deleted run, identical signatures).
    pub notes: Vec<String>,
    /// The test group the run is a take of (issue 39), linked above the results.
    pub group: Option<String>,
    /// The red "Warning:" lines (unusual settings an approver should look at).
    pub warnings: Vec<String>,
    /// The Approve button's colour: `ok` without warnings, `warn` with.
    pub approve_class: &'static str,
    /// The status label (`failed`, `finished`, `active`, `paused`, `pending`).
    pub status: &'static str,
    /// "Tasks (N active worker(s) with M core(s))".
    pub tasks_heading: String,
    /// The fragments are refreshed only while the run is unfinished.
    pub live: bool,
    /// The diff kept with the run, drawn.
    pub diff: Option<super::diff::DiffView>,
    /// The same comparison on GitHub.
    pub compare_url: Option<String>,
    /// With the warning that the base is not on master: official master compared with the
    /// base on GitHub (the spec's "base diff" link).
    pub base_diff_url: Option<String>,
    pub script: String,
    /// Whether the viewer follows the run (`None`: a visitor, no button).
    pub following: Option<bool>,
}

#[derive(Template)]
#[template(source = "{% include \"run_detail.html\" %}", ext = "html")]
pub struct DetailFragment {
    pub d: Detail,
}

#[derive(Template)]
#[template(source = "{% include \"run_tasks.html\" %}", ext = "html")]
pub struct TasksFragment<'a> {
    pub t: TasksPage<'a>,
}

#[derive(Template)]
#[template(source = "{% include \"run_charts.html\" %}", ext = "html")]
pub struct ChartsFragment {
    pub c: RunCharts,
}

/// The run (a copy), or why not: no such run is the 404 page.
pub(in crate::http::ui) fn load(db: &RunDb, id: RunId) -> Result<Run, PageError> {
    db.get_run(id.as_str())
        .or_internal("run page")?
        .ok_or(PageError::NotFound)
}

/// The page title: "SPRT <new> vs <base>", "SPSA <new>" or "<games> games - <new> vs <base>".
pub fn page_title(run: &Run) -> String {
    let a = &run.args;
    if a.sprt.is_some() {
        format!("SPRT {} vs {}", a.new_tag, a.base_tag)
    } else if a.spsa.is_some() {
        format!("SPSA {}", a.new_tag)
    } else {
        format!("{} games - {} vs {}", a.num_games, a.new_tag, a.base_tag)
    }
}

fn tasks_heading(run: &Run) -> String {
    format!(
        "Tasks ({} active worker(s) with {} core(s))",
        run.workers, run.cores
    )
}

/// Engine options in a canonical order (so `Hash=8 Threads=1` equals `Threads=1 Hash=8`).
fn normalised_options(options: &str) -> Vec<&str> {
    let mut v: Vec<&str> = options.split_whitespace().collect();
    v.sort_unstable();
    v
}

/// The warnings an approver should read before approving (each shown as "Warning: …").
pub fn warnings(run: &Run, books: &Books) -> Vec<String> {
    let a = &run.args;
    let mut w = Vec::new();
    if a.throughput > 100.0 {
        w.push("throughput exceeds the normal limit".into());
    }
    if a.priority > 0.0 {
        w.push("priority exceeds the normal limit".into());
    }
    let ratio = crate::http::ui::kit::results::tc_ratio_of(run);
    if ratio >= 5.0 {
        let target = 64.0 * ratio / 6.0;
        for (side, options) in [("new", &a.new_options), ("base", &a.base_options)] {
            let hash = hash_mib(options) as f64;
            if hash < 0.6 * target || hash > 1.5 * target {
                w.push(format!(
                    "{side} hash {hash:.0} MB is outside the reasonable range for this TC \
                     ({:.0}-{:.0} MB)",
                    0.6 * target,
                    1.5 * target
                ));
            }
        }
    }
    if normalised_options(&a.new_options) != normalised_options(&a.base_options) {
        w.push("base options differ from new options".into());
    }
    if run.failures > 0 {
        w.push(format!("this test had {} failure(s)", run.failures));
    } else if run.failed {
        w.push("this is a failed test".into());
    }
    if !a.new_tc.is_empty() && a.new_tc != a.tc {
        w.push(format!(
            "this is a test with time odds ({} vs {})",
            a.new_tc, a.tc
        ));
    }
    if a.arch_filter.as_deref().is_some_and(|f| !f.is_empty()) {
        w.push("this test has a non-trivial arch filter".into());
    }
    if a.compiler.as_deref().is_some_and(|c| !c.is_empty()) {
        w.push("this test uses a specific compiler".into());
    }
    if let Some(exits) = books.get(&a.book).and_then(|b| b.total)
        && exits < 100_000
    {
        w.push(format!("small book with only {exits} exits"));
    }
    if a.master_repo.as_deref().is_some_and(|m| !m.is_empty()) {
        w.push("the developer repository is not forked from official-stockfish/Stockfish".into());
    }
    w
}

/// `GET /tests/view/{id}`.
pub async fn view(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    follow: Result<Query<FollowQuery>, axum::extract::rejection::QueryRejection>,
    table: Result<Query<TasksQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let (submitted, behind) = match follow {
        Ok(Query(q)) => (q.follow.as_deref() == Some("1"), q.behind),
        Err(_) => (false, None),
    };
    let table = tasks_view(table);
    let id = id.parse::<RunId>();
    let github = state.github.clone();
    let ledger = state.ledger.clone();
    let (retry_tx, retry_rx) = tokio::sync::oneshot::channel::<[String; 4]>();
    let groups = state.groups.clone();
    let response = page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let run = load(db, id?)?;
        let following = crate::http::ui::kit::follows::following(&ledger, ctx, &run.id)?;
        let table = table?;
        let heading = page_title(&run);
        let kept = github.stored_diff_blocking(&run.id);
        // No diff kept, or no ancestry with it (GitHub failed at creation): an unfinished
        // run's are asked for again after the page (rate-limited by the component).
        if !run.finished && kept.as_ref().is_none_or(|k| k.ancestry.is_none()) {
            let a = &run.args;
            let _ = retry_tx.send([
                run.id.clone(),
                a.tests_repo.clone(),
                a.resolved_base.clone(),
                a.resolved_new.clone(),
            ]);
        }
        let diff = kept.as_ref().map(super::diff::view);
        let compare_url = super::diff::compare_url(&run);
        let mut warnings = warnings(&run, &db.books());
        // Where the base stood against master and the new commit, found with the diff.
        let mut base_diff_url = None;
        if let Some(a) = kept.and_then(|k| k.ancestry) {
            warnings.extend(a.warnings().into_iter().map(str::to_string));
            if !a.on_master {
                base_diff_url =
                    super::diff::base_diff_url(&run, github.official(), github.master().as_deref());
            }
        }
        let d = detail(&run);
        let all = tasks(&run);
        // A link to the run shows its status and results in a chat or a forum's preview.
        let summary = format!("{} · {}", status_label(&run), d.rbox.plain());
        let l = Layout::new(ctx, &heading).describe(summary);
        let p = RunPage {
            l: submitted_flash(l, &run, submitted, behind),
            id: run.id.clone(),
            heading,
            args: arg_rows(&run, db.document_size_recent(&run)),
            d,
            t: page_of(&all, &table, is_approver(ctx)),
            c: run_charts(&run),
            spsa: spsa_view(&run),
            controls: controls(&run, ctx),
            approve_class: if warnings.is_empty() { "ok" } else { "warn" },
            warnings,
            status: status_label(&run),
            tasks_heading: tasks_heading(&run),
            modify: modify_values(&run, ctx),
            notes: notes(&run),
            group: groups.group_of(&run.id),
            live: !run.finished,
            script: asset("refresh.js"),
            diff,
            compare_url,
            base_diff_url,
            following,
        };
        Page::ok(&p)
    })
    .await;
    if let Ok([id, repo, base, new]) = retry_rx.await {
        state.github.retry_diff(id, repo, base, new);
    }
    response
}

/// `?follow=1`, where the submit form sends the browser after creating a run.
#[derive(serde::Deserialize)]
pub struct FollowQuery {
    #[serde(default)]
    follow: Option<String>,
    /// The submit form found the test branch this many commits behind official master.
    #[serde(default)]
    behind: Option<u64>,
}

/// The submit form's "submitted" message, while the run waits for approval.
fn submitted_flash(l: Layout, run: &Run, submitted: bool, behind: Option<u64>) -> Layout {
    if submitted && !run.approved && !run.finished {
        let mut l = l.flash(crate::http::ui::kit::Flash::info(
            crate::http::ui::kit::done::MSG_SUBMITTED,
        ));
        // An account older than Fishtest's fork rule may still test from outside the fork
        // network: it is told, every time.
        if let Some(root) = run.args.master_repo.as_deref().filter(|m| !m.is_empty()) {
            let repo = &run.args.tests_repo;
            let network = if root == repo {
                String::new()
            } else {
                format!(" (it is a fork of {root})")
            };
            l = l.flash(crate::http::ui::kit::Flash::warning(format!(
                "{repo} is not a fork of official-stockfish/Stockfish{network}: please fork \
                 official-stockfish/Stockfish and test from your fork."
            )));
        }
        match behind {
            Some(n) => l.flash(crate::http::ui::kit::Flash::warning(format!(
                "{} is {n} commits behind official master: consider rebasing it.",
                run.args.new_tag
            ))),
            None => l,
        }
    } else {
        l
    }
}

/// `GET /tests/view/{id}/detail`: the results part alone.
pub async fn detail_fragment(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    fragment(&state, id, &headers, |run| {
        // A finished run's last update: 286 tells the page's script to stop refreshing.
        let status = if run.finished {
            STOP_POLLING
        } else {
            StatusCode::OK
        };
        Page::render(status, &DetailFragment { d: detail(run) })
    })
    .await
}

/// The tasks table's parameters checked; a query that does not parse (a key given twice)
/// is a 400 like a bad value.
fn tasks_view(
    q: Result<Query<TasksQuery>, axum::extract::rejection::QueryRejection>,
) -> Result<TasksView, PageError> {
    match q {
        Ok(Query(q)) => q.view(),
        Err(e) => Err(PageError::refused(
            StatusCode::BAD_REQUEST,
            "Bad tasks table parameters",
            e.body_text(),
        )),
    }
}

fn is_approver(ctx: &Ctx) -> bool {
    ctx.user.as_ref().is_some_and(|u| u.is_approver())
}

/// `GET /tests/tasks/{id}`: one page of the tasks table alone (the same `tasks_*` parameters
/// as the run page), with the chi² box over every task.
pub async fn tasks_fragment(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    table: Result<Query<TasksQuery>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let id = id.parse::<RunId>();
    let table = tasks_view(table);
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let run = load(db, id?)?;
        let table = table?;
        let status = if run.finished {
            STOP_POLLING
        } else {
            StatusCode::OK
        };
        let all = tasks(&run);
        let t = page_of(&all, &table, is_approver(ctx));
        Page::render(status, &TasksFragment { t })
    })
    .await
}

/// `GET /tests/view/{id}/charts`: the chart images alone (their URLs carry the run's games).
pub async fn charts_fragment(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    fragment(&state, id, &headers, |run| {
        let status = if run.finished {
            STOP_POLLING
        } else {
            StatusCode::OK
        };
        Page::render(status, &ChartsFragment { c: run_charts(run) })
    })
    .await
}

/// A fragment of the run page: the run loaded (or the 404 page), then `render` in the pool.
async fn fragment(
    state: &AppState,
    id: String,
    headers: &HeaderMap,
    render: fn(&Run) -> PageResult,
) -> Response {
    let id = id.parse::<RunId>();
    page(state, Input::get(state, headers), move |db, _, _| {
        render(&load(db, id?)?)
    })
    .await
}

fn notes(run: &Run) -> Vec<String> {
    let a = &run.args;
    let mut notes = Vec::new();
    if a.spsa.is_none() && !a.new_signature.is_empty() && a.new_signature == a.base_signature {
        notes.push("new signature and base signature are identical".into());
    }
    if run.deleted {
        notes.push("this test has been deleted".into());
    }
    notes
}

/// The buttons: Stop, Purge and Delete for the owner or an approver; Approve for an approver
/// who does not own the run (anonymous visitors get none).
fn controls(run: &Run, ctx: &Ctx) -> Controls {
    let Some(user) = &ctx.user else {
        return Controls {
            stop: false,
            approve: false,
            purge: false,
            delete: false,
        };
    };
    let owner = user.username == run.args.username;
    let approver = user.is_approver();
    let may = owner || approver;
    Controls {
        stop: may && !run.finished && !run.deleted,
        approve: approver && !owner && !run.finished && !run.approved,
        purge: may && run.finished,
        delete: may && !run.deleted,
    }
}

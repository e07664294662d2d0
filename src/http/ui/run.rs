//! The run page: `/tests/view/{id}` (arguments, results, Elo/SPRT, SPSA parameters, charts,
//! the chi² box and tasks, control buttons) and its three live fragments,
//! `/tests/view/{id}/detail` (results and statistics), `/tests/view/{id}/charts` (the chart
//! images, their URLs changing with the run's games so the browser fetches them anew) and
//! `/tests/tasks/{id}` (the chi² box and the tasks table with each task's residual), which
//! render the same partial templates without the layout (`static/refresh.js` re-fetches them
//! on unfinished runs; without JavaScript the page is whole as served).
//!
//! The run is read through `RunDb::get_run` (a copy: no lock held while rendering); the
//! numbers come from `crate::stats` exactly as `/api/get_elo` computes them, the chi² and the
//! residuals from `crate::purge` exactly as a purge computes them (Fishtest's rule: each
//! worker's residual against the Bonferroni thresholds, green, yellow or red).

use std::collections::HashSet;
use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;

use super::charts::History;
use super::results::{ResultsBox, results_box, status_label};
use super::session::Ctx;
use super::{Input, Layout, Out, asset, errors, page};
use crate::http::AppState;
use crate::purge::{PurgeStats, PurgeTask, ResidualColor, get_chi2, task_residual};
use crate::rundb::RunDb;
use crate::rundb::books::Books;
use crate::rundb::model::{Run, Task};
use crate::rundb::schedule::hash_mib;
use crate::stats::{Results, SprtState, get_elo, sprt_elo};

/// One line of the arguments table; `href` empty when the value is not a link.
pub struct ArgRow {
    pub name: &'static str,
    pub value: String,
    pub href: String,
}

/// The results and statistics part (the `detail` fragment).
pub struct Detail {
    pub id: String,
    /// The results box of every run table (the same lines and colour).
    pub rbox: ResultsBox,
    /// `running`, `green`, `yellow`, `red` or `neutral`.
    pub colour: &'static str,
    pub status: String,
    pub games: u64,
    pub num_games: u64,
    pub wins: u64,
    pub losses: u64,
    pub draws: u64,
    pub crashes: u64,
    pub time_losses: u64,
    /// `LL, LD, DD+WL, WD, WW` counts, when the run has any.
    pub penta: Option<[u64; 5]>,
    /// `Elo: … ± … (95%)` or the SPRT's `Elo: … [lo, hi] (95%)`; empty before any game.
    pub elo: String,
    pub los: String,
    /// `LLR: x (a, b) [elo0, elo1]` for an SPRT.
    pub llr: String,
    pub sprt_state: String,
}

/// One row of the tasks table.
pub struct TaskRow {
    pub idx: usize,
    pub worker: String,
    pub played: u64,
    pub num_games: u64,
    pub wins: u64,
    pub losses: u64,
    pub draws: u64,
    pub crashes: u64,
    pub time_losses: u64,
    pub last_updated: String,
    /// `active`, `dead`, `bad`, `purged` or empty (done).
    pub mark: &'static str,
    /// The residual with 3 decimals, or `-` when the worker is not in the chi² table.
    pub residual: String,
    /// `green`, `yellow`, `red`, or empty (no residual).
    pub residual_colour: &'static str,
    /// The words beside a residual that is out of line (the colour is not the only cue).
    pub residual_note: &'static str,
}

/// One SPSA parameter.
pub struct SpsaRow {
    pub name: String,
    pub value: String,
    pub start: String,
    pub min: String,
    pub max: String,
    pub c: String,
    pub r: String,
}

/// The tasks fragment's data.
pub struct Tasks {
    pub id: String,
    pub rows: Vec<TaskRow>,
    /// The chi² box and the residual column (runs that are not SPSA, with tasks).
    pub chi2: Option<Chi2Box>,
}

/// Fishtest's "Stats" box over the run's workers: chi², degrees of freedom, p-value.
pub struct Chi2Box {
    /// 2 decimals, or `-` when there is no table.
    pub chi2: String,
    pub dof: usize,
    /// A percentage with 2 decimals, or `-`.
    pub p: String,
    /// Workers in the table (those with enough games).
    pub workers: usize,
    /// The residual thresholds (2 decimals): yellow from `z95`, red from `z99`.
    pub z95: String,
    pub z99: String,
    /// Tasks whose residual is yellow, and red.
    pub yellow: usize,
    pub red: usize,
}

/// The chart images (the `charts` fragment).
pub struct Charts {
    pub id: String,
    pub spsa: bool,
    /// The LLR chart (SPRT runs).
    pub llr: bool,
    /// Why there is no chart to draw (no games, no recorded history), instead of the images.
    pub missing: Option<&'static str>,
    /// The run's games: part of the images' URLs, so a refreshed fragment fetches them anew.
    pub games: u64,
}

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
pub struct RunPage {
    pub l: Layout,
    pub id: String,
    pub heading: String,
    pub args: Vec<ArgRow>,
    pub d: Detail,
    pub t: Tasks,
    pub c: Charts,
    pub spsa: Vec<SpsaRow>,
    pub spsa_iter: String,
    pub controls: Controls,
    /// The modify form's current values, for the owner or an approver (`None` otherwise).
    pub modify: Option<ModifyValues>,
    /// The blue "Note:" lines (a deleted run, identical signatures).
    pub notes: Vec<String>,
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
    pub script: String,
}

#[derive(Template)]
#[template(source = "{% include \"run_detail.html\" %}", ext = "html")]
pub struct DetailFragment {
    pub d: Detail,
}

#[derive(Template)]
#[template(source = "{% include \"run_tasks.html\" %}", ext = "html")]
pub struct TasksFragment {
    pub t: Tasks,
}

#[derive(Template)]
#[template(source = "{% include \"run_charts.html\" %}", ext = "html")]
pub struct ChartsFragment {
    pub c: Charts,
}

pub fn valid_id(id: &str) -> bool {
    id.len() == 24 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The run, or the answer instead of the page (the 404 page, a 500).
pub(super) fn load(db: &RunDb, ctx: &Ctx, id: &str) -> Result<Run, Out> {
    if !valid_id(id) {
        return Err(errors::missing(ctx));
    }
    match db.get_run(id) {
        Ok(Some(run)) => Ok(run),
        Ok(None) => Err(errors::missing(ctx)),
        Err(e) => {
            tracing::error!(error = %e, "run page");
            Err(errors::internal())
        }
    }
}

/// The status of a live fragment whose run has finished: "here is the last update, stop
/// polling" (Fishtest's 286, which htmx understands and `static/refresh.js` too).
pub const FINISHED_FRAGMENT: StatusCode = match StatusCode::from_u16(286) {
    Ok(s) => s,
    Err(_) => StatusCode::OK,
};

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
    let ratio = super::results::tc_ratio_of(run);
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
) -> Response {
    let submitted = follow.is_ok_and(|Query(q)| q.follow.as_deref() == Some("1"));
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let run = match load(db, ctx, &id) {
            Ok(run) => run,
            Err(out) => return out,
        };
        let heading = page_title(&run);
        let warnings = warnings(&run, &db.books);
        let (spsa, spsa_iter) = spsa_rows(&run);
        let p = RunPage {
            l: submitted_flash(Layout::new(ctx, &heading), &run, submitted),
            id: run.id.clone(),
            heading,
            args: arg_rows(&run),
            d: detail(&run),
            t: tasks(&run),
            c: charts(&run),
            spsa,
            spsa_iter,
            controls: controls(&run, ctx),
            approve_class: if warnings.is_empty() { "ok" } else { "warn" },
            warnings,
            status: status_label(&run),
            tasks_heading: tasks_heading(&run),
            modify: modify_values(&run, ctx),
            notes: notes(&run),
            live: !run.finished,
            script: asset("refresh.js"),
        };
        Out::render(StatusCode::OK, &p)
    })
    .await
}

/// `?follow=1`, where the submit form sends the browser after creating a run.
#[derive(serde::Deserialize)]
pub struct FollowQuery {
    #[serde(default)]
    follow: Option<String>,
}

/// The submit form's "submitted" message, while the run waits for approval.
fn submitted_flash(l: Layout, run: &Run, submitted: bool) -> Layout {
    if submitted && !run.approved && !run.finished {
        l.flash(super::Flash::info(super::submit::MSG_SUBMITTED))
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
            FINISHED_FRAGMENT
        } else {
            StatusCode::OK
        };
        Out::render(status, &DetailFragment { d: detail(run) })
    })
    .await
}

/// `GET /tests/tasks/{id}`: the tasks table alone.
pub async fn tasks_fragment(
    State(state): State<Arc<AppState>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    fragment(&state, id, &headers, |run| {
        let status = if run.finished {
            FINISHED_FRAGMENT
        } else {
            StatusCode::OK
        };
        Out::render(status, &TasksFragment { t: tasks(run) })
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
            FINISHED_FRAGMENT
        } else {
            StatusCode::OK
        };
        Out::render(status, &ChartsFragment { c: charts(run) })
    })
    .await
}

/// A fragment of the run page: the run loaded (or the 404 page), then `render` in the pool.
async fn fragment(
    state: &AppState,
    id: String,
    headers: &HeaderMap,
    render: fn(&Run) -> Out,
) -> Response {
    page(
        state,
        Input::get(state, headers),
        move |db, ctx, _| match load(db, ctx, &id) {
            Ok(run) => render(&run),
            Err(out) => out,
        },
    )
    .await
}

/// A link only to a web address (never `javascript:` or the like).
fn web(url: String) -> String {
    if url.starts_with("https://") || url.starts_with("http://") {
        url
    } else {
        String::new()
    }
}

fn arg_rows(run: &Run) -> Vec<ArgRow> {
    let a = &run.args;
    let repo = a.tests_repo.trim_end_matches('/');
    let row = |name, value: String| ArgRow {
        name,
        value,
        href: String::new(),
    };
    let link = |name, value: String, href: String| ArgRow {
        name,
        value,
        href: if repo.is_empty() {
            String::new()
        } else {
            web(href)
        },
    };
    let mut rows = vec![row("username", a.username.clone()), row("tc", a.tc.clone())];
    if !a.new_tc.is_empty() && a.new_tc != a.tc {
        rows.push(row("new_tc", a.new_tc.clone()));
    }
    rows.push(row("threads", a.threads.to_string()));
    rows.push(row("book", format!("{} (depth {})", a.book, a.book_depth)));
    if let Some(sprt) = &a.sprt {
        rows.push(row(
            "sprt",
            format!(
                "elo0: {:.2} alpha: {:.2} elo1: {:.2} beta: {:.2} ({})",
                sprt.elo0,
                sprt.alpha,
                sprt.elo1,
                sprt.beta,
                sprt.elo_model.as_str()
            ),
        ));
    } else {
        rows.push(row("num_games", a.num_games.to_string()));
    }
    rows.push(link(
        "new_tag",
        format!("{} ({})", a.new_tag, short(&a.resolved_new)),
        format!("{repo}/commit/{}", a.resolved_new),
    ));
    rows.push(link(
        "base_tag",
        format!("{} ({})", a.base_tag, short(&a.resolved_base)),
        format!("{repo}/commit/{}", a.resolved_base),
    ));
    rows.push(link(
        "diff",
        format!("{}...{}", short(&a.resolved_base), short(&a.resolved_new)),
        format!("{repo}/compare/{}...{}", a.resolved_base, a.resolved_new),
    ));
    rows.push(row("new_options", a.new_options.clone()));
    rows.push(row("base_options", a.base_options.clone()));
    if !a.new_signature.is_empty() || !a.base_signature.is_empty() {
        rows.push(row(
            "bench",
            format!("new {} / base {}", a.new_signature, a.base_signature),
        ));
    }
    rows.push(link(
        "tests_repo",
        a.tests_repo.clone(),
        a.tests_repo.clone(),
    ));
    rows.push(row("priority", format!("{}", a.priority)));
    rows.push(row("throughput", format!("{}%", a.throughput)));
    if let Some(w) = a.max_active_tasks {
        rows.push(row("max_active_tasks", w.to_string()));
    }
    rows.push(row("auto_purge", a.auto_purge.to_string()));
    rows.push(row(
        "approved",
        if run.approved {
            format!("yes ({})", run.approver)
        } else {
            "no".into()
        },
    ));
    rows.push(row(
        "start_time",
        run.start_time.0.format("%Y-%m-%d %H:%M:%S").to_string(),
    ));
    rows.push(row("info", a.info.clone()));
    let local = |name, value: &str, href: String| ArgRow {
        name,
        value: value.into(),
        href,
    };
    rows.push(local(
        "events",
        "events",
        format!("/actions?run_id={}", run.id),
    ));
    if a.spsa.is_none() {
        rows.push(local(
            "raw statistics",
            "raw statistics",
            format!("/tests/stats/{}", run.id),
        ));
    }
    rows
}

fn short(sha: &str) -> &str {
    sha.get(..10).unwrap_or(sha)
}

/// The results and statistics, computed as `/api/get_elo` does.
fn detail(run: &Run) -> Detail {
    let r = &run.results;
    let penta = Some(r.pentanomial).filter(|p| p.iter().any(|c| *c > 0));
    let games = r.games();
    let sprt = run.args.sprt.as_ref();
    let mut d = Detail {
        id: run.id.clone(),
        rbox: results_box(run),
        colour: colour(run),
        status: status(run),
        games,
        num_games: run.args.num_games,
        wins: r.wins,
        losses: r.losses,
        draws: r.draws,
        crashes: r.crashes,
        time_losses: r.time_losses,
        penta,
        elo: String::new(),
        los: String::new(),
        llr: String::new(),
        sprt_state: String::new(),
    };
    if let Some(s) = sprt {
        let results = Results {
            wins: r.wins,
            losses: r.losses,
            draws: r.draws,
            pentanomial: penta,
        };
        match sprt_elo(&results, s.alpha, s.beta, 0.05, s.elo0, s.elo1, s.elo_model) {
            Ok(e) => {
                d.llr = format!(
                    "LLR: {:.2} ({:.2}, {:.2}) [{:.2}, {:.2}]",
                    e.llr, e.a, e.b, s.elo0, s.elo1
                );
                if games > 0 {
                    d.elo = format!("Elo: {:.2} [{:.2}, {:.2}] (95%)", e.elo, e.ci[0], e.ci[1]);
                    d.los = format!("LOS: {:.1}%", e.los * 100.0);
                }
            }
            Err(e) => d.llr = format!("LLR: unavailable ({e})"),
        }
        d.sprt_state = match s.state {
            SprtState::Running => "running".into(),
            other => other.as_str().into(),
        };
    } else if games > 0 {
        let data: Vec<f64> = match penta {
            Some(p) => p.iter().map(|c| *c as f64).collect(),
            None => vec![r.losses as f64, r.draws as f64, r.wins as f64],
        };
        if let Ok(e) = get_elo(&data) {
            d.elo = format!("Elo: {:.2} ± {:.1} (95%)", e.elo, e.elo95);
            d.los = format!("LOS: {:.1}%", e.los * 100.0);
        }
    }
    d
}

fn colour(run: &Run) -> &'static str {
    if !run.finished {
        return "running";
    }
    let state = run.args.sprt.as_ref().map(|s| s.state);
    if run.is_green || state == Some(SprtState::Accepted) {
        "green"
    } else if run.is_yellow {
        "yellow"
    } else if state == Some(SprtState::Rejected) {
        "red"
    } else {
        "neutral"
    }
}

fn status(run: &Run) -> String {
    if run.finished {
        "finished".into()
    } else if !run.approved {
        "pending approval".into()
    } else if run.workers > 0 {
        format!("running on {} workers ({} cores)", run.workers, run.cores)
    } else {
        "waiting for workers".into()
    }
}

fn task_row(idx: usize, t: &Task, purged: bool) -> TaskRow {
    let played = t.stats.games();
    TaskRow {
        idx,
        worker: t.worker_info.long_name(),
        played,
        num_games: t.num_games,
        wins: t.stats.wins,
        losses: t.stats.losses,
        draws: t.stats.draws,
        crashes: t.stats.crashes,
        time_losses: t.stats.time_losses,
        last_updated: t.last_updated.0.format("%Y-%m-%d %H:%M:%S").to_string(),
        mark: if purged {
            "purged"
        } else if t.bad {
            "bad"
        } else if t.active {
            "active"
        } else if played < t.num_games {
            "dead"
        } else {
            ""
        },
        residual: "-".into(),
        residual_colour: "",
        residual_note: "",
    }
}

/// The purge's view of a task's counts: pentanomial when the run has any (Fishtest looks
/// for the field, which runs without pentanomial lack), W/L/D otherwise.
fn purge_stats(t: &Task, pentanomial: bool) -> PurgeStats {
    let mut s = t.stats.to_purge();
    if !pentanomial {
        s.pentanomial = None;
    }
    s
}

/// A residual as the table shows it: 3 decimals on its colour, with words for the colours
/// that mean "look at this worker"; `-` for a worker outside the table (`inf`).
fn set_residual(row: &mut TaskRow, residual: f64, colour: ResidualColor, crashes: bool) {
    if !residual.is_finite() {
        return;
    }
    row.residual = format!("{residual:.3}");
    row.residual_colour = match colour {
        ResidualColor::Green => "green",
        ResidualColor::Yellow => "yellow",
        ResidualColor::Red => "red",
    };
    row.residual_note = match colour {
        _ if crashes => "crashes or time losses",
        ResidualColor::Green => "",
        ResidualColor::Yellow => "high",
        ResidualColor::Red => "out of line",
    };
}

/// A number of the chi² box, or `-` when the table is empty (NaN).
fn finite(v: f64, text: impl FnOnce(f64) -> String) -> String {
    if v.is_finite() { text(v) } else { "-".into() }
}

fn tasks(run: &Run) -> Tasks {
    let spsa = run.args.spsa.is_some();
    let pentanomial = run.results.pentanomial.iter().any(|c| *c > 0);
    let view: Vec<PurgeTask<'_>> = run
        .tasks
        .iter()
        .map(|t| PurgeTask {
            unique_key: &t.worker_info.unique_key,
            stats: purge_stats(t, pentanomial),
            bad: t.bad,
        })
        .collect();
    let table = (!spsa && !run.tasks.is_empty()).then(|| get_chi2(&view, &HashSet::new()));
    let purged_ids: HashSet<u64> = run
        .bad_tasks
        .iter()
        .filter_map(|v| v.get("task_id").and_then(serde_json::Value::as_u64))
        .collect();
    let mut rows = Vec::with_capacity(run.tasks.len() + run.bad_tasks.len());
    for (i, t) in run.tasks.iter().enumerate() {
        // A purged task is shown from its copy in bad_tasks (as Fishtest does).
        if t.bad && purged_ids.contains(&(i as u64)) {
            continue;
        }
        let mut row = task_row(i, t, false);
        if let (Some(chi2), Some(task)) = (&table, view.get(i))
            && !t.bad
        {
            let (residual, colour) = task_residual(task, chi2);
            set_residual(&mut row, residual, colour, t.stats.crash_or_time());
        }
        rows.push(row);
    }
    for v in &run.bad_tasks {
        let idx = v
            .get("task_id")
            .and_then(serde_json::Value::as_u64)
            .unwrap_or_default() as usize;
        if let Ok(t) = serde_json::from_value::<Task>(v.clone()) {
            let mut row = task_row(idx, &t, true);
            // Frozen at purge time: `residual` a number or "inf", `residual_color` a name.
            let residual = v.get("residual").and_then(serde_json::Value::as_f64);
            let colour = v
                .get("residual_color")
                .and_then(|c| serde_json::from_value::<ResidualColor>(c.clone()).ok());
            if !spsa && let (Some(r), Some(c)) = (residual, colour) {
                set_residual(&mut row, r, c, t.stats.crash_or_time());
            }
            rows.push(row);
        }
    }
    let chi2 = table.map(|c| Chi2Box {
        chi2: finite(c.chi2, |v| format!("{v:.2}")),
        dof: c.dof,
        p: finite(c.p, |v| format!("{:.2}%", v * 100.0)),
        workers: c.residuals.len(),
        z95: finite(c.z_95, |v| format!("{v:.2}")),
        z99: finite(c.z_99, |v| format!("{v:.2}")),
        yellow: rows
            .iter()
            .filter(|r| r.residual_colour == "yellow")
            .count(),
        red: rows.iter().filter(|r| r.residual_colour == "red").count(),
    });
    Tasks {
        id: run.id.clone(),
        rows,
        chi2,
    }
}

/// The chart images of the run page, or why there are none.
fn charts(run: &Run) -> Charts {
    let spsa = run.args.spsa.is_some();
    Charts {
        id: run.id.clone(),
        spsa,
        llr: run.args.sprt.is_some(),
        missing: if spsa {
            None
        } else {
            History::of(run).missing()
        },
        games: run.results.games(),
    }
}

/// The SPSA parameters with the current `c_k` and `R_k` (as the worker gets them next).
fn spsa_rows(run: &Run) -> (Vec<SpsaRow>, String) {
    let Some(s) = &run.args.spsa else {
        return (Vec::new(), String::new());
    };
    let k = s.iter as f64 + 1.0;
    let rows = s
        .params
        .iter()
        .map(|p| {
            let c = p.c / k.powf(s.gamma);
            let a = p.a / (s.stability + k).powf(s.alpha);
            let r = if c != 0.0 { a / (c * c) } else { 0.0 };
            SpsaRow {
                name: p.name.clone(),
                value: format!("{:.2}", p.theta),
                start: format!("{}", p.start),
                min: format!("{}", p.min),
                max: format!("{}", p.max),
                c: format!("{c:.3}"),
                r: format!("{r:.2e}"),
            }
        })
        .collect();
    (rows, format!("{} / {}", s.iter, s.num_iter))
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

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::rundb::model::Stats;
    use crate::rundb::outcome::Assignment;
    use crate::rundb::testkit::{fixture, worker};

    fn pairs(p: [u64; 5], crashes: u64) -> Stats {
        Stats {
            wins: 2 * p[4] + p[3],
            losses: 2 * p[0] + p[1],
            draws: p[1] + 2 * p[2] + p[3],
            crashes,
            time_losses: 0,
            pentanomial: p,
        }
    }

    /// Three workers, the third with crashes; then the first purged (its copy in bad_tasks).
    #[test]
    fn residuals_of_crashed_and_purged_tasks_and_none_for_spsa() {
        let f = fixture();
        let id = f.run(json!({}), true);
        for (n, crashes) in [(1, 0), (2, 0), (3, 5)] {
            let Assignment::Task(t) = f.request(n) else {
                panic!("no task");
            };
            let (_, ticket) =
                f.db.update_task(
                    &id,
                    t.task_id,
                    pairs([5, 20, 50, 20, 5], crashes),
                    None,
                    worker(n),
                )
                .expect("update");
            f.durable(ticket);
        }
        let mut run = f.get(&id);
        let t = tasks(&run);
        let c = t.chi2.as_ref().expect("a chi² box");
        assert_eq!(c.dof, 4);
        assert_eq!(c.workers, 3);
        let crashed = &t.rows[2];
        assert_eq!(
            (crashed.residual.as_str(), crashed.residual_colour),
            ("10.000", "red")
        );
        assert_eq!(crashed.residual_note, "crashes or time losses");
        // Identical results: residual 0, green, no words.
        assert_eq!(
            (t.rows[0].residual.as_str(), t.rows[0].residual_colour),
            ("0.000", "green")
        );
        assert_eq!(t.rows[0].residual_note, "");
        assert_eq!(c.red, 1);

        // A purge's copy shows its frozen residual, once; "inf" shows as "-".
        let mut copy = serde_json::to_value(&run.tasks[0]).expect("json");
        copy["task_id"] = json!(0);
        copy["bad"] = json!(true);
        copy["residual"] = json!(5.5);
        copy["residual_color"] = json!("yellow");
        run.bad_tasks.push(copy.clone());
        copy["task_id"] = json!(1);
        copy["residual"] = json!("inf");
        copy["residual_color"] = json!("red");
        run.bad_tasks.push(copy);
        run.tasks[0].bad = true;
        run.tasks[0].stats = Stats::default();
        run.tasks[1].bad = true;
        let t = tasks(&run);
        let zero: Vec<&TaskRow> = t.rows.iter().filter(|r| r.idx == 0).collect();
        assert_eq!(zero.len(), 1);
        assert_eq!(zero[0].mark, "purged");
        assert_eq!(
            (
                zero[0].residual.as_str(),
                zero[0].residual_colour,
                zero[0].residual_note
            ),
            ("5.500", "yellow", "high")
        );
        let one: Vec<&TaskRow> = t.rows.iter().filter(|r| r.idx == 1).collect();
        assert_eq!(
            (one[0].residual.as_str(), one[0].residual_colour),
            ("-", "")
        );
        // One worker left: no table, and the box says so rather than printing NaN.
        let c = t.chi2.as_ref().expect("a box");
        assert_eq!((c.workers, c.chi2.as_str(), c.p.as_str()), (0, "-", "-"));

        // SPSA: neither box nor residuals.
        let spsa = f.run(
            json!({"spsa": {"raw_params": "Foo,100,0,200,10,0.002"}}),
            true,
        );
        assert!(tasks(&f.get(&spsa)).chi2.is_none());
    }
}

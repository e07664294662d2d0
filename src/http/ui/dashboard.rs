//! The dashboard: `/` (a redirect) and `/tests` (the active runs).

use std::sync::Arc;

use askama::Template;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::{Flash, Input, Layout, Out, controls, errors, page};
use crate::http::AppState;
use crate::rundb::model::Run;

/// One row of a run table.
pub struct RunRow {
    pub id: String,
    pub username: String,
    pub new_tag: String,
    pub base_tag: String,
    pub tc: String,
    pub threads: u32,
    pub games: u64,
    pub wins: u64,
    pub losses: u64,
    pub draws: u64,
    pub workers: u64,
    pub cores: u64,
    pub info: String,
    /// The SPRT state (`accepted`, `rejected`) of a decided run, else empty.
    pub state: &'static str,
    /// `green`, `yellow` or empty: the results cell's colour.
    pub colour: &'static str,
}

impl RunRow {
    pub fn of(run: &Run) -> Self {
        let r = &run.results;
        RunRow {
            id: run.id.clone(),
            username: run.args.username.clone(),
            new_tag: run.args.new_tag.clone(),
            base_tag: run.args.base_tag.clone(),
            tc: run.args.tc.clone(),
            threads: run.args.threads,
            games: r.wins + r.losses + r.draws,
            wins: r.wins,
            losses: r.losses,
            draws: r.draws,
            workers: run.workers,
            cores: run.cores,
            info: run.args.info.lines().next().unwrap_or_default().to_string(),
            state: run.args.sprt.as_ref().map_or("", |s| s.state.as_str()),
            colour: if run.is_green {
                "green"
            } else if run.is_yellow {
                "yellow"
            } else {
                ""
            },
        }
    }
}

#[derive(Template)]
#[template(path = "tests.html")]
pub struct TestsPage {
    pub l: Layout,
    pub pending: Vec<RunRow>,
    pub paused: Vec<RunRow>,
    pub active: Vec<RunRow>,
    pub cores: u64,
    pub workers: u64,
    /// Σ nps of the active runs, in millions.
    pub mnps: u64,
    /// Σ games per minute of the active runs.
    pub games_per_minute: u64,
}

/// `GET /`: a 302 to the dashboard (no session work).
pub async fn root() -> Response {
    (StatusCode::FOUND, [(header::LOCATION, "/tests")]).into_response()
}

/// The dashboard's query: `done` names a run control that just succeeded (its message is
/// flashed; only the known codes are, so a link cannot put words on the page).
#[derive(serde::Deserialize, Default)]
pub struct TestsQuery {
    #[serde(default)]
    done: Option<String>,
}

/// `GET /tests`: the active runs, with the machines and cores they use.
pub async fn tests(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Query(q): Query<TestsQuery>,
) -> Response {
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        let runs = match db.active_heads() {
            Ok(runs) => runs,
            Err(e) => {
                tracing::error!(error = %e, "active runs");
                return errors::internal();
            }
        };
        let open = || runs.iter().filter(|r| !r.finished && !r.deleted);
        let rows = |keep: &dyn Fn(&Run) -> bool| -> Vec<RunRow> {
            open().filter(|r| keep(r)).map(RunRow::of).collect()
        };
        let pending = rows(&|r| !r.approved && r.workers == 0);
        let paused = rows(&|r| r.approved && r.workers == 0);
        let active = rows(&|r| r.workers > 0);
        let busy = || open().filter(|r| r.workers > 0);
        let mnps = (busy().map(|r| r.nps).sum::<f64>() / 1e6).round() as u64;
        let games_per_minute = busy().map(|r| r.games_per_minute).sum::<f64>().round() as u64;
        let mut l = Layout::new(ctx, "Tests");
        if let Some(text) = q.done.as_deref().and_then(controls::done_message) {
            l = l.flash(Flash::info(text));
        }
        let p = TestsPage {
            l,
            pending,
            paused,
            cores: active.iter().map(|r| r.cores).sum(),
            workers: active.iter().map(|r| r.workers).sum(),
            mnps,
            games_per_minute,
            active,
        };
        Out::render(StatusCode::OK, &p)
    })
    .await
}

//! `GET /tests/group/{id}`: a test group's takes side by side (issue 39,
//! docs/test-groups.md): each take's results box, LLR and bounds, its share of the group's
//! games (played, and of the next ones), its chance of being the best, and why the group
//! stopped it; the group's state and winner.
//!
//! Must not: call the store (only `Groups::view`), or run outside [`page`].

use std::sync::Arc;

use askama::Template;
use axum::extract::{Path, State};
use axum::http::HeaderMap;
use axum::response::Response;

use crate::groups::GroupError;
use crate::http::state::AppState;
use crate::http::ui::kit::results::{ResultsBox, results_box};
use crate::http::ui::kit::{Input, Layout, OrInternal, Page, PageError, page};

/// One take's column.
pub struct TakeColumn {
    pub run_id: String,
    pub new_tag: String,
    pub state: &'static str,
    /// `None`: the run no longer exists (shown as missing).
    pub rbox: Option<ResultsBox>,
    pub llr: String,
    pub games: u64,
    pub share: String,
    pub target: String,
    pub p_best: String,
    pub stopped: String,
    /// The run a "superseded by <run>" message names (linked), and the message's rest.
    pub stopped_by: String,
    pub stopped_rest: String,
    pub winner: bool,
}

#[derive(Template)]
#[template(path = "group.html")]
pub struct GroupPage {
    pub l: Layout,
    pub group_id: String,
    pub username: String,
    pub state: &'static str,
    pub winner: String,
    pub takes: Vec<TakeColumn>,
}

fn pct(v: f64) -> String {
    format!("{:.1} %", 100.0 * v)
}

/// `GET /tests/group/{id}`: the page, or 404 for an unknown group.
pub async fn group_page(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(id): Path<String>,
) -> Response {
    let groups = state.groups.clone();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        if id.len() != 24 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(PageError::NotFound);
        }
        let view = match groups.view(&id) {
            Ok(v) => v,
            Err(GroupError::Unknown(_)) => return Err(PageError::NotFound),
            Err(e) => return Err(e).or_internal("test group"),
        };
        let winner = view.group.winner.clone().unwrap_or_default();
        let takes = view
            .takes
            .iter()
            .map(|t| {
                let stopped = t.stopped.clone().unwrap_or_default();
                let (stopped_by, stopped_rest) = crate::groups::split_stop_message(&stopped);
                let Some(run) = &t.run else {
                    return TakeColumn {
                        run_id: t.run_id.clone(),
                        new_tag: t.run_id.clone(),
                        state: "missing",
                        rbox: None,
                        llr: String::new(),
                        games: 0,
                        share: pct(t.share_played),
                        target: pct(0.0),
                        p_best: pct(0.0),
                        stopped,
                        stopped_by,
                        stopped_rest,
                        winner: false,
                    };
                };
                let llr = run.args.sprt.as_ref().map_or(String::new(), |s| {
                    format!(
                        "{:.2} ({:.2}, {:.2}) {}",
                        s.llr,
                        s.lower_bound,
                        s.upper_bound,
                        s.bounds_text()
                    )
                });
                TakeColumn {
                    run_id: run.id.clone(),
                    new_tag: run.args.new_tag.clone(),
                    state: t.state.name(),
                    rbox: Some(results_box(run)),
                    llr,
                    games: run.results.games(),
                    share: pct(t.share_played),
                    target: pct(t.share_target),
                    p_best: pct(t.p_best),
                    stopped,
                    stopped_by,
                    stopped_rest,
                    winner: run.id == winner,
                }
            })
            .collect();
        Page::ok(&GroupPage {
            l: Layout::new(ctx, "Test group"),
            group_id: view.group.group_id.clone(),
            username: view.group.username.clone(),
            state: view.group.state.name(),
            winner,
            takes,
        })
    })
    .await
}

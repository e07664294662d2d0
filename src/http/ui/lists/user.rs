//! `GET /tests/user/{name}`: one submitter's panels and finished runs, built from the kit's
//! run lists (`kit/run_lists.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::Response;

use crate::http::state::AppState;
use crate::http::ui::kit::run_lists::{
    failed_panel, fill, finished_part, list_page, parse_query, unfinished_panels,
};
use crate::http::ui::kit::{Href, Input, OrInternal, Page, PageError, page};

/// `GET /tests/user/{name}`: that submitter's pending, paused, failed and active panels
/// (page 1) and finished runs (paged as `/tests/finished`); 404 for an unknown user.
pub async fn user(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(params): Query<HashMap<String, String>>,
) -> Response {
    let q = parse_query(&params);
    let accounts = state.accounts.clone();
    page(&state, Input::get(&state, &headers), move |db, ctx, _| {
        if accounts
            .users()
            .get(&name)
            .or_internal("user lookup")?
            .is_none()
        {
            return Err(PageError::NotFound);
        }
        let base = Href::new("/tests/user").seg(&name).build();
        let f = finished_part(db, &base, Some(&name), q)?;
        let mut p = list_page(ctx, &name, format!("{name} - Tests"), &base, q);
        if q.page == 1 {
            let runs = db.active_heads().or_internal("active runs")?;
            let mut panels = unfinished_panels(runs.iter().filter(|r| r.args.username == name));
            panels.insert(2, failed_panel(&f.runs));
            p.panels = panels;
        }
        fill(&mut p, f);
        Page::ok(&p)
    })
    .await
}

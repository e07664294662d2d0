//! The limits page for approvers: `GET /limits` (every limit, its keys' holders, waiters and
//! refusals, floating refresh state) and `POST /limits` (`name`, `max`: a configured limit's
//! new max).
//!
//! Owns: the page's rows and the form's parsing.
//! Must not: decide who may edit (the scheduler's `Scheduler::set_limit_max` does) or change
//! anything before the CSRF check (`page` does it first).

use std::sync::Arc;
use std::time::Instant;

use askama::Template;
use axum::Form;
use axum::extract::State;
use axum::extract::rejection::FormRejection;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use serde::Deserialize;

use crate::http::error::ApiError;
use crate::http::state::AppState;
use crate::http::ui::kit::session::Ctx;
use crate::http::ui::kit::{
    Flash, Input, Layout, Page, PageError, PageResult, form_or_default, page,
};
use crate::limits::LimitView;
use crate::rundb::RunDbError;
use crate::scheduler::Scheduler;

/// One key's row.
pub struct KeyRow {
    pub key: String,
    pub max: u64,
    pub holders: u64,
    pub waiters: usize,
    pub rejected: u64,
    pub held_by: String,
}

/// One limit's section.
pub struct LimitRow {
    pub name: String,
    pub kind: String,
    pub key: String,
    pub unit: String,
    pub scope: Option<String>,
    pub max: u64,
    pub holders: u64,
    pub waiters: usize,
    pub rejected: u64,
    pub floating: Option<String>,
    pub editable: bool,
    pub keys: Vec<KeyRow>,
}

/// A max as read: the largest a limit can hold means it does not limit.
fn max_text(max: u64) -> String {
    if max >= crate::limits::def::MAX_MAX {
        "no limit".into()
    } else {
        max.to_string()
    }
}

impl KeyRow {
    /// The max as shown ("no limit" for none).
    pub fn max_shown(&self) -> String {
        max_text(self.max)
    }
}

impl LimitRow {
    /// `max N <unit>`, or "no limit".
    pub fn max_shown(&self) -> String {
        if self.max >= crate::limits::def::MAX_MAX {
            "no limit".into()
        } else {
            format!("max {} {}", self.max, self.unit)
        }
    }
}

fn text<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(String::from))
        .unwrap_or_default()
}

impl LimitRow {
    fn of(v: LimitView) -> LimitRow {
        let floating = v.floating.as_ref().map(|f| {
            let mut s = format!(
                "every {} s, {} retries, next in {:.0} s",
                f.refresh_s, f.retries, f.next_refresh_in_s
            );
            if let Some(e) = &f.last_error {
                s.push_str(&format!(", last error: {e}"));
            }
            s
        });
        LimitRow {
            kind: text(&v.kind),
            unit: text(&v.unit),
            editable: !v.builtin,
            keys: v
                .keys
                .into_iter()
                .take(200)
                .map(|k| KeyRow {
                    key: k.key,
                    max: k.max,
                    holders: k.holders,
                    waiters: k.waiters,
                    rejected: k.rejected,
                    held_by: k.held_by.join(" "),
                })
                .collect(),
            name: v.name,
            key: v.key,
            scope: v.scope,
            max: v.max,
            holders: v.holders,
            waiters: v.waiters,
            rejected: v.rejected,
            floating,
        }
    }
}

#[derive(Template)]
#[template(path = "limits.html")]
pub struct LimitsPage {
    pub l: Layout,
    pub limits: Vec<LimitRow>,
}

fn limits_page(scheduler: &Scheduler, ctx: &Ctx, flash: Option<Flash>) -> PageResult {
    let Some(user) = ctx.user.as_ref() else {
        return Page::redirect("/login");
    };
    if !user.is_approver() {
        return Err(PageError::refused(
            StatusCode::FORBIDDEN,
            "Forbidden",
            "Only approvers may see the limits.",
        ));
    }
    let mut l = Layout::new(ctx, "Limits");
    if let Some(f) = flash {
        l = l.flash(f);
    }
    let limits = scheduler
        .limits()
        .view(Instant::now())
        .into_iter()
        .map(LimitRow::of)
        .collect();
    Page::ok(&LimitsPage { l, limits })
}

/// A refused change, in this page's words ("Forbidden", "Refused"); otherwise as any page.
fn refusal(e: RunDbError) -> PageError {
    match ApiError::from(e) {
        ApiError::Unauthorized(m) => PageError::refused(StatusCode::FORBIDDEN, "Forbidden", m),
        ApiError::BadRequest(m) => PageError::refused(StatusCode::BAD_REQUEST, "Refused", m),
        ApiError::Internal(detail) => PageError::Internal {
            what: "set_limit",
            detail,
        },
        e => PageError::internal("set_limit", e),
    }
}

/// `GET /limits`.
pub async fn view(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let scheduler = state.scheduler.clone();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        limits_page(&scheduler, ctx, None)
    })
    .await
}

#[derive(Deserialize, Default)]
pub struct MaxForm {
    #[serde(default)]
    name: String,
    #[serde(default)]
    max: String,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /limits`: an approver sets a configured limit's max.
pub async fn set_max(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<MaxForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    let scheduler = state.scheduler.clone();
    page(
        &state,
        Input::post(&state, &headers, f.csrf_token),
        move |_, ctx, _| {
            let Some(user) = ctx.user.clone() else {
                return Page::redirect("/login");
            };
            let Ok(max) = f.max.trim().parse::<u64>() else {
                return Err(PageError::refused(
                    StatusCode::BAD_REQUEST,
                    "Bad value",
                    "The max must be a whole number.",
                ));
            };
            let old = scheduler
                .set_limit_max(&f.name, max, &user)
                .map_err(refusal)?;
            let note = format!("{}: max {old} -> {max}", f.name);
            limits_page(&scheduler, ctx, Some(Flash::info(note)))
        },
    )
    .await
}

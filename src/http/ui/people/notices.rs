//! Telling followers: `GET /notifications` (the list, unread ones marked), `POST
//! /notifications/read` (mark all read, up to the newest notice the page showed),
//! `GET /notifications/unread.json` (the header's script: the count and the newest unread
//! ones, for browser notifications) and `GET /feeds/<token>.atom` (a user's notices as an
//! Atom feed, found by a secret token; an unknown or revoked token is 404).
//!
//! The notices are the ledger's (`ledger/notices.rs`: derived from the action log).
//! Must not: read the store or render outside the pool or the render lane.

use std::sync::Arc;

use askama::Template;
use axum::Form;
use axum::extract::rejection::FormRejection;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use crate::http::state::AppState;
use crate::http::ui::kit::{
    Input, Layout, OrInternal, Page, PageError, form_or_default, open_page, page,
};
use crate::ledger::{MAX_NOTICES, Notice};
use crate::rundb::model::Date;

/// One notice as the pages and the feed show it.
pub struct NoticeView {
    pub id: String,
    pub title: String,
    pub detail: String,
    pub run_id: String,
    pub unread: bool,
    /// RFC 3339 (the feed's `updated`).
    pub iso: String,
    /// "N units ago".
    pub ago: String,
    pub time: f64,
}

fn date(time: f64) -> Date {
    let micros = (time * 1e6) as i64;
    Date(chrono::DateTime::from_timestamp_micros(micros).unwrap_or_default())
}

/// What happened to the run, in a few words.
fn what(n: &Notice) -> &'static str {
    match (n.action.as_str(), n.message.as_str()) {
        ("finished_run", _) => "Finished",
        ("stop_run", "User stop") => "Stopped",
        ("stop_run", _) => "Stopped (failed)",
        ("approve_run", "unapproved") => "Unapproved",
        ("approve_run", _) => "Approved",
        ("delete_run", _) => "Deleted",
        _ => "Changed",
    }
}

fn view(n: &Notice) -> NoticeView {
    let d = date(n.time);
    let mut detail = format!("by {}", n.username);
    // A finished run's message is its raw results: the run page says it better.
    if !n.message.is_empty() && n.action != "finished_run" {
        detail.push_str(": ");
        detail.extend(n.message.chars().take(300));
    }
    NoticeView {
        id: n.id.clone(),
        title: format!("{}: {}", what(n), n.run),
        detail,
        run_id: n.run_id.clone(),
        unread: n.unread,
        iso: d.0.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
        ago: crate::http::ui::kit::time::ago(Some(&d)),
        time: n.time,
    }
}

#[derive(Template)]
#[template(path = "notifications.html")]
pub struct NotificationsPage {
    pub l: Layout,
    pub notices: Vec<NoticeView>,
    pub unread: usize,
    /// The newest notice's time: what "mark all read" marks up to.
    pub newest: f64,
    pub max: usize,
}

/// `GET /notifications`: the user's notices, newest first (login-gated).
pub async fn notifications(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let ledger = state.ledger.clone();
    page(&state, Input::get(&state, &headers), move |_, ctx, _| {
        let Some(user) = ctx.user.clone() else {
            return Page::redirect(crate::http::ui::kit::url::login_next("/notifications"));
        };
        let notices: Vec<NoticeView> = ledger
            .notices(&user.username, false)
            .or_internal("notices")?
            .iter()
            .map(view)
            .collect();
        let p = NotificationsPage {
            l: Layout::new(ctx, "Notifications"),
            unread: notices.iter().filter(|n| n.unread).count(),
            newest: notices.first().map_or(0.0, |n| n.time),
            notices,
            max: MAX_NOTICES,
        };
        Page::ok(&p)
    })
    .await
}

/// The "mark all read" form.
#[derive(Deserialize, Default)]
pub struct ReadForm {
    /// The newest notice's time the page showed.
    #[serde(default)]
    upto: Option<f64>,
    #[serde(default)]
    csrf_token: Option<String>,
}

/// `POST /notifications/read`: everything up to the newest notice shown is read (a notice
/// that came in since stays unread).
pub async fn mark_read(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<ReadForm>, FormRejection>,
) -> Response {
    let f = form_or_default(form);
    let ledger = state.ledger.clone();
    let input = Input::post(&state, &headers, f.csrf_token.clone());
    page(&state, input, move |_, ctx, _| {
        let Some(user) = ctx.user.clone() else {
            return Page::redirect("/login");
        };
        let upto = match f.upto.filter(|t| t.is_finite() && *t > 0.0) {
            Some(t) => t,
            None => ledger
                .notices(&user.username, true)
                .or_internal("notices")?
                .first()
                .map_or(0.0, |n| n.time),
        };
        ledger
            .mark_read(&user.username, upto)
            .or_internal("mark read")?;
        Page::redirect("/notifications")
    })
    .await
}

/// `GET /notifications/unread.json`: `{"unread": N, "notices": [{id, title, body, url,
/// time}]}` (the newest unread ones, `ledger::UNREAD_KEPT` at most; from memory, like the
/// header's count); a visitor gets `{"unread": 0, "notices": []}`.
pub async fn unread_json(State(state): State<Arc<AppState>>, headers: HeaderMap) -> Response {
    let ctx = match open_page(&state, Input::get(&state, &headers)).await {
        Ok(ctx) => ctx,
        Err(answer) => return answer,
    };
    let ledger = state.ledger.clone();
    let user = ctx.user.map(|u| u.username);
    let job = move || -> Result<serde_json::Value, crate::ledger::LedgerError> {
        let Some(user) = user else {
            return Ok(json!({"unread": 0, "notices": []}));
        };
        let (unread, newest) = ledger.unread(&user)?;
        let notices: Vec<_> = newest
            .iter()
            .map(|n| {
                let v = view(n);
                json!({
                    "id": v.id,
                    "title": v.title,
                    "body": v.detail,
                    "url": format!("/tests/view/{}", v.run_id),
                    "time": v.time,
                })
            })
            .collect();
        Ok(json!({"unread": unread, "notices": notices}))
    };
    let mut r = match state.offload.run(job).await {
        Ok(Ok(v)) => (StatusCode::OK, axum::Json(v)).into_response(),
        Ok(Err(e)) => {
            tracing::error!(error = %e, "unread notices failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "unread notices not read");
            (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable").into_response()
        }
    };
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

#[derive(Template)]
#[template(path = "feed.xml")]
pub struct AtomFeed {
    /// `tag:` URI of the feed (stable per user, never the token).
    pub id: String,
    pub user: String,
    pub updated: String,
    /// `public_url` (links are paths without it).
    pub base: String,
    pub notices: Vec<NoticeView>,
}

/// `GET /feeds/<token>.atom`: the notices of the token's user, as Atom. An unknown or
/// revoked token is 404.
pub async fn feed(State(state): State<Arc<AppState>>, Path(file): Path<String>) -> Response {
    let Some(token) = file.strip_suffix(".atom").map(str::to_string) else {
        return not_found();
    };
    let ledger = state.ledger.clone();
    // The feed's links: on `public_url`, else paths (a reader resolves them against the
    // feed's own URL); never on the request's `Host`.
    let base = state.config.public_base().unwrap_or_default().to_string();
    let job = move || -> Result<Option<String>, PageError> {
        let Some(user) = ledger.feed_user(&token).or_internal("feed token")? else {
            return Ok(None);
        };
        let notices: Vec<NoticeView> = ledger
            .notices(&user, false)
            .or_internal("notices")?
            .iter()
            .map(|n| {
                let mut v = view(n);
                for text in [&mut v.id, &mut v.title, &mut v.detail, &mut v.run_id] {
                    *text = xml_chars(text);
                }
                v
            })
            .collect();
        let updated = notices
            .first()
            .map_or_else(|| "1970-01-01T00:00:00.000Z".to_string(), |n| n.iso.clone());
        let user = xml_chars(&user);
        let feed = AtomFeed {
            id: format!("tag:shoal,2026:notices:{user}"),
            user,
            updated,
            base,
            notices,
        };
        Ok(Some(feed.render()?))
    };
    match state.page_renders.run(job).await {
        Ok(Ok(Some(xml))) => {
            let mut r = (StatusCode::OK, xml).into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/atom+xml; charset=utf-8"),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            r
        }
        Ok(Ok(None)) => not_found(),
        Ok(Err(e)) => {
            tracing::error!(error = ?e, "feed failed");
            (StatusCode::INTERNAL_SERVER_ERROR, "Internal Server Error").into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, "feed not rendered");
            (StatusCode::SERVICE_UNAVAILABLE, "Service Unavailable").into_response()
        }
    }
}

/// `text` without the characters XML 1.0 has no place for (the C0 controls but tab, line
/// feed and carriage return; U+FFFE, U+FFFF): one of them anywhere makes a feed reader
/// drop the whole feed. Runs older than the rule at creation may still have them.
fn xml_chars(text: &str) -> String {
    text.chars()
        .filter(|&c| matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..))
        .collect()
}

fn not_found() -> Response {
    (StatusCode::NOT_FOUND, "Not Found").into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_feed_keeps_only_what_xml_allows() {
        assert_eq!(
            xml_chars("a\u{0}b\u{8}c\u{1b}[0m\u{fffe}\u{ffff}"),
            "abc[0m"
        );
        assert_eq!(
            xml_chars("tab\tline\ncr\r é ☃ 𝄞 \u{85}"),
            "tab\tline\ncr\r é ☃ 𝄞 \u{85}"
        );
    }
}

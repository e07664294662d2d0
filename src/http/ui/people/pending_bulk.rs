//! `POST /user_management/pending`: an approver accepts or rejects several pending signups at
//! once (the checkboxes of `/user_management`'s pending group), each through the same
//! decision and log as one account's page (`Accounts::administer_user`).
//!
//! Owns: the form (`users`, repeated; `decision` = `accept` | `reject`; `csrf_token`), its
//! limits and the summary shown after; a bulk rejection refunds the rejected signups from
//! everybody's signup window (`signup_all`). Must not: change an account any other way.

use std::sync::Arc;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum_extra::extract::{Form, FormRejection};
use serde::Deserialize;

use super::profile::to_login;
use crate::accounts::{UserAction, UserError};
use crate::http::state::AppState;
use crate::http::ui::kit::{Href, Input, Page, PageError, page};

/// The most accounts one form may decide (a page of `/user_management` shows 25, "all" more).
pub const MAX_BULK: usize = 500;

/// The form's fields (`users` repeated, one per ticked box).
#[derive(Debug, Default, Deserialize)]
pub struct BulkForm {
    #[serde(default)]
    users: Vec<String>,
    decision: Option<String>,
    csrf_token: Option<String>,
}

/// What the form asks: the decision and the names, or the reason it is refused.
fn parse(form: &BulkForm) -> Result<(UserAction, Vec<String>), String> {
    let action = match form.decision.as_deref() {
        Some("accept") => UserAction::Accept,
        Some("reject") => UserAction::Reject,
        _ => return Err("Choose Accept or Reject for the selected accounts.".into()),
    };
    let mut names: Vec<String> = Vec::new();
    for v in &form.users {
        if !v.trim().is_empty() && !names.iter().any(|n| n == v.trim()) {
            names.push(v.trim().to_string());
        }
    }
    if names.is_empty() {
        return Err("No account was selected: tick the accounts first.".into());
    }
    if names.len() > MAX_BULK {
        return Err(format!("At most {MAX_BULK} accounts at once."));
    }
    Ok((action, names))
}

/// `POST /user_management/pending`: approvers only.
pub async fn decide_pending(
    State(state): State<Arc<AppState>>,
    headers: HeaderMap,
    form: Result<Form<BulkForm>, FormRejection>,
) -> Response {
    let mut fields = form.map(|Form(f)| f).unwrap_or_default();
    let token = fields.csrf_token.take();
    let accounts = state.accounts.clone();
    let limits = state.clone();
    page(
        &state,
        Input::post(&state, &headers, token),
        move |_, ctx, _| {
            let Some(me) = ctx.user.clone() else {
                return to_login("/user_management");
            };
            if !me.is_approver() {
                return Err(UserError::NotApprover.into());
            }
            let (action, names) = parse(&fields)
                .map_err(|text| PageError::refused(StatusCode::BAD_REQUEST, "Not done", text))?;
            let (mut done, mut skipped) = (0usize, 0usize);
            for name in &names {
                match accounts.administer_user(&me, name, action) {
                    Ok(()) => done += 1,
                    // Decided by someone else meanwhile, or gone: counted, not an error.
                    Err(UserError::NotPending(_) | UserError::NoSuchUser(_)) => skipped += 1,
                    Err(e) => return Err(e.into()),
                }
            }
            if action == UserAction::Reject {
                // Rejected signups created nothing lasting: they are taken back from
                // everybody's signup window (`signup_all`), so a flood an approver cleared
                // does not keep signup closed for the hour.
                for _ in 0..done {
                    crate::http::limits::refund(
                        &limits,
                        &crate::limits::Scope::Signup,
                        &crate::limits::KeyCtx::default(),
                    );
                }
            }
            let code = if action == UserAction::Accept {
                "bulk-accepted"
            } else {
                "bulk-rejected"
            };
            Page::redirect(
                Href::new("/user_management")
                    .param("group", "pending")
                    .param("done", code)
                    .param("n", done)
                    .param_if(skipped > 0, "skipped", skipped)
                    .build(),
            )
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The form as the handler's extractor reads a urlencoded body.
    async fn form(pairs: &[(&str, &str)]) -> BulkForm {
        use axum::extract::FromRequest as _;
        let body = pairs
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("&");
        let req = axum::http::Request::post("/user_management/pending")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(body))
            .expect("request");
        Form::<BulkForm>::from_request(req, &())
            .await
            .expect("form")
            .0
    }

    #[tokio::test]
    async fn the_form_names_a_decision_and_accounts() {
        let mut all = form(&[("users", "bob"), ("csrf_token", "t"), ("users", "carol")]).await;
        assert_eq!(all.users, vec!["bob", "carol"]);
        assert_eq!(all.csrf_token.take().as_deref(), Some("t"));
        let (a, names) = parse(
            &form(&[
                ("users", "bob"),
                ("users", "carol"),
                ("users", "bob"),
                ("decision", "accept"),
            ])
            .await,
        )
        .expect("ok");
        assert_eq!(a, UserAction::Accept);
        assert_eq!(names, vec!["bob", "carol"]);
        assert!(parse(&form(&[("users", "bob")]).await).is_err());
        assert!(parse(&form(&[("decision", "reject")]).await).is_err());
        assert!(parse(&form(&[("users", "bob"), ("decision", "delete")]).await).is_err());
    }
}

//! What pages show of a user's follows: the run page's button ([`following`]), the dashboard's
//! list ([`dashboard_rows`]) and the profile's section ([`profile_view`]). The follow and
//! unfollow forms are the people room's (`people/follows.rs`).

use super::session::Ctx;
use super::{OrInternal, PageError};
use crate::ledger::{Ledger, MAX_FOLLOWS};

/// Whether the session's user follows `run_id` (`None` for a visitor): the run page's button.
pub fn following(ledger: &Ledger, ctx: &Ctx, run_id: &str) -> Result<Option<bool>, PageError> {
    let Some(user) = &ctx.user else {
        return Ok(None);
    };
    let f = ledger.follows(&user.username).or_internal("follows")?;
    Ok(Some(f.follows(run_id)))
}

/// One followed run on the profile and the dashboard.
pub struct FollowRow {
    pub run_id: String,
    pub label: String,
}

/// The profile's follows section.
pub struct FollowsView {
    pub runs: Vec<FollowRow>,
    pub max: usize,
    /// Whether the user has a live feed URL.
    pub feed: bool,
}

/// The follows section of `user`'s profile.
pub fn profile_view(ledger: &Ledger, user: &str) -> Result<FollowsView, PageError> {
    let f = ledger.follows(user).or_internal("follows")?;
    Ok(FollowsView {
        runs: rows(&f.runs),
        max: MAX_FOLLOWS,
        feed: f.feed.is_some(),
    })
}

fn rows(runs: &[crate::ledger::Followed]) -> Vec<FollowRow> {
    runs.iter()
        .rev()
        .map(|r| FollowRow {
            run_id: r.run_id.clone(),
            label: if r.label.is_empty() {
                r.run_id.clone()
            } else {
                r.label.clone()
            },
        })
        .collect()
}

/// The dashboard's list of the runs the user follows (empty for a visitor).
pub fn dashboard_rows(ledger: &Ledger, ctx: &Ctx) -> Result<Vec<FollowRow>, PageError> {
    let Some(user) = &ctx.user else {
        return Ok(Vec::new());
    };
    let f = ledger.follows(&user.username).or_internal("follows")?;
    Ok(rows(&f.runs))
}

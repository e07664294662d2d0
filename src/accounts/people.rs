//! People: an approver's decisions about accounts (accept, reject, block, unblock) and a
//! user's own profile change (email, tests repository, password; the tests repository also
//! when a submission used another one).
//!
//! Owns: who may decide (approvers only), the state changes and their action-log entries as
//! Fishtest writes them (`accept_user` "accepted", `block_user` "blocked"/"unblocked"; a
//! rejected signup is deleted with no entry, only a log line), and ending the sessions a
//! change must end (a block, a rejection, a new password: every session of that user; a new
//! password also every API token and the feed URL), and forgetting a deleted account whole
//! (its sessions, tokens, reset links, follows and feed: nothing is inherited by its name).
//! Must not: validate form fields (the UI does, with Fishtest's messages); know HTTP; touch
//! runs.

use serde_json::json;

use super::{Accounts, User, UserError};
use crate::store::Doc;

/// What an approver does to an account.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UserAction {
    /// Accept a pending signup.
    Accept,
    /// Reject a pending signup: its document is deleted.
    Reject,
    Block,
    Unblock,
}

/// A user's own profile change, already validated.
#[derive(Debug, Clone, Default)]
pub struct ProfileChange {
    pub email: String,
    pub tests_repo: String,
    /// A new password (its strength already checked); `None` keeps the old one.
    pub new_password: Option<String>,
}

impl Accounts {
    /// An approver's decision about the account `name`, logged as Fishtest does.
    pub fn administer_user(
        &self,
        approver: &User,
        name: &str,
        action: UserAction,
    ) -> Result<(), UserError> {
        if !approver.is_approver() {
            return Err(UserError::NotApprover);
        }
        let mut user = self
            .users
            .load(name)?
            .ok_or_else(|| UserError::NoSuchUser(name.to_string()))?;
        let mut fields = Doc::new();
        fields.insert("user".into(), json!(user.username));
        match action {
            UserAction::Block | UserAction::Unblock => {
                let blocked = action == UserAction::Block;
                user.blocked = blocked;
                self.users.save(&user)?;
                if blocked {
                    self.sessions_end_user(&user.username)?;
                }
                let message = if blocked { "blocked" } else { "unblocked" };
                fields.insert("message".into(), json!(message));
                self.ledger
                    .log_action("block_user", &approver.username, fields)?;
                tracing::info!(user = %user.username, by = %approver.username, message, "user");
            }
            UserAction::Accept | UserAction::Reject if !user.pending => {
                return Err(UserError::NotPending(user.username.clone()));
            }
            UserAction::Accept => {
                user.pending = false;
                self.users.save(&user)?;
                fields.insert("message".into(), json!("accepted"));
                self.ledger
                    .log_action("accept_user", &approver.username, fields)?;
                tracing::info!(user = %user.username, by = %approver.username, "user accepted");
            }
            UserAction::Reject => {
                self.users.delete(&user)?;
                self.forget_user(&user.username)?;
                tracing::info!(user = %user.username, by = %approver.username, "signup rejected: user deleted");
            }
        }
        Ok(())
    }

    /// Saves the tests repository a submission used as the user's own (Fishtest saves a
    /// changed `tests_repo` at `/tests/run`); nothing is written when it is unchanged.
    pub fn set_tests_repo(&self, username: &str, repo: &str) -> Result<(), UserError> {
        let mut saved = self
            .users
            .load(username)?
            .ok_or_else(|| UserError::NoSuchUser(username.to_string()))?;
        let repo = repo.trim().trim_end_matches('/');
        if saved.tests_repo != repo {
            saved.tests_repo = repo.to_string();
            self.users.save(&saved)?;
        }
        Ok(())
    }

    /// Saves a user's own profile change; a new password ends every session of the user (the
    /// caller starts a fresh one for the browser that made the change). Returns the saved user.
    pub fn change_profile(&self, user: &User, change: ProfileChange) -> Result<User, UserError> {
        let mut saved = self
            .users
            .load(&user.username)?
            .ok_or_else(|| UserError::NoSuchUser(user.username.clone()))?;
        saved.tests_repo = change.tests_repo.trim_end_matches('/').to_string();
        // A new address another account has is refused (ignoring case) before anything is
        // saved: a shared address would switch off mailed resets for both.
        self.users.save_with_email(&mut saved, &change.email)?;
        if let Some(p) = change.new_password {
            self.users.set_password(&mut saved, &p)?;
            let ended = self.save_new_password(&saved)?;
            tracing::info!(user = %saved.username, sessions = ended, "password changed");
        }
        Ok(saved)
    }

    /// Everything kept under a deleted account's name: its sessions, API tokens, reset
    /// links, follows and feed URL. A later account with the name starts with none of them.
    pub fn forget_user(&self, username: &str) -> Result<(), UserError> {
        self.sessions_end_user(username)?;
        self.tokens_revoke_all(username)?;
        self.reset_drop(username, false)?;
        self.ledger.forget_follows(username)?;
        Ok(())
    }
}

//! API tokens: named, revocable credentials a user makes for scripts, used as
//! `Authorization: Bearer shoal_…` on the JSON endpoints that otherwise take a password.
//!
//! Owns: making a token (32 random bytes, `shoal_` + 64 hex characters, shown once), its
//! record in the store's `shoal_kvstore` (one document per token, `_id` `api_token:<SHA-256 of the
//! token, hex>`, with the owner, the name, `read_only`, the creation and last-use dates; the
//! token itself is never stored), looking a presented token up by its hash, the owner's state
//! checked on every use (read from the store, not from the credential cache: a blocked user's
//! tokens stop at once), the last-use date (its own document, `api_token_used:<token_id>`,
//! written at most once a minute per token, so that a use racing a revocation never writes
//! the token back), the owner's account (`users._id`, so a later account with a deleted
//! one's name inherits nothing), revocation (one token, or all of a user's after a new
//! password together with the feed URL), and the action-log entries
//! (`api_token`: created, revoked, used for an endpoint).
//! Must not: know HTTP or headers (the edge parses `Authorization`), decide which endpoints
//! only read (the edge does), keep tokens in memory, or log a token.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::{Accounts, AuthError, User, UserError};
use crate::store::{Collection, Cond, Date, Doc, Query};

/// Every token starts with this.
pub const TOKEN_PREFIX: &str = "shoal_";
/// The `kind` of the token documents in `shoal_kvstore`, and their `_id` prefix.
const KIND: &str = "api_token";
/// The `kind` of the last-use documents, and their `_id` prefix.
const USED_KIND: &str = "api_token_used";
/// The most tokens one user may hold.
pub const MAX_TOKENS_PER_USER: usize = 50;
/// The longest token name, in characters.
pub const TOKEN_NAME_MAX: usize = 64;
/// The last-use date is written again only when older than this (seconds).
const LAST_USED_EVERY_S: i64 = 60;

/// A token's record, as the owner's page lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenInfo {
    /// A public handle (16 hex characters) to revoke the token by; not the token.
    pub token_id: String,
    pub user: String,
    /// The owner's account (`users._id`): a later account that takes a deleted one's name
    /// does not inherit its tokens. Empty in tokens made before it was recorded (those are
    /// refused when older than the account).
    #[serde(default)]
    pub account: String,
    pub name: String,
    pub read_only: bool,
    pub created: Date,
    #[serde(default)]
    pub last_used: Option<Date>,
}

/// Why a token could not be made.
#[derive(Debug, thiserror::Error)]
pub enum TokenRefusal {
    #[error("a token name must have 1 to {TOKEN_NAME_MAX} printable characters")]
    BadName,
    #[error("at most {MAX_TOKENS_PER_USER} tokens per user")]
    TooMany,
    /// The password changed after it was checked for this token.
    #[error("the password changed meanwhile: log in again")]
    PasswordChanged,
    #[error(transparent)]
    Account(#[from] UserError),
}

/// The SHA-256 of a token, hex: how tokens (and reset links) are stored and looked up.
pub fn token_hash(token: &str) -> String {
    hex::encode(Sha256::digest(token.as_bytes()))
}

/// A new secret: `shoal_` + 32 random bytes in hex.
pub(super) fn new_secret() -> String {
    format!("{TOKEN_PREFIX}{}", hex::encode(rand::random::<[u8; 32]>()))
}

fn kv_id(hash: &str) -> String {
    format!("{KIND}:{hash}")
}

fn valid_name(name: &str) -> bool {
    let n = name.chars().count();
    (1..=TOKEN_NAME_MAX).contains(&n) && !name.chars().any(char::is_control)
}

fn used_id(token_id: &str) -> String {
    format!("{USED_KIND}:{token_id}")
}

fn used_of(doc: &Doc) -> Option<Date> {
    serde_json::from_value(doc.get("last_used")?.clone()).ok()
}

fn info_of(doc: &Doc) -> Option<TokenInfo> {
    serde_json::from_value(doc.get("token")?.clone()).ok()
}

impl Accounts {
    /// Makes a token for `user`, as read when its password was checked; returns the token (to
    /// show once) and its record. Refused ([`TokenRefusal::PasswordChanged`]) when the stored
    /// password is no longer the one `user` has: checked and stored under the credentials
    /// lock, so a token never outlives the password change it raced.
    pub fn token_create(
        &self,
        user: &User,
        name: &str,
        read_only: bool,
    ) -> Result<(String, TokenInfo), TokenRefusal> {
        let name = name.trim();
        if !valid_name(name) {
            return Err(TokenRefusal::BadName);
        }
        if self.tokens_of(&user.username)?.len() >= MAX_TOKENS_PER_USER {
            return Err(TokenRefusal::TooMany);
        }
        let secret = new_secret();
        let info = TokenInfo {
            token_id: hex::encode(rand::random::<[u8; 8]>()),
            user: user.username.clone(),
            account: user.id.clone(),
            name: name.to_string(),
            read_only,
            created: Date::now(),
            last_used: None,
        };
        {
            let _held = self.credentials.lock();
            if !self.same_password(user)? {
                return Err(TokenRefusal::PasswordChanged);
            }
            self.store_token(&token_hash(&secret), &info)?;
        }
        let mode = if read_only { "read-only" } else { "read-write" };
        self.log_token(&info, format!("created {mode} token {:?}", info.name))?;
        tracing::info!(user = %info.user, token = %info.token_id, "API token created");
        Ok((secret, info))
    }

    fn store_token(&self, hash: &str, info: &TokenInfo) -> Result<(), UserError> {
        let doc = json!({"_id": kv_id(hash), "kind": KIND, "user": info.user,
                         "token_id": info.token_id, "token": info});
        if let Value::Object(doc) = doc {
            self.store.put(Collection::ShoalKv, &doc)?;
        }
        Ok(())
    }

    fn log_token(&self, info: &TokenInfo, message: String) -> Result<(), UserError> {
        let mut fields = Doc::new();
        fields.insert("user".into(), json!(info.user));
        fields.insert("message".into(), json!(message));
        self.ledger.log_action("api_token", &info.user, fields)?;
        Ok(())
    }

    /// The documents of `username`'s tokens.
    fn token_docs(&self, username: &str) -> Result<Vec<Doc>, UserError> {
        Ok(self.store.find(
            Collection::ShoalKv,
            &Query::new()
                .with(Cond::Eq("kind".into(), json!(KIND)))
                .with(Cond::Eq("user".into(), json!(username))),
        )?)
    }

    /// `username`'s tokens, oldest first.
    pub fn tokens_of(&self, username: &str) -> Result<Vec<TokenInfo>, UserError> {
        let used: std::collections::HashMap<String, Date> = self
            .store
            .find(
                Collection::ShoalKv,
                &Query::new()
                    .with(Cond::Eq("kind".into(), json!(USED_KIND)))
                    .with(Cond::Eq("user".into(), json!(username))),
            )?
            .iter()
            .filter_map(|d| Some((d.get("token_id")?.as_str()?.to_string(), used_of(d)?)))
            .collect();
        let mut tokens: Vec<TokenInfo> = self
            .token_docs(username)?
            .iter()
            .filter_map(info_of)
            .map(|mut t| {
                t.last_used = used.get(&t.token_id).copied();
                t
            })
            .collect();
        tokens.sort_by(|a, b| (a.created, &a.token_id).cmp(&(b.created, &b.token_id)));
        Ok(tokens)
    }

    /// Revokes `user`'s token `token_id`; false if the user has no such token.
    pub fn token_revoke(&self, user: &User, token_id: &str) -> Result<bool, UserError> {
        for doc in self.token_docs(&user.username)? {
            let Some(info) = info_of(&doc) else { continue };
            if info.token_id != token_id {
                continue;
            }
            let Some(id) = doc.get("_id").and_then(Value::as_str) else {
                continue;
            };
            let deleted = self.store.delete(Collection::ShoalKv, id)?;
            self.store
                .delete(Collection::ShoalKv, &used_id(&info.token_id))?;
            if deleted {
                self.log_token(&info, format!("revoked token {:?}", info.name))?;
                tracing::info!(user = %info.user, token = %info.token_id, "API token revoked");
            }
            return Ok(true);
        }
        Ok(false)
    }

    /// Revokes every token of `username`; returns how many there were.
    pub fn tokens_revoke_all(&self, username: &str) -> Result<usize, UserError> {
        let mut revoked = 0;
        for doc in self.token_docs(username)? {
            if let Some(id) = doc.get("_id").and_then(Value::as_str)
                && self.store.delete(Collection::ShoalKv, id)?
            {
                revoked += 1;
            }
        }
        for doc in self.store.find(
            Collection::ShoalKv,
            &Query::new()
                .with(Cond::Eq("kind".into(), json!(USED_KIND)))
                .with(Cond::Eq("user".into(), json!(username))),
        )? {
            if let Some(id) = doc.get("_id").and_then(Value::as_str) {
                self.store.delete(Collection::ShoalKv, id)?;
            }
        }
        Ok(revoked)
    }

    /// Revokes every token of `user` on their own request ("revoke all"), logged.
    pub fn tokens_revoke_all_logged(&self, user: &User) -> Result<usize, UserError> {
        self.revoke_all_because(user, "revoked all tokens")
    }

    fn revoke_all_because(&self, user: &User, why: &str) -> Result<usize, UserError> {
        let tokens = self.tokens_revoke_all(&user.username)?;
        if tokens > 0 {
            let mut fields = Doc::new();
            fields.insert("user".into(), json!(user.username));
            fields.insert("message".into(), json!(format!("{why} ({tokens})")));
            self.ledger.log_action(KIND, &user.username, fields)?;
            tracing::info!(user = %user.username, tokens, "{why}");
        }
        Ok(tokens)
    }

    /// Whether `user` (its account and password as read earlier) is still the stored one.
    /// Called under the credentials lock.
    fn same_password(&self, user: &User) -> Result<bool, UserError> {
        Ok(self
            .users
            .load(&user.username)?
            .is_some_and(|now| now.id == user.id && now.secret() == user.secret()))
    }

    /// A new feed URL for `user`, as read when the session was checked (the old URL stops
    /// working); `None` when the stored password is no longer the one `user` has (the
    /// session is ending). Checked and stored under the credentials lock, as a token is.
    pub fn feed_create(&self, user: &User) -> Result<Option<String>, UserError> {
        let _held = self.credentials.lock();
        if !self.same_password(user)? {
            return Ok(None);
        }
        Ok(Some(self.ledger.new_feed(&user.username)?))
    }

    /// Saves `user` with its new password, then ends its sessions and revokes its tokens and
    /// feed URL, all under the credentials lock; returns how many sessions ended.
    pub(super) fn save_new_password(&self, user: &User) -> Result<usize, UserError> {
        let _held = self.credentials.lock();
        self.users.save(user)?;
        let ended = self.sessions_end_user(&user.username)?;
        self.credentials_revoke(user)?;
        Ok(ended)
    }

    /// After a password change or reset: every API token and the feed URL of `user`
    /// revoked (a stolen session or password must not leave a lasting credential behind).
    pub fn credentials_revoke(&self, user: &User) -> Result<(), UserError> {
        self.revoke_all_because(user, "revoked all tokens: new password")?;
        if self.ledger.revoke_feed(&user.username)? {
            tracing::info!(user = %user.username, "feed URL revoked: new password");
        }
        Ok(())
    }

    /// The owner of a presented token and the token's record. An unknown or revoked token is
    /// [`AuthError::WrongPassword`]; a blocked or pending owner is refused as at login (the
    /// owner is read from the store on every use).
    pub fn token_login(&self, token: &str) -> Result<(User, TokenInfo), AuthError> {
        if !token.starts_with(TOKEN_PREFIX) || token.len() > 128 {
            return Err(AuthError::WrongPassword);
        }
        let hash = token_hash(token);
        let doc = self
            .store
            .get(Collection::ShoalKv, &kv_id(&hash))
            .map_err(UserError::from)?;
        let Some(info) = doc.as_ref().and_then(info_of) else {
            return Err(AuthError::WrongPassword);
        };
        let Some(user) = self.users.load(&info.user)? else {
            return Err(AuthError::WrongPassword);
        };
        // The token of another account that had this name (deleted since) is no token.
        let foreign = if info.account.is_empty() {
            info.created < user.registration_time
        } else {
            info.account != user.id
        };
        if foreign {
            return Err(AuthError::WrongPassword);
        }
        if user.blocked {
            return Err(AuthError::Blocked);
        }
        if user.pending {
            return Err(AuthError::Pending);
        }
        let now = Date::now();
        let used_doc = self
            .store
            .get(Collection::ShoalKv, &used_id(&info.token_id))
            .map_err(UserError::from)?;
        let stale = used_doc
            .as_ref()
            .and_then(used_of)
            .is_none_or(|t| now.0.timestamp().saturating_sub(t.0.timestamp()) >= LAST_USED_EVERY_S);
        if stale {
            let doc = json!({"_id": used_id(&info.token_id), "kind": USED_KIND,
                             "user": info.user, "token_id": info.token_id, "last_used": now});
            if let Value::Object(doc) = doc {
                self.store
                    .put(Collection::ShoalKv, &doc)
                    .map_err(UserError::from)?;
            }
        }
        Ok((user, info))
    }

    /// Logs one use of a token for `endpoint` (after the call succeeded).
    pub fn token_used(&self, info: &TokenInfo, endpoint: &str) -> Result<(), UserError> {
        self.log_token(info, format!("token {:?} used for {endpoint}", info.name))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_and_names() {
        let a = new_secret();
        assert!(a.starts_with(TOKEN_PREFIX));
        assert_eq!(a.len(), TOKEN_PREFIX.len() + 64);
        assert_ne!(a, new_secret());
        assert_eq!(token_hash(&a).len(), 64);
        assert_ne!(token_hash(&a), a);
        assert!(valid_name("ci script"));
        assert!(!valid_name(""));
        assert!(!valid_name("a\nb"));
        assert!(!valid_name(&"x".repeat(TOKEN_NAME_MAX + 1)));
    }
}

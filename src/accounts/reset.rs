//! Password reset without email infrastructure: one-time links an approver issues for a user
//! (and, when the operator configured SMTP, that a user asks for by email).
//!
//! Owns: making a link's secret (`shoal_` + 32 random bytes in hex), its record in the store's
//! `shoal_kvstore` (`_id` `password_reset:<SHA-256 of the secret, hex>`: the user, who asked
//! (`by`: the approver's name, or `email`), `mailed` (the kind), the creation and expiry
//! dates; the secret itself is never stored), the rules (valid [`RESET_TTL_S`], single use: using a link deletes every link
//! of the user (under the credentials lock) before the password changes, and goes on only if
//! it was among the live ones deleted, so two uses racing each other, of one link or of two,
//! cannot both win; an approver's new link replaces all of the user's
//! links, a mailed one only earlier mailed ones, so an anonymous request never cancels an
//! approver's link; by email at most one link per user every [`EMAIL_EVERY_S`], never to an
//! address two accounts share, whether asked for by name or by address), the password set
//! through a link (which ends every session and revokes every API token and the feed URL of
//! the user), and the action-log entries (`password_reset`: issued by an approver, used). A
//! mailed request writes no action: the log is public, and it would tell who has an account.
//! Must not: know HTTP or send mail (the edge does), check a password's strength (the edge
//! does, with the signup's rule), tell whether an account exists to anyone but an approver.

use serde_json::{Value, json};

use super::tokens::{new_secret, token_hash};
use super::{Accounts, User, UserError};
use crate::store::{Collection, Cond, Date, Doc, Query};

/// The `kind` of reset-link documents in `shoal_kvstore`, and their `_id` prefix.
const KIND: &str = "password_reset";
/// A link is valid this long (24 hours).
pub const RESET_TTL_S: i64 = 24 * 3600;
/// A user gets at most one emailed link this often (seconds).
pub const EMAIL_EVERY_S: i64 = 300;
/// The `by` of a link mailed on request (an approver's link has the approver's name; the
/// kind is told by the `mailed` field, since an approver could be called this too).
const BY_EMAIL: &str = "email";

fn mailed(doc: &Doc) -> bool {
    doc.get("mailed").and_then(Value::as_bool) == Some(true)
}

fn kv_id(hash: &str) -> String {
    format!("{KIND}:{hash}")
}

fn date_of(doc: &Doc, key: &str) -> Option<Date> {
    serde_json::from_value(doc.get(key)?.clone()).ok()
}

impl Accounts {
    /// The documents of `username`'s reset links.
    fn reset_docs(&self, username: &str) -> Result<Vec<Doc>, UserError> {
        Ok(self.store.find(
            Collection::ShoalKv,
            &Query::new()
                .with(Cond::Eq("kind".into(), json!(KIND)))
                .with(Cond::Eq("user".into(), json!(username))),
        )?)
    }

    /// Deletes `username`'s links (only the mailed ones when `only_mailed`).
    pub(super) fn reset_drop(&self, username: &str, only_mailed: bool) -> Result<(), UserError> {
        for doc in self.reset_docs(username)? {
            if only_mailed && !mailed(&doc) {
                continue;
            }
            if let Some(id) = doc.get("_id").and_then(Value::as_str) {
                self.store.delete(Collection::ShoalKv, id)?;
            }
        }
        Ok(())
    }

    /// Stores a new link for `user` (dropping the older ones it replaces: an approver's link
    /// all of them, a mailed one the mailed ones); returns its secret.
    fn reset_store(&self, user: &User, by: &str, mail: bool) -> Result<String, UserError> {
        self.reset_drop(&user.username, mail)?;
        let secret = new_secret();
        let now = Date::now();
        let expires = Date(now.0 + chrono::Duration::seconds(RESET_TTL_S));
        let doc = json!({"_id": kv_id(&token_hash(&secret)), "kind": KIND,
                         "user": user.username, "by": by, "mailed": mail,
                         "created": now, "expires": expires});
        if let Value::Object(doc) = doc {
            self.store.put(Collection::ShoalKv, &doc)?;
        }
        Ok(secret)
    }

    fn log_reset(&self, by: &str, user: &str, message: &str) -> Result<(), UserError> {
        let mut fields = Doc::new();
        fields.insert("user".into(), json!(user));
        fields.insert("message".into(), json!(message));
        self.ledger.log_action("password_reset", by, fields)?;
        Ok(())
    }

    /// An approver issues a reset link for `name`; returns the link's secret (to show once).
    pub fn reset_issue(&self, approver: &User, name: &str) -> Result<String, UserError> {
        if !approver.is_approver() {
            return Err(UserError::NotApprover);
        }
        let user = self
            .users
            .load(name)?
            .ok_or_else(|| UserError::NoSuchUser(name.to_string()))?;
        let secret = self.reset_store(&user, &approver.username, false)?;
        self.log_reset(&approver.username, &user.username, "reset link issued")?;
        tracing::info!(user = %user.username, by = %approver.username, "password reset link issued");
        Ok(secret)
    }

    /// A user asks for a link by email, naming their username or email address. `Some`: the
    /// address to send the link to and the link's secret; `None` when there is nobody to send
    /// it to (no such account, a blocked or pending one, no address, an address another
    /// account has too: by name as by address) or the user was sent one less than
    /// [`EMAIL_EVERY_S`] ago. The caller answers the same either way, before calling this.
    /// Nothing goes to the public action log (it would tell who has an account).
    pub fn reset_request(&self, name_or_email: &str) -> Result<Option<(User, String)>, UserError> {
        let key = name_or_email.trim();
        if key.is_empty() || key.len() > 256 {
            return Ok(None);
        }
        let field = if key.contains('@') {
            "email"
        } else {
            "username"
        };
        let Some(user) = self.only_user(field, key)? else {
            if field == "email" && self.users_with(field, key)? > 1 {
                tracing::info!("password reset not mailed: address shared by several accounts");
            }
            return Ok(None);
        };
        if user.blocked || user.pending || !user.email.contains('@') {
            return Ok(None);
        }
        // An address shared by two accounts names nobody, however it was asked for.
        if field == "username" && self.only_user("email", &user.email)?.is_none() {
            tracing::info!(user = %user.username, "password reset not mailed: address shared");
            return Ok(None);
        }
        let now = Date::now().0.timestamp();
        let recent = self.reset_docs(&user.username)?.iter().any(|d| {
            mailed(d)
                && date_of(d, "created")
                    .is_some_and(|c| now.saturating_sub(c.0.timestamp()) < EMAIL_EVERY_S)
        });
        if recent {
            return Ok(None);
        }
        let secret = self.reset_store(&user, BY_EMAIL, true)?;
        tracing::info!(user = %user.username, "password reset link sent by email");
        Ok(Some((user, secret)))
    }

    /// The one user whose `field` is `value`; `None` for none, two or more, or an unreadable
    /// document.
    fn only_user(&self, field: &str, value: &str) -> Result<Option<User>, UserError> {
        let docs = self.store.find(
            Collection::Users,
            &Query::new()
                .with(Cond::Eq(field.into(), json!(value)))
                .limit(2),
        )?;
        let [doc] = docs.as_slice() else {
            return Ok(None);
        };
        Ok(serde_json::from_value::<User>(Value::Object(doc.clone())).ok())
    }

    /// How many users (up to 2) have `field` equal to `value`.
    fn users_with(&self, field: &str, value: &str) -> Result<usize, UserError> {
        Ok(self
            .store
            .find(
                Collection::Users,
                &Query::new()
                    .with(Cond::Eq(field.into(), json!(value)))
                    .limit(2),
            )?
            .len())
    }

    /// `username`'s live links, for an approver's eyes only: (mailed on request, who issued
    /// it, when), oldest first. No secret: the store has none.
    pub fn reset_links_of(&self, username: &str) -> Result<Vec<(bool, String, Date)>, UserError> {
        let now = Date::now();
        let mut links: Vec<(bool, String, Date)> = self
            .reset_docs(username)?
            .iter()
            .filter(|d| date_of(d, "expires").is_some_and(|e| e > now))
            .filter_map(|d| {
                let by = d.get("by").and_then(Value::as_str)?.to_string();
                Some((mailed(d), by, date_of(d, "created")?))
            })
            .collect();
        links.sort_by_key(|l| l.2);
        Ok(links)
    }

    /// The user a live link (not used, not expired) is for; `None` for anything else.
    pub fn reset_user(&self, secret: &str) -> Result<Option<User>, UserError> {
        let Some(doc) = self
            .store
            .get(Collection::ShoalKv, &kv_id(&token_hash(secret)))?
        else {
            return Ok(None);
        };
        if date_of(&doc, "expires").is_none_or(|e| e <= Date::now()) {
            return Ok(None);
        }
        let Some(name) = doc.get("user").and_then(Value::as_str) else {
            return Ok(None);
        };
        self.users.load(name)
    }

    /// Sets `user`'s new password through the link `secret` (its strength already checked):
    /// every link of the user is used up first (deleted under the credentials lock, and this
    /// use goes on only if `secret` was among the live ones deleted: two links used at once
    /// cannot both win), then the password saved, every session ended and every API token
    /// and the feed URL revoked. `Ok(false)`: the link was not live (used meanwhile,
    /// expired, someone else's).
    pub fn reset_use(&self, secret: &str, user: &User, password: &str) -> Result<bool, UserError> {
        let ours = kv_id(&token_hash(secret));
        {
            let _held = self.credentials.lock();
            let now = Date::now();
            let docs = self.reset_docs(&user.username)?;
            let id_of = |d: &Doc| d.get("_id").and_then(Value::as_str).map(str::to_string);
            // Another user's link, or a dead one, uses up nothing.
            if !docs.iter().any(|d| {
                id_of(d).as_deref() == Some(ours.as_str())
                    && date_of(d, "expires").is_some_and(|e| e > now)
            }) {
                return Ok(false);
            }
            let mut won = false;
            for id in docs.iter().filter_map(id_of) {
                let deleted = self.store.delete(Collection::ShoalKv, &id)?;
                won |= deleted && id == ours;
            }
            if !won {
                return Ok(false);
            }
        }
        let mut saved = self
            .users
            .load(&user.username)?
            .ok_or_else(|| UserError::NoSuchUser(user.username.clone()))?;
        self.users.set_password(&mut saved, password)?;
        let ended = self.save_new_password(&saved)?;
        self.log_reset(
            &saved.username,
            &saved.username,
            "password set through a reset link",
        )?;
        tracing::info!(user = %saved.username, sessions = ended, "password reset");
        Ok(true)
    }
}

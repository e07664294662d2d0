//! A user: the `users` collection's document (Fishtest's fields plus shoal's `password_hash`)
//! and the rules of its fields.
//!
//! Owns: [`User`] and its serialisation, the username rule ([`valid_username`]) and the
//! legacy-name document's name and bound, the default machine limit, the approvers' group.
//! Must not: read or write the store (that is [`super::Users`]); hold a password in a form
//! that `Debug` could print beyond the stored hash.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::UserError;
use crate::store::{Date, Doc};

/// Active tasks per address a user gets unless set otherwise (`machine_limit`).
pub use crate::config::DEFAULT_MACHINE_LIMIT;
/// The group whose members approve runs and accounts.
pub const APPROVERS: &str = "group:approvers";

/// A user document (Fishtest's `users` fields; docs/fishtest-compatibility.md#data-model).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct User {
    #[serde(rename = "_id")]
    pub id: String,
    pub username: String,
    /// Fishtest's field: the plaintext password, as Fishtest writes and compares it. shoal
    /// keeps it only while it shares a MongoDB database with Fishtest ([`super::PasswordMode::Beside`])
    /// and removes it otherwise (a successful login, `shoal user finalize-passwords`). Stores
    /// written by earlier shoal versions may hold an argon2id hash here instead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password: Option<String>,
    /// shoal's field: the argon2id PHC string of the password.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub password_hash: Option<String>,
    pub registration_time: Date,
    #[serde(default)]
    pub pending: bool,
    #[serde(default)]
    pub blocked: bool,
    #[serde(default)]
    pub email: String,
    #[serde(default)]
    pub groups: Vec<String>,
    #[serde(default)]
    pub tests_repo: String,
    #[serde(default = "default_limit")]
    pub machine_limit: u32,
    #[serde(flatten)]
    pub extra: serde_json::Map<String, Value>,
}

fn default_limit() -> u32 {
    DEFAULT_MACHINE_LIMIT
}

impl User {
    pub fn is_approver(&self) -> bool {
        self.groups.iter().any(|g| g == APPROVERS)
    }

    /// What a password is checked against: the hash if there is one, else Fishtest's
    /// plaintext field (or the hash an earlier shoal kept there); empty when there is none,
    /// which no password matches.
    pub fn secret(&self) -> &str {
        self.password_hash
            .as_deref()
            .or(self.password.as_deref())
            .unwrap_or_default()
    }

    /// Whether the document still holds a password in Fishtest's field (plaintext, or a hash
    /// from an earlier shoal) that [`super::PasswordMode::Own`] moves to `password_hash`.
    pub fn has_fishtest_password(&self) -> bool {
        self.password.is_some()
    }
}

/// Fishtest's username rule: `[A-Za-z0-9]{2,}`.
pub fn valid_username(name: &str) -> bool {
    name.len() >= 2 && name.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// The `kvstore` document listing the user names accepted although they break
/// [`valid_username`] (`{"_id": "legacy_usernames", "value": [name, ...]}`): accounts older
/// than the rule, which Fishtest records once and keeps accepting.
pub const LEGACY_USERNAMES_DOC: &str = "legacy_usernames";

/// The longest legacy name taken from the list (longer entries are ignored and logged).
pub const LEGACY_NAME_MAX: usize = 256;

/// An address Fishtest's email check can accept: one `@` with text on both sides and a dot
/// in the domain (the form's own checks are in the signup page).
pub(super) fn plausible_email(email: &str) -> bool {
    match email.split_once('@') {
        Some((local, domain)) => {
            !local.is_empty()
                && !domain.contains('@')
                && domain.contains('.')
                && !domain.starts_with('.')
                && !domain.ends_with('.')
                && !email.chars().any(char::is_whitespace)
        }
        None => false,
    }
}

/// The document stored for `user`.
pub(super) fn to_doc(user: &User) -> Result<Doc, UserError> {
    match serde_json::to_value(user) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(UserError::Unstorable {
            username: user.username.clone(),
            source: None,
        }),
        Err(e) => Err(UserError::Unstorable {
            username: user.username.clone(),
            source: Some(e),
        }),
    }
}

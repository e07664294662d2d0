//! Accounts: who may do what. The users, their passwords and the credential cache, the
//! browser sessions, the login throttle, and the login policy every authenticated request
//! goes through.
//!
//! Owns: its state and locks (the users' cache and single flights, the session table, the
//! throttle's counters), the `users` collection, `kvstore`'s legacy names and the
//! `shoal_kvstore` documents of sessions and the password mode; the login policy ([`Accounts::login_on_loop`],
//! [`Accounts::login_in_pool`]: the throttle's verdict, the credential cache, the guarded
//! argon2 check, recording each verdict), an approver's decisions and a user's profile change
//! (logged in the [`Ledger`]); API tokens (`tokens.rs`) and password-reset links (`reset.rs`),
//! stored hashed in `shoal_kvstore`; the signup forms already sent (`once.rs`, in memory).
//! Says what happened in types ([`AuthError`], [`UserError`] with [`NameRefusal`]); the texts
//! for a refused login or account operation are the HTTP layer's (`http::error`), made in one
//! place for the API, the pages and the CLI.
//! Must not: know HTTP, cookies or reply texts; log passwords; wait for a lock on the event
//! loop (the parts that run there only try); reach into another component's state (it calls
//! the ledger's public operations only).

mod login;
mod once;
mod people;
#[cfg(test)]
mod races;
mod reset;
mod sessions;
pub mod throttle;
mod tokens;
mod user;
mod users;

use std::sync::Arc;
use std::time::Duration;

use crate::ledger::Ledger;
use crate::store::{SharedStore, StoreError};

pub use login::{Login, OnLoop, PoolCheck};
pub use people::{ProfileChange, UserAction};
pub use reset::{EMAIL_EVERY_S, RESET_TTL_S};
pub use sessions::{MAX_SESSIONS, REMEMBER_S, SHORT_S, Session, SessionState, random_token};
pub use throttle::{AuthThrottle, ThrottleConfig, Verdict};
pub use tokens::{
    MAX_TOKENS_PER_USER, TOKEN_NAME_MAX, TOKEN_PREFIX, TokenInfo, TokenRefusal, token_hash,
};
pub use user::{
    APPROVERS, DEFAULT_MACHINE_LIMIT, LEGACY_NAME_MAX, LEGACY_USERNAMES_DOC, User, valid_username,
};
pub use users::{
    FinalizeReport, NoGuard, PASSWORD_MAX_CHARS, PASSWORDS_DOC, PASSWORDS_FINALIZED, PENDING_TTL,
    PasswordMode, SlowCheckGuard, USER_TTL, Users, hash_password,
};

/// Why a login was refused.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// A wrong password, or a user that does not exist: the two are never told apart.
    #[error("wrong username or password")]
    WrongPassword,
    /// The password is right, but the account is blocked.
    #[error("the account is blocked")]
    Blocked,
    /// The password is right, but the account waits for an approver.
    #[error("the account is pending approval")]
    Pending,
    /// Too many failed logins for this user or address: no check was made; try again after
    /// `retry_after`.
    #[error("too many failed authentications")]
    Throttled { retry_after: Duration },
    /// The check could not be made: the user's document is unreadable, or the store failed.
    #[error(transparent)]
    Account(#[from] UserError),
}

/// Why an account operation failed: what happened, with the names it happened to.
///
/// Must not: word replies. Fishtest's clients and pages expect exact texts, and one mapping
/// at the edge (`http::error::user_error_text`) makes them for the JSON API, the pages and
/// `shoal user` alike, so a text is never written twice. The `Display` texts here are for
/// logs.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// A user name refused: which one, and which rule it breaks.
    #[error("user name {name:?} refused: {why}")]
    BadName { name: String, why: NameRefusal },
    /// A new account (an administrator's): the username belongs to an account already.
    #[error("user {username} exists already")]
    NameTaken { username: String },
    /// A signup: the username or the email belongs to an account already (Fishtest does not
    /// say which).
    #[error("signup of {username}: the name or the email is taken")]
    NameOrEmailTaken { username: String },
    /// A profile change: another account has this email address (ignoring case).
    #[error("user {username}: the new email address belongs to another account")]
    EmailTaken { username: String },
    /// A password outside Fishtest's length rule (1 to [`PASSWORD_MAX_CHARS`] characters).
    #[error("a password outside 1 to {PASSWORD_MAX_CHARS} characters")]
    BadPasswordLength,
    /// Beside Fishtest a new account needs an email address (Fishtest's schema requires
    /// one), and this one is none.
    #[error("user {username}: no usable email address beside Fishtest")]
    BadEmail { username: String },
    /// A stored user document that does not read as a user; `username` is the one looked
    /// up, if the read was a look-up.
    #[error("unreadable user document ({username:?}): {source}")]
    CorruptUser {
        username: Option<String>,
        source: serde_json::Error,
    },
    /// A user that does not serialise to a document (`source`: serde's reason; `None`: it
    /// serialised to something other than an object).
    #[error("user {username} cannot be written as a document")]
    Unstorable {
        username: String,
        source: Option<serde_json::Error>,
    },
    /// argon2 could not hash a password.
    #[error("cannot hash a password: {0}")]
    Hashing(#[source] argon2::password_hash::Error),
    /// The caller is no approver.
    #[error("not an approver")]
    NotApprover,
    #[error("no user {0}")]
    NoSuchUser(String),
    /// Only a pending signup can be accepted or rejected.
    #[error("{0} is not pending approval")]
    NotPending(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which rule a refused user name breaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NameRefusal {
    /// Fishtest's username rule ([`valid_username`]), for an account an administrator adds.
    #[error("not [A-Za-z0-9]{{2,}}")]
    BreaksRule,
    /// Fishtest's username rule, on the signup form (Fishtest words it as a bad password).
    #[error("not [A-Za-z0-9]{{2,}} (signup)")]
    BreaksRuleAtSignup,
    /// A legacy entry for a name the rule accepts already: it needs none.
    #[error("follows the rule: needs no legacy entry")]
    NeedsNoLegacyEntry,
    /// A legacy entry that cannot be a name: empty, over [`LEGACY_NAME_MAX`] bytes, or with
    /// control characters.
    #[error("cannot be a legacy name")]
    NotAName,
}

/// The users, the sessions, the login throttle.
pub struct Accounts {
    store: SharedStore,
    users: Users,
    sessions: sessions::Sessions,
    throttle: AuthThrottle,
    /// Signup forms already sent (each is accepted once).
    signup_forms: once::OnceSet,
    /// Where an approver's decisions are logged.
    ledger: Arc<Ledger>,
    /// Held while a new password is saved and the user's credentials revoked, and while a
    /// credential (an API token, a feed URL) is stored after checking that the password it
    /// was granted under is still the stored one: a credential made during a password
    /// change is either refused or revoked by it, never left behind.
    credentials: parking_lot::Mutex<()>,
}

impl Accounts {
    /// The accounts of a store, throttled as `throttle` says; the legacy user names are read
    /// at once.
    pub fn open(
        store: SharedStore,
        ledger: Arc<Ledger>,
        throttle: ThrottleConfig,
    ) -> Result<Accounts, UserError> {
        let accounts = Accounts {
            users: Users::new(store.clone()),
            store,
            sessions: Default::default(),
            throttle: AuthThrottle::new(throttle),
            signup_forms: Default::default(),
            ledger,
            credentials: Default::default(),
        };
        accounts.users.refresh_legacy_names()?;
        Ok(accounts)
    }

    /// Shares the sessions with other instances on the same store: `Some(window)` reads an
    /// unknown session through and checks a cached one again once it is `window` old.
    pub fn with_shared_sessions(mut self, recheck: Option<Duration>) -> Self {
        self.sessions.recheck = recheck;
        self
    }

    /// The users collection and its credential cache.
    pub fn users(&self) -> &Users {
        &self.users
    }
}

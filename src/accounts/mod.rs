//! Accounts: who may do what. The users, their passwords and the credential cache, the
//! browser sessions, the login throttle, and the login policy every authenticated request
//! goes through.
//!
//! Owns: its state and locks (the users' cache and single flights, the session table, the
//! throttle's counters), the `users` collection and the `kvstore` documents of sessions,
//! legacy names and the password mode; the login policy ([`Accounts::login_on_loop`],
//! [`Accounts::login_in_pool`]: the throttle's verdict, the credential cache, the guarded
//! argon2 check, recording each verdict), an approver's decisions and a user's profile change
//! (logged in the [`Ledger`]).
//! Says what happened in types ([`AuthError`], [`UserError`]); Fishtest's texts for a refused
//! login are the HTTP layer's (`http::auth`), made in one place.
//! Must not: know HTTP, cookies or reply texts; log passwords; wait for a lock on the event
//! loop (the parts that run there only try); reach into another component's state (it calls
//! the ledger's public operations only).

mod login;
mod people;
mod sessions;
pub mod throttle;
mod user;
mod users;

use std::sync::Arc;
use std::time::Duration;

use crate::ledger::Ledger;
use crate::store::{SharedStore, StoreError};

pub use login::{Login, OnLoop, PoolCheck};
pub use people::{ProfileChange, UserAction};
pub use sessions::{MAX_SESSIONS, REMEMBER_S, SHORT_S, Session, SessionState, random_token};
pub use throttle::{AuthThrottle, ThrottleConfig, Verdict};
pub use user::{
    APPROVERS, DEFAULT_MACHINE_LIMIT, LEGACY_NAME_MAX, LEGACY_USERNAMES_DOC, User, valid_username,
};
pub use users::{
    FinalizeReport, MSG_TAKEN, NoGuard, PASSWORDS_DOC, PASSWORDS_FINALIZED, PENDING_TTL,
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

/// Why an account operation failed.
#[derive(Debug, thiserror::Error)]
pub enum UserError {
    /// A value refused (a username, a password's length, a taken name or email): the
    /// message says which and why.
    #[error("{0}")]
    Invalid(String),
    /// The caller is no approver.
    #[error("You cannot inspect users")]
    NotApprover,
    #[error("No such user {0}")]
    NoSuchUser(String),
    /// Only a pending signup can be accepted or rejected.
    #[error("{0} is not pending approval")]
    NotPending(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The users, the sessions, the login throttle.
pub struct Accounts {
    store: SharedStore,
    users: Users,
    sessions: sessions::Sessions,
    throttle: AuthThrottle,
    /// Where an approver's decisions are logged.
    ledger: Arc<Ledger>,
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
            ledger,
        };
        accounts.users.refresh_legacy_names()?;
        Ok(accounts)
    }

    /// The users collection and its credential cache.
    pub fn users(&self) -> &Users {
        &self.users
    }
}

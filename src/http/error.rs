//! The one mapping from errors to HTTP responses: [`ApiError`], its status codes, and the
//! conversion of every domain error (run database, accounts, nets, offload pool) into it,
//! with Fishtest's texts for the run database's and the accounts' refusals (the pages and the
//! CLI take them from here).
//!
//! Owns: which status each failure gets (400 validation, 401 credentials, 403 a read-only
//! token on a change, 404 look-ups, 408
//! slow bodies, 413 large bodies, 429 throttled logins with `Retry-After`, 503 busy or not
//! the primary, 500 the unexpected — logged, never sent).
//! Must not: do I/O or decide business outcomes (scheduling outcomes are 200 replies).

use axum::response::{IntoResponse, Response};

use super::envelope::ApiReply;
use crate::accounts::{AuthError, LEGACY_NAME_MAX, NameRefusal, PASSWORD_MAX_CHARS, UserError};
use crate::ledger::LedgerError;
use crate::nets::NetError;
use crate::offload::OffloadError;
use crate::protocol::MAX_GAMES;
use crate::rundb::create::MAX_ACTIVE_TASKS;
use crate::rundb::{ChangeRefused, Op, RunDbError, STOP_RUN_CPU_HOURS};

/// Errors a handler can return. The status codes are Fishtest's where it has one
/// (docs/protocol.md#errors lists them all).
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    /// 400: body not JSON, schema failure, unknown ids, missing field.
    #[error("{0}")]
    BadRequest(String),
    /// 401: credentials, blocked or pending account, unauthorised action.
    #[error("{0}")]
    Unauthorized(String),
    /// 403: authenticated, but the credential may not do this (a read-only API token on an
    /// endpoint that changes something).
    #[error("{0}")]
    Forbidden(String),
    /// 404: read-only lookups.
    #[error("{0}")]
    NotFound(String),
    /// 413: body over the route's limit.
    #[error("request body is too large (limit {limit} bytes)")]
    TooLarge { limit: usize },
    /// 408: the client did not send its body within `body_read_timeout_s`.
    #[error("request body not received within {0} s")]
    BodyTimeout(f64),
    /// 429: too many failed authentications for this user or address; retry after the
    /// given number of seconds (also sent as `Retry-After`).
    #[error("too many failed authentications; try again in {retry_after_s} s")]
    Throttled { retry_after_s: u64 },
    /// 429: a rate limit (`[[limits]]`, kind rate) is full; retry after the given seconds.
    #[error("{message}")]
    RateLimited { message: String, retry_after_s: u64 },
    /// 503: a bounded resource (PGN upload slots) stayed busy; retry later.
    #[error("{0}")]
    Busy(String),
    /// 503: a service shoal asks (GitHub) could not answer; the text says why.
    #[error("{0}")]
    Unavailable(String),
    /// 503 on a secondary instance for the primary-only worker paths.
    #[error("primary instance required")]
    PrimaryRequired,
    /// 500: anything unexpected. The detail is logged, never sent.
    #[error("Internal Server Error")]
    Internal(String),
}

impl ApiError {
    pub fn status(&self) -> axum::http::StatusCode {
        use axum::http::StatusCode;
        match self {
            ApiError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ApiError::Unauthorized(_) => StatusCode::UNAUTHORIZED,
            ApiError::Forbidden(_) => StatusCode::FORBIDDEN,
            ApiError::NotFound(_) => StatusCode::NOT_FOUND,
            ApiError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            ApiError::BodyTimeout(_) => StatusCode::REQUEST_TIMEOUT,
            ApiError::Throttled { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::RateLimited { .. } => StatusCode::TOO_MANY_REQUESTS,
            ApiError::Busy(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::PrimaryRequired => StatusCode::SERVICE_UNAVAILABLE,
            ApiError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }
}

impl From<OffloadError> for ApiError {
    fn from(e: OffloadError) -> Self {
        ApiError::Internal(e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if let ApiError::Internal(detail) = &self {
            tracing::error!(%detail, "internal error");
        }
        let retry_after = match &self {
            ApiError::Throttled { retry_after_s } => Some(*retry_after_s),
            ApiError::RateLimited { retry_after_s, .. } => Some(*retry_after_s),
            ApiError::Busy(_) => Some(5),
            _ => None,
        };
        let mut response = ApiReply::error(self.status(), self.to_string()).into_response();
        if let Some(secs) = retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, secs.into());
        }
        if matches!(self, ApiError::BodyTimeout(_)) {
            // The rest of the body may never come: do not keep the connection.
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
        }
        response
    }
}

pub type ApiResult<T = ApiReply> = Result<T, ApiError>;

/// A refused login: Fishtest's texts (`http::auth`), 401; a throttled one 429.
impl From<AuthError> for ApiError {
    fn from(e: AuthError) -> Self {
        match e {
            AuthError::WrongPassword => ApiError::Unauthorized(MSG_INVALID.into()),
            AuthError::Blocked => ApiError::Unauthorized(MSG_BLOCKED.into()),
            AuthError::Pending => ApiError::Unauthorized(MSG_PENDING.into()),
            AuthError::Throttled { retry_after } => ApiError::Throttled {
                retry_after_s: retry_after_s(retry_after),
            },
            AuthError::Account(e) => e.into(),
        }
    }
}

/// An account operation's failure: its status, with the text [`user_error_text`] gives it;
/// the store failing is a 500.
impl From<UserError> for ApiError {
    fn from(e: UserError) -> Self {
        match e {
            UserError::Store(e) => e.into(),
            UserError::NotApprover => ApiError::Unauthorized(user_error_text(&e)),
            UserError::NoSuchUser(_) => ApiError::NotFound(user_error_text(&e)),
            UserError::BadName { .. }
            | UserError::NameTaken { .. }
            | UserError::NameOrEmailTaken { .. }
            | UserError::EmailTaken { .. }
            | UserError::BadPasswordLength
            | UserError::BadEmail { .. }
            | UserError::CorruptUser { .. }
            | UserError::Unstorable { .. }
            | UserError::Hashing(_)
            | UserError::NotPending(_) => ApiError::BadRequest(user_error_text(&e)),
        }
    }
}

/// The accounts' errors in the words their reader sees: Fishtest's where it has them (the
/// signup form, an approver's pages), shoal's own for `shoal user`. Written here and nowhere
/// else: the JSON API, the pages (`ui::kit::error`, the signup form) and the CLI take them
/// from here. For the store failing it is the store's text, for the log or the operator of
/// the CLI (the API and the pages answer a 500 without it).
pub fn user_error_text(e: &UserError) -> String {
    match e {
        UserError::BadName { name, why } => match why {
            NameRefusal::BreaksRule => {
                "Invalid username: use at least two letters or digits ([A-Za-z0-9]).".into()
            }
            NameRefusal::BreaksRuleAtSignup => "Error! Invalid username or password".into(),
            NameRefusal::NeedsNoLegacyEntry => {
                format!("{name:?} follows the username rule already: it needs no legacy entry")
            }
            NameRefusal::NotAName => format!(
                "{name:?} cannot be a user name (1 to {LEGACY_NAME_MAX} bytes, no control characters)"
            ),
        },
        UserError::NameTaken { username } => format!("The username {username} is already taken."),
        UserError::NameOrEmailTaken { .. } => MSG_TAKEN.into(),
        UserError::EmailTaken { .. } => {
            "Error! This email address belongs to another account.".into()
        }
        UserError::BadPasswordLength => {
            format!("The password must be 1 to {PASSWORD_MAX_CHARS} characters long.")
        }
        UserError::BadEmail { .. } => "Beside Fishtest every user needs an email address \
                                       (Fishtest's schema requires one): give --email."
            .into(),
        UserError::CorruptUser {
            username: Some(username),
            source,
        } => format!("user {username}: {source}"),
        UserError::CorruptUser {
            username: None,
            source,
        } => format!("bad user document: {source}"),
        UserError::Unstorable { source: None, .. } => "user is not an object".into(),
        UserError::Unstorable {
            source: Some(e), ..
        } => e.to_string(),
        UserError::Hashing(e) => format!("cannot hash password: {e}"),
        UserError::NotApprover => "You cannot inspect users".into(),
        UserError::NoSuchUser(name) => format!("No such user {name}"),
        UserError::NotPending(name) => format!("{name} is not pending approval"),
        UserError::Store(e) => e.to_string(),
    }
}

/// A failure of the net store (a look-up or a download count): 500, with the store's text.
impl From<NetError> for ApiError {
    fn from(e: NetError) -> Self {
        match e {
            NetError::Store(e) => e.into(),
            other => ApiError::Internal(other.to_string()),
        }
    }
}

/// A store failure (the ledger's only one): 500, as the run database's.
impl From<LedgerError> for ApiError {
    fn from(e: LedgerError) -> Self {
        ApiError::Internal(e.to_string())
    }
}

/// The run database's errors in Fishtest's words: each refusal's status and its exact text
/// (Fishtest's clients and tests compare them), made here and nowhere else; the pages use
/// them too (`ui::kit::error`). The store failing is a 500.
impl From<RunDbError> for ApiError {
    fn from(e: RunDbError) -> Self {
        use ApiError::{BadRequest, NotFound, Unauthorized};
        match e {
            RunDbError::UnknownRun { run_id, op } => match op {
                Op::Task | Op::WorkerStop => BadRequest(format!("Invalid run_id: {run_id}")),
                Op::Approve => NotFound(format!("Run {run_id} not found!")),
                Op::Purge => NotFound(format!("Unknown run {run_id}")),
                Op::Modify | Op::Delete | Op::UserStop => NotFound("No run with this id".into()),
            },
            RunDbError::UnknownTask { run_id, task_id } => {
                BadRequest(format!("Invalid task_id {task_id} for run_id {run_id}"))
            }
            RunDbError::TaskOfOtherWorker {
                run_id,
                task_id,
                unique_key,
            } => BadRequest(format!(
                "Invalid unique key {unique_key} for task {run_id}/{task_id}"
            )),
            RunDbError::TaskOfOtherUser {
                run_id,
                task_id,
                username,
            } => BadRequest(format!(
                "Invalid username {username} for task {run_id}/{task_id}"
            )),
            RunDbError::NotApprover => Unauthorized("Please login as approver".into()),
            RunDbError::SelfApproval { run_id } => {
                Unauthorized(format!("Run {run_id}: Self approval is disabled!"))
            }
            RunDbError::AlreadyApproved { run_id } => {
                BadRequest(format!("Run {run_id} already approved!"))
            }
            RunDbError::RunFinished { run_id, op } => match op {
                Op::Approve => BadRequest(format!("Run {run_id} is finished")),
                Op::WorkerStop => {
                    Unauthorized(format!("Stop_run: run {run_id} is already finished"))
                }
                _ => BadRequest(format!("Run {run_id} is already finished")),
            },
            RunDbError::RunDeleted { run_id } => {
                BadRequest(format!("Run {run_id} is already deleted"))
            }
            RunDbError::RunNotFinished { .. } => BadRequest("Can only purge completed run".into()),
            RunDbError::RunFailed { .. } => BadRequest("You cannot purge a failed run".into()),
            RunDbError::RunTooOld { op, .. } => BadRequest(match op {
                Op::Purge => "Run too old to be purged".into(),
                _ => "Run too old to be modified".into(),
            }),
            RunDbError::NotYours { op, .. } => Unauthorized(match op {
                Op::Purge => "Only approvers or the submitting user can purge the run.".into(),
                Op::Modify => "Unable to modify another user's run!".into(),
                _ => "Unable to modify another users run!".into(),
            }),
            RunDbError::TooFewCpuHours { username } => Unauthorized(format!(
                "Stop_run: user {username} has fewer than {STOP_RUN_CPU_HOURS} CPU hours"
            )),
            RunDbError::BadArgs(e) => BadRequest(e.message),
            RunDbError::BadChange(c) => BadRequest(change_refused(c)),
            RunDbError::BadStats { reason, .. } => BadRequest(format!("stats: {reason}")),
            RunDbError::MoreGamesThanTask {
                run_id,
                task_id,
                reported,
                size,
            } => BadRequest(format!(
                "Update_task: task {run_id}/{task_id}: {reported} games reported, but the task has only {size}"
            )),
            RunDbError::SpsaGamesNotAdded {
                run_id,
                task_id,
                counted,
                added,
            } => BadRequest(format!(
                "Update_task: task {run_id}/{task_id}: the spsa block counts {counted} games, but only {added} were added"
            )),
            RunDbError::TotalsOverflow { run_id, task_id } => BadRequest(format!(
                "Update_task: task {run_id}/{task_id}: the run's totals would overflow"
            )),
            RunDbError::NotSpsa { run_id } => {
                BadRequest(format!("Run {run_id} is not an SPSA run"))
            }
            RunDbError::Spsa(e) => BadRequest(format!("Request_spsa: {e}")),
            RunDbError::NoDateBefore { days } => {
                BadRequest(format!("no date {days} days before now"))
            }
            RunDbError::NotAWorkerName { name } => {
                BadRequest(format!("{name:?} is not a worker name"))
            }
            RunDbError::NotWorkerOwner { .. } => {
                Unauthorized("Only owners and approvers can block/unblock".into())
            }
            RunDbError::LimitsNeedApprover { .. } => {
                Unauthorized("Only approvers may change limits".into())
            }
            RunDbError::UnknownLimit { name } => BadRequest(format!("No limit named {name}")),
            RunDbError::BadLimitMax { reason, .. } => BadRequest(reason),
            RunDbError::NotPrimary => ApiError::PrimaryRequired,
            e @ (RunDbError::Store(_) | RunDbError::Corrupt(..)) => {
                ApiError::Internal(e.to_string())
            }
        }
    }
}

/// A modify form's refused value, in Fishtest's words.
fn change_refused(c: ChangeRefused) -> String {
    match c {
        ChangeRefused::FixedGamesRaised => {
            "Unable to modify number of games in a fixed game test!".into()
        }
        ChangeRefused::SpsaGames => "Unable to modify number of games for SPSA tests, SPSA hyperparams are based off the initial number of games".into(),
        ChangeRefused::NegativeGames => "Number of games must be >= 0".into(),
        ChangeRefused::WindowOutOfRange(_) => {
            format!("max_active_tasks must be between 1 and {MAX_ACTIVE_TASKS}")
        }
        ChangeRefused::GamesNotMultiple => "Number of games must be a multiple of 1000".into(),
        ChangeRefused::TooManyGames => format!("Number of games must be <= {MAX_GAMES}"),
        ChangeRefused::InfoControl => {
            "The info must not contain control characters (other than tabs and line breaks)"
                .into()
        }
    }
}

/// Fishtest's text for a signup whose username or email belongs to an account already.
pub const MSG_TAKEN: &str = "Username or email is already registered";
/// Fishtest's text for a wrong password or an unknown user.
pub const MSG_INVALID: &str = "Invalid username or password.";
/// Fishtest's text for a blocked account that gave its right password.
pub const MSG_BLOCKED: &str = "Your account is blocked.";
/// Fishtest's text for an account that waits for approval.
pub const MSG_PENDING: &str = "Your account is pending approval.";

/// A throttled login's `Retry-After`: whole seconds, at least one.
pub fn retry_after_s(retry_after: std::time::Duration) -> u64 {
    retry_after.as_secs_f64().ceil().max(1.0) as u64
}

#[cfg(test)]
mod tests;

/// Test groups' errors (issue 39): a refused take or count is a 400 naming it, an unknown
/// group a 404; the run core's errors as above; the store failing is a 500.
impl From<crate::groups::GroupError> for ApiError {
    fn from(e: crate::groups::GroupError) -> Self {
        use crate::groups::GroupError;
        match e {
            GroupError::TakeCount(_) => ApiError::BadRequest(format!("takes: {e}")),
            GroupError::Take { take, error } => {
                ApiError::BadRequest(format!("take {take}: {}", error.message))
            }
            GroupError::Unknown(id) => ApiError::NotFound(format!("The group {id} does not exist")),
            GroupError::Runs(e) => e.into(),
            GroupError::Store(e) => ApiError::Internal(e.to_string()),
        }
    }
}

//! The run database's and the accounts' refusals in Fishtest's words: every variant's status
//! and exact text (the integration tests check many of them through the API, the pages and
//! the CLI; this checks all).

use axum::http::StatusCode;

use super::*;
use crate::ledger::LedgerError;
use crate::rundb::create::ArgError;
use crate::spsa::SpsaError;

fn reply(e: RunDbError) -> (StatusCode, String) {
    let e = ApiError::from(e);
    (e.status(), e.to_string())
}

#[test]
fn each_refusal_has_fishtests_status_and_text() {
    let bad = StatusCode::BAD_REQUEST;
    let unauthorized = StatusCode::UNAUTHORIZED;
    let not_found = StatusCode::NOT_FOUND;
    let unknown = |op| {
        reply(RunDbError::UnknownRun {
            run_id: "r1".into(),
            op,
        })
    };
    let finished = |op| {
        reply(RunDbError::RunFinished {
            run_id: "r1".into(),
            op,
        })
    };
    let not_yours = |op| {
        reply(RunDbError::NotYours {
            run_id: "r1".into(),
            op,
        })
    };
    let too_old = |op| {
        reply(RunDbError::RunTooOld {
            run_id: "r1".into(),
            op,
        })
    };
    let r = || "r1".to_string();
    let cases: Vec<((StatusCode, String), StatusCode, &str)> = vec![
        (unknown(Op::Task), bad, "Invalid run_id: r1"),
        (unknown(Op::WorkerStop), bad, "Invalid run_id: r1"),
        (unknown(Op::Approve), not_found, "Run r1 not found!"),
        (unknown(Op::Purge), not_found, "Unknown run r1"),
        (unknown(Op::Modify), not_found, "No run with this id"),
        (unknown(Op::Delete), not_found, "No run with this id"),
        (unknown(Op::UserStop), not_found, "No run with this id"),
        (
            reply(RunDbError::UnknownTask {
                run_id: r(),
                task_id: 7,
            }),
            bad,
            "Invalid task_id 7 for run_id r1",
        ),
        (
            reply(RunDbError::TaskOfOtherWorker {
                run_id: r(),
                task_id: 7,
                unique_key: "k".into(),
            }),
            bad,
            "Invalid unique key k for task r1/7",
        ),
        (
            reply(RunDbError::TaskOfOtherUser {
                run_id: r(),
                task_id: 7,
                username: "u".into(),
            }),
            bad,
            "Invalid username u for task r1/7",
        ),
        (
            reply(RunDbError::NotApprover),
            unauthorized,
            "Please login as approver",
        ),
        (
            reply(RunDbError::SelfApproval { run_id: r() }),
            unauthorized,
            "Run r1: Self approval is disabled!",
        ),
        (
            reply(RunDbError::AlreadyApproved { run_id: r() }),
            bad,
            "Run r1 already approved!",
        ),
        (finished(Op::Approve), bad, "Run r1 is finished"),
        (
            finished(Op::WorkerStop),
            unauthorized,
            "Stop_run: run r1 is already finished",
        ),
        (finished(Op::UserStop), bad, "Run r1 is already finished"),
        (
            reply(RunDbError::RunDeleted { run_id: r() }),
            bad,
            "Run r1 is already deleted",
        ),
        (
            reply(RunDbError::RunNotFinished { run_id: r() }),
            bad,
            "Can only purge completed run",
        ),
        (
            reply(RunDbError::RunFailed { run_id: r() }),
            bad,
            "You cannot purge a failed run",
        ),
        (too_old(Op::Purge), bad, "Run too old to be purged"),
        (too_old(Op::Modify), bad, "Run too old to be modified"),
        (
            not_yours(Op::Purge),
            unauthorized,
            "Only approvers or the submitting user can purge the run.",
        ),
        (
            not_yours(Op::Modify),
            unauthorized,
            "Unable to modify another user's run!",
        ),
        (
            not_yours(Op::Delete),
            unauthorized,
            "Unable to modify another users run!",
        ),
        (
            not_yours(Op::UserStop),
            unauthorized,
            "Unable to modify another users run!",
        ),
        (
            reply(RunDbError::TooFewCpuHours {
                username: "u".into(),
            }),
            unauthorized,
            "Stop_run: user u has fewer than 1000 CPU hours",
        ),
        (
            reply(RunDbError::BadArgs(ArgError {
                field: "tc",
                message: "Bad time control".into(),
            })),
            bad,
            "Bad time control",
        ),
        (
            reply(RunDbError::BadStats {
                run_id: r(),
                task_id: 7,
                reason: "odd".into(),
            }),
            bad,
            "stats: odd",
        ),
        (
            reply(RunDbError::MoreGamesThanTask {
                run_id: r(),
                task_id: 7,
                reported: 10,
                size: 8,
            }),
            bad,
            "Update_task: task r1/7: 10 games reported, but the task has only 8",
        ),
        (
            reply(RunDbError::SpsaGamesNotAdded {
                run_id: r(),
                task_id: 7,
                counted: 4,
                added: 2,
            }),
            bad,
            "Update_task: task r1/7: the spsa block counts 4 games, but only 2 were added",
        ),
        (
            reply(RunDbError::TotalsOverflow {
                run_id: r(),
                task_id: 7,
            }),
            bad,
            "Update_task: task r1/7: the run's totals would overflow",
        ),
        (
            reply(RunDbError::NotSpsa { run_id: r() }),
            bad,
            "Run r1 is not an SPSA run",
        ),
        (
            reply(RunDbError::Spsa(SpsaError::NoParams)),
            bad,
            "Request_spsa: the SPSA run has no parameters",
        ),
        (
            reply(RunDbError::NoDateBefore { days: 9 }),
            bad,
            "no date 9 days before now",
        ),
        (
            reply(RunDbError::NotAWorkerName { name: "x y".into() }),
            bad,
            "\"x y\" is not a worker name",
        ),
        (
            reply(RunDbError::NotWorkerOwner {
                worker: "bob-4cores-abcd".into(),
                username: "eve".into(),
            }),
            unauthorized,
            "Only owners and approvers can block/unblock",
        ),
        (
            reply(RunDbError::LimitsNeedApprover {
                username: "eve".into(),
            }),
            unauthorized,
            "Only approvers may change limits",
        ),
        (
            reply(RunDbError::UnknownLimit {
                name: "nope".into(),
            }),
            bad,
            "No limit named nope",
        ),
        (
            reply(RunDbError::BadLimitMax {
                name: "machine".into(),
                reason: "max must be at least 1".into(),
            }),
            bad,
            "max must be at least 1",
        ),
    ];
    for (got, status, text) in cases {
        assert_eq!(got, (status, text.to_string()));
    }
}

#[test]
fn each_refused_change_has_fishtests_text() {
    let change = |c| reply(RunDbError::BadChange(c));
    let bad = StatusCode::BAD_REQUEST;
    for (c, text) in [
        (
            ChangeRefused::FixedGamesRaised,
            "Unable to modify number of games in a fixed game test!",
        ),
        (
            ChangeRefused::SpsaGames,
            "Unable to modify number of games for SPSA tests, SPSA hyperparams are based off the initial number of games",
        ),
        (ChangeRefused::NegativeGames, "Number of games must be >= 0"),
        (
            ChangeRefused::WindowOutOfRange(0),
            "max_active_tasks must be between 1 and 100000",
        ),
        (
            ChangeRefused::GamesNotMultiple,
            "Number of games must be a multiple of 1000",
        ),
        (
            ChangeRefused::TooManyGames,
            "Number of games must be <= 3200000",
        ),
    ] {
        assert_eq!(change(c), (bad, text.to_string()));
    }
}

#[test]
fn failures_are_not_explained() {
    let e = ApiError::from(RunDbError::Corrupt("r1".into(), "bad".into()));
    assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(e.to_string(), "Internal Server Error");
    let e = ApiError::from(RunDbError::NotPrimary);
    assert_eq!(e.status(), StatusCode::SERVICE_UNAVAILABLE);
}

/// An account operation's failure as the API answers it.
fn user_reply(e: UserError) -> (StatusCode, String) {
    let e = ApiError::from(e);
    (e.status(), e.to_string())
}

/// A serde error with a known text ("expected value at line 1 column 1").
fn serde_error() -> serde_json::Error {
    serde_json::from_str::<u8>("x").expect_err("not a number")
}

#[test]
fn each_account_refusal_has_its_status_and_text() {
    let bad = StatusCode::BAD_REQUEST;
    let name = |why| {
        user_reply(UserError::BadName {
            name: "a.b".into(),
            why,
        })
    };
    let cases: Vec<((StatusCode, String), StatusCode, &str)> = vec![
        (
            name(NameRefusal::BreaksRule),
            bad,
            "Invalid username: use at least two letters or digits ([A-Za-z0-9]).",
        ),
        (
            name(NameRefusal::BreaksRuleAtSignup),
            bad,
            "Error! Invalid username or password",
        ),
        (
            name(NameRefusal::NeedsNoLegacyEntry),
            bad,
            "\"a.b\" follows the username rule already: it needs no legacy entry",
        ),
        (
            name(NameRefusal::NotAName),
            bad,
            "\"a.b\" cannot be a user name (1 to 256 bytes, no control characters)",
        ),
        (
            user_reply(UserError::NameTaken {
                username: "bob".into(),
            }),
            bad,
            "The username bob is already taken.",
        ),
        (
            user_reply(UserError::NameOrEmailTaken {
                username: "bob".into(),
            }),
            bad,
            "Username or email is already registered",
        ),
        (
            user_reply(UserError::BadPasswordLength),
            bad,
            "The password must be 1 to 72 characters long.",
        ),
        (
            user_reply(UserError::BadEmail {
                username: "bob".into(),
            }),
            bad,
            "Beside Fishtest every user needs an email address (Fishtest's schema requires one): give --email.",
        ),
        (
            user_reply(UserError::CorruptUser {
                username: Some("bob".into()),
                source: serde_error(),
            }),
            bad,
            "user bob: expected value at line 1 column 1",
        ),
        (
            user_reply(UserError::CorruptUser {
                username: None,
                source: serde_error(),
            }),
            bad,
            "bad user document: expected value at line 1 column 1",
        ),
        (
            user_reply(UserError::Unstorable {
                username: "bob".into(),
                source: None,
            }),
            bad,
            "user is not an object",
        ),
        (
            user_reply(UserError::Unstorable {
                username: "bob".into(),
                source: Some(serde_error()),
            }),
            bad,
            "expected value at line 1 column 1",
        ),
        (
            user_reply(UserError::Hashing(argon2::password_hash::Error::Password)),
            bad,
            "cannot hash password: invalid password",
        ),
        (
            user_reply(UserError::NotApprover),
            StatusCode::UNAUTHORIZED,
            "You cannot inspect users",
        ),
        (
            user_reply(UserError::NoSuchUser("bob".into())),
            StatusCode::NOT_FOUND,
            "No such user bob",
        ),
        (
            user_reply(UserError::NotPending("bob".into())),
            bad,
            "bob is not pending approval",
        ),
    ];
    for (got, status, text) in cases {
        assert_eq!(got, (status, text.to_string()));
    }
}

#[test]
fn account_texts_are_the_replies_and_a_store_failure_is_not_explained() {
    // What the CLI and the signup form show is what the API answers.
    for e in [
        UserError::BadPasswordLength,
        UserError::NotApprover,
        UserError::NoSuchUser("bob".into()),
    ] {
        let text = user_error_text(&e);
        assert_eq!(ApiError::from(e).to_string(), text);
    }
    // A store failure as the HTTP layer knows one (through the ledger, naming no store).
    let store = || LedgerError::InvalidQuery("oops".into());
    assert_eq!(
        user_error_text(&UserError::Store(store())),
        "invalid query: oops",
        "the operator of the CLI reads the store's text"
    );
    let e = ApiError::from(UserError::Store(store()));
    assert_eq!(e.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(e.to_string(), "Internal Server Error");
}

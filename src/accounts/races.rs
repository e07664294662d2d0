//! Tests of the accounts' races (issue 34's review): a credential made while the password
//! changes, two reset links used at once, racing signups, another account's address.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use super::*;
use crate::store::Collection;
use crate::store::testkit::temp_store;

fn accounts() -> (tempfile::TempDir, Arc<Accounts>) {
    let (dir, store) = temp_store();
    let ledger = Arc::new(Ledger::new(store.clone(), true));
    let throttle = ThrottleConfig {
        window: Duration::from_secs(300),
        per_user_ip: 1000,
        per_ip: 1000,
        per_user: 1000,
    };
    let accounts = Accounts::open(store, ledger, throttle).expect("open");
    (dir, Arc::new(accounts))
}

const PW: &str = "correct horse battery staple";

#[test]
fn a_credential_granted_under_an_old_password_is_refused() {
    let (_dir, a) = accounts();
    let old = a
        .users()
        .add("alice", PW, "alice@example.org", false, None)
        .expect("add");
    // The password changes after `old` was read with its check...
    let change = ProfileChange {
        email: old.email.clone(),
        tests_repo: String::new(),
        new_password: Some("another horse battery staple".into()),
    };
    let now = a.change_profile(&old, change).expect("change");
    // ... so neither a token nor a feed URL is made for it.
    assert!(matches!(
        a.token_create(&old, "ci", false),
        Err(TokenRefusal::PasswordChanged)
    ));
    assert_eq!(a.feed_create(&old).expect("feed"), None);
    assert!(a.tokens_of("alice").expect("tokens").is_empty());
    // Under the new password they are.
    assert!(a.token_create(&now, "ci", false).is_ok());
    assert!(a.feed_create(&now).expect("feed").is_some());
}

#[test]
fn two_reset_links_used_at_once_cannot_both_win() {
    let (_dir, a) = accounts();
    let user = a
        .users()
        .add("alice", PW, "alice@example.org", false, None)
        .expect("add");
    let boss = a
        .users()
        .add("boss", PW, "boss@example.org", true, None)
        .expect("boss");
    for round in 0..3 {
        // An approver's link and a mailed one: both live.
        let issued = a.reset_issue(&boss, "alice").expect("issue");
        let (_, mailed) = a
            .reset_request("alice")
            .expect("request")
            .unwrap_or_else(|| panic!("round {round}: no mailed link"));
        let barrier = Arc::new(Barrier::new(2));
        let uses: Vec<_> = [issued, mailed]
            .into_iter()
            .enumerate()
            .map(|(i, secret)| {
                let (a, user, barrier) = (Arc::clone(&a), user.clone(), Arc::clone(&barrier));
                std::thread::spawn(move || {
                    barrier.wait();
                    a.reset_use(&secret, &user, &format!("{PW} {i}"))
                        .expect("use")
                })
            })
            .collect();
        let won: usize = uses
            .into_iter()
            .map(|h| usize::from(h.join().expect("join")))
            .sum();
        assert_eq!(won, 1, "round {round}: both links set a password");
        // Let the mail pacing (one mailed link per 5 minutes) pass for the next round.
        for doc in a
            .store
            .find(Collection::ShoalKv, &crate::store::Query::new())
            .expect("find")
        {
            if let Some(id) = doc.get("_id").and_then(serde_json::Value::as_str) {
                a.store.delete(Collection::ShoalKv, id).expect("delete");
            }
        }
    }
}

#[test]
fn racing_signups_take_a_name_or_an_address_once_ignoring_case() {
    let (_dir, a) = accounts();
    a.users()
        .register("alice", PW, "alice@example.org", "")
        .expect("alice");
    for (name, email) in [("ALICE", "new@example.org"), ("bob", "Alice@Example.org")] {
        assert!(
            matches!(
                a.users().register(name, PW, email, ""),
                Err(UserError::NameOrEmailTaken { .. })
            ),
            "{name} {email}"
        );
    }
    // The same address, or the same name, from two signups at once: one wins, the other
    // is told it is taken (never a store error).
    for (names, emails) in [
        (["carol", "dave"], ["same@example.org", "SAME@example.org"]),
        (["erin", "Erin"], ["erin1@example.org", "erin2@example.org"]),
    ] {
        let barrier = Arc::new(Barrier::new(2));
        let threads: Vec<_> = (0..2)
            .map(|i| {
                let (a, barrier) = (Arc::clone(&a), Arc::clone(&barrier));
                let (name, email) = (names[i].to_string(), emails[i].to_string());
                std::thread::spawn(move || {
                    barrier.wait();
                    a.users().register(&name, PW, &email, "")
                })
            })
            .collect();
        let results: Vec<_> = threads
            .into_iter()
            .map(|h| h.join().expect("join"))
            .collect();
        let ok = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(ok, 1, "{results:?}");
        assert!(
            results
                .iter()
                .all(|r| matches!(r, Ok(_) | Err(UserError::NameOrEmailTaken { .. }))),
            "{results:?}"
        );
    }
}

#[test]
fn the_profile_refuses_another_accounts_address() {
    let (_dir, a) = accounts();
    a.users()
        .add("victim", PW, "victim@example.org", false, None)
        .expect("victim");
    let me = a
        .users()
        .add("mallory", PW, "mallory@example.org", false, None)
        .expect("mallory");
    let change = |email: &str| ProfileChange {
        email: email.into(),
        tests_repo: String::new(),
        new_password: None,
    };
    assert!(matches!(
        a.change_profile(&me, change("Victim@Example.org")),
        Err(UserError::EmailTaken { .. })
    ));
    let stored = a.users().load("mallory").expect("load").expect("mallory");
    assert_eq!(stored.email, "mallory@example.org");
    // One's own address in another case, or a free one, is fine.
    assert!(a.change_profile(&me, change("MALLORY@example.org")).is_ok());
    assert!(a.change_profile(&me, change("m2@example.org")).is_ok());
}

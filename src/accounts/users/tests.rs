use std::sync::Arc;

use super::credentials::{REJECTED_KEPT, REMEMBERED_TTL};
use super::passwords::ARGON2_RUNS;
use super::*;
use crate::accounts::AuthError;
use crate::store::testkit::temp_store;

fn users() -> (tempfile::TempDir, Users) {
    let (dir, store) = temp_store();
    (dir, Users::new(store))
}

#[test]
fn add_authenticate_and_refuse() {
    let (_d, u) = users();
    u.add("alice", "secret pw", "a@example.org", false, None)
        .expect("add");
    let user = u.authenticate("alice", "secret pw").expect("auth");
    assert!(user.secret().starts_with("$argon2id$"));
    assert_eq!(
        user.password, None,
        "no plaintext on a store that is shoal's alone"
    );
    assert_eq!(user.machine_limit, 16);
    // Second time: the fast path.
    u.authenticate("alice", "secret pw").expect("auth again");
    assert!(matches!(
        u.authenticate("alice", "wrong"),
        Err(AuthError::WrongPassword)
    ));
    assert!(matches!(
        u.authenticate("nobody", "x"),
        Err(AuthError::WrongPassword)
    ));
    assert!(u.add("alice", "x", "", false, None).is_err());
    assert!(u.add("a", "x", "", false, None).is_err());
    assert!(u.add("al ice", "x", "", false, None).is_err());
}

/// Allows `left` slow checks, counts verdicts.
struct Budget {
    left: Mutex<u32>,
    wrong: std::sync::atomic::AtomicU32,
}

impl SlowCheckGuard for Budget {
    fn may_check(&self) -> Result<(), Duration> {
        let mut left = self.left.lock();
        if *left == 0 {
            return Err(Duration::from_secs(7));
        }
        *left -= 1;
        Ok(())
    }
    fn checked(&self, right: bool) {
        if !right {
            self.wrong
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[test]
fn a_guard_bounds_the_slow_checks_of_concurrent_guesses() {
    let (_d, u) = users();
    u.add("erin", "right one", "", false, None).expect("add");
    let u = Arc::new(u);
    let guard = Arc::new(Budget {
        left: Mutex::new(3),
        wrong: Default::default(),
    });
    let threads: Vec<_> = (0..12)
        .map(|i| {
            let (u, g) = (u.clone(), guard.clone());
            std::thread::spawn(move || {
                // Half the guesses are for a user that does not exist.
                let name = if i % 2 == 0 { "erin" } else { "nobody" };
                u.authenticate_guarded(name, &format!("guess {i}"), &*g)
                    .map(|x| x.username)
            })
        })
        .collect();
    let mut throttled = 0;
    for t in threads {
        match t.join().expect("join") {
            Err(AuthError::Throttled { retry_after: d }) => {
                assert_eq!(d, Duration::from_secs(7));
                throttled += 1;
            }
            Err(AuthError::WrongPassword) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(u.slow_checks() <= 3, "{} slow checks", u.slow_checks());
    assert_eq!(throttled, 12 - u.slow_checks());
    assert_eq!(
        u64::from(guard.wrong.load(std::sync::atomic::Ordering::Relaxed)),
        u.slow_checks()
    );
}

#[test]
fn cold_cache_herd_verifies_once_and_failures_are_remembered() {
    let (_d, u) = users();
    u.add("dave", "right one", "", false, None).expect("add");
    let u = Arc::new(u);
    assert!(u.authenticate_cached("dave", "right one").is_none(), "cold");
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let u = u.clone();
            std::thread::spawn(move || u.authenticate("dave", "right one").map(|x| x.username))
        })
        .collect();
    for t in threads {
        assert_eq!(t.join().expect("join").expect("auth"), "dave");
    }
    assert_eq!(
        u.slow_checks(),
        1,
        "one argon2 run for eight concurrent first calls"
    );
    assert!(matches!(
        u.authenticate_cached("dave", "right one"),
        Some(Ok(ref x)) if x.username == "dave"
    ));
    // A wrong password: checked slowly once, then refused from the cache.
    for _ in 0..3 {
        assert!(matches!(
            u.authenticate("dave", "old one"),
            Err(AuthError::WrongPassword)
        ));
    }
    assert_eq!(u.slow_checks(), 2);
    assert!(matches!(
        u.authenticate_cached("dave", "old one"),
        Some(Err(AuthError::WrongPassword))
    ));
    assert!(u.authenticate_cached("dave", "never tried").is_none());
    assert!(u.verifying.lock().is_empty(), "per-user locks are dropped");
    // A password change forgets both verdicts.
    let mut user = u.load("dave").expect("load").expect("some");
    user.password_hash = Some(hash_password("old one").expect("hash"));
    u.save(&user).expect("save");
    u.authenticate("dave", "old one").expect("the new password");
    assert!(u.authenticate("dave", "right one").is_err());
    assert_eq!(u.slow_checks(), 4);
}

/// Slow checks run for `guesses` wrong passwords of `user`, then for the same again.
fn slow_checks_of(u: &Users, user: &str, guesses: usize) -> u64 {
    let before = u.slow_checks();
    for round in 0..2 {
        for i in 0..guesses {
            assert!(
                matches!(
                    u.authenticate(user, &format!("guess {i}")),
                    Err(AuthError::WrongPassword)
                ),
                "{user}, round {round}, guess {i}"
            );
        }
    }
    u.slow_checks() - before
}

#[test]
fn unknown_users_and_wrong_passwords_are_remembered_alike() {
    let (_d, u) = users();
    u.add("alice", "right", "", false, None).expect("add");
    // Whether a repeated guess is answered from memory (fast) or checked again (slow)
    // must not tell a real user from an unknown one: not for a few guesses, nor for more
    // than a user's memory keeps.
    for guesses in [2, REJECTED_KEPT + 2] {
        let known = slow_checks_of(&u, "alice", guesses);
        let unknown = slow_checks_of(&u, "nobody", guesses);
        assert_eq!(known, unknown, "{guesses} guesses");
    }
    // Nor after the memory has expired: both are checked again.
    let age = |u: &Users| {
        let old = Instant::now() - REMEMBERED_TTL - Duration::from_secs(1);
        for c in u.cache.lock().values_mut() {
            for r in &mut c.rejected {
                r.1 = old;
            }
        }
        for r in u.unknown.lock().iter_mut() {
            r.2 = old;
        }
    };
    age(&u);
    assert_eq!(slow_checks_of(&u, "alice", 2), 2);
    assert_eq!(slow_checks_of(&u, "nobody", 2), 2);
}

#[test]
fn a_legacy_plaintext_password_is_refused_as_slowly_as_an_unknown_user() {
    let (_d, u) = users();
    let mut user = u.add("erin", "temp", "", false, None).expect("add");
    user.password = Some("plain old".into());
    user.password_hash = None;
    u.save(&user).expect("save");
    // The cost of a refusal, counted: argon2 runs (timing would tell the same, noisily).
    let runs = |user: &str, i: usize| {
        let before = ARGON2_RUNS.with(std::cell::Cell::get);
        assert!(u.authenticate(user, &format!("wrong {i}")).is_err());
        ARGON2_RUNS.with(std::cell::Cell::get) - before
    };
    for i in 0..3 {
        assert_eq!(
            runs("erin", i),
            1,
            "a wrong plaintext password: one argon2 run"
        );
        assert_eq!(runs("nobody", i), 1, "an unknown user: one argon2 run");
    }
    // A remembered wrong guess costs none, for either.
    assert_eq!(runs("erin", 0), 0);
    assert_eq!(runs("nobody", 0), 0);
}

#[test]
fn legacy_plaintext_is_accepted_and_rehashed() {
    let (_d, u) = users();
    let mut user = u.add("bob", "temp", "", false, Some(4)).expect("add");
    user.password = Some("plain old".into());
    user.password_hash = None;
    u.save(&user).expect("save");
    u.authenticate("bob", "plain old").expect("legacy auth");
    let stored = u.load("bob").expect("load").expect("some");
    assert_eq!(stored.password, None, "the plaintext is gone");
    assert!(stored.secret().starts_with("$argon2id$"));
    u.invalidate("bob");
    u.authenticate("bob", "plain old").expect("hashed auth");
    assert!(u.authenticate("bob", "plain").is_err());
}

#[test]
fn blocked_and_pending_are_refused_and_password_change_invalidates() {
    let (_d, u) = users();
    let mut user = u.add("carol", "pw1", "", false, None).expect("add");
    u.authenticate("carol", "pw1").expect("auth");
    user.blocked = true;
    u.save(&user).expect("save");
    assert!(matches!(
        u.authenticate("carol", "pw1"),
        Err(AuthError::Blocked)
    ));
    user.blocked = false;
    user.pending = true;
    u.save(&user).expect("save");
    assert!(matches!(
        u.authenticate("carol", "pw1"),
        Err(AuthError::Pending)
    ));
    user.pending = false;
    user.password_hash = Some(hash_password("pw2").expect("hash"));
    u.save(&user).expect("save");
    assert!(
        u.authenticate("carol", "pw1").is_err(),
        "old password refused"
    );
    u.authenticate("carol", "pw2").expect("new password");
}

/// A store shared with Fishtest (as on MongoDB), on the test SQLite store.
fn beside() -> (tempfile::TempDir, Users) {
    let (dir, store) = temp_store();
    // A Fishtest database: it has users, with plaintext passwords.
    let doc = serde_json::json!({
        "username": "fishtester", "password": "fishtest's own", "pending": false,
        "blocked": false, "email": "f@example.org", "groups": [], "tests_repo": "",
        "machine_limit": 16, "registration_time": {"$date": "2025-05-21T16:00:00Z"},
    });
    let doc = doc.as_object().cloned().expect("an object");
    store.insert(Collection::Users, doc).expect("insert");
    (dir, Users::with_sharing(store, true))
}

#[test]
fn a_shared_store_without_users_is_shoals_from_the_start() {
    let (_d, store) = temp_store();
    let u = Users::with_sharing(store, true);
    assert_eq!(u.mode().expect("mode"), PasswordMode::Own);
    u.add("first", "first pw", "", false, None)
        .expect("no email needed");
    assert!(!stored(&u, "first").contains_key("password"));
    assert_eq!(u.mode().expect("mode"), PasswordMode::Own, "recorded");
}

/// The user document exactly as stored.
fn stored(u: &Users, name: &str) -> Doc {
    u.store
        .find(
            Collection::Users,
            &Query::new().with(Cond::Eq("username".into(), Value::String(name.into()))),
        )
        .expect("find")
        .pop()
        .expect("stored")
}

#[test]
fn beside_fishtest_logins_write_nothing_and_new_passwords_are_fishtests() {
    let (_d, u) = beside();
    assert_eq!(u.mode().expect("mode"), PasswordMode::Beside);
    assert!(
        matches!(
            u.add("nomail", "temp", "", false, None),
            Err(UserError::BadEmail { .. })
        ),
        "beside Fishtest a user needs an email"
    );
    let mut fishtest = u
        .add("frank", "temp", "frank@example.org", false, None)
        .expect("add");
    // Written as Fishtest writes it: the plaintext, and no field Fishtest does not know.
    let doc = stored(&u, "frank");
    assert_eq!(doc.get("password"), Some(&Value::String("temp".into())));
    assert!(!doc.contains_key("password_hash"));
    // A document as Fishtest wrote it.
    fishtest.password = Some("fishtest pw".into());
    u.save(&fishtest).expect("save");
    let before = stored(&u, "frank");
    u.authenticate("frank", "fishtest pw").expect("login");
    u.invalidate("frank");
    u.authenticate("frank", "fishtest pw").expect("login again");
    assert!(u.authenticate("frank", "temp").is_err());
    assert_eq!(stored(&u, "frank"), before, "a login changes nothing");

    // The trial ends: every plaintext becomes a hash, and logins go on.
    u.add("gina", "gina pw", "gina@example.org", false, None)
        .expect("add");
    let seen = std::sync::atomic::AtomicUsize::new(0);
    let report = u
        .finalize_passwords(2, &|_, _| {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        })
        .expect("finalize");
    assert_eq!(report.hashed, 3);
    assert!(report.failed.is_empty());
    assert_eq!(seen.into_inner(), 3);
    assert_eq!(u.mode().expect("mode"), PasswordMode::Own);
    for (name, pw) in [("frank", "fishtest pw"), ("gina", "gina pw")] {
        let doc = stored(&u, name);
        assert!(!doc.contains_key("password"), "{name}: plaintext removed");
        let hash = doc
            .get("password_hash")
            .and_then(Value::as_str)
            .expect("hash");
        assert!(hash.starts_with("$argon2id$"));
        u.invalidate(name);
        u.authenticate(name, pw).expect("login after finalize");
    }
    // Run again: nothing left to do.
    let again = u.finalize_passwords(1, &|_, _| {}).expect("again");
    assert_eq!(again.hashed, 0);
    // A new account now gets a hash only.
    u.add("hank", "hank pw", "", false, None).expect("add");
    assert!(!stored(&u, "hank").contains_key("password"));
}

#[test]
fn an_earlier_shoals_hash_in_the_password_field_still_works_and_moves() {
    let (_d, u) = users();
    let mut user = u.add("ivy", "temp", "", false, None).expect("add");
    user.password = Some(hash_password("ivy pw").expect("hash"));
    user.password_hash = None;
    u.save(&user).expect("save");
    u.authenticate("ivy", "ivy pw").expect("login");
    let doc = stored(&u, "ivy");
    assert!(!doc.contains_key("password"));
    assert!(
        doc.get("password_hash")
            .and_then(Value::as_str)
            .is_some_and(|h| h.starts_with("$argon2id$"))
    );
}

#[test]
fn a_user_without_any_password_never_logs_in() {
    let (_d, u) = users();
    let mut user = u.add("jo", "temp", "", false, None).expect("add");
    user.password = None;
    user.password_hash = None;
    u.save(&user).expect("save");
    assert!(u.authenticate("jo", "").is_err());
    assert!(u.authenticate("jo", "temp").is_err());
}

#[test]
fn legacy_user_names_are_read_added_and_removed() {
    let (_d, u) = users();
    assert!(u.name_allowed("alice"));
    assert!(!u.name_allowed("old.timer"));
    // As Fishtest stores the list (kvstore), with an entry that is no name.
    let mut doc = Doc::new();
    doc.insert("_id".into(), Value::String(LEGACY_USERNAMES_DOC.into()));
    doc.insert("value".into(), serde_json::json!(["old.timer", 7, "a"]));
    u.store.put(Collection::Kvstore, &doc).expect("put");
    assert!(!u.name_allowed("old.timer"), "not before the list is read");
    assert_eq!(u.refresh_legacy_names().expect("refresh"), 2);
    assert!(u.name_allowed("old.timer"));
    assert!(u.name_allowed("a"));
    assert!(!u.name_allowed("b"));
    // Added and removed through shoal (the CLI), kept in the same document.
    assert!(u.set_legacy_name("x_y", true).expect("add"));
    assert!(!u.set_legacy_name("x_y", true).expect("again"));
    assert!(u.name_allowed("x_y"));
    assert!(matches!(
        u.set_legacy_name("fine", true),
        Err(UserError::BadName {
            why: NameRefusal::NeedsNoLegacyEntry,
            ..
        })
    ));
    assert!(u.set_legacy_name("old.timer", false).expect("remove"));
    assert!(!u.name_allowed("old.timer"));
    let list = u
        .store
        .get(Collection::Kvstore, LEGACY_USERNAMES_DOC)
        .expect("get")
        .and_then(|d| d.get("value").cloned());
    assert_eq!(list, Some(serde_json::json!([7, "a", "x_y"])));
    // A removed document: no legacy names.
    u.store
        .delete(Collection::Kvstore, LEGACY_USERNAMES_DOC)
        .expect("delete");
    assert_eq!(u.refresh_legacy_names().expect("refresh"), 0);
    assert!(!u.name_allowed("a"));
}

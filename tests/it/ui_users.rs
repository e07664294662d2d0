//! People through real HTTP: `/user` (own profile), `/user/{name}` (an approver's view:
//! accept, reject, block, unblock), `/user_management` and its pending count. Each route's
//! permissions for anonymous visitors, users, approvers, and blocked and pending accounts
//! (which cannot log in, so they are anonymous); CSRF refusal on every POST; the validation
//! messages; and the state changes (an accepted user logs in, a blocked user's sessions end,
//! a new password ends the other sessions and works on the worker API).

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fleet::{PASSWORD, add_user, user_cli, worker_info};
use crate::harness::TestServer;
use crate::web::{Browser, Page};

const STRONG: &str = "violet otter juggles nine lamps";

/// A browser logged in as `user` (anonymous for `None`) and its page's CSRF token.
pub async fn session<'a>(server: &'a TestServer, user: Option<&str>) -> (Browser<'a>, String) {
    session_with(server, user, PASSWORD).await
}

pub async fn session_with<'a>(
    server: &'a TestServer,
    user: Option<&str>,
    password: &str,
) -> (Browser<'a>, String) {
    let mut b = Browser::new(server);
    let token = b.get("/login").await.csrf();
    let Some(user) = user else {
        return (b, token);
    };
    let page = b
        .post(
            "/login",
            &[
                ("username", user),
                ("password", password),
                ("stay_logged_in", "1"),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "login {user}: {}", page.body);
    let token = b.get("/tests").await.csrf();
    (b, token)
}

/// Tries the login form once; the answer.
async fn try_login(server: &TestServer, user: &str, password: &str) -> Page {
    let mut b = Browser::new(server);
    let token = b.get("/login").await.csrf();
    b.post(
        "/login",
        &[
            ("username", user),
            ("password", password),
            ("csrf_token", &token),
        ],
    )
    .await
}

/// Logs in, retrying while the server's two-second user cache may still hold the old state.
pub async fn login_eventually(server: &TestServer, user: &str, password: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = try_login(server, user, password).await;
        if page.status == 302 {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{user} never logged in: {}",
            page.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A user document straight from the store.
pub fn stored_user(server: &TestServer, name: &str) -> Option<Value> {
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    store
        .find(
            shoal::store::Collection::Users,
            &shoal::store::Query::new()
                .with(shoal::store::Cond::Eq("username".into(), json!(name))),
        )
        .expect("find")
        .into_iter()
        .next()
        .map(Value::Object)
}

/// Actions of one kind, from the store, oldest first.
pub fn stored_actions(server: &TestServer, action: &str) -> Vec<Value> {
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    // shoal's own kinds are in its own log, never in Fishtest's `actions`.
    let coll = if shoal::store::SHOAL_ACTION_KINDS.contains(&action) {
        shoal::store::Collection::ShoalActions
    } else {
        shoal::store::Collection::Actions
    };
    store
        .find(
            coll,
            &shoal::store::Query::new()
                .with(shoal::store::Cond::Eq("action".into(), json!(action)))
                .sort("time", shoal::store::Order::Asc),
        )
        .expect("find")
        .into_iter()
        .map(Value::Object)
        .collect()
}

fn unescape(body: &str) -> String {
    body.replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&amp;", "&")
}

/// alice and bob (users), boss (approver), carol (pending), dave (blocked).
async fn server_with_people() -> TestServer {
    let server = TestServer::start().await;
    add_user(&server, "alice", &["--email", "alice@example.org"]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);
    add_user(&server, "carol", &["--email", "carol@example.org"]);
    user_cli(&server, &["set", "carol", "--pending"]);
    add_user(&server, "dave", &[]);
    user_cli(&server, &["set", "dave", "--block"]);
    server
}

#[tokio::test]
async fn every_user_route_checks_who_is_asking() {
    let server = server_with_people().await;

    // Anonymous: the login wall on the pages, the count for everyone.
    let (mut anon, anon_token) = session(&server, None).await;
    for (path, next) in [
        ("/user", "%2Fuser"),
        ("/user/alice", "%2Fuser%2Falice"),
        ("/user_management", "%2Fuser_management"),
    ] {
        let page = anon.get(path).await;
        assert_eq!(page.status, 302, "{path}");
        assert_eq!(page.location, format!("/login?next={next}"), "{path}");
    }
    let count = anon.get("/user_management/pending_count").await;
    assert_eq!(count.status, 200);
    assert!(count.body.contains("Users (1)"), "{}", count.body);
    for (path, form) in [
        ("/user", vec![("user", "alice"), ("old_password", PASSWORD)]),
        ("/user/carol", vec![("user", "carol"), ("pending", "0")]),
    ] {
        let mut form = form;
        form.push(("csrf_token", &anon_token));
        let page = anon.post(path, &form).await;
        assert_eq!(page.status, 302, "{path}");
        assert!(page.location.starts_with("/login"), "{path}");
    }

    // Pending and blocked accounts cannot hold a session: they stay anonymous.
    let page = try_login(&server, "carol", PASSWORD).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("pending approval"), "{}", page.body);
    let page = try_login(&server, "dave", PASSWORD).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("Your account is blocked."),
        "{}",
        page.body
    );

    // A user: their profile, nobody else's, no user management.
    let (mut alice, alice_token) = session(&server, Some("alice")).await;
    let page = alice.get("/user").await;
    assert_eq!(page.status, 200);
    assert_eq!(page.header("cache-control"), "no-store");
    for want in [
        "Machine Limit: 16",
        "alice@example.org",
        "Groups: No group",
        "CPU-Hours: 0",
        "name=\"old_password\"",
        "name=\"csrf_token\"",
    ] {
        assert!(page.body.contains(want), "missing {want}: {}", page.body);
    }
    assert!(
        !page.body.contains("Users ("),
        "a user sees no pending count"
    );
    let own = alice.get("/user/alice").await;
    assert_eq!(own.status, 200);
    assert!(own.body.contains("name=\"old_password\""));
    let page = alice.get("/user/bob").await;
    assert_eq!(page.status, 403);
    assert!(page.body.contains("You cannot inspect users"));
    let page = alice.get("/user_management").await;
    assert_eq!(page.status, 403);
    assert!(page.body.contains("You cannot view user management"));
    let page = alice
        .post(
            "/user/carol",
            &[
                ("user", "carol"),
                ("pending", "0"),
                ("csrf_token", &alice_token),
            ],
        )
        .await;
    assert_eq!(page.status, 403);
    assert_eq!(
        stored_user(&server, "carol").expect("carol")["pending"],
        true
    );

    // An approver: another user's page, the list, the badge; an unknown user is a 404.
    let (mut boss, _) = session(&server, Some("boss")).await;
    let page = boss.get("/user/carol").await;
    assert_eq!(page.status, 200);
    for want in ["User Management", "carol@example.org", "Accept", "Reject"] {
        assert!(page.body.contains(want), "missing {want}: {}", page.body);
    }
    let page = boss.get("/user/bob").await;
    assert!(page.body.contains("Block") && !page.body.contains("Accept"));
    let page = boss.get("/user/dave").await;
    assert!(page.body.contains("Unblock"));
    assert_eq!(boss.get("/user/nobody").await.status, 404);
    let page = boss.get("/user_management").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("href=\"/user/carol\""), "{}", page.body);
    assert!(
        !page.body.contains("href=\"/user/alice\""),
        "pending only by default"
    );
    assert!(page.body.contains("Users (1)"), "the approver's badge");
    let page = boss.get("/user_management?group=blocked").await;
    assert!(page.body.contains("href=\"/user/dave\""));
    assert!(!page.body.contains("href=\"/user/carol\""));
    let page = boss.get("/user_management?group=approvers").await;
    assert!(page.body.contains("href=\"/user/boss\""));
    let page = boss.get("/user_management?group=all&q=AL").await;
    assert!(page.body.contains("href=\"/user/alice\""));
    assert!(!page.body.contains("href=\"/user/bob\""));
    let page = boss.get("/user_management?group=idle").await;
    assert!(
        page.body.contains("href=\"/user/bob\""),
        "nobody contributed yet"
    );
}

#[tokio::test]
async fn every_post_refuses_a_bad_token_and_changes_nothing() {
    let server = server_with_people().await;
    let (mut alice, _) = session(&server, Some("alice")).await;
    let (mut boss, boss_token) = session(&server, Some("boss")).await;
    let (_, anon_token) = session(&server, None).await;
    let before_alice = stored_user(&server, "alice").expect("alice");
    for token in ["forged", "", anon_token.as_str(), boss_token.as_str()] {
        let page = alice
            .post(
                "/user",
                &[
                    ("user", "alice"),
                    ("email", "new@example.org"),
                    ("old_password", PASSWORD),
                    ("password", STRONG),
                    ("password2", STRONG),
                    ("csrf_token", token),
                ],
            )
            .await;
        assert_eq!(page.status, 403, "token {token:?}");
        assert!(page.body.contains("security token"));
    }
    for form in [
        [("user", "carol"), ("pending", "0")],
        [("user", "carol"), ("pending", "1")],
        [("user", "bob"), ("blocked", "1")],
        [("user", "dave"), ("blocked", "0")],
    ] {
        let target = form[0].1;
        for token in ["forged", anon_token.as_str()] {
            let mut f = form.to_vec();
            f.push(("csrf_token", token));
            let page = boss.post(&format!("/user/{target}"), &f).await;
            assert_eq!(page.status, 403, "{form:?}");
        }
    }
    assert_eq!(stored_user(&server, "alice").expect("alice"), before_alice);
    assert_eq!(
        stored_user(&server, "carol").expect("carol")["pending"],
        true
    );
    assert_eq!(stored_user(&server, "bob").expect("bob")["blocked"], false);
    assert_eq!(stored_user(&server, "dave").expect("dave")["blocked"], true);
    // (The CLI logged dave's block when the test set him up; the web logged nothing.)
    assert_eq!(stored_actions(&server, "block_user").len(), 1);
    assert!(stored_actions(&server, "accept_user").is_empty());
    // The sessions still work (a refused form logs nobody out).
    assert_eq!(alice.get("/user").await.status, 200);
}

#[tokio::test]
async fn an_approver_accepts_rejects_blocks_and_unblocks() {
    let server = server_with_people().await;
    add_user(&server, "erin", &[]);
    user_cli(&server, &["set", "erin", "--pending"]);
    let (mut boss, token) = session(&server, Some("boss")).await;

    // Accept: carol can log in, and the action log says who accepted whom.
    let page = boss
        .post(
            "/user/carol",
            &[("user", "carol"), ("pending", "0"), ("csrf_token", &token)],
        )
        .await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert_eq!(page.location, "/user/carol?done=accepted");
    let page = boss.get(&page.location).await;
    assert!(page.body.contains("Accepted user carol"));
    login_eventually(&server, "carol", PASSWORD).await;
    let accepted = stored_actions(&server, "accept_user");
    assert_eq!(accepted.len(), 1);
    assert_eq!(accepted[0]["username"], "boss");
    assert_eq!(accepted[0]["user"], "carol");
    assert_eq!(accepted[0]["message"], "accepted");
    // Accepting again is refused: carol is no longer pending.
    let page = boss
        .post(
            "/user/carol",
            &[("user", "carol"), ("pending", "0"), ("csrf_token", &token)],
        )
        .await;
    assert_eq!(page.status, 400);
    assert!(page.body.contains("not pending"), "{}", page.body);

    // Reject: erin's account is deleted.
    let page = boss
        .post(
            "/user/erin",
            &[("user", "erin"), ("pending", "1"), ("csrf_token", &token)],
        )
        .await;
    assert_eq!(page.status, 302);
    assert_eq!(page.location, "/user_management?done=rejected");
    assert!(stored_user(&server, "erin").is_none());
    assert_eq!(boss.get("/user/erin").await.status, 404);

    // Bad forms: a clear 400, nothing changed.
    for form in [
        vec![("user", "bob"), ("blocked", "yes")],
        vec![("user", "alice"), ("blocked", "1")],
        vec![("user", "bob")],
    ] {
        let mut f = form.clone();
        f.push(("csrf_token", &token));
        let page = boss.post("/user/bob", &f).await;
        assert_eq!(page.status, 400, "{form:?}: {}", page.body);
    }
    let page = boss
        .post(
            "/user/nobody",
            &[("user", "nobody"), ("blocked", "1"), ("csrf_token", &token)],
        )
        .await;
    assert_eq!(page.status, 404);
    assert_eq!(stored_user(&server, "bob").expect("bob")["blocked"], false);

    // Block: alice's live sessions end, she cannot log in, her workers are refused.
    let (mut alice, _) = session(&server, Some("alice")).await;
    let (mut alice2, _) = session(&server, Some("alice")).await;
    let page = boss
        .post(
            "/user/alice",
            &[("user", "alice"), ("blocked", "1"), ("csrf_token", &token)],
        )
        .await;
    assert_eq!(page.location, "/user/alice?done=blocked");
    for b in [&mut alice, &mut alice2] {
        assert_session_ended(b).await;
    }
    let page = try_login(&server, "alice", PASSWORD).await;
    assert!(
        page.body.contains("Your account is blocked."),
        "{}",
        page.body
    );
    let (status, v) = worker_call(&server, "alice", PASSWORD).await;
    assert_eq!(status, 401, "{v}");
    // Unblock: she is back.
    let page = boss
        .post(
            "/user/alice",
            &[("user", "alice"), ("blocked", "0"), ("csrf_token", &token)],
        )
        .await;
    assert_eq!(page.location, "/user/alice?done=unblocked");
    login_eventually(&server, "alice", PASSWORD).await;
    let blocks: Vec<Value> = stored_actions(&server, "block_user")
        .into_iter()
        .filter(|a| a["username"] == "boss")
        .collect();
    let messages: Vec<(&str, &str)> = blocks
        .iter()
        .map(|a| {
            (
                a["user"].as_str().unwrap_or_default(),
                a["message"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(messages, [("alice", "blocked"), ("alice", "unblocked")]);
    // The badge and the list follow (the count is cached for a second).
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let page = boss.get("/user_management/pending_count").await;
    assert_eq!(page.body.trim(), "<a href=\"/user_management\">Users</a>");
    let page = boss.get("/user_management").await;
    assert!(page.body.contains("No pending users"));
}

/// The browser's session is over: its next page is anonymous (→ `/tests` when the server
/// notices on this request, or the login wall when the session was already removed).
async fn assert_session_ended(b: &mut Browser<'_>) {
    let page = b.get("/user").await;
    assert_eq!(page.status, 302);
    assert!(
        page.location == "/tests" || page.location.starts_with("/login"),
        "{}",
        page.location
    );
    let page = b.get("/user").await;
    assert!(page.location.starts_with("/login"), "now anonymous");
}

/// `request_version` as a worker of `user` with `password`.
async fn worker_call(server: &TestServer, user: &str, password: &str) -> (u16, Value) {
    let body =
        json!({"password": password, "worker_info": worker_info(user, 4, &crate::fleet::key(7))});
    server.post_json("/api/request_version", &body).await
}

#[tokio::test]
async fn a_profile_change_is_checked_then_saved_and_a_new_password_ends_other_sessions() {
    let server = server_with_people().await;
    let (mut here, token) = session(&server, Some("alice")).await;
    let (mut elsewhere, _) = session(&server, Some("alice")).await;
    let before = stored_user(&server, "alice").expect("alice");

    let post = |old: &'static str,
                password: &'static str,
                password2: &'static str,
                email: &'static str,
                repo: &'static str| {
        vec![
            ("user", "alice"),
            ("old_password", old),
            ("password", password),
            ("password2", password2),
            ("email", email),
            ("tests_repo", repo),
        ]
    };
    let cases = [
        (
            post("wrong", "", "", "alice@example.org", ""),
            "Invalid password!",
        ),
        (
            post(PASSWORD, STRONG, "different", "alice@example.org", ""),
            "Error! Matching verify password required",
        ),
        (
            post(PASSWORD, "alice123", "alice123", "alice@example.org", ""),
            "Error! Weak password",
        ),
        (
            post(
                PASSWORD,
                "",
                "",
                "alice@example.org",
                "https://gitlab.com/a/b",
            ),
            "Error! Invalid test repo https://gitlab.com/a/b",
        ),
        (
            post(PASSWORD, "", "", "not an email", ""),
            "Error! Invalid email",
        ),
    ];
    for (form, want) in cases {
        let mut f = form.clone();
        f.push(("csrf_token", &token));
        let page = here.post("/user", &f).await;
        assert_eq!(page.status, 200, "{want}");
        let body = unescape(&page.body);
        assert!(body.contains(want), "missing {want}: {body}");
        assert!(body.contains("flash-error"));
    }
    assert_eq!(stored_user(&server, "alice").expect("alice"), before);
    // Without the hidden `user` field nothing happens.
    let page = here
        .post(
            "/user",
            &[
                ("old_password", PASSWORD),
                ("email", "x@example.org"),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(page.location, "/user");
    assert_eq!(stored_user(&server, "alice").expect("alice"), before);

    // Email and repository: saved; the sessions live on.
    let mut f = post(
        PASSWORD,
        "",
        "",
        "alice@new.example.org",
        "https://github.com/alice/Stockfish/",
    );
    f.push(("csrf_token", &token));
    let page = here.post("/user", &f).await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert_eq!(page.location, "/user?done=saved");
    let saved = stored_user(&server, "alice").expect("alice");
    assert_eq!(saved["email"], "alice@new.example.org");
    assert_eq!(saved["tests_repo"], "https://github.com/alice/Stockfish");
    assert_eq!(saved["password"], before["password"]);
    assert_eq!(elsewhere.get("/user").await.status, 200);

    // A new password: this browser keeps a (new) session, the other one's ends; the worker
    // API takes the new password and refuses the old one.
    let mut f = post(PASSWORD, STRONG, STRONG, "alice@new.example.org", "");
    f.push(("csrf_token", &token));
    let old_cookie = here.cookie.clone();
    let page = here.post("/user", &f).await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert_eq!(page.location, "/user?done=password");
    assert_ne!(here.cookie, old_cookie, "a fresh session id");
    let page = here.get("/user?done=password").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("Success! Password updated"));
    assert_session_ended(&mut elsewhere).await;
    let saved = stored_user(&server, "alice").expect("alice");
    assert!(
        saved["password_hash"]
            .as_str()
            .unwrap_or_default()
            .starts_with("$argon2id$")
    );
    assert!(
        saved.get("password").is_none(),
        "no plaintext on shoal's own store"
    );
    assert_eq!(saved["tests_repo"], "", "the repository was cleared");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (new_status, v) = worker_call(&server, "alice", STRONG).await;
        if new_status == 200 {
            assert!(v.get("error").is_none(), "{v}");
            break;
        }
        assert!(Instant::now() < deadline, "new password never took: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (old_status, v) = worker_call(&server, "alice", PASSWORD).await;
    assert_eq!(old_status, 401, "the old password is refused: {v}");
    login_eventually(&server, "alice", STRONG).await;
    // Profile changes are not in the action log (as in Fishtest): only the CLI's block of dave.
    assert_eq!(stored_actions(&server, "block_user").len(), 1);
}

#[tokio::test]
async fn wrong_old_passwords_on_the_profile_form_are_throttled_like_logins() {
    let server = server_with_people().await;
    let (mut alice, token) = session(&server, Some("alice")).await;
    let before = stored_user(&server, "alice").expect("alice");
    let mut throttled = None;
    for i in 0..15 {
        let page = alice
            .post(
                "/user",
                &[
                    ("user", "alice"),
                    ("old_password", &format!("guess {i}")),
                    ("password", STRONG),
                    ("password2", STRONG),
                    ("csrf_token", &token),
                ],
            )
            .await;
        if page.status == 429 {
            assert!(!page.header("retry-after").is_empty());
            throttled = Some(i);
            break;
        }
        assert_eq!(page.status, 200);
        assert!(page.body.contains("Invalid password!"));
    }
    assert!(throttled.is_some(), "never throttled");
    assert_eq!(stored_user(&server, "alice").expect("alice"), before);
}

/// No user name collides with a route: `/user/tokens` is the tokens page, always, and the
/// page of a user named `tokens` is `/users/tokens` (which answers for every name), linked
/// from user management, posted to by its own forms and redirected to after an action.
#[tokio::test]
async fn a_user_named_like_a_page_under_user_has_a_page_too() {
    let server = server_with_people().await;
    add_user(&server, "tokens", &[]);
    user_cli(&server, &["set", "tokens", "--pending"]);
    let (mut boss, token) = session(&server, Some("boss")).await;

    // /user/tokens stays the signed-in user's tokens page.
    let own = boss.get("/user/tokens").await;
    assert_eq!(own.status, 200);
    assert!(own.body.contains("No tokens yet"), "{}", own.body);

    // The user's page, linked from user management where it is reached.
    let list = boss.get("/user_management").await;
    assert!(
        list.body.contains("href=\"/users/tokens\""),
        "{}",
        list.body
    );
    assert!(list.body.contains("href=\"/user/carol\""), "{}", list.body);
    let page = boss.get("/users/tokens").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("action=\"/users/tokens\""),
        "{}",
        page.body
    );
    // Every other name answers at both addresses, with the same page.
    let carol = boss.get("/users/carol").await;
    assert_eq!(carol.status, 200);
    assert!(
        carol.body.contains("action=\"/user/carol\""),
        "{}",
        carol.body
    );

    // Its actions: accepted through its own address, and back there.
    let done = boss
        .post(
            "/users/tokens",
            &[("user", "tokens"), ("pending", "0"), ("csrf_token", &token)],
        )
        .await;
    assert_eq!(done.status, 302, "{}", done.body);
    assert_eq!(done.location, "/users/tokens?done=accepted");
    assert!(
        boss.get(&done.location)
            .await
            .body
            .contains("Accepted user tokens")
    );
    login_eventually(&server, "tokens", PASSWORD).await;
    // Anonymous: the login wall sends back to the same address.
    let (mut anon, _) = session(&server, None).await;
    let wall = anon.get("/users/tokens").await;
    assert_eq!(wall.status, 302);
    assert_eq!(wall.location, "/login?next=%2Fusers%2Ftokens");
}

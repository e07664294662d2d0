//! Signup that bots can't flood, through real HTTP: the honeypot and the signed form age
//! (refused in words, nothing created, a person passes), the signup rate limits per address
//! and for everybody (429 with Retry-After and a page saying so, while another address still
//! signs up), and approvers clearing the pending queue several accounts at a time.

use std::time::Duration;

use crate::fleet::{add_user, user_cli};
use crate::harness::{Opts, TestServer};
use crate::ui_users::session;
use crate::web::{Browser, Page};

const STRONG: &str = "violet otter juggles nine lamps";

/// The signup form's tokens, as a browser at `ip` (through the trusted proxy) gets them.
async fn form_tokens(b: &mut Browser<'_>, ip: &str) -> (String, String) {
    let page = b.as_from(ip, "/signup", None).await;
    assert_eq!(page.status, 200);
    let form = page.input("form_token").expect("a signed form_token");
    assert!(
        page.body.contains("name=\"website\""),
        "the honeypot field is in the form"
    );
    (page.csrf(), form)
}

/// Sends the signup form for `name` from `ip` with these tokens and honeypot text.
async fn send(
    b: &mut Browser<'_>,
    ip: &str,
    name: &str,
    (csrf, form): &(String, String),
    honeypot: &str,
) -> Page {
    let email = format!("{name}@example.org");
    let fields = [
        ("username", name),
        ("password", STRONG),
        ("password2", STRONG),
        ("email", email.as_str()),
        ("csrf_token", csrf.as_str()),
        ("form_token", form.as_str()),
        ("website", honeypot),
    ];
    b.as_from(ip, "/signup", Some(&fields)).await
}

fn registered(server: &TestServer, name: &str) -> bool {
    user_cli(server, &["list"])
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

#[tokio::test]
async fn bots_are_refused_in_words_and_a_person_who_takes_a_few_seconds_passes() {
    // The default minimum age (the harness turns it off for other tests).
    let server = TestServer::start_with(Opts::new().set("signup_min_form_age_s", 3)).await;
    let ip = "127.0.0.1";
    let mut b = Browser::new(&server);

    // Sent at once, as a password manager (or a script) would: never refused, answered
    // once the form is 3 s old (a script pays in time, a person does not notice).
    let tokens = form_tokens(&mut b, ip).await;
    let started = std::time::Instant::now();
    let fast = send(&mut b, ip, "quick", &tokens, "").await;
    assert_eq!(fast.status, 302, "{}", fast.body);
    assert!(
        started.elapsed() >= Duration::from_millis(2500),
        "answered before the form was 3 s old: {:?}",
        started.elapsed()
    );
    assert!(registered(&server, "quick"));

    // No token, a forged one, or an altered one.
    let tokens = form_tokens(&mut b, ip).await;
    for bad in [
        "",
        "v1.1.00",
        "v2.1.0000000000000000.00",
        &format!("{}0", tokens.1),
    ] {
        let page = send(
            &mut b,
            ip,
            "forger",
            &(tokens.0.clone(), bad.to_string()),
            "",
        )
        .await;
        assert_eq!(page.status, 200);
        assert!(
            page.body.contains("it was not shown by this server"),
            "{bad}: {}",
            page.body
        );
    }
    assert!(!registered(&server, "forger"));

    // The honeypot filled in, however old the form.
    let honey = send(&mut b, ip, "honey", &tokens, "https://spam.example").await;
    assert!(honey.body.contains("must stay empty"), "{}", honey.body);
    assert!(!registered(&server, "honey"));

    // A person: the form filled in over a few seconds, the honeypot left empty.
    let tokens = form_tokens(&mut b, ip).await;
    tokio::time::sleep(Duration::from_millis(3100)).await;
    let ok = send(&mut b, ip, "person", &tokens, "").await;
    assert_eq!(ok.status, 302, "{}", ok.body);
    assert_eq!(ok.header("location"), "/login?created=1");
    assert!(registered(&server, "person"));
}

#[tokio::test]
async fn a_signup_flood_from_one_address_is_throttled_while_another_signs_up() {
    let server = TestServer::start_with(
        Opts::new()
            .set("trusted_proxies", "[\"127.0.0.1\"]")
            .set("signup_per_ip_per_hour", 3)
            .set("signup_per_hour", 5),
    )
    .await;
    let flood = "203.0.113.5";
    let mut bot = Browser::new(&server);
    for i in 0..3 {
        let tokens = form_tokens(&mut bot, flood).await;
        let page = send(&mut bot, flood, &format!("bot{i}"), &tokens, "").await;
        assert_eq!(page.status, 302, "signup {i}: {}", page.body);
    }
    let tokens = form_tokens(&mut bot, flood).await;
    let limited = send(&mut bot, flood, "bot3", &tokens, "").await;
    assert_eq!(limited.status, 429, "{}", limited.body);
    let retry: u64 = limited
        .header("retry-after")
        .parse()
        .expect("Retry-After in seconds");
    assert!(retry > 0 && retry <= 3600, "{retry}");
    assert!(
        limited.body.contains("Too many sign-ups"),
        "{}",
        limited.body
    );
    assert!(
        !registered(&server, "bot3"),
        "a limited signup creates nothing"
    );
    // Refused by the bot checks: not counted, not limited (cheap either way).
    let page = send(&mut bot, flood, "bot4", &tokens, "filled").await;
    assert_eq!(page.status, 200);

    // Another address still signs up...
    let mut person = Browser::new(&server);
    let other = "198.51.100.7";
    let tokens = form_tokens(&mut person, other).await;
    let ok = send(&mut person, other, "alice", &tokens, "").await;
    assert_eq!(ok.status, 302, "{}", ok.body);
    assert!(registered(&server, "alice"));
    // ... until everybody's limit (5 an hour here) is reached.
    let third = "192.0.2.9";
    let tokens = form_tokens(&mut person, third).await;
    let ok = send(&mut person, third, "bob", &tokens, "").await;
    assert_eq!(ok.status, 302, "{}", ok.body);
    let tokens = form_tokens(&mut person, "192.0.2.10").await;
    let all = send(&mut person, "192.0.2.10", "carol", &tokens, "").await;
    assert_eq!(all.status, 429, "{}", all.body);

    // The limits are the engine's, listed with the others.
    let limits = reqwest::get(server.url("/api/limits"))
        .await
        .expect("limits")
        .text()
        .await
        .expect("body");
    assert!(
        limits.contains("signup_ip") && limits.contains("signup_all"),
        "{limits}"
    );
}

#[tokio::test]
async fn approvers_accept_and_reject_pending_signups_in_bulk() {
    let server = TestServer::start().await;
    add_user(&server, "chief", &["--approver"]);
    let mut b = Browser::new(&server);
    for name in ["ann", "ben", "cat", "dan"] {
        let tokens = form_tokens(&mut b, "127.0.0.1").await;
        let page = send(&mut b, "127.0.0.1", name, &tokens, "").await;
        assert_eq!(page.status, 302, "{}", page.body);
    }
    let (mut chief, _) = session(&server, Some("chief")).await;
    let pending = chief.get("/user_management?group=pending").await;
    for name in ["ann", "ben", "cat", "dan"] {
        assert!(
            pending
                .body
                .contains(&format!("name=\"users\" value=\"{name}\"")),
            "{name} has a checkbox"
        );
    }
    let token = pending.csrf();
    // Nothing ticked: refused in words, nothing changes.
    let none = chief
        .post(
            "/user_management/pending",
            &[("csrf_token", token.as_str()), ("decision", "accept")],
        )
        .await;
    assert_eq!(none.status, 400);
    assert!(
        none.body.contains("No account was selected"),
        "{}",
        none.body
    );
    // Without the CSRF token: refused.
    let forged = chief
        .post(
            "/user_management/pending",
            &[("users", "ann"), ("decision", "accept")],
        )
        .await;
    assert_eq!(forged.status, 403);

    let accepted = chief
        .post(
            "/user_management/pending",
            &[
                ("csrf_token", token.as_str()),
                ("users", "ann"),
                ("users", "ben"),
                ("decision", "accept"),
            ],
        )
        .await;
    assert_eq!(accepted.status, 302, "{}", accepted.body);
    let after = chief.get(&accepted.location).await;
    assert!(after.body.contains("Accepted 2 accounts"), "{}", after.body);
    let rejected = chief
        .post(
            "/user_management/pending",
            &[
                ("csrf_token", token.as_str()),
                ("users", "cat"),
                ("users", "ann"),
                ("decision", "reject"),
            ],
        )
        .await;
    let after = chief.get(&rejected.location).await;
    assert!(
        after
            .body
            .contains("Rejected (deleted) 1 account; 1 no longer pending"),
        "{}",
        after.body
    );
    // ann and ben log in; cat is gone; dan still waits.
    assert!(registered(&server, "ann") && registered(&server, "ben"));
    assert!(!registered(&server, "cat"));
    let pending = chief.get("/user_management?group=pending").await;
    assert!(pending.body.contains("value=\"dan\""));
    assert!(!pending.body.contains("value=\"ann\""));
    let (mut ann, _) = crate::ui_users::session_with(&server, Some("ann"), STRONG).await;
    assert_eq!(ann.get("/user").await.status, 200);
    // An ordinary user cannot decide.
    let token = ann.get("/tests").await.csrf();
    let refused = ann
        .post(
            "/user_management/pending",
            &[
                ("csrf_token", token.as_str()),
                ("users", "dan"),
                ("decision", "accept"),
            ],
        )
        .await;
    assert!(
        refused.status == 403 || refused.status == 400,
        "{}",
        refused.status
    );
    let pending = chief.get("/user_management?group=pending").await;
    assert!(pending.body.contains("value=\"dan\""), "dan still pending");
}

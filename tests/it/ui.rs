//! The web UI through real HTTP: pages, security headers, sessions, CSRF, login, logout and
//! signup. A small cookie-keeping client stands in for the browser (no redirects followed).

use std::time::Duration;

use crate::fleet::{PASSWORD, add_user, create_run, fixed_args, user_cli};
use crate::harness::{Opts, TestServer};
use crate::web::{Browser, Page};

impl Browser<'_> {
    /// Logs in through the form; returns the answer to the POST.
    async fn login(&mut self, user: &str, password: &str) -> Page {
        let token = self.get("/login").await.csrf();
        self.post(
            "/login",
            &[
                ("username", user),
                ("password", password),
                ("stay_logged_in", "1"),
                ("csrf_token", &token),
            ],
        )
        .await
    }

    /// Who the dashboard says is logged in.
    async fn whoami(&mut self) -> Option<String> {
        let page = self.get("/tests").await;
        assert_eq!(page.status, 200, "{}", page.body);
        let at = page.body.find("<span class=\"who\">")?;
        let rest = &page.body[at + "<span class=\"who\">".len()..];
        Some(rest[..rest.find('<')?].to_string())
    }
}

fn assert_security_headers(page: &Page) {
    let csp = page.header("content-security-policy");
    assert!(csp.contains("script-src 'self'"), "{csp}");
    assert!(!csp.contains("unsafe-inline"), "{csp}");
    assert!(csp.contains("frame-ancestors 'none'"), "{csp}");
    assert_eq!(page.header("x-content-type-options"), "nosniff");
    assert_eq!(page.header("x-frame-options"), "DENY");
    assert!(!page.header("referrer-policy").is_empty());
}

#[tokio::test]
async fn pages_carry_the_layout_security_headers_and_html_errors() {
    let server = TestServer::start().await;
    let mut b = Browser::new(&server);

    let root = b.get("/").await;
    assert_eq!(root.status, 302);
    assert_eq!(root.header("location"), "/tests");

    // A run waiting for approval shows in its table.
    add_user(&server, "frank", &[]);
    let run_id = create_run(&server, "frank", fixed_args(2000)).await;

    let page = b.get("/tests").await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("Pending approval - 1 tests"),
        "{}",
        page.body
    );
    assert!(page.body.contains(&format!("/tests/view/{run_id}")));
    assert!(page.header("content-type").starts_with("text/html"));
    assert_eq!(page.header("cache-control"), "no-store");
    assert!(page.body.contains("Stockfish Testing Queue"));
    assert!(page.body.contains("No active tests"));
    assert!(
        page.body.contains("href=\"/login\""),
        "anonymous navigation"
    );
    assert!(page.body.contains("<meta name=\"csrf-token\" content=\""));
    assert!(!page.body.contains("<script>"), "no inline script");
    assert_security_headers(&page);
    // The session cookie: signed id, HttpOnly, SameSite=Lax; no Secure without an https URL.
    let set = page.header("set-cookie");
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Lax"),
        "{set}"
    );
    assert!(!set.contains("Secure"), "{set}");

    // The stylesheet: a content hash in the URL, cached for a year.
    let at = page
        .body
        .find("/static/style.css?v=")
        .expect("versioned css");
    let href = &page.body[at..];
    let href = &href[..href.find('"').unwrap()];
    let css = b.get(href).await;
    assert_eq!(css.status, 200);
    assert!(css.header("cache-control").contains("max-age=31536000"));
    assert!(css.body.contains("shoal web UI"));

    // Compression when asked for.
    let gz = b
        .client
        .get(server.url("/tests"))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(gz.headers()["content-encoding"], "gzip");

    // Browser paths get the HTML 404 page; the API keeps JSON.
    let missing = b.get("/no/such/page").await;
    assert_eq!(missing.status, 404);
    assert!(missing.header("content-type").starts_with("text/html"));
    assert!(missing.body.contains("Page not found"));
    assert_security_headers(&missing);
    let (status, json) = server.get_json("/api/no_such_endpoint").await;
    assert_eq!(status, 404);
    assert_eq!(json["detail"], "Not Found");

    // Page bodies ran on the offload module's render lane (the caller label is the route).
    assert!(
        server
            .metric(
                "shoal_lane_runs_total",
                &[("lane", "render"), ("caller", "/tests")]
            )
            .await
            >= 1.0
    );
}

#[tokio::test]
async fn login_then_logout_makes_the_old_cookie_worthless() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    let mut b = Browser::new(&server);

    // Without the token: 403, nobody logged in, and no failed login counted.
    b.get("/login").await;
    let refused = b
        .post("/login", &[("username", "alice"), ("password", PASSWORD)])
        .await;
    assert_eq!(refused.status, 403);
    assert!(refused.header("content-type").starts_with("text/html"));
    assert_eq!(b.whoami().await, None);
    assert_eq!(server.metric("shoal_auth_failures_total", &[]).await, 0.0);

    // A wrong password: the form again, with Fishtest's message.
    let wrong = b.login("alice", "not the password").await;
    assert_eq!(wrong.status, 200);
    assert!(wrong.body.contains("Invalid username or password."));
    assert_eq!(b.whoami().await, None);

    // The right one: a redirect, a new remembered cookie.
    let anonymous_cookie = b.cookie.clone();
    let ok = b.login("alice", PASSWORD).await;
    assert_eq!(ok.status, 302, "{}", ok.body);
    assert_eq!(ok.header("location"), "/");
    assert!(ok.header("set-cookie").contains("Max-Age="));
    assert_ne!(b.cookie, anonymous_cookie, "a new session id at login");
    assert_eq!(b.whoami().await.as_deref(), Some("alice"));
    let logged_in_cookie = b.cookie.clone();

    // Logout without the token changes nothing.
    let refused = b.post("/logout", &[]).await;
    assert_eq!(refused.status, 403);
    assert_eq!(b.whoami().await.as_deref(), Some("alice"));

    // The header form of the token works too.
    let token = b.get("/tests").await.csrf();
    let req = b
        .client
        .post(server.url("/logout"))
        .header("x-csrf-token", token)
        .header("cookie", logged_in_cookie.clone().unwrap());
    let out = b.send(req).await;
    assert_eq!(out.status, 302);
    assert_eq!(out.header("location"), "/tests");
    assert_eq!(b.whoami().await, None);

    // The old cookie, replayed, is anonymous.
    b.cookie = logged_in_cookie;
    assert_eq!(b.whoami().await, None);

    // A forged cookie is ignored.
    b.cookie = Some(format!("shoal_session={}", "0".repeat(120)));
    assert_eq!(b.whoami().await, None);

    // The next parameter: only same-site paths.
    let mut b = Browser::new(&server);
    let token = b.get("/login?next=//evil.example").await.csrf();
    let out = b
        .post(
            "/login?next=//evil.example",
            &[
                ("username", "alice"),
                ("password", PASSWORD),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(out.header("location"), "/");
}

#[tokio::test]
async fn signup_makes_a_pending_user_who_logs_in_once_approved() {
    let server = TestServer::start().await;
    let mut b = Browser::new(&server);
    let strong = "violet otter juggles nine lamps";
    // The page's tokens (CSRF, and the signup form's signed age) with the fields.
    async fn form_page(b: &mut Browser<'_>) -> (&'static str, &'static str) {
        let page = b.get("/signup").await;
        let leak = |s: String| -> &'static str { Box::leak(s.into_boxed_str()) };
        (
            leak(page.csrf()),
            leak(page.input("form_token").expect("form_token")),
        )
    }
    let fields =
        |(token, form): (&'static str, &'static str)| -> Vec<(&'static str, &'static str)> {
            vec![
                ("username", "bob"),
                ("password", "violet otter juggles nine lamps"),
                ("password2", "violet otter juggles nine lamps"),
                ("email", "bob@example.org"),
                ("tests_repo", "https://github.com/bob/Stockfish/"),
                ("csrf_token", token),
                ("form_token", form),
                ("website", ""),
            ]
        };

    // Without a valid token: 403, no user.
    let (_, form) = form_page(&mut b).await;
    let refused = b.post("/signup", &fields(("forged", form))).await;
    assert_eq!(refused.status, 403);
    assert!(!user_cli(&server, &["list"]).contains("bob"));

    // Validation: every error at once, nothing created.
    let (token, form) = form_page(&mut b).await;
    let bad = b
        .post(
            "/signup",
            &[
                ("username", "b-o-b"),
                ("password", "password"),
                ("password2", "other"),
                ("email", "not-an-email"),
                ("tests_repo", "https://gitlab.com/x/y"),
                ("csrf_token", token),
                ("form_token", form),
            ],
        )
        .await;
    assert_eq!(bad.status, 200);
    for message in [
        "Error! Weak password",
        "Error! Matching verify password required",
        "Error! Invalid email",
        "Error! Alphanumeric username required",
        "Error! Invalid tests repo",
    ] {
        assert!(bad.body.contains(message), "{message} in {}", bad.body);
    }
    assert!(!user_cli(&server, &["list"]).contains("bob"));

    // A good form: a pending account, then the login page with the message.
    let tokens = form_page(&mut b).await;
    let ok = b.post("/signup", &fields(tokens)).await;
    assert_eq!(ok.status, 302, "{}", ok.body);
    assert_eq!(ok.header("location"), "/login?created=1");
    assert!(
        b.get("/login?created=1")
            .await
            .body
            .contains("Account created!")
    );
    let list = user_cli(&server, &["list"]);
    assert!(list.contains("bob"), "{list}");

    // The same name again is refused.
    let tokens = form_page(&mut b).await;
    let again = b.post("/signup", &fields(tokens)).await;
    assert!(
        again
            .body
            .contains("Username or email is already registered")
    );

    // Pending: refused with the spec's message.
    let pending = b.login("bob", strong).await;
    assert_eq!(pending.status, 200);
    assert!(pending.body.contains("Your account is pending approval."));
    assert_eq!(b.whoami().await, None);

    // Approved through the CLI: the server sees it within 2 s.
    user_cli(&server, &["set", "bob", "--approve"]);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let ok = b.login("bob", strong).await;
    assert_eq!(ok.status, 302, "{}", ok.body);
    assert_eq!(b.whoami().await.as_deref(), Some("bob"));
}

#[tokio::test]
async fn a_block_or_a_password_change_ends_the_sessions() {
    let server = TestServer::start().await;
    add_user(&server, "carol", &[]);
    add_user(&server, "dave", &[]);
    let mut carol = Browser::new(&server);
    let mut dave = Browser::new(&server);
    assert_eq!(carol.login("carol", PASSWORD).await.status, 302);
    assert_eq!(dave.login("dave", PASSWORD).await.status, 302);
    assert_eq!(carol.whoami().await.as_deref(), Some("carol"));

    user_cli(&server, &["set", "carol", "--block"]);
    user_cli(
        &server,
        &["set", "dave", "--password", "a brand new passphrase"],
    );
    tokio::time::sleep(Duration::from_millis(2500)).await;

    // Blocked: logged out and sent to /tests on the next request, and cannot log in.
    let next = carol.get("/tests").await;
    assert_eq!(next.status, 302);
    assert_eq!(next.header("location"), "/tests");
    assert_eq!(carol.whoami().await, None);
    let blocked = carol.login("carol", PASSWORD).await;
    assert!(blocked.body.contains("Your account is blocked."));

    // New password: the old session is over; the new password works.
    dave.get("/tests").await;
    assert_eq!(dave.whoami().await, None);
    assert_eq!(
        dave.login("dave", "a brand new passphrase").await.status,
        302
    );
    assert_eq!(dave.whoami().await.as_deref(), Some("dave"));
}

#[tokio::test]
async fn sessions_survive_a_restart_and_failed_logins_are_throttled() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let opts = Opts::new()
        .data_dir(&data)
        .set("auth_throttle_per_user_ip", 2)
        .set("public_url", "\"https://tests.example.org\"");
    let mut server = TestServer::start_with(opts.clone()).await;
    add_user(&server, "erin", &[]);
    let mut b = Browser::new(&server);
    let ok = b.login("erin", PASSWORD).await;
    assert_eq!(ok.status, 302);
    assert!(
        ok.header("set-cookie").contains("Secure"),
        "https public_url"
    );
    let cookie = b.cookie.clone();
    // A second session, logged out before the restart.
    let mut gone = Browser::new(&server);
    assert_eq!(gone.login("erin", PASSWORD).await.status, 302);
    let gone_cookie = gone.cookie.clone();
    let token = gone.get("/tests").await.csrf();
    assert_eq!(
        gone.post("/logout", &[("csrf_token", &token)]).await.status,
        302
    );

    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
    let server = TestServer::start_with(opts).await;
    let mut b = Browser::new(&server);
    b.cookie = cookie;
    assert_eq!(
        b.whoami().await.as_deref(),
        Some("erin"),
        "kept across restart"
    );
    let mut gone = Browser::new(&server);
    gone.cookie = gone_cookie;
    assert_eq!(
        gone.whoami().await,
        None,
        "a logged-out session stays ended"
    );

    // Failed logins go through the login throttle: 429 with Retry-After.
    let mut other = Browser::new(&server);
    let mut last = None;
    for _ in 0..4 {
        last = Some(other.login("erin", "wrong guess").await);
    }
    let last = last.unwrap();
    assert_eq!(last.status, 429, "{}", last.body);
    assert!(last.header("retry-after").parse::<u64>().unwrap() >= 1);
    assert!(last.header("content-type").starts_with("text/html"));
}

//! Issue 34, tried as an attacker would against a real server on loopback: one test per
//! finding, each failing on the code before the fix. Mail goes to the small SMTP receiver of
//! `reset.rs`; the attacker's tools are headers (`Host`), names, forms and a second session.

use std::time::Duration;

use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::fleet::{PASSWORD, add_user, create_run, fixed_args, user_cli};
use crate::harness::{Opts, TestServer, run_bin, sqlite_only};
use crate::reset::{NEW_PASSWORD, path_of, smtp_receiver};
use crate::tokens::code_of;
use crate::ui_users::{session, stored_actions};
use crate::web::{Browser, Page};

const PUBLIC: &str = "https://tests.example.org";
const EVIL: &str = "evil.example";

/// A server that mails reset links to a receiver on loopback, reached at [`PUBLIC`].
async fn mail_server(extra: Opts) -> (TestServer, mpsc::UnboundedReceiver<String>) {
    let (port, mails) = smtp_receiver().await;
    let mut opts = extra
        .set("smtp_url", format!("smtp://127.0.0.1:{port}"))
        .set("smtp_from", "shoal <noreply@example.org>");
    if !opts.env.iter().any(|(k, _)| k == "SHOAL_PUBLIC_URL") {
        opts = opts.set("public_url", PUBLIC);
    }
    (TestServer::start_with(opts).await, mails)
}

/// Asks `/forgot` for `who`, with the request's `Host` header set to `host`.
async fn forgot(b: &mut Browser<'_>, who: &str, host: Option<&str>) -> Page {
    let csrf = b.get("/forgot").await.csrf();
    let mut req = b
        .client
        .post(b.server.url("/forgot"))
        .form(&[("username", who), ("csrf_token", csrf.as_str())]);
    if let Some(host) = host {
        req = req.header("host", host);
    }
    b.send(req).await
}

/// The next mail, within `secs`.
async fn next_mail(mails: &mut mpsc::UnboundedReceiver<String>, secs: u64) -> Option<String> {
    tokio::time::timeout(Duration::from_secs(secs), mails.recv())
        .await
        .ok()
        .flatten()
}

/// A mail's text with quoted-printable soft breaks undone.
fn plain(mail: &str) -> String {
    mail.replace("=\n", "").replace("=3D", "=")
}

/// A POST of `form` to `path` with the request's `Host` header set to `host`.
async fn post_with_host(
    b: &mut Browser<'_>,
    path: &str,
    form: &[(&str, &str)],
    host: &str,
) -> Page {
    let req = b
        .client
        .post(b.server.url(path))
        .form(form)
        .header("host", host);
    b.send(req).await
}

#[tokio::test]
async fn finding_1_links_that_leave_the_server_never_come_from_the_host_header() {
    // Mail without public_url is refused at start, naming both settings.
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let data_s = data.to_string_lossy().into_owned();
    let (status, err) = run_bin(
        &["check-config"],
        &[
            ("SHOAL_DATA_DIR", data_s.as_str()),
            ("SHOAL_SMTP_URL", "smtp://127.0.0.1:2525"),
        ],
        dir.path(),
    );
    assert!(
        !status.success(),
        "smtp_url without public_url accepted: {err}"
    );
    assert!(
        err.contains("public_url") && err.contains("smtp_url"),
        "{err}"
    );

    // With it, a victim's reset asked for under a poisoned Host header links to public_url.
    let (server, mut mails) = mail_server(Opts::new()).await;
    add_user(&server, "victim", &["--email", "victim@example.org"]);
    let mut attacker = Browser::new(&server);
    let answer = forgot(&mut attacker, "victim", Some(EVIL)).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let mail = plain(&next_mail(&mut mails, 30).await.expect("the victim's mail"));
    assert!(!mail.contains(EVIL), "{mail}");
    assert!(mail.contains(&format!("{PUBLIC}/reset/shoal_")), "{mail}");

    // Without public_url (no mail then), an approver's link and a feed URL are paths, and
    // the page says why; the Host header is in neither.
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let (mut boss, csrf) = session(&server, Some("boss")).await;
    let page = post_with_host(
        &mut boss,
        "/user/alice/reset_link",
        &[("csrf_token", csrf.as_str())],
        EVIL,
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let link = code_of(&page, "reset-link");
    assert!(link.starts_with("/reset/shoal_"), "{link}");
    assert!(!page.body.contains(EVIL), "{}", page.body);
    assert!(page.body.contains("public_url"), "{}", page.body);
    let (mut alice, csrf) = session(&server, Some("alice")).await;
    let page = post_with_host(
        &mut alice,
        "/notifications/feed",
        &[("action", "new"), ("csrf_token", csrf.as_str())],
        EVIL,
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(!page.body.contains(EVIL), "{}", page.body);
    assert!(page.body.contains("value=\"/feeds/"), "{}", page.body);
    assert!(page.body.contains("public_url"), "{}", page.body);
}

#[tokio::test]
async fn finding_2_forgot_writes_nothing_public_and_answers_alike() {
    let (server, mut mails) = mail_server(Opts::new()).await;
    add_user(&server, "alice", &["--email", "alice.private@example.org"]);
    let mut anon = Browser::new(&server);
    let by_address = forgot(&mut anon, "alice.private@example.org", None).await;
    let nobody = forgot(&mut anon, "nobody.private@example.org", None).await;
    assert_eq!((by_address.status, nobody.status), (200, 200));
    assert_eq!(by_address.body, nobody.body);
    // The mail went out: the request was handled.
    let mail = next_mail(&mut mails, 30).await.expect("alice's mail");
    assert!(mail.contains("alice.private@example.org"), "{mail}");

    // Neither the action log nor the public API tells that alice asked, or that the private
    // address is hers.
    let stored = serde_json::to_string(&stored_actions(&server, "password_reset")).expect("json");
    assert!(!stored.contains("alice"), "{stored}");
    let (status, v) = server
        .post_json("/api/actions", &json!({"action": "password_reset"}))
        .await;
    assert_eq!(status, 200, "{v}");
    assert!(!v.to_string().contains("alice"), "{v}");
    let actions = anon.get("/actions?action=password_reset").await;
    assert_eq!(actions.status, 200);
    assert!(!actions.body.contains("alice"), "{}", actions.body);
    // Approvers, and only they, see that a link was mailed.
    add_user(&server, "boss", &["--approver"]);
    let (mut boss, _) = session(&server, Some("boss")).await;
    let page = boss.get("/user/alice").await;
    assert!(page.body.contains("mailed on request"), "{}", page.body);
    let (mut alice, _) = session(&server, Some("alice")).await;
    let own = alice.get("/user/alice").await;
    assert!(!own.body.contains("mailed on request"), "{}", own.body);
}

#[tokio::test]
async fn finding_2_forgot_answers_before_any_store_work() {
    if sqlite_only("a write lock held on the SQLite file") {
        return;
    }
    let (server, mut mails) = mail_server(Opts::new()).await;
    add_user(&server, "alice", &["--email", "alice@example.org"]);
    let mut anon = Browser::new(&server);
    let csrf = anon.get("/forgot").await.csrf();
    // Another connection holds the database's write lock: the store can read, not write.
    let lock = rusqlite::Connection::open(server.data_dir.join("shoal.db")).expect("open");
    lock.execute_batch("BEGIN EXCLUSIVE").expect("lock");
    let mut answers = Vec::new();
    for who in ["alice", "nobody"] {
        let started = std::time::Instant::now();
        let page = anon
            .post(
                "/forgot",
                &[("username", who), ("csrf_token", csrf.as_str())],
            )
            .await;
        answers.push((page.status, page.body, started.elapsed()));
    }
    lock.execute_batch("COMMIT").expect("unlock");
    let (alice, nobody) = (&answers[0], &answers[1]);
    assert_eq!((alice.0, nobody.0), (200, 200), "{answers:?}");
    assert_eq!(alice.1, nobody.1);
    // Neither waited for the store: an existing account's answer is as quick as nobody's.
    for (_, _, took) in &answers {
        assert!(
            *took < Duration::from_millis(2000),
            "answered after {took:?}"
        );
    }
    // The link was made and mailed once the store could write.
    let mail = next_mail(&mut mails, 30).await.expect("alice's mail");
    assert!(mail.contains("alice@example.org"), "{mail}");
}

/// The signup form's tokens in `b`'s session (as if from `ip`, through the trusted proxy).
async fn signup_tokens(b: &mut Browser<'_>, ip: &str) -> (String, String) {
    let page = b.as_from(ip, "/signup", None).await;
    assert_eq!(page.status, 200, "{}", page.body);
    (page.csrf(), page.input("form_token").expect("form_token"))
}

async fn signup(
    b: &mut Browser<'_>,
    ip: &str,
    (name, email, password): (&str, &str, &str),
    (csrf, form): &(String, String),
) -> Page {
    let fields = [
        ("username", name),
        ("password", password),
        ("password2", password),
        ("email", email),
        ("csrf_token", csrf.as_str()),
        ("form_token", form.as_str()),
        ("website", ""),
    ];
    b.as_from(ip, "/signup", Some(&fields)).await
}

fn registered(server: &TestServer, name: &str) -> bool {
    user_cli(server, &["list"])
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

const STRONG: &str = "violet otter juggles nine lamps";

#[tokio::test]
async fn finding_3_signup_counts_only_real_attempts_and_a_form_is_used_once_by_its_session() {
    let server = TestServer::start_with(
        Opts::new()
            .set("trusted_proxies", "[\"127.0.0.1\"]")
            .set("signup_per_ip_per_hour", 2)
            .set("signup_per_hour", 2),
    )
    .await;
    add_user(&server, "taken", &["--email", "taken@example.org"]);

    // Forms refused by the CSRF check or the field checks count nowhere.
    let mut bot = Browser::new(&server);
    let ip = "203.0.113.5";
    for i in 0..4 {
        let tokens = signup_tokens(&mut bot, ip).await;
        let forged = (String::from("forged"), tokens.1.clone());
        let page = signup(&mut bot, ip, ("weak", "w@example.org", "x"), &forged).await;
        assert_eq!(page.status, 403, "{i}: {}", page.body);
        let tokens = signup_tokens(&mut bot, ip).await;
        let page = signup(&mut bot, ip, ("weak", "w@example.org", "password"), &tokens).await;
        assert_eq!(page.status, 200, "{i}: {}", page.body);
        assert!(page.body.contains("Weak password"), "{}", page.body);
    }
    // Addresses that create nothing (a taken name) do not fill everybody's window.
    for (n, ip) in ["198.51.100.1", "198.51.100.2", "198.51.100.3"]
        .iter()
        .enumerate()
    {
        let mut b = Browser::new(&server);
        let tokens = signup_tokens(&mut b, ip).await;
        let page = signup(&mut b, ip, ("taken", "t@example.org", STRONG), &tokens).await;
        assert_eq!(page.status, 200, "{n}: {}", page.body);
        assert!(page.body.contains("already registered"), "{}", page.body);
    }
    let tokens = signup_tokens(&mut bot, ip).await;
    let page = signup(
        &mut bot,
        ip,
        ("person", "person@example.org", STRONG),
        &tokens,
    )
    .await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert!(registered(&server, "person"));

    // A form token is bound to the session that fetched it: harvested here, sent there.
    let mut harvester = Browser::new(&server);
    let harvested = signup_tokens(&mut harvester, "192.0.2.1").await;
    let mut elsewhere = Browser::new(&server);
    let own = signup_tokens(&mut elsewhere, "192.0.2.2").await;
    let page = signup(
        &mut elsewhere,
        "192.0.2.2",
        ("second", "second@example.org", STRONG),
        &(own.0.clone(), harvested.1.clone()),
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("not shown by this server"),
        "{}",
        page.body
    );
    assert!(!registered(&server, "second"));

    // And used once: the same form again (in its own session) is refused.
    let tokens = signup_tokens(&mut harvester, "192.0.2.1").await;
    let weak = signup(
        &mut harvester,
        "192.0.2.1",
        ("w", "w@example.org", "x"),
        &tokens,
    )
    .await;
    assert!(weak.body.contains("Weak password"), "{}", weak.body);
    let again = signup(
        &mut harvester,
        "192.0.2.1",
        ("third", "third@example.org", STRONG),
        &tokens,
    )
    .await;
    assert_eq!(again.status, 200, "{}", again.body);
    assert!(again.body.contains("sent already"), "{}", again.body);
    assert!(!registered(&server, "third"));
}

/// `b`'s new API token (`password`: the current password sent with the form, if any).
async fn new_token(b: &mut Browser<'_>, password: Option<&str>) -> Page {
    let csrf = b.get("/user/tokens").await.csrf();
    let mut form = vec![("name", "script"), ("csrf_token", csrf.as_str())];
    if let Some(p) = password {
        form.push(("password", p));
    }
    b.post("/user/tokens", &form).await
}

async fn whoami(server: &TestServer, token: &str) -> u16 {
    server
        .client
        .get(server.url("/api/whoami"))
        .bearer_auth(token)
        .send()
        .await
        .expect("whoami")
        .status()
        .as_u16()
}

/// `b`'s new feed URL's path.
async fn new_feed(b: &mut Browser<'_>) -> String {
    let csrf = b.get("/user").await.csrf();
    let page = b
        .post(
            "/notifications/feed",
            &[("action", "new"), ("csrf_token", csrf.as_str())],
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let at = page.body.find("/feeds/").expect("a feed URL");
    let end = page.body[at..].find(".atom").expect(".atom") + at + 5;
    page.body[at..end].to_string()
}

async fn status_of(server: &TestServer, path: &str) -> u16 {
    server
        .client
        .get(server.url(path))
        .send()
        .await
        .expect("get")
        .status()
        .as_u16()
}

#[tokio::test]
async fn finding_4_a_stolen_session_gets_no_lasting_credential() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &["--email", "alice@example.org"]);
    add_user(&server, "boss", &["--approver"]);
    let (mut b, _) = session(&server, Some("alice")).await;

    // Making a token asks for the current password.
    for password in [None, Some("not her password")] {
        let page = new_token(&mut b, password).await;
        assert!(!page.body.contains("id=\"new-token\""), "{}", page.body);
        assert!(page.body.contains("Invalid password"), "{}", page.body);
    }
    let page = new_token(&mut b, Some(PASSWORD)).await;
    let token = code_of(&page, "new-token");
    assert_eq!(whoami(&server, &token).await, 200);

    // The profile lists the tokens and says what a new password does; "revoke all" works.
    let profile = b.get("/user").await;
    assert!(profile.body.contains("script"), "{}", profile.body);
    assert!(
        profile.body.contains("revokes every API token"),
        "{}",
        profile.body
    );
    let csrf = profile.csrf();
    // First a confirmation (nothing revoked yet), then the revocation.
    let ask = b
        .post("/user/tokens/revoke_all", &[("csrf_token", csrf.as_str())])
        .await;
    assert_eq!(ask.status, 200, "{}", ask.body);
    assert!(ask.body.contains("Yes, revoke all tokens"), "{}", ask.body);
    assert_eq!(whoami(&server, &token).await, 200);
    let done = b
        .post(
            "/user/tokens/revoke_all",
            &[("csrf_token", csrf.as_str()), ("confirm", "yes")],
        )
        .await;
    assert_eq!(done.status, 302, "{}", done.body);
    assert_eq!(whoami(&server, &token).await, 401);

    // A password change revokes the tokens and the feed URL.
    let token = code_of(&new_token(&mut b, Some(PASSWORD)).await, "new-token");
    let feed = new_feed(&mut b).await;
    assert_eq!(status_of(&server, &feed).await, 200);
    let csrf = b.get("/user").await.csrf();
    let changed = b
        .post(
            "/user",
            &[
                ("user", "alice"),
                ("email", "alice@example.org"),
                ("old_password", PASSWORD),
                ("password", NEW_PASSWORD),
                ("password2", NEW_PASSWORD),
                ("tests_repo", ""),
                ("csrf_token", csrf.as_str()),
            ],
        )
        .await;
    assert_eq!(changed.status, 302, "{}", changed.body);
    assert_eq!(whoami(&server, &token).await, 401);
    assert_eq!(status_of(&server, &feed).await, 404);

    // So does a reset through a link.
    let token = code_of(&new_token(&mut b, Some(NEW_PASSWORD)).await, "new-token");
    let feed = new_feed(&mut b).await;
    let (mut boss, csrf) = session(&server, Some("boss")).await;
    let page = boss
        .post("/user/alice/reset_link", &[("csrf_token", csrf.as_str())])
        .await;
    let path = path_of(&code_of(&page, "reset-link"));
    let mut anon = Browser::new(&server);
    let form = anon.get(&path).await;
    assert!(
        form.body.contains("revokes its API tokens"),
        "{}",
        form.body
    );
    let csrf = form.csrf();
    let done = anon
        .post(
            &path,
            &[
                ("password", "crimson heron sorts eleven maps"),
                ("password2", "crimson heron sorts eleven maps"),
                ("csrf_token", csrf.as_str()),
            ],
        )
        .await;
    assert!(done.body.contains("Password updated"), "{}", done.body);
    assert_eq!(whoami(&server, &token).await, 401);
    assert_eq!(status_of(&server, &feed).await, 404);
}

fn kvstore_docs(server: &TestServer) -> Vec<Value> {
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    // Fishtest's key-value collection and shoal's own, where tokens, links and follows live.
    [
        shoal::store::Collection::Kvstore,
        shoal::store::Collection::ShoalKv,
    ]
    .into_iter()
    .flat_map(|coll| store.find(coll, &shoal::store::Query::new()).expect("find"))
    .map(Value::Object)
    .collect()
}

#[tokio::test]
async fn finding_5_a_deleted_account_leaves_nothing_for_its_name() {
    let server = TestServer::start().await;
    add_user(&server, "bob", &["--email", "bob@example.org"]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "boss", fixed_args(1000)).await;
    let (mut b, csrf) = session(&server, Some("bob")).await;
    let token = code_of(&new_token(&mut b, Some(PASSWORD)).await, "new-token");
    let page = b
        .post(
            "/tests/follow",
            &[("run", run.as_str()), ("csrf_token", csrf.as_str())],
        )
        .await;
    assert_eq!(page.status, 302, "{}", page.body);
    let feed = new_feed(&mut b).await;
    let (mut boss, boss_csrf) = session(&server, Some("boss")).await;
    let page = boss
        .post(
            "/user/bob/reset_link",
            &[("csrf_token", boss_csrf.as_str())],
        )
        .await;
    let reset = path_of(&code_of(&page, "reset-link"));

    // Rejected (deleted) by an approver.
    user_cli(&server, &["set", "bob", "--pending"]);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let csrf = boss.get("/user_management").await.csrf();
    let page = boss
        .post(
            "/user_management/pending",
            &[
                ("users", "bob"),
                ("decision", "reject"),
                ("csrf_token", csrf.as_str()),
            ],
        )
        .await;
    assert!(page.status == 302 || page.status == 200, "{}", page.body);
    assert!(!registered(&server, "bob"));
    let left: Vec<Value> = kvstore_docs(&server)
        .into_iter()
        .filter(|d| d["user"] == "bob")
        .collect();
    assert!(left.is_empty(), "left behind: {left:?}");

    // A new account under the name inherits nothing.
    add_user(&server, "bob", &["--email", "new.bob@example.org"]);
    assert_eq!(whoami(&server, &token).await, 401);
    assert_eq!(status_of(&server, &feed).await, 404);
    assert_eq!(status_of(&server, &reset).await, 404);

    // A token is bound to its account, not only its name: an account deleted behind the
    // server's back (another program on the store) does not pass its tokens on either.
    let (mut b, _) = session(&server, Some("bob")).await;
    let token = code_of(&new_token(&mut b, Some(PASSWORD)).await, "new-token");
    assert_eq!(whoami(&server, &token).await, 200);
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    let doc = store
        .find(
            shoal::store::Collection::Users,
            &shoal::store::Query::new()
                .with(shoal::store::Cond::Eq("username".into(), json!("bob"))),
        )
        .expect("find")
        .pop()
        .expect("bob");
    let id = doc["_id"].as_str().expect("id").to_string();
    store
        .delete(shoal::store::Collection::Users, &id)
        .expect("delete");
    drop(store);
    add_user(&server, "bob", &["--email", "third.bob@example.org"]);
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(whoami(&server, &token).await, 401);
}

#[tokio::test]
async fn finding_6_next_and_back_refuse_a_tab_and_every_other_way_off_the_site() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    for target in [
        "/\t/evil.example",
        "/\n/evil.example",
        "/\t\t/evil.example/x",
        "//evil.example",
        "/\\evil.example",
        "https://evil.example",
    ] {
        // Login.
        let mut b = Browser::new(&server);
        let csrf = b.get("/login").await.csrf();
        let req = b
            .client
            .post(b.server.url("/login"))
            .query(&[("next", target)])
            .form(&[
                ("username", "alice"),
                ("password", PASSWORD),
                ("csrf_token", csrf.as_str()),
            ]);
        let page = b.send(req).await;
        assert_eq!(page.status, 302, "{}", page.body);
        assert_eq!(page.location, "/", "next={target:?}");
        // Follow.
        let csrf = b.get("/tests").await.csrf();
        let page = b
            .post(
                "/tests/follow",
                &[
                    ("run", run.as_str()),
                    ("back", target),
                    ("csrf_token", csrf.as_str()),
                ],
            )
            .await;
        assert_eq!(page.status, 302, "{}", page.body);
        assert_eq!(
            page.location,
            format!("/tests/view/{run}"),
            "back={target:?}"
        );
    }
    // A same-site path still works.
    let (mut b, csrf) = session(&server, Some("alice")).await;
    let page = b
        .post(
            "/tests/unfollow",
            &[
                ("run", run.as_str()),
                ("back", "/tests?x=1"),
                ("csrf_token", csrf.as_str()),
            ],
        )
        .await;
    assert_eq!(page.location, "/tests?x=1");
}

/// Whether every character of `xml` is one XML 1.0 allows.
fn xml_1_0(xml: &str) -> bool {
    xml.chars().all(|c| {
        matches!(c, '\t' | '\n' | '\r' | '\u{20}'..='\u{D7FF}' | '\u{E000}'..='\u{FFFD}' | '\u{10000}'..)
    })
}

#[tokio::test]
async fn finding_7_control_characters_are_refused_at_creation_and_dropped_from_the_feed() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    for (field, value) in [
        ("new_tag", "patch\u{1}"),
        ("new_tag", "tab\there"),
        ("base_tag", "master\u{1b}[0m"),
        ("info", "bell \u{7} info"),
    ] {
        let mut args = fixed_args(1000);
        args[field] = json!(value);
        let (status, v) = server
            .post_json(
                "/api/create_run",
                &json!({"username": "alice", "password": PASSWORD, "args": args}),
            )
            .await;
        assert_eq!(status, 400, "{field}={value:?}: {v}");
        assert!(
            v["error"].as_str().is_some_and(|e| e.contains("control")),
            "{v}"
        );
    }
    // Line breaks and tabs in the info are text.
    let mut args = fixed_args(1000);
    args["info"] = json!("line one\nline two\twith a tab");
    let run = create_run(&server, "alice", args).await;
    crate::fleet::approve(&server, "boss", &run).await;

    // A worker's stop message with a control character is refused; the run keeps going.
    let w = crate::fleet::Worker::new("alice", 1, 7);
    let reply = w.request_task(&server).await;
    let task_id = reply["task_id"].as_u64().expect("task_id");
    let (status, v) = w
        .call(
            &server,
            "/api/stop_run",
            json!({"run_id": run, "task_id": task_id, "message": "crash\u{0}\u{1b}"}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    let (_, got) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(got["finished"], false, "{got}");

    // Nor can the owner put one into the info afterwards.
    let (mut b, csrf) = session(&server, Some("alice")).await;
    let page = b
        .post(
            "/tests/modify",
            &[
                ("run", run.as_str()),
                ("num-games", "1000"),
                ("priority", "0"),
                ("throughput", "100"),
                ("info", "new \u{1b}[2J info"),
                ("csrf_token", csrf.as_str()),
            ],
        )
        .await;
    assert!(page.body.contains("control characters"), "{}", page.body);
    let (_, got) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(
        got["args"]["info"], "line one\nline two\twith a tab",
        "{got}"
    );

    // A follower's feed stays XML 1.0 even when an older run's name or message holds one.
    b.post(
        "/tests/follow",
        &[("run", run.as_str()), ("csrf_token", csrf.as_str())],
    )
    .await;
    let feed = new_feed(&mut b).await;
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    let mut action = shoal::store::Doc::new();
    for (k, v) in [
        ("_id", json!("0123456789abcdef01234567")),
        ("action", json!("stop_run")),
        ("username", json!("boss")),
        ("run_id", json!(run)),
        ("run", json!("old\u{1}name-0000000")),
        (
            "message",
            json!("stopped \u{0}\u{8}\u{1b}[31m\u{fffe} here"),
        ),
        ("time", json!(chrono::Utc::now().timestamp() as f64 + 1.0)),
    ] {
        action.insert(k.into(), v);
    }
    store
        .insert(shoal::store::Collection::Actions, action)
        .expect("insert");
    drop(store);
    let deadline = std::time::Instant::now() + Duration::from_secs(40);
    loop {
        let xml = server
            .client
            .get(server.url(&feed))
            .send()
            .await
            .expect("feed")
            .text()
            .await
            .expect("xml");
        assert!(xml_1_0(&xml), "{xml:?}");
        if xml.contains("stopped") {
            assert!(xml.contains("stopped [31m here"), "{xml}");
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no notice: {xml}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[tokio::test]
async fn finding_8_forgot_never_cancels_an_approvers_link() {
    let (server, mut mails) = mail_server(Opts::new()).await;
    add_user(&server, "alice", &["--email", "alice@example.org"]);
    add_user(&server, "boss", &["--approver"]);
    let (mut boss, csrf) = session(&server, Some("boss")).await;
    let page = boss
        .post("/user/alice/reset_link", &[("csrf_token", csrf.as_str())])
        .await;
    let link = code_of(&page, "reset-link");
    assert!(link.starts_with(PUBLIC), "{link}");
    let path = path_of(&link);
    let mut anon = Browser::new(&server);
    assert_eq!(anon.get(&path).await.status, 200);

    // An anonymous /forgot for alice: mailed a link of her own...
    forgot(&mut anon, "alice", None).await;
    let mail = plain(&next_mail(&mut mails, 30).await.expect("a mail"));
    let mailed = path_of(&mail);
    assert_ne!(mailed, path);
    // ... and the approver's link still works; using it ends the mailed one too.
    let form = anon.get(&path).await;
    assert_eq!(form.status, 200, "{}", form.body);
    let csrf = form.csrf();
    let done = anon
        .post(
            &path,
            &[
                ("password", NEW_PASSWORD),
                ("password2", NEW_PASSWORD),
                ("csrf_token", csrf.as_str()),
            ],
        )
        .await;
    assert!(done.body.contains("Password updated"), "{}", done.body);
    assert_eq!(anon.get(&mailed).await.status, 404);
}

#[tokio::test]
async fn finding_9_debug_logs_name_routes_never_secrets() {
    let server = TestServer::start_with(Opts::new().set("log", "debug")).await;
    add_user(&server, "alice", &[]);
    let (mut b, _) = session(&server, Some("alice")).await;
    let feed = new_feed(&mut b).await;
    let token = feed
        .trim_start_matches("/feeds/")
        .trim_end_matches(".atom")
        .to_string();
    assert_eq!(status_of(&server, &feed).await, 200);
    let secret = format!("shoal_{}", "ab".repeat(32));
    assert_eq!(status_of(&server, &format!("/reset/{secret}")).await, 404);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let logs = server.logs();
    assert!(!logs.contains(&token), "the feed token is in the log");
    assert!(!logs.contains(&secret), "the reset secret is in the log");
    assert!(logs.contains("/feeds/{file}"), "no route in the debug log");
    assert!(
        logs.contains("/reset/{secret}"),
        "no route in the debug log"
    );
}

#[tokio::test]
async fn finding_10_forgot_by_name_never_mails_a_shared_address() {
    let (server, mut mails) = mail_server(Opts::new()).await;
    add_user(&server, "one", &["--email", "shared@example.org"]);
    add_user(&server, "two", &["--email", "shared@example.org"]);
    add_user(&server, "solo", &["--email", "solo@example.org"]);
    let mut anon = Browser::new(&server);
    forgot(&mut anon, "one", None).await;
    forgot(&mut anon, "shared@example.org", None).await;
    forgot(&mut anon, "solo", None).await;
    // The first mail to arrive is solo's (the requests are handled in order, each after its
    // answer); nothing goes to the shared address.
    let mail = next_mail(&mut mails, 30).await.expect("solo's mail");
    assert!(mail.contains("solo@example.org"), "{mail}");
    assert!(
        next_mail(&mut mails, 3).await.is_none(),
        "another mail was sent"
    );
}

#[tokio::test]
async fn finding_11_the_store_is_readable_by_its_owner_only() {
    if sqlite_only("the SQLite file's mode") {
        return;
    }
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    add_user(&server, "alice", &[]);
    let db = data.join("shoal.db");
    for suffix in ["", "-wal", "-shm"] {
        let file = data.join(format!("shoal.db{suffix}"));
        if let Ok(meta) = std::fs::metadata(&file) {
            assert_eq!(
                meta.permissions().mode() & 0o777,
                0o600,
                "{}",
                file.display()
            );
        } else {
            assert!(!suffix.is_empty(), "no database file");
        }
    }
    // A backup too.
    let backup = dir.path().join("copy.db");
    let out = server
        .cli()
        .args(["backup", &backup.to_string_lossy()])
        .output()
        .expect("backup");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mode = std::fs::metadata(&backup)
        .expect("backup")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);

    // An existing looser file is warned about at start.
    server.signal(libc::SIGTERM);
    server.wait_exit(30);
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let logs = server.logs();
    assert!(
        logs.contains("readable by other users") && logs.contains("shoal.db"),
        "{logs}"
    );
}

// Issue 34's review, after the fixes: one test per finding fixed again.

/// Reset-link documents in the store (their user).
fn reset_docs(server: &TestServer) -> Vec<Value> {
    kvstore_docs(server)
        .into_iter()
        .filter(|d| d["kind"] == "password_reset")
        .collect()
}

#[tokio::test]
async fn review_1_forgot_answers_before_the_look_up_and_is_rate_limited() {
    let (server, mut mails) = mail_server(Opts::new()).await;
    add_user(&server, "alice", &["--email", "alice@example.org"]);
    let mut anon = Browser::new(&server);
    let somebody = forgot(&mut anon, "alice", None).await;
    // Answered, and the look-up has not run yet: no link exists for alice.
    assert_eq!(somebody.status, 200, "{}", somebody.body);
    assert!(
        reset_docs(&server).is_empty(),
        "the look-up ran before the answer was read"
    );
    let nobody = forgot(&mut anon, "nobody", None).await;
    assert_eq!(
        (somebody.status, &somebody.body),
        (nobody.status, &nobody.body)
    );
    assert!(
        somebody.body.contains("ask an approver"),
        "{}",
        somebody.body
    );
    // Later, in the background, the link is made and mailed.
    let mail = next_mail(&mut mails, 30).await.expect("alice's mail");
    assert!(mail.contains("alice@example.org"), "{mail}");
    assert_eq!(reset_docs(&server).len(), 1);
    assert!(mail.contains("Message-ID:"), "{mail}");

    // Sampling costs: an address gets forgot_per_ip_per_hour (10) requests an hour.
    for _ in 2..10 {
        assert_eq!(forgot(&mut anon, "nobody", None).await.status, 200);
    }
    let over = forgot(&mut anon, "nobody", None).await;
    assert_eq!(over.status, 429, "{}", over.body);
    let limits = anon.get("/api/limits").await;
    assert!(limits.body.contains("forgot_ip"), "{}", limits.body);
}

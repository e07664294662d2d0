//! Following runs through real HTTP: `POST /tests/follow` and `/tests/unfollow` (CSRF, login,
//! an unknown run, the cap), the notices of a followed run that finishes or is stopped in the
//! header, on `/notifications`, in `/notifications/unread.json`, in the Atom feed (parsed) and
//! through `/api/actions` (Fishtest's follow script); "mark all read"; a revoked or replaced
//! feed token is 404. And in Chromium: follow from the run page, the notice in the header
//! once the run has ended.

use std::time::{Duration, Instant};

use fantoccini::Locator;
use serde_json::{Value, json};

use crate::browser::{
    body_text, browser, fill, screenshot, start_driver, submit, wait_for_answer, wait_to_leave,
};
use crate::fleet::{PASSWORD, Worker, add_user, approve, create_run, fixed_args};
use crate::harness::TestServer;
use crate::web::{Browser, Page};

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

/// A browser session logged in as `user`, and its CSRF token.
async fn logged_in<'a>(server: &'a TestServer, user: &str) -> (Browser<'a>, String) {
    let mut b = Browser::new(server);
    let token = b.get("/login").await.csrf();
    let page = b
        .post(
            "/login",
            &[
                ("username", user),
                ("password", PASSWORD),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "login {user}: {}", page.body);
    let token = b.get("/tests").await.csrf();
    (b, token)
}

async fn follow(b: &mut Browser<'_>, token: &str, run: &str) -> Page {
    b.post("/tests/follow", &[("run", run), ("csrf_token", token)])
        .await
}

/// Plays every game of a fixed-games run until the server has no task left.
async fn play_to_end(server: &TestServer, seed: u32) {
    let mut w = Worker::new("alice", 8, seed);
    for _ in 0..20 {
        let reply = w.request_task(server).await;
        if reply.get("task_waiting").is_some() {
            return;
        }
        w.play(server, &reply, 1000, EVEN).await;
    }
    panic!("the run never ran out of tasks");
}

/// The header's notifications link text ("Notifications" or "Notifications (N)").
fn header_link(body: &str) -> String {
    let at = body.find("id=\"notices\"").expect("the notifications link");
    let rest = &body[at..];
    let start = rest.find('>').expect("link text") + 1;
    let end = rest.find("</a>").expect("link end");
    rest[start..end].to_string()
}

/// The element names and texts of an Atom document, checked for well-formedness by the
/// parser (unmatched or misnested tags fail): (path, text) of every text node.
fn parse_atom(xml: &str) -> (Vec<String>, Vec<(String, String)>) {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(xml);
    let mut path: Vec<String> = Vec::new();
    let mut elements = Vec::new();
    let mut texts = Vec::new();
    loop {
        match reader.read_event().expect("well-formed XML") {
            Event::Start(e) => {
                path.push(e.name().0.to_string());
                elements.push(path.join("/"));
            }
            Event::Empty(e) => {
                let name = e.name().0.to_string();
                elements.push(format!("{}/{name}", path.join("/")));
            }
            Event::End(_) => {
                path.pop();
            }
            Event::Text(t) => {
                let text = t.into_inner().trim().to_string();
                if !text.is_empty() {
                    texts.push((path.join("/"), text));
                }
            }
            Event::Eof => break,
            _ => {}
        }
    }
    assert!(path.is_empty(), "unclosed elements: {path:?}");
    (elements, texts)
}

fn text_of<'a>(texts: &'a [(String, String)], path: &str) -> Vec<&'a str> {
    texts
        .iter()
        .filter(|(p, _)| p == path)
        .map(|(_, t)| t.as_str())
        .collect()
}

/// The feed URL's path on the page that shows it once.
fn feed_path(body: &str) -> String {
    let at = body.find("/feeds/").expect("a feed URL on the page");
    let end = body[at..].find(".atom").expect("a .atom URL") + at + ".atom".len();
    body[at..end].to_string()
}

#[tokio::test]
async fn a_follower_is_told_when_the_run_finishes_in_the_header_the_feed_and_api_actions() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    // Approved before bob follows: not a notice for him.
    approve(&server, "boss", &run).await;

    let (mut bob, token) = logged_in(&server, "bob").await;
    assert_eq!(header_link(&bob.get("/tests").await.body), "Notifications");
    // The run page offers Follow; following twice is one follow.
    let page = bob.get(&format!("/tests/view/{run}")).await;
    assert!(
        page.body.contains("action=\"/tests/follow\""),
        "{}",
        page.body
    );
    for _ in 0..2 {
        let page = follow(&mut bob, &token, &run).await;
        assert_eq!(page.status, 302, "{}", page.body);
        assert_eq!(page.location, format!("/tests/view/{run}"));
    }
    let page = bob.get(&format!("/tests/view/{run}")).await;
    assert!(
        page.body.contains("action=\"/tests/unfollow\""),
        "{}",
        page.body
    );
    let profile = bob.get("/user").await.body;
    assert!(profile.contains("You follow 1 run "), "{profile}");
    assert!(profile.contains(&format!("/tests/view/{run}")), "{profile}");
    // The dashboard lists it for its follower (and offers "follow" on the unfinished rows).
    let dashboard = bob.get("/tests").await.body;
    assert!(dashboard.contains("Runs you follow (1)"), "{dashboard}");
    assert!(
        dashboard.contains("action=\"/tests/follow\""),
        "{dashboard}"
    );

    play_to_end(&server, 91).await;
    let (_, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(v["finished"], true, "{v}");

    // The header, the list and the JSON the script polls.
    let page = bob.get("/tests").await;
    assert_eq!(header_link(&page.body), "Notifications (1)");
    let list = bob.get("/notifications").await.body;
    assert!(list.contains("Finished: patch"), "{list}");
    assert!(!list.contains("Approved"), "{list}");
    let (status, unread) = get_json(&mut bob, "/notifications/unread.json").await;
    assert_eq!(status, 200);
    assert_eq!(unread["unread"], 1, "{unread}");
    assert_eq!(unread["notices"][0]["url"], format!("/tests/view/{run}"));
    assert!(
        unread["notices"][0]["title"]
            .as_str()
            .is_some_and(|t| t.starts_with("Finished: patch")),
        "{unread}"
    );
    // Alice follows nothing: no count, an empty list.
    let (mut alice, _) = logged_in(&server, "alice").await;
    assert_eq!(
        header_link(&alice.get("/tests").await.body),
        "Notifications"
    );
    let (_, none) = get_json(&mut alice, "/notifications/unread.json").await;
    assert_eq!(none, json!({"unread": 0, "notices": []}));

    // Fishtest's follow script: the same event through /api/actions.
    let (status, rows) = server
        .post_json(
            "/api/actions",
            &json!({"action": {"$in": ["finished_run", "stop_run"]}, "run_id": run}),
        )
        .await;
    assert_eq!(status, 200, "{rows}");
    let rows = rows.as_array().expect("a list of actions");
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0]["action"], "finished_run");

    // The Atom feed: made on the profile, shown once, valid Atom.
    let page = bob
        .post(
            "/notifications/feed",
            &[("action", "new"), ("csrf_token", &token)],
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let path = feed_path(&page.body);
    let r = reqwest::get(server.url(&path)).await.expect("feed");
    assert_eq!(r.status(), 200);
    let ctype = r.headers()["content-type"]
        .to_str()
        .expect("type")
        .to_string();
    assert!(ctype.starts_with("application/atom+xml"), "{ctype}");
    let xml = r.text().await.expect("body");
    let (elements, texts) = parse_atom(&xml);
    assert!(
        xml.contains("xmlns=\"http://www.w3.org/2005/Atom\""),
        "{xml}"
    );
    for required in ["feed/id", "feed/title", "feed/updated"] {
        assert_eq!(text_of(&texts, required).len(), 1, "{required}: {xml}");
    }
    for required in ["feed/entry/id", "feed/entry/title", "feed/entry/updated"] {
        assert_eq!(text_of(&texts, required).len(), 1, "{required}: {xml}");
    }
    assert!(elements.contains(&"feed/entry/link".to_string()), "{xml}");
    assert!(xml.contains(&format!("/tests/view/{run}\"")), "{xml}");
    assert!(text_of(&texts, "feed/entry/title")[0].starts_with("Finished: patch"));
    for t in text_of(&texts, "feed/updated")
        .into_iter()
        .chain(text_of(&texts, "feed/entry/updated"))
    {
        chrono::DateTime::parse_from_rfc3339(t).expect("an RFC 3339 date");
    }
    // The profile says there is a feed, never shows the token again.
    let token_part = path.trim_start_matches("/feeds/").trim_end_matches(".atom");
    let profile = bob.get("/user").await.body;
    assert!(profile.contains("Revoke feed URL"), "{profile}");
    assert!(!profile.contains(token_part), "the profile shows the token");

    // Mark all read: the count goes, the notice stays listed.
    let page = bob
        .post("/notifications/read", &[("csrf_token", token.as_str())])
        .await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert_eq!(
        header_link(&bob.get("/notifications").await.body),
        "Notifications"
    );
    assert!(
        bob.get("/notifications")
            .await
            .body
            .contains("Finished: patch")
    );
    let (_, unread) = get_json(&mut bob, "/notifications/unread.json").await;
    assert_eq!(unread["unread"], 0, "{unread}");

    // A new feed URL replaces the old one; a revoked one is 404.
    let page = bob
        .post(
            "/notifications/feed",
            &[("action", "new"), ("csrf_token", &token)],
        )
        .await;
    let second = feed_path(&page.body);
    assert_ne!(second, path);
    let status = |p: String| {
        let url = server.url(&p);
        async move { reqwest::get(url).await.expect("feed").status().as_u16() }
    };
    assert_eq!(status(path.clone()).await, 404);
    assert_eq!(status(second.clone()).await, 200);
    let page = bob
        .post(
            "/notifications/feed",
            &[("action", "revoke"), ("csrf_token", &token)],
        )
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(status(second).await, 404);
    assert_eq!(status("/feeds/nothing.atom".into()).await, 404);
    assert_eq!(status(format!("/feeds/{}.atom", "0".repeat(64))).await, 404);
}

#[tokio::test]
async fn a_stop_is_a_notice_and_unfollowed_runs_say_nothing() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);
    let stopped = create_run(&server, "alice", fixed_args(10_000)).await;
    let left = create_run(&server, "alice", fixed_args(10_000)).await;
    let (mut bob, token) = logged_in(&server, "bob").await;
    for run in [&stopped, &left] {
        let page = bob
            .post(
                "/tests/follow",
                &[
                    ("run", run.as_str()),
                    ("csrf_token", &token),
                    ("back", "/tests"),
                ],
            )
            .await;
        assert_eq!(page.location, "/tests");
    }
    // Unfollowed from the dashboard's list: its approval says nothing.
    let page = bob
        .post(
            "/tests/unfollow",
            &[
                ("run", left.as_str()),
                ("csrf_token", &token),
                ("back", "/tests"),
            ],
        )
        .await;
    assert_eq!(page.location, "/tests");
    approve(&server, "boss", &left).await;
    assert_eq!(header_link(&bob.get("/tests").await.body), "Notifications");

    // The owner stops the followed run with the run page's button.
    let (mut alice, alice_token) = logged_in(&server, "alice").await;
    let page = alice
        .post(
            "/tests/stop",
            &[
                ("run-id", stopped.as_str()),
                ("csrf_token", &alice_token),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert_eq!(
        header_link(&bob.get("/tests").await.body),
        "Notifications (1)"
    );
    let list = bob.get("/notifications").await.body;
    assert!(list.contains("Stopped: patch"), "{list}");
    assert!(list.contains("by alice: User stop"), "{list}");
}

#[tokio::test]
async fn follows_need_a_login_a_token_a_real_run_and_room() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "carol", &[]);
    let run = create_run(&server, "alice", fixed_args(10_000)).await;

    // A visitor goes to log in; a bad token is the 403 page.
    let mut anon = Browser::new(&server);
    let anon_token = anon.get("/tests").await.csrf();
    let page = follow(&mut anon, &anon_token, &run).await;
    assert_eq!((page.status, page.location.as_str()), (302, "/login"));
    assert_eq!(anon.get("/notifications").await.status, 302);
    assert!(!anon.get("/tests").await.body.contains("id=\"notices\""));
    let (mut alice, token) = logged_in(&server, "alice").await;
    for bad in ["forged", ""] {
        let page = follow(&mut alice, bad, &run).await;
        assert_eq!(page.status, 403, "{}", page.body);
    }
    // A run that does not exist, or no run id at all.
    assert_eq!(
        follow(&mut alice, &token, &"0".repeat(24)).await.status,
        404
    );
    assert_eq!(follow(&mut alice, &token, "nonsense").await.status, 404);
    // A same-site `back` only.
    let page = alice
        .post(
            "/tests/follow",
            &[
                ("run", run.as_str()),
                ("csrf_token", &token),
                ("back", "//evil.example/"),
            ],
        )
        .await;
    assert_eq!(page.location, format!("/tests/view/{run}"));

    // The cap: carol's stored follows are full (the documented document shape).
    let store = crate::harness::open_store(&server.data_dir).expect("store");
    let runs: Vec<Value> = (0..1000)
        .map(|i| json!({"run_id": format!("{i:024x}"), "label": "x", "since": 1.0}))
        .collect();
    let doc = json!({"_id": "follows:carol", "kind": "follows", "user": "carol", "runs": runs, "read": 0.0});
    let Value::Object(doc) = doc else {
        unreachable!()
    };
    store
        .put(shoal::store::Collection::ShoalKv, &doc)
        .expect("put");
    drop(store);
    let (mut carol, carol_token) = logged_in(&server, "carol").await;
    let page = follow(&mut carol, &carol_token, &run).await;
    assert_eq!(page.status, 400, "{}", page.body);
    assert!(page.body.contains("You follow 1000 runs"), "{}", page.body);
    let page = carol
        .post(
            "/tests/unfollow",
            &[
                ("run", &format!("{:024x}", 7)),
                ("csrf_token", &carol_token),
            ],
        )
        .await;
    assert_eq!(page.status, 302);
    let page = follow(&mut carol, &carol_token, &run).await;
    assert_eq!(page.status, 302, "{}", page.body);
}

async fn get_json(b: &mut Browser<'_>, path: &str) -> (u16, Value) {
    let page = b.get(path).await;
    let v = serde_json::from_str(&page.body).unwrap_or(Value::Null);
    (page.status, v)
}

#[tokio::test]
async fn browser_follow_from_the_run_page_then_the_header_tells_of_the_end() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    c.goto(&server.url("/login")).await.expect("login page");
    fill(&c, "username", "bob").await;
    fill(&c, "password", PASSWORD).await;
    submit(&c, "main form").await;
    wait_to_leave(&c, "/login").await;

    let page = server.url(&format!("/tests/view/{run}"));
    c.goto(&page).await.expect("run page");
    c.find(Locator::Id("follow-button"))
        .await
        .expect("the Follow button")
        .click()
        .await
        .expect("click Follow");
    // Back on the run page, which now offers Unfollow.
    let text = wait_for_answer(&c, "Unfollow").await;
    assert!(!text.contains("Follow\n"), "{text}");
    let text = body_text(&c).await;
    assert!(text.contains("Notifications"), "{text}");
    assert!(!text.contains("Notifications ("), "{text}");
    screenshot(&c, "follows-run-page").await;

    play_to_end(&server, 92).await;
    c.goto(&server.url("/tests")).await.expect("dashboard");
    let link = c
        .find(Locator::Id("notices"))
        .await
        .expect("the notifications link");
    assert_eq!(link.text().await.expect("text"), "Notifications (1)");
    screenshot(&c, "follows-header").await;
    link.click().await.expect("open notifications");
    wait_to_leave(&c, "/tests").await;
    let text = body_text(&c).await;
    assert!(text.contains("Finished: patch"), "{text}");
    // The permission button is the script's (hidden without JavaScript or a Notification API).
    screenshot(&c, "follows-notifications").await;
    submit(&c, "form[action=\"/notifications/read\"]").await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while body_text(&c).await.contains("Notifications (1)") {
        assert!(Instant::now() < deadline, "never marked read");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.close().await.expect("close the browser");
}

//! The run controls through real HTTP with a logged-in browser session: `/tests/approve`,
//! `/tests/stop`, `/tests/purge`, `/tests/delete` and `/tests/modify`. Each: a bad token is
//! refused (403) and changes nothing; an anonymous visitor goes to `/login`; another user is
//! refused with the domain's message and changes nothing; the owner or an approver changes
//! the run, as `/api/get_run` and the action log show.

use std::time::Duration;

use serde_json::Value;

use crate::fleet::{PASSWORD, add_user, approve, create_run, fixed_args};
use crate::harness::{Opts, TestServer};
use crate::web::{Browser, Page};

impl<'a> Browser<'a> {
    /// A browser logged in as `user` (anonymous for `None`) with its CSRF token.
    async fn open(server: &'a TestServer, user: Option<&str>) -> (Self, String) {
        let mut b = Browser::new(server);
        let token = b.get("/login").await.csrf();
        if let Some(user) = user {
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
        }
        if user.is_some() {
            // The logged-in session's token (the logout form's).
            let token = b.get("/tests").await.csrf();
            return (b, token);
        }
        (b, token)
    }

    /// Posts one control with `run-id`, confirmed (stop and delete ask first otherwise).
    async fn control(&mut self, path: &str, run: &str, token: &str) -> Page {
        self.post(
            path,
            &[("run-id", run), ("csrf_token", token), ("confirm", "yes")],
        )
        .await
    }

    /// Posts one control with `run-id` and no confirmation.
    async fn unconfirmed(&mut self, path: &str, run: &str, token: &str) -> Page {
        self.post(path, &[("run-id", run), ("csrf_token", token)])
            .await
    }
}

/// The page's text with the apostrophe's escapes undone.
fn unescape(body: &str) -> String {
    body.replace("&#x27;", "'").replace("&#39;", "'")
}

async fn run_json(server: &TestServer, run: &str) -> Value {
    let (status, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    v
}

/// Actions of one kind, read straight from the store (oldest first).
fn stored_actions(server: &TestServer, action: &str) -> Vec<Value> {
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    store
        .find(
            shoal::store::Collection::Actions,
            &shoal::store::Query::new()
                .with(shoal::store::Cond::Eq(
                    "action".into(),
                    serde_json::json!(action),
                ))
                .sort("time", shoal::store::Order::Asc),
        )
        .expect("find")
        .into_iter()
        .map(Value::Object)
        .collect()
}

async fn server_with_users(opts: Opts) -> TestServer {
    let server = TestServer::start_with(opts).await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);
    server
}

const CONTROLS: [&str; 4] = [
    "/tests/approve",
    "/tests/stop",
    "/tests/purge",
    "/tests/delete",
];

#[tokio::test]
async fn controls_refuse_a_bad_token_and_send_anonymous_visitors_to_login() {
    let server = server_with_users(Opts::new()).await;
    let run = create_run(&server, "alice", fixed_args(10_000)).await;
    let before = run_json(&server, &run).await;

    let (mut anon, anon_token) = Browser::open(&server, None).await;
    let (mut boss, boss_token) = Browser::open(&server, Some("boss")).await;
    for path in CONTROLS {
        let page = anon.control(path, &run, &anon_token).await;
        assert_eq!(page.status, 302, "{path}");
        assert_eq!(page.location, "/login", "{path}");
        for token in ["forged", ""] {
            let page = boss.control(path, &run, token).await;
            assert_eq!(page.status, 403, "{path}");
            assert!(page.body.contains("security token"), "{path}");
        }
        // A token of another session is no token.
        let page = boss.control(path, &run, &anon_token).await;
        assert_eq!(page.status, 403, "{path}");
    }
    let modify = [
        ("run", run.as_str()),
        ("num-games", "2000"),
        ("priority", "0"),
        ("throughput", "100"),
    ];
    let page = anon
        .post(
            "/tests/modify",
            &[&modify[..], &[("csrf_token", anon_token.as_str())]].concat(),
        )
        .await;
    assert_eq!((page.status, page.location.as_str()), (302, "/login"));
    let page = boss
        .post(
            "/tests/modify",
            &[&modify[..], &[("csrf_token", "forged")]].concat(),
        )
        .await;
    assert_eq!(page.status, 403);
    // The header works as the form field does.
    let req = boss
        .client
        .post(server.url("/tests/approve"))
        .header("x-csrf-token", boss_token.clone())
        .form(&[("run-id", run.as_str())]);
    assert_eq!(boss.send(req).await.status, 302);

    // Nothing changed but the one approval with a good token.
    let after = run_json(&server, &run).await;
    assert_eq!(after["approved"], true);
    for key in ["finished", "deleted"] {
        assert_eq!(after[key], before[key], "{key}");
    }
    assert_eq!(after["args"], before["args"]);
    assert!(stored_actions(&server, "stop_run").is_empty());
    assert!(stored_actions(&server, "delete_run").is_empty());
    assert!(stored_actions(&server, "modify_run").is_empty());
}

#[tokio::test]
async fn approve_stop_purge_and_delete_by_who_may() {
    let server = server_with_users(Opts::new()).await;
    let run = create_run(&server, "alice", fixed_args(10_000)).await;
    let (mut alice, alice_token) = Browser::open(&server, Some("alice")).await;
    let (mut bob, bob_token) = Browser::open(&server, Some("bob")).await;
    let (mut boss, boss_token) = Browser::open(&server, Some("boss")).await;

    // Approve: not by a non-approver, not by the submitter; by an approver, once.
    for (b, token) in [(&mut bob, &bob_token), (&mut alice, &alice_token)] {
        let page = b.control("/tests/approve", &run, token).await;
        assert_eq!(page.status, 403, "{}", page.body);
        assert!(page.body.contains("Please login as approver"));
    }
    assert_eq!(run_json(&server, &run).await["approved"], false);
    let page = boss.control("/tests/approve", &run, &boss_token).await;
    assert_eq!(
        (page.status, page.location.clone()),
        (302, format!("/tests?done=approved&run={run}"))
    );
    let dashboard = boss.get(&page.location).await;
    // The message names the run and links to it.
    assert!(
        dashboard.body.contains(&format!(
            "Run <a href=\"/tests/view/{run}\">{run}</a> approved"
        )),
        "{}",
        dashboard.body
    );
    let v = run_json(&server, &run).await;
    assert_eq!(
        (v["approved"].clone(), v["approver"].clone()),
        (true.into(), "boss".into())
    );
    let again = boss.control("/tests/approve", &run, &boss_token).await;
    assert_eq!(again.status, 400);
    assert!(again.body.contains("already approved"), "{}", again.body);
    // The refusal names the run: linked to it.
    assert!(
        again.body.contains(&format!(
            "Run <a href=\"/tests/view/{run}\">{run}</a> already approved!"
        )),
        "{}",
        again.body
    );
    let missing = boss
        .control("/tests/approve", "0123456789abcdef01234567", &boss_token)
        .await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert_eq!(stored_actions(&server, "approve_run").len(), 1);

    // Stop: not by another user; by the owner.
    let page = bob.control("/tests/stop", &run, &bob_token).await;
    assert_eq!(page.status, 403);
    assert!(
        page.body.contains("Unable to modify another users run!"),
        "{}",
        page.body
    );
    assert_eq!(run_json(&server, &run).await["finished"], false);
    let page = alice.control("/tests/stop", &run, &alice_token).await;
    assert_eq!(
        (page.status, page.location.clone()),
        (302, format!("/tests?done=stopped&run={run}"))
    );
    // The message names the run (linked).
    let dashboard = alice.get(&page.location).await;
    assert!(
        dashboard.body.contains(&format!(
            "Run <a href=\"/tests/view/{run}\">{run}</a> stopped"
        )),
        "{}",
        dashboard.body
    );
    assert_eq!(run_json(&server, &run).await["finished"], true);
    let stops = stored_actions(&server, "stop_run");
    assert_eq!(stops.len(), 1);
    assert_eq!(stops[0]["username"], "alice");
    assert_eq!(stops[0]["message"], "User stop");

    // Purge (a finished run): not by another user; by the owner and by an approver.
    let page = bob.control("/tests/purge", &run, &bob_token).await;
    assert_eq!(page.status, 403);
    assert!(stored_actions(&server, "purge_run").is_empty());
    let page = alice.control("/tests/purge", &run, &alice_token).await;
    assert_eq!(
        (page.status, page.location.as_str()),
        (302, "/tests?done=purged-none")
    );
    let dashboard = alice.get(&page.location).await;
    assert!(dashboard.body.contains("No bad workers"));
    let page = boss.control("/tests/purge", &run, &boss_token).await;
    assert_eq!(page.status, 302);
    let purges = stored_actions(&server, "purge_run");
    assert_eq!(purges.len(), 2);
    assert_eq!(purges[1]["username"], "boss");

    // Delete: not by another user; by an approver; by the owner (another run).
    let other = create_run(&server, "alice", fixed_args(10_000)).await;
    for r in [&run, &other] {
        let page = bob.control("/tests/delete", r, &bob_token).await;
        assert_eq!(page.status, 403);
        assert_eq!(run_json(&server, r).await["deleted"], false);
    }
    let page = boss.control("/tests/delete", &run, &boss_token).await;
    assert_eq!(
        (page.status, page.location.clone()),
        (302, format!("/tests?done=deleted&run={run}"))
    );
    let page = alice.control("/tests/delete", &other, &alice_token).await;
    assert_eq!(page.status, 302);
    let v = run_json(&server, &other).await;
    assert_eq!(
        (v["deleted"].clone(), v["finished"].clone()),
        (true.into(), true.into())
    );
    assert_eq!(run_json(&server, &run).await["deleted"], true);
    let deletes = stored_actions(&server, "delete_run");
    assert_eq!(deletes.len(), 2);
    assert_eq!(deletes[0]["username"], "boss");
    assert_eq!(deletes[1]["username"], "alice");
}

#[tokio::test]
async fn modify_changes_games_priority_and_throughput_within_the_rules() {
    let server = server_with_users(Opts::new()).await;
    let run = create_run(&server, "alice", fixed_args(10_000)).await;
    approve(&server, "boss", &run).await;
    let (mut alice, alice_token) = Browser::open(&server, Some("alice")).await;
    let (mut bob, bob_token) = Browser::open(&server, Some("bob")).await;
    let (mut boss, boss_token) = Browser::open(&server, Some("boss")).await;
    let run_id = run.clone();
    let form = |games: &str, priority: &str, throughput: &str| {
        let run_id = run_id.clone();
        let (games, priority, throughput) = (
            games.to_string(),
            priority.to_string(),
            throughput.to_string(),
        );
        move |token: &str| -> Vec<(String, String)> {
            [
                ("run", run_id.as_str()),
                ("num-games", games.as_str()),
                ("priority", priority.as_str()),
                ("throughput", throughput.as_str()),
                ("info", "new words"),
                ("csrf_token", token),
            ]
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
        }
    };
    async fn modify(b: &mut Browser<'_>, fields: Vec<(String, String)>) -> Page {
        let req = b.client.post(b.server.url("/tests/modify")).form(&fields);
        b.send(req).await
    }

    // Another user: refused after the value checks, nothing changed.
    let page = modify(&mut bob, form("8000", "0", "100")(&bob_token)).await;
    assert_eq!(page.status, 403);
    assert!(
        unescape(&page.body).contains("Unable to modify another user's run!"),
        "{}",
        page.body
    );
    // Form values: the messages Fishtest gives.
    for (fields, message) in [
        (
            form("", "0", "100")(&alice_token),
            "Unable to modify with no number of games!",
        ),
        (form("8000", "x", "100")(&alice_token), "Bad values!"),
        (
            form("20000", "0", "100")(&alice_token),
            "Unable to modify number of games in a fixed game test!",
        ),
        (
            form("8500", "0", "100")(&alice_token),
            "Number of games must be a multiple of 1000",
        ),
    ] {
        let page = modify(&mut alice, fields).await;
        assert_eq!(page.status, 400, "{message}");
        assert!(page.body.contains(message), "{message}: {}", page.body);
    }
    let v = run_json(&server, &run).await;
    assert_eq!(v["args"]["num_games"], 10_000);
    assert!(stored_actions(&server, "modify_run").is_empty());

    // The owner within the limits: still approved, new info.
    let page = modify(&mut alice, form("8000", "0", "100")(&alice_token)).await;
    assert_eq!(
        (page.status, page.location.as_str()),
        (302, "/tests?done=modified")
    );
    let v = run_json(&server, &run).await;
    assert_eq!(v["args"]["num_games"], 8000);
    assert_eq!(v["args"]["info"], "new words");
    assert_eq!(v["approved"], true);
    let mods = stored_actions(&server, "modify_run");
    assert_eq!(mods.len(), 1);
    assert_eq!(
        mods[0]["message"],
        "modify: num-games changed from 10000 to 8000"
    );

    // The owner above the throughput limit: unapproved.
    let page = modify(&mut alice, form("8000", "0", "200")(&alice_token)).await;
    assert_eq!(page.location, "/tests?done=modified-unapproved");
    let dashboard = alice.get(&page.location).await;
    assert!(dashboard.body.contains("it will have to be reapproved"));
    let v = run_json(&server, &run).await;
    assert_eq!(v["approved"], false);
    assert_eq!(v["args"]["throughput"].as_f64(), Some(200.0));

    // An approver: priority up, still waiting for approval.
    let page = modify(&mut boss, form("6000", "1", "200")(&boss_token)).await;
    assert_eq!(page.location, "/tests?done=modified-pending");
    let v = run_json(&server, &run).await;
    assert_eq!(v["args"]["priority"].as_f64(), Some(1.0));
    assert_eq!(v["args"]["num_games"], 6000);
    let mods = stored_actions(&server, "modify_run");
    assert_eq!(mods.len(), 3);
    assert_eq!(mods[2]["username"], "boss");
}

#[tokio::test]
async fn a_secondary_answers_503_after_the_token_check() {
    // Port 0 is not primary_port 1: a secondary.
    let server = server_with_users(Opts::new().set("primary_port", 1)).await;
    let (mut boss, boss_token) = Browser::open(&server, Some("boss")).await;
    for path in CONTROLS.into_iter().chain(["/tests/modify"]) {
        let page = boss
            .control(path, "0123456789abcdef01234567", "forged")
            .await;
        assert_eq!(page.status, 403, "{path}");
        let page = boss
            .control(path, "0123456789abcdef01234567", &boss_token)
            .await;
        assert_eq!(page.status, 503, "{path}");
        assert!(page.body.contains("Primary instance required."), "{path}");
    }
}

#[tokio::test]
async fn a_blocked_owner_is_logged_out_and_changes_nothing() {
    let server = server_with_users(Opts::new()).await;
    let run = create_run(&server, "alice", fixed_args(10_000)).await;
    let (mut alice, alice_token) = Browser::open(&server, Some("alice")).await;
    crate::fleet::user_cli(&server, &["set", "alice", "--block"]);
    // The block reaches the sessions within the blocked-list cache's life.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    // Logged out and sent to /tests by the first request; the old token is worthless after.
    let page = alice.control("/tests/stop", &run, &alice_token).await;
    assert_eq!((page.status, page.location.as_str()), (302, "/tests"));
    let page = alice.control("/tests/delete", &run, &alice_token).await;
    assert_eq!(page.status, 403);
    let v = run_json(&server, &run).await;
    assert_eq!(
        (v["finished"].clone(), v["deleted"].clone()),
        (false.into(), false.into())
    );
    assert!(stored_actions(&server, "stop_run").is_empty());
}

#[tokio::test]
async fn stop_and_delete_ask_first_and_change_nothing_until_confirmed() {
    let server = server_with_users(Opts::new()).await;
    let run = create_run(&server, "alice", fixed_args(10_000)).await;
    let (mut alice, alice_token) = Browser::open(&server, Some("alice")).await;
    let (mut bob, bob_token) = Browser::open(&server, Some("bob")).await;
    let (mut anon, anon_token) = Browser::open(&server, None).await;

    for (path, question) in [
        ("/tests/stop", "Stop this run?"),
        ("/tests/delete", "Delete this run?"),
    ] {
        // The checks come first: a bad token, a visitor, another user.
        let page = alice.unconfirmed(path, &run, "forged").await;
        assert_eq!(page.status, 403, "{path}");
        let page = anon.unconfirmed(path, &run, &anon_token).await;
        assert_eq!((page.status, page.location.as_str()), (302, "/login"));
        let page = bob.unconfirmed(path, &run, &bob_token).await;
        assert_eq!(page.status, 403, "{path}: {}", page.body);
        assert!(page.body.contains("Unable to modify another users run!"));
        let page = alice
            .unconfirmed(path, "0123456789abcdef01234567", &alice_token)
            .await;
        assert_eq!(page.status, 404, "{path}: {}", page.body);

        // The owner is asked, for this run, by a form that posts the same request confirmed.
        for confirm in [None, Some("no")] {
            let mut form = vec![("run-id", run.as_str()), ("csrf_token", &alice_token)];
            if let Some(c) = confirm {
                form.push(("confirm", c));
            }
            let page = alice.post(path, &form).await;
            assert_eq!(page.status, 200, "{path}: {}", page.body);
            let body = unescape(&page.body);
            for want in [
                question,
                &format!("<a href=\"/tests/view/{run}\">"),
                &format!("action=\"{path}\""),
                &format!("name=\"run-id\" value=\"{run}\""),
                "name=\"confirm\" value=\"yes\"",
                &format!("name=\"csrf_token\" value=\"{alice_token}\""),
                ">Cancel</a>",
            ] {
                assert!(body.contains(want), "{path} {want}: {body}");
            }
        }
        let v = run_json(&server, &run).await;
        assert_eq!(
            (v["finished"].clone(), v["deleted"].clone()),
            (false.into(), false.into()),
            "{path}"
        );
    }
    assert!(stored_actions(&server, "stop_run").is_empty());
    assert!(stored_actions(&server, "delete_run").is_empty());

    // Confirmed, it acts; a finished run is refused before any question.
    let page = alice.control("/tests/stop", &run, &alice_token).await;
    assert_eq!(
        (page.status, page.location.clone()),
        (302, format!("/tests?done=stopped&run={run}"))
    );
    assert_eq!(run_json(&server, &run).await["finished"], true);
    let page = alice.unconfirmed("/tests/stop", &run, &alice_token).await;
    assert!(page.status >= 400, "{}: {}", page.status, page.body);
    let page = alice.control("/tests/delete", &run, &alice_token).await;
    assert_eq!(
        (page.status, page.location.clone()),
        (302, format!("/tests?done=deleted&run={run}"))
    );
    let page = alice.unconfirmed("/tests/delete", &run, &alice_token).await;
    assert!(page.status >= 400, "{}: {}", page.status, page.body);
    assert_eq!(stored_actions(&server, "stop_run").len(), 1);
    assert_eq!(stored_actions(&server, "delete_run").len(), 1);
}

#[tokio::test]
async fn the_run_page_keeps_stop_and_delete_apart_and_a_pending_run_says_one_thing() {
    let server = server_with_users(Opts::new()).await;
    let run = create_run(&server, "alice", crate::fleet::sprt_args(0.0, 2.0)).await;
    let (mut boss, _) = Browser::open(&server, Some("boss")).await;
    let page = boss.get(&format!("/tests/view/{run}")).await;
    assert_eq!(page.status, 200);
    let body = &page.body;
    let at = |s: &str| body.find(s).unwrap_or_else(|| panic!("{s}: {body}"));
    let zone = at("class=\"danger-zone\"");
    assert!(at("action=\"/tests/approve\"") < zone);
    assert!(zone < at("action=\"/tests/stop\""));
    assert!(zone < at("action=\"/tests/delete\""));
    assert!(
        body.contains("Status: <strong>pending approval</strong></p>"),
        "{body}"
    );
    assert!(!body.contains("SPRT <strong>running"), "{body}");

    // Approved with no worker yet: waiting, still one label.
    approve(&server, "boss", &run).await;
    let page = boss.get(&format!("/tests/view/{run}")).await;
    assert!(
        page.body
            .contains("Status: <strong>waiting for workers</strong></p>"),
        "{}",
        page.body
    );
}

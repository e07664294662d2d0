//! The new-test form with GitHub (a stand-in of our own on loopback, `fake_github.rs`): a test
//! submitted by branch name alone gets the commits, subjects, benches, nets and info the
//! fixture says; each problem shows at its field and creates nothing; nets never uploaded
//! are refused with a link to `/upload`; GitHub down, the form says so and still takes the
//! commits by hand; the run's diff is fetched once and still shown with GitHub gone.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fake_github::{FakeGithub, Mode};
use crate::fleet::{add_user, sha};
use crate::harness::{Opts, TestServer, open_store};
use crate::ui_submit::{form_fields, logged_in, post_form, with};
use crate::web::Browser;

const FORK_URL: &str = "https://github.com/dev-one/Stockfish";

async fn server_with(fake: &FakeGithub) -> TestServer {
    let server = TestServer::start_with(
        Opts::new()
            .set("github_api_url", fake.api_url())
            .set("github_raw_url", fake.raw_url())
            .set("github_token", fake.token()),
    )
    .await;
    add_user(&server, "alice", &[]);
    server
}

/// Records nets as uploaded (the fixture's names cannot be made by hashing a file).
fn record_nets(server: &TestServer, names: &[&str]) {
    let store = open_store(&server.data_dir).expect("store");
    for name in names {
        let doc = json!({"_id": name, "name": name, "user": "alice", "downloads": 0});
        store
            .put(
                shoal::store::Collection::Nns,
                doc.as_object().expect("object"),
            )
            .expect("put");
    }
}

fn run_count(server: &TestServer) -> u64 {
    open_store(&server.data_dir)
        .expect("store")
        .count(shoal::store::Collection::Runs, &[])
        .expect("count")
}

/// The form as the page shows it with `changes` typed in, posted.
async fn submit(b: &mut Browser<'_>, changes: &[(&str, &str)]) -> crate::web::Page {
    let page = b.get("/tests/run").await;
    assert_eq!(page.status, 200, "{}", page.body);
    let fields = with(&form_fields(&page.body), changes);
    post_form(b, &fields).await
}

fn created(page: &crate::web::Page) -> String {
    assert_eq!(page.status, 302, "{}", page.body);
    page.location
        .strip_prefix("/tests/view/")
        .and_then(|r| r.strip_suffix("?follow=1"))
        .unwrap_or_else(|| panic!("a run page: {}", page.location))
        .to_string()
}

/// The text next to field `name` on a refused form.
fn error_at(body: &str, name: &str) -> String {
    let mark = format!("id=\"error-{name}\" role=\"alert\">");
    let at = body
        .find(&mark)
        .unwrap_or_else(|| panic!("no error at {name}: {body}"));
    let rest = &body[at + mark.len()..];
    rest[..rest.find("</span>").unwrap_or(rest.len())].to_string()
}

#[tokio::test]
async fn a_branch_name_is_all_a_developer_gives() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    record_nets(&server, &["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]);
    let mut b = logged_in(&server, "alice").await;

    let page = submit(
        &mut b,
        &[("tests_repo", FORK_URL), ("new_tag", "lmr-tweak")],
    )
    .await;
    let id = created(&page);
    let (status, run) = server.get_json(&format!("/api/get_run/{id}")).await;
    assert_eq!(status, 200, "{run}");
    let a = &run["args"];
    assert_eq!(a["tests_repo"], FORK_URL);
    assert_eq!(a["new_tag"], "lmr-tweak");
    assert_eq!(a["base_tag"], "master");
    assert_eq!(
        a["resolved_new"],
        "aaaa000000000000000000000000000000000001"
    );
    assert_eq!(
        a["resolved_base"],
        "3333333333333333333333333333333333333333"
    );
    assert_eq!(a["msg_new"], "Tweak LMR reduction");
    assert_eq!(a["msg_base"], "Fix a typo in the README");
    assert_eq!(a["new_signature"], "1893224");
    // Master's newest commit states no bench: the newest one that does.
    assert_eq!(a["base_signature"], "1947203");
    let nets = json!(["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]);
    assert_eq!(a["new_nets"], nets);
    assert_eq!(a["base_nets"], nets);
    assert_eq!(
        a["info"],
        "Tweak LMR reduction\nReduce more for late quiet moves."
    );

    // The run page shows what was tested, and (once fetched) the diff, which stays when
    // GitHub is gone and was asked for once.
    let compare = "/repos/dev-one/Stockfish/compare/\
        3333333333333333333333333333333333333333...aaaa000000000000000000000000000000000001";
    let deadline = Instant::now() + Duration::from_secs(30);
    let page = loop {
        let page = b.get(&format!("/tests/view/{id}")).await;
        assert_eq!(page.status, 200);
        if page.body.contains("class=\"run-diff\"") {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "the diff never came: {}",
            page.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(page.body.contains("Tweak LMR reduction"));
    assert!(
        page.body
            .contains("<span class=\"diff-add\">+      r -= 1100 * ss-&#62;ttPv;</span>"),
        "{}",
        page.body
    );
    assert!(
        page.body
            .contains("<span class=\"diff-del\">-      r -= 1024 * ss-&#62;ttPv;</span>")
    );
    assert!(page.body.contains(&format!(
        "href=\"{FORK_URL}/compare/3333333333333333333333333333333333333333...aaaa000000000000000000000000000000000001\""
    )));
    // A branch far behind master is warned about where the form sends the developer.
    let page = b.get(&format!("/tests/view/{id}?follow=1&behind=42")).await;
    assert!(
        page.body
            .contains("lmr-tweak is 42 commits behind official master: consider rebasing it."),
        "{}",
        page.body
    );
    let mut fake = fake;
    fake.stop().await;
    let page = b.get(&format!("/tests/view/{id}")).await;
    assert!(page.body.contains("+      r -= 1100 * ss-&#62;ttPv;"));
    assert_eq!(
        fake.hits(&format!("{compare} (diff)")),
        1,
        "the diff costs the quota once"
    );
}

#[tokio::test]
async fn each_problem_shows_at_its_field_and_creates_nothing() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    record_nets(&server, &["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]);
    let mut b = logged_in(&server, "alice").await;

    // An unknown branch (GitHub's 422) and a base without a bench: both at once, the typed
    // values kept.
    let page = submit(
        &mut b,
        &[
            ("tests_repo", FORK_URL),
            ("new_tag", "no-such-branch"),
            ("base_tag", "no-bench"),
        ],
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("The test was not submitted"));
    assert!(
        error_at(&page.body, "new_tag").contains("knows no branch, tag or commit"),
        "{}",
        page.body
    );
    assert!(error_at(&page.body, "base_signature").contains("line: give its bench by hand"));
    assert!(
        page.body
            .contains("name=\"new_tag\" value=\"no-such-branch\"")
    );
    assert!(page.body.contains("name=\"base_tag\" value=\"no-bench\""));

    // Outside the fork network.
    let page = submit(
        &mut b,
        &[
            ("tests_repo", "https://github.com/stranger/Engine"),
            ("new_tag", "main"),
            ("base_tag", "main"),
        ],
    )
    .await;
    assert!(error_at(&page.body, "tests_repo").contains("nor a fork of it"));

    // A net never uploaded: refused, with the way to upload it.
    let page = submit(&mut b, &[("tests_repo", FORK_URL), ("new_tag", "new-net")]).await;
    assert_eq!(page.status, 200);
    let e = error_at(&page.body, "new_nets");
    assert!(
        e.contains("Missing net(s)") && e.contains("nn-9999aaaabbbb.nnue"),
        "{e}"
    );
    assert!(e.contains("<a href=\"/upload\">"), "{e}");
    assert_eq!(run_count(&server), 0);

    // GitHub failing: the form says so, opens the commits by hand, keeps what was typed.
    for mode in [Mode::ServerError, Mode::RateLimited, Mode::Malformed] {
        fake.set_mode(mode);
        let page = submit(
            &mut b,
            &[("tests_repo", FORK_URL), ("new_tag", "lmr-tweak")],
        )
        .await;
        assert_eq!(page.status, 200, "{mode:?}");
        assert!(
            page.body.contains("You can still submit the test"),
            "{mode:?}: {}",
            page.body
        );
        assert!(page.body.contains("<details class=\"advanced\" open>"));
        assert!(page.body.contains("name=\"new_tag\" value=\"lmr-tweak\""));
    }
    assert_eq!(run_count(&server), 0);

    // And with the commits given by hand, a test is submitted while GitHub is down.
    let page = submit(
        &mut b,
        &[
            ("tests_repo", FORK_URL),
            ("new_tag", "lmr-tweak"),
            ("resolved_new", &sha('b')),
            ("resolved_base", &sha('a')),
            ("new_signature", "1893224"),
            ("base_signature", "1947203"),
            ("run-info", "submitted while GitHub is down"),
            // No nets given, none read (GitHub down): confirmed ("Create without nets").
            ("confirm_no_nets", "1"),
        ],
    )
    .await;
    let id = created(&page);
    let (_, run): (u16, Value) = server.get_json(&format!("/api/get_run/{id}")).await;
    assert_eq!(run["args"]["resolved_new"], sha('b'));
}

#[tokio::test]
async fn approval_records_the_first_and_last_tests_of_a_new_net() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    add_user(&server, "boss", &["--approver"]);
    let new_net = "nn-9999aaaabbbb.nnue";
    record_nets(
        &server,
        &["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue", new_net],
    );
    let mut b = logged_in(&server, "alice").await;
    let first = created(&submit(&mut b, &[("tests_repo", FORK_URL), ("new_tag", "new-net")]).await);
    let second =
        created(&submit(&mut b, &[("tests_repo", FORK_URL), ("new_tag", "new-net")]).await);
    let test_of = |name: &str, key: &str| -> Option<String> {
        let store = open_store(&server.data_dir).expect("store");
        let doc = store
            .get(shoal::store::Collection::Nns, name)
            .expect("get")
            .expect("the net's record");
        doc.get(key)
            .and_then(|t| t.get("id"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    assert_eq!(test_of(new_net, "first_test"), None, "not before approval");

    crate::fleet::approve(&server, "boss", &first).await;
    assert_eq!(test_of(new_net, "first_test"), Some(first.clone()));
    assert_eq!(test_of(new_net, "last_test"), Some(first.clone()));
    crate::fleet::approve(&server, "boss", &second).await;
    assert_eq!(test_of(new_net, "first_test"), Some(first));
    assert_eq!(test_of(new_net, "last_test"), Some(second));
    // A net the base uses too is not the test's new net.
    assert_eq!(test_of("nn-1c0000000000.nnue", "last_test"), None);
}

#[tokio::test]
async fn a_preset_button_keeps_what_was_typed_and_submits_nothing() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    let mut b = logged_in(&server, "alice").await;
    let page = submit(
        &mut b,
        &[
            ("tests_repo", FORK_URL),
            ("new_tag", "lmr-tweak"),
            ("run-info", "my words"),
            ("preset", "ltc"),
        ],
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let fields = form_fields(&page.body);
    let value = |name: &str| {
        fields
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    assert_eq!(value("new_tag"), "lmr-tweak");
    assert_eq!(value("tests_repo"), FORK_URL);
    assert_eq!(value("run-info"), "my words");
    assert_eq!(value("tc"), "60+0.6", "the preset's time control");
    assert_eq!(value("bounds"), "standard_ltc");
    assert_eq!(run_count(&server), 0);
    assert_eq!(fake.used(), 0, "a preset asks GitHub nothing");
}

/// Sets a user's registration time in the store (before they first log in).
fn registered_at(server: &TestServer, name: &str, iso: &str) {
    let store = open_store(&server.data_dir).expect("store");
    let mut doc = store
        .find(
            shoal::store::Collection::Users,
            &shoal::store::Query::new()
                .with(shoal::store::Cond::Eq("username".into(), json!(name))),
        )
        .expect("find")
        .pop()
        .expect("the user");
    doc.insert("registration_time".into(), json!({"$date": iso}));
    store
        .put(shoal::store::Collection::Users, &doc)
        .expect("put");
}

fn user_field(server: &TestServer, name: &str, key: &str) -> Value {
    let store = open_store(&server.data_dir).expect("store");
    let doc = store
        .find(
            shoal::store::Collection::Users,
            &shoal::store::Query::new()
                .with(shoal::store::Cond::Eq("username".into(), json!(name))),
        )
        .expect("find")
        .pop()
        .expect("the user");
    doc.get(key).cloned().unwrap_or(Value::Null)
}

#[tokio::test]
async fn a_repository_outside_the_fork_network_is_refused_for_new_accounts_only() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    add_user(&server, "veteran", &[]);
    registered_at(&server, "veteran", "2024-06-30T23:59:59.000Z");
    let stranger = [
        ("tests_repo", "https://github.com/stranger/Engine"),
        ("new_tag", "main"),
        ("base_tag", "main"),
    ];

    // Registered from 2025-07-01 on (alice, today): refused, nothing created.
    let mut alice = logged_in(&server, "alice").await;
    let page = submit(&mut alice, &stranger).await;
    assert_eq!(page.status, 200);
    assert!(error_at(&page.body, "tests_repo").contains("nor a fork of it"));
    assert_eq!(run_count(&server), 0);

    // Older: warned, and the run records the network's root as master_repo.
    let mut veteran = logged_in(&server, "veteran").await;
    // Its commits name no nets: confirmed ("Create without nets").
    let confirmed = [&stranger[..], &[("confirm_no_nets", "1")]].concat();
    let page = submit(&mut veteran, &confirmed).await;
    let id = created(&page);
    let (_, run) = server.get_json(&format!("/api/get_run/{id}")).await;
    assert_eq!(
        run["args"]["tests_repo"],
        "https://github.com/stranger/Engine"
    );
    assert_eq!(
        run["args"]["master_repo"],
        "https://github.com/stranger/Engine"
    );
    let page = veteran.get(&format!("/tests/view/{id}?follow=1")).await;
    assert!(
        page.body.contains(
            "https://github.com/stranger/Engine is not a fork of official-stockfish/Stockfish"
        ),
        "{}",
        page.body
    );
    // The repository a submission used becomes the profile's (Fishtest saves it).
    assert_eq!(
        user_field(&server, "veteran", "tests_repo"),
        "https://github.com/stranger/Engine"
    );

    // A fork: no master_repo, and the profile follows the repository used.
    record_nets(&server, &["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]);
    let id = created(
        &submit(
            &mut alice,
            &[("tests_repo", FORK_URL), ("new_tag", "lmr-tweak")],
        )
        .await,
    );
    let (_, run) = server.get_json(&format!("/api/get_run/{id}")).await;
    assert!(run["args"].get("master_repo").is_none(), "{}", run["args"]);
    assert_eq!(user_field(&server, "alice", "tests_repo"), FORK_URL);
}

#[tokio::test]
async fn commits_by_hand_with_no_repository_and_a_master_base_bench_checked() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    record_nets(&server, &["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]);
    let mut b = logged_in(&server, "alice").await;
    let by_hand = |base_bench: &'static str| {
        vec![
            ("tests_repo", ""),
            ("new_tag", "lmr-tweak"),
            ("resolved_new", "aaaa000000000000000000000000000000000001"),
            ("resolved_base", "3333333333333333333333333333333333333333"),
            ("new_signature", "1893224"),
            ("base_signature", base_bench),
            ("run-info", "by hand"),
            // No nets given, none read from these commits: confirmed ("Create without nets").
            ("confirm_no_nets", "1"),
        ]
    };

    // A master base's bench given by hand that is not master's: refused at the field.
    let page = submit(&mut b, &by_hand("1234567")).await;
    assert_eq!(page.status, 200);
    let e = error_at(&page.body, "base_signature");
    assert!(
        e.contains("The base bench 1234567 is not the bench of master") && e.contains("1947203"),
        "{e}"
    );
    assert_eq!(run_count(&server), 0);

    // Master's bench: created, the empty repository taken as the official one (the field's
    // hint says it may be left empty).
    let id = created(&submit(&mut b, &by_hand("1947203")).await);
    let (_, run) = server.get_json(&format!("/api/get_run/{id}")).await;
    assert_eq!(
        run["args"]["tests_repo"],
        "https://github.com/official-stockfish/Stockfish"
    );

    // By branch name, a bench given by hand is checked too.
    let page = submit(
        &mut b,
        &[
            ("tests_repo", FORK_URL),
            ("new_tag", "lmr-tweak"),
            ("base_signature", "1234567"),
        ],
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(
        error_at(&page.body, "base_signature")
            .contains("is not the bench of master in dev-one/Stockfish"),
        "{}",
        page.body
    );

    // GitHub down: the check is skipped, the test is still submitted.
    let mut fake = fake;
    fake.stop().await;
    created(&submit(&mut b, &by_hand("1234567")).await);
}

#[tokio::test]
async fn nets_are_checked_on_every_path() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    // The fixture's commits name these (a side left empty reads them).
    record_nets(&server, &["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]);
    let mut b = logged_in(&server, "alice").await;
    let missing = "nn-0123456789ab.nnue";
    // Commits and nets by hand.
    let page = submit(
        &mut b,
        &[
            ("tests_repo", FORK_URL),
            ("new_tag", "x"),
            ("base_tag", "old-base"),
            ("resolved_new", "aaaa000000000000000000000000000000000001"),
            ("resolved_base", "bbbb000000000000000000000000000000000001"),
            ("new_signature", "1893224"),
            ("base_signature", "1947203"),
            ("new_nets", missing),
            ("run-info", "by hand"),
        ],
    )
    .await;
    assert_eq!(page.status, 200);
    assert!(error_at(&page.body, "new_nets").contains(&format!("following net(s): {missing}")));
    // The API.
    let args = api_args(&[("base_nets", json!([missing]))]);
    let (status, v) = server
        .post_json(
            "/api/create_run",
            &json!({"username": "alice", "password": crate::fleet::PASSWORD, "args": args}),
        )
        .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap_or_default().contains(&format!(
            "Missing net(s). Please upload to this server the following net(s): {missing}"
        )),
        "{v}"
    );
    assert_eq!(run_count(&server), 0);
    // Uploaded, both take it; a rerun of a run whose net is gone is refused.
    record_nets(&server, &[missing]);
    let (status, v) = server
        .post_json(
            "/api/create_run",
            &json!({"username": "alice", "password": crate::fleet::PASSWORD, "args": args}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let old = v["run_id"].as_str().unwrap().to_string();
    open_store(&server.data_dir)
        .unwrap()
        .delete(shoal::store::Collection::Nns, missing)
        .unwrap();
    let page = b.get(&format!("/tests/run?id={old}")).await;
    let page = post_form(&mut b, &form_fields(&page.body)).await;
    assert_eq!(page.status, 200, "{}", page.location);
    assert!(error_at(&page.body, "base_nets").contains(missing));
    assert_eq!(run_count(&server), 1);
}

/// The nets' documents as stored.
fn net_doc(server: &TestServer, name: &str) -> Value {
    let store = open_store(&server.data_dir).expect("store");
    Value::Object(
        store
            .get(shoal::store::Collection::Nns, name)
            .expect("get")
            .expect("the net"),
    )
}

#[tokio::test]
async fn approval_marks_a_master_bases_tested_nets_is_master_and_the_page_warns_of_the_base() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    add_user(&server, "boss", &["--approver"]);
    let (big, small) = ("nn-1c0000000000.nnue", "nn-37f18f62d772.nnue");
    record_nets(&server, &[big, small]);
    // The big net was tested before (both test records); the small one never was.
    {
        let store = open_store(&server.data_dir).expect("store");
        let mut doc = store
            .get(shoal::store::Collection::Nns, big)
            .unwrap()
            .unwrap();
        let test = json!({"id": "64e74776233fd5e4ae5d9a65", "date": {"$date": "2025-01-01T00:00:00.000Z"}});
        doc.insert("first_test".into(), test.clone());
        doc.insert("last_test".into(), test);
        store.put(shoal::store::Collection::Nns, &doc).unwrap();
    }
    let mut b = logged_in(&server, "alice").await;
    // A base that is not on master, nor an ancestor of the new commit.
    let off = created(
        &submit(
            &mut b,
            &[
                ("tests_repo", FORK_URL),
                ("new_tag", "lmr-tweak"),
                ("base_tag", "old-base"),
            ],
        )
        .await,
    );
    let on = created(
        &submit(
            &mut b,
            &[("tests_repo", FORK_URL), ("new_tag", "lmr-tweak")],
        )
        .await,
    );

    let deadline = Instant::now() + Duration::from_secs(30);
    let page = loop {
        let page = b.get(&format!("/tests/view/{off}")).await;
        if page.body.contains("base is not an ancestor of master") {
            break page;
        }
        assert!(
            Instant::now() < deadline,
            "no ancestry warning: {}",
            page.body
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(
        page.body.contains("base is not an ancestor of new"),
        "{}",
        page.body
    );
    // With the spec's base diff link: official master against the base.
    assert!(
        page.body.contains(
            "Warning: base is not an ancestor of master: <a href=\"https://github.com/official-stockfish/Stockfish/compare/\
             3333333333333333333333333333333333333333...dev-one:bbbb000000000000000000000000000000000001\" \
             rel=\"noopener\">base diff</a>"
        ),
        "{}",
        page.body
    );
    // A base on master that the new commit grows from: no such warning.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = b.get(&format!("/tests/view/{on}")).await;
        if page.body.contains("class=\"run-diff\"") {
            assert!(!page.body.contains("base is not"), "{}", page.body);
            break;
        }
        assert!(Instant::now() < deadline, "no diff: {}", page.body);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // Approving the run whose base is off master marks nothing.
    crate::fleet::approve(&server, "boss", &off).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(net_doc(&server, big).get("is_master").is_none());

    // On master: the tested net becomes is_master (literal true); the never-tested one is
    // left without it (Fishtest's schema refuses is_master without both test records).
    crate::fleet::approve(&server, "boss", &on).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while net_doc(&server, big).get("is_master").is_none() {
        assert!(
            Instant::now() < deadline,
            "never marked: {}",
            net_doc(&server, big)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(net_doc(&server, big)["is_master"], json!(true));
    let small_doc = net_doc(&server, small);
    assert!(small_doc.get("is_master").is_none(), "{small_doc}");
    // The base's nets are not the test's new nets: no test records were added to them.
    assert!(small_doc.get("first_test").is_none(), "{small_doc}");
}

/// The review's two-step: a submission by branch name refused (a bad arch filter) comes back
/// with what was typed only, so changing the branch and resubmitting resolves the new branch
/// through GitHub (its net never uploaded is caught), never tests the first branch's commit.
#[tokio::test]
async fn a_refused_submission_by_branch_comes_back_as_typed_and_the_next_one_is_resolved_again() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    record_nets(&server, &["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]);
    let mut b = logged_in(&server, "alice").await;

    let page = submit(
        &mut b,
        &[
            ("tests_repo", FORK_URL),
            ("new_tag", "lmr-tweak"),
            ("checkbox-arch-filter", "on"),
            ("arch-filter", "(bad"),
        ],
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.location);
    assert!(error_at(&page.body, "arch-filter").contains("Invalid arch filter"));
    let fields = form_fields(&page.body);
    let value = |k: &str| {
        fields
            .iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    };
    for k in [
        "resolved_new",
        "resolved_base",
        "msg_new",
        "msg_base",
        "new_nets",
        "base_nets",
        "new_signature",
        "base_signature",
        "master_repo",
    ] {
        assert_eq!(value(k), "", "{k} was not typed, the form must not fill it");
    }
    assert_eq!(value("new_tag"), "lmr-tweak");
    assert_eq!(value("tests_repo"), FORK_URL);

    // Step two: another branch, the filter fixed. new-net's small net was never uploaded.
    let step2 = with(
        &fields,
        &[
            ("new_tag", "new-net"),
            ("arch-filter", "x86"),
            ("run-info", "I meant new-net"),
        ],
    );
    let page = post_form(&mut b, &step2).await;
    assert_eq!(page.status, 200, "{}", page.location);
    assert!(
        error_at(&page.body, "new_nets").contains("nn-9999aaaabbbb.nnue"),
        "{}",
        page.body
    );
    assert_eq!(run_count(&server), 0);

    // Uploaded: the run tests new-net's commit, bench and nets.
    record_nets(&server, &["nn-9999aaaabbbb.nnue"]);
    let id = created(&post_form(&mut b, &with(&form_fields(&page.body), &[])).await);
    let (_, run) = server.get_json(&format!("/api/get_run/{id}")).await;
    let a = &run["args"];
    assert_eq!(a["new_tag"], "new-net");
    assert_eq!(
        a["resolved_new"],
        "dddd000000000000000000000000000000000001"
    );
    assert_eq!(a["new_signature"], "1777777");
    assert_eq!(
        a["new_nets"],
        json!(["nn-1c0000000000.nnue", "nn-9999aaaabbbb.nnue"])
    );
    assert_eq!(a["info"], "I meant new-net");
}

/// `/api/create_run`'s arguments for the fixture's commits (lmr-tweak against master, the
/// official repository, master's bench), with `changes`.
fn api_args(changes: &[(&str, Value)]) -> Value {
    let mut args = crate::fleet::sprt_args(0.0, 2.0);
    args["new_tag"] = json!("lmr-tweak");
    args["resolved_new"] = json!("aaaa000000000000000000000000000000000001");
    args["resolved_base"] = json!("3333333333333333333333333333333333333333");
    args["new_signature"] = json!("1893224");
    args["base_signature"] = json!("1947203");
    for (k, v) in changes {
        args[*k] = v.clone();
    }
    args
}

async fn api_create(server: &TestServer, user: &str, args: &Value) -> (u16, Value) {
    server
        .post_json(
            "/api/create_run",
            &json!({"username": user, "password": crate::fleet::PASSWORD, "args": args}),
        )
        .await
}

fn api_error(v: &Value) -> String {
    v["error"].as_str().unwrap_or_default().to_string()
}

/// With GitHub answering, commits given by hand (the form's "Advanced"), reruns and
/// `/api/create_run` follow the rules of a submission by branch: the fork rule with
/// `master_repo` computed by the server, commits that exist, nets left empty read from the
/// commit, a master base's bench checked (a bench that is not one refused), a rerun of a run
/// that exists, at most 16 nets a side.
#[tokio::test]
async fn commits_by_hand_reruns_and_the_api_follow_the_github_rules() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    add_user(&server, "veteran", &[]);
    registered_at(&server, "veteran", "2024-06-30T23:59:59.000Z");
    let nets = ["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"];
    record_nets(&server, &nets);
    let stranger = api_args(&[
        ("tests_repo", json!("https://github.com/stranger/Engine")),
        ("base_tag", json!("main")),
        (
            "resolved_new",
            json!("ffff000000000000000000000000000000000001"),
        ),
        (
            "resolved_base",
            json!("ffff000000000000000000000000000000000001"),
        ),
        ("new_nets", json!(nets)),
        ("base_nets", json!(nets)),
        (
            "master_repo",
            json!("https://github.com/official-stockfish/Stockfish"),
        ),
    ]);

    // The fork rule on the API: refused for a new account, warned for an older one, whose
    // run records the network's root (whatever the client said).
    let (status, v) = api_create(&server, "alice", &stranger).await;
    assert_eq!(status, 400, "{v}");
    assert!(
        api_error(&v).contains("tests_repo: stranger/Engine is neither"),
        "{v}"
    );
    let (status, v) = api_create(&server, "veteran", &stranger).await;
    assert_eq!(status, 200, "{v}");
    let old = v["run_id"].as_str().expect("run_id").to_string();
    let (_, run) = server.get_json(&format!("/api/get_run/{old}")).await;
    assert_eq!(
        run["args"]["master_repo"],
        "https://github.com/stranger/Engine"
    );

    // A rerun of it by the new account: refused at the repository; nothing created.
    let mut alice = logged_in(&server, "alice").await;
    let page = alice.get(&format!("/tests/run?id={old}")).await;
    let page = post_form(&mut alice, &form_fields(&page.body)).await;
    assert_eq!(page.status, 200, "{}", page.location);
    assert!(error_at(&page.body, "tests_repo").contains("nor a fork of it"));
    // "Advanced" by hand, the same.
    let page = submit(
        &mut alice,
        &[
            ("tests_repo", "https://github.com/stranger/Engine"),
            ("new_tag", "main"),
            ("base_tag", "main"),
            ("resolved_new", "ffff000000000000000000000000000000000001"),
            ("resolved_base", "ffff000000000000000000000000000000000001"),
            ("new_signature", "1000000"),
            ("base_signature", "1000000"),
            ("new_nets", nets[0]),
            ("base_nets", nets[0]),
            ("run-info", "by hand"),
        ],
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.location);
    assert!(error_at(&page.body, "tests_repo").contains("nor a fork of it"));
    assert_eq!(run_count(&server), 1);

    // A commit GitHub does not know, by hand and through the API.
    let unknown = "0123456789012345678901234567890123456789";
    let page = submit(
        &mut alice,
        &[
            ("tests_repo", FORK_URL),
            ("new_tag", "x"),
            ("resolved_new", unknown),
            ("resolved_base", "3333333333333333333333333333333333333333"),
            ("new_signature", "1893224"),
            ("base_signature", "1947203"),
            ("run-info", "by hand"),
        ],
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.location);
    error_at(&page.body, "resolved_new");
    let (status, v) = api_create(
        &server,
        "alice",
        &api_args(&[("resolved_new", json!(unknown))]),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(
        api_error(&v).contains("resolved_new: GitHub knows no"),
        "{v}"
    );

    // The base bench through the API: not master's, leading zeros, too large.
    for (bench, words) in [
        ("1234567", "is not the bench of master"),
        ("00000000000000000000000001947203", "without leading zeros"),
        ("99999999999999999999999", "too large"),
        ("18446744073709551616", "too large"),
    ] {
        let (status, v) = api_create(
            &server,
            "alice",
            &api_args(&[("base_signature", json!(bench))]),
        )
        .await;
        assert_eq!(status, 400, "{bench}: {v}");
        assert!(api_error(&v).contains(words), "{bench}: {v}");
    }
    // Too many nets.
    let many: Vec<String> = (0..17).map(|i| format!("nn-{i:012x}.nnue")).collect();
    let (status, v) = api_create(&server, "alice", &api_args(&[("new_nets", json!(many))])).await;
    assert_eq!(status, 400, "{v}");
    assert!(api_error(&v).contains("at most 16 per side"), "{v}");
    // A rerun of a run that does not exist.
    let (status, v) = api_create(
        &server,
        "alice",
        &api_args(&[("rescheduled_from", json!("0123456789abcdef01234567"))]),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    assert!(api_error(&v).contains("no run"), "{v}");
    assert_eq!(run_count(&server), 1);

    // Nets left out are read from the commits; a fork's run has no master_repo, whatever
    // the client sent.
    let (status, v) = api_create(
        &server,
        "alice",
        &api_args(&[
            ("tests_repo", json!(FORK_URL)),
            ("master_repo", json!("https://github.com/stranger/Engine")),
        ]),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let id = v["run_id"].as_str().expect("run_id");
    let (_, run) = server.get_json(&format!("/api/get_run/{id}")).await;
    assert_eq!(run["args"]["new_nets"], json!(nets));
    assert_eq!(run["args"]["base_nets"], json!(nets));
    assert!(run["args"].get("master_repo").is_none(), "{}", run["args"]);
}

/// Gives a recorded net both test records (it was tested before).
fn tested(server: &TestServer, name: &str) {
    let store = open_store(&server.data_dir).expect("store");
    let mut doc = store
        .get(shoal::store::Collection::Nns, name)
        .unwrap()
        .unwrap();
    let test =
        json!({"id": "64e74776233fd5e4ae5d9a65", "date": {"$date": "2025-01-01T00:00:00.000Z"}});
    doc.insert("first_test".into(), test.clone());
    doc.insert("last_test".into(), test);
    store.put(shoal::store::Collection::Nns, &doc).unwrap();
}

/// A base net typed by hand (here through `/api/create_run`) is never marked `is_master`,
/// even on a master base: only the nets the base commit's sources name are.
#[tokio::test]
async fn a_base_net_typed_by_hand_is_never_marked_is_master() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    add_user(&server, "boss", &["--approver"]);
    let (big, typed) = ("nn-1c0000000000.nnue", "nn-abcdefabcdef.nnue");
    record_nets(&server, &[big, "nn-37f18f62d772.nnue", typed]);
    tested(&server, big);
    tested(&server, typed);
    let (status, v) = api_create(
        &server,
        "alice",
        &api_args(&[("base_nets", json!([big, typed]))]),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let id = v["run_id"].as_str().expect("run_id").to_string();
    crate::fleet::approve(&server, "boss", &id).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while net_doc(&server, big).get("is_master").is_none() {
        assert!(
            Instant::now() < deadline,
            "never marked: {}",
            net_doc(&server, big)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let doc = net_doc(&server, typed);
    assert!(doc.get("is_master").is_none(), "{doc}");
}

/// A run created through `/api/create_run` gets its diff kept like the form's; when GitHub
/// failed at that moment, viewing the run page asks again (in the background) once it answers.
#[tokio::test]
async fn an_api_runs_diff_is_kept_and_asked_for_again_after_github_failed() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await;
    record_nets(&server, &["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]);
    let mut b = logged_in(&server, "alice").await;
    // GitHub failing: created (the checks skipped), no diff kept.
    fake.set_mode(Mode::ServerError);
    let (status, v) = api_create(
        &server,
        "alice",
        &api_args(&[("tests_repo", json!(FORK_URL))]),
    )
    .await;
    assert_eq!(status, 200, "{v}");
    let id = v["run_id"].as_str().expect("run_id").to_string();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let compare = "/repos/dev-one/Stockfish/compare/\
        3333333333333333333333333333333333333333...aaaa000000000000000000000000000000000001";
    assert!(
        fake.hits(&format!("{compare} (diff)")) >= 1,
        "asked once at creation"
    );
    // GitHub back: the page's next view asks again, and the diff comes.
    fake.set_mode(Mode::Normal);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = b.get(&format!("/tests/view/{id}")).await;
        if page.body.contains("class=\"run-diff\"") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the diff never came: {}",
            page.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// GitHub slow past its timeout: a submission by branch comes back within the overall bound
/// (twice `github_timeout_s`), and commits given by hand right after do not wait for it.
#[tokio::test]
async fn a_slow_github_bounds_the_submission_and_commits_by_hand_do_not_wait() {
    let fake = FakeGithub::start().await;
    let server = server_with(&fake).await; // github_timeout_s = 2 (the harness)
    record_nets(&server, &["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"]);
    let mut b = logged_in(&server, "alice").await;
    fake.set_mode(Mode::Slow(Duration::from_secs(10)));
    let started = Instant::now();
    let page = submit(
        &mut b,
        &[("tests_repo", FORK_URL), ("new_tag", "lmr-tweak")],
    )
    .await;
    assert_eq!(page.status, 200, "{}", page.location);
    assert!(
        page.body.contains("You can still submit the test"),
        "{}",
        page.body
    );
    assert!(
        started.elapsed() < Duration::from_millis(5500),
        "{:?}",
        started.elapsed()
    );

    let started = Instant::now();
    created(
        &submit(
            &mut b,
            &[
                ("tests_repo", FORK_URL),
                ("new_tag", "lmr-tweak"),
                ("resolved_new", "aaaa000000000000000000000000000000000001"),
                ("resolved_base", "3333333333333333333333333333333333333333"),
                ("new_signature", "1893224"),
                ("base_signature", "1947203"),
                ("new_nets", "nn-1c0000000000.nnue"),
                ("base_nets", "nn-1c0000000000.nnue"),
                ("run-info", "GitHub is slow"),
            ],
        )
        .await,
    );
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
}

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

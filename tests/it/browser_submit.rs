//! Submitting a test in real Chromium (the helpers of `browser.rs`): the form refuses a bad
//! commit next to its field and keeps what was typed, the corrected form warns that the test
//! has no nets and creates the run once that is confirmed, and an approver approves it from
//! the run page. Screenshots go to `target/screenshots/`.

use std::time::{Duration, Instant};

use fantoccini::{Client, Locator};

use crate::browser::{
    body_text, browser, fill, screenshot, start_driver, submit, wait_for_answer, wait_to_leave,
};
use crate::fleet::{PASSWORD, add_user, sha};
use crate::harness::TestServer;

/// Replaces the text of the form field `name`.
async fn set(c: &Client, name: &str, value: &str) {
    let field = c
        .find(Locator::Css(&format!("[name=\"{name}\"]")))
        .await
        .unwrap_or_else(|e| panic!("field {name}: {e}"));
    field.clear().await.expect("clear");
    field.send_keys(value).await.expect("type");
}

async fn value_of(c: &Client, name: &str) -> String {
    c.find(Locator::Css(&format!("[name=\"{name}\"]")))
        .await
        .unwrap_or_else(|e| panic!("field {name}: {e}"))
        .prop("value")
        .await
        .expect("value")
        .unwrap_or_default()
}

async fn log_in(c: &Client, server: &TestServer, user: &str) {
    c.goto(&server.url("/login")).await.expect("login page");
    fill(c, "username", user).await;
    fill(c, "password", PASSWORD).await;
    submit(c, "main form").await;
    wait_to_leave(c, "/login").await;
    wait_for_answer(c, "Logout").await;
}

#[tokio::test]
async fn submit_a_test_correct_a_refusal_and_have_it_approved() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let driver = start_driver().await;
    let c = browser(&driver).await;

    // alice opens the form from the navigation.
    log_in(&c, &server, "alice").await;
    c.find(Locator::LinkText("New test"))
        .await
        .expect("a New test link")
        .click()
        .await
        .expect("click");
    wait_for_answer(&c, "Submit test").await;
    set(&c, "tests_repo", "https://github.com/alice/Stockfish").await;
    set(&c, "new_tag", "my-patch").await;
    // The commits given by hand: the "Advanced" part, folded until opened.
    c.find(Locator::Css("details.advanced > summary"))
        .await
        .expect("the advanced part")
        .click()
        .await
        .expect("open it");
    set(&c, "resolved_new", &sha('b')).await;
    set(&c, "resolved_base", "not a sha").await;
    set(&c, "new_signature", "2050111").await;
    set(&c, "base_signature", "2050811").await;
    set(&c, "run-info", "Simplify the king danger term").await;
    submit_test(&c).await;

    // Refused: the message sits next to the field, and the typed values are still there.
    let text = wait_for_answer(&c, "The test was not submitted").await;
    assert!(
        text.contains("The base commit must be a 40-digit hexadecimal commit SHA"),
        "{text}"
    );
    let error = c
        .find(Locator::Css("#error-resolved_base"))
        .await
        .expect("the error next to the field");
    assert!(error.text().await.expect("text").contains("40-digit"));
    assert_eq!(value_of(&c, "new_tag").await, "my-patch");
    assert_eq!(value_of(&c, "resolved_base").await, "not a sha");
    screenshot(&c, "submit_refused").await;

    // Corrected, the form warns that the test has no nets (none given, none read: GitHub
    // is not reachable) and creates nothing until "Create without nets" is pressed.
    set(&c, "resolved_base", &sha('a')).await;
    submit_test(&c).await;
    wait_for_answer(&c, "The test was not created yet").await;
    let warning = c
        .find(Locator::Css("#warning-new_nets"))
        .await
        .expect("the warning at the test nets");
    assert!(warning.is_displayed().await.expect("displayed?"));
    assert!(warning.text().await.expect("text").contains("No test nets"));
    assert_eq!(value_of(&c, "resolved_base").await, sha('a'));
    screenshot(&c, "submit_no_nets").await;
    let confirm = c
        .find(Locator::Css("button[name=\"confirm_no_nets\"]"))
        .await
        .expect("the Create without nets button");
    assert!(confirm.is_displayed().await.expect("displayed?"));
    confirm.click().await.expect("click Create without nets");
    wait_to_leave(&c, "/tests/run").await;
    let url = c.current_url().await.expect("url");
    let run = url
        .path()
        .strip_prefix("/tests/view/")
        .unwrap_or_else(|| panic!("a run page: {url}"))
        .to_string();
    let text = body_text(&c).await;
    assert!(text.contains("my-patch vs master"), "{text}");
    screenshot(&c, "submitted_run").await;
    let (status, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["approved"], false);
    assert_eq!(v["args"]["info"], "Simplify the king danger term");

    // The approver approves it from the run page.
    submit(&c, "form[action=\"/logout\"]").await;
    wait_for_answer(&c, "Register").await;
    log_in(&c, &server, "boss").await;
    c.goto(&server.url(&format!("/tests/view/{run}")))
        .await
        .expect("run page");
    submit(&c, "form[action=\"/tests/approve\"]").await;
    wait_to_leave(&c, &format!("/tests/view/{run}")).await;
    wait_for_answer(&c, &format!("Run {run} approved")).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (_, v) = server.get_json(&format!("/api/get_run/{run}")).await;
        if v["approved"] == true {
            assert_eq!(v["approver"], "boss");
            break;
        }
        assert!(Instant::now() < deadline, "the run was never approved: {v}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    screenshot(&c, "approved_dashboard").await;
    c.close().await.expect("close the browser");
}

#[tokio::test]
async fn submit_a_test_by_branch_name_in_chromium() {
    let fake = crate::fake_github::FakeGithub::start().await;
    let server = TestServer::start_with(
        crate::harness::Opts::new()
            .set("github_api_url", fake.api_url())
            .set("github_raw_url", fake.raw_url())
            .set("github_token", fake.token()),
    )
    .await;
    add_user(&server, "alice", &[]);
    {
        let store = crate::harness::open_store(&server.data_dir).expect("store");
        for name in ["nn-1c0000000000.nnue", "nn-37f18f62d772.nnue"] {
            let doc = serde_json::json!({"_id": name, "name": name, "user": "alice"});
            store
                .put(shoal::store::Collection::Nns, doc.as_object().expect("doc"))
                .expect("record the net");
        }
    }
    let driver = start_driver().await;
    let c = browser(&driver).await;
    log_in(&c, &server, "alice").await;
    c.goto(&server.url("/tests/run")).await.expect("the form");
    wait_for_answer(&c, "Submit test").await;

    // SPRT is chosen: the SPSA fields are hidden, the bounds shown (no JavaScript needed).
    let shown = |css: &'static str| {
        let c = c.clone();
        async move {
            c.find(Locator::Css(css))
                .await
                .expect(css)
                .is_displayed()
                .await
                .expect("displayed?")
        }
    };
    assert!(shown("select[name=\"bounds\"]").await);
    assert!(!shown("textarea[name=\"spsa_raw_params\"]").await);
    assert!(
        !shown("input[name=\"resolved_new\"]").await,
        "Advanced is folded"
    );

    set(&c, "tests_repo", "https://github.com/dev-one/Stockfish").await;
    set(&c, "new_tag", "lmr-tweak").await;
    screenshot(&c, "submit_by_branch").await;
    submit_test(&c).await;
    wait_to_leave(&c, "/tests/run").await;
    let url = c.current_url().await.expect("url");
    let run = url
        .path()
        .strip_prefix("/tests/view/")
        .unwrap_or_else(|| panic!("a run page: {url}"))
        .to_string();
    let (status, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v["args"]["resolved_new"],
        "aaaa000000000000000000000000000000000001"
    );
    assert_eq!(v["args"]["new_signature"], "1893224");
    assert_eq!(v["args"]["msg_new"], "Tweak LMR reduction");

    // The diff, once kept, is on the run page.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        c.goto(&server.url(&format!("/tests/view/{run}")))
            .await
            .expect("run page");
        let text = body_text(&c).await;
        if text.contains("View on GitHub") && text.contains("src/search.cpp") {
            break;
        }
        assert!(Instant::now() < deadline, "no diff on the run page: {text}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    screenshot(&c, "run_with_diff").await;
    c.close().await.expect("close the browser");
}

/// Presses the form's Submit test button at its bottom (the one at its top is the same).
async fn submit_test(c: &fantoccini::Client) {
    let buttons = c
        .find_all(fantoccini::Locator::Css("form.run-form button.submit-test"))
        .await
        .expect("the Submit buttons");
    assert_eq!(buttons.len(), 2, "Submit on top and at the bottom");
    buttons[1].click().await.expect("click Submit");
}

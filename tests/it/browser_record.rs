//! Browser test of the record and of user administration in real Chromium (helpers from
//! `browser.rs`): an approver logs in, reads the action log (filtering it by event kind),
//! follows the "Users (1)" link to the pending signup and accepts it; the accepted user can
//! then log in, and the log shows the acceptance; then the contributors and the profile.
//! Screenshots go to `target/screenshots/`.

use fantoccini::Locator;

use crate::browser::{
    body_text, browser, fill, screenshot, start_driver, submit, wait_for_answer, wait_to_leave,
};
use crate::fleet::{PASSWORD, add_user, approve, create_run, fixed_args, user_cli};
use crate::harness::TestServer;
use crate::ui_users::login_eventually;

#[tokio::test]
async fn an_approver_reads_the_action_log_and_accepts_a_pending_user() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    add_user(&server, "carol", &["--email", "carol@example.org"]);
    user_cli(&server, &["set", "carol", "--pending"]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    let driver = start_driver().await;
    let c = browser(&driver).await;

    // Log in as the approver.
    c.goto(&server.url("/login")).await.expect("login page");
    fill(&c, "username", "boss").await;
    fill(&c, "password", PASSWORD).await;
    submit(&c, "main form").await;
    wait_to_leave(&c, "/login").await;

    // The action log: the run's creation and approval, newest first.
    c.goto(&server.url("/actions")).await.expect("actions page");
    let text = wait_for_answer(&c, "matching actions").await;
    assert!(text.contains("approve_run"), "{text}");
    assert!(text.contains("new_run"), "{text}");
    // The sidebar shows the pending signup to the approver.
    assert!(text.contains("Users (1)"), "{text}");
    screenshot(&c, "actions").await;
    // Filter by event kind with the form (no JavaScript involved).
    c.find(Locator::Css("select[name=\"action\"]"))
        .await
        .expect("the event select")
        .select_by_value("new_run")
        .await
        .expect("select new_run");
    submit(&c, "form.filters").await;
    wait_for_answer(&c, "Showing 1 of 1 matching action").await;
    assert!(
        c.current_url()
            .await
            .expect("url")
            .as_str()
            .contains("action=new_run")
    );

    // Users (1) → the pending list → carol's page → Accept.
    c.find(Locator::LinkText("Users (1)"))
        .await
        .expect("the Users link")
        .click()
        .await
        .expect("click Users");
    let text = wait_for_answer(&c, "carol").await;
    assert!(text.contains("Pending"), "{text}");
    screenshot(&c, "user_management").await;
    c.find(Locator::LinkText("carol"))
        .await
        .expect("carol's link")
        .click()
        .await
        .expect("click carol");
    wait_for_answer(&c, "User Management").await;
    screenshot(&c, "user_pending").await;
    c.find(Locator::Css("#accept"))
        .await
        .expect("the Accept button")
        .click()
        .await
        .expect("click Accept");
    let text = wait_for_answer(&c, "Accepted user carol").await;
    assert!(
        text.contains("Block"),
        "an accepted user can be blocked: {text}"
    );
    screenshot(&c, "user_accepted").await;

    // carol logs in now; the log shows who accepted her.
    login_eventually(&server, "carol", PASSWORD).await;
    c.goto(&server.url("/actions?action=accept_user"))
        .await
        .expect("actions page");
    let text = wait_for_answer(&c, "accept_user").await;
    assert!(text.contains("boss") && text.contains("carol"), "{text}");
    assert!(text.contains("accepted"), "{text}");
    let body = body_text(&c).await;
    assert!(body.contains("Showing 1 of 1"), "{body}");
    screenshot(&c, "actions_accept_user").await;
    // This month's contributors (alice submitted a test, not finished yet) and the
    // approver's own profile.
    c.goto(&server.url("/contributors/monthly"))
        .await
        .expect("contributors");
    let text = wait_for_answer(&c, "Tests submitted").await;
    assert!(text.contains("alice"), "{text}");
    screenshot(&c, "contributors").await;
    c.goto(&server.url("/user")).await.expect("profile");
    wait_for_answer(&c, "Machine Limit").await;
    screenshot(&c, "profile").await;
    c.close().await.expect("close the browser");
}

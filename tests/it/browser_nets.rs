//! A browser test of the net upload in real Chromium (the helpers of `browser.rs`): a user
//! logs in, chooses a net file in the `/upload` form, ticks the licence box and uploads; the
//! browser lands on `/nns`, which lists the net, and the net downloads intact. Screenshots of
//! the form and the list go under `target/screenshots/`.

use fantoccini::Locator;
use sha2::{Digest, Sha256};

use crate::browser::{
    browser, fill, screenshot, start_driver, submit, wait_for_text, wait_to_leave,
};
use crate::fleet::{PASSWORD, add_user};
use crate::harness::TestServer;
use crate::ui_nets::net;

#[tokio::test]
async fn upload_a_net_through_the_form_and_see_it_listed() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    let (bytes, name) = net(9, 50_000);
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join(&name);
    std::fs::write(&file, &bytes).expect("net file");

    let driver = start_driver().await;
    let c = browser(&driver).await;
    c.goto(&server.url("/login")).await.expect("login page");
    fill(&c, "username", "alice").await;
    fill(&c, "password", PASSWORD).await;
    submit(&c, "main form").await;
    wait_to_leave(&c, "/login").await;

    // The top bar links to the upload form.
    c.find(Locator::LinkText("NN upload"))
        .await
        .expect("the NN upload link")
        .click()
        .await
        .expect("click");
    wait_for_text(&c, "Neural network upload").await;
    c.find(Locator::Css("input[name=\"network\"]"))
        .await
        .expect("file input")
        .send_keys(&file.to_string_lossy())
        .await
        .expect("choose the file");
    c.find(Locator::Css("#upload input[type=\"checkbox\"]"))
        .await
        .expect("licence box")
        .click()
        .await
        .expect("tick");
    screenshot(&c, "upload").await;
    submit(&c, "#upload").await;
    wait_to_leave(&c, "/upload").await;
    let text = wait_for_text(&c, &name).await;
    assert!(text.contains("alice"), "{text}");
    assert_eq!(
        c.current_url().await.expect("url").path(),
        "/nns",
        "the upload lands on the list"
    );
    screenshot(&c, "nns").await;

    // The listed link downloads the net intact.
    let href = c
        .find(Locator::Css("td.net a"))
        .await
        .expect("net link")
        .attr("href")
        .await
        .expect("href");
    assert_eq!(href.as_deref(), Some(format!("/api/nn/{name}").as_str()));
    let got = crate::nets_store::download_as_worker(&server, &name).await;
    assert_eq!(Sha256::digest(&got), Sha256::digest(&bytes));
    c.close().await.expect("close");
}

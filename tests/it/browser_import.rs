//! The first login of a user moved from Fishtest, in real Chromium (`browser.rs`'s driver):
//! the dump in `tests/data/fishtest-db/` imported, the user's Fishtest password typed into the
//! login page once, and the browser lands logged in and stays so on the next page. On the
//! suite's store (SQLite: the login moves the plaintext to its hash; MongoDB when the suite
//! runs on it) and on one MongoDB database shared with Fishtest, where nothing is moved until
//! `shoal user finalize-passwords` (and after it, a first login lands logged in too).

use fantoccini::Client;

use crate::browser::{body_text, browser, fill, screenshot, start_driver, submit, wait_to_leave};
use crate::harness::{Opts, TestServer};

/// Logs in once through the login page and checks that the browser is logged in as `user`
/// on the page it lands on and on the next one.
async fn first_login_lands_logged_in(c: &Client, server: &TestServer, user: &str, pw: &str) {
    c.goto(&server.url("/login")).await.expect("login page");
    fill(c, "username", user).await;
    fill(c, "password", pw).await;
    submit(c, "main form").await;
    wait_to_leave(c, "/login").await;
    let landed = body_text(c).await;
    screenshot(c, &format!("first-login-{user}")).await;
    assert!(
        landed.contains("Logout") && landed.contains(user),
        "{user}'s first login did not land logged in:\n{landed}"
    );
    c.goto(&server.url("/tests")).await.expect("next page");
    let next = body_text(c).await;
    assert!(
        next.contains("Logout") && next.contains(user),
        "{user} logged out on the next page:\n{next}"
    );
}

#[tokio::test]
async fn an_imported_user_logs_in_once_and_is_logged_in() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let (ok, _, err) = crate::fishtest_db::import(&data, &[]);
    assert!(ok, "import: {err}");
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    first_login_lands_logged_in(&c, &server, "quarkling", "amber-ember-6081").await;
    if !crate::harness::on_mongodb() {
        // The login moved the plaintext to its hash: the session is the upgraded user's.
        let store = crate::harness::open_store(&server.data_dir).expect("open");
        let u = store
            .find(
                shoal::store::Collection::Users,
                &shoal::store::Query::new().with(shoal::store::Cond::Eq(
                    "username".into(),
                    serde_json::json!("quarkling"),
                )),
            )
            .expect("find");
        assert!(u[0].get("password").is_none(), "{:?}", u[0]);
        assert!(u[0]["password_hash"].is_string(), "{:?}", u[0]);
    }
    c.close().await.expect("close");
}

#[tokio::test]
async fn beside_fishtest_a_first_login_lands_logged_in_before_and_after_finalize() {
    let uri = crate::mongo::fresh_uri("first_login");
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let dump = crate::beside_fishtest::dump_dir();
    let (ok, _, err) = crate::beside_fishtest::shoal(
        &data,
        &uri,
        &["import", "--fishtest", dump.to_str().expect("path")],
    );
    assert!(ok, "import: {err}");
    let server = TestServer::start_with(
        Opts::new()
            .set("store", "mongodb")
            .set("mongodb_uri", &uri)
            .data_dir(&data),
    )
    .await;
    let driver = start_driver().await;
    let c = browser(&driver).await;
    first_login_lands_logged_in(&c, &server, "quarkling", "amber-ember-6081").await;
    let doc = crate::beside_fishtest::user_doc(&uri, "quarkling").await;
    assert_eq!(doc.get_str("password").ok(), Some("amber-ember-6081"));
    assert!(!doc.contains_key("password_hash"), "{doc}");
    c.close().await.expect("close");

    // The trial ends: the plaintext goes; a first login after it lands logged in too.
    let (ok, out, err) =
        crate::beside_fishtest::shoal(&data, &uri, &["user", "finalize-passwords"]);
    assert!(ok, "finalize: {out} {err}");
    let c = browser(&driver).await;
    first_login_lands_logged_in(&c, &server, "fernhollow", "cedar-cedar-4264").await;
    c.close().await.expect("close");
}

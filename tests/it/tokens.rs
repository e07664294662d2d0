//! API tokens through real HTTP: made at `/user/tokens` (shown once, never stored in clear),
//! used as `Authorization: Bearer` on create_run (and whoami), refused when unknown, revoked,
//! read-only on a change, or when the owner is blocked; logged in the action log and counted
//! against the rate scope `api_token`.

use serde_json::{Value, json};

use crate::fleet::{PASSWORD, add_user, fixed_args, user_cli};
use crate::harness::{Opts, TestServer};
use crate::ui_users::{session, stored_actions};
use crate::web::{Browser, Page};

/// The text of `<code id="{id}">…</code>` on a page.
pub fn code_of(page: &Page, id: &str) -> String {
    let mark = format!("<code id=\"{id}\">");
    let at = page
        .body
        .find(&mark)
        .unwrap_or_else(|| panic!("no {id} on the page: {}", page.body));
    let rest = &page.body[at + mark.len()..];
    rest[..rest.find("</code>").expect("end of code")].to_string()
}

/// Makes a token named `name` on `b`'s tokens page; returns it.
async fn make_token(b: &mut Browser<'_>, name: &str, read_only: bool) -> String {
    let token = b.get("/user/tokens").await.csrf();
    let mut form = vec![
        ("name", name),
        ("password", PASSWORD),
        ("csrf_token", token.as_str()),
    ];
    if read_only {
        form.push(("read_only", "1"));
    }
    let page = b.post("/user/tokens", &form).await;
    assert_eq!(page.status, 200, "{}", page.body);
    let secret = code_of(&page, "new-token");
    assert!(secret.starts_with("shoal_"), "{secret}");
    secret
}

/// The table row of the token listed under `name`.
fn row_of<'p>(page: &'p Page, name: &str) -> &'p str {
    page.body
        .split("<tr>")
        .find(|r| r.contains(&format!("<td>{name}</td>")))
        .unwrap_or_else(|| panic!("no row {name}: {}", page.body))
}

/// The `token_id` of the token listed under `name`.
fn token_id_of(page: &Page, name: &str) -> String {
    let row = row_of(page, name);
    let mark = "name=\"token_id\" value=\"";
    let rest = &row[row.find(mark).expect("token_id") + mark.len()..];
    rest[..rest.find('"').expect("end")].to_string()
}

async fn call(
    server: &TestServer,
    method: reqwest::Method,
    path: &str,
    bearer: Option<&str>,
    body: Option<Value>,
) -> (u16, Value) {
    let mut req = server.client.request(method, server.url(path));
    if let Some(t) = bearer {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    (status, r.json().await.unwrap_or(Value::Null))
}

async fn create_with(server: &TestServer, token: &str) -> (u16, Value) {
    let body = json!({"args": fixed_args(20_000)});
    call(
        server,
        reqwest::Method::POST,
        "/api/create_run",
        Some(token),
        Some(body),
    )
    .await
}

/// Every document of shoal's own key-value collection, as text.
fn kvstore_text(server: &TestServer) -> String {
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    let docs = store
        .find(
            shoal::store::Collection::ShoalKv,
            &shoal::store::Query::new(),
        )
        .expect("find");
    serde_json::to_string(&docs).expect("json")
}

#[tokio::test]
async fn a_token_creates_a_run_until_revoked_or_its_owner_is_blocked() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    let (mut b, csrf) = session(&server, Some("alice")).await;

    // The profile links to the page; anonymous visitors are sent to log in; no CSRF, no token.
    assert!(b.get("/user").await.body.contains("href=\"/user/tokens\""));
    let anon = Browser::new(&server).get("/user/tokens").await;
    assert_eq!(anon.status, 302);
    assert!(anon.location.starts_with("/login"), "{}", anon.location);
    let forged = b.post("/user/tokens", &[("name", "x")]).await;
    assert_eq!(forged.status, 403);
    assert!(b.get("/user/tokens").await.body.contains("No tokens yet"));

    let secret = make_token(&mut b, "ci script", false).await;
    assert!(row_of(&b.get("/user/tokens").await, "ci script").contains("Never"));
    // Shown once: the list names it but never shows it again.
    let listed = b.get("/user/tokens").await;
    assert!(
        listed.body.contains("<td>ci script</td>"),
        "{}",
        listed.body
    );
    assert!(!listed.body.contains(&secret));
    // Stored as its SHA-256, never in clear.
    let kv = kvstore_text(&server);
    assert!(!kv.contains(&secret));
    assert!(!kv.contains(secret.trim_start_matches("shoal_")));
    let hash = hex::encode(<sha2::Sha256 as sha2::Digest>::digest(secret.as_bytes()));
    assert!(kv.contains(&format!("api_token:{hash}")), "{kv}");

    // The token creates a run as its owner, with no password in the body.
    let (status, v) = create_with(&server, &secret).await;
    assert_eq!(status, 200, "{v}");
    let run_id = v["run_id"].as_str().expect("run_id").to_string();
    let (_, run) = server.get_json(&format!("/api/get_run/{run_id}")).await;
    assert_eq!(run["args"]["username"], "alice", "{run}");
    let (status, who) = call(
        &server,
        reqwest::Method::GET,
        "/api/whoami",
        Some(&secret),
        None,
    )
    .await;
    assert_eq!(status, 200, "{who}");
    assert_eq!(who["username"], "alice");
    assert_eq!(who["token"], "ci script");
    assert_eq!(who["read_only"], false);
    // The password way keeps working; both at once is refused.
    let (status, v) = server
        .post_json(
            "/api/create_run",
            &json!({"username": "alice", "password": PASSWORD, "args": fixed_args(20_000)}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let both = json!({"username": "alice", "password": PASSWORD, "args": fixed_args(20_000)});
    let (status, v) = call(
        &server,
        reqwest::Method::POST,
        "/api/create_run",
        Some(&secret),
        Some(both),
    )
    .await;
    assert_eq!(status, 400, "{v}");
    // Last used is shown ("Never" before).
    let listed = b.get("/user/tokens").await;
    assert!(
        !row_of(&listed, "ci script").contains("Never"),
        "{}",
        listed.body
    );

    // Unknown, malformed: 401 in the API's error shape.
    let (status, v) = create_with(&server, "shoal_0000").await;
    assert_eq!(status, 401, "{v}");
    assert!(
        v["error"].as_str().is_some() && v.get("duration").is_some(),
        "{v}"
    );
    let r = server
        .client
        .post(server.url("/api/create_run"))
        .header("authorization", "Basic YWxpY2U6eA==")
        .json(&json!({"args": fixed_args(20_000)}))
        .send()
        .await
        .expect("request");
    assert_eq!(r.status().as_u16(), 401);

    // A read-only token reads but changes nothing.
    let ro = make_token(&mut b, "reader", true).await;
    let (status, v) = create_with(&server, &ro).await;
    assert_eq!(status, 403, "{v}");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("read-only")),
        "{v}"
    );
    let (status, who) = call(
        &server,
        reqwest::Method::GET,
        "/api/whoami",
        Some(&ro),
        None,
    )
    .await;
    assert_eq!(
        (status, who["read_only"].clone()),
        (200, json!(true)),
        "{who}"
    );

    // Revoked: 401 at once, and gone from the list.
    let id = token_id_of(&b.get("/user/tokens").await, "ci script");
    let done = b
        .post(
            "/user/tokens/revoke",
            &[("token_id", id.as_str()), ("csrf_token", csrf.as_str())],
        )
        .await;
    assert_eq!(done.status, 302, "{}", done.body);
    let (status, v) = create_with(&server, &secret).await;
    assert_eq!(status, 401, "{v}");
    assert!(
        !b.get("/user/tokens")
            .await
            .body
            .contains("<td>ci script</td>")
    );

    // A blocked owner's tokens stop at once (the owner is read on every use).
    let fresh = make_token(&mut b, "another", false).await;
    assert_eq!(create_with(&server, &fresh).await.0, 200);
    user_cli(&server, &["set", "alice", "--block"]);
    let (status, v) = create_with(&server, &fresh).await;
    assert_eq!(status, 401, "{v}");
    let (status, _) = call(
        &server,
        reqwest::Method::GET,
        "/api/whoami",
        Some(&ro),
        None,
    )
    .await;
    assert_eq!(status, 401);

    // The action log tells who made, used and revoked which token.
    let messages: Vec<String> = stored_actions(&server, "api_token")
        .iter()
        .map(|a| {
            assert_eq!(a["username"], "alice", "{a}");
            a["message"].as_str().unwrap_or_default().to_string()
        })
        .collect();
    for expected in [
        "created read-write token \"ci script\"",
        "token \"ci script\" used for create_run",
        "created read-only token \"reader\"",
        "token \"reader\" used for whoami",
        "revoked token \"ci script\"",
    ] {
        assert!(
            messages.iter().any(|m| m == expected),
            "{expected}: {messages:?}"
        );
    }
    assert!(
        !serde_json::to_string(&stored_actions(&server, "api_token"))
            .expect("json")
            .contains(&fresh)
    );
}

#[tokio::test]
async fn token_use_is_rate_limited_per_owner() {
    let limits =
        r#"[{kind = "rate", key = "user", scope = "api_token", max = 2, window_s = 3600}]"#;
    let server = TestServer::start_with(Opts::new().set("limits", limits)).await;
    add_user(&server, "alice", &[]);
    let (mut b, _) = session(&server, Some("alice")).await;
    let one = make_token(&mut b, "one", true).await;
    let two = make_token(&mut b, "two", true).await;
    let whoami = |t: String| {
        let server = &server;
        async move { call(server, reqwest::Method::GET, "/api/whoami", Some(&t), None).await }
    };
    assert_eq!(whoami(one.clone()).await.0, 200);
    assert_eq!(whoami(two.clone()).await.0, 200);
    // The third use by the same owner, whichever token: 429 with Retry-After's shape.
    let (status, v) = whoami(one).await;
    assert_eq!(status, 429, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("rate limit")),
        "{v}"
    );
}

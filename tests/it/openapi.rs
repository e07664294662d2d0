//! `/api/openapi.json` against the router, both ways, through real HTTP; `/api/rate_limit`'s
//! shape; the `/rate_limits` page and its `/rate_limits/server` fragment.
//!
//! The router cannot list its routes, so the two directions are checked so:
//! - document → router: every documented path and method is requested on a live server and
//!   must be served (not the fallback's `{"detail": "Not Found"}`, not a 405), and every
//!   method the document does not name for that path must be a 405;
//! - router → document: every route declared in `src/` (an axum route is declared with a
//!   literal path: `.route("/api/…", get(…))`) under `/api` must be in the document with its
//!   methods, and is requested too, which checks the scan against the live router. Only the
//!   debug routes (`src/http/debug.rs`, off unless `debug_endpoints` is set) are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use serde_json::Value;

use crate::harness::TestServer;
use crate::web::Browser;

const METHODS: [&str; 5] = ["get", "post", "put", "delete", "patch"];

async fn document(server: &TestServer) -> Value {
    let r = reqwest::get(server.url("/api/openapi.json"))
        .await
        .expect("GET");
    assert_eq!(r.status().as_u16(), 200);
    let ct = r.headers()["content-type"].to_str().unwrap().to_string();
    assert!(ct.starts_with("application/json"), "{ct}");
    r.json().await.expect("the document is JSON")
}

/// The documented routes: path → methods.
fn documented(doc: &Value) -> BTreeMap<String, BTreeSet<String>> {
    doc["paths"]
        .as_object()
        .expect("paths")
        .iter()
        .map(|(path, item)| {
            let methods = item
                .as_object()
                .expect("path item")
                .keys()
                .filter(|k| METHODS.contains(&k.as_str()))
                .cloned()
                .collect();
            (path.clone(), methods)
        })
        .collect()
}

/// The `/api` routes declared in `src/`: path → methods (the method routers named in the
/// `.route(…)` call, `get(…)` and chained `.post(…)` alike).
fn declared() -> BTreeMap<String, BTreeSet<String>> {
    let route = regex::Regex::new(r#"\.route\(\s*"(/api[^"]*)"\s*,"#).unwrap();
    let method = regex::Regex::new(r"\b(get|post|put|delete|patch)\(").unwrap();
    let mut found: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = Vec::new();
    collect_rs(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src"),
        &mut files,
    );
    for file in files {
        if file.ends_with("http/debug.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&file).unwrap();
        for m in route.captures_iter(&text) {
            let start = m.get(0).unwrap().end();
            // The call's arguments: up to the parenthesis that closes `.route(`.
            let mut depth = 1;
            let mut end = start;
            for (i, c) in text[start..].char_indices() {
                match c {
                    '(' => depth += 1,
                    ')' => depth -= 1,
                    _ => {}
                }
                if depth == 0 {
                    end = start + i;
                    break;
                }
            }
            let mut methods: BTreeSet<String> = method
                .captures_iter(&text[start..end])
                .map(|c| c[1].to_string())
                .collect();
            // `get(a).post(b)` chains inside the call: the arguments hold every method.
            assert!(
                !methods.is_empty(),
                "{}: no method for {}",
                file.display(),
                &m[1]
            );
            found
                .entry(m[1].to_string())
                .or_default()
                .append(&mut methods);
        }
    }
    found
}

fn collect_rs(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect_rs(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// A concrete URL for a templated path: ids as 24 hex digits, other parameters as `0`.
fn concrete(path: &str) -> String {
    path.replace("{id}", "0123456789abcdef01234567")
        .replace("{tid}", "0")
        .replace("{name}", "0")
}

/// Requests `method path` (a POST with an empty JSON object): (status, JSON body or null).
async fn probe(
    client: &reqwest::Client,
    server: &TestServer,
    method: &str,
    path: &str,
) -> (u16, Value) {
    let url = server.url(&concrete(path));
    let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    let mut req = client.request(method.clone(), url);
    if method != reqwest::Method::GET {
        req = req.header("content-type", "application/json").body("{}");
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let ct = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = if ct.starts_with("application/json") {
        r.json().await.unwrap_or(Value::Null)
    } else {
        Value::Null
    };
    (status, body)
}

/// Whether the router served the request: neither the fallback's 404 nor a 405, and no
/// server error (a 5xx is a route that exists but failed, which a probe must not pass).
fn served(status: u16, body: &Value) -> bool {
    status != 405 && status < 500 && !(status == 404 && body.get("detail").is_some())
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

#[tokio::test]
async fn the_document_is_openapi_3_1_and_every_reference_resolves() {
    let server = TestServer::start().await;
    let doc = document(&server).await;
    let version = doc["openapi"].as_str().expect("openapi");
    assert!(version.starts_with("3.1."), "{version}");
    assert_eq!(doc["info"]["title"], "shoal");
    assert!(
        doc.get("duration").is_none(),
        "the document is not an API reply"
    );
    let schemas = doc["components"]["schemas"].as_object().expect("schemas");
    // Every `$ref` names a schema of the document.
    let text = doc.to_string();
    let reference = regex::Regex::new(r##""\$ref":"#/components/schemas/([^"]+)""##).unwrap();
    let mut refs = 0;
    for c in reference.captures_iter(&text) {
        refs += 1;
        assert!(schemas.contains_key(&c[1]), "unresolved $ref {}", &c[1]);
    }
    assert!(refs > 20, "{refs} references");
    // Every operation has a 200 (the net download: Fishtest's 302) and a unique operationId;
    // bodies are typed.
    let mut ids = BTreeSet::new();
    for (path, methods) in documented(&doc) {
        for m in methods {
            let op = &doc["paths"][&path][&m];
            let success = if path == "/api/nn/{name}" {
                "302"
            } else {
                "200"
            };
            assert!(
                op["responses"][success].is_object(),
                "{m} {path}: no {success}"
            );
            let id = op["operationId"].as_str().expect("operationId").to_string();
            assert!(ids.insert(id.clone()), "duplicate operationId {id}");
            if m == "post" {
                assert!(op["requestBody"].is_object(), "{m} {path}: no request body");
            }
        }
    }
    // The worker's body is strict and names worker_info's 16 keys.
    let wr = &schemas["WorkerRequest"];
    assert_eq!(wr["additionalProperties"], false);
    assert_eq!(
        schemas["WorkerInfo"]["properties"]
            .as_object()
            .unwrap()
            .len(),
        16
    );
    // Binary downloads carry their content types.
    let pgn = &doc["paths"]["/api/pgn/{name}"]["get"]["responses"]["200"]["content"];
    assert!(pgn["application/x-chess-pgn"].is_object(), "{pgn}");
    // A net download is Fishtest's redirect to the net store.
    let nn = &doc["paths"]["/api/nn/{name}"]["get"]["responses"];
    assert!(nn["302"].is_object() && nn["200"].is_null(), "{nn}");
    let run_pgns = &doc["paths"]["/api/run_pgns/{name}"]["get"]["responses"]["200"]["content"];
    assert!(run_pgns["application/gzip"].is_object(), "{run_pgns}");
}

#[tokio::test]
async fn every_documented_route_is_served_and_no_other_method() {
    // GitHub answering, so /api/rate_limit is served (a 5xx is not).
    let (_github, server) = with_fake_github().await;
    let doc = documented(&document(&server).await);
    let client = client();
    assert!(doc.len() >= 23, "{} paths", doc.len());
    for (path, methods) in &doc {
        for m in METHODS {
            let (status, body) = probe(&client, &server, m, path).await;
            if methods.contains(m) {
                assert!(served(status, &body), "{m} {path}: {status} {body}");
            } else {
                assert_eq!(
                    status, 405,
                    "{m} {path} is served but not documented: {body}"
                );
            }
        }
    }
    // The probe tells a served route from the fallback.
    let (status, body) = probe(&client, &server, "get", "/api/no_such_route").await;
    assert!(!served(status, &body), "{status} {body}");
}

#[tokio::test]
async fn every_routed_api_path_is_documented() {
    // GitHub answering, so /api/rate_limit is served (a 5xx is not).
    let (_github, server) = with_fake_github().await;
    let doc = documented(&document(&server).await);
    let routes = declared();
    let client = client();
    // The scan found the router's routes: each is live on the server.
    assert!(routes.len() >= 23, "{routes:?}");
    for (path, methods) in &routes {
        for m in methods {
            let (status, body) = probe(&client, &server, m, path).await;
            assert!(
                served(status, &body),
                "{m} {path} (from src/): {status} {body}"
            );
        }
    }
    assert_eq!(
        routes, doc,
        "the router's /api routes (left) and the document's paths (right) differ: annotate \
         the handler with #[utoipa::path] and list it in src/http/api/openapi.rs"
    );
}

/// A server pointed at a GitHub of our own (`fake_github.rs`).
async fn with_fake_github() -> (crate::fake_github::FakeGithub, TestServer) {
    let fake = crate::fake_github::FakeGithub::start().await;
    let server = TestServer::start_with(
        crate::harness::Opts::new()
            .set("github_api_url", fake.api_url())
            .set("github_raw_url", fake.raw_url())
            .set("github_token", fake.token()),
    )
    .await;
    (fake, server)
}

#[tokio::test]
async fn rate_limit_has_fishtests_shape_with_githubs_figures() {
    let (fake, server) = with_fake_github().await;
    let (status, body) = server.get_json("/api/rate_limit").await;
    assert_eq!(status, 200, "{body}");
    let keys: BTreeSet<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        BTreeSet::from(["limit", "remaining", "reset", "resource", "used"])
    );
    let (limit, remaining, reset) = fake.quota();
    assert_eq!(body["resource"], "core");
    assert_eq!(body["limit"], limit);
    assert_eq!(body["remaining"], remaining);
    assert_eq!(body["used"], limit - remaining);
    assert_eq!(body["reset"], reset);

    // GitHub gone after it answered: 200 still, with the figures it last stated.
    drop(fake);
    tokio::time::sleep(std::time::Duration::from_millis(10_500)).await;
    let (status, later) = server.get_json("/api/rate_limit").await;
    assert_eq!(status, 200, "{later}");
    assert_eq!(later, body);

    // GitHub unreachable and never heard from: 200 with Fishtest's initial figures (5000
    // calls, all left, the window starting when the server started), as Fishtest answers.
    let before = chrono::Utc::now().timestamp();
    let server = TestServer::start().await;
    let (status, body) = server.get_json("/api/rate_limit").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["limit"], 5000, "{body}");
    assert_eq!(body["remaining"], 5000, "{body}");
    assert_eq!(body["used"], 0, "{body}");
    assert_eq!(body["resource"], "core", "{body}");
    let reset = body["reset"].as_i64().expect("reset");
    assert!(
        reset >= before - 1 && reset <= chrono::Utc::now().timestamp(),
        "{body}"
    );
    assert_eq!(body["_uninitialized"], true, "{body}");
    assert_eq!(body.as_object().map(|o| o.len()), Some(6), "{body}");
}

/// `n` requests for `/api/rate_limit` at once.
async fn get_many(server: &TestServer, n: usize) -> Vec<(u16, Value)> {
    let futures: Vec<_> = (0..n).map(|_| server.get_json("/api/rate_limit")).collect();
    futures::future::join_all(futures).await
}

#[tokio::test]
async fn rate_limit_asks_github_once_for_many_callers_and_not_again_soon_after_a_failure() {
    use crate::fake_github::Mode;
    // GitHub slow to answer: twenty callers at once share one question. (Failing at start,
    // so that no reply stated the quota yet.)
    let fake = crate::fake_github::FakeGithub::start().await;
    fake.set_mode(Mode::ServerError);
    let server = TestServer::start_with(
        crate::harness::Opts::new()
            .set("github_api_url", fake.api_url())
            .set("github_raw_url", fake.raw_url())
            .set("github_token", fake.token()),
    )
    .await;
    assert_eq!(fake.hits("/rate_limit"), 0);
    fake.set_mode(Mode::Slow(std::time::Duration::from_millis(1500)));
    for (status, body) in get_many(&server, 20).await {
        assert_eq!(status, 200, "{body}");
        assert!(body.get("_uninitialized").is_none(), "{body}");
    }
    assert_eq!(
        fake.hits("/rate_limit"),
        1,
        "one question for twenty callers"
    );

    // GitHub failing before it ever answered: Fishtest's initial figures, marked so, and no
    // new question for each caller after the failure.
    let (fake, server) = with_fake_github().await;
    fake.set_mode(Mode::ServerError);
    let (status, body) = server.get_json("/api/rate_limit").await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["_uninitialized"], true, "{body}");
    let asked = fake.hits("/rate_limit");
    assert!(asked >= 1);
    for (status, body) in get_many(&server, 20).await {
        assert_eq!(status, 200, "{body}");
        assert_eq!(body["_uninitialized"], true, "{body}");
    }
    assert_eq!(
        fake.hits("/rate_limit"),
        asked,
        "not asked again within a minute"
    );
}

#[tokio::test]
async fn rate_limits_page_and_server_fragment() {
    let (fake, server) = with_fake_github().await;
    let (_, api) = server.get_json("/api/rate_limit").await;
    let remaining = api["remaining"].as_u64().unwrap().to_string();
    let (_, _, reset) = fake.quota();
    let hms = chrono::DateTime::from_timestamp(reset, 0)
        .unwrap()
        .format("%H:%M:%S")
        .to_string();
    let mut b = Browser::new(&server);

    let p = b.get("/rate_limits").await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(p.header("content-type").starts_with("text/html"));
    assert!(p.body.contains("GitHub rate limits"));
    assert!(
        p.body
            .contains(&format!("<td id=\"server_remaining\">{remaining}</td>")),
        "{}",
        p.body
    );
    assert!(
        p.body
            .contains(&format!("<span id=\"server_reset\">{hms}</span>")),
        "{}",
        p.body
    );
    // The stand-in answers only a server with its token, which then needs no "no token" note.
    assert!(!p.body.contains("The server has no token"), "{}", p.body);
    assert!(p.body.contains("<td id=\"client_remaining\">-1</td>"));
    assert!(p.body.contains("<span id=\"client_reset\">00:00:00</span>"));
    assert!(!p.body.contains("<script>"), "no inline script");
    assert!(
        p.body.contains("href=\"/rate_limits\""),
        "the sidebar links the page"
    );

    let f = b.get("/rate_limits/server").await;
    assert_eq!(f.status, 200);
    assert_eq!(
        f.body.trim(),
        format!("{remaining}<span id=\"server_reset\" hx-swap-oob=\"true\">{hms}</span>")
    );

    // The figures are GitHub's: more calls spent there show here (after the 10 s the server
    // keeps a quota, or at once for a server that has not asked yet).
    let (status, _) = server.get_json("/api/rate_limit").await;
    assert_eq!(status, 200);
    drop(fake);

    // GitHub gone and never heard from: Fishtest's initial figures, and the page says
    // GitHub has not been reached, and why.
    let server = TestServer::start().await;
    let mut b = Browser::new(&server);
    let p = b.get("/rate_limits").await;
    assert_eq!(p.status, 200, "{}", p.body);
    assert!(
        p.body.contains("<td id=\"server_remaining\">5000</td>"),
        "{}",
        p.body
    );
    assert!(
        p.body.contains(
            "<li id=\"github_unreached\">GitHub has not been reached: GitHub could not be reached"
        ),
        "{}",
        p.body
    );
    let f = b.get("/rate_limits/server").await;
    assert_eq!(f.status, 200);
    assert!(
        f.body.trim().starts_with("5000<span id=\"server_reset\""),
        "{}",
        f.body
    );
}

//! A GitHub of our own on loopback: a real HTTP server answering in GitHub's documented shapes
//! (a commit, a commit list, a comparison as JSON or as a diff, a repository with its fork
//! `source`, raw files, `rate_limit`: the fields GitHub's REST description requires of the
//! `commit`, `commit-comparison` and `rate-limit-overview` schemas, and the identity of a
//! `full-repository`; `tests/it/github.rs` checks them) from `tests/data/github/fixture.json`. It keeps a quota
//! as GitHub does (every API reply carries `X-RateLimit-*`; a conditional request answered
//! 304 costs nothing) and can be told to fail in each of the ways GitHub fails: rate-limited,
//! a 5xx, too slow, a malformed reply, or gone altogether (`stop`).
//!
//! shoal points at it through `github_api_url` (`<base>`) and `github_raw_url` (`<base>/raw`),
//! and gives it the token it wants (`github_token` = [`FakeGithub::token`]; [`FakeGithub::opts`]
//! sets all three): an API call without `Authorization: Bearer <token>` is refused as GitHub
//! refuses bad credentials (401, "Bad credentials"), so every test that gets an answer also
//! checks that shoal sent the token. Raw files need none, as on `raw.githubusercontent.com`.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use parking_lot::Mutex;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

/// How the fake answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Normal,
    /// 403 with `x-ratelimit-remaining: 0`, as GitHub answers a spent quota.
    RateLimited,
    /// Every call a 502 (GitHub's "Server Error").
    ServerError,
    /// Every call answered after this long.
    Slow(Duration),
    /// 200 with a body that is not JSON.
    Malformed,
}

struct Inner {
    fixture: Value,
    /// The token an API call must carry.
    token: String,
    mode: Mode,
    limit: u64,
    used: u64,
    reset: i64,
    /// Requests by path (API and raw), whatever their answer.
    hits: HashMap<String, u64>,
    /// Raw files put by a test (`put_raw`), by path under the raw host: they win over the
    /// fixture's.
    raw_files: HashMap<String, Vec<u8>>,
}

#[derive(Clone)]
struct Shared(Arc<Mutex<Inner>>);

pub struct FakeGithub {
    pub addr: SocketAddr,
    token: String,
    shared: Shared,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

pub const OFFICIAL: &str = "official-stockfish/Stockfish";
pub const FORK: &str = "dev-one/Stockfish";

impl FakeGithub {
    pub async fn start() -> FakeGithub {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/data/github/fixture.json"
        );
        let fixture: Value =
            serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
        let token = format!("ghp_fake{:016x}", rand::random::<u64>());
        let shared = Shared(Arc::new(Mutex::new(Inner {
            fixture,
            token: token.clone(),
            mode: Mode::Normal,
            limit: 5000,
            used: 0,
            reset: chrono::Utc::now().timestamp() + 3600,
            hits: HashMap::new(),
            raw_files: HashMap::new(),
        })));
        let app = Router::new()
            .route("/rate_limit", get(rate_limit))
            .route("/repos/{owner}/{repo}", get(repo))
            .route("/repos/{owner}/{repo}/commits", get(commits))
            .route("/repos/{owner}/{repo}/commits/{*reference}", get(commit))
            .route("/repos/{owner}/{repo}/compare/{spec}", get(compare))
            .route("/raw/{owner}/{repo}/{sha}/{*path}", get(raw))
            .fallback(not_found)
            .with_state(shared.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async {
                    let _ = rx.await;
                })
                .await;
        });
        FakeGithub {
            addr,
            token,
            shared,
            stop: Some(tx),
            task: Some(task),
        }
    }

    /// `github_api_url`.
    pub fn api_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// `github_raw_url`.
    pub fn raw_url(&self) -> String {
        format!("http://{}/raw", self.addr)
    }

    /// The token API calls must carry (`github_token`).
    pub fn token(&self) -> String {
        self.token.clone()
    }

    /// `opts` with this GitHub's API and raw URLs and its token.
    pub fn opts(&self, opts: crate::harness::Opts) -> crate::harness::Opts {
        opts.set("github_api_url", self.api_url())
            .set("github_raw_url", self.raw_url())
            .set("github_token", self.token())
    }

    /// Serves `bytes` as the raw file `owner/repo/ref/path` (e.g. the books repository's).
    pub fn put_raw(&self, path: &str, bytes: Vec<u8>) {
        self.shared
            .0
            .lock()
            .raw_files
            .insert(format!("/raw/{path}"), bytes);
    }

    pub fn set_mode(&self, mode: Mode) {
        self.shared.0.lock().mode = mode;
    }

    /// API calls counted against the quota so far.
    pub fn used(&self) -> u64 {
        self.shared.0.lock().used
    }

    /// The quota's figures: limit, remaining, reset.
    pub fn quota(&self) -> (u64, u64, i64) {
        let s = self.shared.0.lock();
        (s.limit, s.limit.saturating_sub(s.used), s.reset)
    }

    /// Requests for a path so far (any answer; a comparison asked as a diff is counted as
    /// `<path> (diff)`).
    pub fn hits(&self, path: &str) -> u64 {
        self.shared.0.lock().hits.get(path).copied().unwrap_or(0)
    }

    /// Stops answering: the port refuses connections from now on.
    pub async fn stop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for FakeGithub {
    fn drop(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
    }
}

/// What every reply goes through: the hit counted, the mode applied, the quota charged
/// (unless `If-None-Match` matches: GitHub's 304 is free) and its headers set.
async fn answer(
    s: &Shared,
    path: String,
    headers: &HeaderMap,
    api: bool,
    reply: Option<(Value, Option<String>)>,
) -> Response {
    let (mode, token) = {
        let mut g = s.0.lock();
        *g.hits.entry(path).or_default() += 1;
        (g.mode, g.token.clone())
    };
    if api && !authorized(headers, &token) {
        return bad_credentials();
    }
    if let Mode::Slow(d) = mode {
        tokio::time::sleep(d).await;
    }
    let mut g = s.0.lock();
    let quota_headers = |g: &Inner, h: &mut HeaderMap| {
        for (k, v) in [
            ("x-ratelimit-limit", g.limit.to_string()),
            (
                "x-ratelimit-remaining",
                g.limit.saturating_sub(g.used).to_string(),
            ),
            ("x-ratelimit-used", g.used.to_string()),
            ("x-ratelimit-reset", g.reset.to_string()),
            ("x-ratelimit-resource", "core".to_string()),
        ] {
            h.insert(k, HeaderValue::from_str(&v).expect("header"));
        }
    };
    let mut out = HeaderMap::new();
    match mode {
        Mode::RateLimited if api => {
            g.used = g.limit;
            quota_headers(&g, &mut out);
            let body = json!({
                "message": "API rate limit exceeded for 127.0.0.1. (But here's the good news: Authenticated requests get a higher rate limit.)",
                "documentation_url": "https://docs.github.com/rest/overview/resources-in-the-rest-api#rate-limiting"
            });
            return (StatusCode::FORBIDDEN, out, body.to_string()).into_response();
        }
        Mode::ServerError => {
            return (StatusCode::BAD_GATEWAY, "<html>Server Error</html>").into_response();
        }
        Mode::Malformed => {
            if api {
                g.used += 1;
                quota_headers(&g, &mut out);
            }
            return (StatusCode::OK, out, "{\"sha\": ").into_response();
        }
        _ => {}
    }
    let Some((body, raw_text)) = reply else {
        if api {
            g.used += 1;
            quota_headers(&g, &mut out);
        }
        let body = json!({"message": "Not Found", "documentation_url": "https://docs.github.com/rest", "status": "404"});
        return (StatusCode::NOT_FOUND, out, body.to_string()).into_response();
    };
    let text = raw_text.unwrap_or_else(|| body.to_string());
    if body.get("__status").is_some() {
        if api {
            g.used += 1;
            quota_headers(&g, &mut out);
        }
        let status =
            StatusCode::from_u16(body["__status"].as_u64().unwrap_or(500) as u16).expect("status");
        return (status, out, body["body"].to_string()).into_response();
    }
    let etag = format!(
        "\"{}\"",
        hex::encode(&Sha256::digest(text.as_bytes())[..12])
    );
    out.insert("etag", HeaderValue::from_str(&etag).expect("etag"));
    if headers
        .get("if-none-match")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v == etag)
    {
        if api {
            quota_headers(&g, &mut out);
        }
        return (StatusCode::NOT_MODIFIED, out).into_response();
    }
    if api {
        g.used += 1;
        quota_headers(&g, &mut out);
    }
    (StatusCode::OK, out, text).into_response()
}

/// Whether a request carries the token (`Authorization: Bearer <token>`, or GitHub's older
/// `token <token>`).
fn authorized(headers: &HeaderMap, token: &str) -> bool {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            v.strip_prefix("Bearer ")
                .or_else(|| v.strip_prefix("token "))
        })
        .is_some_and(|t| t == token)
}

/// GitHub's answer to a missing or wrong token.
fn bad_credentials() -> Response {
    let body = json!({
        "message": "Bad credentials",
        "documentation_url": "https://docs.github.com/rest",
        "status": "401"
    });
    (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response()
}

fn repos(f: &Value) -> &serde_json::Map<String, Value> {
    f["repos"].as_object().expect("repos")
}

/// The repository's record, matched case-insensitively as GitHub does.
fn find_repo<'a>(f: &'a Value, owner: &str, repo: &str) -> Option<(&'a String, &'a Value)> {
    let want = format!("{owner}/{repo}").to_ascii_lowercase();
    repos(f)
        .iter()
        .find(|(k, _)| k.to_ascii_lowercase() == want)
}

/// A branch name or a (possibly short) SHA known to the repository's network.
fn resolve(f: &Value, repo: &Value, reference: &str) -> Option<String> {
    if let Some(sha) = repo["branches"].get(reference).and_then(Value::as_str) {
        return Some(sha.to_string());
    }
    if reference.len() >= 7 && reference.bytes().all(|b| b.is_ascii_hexdigit()) {
        let r = reference.to_ascii_lowercase();
        return f["commits"]
            .as_object()?
            .keys()
            .find(|k| k.starts_with(&r))
            .cloned();
    }
    None
}

/// A GitHub user as the API embeds one (`simple-user`'s fields).
fn user_json(login: &str) -> Value {
    let api = format!("https://api.github.com/users/{login}");
    json!({
        "login": login, "id": 1, "node_id": "MDQ6VXNlcjE=",
        "avatar_url": "https://avatars.githubusercontent.com/u/1?v=4", "gravatar_id": "",
        "url": api, "html_url": format!("https://github.com/{login}"),
        "followers_url": format!("{api}/followers"),
        "following_url": format!("{api}/following{{/other_user}}"),
        "gists_url": format!("{api}/gists{{/gist_id}}"),
        "starred_url": format!("{api}/starred{{/owner}}{{/repo}}"),
        "subscriptions_url": format!("{api}/subscriptions"),
        "organizations_url": format!("{api}/orgs"), "repos_url": format!("{api}/repos"),
        "events_url": format!("{api}/events{{/privacy}}"),
        "received_events_url": format!("{api}/received_events"),
        "type": "User", "user_view_type": "public", "site_admin": false,
    })
}

/// A commit in the shape of GitHub's `commit` schema (its required fields and `stats`,
/// `files`), in repository `full`.
fn commit_json(f: &Value, full: &str, sha: &str) -> Value {
    let c = &f["commits"][sha];
    let api = format!("https://api.github.com/repos/{full}");
    let who = json!({"name": "Dev", "email": "dev@example.org", "date": "2026-11-20T10:00:00Z"});
    json!({
        "url": format!("{api}/commits/{sha}"),
        "sha": sha,
        "node_id": "C_kwDOAAAAAdoAKGZha2U",
        "html_url": format!("https://github.com/{full}/commit/{sha}"),
        "comments_url": format!("{api}/commits/{sha}/comments"),
        "commit": {
            "url": format!("{api}/git/commits/{sha}"),
            "author": who,
            "committer": who,
            "message": c["message"],
            "comment_count": 0,
            "tree": {"sha": sha, "url": format!("{api}/git/trees/{sha}")},
            "verification": {"verified": false, "reason": "unsigned", "signature": null,
                             "payload": null, "verified_at": null},
        },
        "author": user_json("dev-one"),
        "committer": user_json("dev-one"),
        "parents": c["parents"].as_array().into_iter().flatten()
            .map(|p| json!({
                "sha": p,
                "url": format!("{api}/commits/{}", p.as_str().unwrap_or_default()),
                "html_url": format!("https://github.com/{full}/commit/{}", p.as_str().unwrap_or_default()),
            })).collect::<Vec<_>>(),
        "stats": {"total": 0, "additions": 0, "deletions": 0},
        "files": [],
    })
}

/// A repository in the shape GitHub's `full-repository` starts with (its identity, owner,
/// visibility and default branch; `parent` and `source` for a fork).
fn repo_json(full: &str, fork: bool) -> Value {
    let (owner, name) = full.split_once('/').unwrap_or((full, full));
    json!({
        "id": 1, "node_id": "R_kgDOAAAAAQ", "name": name, "full_name": full,
        "owner": user_json(owner), "private": false,
        "html_url": format!("https://github.com/{full}"), "description": null, "fork": fork,
        "url": format!("https://api.github.com/repos/{full}"), "default_branch": "master",
        "visibility": "public", "archived": false, "disabled": false,
    })
}

/// Every commit reachable from `sha` (itself included), newest first.
fn ancestors(f: &Value, sha: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut at = Some(sha.to_string());
    let mut seen = BTreeSet::new();
    while let Some(s) = at.take() {
        if !seen.insert(s.clone()) {
            break;
        }
        let parents = f["commits"][&s]["parents"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        out.push(s);
        at = parents.first().and_then(Value::as_str).map(str::to_string);
    }
    out
}

async fn rate_limit(State(s): State<Shared>, headers: HeaderMap) -> Response {
    let mode = {
        let mut g = s.0.lock();
        *g.hits.entry("/rate_limit".into()).or_default() += 1;
        g.mode
    };
    match mode {
        Mode::Slow(d) => tokio::time::sleep(d).await,
        Mode::ServerError => {
            return (StatusCode::BAD_GATEWAY, "<html>Server Error</html>").into_response();
        }
        _ => {}
    }
    let g = s.0.lock();
    if !authorized(&headers, &g.token) {
        return bad_credentials();
    }
    let core = json!({
        "limit": g.limit, "remaining": g.limit.saturating_sub(g.used),
        "reset": g.reset, "used": g.used
    });
    let search = json!({"limit": 30, "remaining": 30, "reset": g.reset, "used": 0});
    // Asking for the quota costs none, as on GitHub.
    axum::Json(json!({"resources": {"core": core, "search": search}, "rate": core})).into_response()
}

async fn repo(
    State(s): State<Shared>,
    Path((owner, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    let reply = {
        let g = s.0.lock();
        find_repo(&g.fixture, &owner, &name).map(|(full, r)| {
            let mut v = repo_json(full, r["fork"].as_bool().unwrap_or(false));
            if let Some(src) = r.get("source").and_then(Value::as_str) {
                v["source"] = repo_json(src, false);
                v["parent"] = repo_json(src, false);
            }
            (v, None)
        })
    };
    answer(&s, format!("/repos/{owner}/{name}"), &headers, true, reply).await
}

async fn commit(
    State(s): State<Shared>,
    Path((owner, name, reference)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let reply = {
        let g = s.0.lock();
        find_repo(&g.fixture, &owner, &name).map(|(full, r)| match resolve(&g.fixture, r, &reference) {
            Some(sha) => (commit_json(&g.fixture, full, &sha), None),
            None => (
                json!({"__status": 422, "body": {
                    "message": format!("No commit found for SHA: {reference}"),
                    "documentation_url": "https://docs.github.com/rest/commits/commits#get-a-commit",
                    "status": "422"
                }}),
                None,
            ),
        })
    };
    let path = format!("/repos/{owner}/{name}/commits/{reference}");
    answer(&s, path, &headers, true, reply).await
}

async fn commits(
    State(s): State<Shared>,
    Path((owner, name)): Path<(String, String)>,
    Query(q): Query<BTreeMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let reply = {
        let g = s.0.lock();
        find_repo(&g.fixture, &owner, &name).and_then(|(full, r)| {
            let start = q.get("sha").map(String::as_str).unwrap_or("master");
            let per_page: usize = q.get("per_page").and_then(|p| p.parse().ok()).unwrap_or(30);
            let head = resolve(&g.fixture, r, start)?;
            let list: Vec<Value> = ancestors(&g.fixture, &head)
                .iter()
                .take(per_page)
                .map(|sha| commit_json(&g.fixture, full, sha))
                .collect();
            Some((json!(list), None))
        })
    };
    answer(
        &s,
        format!("/repos/{owner}/{name}/commits"),
        &headers,
        true,
        reply,
    )
    .await
}

async fn compare(
    State(s): State<Shared>,
    Path((owner, name, spec)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let as_diff = headers
        .get("accept")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|a| a.contains("diff"));
    let reply = {
        let g = s.0.lock();
        (|| {
            let (full, r) = find_repo(&g.fixture, &owner, &name)?;
            let (base, head) = spec.split_once("...")?;
            let base = resolve(&g.fixture, r, base)?;
            let head = resolve(&g.fixture, r, head)?;
            if as_diff {
                let text = g.fixture["diffs"][format!("{base}...{head}")]
                    .as_str()
                    .map(str::to_string)
                    .unwrap_or_default();
                return Some((json!({}), Some(text)));
            }
            let of_base: BTreeSet<String> = ancestors(&g.fixture, &base).into_iter().collect();
            let of_head: BTreeSet<String> = ancestors(&g.fixture, &head).into_iter().collect();
            let ahead = of_head.difference(&of_base).count();
            let behind = of_base.difference(&of_head).count();
            // The commits of head not in base, oldest first (as GitHub lists them), and the
            // newest commit both have.
            let mut commits: Vec<Value> = ancestors(&g.fixture, &head)
                .iter()
                .filter(|c| !of_base.contains(*c))
                .map(|c| commit_json(&g.fixture, full, c))
                .collect();
            commits.reverse();
            let merge_base = ancestors(&g.fixture, &head)
                .into_iter()
                .find(|c| of_base.contains(c))
                .unwrap_or_else(|| base.clone());
            let html = format!("https://github.com/{full}/compare/{spec}");
            let status = match (ahead, behind) {
                (0, 0) => "identical",
                (_, 0) => "ahead",
                (0, _) => "behind",
                _ => "diverged",
            };
            Some((
                json!({
                    "url": format!("https://api.github.com/repos/{full}/compare/{spec}"),
                    "html_url": html,
                    "permalink_url": format!("https://github.com/{full}/compare/{base}...{head}"),
                    "diff_url": format!("{html}.diff"),
                    "patch_url": format!("{html}.patch"),
                    "base_commit": commit_json(&g.fixture, full, &base),
                    "merge_base_commit": commit_json(&g.fixture, full, &merge_base),
                    "status": status, "ahead_by": ahead, "behind_by": behind,
                    "total_commits": ahead, "commits": commits, "files": []
                }),
                None,
            ))
        })()
    };
    // A diff and a JSON comparison of the same commits are counted apart.
    let kind = if as_diff { " (diff)" } else { "" };
    let path = format!("/repos/{owner}/{name}/compare/{spec}{kind}");
    answer(&s, path, &headers, true, reply).await
}

async fn raw(
    State(s): State<Shared>,
    Path((owner, name, sha, path)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let reply = {
        let g = s.0.lock();
        find_repo(&g.fixture, &owner, &name)
            .and_then(|(_, r)| resolve(&g.fixture, r, &sha))
            .and_then(|sha| {
                g.fixture["commits"][&sha]["files"][&path]
                    .as_str()
                    .map(|t| (json!({}), Some(t.to_string())))
            })
    };
    let p = format!("/raw/{owner}/{name}/{sha}/{path}");
    let put = s.0.lock().raw_files.get(&p).cloned();
    if let Some(bytes) = put {
        *s.0.lock().hits.entry(p).or_default() += 1;
        return (StatusCode::OK, bytes).into_response();
    }
    answer(&s, p, &headers, false, reply).await
}

async fn not_found() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"message": "Not Found"})),
    )
        .into_response()
}

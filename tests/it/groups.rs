//! Test groups (issue 39, docs/test-groups.md): a group created through the API and the form,
//! refused inputs creating nothing; a worker loop reporting results moves the group's games to
//! the stronger take; a pass supersedes the other takes (neither passed nor failed, the action
//! log says so); the group's page and `get_group`; `shoal simulate-groups` keeps each take's
//! false-positive rate within its SPRT's alpha.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fake_github::FakeGithub;
use crate::fleet::{PASSWORD, Worker, add_user, approve, sha, sprt_args};
use crate::harness::{Opts, TestServer, bin, open_store, run_bin};
use crate::ui_submit::{form_fields, logged_in, post_form, with};

/// The run arguments every take shares (create_run's without `new_tag`): SPRT(elo0, elo1).
fn group_args(elo0: f64, elo1: f64) -> Value {
    let mut a = sprt_args(elo0, elo1);
    let m = a.as_object_mut().expect("object");
    for k in ["new_tag", "resolved_new", "new_signature"] {
        m.remove(k);
    }
    a
}

/// A group's arguments for a fixed number of games (not SPRT).
fn games_args() -> Value {
    let mut a = crate::fleet::fixed_args(1000);
    let m = a.as_object_mut().expect("object");
    for k in ["new_tag", "resolved_new", "new_signature"] {
        m.remove(k);
    }
    a
}

fn with_arg(mut args: Value, k: &str, v: Value) -> Value {
    args[k] = v;
    args
}

/// `n` takes given by their resolved fields.
fn takes(n: usize) -> Value {
    let letters = ['b', 'c', 'd', 'e', 'f', '1', '2', '3', '4'];
    Value::Array(
        (0..n)
            .map(|i| {
                json!({
                    "new_tag": format!("take-{}", i + 1),
                    "resolved_new": sha(letters[i]),
                    "new_signature": format!("{}", 1_234_568 + i),
                    "info": format!("take {}", i + 1),
                })
            })
            .collect(),
    )
}

async fn create_group(server: &TestServer, user: &str, body: Value) -> (u16, Value) {
    let mut body = body;
    body["username"] = json!(user);
    body["password"] = json!(PASSWORD);
    server.post_json("/api/create_group", &body).await
}

fn run_count(server: &TestServer) -> u64 {
    open_store(&server.data_dir)
        .expect("store")
        .count(shoal::store::Collection::Runs, &[])
        .expect("count")
}

async fn group(server: &TestServer, id: &str) -> Value {
    let (status, v) = server.get_json(&format!("/api/get_group/{id}")).await;
    assert_eq!(status, 200, "get_group: {v}");
    v
}

async fn tick(server: &TestServer) {
    let (status, v) = server.post_json("/debug/job/groups", &json!({})).await;
    assert_eq!(status, 200, "groups job: {v}");
}

#[tokio::test]
async fn a_group_through_the_api_its_page_and_get_group_and_refusals_create_nothing() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let before = run_count(&server);
    // Refusals, each a 400 (or 401) naming the problem; nothing created.
    let refused: Vec<(Value, u16, &str)> = vec![
        (
            json!({"args": group_args(0.0, 2.0), "takes": takes(1)}),
            400,
            "takes",
        ),
        (
            json!({"args": group_args(0.0, 2.0), "takes": takes(9)}),
            400,
            "takes",
        ),
        (json!({"args": group_args(0.0, 2.0)}), 400, "takes"),
        (
            json!({"args": sprt_args(0.0, 2.0), "takes": takes(2)}),
            400,
            "new_tag",
        ),
        (
            json!({"args": {"tc": "10+0.1"}, "takes": takes(2)}),
            400,
            "take 1",
        ),
        (
            json!({"args": group_args(0.0, 2.0), "takes": [{"new_tag": "x", "resolved_new": sha('b')}, {"new_tag": "y", "resolved_new": sha('c'), "new_signature": "12"}]}),
            400,
            "take 1",
        ),
        // Not an SPRT test (a fixed number of games): refused, named.
        (
            json!({"args": games_args(), "takes": takes(2)}),
            400,
            "SPRT tests",
        ),
        // Two takes alike (same commit, options and nets): the second is refused.
        (
            json!({"args": group_args(0.0, 2.0), "takes": [
                {"new_tag": "x", "resolved_new": sha('b'), "new_signature": "1234568"},
                {"new_tag": "y", "resolved_new": sha('b'), "new_signature": "1234568"}]}),
            400,
            "take 2: the same commit, options and nets as take 1",
        ),
        // The new side shared in args would be copied to every take: refused.
        (
            json!({"args": with_arg(group_args(0.0, 2.0), "new_signature", json!("1234568")), "takes": takes(2)}),
            400,
            "args.new_signature",
        ),
    ];
    for (body, status, word) in refused {
        let (s, v) = create_group(&server, "alice", body.clone()).await;
        assert_eq!(s, status, "{body}: {v}");
        let e = v["error"].as_str().unwrap_or_default();
        assert!(e.contains(word), "{word} in {e}");
        assert!(v.get("duration").is_some(), "{v}");
    }
    let (s, v) = server
        .post_json(
            "/api/create_group",
            &json!({"username": "alice", "password": "wrong", "args": group_args(0.0, 2.0), "takes": takes(2)}),
        )
        .await;
    assert_eq!(s, 401, "{v}");
    assert_eq!(run_count(&server), before, "a refusal created runs");
    // An unknown API token: 401, nothing created.
    let r = server
        .client
        .post(server.url("/api/create_group"))
        .header("authorization", "Bearer shoal_nosuchtoken")
        .json(&json!({"args": group_args(0.0, 2.0), "takes": takes(2)}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 401);
    assert_eq!(run_count(&server), before, "a refusal created runs");

    // A group of three: each take an ordinary run.
    let (s, v) = create_group(
        &server,
        "alice",
        json!({"args": group_args(0.0, 2.0), "takes": takes(3)}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let gid = v["group_id"].as_str().expect("group_id").to_string();
    let runs: Vec<String> = v["run_ids"]
        .as_array()
        .expect("run_ids")
        .iter()
        .map(|r| r.as_str().expect("id").to_string())
        .collect();
    assert_eq!(runs.len(), 3);
    assert_eq!(run_count(&server), before + 3);
    // Waiting for approval: the takes and the group are pending (not running), and the
    // dashboard does not list the group.
    tick(&server).await;
    let g = group(&server, &gid).await;
    assert_eq!(g["state"], "pending", "{g}");
    for r in g["runs"].as_array().expect("runs") {
        assert_eq!(r["state"], "pending", "{r}");
        assert_eq!(r["target_share"], 0.0, "{r}");
    }
    let dash = server
        .client
        .get(server.url("/tests"))
        .send()
        .await
        .expect("dashboard")
        .text()
        .await
        .expect("body");
    assert!(
        !dash.contains(&format!("href=\"/tests/group/{gid}\"")),
        "a pending group is not listed as active"
    );
    for (i, id) in runs.iter().enumerate() {
        let (s, run) = server.get_json(&format!("/api/get_run/{id}")).await;
        assert_eq!(s, 200, "{run}");
        assert_eq!(run["args"]["new_tag"], format!("take-{}", i + 1));
        assert_eq!(run["args"]["info"], format!("take {}", i + 1));
        assert_eq!(run["args"]["tc"], "10+0.1");
        approve(&server, "boss", id).await;
    }
    tick(&server).await;
    let g = group(&server, &gid).await;
    assert_eq!(g["group_id"], gid);
    assert_eq!(g["state"], "active");
    assert_eq!(g["username"], "alice");
    let listed: Vec<&str> = g["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["run_id"].as_str().expect("run_id"))
        .collect();
    assert_eq!(listed, runs.iter().map(String::as_str).collect::<Vec<_>>());
    for r in g["runs"].as_array().expect("runs") {
        assert_eq!(r["state"], "running", "{r}");
        assert_eq!(r["share"], 0.0, "{r}");
        let target = r["target_share"].as_f64().expect("target_share");
        assert!(
            (target - 1.0 / 3.0).abs() < 1e-9,
            "no games yet: equal shares {r}"
        );
    }
    // An API token works as the password does (`Authorization: Bearer`).
    let (mut b, _) = crate::ui_users::session(&server, Some("alice")).await;
    let csrf = b.get("/user/tokens").await.csrf();
    let page = b
        .post(
            "/user/tokens",
            &[
                ("name", "groups"),
                ("password", PASSWORD),
                ("csrf_token", csrf.as_str()),
            ],
        )
        .await;
    let token = crate::tokens::code_of(&page, "new-token");
    let r = server
        .client
        .post(server.url("/api/create_group"))
        .header("authorization", format!("Bearer {token}"))
        .json(&json!({"args": group_args(0.0, 2.0), "takes": takes(2)}))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 200);
    let by_token: Value = r.json().await.expect("json");
    assert_eq!(
        by_token["run_ids"].as_array().map(Vec::len),
        Some(2),
        "{by_token}"
    );
    assert_eq!(run_count(&server), before + 5);
    // Unknown groups: 404 in the API's shape and as a page.
    let (s, v) = server
        .get_json("/api/get_group/0123456789abcdef01234567")
        .await;
    assert_eq!(s, 404, "{v}");
    let (s, _) = server.get_json("/api/get_group/nonsense").await;
    assert_eq!(s, 404);
    let r = server
        .client
        .get(server.url("/tests/group/0123456789abcdef01234567"))
        .send()
        .await
        .expect("page");
    assert_eq!(r.status().as_u16(), 404);

    // The page shows the takes side by side; each take's page and the dashboard link it.
    let r = server
        .client
        .get(server.url(&format!("/tests/group/{gid}")))
        .send()
        .await
        .expect("page");
    assert_eq!(r.status().as_u16(), 200);
    let body = r.text().await.expect("body");
    for (i, id) in runs.iter().enumerate() {
        assert!(
            body.contains(&format!("href=\"/tests/view/{id}\">take-{}", i + 1)),
            "{body}"
        );
    }
    assert!(body.contains("class=\"results results-"), "{body}");
    assert!(body.contains("id=\"group-state\">active"), "{body}");
    let run_page = server
        .client
        .get(server.url(&format!("/tests/view/{}", runs[1])))
        .send()
        .await
        .expect("run page")
        .text()
        .await
        .expect("body");
    assert!(
        run_page.contains(&format!("href=\"/tests/group/{gid}\"")),
        "{run_page}"
    );
    let dash = server
        .client
        .get(server.url("/tests"))
        .send()
        .await
        .expect("dashboard")
        .text()
        .await
        .expect("body");
    assert!(
        dash.contains(&format!("href=\"/tests/group/{gid}\"")),
        "{dash}"
    );
}

/// Pair-score probabilities `[0, ½, 1, 1½, 2]`: a take about 22 Elo stronger than the base
/// (its SPRT(0, 5) passes after a few thousand games), and one as strong as it.
const STRONG: [f64; 5] = [0.05, 0.2, 0.42, 0.23, 0.1];
const EVEN: [f64; 5] = [0.08, 0.22, 0.4, 0.22, 0.08];

#[tokio::test]
async fn the_games_move_to_the_stronger_take_and_its_pass_supersedes_the_others() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let (s, v) = create_group(
        &server,
        "alice",
        json!({"args": group_args(0.0, 5.0), "takes": takes(3)}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let gid = v["group_id"].as_str().expect("group_id").to_string();
    let runs: Vec<String> = v["run_ids"]
        .as_array()
        .expect("run_ids")
        .iter()
        .map(|r| r.as_str().expect("id").to_string())
        .collect();
    for id in &runs {
        approve(&server, "boss", id).await;
    }
    let strong = runs[1].clone();
    let mut games = [0u64; 3];
    let mut peak_target = 0.0f64;
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut n = 0u32;
    loop {
        tick(&server).await;
        let g = group(&server, &gid).await;
        if g["state"] != "active" {
            break;
        }
        peak_target = peak_target.max(g["runs"][1]["target_share"].as_f64().unwrap_or(0.0));
        assert!(Instant::now() < deadline, "no take passed: {g}");
        n += 1;
        let mut w = Worker::new("alice", 4, n);
        let reply = w.request_task(&server).await;
        let Some(run) = reply["run"]["_id"].as_str().map(str::to_string) else {
            continue;
        };
        let at = runs.iter().position(|r| *r == run).expect("a take");
        let p = if run == strong { STRONG } else { EVEN };
        let (_, totals, _) = w.play(&server, &reply, 64, p).await;
        games[at] += totals.games();
    }
    let g = group(&server, &gid).await;
    eprintln!("games by take: {games:?}; the stronger take's highest share {peak_target}");
    // The stronger take got the games (the floor kept the others alive), and passed.
    assert!(
        games[1] > games[0] + games[2],
        "games by take: {games:?} ({g})"
    );
    assert!(games[0] > 0 && games[2] > 0, "a take starved: {games:?}");
    assert!(peak_target > 0.6, "the share moved: {peak_target} ({g})");
    assert_eq!(g["state"], "passed", "{g}");
    assert_eq!(g["winner"], json!(strong), "{g}");
    let share: f64 = g["runs"]
        .as_array()
        .expect("runs")
        .iter()
        .map(|r| r["share"].as_f64().expect("share"))
        .sum();
    assert!(
        (share - 1.0).abs() < 1e-9,
        "shares of the games played: {g}"
    );
    assert_eq!(g["runs"][1]["state"], "passed");
    for i in [0, 2] {
        let r = &g["runs"][i];
        assert_eq!(r["state"], "stopped", "{r}");
        assert_eq!(r["stopped"], format!("superseded by {strong}"), "{r}");
        // Neither passed nor failed.
        let (_, run) = server.get_json(&format!("/api/get_run/{}", runs[i])).await;
        assert_eq!(run["finished"], true, "{run}");
        assert_eq!(run["failed"], false, "{run}");
        assert_eq!(run["is_green"], false, "{run}");
        assert_eq!(run["args"]["sprt"]["state"], "", "{run}");
    }
    // The action log says so.
    let (s, log) = server
        .post_json("/api/actions", &json!({"action": "stop_run"}))
        .await;
    assert_eq!(s, 200, "{log}");
    let text = log.to_string();
    assert!(
        text.contains(&format!("superseded by {strong}")),
        "stop_run with the message: {text}"
    );
    // The group's page links the run that superseded the others.
    let page = server
        .client
        .get(server.url(&format!("/tests/group/{gid}")))
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("body");
    assert!(
        page.contains(&format!(
            "superseded by <a href=\"/tests/view/{strong}\">{strong}</a>"
        )),
        "{page}"
    );
    // No new task goes to a superseded take.
    let w = Worker::new("alice", 4, 999);
    let reply = w.request_task(&server).await;
    assert!(reply.get("task_waiting").is_some(), "{reply}");
}

#[tokio::test]
async fn the_form_submits_a_group_of_branches_each_resolved_as_a_single_test() {
    let fake = FakeGithub::start().await;
    let server = TestServer::start_with(fake.opts(Opts::new())).await;
    add_user(&server, "alice", &[]);
    let store = open_store(&server.data_dir).expect("store");
    for name in [
        "nn-1c0000000000.nnue",
        "nn-37f18f62d772.nnue",
        "nn-62ef826d1a6d.nnue",
    ] {
        let doc = json!({"_id": name, "name": name, "user": "alice", "downloads": 0});
        store
            .put(
                shoal::store::Collection::Nns,
                doc.as_object().expect("object"),
            )
            .expect("put");
    }
    let mut b = logged_in(&server, "alice").await;
    let before = run_count(&server);
    let page = b.get("/tests/run").await;
    assert!(
        page.body.contains("name=\"takes\""),
        "the form has a takes field"
    );
    // One take alone is not a group: the form comes back, nothing created.
    let fields = with(
        &form_fields(&page.body),
        &[
            ("tests_repo", "https://github.com/dev-one/Stockfish"),
            ("new_tag", "lmr-tweak"),
            ("takes", "lmr-tweak"),
        ],
    );
    let refused = post_form(&mut b, &fields).await;
    assert_eq!(refused.status, 200, "{}", refused.body);
    assert!(
        refused.body.contains("a group has 2 to 8 takes"),
        "{}",
        refused.body
    );
    // A branch GitHub does not know: named with its take, nothing created.
    let fields = with(
        &form_fields(&page.body),
        &[
            ("tests_repo", "https://github.com/dev-one/Stockfish"),
            ("new_tag", "lmr-tweak"),
            ("takes", "no-such-branch"),
        ],
    );
    let refused = post_form(&mut b, &fields).await;
    assert_eq!(refused.status, 200, "{}", refused.body);
    assert!(
        refused.body.contains("Take 2 (no-such-branch)"),
        "{}",
        refused.body
    );
    // Not SPRT: refused at the test type's field, nothing created.
    let fields = with(
        &form_fields(&page.body),
        &[
            ("tests_repo", "https://github.com/dev-one/Stockfish"),
            ("new_tag", "lmr-tweak"),
            ("takes", "ucioption-nets"),
            ("stop_rule", "games"),
            ("num-games", "20000"),
        ],
    );
    let refused = post_form(&mut b, &fields).await;
    assert_eq!(refused.status, 200, "{}", refused.body);
    assert!(
        refused.body.contains("id=\"error-stop_rule\"") && refused.body.contains("SPRT tests"),
        "{}",
        refused.body
    );
    assert_eq!(run_count(&server), before);

    // A typed test bench and nets are not copied to the takes: each reads its commit's.
    let fields = with(
        &form_fields(&page.body),
        &[
            ("tests_repo", "https://github.com/dev-one/Stockfish"),
            ("new_tag", "lmr-tweak"),
            ("takes", "lmr-tweak\r\nucioption-nets\r\n"),
            ("new_signature", "7777777"),
            ("new_nets", "nn-1c0000000000.nnue"),
        ],
    );
    let page = post_form(&mut b, &fields).await;
    assert_eq!(page.status, 302, "{}", page.body);
    let gid = page
        .location
        .strip_prefix("/tests/group/")
        .unwrap_or_else(|| panic!("the group's page: {}", page.location))
        .to_string();
    let g = group(&server, &gid).await;
    let runs = g["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 2, "{g}");
    let expect = [
        ("lmr-tweak", "aaaa000000000000000000000000000000000001"),
        ("ucioption-nets", "eeee000000000000000000000000000000000001"),
    ];
    for (r, (tag, sha)) in runs.iter().zip(expect) {
        let (_, run) = server
            .get_json(&format!(
                "/api/get_run/{}",
                r["run_id"].as_str().expect("id")
            ))
            .await;
        assert_eq!(run["args"]["new_tag"], tag, "{run}");
        assert_eq!(run["args"]["resolved_new"], sha, "{run}");
        assert_ne!(run["args"]["new_signature"], "7777777", "{run}");
        assert_eq!(
            run["args"]["resolved_base"],
            "3333333333333333333333333333333333333333"
        );
    }
    assert_eq!(run_count(&server), before + 2);
}

/// Runs `shoal simulate-groups` with `args` and reads its JSON report.
fn simulate(args: &[&str]) -> Value {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = dir.path().join("report.json");
    let mut all: Vec<&str> = vec!["simulate-groups"];
    all.extend_from_slice(args);
    let out_s = out.to_str().expect("path").to_string();
    all.extend_from_slice(&["--json", &out_s]);
    let out_p = std::process::Command::new(bin())
        .args(&all)
        .current_dir(dir.path())
        .output()
        .expect("run shoal");
    let text = String::from_utf8_lossy(&out_p.stdout);
    assert!(
        out_p.status.success(),
        "simulate-groups: {}",
        String::from_utf8_lossy(&out_p.stderr)
    );
    assert!(
        text.contains("| grouped |") && text.contains("| independent |"),
        "{text}"
    );
    serde_json::from_str(&std::fs::read_to_string(&out).expect("report")).expect("JSON")
}

#[test]
fn the_simulation_keeps_each_null_takes_false_positive_rate_within_alpha() {
    // All takes null: 4 takes × 150 groups, both ways.
    let r = simulate(&[
        "--elo", "0,0,0,0", "--elo0", "0", "--elo1", "5", "--alpha", "0.05", "--groups", "150",
        "--seed", "7",
    ]);
    for mode in ["grouped", "independent"] {
        let m = &r[mode];
        let n = m["null_takes"].as_f64().expect("null_takes");
        assert_eq!(n, 600.0, "{m}");
        let p = m["false_positive_rate"].as_f64().expect("rate");
        // Within alpha's 99 % interval for this many takes (SPRT's rate is at most alpha).
        let bound = 0.05 + 2.576 * (0.05 * 0.95 / n).sqrt();
        assert!(p <= bound, "{mode}: false positives {p} > {bound} ({m})");
    }
    // The same seed gives the same report.
    let again = simulate(&[
        "--elo", "0,0,0,0", "--elo0", "0", "--elo1", "5", "--alpha", "0.05", "--groups", "150",
        "--seed", "7",
    ]);
    assert_eq!(again["grouped"], r["grouped"]);
    // One strong take: the group finds it with fewer games than independent tests.
    let r = simulate(&[
        "--elo", "0,0,8,0", "--elo0", "0", "--elo1", "5", "--groups", "40", "--seed", "3",
    ]);
    let g = r["grouped"]["games_to_first_pass"]
        .as_f64()
        .expect("a pass");
    let i = r["independent"]["games_to_first_pass"]
        .as_f64()
        .expect("a pass");
    assert!(g < i, "grouped {g} vs independent {i}: {r}");
    let gg = r["grouped"]["games_per_group"].as_f64().expect("games");
    let ig = r["independent"]["games_per_group"].as_f64().expect("games");
    assert!(gg < ig, "grouped {gg} vs independent {ig}: {r}");
    // Bad options: a clear error, exit status 2.
    let dir = tempfile::tempdir().expect("tempdir");
    let (status, text) = run_bin(&["simulate-groups", "--elo", "1"], &[], dir.path());
    assert!(!status.success() && text.contains("takes"), "{text}");
}

#[tokio::test]
async fn a_take_whose_run_is_gone_shows_as_missing_in_its_place() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    add_user(&server, "alice", &[]);
    let (s, v) = create_group(
        &server,
        "alice",
        json!({"args": group_args(0.0, 2.0), "takes": takes(3)}),
    )
    .await;
    assert_eq!(s, 200, "{v}");
    let gid = v["group_id"].as_str().expect("group_id").to_string();
    let runs: Vec<String> = v["run_ids"]
        .as_array()
        .expect("run_ids")
        .iter()
        .map(|r| r.as_str().expect("id").to_string())
        .collect();
    drop(server);
    // The second take's run removed from the store behind the server's back.
    let store = open_store(&data).expect("store");
    assert!(
        store
            .delete(shoal::store::Collection::Runs, &runs[1])
            .expect("delete")
    );
    drop(store);
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let g = group(&server, &gid).await;
    let listed = g["runs"].as_array().expect("runs");
    assert_eq!(listed.len(), 3, "{g}");
    for (r, id) in listed.iter().zip(&runs) {
        assert_eq!(r["run_id"], id.as_str(), "{g}");
    }
    assert_eq!(listed[1]["state"], "missing", "{g}");
    assert_eq!(listed[2]["new_tag"], "take-3", "{g}");
    let body = server
        .client
        .get(server.url(&format!("/tests/group/{gid}")))
        .send()
        .await
        .expect("page")
        .text()
        .await
        .expect("body");
    assert!(body.contains("the run no longer exists"), "{body}");
    assert!(body.contains(">take-3</a>"), "{body}");
}

#[tokio::test]
async fn a_group_counts_as_one_create_run_per_take_in_the_rate_limit() {
    let limits =
        r#"[{kind = "rate", key = "user", scope = "create_run", max = 3, window_s = 600}]"#;
    let server = TestServer::start_with(Opts::new().set("limits", limits)).await;
    add_user(&server, "alice", &[]);
    let body = json!({"args": group_args(0.0, 2.0), "takes": takes(2)});
    let (s, v) = create_group(&server, "alice", body.clone()).await;
    assert_eq!(s, 200, "{v}");
    // Two more takes would make four create_runs: refused, nothing created.
    let before = run_count(&server);
    let (s, v) = create_group(&server, "alice", body).await;
    assert_eq!(s, 429, "{v}");
    assert_eq!(run_count(&server), before);
    // The refused group's partial count was taken back: one create_run is still allowed.
    let (s, v) = server
        .post_json(
            "/api/create_run",
            &json!({"username": "alice", "password": PASSWORD, "args": sprt_args(0.0, 2.0)}),
        )
        .await;
    assert_eq!(s, 200, "{v}");
}

//! The live dashboard through real HTTP: the active-run filters (the `method=get` form, its
//! cookie, the shared rendering left alone), the workers table and its search, and the live
//! refresh's parts (`?live=panels|finished|workers`): 304 while unchanged, the new part once a
//! run is created or a worker's results arrive.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fleet::{Totals, Worker, add_user, approve, create_run, fixed_args, sprt_args};
use crate::harness::TestServer;

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

struct Answer {
    status: u16,
    headers: reqwest::header::HeaderMap,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> &str {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The `Set-Cookie` header naming `name`.
    fn set_cookie(&self, name: &str) -> String {
        self.headers
            .get_all("set-cookie")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .find(|v| v.starts_with(&format!("{name}=")))
            .unwrap_or_default()
            .to_string()
    }
}

async fn fetch(server: &TestServer, path: &str, headers: &[(&str, &str)]) -> Answer {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let mut req = client.get(server.url(path));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let r = req.send().await.expect("request");
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    let body = r.text().await.expect("body");
    Answer {
        status,
        headers,
        body,
    }
}

/// A run with room for one worker at a time, so each worker below takes its own run.
fn one_worker(mut args: Value) -> Value {
    args["max_active_tasks"] = json!(1);
    args
}

/// Approves `run` and gives it a worker (`n`: the worker's key); returns the worker, its
/// task id and the task's games.
async fn with_worker(server: &TestServer, run: &str, n: u32) -> (Worker, u64, u64) {
    approve(server, "boss", run).await;
    let w = Worker::new("alice", 4, n);
    let reply = w.request_task(server).await;
    assert_eq!(reply["run"]["_id"], run, "{reply}");
    let task = reply["task_id"].as_u64().expect("task id");
    let games = reply["run"]["my_task"]["num_games"]
        .as_u64()
        .expect("num_games");
    (w, task, games)
}

/// An SPRT at STC on one thread, fixed games at LTC, fixed games on two threads: all active.
async fn three_active(server: &TestServer) -> Vec<(String, Worker, u64, u64)> {
    add_user(server, "alice", &[]);
    add_user(server, "boss", &["--approver"]);
    let mut ltc = fixed_args(40000);
    ltc["tc"] = "60+0.6".into();
    let mut smp = fixed_args(40000);
    smp["threads"] = json!(2);
    let mut out = Vec::new();
    for (n, args) in [sprt_args(0.0, 2.0), ltc, smp].into_iter().enumerate() {
        let run = create_run(server, "alice", one_worker(args)).await;
        let (w, task, games) = with_worker(server, &run, 10 + n as u32).await;
        out.push((run, w, task, games));
    }
    out
}

#[tokio::test]
async fn the_active_run_filters_and_the_workers_table() {
    let server = TestServer::start().await;
    let runs = three_active(&server).await;
    let home = fetch(&server, "/tests", &[]).await;
    assert_eq!(home.status, 200, "{}", home.body);
    assert!(home.body.contains("Active - 3 tests"), "{}", home.body);
    assert!(home.body.contains("class=\"dashboard\""), "nothing hidden");
    // Every row says its kind; the filter form ticks everything.
    for kind in [
        "data-test-type=\"sprt\" data-time-control=\"stc\" data-threads=\"st\"",
        "data-test-type=\"numgames\" data-time-control=\"ltc\" data-threads=\"st\"",
        "data-test-type=\"numgames\" data-time-control=\"stc\" data-threads=\"smp\"",
    ] {
        assert!(home.body.contains(kind), "{kind}: {}", home.body);
    }
    assert!(
        home.body
            .contains("<form class=\"filters\" method=\"get\" action=\"/tests\">")
    );
    assert_eq!(
        home.body
            .matches("data-dimension=\"test-type\" checked")
            .count(),
        3
    );
    assert!(!home.body.contains("__shoal_"), "every slot filled");
    // Panels fold (open without JavaScript).
    for key in ["pending", "paused", "failed", "active", "finished"] {
        assert!(
            home.body.contains(&format!(
                "<details class=\"panel fold\" id=\"{key}\" data-fold=\"{key}\" open>"
            )),
            "{key}: {}",
            home.body
        );
    }

    // The workers table: folded, one row per machine at work, each linked.
    assert!(
        home.body.contains(
            "<details class=\"panel fold workers-panel\" id=\"workers\" data-fold=\"workers\">"
        ),
        "{}",
        home.body
    );
    assert!(home.body.contains("Workers - 3"));
    // Folded, the table is not sent: it comes when the panel is opened (`?live=workers`), or
    // with `workers=1` without JavaScript.
    assert!(!home.body.contains("3 machines."), "{}", home.body);
    assert!(
        !home.body.contains("href=\"/workers/alice-"),
        "{}",
        home.body
    );
    assert!(home.body.contains("href=\"/tests?workers=1#workers\""));
    assert!(
        home.body
            .contains("data-refresh=\"/tests?live=workers\" data-etag=\"\"")
    );
    let shown = fetch(&server, "/tests?workers=1", &[]).await;
    assert!(
        shown
            .body
            .contains("id=\"workers\" data-fold=\"workers\" open>"),
        "{}",
        shown.body
    );
    assert!(shown.body.contains("3 machines."), "{}", shown.body);
    let part = fetch(&server, "/tests?live=workers", &[("hx-request", "true")]).await;
    assert_eq!(part.status, 200);
    assert!(part.body.contains("3 machines."), "{}", part.body);
    let names: Vec<String> = runs
        .iter()
        .map(|(_, w, _, _)| {
            let key = w.info["unique_key"].as_str().expect("key");
            format!("alice-4cores-{}", &key[..8])
        })
        .collect();
    for (name, (run, _, _, _)) in names.iter().zip(&runs) {
        for body in [&shown.body, &part.body] {
            assert!(
                body.contains(&format!("href=\"/workers/{name}\"")),
                "{name}: {body}"
            );
            assert!(body.contains(&format!("/tests/view/{run}?show_task=0")));
        }
    }
    // Searched (no JavaScript needed): one machine, the panel open, the search kept.
    let found = fetch(&server, &format!("/tests?workers_q={}", names[1]), &[]).await;
    assert!(
        found
            .body
            .contains("id=\"workers\" data-fold=\"workers\" open>"),
        "{}",
        found.body
    );
    assert!(found.body.contains("1 of 3 machines match the search"));
    assert!(found.body.contains(&format!("value=\"{}\"", names[1])));
    assert!(
        found
            .body
            .contains(&format!("href=\"/workers/{}\"", names[1]))
    );
    assert!(
        !found
            .body
            .contains(&format!("href=\"/workers/{}\"", names[0]))
    );
    assert!(
        found.body.contains(&format!(
            "data-refresh=\"/tests?live=workers&#38;workers_q={}\"",
            names[1]
        )),
        "the table refreshes with its search: {}",
        found.body
    );

    // The form without fixed games: the rows are hidden by the wrapper's class, the count
    // says how many are shown, and the choice is kept in Fishtest's cookie.
    let form = "/tests?filters=1&sprt=1&spsa=1&stc=1&ltc=1&st=1&smp=1";
    let filtered = fetch(&server, form, &[]).await;
    assert_eq!(filtered.status, 200);
    assert!(filtered.body.contains("class=\"dashboard no-numgames\""));
    assert!(
        filtered.body.contains("Active - 3 (1) tests"),
        "{}",
        filtered.body
    );
    assert!(filtered.body.contains("1 of 3 shown"));
    assert!(
        filtered
            .body
            .contains("name=\"numgames\" value=\"1\" data-dimension=\"test-type\">")
    );
    assert!(
        filtered
            .set_cookie("active_run_filters")
            .starts_with("active_run_filters=sprt,spsa,stc,ltc,st,smp;"),
        "{:?}",
        filtered.headers
    );
    // The cookie alone chooses too (fixed games, one thread).
    let cookie = fetch(
        &server,
        "/tests",
        &[("cookie", "active_run_filters=numgames,stc,ltc,st")],
    )
    .await;
    assert!(
        cookie.body.contains("Active - 3 (1) tests"),
        "{}",
        cookie.body
    );
    assert!(
        cookie
            .body
            .contains("class=\"dashboard no-sprt no-spsa no-smp\"")
    );
    let none = fetch(&server, "/tests", &[("cookie", "active_run_filters=none")]).await;
    assert!(none.body.contains("Active - 3 (0) tests"));
    // Everything ticked again: the cookie is removed; the shared page never had a choice.
    let all = fetch(
        &server,
        "/tests?filters=1&sprt=1&spsa=1&numgames=1&stc=1&ltc=1&st=1&smp=1",
        &[],
    )
    .await;
    assert!(all.set_cookie("active_run_filters").contains("Max-Age=0"));
    assert!(all.body.contains("Active - 3 tests"));
    let home = fetch(&server, "/tests", &[]).await;
    assert!(home.body.contains("class=\"dashboard\"") && home.body.contains("Active - 3 tests"));
}

const HX: (&str, &str) = ("hx-request", "true");

#[tokio::test]
async fn the_live_parts_answer_304_until_something_changes() {
    let server = TestServer::start().await;
    let mut runs = three_active(&server).await;

    // A navigation to a part goes to the page.
    let nav = fetch(&server, "/tests?live=panels", &[]).await;
    assert_eq!((nav.status, nav.header("location")), (302, "/tests"));

    let panels = fetch(&server, "/tests?live=panels", &[HX]).await;
    assert_eq!(panels.status, 200);
    assert!(panels.header("vary").contains("HX-Request"));
    let etag = panels.header("etag").to_string();
    assert!(etag.starts_with("\"L"), "{etag}");
    assert!(panels.body.contains("Active - 3 tests"), "{}", panels.body);
    assert!(!panels.body.contains("<html"), "a part, not a page");
    assert!(
        panels
            .body
            .contains("<div id=\"workers-body\" data-keep></div>"),
        "the page keeps its own workers table"
    );
    assert!(!panels.body.contains("__shoal_"));
    // The page names the version it was rendered with.
    let page = fetch(&server, "/tests", &[]).await;
    assert!(
        page.body
            .contains(&format!("data-etag=\"{}\"", etag.replace('"', "&#34;"))),
        "{etag}: {}",
        page.body
    );
    // Unchanged: 304, no body.
    let same = fetch(
        &server,
        "/tests?live=panels",
        &[HX, ("if-none-match", &etag)],
    )
    .await;
    assert_eq!((same.status, same.body.as_str()), (304, ""));
    assert_eq!(same.header("etag"), etag);
    // Another filter choice is another version.
    let other = fetch(
        &server,
        "/tests?live=panels",
        &[
            HX,
            ("if-none-match", &etag),
            ("cookie", "active_run_filters=sprt,stc,st"),
        ],
    )
    .await;
    assert_eq!(other.status, 200);
    assert!(other.body.contains("Active - 3 (1) tests"));
    assert_ne!(other.header("etag"), etag);
    // The finished part and the workers table: the same protocol.
    for part in ["finished", "workers"] {
        let path = format!("/tests?live={part}");
        let first = fetch(&server, &path, &[HX]).await;
        assert_eq!(first.status, 200, "{part}");
        let tag = first.header("etag").to_string();
        assert!(!tag.is_empty(), "{part}");
        let again = fetch(&server, &path, &[HX, ("if-none-match", &tag)]).await;
        assert_eq!(again.status, 304, "{part}");
    }
    let bad = fetch(&server, "/tests?live=nothing", &[HX]).await;
    assert_eq!(bad.status, 404);

    // A listed change (a new run): the next answer is the new part.
    let new = create_run(&server, "alice", fixed_args(1000)).await;
    let changed = fetch(
        &server,
        "/tests?live=panels",
        &[HX, ("if-none-match", &etag)],
    )
    .await;
    assert_eq!(changed.status, 200);
    assert!(changed.body.contains(&format!("/tests/view/{new}\"")));
    let etag = changed.header("etag").to_string();

    // Results (not a listed change): within the cache's second the part changes.
    // Half the SMP run's task (an even number of games).
    let (run, w, task, task_games) = &mut runs[2];
    let played = (*task_games / 2) & !1;
    assert!(played > 0, "{task_games}");
    let mut totals = Totals::default();
    while totals.games() < played {
        totals.play_pair(&mut w.rng, EVEN);
    }
    let body = json!({"run_id": run, "task_id": task, "stats": totals.json()});
    let (status, v) = w.call(&server, "/api/update_task", body).await;
    assert_eq!(status, 200, "{v}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = fetch(
            &server,
            "/tests?live=panels",
            &[HX, ("if-none-match", &etag)],
        )
        .await;
        if a.status == 200 {
            assert!(
                a.body.contains(&format!("Total: {played} W: ")),
                "{}",
                a.body
            );
            assert_ne!(a.header("etag"), etag);
            break;
        }
        assert_eq!(a.status, 304);
        assert!(Instant::now() < deadline, "the results never showed");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

//! The run lists through real HTTP: `/tests/finished` (tabs, count line, paging, a page past
//! the end) and `/tests/user/{name}` (one submitter's runs only; an unknown user is a 404).
//! Runs are finished the way workers finish them: a scripted worker plays every game.

use std::time::Duration;

use serde_json::Value;

use crate::fleet::{Worker, add_user, approve, create_run, fixed_args};
use crate::harness::TestServer;

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];
const STRONG: [f64; 5] = [0.01, 0.09, 0.4, 0.3, 0.2];
const WEAK: [f64; 5] = [0.2, 0.3, 0.4, 0.09, 0.01];

struct Page {
    status: u16,
    location: String,
    body: String,
}

async fn get(server: &TestServer, path: &str) -> Page {
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client");
    let r = client.get(server.url(path)).send().await.expect("request");
    let status = r.status().as_u16();
    let location = r
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    let body = r.text().await.expect("body");
    Page {
        status,
        location,
        body,
    }
}

/// Creates, approves and plays a fixed-games run to its end; returns its id.
async fn finished_run(server: &TestServer, user: &str, args: Value, p: [f64; 5]) -> String {
    let run = create_run(server, user, args).await;
    approve(server, "boss", &run).await;
    let mut w = Worker::new(user, 8, 1);
    for _ in 0..100 {
        let reply = w.request_task(server).await;
        if reply.get("task_waiting").is_some() {
            break;
        }
        assert_eq!(reply["run"]["_id"], run.as_str(), "{reply}");
        w.play(server, &reply, 1000, p).await;
    }
    assert!(
        crate::fleet::stored_run(server, &run).finished,
        "run {run} finished"
    );
    run
}

fn row(id: &str) -> String {
    format!("/tests/view/{id}\"")
}

#[tokio::test]
async fn finished_and_user_lists_filter_and_page() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);

    // alice: a green run, an LTC run that is not green, and one pending approval.
    let green = finished_run(&server, "alice", fixed_args(1000), STRONG).await;
    let mut ltc_args = fixed_args(1000);
    ltc_args["tc"] = "60+0.6".into();
    let ltc = finished_run(&server, "alice", ltc_args, WEAK).await;
    let pending = create_run(&server, "alice", fixed_args(1000)).await;
    // bob: 24 runs, so that all finished runs fill two pages of 25.
    let mut bobs = Vec::new();
    for _ in 0..24 {
        bobs.push(finished_run(&server, "bob", fixed_args(1000), EVEN).await);
    }
    let newest = bobs.last().expect("bob's runs").clone();

    // All: 26 runs on two pages, newest first; the pending run is not finished.
    let p1 = get(&server, "/tests/finished").await;
    assert_eq!(p1.status, 200, "{}", p1.body);
    assert!(p1.body.contains("Finished Tests"));
    assert!(p1.body.contains("Finished - 26 tests"), "{}", p1.body);
    assert!(
        p1.body
            .contains("Showing 25 of 26 matching finished test(s) on page 1 of 2."),
        "{}",
        p1.body
    );
    assert!(p1.body.contains(&row(&newest)));
    assert!(!p1.body.contains(&row(&green)), "the oldest is on page 2");
    assert!(!p1.body.contains(&row(&pending)));
    assert!(p1.body.contains("href=\"/tests/finished?page=2\""), "pager");
    let p2 = get(&server, "/tests/finished?page=2").await;
    assert_eq!(p2.status, 200);
    assert!(
        p2.body
            .contains("Showing 1 of 26 matching finished test(s) on page 2 of 2.")
    );
    assert!(p2.body.contains(&row(&green)));
    assert!(!p2.body.contains(&row(&newest)));
    // Past the end: to the last page; not a number: page 1; huge: capped, then the last page.
    let past = get(&server, "/tests/finished?page=3").await;
    assert_eq!(
        (past.status, past.location.as_str()),
        (302, "/tests/finished?page=2")
    );
    let huge = get(&server, "/tests/finished?page=99999999999").await;
    assert_eq!(
        (huge.status, huge.location.as_str()),
        (302, "/tests/finished?page=2")
    );
    let junk = get(&server, "/tests/finished?page=abc").await;
    assert_eq!(junk.status, 200);
    assert!(junk.body.contains("on page 1 of 2."));

    // Green: the STRONG run (coloured), never the WEAK one.
    let g = get(&server, "/tests/finished?success_only=1").await;
    assert_eq!(g.status, 200);
    assert!(g.body.contains("Finished Tests - Green"));
    assert!(g.body.contains(&row(&green)));
    assert!(!g.body.contains(&row(&ltc)));
    assert!(
        g.body.contains("class=\"results results-green\""),
        "{}",
        g.body
    );
    // LTC: only the 60+0.6 run.
    let l = get(&server, "/tests/finished?ltc_only=1").await;
    assert!(l.body.contains("Finished - 1 tests"), "{}", l.body);
    assert!(l.body.contains(&row(&ltc)));
    assert!(!l.body.contains(&row(&green)));
    // Yellow: a fixed-games run is never yellow.
    let y = get(&server, "/tests/finished?yellow_only=1").await;
    assert!(y.body.contains("Finished - 0 tests"), "{}", y.body);
    assert!(y.body.contains("No finished tests"));
    // An empty list has one page: asking for page 2 goes back to page 1.
    let y2 = get(&server, "/tests/finished?yellow_only=1&page=2").await;
    assert_eq!(
        (y2.status, y2.location.as_str()),
        (302, "/tests/finished?yellow_only=1")
    );

    // A user's page: that submitter's runs only, pending ones included.
    let a = get(&server, "/tests/user/alice").await;
    assert_eq!(a.status, 200, "{}", a.body);
    assert!(a.body.contains("alice - Tests"));
    assert!(a.body.contains("Pending approval - 1 tests"));
    assert!(a.body.contains(&row(&pending)));
    assert!(a.body.contains("Finished - 2 tests"));
    assert!(a.body.contains(&row(&green)) && a.body.contains(&row(&ltc)));
    assert!(bobs.iter().all(|b| !a.body.contains(&row(b))));
    let al = get(&server, "/tests/user/alice?ltc_only=1").await;
    assert!(al.body.contains("Finished - 1 tests"));
    assert!(al.body.contains(&row(&ltc)) && !al.body.contains(&row(&green)));
    let b = get(&server, "/tests/user/bob").await;
    assert_eq!(b.status, 200);
    assert!(b.body.contains("Finished - 24 tests"));
    assert!(b.body.contains("Pending approval - 0 tests"));
    assert!(!b.body.contains(&row(&green)) && !b.body.contains(&row(&pending)));
    assert!(bobs.iter().all(|r| b.body.contains(&row(r))));
    let b2 = get(&server, "/tests/user/bob?page=2").await;
    assert_eq!((b2.status, b2.location.as_str()), (302, "/tests/user/bob"));

    // The dashboard's summary cards.
    let home = get(&server, "/tests").await;
    assert!(home.body.contains("Games / min") && home.body.contains("Nodes / sec"));

    // An unknown user: the HTML 404 page.
    let nobody = get(&server, "/tests/user/nobody").await;
    assert_eq!(nobody.status, 404);
    assert!(nobody.body.contains("Page not found"));
}

/// Where `needle` first appears in `body` (for order checks).
fn at(body: &str, needle: &str) -> usize {
    body.find(needle)
        .unwrap_or_else(|| panic!("{needle} not on the page"))
}

#[tokio::test]
async fn search_mode_ranks_users_and_matches_info_words() {
    let server = TestServer::start().await;
    for u in ["alice", "alfred", "malik", "bob"] {
        add_user(&server, u, &[]);
    }
    add_user(&server, "boss", &["--approver"]);
    let with_info = |info: &str| {
        let mut a = fixed_args(1000);
        a["info"] = info.into();
        a
    };
    let alice = finished_run(
        &server,
        "alice",
        with_info("Simplify the king danger term"),
        EVEN,
    )
    .await;
    let alfred = finished_run(&server, "alfred", with_info("Tune search depth"), EVEN).await;
    let malik = finished_run(&server, "malik", with_info("king safety tweak"), EVEN).await;
    let bob = finished_run(&server, "bob", with_info("unrelated kingside"), EVEN).await;

    // Canonicalising redirects.
    let r = get(&server, "/tests/finished?user=al").await;
    assert_eq!(
        (r.status, r.location.as_str()),
        (302, "/tests/finished?mode=search&user=al")
    );
    let r = get(
        &server,
        "/tests/finished?mode=search&user=al&success_only=1",
    )
    .await;
    assert_eq!(
        (r.status, r.location.as_str()),
        (302, "/tests/finished?mode=search&user=al")
    );
    let r = get(&server, "/tests/finished?max_count=5&ltc_only=1").await;
    assert_eq!(
        (r.status, r.location.as_str()),
        (302, "/tests/finished?ltc_only=1")
    );
    let r = get(&server, "/tests?text=king").await;
    assert_eq!(
        (r.status, r.location.as_str()),
        (302, "/tests/finished?mode=search&text=king")
    );

    // Users: names starting with the query first (alphabetical), then later matches.
    let s = get(&server, "/tests/finished?mode=search&user=AL").await;
    assert_eq!(s.status, 200, "{}", s.body);
    assert!(s.body.contains("Search Finished Tests"));
    assert!(
        s.body
            .contains("Showing 3 of 3 matching finished test(s) on page 1 of 1.")
    );
    assert!(at(&s.body, &row(&alfred)) < at(&s.body, &row(&alice)));
    assert!(at(&s.body, &row(&alice)) < at(&s.body, &row(&malik)));
    assert!(!s.body.contains(&row(&bob)));

    // Text: whole words, any of them; phrases must appear; -word excludes.
    let t = get(&server, "/tests/finished?mode=search&text=king").await;
    assert!(t.body.contains(&row(&alice)) && t.body.contains(&row(&malik)));
    assert!(!t.body.contains(&row(&bob)), "kingside is another word");
    let t = get(&server, "/tests/finished?mode=search&text=king%20-safety").await;
    assert!(t.body.contains(&row(&alice)) && !t.body.contains(&row(&malik)));
    let t = get(
        &server,
        "/tests/finished?mode=search&text=%22search%20depth%22",
    )
    .await;
    assert!(t.body.contains(&row(&alfred)) && !t.body.contains(&row(&alice)));
    let t = get(
        &server,
        "/tests/finished?mode=search&text=%22depth%20search%22",
    )
    .await;
    assert!(t.body.contains("Showing 0 of 0"), "{}", t.body);
    // Both: the users' runs that match the text.
    let t = get(&server, "/tests/finished?mode=search&user=al&text=king").await;
    assert!(t.body.contains(&row(&alice)) && t.body.contains(&row(&malik)));
    assert!(!t.body.contains(&row(&alfred)));
    // The cap: anonymous visitors get at most what they ask, never more than 1000.
    let t = get(&server, "/tests/finished?mode=search&max_count=1&text=king").await;
    assert!(t.body.contains("Showing 1 of 1"), "{}", t.body);
    assert!(t.body.contains(&row(&malik)), "the newest first");
}

#[tokio::test]
async fn the_dashboard_has_every_panel_and_the_results_box() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let done = finished_run(&server, "alice", fixed_args(1000), STRONG).await;
    let pending = create_run(&server, "alice", fixed_args(2000)).await;
    let sprt = create_run(&server, "alice", crate::fleet::sprt_args(0.0, 2.0)).await;
    approve(&server, "boss", &sprt).await;

    let home = get(&server, "/tests").await;
    assert_eq!(home.status, 200, "{}", home.body);
    for heading in [
        "Pending approval - 1 tests",
        "Paused - 1 tests",
        "Failed - 0 tests",
        "Active - 0 tests",
        "Finished - 1 tests",
        "Time remaining",
        "Workers - 0",
    ] {
        assert!(home.body.contains(heading), "{heading}: {}", home.body);
    }
    // Panels in the spec's order, each run in its own.
    assert!(at(&home.body, "id=\"pending\"") < at(&home.body, &row(&pending)));
    assert!(at(&home.body, &row(&pending)) < at(&home.body, "id=\"paused\""));
    assert!(at(&home.body, "id=\"paused\"") < at(&home.body, &row(&sprt)));
    assert!(at(&home.body, "id=\"finished\"") < at(&home.body, &row(&done)));
    // The results boxes: the SPRT's LLR with its bounds; the fixed-games run's Elo, totals,
    // pentanomial and nElo, green.
    assert!(
        home.body
            .contains("LLR: 0.00 (-2.94,2.94) &#60;0.00,2.00&#62;"),
        "{}",
        home.body
    );
    assert!(home.body.contains("Total: 1000 W: "));
    assert!(home.body.contains("Ptnml(0-2): "));
    assert!(home.body.contains("nElo: "));
    assert!(home.body.contains("LOS: "));
    assert!(home.body.contains("results results-green"));
    assert!(
        home.body
            .contains(&format!("href=\"/tests/live_elo/{sprt}\""))
    );
    // Pending and paused rows can be deleted (the server decides who may).
    assert!(home.body.contains("action=\"/tests/delete\""));
    // The control is a worded button (an icon beside it), not an emoji that needs a font.
    assert!(
        home.body.contains("</svg> Delete</button>"),
        "{}",
        home.body
    );
    assert!(!home.body.contains("&#x1F5D1;") && !home.body.contains('\u{1F5D1}'));

    // Later pages: the finished runs only.
    let two = get(&server, "/tests?page=2").await;
    assert_eq!(two.status, 302, "one finished page: back to it");
    let fin = get(&server, "/tests?success_only=1").await;
    assert!(fin.body.contains(&row(&done)));
    let none = get(&server, "/tests?yellow_only=1").await;
    assert!(!none.body.contains(&row(&done)));
    assert!(none.body.contains(&row(&pending)), "the panels stay");
}

/// The dashboard's first page is rendered once for everybody, yet what a list must show at
/// once (a new run, an approval, a worker taking a task, a run finishing) shows on the very
/// next request, however soon.
#[tokio::test]
async fn the_dashboard_shows_every_change_at_once() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let home = get(&server, "/tests").await;
    assert!(
        home.body.contains("Pending approval - 0 tests"),
        "{}",
        home.body
    );
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    let home = get(&server, "/tests").await;
    assert!(
        home.body.contains("Pending approval - 1 tests"),
        "{}",
        home.body
    );
    assert!(home.body.contains(&row(&run)));
    approve(&server, "boss", &run).await;
    let home = get(&server, "/tests").await;
    assert!(home.body.contains("Paused - 1 tests"), "{}", home.body);
    let mut w = Worker::new("alice", 8, 1);
    let reply = w.request_task(&server).await;
    let home = get(&server, "/tests").await;
    assert!(home.body.contains("Active - 1 tests"), "{}", home.body);
    w.play(&server, &reply, 1000, EVEN).await;
    // Its first task done, the run is paused (no worker) or finished.
    let home = get(&server, "/tests").await;
    assert!(home.body.contains("Active - 0 tests"), "{}", home.body);
    for _ in 0..100 {
        let reply = w.request_task(&server).await;
        if reply.get("task_waiting").is_some() {
            break;
        }
        w.play(&server, &reply, 1000, EVEN).await;
    }
    let home = get(&server, "/tests").await;
    assert!(home.body.contains("Paused - 0 tests"), "{}", home.body);
    assert!(home.body.contains("Finished - 1 tests"), "{}", home.body);
    // Each viewer's own token is in the cached page's forms.
    assert!(!home.body.contains("__shoal_csrf_token__"));
}

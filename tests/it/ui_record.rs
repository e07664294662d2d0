//! The record through real HTTP: `POST /api/actions` (the query subset, newest first, the
//! 200-row cap, `[]` for a query outside the subset), the `/actions` page (event kind, user,
//! run and time filters, paging, hidden system events, clear 400s), and `/contributors` and
//! `/contributors/monthly` after a scripted worker played games — kept up to date as tasks
//! end, never by scanning the runs on a view, and rebuilt from the runs at start-up when the
//! table is missing.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fleet::{Worker, add_user, approve, create_run, fixed_args, stored_run};
use crate::harness::{Opts, TestServer};
use crate::ui_users::session;
use crate::web::Browser;

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

async fn api_actions(server: &TestServer, query: &Value) -> (u16, Value, String) {
    let r = server
        .client
        .post(server.url("/api/actions"))
        .json(query)
        .send()
        .await
        .expect("post");
    let status = r.status().as_u16();
    let cors = r
        .headers()
        .get("access-control-allow-origin")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let v: Value = r.json().await.expect("json");
    (status, v, cors)
}

fn rows(v: &Value) -> &Vec<Value> {
    v.as_array().expect("an array")
}

#[tokio::test]
async fn api_actions_filters_newest_first_and_caps_at_200() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;
    let w = Worker::new("alice", 4, 1);
    let mut mid_time = 0.0;
    for i in 0..205 {
        let (status, v) = w
            .call(
                &server,
                "/api/worker_log",
                json!({"message": format!("note {i}")}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
        if i == 99 {
            let (_, v, _) = api_actions(&server, &json!({"action": "worker_log"})).await;
            mid_time = rows(&v)[0]["time"].as_f64().expect("time");
        }
    }

    let (status, v, cors) = api_actions(&server, &json!({})).await;
    assert_eq!(status, 200);
    assert_eq!(cors, "*");
    let all = rows(&v);
    assert_eq!(all.len(), 200, "the cap");
    assert!(all.iter().all(|a| a["_id"].is_string()));
    let times: Vec<f64> = all
        .iter()
        .map(|a| a["time"].as_f64().expect("time"))
        .collect();
    assert!(times.windows(2).all(|w| w[0] >= w[1]), "newest first");
    assert_eq!(all[0]["message"], "note 204");

    let (_, v, _) = api_actions(
        &server,
        &json!({"action": {"$in": ["new_run", "approve_run"]}}),
    )
    .await;
    let kinds: Vec<&str> = rows(&v)
        .iter()
        .map(|a| a["action"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(kinds, ["approve_run", "new_run"]);
    let (_, v, _) = api_actions(&server, &json!({"run_id": run, "action": "new_run"})).await;
    assert_eq!(rows(&v).len(), 1);
    assert_eq!(rows(&v)[0]["username"], "alice");
    let (_, v, _) = api_actions(
        &server,
        &json!({"action": "worker_log", "time": {"$gte": mid_time}}),
    )
    .await;
    assert_eq!(rows(&v).len(), 106, "notes 99..=204");
    let (_, v, _) = api_actions(&server, &json!({"username": "nobody"})).await;
    assert!(rows(&v).is_empty());
    // Outside the subset: an empty list, as Fishtest answers a bad query.
    for bad in [
        json!({"$where": "sleep(1000)"}),
        json!({"action": {"$regex": ".*"}}),
        json!({"password": "x"}),
        json!([1, 2]),
        json!({"task_id": {"$in": (0..1001).collect::<Vec<u32>>()}}),
    ] {
        let (status, v, _) = api_actions(&server, &bad).await;
        assert_eq!(status, 200, "{bad}");
        assert_eq!(v, json!([]), "{bad}");
    }
    // A body that is not JSON is a 400 in the API's shape.
    let r = server
        .client
        .post(server.url("/api/actions"))
        .header("content-type", "application/json")
        .body("{not json")
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.expect("json");
    assert!(v["error"].as_str().is_some(), "{v}");
}

/// The count line of an `/actions` page.
fn count_line(body: &str) -> String {
    let at = body.find("<p class=\"count\">").expect("count line");
    let rest = &body[at + "<p class=\"count\">".len()..];
    rest[..rest.find('<').expect("end")].trim().to_string()
}

#[tokio::test]
async fn the_actions_page_filters_pages_and_refuses_bad_parameters() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    add_user(&server, "chief", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "chief", &run).await;
    let w = Worker::new("bob", 4, 2);
    for i in 0..30 {
        let (status, _) = w
            .call(
                &server,
                "/api/worker_log",
                json!({"message": format!("bob says {i}")}),
            )
            .await;
        assert_eq!(status, 200);
    }
    let mut anon = Browser::new(&server);

    // All (system events hidden): 30 notes + new_run + approve_run.
    let page = anon.get("/actions").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        count_line(&page.body),
        "Showing 25 of 32 matching actions on page 1 of 2."
    );
    assert!(
        !page.body.contains("start shoal@"),
        "system events are hidden"
    );
    assert!(page.body.contains("bob says 29"), "newest first");
    assert!(page.body.contains("href=\"/actions?page=2\""));
    let page = anon.get("/actions?page=2").await;
    assert_eq!(
        count_line(&page.body),
        "Showing 7 of 32 matching actions on page 2 of 2."
    );
    assert!(page.body.contains("bob says 0"));
    // Past the end: the last page.
    let page = anon.get("/actions?page=99").await;
    assert!(count_line(&page.body).ends_with("on page 2 of 2."));

    // Event kind, user substring, run.
    let page = anon.get("/actions?action=system_event").await;
    assert!(page.body.contains("start shoal@"), "{}", page.body);
    let page = anon.get("/actions?action=new_run").await;
    assert!(count_line(&page.body).starts_with("Showing 1 of 1 matching action "));
    assert!(page.body.contains(&format!("href=\"/tests/view/{run}\"")));
    let page = anon.get("/actions?user=OB").await;
    assert!(
        count_line(&page.body).contains("of 30 matching"),
        "{}",
        count_line(&page.body)
    );
    let page = anon.get("/actions?user=zzz").await;
    assert!(count_line(&page.body).contains("of 0 matching"));
    assert!(page.body.contains("No actions available"));
    let page = anon.get(&format!("/actions?run_id={run}")).await;
    assert!(count_line(&page.body).contains("of 2 matching"));
    assert!(page.body.contains("Run filter:"));
    let page = anon.get("/actions?max_count=3").await;
    assert_eq!(
        count_line(&page.body),
        "Showing 3 of 3 matching actions on page 1 of 1."
    );
    // A permalink shows one event: the newest at or before its time.
    let (_, v, _) = api_actions(&server, &json!({"action": "new_run"})).await;
    let t = rows(&v)[0]["time"].as_f64().expect("time");
    let page = anon.get(&format!("/actions?max_count=1&before={t}")).await;
    assert_eq!(
        count_line(&page.body),
        "Showing 1 of 1 matching action on page 1 of 1."
    );
    assert!(page.body.contains("<td>new_run</td>"), "{}", page.body);

    // Text: any word, every "phrase", no -word; case ignored; literal (no pattern).
    let page = anon.get("/actions?text=%22SAYS+29%22").await;
    assert!(
        count_line(&page.body).contains("of 1 matching"),
        "{}",
        count_line(&page.body)
    );
    assert!(page.body.contains("bob says 29"));
    let page = anon.get("/actions?text=approve_run+NEW_RUN").await;
    assert!(
        count_line(&page.body).contains("of 2 matching"),
        "{}",
        count_line(&page.body)
    );
    let page = anon.get("/actions?text=%22bob+says+2%22").await;
    // "bob says 2" and "bob says 20".."29".
    assert!(
        count_line(&page.body).contains("of 11 matching"),
        "{}",
        count_line(&page.body)
    );
    let page = anon.get("/actions?text=_run+-APPROVE_RUN").await;
    assert!(
        count_line(&page.body).contains("of 1 matching"),
        "{}",
        count_line(&page.body)
    );
    assert!(page.body.contains("<td>new_run</td>"));
    let page = anon.get("/actions?text=says+.*").await;
    assert!(
        count_line(&page.body).contains("of 30 matching"),
        "words are literal: any matches"
    );
    let page = anon.get("/actions?text=%22says+.*%22").await;
    assert!(
        count_line(&page.body).contains("of 0 matching"),
        "a pattern is not a pattern"
    );
    // The event's name and the run's name are searched too; the search survives paging.
    let page = anon.get("/actions?text=approve_run").await;
    assert!(count_line(&page.body).contains("of 1 matching"));
    let page = anon.get("/actions?text=bob").await;
    assert!(
        page.body.contains("href=\"/actions?text=bob&#38;page=2\""),
        "{}",
        page.body
    );

    // Bad parameters: a 400 page that says what is wrong.
    for (q, want) in [
        (
            "text=a+b+c+d+e+f+g+h+i+j+k+l+m+n+o+p+q+r+s+t+u",
            "at most 20 words",
        ),
        ("action=nonsense", "Unknown event kind"),
        ("before=yesterday", "before must be a Unix time"),
        ("max_count=-1", "max_count must be a whole number"),
        ("run_id=%3Cscript%3E", "Invalid run id"),
    ] {
        let page = anon.get(&format!("/actions?{q}")).await;
        assert_eq!(page.status, 400, "{q}");
        assert!(page.body.contains(want), "{q}: {}", page.body);
    }
    // A logged-in user sees the same log.
    let (mut bob, _) = session(&server, Some("bob")).await;
    let page = bob.get("/actions?action=worker_log").await;
    assert!(count_line(&page.body).contains("of 30 matching"));
}

/// The table row of `user` on a contributors page, as its cells' text.
fn contributor_cells(body: &str, user: &str) -> Option<Vec<String>> {
    let row_start = body.find(&format!(">{user}<"))?;
    let tr = body[..row_start].rfind("<tr")?;
    let end = body[tr..].find("</tr>")? + tr;
    let row = &body[tr..end];
    let mut cells = Vec::new();
    let mut rest = row;
    while let Some(at) = rest.find("<td") {
        let open_end = rest[at..].find('>')? + at + 1;
        let close = rest[open_end..].find("</td>")? + open_end;
        let inner = &rest[open_end..close];
        let mut text = String::new();
        let mut in_tag = false;
        for c in inner.chars() {
            match c {
                '<' => in_tag = true,
                '>' => in_tag = false,
                c if !in_tag => text.push(c),
                _ => {}
            }
        }
        cells.push(text.trim().to_string());
        rest = &rest[close..];
    }
    Some(cells)
}

async fn wait_for_contributor(
    server: &TestServer,
    path: &str,
    user: &str,
    games: u64,
) -> Vec<String> {
    let mut anon = Browser::new(server);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let page = anon.get(path).await;
        assert_eq!(page.status, 200);
        if let Some(cells) = contributor_cells(&page.body, user)
            && cells.get(5).is_some_and(|g| *g == games.to_string())
        {
            return cells;
        }
        assert!(
            Instant::now() < deadline,
            "{user} never showed {games} games on {path}: {}",
            page.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

fn store_of(server: &TestServer) -> Box<dyn shoal::store::Store> {
    crate::harness::open_store(&server.data_dir).expect("open")
}

#[tokio::test]
async fn contributors_count_games_as_tasks_end_and_are_rebuilt_only_when_missing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let mut server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &["--email", "bob@example.org"]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "boss", &run).await;

    // Before any game: alice submitted one test, nobody played. All time counts finished
    // runs only (Fishtest's), the month the unfinished ones too.
    let page = Browser::new(&server).get("/contributors/monthly").await;
    let cells = contributor_cells(&page.body, "alice").expect("alice's row");
    assert_eq!(cells[6], "1", "one test: {cells:?}");
    assert!(contributor_cells(&page.body, "bob").is_none());
    let page = Browser::new(&server).get("/contributors").await;
    assert!(
        contributor_cells(&page.body, "alice").is_none(),
        "not finished"
    );

    // bob's worker plays the whole run.
    let mut w = Worker::new("bob", 4, 3);
    let mut played = 0;
    for _ in 0..10 {
        let reply = w.request_task(&server).await;
        if reply.get("task_waiting").is_some() {
            break;
        }
        let (_, totals, _) = w.play(&server, &reply, 50, EVEN).await;
        played += totals.games();
    }
    assert_eq!(played, 1000);
    let stored = stored_run(&server, &run);
    assert!(stored.finished);
    let tc = shoal::rundb::schedule::parse_tc(&stored.args.tc).expect("tc");
    let hours =
        1000.0 * shoal::rundb::schedule::tc_duration(&tc) * f64::from(stored.args.threads) / 3600.0;
    // Columns: #, Username, Last active, Games/Hour, CPU Hours, Games, Tests, Repository.
    let cells = wait_for_contributor(&server, "/contributors", "bob", 1000).await;
    assert_eq!(cells[4], (hours as u64).to_string(), "{cells:?}");
    assert_eq!(cells[6], "0");
    assert!(cells[2].ends_with("ago"), "{cells:?}");
    let monthly = wait_for_contributor(&server, "/contributors/monthly", "bob", 1000).await;
    assert_eq!(monthly[4], cells[4]);
    // The run finished: alice's test counts for all time now.
    let page = Browser::new(&server).get("/contributors").await;
    let alice = contributor_cells(&page.body, "alice").expect("alice's row");
    assert_eq!(alice[6], "1", "{alice:?}");
    let page = Browser::new(&server).get("/contributors").await;
    assert!(page.body.contains("Contributors"));
    assert!(page.body.contains("Games played"));
    // Sorted by CPU hours: bob first. Ranks follow the order; sorting by username flips it.
    assert_eq!(contributor_cells(&page.body, "bob").expect("bob")[0], "1");
    let page = Browser::new(&server)
        .get("/contributors?sort=username&order=asc")
        .await;
    assert_eq!(
        contributor_cells(&page.body, "alice").expect("alice")[0],
        "1"
    );
    // Go to username: → the page with the row highlighted.
    let page = Browser::new(&server).get("/contributors?search=BO").await;
    assert_eq!(page.status, 302);
    assert!(
        page.location.contains("highlight=bob#me"),
        "{}",
        page.location
    );
    let page = Browser::new(&server)
        .get(&page.location.replace("#me", ""))
        .await;
    assert!(page.body.contains("id=\"me\""));
    let page = Browser::new(&server)
        .get("/contributors?search=nobody")
        .await;
    assert_eq!(page.status, 404);
    // Usernames link to their page for approvers only.
    assert!(!page.body.contains("href=\"/user/bob\""));
    let (mut boss, _) = session(&server, Some("boss")).await;
    let page = boss.get("/contributors").await;
    assert!(page.body.contains("href=\"/user/bob\""));
    // bob's profile shows his CPU hours; "Jump to my rank" finds his row.
    let (mut bob, _) = session(&server, Some("bob")).await;
    let page = bob.get("/contributors?findme=1").await;
    assert_eq!(page.status, 302);
    assert!(
        page.location.contains("highlight=bob#me"),
        "{}",
        page.location
    );
    let page = bob.get("/user").await;
    assert!(
        page.body.contains(&format!("CPU-Hours: {}", hours as u64)),
        "{}",
        page.body
    );

    // Incremental, not a scan per view: a run written into the store behind the server's
    // back (ghost's games) does not appear...
    let mut doc = store_of(&server)
        .get(shoal::store::Collection::Runs, &run)
        .expect("get")
        .expect("the run");
    let ghost_id = "0123456789abcdef01234567";
    doc.insert("_id".into(), json!(ghost_id));
    if let Some(Value::Array(tasks)) = doc.get_mut("tasks") {
        for t in tasks {
            t["worker_info"]["username"] = json!("ghost");
        }
    }
    if let Some(args) = doc.get_mut("args") {
        args["username"] = json!("ghost");
    }
    let record = shoal::store::RunRecord::from_doc(&doc, 0).expect("record");
    store_of(&server).flush_runs(&[record]).expect("write");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let page = Browser::new(&server).get("/contributors").await;
    assert!(
        contributor_cells(&page.body, "ghost").is_none(),
        "no scan of the runs"
    );

    // ...nor after a restart (the stored table is read back; bob's totals survive)...
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
    drop(server);
    let mut server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let page = Browser::new(&server).get("/contributors").await;
    assert!(contributor_cells(&page.body, "ghost").is_none());
    let again = contributor_cells(&page.body, "bob").expect("bob survives a restart");
    assert_eq!(again[4..7], cells[4..7]);

    // ...but a store without the table (its marker removed) is rebuilt from the runs once.
    server.signal(libc::SIGTERM);
    assert!(server.wait_exit(30).success());
    drop(server);
    {
        let store = crate::harness::open_store(&data).expect("open");
        assert!(
            store
                .delete(shoal::store::Collection::ShoalKv, "contributors:built:3")
                .expect("delete")
        );
        store.close().expect("close");
    }
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let page = Browser::new(&server).get("/contributors").await;
    let ghost = contributor_cells(&page.body, "ghost").expect("ghost after the rebuild");
    assert_eq!(ghost[5], "1000");
    assert_eq!(ghost[6], "1");
    let rebuilt = contributor_cells(&page.body, "bob").expect("bob after the rebuild");
    assert_eq!(rebuilt[4..7], cells[4..7]);
}

#[tokio::test]
async fn the_record_is_open_to_everyone_and_target_users_link_for_approvers_only() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);
    let (mut anon, _) = session(&server, None).await;
    let (mut alice, _) = session(&server, Some("alice")).await;
    let (mut boss, token) = session(&server, Some("boss")).await;
    let page = boss
        .post(
            "/user/bob",
            &[("user", "bob"), ("blocked", "1"), ("csrf_token", &token)],
        )
        .await;
    assert_eq!(page.status, 302);
    for path in [
        "/actions",
        "/contributors",
        "/contributors/monthly",
        "/user_management/pending_count",
    ] {
        for b in [&mut anon, &mut alice, &mut boss] {
            let page = b.get(path).await;
            assert_eq!(page.status, 200, "{path}");
        }
    }
    let path = "/actions?action=block_user";
    for b in [&mut anon, &mut alice] {
        let page = b.get(path).await;
        assert!(page.body.contains("<td>bob</td>"), "{}", page.body);
        assert!(!page.body.contains("href=\"/user/bob\""));
        assert!(
            page.body.contains("href=\"/user/boss\""),
            "the source links"
        );
    }
    let page = boss.get(path).await;
    assert!(page.body.contains("href=\"/user/bob\""), "{}", page.body);
}

/// The Event column of an `/actions` page, top to bottom.
fn events(body: &str) -> Vec<String> {
    let row =
        regex::Regex::new(r"(?s)<tr>\s*<td><a [^>]*>[^<]*</a></td>\s*<td>([^<]*)</td>").unwrap();
    row.captures_iter(body)
        .map(|c| c[1].trim().to_string())
        .collect()
}

#[tokio::test]
async fn the_actions_page_sorts_by_event_source_target_and_comment() {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "chief", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(1000)).await;
    approve(&server, "chief", &run).await;
    let w = Worker::new("alice", 4, 2);
    for note in ["b note", "a note", "c note"] {
        let (status, _) = w
            .call(&server, "/api/worker_log", json!({"message": note}))
            .await;
        assert_eq!(status, 200);
    }
    let mut anon = Browser::new(&server);

    // Newest first by default; the headers link each column's sort.
    let page = anon.get("/actions").await;
    assert_eq!(page.status, 200);
    assert_eq!(
        events(&page.body),
        [
            "worker_log",
            "worker_log",
            "worker_log",
            "approve_run",
            "new_run"
        ]
    );
    for (key, order) in [
        ("event", "asc"),
        ("source", "asc"),
        ("target", "asc"),
        ("comment", "asc"),
        ("time", "asc"),
    ] {
        assert!(
            page.body
                .contains(&format!("href=\"/actions?sort={key}&#38;order={order}\"")),
            "{key}: {}",
            page.body
        );
    }
    let page = anon.get("/actions?sort=event&order=asc").await;
    assert_eq!(
        events(&page.body),
        [
            "approve_run",
            "new_run",
            "worker_log",
            "worker_log",
            "worker_log"
        ]
    );
    let page = anon.get("/actions?sort=event&order=desc").await;
    assert_eq!(
        events(&page.body),
        [
            "worker_log",
            "worker_log",
            "worker_log",
            "new_run",
            "approve_run"
        ]
    );
    // By comment: the notes in their text's order (the runs' messages sort around them).
    let page = anon.get("/actions?sort=comment&order=asc").await;
    let body = &page.body;
    let (a, b, c) = (
        body.find(">a note<").expect("a"),
        body.find(">b note<").expect("b"),
        body.find(">c note<").expect("c"),
    );
    assert!(a < b && b < c, "{body}");
    // Oldest first.
    let page = anon.get("/actions?sort=time&order=asc").await;
    assert_eq!(events(&page.body)[0], "new_run");
    // An unknown sort key is the default order.
    let page = anon.get("/actions?sort=nope").await;
    assert_eq!(page.status, 200);
    assert_eq!(events(&page.body)[0], "worker_log");
}

//! The machines page and the worker block form through real HTTP: `/tests/machines` lists a
//! scripted worker's machine; `/workers/{name}` lets the worker's owner or an approver block
//! it (a blocked worker's request_task is refused in the protocol's shape, and served again
//! after unblocking), refuses anonymous visitors, other users and bad tokens without changing
//! anything, and logs `block_worker`.

use serde_json::{Value, json};

use crate::fleet::{PASSWORD, Worker, add_user, approve, create_run, fixed_args};
use crate::harness::TestServer;
use crate::web::{Browser, Page};

/// A browser logged in as `user` (anonymous for `None`) and its CSRF token.
pub async fn logged_in<'a>(server: &'a TestServer, user: Option<&str>) -> (Browser<'a>, String) {
    let mut b = Browser::new(server);
    let token = b.get("/login").await.csrf();
    let Some(user) = user else {
        return (b, token);
    };
    let page = b
        .post(
            "/login",
            &[
                ("username", user),
                ("password", PASSWORD),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "login {user}: {}", page.body);
    let token = b.get("/tests").await.csrf();
    (b, token)
}

/// The page's text with the quote escapes undone.
pub fn unescape(body: &str) -> String {
    body.replace("&#x27;", "'")
        .replace("&#39;", "'")
        .replace("&quot;", "\"")
        .replace("&#34;", "\"")
        .replace("&#60;", "<")
        .replace("&lt;", "<")
}

/// Documents of one collection, read straight from the store.
pub fn stored(server: &TestServer, coll: shoal::store::Collection) -> Vec<Value> {
    let store = crate::harness::open_store(&server.data_dir).expect("open");
    store
        .find(coll, &shoal::store::Query::new())
        .expect("find")
        .into_iter()
        .map(Value::Object)
        .collect()
}

fn block_actions(server: &TestServer) -> Vec<Value> {
    stored(server, shoal::store::Collection::Actions)
        .into_iter()
        .filter(|a| a["action"] == "block_worker")
        .collect()
}

async fn setup() -> (TestServer, Worker, String) {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);
    let run = create_run(&server, "alice", fixed_args(100_000)).await;
    approve(&server, "boss", &run).await;
    let worker = Worker::new("alice", 8, 0xabc);
    (server, worker, run)
}

fn short_name(worker: &Worker) -> String {
    let key = worker.info["unique_key"].as_str().expect("key");
    format!("alice-8cores-{}", key.split('-').next().expect("prefix"))
}

async fn post_worker(b: &mut Browser<'_>, name: &str, form: &[(&str, &str)]) -> Page {
    b.post(&format!("/workers/{name}"), form).await
}

#[tokio::test]
async fn the_machines_page_lists_active_workers() {
    let (server, worker, run) = setup().await;
    let (mut anon, _) = logged_in(&server, None).await;
    let page = anon.get("/tests/machines").await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("No machines running"), "{}", page.body);
    assert!(page.body.contains("Workers - 0"));

    let reply = worker.request_task(&server).await;
    assert_eq!(reply["run"]["_id"], json!(run), "{reply}");
    let page = anon.get("/tests/machines").await;
    assert_eq!(page.status, 200);
    let short = short_name(&worker);
    for want in [
        "Workers - 1",
        "<td>alice</td>",
        &format!("href=\"/workers/{short}\""),
        "<td>x86-64-avx2</td>",
        "<td>325</td>",
        &format!("/tests/view/{run}?show_task=0"),
        // The worker sent no country: words say so, apart from the core count (not
        // "unknown 4", which reads as four unknown cores).
        "title=\"country unknown\">(country unknown)</span>",
        // The worker's compiler and Python in columns of their own.
        ">Compiler</a></th>",
        ">Python</a></th>",
        "<td>g++ 12.2.0</td>",
        "<td>3.11.7</td>",
    ] {
        assert!(page.body.contains(want), "{want}: {}", page.body);
    }
    assert!(!page.body.contains(">?</span>"), "{}", page.body);
    assert!(page.body.contains(" ago</td>") || page.body.contains("just now"));
    // Filters: a search that matches nothing, and "my workers" for someone else.
    let page = anon.get("/tests/machines?q=nothing-like-this").await;
    assert!(page.body.contains("No machines running"));
    assert!(page.body.contains("Workers - 1 (0)"), "{}", page.body);
    let page = anon.get("/tests/machines?q=AVX2").await;
    assert!(page.body.contains("<td>alice</td>"));
    let (mut bob, _) = logged_in(&server, Some("bob")).await;
    let page = bob.get("/tests/machines?my_workers=1").await;
    assert!(page.body.contains("No machines running"), "{}", page.body);
    let (mut alice, _) = logged_in(&server, Some("alice")).await;
    let page = alice.get("/tests/machines?my_workers=1").await;
    assert!(page.body.contains("<td>alice</td>"));
    // Sorting: a second machine, by user both ways, and by cores.
    let bob_worker = Worker::new("bob", 4, 0xdef);
    let reply = bob_worker.request_task(&server).await;
    assert!(reply.get("error").is_none(), "{reply}");
    let order = |body: &str| {
        let (a, b) = (
            body.find("<td>alice</td>").expect("alice"),
            body.find("<td>bob</td>").expect("bob"),
        );
        a < b
    };
    let page = anon.get("/tests/machines?sort=machine&order=asc").await;
    assert!(page.body.contains("Workers - 2"));
    assert!(order(&page.body), "alice first");
    let page = anon.get("/tests/machines?sort=machine&order=desc").await;
    assert!(!order(&page.body), "bob first");
    let page = anon.get("/tests/machines?sort=cores").await;
    assert!(order(&page.body), "8 cores before 4");
    let page = anon.get("/tests/machines?sort=bogus&order=bogus").await;
    assert_eq!(page.status, 200);
    // Odd paging is not an error.
    for q in ["page=0", "page=x", "page=99999999999999999999", "page=7"] {
        let page = anon.get(&format!("/tests/machines?{q}")).await;
        assert_eq!(page.status, 200, "{q}");
        assert!(page.body.contains("<td>alice</td>"), "{q}");
    }
}

#[tokio::test]
async fn owners_and_approvers_block_and_unblock_workers() {
    let (server, worker, _run) = setup().await;
    let short = short_name(&worker);
    let first = worker.request_task(&server).await;
    assert!(first.get("error").is_none(), "{first}");

    // Anonymous visitors go to the login page, and their posts change nothing.
    let (mut anon, anon_token) = logged_in(&server, None).await;
    let page = anon.get(&format!("/workers/{short}")).await;
    assert_eq!(page.status, 302);
    assert!(
        page.location.starts_with("/login?next="),
        "{}",
        page.location
    );
    let page = post_worker(
        &mut anon,
        &short,
        &[
            ("csrf_token", &anon_token),
            ("blocked", "1"),
            ("submit", "Submit"),
        ],
    )
    .await;
    assert_eq!(page.status, 302);
    assert!(page.location.starts_with("/login"), "{}", page.location);

    // Another user sees why not, and is refused.
    let (mut bob, bob_token) = logged_in(&server, Some("bob")).await;
    let page = bob.get(&format!("/workers/{short}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body
            .contains("Only owners and approvers can block/unblock")
    );
    assert!(!page.body.contains("name=\"blocked\""), "no form for bob");
    let page = post_worker(
        &mut bob,
        &short,
        &[
            ("csrf_token", &bob_token),
            ("blocked", "1"),
            ("submit", "Submit"),
        ],
    )
    .await;
    assert_eq!(page.status, 403, "{}", page.body);
    assert!(
        page.body
            .contains("Only owners and approvers can block/unblock")
    );

    // The owner with a bad token or none is refused.
    let (mut alice, alice_token) = logged_in(&server, Some("alice")).await;
    for token in ["forged", ""] {
        let page = post_worker(
            &mut alice,
            &short,
            &[
                ("csrf_token", token),
                ("blocked", "1"),
                ("submit", "Submit"),
            ],
        )
        .await;
        assert_eq!(page.status, 403);
        assert!(page.body.contains("security token"));
    }
    assert!(stored(&server, shoal::store::Collection::Workers).is_empty());
    assert!(block_actions(&server).is_empty());
    let again = worker.request_task(&server).await;
    assert!(again.get("error").is_none(), "still served: {again}");

    // Cancel changes nothing.
    let page = post_worker(
        &mut alice,
        &short,
        &[
            ("csrf_token", &alice_token),
            ("blocked", "1"),
            ("submit", "Cancel"),
        ],
    )
    .await;
    assert_eq!(
        (page.status, page.location.as_str()),
        (302, "/workers/show")
    );
    assert!(stored(&server, shoal::store::Collection::Workers).is_empty());

    // The owner sees the form and blocks the worker with a message.
    let page = alice.get(&format!("/workers/{short}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("name=\"blocked\""));
    assert!(page.body.contains("Last changed: Never"));
    let page = post_worker(
        &mut alice,
        &short,
        &[
            ("csrf_token", &alice_token),
            ("message", "crashes every game\r\n  "),
            ("blocked", "1"),
            ("submit", "Submit"),
        ],
    )
    .await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert_eq!(
        page.location,
        format!("/workers/show?done=blocked&worker={short}")
    );
    let page = alice.get(&page.location.clone()).await;
    assert!(
        page.body.contains(&format!("Worker {short} blocked!")),
        "{}",
        page.body
    );
    assert!(page.body.contains("crashes every game"));
    let records = stored(&server, shoal::store::Collection::Workers);
    assert_eq!(records.len(), 1);
    assert_eq!(records[0]["blocked"], true);
    assert_eq!(records[0]["message"], "crashes every game");
    let actions = block_actions(&server);
    assert_eq!(actions.len(), 1);
    assert_eq!(actions[0]["username"], "alice");
    assert_eq!(actions[0]["worker"], json!(short));
    assert_eq!(actions[0]["message"], "blocked");

    // A blocked worker is refused in the protocol's shape.
    let (status, reply) = worker.call(&server, "/api/request_task", json!({})).await;
    assert_eq!(status, 200, "{reply}");
    assert_eq!(reply["task_waiting"], false);
    let error = reply["error"].as_str().expect("an error");
    // Fishtest's banner: the approver's message, and where to look and to unblock.
    assert!(
        error.contains(
            "\nRequest_task: This worker has been blocked!\nMessage: crashes every game\n"
        ) && error.contains(&format!("http://{}/workers/{short}.\n", server.addr)),
        "{reply}"
    );
    // The anonymous list shows it; the email column is the approvers'.
    let page = anon.get("/workers/show").await;
    assert!(page.body.contains(&format!("href=\"/workers/{short}\"")));
    assert!(!page.body.contains("<th>Email</th>"));

    // An approver unblocks it (and a long message is cut, with a warning).
    let (mut boss, boss_token) = logged_in(&server, Some("boss")).await;
    let page = boss.get("/workers/show").await;
    assert!(page.body.contains("<th>Email</th>"));
    let long = "x".repeat(600);
    let page = post_worker(
        &mut boss,
        &short,
        &[
            ("csrf_token", &boss_token),
            ("message", &long),
            ("submit", "Submit"),
        ],
    )
    .await;
    assert_eq!(page.status, 302);
    assert_eq!(
        page.location,
        format!("/workers/show?done=unblocked&worker={short}&truncated=1")
    );
    let page = boss.get(&page.location.clone()).await;
    assert!(page.body.contains(&format!("Worker {short} unblocked!")));
    assert!(page.body.contains("truncated to 500 characters"));
    let records = stored(&server, shoal::store::Collection::Workers);
    assert_eq!(records[0]["blocked"], false);
    assert_eq!(records[0]["message"].as_str().map(str::len), Some(500));
    let actions = block_actions(&server);
    assert_eq!(actions.len(), 2);
    assert_eq!(actions[1]["username"], "boss");
    assert_eq!(actions[1]["message"], "unblocked");
    let served = worker.request_task(&server).await;
    assert!(served.get("error").is_none(), "served again: {served}");
    assert!(served["run"]["_id"].is_string(), "{served}");
}

#[tokio::test]
async fn bad_worker_names_are_refused_with_a_message() {
    let (server, _worker, _run) = setup().await;
    let (mut alice, token) = logged_in(&server, Some("alice")).await;
    let page = alice.get("/workers/not-a-worker").await;
    assert_eq!(page.status, 200);
    assert!(
        unescape(&page.body).contains("is not a worker name"),
        "{}",
        page.body
    );
    assert!(page.body.contains("No blocked workers"));
    for name in ["not-a-worker", "a-b-8cores-abcd", "alice-8cores-x"] {
        let page = post_worker(
            &mut alice,
            name,
            &[
                ("csrf_token", &token),
                ("blocked", "1"),
                ("submit", "Submit"),
            ],
        )
        .await;
        assert_eq!(page.status, 400, "{name}: {}", page.body);
    }
    assert!(stored(&server, shoal::store::Collection::Workers).is_empty());
    // Filters and sorting parse whatever they are given.
    for q in [
        "filter=gt-5days",
        "filter=all-workers&sort=worker&order=asc",
        "filter=bogus&sort=bogus&order=bogus&page=-1",
    ] {
        let page = alice.get(&format!("/workers/show?{q}")).await;
        assert_eq!(page.status, 200, "{q}");
    }
}

//! Several instances on one MongoDB database, as Fishtest grows past one machine: a primary
//! (the worker API, the run cache, the periodic jobs) and two secondaries (pages and the read
//! API), on a real MongoDB-compatible server (`mongo.rs`). What the primary writes shows on
//! the secondaries' pages; what a secondary's UI changes reaches the primary and is not undone
//! by its write-behind; the worker API and run changes are the primary's alone.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fleet::{Worker, add_user, approve, create_run, fixed_args};
use crate::harness::{Opts, TestServer};
use crate::mongo;
use crate::ui_workers::logged_in;

/// The cookie-signing key all instances share (as behind one host name they must).
const SECRET: &str = "a shared secret of the three instances, 32+ bytes long";

async fn instance(uri: &str, dir: &std::path::Path, name: &str, primary: bool) -> TestServer {
    let mut opts = Opts::new()
        .set("store", "mongodb")
        .set("mongodb_uri", uri)
        .set("secret", SECRET)
        .data_dir(&dir.join(name));
    if !primary {
        // Its port (ephemeral) is not the primary's.
        opts = opts.set("primary_port", 1);
    }
    TestServer::start_with(opts).await
}

async fn run_of(server: &TestServer, run: &str) -> Value {
    let (status, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    v
}

#[tokio::test]
async fn a_primary_and_two_secondaries_share_one_mongodb_database() {
    let uri = mongo::fresh_uri("instances");
    let dir = tempfile::tempdir().expect("tempdir");
    let primary = instance(&uri, dir.path(), "primary", true).await;
    let secondaries = [
        instance(&uri, dir.path(), "second", false).await,
        instance(&uri, dir.path(), "third", false).await,
    ];
    for s in &secondaries {
        assert_eq!(s.health().await["primary"], json!(false), "{}", s.logs());
    }
    assert_eq!(primary.health().await["primary"], json!(true));
    add_user(&primary, "alice", &["--email", "alice@example.org"]);
    add_user(
        &primary,
        "boss",
        &["--approver", "--email", "boss@example.org"],
    );

    // A run created and approved on the primary shows on the secondaries' pages and API.
    let run = create_run(&primary, "alice", fixed_args(100_000)).await;
    approve(&primary, "boss", &run).await;
    for s in &secondaries {
        let page = crate::web::Browser::new(s)
            .get(&format!("/tests/view/{run}"))
            .await;
        assert_eq!(page.status, 200, "{}", page.body);
        assert!(page.body.contains(&run), "the run's page on a secondary");
        assert_eq!(run_of(s, &run).await["approved"], json!(true));
        let page = crate::web::Browser::new(s).get("/tests").await;
        assert!(
            page.body.contains(&run),
            "the dashboard of a secondary lists the run"
        );
        let (status, active) = s.get_json("/api/active_runs").await;
        assert_eq!(status, 200);
        assert!(
            active.get(&run).is_some(),
            "active_runs of a secondary: {active}"
        );
    }

    // The worker API is the primary's alone.
    let worker = Worker::new("alice", 8, 0x51);
    for s in &secondaries {
        let (status, v) = worker.call(s, "/api/request_task", json!({})).await;
        assert_eq!(status, 503, "{v}");
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("primary instance required")),
            "{v}"
        );
    }
    let task = worker.request_task(&primary).await;
    assert_eq!(task["run"]["_id"], json!(run), "{task}");

    // A change to a run through a secondary's pages is refused, and changes nothing.
    let (mut boss, token) = logged_in(&secondaries[0], Some("boss")).await;
    let page = boss
        .post(
            "/tests/stop",
            &[("run-id", &run), ("csrf_token", &token), ("confirm", "yes")],
        )
        .await;
    // Refused as a secondary refuses (503, saying why): not any error, and never a 500.
    assert_eq!(page.status, 503, "stop on a secondary: {}", page.body);
    assert!(
        page.body.contains("Primary instance required."),
        "{}",
        page.body
    );
    assert_eq!(run_of(&primary, &run).await["finished"], json!(false));

    // A worker blocked through a secondary's page: stored at once, followed by the primary
    // (it re-reads the blocked list every 5 s), and not undone by its write-behind.
    let key = worker.info["unique_key"].as_str().expect("key");
    let short = format!("alice-8cores-{}", key.split('-').next().expect("prefix"));
    let (mut alice, token) = logged_in(&secondaries[1], Some("alice")).await;
    let page = alice
        .post(
            &format!("/workers/{short}"),
            &[
                ("csrf_token", &token),
                ("message", "blocked from a secondary"),
                ("blocked", "1"),
                ("submit", "Submit"),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "{}", page.body);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, v) = worker.call(&primary, "/api/request_task", json!({})).await;
        assert_eq!(status, 200, "{v}");
        if v["error"].as_str().is_some_and(|e| e.contains("blocked")) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the primary still serves it: {v}"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    // Two write-behind ticks of the primary later, the block is still there, everywhere.
    let ticks = |m: String| {
        crate::harness::metric_sum(&m, "shoal_job_seconds_count", &[("job", "flush_buffers")])
    };
    let start = ticks(primary.metrics().await);
    let deadline = Instant::now() + Duration::from_secs(30);
    while ticks(primary.metrics().await) < start + 2.0 {
        assert!(Instant::now() < deadline, "the write-behind does not tick");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for s in secondaries.iter().chain([&primary]) {
        let page = crate::web::Browser::new(s).get("/workers/show").await;
        assert!(
            page.body.contains(&short) && page.body.contains("blocked from a secondary"),
            "{}",
            page.body
        );
    }
    let (status, v) = worker.call(&primary, "/api/request_task", json!({})).await;
    assert_eq!(status, 200);
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("blocked")),
        "{v}"
    );

    // A profile change through a secondary reaches the primary's pages.
    let (mut alice, token) = logged_in(&secondaries[0], Some("alice")).await;
    let page = alice
        .post(
            "/user",
            &[
                ("csrf_token", &token),
                ("user", "alice"),
                ("email", "alice@changed.example.org"),
                ("tests_repo", "https://github.com/alice/Stockfish"),
                ("password", ""),
                ("password2", ""),
                ("old_password", crate::fleet::PASSWORD),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "{}", page.body);
    assert_eq!(page.location, "/user?done=saved", "{}", page.body);
    // The primary re-reads a user it has cached within 2 s (`USER_TTL`).
    let (mut boss, _) = logged_in(&primary, Some("boss")).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let page = boss.get("/user/alice").await;
        if page.body.contains("alice@changed.example.org") {
            break;
        }
        assert!(Instant::now() < deadline, "{}", page.body);
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Two secondaries counting downloads of one net at once, on one MongoDB database, lose none:
/// the count is the store's `$inc`, not a read and a whole-document write per instance (which
/// let one instance overwrite the other's count).
#[tokio::test]
async fn two_instances_counting_one_net_at_once_lose_no_download() {
    const PER_INSTANCE: usize = 60;
    const AT_ONCE: usize = 12;
    let uri = mongo::fresh_uri("downloads");
    let dir = tempfile::tempdir().expect("tempdir");
    let instances = [
        instance(&uri, dir.path(), "second", false).await,
        instance(&uri, dir.path(), "third", false).await,
    ];
    // A net recorded as Fishtest records it (ObjectId `_id`, int32 count).
    let name = "nn-0123456789ab.nnue";
    mongo::run(&uri, move |db| {
        db.collection::<bson::Document>("nns")
            .insert_one(bson::doc! {
                "_id": bson::oid::ObjectId::new(),
                "name": name,
                "user": "alice",
                "downloads": 0_i32,
            })
            .run()
            .expect("insert");
    })
    .await;
    let client = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .expect("client");
    let mut calls = Vec::new();
    for server in &instances {
        for lane in 0..AT_ONCE {
            let (client, url) = (client.clone(), server.url(&format!("/api/nn/{name}")));
            calls.push(tokio::spawn(async move {
                let mut statuses = Vec::new();
                for _ in (lane..PER_INSTANCE).step_by(AT_ONCE) {
                    let r = client.get(&url).send().await.expect("GET /api/nn");
                    statuses.push(r.status().as_u16());
                }
                statuses
            }));
        }
    }
    let mut answered = 0;
    for call in calls {
        let statuses = call.await.expect("task");
        assert!(statuses.iter().all(|s| *s == 302), "{statuses:?}");
        answered += statuses.len();
    }
    assert_eq!(answered, 2 * PER_INSTANCE);
    let docs = mongo::docs(&uri, "nns", bson::doc! {"name": name}).await;
    // Every counted download kept, and still Fishtest's int32.
    assert_eq!(
        docs[0].get("downloads"),
        Some(&bson::Bson::Int32(answered as i32)),
        "{docs:?}"
    );
    // Still Fishtest's record: the same `_id`, no field added.
    assert_eq!(docs.len(), 1);
    assert!(docs[0].get_object_id("_id").is_ok(), "{docs:?}");
}

/// A browser session is one session on every instance: made on the primary, it is live on a
/// secondary that had already read its session table; logged out on the secondary, the
/// primary refuses it within `session_recheck_s`.
#[tokio::test]
async fn a_session_made_on_one_instance_is_live_and_ended_on_all() {
    let uri = mongo::fresh_uri("sessions");
    let dir = tempfile::tempdir().expect("tempdir");
    let start = |name: &str, primary: bool| {
        let mut opts = Opts::new()
            .set("store", "mongodb")
            .set("mongodb_uri", &uri)
            .set("secret", SECRET)
            .set("session_recheck_s", 1)
            .data_dir(&dir.path().join(name));
        if !primary {
            opts = opts.set("primary_port", 1);
        }
        TestServer::start_with(opts)
    };
    let a = start("a", true).await;
    let b = start("b", false).await;
    add_user(&a, "alice", &["--email", "alice@example.org"]);
    add_user(&a, "boss", &["--email", "boss@example.org"]);
    // B reads its session table (alice logs in there) before boss logs in on A.
    let (mut alice, _) = logged_in(&b, Some("alice")).await;
    assert_eq!(alice.get("/user").await.status, 200);
    let (on_a, _) = logged_in(&a, Some("boss")).await;
    let cookie = on_a.cookie.clone();

    // Boss's session, made on A, is live on B.
    let mut on_b = crate::web::Browser::new(&b);
    on_b.cookie = cookie.clone();
    let page = on_b.get("/user").await;
    assert_eq!(page.status, 200, "a logged-in page on B: {}", page.body);
    assert!(page.body.contains("boss"), "{}", page.body);

    // Logged out on B: A, which had it cached, refuses it within the window.
    let token = on_b.get("/tests").await.csrf();
    let out = on_b.post("/logout", &[("csrf_token", &token)]).await;
    assert_eq!(out.status, 302, "{}", out.body);
    let mut again = crate::web::Browser::new(&a);
    again.cookie = cookie;
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let page = again.get("/user").await;
        if page.status != 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "A still takes a session logged out on B: {}",
            page.body
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A PGN upload on a secondary is checked as the primary checks it: a task the secondary's
/// copy of the run does not hold is looked up in the store, and refused unless it is there
/// and the uploading worker's; nothing is stored for a refused upload.
#[tokio::test]
async fn a_secondary_refuses_pgns_of_tasks_that_are_not_the_workers() {
    use base64::Engine as _;
    let uri = mongo::fresh_uri("uploads");
    let dir = tempfile::tempdir().expect("tempdir");
    let primary = instance(&uri, dir.path(), "primary", true).await;
    add_user(&primary, "alice", &["--email", "alice@example.org"]);
    add_user(&primary, "mallory", &["--email", "mallory@example.org"]);
    add_user(
        &primary,
        "boss",
        &["--approver", "--email", "boss@example.org"],
    );
    let run = create_run(&primary, "alice", fixed_args(100_000)).await;
    approve(&primary, "boss", &run).await;
    // The secondary starts with the run in its cache, before any task exists.
    let secondary = instance(&uri, dir.path(), "second", false).await;
    let alice = Worker::new("alice", 8, 0x61);
    let task = alice.request_task(&primary).await;
    let task_id = task["task_id"].as_u64().expect("task id");
    // Wait for the primary's write-behind to put the task in the store.
    let deadline = Instant::now() + Duration::from_secs(20);
    let oid = bson::oid::ObjectId::parse_str(&run).expect("an ObjectId");
    while mongo::docs(&uri, "runs", bson::doc! {"_id": oid}).await[0]
        .get_array("tasks")
        .map_or(0, |t| t.len() as u64)
        <= task_id
    {
        assert!(
            Instant::now() < deadline,
            "the task never reached the store"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let pgn = crate::worker_api::gz("[Event \"s\"]\n1. c4 *\n");
    let body = |task_id: u64| {
        json!({"run_id": run, "task_id": task_id, "message": "",
            "pgn": base64::engine::general_purpose::STANDARD.encode(&pgn)})
    };
    // Another user's worker, on alice's task and on tasks that do not exist: refused.
    let mallory = Worker::new("mallory", 8, 0x62);
    for id in [task_id, task_id + 1, 1_000_000] {
        let (status, v) = mallory.call(&secondary, "/api/upload_pgn", body(id)).await;
        assert_ne!(status, 200, "mallory's upload of task {id}: {v}");
        assert!(v["error"].is_string(), "{v}");
        let r = secondary
            .client
            .get(secondary.url(&format!("/api/pgn/{run}-{id}.pgn")))
            .send()
            .await
            .expect("get");
        assert_eq!(r.status(), 404, "a PGN stored for task {id}");
    }
    // alice's own task: taken.
    let (status, v) = alice
        .call(&secondary, "/api/upload_pgn", body(task_id))
        .await;
    assert_eq!(status, 200, "{v}");
}

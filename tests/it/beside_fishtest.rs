//! shoal beside Fishtest on one MongoDB database (docs/migrating-from-fishtest.md, "Running
//! beside Fishtest"), on a real MongoDB-compatible server (`mongo.rs`): the database is
//! Fishtest's own sample, imported unchanged. shoal starts although the server refuses
//! Fishtest's text indexes; a login through shoal leaves Fishtest's password as it was; every
//! document shoal writes, by every write path a person or a worker can trigger, passes
//! Fishtest's own schemas (`fishtest_schema.rs`); legacy user names
//! work and a name added while shoal runs is followed; `shoal user finalize-passwords` ends
//! the trial.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use bson::{Bson, Document, doc};
use serde_json::{Value, json};

use crate::harness::{Opts, TestServer, bin};
use crate::mongo;

pub(crate) fn dump_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fishtest-db")
}

/// Runs `shoal <args>` on the MongoDB database `uri` (from a directory without settings).
pub(crate) fn shoal(data: &Path, uri: &str, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin())
        .args(args)
        .current_dir(data.parent().expect("parent"))
        .env_clear()
        .env("SHOAL_DATA_DIR", data)
        .env("SHOAL_STORE", "mongodb")
        .env("SHOAL_MONGODB_URI", uri)
        .env("SHOAL_LOG", "warn")
        .output()
        .expect("run shoal");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json_file(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dump_dir().join(name)).expect("dump file");
    serde_json::from_str(&text).expect("a JSON array")
}

pub(crate) async fn user_doc(uri: &str, name: &str) -> Document {
    mongo::docs(uri, "users", doc! {"username": name})
        .await
        .pop()
        .unwrap_or_else(|| panic!("user {name}"))
}

async fn version(server: &TestServer, user: &str, password: &str) -> (u16, Value) {
    server
        .post_json(
            "/api/request_version",
            &json!({"password": password, "worker_info": {"username": user}}),
        )
        .await
}

async fn request_task(server: &TestServer, user: &str, password: &str, n: u32) -> (u16, Value) {
    let info = crate::fleet::worker_info(user, 4, &crate::fleet::key(n));
    server
        .post_json(
            "/api/request_task",
            &json!({"password": password, "worker_info": info}),
        )
        .await
}

/// A user document as Fishtest writes one (plaintext password), straight into the database.
async fn insert_fishtest_user(uri: &str, name: &str, password: &str) {
    let (name, password) = (name.to_string(), password.to_string());
    mongo::run(uri, move |db| {
        db.collection::<Document>("users")
            .insert_one(doc! {
                "username": &name, "password": password,
                "registration_time": bson::DateTime::now(), "pending": false,
                "blocked": false, "email": format!("{name}@example.org"),
                "groups": [], "tests_repo": "", "machine_limit": 16,
            })
            .run()
            .expect("insert");
    })
    .await;
}

#[tokio::test]
async fn shoal_beside_fishtest_on_one_mongodb_database() {
    let uri = mongo::fresh_uri("beside");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let dump = dump_dir();
    let (ok, _, err) = shoal(
        &data,
        &uri,
        &["import", "--fishtest", dump.to_str().expect("path")],
    );
    assert!(ok, "import: {err}");
    // A volunteer older than the name rule, listed as Fishtest lists them.
    insert_fishtest_user(&uri, "old.timer", "old pw").await;
    insert_fishtest_user(&uri, "late.comer", "late pw").await;
    mongo::run(&uri, |db| {
        db.collection::<Document>("kvstore")
            .update_one(
                doc! {"_id": "legacy_usernames"},
                doc! {"$set": {"value": ["old.timer"]}},
            )
            .upsert(true)
            .run()
            .expect("legacy list");
    })
    .await;
    let before: BTreeMap<String, Document> = mongo::docs(&uri, "users", doc! {})
        .await
        .into_iter()
        .map(|d| (d.get_str("username").expect("name").to_string(), d))
        .collect();

    let server = TestServer::start_with(
        Opts::new()
            .set("store", "mongodb")
            .set("mongodb_uri", &uri)
            .data_dir(&data),
    )
    .await;
    // The server refuses Fishtest's two text indexes: shoal starts and names them.
    let logs = server.logs();
    for index in ["finished_runs_text", "action_text_username_text"] {
        assert!(logs.contains(index), "the log names {index}: {logs}");
    }

    // Logins through shoal, web and worker, leave Fishtest's documents as they were.
    let (status, reply) = version(&server, "vexillum", "ember-delta-2910").await;
    assert_eq!(status, 200, "{reply}");
    let (status, _) = version(&server, "vexillum", "wrong").await;
    assert_eq!(status, 401);
    let mut browser = crate::web::Browser::new(&server);
    let token = browser.get("/login").await.csrf();
    let page = browser
        .post(
            "/login",
            &[
                ("username", "quarkling"),
                ("password", "amber-ember-6081"),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert!(
        page.status == 302 || page.status == 303,
        "web login: {} {}",
        page.status,
        page.body
    );
    assert!(!page.location.contains("/login"), "{}", page.location);
    for name in ["vexillum", "quarkling"] {
        assert_eq!(
            user_doc(&uri, name).await,
            before[name],
            "{name}'s document after a login through shoal"
        );
    }

    // A legacy name's worker gets work; a name neither valid nor listed is refused.
    let (status, reply) = request_task(&server, "old.timer", "old pw", 1).await;
    assert_eq!(status, 200, "{reply}");
    assert!(reply.get("error").is_none(), "{reply}");
    assert!(reply["run"]["_id"].is_string(), "a task: {reply}");
    let (status, reply) = request_task(&server, "late.comer", "late pw", 2).await;
    assert_eq!(status, 400, "not listed yet: {reply}");
    // Listed while shoal runs (through shoal's command, into the same kvstore document
    // Fishtest reads): followed without a restart.
    let (ok, out, err) = shoal(
        &data,
        &uri,
        &["user", "legacy-names", "--add", "late.comer"],
    );
    assert!(ok, "legacy-names: {err}");
    assert!(out.contains("late.comer"), "{out}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, reply) = request_task(&server, "late.comer", "late pw", 2).await;
        if status == 200 {
            assert!(reply.get("error").is_none(), "{reply}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "late.comer still refused: {reply}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let listed = mongo::docs(&uri, "kvstore", doc! {"_id": "legacy_usernames"}).await;
    assert_eq!(
        listed[0].get_array("value").expect("a list"),
        &vec![Bson::from("old.timer"), Bson::from("late.comer")]
    );

    // Work through shoal: a task of a non-SPSA run (which records its trajectory) played and
    // reported, written to the run behind. Each machine takes the next run.
    let (mut info, mut task) = (Value::Null, Value::Null);
    for n in 10..20 {
        info = crate::fleet::worker_info("vexillum", 1, &crate::fleet::key(n));
        let (status, reply) = server
            .post_json(
                "/api/request_task",
                &json!({"password": "ember-delta-2910", "worker_info": info}),
            )
            .await;
        assert_eq!(status, 200, "{reply}");
        if reply["run"]["args"].get("spsa").is_none() && reply["run"]["_id"].is_string() {
            task = reply;
            break;
        }
    }
    assert!(task.is_object(), "a task of a non-SPSA run");
    let run_id = task["run"]["_id"].as_str().expect("run id").to_string();
    let task_id = task["task_id"].as_u64().expect("task id");
    let start = &task["run"]["my_task"]["stats"];
    let played = |key: &str| start[key].as_u64().unwrap_or(0);
    // One SPRT batch of won pairs (a fixed-games run takes any whole pair).
    let pairs = task["run"]["args"]["sprt"]["batch_size"]
        .as_u64()
        .unwrap_or(1);
    let stats = json!({
        "wins": played("wins") + 2 * pairs, "losses": played("losses"),
        "draws": played("draws"), "crashes": played("crashes"),
        "time_losses": played("time_losses"),
        "pentanomial": start["pentanomial"].as_array().map_or(json!([0, 0, 0, 0, pairs]), |p| {
            let mut p: Vec<u64> = p.iter().map(|x| x.as_u64().unwrap_or(0)).collect();
            p[4] += pairs;
            json!(p)
        }),
    });
    let (status, reply) = server
        .post_json(
            "/api/update_task",
            &json!({"password": "ember-delta-2910", "worker_info": info,
                    "run_id": run_id, "task_id": task_id, "stats": stats}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    assert!(reply.get("error").is_none(), "{reply}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let oid = bson::oid::ObjectId::parse_str(&run_id).expect("an ObjectId");
    loop {
        let run = mongo::docs(&uri, "runs", doc! {"_id": oid}).await;
        let tasks = run[0].get_array("tasks").expect("tasks");
        let written = tasks
            .get(usize::try_from(task_id).expect("index"))
            .and_then(Bson::as_document)
            .and_then(|t| t.get_document("stats").ok())
            .and_then(|s| {
                s.get("wins").and_then(Bson::as_i32).or_else(|| {
                    s.get("wins")
                        .and_then(Bson::as_i64)
                        .and_then(|n| i32::try_from(n).ok())
                })
            });
        if written.and_then(|w| u64::try_from(w).ok()) == Some(played("wins") + 2 * pairs) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the update never reached the run: {:?}",
            tasks.get(usize::try_from(task_id).expect("index"))
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // shoal's own record of the run's progress is kept beside the run, not in it.
    let extras = mongo::docs(&uri, "shoal_run_extras", doc! {"_id": &run_id}).await;
    assert!(
        extras
            .first()
            .is_some_and(|d| d.get_document("trajectory").is_ok()),
        "the trajectory beside the run: {extras:?} {}",
        task["run"]["args"]
    );
    // A run submitted and approved through shoal is one Fishtest can read: no field its runs
    // never have (checked below for every run) and every field all of its runs have.
    let mut args = crate::fleet::sprt_args(0.0, 2.0);
    args["base_nets"] = json!(["nn-c9bb380a673b.nnue"]);
    args["new_nets"] = json!(["nn-c9bb380a673b.nnue"]);
    let (status, created) = server
        .post_json(
            "/api/create_run",
            &json!({"username": "nimbus", "password": "ember-delta-7414", "args": args}),
        )
        .await;
    assert_eq!(status, 200, "create_run: {created}");
    let new_run = created["run_id"].as_str().expect("run_id").to_string();
    let (status, approved) = server
        .post_json(
            "/api/approve_run",
            &json!({"username": "vexillum", "password": "ember-delta-2910",
                    "run_id": new_run}),
        )
        .await;
    assert_eq!(status, 200, "approve_run: {approved}");
    let oid = bson::oid::ObjectId::parse_str(&new_run).expect("an ObjectId");
    let written = mongo::docs(&uri, "runs", doc! {"_id": oid}).await;
    let written = written.first().expect("the new run, written at once");
    let every_run = json_file("runs.json");
    let common = |f: &dyn Fn(&Value) -> &Value| -> BTreeSet<String> {
        every_run
            .iter()
            .map(|r| {
                f(r).as_object()
                    .map(|m| m.keys().cloned().collect())
                    .unwrap_or_default()
            })
            .reduce(|a: BTreeSet<String>, b| a.intersection(&b).cloned().collect())
            .unwrap_or_default()
    };
    let have: BTreeSet<String> = written.keys().cloned().collect();
    let missing: Vec<_> = common(&|r| r).difference(&have).cloned().collect();
    assert!(
        missing.is_empty(),
        "fields every Fishtest run has: {missing:?}"
    );
    let have: BTreeSet<String> = written
        .get_document("args")
        .expect("args")
        .keys()
        .cloned()
        .collect();
    let missing: Vec<_> = common(&|r| &r["args"]).difference(&have).cloned().collect();
    assert!(
        missing.is_empty(),
        "args every Fishtest run has: {missing:?}"
    );

    // An account made through shoal during the trial is one Fishtest can use.
    let (ok, _, err) = shoal(
        &data,
        &uri,
        &[
            "user",
            "add",
            "newcomer",
            "--password",
            "new pw 1",
            "--email",
            "n@example.org",
        ],
    );
    assert!(ok, "user add: {err}");
    let newcomer = user_doc(&uri, "newcomer").await;
    assert_eq!(newcomer.get_str("password").ok(), Some("new pw 1"));
    assert_fishtest_schemas(&uri, "before finalize-passwords").await;

    // The end of the trial: the plaintext goes, the hash stays, logins go on.
    let (ok, out, err) = shoal(&data, &uri, &["user", "finalize-passwords"]);
    assert!(ok, "finalize: {out} {err}");
    for name in ["vexillum", "quarkling", "old.timer", "newcomer", "ashgrove"] {
        let d = user_doc(&uri, name).await;
        assert!(
            !d.contains_key("password"),
            "{name}: plaintext removed: {d}"
        );
        assert!(
            d.get_str("password_hash")
                .is_ok_and(|h| h.starts_with("$argon2id$")),
            "{name}: {d}"
        );
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The server re-reads the user within seconds and checks the hash.
        let (status, reply) = version(&server, "vexillum", "ember-delta-2910").await;
        assert_eq!(status, 200, "{reply}");
        let (status, _) = version(&server, "newcomer", "new pw 1").await;
        if status == 200 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "newcomer cannot log in after finalize"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, _) = version(&server, "vexillum", "wrong again").await;
    assert_eq!(status, 401);
    let events = mongo::docs(&uri, "actions", doc! {"action": "system_event"}).await;
    assert!(
        events.iter().any(|a| a
            .get_str("message")
            .is_ok_and(|m| m.contains("finalize-passwords"))),
        "the action log records the finalize: {events:?}"
    );
    // New accounts get no plaintext now.
    let (ok, _, err) = shoal(
        &data,
        &uri,
        &[
            "user",
            "add",
            "later",
            "--password",
            "later pw",
            "--email",
            "l@example.org",
        ],
    );
    assert!(ok, "user add: {err}");
    assert!(!user_doc(&uri, "later").await.contains_key("password"));
}

/// Logs `user` in through the login form (password [`crate::fleet::PASSWORD`]); the browser
/// and a CSRF token of a page behind the login.
async fn web_session<'a>(server: &'a TestServer, user: &str) -> (crate::web::Browser<'a>, String) {
    let mut b = crate::web::Browser::new(server);
    let token = b.get("/login").await.csrf();
    let page = b
        .post(
            "/login",
            &[
                ("username", user),
                ("password", crate::fleet::PASSWORD),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "login {user}: {}", page.body);
    let token = b.get("/tests").await.csrf();
    (b, token)
}

/// Asserts that every document of Fishtest's collections passes Fishtest's schemas
/// (`fishtest_schema.rs`), naming each problem.
async fn assert_fishtest_schemas(uri: &str, when: &str) {
    let problems = crate::fishtest_schema::check_database(uri).await;
    assert!(
        problems.is_empty(),
        "{when}: documents Fishtest's schemas refuse:\n{}",
        problems.join("\n")
    );
}

/// Every write path a person or a worker can trigger, through shoal on a database shared
/// with Fishtest; then every document of every collection Fishtest uses passes Fishtest's
/// own schemas, and shoal's own data (sessions, tokens, follows, its own action kinds) is in
/// shoal's own collections.
#[tokio::test]
async fn every_write_path_beside_fishtest_passes_fishtests_schemas() {
    use crate::fleet::{PASSWORD, Totals, Worker, fixed_args};
    let uri = mongo::fresh_uri("paths");
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("data");
    let dump = dump_dir();
    let (ok, _, err) = shoal(
        &data,
        &uri,
        &["import", "--fishtest", dump.to_str().expect("path")],
    );
    assert!(ok, "import: {err}");
    assert_fishtest_schemas(&uri, "the imported dump").await;
    for (name, extra) in [("walker", None), ("chief", Some("--approver"))] {
        let email = format!("{name}@example.org");
        let mut args = vec![
            "user",
            "add",
            name,
            "--password",
            PASSWORD,
            "--email",
            &email,
        ];
        args.extend(extra);
        let (ok, _, err) = shoal(&data, &uri, &args);
        assert!(ok, "user add {name}: {err}");
    }
    let server = TestServer::start_with(
        Opts::new()
            .set("store", "mongodb")
            .set("mongodb_uri", &uri)
            .set("dead_task_timeout_s", 1)
            .set("pgn_retention_days", 1)
            .set(
                "limits",
                r#"[{kind = "concurrency", key = "user", max = 50}]"#,
            )
            .data_dir(&data),
    )
    .await;
    let started = chrono::Utc::now().timestamp() as f64;
    let (mut walker, walker_token) = web_session(&server, "walker").await;
    let (mut chief, chief_token) = web_session(&server, "chief").await;

    // A net uploaded, then downloaded by a worker (its counter).
    let (bytes, net) = crate::ui_nets::net(7, 20_000);
    let page = crate::ui_nets::upload(&mut walker, Some(&walker_token), Some((&net, &bytes))).await;
    assert!(
        page.status == 302 || page.status == 200,
        "upload: {} {}",
        page.status,
        page.body
    );
    let r = server
        .client
        .get(server.url(&format!("/api/nn/{net}")))
        .send()
        .await
        .expect("download");
    assert!(
        r.status().is_success() || r.status().is_redirection(),
        "{}",
        r.status()
    );
    let nns = mongo::docs(&uri, "nns", doc! {"name": &net}).await;
    assert_eq!(nns.len(), 1, "{nns:?}");
    assert_eq!(
        nns[0]
            .get("downloads")
            .and_then(Bson::as_i64)
            .or_else(|| nns[0].get_i32("downloads").ok().map(i64::from)),
        Some(1),
        "{:?}",
        nns[0]
    );

    // Runs: one testing the net, approved (the net's first and last test), played, its
    // PGN uploaded, a worker's log line; another finished by its games.
    let mut args = fixed_args(1000);
    args["new_nets"] = json!([net]);
    args["base_nets"] = json!(["nn-c9bb380a673b.nnue"]);
    args["tests_repo"] = json!("https://github.com/walker/Stockfish");
    let run = crate::fleet::create_run(&server, "walker", args).await;
    crate::fleet::approve(&server, "chief", &run).await;
    let nns = mongo::docs(&uri, "nns", doc! {"name": &net}).await;
    assert!(
        nns[0].contains_key("first_test") && nns[0].contains_key("last_test"),
        "{:?}",
        nns[0]
    );
    let mut w = Worker::new("walker", 4, 0x51);
    let reply = w.request_task(&server).await;
    assert_eq!(reply["run"]["_id"], json!(run), "{reply}");
    let task_id = reply["task_id"].as_u64().expect("task id");
    let mut totals = Totals::default();
    for _ in 0..10 {
        totals.play_pair(&mut w.rng, [0.1, 0.2, 0.4, 0.2, 0.1]);
    }
    // Crashes: the task ends as a crash_or_time, and a purge takes it out (a bad task).
    let mut stats = totals.json();
    stats["crashes"] = json!(4);
    let (status, v) = w
        .call(
            &server,
            "/api/update_task",
            json!({"run_id": run, "task_id": task_id, "stats": stats}),
        )
        .await;
    assert_eq!(status, 200, "{v}");
    let pgn = {
        use std::io::Write as _;
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        gz.write_all(b"[Event \"x\"]\n\n1. e4 e5 1/2-1/2\n")
            .expect("gzip");
        gz.finish().expect("gzip")
    };
    let b64 = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&pgn)
    };
    let (status, v) = w
        .call(
            &server,
            "/api/upload_pgn",
            json!({"run_id": run, "task_id": task_id, "pgn": b64}),
        )
        .await;
    assert_eq!(status, 200, "upload_pgn: {v}");
    let (status, v) = w
        .call(
            &server,
            "/api/worker_log",
            json!({"message": "a line from the worker"}),
        )
        .await;
    assert_eq!(status, 200, "worker_log: {v}");
    let (status, v) = w
        .call(
            &server,
            "/api/failed_task",
            json!({"run_id": run, "task_id": task_id, "message": "engine crashed"}),
        )
        .await;
    assert_eq!(status, 200, "failed_task: {v}");
    // A task left silent: declared dead by the scavenger.
    let silent = Worker::new("walker", 2, 0x52);
    let reply = silent.request_task(&server).await;
    assert!(reply["task_id"].is_u64(), "{reply}");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let (status, v) = server
        .post_json("/debug/job/scavenge_dead_tasks", &json!({}))
        .await;
    assert_eq!(status, 200, "scavenge: {v}");
    let dead = mongo::docs(&uri, "actions", doc! {"action": "dead_task"}).await;
    assert!(!dead.is_empty(), "a dead task logged");

    // A worker's stop: refused as not authorized (too few CPU hours), logged as Fishtest logs it.
    let stopper = Worker::new("walker", 4, 0x53);
    let reply = stopper.request_task(&server).await;
    if let Some(tid) = reply["task_id"].as_u64() {
        let (status, v) = stopper
            .call(
                &server,
                "/api/stop_run",
                json!({"run_id": reply["run"]["_id"], "task_id": tid, "message": "bench mismatch"}),
            )
            .await;
        assert!(status == 200 || status == 401, "stop_run: {v}");
    }

    // Block and unblock a worker; the blocked worker asks for work meanwhile.
    let short = {
        let key = w.info["unique_key"].as_str().expect("key");
        format!("walker-4cores-{}", key.split('-').next().expect("prefix"))
    };
    let page = chief
        .post(
            &format!("/workers/{short}"),
            &[
                ("csrf_token", &chief_token),
                ("blocked", "1"),
                ("message", "too fast"),
                ("submit", "Submit"),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "block: {}", page.body);
    let (status, v) = w.call(&server, "/api/request_task", json!({})).await;
    assert!(status == 200 || status == 400, "{v}");
    let page = chief
        .post(
            &format!("/workers/{short}"),
            &[
                ("csrf_token", &chief_token),
                ("message", ""),
                ("submit", "Submit"),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "unblock: {}", page.body);

    // Signup, accepted by an approver; a profile edit; a user blocked and unblocked.
    let mut newcomer = crate::web::Browser::new(&server);
    let form = newcomer.get("/signup").await;
    let (csrf, form_token) = (form.csrf(), form.input("form_token").expect("form token"));
    let page = newcomer
        .post(
            "/signup",
            &[
                ("username", "seabird"),
                ("password", "violet otter juggles nine lamps"),
                ("password2", "violet otter juggles nine lamps"),
                ("email", "seabird@example.org"),
                ("csrf_token", &csrf),
                ("form_token", &form_token),
                ("website", ""),
            ],
        )
        .await;
    assert!(
        page.status == 302 || page.status == 200,
        "signup: {}",
        page.body
    );
    assert!(
        !mongo::docs(&uri, "users", doc! {"username": "seabird"})
            .await
            .is_empty(),
        "signed up: {}",
        page.body
    );
    let page = chief
        .post(
            "/user/seabird",
            &[
                ("user", "seabird"),
                ("pending", "0"),
                ("csrf_token", &chief_token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "accept: {}", page.body);
    let page = walker
        .post(
            "/user",
            &[
                ("user", "walker"),
                ("email", "walker.new@example.org"),
                ("old_password", PASSWORD),
                ("password", ""),
                ("password2", ""),
                ("tests_repo", "https://github.com/walker/Stockfish/"),
                ("csrf_token", &walker_token),
            ],
        )
        .await;
    assert!(
        page.status == 302 || page.status == 200,
        "profile: {}",
        page.body
    );
    let walker_doc = user_doc(&uri, "walker").await;
    assert_eq!(
        walker_doc.get_str("email").ok(),
        Some("walker.new@example.org"),
        "{walker_doc}"
    );
    for blocked in ["1", "0"] {
        let page = chief
            .post(
                "/user/seabird",
                &[
                    ("user", "seabird"),
                    ("blocked", blocked),
                    ("csrf_token", &chief_token),
                ],
            )
            .await;
        assert_eq!(page.status, 302, "block user {blocked}: {}", page.body);
    }

    // seabird changes its password on its profile (written as Fishtest writes one).
    {
        let mut b = crate::web::Browser::new(&server);
        let token = b.get("/login").await.csrf();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let page = b
                .post(
                    "/login",
                    &[
                        ("username", "seabird"),
                        ("password", "violet otter juggles nine lamps"),
                        ("csrf_token", &token),
                    ],
                )
                .await;
            if page.status == 302 {
                break;
            }
            assert!(Instant::now() < deadline, "seabird login: {}", page.body);
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        let token = b.get("/user").await.csrf();
        let page = b
            .post(
                "/user",
                &[
                    ("user", "seabird"),
                    ("email", "seabird@example.org"),
                    ("old_password", "violet otter juggles nine lamps"),
                    ("password", "amber heron sings eleven tunes"),
                    ("password2", "amber heron sings eleven tunes"),
                    ("tests_repo", ""),
                    ("csrf_token", &token),
                ],
            )
            .await;
        assert!(
            page.status == 302 || page.status == 200,
            "password: {}",
            page.body
        );
        let d = user_doc(&uri, "seabird").await;
        assert_eq!(
            d.get_str("password").ok(),
            Some("amber heron sings eleven tunes"),
            "{d}"
        );
    }

    // The operator adds a net from a file (its record as Fishtest's schema has it).
    let (bytes, cli_net) = crate::ui_nets::net(9, 12_000);
    let file = dir.path().join(&cli_net);
    std::fs::write(&file, &bytes).expect("net file");
    let (ok, out, err) = shoal(
        &data,
        &uri,
        &["nn", "--user", "walker", file.to_str().expect("path")],
    );
    assert!(ok, "shoal nn: {out} {err}");
    let (ok, _, err) = shoal(
        &data,
        &uri,
        &["nn", "--user", "shoal-cli", file.to_str().expect("path")],
    );
    assert!(!ok && err.contains("not a username"), "{err}");
    // The operator's commands on a user.
    for args in [
        &["user", "set", "seabird", "--block"][..],
        &["user", "set", "seabird", "--unblock"],
        &["user", "set", "seabird", "--machine-limit", "8"],
        &["user", "set", "seabird", "--approver"],
        &["user", "set", "seabird", "--no-approver"],
        &[
            "user",
            "set",
            "seabird",
            "--password",
            "teal walrus paints four doors",
        ],
    ] {
        let (ok, out, err) = shoal(&data, &uri, args);
        assert!(ok, "{args:?}: {out} {err}");
    }

    // A test group (issue 39): two takes, one passes, the other is superseded; the group is
    // kept in shoal_kvstore, the superseded take finished as Fishtest's schema allows.
    let mut shared = crate::fleet::sprt_args(0.0, 5.0);
    for k in ["new_tag", "resolved_new", "new_signature"] {
        shared.as_object_mut().expect("object").remove(k);
    }
    shared["priority"] = json!(9);
    let (status, v) = server
        .post_json(
            "/api/create_group",
            &json!({"username": "walker", "password": PASSWORD, "args": shared, "takes": [
                {"new_tag": "take-a", "resolved_new": crate::fleet::sha('b'), "new_signature": "1234568"},
                {"new_tag": "take-b", "resolved_new": crate::fleet::sha('c'), "new_signature": "1234569"},
            ]}),
        )
        .await;
    assert_eq!(status, 200, "create_group: {v}");
    let group_id = v["group_id"].as_str().expect("group_id").to_string();
    let takes: Vec<String> = v["run_ids"]
        .as_array()
        .expect("run_ids")
        .iter()
        .map(|r| r.as_str().expect("id").to_string())
        .collect();
    for take in &takes {
        crate::fleet::approve(&server, "chief", take).await;
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut n = 0;
    let group = loop {
        let (_, g) = server.get_json(&format!("/api/get_group/{group_id}")).await;
        if g["state"] != "active" {
            break g;
        }
        assert!(Instant::now() < deadline, "the group never ended: {g}");
        n += 1;
        let mut player = Worker::new("walker", 4, 0x90 + n);
        let reply = player.request_task(&server).await;
        // take-a far stronger than the base, take-b as strong as it.
        if reply["run"]["_id"] == json!(takes[0]) {
            player
                .play(&server, &reply, 64, [0.0, 0.0, 0.1, 0.3, 0.6])
                .await;
        } else if reply["run"]["_id"] == json!(takes[1]) {
            player
                .play(&server, &reply, 64, [0.1, 0.2, 0.4, 0.2, 0.1])
                .await;
        } else {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    };
    assert_eq!(group["state"], "passed", "{group}");
    // The action log is written behind: flushed first.
    let (status, v) = server
        .post_json("/debug/job/flush_buffers", &json!({}))
        .await;
    assert_eq!(status, 200, "flush: {v}");
    let superseded: Vec<Document> = mongo::docs(&uri, "actions", doc! {"action": "stop_run"})
        .await
        .into_iter()
        .filter(|a| {
            a.get_str("message")
                .is_ok_and(|m| m.starts_with("superseded by "))
        })
        .collect();
    assert_eq!(superseded.len(), 1, "{superseded:?}");
    let kept = mongo::docs(&uri, "shoal_kvstore", doc! {"kind": "test_group"}).await;
    assert_eq!(kept.len(), 1, "{kept:?}");
    // Follows, an API token (made, used, revoked), a reset link: shoal's own.
    let page = walker
        .post(
            "/tests/follow",
            &[("run", run.as_str()), ("csrf_token", &walker_token)],
        )
        .await;
    assert!(
        page.status == 302 || page.status == 200,
        "follow: {}",
        page.body
    );
    let page = walker
        .post(
            "/user/tokens",
            &[
                ("name", "ci"),
                ("password", PASSWORD),
                ("csrf_token", &walker_token),
            ],
        )
        .await;
    assert_eq!(page.status, 200, "token: {}", page.body);
    let secret = page
        .body
        .split("<code id=\"new-token\">")
        .nth(1)
        .and_then(|r| r.split("</code>").next())
        .expect("the new token")
        .to_string();
    let other = crate::fleet::create_run(&server, "walker", fixed_args(1000)).await;
    let r = server
        .client
        .post(server.url("/api/create_run"))
        .bearer_auth(&secret)
        .json(&json!({"args": fixed_args(2000)}))
        .send()
        .await
        .expect("create_run with a token");
    assert_eq!(r.status(), 200, "{:?}", r.text().await);
    let page = chief
        .post("/user/seabird/reset_link", &[("csrf_token", &chief_token)])
        .await;
    assert_eq!(page.status, 200, "reset link: {}", page.body);
    // seabird follows it and sets a new password (written as Fishtest writes one).
    let path = {
        let at = page.body.find("/reset/").expect("a reset link");
        let rest = &page.body[at..];
        let end = rest[7..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(rest.len(), |e| e + 7);
        rest[..end].to_string()
    };
    let mut anon = crate::web::Browser::new(&server);
    let form = anon.get(&path).await;
    assert_eq!(form.status, 200, "{}", form.body);
    let csrf = form.csrf();
    let done = anon
        .post(
            &path,
            &[
                ("password", "scarlet badger knits ten socks"),
                ("password2", "scarlet badger knits ten socks"),
                ("csrf_token", &csrf),
            ],
        )
        .await;
    assert!(
        done.status == 302 || done.status == 200,
        "reset: {}",
        done.body
    );
    assert_eq!(
        user_doc(&uri, "seabird").await.get_str("password").ok(),
        Some("scarlet badger knits ten socks")
    );

    // The run controls: modify, purge, stop, delete.
    let page = chief
        .post(
            "/tests/modify",
            &[
                ("run", run.as_str()),
                ("num-games", "1000"),
                ("priority", "1"),
                ("throughput", "150"),
                ("info", "more games"),
                ("csrf_token", &chief_token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "modify: {}", page.body);
    for path in ["/tests/stop", "/tests/purge"] {
        let page = chief
            .post(
                path,
                &[
                    ("run-id", run.as_str()),
                    ("csrf_token", &chief_token),
                    ("confirm", "yes"),
                ],
            )
            .await;
        assert_eq!(page.status, 302, "{path}: {}", page.body);
    }
    let page = chief
        .post(
            "/tests/delete",
            &[
                ("run-id", other.as_str()),
                ("csrf_token", &chief_token),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "delete: {}", page.body);
    // An SPSA run: a task, its parameters asked for and one batch reported.
    let mut spsa_args = fixed_args(4000);
    spsa_args["spsa"] = json!({"raw_params": "Alpha,50,0,100,5,0.002\nBeta,-20,-100,100,8,0.002"});
    let spsa = crate::fleet::create_run(&server, "walker", spsa_args).await;
    crate::fleet::approve(&server, "chief", &spsa).await;
    let page = chief
        .post(
            "/tests/modify",
            &[
                ("run", spsa.as_str()),
                ("num-games", "4000"),
                ("priority", "9"),
                ("throughput", "100"),
                ("info", "tuning"),
                ("csrf_token", &chief_token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "modify: {}", page.body);
    let mut tuner = Worker::new("walker", 4, 0x70);
    let reply = tuner.request_task(&server).await;
    assert_eq!(reply["run"]["_id"], json!(spsa), "{reply}");
    let ids = json!({"run_id": spsa, "task_id": reply["task_id"]});
    let mut body = ids.clone();
    body["stats"] = Totals::default().json();
    let (status, asked) = tuner.call(&server, "/api/request_spsa", body).await;
    assert_eq!(status, 200, "{asked}");
    let mut t = Totals::default();
    while t.games() < 16 {
        t.play_pair(&mut tuner.rng, [0.1, 0.2, 0.4, 0.2, 0.1]);
    }
    let mut body = ids.clone();
    body["stats"] = t.json();
    body["spsa"] = json!({"num_games": t.games(), "wins": t.wins, "losses": t.losses,
                          "draws": t.draws, "sig": asked["sig"]});
    let (status, v) = tuner.call(&server, "/api/update_task", body).await;
    assert_eq!(status, 200, "{v}");
    // The SPSA run steps back (priority 0) so the next runs are served.
    let page = chief
        .post(
            "/tests/stop",
            &[
                ("run-id", spsa.as_str()),
                ("csrf_token", &chief_token),
                ("confirm", "yes"),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "stop: {}", page.body);
    // An SPRT run decided by its games (accepted: green).
    let sprt =
        crate::fleet::create_run(&server, "walker", crate::fleet::sprt_args(-10.0, -5.0)).await;
    crate::fleet::approve(&server, "chief", &sprt).await;
    let page = chief
        .post(
            "/tests/modify",
            &[
                ("run", sprt.as_str()),
                ("num-games", "800000"),
                ("priority", "7"),
                ("throughput", "100"),
                ("info", "sprt"),
                ("csrf_token", &chief_token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "modify: {}", page.body);
    for n in 0..20 {
        let mut player = Worker::new("walker", 4, 0x80 + n);
        let reply = player.request_task(&server).await;
        if reply["run"]["_id"] != json!(sprt) {
            break;
        }
        player
            .play(&server, &reply, 64, [0.0, 0.0, 0.1, 0.3, 0.6])
            .await;
    }
    let sprt_doc = mongo::docs(
        &uri,
        "runs",
        doc! {"_id": bson::oid::ObjectId::parse_str(&sprt).expect("oid")},
    )
    .await;
    // A limit set by an approver (shoal's own action kind).
    let page = chief
        .post(
            "/limits",
            &[
                ("name", "concurrency:user"),
                ("max", "40"),
                ("csrf_token", &chief_token),
            ],
        )
        .await;
    assert_eq!(page.status, 200, "limits: {}", page.body);
    // A run played to its end (finished by its games) and its PGN retention pass.
    let small = crate::fleet::create_run(&server, "walker", fixed_args(1000)).await;
    crate::fleet::approve(&server, "chief", &small).await;
    // First in line for the next workers (the dump's runs have priority 0).
    let page = chief
        .post(
            "/tests/modify",
            &[
                ("run", small.as_str()),
                ("num-games", "1000"),
                ("priority", "5"),
                ("throughput", "100"),
                ("info", "a test run"),
                ("csrf_token", &chief_token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "modify: {}", page.body);
    for n in 0..10 {
        let mut player = Worker::new("walker", 4, 0x60 + n);
        let reply = player.request_task(&server).await;
        if reply["run"]["_id"] != json!(small) {
            break;
        }
        player
            .play(&server, &reply, 20, [0.1, 0.2, 0.4, 0.2, 0.1])
            .await;
    }
    let (status, v) = server.post_json("/debug/pgn_retention", &json!({})).await;
    assert_eq!(status, 200, "retention: {v}");
    // Every periodic job once (those asking GitHub may fail here: no GitHub), the flush of
    // everything written behind last.
    for job in [
        "scavenge_dead_tasks",
        "update_itp",
        "update_nps_gpm",
        "clean_cache",
        "refresh_blocked_workers",
        "refresh_legacy_usernames",
        "clean_worker_runs",
        "validate_data_structures",
        "refresh_limits",
        "refresh_official_master",
        "refresh_books",
        "flush_buffers",
    ] {
        let (status, v) = server
            .post_json(&format!("/debug/job/{job}"), &json!({}))
            .await;
        assert!(
            status == 200 || job.starts_with("refresh_official") || job == "refresh_books",
            "{job}: {v}"
        );
    }
    let worker_runs = mongo::docs(&uri, "kvstore", doc! {"_id": "worker_runs"}).await;
    assert_eq!(worker_runs.len(), 1, "worker_runs written: {worker_runs:?}");
    tokio::time::sleep(Duration::from_secs(3)).await;

    // Each path wrote what it writes (so the check below looked at it).
    let ours = mongo::docs(&uri, "actions", doc! {"time": {"$gte": started}}).await;
    for kind in [
        "upload_nn",
        "new_run",
        "approve_run",
        "worker_log",
        "failed_task",
        "dead_task",
        "stop_run",
        "block_worker",
        "accept_user",
        "block_user",
        "modify_run",
        "purge_run",
        "delete_run",
        "finished_run",
        "crash_or_time",
    ] {
        assert!(
            ours.iter().any(|a| a.get_str("action").ok() == Some(kind)),
            "no {kind} action written: {ours:?}"
        );
    }
    let blocked = mongo::docs(&uri, "workers", doc! {"worker_name": &short}).await;
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    let pgns = mongo::docs(&uri, "pgns", doc! {"run_id": format!("{run}-{task_id}")}).await;
    assert!(!pgns.is_empty(), "the uploaded PGN");
    assert!(
        !mongo::docs(&uri, "users", doc! {"username": "seabird"})
            .await
            .is_empty()
    );
    assert_fishtest_schemas(&uri, "after every write path").await;
    // shoal's own data stayed out of Fishtest's collections.
    let own = mongo::docs(&uri, "shoal_kvstore", doc! {}).await;
    // (The reset link was used, so deleted: its action is in shoal_actions.)
    for prefix in ["session:", "api_token:", "follows:"] {
        assert!(
            own.iter()
                .any(|d| d.get_str("_id").is_ok_and(|id| id.starts_with(prefix))),
            "{prefix} in shoal_kvstore: {own:?}"
        );
    }
    let kinds: Vec<String> = mongo::docs(&uri, "shoal_actions", doc! {})
        .await
        .iter()
        .filter_map(|a| a.get_str("action").ok().map(str::to_string))
        .collect();
    for kind in ["api_token", "password_reset", "set_limit"] {
        assert!(kinds.iter().any(|k| k == kind), "{kind}: {kinds:?}");
    }
    let decided = sprt_doc[0]
        .get_document("args")
        .and_then(|a| a.get_document("sprt"));
    assert_eq!(
        decided.and_then(|s| s.get_str("state")).ok(),
        Some("accepted"),
        "the SPRT run decided: {:?}",
        sprt_doc[0].get("results")
    );
    let purged = mongo::docs(
        &uri,
        "runs",
        doc! {"_id": bson::oid::ObjectId::parse_str(&run).expect("oid")},
    )
    .await;
    assert!(
        purged[0]
            .get_array("bad_tasks")
            .is_ok_and(|b| !b.is_empty()),
        "the crashing task purged: {:?}",
        purged[0].get("bad_tasks")
    );
    // Approvers still see shoal's own kinds in the action log: with Fishtest's (the merged
    // log's first page) and on their own.
    for path in ["/actions", "/actions?action=api_token"] {
        let page = chief.get(path).await;
        assert!(
            page.body.contains("used for create_run"),
            "{path}: {}",
            page.body
        );
    }
}

//! shoal beside Fishtest on one MongoDB database (docs/migrating-from-fishtest.md, "Running
//! beside Fishtest"), on a real MongoDB-compatible server (`mongo.rs`): the database is
//! Fishtest's own sample, imported unchanged. shoal starts although the server refuses
//! Fishtest's text indexes; a login through shoal leaves Fishtest's password as it was; every
//! document shoal writes keeps to the fields Fishtest's own documents have; legacy user names
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

/// The field names Fishtest's own documents use, per place (`users`, `runs`, `runs.args`,
/// `runs.tasks`, `actions.<kind>`, ...), from the sample database its code wrote.
fn fishtest_fields() -> BTreeMap<String, BTreeSet<String>> {
    let mut f: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut add = |place: &str, v: &Value| {
        if let Some(m) = v.as_object() {
            f.entry(place.to_string())
                .or_default()
                .extend(m.keys().cloned());
        }
    };
    for name in ["users", "workers", "nns", "pgns"] {
        for d in json_file(&format!("{name}.json")) {
            add(name, &d);
        }
    }
    for a in json_file("actions.json") {
        let kind = a["action"].as_str().expect("action kind").to_string();
        add(&format!("actions.{kind}"), &a);
    }
    for r in json_file("runs.json") {
        add("runs", &r);
        add("runs.args", &r["args"]);
        add("runs.results", &r["results"]);
        for t in r["tasks"].as_array().into_iter().flatten() {
            add("runs.tasks", t);
            add("runs.tasks.worker_info", &t["worker_info"]);
        }
        for t in r["bad_tasks"].as_array().into_iter().flatten() {
            add("runs.bad_tasks", t);
        }
    }
    f
}

/// Every field of `d` (at `place`) that Fishtest's own documents never have.
fn unknown_fields(
    fields: &BTreeMap<String, BTreeSet<String>>,
    place: &str,
    d: &Document,
) -> Vec<String> {
    let known = fields.get(place);
    d.keys()
        .filter(|k| known.is_none_or(|s| !s.contains(*k)))
        .map(|k| format!("{place}.{k}"))
        .collect()
}

/// Checks every document of the database against the fields Fishtest's documents have.
async fn assert_fishtest_shapes(uri: &str) {
    let fields = fishtest_fields();
    let mut unknown = Vec::new();
    for name in ["users", "workers", "nns", "pgns"] {
        for d in mongo::docs(uri, name, doc! {}).await {
            unknown.extend(unknown_fields(&fields, name, &d));
        }
    }
    for a in mongo::docs(uri, "actions", doc! {}).await {
        let kind = a.get_str("action").expect("an action kind").to_string();
        let place = format!("actions.{kind}");
        assert!(
            fields.contains_key(&place),
            "shoal wrote an action kind Fishtest's sample has not: {a}"
        );
        unknown.extend(unknown_fields(&fields, &place, &a));
    }
    for r in mongo::docs(uri, "runs", doc! {}).await {
        unknown.extend(unknown_fields(&fields, "runs", &r));
        let args = r.get_document("args").expect("args");
        unknown.extend(unknown_fields(&fields, "runs.args", args));
        unknown.extend(unknown_fields(
            &fields,
            "runs.results",
            r.get_document("results").expect("results"),
        ));
        for t in r.get_array("tasks").expect("tasks") {
            let Bson::Document(t) = t else {
                panic!("a task is a document")
            };
            unknown.extend(unknown_fields(&fields, "runs.tasks", t));
            unknown.extend(unknown_fields(
                &fields,
                "runs.tasks.worker_info",
                t.get_document("worker_info").expect("worker_info"),
            ));
        }
        for t in r.get_array("bad_tasks").into_iter().flatten() {
            let Bson::Document(t) = t else {
                panic!("a bad task is a document")
            };
            unknown.extend(unknown_fields(&fields, "runs.bad_tasks", t));
        }
    }
    unknown.sort();
    unknown.dedup();
    assert!(
        unknown.is_empty(),
        "fields Fishtest's documents never have: {unknown:?}"
    );
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
    assert_fishtest_shapes(&uri).await;

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

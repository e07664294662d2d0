//! A Fishtest database moved into shoal and back: `shoal import --fishtest` of the dump in
//! `tests/data/fishtest-db/` (written by Fishtest's own code), checked through the API, the
//! web UI and the login path; `shoal export --fishtest` of the imported store equal to the
//! dump, document by document; importing twice refused, and with `--merge` adding nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use bson::{Bson, Document};
use serde_json::{Value, json};

use crate::harness::{Opts, TestServer, bin, mongo_env};
use crate::web::Browser;

fn dump_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fishtest-db")
}

/// Runs `shoal <args>` on the store in `data`; returns (success, stdout, stderr).
fn shoal(data: &Path, args: &[&str]) -> (bool, String, String) {
    let out = Command::new(bin())
        .args(args)
        .current_dir(data.parent().expect("parent"))
        .env_clear()
        .envs(mongo_env(data))
        .env("SHOAL_DATA_DIR", data)
        .env("SHOAL_LOG", "warn")
        .output()
        .expect("run shoal");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

pub(crate) fn import(data: &Path, extra: &[&str]) -> (bool, String, String) {
    let dir = dump_dir();
    let mut args = vec!["import", "--fishtest", dir.to_str().expect("utf-8 path")];
    args.extend_from_slice(extra);
    shoal(data, &args)
}

fn read(path: &Path) -> Vec<Document> {
    shoal::dump::read_file(path).expect("dump file")
}

fn json_file(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dump_dir().join(name)).expect("read");
    serde_json::from_str(&text).expect("json")
}

fn oid(doc: &Value) -> String {
    doc["_id"]["$oid"].as_str().expect("oid").to_string()
}

/// A number of the dump's Extended JSON as f64.
fn num(v: &Value) -> f64 {
    match v {
        Value::Number(n) => n.as_f64().expect("f64"),
        Value::Object(m) => m
            .values()
            .next()
            .and_then(Value::as_str)
            .and_then(|s| s.parse().ok())
            .expect("number"),
        other => panic!("not a number: {other}"),
    }
}

#[test]
fn export_of_the_import_is_the_dump_document_by_document() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let (ok, out, err) = import(&data, &[]);
    assert!(ok, "import: {err}");
    for line in [
        "runs               16 documents",
        "pgns              105 documents",
    ] {
        assert!(out.contains(line), "summary lacks {line:?}:\n{out}");
    }
    assert!(out.contains("not read: README.md, indexes.json"), "{out}");
    assert!(
        !out.contains("warning"),
        "every run is readable by shoal:\n{out}"
    );

    let exported = tmp.path().join("export");
    let (ok, _, err) = shoal(
        &data,
        &["export", "--fishtest", exported.to_str().expect("path")],
    );
    assert!(ok, "export: {err}");
    for coll in shoal::dump::DUMP_COLLECTIONS {
        let file = format!("{coll}.json");
        let original = read(&dump_dir().join(&file));
        let back = read(&exported.join(&file));
        assert_eq!(original.len(), back.len(), "{coll}: document count");
        let key = |d: &Document| d.get("_id").expect("_id").to_string();
        let back: BTreeMap<String, Document> = back.into_iter().map(|d| (key(&d), d)).collect();
        for d in &original {
            let id = key(d);
            let other = back
                .get(&id)
                .unwrap_or_else(|| panic!("{coll} {id} missing"));
            assert_same(d, other, &format!("{coll} {id}"));
        }
    }
    // Files only their owner can read: they hold passwords and e-mail addresses.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(exported.join("users.json"))
        .expect("stat")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600);
    // The runs come out in `_id` order, as `mongoexport` and the dump have them.
    let ids: Vec<String> = read(&exported.join("runs.json"))
        .iter()
        .map(|d| d.get_object_id("_id").expect("oid").to_hex())
        .collect();
    let mut sorted = ids.clone();
    sorted.sort();
    assert_eq!(ids, sorted);
}

/// Equal documents with equal BSON types at every level (field order aside).
fn assert_same(a: &Document, b: &Document, what: &str) {
    assert_eq!(
        a.len(),
        b.len(),
        "{what}: fields {:?} vs {:?}",
        a.keys().collect::<Vec<_>>(),
        b.keys().collect::<Vec<_>>()
    );
    for (k, x) in a {
        let y = b.get(k).unwrap_or_else(|| panic!("{what}: no field {k}"));
        assert_same_value(x, y, &format!("{what}.{k}"));
    }
}

fn assert_same_value(x: &Bson, y: &Bson, what: &str) {
    match (x, y) {
        (Bson::Document(a), Bson::Document(b)) => assert_same(a, b, what),
        (Bson::Array(a), Bson::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{what}: length");
            for (i, (p, q)) in a.iter().zip(b).enumerate() {
                assert_same_value(p, q, &format!("{what}[{i}]"));
            }
        }
        (Bson::Double(a), Bson::Double(b)) => assert_eq!(a.to_bits(), b.to_bits(), "{what}"),
        _ => {
            assert_eq!(x.element_type(), y.element_type(), "{what}: BSON type");
            assert_eq!(x, y, "{what}");
        }
    }
}

#[test]
fn importing_twice_is_refused_and_merging_adds_nothing() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    assert!(import(&data, &[]).0);
    let (ok, out, err) = import(&data, &[]);
    assert!(!ok, "a second import must be refused: {out}");
    assert!(err.contains("--merge"), "{err}");
    let (ok, out, err) = import(&data, &["--merge"]);
    assert!(ok, "merge: {err}");
    assert!(out.contains("0 documents, 105 already stored"), "{out}");
    let exported = tmp.path().join("export");
    assert!(
        shoal(
            &data,
            &["export", "--fishtest", exported.to_str().expect("path")]
        )
        .0
    );
    for coll in shoal::dump::DUMP_COLLECTIONS {
        let file = format!("{coll}.json");
        assert_eq!(
            read(&dump_dir().join(&file)).len(),
            read(&exported.join(&file)).len(),
            "{coll}"
        );
    }
    // A directory that is not a dump changes nothing.
    let junk = tmp.path().join("junk");
    std::fs::create_dir_all(&junk).expect("mkdir");
    std::fs::write(junk.join("runs.json"), "[{\"_id\": 1},").expect("write");
    let other = tmp.path().join("other");
    let (ok, _, err) = shoal(
        &other,
        &["import", "--fishtest", junk.to_str().expect("path")],
    );
    assert!(!ok);
    assert!(err.contains("runs.json"), "{err}");
}

#[tokio::test]
async fn the_imported_database_is_served() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let (ok, _, err) = import(&data, &[]);
    assert!(ok, "import: {err}");
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;

    // Every run, with its results, SPRT state and tasks.
    for run in json_file("runs.json") {
        let id = oid(&run);
        let (status, got) = server.get_json(&format!("/api/get_run/{id}")).await;
        assert_eq!(status, 200, "{id}: {got}");
        assert_eq!(got["_id"], json!(id));
        assert_eq!(got["finished"], run["finished"], "{id}");
        assert_eq!(got["approved"], run["approved"], "{id}");
        assert_eq!(got["args"]["username"], run["args"]["username"], "{id}");
        for k in ["wins", "losses", "draws"] {
            assert_eq!(num(&got["results"][k]), num(&run["results"][k]), "{id} {k}");
        }
        if let Some(sprt) = run["args"].get("sprt") {
            assert_eq!(got["args"]["sprt"]["state"], sprt["state"], "{id}");
            assert_eq!(num(&got["args"]["sprt"]["llr"]), num(&sprt["llr"]), "{id}");
        }
        let tasks = run["tasks"].as_array().expect("tasks");
        for (i, task) in tasks
            .iter()
            .enumerate()
            .filter(|(i, _)| *i == 0 || *i + 1 == tasks.len())
        {
            let (status, t) = server.get_json(&format!("/api/get_task/{id}/{i}")).await;
            assert_eq!(status, 200, "{id}/{i}: {t}");
            assert_eq!(t["active"], task["active"], "{id}/{i}");
            assert_eq!(
                num(&t["stats"]["wins"]),
                num(&task["stats"]["wins"]),
                "{id}/{i}"
            );
        }
        let mut b = Browser::new(&server);
        let page = b.get(&format!("/tests/view/{id}")).await;
        assert_eq!(page.status, 200, "{id}");
        assert!(
            page.body
                .contains(run["args"]["new_tag"].as_str().expect("tag")),
            "{id}"
        );
    }
    let finished = json_file("runs.json")
        .iter()
        .filter(|r| r["finished"] == json!(true) && r["deleted"] != json!(true))
        .count();
    let (_, page) = server.get_json("/api/finished_runs?page=1").await;
    let runs_in = |v: &Value| {
        v.as_object()
            .map_or(0, |m| m.keys().filter(|k| k.len() == 24).count())
    };
    assert_eq!(runs_in(&page), finished, "{page}");
    let (_, active) = server.get_json("/api/active_runs").await;
    let unfinished = json_file("runs.json")
        .iter()
        .filter(|r| r["finished"] == json!(false))
        .count();
    assert_eq!(runs_in(&active), unfinished, "{active}");

    // Users log in with the passwords Fishtest stored in plain text; pending and blocked
    // users are refused, as in Fishtest.
    for user in json_file("users.json") {
        let name = user["username"].as_str().expect("name");
        let password = user["password"].as_str().expect("password");
        let mut b = Browser::new(&server);
        let form = b.get("/login").await;
        let token = form.csrf();
        let page = b
            .post(
                "/login",
                &[
                    ("username", name),
                    ("password", password),
                    ("csrf_token", &token),
                ],
            )
            .await;
        let allowed = user["pending"] == json!(false) && user["blocked"] == json!(false);
        assert_eq!(
            page.status == 302,
            allowed,
            "{name}: {} {}",
            page.status,
            page.body
        );
        let (status, reply) = server
            .post_json(
                "/api/request_version",
                &json!({"worker_info": {"username": name}, "password": password}),
            )
            .await;
        if allowed {
            assert_eq!(status, 200, "{name}: {reply}");
            assert!(reply.get("error").is_none(), "{name}: {reply}");
        }
    }
    // A worker of an imported user gets a task of one of the imported active runs.
    let info = crate::fleet::worker_info("mbriar", 8, &crate::fleet::key(77));
    let (status, reply) = server
        .post_json(
            "/api/request_task",
            &json!({"password": "fjord-harbor-7495", "worker_info": info}),
        )
        .await;
    assert_eq!(status, 200, "{reply}");
    let run_id = reply["run"]["_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {reply}"));
    let active_ids: Vec<String> = json_file("runs.json")
        .iter()
        .filter(|r| r["finished"] == json!(false) && r["approved"] == json!(true))
        .map(oid)
        .collect();
    assert!(active_ids.iter().any(|id| id == run_id), "{run_id}");
    let mut b = Browser::new(&server);
    let page = b.get("/tests/user/quarkling").await;
    assert_eq!(page.status, 200);
    // The action log, through the JSON API (its cap is 200; the dump has 100) and the page.
    let (status, rows) = server.post_json("/api/actions", &json!({})).await;
    assert_eq!(status, 200, "{rows}");
    let served: std::collections::HashSet<String> = rows
        .as_array()
        .expect("an array")
        .iter()
        .filter_map(|r| r["_id"].as_str().map(str::to_string))
        .collect();
    let dump = json_file("actions.json");
    for action in &dump {
        assert!(
            served.contains(&oid(action)),
            "action {} served",
            oid(action)
        );
    }
    let shown = dump
        .iter()
        .find(|a| a["action"] == "new_run")
        .expect("a new_run action");
    let page = b
        .get(&format!(
            "/actions?action=new_run&user={}",
            shown["username"].as_str().expect("username")
        ))
        .await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("new_run"), "{}", page.body);
    drop(server);

    // The passwords moved to argon2id hashes on their first login; the action log is
    // the dump's, plus what the server logged.
    let store = crate::harness::open_store(&data).expect("open");
    use shoal::store::Collection;
    let users = store
        .find(Collection::Users, &Default::default())
        .expect("users");
    for u in &users {
        if crate::harness::on_mongodb() {
            // Fishtest's own database: logins leave its plaintext as it was until
            // `shoal user finalize-passwords` (tests/it/beside_fishtest.rs).
            assert!(u["password"].is_string(), "{}", u["username"]);
            assert!(u.get("password_hash").is_none(), "{}", u["username"]);
        } else if u["pending"] == json!(false) && u["blocked"] == json!(false) {
            // The embedded store is shoal's alone: the plaintext is gone, the hash in a
            // field of its own.
            assert!(u.get("password").is_none(), "{}", u["username"]);
            let hash = u["password_hash"].as_str().expect("password_hash");
            assert!(hash.starts_with("$argon2id$"), "{}", u["username"]);
        }
    }
    // An export after serving: shoal's login sessions stay behind.
    drop(store);
    let exported = tmp.path().join("export");
    let (ok, out, err) = shoal(
        &data,
        &["export", "--fishtest", exported.to_str().expect("path")],
    );
    assert!(ok, "export: {err}");
    assert!(
        out.contains("login sessions of shoal's not exported"),
        "{out}"
    );
    let kv = std::fs::read_to_string(exported.join("kvstore.json")).expect("kvstore");
    assert!(!kv.contains("session:"));
    let store = crate::harness::open_store(&data).expect("open");
    for action in json_file("actions.json") {
        let id = oid(&action);
        let stored = store
            .get(Collection::Actions, &id)
            .expect("get")
            .unwrap_or_else(|| panic!("action {id}"));
        assert_eq!(stored["action"], action["action"]);
        assert_eq!(num(&stored["time"]), num(&action["time"]));
    }
}

/// The way back to Fishtest from a store that was shoal's alone (the suite's store): after
/// a net uploaded and downloaded, a run approved with it and played, an export passes
/// Fishtest's schemas (`fishtest_schema.rs`), every collection, every document; the one
/// documented exception is a user whose only password is shoal's hash (written into
/// Fishtest's `password`, too long for it: such users need a reset there, and the export
/// says how many).
#[tokio::test]
async fn an_export_after_work_through_shoal_passes_fishtests_schemas() {
    use crate::fleet::{PASSWORD, Totals, Worker, add_user, approve, create_run, fixed_args};
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let (ok, _, err) = import(&data, &[]);
    assert!(ok, "import: {err}");
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    add_user(&server, "walker", &["--email", "walker@example.org"]);
    add_user(
        &server,
        "chief",
        &["--approver", "--email", "chief@example.org"],
    );
    let mut b = Browser::new(&server);
    let token = b.get("/login").await.csrf();
    let page = b
        .post(
            "/login",
            &[
                ("username", "walker"),
                ("password", PASSWORD),
                ("csrf_token", &token),
            ],
        )
        .await;
    assert_eq!(page.status, 302, "{}", page.body);
    let token = b.get("/tests").await.csrf();
    let (bytes, net) = crate::ui_nets::net(11, 20_000);
    let page = crate::ui_nets::upload(&mut b, Some(&token), Some((&net, &bytes))).await;
    assert!(
        page.status == 302 || page.status == 200,
        "upload: {}",
        page.body
    );
    let r = server
        .client
        .get(server.url(&format!("/api/nn/{net}")))
        .send()
        .await
        .expect("download");
    assert!(r.status().is_success() || r.status().is_redirection());
    let mut args = fixed_args(1000);
    args["new_nets"] = json!([net]);
    let run = create_run(&server, "walker", args).await;
    approve(&server, "chief", &run).await;
    let mut w = Worker::new("walker", 4, 0x91);
    let reply = w.request_task(&server).await;
    if let Some(task_id) = reply["task_id"].as_u64() {
        let mut t = Totals::default();
        for _ in 0..8 {
            t.play_pair(&mut w.rng, [0.1, 0.2, 0.4, 0.2, 0.1]);
        }
        let (status, v) = w
            .call(
                &server,
                "/api/update_task",
                json!({"run_id": reply["run"]["_id"], "task_id": task_id, "stats": t.json()}),
            )
            .await;
        assert_eq!(status, 200, "{v}");
    }
    let (status, v) = server
        .post_json("/debug/job/flush_buffers", &json!({}))
        .await;
    assert_eq!(status, 200, "{v}");
    drop(server);
    let exported = tmp.path().join("export");
    let (ok, out, err) = shoal(
        &data,
        &["export", "--fishtest", exported.to_str().expect("path")],
    );
    assert!(ok, "export: {out} {err}");
    let ctx = crate::fishtest_schema::Ctx::default();
    let mut problems = Vec::new();
    for coll in crate::fishtest_schema::SHARED {
        for d in read(&exported.join(format!("{coll}.json"))) {
            let hash_only = coll == "users"
                && d.get_str("password")
                    .is_ok_and(|p| p.starts_with("$argon2id$"));
            for p in crate::fishtest_schema::check(coll, &d, &ctx) {
                if hash_only && p.starts_with("users.password:") {
                    continue;
                }
                problems.push(format!("{coll} {:?}: {p}", d.get("_id")));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    let nns = read(&exported.join("nns.json"));
    assert!(
        nns.iter()
            .any(|n| n.get_str("name").ok() == Some(net.as_str())),
        "the uploaded net exported"
    );
}

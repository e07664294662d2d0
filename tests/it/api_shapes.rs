//! The JSON API's reply shapes, route by route, against Fishtest's: the top-level keys and
//! the JSON type of every value (int and float told apart, as a Python client sees them),
//! dates as Python's `str()` prints them, ids as 24-hex strings, and `duration` exactly where
//! Fishtest has it (the worker API and every error; never a read route's success).
//!
//! The read routes are checked on the sample Fishtest database (`tests/data/fishtest-db`,
//! written by Fishtest's own code), imported into a real server: SPRT, fixed-games and SPSA
//! runs, finished, unfinished and deleted, tasks with `spsa_params`, purged tasks (one of
//! them given an infinite residual, as Fishtest writes for a worker it cannot place). The
//! expected shapes come from two sources that are not shoal: the key sets and types written
//! below from Fishtest's API (docs/fishtest-compatibility.md, "The JSON API, route by
//! route"), and the dump's documents rendered the way Fishtest renders them.
//! The worker routes are checked on a fresh server with runs created through the API.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde_json::{Value, json};

use crate::fleet::{
    PASSWORD, Totals, Worker, add_user, approve, create_run, fixed_args, sprt_args,
};
use crate::harness::{Opts, TestServer, bin, mongo_env};

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

// ---------------------------------------------------------------------------
// Shapes
// ---------------------------------------------------------------------------

/// The JSON type of a value as Python's `json` module reads it.
fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float",
        Value::Number(_) => "int",
        Value::String(_) => "str",
        Value::Array(_) => "list",
        Value::Object(_) => "dict",
    }
}

/// The top-level keys of a run document (version 24) and their types, as Fishtest stores
/// and shows them; `rescheduled_from` (a string) only on a rerun.
const RUN_KEYS: [(&str, &str); 23] = [
    ("_id", "str"),
    ("version", "int"),
    ("start_time", "str"),
    ("last_updated", "str"),
    ("tc_base", "float"),
    ("approved", "bool"),
    ("approver", "str"),
    ("finished", "bool"),
    ("deleted", "bool"),
    ("failed", "bool"),
    ("failures", "int"),
    ("is_green", "bool"),
    ("is_yellow", "bool"),
    ("workers", "int"),
    ("cores", "int"),
    ("committed_games", "int"),
    ("total_games", "int"),
    ("nps", "float"),
    ("games_per_minute", "float"),
    ("results", "dict"),
    ("args", "dict"),
    ("tasks", "list"),
    ("bad_tasks", "list"),
];

/// Python's `str()` of an aware UTC datetime: a fraction of six digits unless it is zero.
fn date_re() -> regex::Regex {
    regex::Regex::new(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{6})?\+00:00$").unwrap()
}

fn is_object_id(s: &str) -> bool {
    s.len() == 24 && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// Checks a run's top-level keys and types: Fishtest's run keys, without `tasks` and
/// `bad_tasks` when `listed` (active_runs, finished_runs), plus `extra`.
fn check_run_top(run: &Value, listed: bool, extra: &[(&str, &str)], what: &str) {
    let m = run
        .as_object()
        .unwrap_or_else(|| panic!("{what}: not a dict"));
    let mut want: Vec<(&str, &str)> = RUN_KEYS
        .iter()
        .copied()
        .filter(|(k, _)| !(listed && (*k == "tasks" || *k == "bad_tasks")))
        .collect();
    want.extend_from_slice(extra);
    if m.contains_key("rescheduled_from") {
        want.push(("rescheduled_from", "str"));
    }
    let want_keys: BTreeSet<&str> = want.iter().map(|(k, _)| *k).collect();
    let got_keys: BTreeSet<&str> = m.keys().map(String::as_str).collect();
    assert_eq!(got_keys, want_keys, "{what}: top-level keys");
    for (k, t) in want {
        assert_eq!(kind(&m[k]), t, "{what}: {k} = {}", m[k]);
    }
    let id = m["_id"].as_str().unwrap();
    assert!(is_object_id(id), "{what}: _id {id}");
    for k in ["start_time", "last_updated"] {
        let d = m[k].as_str().unwrap();
        assert!(date_re().is_match(d), "{what}: {k} {d:?}");
    }
    assert!(m.get("trajectory").is_none() && m.get("duration").is_none());
}

/// Every difference of shape between `want` and `got`: a type, a key present on one side
/// only, a list's length. Values are not compared.
fn shape_diff(want: &Value, got: &Value, path: &str, out: &mut Vec<String>) {
    if kind(want) != kind(got) {
        out.push(format!(
            "{path}: Fishtest {} {want}, shoal {} {got}",
            kind(want),
            kind(got)
        ));
        return;
    }
    match (want, got) {
        (Value::Object(a), Value::Object(b)) => {
            for k in a.keys().filter(|k| !b.contains_key(*k)) {
                out.push(format!("{path}.{k}: missing"));
            }
            for k in b.keys().filter(|k| !a.contains_key(*k)) {
                out.push(format!("{path}.{k}: not Fishtest's"));
            }
            for (k, x) in a {
                if let Some(y) = b.get(k) {
                    shape_diff(x, y, &format!("{path}.{k}"), out);
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            if a.len() != b.len() {
                out.push(format!("{path}: {} items, shoal {}", a.len(), b.len()));
            }
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                shape_diff(x, y, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
}

fn assert_same_shape(want: &Value, got: &Value, what: &str) {
    let mut out = Vec::new();
    shape_diff(want, got, what, &mut out);
    assert!(out.is_empty(), "{what}:\n  {}", out.join("\n  "));
}

// ---------------------------------------------------------------------------
// The sample database, as Fishtest shows it
// ---------------------------------------------------------------------------

fn dump_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fishtest-db")
}

/// The dump's runs (Canonical Extended JSON), the first purged task given an infinite
/// residual.
fn sample_runs() -> Vec<Value> {
    let text = std::fs::read_to_string(dump_dir().join("runs.json")).unwrap();
    let mut runs: Vec<Value> = serde_json::from_str(&text).unwrap();
    let bad = runs
        .iter_mut()
        .flat_map(|r| r["bad_tasks"].as_array_mut().unwrap().iter_mut())
        .next()
        .expect("a purged task in the sample");
    bad["residual"] = json!({"$numberDouble": "Infinity"});
    runs
}

/// Python's `str()` of the UTC datetime `ms` milliseconds after the epoch.
fn python_str(ms: i64) -> String {
    let d = chrono::DateTime::from_timestamp_millis(ms).unwrap();
    let frac = ms.rem_euclid(1000);
    if frac == 0 {
        d.format("%Y-%m-%d %H:%M:%S+00:00").to_string()
    } else {
        format!("{}.{frac:03}000+00:00", d.format("%Y-%m-%d %H:%M:%S"))
    }
}

/// A document of the dump as Fishtest's API prints it: ObjectIds and dates as `str()`,
/// numbers with their BSON type (int32/int64 → int, double → float; an infinity is the
/// residual get_task shows as "inf"), binary (`packed_flips`) as a list of ints.
fn as_fishtest_prints(v: &Value) -> Value {
    match v {
        Value::Object(m) if m.len() == 1 => {
            let (k, x) = m.iter().next().unwrap();
            match k.as_str() {
                "$oid" => x.clone(),
                "$numberInt" | "$numberLong" => json!(x.as_str().unwrap().parse::<i64>().unwrap()),
                "$numberDouble" => match x.as_str().unwrap() {
                    "Infinity" => json!("inf"),
                    s => json!(s.parse::<f64>().unwrap()),
                },
                "$date" => {
                    let ms = x["$numberLong"].as_str().unwrap().parse::<i64>().unwrap();
                    json!(python_str(ms))
                }
                "$binary" => {
                    let b64 = x["base64"].as_str().unwrap();
                    json!(
                        base64::engine::general_purpose::STANDARD
                            .decode(b64)
                            .unwrap()
                    )
                }
                _ => Value::Object(
                    m.iter()
                        .map(|(k, x)| (k.clone(), as_fishtest_prints(x)))
                        .collect(),
                ),
            }
        }
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| (k.clone(), as_fishtest_prints(x)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(as_fishtest_prints).collect()),
        other => other.clone(),
    }
}

/// Fishtest's active_runs / finished_runs entry for a run of the dump (a projection without
/// `tasks`, `bad_tasks` and `args.spsa.param_history`).
fn fishtest_listed(run: &Value) -> Value {
    let mut r = as_fishtest_prints(run);
    let m = r.as_object_mut().unwrap();
    m.remove("tasks");
    m.remove("bad_tasks");
    if let Some(spsa) = m["args"].get_mut("spsa").and_then(Value::as_object_mut) {
        spsa.remove("param_history");
    }
    r
}

/// Fishtest's get_run of a run of the dump (`strip_run`).
fn fishtest_stripped(run: &Value) -> Value {
    let mut r = as_fishtest_prints(run);
    let m = r.as_object_mut().unwrap();
    m.insert("tasks".into(), json!([]));
    m.insert("bad_tasks".into(), json!([]));
    if let Some(spsa) = m["args"].get_mut("spsa").and_then(Value::as_object_mut)
        && spsa.contains_key("param_history")
    {
        spsa.insert("param_history".into(), json!([]));
    }
    r
}

/// Fishtest's get_task of a task of the dump.
fn fishtest_task(task: &Value) -> Value {
    let mut t = as_fishtest_prints(task);
    if let Some(wi) = t.get_mut("worker_info").and_then(Value::as_object_mut) {
        let key = wi["unique_key"].as_str().unwrap().chars().take(8);
        wi.insert(
            "unique_key".into(),
            json!(format!("{}...", key.collect::<String>())),
        );
        wi.insert("remote_addr".into(), json!("?.?.?.?"));
    }
    t
}

fn oid(run: &Value) -> String {
    run["_id"]["$oid"].as_str().unwrap().to_string()
}

/// A server on a store imported from the sample database (with [`sample_runs`]).
async fn sample_server() -> (TestServer, tempfile::TempDir) {
    let tmp = tempfile::tempdir().unwrap();
    let dump = tmp.path().join("dump");
    std::fs::create_dir_all(&dump).unwrap();
    for entry in std::fs::read_dir(dump_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "json") {
            std::fs::copy(&path, dump.join(path.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(
        dump.join("runs.json"),
        serde_json::to_string(&sample_runs()).unwrap(),
    )
    .unwrap();
    let data = tmp.path().join("data");
    let out = std::process::Command::new(bin())
        .args(["import", "--fishtest", dump.to_str().unwrap()])
        .current_dir(tmp.path())
        .env_clear()
        .envs(mongo_env(&data))
        .env("SHOAL_DATA_DIR", &data)
        .env("SHOAL_LOG", "warn")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "import: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    (server, tmp)
}

/// GET: status, `Access-Control-Allow-Origin`, body.
async fn get(server: &TestServer, path: &str) -> (u16, Option<String>, Value) {
    let r = server.client.get(server.url(path)).send().await.unwrap();
    let status = r.status().as_u16();
    let cors = r
        .headers()
        .get("access-control-allow-origin")
        .map(|v| v.to_str().unwrap().to_string());
    (status, cors, r.json().await.unwrap())
}

/// An error reply: exactly `{error: "<path>: <message>", duration: float}`.
fn assert_error(v: &Value, path: &str, message: &str) {
    let keys: BTreeSet<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, BTreeSet::from(["duration", "error"]), "{v}");
    assert_eq!(kind(&v["duration"]), "float", "{v}");
    assert_eq!(v["error"], format!("{path}: {message}"), "{v}");
}

/// An object's keys.
fn keys(v: &Value) -> BTreeSet<&str> {
    v.as_object()
        .unwrap_or_else(|| panic!("not a dict: {v}"))
        .keys()
        .map(String::as_str)
        .collect()
}

// ---------------------------------------------------------------------------
// The read API, on the sample database
// ---------------------------------------------------------------------------

#[tokio::test]
async fn active_runs_is_runs_by_id_and_nothing_else() {
    let (server, _tmp) = sample_server().await;
    let runs = sample_runs();
    let (status, cors, v) = get(&server, "/api/active_runs").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(cors.as_deref(), Some("*"));
    let unfinished: Vec<&Value> = runs.iter().filter(|r| r["finished"] == false).collect();
    let want: BTreeSet<String> = unfinished.iter().map(|r| oid(r)).collect();
    let got: BTreeSet<String> = keys(&v).into_iter().map(str::to_string).collect();
    // No `duration` beside the runs: every value is a run.
    assert_eq!(got, want, "active_runs' keys are the unfinished runs' ids");
    assert!(unfinished.iter().any(|r| r["args"].get("spsa").is_some()));
    for run in unfinished {
        let id = oid(run);
        let got = &v[&id];
        check_run_top(got, true, &[], &format!("active_runs[{id}]"));
        assert_eq!(got["_id"], id.as_str());
        assert_same_shape(&fishtest_listed(run), got, &format!("active_runs[{id}]"));
        if let Some(spsa) = got["args"].get("spsa") {
            assert!(spsa.get("param_history").is_none(), "{spsa}");
        }
    }
}

#[tokio::test]
async fn finished_runs_is_runs_by_id_and_its_errors_carry_duration() {
    let (server, _tmp) = sample_server().await;
    let runs = sample_runs();
    let (status, cors, v) = get(&server, "/api/finished_runs?page=1").await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(cors.as_deref(), Some("*"));
    let finished: Vec<&Value> = runs
        .iter()
        .filter(|r| r["finished"] == true && r["deleted"] != true)
        .collect();
    let want: BTreeSet<String> = finished.iter().map(|r| oid(r)).collect();
    let got: BTreeSet<String> = keys(&v).into_iter().map(str::to_string).collect();
    assert_eq!(
        got, want,
        "finished_runs' keys are the finished, undeleted runs' ids"
    );
    for run in finished {
        let id = oid(run);
        check_run_top(&v[&id], true, &[], &format!("finished_runs[{id}]"));
        assert_same_shape(
            &fishtest_listed(run),
            &v[&id],
            &format!("finished_runs[{id}]"),
        );
    }
    // A page past the end, or no match: `{}`, still without `duration`.
    let (status, _, v) = get(&server, "/api/finished_runs?page=2").await;
    assert_eq!((status, v), (200, json!({})));
    let (status, _, v) = get(&server, "/api/finished_runs?page=1&username=nobody").await;
    assert_eq!((status, v), (200, json!({})));

    let path = "/api/finished_runs";
    for (query, message) in [
        ("", "Please provide a Page number."),
        ("?username=mbriar", "Please provide a Page number."),
        ("?page=", "Please provide a Page number."),
        ("?page=abc", "Please provide a valid Page number."),
        ("?page=0", "Please provide a valid Page number."),
        ("?page=-1", "Please provide a valid Page number."),
        (
            "?page=1&timestamp=12",
            "Please provide a valid UNIX timestamp.",
        ),
        (
            "?page=1&timestamp=abcdefghij",
            "Please provide a valid UNIX timestamp.",
        ),
    ] {
        let (status, _, v) = get(&server, &format!("{path}{query}")).await;
        assert_eq!(status, 400, "{query}: {v}");
        assert_error(&v, path, message);
    }
}

#[tokio::test]
async fn get_run_is_the_stripped_run() {
    let (server, _tmp) = sample_server().await;
    for run in sample_runs() {
        let id = oid(&run);
        let (status, cors, v) = get(&server, &format!("/api/get_run/{id}")).await;
        assert_eq!(status, 200, "{id}: {v}");
        assert_eq!(cors.as_deref(), Some("*"));
        check_run_top(&v, false, &[], &format!("get_run/{id}"));
        assert_eq!(v["tasks"], json!([]));
        assert_eq!(v["bad_tasks"], json!([]));
        if run["args"]["spsa"].get("param_history").is_some() {
            assert_eq!(v["args"]["spsa"]["param_history"], json!([]));
        }
        assert_same_shape(&fishtest_stripped(&run), &v, &format!("get_run/{id}"));
    }
    for id in ["0123456789abcdef01234567", "nonsense"] {
        let path = format!("/api/get_run/{id}");
        let (status, _, v) = get(&server, &path).await;
        assert_eq!(status, 404, "{v}");
        assert_error(&v, &path, &format!("The run {id} does not exist"));
    }
}

#[tokio::test]
async fn get_task_is_the_task_with_the_worker_hidden() {
    let (server, _tmp) = sample_server().await;
    let runs = sample_runs();
    let mut seen_flips = false;
    let mut seen_inf = false;
    for run in &runs {
        let id = oid(run);
        let tasks = run["tasks"].as_array().unwrap();
        for (i, task) in tasks.iter().enumerate().filter(|(i, t)| {
            *i == 0
                || *i + 1 == tasks.len()
                || t.get("spsa_params").is_some()
                || t.get("bad").is_some()
        }) {
            let (status, cors, v) = get(&server, &format!("/api/get_task/{id}/{i}")).await;
            assert_eq!(status, 200, "{id}/{i}: {v}");
            assert_eq!(cors.as_deref(), Some("*"));
            let want = fishtest_task(task);
            assert_eq!(keys(&v), keys(&want), "{id}/{i}");
            assert_same_shape(&want, &v, &format!("get_task/{id}/{i}"));
            assert!(
                date_re().is_match(v["last_updated"].as_str().unwrap()),
                "{v}"
            );
            let wi = &v["worker_info"];
            assert_eq!(wi["remote_addr"], "?.?.?.?");
            let key = wi["unique_key"].as_str().unwrap();
            assert!(key.len() == 11 && key.ends_with("..."), "{key}");
            if let Some(p) = v.get("spsa_params") {
                let flips = p["packed_flips"].as_array().expect("a list");
                assert!(flips.iter().all(|b| kind(b) == "int"), "{p}");
                seen_flips = true;
            }
        }
        for bad in run["bad_tasks"].as_array().unwrap() {
            let tid = bad["task_id"]["$numberInt"].as_str().unwrap();
            let (status, _, v) = get(&server, &format!("/api/get_task/{id}/{tid}bad")).await;
            assert_eq!(status, 200, "{id}/{tid}bad: {v}");
            assert_same_shape(&fishtest_task(bad), &v, &format!("get_task/{id}/{tid}bad"));
            assert_eq!(v["bad"], true);
            if v["residual"] == "inf" {
                seen_inf = true;
            } else {
                assert_eq!(kind(&v["residual"]), "float", "{v}");
            }
        }
    }
    assert!(seen_flips, "the sample has an active SPSA task");
    assert!(seen_inf, "the purged task with an infinite residual");
    let run = oid(&runs[0]);
    for tid in ["100000", "0bad", "x", "-1"] {
        let path = format!("/api/get_task/{run}/{tid}");
        let (status, _, v) = get(&server, &path).await;
        assert_eq!(status, 404, "{tid}: {v}");
        assert_error(&v, &path, &format!("The task {run}/{tid} does not exist"));
    }
}

#[tokio::test]
async fn get_elo_is_the_stripped_run_and_elo_or_nothing() {
    let (server, _tmp) = sample_server().await;
    let mut sprt_runs = 0;
    for run in sample_runs() {
        let id = oid(&run);
        let (status, cors, v) = get(&server, &format!("/api/get_elo/{id}")).await;
        assert_eq!(status, 200, "{id}: {v}");
        assert_eq!(cors.as_deref(), Some("*"));
        if run["args"].get("sprt").is_none() {
            assert_eq!(v, json!({}), "{id}: not an SPRT");
            continue;
        }
        sprt_runs += 1;
        check_run_top(&v, false, &[("elo", "dict")], &format!("get_elo/{id}"));
        let elo = &v["elo"];
        assert_eq!(
            keys(elo),
            BTreeSet::from(["LLR", "LOS", "a", "b", "ci", "elo"]),
            "{elo}"
        );
        for k in ["LLR", "LOS", "a", "b", "elo"] {
            assert_eq!(kind(&elo[k]), "float", "{k}: {elo}");
        }
        let ci = elo["ci"].as_array().unwrap();
        assert!(
            ci.len() == 2 && ci.iter().all(|x| kind(x) == "float"),
            "{elo}"
        );
        assert_eq!(kind(&v["args"]["sprt"]["elo_model"]), "str");
        let mut want = fishtest_stripped(&run);
        want["elo"] = elo.clone();
        assert_same_shape(&want, &v, &format!("get_elo/{id}"));
    }
    assert!(sprt_runs > 0);
    let path = "/api/get_elo/0123456789abcdef01234567";
    let (status, _, v) = get(&server, path).await;
    assert_eq!(status, 404, "{v}");
    assert_error(&v, path, "The run 0123456789abcdef01234567 does not exist");
}

#[tokio::test]
async fn actions_is_a_list_of_actions() {
    let (server, _tmp) = sample_server().await;
    let r = server
        .client
        .post(server.url("/api/actions"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    assert_eq!(
        r.headers()
            .get("access-control-allow-origin")
            .map(|v| v.as_bytes()),
        Some(&b"*"[..])
    );
    let v: Value = r.json().await.unwrap();
    let rows = v
        .as_array()
        .expect("a JSON list, not an object with duration");
    let text = std::fs::read_to_string(dump_dir().join("actions.json")).unwrap();
    let dump: Vec<Value> = serde_json::from_str(&text).unwrap();
    for action in &dump {
        let id = oid(action);
        let got = rows
            .iter()
            .find(|r| r["_id"] == id.as_str())
            .unwrap_or_else(|| panic!("action {id}"));
        assert!(is_object_id(got["_id"].as_str().unwrap()));
        assert_same_shape(&as_fishtest_prints(action), got, &format!("action {id}"));
    }
    // A query outside the subset: `[]`; a body that is not JSON: the error shape.
    let (status, v) = server
        .post_json("/api/actions", &json!({"$where": "1"}))
        .await;
    assert_eq!((status, v), (200, json!([])));
    let r = server
        .client
        .post(server.url("/api/actions"))
        .header("content-type", "application/json")
        .body("{")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let v: Value = r.json().await.unwrap();
    assert_eq!(keys(&v), BTreeSet::from(["duration", "error"]), "{v}");
}

#[tokio::test]
async fn calc_elo_and_rate_limit_carry_no_duration() {
    let fake = crate::fake_github::FakeGithub::start().await;
    let server = TestServer::start_with(fake.opts(crate::harness::Opts::new())).await;
    let (status, cors, v) = get(&server, "/api/calc_elo?W=120&D=300&L=100").await;
    assert_eq!((status, cors), (200, None), "{v}");
    assert_eq!(keys(&v), BTreeSet::from(["LOS", "ci", "elo"]), "{v}");
    let (status, _, v) = get(
        &server,
        "/api/calc_elo?LL=10&LD=50&DDWL=120&WD=60&WW=12&elo0=0&elo1=2",
    )
    .await;
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        keys(&v),
        BTreeSet::from(["LLR", "LOS", "a", "b", "ci", "elo"]),
        "{v}"
    );
    for k in ["LLR", "LOS", "a", "b", "elo"] {
        assert_eq!(kind(&v[k]), "float", "{k}: {v}");
    }
    let (status, _, v) = get(&server, "/api/calc_elo?W=1&D=2").await;
    assert_eq!(status, 400);
    assert_eq!(keys(&v), BTreeSet::from(["duration", "error"]), "{v}");

    // GitHub's `core` resource as GitHub sends it.
    let (status, _, v) = get(&server, "/api/rate_limit").await;
    assert_eq!(status, 200);
    assert_eq!(
        keys(&v),
        BTreeSet::from(["limit", "remaining", "reset", "resource", "used"]),
        "{v}"
    );
    for k in ["limit", "remaining", "reset", "used"] {
        assert_eq!(kind(&v[k]), "int", "{k}: {v}");
    }
    assert_eq!(v["resource"], "core");
}

// ---------------------------------------------------------------------------
// The worker API: `duration` on every reply
// ---------------------------------------------------------------------------

/// A worker reply: `duration` (a float) and exactly these other keys, of these types.
fn assert_worker_reply(v: &Value, want: &[(&str, &str)], what: &str) {
    let mut want_keys: BTreeSet<&str> = want.iter().map(|(k, _)| *k).collect();
    want_keys.insert("duration");
    assert_eq!(keys(v), want_keys, "{what}: {v}");
    assert_eq!(kind(&v["duration"]), "float", "{what}: {v}");
    for (k, t) in want {
        assert_eq!(kind(&v[k]), *t, "{what}: {k} in {v}");
    }
}

async fn worker_server() -> TestServer {
    let server = TestServer::start().await;
    add_user(&server, "alice", &[]);
    add_user(&server, "boss", &["--approver"]);
    server
}

#[tokio::test]
async fn worker_api_replies_carry_duration_and_fishtests_keys() {
    let server = worker_server().await;
    let run = create_run(&server, "alice", sprt_args(0.0, 2.0)).await;
    let w = Worker::new("alice", 4, 1);

    // request_version
    let (status, v) = server
        .post_json(
            "/api/request_version",
            &json!({"password": PASSWORD, "worker_info": {"username": "alice"}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_worker_reply(&v, &[("version", "int")], "request_version");

    // request_task without a task (the run is not approved yet).
    let v = w.request_task(&server).await;
    assert_worker_reply(&v, &[("task_waiting", "bool")], "request_task, no task");
    approve(&server, "boss", &run).await;

    // request_task with a task.
    let reply = w.request_task(&server).await;
    assert_worker_reply(
        &reply,
        &[("run", "dict"), ("task_id", "int")],
        "request_task",
    );
    let r = &reply["run"];
    assert_eq!(keys(r), BTreeSet::from(["_id", "args", "my_task"]), "{r}");
    assert!(is_object_id(r["_id"].as_str().unwrap()));
    assert_eq!(
        keys(&r["my_task"]),
        BTreeSet::from(["num_games", "start", "stats"])
    );
    for k in ["num_games", "start"] {
        assert_eq!(kind(&r["my_task"][k]), "int");
    }
    assert!(r["args"]["book_sri"].is_string(), "{r}");
    let task_id = reply["task_id"].as_u64().unwrap();
    let ids = json!({"run_id": run, "task_id": task_id});

    // beat, update_task
    let (status, v) = w.call(&server, "/api/beat", ids.clone()).await;
    assert_eq!(status, 200);
    assert_worker_reply(&v, &[("task_alive", "bool")], "beat");
    let mut totals = Totals::default();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(7);
    let batch = 2 * reply["run"]["args"]["sprt"]["batch_size"].as_u64().unwrap();
    while totals.games() < batch {
        totals.play_pair(&mut rng, EVEN);
    }
    let mut body = ids.clone();
    body["stats"] = totals.json();
    let (status, v) = w.call(&server, "/api/update_task", body).await;
    assert_eq!(status, 200);
    assert_worker_reply(&v, &[("task_alive", "bool")], "update_task");

    // worker_log, upload_pgn, failed_task: `{}` plus duration.
    let mut body = ids.clone();
    body["message"] = json!("an engine did not answer");
    let (status, v) = w.call(&server, "/api/worker_log", body).await;
    assert_eq!(status, 200);
    assert_worker_reply(&v, &[], "worker_log");
    let mut body = ids.clone();
    body["pgn"] = json!(base64::engine::general_purpose::STANDARD.encode(gzip(b"1. e4 *\n")));
    let (status, v) = w.call(&server, "/api/upload_pgn", body).await;
    assert_eq!(status, 200, "{v}");
    assert_worker_reply(&v, &[], "upload_pgn");
    let mut body = ids.clone();
    body["message"] = json!("the engine crashed");
    let (status, v) = w.call(&server, "/api/failed_task", body.clone()).await;
    assert_eq!(status, 200);
    assert_worker_reply(&v, &[], "failed_task");
    // Again, on the task that is no longer active.
    let (status, v) = w.call(&server, "/api/failed_task", body).await;
    assert_eq!(status, 200);
    assert_worker_reply(
        &v,
        &[("task_alive", "bool"), ("info", "str")],
        "failed_task, inactive",
    );

    // stop_run by a user without 1000 CPU hours: the error shape.
    let reply = w.request_task(&server).await;
    let mut body = json!({"run_id": run, "task_id": reply["task_id"], "message": "bad bench"});
    body["password"] = json!(PASSWORD);
    body["worker_info"] = w.info.clone();
    let (status, v) = server.post_json("/api/stop_run", &body).await;
    assert_eq!(status, 401, "{v}");
    assert_eq!(keys(&v), BTreeSet::from(["duration", "error"]), "{v}");
    assert!(v["error"].as_str().unwrap().starts_with("/api/stop_run: "));

    // A wrong password: the error shape.
    let (status, v) = server
        .post_json(
            "/api/request_version",
            &json!({"password": "wrong", "worker_info": {"username": "alice"}}),
        )
        .await;
    assert_eq!(status, 401);
    assert_error(&v, "/api/request_version", "Invalid username or password.");
}

#[tokio::test]
async fn request_spsa_reply_carries_duration_and_the_parameters() {
    let server = worker_server().await;
    let mut args = fixed_args(4000);
    args["spsa"] = json!({"raw_params": "Alpha,50,0,100,5,0.002\nBeta,-20,-100,100,8,0.002"});
    let run = create_run(&server, "alice", args).await;
    approve(&server, "boss", &run).await;
    let w = Worker::new("alice", 4, 2);
    let reply = w.request_task(&server).await;
    let ids = json!({"run_id": run, "task_id": reply["task_id"]});
    let (status, v) = w.call(&server, "/api/request_spsa", ids.clone()).await;
    assert_eq!(status, 200, "{v}");
    assert_worker_reply(
        &v,
        &[
            ("w_params", "list"),
            ("b_params", "list"),
            ("sig", "int"),
            ("task_alive", "bool"),
        ],
        "request_spsa",
    );
    for p in v["w_params"].as_array().unwrap() {
        assert_eq!(
            keys(p),
            BTreeSet::from(["R", "c", "flip", "name", "value"]),
            "{p}"
        );
    }
    for p in v["b_params"].as_array().unwrap() {
        assert_eq!(keys(p), BTreeSet::from(["name", "value"]), "{p}");
    }
    // The task's packed flips, through get_task: a list of ints.
    let (_, _, t) = get(
        &server,
        &format!("/api/get_task/{run}/{}", reply["task_id"]),
    )
    .await;
    let flips = t["spsa_params"]["packed_flips"].as_array().expect("a list");
    assert!(flips.iter().all(|b| kind(b) == "int"), "{t}");
    // A run created by shoal shows Fishtest's types too.
    let (_, _, r) = get(&server, &format!("/api/get_run/{run}")).await;
    check_run_top(&r, false, &[], "get_run of a new SPSA run");
    for k in ["throughput", "priority"] {
        assert_eq!(kind(&r["args"][k]), "int", "{k}: {}", r["args"]);
    }
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    use std::io::Write;
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

//! The store's operations: PGN retention (Fishtest's windows: `pgn_retention_*days`) removes
//! exactly the PGNs of runs older than their class's window and gives the space back; `shoal backup FILE`, taken while
//! the server runs and serves workers, restores into a fresh data directory that serves the
//! same runs.

use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::harness::{Opts, TestServer, bin, mongo_env, open_store};
use shoal::store::{Collection, Date};

const DAY_MS: i64 = 86_400_000;

fn dump_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fishtest-db")
}

fn mongo() -> bool {
    std::env::var("SHOAL_TEST_MONGODB_URI").is_ok()
}

/// Runs `shoal <args>` on the store in `data`; returns (exit code, stdout, stderr).
fn shoal(data: &Path, args: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let out = std::process::Command::new(bin())
        .args(args)
        .current_dir(data.parent().expect("parent"))
        .env_clear()
        .envs(mongo_env(data))
        .env("SHOAL_DATA_DIR", data)
        .env("SHOAL_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .expect("run shoal");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn import(data: &Path) {
    let dir = dump_dir();
    let (code, _, err) = shoal(
        data,
        &["import", "--fishtest", dir.to_str().expect("utf-8")],
        &[],
    );
    assert_eq!(code, 0, "import: {err}");
}

fn days_ago(days: i64) -> Date {
    let t = chrono::Utc::now().timestamp_millis() - days * DAY_MS;
    Date(chrono::DateTime::from_timestamp_millis(t).expect("date"))
}

/// Gives a stored run a new `last_updated` (before any server runs on the store).
fn set_last_updated(store: &dyn shoal::store::Store, id: &str, when: Date) {
    let mut doc = store.get(Collection::Runs, id).expect("get").expect("run");
    doc.insert("last_updated".into(), when.to_value());
    store.put(Collection::Runs, &doc).expect("put");
}

/// `PRAGMA page_count` and `freelist_count` of a data directory's SQLite file (the server
/// may be running: the write-ahead log is read too).
fn pages(data: &Path) -> (i64, i64) {
    let c = rusqlite::Connection::open(data.join("shoal.db")).expect("open");
    let get = |p: &str| -> i64 { c.pragma_query_value(None, p, |r| r.get(0)).expect(p) };
    (get("page_count"), get("freelist_count"))
}

async fn status(server: &TestServer, path: &str) -> u16 {
    server
        .client
        .get(server.url(path))
        .send()
        .await
        .expect("GET")
        .status()
        .as_u16()
}

#[tokio::test]
async fn pgn_retention_deletes_exactly_the_pgns_of_runs_older_than_their_class_window() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    import(&data);
    // Fishtest's windows, the defaults: finished STC 1 day, finished LTC 10, deleted 10,
    // unfinished 50, looking back 60 days. Dates relative to today. Gone: a finished STC run
    // 2 days old, a deleted one 11 days old, a finished 20+0.2 one 11 days old, an
    // unfinished one 51 days old. Kept: a finished 60+0.6 run 5 days old, a finished STC run
    // just finished, an unfinished run 40 days old, and one last updated (as the sample has
    // it) about 100 days ago: beyond the look-back, Fishtest's job keeps it too.
    let old = ["6a5ef17522dfea1c957407ba", "6a72133c22dfea1c957408af"];
    let ltc_old = "6a5ef30622dfea1c957407c0";
    let unfinished_old = "6a8bb3be22dfea1c9574096f";
    let unfinished_ancient = "6a8bdde022dfea1c95740994";
    let ltc_recent = "6a5ef24e22dfea1c957407be";
    let recent = "6a8b898022dfea1c95740958";
    let unfinished_recent = "6a8b89d622dfea1c9574095b";
    let blob: Vec<u8> = (0..128 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let mut kept: Vec<String> = Vec::new();
    let (mut gone_pgns, mut gone_bytes) = (0u64, 0u64);
    {
        let store = open_store(&data).expect("store");
        set_last_updated(store.as_ref(), old[0], days_ago(2));
        set_last_updated(store.as_ref(), old[1], days_ago(11));
        set_last_updated(store.as_ref(), ltc_old, days_ago(11));
        set_last_updated(store.as_ref(), unfinished_old, days_ago(51));
        set_last_updated(store.as_ref(), ltc_recent, days_ago(5));
        set_last_updated(store.as_ref(), recent, days_ago(0));
        set_last_updated(store.as_ref(), unfinished_recent, days_ago(40));
        for id in old {
            for t in 0..3 {
                store.pgn_put(&format!("{id}-{t}"), &blob).expect("pgn");
            }
        }
        for id in [ltc_old, ltc_recent] {
            store.pgn_put(&format!("{id}-0"), &blob).expect("pgn");
        }
        for id in [old[0], old[1], ltc_old, unfinished_old] {
            let list = store.pgn_list_run(id).expect("list");
            assert!(!list.is_empty(), "{id} has PGNs");
            gone_pgns += list.len() as u64;
            gone_bytes += list.iter().map(|p| p.size).sum::<u64>();
        }
        for id in [ltc_recent, recent, unfinished_recent, unfinished_ancient] {
            let list = store.pgn_list_run(id).expect("list");
            assert!(!list.is_empty(), "{id} has PGNs");
            kept.extend(list.into_iter().map(|p| p.run_task));
        }
        store.close().expect("close");
    }
    let before = (!mongo()).then(|| pages(&data));

    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    let r = server
        .client
        .post(server.url("/debug/pgn_retention"))
        .send()
        .await
        .expect("pass");
    assert_eq!(r.status().as_u16(), 200);
    let reply: Value = r.json().await.expect("json");
    assert_eq!(
        reply["days"],
        json!({"stc": 1, "ltc": 10, "deleted": 10, "unfinished": 50}),
        "{reply}"
    );
    assert_eq!(reply["lookback_days"], json!(60), "{reply}");

    // Counted whichever pass (this one, or the periodic one 5 s after start) did the work.
    let bytes = gone_bytes as f64;
    assert_eq!(
        server
            .metric("shoal_pgn_retention_deleted_total", &[])
            .await,
        gone_pgns as f64
    );
    assert_eq!(
        server
            .metric("shoal_pgn_retention_bytes_freed_total", &[])
            .await,
        bytes
    );
    assert_eq!(
        server.metric("shoal_pgn_retention_runs_total", &[]).await,
        4.0
    );
    for id in [ltc_old, unfinished_old] {
        assert_eq!(
            status(&server, &format!("/api/run_pgns/{id}.pgn.gz")).await,
            404,
            "{id}"
        );
    }
    for id in old {
        for t in 0..3 {
            assert_eq!(
                status(&server, &format!("/api/pgn/{id}-{t}.pgn")).await,
                404
            );
        }
        assert_eq!(
            status(&server, &format!("/api/run_pgns/{id}.pgn.gz")).await,
            404
        );
        // The run itself is untouched.
        assert_eq!(status(&server, &format!("/api/get_run/{id}")).await, 200);
    }
    for name in &kept {
        assert_eq!(
            status(&server, &format!("/api/pgn/{name}.pgn")).await,
            200,
            "{name} is kept"
        );
    }
    if let Some((pages_before, _)) = before {
        let (pages_after, free) = pages(&data);
        assert_eq!(free, 0, "every freed page given back");
        let blob_pages = (bytes / 4096.0) as i64;
        assert!(
            pages_after <= pages_before - blob_pages * 9 / 10,
            "{pages_before} -> {pages_after} pages"
        );
        assert!(
            server
                .metric("shoal_pgn_retention_reclaimed_bytes_total", &[])
                .await
                >= (blob_pages * 4096 * 9 / 10) as f64
        );
    }
    // Another pass finds nothing more.
    let (code, again) = server.post_json("/debug/pgn_retention", &json!({})).await;
    assert_eq!(code, 200, "{again}");
    assert_eq!(again["pass"]["pgns"], json!(0), "{again}");
    assert_eq!(
        server
            .metric("shoal_pgn_retention_deleted_total", &[])
            .await,
        gone_pgns as f64
    );
    assert!(
        server.logs().contains("pgn retention"),
        "the pass is logged"
    );
}

#[tokio::test]
async fn pgn_retention_days_is_checked_at_start() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    std::fs::create_dir_all(&data).expect("mkdir");
    let (code, _, err) = shoal(
        &data,
        &["check-config"],
        &[("SHOAL_PGN_RETENTION_DAYS", "-5")],
    );
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("pgn_retention_days"), "{err}");
    let (code, out, err) = shoal(&data, &["check-config"], &[]);
    assert_eq!(code, 0, "{err}");
    // Fishtest's windows by default.
    for line in [
        "pgn_retention_days = 1",
        "pgn_retention_ltc_days = 10",
        "pgn_retention_deleted_days = 10",
        "pgn_retention_unfinished_days = 50",
        "pgn_retention_lookback_days = 60",
    ] {
        assert!(out.contains(line), "{line}: {out}");
    }
}

/// The read API's replies a restored server must repeat (without the reply's own `duration`).
async fn replies(server: &TestServer, runs: &[&str], task: (&str, u64)) -> Vec<(String, Value)> {
    let mut paths = vec![
        "/api/active_runs".to_string(),
        "/api/finished_runs?page=1".to_string(),
        format!("/api/get_task/{}/{}", task.0, task.1),
    ];
    paths.extend(runs.iter().map(|id| format!("/api/get_run/{id}")));
    let mut out = Vec::new();
    for path in paths {
        let (code, mut v) = server.get_json(&path).await;
        assert_eq!(code, 200, "{path}: {v}");
        if let Value::Object(m) = &mut v {
            m.remove("duration");
        }
        out.push((path, v));
    }
    out
}

#[tokio::test]
async fn a_backup_taken_while_serving_restores_the_same_runs() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let data = tmp.path().join("data");
    let file = tmp.path().join("shoal-backup.db");
    let file_arg = file.to_str().expect("utf-8");
    if mongo() {
        // MongoDB is backed up with its own tools.
        std::fs::create_dir_all(&data).expect("mkdir");
        let (code, _, err) = shoal(&data, &["backup", file_arg], &[]);
        assert_eq!(code, 2, "{err}");
        assert!(err.contains("mongodump"), "{err}");
        return;
    }
    let (code, _, err) = shoal(&data, &["backup", file_arg], &[("SHOAL_STORE", "mongodb")]);
    assert_eq!(code, 2, "{err}");
    assert!(err.contains("mongodump"), "{err}");
    let (code, _, err) = shoal(&data, &["backup", file_arg], &[]);
    assert_ne!(code, 0, "no store yet");
    assert!(err.contains("no SQLite store"), "{err}");

    import(&data);
    let server = TestServer::start_with(Opts::new().data_dir(&data)).await;
    // A worker of an imported user takes a task and reports results; the last updates are
    // acknowledged, so journalled, and perhaps not yet written into the run document.
    let info = crate::fleet::worker_info("mbriar", 8, &crate::fleet::key(91));
    let call = |path: &'static str, extra: Value| {
        let mut body = json!({"password": "fjord-harbor-7495", "worker_info": info});
        if let (Value::Object(b), Value::Object(e)) = (&mut body, extra) {
            b.extend(e);
        }
        let server = &server;
        async move { server.post_json(path, &body).await }
    };
    let (code, task) = call("/api/request_task", json!({})).await;
    assert_eq!(code, 200, "{task}");
    let run_id = task["run"]["_id"].as_str().expect("a task").to_string();
    let task_id = task["task_id"].as_u64().expect("task id");
    let mut totals = crate::fleet::Totals::default();
    let mut rng = <rand::rngs::StdRng as rand::SeedableRng>::seed_from_u64(91);
    // SPRT results come in whole batches of `batch_size` game pairs.
    let pairs = task["run"]["args"]["sprt"]["batch_size"]
        .as_u64()
        .unwrap_or(2);
    for _ in 0..3 {
        for _ in 0..pairs {
            totals.play_pair(&mut rng, [0.05, 0.2, 0.5, 0.2, 0.05]);
        }
        let (code, v) = call(
            "/api/update_task",
            json!({"run_id": run_id, "task_id": task_id, "stats": totals.json()}),
        )
        .await;
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["task_alive"], json!(true), "{v}");
    }
    let runs = [
        run_id.as_str(),
        "6a5ef17522dfea1c957407ba",
        "6a8b898022dfea1c95740958",
        "6a8bdde022dfea1c95740994",
    ];
    let served = replies(&server, &runs, (&run_id, task_id)).await;
    let (code, out, err) = shoal(&data, &["backup", file_arg], &[]);
    assert_eq!(code, 0, "backup: {err}");
    assert!(out.contains("backed up"), "{out}");
    assert_eq!(
        replies(&server, &runs, (&run_id, task_id)).await,
        served,
        "nothing changed while the copy was taken"
    );
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "the copy holds password hashes");
    // An existing file is kept unless --force.
    let (code, _, err) = shoal(&data, &["backup", file_arg], &[]);
    assert_ne!(code, 0);
    assert!(err.contains("--force"), "{err}");

    // Restored as README.md says: the file becomes <data_dir>/shoal.db of a stopped server.
    let restored = tmp.path().join("restored").join("data");
    std::fs::create_dir_all(&restored).expect("mkdir");
    std::fs::copy(&file, restored.join("shoal.db")).expect("restore");
    let copy = TestServer::start_with(Opts::new().data_dir(&restored)).await;
    let again = replies(&copy, &runs, (&run_id, task_id)).await;
    for ((path, a), (_, b)) in served.iter().zip(&again) {
        assert_eq!(a, b, "{path}");
    }
    let (_, t) = copy
        .get_json(&format!("/api/get_task/{run_id}/{task_id}"))
        .await;
    assert_eq!(t["stats"]["wins"], json!(totals.wins), "{t}");
    assert_eq!(t["active"], json!(true), "{t}");
}

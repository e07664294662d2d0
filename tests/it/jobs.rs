//! The primary's periodic jobs, each run on request (`POST /debug/job/{name}`, the same
//! `jobs::run_job` the periodic task calls) on a server whose jobs do not run by themselves
//! (`periodic_jobs = false`): for each job a state where it has something to do, and its
//! effect, exactly. Each test also checks that the job had not run before the call and ran
//! once for it (`shoal_job_seconds_count`), so no effect can come from anywhere else.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::fleet::{
    PASSWORD, Totals, Worker, add_user, approve, create_run, fixed_args, key, stored_run, user_cli,
    worker_info,
};
use crate::harness::{Opts, TestServer, open_store};

const EVEN: [f64; 5] = [0.05, 0.2, 0.5, 0.2, 0.05];

/// Test settings without the periodic jobs.
fn no_jobs() -> Opts {
    Opts::new().set("periodic_jobs", false)
}

/// A server without periodic jobs, with the submitters alice and bob and the approver boss.
async fn server_on(opts: Opts) -> TestServer {
    let server = TestServer::start_with(opts).await;
    add_user(&server, "alice", &[]);
    add_user(&server, "bob", &[]);
    add_user(&server, "boss", &["--approver"]);
    server
}

async fn server() -> TestServer {
    server_on(no_jobs()).await
}

/// A run of `user`'s, approved by boss.
async fn approved(server: &TestServer, user: &str, args: Value) -> String {
    let run = create_run(server, user, args).await;
    approve(server, "boss", &run).await;
    run
}

/// Runs the job `name` through the debug route; it must answer `{"job": name, "ok": true}`.
async fn run_job(server: &TestServer, name: &str) {
    let (status, v) = server
        .post_json(&format!("/debug/job/{name}"), &json!({}))
        .await;
    assert_eq!(status, 200, "{name}: {v}");
    assert_eq!(v["job"], name, "{v}");
    assert_eq!(v["ok"], true, "{v}");
}

/// How many times the job `name` has run (`shoal_job_seconds_count{job=name}`).
async fn job_runs(server: &TestServer, name: &str) -> f64 {
    server
        .metric("shoal_job_seconds_count", &[("job", name)])
        .await
}

async fn run_json(server: &TestServer, run: &str) -> Value {
    let (status, v) = server.get_json(&format!("/api/get_run/{run}")).await;
    assert_eq!(status, 200, "{v}");
    v
}

async fn task_json(server: &TestServer, run: &str, task: u64) -> Value {
    let (status, v) = server
        .get_json(&format!("/api/get_task/{run}/{task}"))
        .await;
    assert_eq!(status, 200, "{v}");
    v
}

/// A task for `w`, which must get one (of `run` when given).
async fn task_for(server: &TestServer, w: &Worker, run: Option<&str>) -> Value {
    let reply = w.request_task(server).await;
    assert!(reply["run"]["_id"].is_string(), "a task: {reply}");
    if let Some(run) = run {
        assert_eq!(reply["run"]["_id"], run, "{reply}");
    }
    reply
}

/// A worker with enough cores (and memory for them) to be given a 1000-game run at once.
fn big_worker(n: u32) -> Worker {
    let mut w = Worker::new("bob", 32, n);
    w.info["max_memory"] = json!(65_536);
    w
}

/// Plays the task in `reply` to its end in one update.
async fn play_out(server: &TestServer, w: &mut Worker, reply: &Value) {
    let games = reply["run"]["my_task"]["num_games"]
        .as_u64()
        .expect("num_games");
    let (last, totals, _) = w.play(server, reply, games, EVEN).await;
    assert_eq!(totals.games(), games);
    assert_eq!(last["task_alive"], false, "{last}");
}

/// The actions of one kind in the store, polled until there are `n` (the scavenger's actions
/// reach the store through the journal, after the job's reply).
async fn stored_actions(server: &TestServer, action: &str, n: usize) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let store = open_store(&server.data_dir).expect("open store");
        let found: Vec<Value> = store
            .find(
                shoal::store::Collection::Actions,
                &shoal::store::Query::new()
                    .with(shoal::store::Cond::Eq("action".into(), json!(action))),
            )
            .expect("find")
            .into_iter()
            .map(Value::Object)
            .collect();
        if found.len() >= n {
            assert_eq!(found.len(), n, "{found:?}");
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "never {n} {action} actions: {found:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (the simulated passing of time: a silent worker, an idle cache entry) until `d`
/// has passed since `since`.
async fn let_pass(since: Instant, d: Duration) {
    while since.elapsed() < d {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn close(got: f64, want: f64) -> bool {
    (got - want).abs() <= 1e-9 * want.abs().max(1.0)
}

#[tokio::test]
async fn flush_buffers_writes_the_buffered_run_changes_to_the_store() {
    let server = server().await;
    let run = approved(&server, "alice", fixed_args(10_000)).await;
    let w = Worker::new("bob", 4, 1);
    task_for(&server, &w, Some(&run)).await;
    // The task is acknowledged (journaled) and buffered: the run document is not written yet.
    let stored = stored_run(&server, &run);
    assert!(stored.tasks.is_empty(), "{:?}", stored.tasks);
    assert_eq!((stored.workers, stored.cores), (0, 0));
    assert_eq!(job_runs(&server, "flush_buffers").await, 0.0);

    run_job(&server, "flush_buffers").await;
    assert_eq!(job_runs(&server, "flush_buffers").await, 1.0);
    let stored = stored_run(&server, &run);
    assert_eq!(stored.tasks.len(), 1);
    let t = &stored.tasks[0];
    assert!(t.active);
    assert_eq!(t.worker_info.unique_key, key(1));
    assert_eq!(t.worker_info.username, "bob");
    let live = run_json(&server, &run).await;
    assert_eq!((stored.workers, stored.cores), (1, 4));
    assert_eq!(live["workers"], 1);
    assert_eq!(live["total_games"], stored.total_games);
    assert_eq!(stored.total_games, t.num_games);
    assert_eq!(stored.check_invariants(), Vec::<String>::new());
}

#[tokio::test]
async fn scavenge_dead_tasks_ends_the_silent_task_and_only_it() {
    let timeout = Duration::from_secs(4);
    let server = server_on(no_jobs().set("dead_task_timeout_s", timeout.as_secs_f64())).await;
    let run = approved(&server, "alice", fixed_args(10_000)).await;
    let silent = Worker::new("bob", 4, 1);
    let reply = task_for(&server, &silent, Some(&run)).await;
    assert_eq!(reply["task_id"], 0);
    let silent_since = Instant::now();
    let_pass(silent_since, timeout + Duration::from_secs(1)).await;
    // A worker that has just been given its task.
    let fresh = Worker::new("bob", 2, 2);
    let fresh_since = Instant::now();
    assert_eq!(task_for(&server, &fresh, Some(&run)).await["task_id"], 1);
    // Silent past the timeout, and still active: nothing scavenges by itself.
    assert_eq!(task_json(&server, &run, 0).await["active"], true);
    assert_eq!(run_json(&server, &run).await["workers"], 2);
    assert_eq!(job_runs(&server, "scavenge_dead_tasks").await, 0.0);

    run_job(&server, "scavenge_dead_tasks").await;
    assert_eq!(job_runs(&server, "scavenge_dead_tasks").await, 1.0);
    let dead = task_json(&server, &run, 0).await;
    assert_eq!(dead["active"], false, "{dead}");
    // (Unless this machine let the fresh task go silent for the whole timeout as well.)
    if fresh_since.elapsed() < timeout {
        assert_eq!(task_json(&server, &run, 1).await["active"], true);
        let live = run_json(&server, &run).await;
        assert_eq!(
            (live["workers"].clone(), live["cores"].clone()),
            (json!(1), json!(2))
        );
    }
    assert_eq!(server.metric("shoal_dead_tasks_total", &[]).await, 1.0);
    let (_, beat) = silent
        .call(&server, "/api/beat", json!({"run_id": run, "task_id": 0}))
        .await;
    assert_eq!(beat["task_alive"], false, "{beat}");
    let actions = stored_actions(&server, "dead_task", 1).await;
    let a = &actions[0];
    assert_eq!(a["run_id"], run.as_str());
    assert_eq!(a["task_id"], 0);
    assert_eq!(a["username"], "bob");
    assert!(
        a["worker"].as_str().is_some_and(|w| w.starts_with("bob-")),
        "{a}"
    );
    // Fishtest's schema refuses a message on this kind.
    assert!(a.get("message").is_none(), "{a}");
}

#[tokio::test]
async fn update_itp_recomputes_each_runs_itp_as_the_spec_says() {
    let server = server().await;
    // alice: a 10+0.1 run and a 60+0.6 run (r = 6), each with a worker; bob: a 60+0.6 run,
    // not approved, without workers.
    let stc = approved(&server, "alice", fixed_args(10_000)).await;
    let mut w1 = Worker::new("bob", 4, 1);
    let reply = task_for(&server, &w1, Some(&stc)).await;
    let mut ltc_args = fixed_args(10_000);
    ltc_args["tc"] = json!("60+0.6");
    let ltc = approved(&server, "alice", ltc_args.clone()).await;
    let w2 = Worker::new("bob", 4, 2);
    task_for(&server, &w2, Some(&ltc)).await;
    let idle = create_run(&server, "bob", ltc_args).await;
    // 200 games played on the 10+0.1 run.
    let mut totals = Totals::default();
    while totals.games() < 200 {
        totals.play_pair(&mut w1.rng, EVEN);
    }
    let body = json!({"run_id": stc, "task_id": reply["task_id"], "stats": totals.json()});
    let (status, v) = w1.call(&server, "/api/update_task", body).await;
    assert_eq!((status, &v["task_alive"]), (200, &json!(true)), "{v}");
    // At creation itp is the throughput (100).
    for run in [&stc, &ltc, &idle] {
        assert_eq!(run_json(&server, run).await["args"]["itp"], 100.0, "{run}");
    }
    assert_eq!(job_runs(&server, "update_itp").await, 0.0);

    run_job(&server, "update_itp").await;
    assert_eq!(job_runs(&server, "update_itp").await, 1.0);
    // itp = clamp(throughput, 1, 500) · (r^0.774 if r > 1) · 36/(36 + n²) · (1 + min(games /
    // 200k, 1)), n = the submitter's runs with workers (alice: 2, bob: 0).
    let r6 = 6f64.powf(0.774);
    let want = [
        (&stc, 100.0 * 36.0 / 40.0 * (1.0 + 200.0 / 200_000.0)),
        (&ltc, 100.0 * r6 * 36.0 / 40.0),
        (&idle, 100.0 * r6),
    ];
    for (run, want) in want {
        let got = run_json(&server, run).await["args"]["itp"]
            .as_f64()
            .expect("itp");
        assert!(close(got, want), "{run}: itp {got}, want {want}");
    }
}

#[tokio::test]
async fn update_nps_gpm_sums_the_active_tasks() {
    let server = server().await;
    let run = approved(&server, "alice", fixed_args(100_000)).await;
    let mut w1 = Worker::new("alice", 4, 1);
    w1.info["nps"] = json!(1_000_000.0);
    let mut w2 = Worker::new("bob", 3, 2);
    w2.info["nps"] = json!(500_000.0);
    let r1 = task_for(&server, &w1, Some(&run)).await;
    task_for(&server, &w2, Some(&run)).await;
    let before = run_json(&server, &run).await;
    assert_eq!(
        (before["nps"].as_f64(), before["games_per_minute"].as_f64()),
        (Some(0.0), Some(0.0))
    );
    assert_eq!(job_runs(&server, "update_nps_gpm").await, 0.0);

    run_job(&server, "update_nps_gpm").await;
    // nps = Σ concurrency · nps; gpm = Σ nps / 628000 · 60 / dur(tc) · (concurrency //
    // threads), dur(10+0.1) = (10 + 68 · 0.1) · 1.84.
    let dur = (10.0 + 68.0 * 0.1) * 1.84;
    let gpm = |nps: f64, conc: f64| nps / 628_000.0 * 60.0 / dur * conc;
    let v = run_json(&server, &run).await;
    let (nps, games) = (
        v["nps"].as_f64().expect("nps"),
        v["games_per_minute"].as_f64().expect("gpm"),
    );
    assert!(close(nps, 4.0 * 1e6 + 3.0 * 5e5), "nps {nps}");
    let want = gpm(1e6, 4.0) + gpm(5e5, 3.0);
    assert!(close(games, want), "games/minute {games}, want {want}");

    // Only active tasks count: w1's task ends.
    let body = json!({"run_id": run, "task_id": r1["task_id"], "message": "gone"});
    let (status, v) = w1.call(&server, "/api/failed_task", body).await;
    assert_eq!(status, 200, "{v}");
    run_job(&server, "update_nps_gpm").await;
    assert_eq!(job_runs(&server, "update_nps_gpm").await, 2.0);
    let v = run_json(&server, &run).await;
    assert!(close(v["nps"].as_f64().expect("nps"), 3.0 * 5e5), "{v}");
    let games = v["games_per_minute"].as_f64().expect("gpm");
    assert!(close(games, gpm(5e5, 3.0)), "games/minute {games}");
}

/// Sets `args.info` of a run's stored document (behind the server's back).
fn edit_stored_info(server: &TestServer, run: &str, info: &str) {
    let store = open_store(&server.data_dir).expect("open store");
    let mut doc = store
        .get(shoal::store::Collection::Runs, run)
        .expect("get")
        .expect("the run is stored");
    doc.get_mut("args")
        .and_then(Value::as_object_mut)
        .expect("args")
        .insert("info".into(), json!(info));
    store
        .put(shoal::store::Collection::Runs, &doc)
        .expect("put");
}

#[tokio::test]
async fn clean_cache_evicts_finished_runs_idle_for_cache_keep_s() {
    let keep = Duration::from_secs(1);
    let server = server_on(no_jobs().set("cache_keep_s", keep.as_secs_f64())).await;
    let finished = approved(&server, "alice", fixed_args(1000)).await;
    let mut w = big_worker(1);
    let reply = task_for(&server, &w, Some(&finished)).await;
    assert_eq!(reply["run"]["my_task"]["num_games"], 1000, "{reply}");
    play_out(&server, &mut w, &reply).await;
    assert_eq!(run_json(&server, &finished).await["finished"], true);
    let unfinished = approved(&server, "alice", fixed_args(10_000)).await;
    // Everything written (so nothing is dirty); then the stored documents change behind the
    // server's back: a cached run is served as cached, an evicted one is read again.
    run_job(&server, "flush_buffers").await;
    let written = Instant::now();
    for run in [&finished, &unfinished] {
        edit_stored_info(&server, run, "changed in the store");
    }
    let_pass(written, keep + Duration::from_millis(500)).await;
    for run in [&finished, &unfinished] {
        assert_eq!(run_json(&server, run).await["args"]["info"], "a test run");
    }
    assert_eq!(job_runs(&server, "clean_cache").await, 0.0);

    run_job(&server, "clean_cache").await;
    assert_eq!(job_runs(&server, "clean_cache").await, 1.0);
    assert_eq!(
        run_json(&server, &finished).await["args"]["info"],
        "changed in the store",
        "the finished run was evicted and read again"
    );
    assert_eq!(
        run_json(&server, &unfinished).await["args"]["info"],
        "a test run",
        "an unfinished run stays cached"
    );
}

/// Writes a `workers` document for a short worker name (as another instance or the workers
/// page of one does), keeping what the document already has.
fn set_blocked(server: &TestServer, short: &str, blocked: bool) {
    let store = open_store(&server.data_dir).expect("open store");
    let mut doc = store
        .get(shoal::store::Collection::Workers, short)
        .expect("get")
        .unwrap_or_default();
    doc.insert("_id".into(), json!(short));
    doc.insert("worker_name".into(), json!(short));
    doc.insert("blocked".into(), json!(blocked));
    doc.insert("message".into(), json!("bad hardware"));
    store
        .put(shoal::store::Collection::Workers, &doc)
        .expect("put");
}

#[tokio::test]
async fn refresh_blocked_workers_follows_the_store() {
    let server = server().await;
    let run = approved(&server, "alice", fixed_args(100_000)).await;
    let w1 = Worker::new("bob", 4, 1);
    let short = format!("bob-4cores-{}", &key(1)[..8]);
    // Fishtest's banner, with the approver's message and the links to this server.
    let stars = "*".repeat(70);
    let site = format!("http://{}", server.addr);
    let blocked = format!(
        "\n\n{stars}\nRequest_task: This worker has been blocked!\nMessage: bad hardware\n\
         You may possibly find more information at\n{site}/actions?text=%22{short}%22.\n\
         After fixing the issues you can unblock the worker at\n{site}/workers/{short}.\n\
         {stars}\n"
    );
    set_blocked(&server, &short, true);
    // Not read yet: the worker still gets work.
    task_for(&server, &w1, Some(&run)).await;
    assert_eq!(job_runs(&server, "refresh_blocked_workers").await, 0.0);

    run_job(&server, "refresh_blocked_workers").await;
    let v = w1.request_task(&server).await;
    assert_eq!(v["error"], blocked.as_str(), "{v}");
    assert!(v.get("run").is_none(), "{v}");
    // Another worker of the same user is not blocked.
    task_for(&server, &Worker::new("bob", 4, 2), Some(&run)).await;

    // Unblocked in the store: refused until the job reads it again.
    set_blocked(&server, &short, false);
    let v = w1.request_task(&server).await;
    assert_eq!(v["error"], blocked.as_str(), "{v}");
    run_job(&server, "refresh_blocked_workers").await;
    assert_eq!(job_runs(&server, "refresh_blocked_workers").await, 2.0);
    task_for(&server, &w1, Some(&run)).await;
}

#[tokio::test]
async fn refresh_legacy_usernames_follows_the_kvstore() {
    let server = server().await;
    let run = approved(&server, "alice", fixed_args(100_000)).await;
    // An account older than the name rule: created under a valid name, renamed in the store.
    add_user(&server, "oldname", &[]);
    {
        let store = open_store(&server.data_dir).expect("open store");
        let mut doc = store
            .find(
                shoal::store::Collection::Users,
                &shoal::store::Query::new()
                    .with(shoal::store::Cond::Eq("username".into(), json!("oldname"))),
            )
            .expect("find")
            .pop()
            .expect("the user");
        doc.insert("username".into(), json!("old.name"));
        store
            .put(shoal::store::Collection::Users, &doc)
            .expect("put");
    }
    let ask = || async {
        let body =
            json!({"password": PASSWORD, "worker_info": worker_info("old.name", 4, &key(1))});
        server.post_json("/api/request_task", &body).await
    };
    let refused = |(status, v): (u16, Value)| {
        assert_eq!(status, 400, "{v}");
        assert_eq!(
            v["error"], "/api/request_task: worker_info: invalid username",
            "{v}"
        );
    };
    let served = |(status, v): (u16, Value)| {
        assert_eq!(status, 200, "{v}");
        assert_eq!(v["run"]["_id"], run.as_str(), "{v}");
    };
    refused(ask().await);
    // Listed by the operator's command (another process, into kvstore): not read yet.
    user_cli(&server, &["legacy-names", "--add", "old.name"]);
    refused(ask().await);
    assert_eq!(job_runs(&server, "refresh_legacy_usernames").await, 0.0);
    run_job(&server, "refresh_legacy_usernames").await;
    served(ask().await);
    // And removed again: accepted until the job reads the list.
    user_cli(&server, &["legacy-names", "--remove", "old.name"]);
    served(ask().await);
    run_job(&server, "refresh_legacy_usernames").await;
    assert_eq!(job_runs(&server, "refresh_legacy_usernames").await, 2.0);
    refused(ask().await);
}

/// kvstore's `worker_runs` document, if any.
fn stored_worker_runs(server: &TestServer) -> Option<Value> {
    let store = open_store(&server.data_dir).expect("open store");
    store
        .get(shoal::store::Collection::Kvstore, "worker_runs")
        .expect("get")
        .map(|d| d.get("value").cloned().unwrap_or(Value::Null))
}

#[tokio::test]
async fn clean_worker_runs_persists_worker_runs_and_forgets_finished_runs() {
    let server = server().await;
    let long = approved(&server, "alice", fixed_args(100_000)).await;
    let w1 = Worker::new("bob", 4, 1);
    task_for(&server, &w1, Some(&long)).await;
    let short = approved(&server, "alice", fixed_args(1000)).await;
    let mut w2 = big_worker(2);
    let reply = task_for(&server, &w2, Some(&short)).await;
    assert_eq!(reply["run"]["my_task"]["num_games"], 1000, "{reply}");
    let (n1, n2) = (
        format!("bob-4cores-{}", &key(1)[..8]),
        format!("bob-32cores-{}", &key(2)[..8]),
    );
    assert_eq!(stored_worker_runs(&server), None);
    assert_eq!(job_runs(&server, "clean_worker_runs").await, 0.0);

    run_job(&server, "clean_worker_runs").await;
    assert_eq!(
        stored_worker_runs(&server),
        Some(json!({
            n1.clone(): {long.clone(): true, "last_run": long.clone()},
            n2.clone(): {short.clone(): true, "last_run": short.clone()},
        }))
    );
    // The short run finishes: its worker's entry goes at the next run of the job.
    play_out(&server, &mut w2, &reply).await;
    assert_eq!(run_json(&server, &short).await["finished"], true);
    run_job(&server, "clean_worker_runs").await;
    assert_eq!(job_runs(&server, "clean_worker_runs").await, 2.0);
    assert_eq!(
        stored_worker_runs(&server),
        Some(json!({n1: {long.clone(): true, "last_run": long}}))
    );
}

#[tokio::test]
async fn validate_data_structures_reports_each_broken_run() {
    let first = server().await;
    let broken = approved(&first, "alice", fixed_args(10_000)).await;
    let sound = approved(&first, "bob", fixed_args(10_000)).await;
    task_for(&first, &Worker::new("bob", 4, 1), None).await;
    task_for(&first, &Worker::new("bob", 4, 2), None).await;
    let mut first = first;
    first.signal(libc::SIGTERM);
    assert!(first.wait_exit(30).success());
    // A stored run whose total_games disagrees with its tasks.
    let good = stored_run(&first, &broken).total_games;
    let bad = good + 2;
    {
        let store = open_store(&first.data_dir).expect("open store");
        let mut doc = store
            .get(shoal::store::Collection::Runs, &broken)
            .expect("get")
            .expect("stored");
        doc.insert("total_games".into(), json!(bad));
        store
            .put(shoal::store::Collection::Runs, &doc)
            .expect("put");
        store.close().expect("close");
    }
    let server = TestServer::start_with(no_jobs().data_dir(&first.data_dir)).await;
    let report = "run invariants violated";
    assert!(!server.logs().contains(report), "{}", server.logs());
    assert_eq!(job_runs(&server, "validate_data_structures").await, 0.0);

    run_job(&server, "validate_data_structures").await;
    assert_eq!(job_runs(&server, "validate_data_structures").await, 1.0);
    // The log reader may lag the reply a little.
    let deadline = Instant::now() + Duration::from_secs(30);
    let line = loop {
        let logs = server.logs();
        if let Some(line) = logs.lines().find(|l| l.contains(report)) {
            break line.to_string();
        }
        assert!(Instant::now() < deadline, "no report:\n{logs}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(line.contains(&broken), "{line}");
    assert!(
        line.contains(&format!("total_games is {bad}, tasks say {good}")),
        "{line}"
    );
    let reports = server.logs().matches(report).count();
    assert_eq!(reports, 1, "only the broken run: {}", server.logs());
    assert!(!server.logs().contains(&format!("run={sound}")));
}

const FAIR_SHARE: &str = r#"[{kind = "floating", key = "run", unit = "cores", source = "fair_share", default_max = 4, refresh_s = 3600}]"#;

/// A limit of `/api/limits` by name.
fn limit<'a>(view: &'a Value, name: &str) -> &'a Value {
    view["limits"]
        .as_array()
        .and_then(|l| l.iter().find(|l| l["name"] == name))
        .unwrap_or_else(|| panic!("no limit {name} in {view}"))
}

/// A key's max in a limit of `/api/limits`.
fn key_max(view: &Value, name: &str, key: &str) -> Value {
    limit(view, name)["keys"]
        .as_array()
        .and_then(|k| k.iter().find(|k| k["key"] == key))
        .map(|k| k["max"].clone())
        .unwrap_or_else(|| panic!("no key {key} in {name}: {view}"))
}

#[tokio::test]
async fn refresh_limits_recomputes_floating_limits_and_publishes_their_metrics() {
    let server = server_on(no_jobs().set("limits", FAIR_SHARE)).await;
    let mut slow = fixed_args(100_000);
    slow["throughput"] = json!(100);
    let a = approved(&server, "alice", slow).await;
    task_for(&server, &Worker::new("bob", 4, 1), Some(&a)).await;
    let mut fast = fixed_args(100_000);
    fast["throughput"] = json!(300);
    let b = approved(&server, "alice", fast).await;
    task_for(&server, &Worker::new("bob", 4, 2), Some(&b)).await;
    // Both runs are at the default share (4 cores): a 3-core worker gets nothing.
    let third = Worker::new("bob", 3, 3);
    let v = third.request_task(&server).await;
    assert!(v.get("run").is_none(), "{v}");
    let (_, view) = server.get_json("/api/limits").await;
    let fair = &limit(&view, "floating:run")["floating"];
    assert_eq!(fair["current_max"], 4, "{view}");
    assert_eq!(fair["last_refresh_s_ago"], Value::Null, "{view}");
    assert_eq!(key_max(&view, "floating:run", &b), 4);
    let metrics = server.metrics().await;
    assert!(!metrics.contains("shoal_limit_holders"), "{metrics}");
    assert_eq!(job_runs(&server, "refresh_limits").await, 0.0);

    run_job(&server, "refresh_limits").await;
    assert_eq!(job_runs(&server, "refresh_limits").await, 1.0);
    // Fair shares of the 8 active cores: ceil(1.1 · 8 · 100/400) = 3 -> the floor, 4;
    // ceil(1.1 · 8 · 300/400) = 7.
    let (_, view) = server.get_json("/api/limits").await;
    let fair = &limit(&view, "floating:run")["floating"];
    assert!(fair["last_refresh_s_ago"].is_number(), "{view}");
    assert_eq!(fair["retries"], 0, "{view}");
    assert_eq!(fair["last_error"], Value::Null, "{view}");
    assert_eq!(key_max(&view, "floating:run", &a), 4);
    assert_eq!(key_max(&view, "floating:run", &b), 7);
    let holders = |m: &str, name: &str| {
        crate::harness::metric_sum(m, "shoal_limit_holders", &[("limit", name)])
    };
    let metrics = server.metrics().await;
    assert_eq!(holders(&metrics, "floating:run"), 8.0, "{metrics}");
    assert_eq!(holders(&metrics, "machine"), 2.0, "{metrics}");
    // The faster run has room for the 3-core worker now.
    task_for(&server, &third, Some(&b)).await;
}

#[tokio::test]
async fn an_unknown_job_is_a_404_and_changes_nothing() {
    let server = server().await;
    let run = approved(&server, "alice", fixed_args(10_000)).await;
    task_for(&server, &Worker::new("bob", 4, 1), Some(&run)).await;
    let r = server
        .client
        .post(server.url("/debug/job/no_such_job"))
        .send()
        .await
        .expect("post");
    assert_eq!(r.status().as_u16(), 404);
    let v: Value = r.json().await.expect("a JSON error");
    assert_eq!(v["job"], "no_such_job", "{v}");
    assert_eq!(v["ok"], false, "{v}");
    assert!(v["duration"].is_number(), "{v}");
    let error = v["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("/debug/job/no_such_job: no periodic job \"no_such_job\""),
        "{v}"
    );
    for name in [
        "flush_buffers",
        "refresh_limits",
        "validate_data_structures",
    ] {
        assert!(error.contains(name), "the error lists the jobs: {v}");
    }
    // No job ran: the buffered task is still not in the stored run.
    assert_eq!(server.metric("shoal_job_seconds_count", &[]).await, 0.0);
    assert!(stored_run(&server, &run).tasks.is_empty());
    // (A known job on the same state does write it.)
    run_job(&server, "flush_buffers").await;
    assert_eq!(stored_run(&server, &run).tasks.len(), 1);
}

#[tokio::test]
async fn refresh_official_master_reads_master_and_its_bench_from_github() {
    let fake = crate::fake_github::FakeGithub::start().await;
    let server = server_on(
        no_jobs()
            .set("github_api_url", fake.api_url())
            .set("github_raw_url", fake.raw_url())
            .set("github_token", fake.token()),
    )
    .await;
    assert_eq!(job_runs(&server, "refresh_official_master").await, 0.0);
    assert_eq!(server.metric("shoal_github_master_bench", &[]).await, 0.0);
    run_job(&server, "refresh_official_master").await;
    assert_eq!(job_runs(&server, "refresh_official_master").await, 1.0);
    // Official master's newest commit states no bench: the newest one that does counts.
    assert_eq!(
        server.metric("shoal_github_master_bench", &[]).await,
        1947203.0
    );
    let logged = stored_actions(&server, "system_event", 2).await;
    let messages: Vec<&str> = logged
        .iter()
        .filter_map(|a| a["message"].as_str())
        .filter(|m| m.starts_with("official master"))
        .collect();
    assert_eq!(
        messages,
        vec!["official master 3333333333: Fix a typo in the README (Bench: 1947203)"]
    );
    // Unchanged master: nothing more is logged.
    run_job(&server, "refresh_official_master").await;
    assert_eq!(job_runs(&server, "refresh_official_master").await, 2.0);
    stored_actions(&server, "system_event", 2).await;

    // GitHub failing: the job fails, says why, and the known master stays.
    fake.set_mode(crate::fake_github::Mode::ServerError);
    let (status, v) = server
        .post_json("/debug/job/refresh_official_master", &json!({}))
        .await;
    assert_eq!(status, 500, "{v}");
    assert_eq!(v["ok"], false);
    assert!(v["error"].as_str().unwrap().contains("HTTP 502"), "{v}");
    assert_eq!(
        server.metric("shoal_github_master_bench", &[]).await,
        1947203.0
    );
}

/// A zip archive holding one file.
fn zipped(name: &str, text: &str) -> Vec<u8> {
    let mut out = std::io::Cursor::new(Vec::new());
    let mut w = zip::ZipWriter::new(&mut out);
    w.start_file(name, zip::write::SimpleFileOptions::default())
        .expect("start");
    std::io::Write::write_all(&mut w, text.as_bytes()).expect("write");
    w.finish().expect("finish");
    out.into_inner()
}

/// The book names the new-test form offers.
async fn offered_books(server: &TestServer) -> Vec<String> {
    let mut b = crate::ui_submit::logged_in(server, "alice").await;
    let page = b.get("/tests/run").await;
    let select = &page.body[page
        .body
        .find("<select name=\"book\">")
        .expect("the book select")..];
    let select = &select[..select.find("</select>").expect("its end")];
    regex::Regex::new(r#"<option value="([^"]+)""#)
        .unwrap()
        .captures_iter(select)
        .map(|c| c[1].to_string())
        .collect()
}

#[tokio::test]
async fn refresh_books_takes_checked_books_and_refuses_a_bad_checksum() {
    use base64::Engine as _;
    use sha2::Digest as _;
    let fake = crate::fake_github::FakeGithub::start().await;
    let server = server_on(
        no_jobs()
            .set("github_api_url", fake.api_url())
            .set("github_raw_url", fake.raw_url())
            .set("github_token", fake.token()),
    )
    .await;
    let before = offered_books(&server).await;
    assert!(before.len() > 5, "the shipped list: {before:?}");
    let good = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq -\r\n";
    let sri = |text: &str| {
        let text = text.replace("\r\n", "\n");
        base64::engine::general_purpose::STANDARD.encode(sha2::Sha384::digest(text.as_bytes()))
    };
    let list = json!({
        "new_good.epd": {"total": 1, "white": 1, "black": 0, "min_depth": 1, "max_depth": 1,
                         "sri": sri(good)},
        "new_bad.epd": {"total": 1, "white": 1, "black": 0, "min_depth": 1, "max_depth": 1,
                        "sri": sri("something else\n")},
    });
    fake.put_raw(
        "official-stockfish/books/master/books.json",
        list.to_string().into_bytes(),
    );
    fake.put_raw(
        "official-stockfish/books/master/new_good.epd.zip",
        zipped("new_good.epd", good),
    );
    fake.put_raw(
        "official-stockfish/books/master/new_bad.epd.zip",
        zipped("new_bad.epd", good),
    );

    run_job(&server, "refresh_books").await;
    // The form also offers its default book, whatever the list holds.
    let only_good = |books: Vec<String>| {
        books.contains(&"new_good.epd".to_string())
            && books
                .iter()
                .all(|b| b == "new_good.epd" || b == "UHO_Lichess_4852_v1.epd")
    };
    assert!(only_good(offered_books(&server).await));
    let messages = |logged: Vec<Value>| -> Vec<String> {
        logged
            .iter()
            .filter_map(|a| a["message"].as_str())
            .filter(|m| m.starts_with("book"))
            .map(str::to_string)
            .collect()
    };
    let logged = messages(stored_actions(&server, "system_event", 3).await);
    assert!(
        logged
            .iter()
            .any(|m| m.starts_with("book new_bad.epd refused: checksum mismatch")),
        "{logged:?}"
    );
    assert!(
        logged.contains(&format!(
            "book list refreshed: 1 books (1 added, {} removed, 0 changed)",
            before.len()
        )),
        "{logged:?}"
    );
    assert_eq!(server.metric("shoal_books", &[]).await, 1.0);

    // Unchanged: nothing new is logged, the bad book's refusal included.
    run_job(&server, "refresh_books").await;
    stored_actions(&server, "system_event", 3).await;
    assert!(only_good(offered_books(&server).await));
}

#[tokio::test]
async fn the_refreshed_book_list_is_kept_across_restarts_in_fishtests_shape() {
    use base64::Engine as _;
    use sha2::Digest as _;
    let fake = crate::fake_github::FakeGithub::start().await;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let opts = || {
        no_jobs()
            .data_dir(&data)
            .set("github_api_url", fake.api_url())
            .set("github_raw_url", fake.raw_url())
            .set("github_token", fake.token())
    };
    let server = server_on(opts()).await;
    let text = "rnbqkbnr/pppppppp/8/8/4P3/8/PPPP1PPP/RNBQKBNR b KQkq -\n";
    let sri = base64::engine::general_purpose::STANDARD.encode(sha2::Sha384::digest(text));
    let list = json!({
        "kept_book.epd": {"total": 3, "white": 2, "black": 1, "min_depth": 2, "max_depth": null,
                          "sri": sri},
    });
    fake.put_raw(
        "official-stockfish/books/master/books.json",
        list.to_string().into_bytes(),
    );
    fake.put_raw(
        "official-stockfish/books/master/kept_book.epd.zip",
        zipped("kept_book.epd", text),
    );
    run_job(&server, "refresh_books").await;
    // Stored as Fishtest keeps it: `{_id: "books", value: {<book>: {...}}}`, nothing else.
    let stored = open_store(&data)
        .expect("store")
        .get(shoal::store::Collection::Kvstore, "books")
        .expect("get")
        .expect("the stored list");
    assert_eq!(
        Value::Object(stored),
        json!({"_id": "books", "value": list})
    );
    drop(server);

    // Restarted with GitHub gone: the list is the one refreshed, not the shipped one.
    let mut fake = fake;
    let api = fake.api_url();
    fake.stop().await;
    let server = TestServer::start_with(
        no_jobs()
            .data_dir(&data)
            .set("github_api_url", api.clone())
            .set("github_raw_url", api),
    )
    .await;
    let offered = offered_books(&server).await;
    assert!(
        offered.contains(&"kept_book.epd".to_string()),
        "{offered:?}"
    );
    assert!(
        offered
            .iter()
            .all(|b| b == "kept_book.epd" || b == "UHO_Lichess_4852_v1.epd"),
        "{offered:?}"
    );
}

#[tokio::test]
async fn prune_github_drops_old_diffs_of_runs_that_are_over_and_keeps_the_rest() {
    let server = server().await;
    let running = approved(&server, "alice", fixed_args(100_000)).await;
    let old = chrono::Utc::now().timestamp() - 31 * 86_400;
    let diff = |run: &str, at: i64| {
        json!({"_id": format!("run_diff:{run}"), "value": {
            "repo": "official-stockfish/Stockfish", "base": "a", "new": "b",
            "diff": "x", "truncated": false, "fetched_at": at}})
    };
    let gone = "0123456789abcdef01234567";
    {
        let store = open_store(&server.data_dir).expect("store");
        for doc in [
            diff(gone, old),
            diff(&running, old),
            diff("fedcba9876543210fedcba98", chrono::Utc::now().timestamp()),
        ] {
            store
                .put(shoal::store::Collection::ShoalKv, doc.as_object().unwrap())
                .expect("put");
        }
    }
    run_job(&server, "prune_github").await;
    let kept = |run: &str| {
        open_store(&server.data_dir)
            .expect("store")
            .get(
                shoal::store::Collection::ShoalKv,
                &format!("run_diff:{run}"),
            )
            .expect("get")
            .is_some()
    };
    assert!(!kept(gone), "an old diff of a run that is gone");
    assert!(kept(&running), "an unfinished run keeps its diff");
    assert!(kept("fedcba9876543210fedcba98"), "a recent diff is kept");
}

/// A server with no GitHub reachable (the harness's default) says so once per host (the API,
/// the raw files), as a warning that says what still works, however often the jobs that need
/// GitHub run.
#[tokio::test]
async fn github_out_of_reach_is_said_once_as_a_warning() {
    let server = server().await;
    for name in [
        "refresh_official_master",
        "refresh_books",
        "refresh_official_master",
        "refresh_books",
    ] {
        let (status, v) = server
            .post_json(&format!("/debug/job/{name}"), &json!({}))
            .await;
        assert_eq!(status, 500, "{name}: {v}");
        assert!(
            v["error"]
                .as_str()
                .is_some_and(|e| e.contains("could not be reached")),
            "{name}: {v}"
        );
    }
    let logs = server.logs();
    let said: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("GitHub cannot be used"))
        .collect();
    assert_eq!(said.len(), 2, "{logs}");
    for line in &said {
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains("every page work as before"), "{line}");
    }
    assert!(
        said[0].contains("official master is not refreshed"),
        "{}",
        said[0]
    );
    assert!(
        said[1].contains("the book list is not refreshed"),
        "{}",
        said[1]
    );
    assert!(!logs.contains("periodic job failed"), "{logs}");
}

/// GitHub's API reachable and its raw files not: the books' warning is said once, not again
/// after every successful refresh of official master (one flag per host).
#[tokio::test]
async fn one_github_host_out_of_reach_does_not_flap_the_warning() {
    let fake = crate::fake_github::FakeGithub::start().await;
    let server = server_on(
        no_jobs()
            .set("github_api_url", fake.api_url())
            .set("github_token", fake.token()),
    )
    .await;
    for _ in 0..3 {
        run_job(&server, "refresh_official_master").await;
        let (status, v) = server
            .post_json("/debug/job/refresh_books", &json!({}))
            .await;
        assert_eq!(status, 500, "{v}");
    }
    let logs = server.logs();
    let said = logs
        .lines()
        .filter(|l| l.contains("GitHub cannot be used"))
        .count();
    assert_eq!(said, 1, "{logs}");
    assert!(!logs.contains("GitHub answers again"), "{logs}");
}

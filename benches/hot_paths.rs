//! Hot-path benchmarks: request_task's critical section, update_task and beat on a loaded
//! run database, and the SPRT update at 100k games.
//!
//! Run with `cargo bench --bench hot_paths`. It builds a real run database on a temporary
//! SQLite store (200 approved runs, 10,000 active tasks), then times calls of the same
//! `RunDb` and `Scheduler` methods the HTTP handlers call (request_task: the critical section
//! the slot holder runs, `Scheduler::assign`), and prints percentiles. Numbers, not assertions:
//! BENCHMARKS.md records them. It allocates with the server's allocator (mimalloc).
//!
//! `SHOAL_BENCH_MONGODB_URI=mongodb://HOST:PORT` runs the same benchmarks on the MongoDB
//! store instead: each run database gets a fresh database of its own on that server
//! (`shoal_bench_<pid>_<n>`), dropped by nothing (use a throwaway server).

// A benchmark may panic on the unexpected (Cargo.toml denies these in src/).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::json;
mod common;

use common::worker;
use shoal::accounts::{User, Users};
use shoal::config::SqliteSync;
use shoal::ledger::Ledger;
use shoal::offload::Offload;
use shoal::rundb::books::Books;
use shoal::rundb::create::CreateArgs;
use shoal::rundb::model::Stats;
use shoal::rundb::outcome::{Assignment, TaskReply};
use shoal::rundb::{RunDb, RunDbConfig};
use shoal::scheduler::{Scheduler, SchedulerConfig};
use shoal::secret::SecretUri;
use shoal::store::SharedStore;
use shoal::store::mongo::MongoStore;
use shoal::store::sqlite::SqliteStore;
use std::sync::atomic::{AtomicUsize, Ordering};

// The server's allocator (src/main.rs): glibc's malloc costs differently (`malloc_consolidate`
// on every large allocation after many small frees), and the numbers are the server's.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const RUNS: usize = 200;
const ACTIVE_TASKS: usize = 10_000;
const SAMPLES: usize = 2_000;

fn percentiles(name: &str, mut samples: Vec<Duration>) {
    samples.sort();
    let at = |q: f64| samples[((samples.len() as f64 - 1.0) * q).round() as usize];
    println!(
        "{name:<44} n={:<6} p50={:>9.1?} p90={:>9.1?} p99={:>9.1?} max={:>9.1?}",
        samples.len(),
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
}

/// A run database, its scheduler and the users of its store, on a fresh temporary SQLite
/// store (the directory lives as long as this; it derefs to the run database), or on a fresh
/// MongoDB database when `SHOAL_BENCH_MONGODB_URI` is set.
struct Db {
    scheduler: Scheduler,
    runs: Arc<RunDb>,
    users: Users,
    _dir: tempfile::TempDir,
}

impl std::ops::Deref for Db {
    type Target = RunDb;
    fn deref(&self) -> &RunDb {
        &self.runs
    }
}

fn open_db(offload: &Offload) -> Arc<Db> {
    open_db_with(offload, RunDbConfig::default())
}

fn open_db_with(offload: &Offload, cfg: RunDbConfig) -> Arc<Db> {
    // MongoDB's blocking API runs a runtime of its own, which it cannot do from inside this
    // one's async context: leave it for the opening (the benchmarks run in the offload pool).
    tokio::task::block_in_place(|| open_db_blocking(offload, cfg))
}

fn open_db_blocking(offload: &Offload, cfg: RunDbConfig) -> Arc<Db> {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: SharedStore = match std::env::var("SHOAL_BENCH_MONGODB_URI") {
        Ok(base) => {
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let uri = SecretUri::new(format!(
                "{}/shoal_bench_{}_{n}",
                base.trim_end_matches('/'),
                std::process::id()
            ));
            Arc::new(MongoStore::open(&uri).expect("MongoDB store"))
        }
        Err(_) => Arc::new(SqliteStore::open(dir.path(), SqliteSync::Normal).expect("store")),
    };
    let ledger = Arc::new(Ledger::new(store.clone(), cfg.primary));
    let users = Users::new(store.clone());
    let runs = Arc::new(
        RunDb::open(
            store,
            offload.clone(),
            Books::shipped().expect("books"),
            cfg,
            ledger,
        )
        .expect("rundb"),
    );
    let sched_cfg = SchedulerConfig::of(&shoal::config::Config::default());
    let scheduler = Scheduler::open(runs.clone(), sched_cfg, offload.clone()).expect("scheduler");
    Arc::new(Db {
        scheduler,
        runs,
        users,
        _dir: dir,
    })
}

/// Ten configured limits, none of which refuses in the benchmark (the cost measured is the
/// bookkeeping): concurrency by user, ip, user_ip, worker, a resource and run (one counting
/// cores), two floating (fair share per run, the write-behind lag), two rate limits.
fn ten_limits() -> RunDbConfig {
    let toml = r#"
        [[limits]]
        kind = "concurrency"
        key = "user"
        max = 1000000
        [[limits]]
        kind = "concurrency"
        key = "ip"
        max = 1000000
        [[limits]]
        kind = "concurrency"
        key = "user_ip"
        max = 1000000
        [[limits]]
        kind = "concurrency"
        key = "worker"
        max = 1000000
        [[limits]]
        kind = "concurrency"
        key = "resource:fleet"
        max = 1000000
        [[limits]]
        kind = "concurrency"
        key = "run"
        unit = "cores"
        max = 1000000
        [[limits]]
        kind = "floating"
        key = "run"
        source = "fair_share"
        default_max = 1000000
        refresh_s = 60
        [[limits]]
        kind = "floating"
        key = "resource:store"
        source = "write_behind_lag"
        default_max = 1000000
        refresh_s = 60
        [[limits]]
        kind = "rate"
        key = "ip"
        scope = "request_task"
        max = 1000000
        window_s = 60
        [[limits]]
        kind = "rate"
        key = "user"
        scope = "create_run"
        max = 1000000
        window_s = 60
    "#;
    let config = shoal::config::Config::from_sources(Some(toml), "bench", Vec::new())
        .expect("ten valid limits");
    RunDbConfig {
        limits: config.limit_defs(),
        ..RunDbConfig::default()
    }
}

/// request_task's critical section on each of `dbs`, each loaded with 200 approved runs and
/// 10,000 active tasks, the calls interleaved (one on each database in turn, the order
/// swapped every round) so that the machine's load and the allocator's state weigh on every
/// database alike.
fn bench_request_task(dbs: &[(&str, &Db)]) {
    // Loaded in turns too (a run, a task on each database in turn), so that neither is the
    // one built on the other's leftovers.
    let (users, approvers): (Vec<User>, Vec<User>) =
        dbs.iter().map(|(_, db)| bench_users(db)).unzip();
    for i in 0..RUNS {
        for (k, (_, db)) in dbs.iter().enumerate() {
            let tag = format!("p{i}");
            approved_run(db, &users[k], &approvers[k], &tag, 100_000, 100 + i % 50);
        }
    }
    for n in 0..ACTIVE_TASKS {
        for (k, (_, db)) in dbs.iter().enumerate() {
            let (reply, _) = db
                .scheduler
                .assign(&users[k], worker(n))
                .expect("request_task");
            assert!(matches!(reply, Assignment::Task(_)), "{reply:?}");
        }
    }
    // SHOAL_BENCH_SAMPLES: more calls per database for a steadier p99 (each adds a task).
    let n_samples = std::env::var("SHOAL_BENCH_SAMPLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(SAMPLES);
    let mut samples = vec![Vec::with_capacity(n_samples); dbs.len()];
    for n in 0..n_samples {
        for k in 0..dbs.len() {
            let i = if n % 2 == 0 { k } else { dbs.len() - 1 - k };
            let (_, db) = dbs[i];
            let w = worker(ACTIVE_TASKS + n);
            let t = Instant::now();
            let (reply, _) = db.scheduler.assign(&users[i], w).expect("request_task");
            samples[i].push(t.elapsed());
            assert!(matches!(reply, Assignment::Task(_)));
        }
    }
    for ((label, _), s) in dbs.iter().zip(samples) {
        percentiles(&format!("request_task, {label}"), s);
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let offload = Offload::new(16);
        // The limits' cost: the same critical section with no configured limit and with ten,
        // both databases loaded and measured in turns (SHOAL_BENCH_LIMITS=1 runs only this
        // pair). SHOAL_BENCH_PAIR=ten,none swaps who goes first in each turn; none,none or
        // ten,ten measure the bench's own difference between two alike databases.
        let pair = std::env::var("SHOAL_BENCH_PAIR").unwrap_or_else(|_| "none,ten".into());
        let mut dbs = Vec::new();
        for (i, which) in pair.split(',').enumerate() {
            let (cfg, label) = match which.trim() {
                "none" => (RunDbConfig::default(), format!("no limits ({})", i + 1)),
                "ten" => (ten_limits(), format!("10 limits ({})", i + 1)),
                other => panic!("SHOAL_BENCH_PAIR: `{other}` is not none or ten"),
            };
            dbs.push((label, open_db_with(&offload, cfg)));
        }
        offload
            .run(move || {
                let refs: Vec<(&str, &Db)> =
                    dbs.iter().map(|(l, db)| (l.as_str(), &**db)).collect();
                bench_request_task(&refs);
            })
            .await
            .expect("bench panicked");
        if std::env::var_os("SHOAL_BENCH_LIMITS").is_some() {
            return;
        }

        let db = open_db(&offload);
        let d = db.clone();
        offload
            .run(move || bench(&d))
            .await
            .expect("bench panicked");

        // Write-behind of one big run (a storm's run: thousands of tasks with worker_info).
        let db = open_db(&offload);
        offload
            .run(move || bench_big_flush(&db))
            .await
            .expect("bench panicked");
    });
}

/// A submitter without a machine limit and an approver.
fn bench_users(db: &Db) -> (User, User) {
    let user = db
        .users
        .add("bench", "pw", "", false, Some(u32::MAX))
        .expect("user");
    let approver = db.users.add("boss", "pw", "", true, None).expect("boss");
    (user, approver)
}

/// Creates and approves a 10+0.1 fixed-games run; returns its id.
fn approved_run(
    db: &RunDb,
    user: &User,
    approver: &User,
    tag: &str,
    num_games: u64,
    throughput: usize,
) -> String {
    let args: CreateArgs = serde_json::from_value(json!({
        "base_tag": "master", "new_tag": tag,
        "resolved_base": "a".repeat(40), "resolved_new": "b".repeat(40),
        "base_signature": "1", "new_signature": "2",
        "base_options": "Hash=16", "new_options": "Hash=16",
        "tc": "10+0.1", "book": "UHO_Lichess_4852_v1.epd", "threads": 1,
        "tests_repo": "https://github.com/official-stockfish/Stockfish",
        "num_games": num_games, "throughput": throughput,
    }))
    .expect("args");
    let id = db.create_run(args, user).expect("create");
    db.approve_run(&id, approver).expect("approve");
    id
}

/// One 16-game batch (8 game pairs), as a worker reports it.
fn batch_stats() -> Stats {
    Stats {
        pentanomial: [1, 2, 2, 2, 1],
        wins: 6,
        losses: 6,
        draws: 4,
        ..Stats::default()
    }
}

const BIG_RUN_TASKS: usize = 3_000;

fn bench_big_flush(db: &Db) {
    let (user, approver) = bench_users(db);
    let id = approved_run(db, &user, &approver, "big", 3_200_000, 100);
    for n in 0..BIG_RUN_TASKS {
        let (reply, _) = db.scheduler.assign(&user, worker(n)).expect("request_task");
        assert!(matches!(&reply, Assignment::Task(t) if t.run_id == id));
    }
    db.flush(true).expect("flush");
    let stats = batch_stats();
    let mut samples = Vec::with_capacity(50);
    for n in 0..50 {
        db.update_task(&id, n, stats, None, worker(n))
            .expect("update_task");
        let t = Instant::now();
        assert_eq!(db.flush(true).expect("flush"), 1);
        samples.push(t.elapsed());
    }
    percentiles("flush of one run with 3,000 active tasks", samples);
}

fn bench(db: &Db) {
    let (user, approver) = bench_users(db);
    let started = Instant::now();
    for i in 0..RUNS {
        approved_run(
            db,
            &user,
            &approver,
            &format!("patch{i}"),
            100_000,
            100 + i % 50,
        );
    }
    let mut tasks = Vec::with_capacity(ACTIVE_TASKS);
    for n in 0..ACTIVE_TASKS {
        let (reply, _) = db.scheduler.assign(&user, worker(n)).expect("request_task");
        let Assignment::Task(t) = reply else {
            panic!("no task: {reply:?}");
        };
        let (run_id, task_id) = (t.run_id, t.task_id);
        tasks.push((run_id, task_id, n));
    }
    println!(
        "set-up: {RUNS} runs, {ACTIVE_TASKS} active tasks in {:.1?}",
        started.elapsed()
    );

    // request_task's critical section with 200 runs and 10,000 active tasks.
    let mut samples = Vec::with_capacity(SAMPLES);
    for n in 0..SAMPLES {
        let w = worker(ACTIVE_TASKS + n);
        let t = Instant::now();
        let (reply, _) = db.scheduler.assign(&user, w).expect("request_task");
        samples.push(t.elapsed());
        assert!(matches!(reply, Assignment::Task(_)));
    }
    percentiles("request_task (200 runs, 10k active tasks)", samples);

    // update_task: one batch of 16 games on existing tasks.
    let stats = batch_stats();
    let mut samples = Vec::with_capacity(SAMPLES);
    for (run_id, task_id, n) in tasks.iter().take(SAMPLES) {
        let t = Instant::now();
        let (reply, _) = db
            .update_task(run_id, *task_id, stats, None, worker(*n))
            .expect("update_task");
        samples.push(t.elapsed());
        assert!(matches!(reply, TaskReply::Alive(true)));
    }
    percentiles("update_task (10k active tasks)", samples);

    let mut samples = Vec::with_capacity(SAMPLES);
    for (run_id, task_id, n) in tasks.iter().skip(SAMPLES).take(SAMPLES) {
        let w = worker(*n);
        let t = Instant::now();
        db.beat(run_id, *task_id, &w).expect("beat");
        samples.push(t.elapsed());
    }
    percentiles("beat (10k active tasks)", samples);

    // The login of every worker call: the credential cache (one HMAC), alone and behind the
    // throttle's verdict and bookkeeping (what `http::worker` does on the event loop).
    db.users
        .authenticate("bench", "pw")
        .expect("warm the cache");
    let throttle = shoal::accounts::AuthThrottle::new(shoal::accounts::ThrottleConfig {
        window: Duration::from_secs(300),
        per_user_ip: 10,
        per_ip: 100,
        per_user: 100,
    });
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let t = Instant::now();
        let user = db.users.authenticate_cached("bench", "pw");
        samples.push(t.elapsed());
        assert!(matches!(user, Some(Ok(_))));
    }
    percentiles("login: credential cache hit", samples);
    let mut samples = Vec::with_capacity(SAMPLES);
    for n in 0..SAMPLES {
        let ip = worker(n).remote_addr;
        let t = Instant::now();
        let verdict = throttle.check("bench", &ip);
        let user = db.users.authenticate_cached("bench", "pw");
        throttle.succeeded("bench", &ip);
        samples.push(t.elapsed());
        assert_eq!(verdict, shoal::accounts::Verdict::Allow);
        assert!(matches!(user, Some(Ok(_))));
    }
    percentiles("login: throttle verdict + cache hit", samples);
    for _ in 0..10 {
        throttle.failed("bench", "10.9.9.9");
    }
    let mut samples = Vec::with_capacity(SAMPLES);
    for _ in 0..SAMPLES {
        let t = Instant::now();
        let verdict = throttle.check("bench", "10.9.9.9");
        samples.push(t.elapsed());
        assert!(matches!(verdict, shoal::accounts::Verdict::Refuse { .. }));
    }
    percentiles("login: a throttled guess refused", samples);

    let t = Instant::now();
    let flushed = db.flush(true).expect("flush");
    println!(
        "flush of {flushed} dirty runs (~50 tasks each): {:.1?}",
        t.elapsed()
    );

    // The SPRT update at 100k games (50k pairs), as update_task calls it.
    let mut sprt =
        shoal::stats::SprtRecord::new(0.05, 0.05, 0.0, 2.0, shoal::stats::EloModel::Normalized, 16)
            .expect("sprt");
    let mut samples = Vec::with_capacity(SAMPLES);
    for i in 0..SAMPLES as u64 {
        let p = [2_500 + i, 10_000, 25_000, 10_000, 2_500];
        let r = shoal::stats::Results {
            wins: 2 * p[4] + p[3],
            losses: 2 * p[0] + p[1],
            draws: p[1] + 2 * p[2] + p[3],
            pentanomial: Some(p),
        };
        let t = Instant::now();
        let _ = shoal::stats::update_sprt(&r, &mut sprt);
        samples.push(t.elapsed());
    }
    percentiles("update_SPRT, normalized, 100k games", samples);
    let mut samples = Vec::with_capacity(200);
    for i in 0..200u64 {
        let r = shoal::stats::Results {
            wins: 0,
            losses: 0,
            draws: 0,
            pentanomial: Some([2_500 + i, 10_000, 25_000, 10_000, 2_500]),
        };
        let t = Instant::now();
        let _ = shoal::stats::sprt_elo(
            &r,
            0.05,
            0.05,
            0.05,
            0.0,
            2.0,
            shoal::stats::EloModel::Normalized,
        );
        samples.push(t.elapsed());
    }
    percentiles("SPRT_elo (get_elo page), 100k games", samples);
}

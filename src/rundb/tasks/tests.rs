//! update_task's two paths, equal in effect: the same scenario through `update_task` on
//! one run database and through `try_update_task` (falling back to `update_task` when it
//! declines, as the HTTP handler does) on a twin, compared after every step.

use serde_json::{Value, json};

use super::*;
use crate::rundb::outcome::Assignment;
use crate::rundb::testkit::{Fixture, fixture, worker};

/// Cumulative totals of a task, built from game pairs (always consistent).
#[derive(Clone, Copy, Default)]
struct Pairs {
    p: [u64; 5],
    crashes: u64,
}

impl Pairs {
    /// Plays `n` pairs, the kinds cycling through `pattern` (indices into the
    /// pentanomial: 0 = LL … 4 = WW).
    fn play(mut self, n: u64, pattern: &[usize]) -> Pairs {
        let played: u64 = self.p.iter().sum();
        for k in 0..n {
            let i = usize::try_from(played + k).expect("small") % pattern.len();
            self.p[pattern[i]] += 1;
        }
        self
    }

    fn stats(self) -> Stats {
        let p = self.p;
        Stats {
            wins: 2 * p[4] + p[3],
            losses: 2 * p[0] + p[1],
            draws: p[1] + 2 * p[2] + p[3],
            crashes: self.crashes,
            time_losses: 0,
            pentanomial: p,
        }
    }
}

const EVEN: [usize; 10] = [2, 1, 3, 2, 0, 4, 2, 3, 1, 2];
const STRONG: [usize; 10] = [4, 3, 2, 4, 3, 2, 1, 3, 4, 2];

/// A run's document without what differs between twins by construction: ids and clocks.
fn comparable(run: &Run, trajectory: bool) -> Value {
    fn strip(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for k in ["_id", "start_time", "last_updated"] {
                    m.remove(k);
                }
                m.values_mut().for_each(strip);
            }
            Value::Array(a) => a.iter_mut().for_each(strip),
            _ => {}
        }
    }
    let mut v = serde_json::to_value(run).expect("json");
    if !trajectory && let Value::Object(m) = &mut v {
        m.remove("trajectory");
    }
    strip(&mut v);
    v
}

/// The reference (pool path only) and its twin (the event loop's try first).
struct Twins {
    pool: Fixture,
    fast: Fixture,
    /// Updates the twin answered on its fast path, and those it declined.
    hits: usize,
    declined: usize,
}

impl Twins {
    fn new() -> Twins {
        Twins {
            pool: fixture(),
            fast: fixture(),
            hits: 0,
            declined: 0,
        }
    }

    /// The same approved run on both: 2,000 games unless `extra` says otherwise.
    fn run(&self, mut extra: Value) -> [String; 2] {
        if let Value::Object(m) = &mut extra {
            m.entry("num_games").or_insert(json!(2000));
            m.entry("info").or_insert(json!("twins"));
        }
        [
            self.pool.run(extra.clone(), true),
            self.fast.run(extra, true),
        ]
    }

    /// A task for worker `n` on both (the same task of the same run): (task_id, games).
    fn request(&self, ids: &[String; 2], n: usize) -> (usize, u64) {
        let mut got = Vec::new();
        for (db, id) in [(&self.pool, &ids[0]), (&self.fast, &ids[1])] {
            let (a, ticket) = db.sched.assign(&db.other, worker(n)).expect("request_task");
            db.durable(ticket);
            let Assignment::Task(t) = a else {
                panic!("no task: {a:?}");
            };
            assert_eq!(&t.run_id, id);
            got.push((t.task_id, t.num_games));
        }
        assert_eq!(got[0], got[1]);
        got[0]
    }

    /// One update through both paths; the replies and the runs must be equal. Returns
    /// the reply (or the error's text).
    fn update(&mut self, ids: &[String; 2], task: usize, n: usize, stats: Stats) -> String {
        let wi = worker(n);
        let pool = self
            .pool
            .db
            .update_task(&ids[0], task, stats, None, wi.clone());
        let fast = match self
            .fast
            .db
            .try_update_task(&ids[1], task, stats, None, &wi)
        {
            Some(r) => {
                self.hits += 1;
                r
            }
            None => {
                self.declined += 1;
                self.fast.db.update_task(&ids[1], task, stats, None, wi)
            }
        };
        let text = |r: DbResult<(TaskReply, Option<Ticket>)>, db: &Fixture, id: &str| match r {
            Ok((reply, ticket)) => {
                db.durable(ticket);
                format!("{reply:?}")
            }
            // The reply's text, as the API edge words it.
            Err(e) => {
                format!("error: {}", crate::http::error::ApiError::from(e)).replace(id, "<run>")
            }
        };
        let (pool, fast) = (
            text(pool, &self.pool, &ids[0]),
            text(fast, &self.fast, &ids[1]),
        );
        assert_eq!(pool, fast, "replies to {stats:?}");
        self.same(ids);
        pool
    }

    fn same(&self, ids: &[String; 2]) {
        let (a, b) = (self.pool.get(&ids[0]), self.fast.get(&ids[1]));
        assert_eq!(comparable(&a, true), comparable(&b, true));
        assert_eq!(a.check_invariants(), Vec::<String>::new());
        // Actions decided under the lock (an auto-purge's) go to the journal after the
        // change whose ticket the update returns: wait for them a little.
        for _ in 0..250 {
            if self.pool.actions(&ids[0]) == self.fast.actions(&ids[1]) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(self.pool.actions(&ids[0]), self.fast.actions(&ids[1]));
    }
}

#[test]
fn the_fast_path_is_equal_in_effect_to_the_pool_path() {
    let mut t = Twins::new();

    // A fixed-games run with auto-purge: plain updates, a retry, refused counts,
    // Fishtest's rejections, tasks played to their end (one with crashes), the update that
    // decides the run and the auto-purge that revives it.
    let mut all = Vec::new();
    let ids = t.run(json!({"auto_purge": true}));
    all.push(ids[1].clone());
    let (task, size) = t.request(&ids, 1);
    assert!(size >= 64, "task of {size} games");
    let mut p = Pairs::default().play(8, &EVEN);
    assert_eq!(t.update(&ids, task, 1, p.stats()), "Alive(true)");
    assert_eq!(t.update(&ids, task, 1, p.stats()), "Alive(true)", "a retry");
    p = p.play(8, &EVEN);
    assert_eq!(t.update(&ids, task, 1, p.stats()), "Alive(true)");
    // An odd number of games is an impossible count (games are pairs): refused.
    let mut odd = p.stats();
    odd.draws += 1;
    assert!(t.update(&ids, task, 1, odd).starts_with("error: stats:"));
    // Another worker's key, a task out of range: refused, nothing changes.
    assert!(
        t.update(&ids, task, 2, p.stats())
            .contains("Invalid unique key")
    );
    assert!(t.update(&ids, 99, 1, p.stats()).contains("Invalid task_id"));
    // Fewer games than before: Fishtest ends the task.
    let fewer = Pairs::default().play(4, &EVEN);
    assert!(
        t.update(&ids, task, 1, fewer.stats())
            .starts_with("Rejected(GamesWentDown")
    );
    assert_eq!(t.update(&ids, task, 1, p.stats()), "NotActive");
    // A count going down with more games in all: ended too.
    let (task, _) = t.request(&ids, 3);
    let p = Pairs::default().play(16, &EVEN);
    assert_eq!(t.update(&ids, task, 3, p.stats()), "Alive(true)");
    let mut down = p;
    down.p[0] -= 1;
    down.p[4] += 2;
    assert_eq!(
        t.update(&ids, task, 3, down.stats()),
        "Rejected(CountWentDown)"
    );
    // Tasks played to their end, until the run is decided; the first with crashes, which
    // the auto-purge takes out (reviving the run), so more tasks follow.
    let mut n = 4;
    let mut rounds = 0;
    while !t.pool.get(&ids[0]).finished {
        rounds += 1;
        assert!(rounds < 100, "the run never finished");
        let (task, size) = t.request(&ids, n);
        let mut p = Pairs {
            crashes: if n == 4 { 5 } else { 0 },
            ..Pairs::default()
        };
        let step = (size / 8).max(2) / 2;
        loop {
            let played: u64 = p.p.iter().sum();
            p = p.play(step.min(size / 2 - played), &EVEN);
            let reply = t.update(&ids, task, n, p.stats());
            if reply != "Alive(true)" {
                assert_eq!(reply, "Alive(false)");
                break;
            }
        }
        n += 1;
    }
    let run = t.pool.get(&ids[0]);
    assert!(
        run.tasks.iter().any(|t| t.bad),
        "the auto-purge took a task out"
    );
    assert!(
        t.pool
            .actions(&ids[0])
            .iter()
            .any(|a| a.0 == "crash_or_time")
    );

    // An SPRT run: updates at the batch, one off the batch (rejected), played until the
    // SPRT accepts.
    let ids = t.run(json!({"sprt": {"elo0": 0.0, "elo1": 2.0}, "num_games": null}));
    all.push(ids[1].clone());
    let batch_pairs = t.pool.get(&ids[0]).batch_games() / 2;
    let (task, _) = t.request(&ids, 50);
    let p = Pairs::default().play(batch_pairs, &STRONG);
    assert_eq!(t.update(&ids, task, 50, p.stats()), "Alive(true)");
    let off = p.play(1, &STRONG);
    assert!(
        t.update(&ids, task, 50, off.stats())
            .starts_with("Rejected(NotBatchMultiple")
    );
    let mut n = 51;
    'run: while !t.pool.get(&ids[0]).finished {
        assert!(n < 200, "the SPRT never decided");
        let (task, size) = t.request(&ids, n);
        let mut p = Pairs::default();
        while p.stats().games() + 2 * batch_pairs <= size {
            p = p.play(batch_pairs, &STRONG);
            let reply = t.update(&ids, task, n, p.stats());
            if t.pool.get(&ids[0]).finished {
                assert_eq!(reply, "Alive(false)");
                break 'run;
            }
            // The task's last batch ends it.
            let alive = p.stats().games() < size;
            assert_eq!(reply, format!("Alive({alive})"));
        }
        n += 1;
    }
    let run = t.pool.get(&ids[0]);
    let sprt = run.args.sprt.as_ref().expect("sprt");
    assert_eq!(sprt.state, crate::stats::SprtState::Accepted);
    assert!(run.trajectory.points.len() > 2);

    // An SPSA run: never on the event loop (its journal patch carries the parameter
    // history), and nothing changes when the try declines.
    let ids = t.run(json!({"spsa": {"raw_params": "Foo,100,0,200,10,0.002"}}));
    all.push(ids[1].clone());
    let (task, _) = t.request(&ids, 200);
    let before = comparable(&t.fast.get(&ids[1]), true);
    let p = Pairs::default().play(6, &EVEN);
    assert!(
        t.fast
            .db
            .try_update_task(&ids[1], task, p.stats(), None, &worker(200))
            .is_none()
    );
    assert_eq!(comparable(&t.fast.get(&ids[1]), true), before);
    assert_eq!(t.update(&ids, task, 200, p.stats()), "Alive(true)");

    // Both paths were exercised: plain updates on the loop, the rest declined.
    assert!(t.hits >= 20, "{} fast-path hits", t.hits);
    assert!(t.declined >= 5, "{} declined", t.declined);

    // What the twin acknowledged is in its journal: a restart (the journal replayed over
    // the stored documents) gives back the same runs. (The trajectory is written behind
    // with the whole run, not journalled.)
    let mut fast = t.fast;
    let before: Vec<Value> = all
        .iter()
        .map(|id| comparable(&fast.get(id), false))
        .collect();
    fast.restart();
    for (id, before) in all.iter().zip(before) {
        assert_eq!(comparable(&fast.get(id), false), before, "{id}");
    }
}

/// Plays `run` to its end, a task per worker (each playing `pattern`); the last reply.
fn play_out(f: &Fixture, id: &str, pattern: &[usize]) -> TaskReply {
    for n in 1..250 {
        let Assignment::Task(t) = f.request(n) else {
            panic!("no task for worker {n}");
        };
        assert_eq!(t.run_id, id);
        let p = Pairs::default().play(t.num_games / 2, pattern);
        let (reply, ticket) =
            f.db.update_task(id, t.task_id, p.stats(), None, worker(n))
                .expect("update");
        f.durable(ticket);
        if f.get(id).finished {
            return reply;
        }
    }
    panic!("the run never finished");
}

#[test]
fn a_run_that_ends_is_logged_in_fishtests_words() {
    let f = fixture();
    let id = f.run(json!({"auto_purge": true}), true);
    assert_eq!(
        f.actions(&id)[0],
        (
            "new_run".into(),
            "owner".into(),
            "NumGames[10000] TC:10+0.1 Book:UHO_Lichess_4852_v1.epd Threads:1 Hash:16/16".into()
        )
    );
    assert!(matches!(
        play_out(&f, &id, &STRONG),
        TaskReply::Alive(false)
    ));
    let run = f.checked(&id);
    assert!(run.finished && run.is_green);
    let p = run.results.pentanomial;
    let e = crate::stats::get_elo(&p.map(|c| c as f64)).expect("elo");
    // The purge's action goes with the journal's next group commit (made under the run's
    // lock): wait for it.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let actions = loop {
        let actions = f.actions(&id);
        if actions.iter().any(|a| a.0 == "purge_run") || std::time::Instant::now() > deadline {
            break actions;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let n = actions.len();
    // The auto-purge under the run's owner, whatever it found; then the result line.
    assert_eq!(
        actions[n - 2],
        (
            "purge_run".into(),
            "owner".into(),
            "Auto purge (not performed): No bad workers".into()
        )
    );
    assert_eq!(
        actions[n - 1],
        (
            "finished_run".into(),
            "owner".into(),
            format!(
                "Result:accepted Elo:{:.2}[{:.2},{:.2}] LOS:100% Games:{} Ptnml:[{},{},{},{},{}]",
                e.elo,
                e.elo - e.elo95,
                e.elo + e.elo95,
                run.results.games(),
                p[0],
                p[1],
                p[2],
                p[3],
                p[4]
            )
        )
    );
    assert_eq!(run.results.games(), 10_000);
}

#[test]
fn a_run_without_pair_counts_is_purged_on_its_wins_losses_and_draws() {
    let f = fixture();
    let id = f.run(json!({}), true);
    let mut tasks = Vec::new();
    for n in 1..=6 {
        let Assignment::Task(t) = f.request(n) else {
            panic!("no task for worker {n}");
        };
        tasks.push(t.task_id);
    }
    {
        // As a run imported from before Fishtest counted pairs: W/L/D only. The last worker's
        // results are far out of line.
        let entry = f.db.entry(&id).expect("entry").expect("run");
        let mut run = entry.run.lock();
        let mut results = Stats::default();
        for (i, &t) in tasks.iter().enumerate() {
            let (wins, losses, draws) = if i == 5 {
                (300, 20, 80)
            } else {
                (100, 100, 200)
            };
            let stats = Stats {
                wins,
                losses,
                draws,
                ..Stats::default()
            };
            run.tasks[t].stats = stats;
            results.add(&stats);
        }
        run.results = results;
        assert!(!run.counts_pairs());
    }
    f.db.stop_run_by_user(&id, &f.owner).expect("stop");
    let outcome = f.db.purge_run(&id, &f.owner).expect("purge");
    assert_eq!(
        outcome.purged,
        vec![tasks[5]],
        "the chi² on W/L/D finds the worker"
    );
    let run = f.get(&id);
    assert_eq!(run.results.games(), 5 * 400);
    assert_eq!(
        f.last_action(&id),
        ("purge_run".into(), "owner".into(), "Manual purge".into())
    );
}

#[test]
fn a_run_failed_by_a_worker_logs_that_its_auto_purge_was_not_performed() {
    let f = fixture();
    let id = f.run(json!({"auto_purge": true}), true);
    let Assignment::Task(t) = f.request(1) else {
        panic!("no task");
    };
    // A user with Fishtest's 1000 CPU hours may fail a run.
    f.db.ledger.add_cpu_hours("other", 1000.0);
    let (_, ticket) =
        f.db.stop_run(&id, t.task_id, "Wrong bench", &worker(1))
            .expect("stop_run");
    f.durable(ticket);
    let run = f.get(&id);
    assert!(run.finished && run.failed);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let actions = loop {
        let actions = f.actions(&id);
        if actions.iter().any(|a| a.0 == "purge_run") || std::time::Instant::now() > deadline {
            break actions;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    // Fishtest's order: the stop, then the auto-purge it runs.
    let n = actions.len();
    assert_eq!(
        (actions[n - 2].0.as_str(), actions[n - 2].2.as_str()),
        ("stop_run", "Wrong bench")
    );
    assert_eq!(
        actions[n - 1],
        (
            "purge_run".into(),
            "owner".into(),
            "Auto purge (not performed): You cannot purge a failed run".into()
        )
    );
}

#[test]
fn a_fixed_games_runs_flags_come_from_its_pair_counts() {
    let f = fixture();
    let id = f.run(json!({}), true);
    let Assignment::Task(t) = f.request(1) else {
        panic!("no task");
    };
    {
        // Pairs of a win and a loss count as even pairs: on the pairs this run is clearly
        // better (LOS ≈ 1), on W/L/D alone it is not (LOS ≈ 0.82).
        let entry = f.db.entry(&id).expect("entry").expect("run");
        let mut run = entry.run.lock();
        let stats = Stats {
            wins: 540,
            losses: 510,
            draws: 50,
            pentanomial: [0, 10, 500, 40, 0],
            ..Stats::default()
        };
        assert_eq!(stats.check(), Ok(()));
        run.tasks[t.task_id].stats = stats;
        run.results = stats;
    }
    f.db.stop_run_by_user(&id, &f.owner).expect("stop");
    let run = f.get(&id);
    assert!(
        run.is_green && !run.is_yellow,
        "green, as Fishtest's flags say"
    );
}

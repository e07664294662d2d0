//! Unit tests of the simulator's limits check: the options, the ledger of held tasks, the
//! verdicts, the peaks.

use super::*;
use serde_json::json;

#[test]
fn rate_options_parse() {
    let r = parse_rate("request_task:20/1s").expect("parses");
    assert_eq!(
        (r.scope.as_str(), r.key.as_str(), r.max),
        ("request_task", "user", 20)
    );
    assert_eq!(r.window_s, 1.0);
    let r = parse_rate("api:resource:x:5/60").expect("parses");
    assert_eq!((r.key.as_str(), r.max, r.window_s), ("resource:x", 5, 60.0));
    for bad in [
        "request_task",
        "request_task:0/1",
        "x:1/0",
        "a b:1/1",
        ":1/1",
        "r:1/s",
    ] {
        assert!(parse_rate(bad).is_err(), "{bad}");
    }
}

fn reply(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[test]
fn the_ledger_follows_the_replies() {
    let ledger = Ledger::default();
    let req = |k: &str| json!({"worker_info": {"unique_key": k}});
    let got = |t: u64| reply(json!({"run": {"_id": "r"}, "task_id": t, "duration": 0.1}));
    fn ok(m: &Map<String, Value>) -> Seen<'_> {
        Seen::Reply {
            status: 200,
            object: Some(m),
        }
    }
    ledger.observe(Endpoint::RequestTask, &req("a"), ok(&got(0)));
    ledger.observe(Endpoint::RequestTask, &req("b"), ok(&got(1)));
    // A rate-limited update changes nothing; a not-alive one ends the task.
    let task0 = json!({"run_id": "r", "task_id": 0});
    let limited = reply(json!({"error": "x: rate limit r reached", "duration": 0.0}));
    ledger.observe(
        Endpoint::UpdateTask,
        &task0,
        Seen::Reply {
            status: 429,
            object: Some(&limited),
        },
    );
    assert_eq!(ledger.held_by_run()["r"].len(), 2);
    let dead = reply(json!({"task_alive": false, "duration": 0.0}));
    ledger.observe(Endpoint::UpdateTask, &task0, ok(&dead));
    assert_eq!(ledger.held_by_run()["r"], BTreeSet::from([1]));
    // A new task replaces the worker's old one; the same task again is a duplicate.
    ledger.observe(Endpoint::RequestTask, &req("b"), ok(&got(2)));
    assert_eq!(ledger.held_by_run()["r"], BTreeSet::from([2]));
    ledger.observe(Endpoint::RequestTask, &req("c"), ok(&got(2)));
    let l = ledger.inner.lock();
    assert_eq!(
        (l.assigned, l.twice, l.rate_limited, l.rate_limited_shaped),
        (4, 1, 1, 1)
    );
}

#[test]
fn only_unknown_outcomes_and_dead_tasks_excuse_a_mismatch() {
    let mut r = LimitsReport {
        samples: 1,
        ..LimitsReport::default()
    };
    r.tasks.mismatched_tasks = 5;
    r.tasks.uncertain = 2;
    r.judge();
    assert!(!r.verdict.no_task_lost && !r.verdict.ok);
    r.allow_dead_tasks(3);
    assert!(r.verdict.no_task_lost && r.verdict.ok, "{:?}", r.verdict);
    r.rate_limited_calls = 1;
    r.judge();
    assert!(!r.verdict.rate_limited_in_shape && !r.verdict.ok);
}

#[test]
fn peaks_see_a_key_over_its_max() {
    let mut p = Peaks::default();
    p.add(
        &json!({"limits": [{"name": "concurrency:user", "kind": "concurrency",
        "key": "user", "max": 4, "holders": 7, "rejected": 2,
        "keys": [{"key": "u1", "max": 4, "holders": 4}, {"key": "u2", "max": 4, "holders": 3}]}]}),
    );
    let l = &p.limits["concurrency:user"];
    assert_eq!(
        (l.peak_key_holders, l.peak_total_holders, l.over_max),
        (4, 7, 0)
    );
    p.add(
        &json!({"limits": [{"name": "concurrency:user", "max": 4, "holders": 5,
        "keys": [{"key": "u1", "max": 4, "holders": 5}]}]}),
    );
    assert_eq!(p.limits["concurrency:user"].over_max, 1);
    p.add(&json!({"oops": 1}));
    assert_eq!((p.samples, p.failed_samples), (2, 1));
}

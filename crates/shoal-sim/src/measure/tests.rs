//! Unit tests of the simulator's measurements (the recorder's arithmetic).

use super::*;

#[test]
fn recorder_arithmetic() {
    let t0 = Instant::now();
    let r = Recorder::new(t0).expect("recorder");
    let sec = |s: u64, ms: u64| t0 + Duration::from_secs(s) + Duration::from_millis(ms);
    r.reply(Endpoint::Beat, sec(0, 100), Duration::from_millis(2), None);
    r.reply(Endpoint::Beat, sec(0, 200), Duration::from_millis(4), None);
    r.reply(
        Endpoint::RequestTask,
        sec(1, 0),
        Duration::from_millis(10),
        Some(Duration::from_millis(1)),
    );
    r.too_busy(sec(1, 20));
    r.error(Endpoint::UpdateTask, "timeout", sec(2, 0));
    r.error(Endpoint::UpdateTask, "timeout", sec(2, 5));
    r.message(Endpoint::UpdateTask, "task 12 is gone 345");
    r.message(Endpoint::UpdateTask, "task 99 is gone 1");
    r.worker_started();
    r.worker_started();
    r.task_assigned(sec(1, 10), Some(Duration::from_millis(900)));
    r.sample(sec(1, 50));
    r.task_released();
    r.games("aa", 8);
    r.games("bb", 2);
    r.games("aa", 4);
    let rep = r.summarize(Duration::from_secs(4), 2, ClientCounters::default());
    assert_eq!(rep.calls, 3);
    assert!((rep.calls_per_second - 0.75).abs() < 1e-12);
    assert_eq!(rep.endpoints["/api/beat"].count, 2);
    assert!((rep.endpoints["/api/beat"].mean_ms - 3.0).abs() < 0.01);
    assert_eq!(rep.errors["update_task:timeout"], 2);
    assert_eq!(rep.errors_total, 2);
    // Digits are dropped so that the same message for different tasks groups together.
    assert_eq!(rep.error_messages["update_task: task  is gone "], 2);
    assert_eq!(rep.too_busy, 1);
    assert_eq!(rep.tasks.games_reported, 14);
    assert_eq!(rep.tasks.games_by_run["aa"], 12);
    assert_eq!(rep.timeline.len(), 3);
    assert_eq!(rep.timeline[0].calls, 2);
    assert_eq!(rep.timeline[1].request_task, 1);
    assert_eq!(rep.timeline[1].too_busy, 1);
    assert_eq!(rep.timeline[1].assigned, 1);
    assert_eq!(rep.timeline[2].errors, 2);
    assert!(rep.connect.is_some());
    // One of two workers got a task: not all assigned.
    assert_eq!(rep.workers.got_a_task, 1);
    assert_eq!(rep.workers.all_assigned_after_s, None);
    r.task_assigned(sec(3, 500), Some(Duration::from_millis(100)));
    let rep = r.summarize(Duration::from_secs(4), 2, ClientCounters::default());
    assert_eq!(rep.workers.all_assigned_after_s, Some(3.5));
    assert_eq!(rep.tasks.assigned, 2);
}

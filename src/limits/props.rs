//! Property tests of the engine: never more held than `max`, no grant lost or doubled,
//! waiters served by priority then arrival, releases idempotent, rate windows bounded.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::def::{LimitDef, LimitSpec};
use super::engine::{Engine, Grant, GrantRef, Holder, KeyCtx, backoff};
use super::{Scope, def};

fn engine(max: u64) -> Engine {
    let spec = LimitSpec {
        kind: "concurrency".into(),
        key: "user".into(),
        max: Some(max),
        ..Default::default()
    };
    let mut defs = LimitDef::builtins(16);
    defs.push(LimitDef::from_spec(&spec).expect("valid"));
    Engine::new(defs, Instant::now())
}

const USER: usize = 3;

fn grant(key: u8, units: u64) -> Grant {
    Grant {
        limit: USER,
        key: format!("u{key}"),
        units,
        max: None,
    }
}

#[derive(Debug, Clone)]
enum Op {
    Acquire { task: u8, key: u8, units: u64 },
    Release { task: u8 },
    Wait { key: u8, prio: i8 },
    Convert { waiter: u8, task: u8 },
    Drop { waiter: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..24, 0u8..3, 1u64..3).prop_map(|(task, key, units)| Op::Acquire { task, key, units }),
        3 => (0u8..24).prop_map(|task| Op::Release { task }),
        2 => (0u8..3, -2i8..3).prop_map(|(key, prio)| Op::Wait { key, prio }),
        2 => (0u8..16, 0u8..24).prop_map(|(waiter, task)| Op::Convert { waiter, task }),
        1 => (0u8..16).prop_map(|waiter| Op::Drop { waiter }),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever the interleaving, held units match the holder records and never exceed max;
    /// a reservation is granted at most once and never lost.
    #[test]
    fn never_over_max_and_nothing_lost(max in 1u64..5, ops in proptest::collection::vec(op(), 1..120)) {
        let e = engine(max);
        let mut waiters: Vec<super::engine::WaitTicket> = Vec::new();
        let mut reservations: Vec<(u64, String)> = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for op in ops {
            match op {
                Op::Acquire { task, key, units } => {
                    let h = Holder::Task("r".into(), task.into());
                    e.release(&h);
                    let _ = e.acquire(h, &[grant(key, units).borrowed()], None, None);
                }
                Op::Release { task } => {
                    let h = Holder::Task("r".into(), task.into());
                    e.release(&h);
                    prop_assert!(!e.release(&h), "a second release gives nothing back");
                }
                Op::Wait { key, prio } => waiters.push(e.wait(&grant(key, 1), prio.into())),
                Op::Convert { waiter, task } => {
                    if !reservations.is_empty() {
                        let (r, key) = reservations.remove(usize::from(waiter) % reservations.len());
                        let h = Holder::Task("w".into(), task.into());
                        e.release(&h);
                        let g = Grant { limit: USER, key, units: 1, max: None };
                        // A reservation always converts into a holder of its key.
                        prop_assert!(e.acquire(h, &[g.borrowed()], None, Some(r)).is_ok());
                    }
                }
                Op::Drop { waiter } => {
                    if !waiters.is_empty() {
                        let t = waiters.remove(usize::from(waiter) % waiters.len());
                        e.cancel(&t);
                        drop(t);
                    }
                }
            }
            // Collect reservations handed out so far.
            for t in &mut waiters {
                if let Ok(r) = t.rx.try_recv() {
                    prop_assert!(seen.insert(r), "reservation {} handed out twice", r);
                    reservations.push((r, t.key.clone()));
                }
            }
            waiters.retain(|t| !t.rx.is_terminated());
            prop_assert!(e.consistent());
            for k in 0..3u8 {
                let key = format!("u{}", k);
                prop_assert!(e.held_by_key(USER, &key) <= max);
            }
        }
        // Give everything back: every waiter still queued must then be served (none lost).
        for (r, _) in reservations.drain(..) {
            e.release(&Holder::Reservation(r));
        }
        for task in 0..24u8 {
            e.release(&Holder::Task("r".into(), task.into()));
            e.release(&Holder::Task("w".into(), task.into()));
        }
        loop {
            let mut progressed = false;
            for t in &mut waiters {
                if let Ok(r) = t.rx.try_recv() {
                    prop_assert!(seen.insert(r));
                    e.release(&Holder::Reservation(r));
                    progressed = true;
                }
            }
            waiters.retain(|t| !t.rx.is_terminated());
            if !progressed {
                break;
            }
        }
        prop_assert!(waiters.is_empty(), "{} waiters never served", waiters.len());
        prop_assert!(e.consistent());
    }

    /// With one key full, waiters are served one per release, by priority, then arrival.
    #[test]
    fn waiters_by_priority_then_arrival(max in 1u64..4, prios in proptest::collection::vec(-3i8..4, 1..20)) {
        let e = engine(max);
        for t in 0..max {
            prop_assert!(e.acquire(Holder::Task("r".into(), t as usize), &[grant(0, 1).borrowed()], None, None).is_ok());
        }
        prop_assert!(e.acquire(Holder::Task("r".into(), 99), &[grant(0, 1).borrowed()], None, None).is_err());
        let mut tickets: Vec<_> = prios.iter().map(|p| (i64::from(*p), e.wait(&grant(0, 1), (*p).into()))).collect();
        let mut expected: Vec<(i64, u64)> = tickets.iter().map(|(p, t)| (*p, t.seq)).collect();
        expected.sort_by_key(|(p, s)| (-p, *s));
        let mut served = Vec::new();
        let mut next_task = 0usize;
        let mut held: Vec<Holder> = (0..max).map(|t| Holder::Task("r".into(), t as usize)).collect();
        while served.len() < expected.len() {
            // A holder leaves; exactly one waiter is served and converts its reservation.
            let h = held.remove(0);
            prop_assert!(e.release(&h));
            let mut got = Vec::new();
            for (p, t) in &mut tickets {
                if let Ok(r) = t.rx.try_recv() {
                    got.push((*p, t.seq, r));
                }
            }
            prop_assert_eq!(got.len(), 1);
            let (p, s, r) = got[0];
            served.push((p, s));
            let task = Holder::Task("w".into(), next_task);
            next_task += 1;
            prop_assert!(e.acquire(task.clone(), &[grant(0, 1).borrowed()], None, Some(r)).is_ok());
            held.push(task);
            prop_assert!(e.held_by_key(USER, "u0") <= max);
        }
        prop_assert_eq!(served, expected);
        prop_assert!(e.consistent());
    }

    /// A rate limit lets exactly `max` calls per key through per window.
    #[test]
    fn rate_window(max in 1u64..10, calls in 1usize..40) {
        let spec = LimitSpec {
            kind: "rate".into(),
            key: "ip".into(),
            max: Some(max),
            scope: Some("request_task".into()),
            window_s: Some(60.0),
            ..Default::default()
        };
        let e = Engine::new(vec![LimitDef::from_spec(&spec).expect("valid")], Instant::now());
        let now = Instant::now();
        let scope = Scope::Endpoint("request_task".into());
        let ctx = KeyCtx { ip: Some("1.2.3.4"), ..Default::default() };
        let ok = (0..calls).filter(|_| e.rate_check(&scope, &ctx, now).is_ok()).count();
        prop_assert_eq!(ok as u64, max.min(calls as u64));
        let later = now + Duration::from_secs(61);
        prop_assert!(e.rate_check(&scope, &ctx, later).is_ok());
    }
}

#[test]
fn backoff_doubles_to_a_minute() {
    let v: Vec<u64> = (1..=8).map(|n| backoff(n).as_secs()).collect();
    assert_eq!(v, vec![1, 2, 4, 8, 16, 32, 60, 60]);
    assert_eq!(backoff(u32::MAX), Duration::from_secs(60));
}

#[test]
fn floating_failure_keeps_the_value_and_backs_off() {
    let spec = LimitSpec {
        kind: "floating".into(),
        key: "resource:db".into(),
        source: Some("write_behind_lag".into()),
        default_max: Some(10),
        refresh_s: Some(30.0),
        ..Default::default()
    };
    let t0 = Instant::now();
    let e = Engine::new(vec![LimitDef::from_spec(&spec).expect("valid")], t0);
    assert_eq!(e.due(t0).len(), 1);
    e.refreshed(0, Some(4), Vec::new(), t0);
    assert!(e.due(t0 + Duration::from_secs(29)).is_empty());
    let t1 = t0 + Duration::from_secs(30);
    e.refresh_failed(0, "boom".into(), t1);
    e.refresh_failed(0, "boom".into(), t1);
    let v = &e.view(t1)[0];
    let f = v.floating.as_ref().expect("floating");
    assert_eq!((v.max, f.retries), (4, 2));
    assert_eq!(f.next_refresh_in_s, 2.0);
    assert_eq!(f.last_error.as_deref(), Some("boom"));
    // The value holds: 4 fit, the fifth does not.
    let g = |i| {
        (
            Holder::Task("r".into(), i),
            vec![GrantRef {
                limit: 0,
                key: "db".into(),
                units: 1,
                max: None,
            }],
        )
    };
    for i in 0..4 {
        let (h, gs) = g(i);
        assert!(e.acquire(h, &gs, None, None).is_ok());
    }
    let (h, gs) = g(4);
    assert!(e.acquire(h, &gs, None, None).is_err());
    e.refreshed(0, Some(5), Vec::new(), t1);
    assert_eq!(e.view(t1)[0].floating.as_ref().map(|f| f.retries), Some(0));
    let (h, gs) = g(4);
    assert!(e.acquire(h, &gs, None, None).is_ok());
}

#[test]
fn credit_and_per_key_max() {
    let e = engine(2);
    let machine = e.id(def::MACHINE).expect("builtin");
    let g = |max| Grant {
        limit: machine,
        key: "1.2.3.4".into(),
        units: 1,
        max: Some(max),
    };
    let a = Holder::Task("r".into(), 0);
    assert!(e.acquire(a.clone(), &[g(1).borrowed()], None, None).is_ok());
    // The user's own stale task does not count against it.
    assert!(
        e.acquire(Holder::Task("r".into(), 1), &[g(1).borrowed()], None, None)
            .is_err()
    );
    assert!(
        e.acquire(
            Holder::Task("r".into(), 1),
            &[g(1).borrowed()],
            Some(&a),
            None
        )
        .is_ok()
    );
    assert_eq!(e.held_by_key(machine, "1.2.3.4"), 2);
    assert!(e.set_max(machine, 5).is_err(), "built-ins are not edited");
    assert!(e.set_max(USER, 0).is_err());
    assert_eq!(e.set_max(USER, 7), Ok(2));
}

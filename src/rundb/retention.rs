//! PGN retention, Fishtest's (`purge_pgns.py`): the PGNs of a run are deleted once its
//! `last_updated` is older than its class's window: a finished short-time-control run
//! (`pgn_retention_days`, 1 day), a finished long-time-control one
//! (`pgn_retention_ltc_days`, 10), a deleted one (`pgn_retention_deleted_days`, 10), an
//! unfinished one (`pgn_retention_unfinished_days`, 50); a window of 0 keeps that class's
//! PGNs. As Fishtest's job, it looks only at runs last updated within the last
//! `pgn_retention_lookback_days` (60; 0: every run), so a run left alone for longer keeps its
//! PGNs in both. On SQLite the freed pages are given back to the file system.
//!
//! A finished run's `last_updated` is when it finished (only a person's later change, modify
//! or purge, moves it, later still); an unfinished run's is its last update, so a run that
//! still gets games never loses its PGNs. A run without a `last_updated` date keeps them.
//!
//! A pass (the primary's periodic job, or `/debug/pgn_retention` in the tests) walks each
//! class in turn: its runs older than the class's cutoff in (`last_updated`, `_id`) order,
//! [`RUN_PAGE`] a step (indexed fields, and the class of the runs that have PGNs), deletes the
//! PGNs of those of the class that have any, [`PGN_BATCH`] PGNs (at most [`BATCH_BYTES`]) a
//! step, then gives free pages back, [`RECLAIM_PAGES`] a step. Every step is one short store
//! call in its own pool job: [`PgnRetention::pass`] awaits the pool between steps, so a pass
//! of any size holds a pool token, and the store's writer, only for one step at a time. Where
//! each class's walk ended is kept in memory: the next pass starts there and only looks at
//! runs that crossed the cutoff since (a restart walks the look-back window once).
//!
//! Owns: the pass (its steps, their bounds, the walks' positions), the log line and the
//! `shoal_pgn_retention_*` series.
//! Must not: take any lock of the run database or the scheduler (`sched`, the run cache, a
//! run's lock, the journal): it works on the store alone, and the store checks, in the
//! transaction that deletes a batch, that the run is still of the class and old enough;
//! delete anything but PGNs.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::{DbResult, RunDb, RunDbError};
use crate::offload::{Offload, OffloadError};
use crate::store::{Date, PgnClass, RetentionWindow, RunPosition};

/// Finished runs looked at per walking step.
pub const RUN_PAGE: usize = 200;
/// PGNs deleted per step (one transaction).
pub const PGN_BATCH: usize = 100;
/// Stored bytes deleted per step, at most (unless one PGN alone is larger).
pub const BATCH_BYTES: u64 = 32 << 20;
/// Free pages given back per step (8 MiB at SQLite's default page size).
pub const RECLAIM_PAGES: u32 = 2048;
/// Reclaiming steps per pass, at most (bounds a pass while something else keeps freeing).
const MAX_RECLAIM_STEPS: u32 = 100_000;

/// PGN documents deleted.
pub const DELETED_TOTAL: &str = "shoal_pgn_retention_deleted_total";
/// Their stored (gzip) bytes.
pub const BYTES_FREED_TOTAL: &str = "shoal_pgn_retention_bytes_freed_total";
/// Runs whose PGNs were deleted.
pub const RUNS_TOTAL: &str = "shoal_pgn_retention_runs_total";
/// Bytes the SQLite file shrank by (incremental vacuum).
pub const RECLAIMED_BYTES_TOTAL: &str = "shoal_pgn_retention_reclaimed_bytes_total";
/// Passes completed.
pub const PASSES_TOTAL: &str = "shoal_pgn_retention_passes_total";

/// What a pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct RetentionSummary {
    /// Runs older than their class's cutoff looked at.
    pub runs_checked: u64,
    /// Runs whose PGNs were deleted.
    pub runs: u64,
    /// PGNs deleted.
    pub pgns: u64,
    /// Their stored bytes.
    pub bytes: u64,
    /// Bytes given back to the file system.
    pub reclaimed_bytes: u64,
}

/// Why a pass stopped early. What it deleted before stays deleted.
#[derive(Debug, thiserror::Error)]
pub enum RetentionError {
    #[error(transparent)]
    RunDb(#[from] RunDbError),
    #[error(transparent)]
    Offload(#[from] OffloadError),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Walk,
    Reclaim,
    Done,
}

/// One pass's state, carried from step to step.
#[derive(Debug)]
pub struct RetentionPass {
    /// The classes still to walk, the front one now.
    windows: VecDeque<RetentionWindow>,
    /// Per class, every run up to here, in walk order, is done.
    walked: BTreeMap<PgnClass, RunPosition>,
    /// The last run of the page being emptied (done once `queue` is).
    page_end: Option<RunPosition>,
    /// Runs of the page with PGNs left to delete.
    queue: VecDeque<String>,
    /// Whether the front run of `queue` lost PGNs already.
    front_deleted: bool,
    reclaim_steps: u32,
    phase: Phase,
    summary: RetentionSummary,
}

impl RetentionPass {
    /// A pass deleting the PGNs of each class's runs last updated more than its `days` days
    /// before `now` and at most `lookback` days before it (0: however long ago), each
    /// class's walk resuming from `walked`.
    pub fn new(
        windows: &[(PgnClass, u32)],
        lookback: u32,
        now: Date,
        walked: BTreeMap<PgnClass, RunPosition>,
    ) -> DbResult<RetentionPass> {
        let before = |days: u32| {
            chrono::TimeDelta::try_days(i64::from(days))
                .and_then(|d| now.0.checked_sub_signed(d))
                .map(Date)
                .ok_or(RunDbError::NoDateBefore { days })
        };
        let since = match lookback {
            0 => None,
            days => Some(before(days)?),
        };
        let mut ws = VecDeque::new();
        for &(class, days) in windows {
            ws.push_back(RetentionWindow {
                class,
                cutoff: before(days)?,
                since,
            });
        }
        Ok(RetentionPass {
            windows: ws,
            walked,
            page_end: None,
            queue: VecDeque::new(),
            front_deleted: false,
            reclaim_steps: 0,
            phase: Phase::Walk,
            summary: RetentionSummary::default(),
        })
    }

    pub fn summary(&self) -> RetentionSummary {
        self.summary
    }

    /// The front run of the queue is done.
    fn pop(&mut self) {
        self.queue.pop_front();
        if std::mem::take(&mut self.front_deleted) {
            self.summary.runs = self.summary.runs.saturating_add(1);
            metrics::counter!(RUNS_TOTAL).increment(1);
        }
        if self.queue.is_empty()
            && let Some(end) = self.page_end.take()
            && let Some(w) = self.windows.front()
        {
            self.walked.insert(w.class, end);
        }
    }
}

impl RunDb {
    /// One bounded step of a pass: a page of the walk, one batch of one run's PGNs, or one
    /// reclaiming step. False once the pass is over. Takes no lock of the run database.
    pub fn pgn_retention_step(&self, pass: &mut RetentionPass) -> DbResult<bool> {
        match pass.phase {
            Phase::Walk => {
                let Some(window) = pass.windows.front().cloned() else {
                    pass.phase = Phase::Reclaim;
                    return Ok(true);
                };
                if let Some(run) = pass.queue.front().cloned() {
                    let d = self
                        .store
                        .pgn_delete_expired(&run, &window, PGN_BATCH, BATCH_BYTES)?;
                    let s = &mut pass.summary;
                    s.pgns = s.pgns.saturating_add(d.count);
                    s.bytes = s.bytes.saturating_add(d.bytes);
                    metrics::counter!(DELETED_TOTAL).increment(d.count);
                    metrics::counter!(BYTES_FREED_TOTAL).increment(d.bytes);
                    if d.count > 0 {
                        pass.front_deleted = true;
                    }
                    if d.count == 0 || !d.more {
                        pass.pop();
                    }
                    return Ok(true);
                }
                let page = self.store.expired_pgn_runs(
                    &window,
                    pass.walked.get(&window.class),
                    RUN_PAGE,
                )?;
                let Some(last) = page.last else {
                    // This class is walked to its cutoff: the next one.
                    pass.windows.pop_front();
                    return Ok(true);
                };
                pass.summary.runs_checked = pass.summary.runs_checked.saturating_add(page.runs);
                pass.queue = page.with_pgns.into();
                if pass.queue.is_empty() {
                    pass.walked.insert(window.class, last);
                } else {
                    pass.page_end = Some(last);
                }
                Ok(true)
            }
            Phase::Reclaim => {
                let n = self.store.reclaim_space(RECLAIM_PAGES)?;
                pass.summary.reclaimed_bytes = pass.summary.reclaimed_bytes.saturating_add(n);
                metrics::counter!(RECLAIMED_BYTES_TOTAL).increment(n);
                pass.reclaim_steps = pass.reclaim_steps.saturating_add(1);
                if n == 0 || pass.reclaim_steps >= MAX_RECLAIM_STEPS {
                    pass.phase = Phase::Done;
                }
                Ok(pass.phase != Phase::Done)
            }
            Phase::Done => Ok(false),
        }
    }
}

/// The primary's PGN retention: the windows, and where the last pass's walks ended.
#[derive(Debug)]
pub struct PgnRetention {
    /// Each class retention applies to, and its days (never 0).
    windows: Vec<(PgnClass, u32)>,
    /// How many days back a pass looks (`pgn_retention_lookback_days`; 0: no limit).
    lookback: u32,
    /// Where each class's walk ended; the lock also makes passes (the periodic job, the debug
    /// route) run one after the other. An async mutex of its own: held across the pool awaits
    /// of a pass, never by blocking code.
    walked: tokio::sync::Mutex<BTreeMap<PgnClass, RunPosition>>,
}

/// The windows as the log shows them: `stc=1d ltc=10d …`.
fn windows_text(windows: &[(PgnClass, u32)]) -> String {
    let parts: Vec<String> = windows
        .iter()
        .map(|(c, d)| format!("{}={d}d", c.name()))
        .collect();
    parts.join(" ")
}

impl PgnRetention {
    /// Retention with these windows (a class with 0 days is left out: its PGNs are kept),
    /// looking `lookback` days back (0: no limit); `None` when every class keeps its PGNs.
    /// Its series start at 0 on `/metrics`.
    pub fn new(windows: &[(PgnClass, u32)], lookback: u32) -> Option<PgnRetention> {
        let windows: Vec<(PgnClass, u32)> =
            windows.iter().copied().filter(|(_, d)| *d > 0).collect();
        if windows.is_empty() {
            return None;
        }
        for name in [
            DELETED_TOTAL,
            BYTES_FREED_TOTAL,
            RUNS_TOTAL,
            RECLAIMED_BYTES_TOTAL,
            PASSES_TOTAL,
        ] {
            metrics::counter!(name).increment(0);
        }
        Some(PgnRetention {
            windows,
            lookback,
            walked: tokio::sync::Mutex::new(BTreeMap::new()),
        })
    }

    /// Each class retention applies to, and its days.
    pub fn windows(&self) -> &[(PgnClass, u32)] {
        &self.windows
    }

    /// How many days back a pass looks (0: no limit).
    pub fn lookback(&self) -> u32 {
        self.lookback
    }

    /// One whole pass, each step a pool job of its own; logs what it deleted and gave back.
    pub async fn pass(
        &self,
        db: &Arc<RunDb>,
        offload: &Offload,
    ) -> Result<RetentionSummary, RetentionError> {
        let mut walked = self.walked.lock().await;
        let started = Instant::now();
        let mut pass =
            RetentionPass::new(&self.windows, self.lookback, Date::now(), walked.clone())?;
        let windows = windows_text(&self.windows);
        let outcome = loop {
            let db = db.clone();
            let (back, step) = offload
                .run(move || {
                    let step = db.pgn_retention_step(&mut pass);
                    (pass, step)
                })
                .await?;
            pass = back;
            match step {
                Ok(true) => tokio::task::yield_now().await,
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        *walked = pass.walked.clone();
        let s = pass.summary;
        let seconds = started.elapsed().as_secs_f64();
        match outcome {
            Ok(()) => {
                metrics::counter!(PASSES_TOTAL).increment(1);
                tracing::info!(
                    %windows,
                    runs = s.runs,
                    pgns = s.pgns,
                    bytes_freed = s.bytes,
                    reclaimed_bytes = s.reclaimed_bytes,
                    seconds,
                    "pgn retention: deleted the PGNs of runs older than their class's window"
                );
                Ok(s)
            }
            Err(e) => {
                tracing::error!(
                    %windows,
                    runs = s.runs,
                    pgns = s.pgns,
                    bytes_freed = s.bytes,
                    error = %e,
                    "pgn retention: pass stopped early (what it deleted stays deleted)"
                );
                Err(e.into())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rundb::testkit;
    use crate::store::{Collection, Store};
    use serde_json::json;

    fn days_ago(days: i64) -> Date {
        Date(chrono::Utc::now() - chrono::TimeDelta::days(days))
    }

    /// A run document with just what retention reads.
    fn put_run(store: &dyn Store, id: &str, finished: bool, updated: Date) {
        put_run_of(store, id, finished, false, "10+0.1", updated);
    }

    fn put_run_of(
        store: &dyn Store,
        id: &str,
        finished: bool,
        deleted: bool,
        tc: &str,
        updated: Date,
    ) {
        let doc = json!({"_id": id, "finished": finished, "deleted": deleted,
                         "last_updated": updated.to_value(),
                         "args": {"username": "x", "tc": tc}});
        let serde_json::Value::Object(doc) = doc else {
            panic!("object")
        };
        store.put(Collection::Runs, &doc).expect("put run");
    }

    fn run_all(db: &RunDb, pass: &mut RetentionPass) -> usize {
        let mut steps = 0;
        while db.pgn_retention_step(pass).expect("step") {
            steps += 1;
        }
        steps
    }

    #[test]
    fn only_old_finished_runs_lose_their_pgns_in_bounded_batches() {
        let f = testkit::fixture();
        let (db, store) = (&f.db, f.store.clone());
        // Two old finished runs (one with more PGNs than a batch), a run that finished
        // recently, an unfinished run older than any cutoff, and old runs without PGNs.
        let old = ["a00000000000000000000001", "a00000000000000000000002"];
        put_run(store.as_ref(), old[0], true, days_ago(100));
        put_run(store.as_ref(), old[1], true, days_ago(40));
        put_run(
            store.as_ref(),
            "b00000000000000000000001",
            true,
            days_ago(29),
        );
        put_run(
            store.as_ref(),
            "c00000000000000000000001",
            false,
            days_ago(400),
        );
        for i in 0..5 {
            put_run(
                store.as_ref(),
                &format!("d0000000000000000000000{i}"),
                true,
                days_ago(50 + i),
            );
        }
        let n = PGN_BATCH + 7;
        for t in 0..n {
            store
                .pgn_put(&format!("{}-{t}", old[0]), b"12345")
                .expect("pgn");
        }
        store
            .pgn_put(&format!("{}-0", old[1]), b"123")
            .expect("pgn");
        store
            .pgn_put("b00000000000000000000001-0", b"keep")
            .expect("pgn");
        store
            .pgn_put("c00000000000000000000001-0", b"keep")
            .expect("pgn");

        let stc = [(PgnClass::Stc, 30)];
        let mut pass = RetentionPass::new(&stc, 0, Date::now(), BTreeMap::new()).expect("pass");
        let steps = run_all(db, &mut pass);
        let s = pass.summary();
        assert_eq!(s.runs, 2);
        assert_eq!(s.pgns, n as u64 + 1);
        assert_eq!(s.bytes, 5 * n as u64 + 3);
        assert!(steps >= 4, "{steps}: batches, a walk page, the end");
        for id in old {
            assert!(store.pgn_list_run(id).expect("list").is_empty(), "{id}");
        }
        assert_eq!(
            store
                .pgn_list_run("b00000000000000000000001")
                .expect("b")
                .len(),
            1
        );
        assert_eq!(
            store
                .pgn_list_run("c00000000000000000000001")
                .expect("c")
                .len(),
            1
        );
        assert_eq!(
            pass.walked.get(&PgnClass::Stc).map(|p| p.id.as_str()),
            Some(old[1]),
            "the walk ends at the newest old run"
        );

        // The next pass starts where the walk ended: a run that has crossed the cutoff since
        // is found, nothing older is looked at again.
        put_run(
            store.as_ref(),
            "b00000000000000000000001",
            true,
            days_ago(31),
        );
        let mut next = RetentionPass::new(&stc, 0, Date::now(), pass.walked.clone()).expect("pass");
        run_all(db, &mut next);
        assert_eq!(next.summary().pgns, 1);
        assert_eq!(next.summary().runs_checked, 1);
        assert!(
            store
                .pgn_list_run("b00000000000000000000001")
                .expect("b")
                .is_empty()
        );
        assert_eq!(
            store
                .pgn_list_run("c00000000000000000000001")
                .expect("c")
                .len(),
            1
        );
    }

    #[test]
    fn a_run_revived_after_the_walk_keeps_its_pgns() {
        let f = testkit::fixture();
        let (db, store) = (&f.db, f.store.clone());
        let id = "a00000000000000000000009";
        put_run(store.as_ref(), id, true, days_ago(90));
        store.pgn_put(&format!("{id}-0"), b"x").expect("pgn");
        let stc = [(PgnClass::Stc, 30)];
        let mut pass = RetentionPass::new(&stc, 0, Date::now(), BTreeMap::new()).expect("pass");
        assert!(db.pgn_retention_step(&mut pass).expect("walk"));
        assert_eq!(pass.queue.len(), 1);
        put_run(store.as_ref(), id, false, Date::now());
        run_all(db, &mut pass);
        assert_eq!(pass.summary().pgns, 0);
        assert_eq!(store.pgn_list_run(id).expect("list").len(), 1);
    }

    #[test]
    fn each_class_keeps_its_pgns_for_fishtests_number_of_days() {
        let f = testkit::fixture();
        let (db, store) = (&f.db, f.store.clone());
        // (id, finished, deleted, tc, days since last updated, loses its PGNs)
        let runs = [
            ("a00000000000000000000001", true, false, "10+0.1", 2, true),
            ("a00000000000000000000002", true, false, "10+0.1", 0, false),
            ("a00000000000000000000003", true, false, "60+0.6", 5, false),
            ("a00000000000000000000004", true, false, "60+0.6", 11, true),
            ("a00000000000000000000005", true, false, "20+0.2", 11, true),
            ("a00000000000000000000006", true, true, "10+0.1", 5, false),
            ("a00000000000000000000007", true, true, "10+0.1", 11, true),
            (
                "a00000000000000000000008",
                false,
                false,
                "10+0.1",
                40,
                false,
            ),
            ("a00000000000000000000009", false, false, "10+0.1", 51, true),
            // Last updated before Fishtest's 60-day look-back: Fishtest keeps these.
            (
                "a0000000000000000000000a",
                false,
                false,
                "10+0.1",
                96,
                false,
            ),
            ("a0000000000000000000000b", true, false, "10+0.1", 61, false),
            ("a0000000000000000000000c", true, true, "10+0.1", 200, false),
        ];
        for (id, finished, deleted, tc, days, _) in runs {
            put_run_of(store.as_ref(), id, finished, deleted, tc, days_ago(days));
            store.pgn_put(&format!("{id}-0"), b"pgn").expect("pgn");
        }
        let retention = PgnRetention::new(
            &[
                (PgnClass::Stc, 1),
                (PgnClass::Ltc, 10),
                (PgnClass::Deleted, 10),
                (PgnClass::Unfinished, 50),
            ],
            60,
        )
        .expect("on");
        let mut pass = RetentionPass::new(
            retention.windows(),
            retention.lookback(),
            Date::now(),
            BTreeMap::new(),
        )
        .expect("pass");
        run_all(db, &mut pass);
        for (id, .., gone) in runs {
            let left = store.pgn_list_run(id).expect("list").len();
            assert_eq!(left, usize::from(!gone), "{id}");
        }
        assert_eq!(pass.summary().runs, 5);
        // A class with 0 days keeps its PGNs; none at all: no retention.
        assert_eq!(
            PgnRetention::new(&[(PgnClass::Stc, 0), (PgnClass::Ltc, 3)], 60)
                .expect("on")
                .windows(),
            &[(PgnClass::Ltc, 3)]
        );
        assert!(PgnRetention::new(&[(PgnClass::Stc, 0)], 60).is_none());

        // With no look-back limit, the runs left alone for longer lose theirs too.
        let mut all =
            RetentionPass::new(retention.windows(), 0, Date::now(), BTreeMap::new()).expect("pass");
        run_all(db, &mut all);
        assert_eq!(all.summary().runs, 3);
        for id in [
            "a0000000000000000000000a",
            "a0000000000000000000000b",
            "a0000000000000000000000c",
        ] {
            assert!(store.pgn_list_run(id).expect("list").is_empty(), "{id}");
        }
    }
}

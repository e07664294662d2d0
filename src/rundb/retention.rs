//! PGN retention (`pgn_retention_days`): the PGNs of runs that finished longer ago than the
//! setting are deleted, and on SQLite the freed pages are given back to the file system.
//!
//! "Finished at" is a finished run's `last_updated`: `finish_run` sets it when the run
//! finishes, and only a person's later change (modify, purge) moves it, later still; so a run
//! loses its PGNs no sooner than `pgn_retention_days` after it finished. An unfinished run
//! never loses them, however old; nor does a finished run without a `last_updated` date.
//!
//! A pass (the primary's periodic job, or `/debug/pgn_retention` in the tests) walks the
//! finished runs older than the cutoff in (`last_updated`, `_id`) order, [`RUN_PAGE`] a step
//! (indexed fields only, never a run document), deletes the PGNs of those that have any,
//! [`PGN_BATCH`] PGNs (at most [`BATCH_BYTES`]) a step, then gives free pages back,
//! [`RECLAIM_PAGES`] a step. Every step is one short store call in its own pool job:
//! [`PgnRetention::pass`] awaits the pool between steps, so a pass of any size holds a pool
//! token, and the store's writer, only for one step at a time. Where the walk ended is kept in
//! memory: the next pass starts there and only looks at runs that crossed the cutoff since (a
//! restart walks every old finished run once).
//!
//! Owns: the pass (its steps, their bounds, the walk's position), the log line and the
//! `shoal_pgn_retention_*` series.
//! Must not: take any lock of the run database or the scheduler (`sched`, the run cache, a
//! run's lock, the journal): it works on the store alone, and the store checks, in the
//! transaction that deletes a batch, that the run is still finished and old enough; delete
//! anything but PGNs.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use super::{DbResult, RunDb, RunDbError};
use crate::offload::{Offload, OffloadError};
use crate::store::{Date, RunPosition};

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
    /// Old finished runs looked at.
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
    cutoff: Date,
    /// Every run up to here, in walk order, is done.
    done_up_to: Option<RunPosition>,
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
    /// A pass deleting the PGNs of runs finished more than `days` days before `now`, walking
    /// from `after`.
    pub fn new(days: u32, now: Date, after: Option<RunPosition>) -> DbResult<RetentionPass> {
        let cutoff = chrono::TimeDelta::try_days(i64::from(days))
            .and_then(|d| now.0.checked_sub_signed(d))
            .ok_or(RunDbError::NoDateBefore { days })?;
        Ok(RetentionPass {
            cutoff: Date(cutoff),
            done_up_to: after,
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
        {
            self.done_up_to = Some(end);
        }
    }
}

impl RunDb {
    /// One bounded step of a pass: a page of the walk, one batch of one run's PGNs, or one
    /// reclaiming step. False once the pass is over. Takes no lock of the run database.
    pub fn pgn_retention_step(&self, pass: &mut RetentionPass) -> DbResult<bool> {
        match pass.phase {
            Phase::Walk => {
                if let Some(run) = pass.queue.front().cloned() {
                    let d = self.store.pgn_delete_expired(
                        &run,
                        &pass.cutoff,
                        PGN_BATCH,
                        BATCH_BYTES,
                    )?;
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
                    &pass.cutoff,
                    pass.done_up_to.as_ref(),
                    RUN_PAGE,
                )?;
                let Some(last) = page.last else {
                    pass.phase = Phase::Reclaim;
                    return Ok(true);
                };
                pass.summary.runs_checked = pass.summary.runs_checked.saturating_add(page.runs);
                pass.queue = page.with_pgns.into();
                if pass.queue.is_empty() {
                    pass.done_up_to = Some(last);
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

/// The primary's PGN retention: the setting, and where the last pass's walk ended.
#[derive(Debug)]
pub struct PgnRetention {
    days: u32,
    /// Where the walk ended; the lock also makes passes (the periodic job, the debug route)
    /// run one after the other. An async mutex of its own: held across the pool awaits of a
    /// pass, never by blocking code.
    walked: tokio::sync::Mutex<Option<RunPosition>>,
}

impl PgnRetention {
    /// Retention after `days` days; its series start at 0 on `/metrics`.
    pub fn new(days: u32) -> PgnRetention {
        for name in [
            DELETED_TOTAL,
            BYTES_FREED_TOTAL,
            RUNS_TOTAL,
            RECLAIMED_BYTES_TOTAL,
            PASSES_TOTAL,
        ] {
            metrics::counter!(name).increment(0);
        }
        PgnRetention {
            days,
            walked: tokio::sync::Mutex::new(None),
        }
    }

    pub fn days(&self) -> u32 {
        self.days
    }

    /// One whole pass, each step a pool job of its own; logs what it deleted and gave back.
    pub async fn pass(
        &self,
        db: &Arc<RunDb>,
        offload: &Offload,
    ) -> Result<RetentionSummary, RetentionError> {
        let mut walked = self.walked.lock().await;
        let started = Instant::now();
        let mut pass = RetentionPass::new(self.days, Date::now(), walked.clone())?;
        let cutoff = pass.cutoff.to_iso();
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
        *walked = pass.done_up_to.clone();
        let s = pass.summary;
        let seconds = started.elapsed().as_secs_f64();
        match outcome {
            Ok(()) => {
                metrics::counter!(PASSES_TOTAL).increment(1);
                tracing::info!(
                    days = self.days,
                    %cutoff,
                    runs = s.runs,
                    pgns = s.pgns,
                    bytes_freed = s.bytes,
                    reclaimed_bytes = s.reclaimed_bytes,
                    seconds,
                    "pgn retention: deleted the PGNs of runs finished before the cutoff"
                );
                Ok(s)
            }
            Err(e) => {
                tracing::error!(
                    days = self.days,
                    %cutoff,
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
        let doc = json!({"_id": id, "finished": finished, "last_updated": updated.to_value(),
                         "args": {"username": "x"}});
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

        let mut pass = RetentionPass::new(30, Date::now(), None).expect("pass");
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
            pass.done_up_to.as_ref().map(|p| p.id.as_str()),
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
        let mut next = RetentionPass::new(30, Date::now(), pass.done_up_to.clone()).expect("pass");
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
        let mut pass = RetentionPass::new(30, Date::now(), None).expect("pass");
        assert!(db.pgn_retention_step(&mut pass).expect("walk"));
        assert_eq!(pass.queue.len(), 1);
        put_run(store.as_ref(), id, false, Date::now());
        run_all(db, &mut pass);
        assert_eq!(pass.summary().pgns, 0);
        assert_eq!(store.pgn_list_run(id).expect("list").len(), 1);
    }
}

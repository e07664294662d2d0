//! The run cache and the write-behind.
//!
//! Owns: `RunEntry` (one cached run behind its lock, with its dirty priority, journal seq,
//! last write and compiled `arch_filter`), loading a run into the cache on a miss, `commit`
//! (a run's change as a journal patch, the run marked dirty), `save_now`, the write-behind
//! (`flush`: the most urgent dirty runs, and the pending CPU hours), eviction (`clean_cache`),
//! and the patch format the journal replays (`patch_of`, `apply_patch`). Entries are private to
//! `rundb`: callers outside get copies (`queries.rs`).
//! Must not: call any layer above it (transitions, the operations, recovery); decide what a
//! change is (its callers do); write the cache while holding another lock of the run database.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::Instant;

use parking_lot::Mutex;
use serde_json::Value;

use super::model::Run;
use super::schedule::ArchFilter;
use super::{DbResult, RunDb, RunDbError, Ticket};
use crate::store::{Collection, Doc, JournalEntry, RunRecord, StoreError};

/// Write-behind priorities, as Fishtest's: the flusher takes the dirty run with the smallest
/// `last_sync - 60 s × priority` first, so a new task is written before an ended one, and both
/// before any other change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Prio {
    Normal = 0,
    Medium = 1,
    High = 2,
}

/// One cached run.
pub(super) struct RunEntry {
    pub(super) run: Mutex<Run>,
    /// 0 = clean, p + 1 = dirty with priority p.
    dirty: AtomicU8,
    /// Highest journal seq applied to `run`.
    seq: AtomicU64,
    last_sync: Mutex<Instant>,
    arch: Mutex<Option<(String, ArchFilter)>>,
}

impl RunEntry {
    pub(super) fn new(run: Run) -> Arc<RunEntry> {
        // The filter is compiled here, when a run enters the cache (creation, start-up, a
        // cache miss), never inside request_task's critical section.
        let arch = run
            .args
            .arch_filter
            .as_ref()
            .map(|p| (p.clone(), ArchFilter::compile(p)));
        Arc::new(RunEntry {
            run: Mutex::new(run),
            dirty: AtomicU8::new(0),
            seq: AtomicU64::new(0),
            last_sync: Mutex::new(Instant::now()),
            arch: Mutex::new(arch),
        })
    }

    pub(super) fn mark_dirty(&self, prio: Prio) {
        self.dirty.fetch_max(prio as u8 + 1, Ordering::AcqRel);
    }

    pub(super) fn arch_filter(&self, pattern: &str) -> ArchFilter {
        let mut cached = self.arch.lock();
        match &*cached {
            Some((p, f)) if p == pattern => f.clone(),
            _ => {
                let f = ArchFilter::compile(pattern);
                *cached = Some((pattern.to_string(), f.clone()));
                f
            }
        }
    }
}

pub(super) fn to_doc<T: serde::Serialize>(v: &T) -> DbResult<Doc> {
    match serde_json::to_value(v) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(RunDbError::Corrupt("?".into(), "not an object".into())),
        Err(e) => Err(RunDbError::Corrupt("?".into(), e.to_string())),
    }
}

/// The write-behind record of a run, serialised straight from the typed run (no intermediate
/// `Doc`: for a run with thousands of tasks that tree was most of a flush's allocations).
fn run_record(run: &Run, seq: u64) -> DbResult<RunRecord> {
    let json = serde_json::to_string(run)
        .map_err(|e| RunDbError::Corrupt(run.id.clone(), e.to_string()))?;
    Ok(RunRecord {
        id: run.id.clone(),
        json,
        seq,
        finished: Some(run.finished),
        last_updated: Some(run.last_updated.to_iso()),
        username: Some(run.args.username.clone()),
    })
}

pub(super) fn parse_run(doc: Doc) -> DbResult<Run> {
    let id = doc
        .get("_id")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();
    serde_json::from_value(Value::Object(doc)).map_err(|e| RunDbError::Corrupt(id, e.to_string()))
}

/// The patch that makes a journal entry: every run field but the task lists and the
/// trajectory, plus the touched tasks as `"tasks.<i>"` and what the trajectory changed since
/// the last patch (`trajectory.rs`: its newest point and stride, or all of it when its shape
/// changed), so an acknowledged update's samples survive a crash.
fn patch_of(run: &mut Run, touched: &[usize]) -> DbResult<Doc> {
    let tasks = std::mem::take(&mut run.tasks);
    let bad = std::mem::take(&mut run.bad_tasks);
    let trajectory = std::mem::take(&mut run.trajectory);
    let head = to_doc(&*run);
    run.tasks = tasks;
    run.bad_tasks = bad;
    run.trajectory = trajectory;
    let mut patch = head?;
    patch.remove("tasks");
    patch.remove("bad_tasks");
    for &i in touched {
        if let Some(t) = run.tasks.get(i) {
            patch.insert(format!("tasks.{i}"), Value::Object(to_doc(t)?));
        }
    }
    run.trajectory
        .journal_into(&mut patch)
        .map_err(|e| RunDbError::Corrupt(run.id.clone(), e.to_string()))?;
    Ok(patch)
}

/// Applies a journal patch to a stored run document.
pub fn apply_patch(doc: &mut Doc, patch: &Doc) {
    for (key, value) in patch {
        if let Some(index) = key.strip_prefix("tasks.") {
            let Ok(i) = index.parse::<usize>() else {
                continue;
            };
            let tasks = doc
                .entry("tasks")
                .or_insert_with(|| Value::Array(Vec::new()));
            if let Value::Array(list) = tasks {
                if i < list.len() {
                    list[i] = value.clone();
                } else {
                    // Entries are applied in seq order, so a new task is always the next index.
                    while list.len() < i {
                        list.push(Value::Null);
                    }
                    list.push(value.clone());
                }
            }
        } else if !super::trajectory::apply_patch_key(doc, key, value) {
            doc.insert(key.clone(), value.clone());
        }
    }
}

impl RunDb {
    /// The cached entry of a run, loading it from the store if needed. A secondary does not
    /// cache: the primary changes runs, and the store is where a secondary sees them.
    pub(super) fn entry(&self, run_id: &str) -> DbResult<Option<Arc<RunEntry>>> {
        if let Some(e) = self.cache.read().get(run_id) {
            return Ok(Some(e.clone()));
        }
        let Some(doc) = self.store.get(Collection::Runs, run_id)? else {
            return Ok(None);
        };
        let run = parse_run(doc)?;
        if !self.cfg.primary {
            return Ok(Some(RunEntry::new(run)));
        }
        let mut cache = self.cache.write();
        Ok(Some(
            cache
                .entry(run_id.to_string())
                .or_insert_with(|| RunEntry::new(run))
                .clone(),
        ))
    }

    /// Journals the state of `run` (touched tasks included) and marks it dirty. Call with the
    /// run's lock held.
    pub(super) fn commit(
        &self,
        entry: &RunEntry,
        run: &mut Run,
        touched: &[usize],
        prio: Prio,
    ) -> DbResult<Ticket> {
        let patch = patch_of(run, touched)?;
        let seq = self.journal.next_seq();
        entry.seq.store(seq, Ordering::Release);
        entry.mark_dirty(prio);
        Ok(self.journal.submit(JournalEntry {
            seq,
            run_id: run.id.clone(),
            patch,
        }))
    }

    /// Writes a run document now (Fishtest's SAVE_NOW) and folds its journal entries.
    pub(super) fn save_now(&self, entry: &RunEntry, run: &Run) -> DbResult<()> {
        let seq = entry.seq.load(Ordering::Acquire);
        self.store.flush_runs(&[run_record(run, seq)?])?;
        self.note_listed_change();
        entry.dirty.store(0, Ordering::Release);
        *entry.last_sync.lock() = Instant::now();
        Ok(())
    }

    /// A count of the changes a run list must show at once: a run written at once
    /// (created, approved, stopped, modified, deleted, finished) or a task handed out or
    /// ended (a run's workers). Results alone do not count. Pages that cache a rendering
    /// key it on this.
    pub fn listed_changes(&self) -> u64 {
        self.listed_changes.load(Ordering::Acquire)
    }

    pub(super) fn note_listed_change(&self) {
        self.listed_changes.fetch_add(1, Ordering::AcqRel);
    }

    /// Writes dirty runs behind: up to `flush_runs_per_tick`, most urgent first
    /// (minimum of last_sync − 60 s · priority, as Fishtest), and the pending CPU hours.
    /// Returns how many runs were written.
    pub fn flush(&self, all: bool) -> DbResult<usize> {
        let hours = self.ledger.persist_cpu_hours();
        let contributors = self.ledger.persist_contributors();
        let runs = self.flush_runs(all);
        hours?;
        contributors?;
        runs
    }

    fn flush_runs(&self, all: bool) -> DbResult<usize> {
        let entries: Vec<(String, Arc<RunEntry>)> = self
            .cache
            .read()
            .iter()
            .filter(|(_, e)| e.dirty.load(Ordering::Acquire) > 0)
            .map(|(k, e)| (k.clone(), e.clone()))
            .collect();
        let mut scored: Vec<(f64, Arc<RunEntry>)> = entries
            .into_iter()
            .map(|(_, e)| {
                let prio = f64::from(e.dirty.load(Ordering::Acquire).saturating_sub(1));
                let age = e.last_sync.lock().elapsed().as_secs_f64();
                (-(age + 60.0 * prio), e)
            })
            .collect();
        scored.sort_by(|a, b| a.0.total_cmp(&b.0));
        let limit = if all {
            usize::MAX
        } else {
            self.cfg.flush_runs_per_tick
        };
        let mut batch = Vec::new();
        let mut taken = Vec::new();
        for (_, e) in scored.into_iter().take(limit) {
            // Serialise under the lock, straight to text: one pass over the run, cheaper than
            // the clone it replaces (and no second copy of a run with thousands of tasks).
            let record = {
                let run = e.run.lock();
                let seq = e.seq.load(Ordering::Acquire);
                e.dirty.store(0, Ordering::Release);
                run_record(&run, seq)
            };
            match record {
                Ok(r) => batch.push(r),
                Err(err) => {
                    e.mark_dirty(Prio::Normal);
                    return Err(err);
                }
            }
            taken.push(e);
        }
        if batch.is_empty() {
            return Ok(0);
        }
        // One run per transaction: the store has a single writer, and the journal appends that
        // acknowledged updates wait for must not queue behind a whole batch of big documents.
        let mut written = 0;
        let mut failure = None;
        for (item, entry) in batch.into_iter().zip(&taken) {
            let started = Instant::now();
            match self.store.flush_runs(std::slice::from_ref(&item)) {
                Ok(()) => {
                    metrics::histogram!("shoal_flush_seconds")
                        .record(started.elapsed().as_secs_f64());
                    *entry.last_sync.lock() = Instant::now();
                    written += 1;
                }
                Err(e) => {
                    // Retried on a later tick.
                    entry.mark_dirty(Prio::Normal);
                    failure = Some(e);
                }
            }
        }
        match failure {
            Some(e) => Err(e.into()),
            None => Ok(written),
        }
    }

    /// Runs still waiting to be written.
    pub fn dirty_count(&self) -> usize {
        self.cache
            .read()
            .values()
            .filter(|e| e.dirty.load(Ordering::Acquire) > 0)
            .count()
    }

    /// Seconds since the oldest unwritten change was last written (0 when all are written):
    /// the write-behind's lag.
    pub fn write_behind_lag(&self) -> f64 {
        self.cache
            .read()
            .values()
            .filter(|e| e.dirty.load(Ordering::Acquire) > 0)
            .map(|e| e.last_sync.lock().elapsed().as_secs_f64())
            .fold(0.0, f64::max)
    }

    /// Evicts finished, clean runs loaded or written more than `cache_keep` ago from the
    /// cache. Returns how many runs were evicted.
    pub fn clean_cache(&self) -> usize {
        let unfinished: HashSet<String> = self.unfinished.read().iter().cloned().collect();
        let keep = self.cfg.cache_keep;
        let mut cache = self.cache.write();
        let before = cache.len();
        cache.retain(|id, e| {
            unfinished.contains(id)
                || e.dirty.load(Ordering::Acquire) > 0
                || e.last_sync.lock().elapsed() < keep
        });
        before - cache.len()
    }

    /// Closes the store (at shutdown, after the last flush).
    pub fn close_store(&self) -> Result<(), StoreError> {
        self.store.close()
    }
}

#[cfg(test)]
mod tests {
    //! The trajectory in the journal: an acknowledged update's samples survive a crash (a
    //! restart that replays the journal over documents the write-behind never wrote), and
    //! they cost each patch a point, not the whole trajectory.

    use serde_json::json;

    use super::*;
    use crate::rundb::model::Stats;
    use crate::rundb::outcome::Assignment;
    use crate::rundb::testkit::{Fixture, fixture, worker};
    use crate::rundb::trajectory::{MAX_POINTS, Point};

    /// Totals of `pairs` game pairs of a patch as strong as its base (always consistent;
    /// the SPRT between -1 and 1 stays undecided).
    fn totals(pairs: u64) -> Stats {
        let mut p = [0u64; 5];
        for k in 0..pairs {
            p[[2, 1, 3, 2, 0, 4, 2, 3, 1, 2][(k % 10) as usize]] += 1;
        }
        Stats {
            wins: 2 * p[4] + p[3],
            losses: 2 * p[0] + p[1],
            draws: p[1] + 2 * p[2] + p[3],
            crashes: 0,
            time_losses: 0,
            pentanomial: p,
        }
    }

    /// An approved SPRT run with `updates` acknowledged batches from one worker (tasks
    /// requested as they end); nothing written behind.
    fn played(f: &Fixture, updates: usize) -> String {
        let id = f.run(
            json!({"sprt": {"elo0": -1.0, "elo1": 1.0}, "num_games": null}),
            true,
        );
        let batch = f.get(&id).batch_games() / 2;
        let mut done = 0;
        let mut n = 1;
        while done < updates {
            let a = f.request(n);
            let Assignment::Task(t) = a else {
                panic!(
                    "no task after {done} updates: {a:?} {:?}",
                    f.get(&id).args.sprt
                );
            };
            assert_eq!(t.run_id, id);
            let mut pairs = 0;
            while done < updates && 2 * (pairs + batch) <= t.num_games {
                pairs += batch;
                let (reply, ticket) =
                    f.db.update_task(&id, t.task_id, totals(pairs), None, worker(n))
                        .expect("update");
                f.durable(ticket);
                done += 1;
                if format!("{reply:?}") != "Alive(true)" {
                    break;
                }
            }
            n += 1;
        }
        id
    }

    #[test]
    fn acknowledged_samples_survive_a_crash_without_a_write_behind() {
        let mut f = fixture();
        let id = played(&f, 3 * MAX_POINTS);
        let before = f.get(&id).trajectory;
        assert!(before.points.len() >= MAX_POINTS / 2, "{before:?}");
        assert!(before.stride > 2, "decimated at least once");
        // The store still holds the run as created: only the journal has the updates.
        assert!(f.stored(&id).get("trajectory").is_none());
        f.restart();
        let after = f.get(&id);
        assert_eq!(after.trajectory, before);
        assert_eq!(
            after.trajectory.points.last().map(|p| p.g),
            Some(after.results.games())
        );
    }

    /// What an update's patch weighs with its trajectory delta, against the head alone and
    /// against the whole trajectory (the numbers quoted in `trajectory.rs`).
    #[test]
    fn a_trajectory_delta_is_a_small_part_of_a_patch() {
        let f = fixture();
        let id = played(&f, 3 * MAX_POINTS);
        let mut run = f.get(&id);
        let size = |p: &Doc| serde_json::to_string(p).map(|s| s.len()).unwrap_or(0);
        let head = size(&patch_of(&mut run, &[0]).expect("patch"));
        let last = *run.trajectory.points.last().expect("points");
        let next = Point {
            g: last.g + 2 * run.trajectory.stride,
            ..last
        };
        run.trajectory.record(last, next);
        let with_point = size(&patch_of(&mut run, &[0]).expect("patch"));
        let whole = serde_json::to_string(&run.trajectory).expect("json").len();
        let delta = with_point - head;
        eprintln!("patch {head} B, + trajectory delta {delta} B; whole trajectory {whole} B");
        assert!(delta < 200, "{delta}");
        assert!(whole > 20 * delta, "{whole} vs {delta}");
    }

    #[test]
    fn trajectory_keys_replay_into_the_run_document() {
        let mut doc = Doc::new();
        let mut patch = Doc::new();
        patch.insert(
            "trajectory".into(),
            json!({"stride": 2, "points": [{"g": 2, "w": 1, "l": 1, "d": 0}]}),
        );
        apply_patch(&mut doc, &patch);
        let mut patch = Doc::new();
        patch.insert("trajectory.stride".into(), json!(4));
        patch.insert(
            "trajectory.points.1".into(),
            json!({"g": 4, "w": 2, "l": 1, "d": 1}),
        );
        apply_patch(&mut doc, &patch);
        assert_eq!(doc["trajectory"]["stride"], json!(4));
        assert_eq!(doc["trajectory"]["points"][1]["g"], json!(4));
        assert!(doc.keys().all(|k| !k.contains('.')), "{doc:?}");
    }
}

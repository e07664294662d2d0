//! The periodic jobs over the unfinished runs: dead tasks scavenged, itp and nps/games per
//! minute recomputed, invariants validated. (`app.rs` schedules them; the write-behind and the
//! cache's eviction are in `cache.rs`; the scheduler's upkeep is `crate::scheduler`'s.)
//!
//! Owns: what each job changes in the runs, one run's lock at a time.
//! Must not: call the other operations (tasks, lifecycle, queries), recovery or the
//! scheduler; hold the cache's lock while taking a run's.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::json;

use super::cache::{Prio, RunEntry};
use super::records::run_fields;
use super::schedule;
use super::{DbResult, RunDb, secs_since};

impl RunDb {
    /// Declares tasks dead after `dead_task` without an update or beat.
    pub fn scavenge_dead_tasks(&self) -> DbResult<usize> {
        let ids = self.unfinished.read().clone();
        let mut dead = 0;
        for id in ids {
            let Some(entry) = self.cache.read().get(&id).cloned() else {
                continue;
            };
            let mut run = entry.run.lock();
            let limit = self.cfg.dead_task.as_secs_f64();
            let stale: Vec<usize> = run
                .tasks
                .iter()
                .enumerate()
                .filter(|(_, t)| t.active && secs_since(&t.last_updated) > limit)
                .map(|(i, _)| i)
                .collect();
            for &i in &stale {
                self.set_inactive(&mut run, i);
                self.check_crash_or_time(&run, i)?;
                // Fishtest's `dead_task` action: the task and its worker, no message (its
                // schema refuses one).
                let task = &run.tasks[i];
                let mut f = run_fields(&run, None);
                f.insert("worker".into(), json!(task.worker_info.long_name()));
                f.insert("task_id".into(), json!(i));
                self.locked_action("dead_task", &task.worker_info.username, f);
                dead += 1;
            }
            if !stale.is_empty() {
                let _ = self.commit(&entry, &mut run, &stale, Prio::Medium)?;
            }
        }
        if dead > 0 {
            metrics::counter!("shoal_dead_tasks_total").increment(dead as u64);
        }
        Ok(dead)
    }

    /// Recomputes every unfinished run's itp (docs/protocol.md#itp).
    pub fn update_itp(&self) {
        let ids = self.unfinished.read().clone();
        let entries: Vec<Arc<RunEntry>> = {
            let cache = self.cache.read();
            ids.iter().filter_map(|id| cache.get(id).cloned()).collect()
        };
        let mut with_workers: HashMap<String, u64> = HashMap::new();
        for e in &entries {
            let run = e.run.lock();
            if run.workers > 0 {
                *with_workers.entry(run.args.username.clone()).or_default() += 1;
            }
        }
        for e in &entries {
            let mut run = e.run.lock();
            let Some(tc) = schedule::parse_tc(&run.args.tc) else {
                continue;
            };
            let r = schedule::tc_ratio(&tc, run.args.threads);
            let n = with_workers.get(&run.args.username).copied().unwrap_or(0);
            let (llr, elo0) = run
                .args
                .sprt
                .as_ref()
                .map_or((None, 0.0), |s| (Some(s.llr), s.elo0));
            let itp = schedule::itp(run.args.throughput, r, n, run.results.games(), llr, elo0);
            if (itp - run.args.itp).abs() > f64::EPSILON {
                run.args.itp = itp;
                e.mark_dirty(Prio::Normal);
            }
        }
    }

    /// nps and games per minute of every unfinished run: Σ concurrency × nps over its active
    /// tasks, and Σ nps / 628,000 × 60 / game duration × (concurrency // threads).
    pub fn update_nps_gpm(&self) {
        let ids = self.unfinished.read().clone();
        let mut per_user: HashMap<String, f64> = HashMap::new();
        for id in ids {
            let Some(entry) = self.cache.read().get(&id).cloned() else {
                continue;
            };
            let mut run = entry.run.lock();
            let dur = schedule::parse_tc(&run.args.tc).map_or(1.0, |t| schedule::tc_duration(&t));
            let threads = run.args.threads.max(1);
            let (mut nps, mut gpm) = (0.0, 0.0);
            for t in run.tasks.iter().filter(|t| t.active) {
                let c = f64::from(t.worker_info.concurrency);
                nps += c * t.worker_info.nps;
                let task_gpm = t.worker_info.nps / schedule::REFERENCE_NPS
                    * (60.0 / dur.max(1e-9))
                    * f64::from(t.worker_info.concurrency / threads);
                gpm += task_gpm;
                *per_user
                    .entry(t.worker_info.username.clone())
                    .or_insert(0.0) += task_gpm * 60.0;
            }
            if run.nps != nps || run.games_per_minute != gpm {
                run.nps = nps;
                run.games_per_minute = gpm;
                entry.mark_dirty(Prio::Normal);
            }
        }
        self.ledger.set_games_per_hour(per_user);
    }

    /// Checks every unfinished run's invariants; logs violations. Returns how many runs
    /// had problems.
    pub fn validate(&self) -> usize {
        let ids = self.unfinished.read().clone();
        let mut bad = 0;
        for id in ids {
            if let Some(e) = self.cache.read().get(&id).cloned() {
                let errors = e.run.lock().check_invariants();
                if !errors.is_empty() {
                    bad += 1;
                    tracing::error!(run = %id, ?errors, "run invariants violated");
                }
            }
        }
        bad
    }
}

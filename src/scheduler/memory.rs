//! The scheduler's memory: the worker -> task map and each worker's runs (`Sched`), rebuilt
//! at start from the active tasks and `kvstore`'s `worker_runs`, persisted and pruned by
//! `clean_worker_runs`.
//!
//! Owns: `Sched`'s shape, its start-up rebuild (with every active task's grants taken again),
//! and its upkeep.
//! Must not: call the run core's operations; take `sched` while holding the cache or a run's
//! lock (the lock order starts with `sched`).

use std::collections::{HashMap, HashSet};

use serde_json::{Map, Value, json};

use super::Scheduler;
use crate::rundb::DbResult;
use crate::store::{Collection, Doc};

#[derive(Default)]
pub(super) struct WorkerRuns {
    pub(super) runs: HashSet<String>,
    pub(super) last_run: Option<String>,
}

/// The scheduler's memory (primary only).
#[derive(Default)]
pub(super) struct Sched {
    /// short worker name -> (run id, task id) of its latest task.
    pub(super) wtt: HashMap<String, (String, usize)>,
    pub(super) worker_runs: HashMap<String, WorkerRuns>,
}

impl Scheduler {
    /// Persists `worker_runs` and forgets runs that are finished.
    pub fn clean_worker_runs(&self) -> DbResult<()> {
        let unfinished: HashSet<String> = self.runs.unfinished_ids().into_iter().collect();
        let value = {
            let mut sched = self.sched.lock();
            let mut value = Map::new();
            sched.worker_runs.retain(|_, w| {
                w.runs.retain(|r| unfinished.contains(r));
                !w.runs.is_empty()
            });
            for (name, w) in &sched.worker_runs {
                let mut m = Map::new();
                for r in &w.runs {
                    m.insert(r.clone(), json!(true));
                }
                if let Some(l) = &w.last_run {
                    m.insert("last_run".into(), json!(l));
                }
                value.insert(name.clone(), Value::Object(m));
            }
            sched.wtt.retain(|_, (run, _)| unfinished.contains(run));
            value
        };
        let mut doc = Doc::new();
        doc.insert("_id".into(), json!("worker_runs"));
        doc.insert("value".into(), Value::Object(value));
        self.runs.store().put(Collection::Kvstore, &doc)?;
        Ok(())
    }

    /// Start-up (primary): the memory rebuilt from the cached unfinished runs (each active
    /// task in the worker -> task map, holding its grants again whatever the maxima) and from
    /// `kvstore`'s `worker_runs`. Runs before anything can call the scheduler.
    pub(super) fn rebuild(&self) -> DbResult<()> {
        let mut sched = self.sched.lock();
        let ids = self.runs.unfinished_ids();
        self.runs.scan_cached(&ids, |_, seen| {
            let run = seen.run;
            self.rebuild_holders(run);
            for (i, t) in run.tasks.iter().enumerate() {
                if t.active {
                    sched
                        .wtt
                        .insert(t.worker_info.short_name(), (run.id.clone(), i));
                }
            }
        });
        if let Some(doc) = self.runs.store().get(Collection::Kvstore, "worker_runs")?
            && let Some(Value::Object(map)) = doc.get("value")
        {
            for (name, v) in map {
                let mut wr = WorkerRuns::default();
                if let Value::Object(runs) = v {
                    for (k, val) in runs {
                        if k == "last_run" {
                            wr.last_run = val.as_str().map(String::from);
                        } else {
                            wr.runs.insert(k.clone());
                        }
                    }
                }
                sched.worker_runs.insert(name.clone(), wr);
            }
        }
        Ok(())
    }
}

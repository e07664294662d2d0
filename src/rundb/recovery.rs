//! Opening the run database: the top layer, run once at start-up.
//!
//! Owns: `RunDb::open`: the journal replayed over the stored run documents (primary only), the
//! journal's writer started, every unfinished run loaded into the cache with its active tasks
//! counted per address and in the worker -> task map, `worker_runs` read back, the blocked
//! workers read, and the ledger's contributors table loaded (built from the stored runs, once,
//! on a store that never had it).
//! Must not: be called on a live run database (`load_unfinished` takes the cache, `sched` and
//! `conns` together, against the lock order: safe only while nothing else can see the
//! struct).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};
use serde_json::{Value, json};

use super::books::Books;
use super::cache::{RunEntry, apply_patch, parse_run};
use super::scheduler::{Sched, WorkerRuns};
use super::{DbResult, RunDb, RunDbConfig, journal};
use crate::ledger::Ledger;
use crate::offload::Offload;
use crate::store::{Collection, Cond, Doc, Query, RunRecord, SharedStore};

impl RunDb {
    /// Opens the run database: loads unfinished runs, replays the journal, rebuilds the
    /// scheduler's memory; `ledger` records what the runs do (primary: its contributors
    /// table is loaded here, after the replay). Blocking; call from the offload pool.
    pub fn open(
        store: SharedStore,
        offload: Offload,
        books: Books,
        cfg: RunDbConfig,
        ledger: Arc<Ledger>,
    ) -> DbResult<RunDb> {
        // Replay the journal over the stored documents (primary only: a secondary never
        // writes runs; it reads them from the store, where the primary puts them).
        let (entries, max_seq) = if cfg.primary {
            store.journal_pending()?
        } else {
            (Vec::new(), 0)
        };
        let first_seq = max_seq + 1;
        if !entries.is_empty() {
            let mut docs: HashMap<String, Doc> = HashMap::new();
            for e in &entries {
                if !docs.contains_key(&e.run_id) {
                    match store.get(Collection::Runs, &e.run_id)? {
                        Some(d) => {
                            docs.insert(e.run_id.clone(), d);
                        }
                        None => {
                            tracing::error!(run = %e.run_id, "journal entry for an unknown run");
                            continue;
                        }
                    }
                }
                if let Some(doc) = docs.get_mut(&e.run_id) {
                    apply_patch(doc, &e.patch);
                }
            }
            let max_seq = first_seq - 1;
            let flushed = docs
                .values()
                .map(|d| RunRecord::from_doc(d, max_seq))
                .collect::<Result<Vec<_>, _>>()?;
            store.flush_runs(&flushed)?;
            tracing::info!(
                entries = entries.len(),
                runs = flushed.len(),
                "replayed the journal"
            );
        }
        let journal = journal::Journal::start(store.clone(), offload, first_seq);
        let limits = std::sync::Arc::new(crate::limits::Engine::new(
            cfg.limits.clone(),
            std::time::Instant::now(),
        ));
        let db = RunDb {
            store,
            books,
            cfg,
            journal,
            cache: RwLock::new(HashMap::new()),
            unfinished: RwLock::new(Vec::new()),
            sched: Mutex::new(Sched::default()),
            limits: limits.clone(),
            limit_ids: super::limiter::LimitIds::of(&limits),
            blocked: RwLock::new(HashSet::new()),
            ledger,
            listed_changes: Default::default(),
        };
        db.load_limit_maxima()?;
        if db.cfg.primary {
            db.load_unfinished()?;
            db.refresh_blocked()?;
            db.ledger.load_contributors(&db)?;
        }
        Ok(db)
    }

    fn load_unfinished(&self) -> DbResult<()> {
        let docs = self.store.find(
            Collection::Runs,
            &Query::new()
                .with(Cond::Eq("finished".into(), json!(false)))
                .sort("_id", crate::store::Order::Asc),
        )?;
        let mut ids = Vec::new();
        let mut cache = self.cache.write();
        let mut sched = self.sched.lock();
        for doc in docs {
            let run = parse_run(doc)?;
            if run.deleted {
                continue;
            }
            self.rebuild_holders(&run);
            for (i, t) in run.tasks.iter().enumerate() {
                if t.active {
                    sched
                        .wtt
                        .insert(t.worker_info.short_name(), (run.id.clone(), i));
                }
            }
            ids.push(run.id.clone());
            cache.insert(run.id.clone(), RunEntry::new(run));
        }
        if let Some(doc) = self.store.get(Collection::Kvstore, "worker_runs")?
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
        tracing::info!(runs = ids.len(), "loaded unfinished runs");
        *self.unfinished.write() = ids;
        Ok(())
    }
}

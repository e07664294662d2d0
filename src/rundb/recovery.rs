//! Opening the run database: the top layer, run once at start-up.
//!
//! Owns: `RunDb::open`: the journal replayed over the stored run documents (primary only), the
//! journal's writer started, the limits engine built, every unfinished run loaded into the
//! cache, and the ledger's contributors table loaded (built from the stored runs, once, on a
//! store that never had it). The scheduler's memory (the worker -> task map, `worker_runs`,
//! the blocked workers, the active tasks' grants) is rebuilt by `Scheduler::open`, after this.
//! Must not: be called on a live run database (`load_unfinished` writes the cache while
//! nothing else can see the struct).

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::RwLock;
use serde_json::json;

use super::books::Books;
use super::cache::{RunEntry, apply_patch, parse_run};
use super::{DbResult, RunDb, RunDbConfig, journal};
use crate::ledger::Ledger;
use crate::offload::Offload;
use crate::store::{Collection, Cond, Doc, Query, RunRecord, SharedStore};

impl RunDb {
    /// Opens the run database: loads unfinished runs, replays the journal (the scheduler's
    /// memory is `Scheduler::open`'s); `ledger` records what the runs do (primary: its contributors
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
        let journal = journal::Journal::start(store.clone(), offload, first_seq, ledger.clone());
        let limits = std::sync::Arc::new(crate::limits::Engine::new(
            cfg.limits.clone(),
            std::time::Instant::now(),
        ));
        let db = RunDb {
            store,
            books: arc_swap::ArcSwap::from_pointee(books),
            cfg,
            journal,
            cache: RwLock::new(HashMap::new()),
            unfinished: RwLock::new(Vec::new()),
            limits,
            ledger,
            listed_changes: Default::default(),
            doc_sizes: Default::default(),
        };
        if db.cfg.primary {
            db.load_unfinished()?;
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
        for doc in docs {
            let run = parse_run(doc)?;
            if run.deleted {
                continue;
            }
            ids.push(run.id.clone());
            cache.insert(run.id.clone(), RunEntry::new(run));
        }
        tracing::info!(runs = ids.len(), "loaded unfinished runs");
        *self.unfinished.write() = ids;
        Ok(())
    }
}

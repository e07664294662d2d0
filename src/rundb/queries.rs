//! Read-side queries the HTTP layer (and the UI to come) asks of the run database: finished
//! runs with filters and paging, a run (whole or without its task lists) and the active runs,
//! a task view, PGN look-ups and reads, net download counts, and the debug key-value probe.
//!
//! Owns: turning a request's filters into a store query, and reading the cached run under its
//! lock for a copy or a task view. Blocking: call every method from the offload pool.
//! Must not: know HTTP (no status codes, no JSON reply shapes), change a run, or call the
//! other operations (scheduler, tasks, lifecycle, jobs) or recovery.

use serde_json::{Value, json};

use std::sync::Arc;

use super::books::Books;
use super::model::Run;
use super::{DbResult, RunDb};
use crate::store::{Collection, Cond, Date, Doc, Order, Query};

/// A stored PGN: which task it belongs to, its size, and an opaque handle to read it by.
pub use crate::store::PgnInfo;

/// Runs a finished-runs page holds.
pub const FINISHED_PAGE_SIZE: u64 = 50;

/// What `/api/finished_runs` (and the finished-runs pages) filter on.
#[derive(Debug, Clone, Default)]
pub struct FinishedFilter {
    /// 1-based page of `page_size` runs, newest first.
    pub page: u64,
    /// Runs a page holds; 0 means [`FINISHED_PAGE_SIZE`] (the API's).
    pub page_size: u64,
    pub username: Option<String>,
    pub success_only: bool,
    pub yellow_only: bool,
    pub ltc_only: bool,
    /// Only runs last updated at or after this moment.
    pub since: Option<Date>,
}

impl FinishedFilter {
    /// Runs a page holds.
    pub fn size(&self) -> u64 {
        if self.page_size == 0 {
            FINISHED_PAGE_SIZE
        } else {
            self.page_size
        }
    }

    /// The store conditions: finished, not deleted, and the filter's.
    fn conds(&self) -> Vec<Cond> {
        let mut c = vec![
            Cond::Eq("finished".into(), json!(true)),
            Cond::Ne("deleted".into(), json!(true)),
        ];
        if let Some(u) = &self.username {
            c.push(Cond::Eq("args.username".into(), json!(u)));
        }
        if self.success_only {
            c.push(Cond::Eq("is_green".into(), json!(true)));
        }
        if self.yellow_only {
            c.push(Cond::Eq("is_yellow".into(), json!(true)));
        }
        if self.ltc_only {
            c.push(Cond::Gte("tc_base".into(), json!(40)));
        }
        if let Some(since) = &self.since {
            c.push(Cond::Gte("last_updated".into(), since.to_value()));
        }
        c
    }
}

/// Which task list a task view reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TaskList {
    Tasks,
    /// The purged copies (`bad_tasks`), looked up by their `task_id`.
    Bad,
}

impl RunDb {
    /// The opening books as they are now (a snapshot: a refresh swaps in a new list).
    pub fn books(&self) -> Arc<Books> {
        self.books.load_full()
    }

    /// Replaces the book list (a refresh from the official books repository).
    pub fn set_books(&self, books: Books) {
        self.books.store(Arc::new(books));
    }

    /// Stores the current book list (`kvstore` `books`, Fishtest's shape), so a restart
    /// starts from it. A blocking store write: call it in the pool.
    pub fn save_books(&self) -> DbResult<()> {
        Ok(self.books.load().save(&*self.store)?)
    }

    /// One page of finished, undeleted runs, newest first. Unreadable documents are skipped
    /// (and logged).
    pub fn finished_runs(&self, f: &FinishedFilter) -> DbResult<Vec<Run>> {
        let size = f.size();
        let mut q = Query::new()
            .sort("last_updated", Order::Desc)
            .skip(f.page.saturating_sub(1).saturating_mul(size))
            .limit(size);
        q.filter = f.conds();
        let docs = self.store.find(Collection::Runs, &q)?;
        Ok(docs
            .into_iter()
            .filter_map(
                |doc| match serde_json::from_value::<Run>(Value::Object(doc)) {
                    Ok(run) => Some(run),
                    Err(e) => {
                        tracing::warn!(error = %e, "skipping an unreadable run document");
                        None
                    }
                },
            )
            .collect())
    }

    /// How many finished, undeleted runs match the filter (its page ignored).
    pub fn count_finished_runs(&self, f: &FinishedFilter) -> DbResult<u64> {
        Ok(self.store.count(Collection::Runs, &f.conds())?)
    }

    /// One task of a run as stored (a task list entry, or a purged copy), or `None`.
    pub fn task_view(&self, run_id: &str, index: usize, list: TaskList) -> DbResult<Option<Value>> {
        let Some(entry) = self.entry(run_id)? else {
            return Ok(None);
        };
        let run = entry.run.lock();
        Ok(match list {
            TaskList::Bad => run
                .bad_tasks
                .iter()
                .find(|t| t.get("task_id").and_then(Value::as_u64) == Some(index as u64))
                .cloned(),
            TaskList::Tasks => run
                .tasks
                .get(index)
                .and_then(|t| serde_json::to_value(t).ok()),
        })
    }

    /// The latest upload of a task's PGN (`"<run_id>-<task_id>"`); duplicates are allowed and
    /// the latest wins.
    pub fn pgn_latest(&self, run_task: &str) -> DbResult<Option<PgnInfo>> {
        Ok(self.store.pgn_find(run_task)?.into_iter().last())
    }

    /// Every stored PGN of a run, in task order.
    pub fn pgns_of_run(&self, run_id: &str) -> DbResult<Vec<PgnInfo>> {
        Ok(self.store.pgn_list_run(run_id)?)
    }

    /// Up to `len` bytes of a stored PGN from `offset` (empty at the end), for streaming.
    pub fn pgn_chunk(&self, pgn: &PgnInfo, offset: u64, len: usize) -> DbResult<Vec<u8>> {
        Ok(self.store.pgn_read(&pgn.handle, offset, len)?)
    }

    /// The debug routes' key-value probe: writes `{"_id": "debug:<key>", "value": ...}`.
    pub fn debug_put(&self, key: &str, value: Value) -> DbResult<()> {
        let mut doc = Doc::new();
        doc.insert("_id".into(), Value::String(format!("debug:{key}")));
        doc.insert("value".into(), value);
        Ok(self.store.put(Collection::ShoalKv, &doc)?)
    }

    /// The debug routes' key-value probe: reads what [`RunDb::debug_put`] wrote.
    pub fn debug_get(&self, key: &str) -> DbResult<Option<Doc>> {
        Ok(self
            .store
            .get(Collection::ShoalKv, &format!("debug:{key}"))?)
    }
}

impl RunDb {
    /// A copy of a run without its task lists (cheap even for runs with many tasks).
    pub fn run_head(&self, run_id: &str) -> DbResult<Option<Run>> {
        Ok(self.entry(run_id)?.map(|e| {
            let mut run = e.run.lock();
            let tasks = std::mem::take(&mut run.tasks);
            let bad = std::mem::take(&mut run.bad_tasks);
            let head = run.clone();
            run.tasks = tasks;
            run.bad_tasks = bad;
            head
        }))
    }

    /// Copies of every unfinished run without their task lists, oldest first. The primary
    /// knows them (its run cache); a secondary reads them from the store, where the primary
    /// writes them (a run at once when created, approved or finished, progress within a
    /// second or so), as Fishtest's secondaries do.
    pub fn active_heads(&self) -> DbResult<Vec<Run>> {
        if !self.cfg.primary {
            let docs = self.store.find(
                Collection::Runs,
                &Query::new()
                    .with(Cond::Eq("finished".into(), json!(false)))
                    .sort("_id", Order::Asc),
            )?;
            return docs
                .into_iter()
                .map(|d| {
                    let mut run = super::cache::parse_run(d)?;
                    run.tasks = Vec::new();
                    run.bad_tasks = Vec::new();
                    Ok(run)
                })
                .collect();
        }
        let ids = self.unfinished.read().clone();
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(run) = self.run_head(&id)? {
                out.push(run);
            }
        }
        Ok(out)
    }

    /// A copy of a run.
    pub fn get_run(&self, run_id: &str) -> DbResult<Option<Run>> {
        Ok(self.entry(run_id)?.map(|e| e.run.lock().clone()))
    }

    /// Whether this instance is the primary (only the primary caches runs, changes them and
    /// schedules).
    pub fn is_primary(&self) -> bool {
        self.cfg.primary
    }

    /// The unfinished runs' ids.
    pub fn unfinished_ids(&self) -> Vec<String> {
        self.unfinished.read().clone()
    }

    /// The run's size as Fishtest stores it, in bytes: the BSON document its page reports as
    /// "document size" (MongoDB refuses a document over 16 MiB). `None` when the run does not
    /// map to BSON (it then could not be stored in MongoDB either). Pure: no store, no lock.
    pub fn document_size(run: &Run) -> Option<u64> {
        let doc = super::cache::to_doc(run).ok()?;
        let bson = crate::store::bson_map::to_bson(Collection::Runs, &doc).ok()?;
        bson.to_vec().ok().map(|bytes| bytes.len() as u64)
    }

    /// [`RunDb::document_size`] as the run page shows it: computed at most once per
    /// [`DOC_SIZE_FRESH`] per run (at most [`DOC_SIZES_KEPT`] runs remembered), so a page
    /// storm on an active run does not convert it whole on every view.
    pub fn document_size_recent(&self, run: &Run) -> Option<u64> {
        let now = std::time::Instant::now();
        if let Some((at, size)) = self.doc_sizes.lock().get(&run.id)
            && now.duration_since(*at) < DOC_SIZE_FRESH
        {
            return *size;
        }
        let size = Self::document_size(run);
        let mut sizes = self.doc_sizes.lock();
        if sizes.len() >= DOC_SIZES_KEPT {
            sizes.retain(|_, (at, _)| now.duration_since(*at) < DOC_SIZE_FRESH);
            if sizes.len() >= DOC_SIZES_KEPT {
                sizes.clear();
            }
        }
        sizes.insert(run.id.clone(), (now, size));
        size
    }
}

/// How long a run page's document size is reused.
pub const DOC_SIZE_FRESH: std::time::Duration = std::time::Duration::from_secs(10);
/// The most runs whose document size is remembered.
const DOC_SIZES_KEPT: usize = 1000;

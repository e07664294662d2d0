//! The run database: runs, tasks and the rules of the worker protocol (docs/protocol.md).
//!
//! Owns: the run cache (every unfinished run in memory, each behind its own lock), the
//! scheduler's memory (worker -> task map, per-IP task counts, worker runs, blocked workers),
//! the operations behind the worker endpoints, run creation and approval, the periodic jobs,
//! write-behind flushing and recovery from the journal.
//!
//! Durability: every change acknowledged to a worker is journalled ([`journal`]); the caller
//! awaits the returned [`Ticket`] before replying. Whole run documents are written behind, in
//! batches, by [`RunDb::flush`]; on start the journal is replayed over the stored documents.
//!
//! Locks nest only as `sched` -> the run cache (read) -> one run's lock -> `arch`, `conns`,
//! `cpu_hours_pending`, `unfinished`, `last_sync`, the journal, the store; never two run locks
//! at once; the cache is written only with no other lock held. ARCHITECTURE.md, "Lock order",
//! has every lock and the one start-up exception (`load_unfinished`). None is held across an
//! `.await` (everything here is blocking code run in the offload pool).
//! Must not: know HTTP or a store backend; do work proportional to all tasks ever created on
//! request_task's path.

pub mod books;
pub mod create;
pub mod journal;
pub mod model;
pub mod nets;
pub mod queries;
pub mod schedule;
pub mod users;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use serde_json::{Map, Value, json};

use crate::offload::Offload;
pub use crate::protocol::WORKER_VERSION;
use crate::store::{
    Collection, Cond, Date, Doc, JournalEntry, Query, RunRecord, SharedStore, StoreError,
};
use books::Books;
pub use journal::{JournalError, Ticket};
use model::{Run, Stats, Task, WorkerInfo};
use schedule::{ArchFilter, Candidate, WorkerNeeds};
use users::{User, Users};

/// A worker reply body (the HTTP layer adds `duration`).
pub type Reply = Map<String, Value>;

/// A task silent for longer than this is dead.
pub const DEAD_TASK: Duration = Duration::from_secs(360);
/// Two workers with the same short name within this window are duplicates.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);
/// CPU hours a user needs before stop_run may fail a run.
pub const STOP_RUN_CPU_HOURS: f64 = 1000.0;

/// Runs older than this cannot be purged (or modified).
pub const PURGE_WINDOW: Duration = Duration::from_secs(30 * 24 * 3600);

/// What a purge did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PurgeOutcome {
    /// Ids of the tasks marked bad.
    pub purged: Vec<usize>,
    /// True if the run became undecided again and was put back to work.
    pub revived: bool,
}

/// Write-behind priorities, as Fishtest's: the flusher takes the dirty run with the smallest
/// `last_sync - 60 s × priority` first, so a new task is written before an ended one, and both
/// before any other change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Prio {
    Normal = 0,
    Medium = 1,
    High = 2,
}

/// Why an operation failed. `http` maps these to status codes.
#[derive(Debug, thiserror::Error)]
pub enum RunDbError {
    /// 400: bad ids, mismatched worker, invalid arguments.
    #[error("{0}")]
    Invalid(String),
    /// 401: credentials or permission.
    #[error("{0}")]
    Unauthorized(String),
    /// 404: read-only lookups.
    #[error("{0}")]
    NotFound(String),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("corrupt run document {0}: {1}")]
    Corrupt(String, String),
    /// 503: a run mutation asked of a secondary instance (only the primary changes runs).
    #[error("primary instance required")]
    NotPrimary,
}

impl From<users::UserError> for RunDbError {
    fn from(e: users::UserError) -> Self {
        match e {
            users::UserError::Refused(m) => RunDbError::Unauthorized(m.to_string()),
            users::UserError::Invalid(m) => RunDbError::Invalid(m),
            users::UserError::NoSuchUser(u) => RunDbError::Invalid(format!("no such user {u}")),
            users::UserError::Store(s) => RunDbError::Store(s),
            users::UserError::Throttled(_) => {
                RunDbError::Unauthorized("too many failed authentications".into())
            }
        }
    }
}

pub type DbResult<T> = Result<T, RunDbError>;

/// Settings the run database needs.
#[derive(Debug, Clone)]
pub struct RunDbConfig {
    /// Only the primary replays the journal, caches runs and changes them.
    pub primary: bool,
    pub dead_task: Duration,
    pub flush_runs_per_tick: usize,
}

impl Default for RunDbConfig {
    fn default() -> Self {
        RunDbConfig {
            primary: true,
            dead_task: DEAD_TASK,
            flush_runs_per_tick: 8,
        }
    }
}

/// One cached run.
pub struct RunEntry {
    pub run: Mutex<Run>,
    /// 0 = clean, p + 1 = dirty with priority p.
    dirty: AtomicU8,
    /// Highest journal seq applied to `run`.
    seq: AtomicU64,
    last_sync: Mutex<Instant>,
    arch: Mutex<Option<(String, ArchFilter)>>,
}

impl RunEntry {
    fn new(run: Run) -> Arc<RunEntry> {
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

    fn mark_dirty(&self, prio: Prio) {
        self.dirty.fetch_max(prio as u8 + 1, Ordering::AcqRel);
    }

    fn arch_filter(&self, pattern: &str) -> ArchFilter {
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

#[derive(Default)]
struct WorkerRuns {
    runs: HashSet<String>,
    last_run: Option<String>,
}

/// The scheduler's memory (primary only).
#[derive(Default)]
struct Sched {
    /// short worker name -> (run id, task id) of its latest task.
    wtt: HashMap<String, (String, usize)>,
    worker_runs: HashMap<String, WorkerRuns>,
}

/// The run database.
pub struct RunDb {
    store: SharedStore,
    pub users: Users,
    pub books: Books,
    cfg: RunDbConfig,
    journal: Arc<journal::Journal>,
    cache: RwLock<HashMap<String, Arc<RunEntry>>>,
    /// Ids of unfinished runs, in creation order.
    unfinished: RwLock<Vec<String>>,
    sched: Mutex<Sched>,
    /// remote_addr -> active tasks.
    conns: Mutex<HashMap<String, u32>>,
    /// Blocked short worker names, refreshed from the store.
    blocked: RwLock<HashSet<String>>,
    /// Serialises the read-modify-write of the stored CPU-hour totals.
    cpu_hours_lock: Mutex<()>,
    /// CPU hours of finished tasks not yet added to the stored totals (username -> hours).
    /// Tasks finish under their run's lock, where no store write may happen; the write-behind
    /// job adds these to the store each tick (and at shutdown).
    cpu_hours_pending: Mutex<HashMap<String, f64>>,
}

fn now() -> Date {
    Date::now()
}

fn secs_since(d: &Date) -> f64 {
    (chrono::Utc::now() - d.0).num_milliseconds() as f64 / 1000.0
}

fn to_doc<T: serde::Serialize>(v: &T) -> DbResult<Doc> {
    match serde_json::to_value(v) {
        Ok(Value::Object(m)) => Ok(m),
        Ok(_) => Err(RunDbError::Corrupt("?".into(), "not an object".into())),
        Err(e) => Err(RunDbError::Corrupt("?".into(), e.to_string())),
    }
}

/// The fields of an action about a run: its id and label, and the message if any.
fn run_fields(run: &Run, message: Option<String>) -> Doc {
    let mut f = Doc::new();
    f.insert("run_id".into(), json!(run.id));
    f.insert("run".into(), json!(run_label(run)));
    if let Some(m) = message {
        f.insert("message".into(), json!(m));
    }
    f
}

/// An action document: `fields` plus the action, the user and the time (seconds since the
/// epoch, as Fishtest); a message is cut at 5,120 characters.
fn action_doc(action: &str, username: &str, mut fields: Doc) -> Doc {
    fields.insert("action".into(), json!(action));
    fields.insert("username".into(), json!(username));
    let time = chrono::Utc::now().timestamp_micros() as f64 / 1e6;
    fields.insert("time".into(), json!(time));
    if let Some(Value::String(m)) = fields.get_mut("message")
        && m.chars().count() > 5120
    {
        *m = m.chars().take(5120).collect();
    }
    fields
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

fn parse_run(doc: Doc) -> DbResult<Run> {
    let id = doc
        .get("_id")
        .and_then(Value::as_str)
        .unwrap_or("?")
        .to_string();
    serde_json::from_value(Value::Object(doc)).map_err(|e| RunDbError::Corrupt(id, e.to_string()))
}

/// The patch that makes a journal entry: every run field but the task lists, plus the
/// touched tasks as `"tasks.<i>"`.
fn patch_of(run: &mut Run, touched: &[usize]) -> DbResult<Doc> {
    let tasks = std::mem::take(&mut run.tasks);
    let bad = std::mem::take(&mut run.bad_tasks);
    let head = to_doc(&*run);
    run.tasks = tasks;
    run.bad_tasks = bad;
    let mut patch = head?;
    patch.remove("tasks");
    patch.remove("bad_tasks");
    for &i in touched {
        if let Some(t) = run.tasks.get(i) {
            patch.insert(format!("tasks.{i}"), Value::Object(to_doc(t)?));
        }
    }
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
        } else {
            doc.insert(key.clone(), value.clone());
        }
    }
}

/// Fishtest's action `run` label: `new_tag[:23]-md5(run_id)[:7]`.
fn run_label(run: &Run) -> String {
    use md5::{Digest, Md5};
    let tag: String = run.args.new_tag.chars().take(23).collect();
    let digest = hex::encode(Md5::digest(run.id.as_bytes()));
    format!("{tag}-{}", &digest[..7])
}

impl RunDb {
    /// Opens the run database: loads unfinished runs, replays the journal, rebuilds the
    /// scheduler's memory. Blocking; call from the offload pool.
    pub fn open(
        store: SharedStore,
        offload: Offload,
        books: Books,
        cfg: RunDbConfig,
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
        let db = RunDb {
            users: Users::new(store.clone()),
            store,
            books,
            cfg,
            journal,
            cache: RwLock::new(HashMap::new()),
            unfinished: RwLock::new(Vec::new()),
            sched: Mutex::new(Sched::default()),
            conns: Mutex::new(HashMap::new()),
            blocked: RwLock::new(HashSet::new()),
            cpu_hours_lock: Mutex::new(()),
            cpu_hours_pending: Mutex::new(HashMap::new()),
        };
        if db.cfg.primary {
            db.load_unfinished()?;
            db.refresh_blocked()?;
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
        let mut conns = self.conns.lock();
        for doc in docs {
            let run = parse_run(doc)?;
            if run.deleted {
                continue;
            }
            for (i, t) in run.tasks.iter().enumerate() {
                if t.active {
                    *conns.entry(t.worker_info.remote_addr.clone()).or_default() += 1;
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

    /// Re-reads the blocked workers.
    pub fn refresh_blocked(&self) -> DbResult<()> {
        let docs = self.store.find(
            Collection::Workers,
            &Query::new().with(Cond::Eq("blocked".into(), json!(true))),
        )?;
        let set = docs
            .iter()
            .filter_map(|d| d.get("worker_name").and_then(Value::as_str))
            .map(String::from)
            .collect();
        *self.blocked.write() = set;
        Ok(())
    }

    /// The cached entry of a run, loading it from the store if needed. A secondary does not
    /// cache: the primary changes runs, and the store is where a secondary sees them.
    pub fn entry(&self, run_id: &str) -> DbResult<Option<Arc<RunEntry>>> {
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

    /// Copies of every unfinished run without their task lists, oldest first.
    pub fn active_heads(&self) -> DbResult<Vec<Run>> {
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

    /// Journals the state of `run` (touched tasks included) and marks it dirty. Call with the
    /// run's lock held.
    fn commit(
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
    fn save_now(&self, entry: &RunEntry, run: &Run) -> DbResult<()> {
        let seq = entry.seq.load(Ordering::Acquire);
        self.store.flush_runs(&[run_record(run, seq)?])?;
        entry.dirty.store(0, Ordering::Release);
        *entry.last_sync.lock() = Instant::now();
        Ok(())
    }

    /// Inserts an action document now (Fishtest's `actions` shape: see `action_doc`).
    pub fn log_action(&self, action: &str, username: &str, fields: Doc) -> DbResult<()> {
        self.store
            .insert(Collection::Actions, action_doc(action, username, fields))?;
        Ok(())
    }

    /// Logs an action from inside a run's lock, where no store write may happen: the document
    /// goes to the journal's next group commit, ahead of (and so durable no later than) the
    /// change that the same request then commits and awaits.
    fn locked_action(&self, action: &str, username: &str, mut fields: Doc) {
        fields.insert("_id".into(), json!(crate::store::new_object_id()));
        drop(
            self.journal
                .submit_action(action_doc(action, username, fields)),
        );
    }

    /// Logs an action about a task (called with the run locked).
    fn task_action(&self, action: &str, run: &Run, task_id: usize, message: &str) -> DbResult<()> {
        let Some(task) = run.tasks.get(task_id) else {
            return Ok(());
        };
        let mut f = run_fields(run, Some(message.to_string()));
        f.insert("worker".into(), json!(task.worker_info.long_name()));
        f.insert("task_id".into(), json!(task_id));
        self.locked_action(action, &task.worker_info.username, f);
        Ok(())
    }

    /// Fishtest's set_inactive_task: the task stops counting towards the run's load (workers,
    /// cores, committed games, its address's task count) and its CPU hours go to its user.
    fn set_inactive(&self, run: &mut Run, task_id: usize) {
        let Some(task) = run.tasks.get_mut(task_id) else {
            return;
        };
        if !task.active {
            return;
        }
        task.active = false;
        task.spsa_params = None;
        let played = task.stats.games();
        let num_games = task.num_games;
        let concurrency = u64::from(task.worker_info.concurrency);
        let ip = task.worker_info.remote_addr.clone();
        run.workers = run.workers.saturating_sub(1);
        run.cores = run.cores.saturating_sub(concurrency);
        run.committed_games = (run.committed_games + played).saturating_sub(num_games);
        {
            let mut conns = self.conns.lock();
            if let Some(n) = conns.get_mut(&ip) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    conns.remove(&ip);
                }
            }
        }
        self.add_cpu_hours(run, task_id);
    }

    /// Logs a crash_or_time action if the task's stats say so.
    fn check_crash_or_time(&self, run: &Run, task_id: usize) -> DbResult<()> {
        let Some(s) = run.tasks.get(task_id).map(|t| t.stats) else {
            return Ok(());
        };
        if s.crash_or_time() {
            let message = format!(
                "Time losses: {}, crashes: {}, games: {}",
                s.time_losses,
                s.crashes,
                s.games()
            );
            self.task_action("crash_or_time", run, task_id, &message)?;
        }
        Ok(())
    }

    /// Finishes a run: every task inactive, counters zeroed, flags set, out of the
    /// scheduler's list. Saved at once.
    fn finish_run(&self, entry: &RunEntry, run: &mut Run) -> DbResult<()> {
        for i in 0..run.tasks.len() {
            self.set_inactive(run, i);
        }
        run.finished = true;
        run.workers = 0;
        run.cores = 0;
        run.nps = 0.0;
        run.games_per_minute = 0.0;
        run.last_updated = now();
        let flags = run_flags(run);
        run.is_green = flags.is_green;
        run.is_yellow = flags.is_yellow;
        self.unfinished.write().retain(|id| id != &run.id);
        self.save_now(entry, run)
    }

    // ----- worker endpoints ------------------------------------------------------------

    /// Looks up a task for a task-bound call and checks that it belongs to this worker.
    fn task_of<'a>(&self, run: &'a Run, task_id: usize, wi: &WorkerInfo) -> DbResult<&'a Task> {
        let task = run.tasks.get(task_id).ok_or_else(|| {
            RunDbError::Invalid(format!("Invalid task_id {task_id} for run_id {}", run.id))
        })?;
        if task.worker_info.unique_key != wi.unique_key {
            return Err(RunDbError::Invalid(format!(
                "Invalid unique key {} for task {}/{task_id}",
                wi.unique_key, run.id
            )));
        }
        if task.worker_info.username != wi.username {
            return Err(RunDbError::Invalid(format!(
                "Invalid username {} for task {}/{task_id}",
                wi.username, run.id
            )));
        }
        Ok(task)
    }

    fn run_entry(&self, run_id: &str) -> DbResult<Arc<RunEntry>> {
        self.entry(run_id)?
            .ok_or_else(|| RunDbError::Invalid(format!("Invalid run_id: {run_id}")))
    }

    /// request_task's critical section (docs/protocol.md#request_task). The caller holds the
    /// gate's slot.
    pub fn request_task(&self, user: &User, wi: WorkerInfo) -> DbResult<(Reply, Option<Ticket>)> {
        let started = Instant::now();
        let result = self.request_task_inner(user, wi);
        metrics::histogram!("shoal_request_task_critical_seconds")
            .record(started.elapsed().as_secs_f64());
        result
    }

    fn request_task_inner(&self, user: &User, wi: WorkerInfo) -> DbResult<(Reply, Option<Ticket>)> {
        let short = wi.short_name();
        // 1. Blocked worker.
        if self.blocked.read().contains(&short) {
            let mut doc = self
                .store
                .get(Collection::Workers, &short)?
                .unwrap_or_default();
            doc.insert("_id".into(), json!(short));
            doc.insert("worker_name".into(), json!(short));
            doc.insert("last_updated".into(), now().to_value());
            self.store.put(Collection::Workers, &doc)?;
            let error = format!(
                "Request_task: This worker has been blocked! See /actions?text=\"{short}\" \
                 and /workers/{short} for details."
            );
            return Ok((reply(json!({"task_waiting": false, "error": error})), None));
        }
        let mut sched = self.sched.lock();
        // 2. Duplicate name. (Also notes whether this very worker still holds an active task
        // from this address: that task is failed as stale below, so it must not count
        // against the machine limit.)
        let mut own_stale_task = false;
        let previous = sched.wtt.get(&short).cloned();
        let previous_entry = previous
            .as_ref()
            .and_then(|(run_id, _)| self.cache.read().get(run_id).cloned());
        if let (Some((_, task_id)), Some(entry)) = (&previous, previous_entry) {
            let task_id = *task_id;
            let run = entry.run.lock();
            if let Some(t) = run.tasks.get(task_id) {
                own_stale_task = t.active
                    && t.worker_info.unique_key == wi.unique_key
                    && t.worker_info.remote_addr == wi.remote_addr;
                let ago = secs_since(&t.last_updated);
                if t.active
                    && t.worker_info.unique_key != wi.unique_key
                    && ago <= DUPLICATE_WINDOW.as_secs_f64()
                {
                    let error = format!(
                        "Request_task: There is already a worker running with name {short} \
                         which sent an update {} seconds ago",
                        ago.max(0.0) as u64
                    );
                    return Ok((reply(json!({"task_waiting": false, "error": error})), None));
                }
            }
        }
        // 3. Machine limit.
        let active_here = self
            .conns
            .lock()
            .get(&wi.remote_addr)
            .copied()
            .unwrap_or(0)
            .saturating_sub(u32::from(own_stale_task));
        if active_here >= user.machine_limit {
            let error = format!(
                "Request_task: This user has reached the maximum number of connections \
                 ({}) from the IP address {}.",
                user.machine_limit, wi.remote_addr
            );
            return Ok((reply(json!({"task_waiting": false, "error": error})), None));
        }
        // 4-5. Order the unfinished runs and take the first that fits.
        let worker_runs = sched.worker_runs.get(&short);
        let last_run = worker_runs.and_then(|w| w.last_run.clone());
        let ids = self.unfinished.read().clone();
        let cache = self.cache.read();
        let mut candidates = Vec::with_capacity(ids.len());
        let mut entries = Vec::with_capacity(ids.len());
        for id in &ids {
            let Some(entry) = cache.get(id) else { continue };
            let run = entry.run.lock();
            let arch_filter = run
                .args
                .arch_filter
                .as_deref()
                .map(|p| entry.arch_filter(p));
            candidates.push(Candidate {
                index: entries.len(),
                priority: run.args.priority,
                cores: run.cores,
                itp: run.args.itp,
                finished: run.finished,
                approved: run.approved,
                threads: run.args.threads,
                remaining: run.remaining_games(),
                hash_new: schedule::hash_mib(&run.args.new_options),
                hash_base: schedule::hash_mib(&run.args.base_options),
                spsa_params: run.args.spsa.as_ref().map(|s| s.params.len()),
                arch_filter,
                compiler: run.args.compiler.clone(),
                is_last_run: last_run.as_deref() == Some(id.as_str()),
                in_worker_runs: worker_runs.is_some_and(|w| w.runs.contains(id)),
            });
            entries.push(entry.clone());
        }
        drop(cache);
        let needs = WorkerNeeds {
            concurrency: wi.concurrency,
            min_threads: wi.min_threads,
            max_memory: wi.max_memory,
            near_github_api_limit: wi.near_github_api_limit,
            worker_arch: &wi.worker_arch,
            compiler: &wi.compiler,
        };
        let (choice, _) = schedule::choose(candidates, &needs);
        let Some(choice) = choice else {
            return Ok((reply(json!({"task_waiting": false})), None));
        };
        let entry = entries[choice.index].clone();

        // 7. Create the task under the run lock.
        let mut run = entry.run.lock();
        let remaining = run.remaining_games();
        if run.finished || remaining == 0 {
            return Ok((
                reply(
                    json!({"task_waiting": false, "info": "Request_task: the chosen run no longer needs games"}),
                ),
                None,
            ));
        }
        let Some(tc) = schedule::parse_tc(&run.args.tc) else {
            return Err(RunDbError::Corrupt(run.id.clone(), "bad tc".into()));
        };
        let sprt = run.args.sprt.is_some();
        let num_games = schedule::task_games(
            &tc,
            wi.concurrency,
            run.args.threads,
            run.batch_games(),
            remaining,
            sprt,
        );
        let task_id = run.tasks.len();
        let task = Task {
            num_games,
            active: true,
            last_updated: now(),
            start: run.total_games,
            stats: Stats::default(),
            worker_info: wi.clone(),
            bad: false,
            spsa_params: None,
            extra: Default::default(),
        };
        run.tasks.push(task);
        run.workers += 1;
        run.cores += u64::from(wi.concurrency);
        run.committed_games += num_games;
        run.total_games += num_games;
        *self.conns.lock().entry(wi.remote_addr.clone()).or_default() += 1;
        let ticket = self.commit(&entry, &mut run, &[task_id], Prio::High)?;
        let mut args = serde_json::to_value(&run.args).unwrap_or(Value::Null);
        if let (Value::Object(a), Some(book)) = (&mut args, self.books.get(&run.args.book)) {
            a.insert("book_sri".into(), json!(book.sri));
        }
        let run_id = run.id.clone();
        let body = json!({
            "run": {
                "_id": run_id,
                "args": args,
                "my_task": {
                    "num_games": num_games,
                    "start": run.tasks[task_id].start,
                    "stats": run.tasks[task_id].stats,
                },
            },
            "task_id": task_id,
        });
        drop(run);

        // 8. After the run lock: the worker's map entry, a stale task, the worker's runs.
        let mut stale_ticket = None;
        if let Some((old_run, old_task)) =
            sched.wtt.insert(short.clone(), (run_id.clone(), task_id))
            && (old_run != run_id || old_task != task_id)
            && let Some(old_entry) = self.cache.read().get(&old_run).cloned()
        {
            let mut old = old_entry.run.lock();
            if old.tasks.get(old_task).is_some_and(|t| t.active) {
                self.set_inactive(&mut old, old_task);
                self.task_action("failed_task", &old, old_task, "Stale active task")?;
                stale_ticket =
                    Some(self.commit(&old_entry, &mut old, &[old_task], Prio::Medium)?);
            }
        }
        let wr = sched.worker_runs.entry(short).or_default();
        wr.runs.insert(run_id.clone());
        wr.last_run = Some(run_id);
        drop(sched);
        // The stale task's change is journalled too; nobody awaits it (it acknowledges
        // nothing to anyone).
        drop(stale_ticket);
        Ok((reply(body), Some(ticket)))
    }

    /// update_task (docs/protocol.md#update_task).
    pub fn update_task(
        &self,
        run_id: &str,
        task_id: usize,
        stats: Stats,
        spsa: Option<crate::spsa::SpsaResult>,
        mut wi: WorkerInfo,
    ) -> DbResult<(Reply, Option<Ticket>)> {
        let entry = self.run_entry(run_id)?;
        let mut run = entry.run.lock();
        let task = self.task_of(&run, task_id, &wi)?;
        if !task.active {
            let info = format!("Update_task: task {run_id}/{task_id} is not active");
            return Ok((reply(json!({"task_alive": false, "info": info})), None));
        }
        // Impossible counts are refused outright and change nothing (not even the task):
        // they are a broken or hostile client, not a result.
        stats
            .check()
            .map_err(|e| RunDbError::Invalid(format!("stats: {e}")))?;
        let (g_new, size) = (stats.games(), task.num_games);
        if g_new > size {
            return Err(RunDbError::Invalid(format!(
                "Update_task: task {run_id}/{task_id}: {g_new} games reported, but the task has only {size}"
            )));
        }
        wi.remote_addr = task.worker_info.remote_addr.clone();
        wi.country_code = task.worker_info.country_code.clone();
        let old = task.stats;
        let g_old = old.games();
        let is_spsa = run.args.spsa.is_some();
        let batch = run.batch_games();
        let rejection = if g_new < g_old {
            Some(format!(
                "Update_task: task {run_id}/{task_id}: the number of games went down from {g_old} to {g_new}"
            ))
        } else if is_spsa && g_new <= g_old {
            Some(format!(
                "Update_task: task {run_id}/{task_id}: SPSA updates must add games ({g_old} -> {g_new})"
            ))
        } else if (g_new - g_old) % 2 != 0 {
            Some(format!(
                "Update_task: task {run_id}/{task_id}: odd number of new games ({})",
                g_new - g_old
            ))
        } else if run.args.sprt.is_some() && g_new % batch != 0 {
            Some(format!(
                "Update_task: task {run_id}/{task_id}: {g_new} games is not a multiple of the SPRT batch ({batch})"
            ))
        } else {
            None
        };
        if let (None, Some(result)) = (&rejection, &spsa)
            && result.num_games > g_new.saturating_sub(g_old)
        {
            return Err(RunDbError::Invalid(format!(
                "Update_task: task {run_id}/{task_id}: the spsa block counts {} games, but only {} were added",
                result.num_games,
                g_new.saturating_sub(g_old)
            )));
        }
        let delta = match (rejection, stats.delta(&old)) {
            (None, Some(d)) => d,
            (rejection, _) => {
                let error = rejection.unwrap_or_else(|| {
                    format!("Update_task: task {run_id}/{task_id}: a result count went down")
                });
                self.set_inactive(&mut run, task_id);
                let ticket = self.commit(&entry, &mut run, &[task_id], Prio::Medium)?;
                return Ok((
                    reply(json!({"task_alive": false, "error": error})),
                    Some(ticket),
                ));
            }
        };
        let Some(results) = run.results.checked_add(&delta) else {
            return Err(RunDbError::Invalid(format!(
                "Update_task: task {run_id}/{task_id}: the run's totals would overflow"
            )));
        };
        run.results = results;
        {
            let task = &mut run.tasks[task_id];
            task.stats = stats;
            task.last_updated = now();
            task.worker_info = wi;
        }
        if let (Some(result), true) = (spsa, is_spsa) {
            let Run { args, tasks, .. } = &mut *run;
            if let Some(s) = args.spsa.as_mut()
                && let Err(e) =
                    crate::spsa::update_spsa(s, &mut tasks[task_id].spsa_params, &result)
            {
                // Fishtest logs and skips a stale or forged signature; the games still count.
                tracing::warn!(run = run_id, task = task_id, error = %e, "SPSA update skipped");
            }
        }
        if g_new >= run.tasks[task_id].num_games {
            self.set_inactive(&mut run, task_id);
            self.check_crash_or_time(&run, task_id)?;
        }
        if run.args.sprt.is_some() {
            run.last_updated = now();
            let results = sprt_results(&run.results);
            if let Some(sprt) = run.args.sprt.as_mut()
                && let Err(e) = crate::stats::update_sprt(&results, sprt)
            {
                tracing::error!(run = run_id, error = %e, "update_SPRT failed");
            }
        }
        let decided = run.results.games() >= run.args.num_games
            || run
                .args
                .sprt
                .as_ref()
                .is_some_and(|s| s.state != crate::stats::SprtState::Running);
        if decided {
            let ticket = self.commit(&entry, &mut run, &[task_id], Prio::High)?;
            self.finish_run(&entry, &mut run)?;
            // Auto-purge (never for SPSA) runs inside the stop: it may revive the run.
            if run.args.auto_purge && run.args.spsa.is_none() {
                let outcome = self.purge_locked(&entry, &mut run, crate::purge::AUTO_PURGE)?;
                if !outcome.purged.is_empty() {
                    let message = format!("Auto-purged {} tasks", outcome.purged.len());
                    let f = run_fields(&run, Some(message));
                    self.locked_action("purge_run", "fishtest.system", f);
                }
                if outcome.revived {
                    return Ok((reply(json!({"task_alive": false})), Some(ticket)));
                }
            }
            let f = run_fields(&run, Some(format!("{:?}", run.results)));
            let username = run.args.username.clone();
            drop(run);
            self.log_action("finished_run", &username, f)?;
            return Ok((reply(json!({"task_alive": false})), Some(ticket)));
        }
        let alive = run.tasks[task_id].active;
        let prio = if alive { Prio::Normal } else { Prio::Medium };
        let ticket = self.commit(&entry, &mut run, &[task_id], prio)?;
        Ok((reply(json!({"task_alive": alive})), Some(ticket)))
    }

    /// beat: keeps an active task alive.
    pub fn beat(&self, run_id: &str, task_id: usize, wi: &WorkerInfo) -> DbResult<Reply> {
        let entry = self.run_entry(run_id)?;
        let mut run = entry.run.lock();
        let task = self.task_of(&run, task_id, wi)?;
        let alive = task.active;
        if alive {
            run.tasks[task_id].last_updated = now();
            entry.mark_dirty(Prio::Normal);
        }
        Ok(reply(json!({"task_alive": alive})))
    }

    /// beat without waiting, for the event loop: `None` when it would have to (the run is not
    /// in the cache, or its lock or the cache's is held), and the caller then takes the pool
    /// path ([`RunDb::beat`]). A beat touches memory only (it is not journalled), so when
    /// both locks are free it costs a microsecond, less than the hop to a pool thread.
    pub fn try_beat(
        &self,
        run_id: &str,
        task_id: usize,
        wi: &WorkerInfo,
    ) -> Option<DbResult<Reply>> {
        let entry = self.cache.try_read()?.get(run_id).cloned()?;
        let mut run = entry.run.try_lock()?;
        let task = match self.task_of(&run, task_id, wi) {
            Ok(t) => t,
            Err(e) => return Some(Err(e)),
        };
        let alive = task.active;
        if alive {
            run.tasks[task_id].last_updated = now();
            entry.mark_dirty(Prio::Normal);
        }
        Some(Ok(reply(json!({"task_alive": alive}))))
    }

    /// request_spsa: the parameters for the next SPSA batch.
    pub fn request_spsa(
        &self,
        run_id: &str,
        task_id: usize,
        wi: &WorkerInfo,
    ) -> DbResult<(Reply, Option<Ticket>)> {
        let entry = self.run_entry(run_id)?;
        let mut run = entry.run.lock();
        let task = self.task_of(&run, task_id, wi)?;
        if !task.active {
            let info = format!("Request_spsa: task {run_id}/{task_id} is not active");
            return Ok((reply(json!({"task_alive": false, "info": info})), None));
        }
        let Some(spsa) = run.args.spsa.as_ref() else {
            return Err(RunDbError::Invalid(format!(
                "Run {run_id} is not an SPSA run"
            )));
        };
        let request = crate::spsa::request_spsa(spsa, &mut rand::rng())
            .map_err(|e| RunDbError::Invalid(format!("Request_spsa: {e}")))?;
        run.tasks[task_id].spsa_params = Some(request.spsa_params);
        let ticket = self.commit(&entry, &mut run, &[task_id], Prio::Normal)?;
        let body = serde_json::to_value(&request.reply).unwrap_or(Value::Null);
        Ok((reply(body), Some(ticket)))
    }

    /// failed_task: the worker gave up on its task.
    pub fn failed_task(
        &self,
        run_id: &str,
        task_id: usize,
        message: &str,
        wi: &WorkerInfo,
    ) -> DbResult<(Reply, Option<Ticket>)> {
        let entry = self.run_entry(run_id)?;
        let mut run = entry.run.lock();
        let task = self.task_of(&run, task_id, wi)?;
        if !task.active {
            let info = format!("Failed_task: task {run_id}/{task_id} is not active");
            return Ok((reply(json!({"task_alive": false, "info": info})), None));
        }
        self.set_inactive(&mut run, task_id);
        self.check_crash_or_time(&run, task_id)?;
        self.task_action("failed_task", &run, task_id, message)?;
        let ticket = self.commit(&entry, &mut run, &[task_id], Prio::Medium)?;
        Ok((Reply::new(), Some(ticket)))
    }

    /// CPU hours a user has contributed (finished tasks' games × concurrency × game time).
    pub fn cpu_hours(&self, username: &str) -> DbResult<f64> {
        let pending = self
            .cpu_hours_pending
            .lock()
            .get(username)
            .copied()
            .unwrap_or(0.0);
        Ok(self.stored_cpu_hours(username)? + pending)
    }

    fn stored_cpu_hours(&self, username: &str) -> DbResult<f64> {
        if let Some(doc) = self
            .store
            .get(Collection::Kvstore, &format!("cpu_hours:{username}"))?
        {
            return Ok(doc.get("value").and_then(Value::as_f64).unwrap_or(0.0));
        }
        Ok(0.0)
    }

    /// Adds a finished task's CPU time to its user (games × game duration × threads), the
    /// figure stop_run's 1000-hour rule reads. In memory: called under the run's lock;
    /// [`RunDb::persist_cpu_hours`] writes it.
    fn add_cpu_hours(&self, run: &Run, task_id: usize) {
        let Some(task) = run.tasks.get(task_id) else {
            return;
        };
        let Some(tc) = schedule::parse_tc(&run.args.tc) else {
            return;
        };
        let hours =
            task.stats.games() as f64 * schedule::tc_duration(&tc) * f64::from(run.args.threads)
                / 3600.0;
        if hours <= 0.0 {
            return;
        }
        *self
            .cpu_hours_pending
            .lock()
            .entry(task.worker_info.username.clone())
            .or_insert(0.0) += hours;
    }

    /// Adds the pending CPU hours to the stored totals (write-behind job, shutdown). A user
    /// whose write fails keeps its hours pending for the next call.
    pub fn persist_cpu_hours(&self) -> DbResult<usize> {
        let pending = std::mem::take(&mut *self.cpu_hours_pending.lock());
        let mut written = 0;
        let mut failure = None;
        // Read-modify-write of one document per user: serialise so no increment is lost.
        let _guard = self.cpu_hours_lock.lock();
        for (username, hours) in pending {
            let result = self.stored_cpu_hours(&username).and_then(|total| {
                let mut doc = Doc::new();
                doc.insert("_id".into(), json!(format!("cpu_hours:{username}")));
                doc.insert("value".into(), json!(total + hours));
                Ok(self.store.put(Collection::Kvstore, &doc)?)
            });
            match result {
                Ok(()) => written += 1,
                Err(e) => {
                    *self.cpu_hours_pending.lock().entry(username).or_insert(0.0) += hours;
                    failure = Some(e);
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }

    /// stop_run: a worker found a fatal problem with the run (wrong bench, engine bug).
    pub fn stop_run(
        &self,
        run_id: &str,
        task_id: usize,
        message: &str,
        wi: &WorkerInfo,
    ) -> DbResult<(Reply, Option<Ticket>)> {
        let entry = self.run_entry(run_id)?;
        let hours = self.cpu_hours(&wi.username)?;
        let mut run = entry.run.lock();
        self.task_of(&run, task_id, wi)?;
        if run.finished {
            return Err(RunDbError::Unauthorized(format!(
                "Stop_run: run {run_id} is already finished"
            )));
        }
        let short: String = message.chars().take(1024).collect();
        if hours < STOP_RUN_CPU_HOURS {
            self.set_inactive(&mut run, task_id);
            // The worker sends no failed_task after this; the task is made inactive here.
            let _ticket = self.commit(&entry, &mut run, &[task_id], Prio::Medium)?;
            self.task_action(
                "stop_run",
                &run,
                task_id,
                &format!("{short} (not authorized)"),
            )?;
            return Err(RunDbError::Unauthorized(format!(
                "Stop_run: user {} has fewer than {STOP_RUN_CPU_HOURS} CPU hours",
                wi.username
            )));
        }
        run.failed = true;
        run.failures += 1;
        let ticket = self.commit(&entry, &mut run, &[task_id], Prio::High)?;
        self.finish_run(&entry, &mut run)?;
        self.task_action("stop_run", &run, task_id, &short)?;
        Ok((Reply::new(), Some(ticket)))
    }

    /// worker_log: a worker's warning, kept in the action log.
    pub fn worker_log(
        &self,
        message: &str,
        task: Option<(&str, usize)>,
        wi: &WorkerInfo,
    ) -> DbResult<Reply> {
        let mut f = Doc::new();
        f.insert("worker".into(), json!(wi.long_name()));
        f.insert("message".into(), json!(message));
        if let Some((run_id, task_id)) = task {
            let entry = self.run_entry(run_id)?;
            let run = entry.run.lock();
            self.task_of(&run, task_id, wi)?;
            f.insert("run_id".into(), json!(run_id));
            f.insert("run".into(), json!(run_label(&run)));
            f.insert("task_id".into(), json!(task_id));
        }
        self.log_action("worker_log", &wi.username, f)?;
        Ok(Reply::new())
    }

    /// upload_pgn: stores a task's PGN (already base64-decoded and checked to be gzip).
    pub fn upload_pgn(
        &self,
        run_id: &str,
        task_id: usize,
        gz: &[u8],
        wi: &WorkerInfo,
    ) -> DbResult<Reply> {
        self.check_upload(run_id, task_id, wi)?;
        self.store.pgn_put(&format!("{run_id}-{task_id}"), gz)?;
        Ok(Reply::new())
    }

    /// Closes the store (at shutdown, after the last flush).
    pub fn close_store(&self) -> Result<(), StoreError> {
        self.store.close()
    }

    /// Whether this worker may upload the PGN of this task: the run exists and the task is
    /// the worker's (active or not). Checked before an upload's body is read.
    pub fn check_upload(&self, run_id: &str, task_id: usize, wi: &WorkerInfo) -> DbResult<()> {
        let entry = self.run_entry(run_id)?;
        let run = entry.run.lock();
        // A secondary sees the primary's runs through the store, which may not hold a
        // task handed out in the last second yet: accept such a task there.
        let unseen = !self.cfg.primary && task_id >= run.tasks.len();
        if !unseen {
            self.task_of(&run, task_id, wi)?;
        }
        Ok(())
    }

    // ----- runs: creation, approval --------------------------------------------------

    /// Creates a run from validated arguments; returns its id.
    pub fn create_run(&self, args: create::CreateArgs, user: &User) -> DbResult<String> {
        if !self.cfg.primary {
            return Err(RunDbError::NotPrimary);
        }
        let run =
            create::build_run(args, &user.username, &self.books).map_err(RunDbError::Invalid)?;
        let id = run.id.clone();
        let entry = RunEntry::new(run.clone());
        self.save_now(&entry, &run)?;
        self.cache.write().insert(id.clone(), entry);
        self.unfinished.write().push(id.clone());
        let f = run_fields(&run, Some(run.args.info.clone()));
        self.log_action("new_run", &user.username, f)?;
        Ok(id)
    }

    /// Approves a run: approvers only, never the submitter, only once.
    pub fn approve_run(&self, run_id: &str, approver: &User) -> DbResult<()> {
        if !self.cfg.primary {
            return Err(RunDbError::NotPrimary);
        }
        if !approver.is_approver() {
            return Err(RunDbError::Unauthorized(
                "Only approvers can approve runs.".into(),
            ));
        }
        let entry = self
            .entry(run_id)?
            .ok_or_else(|| RunDbError::NotFound(format!("Unknown run {run_id}")))?;
        let mut run = entry.run.lock();
        if run.args.username == approver.username {
            return Err(RunDbError::Unauthorized(
                "You cannot approve your own run.".into(),
            ));
        }
        if run.approved {
            return Err(RunDbError::Invalid(format!(
                "Run {run_id} is already approved"
            )));
        }
        if run.finished || run.deleted {
            return Err(RunDbError::Invalid(format!("Run {run_id} is finished")));
        }
        run.approved = true;
        run.approver = approver.username.clone();
        self.save_now(&entry, &run)?;
        let f = run_fields(&run, None);
        drop(run);
        self.log_action("approve_run", &approver.username, f)?;
        Ok(())
    }

    // ----- purge --------------------------------------------------------------------

    /// The manual purge (docs/protocol.md#dead-tasks-and-purge): run owner or approver; only
    /// finished, non-failed runs started within 30 days.
    pub fn purge_run(&self, run_id: &str, user: &User) -> DbResult<PurgeOutcome> {
        if !self.cfg.primary {
            return Err(RunDbError::NotPrimary);
        }
        let entry = self
            .entry(run_id)?
            .ok_or_else(|| RunDbError::NotFound(format!("Unknown run {run_id}")))?;
        let mut run = entry.run.lock();
        if run.args.username != user.username && !user.is_approver() {
            return Err(RunDbError::Unauthorized(
                "Only the run's owner or an approver can purge it.".into(),
            ));
        }
        if !run.finished {
            return Err(RunDbError::Invalid("Can only purge finished runs.".into()));
        }
        if run.failed {
            return Err(RunDbError::Invalid("Cannot purge a failed run.".into()));
        }
        if secs_since(&run.start_time) > PURGE_WINDOW.as_secs_f64() {
            return Err(RunDbError::Invalid(
                "Runs older than 30 days cannot be purged.".into(),
            ));
        }
        let outcome = self.purge_locked(&entry, &mut run, crate::purge::MANUAL_PURGE)?;
        let f = run_fields(&run, Some(format!("Purged {} tasks", outcome.purged.len())));
        drop(run);
        self.log_action("purge_run", &user.username, f)?;
        Ok(outcome)
    }

    /// Marks the purge's bad tasks, recomputes results and the SPRT, and revives the run if
    /// it is undecided again. The run must be finished; it is saved at once.
    fn purge_locked(
        &self,
        entry: &RunEntry,
        run: &mut Run,
        thresholds: crate::purge::PurgeThresholds,
    ) -> DbResult<PurgeOutcome> {
        let plan = {
            let view: Vec<crate::purge::PurgeTask<'_>> = run
                .tasks
                .iter()
                .map(|t| crate::purge::PurgeTask {
                    unique_key: &t.worker_info.unique_key,
                    stats: t.stats.to_purge(),
                    bad: t.bad,
                })
                .collect();
            crate::purge::plan_purge(&view, thresholds, crate::purge::PURGE_ROUNDS)
        };
        let mut outcome = PurgeOutcome::default();
        for b in &plan.bad_tasks {
            let Some(task) = run.tasks.get_mut(b.index) else {
                continue;
            };
            let mut copy = to_doc(&*task)?;
            copy.insert("task_id".into(), json!(b.index));
            copy.insert("bad".into(), json!(true));
            // JSON has no infinity; Fishtest's API shows it as "inf" too.
            let residual = if b.residual.is_finite() {
                json!(b.residual)
            } else {
                json!("inf")
            };
            copy.insert("residual".into(), residual);
            copy.insert("residual_color".into(), json!(b.color));
            run.bad_tasks.push(Value::Object(copy));
            task.stats = Stats::default();
            task.bad = true;
            task.active = false;
            task.spsa_params = None;
            outcome.purged.push(b.index);
        }
        if outcome.purged.is_empty() {
            return Ok(outcome);
        }
        let mut results = Stats::default();
        let mut committed = 0;
        for t in &run.tasks {
            results.add(&t.stats);
            committed += if t.active {
                t.num_games
            } else {
                t.stats.games()
            };
        }
        run.results = results;
        run.committed_games = committed;
        let undecided = match run.args.sprt.as_mut() {
            Some(sprt) => {
                if let Err(e) = crate::stats::update_sprt(&sprt_results(&results), sprt) {
                    tracing::error!(run = %run.id, error = %e, "update_SPRT after purge failed");
                }
                sprt.state == crate::stats::SprtState::Running
            }
            None => results.games() < run.args.num_games,
        };
        if undecided && run.finished {
            run.finished = false;
            run.is_green = false;
            run.is_yellow = false;
            let mut unfinished = self.unfinished.write();
            if !unfinished.contains(&run.id) {
                unfinished.push(run.id.clone());
            }
            outcome.revived = true;
        } else {
            let flags = run_flags(run);
            run.is_green = flags.is_green;
            run.is_yellow = flags.is_yellow;
        }
        run.last_updated = now();
        self.save_now(entry, run)?;
        Ok(outcome)
    }

    // ----- periodic jobs -------------------------------------------------------------

    /// Writes dirty runs behind: up to `flush_runs_per_tick`, most urgent first
    /// (minimum of last_sync − 60 s · priority, as Fishtest), and the pending CPU hours.
    /// Returns how many runs were written.
    pub fn flush(&self, all: bool) -> DbResult<usize> {
        let hours = self.persist_cpu_hours();
        let runs = self.flush_runs(all);
        hours?;
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
                let message = format!(
                    "Task {}/{i} has not been updated for {} seconds",
                    run.id,
                    secs_since(&run.tasks[i].last_updated) as u64
                );
                self.task_action("dead_task", &run, i, &message)?;
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
                gpm += t.worker_info.nps / schedule::REFERENCE_NPS
                    * (60.0 / dur.max(1e-9))
                    * f64::from(t.worker_info.concurrency / threads);
            }
            if run.nps != nps || run.games_per_minute != gpm {
                run.nps = nps;
                run.games_per_minute = gpm;
                entry.mark_dirty(Prio::Normal);
            }
        }
    }

    /// Persists `worker_runs` and forgets runs that are finished.
    pub fn clean_worker_runs(&self) -> DbResult<()> {
        let unfinished: HashSet<String> = self.unfinished.read().iter().cloned().collect();
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
        self.store.put(Collection::Kvstore, &doc)?;
        Ok(())
    }

    /// Evicts finished, clean runs from the cache.
    pub fn clean_cache(&self) {
        let unfinished: HashSet<String> = self.unfinished.read().iter().cloned().collect();
        self.cache.write().retain(|id, e| {
            unfinished.contains(id)
                || e.dirty.load(Ordering::Acquire) > 0
                || e.last_sync.lock().elapsed() < Duration::from_secs(300)
        });
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

    /// Number of active tasks per remote address (for tests and metrics).
    pub fn connections(&self, addr: &str) -> u32 {
        self.conns.lock().get(addr).copied().unwrap_or(0)
    }

    /// The unfinished runs' ids.
    pub fn unfinished_ids(&self) -> Vec<String> {
        self.unfinished.read().clone()
    }
}

fn reply(v: Value) -> Reply {
    match v {
        Value::Object(m) => m,
        _ => Reply::new(),
    }
}

fn sprt_results(s: &Stats) -> crate::stats::Results {
    crate::stats::Results {
        wins: s.wins,
        losses: s.losses,
        draws: s.draws,
        pentanomial: Some(s.pentanomial),
    }
}

/// The green/yellow flags of a finished run (docs/protocol.md#dead-tasks-and-purge, Flags).
fn run_flags(run: &Run) -> crate::purge::RunFlags {
    use crate::purge::{RunKind, run_flags};
    let kind = if let Some(s) = &run.args.sprt {
        RunKind::Sprt {
            state: s.state,
            elo0: s.elo0,
            elo1: s.elo1,
        }
    } else if run.args.spsa.is_some() {
        RunKind::Spsa
    } else {
        let r = &run.results;
        let trinomial = [r.losses as f64, r.draws as f64, r.wins as f64];
        let los = crate::stats::get_elo(&trinomial).map_or(0.5, |e| e.los);
        RunKind::FixedGames { los }
    };
    run_flags(kind, run.results.wins, run.results.losses)
}

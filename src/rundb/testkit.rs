//! Test fixtures shared by the run database's and the scheduler's unit tests: a `RunDb` and
//! its `Scheduler` on a temporary SQLite store with three users, a restart on the same store,
//! run arguments, and workers.
//!
//! Owns: nothing outside `#[cfg(test)]`.
//! Must not: be used by non-test code.

use std::sync::Arc;

use serde_json::{Value, json};

use crate::accounts::{User, Users};
use crate::ledger::Ledger;
use crate::offload::Offload;
use crate::rundb::books::Books;
use crate::rundb::create::CreateArgs;
use crate::rundb::model::{Run, WorkerInfo};
use crate::rundb::outcome::Assignment;
use crate::rundb::{RunDb, RunDbConfig, Ticket};
use crate::scheduler::{Scheduler, SchedulerConfig};
use crate::store::{Collection, Cond, Doc, Query, SharedStore};

/// Dropped in this order: the scheduler, the run database, then the runtime its journal
/// writer runs on, then the store's directory.
pub(crate) struct Fixture {
    pub(crate) sched: Arc<Scheduler>,
    pub(crate) db: Arc<RunDb>,
    /// The store under `db`, kept for a restart on it.
    pub(crate) store: SharedStore,
    pub(crate) owner: User,
    pub(crate) other: User,
    pub(crate) approver: User,
    pub(crate) rt: tokio::runtime::Runtime,
    pub(crate) dir: tempfile::TempDir,
}

/// A primary run database on `store`, recovered from what it holds, and its scheduler; to be
/// called inside the fixture's runtime (its journal writer is spawned there).
fn open(store: &SharedStore) -> (Arc<RunDb>, Arc<Scheduler>) {
    let offload = Offload::new(4);
    let db = Arc::new(
        RunDb::open(
            store.clone(),
            offload.clone(),
            Books::shipped().expect("books"),
            RunDbConfig::default(),
            Arc::new(Ledger::new(store.clone(), true)),
        )
        .expect("rundb"),
    );
    let cfg = SchedulerConfig::of(&crate::config::Config::default());
    let sched = Scheduler::open(db.clone(), cfg, offload).expect("scheduler");
    (db, Arc::new(sched))
}

pub(crate) use crate::store::testkit::temp_store;

pub(crate) fn fixture() -> Fixture {
    let (dir, store) = temp_store();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("runtime");
    let _in_rt = rt.enter();
    let (db, sched) = open(&store);
    let users = Users::new(store.clone());
    let owner = users.add("owner", "pw", "", false, None).expect("owner");
    let other = users.add("other", "pw", "", false, None).expect("other");
    let approver = users.add("boss", "pw", "", true, None).expect("boss");
    drop(_in_rt);
    Fixture {
        sched,
        db,
        store,
        owner,
        other,
        approver,
        rt,
        dir,
    }
}

pub(crate) fn args(extra: Value) -> CreateArgs {
    let mut v = json!({
        "base_tag": "master", "new_tag": "patch",
        "resolved_base": "a".repeat(40), "resolved_new": "b".repeat(40),
        "base_signature": "1", "new_signature": "2",
        "base_options": "Hash=16", "new_options": "Hash=16",
        "tc": "10+0.1", "book": "UHO_Lichess_4852_v1.epd", "threads": 1,
        "tests_repo": "https://github.com/official-stockfish/Stockfish",
        "num_games": 10_000, "info": "first",
    });
    if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
        v.extend(extra);
    }
    serde_json::from_value(v).expect("args")
}

impl Fixture {
    /// A fixed-games run of `owner` (10,000 games), approved by `boss` if asked.
    pub(crate) fn run(&self, extra: Value, approve: bool) -> String {
        let id = self
            .db
            .create_run(args(extra), &self.owner)
            .expect("create");
        if approve {
            self.db.approve_run(&id, &self.approver).expect("approve");
        }
        id
    }

    pub(crate) fn get(&self, id: &str) -> Run {
        let entry = self.db.entry(id).expect("entry").expect("run");
        entry.run.lock().clone()
    }

    /// The run, which must satisfy the model's invariants.
    pub(crate) fn checked(&self, id: &str) -> Run {
        let run = self.get(id);
        assert_eq!(run.check_invariants(), Vec::<String>::new(), "{id}");
        run
    }

    pub(crate) fn stored(&self, id: &str) -> Doc {
        self.db
            .store
            .get(Collection::Runs, id)
            .expect("get")
            .expect("stored")
    }

    /// The (action, username, message) of the run's actions, oldest first.
    pub(crate) fn actions(&self, id: &str) -> Vec<(String, String, String)> {
        let q = Query::new().with(Cond::Eq("run_id".into(), json!(id)));
        let mut docs = self.db.store.find(Collection::Actions, &q).expect("find");
        docs.sort_by(|a, b| {
            let t = |d: &Doc| d.get("time").and_then(Value::as_f64).unwrap_or(0.0);
            t(a).total_cmp(&t(b))
        });
        let s = |d: &Doc, k: &str| d.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        docs.iter()
            .map(|d| (s(d, "action"), s(d, "username"), s(d, "message")))
            .collect()
    }

    pub(crate) fn last_action(&self, id: &str) -> (String, String, String) {
        self.actions(id).pop().expect("an action")
    }

    /// A restart on the same store: a new run database, recovered from the stored documents
    /// and the journal.
    pub(crate) fn restart(&mut self) {
        let in_rt = self.rt.enter();
        let (db, sched) = open(&self.store);
        drop(in_rt);
        // The old scheduler goes first: it holds the old run database.
        self.sched = sched;
        self.db = db;
    }

    /// Waits for a change's journal entry; every ticket must resolve.
    pub(crate) fn durable(&self, ticket: Option<Ticket>) {
        if let Some(t) = ticket {
            self.rt.block_on(t.wait()).expect("journalled");
        }
    }

    pub(crate) fn request(&self, n: usize) -> Assignment {
        let (a, _) = self
            .sched
            .assign(&self.other, worker(n))
            .expect("request_task");
        a
    }
}

pub(crate) fn worker(n: usize) -> WorkerInfo {
    WorkerInfo {
        uname: "Linux 6.1".into(),
        architecture: vec!["64bit".into(), "ELF".into()],
        concurrency: 4,
        max_memory: 8000,
        min_threads: 1,
        username: "other".into(),
        version: crate::protocol::WORKER_VERSION,
        python_version: vec![3, 11, 7],
        gcc_version: vec![12, 2, 0],
        compiler: "g++".into(),
        unique_key: format!("{n:08x}-1111-4222-8333-{n:012x}"),
        modified: false,
        worker_arch: "x86-64-avx2".into(),
        arch: "?".into(),
        nps: 1e6,
        near_github_api_limit: false,
        remote_addr: format!("10.0.0.{n}"),
        country_code: "?".into(),
    }
}

//! The MongoDB store (`store = "mongodb"`): the [`Store`] trait on the official `mongodb`
//! driver (its blocking API), over Fishtest's own collections and documents, so shoal and
//! Fishtest's tools read the same database.
//!
//! Owns: the connection (`mongodb_uri`; the database named in its path, else `fishtest_new`),
//! the start-up check, Fishtest's indexes (created if missing, `indexes.rs`), the write
//! concern (majority, journaled: an acknowledged result is on disk, as the SQLite store
//! guarantees), bulk writes (`put_many`, the journal's group commit and the write-behind are
//! one `update` command each), retry with backoff on transient errors, and the journal kept in
//! two collections of its own (`shoal_journal`, `shoal_run_seq`). Documents go through
//! `store::bson_map`; queries through `query.rs`.
//! Must not: be called on the event loop (every method blocks on the driver's runtime: call
//! it inside `Offload::run`, as every store call is), or interpret documents beyond the
//! mapping.
//!
//! Without multi-document transactions (a single `mongod` has none), a "commit" here is an
//! ordered sequence of idempotent writes, each durable before the next: actions before the
//! journal entries they accompany, run documents before their flushed seq, the seq before the
//! journal is trimmed. A crash between two of them leaves what a replay repairs.

pub mod indexes;
pub mod query;
mod retention;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bson::{Bson, Document, doc, oid::ObjectId};
use mongodb::error::{
    Error as MongoError, ErrorKind, RETRYABLE_ERROR, RETRYABLE_WRITE_ERROR,
    TRANSIENT_TRANSACTION_ERROR, WriteFailure,
};
use mongodb::options::{Acknowledgment, ClientOptions, DatabaseOptions, ReadConcern, WriteConcern};
use mongodb::sync::{Client, Collection as MongoCollection, Database};
use serde_json::Value;

use super::bson_map::{self, MONGO_ID, PgnDoc};
use super::{
    Collection, Cond, Date, Doc, ExpiredRuns, JournalEntry, PgnHandle, PgnInfo, PgnsDeleted, Query,
    RunPosition, RunRecord, Store, StoreError, StoreResult, new_object_id,
};
use crate::secret::SecretUri;
use indexes::{JOURNAL, RUN_EXTRAS, RUN_SEQ};

/// The fields of shoal's run documents that Fishtest's have not: on MongoDB they live in
/// [`RUN_EXTRAS`], beside the run, so that `runs` holds only what Fishtest's schema accepts.
pub const SHOAL_RUN_FIELDS: &[&str] = &["trajectory"];

/// The database when `mongodb_uri` names none: Fishtest's.
pub const DEFAULT_DATABASE: &str = "fishtest_new";

/// How long start-up waits for a server before it gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Statements per bulk `update`/`delete` command (well under MongoDB's 100,000 and 48 MB).
const BULK: usize = 500;
/// Bytes of documents per bulk command, roughly (run documents can be megabytes).
const BULK_BYTES: usize = 8 << 20;

/// Retry policy for transient errors: attempts and the backoff between them.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub attempts: u32,
    pub first: Duration,
    pub max: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 5,
            first: Duration::from_millis(100),
            max: Duration::from_secs(2),
        }
    }
}

impl Retry {
    /// The wait before retry number `n` (0-based): doubling from `first`, capped at `max`,
    /// with up to 25% random jitter so a fleet of callers does not retry in step.
    pub fn backoff(&self, n: u32) -> Duration {
        let base = self
            .first
            .saturating_mul(1u32.checked_shl(n.min(16)).unwrap_or(u32::MAX))
            .min(self.max);
        let jitter = base.mul_f64(rand::random::<f64>() * 0.25);
        base.saturating_add(jitter).min(self.max)
    }
}

/// Server error codes that mean "try again": a primary stepping down, a node shutting down
/// or unreachable, a network timeout (the set the drivers' retryable-writes spec lists).
pub fn is_transient_code(code: i32) -> bool {
    matches!(
        code,
        6 | 7 | 89 | 91 | 189 | 262 | 9001 | 10107 | 11600 | 11602 | 13435 | 13436 | 63 | 150
    )
}

/// Whether an error may go away on its own.
fn transient(e: &MongoError) -> bool {
    if [
        RETRYABLE_WRITE_ERROR,
        RETRYABLE_ERROR,
        TRANSIENT_TRANSACTION_ERROR,
    ]
    .iter()
    .any(|l| e.contains_label(l))
    {
        return true;
    }
    match &*e.kind {
        ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } => true,
        ErrorKind::ServerSelection { .. } => true,
        ErrorKind::Command(c) => is_transient_code(c.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => is_transient_code(w.code),
        _ => false,
    }
}

fn duplicate(e: &MongoError) -> bool {
    match &*e.kind {
        ErrorKind::Write(WriteFailure::WriteError(w)) => w.code == 11000,
        ErrorKind::Command(c) => c.code == 11000,
        _ => false,
    }
}

fn backend(e: &MongoError) -> StoreError {
    StoreError::Backend {
        backend: "mongodb",
        message: e.to_string(),
        transient: transient(e),
    }
}

fn mapping(e: bson_map::MapError) -> StoreError {
    StoreError::Backend {
        backend: "mongodb",
        message: format!("document mapping: {e}"),
        transient: false,
    }
}

/// The MongoDB-backed [`Store`].
pub struct MongoStore {
    client: Client,
    db: Database,
    retry: Retry,
    closed: AtomicBool,
    /// The last few PGN blobs read: a download reads a PGN in chunks, and a BSON binary can
    /// only be fetched whole, so each chunk would otherwise fetch the whole blob again.
    recent_pgns: parking_lot::Mutex<std::collections::VecDeque<(String, Arc<Vec<u8>>)>>,
}

/// How many PGN blobs [`MongoStore`] keeps for chunked reads (each at most Fishtest's 16 MB
/// document size).
const RECENT_PGNS: usize = 4;

/// The write concern of every write: acknowledged by a majority, journaled.
pub fn write_concern() -> WriteConcern {
    WriteConcern::builder()
        .w(Acknowledgment::Majority)
        .journal(true)
        .build()
}

fn write_concern_doc() -> Document {
    doc! {"w": "majority", "j": true}
}

impl MongoStore {
    /// Connects to `mongodb_uri`, checks that the server answers, and creates Fishtest's
    /// indexes where missing. Every failure names `mongodb_uri` (its password redacted).
    pub fn open(uri: &SecretUri) -> StoreResult<MongoStore> {
        let cannot = |what: &str, e: &dyn std::fmt::Display| StoreError::Backend {
            backend: "mongodb",
            message: format!("{what} (mongodb_uri = {}): {e}", uri.redacted()),
            transient: false,
        };
        let mut options = ClientOptions::parse(uri.expose())
            .run()
            .map_err(|e| cannot("cannot parse the MongoDB connection string", &e))?;
        options
            .server_selection_timeout
            .get_or_insert(CONNECT_TIMEOUT);
        options.connect_timeout.get_or_insert(CONNECT_TIMEOUT);
        options.app_name.get_or_insert_with(|| "shoal".to_string());
        let name = options
            .default_database
            .clone()
            .unwrap_or_else(|| DEFAULT_DATABASE.to_string());
        let client = Client::with_options(options)
            .map_err(|e| cannot("cannot configure the MongoDB client", &e))?;
        let db = client.database_with_options(
            &name,
            DatabaseOptions::builder()
                .write_concern(write_concern())
                .read_concern(ReadConcern::majority())
                .build(),
        );
        db.run_command(doc! {"ping": 1})
            .run()
            .map_err(|e| cannot("cannot reach the MongoDB server", &e))?;
        let store = MongoStore {
            client,
            db,
            retry: Retry::default(),
            closed: AtomicBool::new(false),
            recent_pgns: parking_lot::Mutex::new(std::collections::VecDeque::new()),
        };
        store.create_indexes()?;
        tracing::info!(uri = %uri.redacted(), database = %name, "mongodb store open");
        Ok(store)
    }

    /// Creates every index of [`indexes::all`] that is missing. An index of the same name
    /// with other options (made by hand) is left alone and logged.
    fn create_indexes(&self) -> StoreResult<()> {
        let mut skipped = Vec::new();
        for spec in indexes::all() {
            let coll = self.db.collection::<Document>(spec.collection);
            match self.retrying("create_index", || coll.create_index(spec.model()).run()) {
                Ok(_) => {}
                Err(StoreError::Backend { message, .. })
                    if message.contains("IndexOptionsConflict")
                        || message.contains("IndexKeySpecsConflict") =>
                {
                    tracing::warn!(collection = spec.collection, index = spec.name, %message,
                        "an index of this name exists with other options; kept as it is");
                }
                // The store works without any one index (slower, or for a unique index
                // without the server's own duplicate check): an index the server refuses
                // (a text index on a server without text search, say; shoal never runs a
                // `$text` query) is named in the log and start-up goes on.
                Err(StoreError::Backend { message, .. }) => {
                    let unique = spec.unique;
                    // The driver's message ends with the raw server reply: keep the words.
                    let message = message.split(", labels:").next().unwrap_or_default();
                    tracing::error!(collection = spec.collection, index = spec.name, unique,
                        %message, "cannot create this index; going on without it");
                    skipped.push(format!("{}.{}", spec.collection, spec.name));
                }
                Err(e) => return Err(e),
            }
        }
        if !skipped.is_empty() {
            tracing::warn!(indexes = %skipped.join(", "),
                "mongodb store open without these indexes (see the errors above)");
        }
        Ok(())
    }

    fn coll(&self, c: Collection) -> MongoCollection<Document> {
        self.db.collection(c.name())
    }

    fn named(&self, name: &str) -> MongoCollection<Document> {
        self.db.collection(name)
    }

    fn check_open(&self) -> StoreResult<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(StoreError::Closed)
        } else {
            Ok(())
        }
    }

    /// Runs `f`, retrying transient failures with backoff.
    fn retrying<T>(
        &self,
        op: &'static str,
        mut f: impl FnMut() -> mongodb::error::Result<T>,
    ) -> StoreResult<T> {
        self.check_open()?;
        let started = Instant::now();
        let mut n = 0;
        let r = loop {
            match f() {
                Ok(v) => break Ok(v),
                Err(e) if transient(&e) && n + 1 < self.retry.attempts => {
                    let wait = self.retry.backoff(n);
                    tracing::warn!(op, attempt = n + 1, error = %e, ?wait, "mongodb: transient error, retrying");
                    std::thread::sleep(wait);
                    n += 1;
                }
                Err(e) if duplicate(&e) => break Err(StoreError::Duplicate(e.to_string())),
                Err(e) => break Err(backend(&e)),
            }
        };
        metrics::histogram!("shoal_store_op_seconds", "op" => op, "collection" => "mongodb")
            .record(started.elapsed().as_secs_f64());
        r
    }

    /// One bulk `update` command (ordered, journaled), checked for write errors.
    fn bulk_update(&self, coll: &str, updates: Vec<Document>) -> StoreResult<()> {
        self.bulk(coll, "update", "updates", updates)
    }

    fn bulk(&self, coll: &str, verb: &str, list: &str, mut ops: Vec<Document>) -> StoreResult<()> {
        while !ops.is_empty() {
            let mut take = 0;
            let mut bytes = 0usize;
            while take < ops.len() && take < BULK && (take == 0 || bytes < BULK_BYTES) {
                bytes = bytes.saturating_add(approx_bytes(&ops[take]));
                take += 1;
            }
            let rest = ops.split_off(take);
            let cmd = doc! {
                verb: coll, list: ops, "ordered": true, "writeConcern": write_concern_doc(),
            };
            let reply = self.retrying("bulk", || self.db.run_command(cmd.clone()).run())?;
            check_bulk_reply(&reply)?;
            ops = rest;
        }
        Ok(())
    }

    fn replace_upsert(q: Document, u: Document) -> Document {
        doc! {"q": q, "u": u, "upsert": true}
    }

    /// Takes shoal's own fields out of a run document bound for `runs` (Fishtest validates
    /// run documents against a schema that knows no other field) and returns the update that
    /// keeps them in [`indexes::RUN_EXTRAS`], if the run has any.
    fn split_run_extras(id: &str, run: &mut Document) -> Option<Document> {
        let mut extras = Document::new();
        for field in SHOAL_RUN_FIELDS {
            if let Some(v) = run.remove(*field) {
                extras.insert(*field, v);
            }
        }
        (!extras.is_empty()).then(|| doc! {"q": {"_id": id}, "u": {"$set": extras}, "upsert": true})
    }

    /// Puts shoal's own fields of these run documents back from [`indexes::RUN_EXTRAS`].
    fn merge_run_extras(&self, runs: &mut [Doc]) -> StoreResult<()> {
        let ids: Vec<Bson> = runs
            .iter()
            .filter_map(|d| d.get("_id").and_then(Value::as_str))
            .map(|id| Bson::String(id.to_string()))
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let c = self.named(RUN_EXTRAS);
        let extras: Vec<Document> = self.retrying("run_extras", || {
            c.find(doc! {"_id": {"$in": ids.clone()}}).run()?.collect()
        })?;
        if extras.is_empty() {
            return Ok(());
        }
        let mut by_id: std::collections::HashMap<String, Document> = extras
            .into_iter()
            .filter_map(|mut d| match d.remove("_id") {
                Some(Bson::String(id)) => Some((id, d)),
                _ => None,
            })
            .collect();
        for run in runs.iter_mut() {
            let Some(extra) = run
                .get("_id")
                .and_then(Value::as_str)
                .and_then(|id| by_id.remove(id))
            else {
                continue;
            };
            for (k, v) in extra {
                if SHOAL_RUN_FIELDS.contains(&k.as_str()) {
                    run.insert(k.clone(), bson_map::to_value(v, &k).map_err(mapping)?);
                }
            }
        }
        Ok(())
    }

    /// A PGN's bytes: from the recent ones, else fetched whole (then kept).
    fn pgn_blob(&self, handle: &PgnHandle) -> StoreResult<Arc<Vec<u8>>> {
        let key = handle.key();
        if let Some((_, b)) = self.recent_pgns.lock().iter().find(|(k, _)| k == key) {
            return Ok(b.clone());
        }
        let oid = ObjectId::parse_str(key)
            .map_err(|_| StoreError::InvalidQuery(format!("not a PGN handle: {handle:?}")))?;
        let coll = self.named("pgns");
        let found = self.retrying("pgn_read", || {
            coll.find_one(doc! {"_id": oid})
                .projection(doc! {"pgn_zip": 1})
                .run()
        })?;
        let bytes = match found.and_then(|mut d| d.remove("pgn_zip")) {
            Some(Bson::Binary(b)) => Arc::new(b.bytes),
            _ => return Ok(Arc::new(Vec::new())),
        };
        let mut recent = self.recent_pgns.lock();
        if recent.len() >= RECENT_PGNS {
            recent.pop_front();
        }
        recent.push_back((key.to_string(), bytes.clone()));
        Ok(bytes)
    }

    fn pgn_doc_info(d: &Document) -> Option<(String, PgnInfo)> {
        let id = d.get_object_id("_id").ok()?.to_hex();
        let run_task = d.get_str("run_id").ok()?.to_string();
        let size = match d.get("size") {
            Some(Bson::Int32(n)) => u64::try_from(*n).ok()?,
            Some(Bson::Int64(n)) => u64::try_from(*n).ok()?,
            _ => 0,
        };
        Some((
            id.clone(),
            PgnInfo {
                handle: PgnHandle::new(id),
                run_task,
                size,
            },
        ))
    }

    fn pgn_infos(&self, filter: Document) -> StoreResult<Vec<(String, PgnInfo)>> {
        let coll = self.named("pgns");
        let docs: Vec<Document> = self.retrying("pgn_find", || {
            coll.find(filter.clone())
                .projection(doc! {"pgn_zip": 0})
                .sort(doc! {"_id": 1})
                .run()?
                .collect()
        })?;
        Ok(docs.iter().filter_map(Self::pgn_doc_info).collect())
    }
}

/// A shoal document as the replacement of its Fishtest document, with its filter.
fn replacement(coll: Collection, d: &Doc) -> StoreResult<(Document, Document)> {
    let id = d
        .get("_id")
        .and_then(Value::as_str)
        .ok_or(StoreError::MissingId)?;
    let mut b = bson_map::to_bson(coll, d).map_err(mapping)?;
    if bson_map::key_field(coll) != "_id" && !d.contains_key(MONGO_ID) {
        // A net or worker shoal made: MongoDB keeps (or gives) its ObjectId.
        b.remove("_id");
    }
    Ok((query::by_id(coll, id)?, b))
}

/// `len` bytes of `bytes` from `offset`, clamped to its end.
fn chunk(bytes: &[u8], offset: u64, len: usize) -> &[u8] {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let end = start.saturating_add(len).min(bytes.len());
    &bytes[start..end]
}

fn approx_bytes(d: &Document) -> usize {
    let mut n = 0usize;
    let mut stack: Vec<&Bson> = d.values().collect();
    while let Some(b) = stack.pop() {
        n = n.saturating_add(match b {
            Bson::String(s) => s.len() + 8,
            Bson::Binary(bin) => bin.bytes.len() + 8,
            Bson::Document(d) => {
                stack.extend(d.values());
                16
            }
            Bson::Array(a) => {
                stack.extend(a.iter());
                16
            }
            _ => 16,
        });
    }
    n
}

/// A bulk command's reply: `writeErrors` and `writeConcernError` are failures too.
fn check_bulk_reply(reply: &Document) -> StoreResult<()> {
    if let Ok(errors) = reply.get_array("writeErrors")
        && let Some(Bson::Document(first)) = errors.first()
    {
        let code = first.get_i32("code").unwrap_or(0);
        let msg = first.get_str("errmsg").unwrap_or_default().to_string();
        if code == 11000 {
            return Err(StoreError::Duplicate(msg));
        }
        return Err(StoreError::Backend {
            backend: "mongodb",
            message: format!("write error {code}: {msg}"),
            transient: is_transient_code(code),
        });
    }
    if let Ok(wce) = reply.get_document("writeConcernError") {
        let code = wce.get_i32("code").unwrap_or(0);
        return Err(StoreError::Backend {
            backend: "mongodb",
            message: format!(
                "write concern error {code}: {}",
                wce.get_str("errmsg").unwrap_or_default()
            ),
            transient: is_transient_code(code),
        });
    }
    Ok(())
}

/// A journal entry as its MongoDB document: the patch as `[{k, v}]` pairs (its keys, like
/// `tasks.12`, hold dots, which MongoDB field names should not).
pub fn journal_doc(e: &JournalEntry) -> StoreResult<Document> {
    let seq = i64::try_from(e.seq)
        .map_err(|_| StoreError::InvalidQuery(format!("journal seq {} too large", e.seq)))?;
    let mut pairs = Vec::with_capacity(e.patch.len());
    for (k, v) in &e.patch {
        let v = bson_map::from_value(v, k).map_err(mapping)?;
        pairs.push(Bson::Document(doc! {"k": k.clone(), "v": v}));
    }
    Ok(doc! {"_id": seq, "run_id": e.run_id.clone(), "patch": pairs})
}

/// The inverse of [`journal_doc`].
pub fn journal_entry(d: &Document) -> StoreResult<JournalEntry> {
    let corrupt = |what: &str| StoreError::Backend {
        backend: "mongodb",
        message: format!("journal entry {:?}: {what}", d.get("_id")),
        transient: false,
    };
    let seq = match d.get("_id") {
        Some(Bson::Int64(n)) => u64::try_from(*n).map_err(|_| corrupt("negative seq"))?,
        Some(Bson::Int32(n)) => u64::try_from(*n).map_err(|_| corrupt("negative seq"))?,
        _ => return Err(corrupt("no seq")),
    };
    let run_id = d.get_str("run_id").map_err(|_| corrupt("no run_id"))?;
    let mut patch = Doc::new();
    for pair in d.get_array("patch").map_err(|_| corrupt("no patch"))? {
        let Bson::Document(p) = pair else {
            return Err(corrupt("patch pair"));
        };
        let k = p.get_str("k").map_err(|_| corrupt("patch key"))?;
        let v = p.get("v").cloned().unwrap_or(Bson::Null);
        patch.insert(k.to_string(), bson_map::to_value(v, k).map_err(mapping)?);
    }
    Ok(JournalEntry {
        seq,
        run_id: run_id.to_string(),
        patch,
    })
}

impl Store for MongoStore {
    fn get(&self, coll: Collection, id: &str) -> StoreResult<Option<Doc>> {
        let filter = query::by_id(coll, id)?;
        let c = self.coll(coll);
        let found = self.retrying("get", || c.find_one(filter.clone()).run())?;
        let Some(mut doc) = found
            .map(|d| bson_map::to_doc(coll, d).map_err(mapping))
            .transpose()?
        else {
            return Ok(None);
        };
        if coll == Collection::Runs {
            self.merge_run_extras(std::slice::from_mut(&mut doc))?;
        }
        Ok(Some(doc))
    }

    fn put(&self, coll: Collection, doc: &Doc) -> StoreResult<()> {
        self.put_many(coll, std::slice::from_ref(doc))
    }

    fn put_many(&self, coll: Collection, docs: &[Doc]) -> StoreResult<()> {
        let mut updates = Vec::with_capacity(docs.len());
        let mut extras = Vec::new();
        for d in docs {
            let (q, mut u) = replacement(coll, d)?;
            if coll == Collection::Runs
                && let Some(id) = d.get("_id").and_then(Value::as_str)
                && let Some(x) = Self::split_run_extras(id, &mut u)
            {
                extras.push(x);
            }
            updates.push(Self::replace_upsert(q, u));
        }
        self.bulk_update(coll.name(), updates)?;
        self.bulk_update(RUN_EXTRAS, extras)
    }

    fn insert(&self, coll: Collection, mut doc: Doc) -> StoreResult<String> {
        let id = match doc.get("_id").and_then(Value::as_str) {
            Some(id) => id.to_string(),
            None if bson_map::key_field(coll) == "_id" => {
                let id = new_object_id();
                doc.insert("_id".into(), Value::String(id.clone()));
                id
            }
            None => {
                let key = bson_map::key_field(coll);
                let id = doc
                    .get(key)
                    .and_then(Value::as_str)
                    .ok_or(StoreError::MissingId)?
                    .to_string();
                doc.insert("_id".into(), Value::String(id.clone()));
                id
            }
        };
        let (_, mut b) = replacement(coll, &doc)?;
        if !b.contains_key("_id") {
            b.insert("_id", ObjectId::new());
        }
        let extras = if coll == Collection::Runs {
            Self::split_run_extras(&id, &mut b)
        } else {
            None
        };
        if let Some(x) = extras {
            self.bulk_update(RUN_EXTRAS, vec![x])?;
        }
        // A key-field collection (nets, workers) has no unique `_id` to catch a second
        // document of the same name: look first (`workers` also has a unique index).
        if bson_map::key_field(coll) != "_id" && self.get(coll, &id)?.is_some() {
            return Err(StoreError::Duplicate(id));
        }
        let c = self.coll(coll);
        let mut attempt = 0u32;
        let r = self.retrying("insert", || {
            attempt += 1;
            c.insert_one(b.clone()).run()
        });
        match r {
            Ok(_) => Ok(id),
            // A retry of an insert whose first try was applied but not acknowledged.
            Err(StoreError::Duplicate(_)) if attempt > 1 => Ok(id),
            Err(e) => Err(e),
        }
    }

    fn delete(&self, coll: Collection, id: &str) -> StoreResult<bool> {
        let filter = query::by_id(coll, id)?;
        let c = self.coll(coll);
        let r = self.retrying("delete", || c.delete_one(filter.clone()).run())?;
        Ok(r.deleted_count > 0)
    }

    fn find(&self, coll: Collection, q: &Query) -> StoreResult<Vec<Doc>> {
        let filter = query::filter(coll, &q.filter)?;
        let sort = query::sort(coll, q)?;
        let limit = q
            .limit
            .map(|l| i64::try_from(l).unwrap_or(i64::MAX))
            .filter(|l| *l > 0);
        if q.limit == Some(0) {
            return Ok(Vec::new());
        }
        let c = self.coll(coll);
        let docs: Vec<Document> = self.retrying("find", || {
            let mut f = c.find(filter.clone()).skip(q.skip);
            if let Some(s) = &sort {
                f = f.sort(s.clone());
            }
            if let Some(l) = limit {
                f = f.limit(l);
            }
            f.run()?.collect()
        })?;
        let mut docs = docs
            .into_iter()
            .map(|d| bson_map::to_doc(coll, d).map_err(mapping))
            .collect::<StoreResult<Vec<Doc>>>()?;
        if coll == Collection::Runs {
            self.merge_run_extras(&mut docs)?;
        }
        Ok(docs)
    }

    fn count(&self, coll: Collection, filter: &[Cond]) -> StoreResult<u64> {
        let f = query::filter(coll, filter)?;
        let c = self.coll(coll);
        self.retrying("count", || c.count_documents(f.clone()).run())
    }

    fn pgn_put(&self, run_task: &str, gz: &[u8]) -> StoreResult<()> {
        self.pgn_import(&new_object_id(), run_task, gz).map(|_| ())
    }

    fn pgn_find(&self, run_task: &str) -> StoreResult<Vec<PgnInfo>> {
        Ok(self
            .pgn_infos(doc! {"run_id": run_task})?
            .into_iter()
            .map(|(_, info)| info)
            .collect())
    }

    fn pgn_list_run(&self, run_id: &str) -> StoreResult<Vec<PgnInfo>> {
        let prefix = format!("^{}-[0-9]+$", regex::escape(run_id));
        let mut list: Vec<PgnInfo> = self
            .pgn_infos(doc! {"run_id": {"$regex": prefix}})?
            .into_iter()
            .map(|(_, info)| info)
            .collect();
        let task = |p: &PgnInfo| {
            p.run_task
                .rsplit_once('-')
                .and_then(|(_, t)| t.parse::<u64>().ok())
                .unwrap_or(0)
        };
        list.sort_by_key(task); // stable: equal tasks stay in `_id` order
        Ok(list)
    }

    fn pgn_read(&self, handle: &PgnHandle, offset: u64, len: usize) -> StoreResult<Vec<u8>> {
        let bytes = self.pgn_blob(handle)?;
        Ok(chunk(&bytes, offset, len).to_vec())
    }

    fn pgn_import(&self, id: &str, run_task: &str, gz: &[u8]) -> StoreResult<bool> {
        let d = bson_map::pgn_to_bson(&PgnDoc {
            id: id.to_string(),
            run_task: run_task.to_string(),
            gz: gz.to_vec(),
        })
        .map_err(mapping)?;
        let coll = self.named("pgns");
        match self.retrying("pgn_put", || coll.insert_one(d.clone()).run()) {
            Ok(_) => Ok(true),
            Err(StoreError::Duplicate(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn pgn_scan(
        &self,
        after: Option<&PgnHandle>,
        limit: usize,
    ) -> StoreResult<Vec<(String, PgnInfo)>> {
        let filter = match after {
            None => doc! {},
            Some(h) => {
                let oid = ObjectId::parse_str(h.key())
                    .map_err(|_| StoreError::InvalidQuery(format!("not a PGN handle: {h:?}")))?;
                doc! {"_id": {"$gt": oid}}
            }
        };
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let coll = self.named("pgns");
        let docs: Vec<Document> = self.retrying("pgn_scan", || {
            coll.find(filter.clone())
                .projection(doc! {"pgn_zip": 0})
                .sort(doc! {"_id": 1})
                .limit(limit)
                .run()?
                .collect()
        })?;
        Ok(docs.iter().filter_map(Self::pgn_doc_info).collect())
    }

    fn expired_pgn_runs(
        &self,
        cutoff: &Date,
        after: Option<&RunPosition>,
        limit: usize,
    ) -> StoreResult<ExpiredRuns> {
        retention::expired_runs(self, cutoff, after, limit)
    }

    fn pgn_delete_expired(
        &self,
        run_id: &str,
        cutoff: &Date,
        limit: usize,
        max_bytes: u64,
    ) -> StoreResult<PgnsDeleted> {
        retention::delete_expired(self, run_id, cutoff, limit, max_bytes)
    }

    fn reclaim_space(&self, _max_pages: u32) -> StoreResult<u64> {
        // WiredTiger reuses the space of deleted documents; giving it back to the file system
        // is MongoDB's `compact` command, an operator's decision (docs/migrating-from-fishtest.md).
        Ok(0)
    }

    fn journal_append(&self, entries: &[JournalEntry], actions: &[Doc]) -> StoreResult<()> {
        if !actions.is_empty() {
            self.put_many(Collection::Actions, actions)?;
        }
        let mut updates = Vec::with_capacity(entries.len());
        for e in entries {
            let d = journal_doc(e)?;
            let q = doc! {"_id": d.get("_id").cloned().unwrap_or(Bson::Null)};
            updates.push(Self::replace_upsert(q, d));
        }
        self.bulk_update(JOURNAL, updates)
    }

    fn journal_pending(&self) -> StoreResult<(Vec<JournalEntry>, u64)> {
        let seqs_coll = self.named(RUN_SEQ);
        let seqs: Vec<Document> = self.retrying("journal_pending", || {
            seqs_coll.find(doc! {}).run()?.collect()
        })?;
        let mut flushed = std::collections::HashMap::new();
        let mut max = 0u64;
        for d in &seqs {
            let seq = match d.get("seq") {
                Some(Bson::Int64(n)) => u64::try_from(*n).unwrap_or(0),
                Some(Bson::Int32(n)) => u64::try_from(*n).unwrap_or(0),
                _ => 0,
            };
            if let Ok(run) = d.get_str("_id") {
                flushed.insert(run.to_string(), seq);
            }
            max = max.max(seq);
        }
        let journal = self.named(JOURNAL);
        let docs: Vec<Document> = self.retrying("journal_pending", || {
            journal.find(doc! {}).sort(doc! {"_id": 1}).run()?.collect()
        })?;
        let mut pending = Vec::new();
        for d in &docs {
            let e = journal_entry(d)?;
            max = max.max(e.seq);
            if e.seq > flushed.get(&e.run_id).copied().unwrap_or(0) {
                pending.push(e);
            }
        }
        Ok((pending, max))
    }

    fn flush_runs(&self, runs: &[RunRecord]) -> StoreResult<()> {
        if runs.is_empty() {
            return Ok(());
        }
        let mut updates = Vec::with_capacity(runs.len());
        let mut seqs = Vec::with_capacity(runs.len());
        let mut trims = Vec::with_capacity(runs.len());
        let mut extras = Vec::new();
        for r in runs {
            let d: Doc = serde_json::from_str(&r.json).map_err(|source| StoreError::Corrupt {
                collection: "runs",
                id: r.id.clone(),
                source,
            })?;
            let (q, mut u) = replacement(Collection::Runs, &d)?;
            if let Some(x) = Self::split_run_extras(&r.id, &mut u) {
                extras.push(x);
            }
            updates.push(Self::replace_upsert(q, u));
            let seq = i64::try_from(r.seq).unwrap_or(i64::MAX);
            seqs.push(doc! {
                "q": {"_id": r.id.clone()}, "u": {"$max": {"seq": seq}}, "upsert": true,
            });
            trims.push(doc! {"q": {"run_id": r.id.clone(), "_id": {"$lte": seq}}, "limit": 0});
        }
        self.bulk_update(Collection::Runs.name(), updates)?;
        self.bulk_update(RUN_EXTRAS, extras)?;
        self.bulk_update(RUN_SEQ, seqs)?;
        self.bulk(JOURNAL, "delete", "deletes", trims)
    }

    fn close(&self) -> StoreResult<()> {
        self.closed.store(true, Ordering::Release);
        // The driver's pools close when the client is dropped; every acknowledged write is
        // already journaled on the server.
        let _ = &self.client;
        tracing::info!("mongodb store closed");
        Ok(())
    }

    fn shared_with_fishtest(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn replacements_keep_fishtest_ids() {
        let run: Doc = serde_json::from_value(
            json!({"_id": "6a5ef17522dfea1c957407ba", "finished": false, "args": {"tc": "10+0.1"}}),
        )
        .expect("doc");
        let (q, u) = replacement(Collection::Runs, &run).expect("run");
        let oid = ObjectId::parse_str("6a5ef17522dfea1c957407ba").expect("oid");
        assert_eq!(q, doc! {"_id": {"$eq": oid}});
        assert_eq!(u.get("_id"), Some(&Bson::ObjectId(oid)));
        // A worker read from MongoDB keeps its ObjectId; one shoal made gets none here
        // (the server gives it one on insert, and keeps the old one on a replace).
        let read: Doc =
            serde_json::from_value(json!({"_id": "w-8cores-1", "worker_name": "w-8cores-1",
            "_mongo_id": {"$oid": "6a72633822dfea1c9574090a"}, "blocked": true}))
            .expect("doc");
        let (q, u) = replacement(Collection::Workers, &read).expect("worker");
        assert_eq!(q, doc! {"worker_name": {"$eq": "w-8cores-1"}});
        assert_eq!(
            u.get_object_id("_id").expect("kept").to_hex(),
            "6a72633822dfea1c9574090a"
        );
        assert!(!u.contains_key(MONGO_ID));
        let mine: Doc = serde_json::from_value(
            json!({"_id": "w-8cores-2", "worker_name": "w-8cores-2", "blocked": false}),
        )
        .expect("doc");
        let (_, u) = replacement(Collection::Workers, &mine).expect("worker");
        assert!(!u.contains_key("_id"));
        assert!(replacement(Collection::Runs, &Doc::new()).is_err());
    }

    #[test]
    fn chunks_are_clamped() {
        let b = [1u8, 2, 3, 4, 5];
        assert_eq!(chunk(&b, 0, 2), &[1, 2]);
        assert_eq!(chunk(&b, 3, 10), &[4, 5]);
        assert!(chunk(&b, 5, 1).is_empty());
        assert!(chunk(&b, u64::MAX, usize::MAX).is_empty());
    }

    #[test]
    fn backoff_doubles_and_is_capped() {
        let r = Retry::default();
        assert!(r.backoff(0) >= Duration::from_millis(100));
        assert!(r.backoff(0) <= Duration::from_millis(125));
        assert!(r.backoff(2) >= Duration::from_millis(400));
        assert!(r.backoff(30) <= Duration::from_secs(2));
    }

    #[test]
    fn transient_errors_are_told_apart() {
        assert!(is_transient_code(11600));
        assert!(is_transient_code(10107));
        assert!(!is_transient_code(11000));
        let io: MongoError =
            ErrorKind::Io(std::sync::Arc::new(std::io::Error::other("reset"))).into();
        assert!(transient(&io));
        let arg = MongoError::custom("not a server's answer");
        assert!(!transient(&arg));
        assert!(!backend(&arg).is_transient());
    }

    #[test]
    fn bulk_replies_with_errors_fail() {
        assert!(check_bulk_reply(&doc! {"ok": 1, "n": 2}).is_ok());
        let dup = doc! {"ok": 1, "writeErrors": [{"index": 0, "code": 11000, "errmsg": "dup"}]};
        assert!(matches!(
            check_bulk_reply(&dup),
            Err(StoreError::Duplicate(_))
        ));
        let wce = doc! {"ok": 1, "writeConcernError": {"code": 91, "errmsg": "shutdown"}};
        assert!(check_bulk_reply(&wce).is_err_and(|e| e.is_transient()));
    }

    #[test]
    fn journal_entries_round_trip_through_bson() {
        let mut patch = Doc::new();
        patch.insert("tasks.12".into(), json!({"active": true, "last_updated": {"$date": "2026-07-21T04:11:33.588Z"}, "stats": {"wins": 3}}));
        patch.insert("results".into(), json!({"wins": 3, "llr": 0.5}));
        let e = JournalEntry {
            seq: 42,
            run_id: "6a5ef17522dfea1c957407ba".into(),
            patch,
        };
        let d = journal_doc(&e).expect("doc");
        assert_eq!(d.get("_id"), Some(&Bson::Int64(42)));
        assert!(matches!(
            d.get_array("patch").expect("pairs")[0],
            Bson::Document(_)
        ));
        assert_eq!(journal_entry(&d).expect("entry"), e);
    }

    #[test]
    fn write_concern_is_journaled_majority() {
        let wc = write_concern();
        assert_eq!(wc.journal, Some(true));
        assert_eq!(wc.w, Some(Acknowledgment::Majority));
        assert_eq!(write_concern_doc(), doc! {"w": "majority", "j": true});
    }

    #[test]
    fn an_unreachable_server_is_a_start_up_error_naming_mongodb_uri() {
        // A closed port on loopback, with a short server selection timeout.
        let uri = SecretUri::new(
            "mongodb://shoal:hunter2@127.0.0.1:1/ft?serverSelectionTimeoutMS=300&connectTimeoutMS=300",
        );
        let err = MongoStore::open(&uri).err().expect("no server there");
        let text = err.to_string();
        assert!(text.contains("mongodb_uri"), "{text}");
        assert!(text.contains("cannot reach"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        // From a blocking-pool thread of the server's runtime, as `Offload::run` calls it: the
        // driver's blocking API must not trip over the runtime around it.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build()
            .expect("runtime");
        let in_pool = rt
            .block_on(
                rt.spawn_blocking(move || MongoStore::open(&uri).err().map(|e| e.to_string())),
            )
            .expect("no panic in the pool");
        assert!(in_pool.is_some_and(|t| t.contains("mongodb_uri")));
        let bad = SecretUri::new("postgres://nope");
        let text = MongoStore::open(&bad).err().expect("bad uri").to_string();
        assert!(text.contains("mongodb_uri"), "{text}");
    }
}

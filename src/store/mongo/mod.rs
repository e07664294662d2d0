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
//!
//! Files:
//! - `mod.rs`: [`MongoStore`]: opening, the start-up check, the [`Store`] trait.
//! - `indexes.rs`: Fishtest's indexes and shoal's own collections.
//! - `query.rs`: shoal's queries as MongoDB filters.
//! - `retry.rs`: transient errors, the retry policy, driver errors as [`StoreError`]s.
//! - `write.rs`: the write concern, bulk commands, replacements, shoal's run extras.
//! - `pgn.rs`: PGN blobs (the recent ones kept for chunked reads) and PGN records.
//! - `journal.rs`: journal entries as documents, both ways.
//! - `retention.rs`: PGN retention (the expired runs, the bounded deletion).
//! - `tests.rs`: unit tests of the pure parts.

pub mod indexes;
mod journal;
mod pgn;
pub mod query;
mod retention;
mod retry;
mod write;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bson::{Bson, Document, doc, oid::ObjectId};
use mongodb::options::{ClientOptions, DatabaseOptions, ReadConcern};
use mongodb::sync::{Client, Collection as MongoCollection, Database};
use serde_json::Value;

use super::bson_map::{self, PgnDoc};
use super::{
    Collection, Cond, Doc, ExpiredRuns, JournalEntry, PgnHandle, PgnInfo, PgnsDeleted, Query,
    RetentionWindow, RunPosition, RunRecord, Store, StoreError, StoreResult, new_object_id,
};
use crate::secret::SecretUri;
use indexes::{JOURNAL, RUN_EXTRAS, RUN_SEQ};
pub use journal::{journal_doc, journal_entry};
use pgn::chunk;
use retry::mapping;
pub use retry::{Retry, is_transient_code};
use write::replacement;
pub use write::write_concern;

/// The fields of shoal's run documents that Fishtest's have not: on MongoDB they live in
/// [`RUN_EXTRAS`], beside the run, so that `runs` holds only what Fishtest's schema accepts.
pub const SHOAL_RUN_FIELDS: &[&str] = &["trajectory"];

/// The database when `mongodb_uri` names none: Fishtest's.
pub const DEFAULT_DATABASE: &str = "fishtest_new";

/// How long start-up waits for a server before it gives up.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

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
        store.move_shoal_documents()?;
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

    /// Moves what an older shoal left in Fishtest's collections to its own: `kvstore`
    /// documents under keys Fishtest has no use for, and actions of kinds Fishtest does not
    /// know. Each document is written to its new place before it is deleted from the old one,
    /// so an interrupted move is finished by the next start.
    fn move_shoal_documents(&self) -> StoreResult<()> {
        let moves = [
            (
                Collection::Kvstore,
                Collection::ShoalKv,
                doc! {"_id": {"$nin": super::FISHTEST_KV_KEYS.to_vec()}},
            ),
            (
                Collection::Actions,
                Collection::ShoalActions,
                doc! {"action": {"$in": super::SHOAL_ACTION_KINDS.to_vec()}},
            ),
        ];
        for (from, to, filter) in moves {
            let old = self.coll(from);
            let docs: Vec<Document> =
                self.retrying("move", || old.find(filter.clone()).run()?.collect())?;
            if docs.is_empty() {
                continue;
            }
            let updates = docs
                .iter()
                .map(|d| {
                    let q = doc! {"_id": d.get("_id").cloned().unwrap_or(Bson::Null)};
                    Self::replace_upsert(q, d.clone())
                })
                .collect();
            self.bulk_update(to.name(), updates)?;
            let ids: Vec<Bson> = docs.iter().filter_map(|d| d.get("_id").cloned()).collect();
            self.retrying("move", || {
                old.delete_many(doc! {"_id": {"$in": ids.clone()}}).run()
            })?;
            tracing::info!(from = %from, to = %to, documents = docs.len(),
                "moved shoal's own documents out of Fishtest's collection");
        }
        Ok(())
    }

    fn coll(&self, c: Collection) -> MongoCollection<Document> {
        self.db.collection(c.name())
    }

    fn named(&self, name: &str) -> MongoCollection<Document> {
        self.db.collection(name)
    }
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

    fn increment(&self, coll: Collection, id: &str, field: &str, by: i64) -> StoreResult<bool> {
        write::increment(self, coll, id, field, by)
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
        window: &RetentionWindow,
        after: Option<&RunPosition>,
        limit: usize,
    ) -> StoreResult<ExpiredRuns> {
        retention::expired_runs(self, window, after, limit)
    }

    fn pgn_delete_expired(
        &self,
        run_id: &str,
        window: &RetentionWindow,
        limit: usize,
        max_bytes: u64,
    ) -> StoreResult<PgnsDeleted> {
        retention::delete_expired(self, run_id, window, limit, max_bytes)
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
mod tests;

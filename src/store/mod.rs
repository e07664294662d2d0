//! The store: Fishtest's collections behind one blocking, document-oriented trait.
//!
//! Owns: the [`Store`] trait, the document conventions, the small query vocabulary
//! ([`Query`], [`Cond`]), typed [`StoreError`]s, and the backends (`sqlite`, `mongo`); the
//! mapping between these documents and Fishtest's BSON documents (`bson_map`).
//! Must not: be called from the event loop (every method blocks: call it inside
//! `Offload::run`), know about HTTP, or interpret documents beyond the fields its indexes and
//! queries name. Only this module touches SQLite (or MongoDB).
//!
//! ## Document conventions
//! Documents are JSON objects with Fishtest's field names and types
//! (docs/fishtest-compatibility.md#data-model), so that a MongoDB backend can store them
//! unchanged:
//! - `_id` is a string. Runs, actions and users use 24 lowercase hex digits (an ObjectId's hex
//!   form, see [`new_object_id`]); kvstore uses its key; workers use the worker name.
//! - Dates are MongoDB Extended JSON, `{"$date": "2026-11-22T03:57:26.123Z"}` (see [`Date`]),
//!   which `bson` maps to a BSON datetime. Within this convention ISO strings sort in time order.
//! - Binary data that is large (PGNs) does not live in documents: see the `pgn_*` methods.

pub mod bson_map;
pub mod mongo;
pub mod sqlite;
#[cfg(test)]
pub(crate) mod testkit;

use std::fmt;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

/// A document: a JSON object.
pub type Doc = Map<String, Value>;

/// The collections, named as in Fishtest's database. PGNs have their own methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Collection {
    Runs,
    Users,
    Actions,
    Nns,
    Workers,
    Kvstore,
    /// Fishtest's contributor statistics (`utils/delta_update_users.py`): kept so that a
    /// database moves to shoal and back whole; shoal does not compute them.
    UserCache,
    TopMonth,
    Deltas,
    /// shoal's own key-value documents (sessions, API tokens, reset links, follows and feed
    /// tokens, the GitHub reply cache, stored diffs, CPU hours, the contributors table, the
    /// limits, official master as shoal keeps it, ...): everything Fishtest's `kvstore` has no
    /// key for ([`FISHTEST_KV_KEYS`]). Fishtest never reads it.
    ShoalKv,
    /// shoal's own action log: the kinds Fishtest does not know ([`SHOAL_ACTION_KINDS`]),
    /// shown beside Fishtest's actions.
    ShoalActions,
}

/// The keys of Fishtest's `kvstore` (collections.md §9): only these live there, each as
/// `{_id, value}`; every other key shoal keeps is in [`Collection::ShoalKv`].
pub const FISHTEST_KV_KEYS: [&str; 5] = [
    "books",
    "worker_runs",
    "legacy_usernames",
    "official_master_sha",
    "github_api_cache",
];

/// The action kinds only shoal writes (Fishtest's schema refuses them): they go to
/// [`Collection::ShoalActions`], never to `actions`.
pub const SHOAL_ACTION_KINDS: [&str; 3] = ["api_token", "password_reset", "set_limit"];

impl Collection {
    /// Fishtest's collections (what a dump holds).
    pub const ALL: [Collection; 9] = [
        Collection::Runs,
        Collection::Users,
        Collection::Actions,
        Collection::Nns,
        Collection::Workers,
        Collection::Kvstore,
        Collection::UserCache,
        Collection::TopMonth,
        Collection::Deltas,
    ];

    /// shoal's own collections of documents (Fishtest has none of them).
    pub const SHOAL: [Collection; 2] = [Collection::ShoalKv, Collection::ShoalActions];

    pub fn name(self) -> &'static str {
        match self {
            Collection::Runs => "runs",
            Collection::Users => "users",
            Collection::Actions => "actions",
            Collection::Nns => "nns",
            Collection::Workers => "workers",
            Collection::Kvstore => "kvstore",
            Collection::UserCache => "user_cache",
            Collection::TopMonth => "top_month",
            Collection::Deltas => "deltas",
            Collection::ShoalKv => "shoal_kvstore",
            Collection::ShoalActions => "shoal_actions",
        }
    }
}

impl fmt::Display for Collection {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A condition on a (dotted) field path. Paths are `[A-Za-z0-9_]` segments joined by dots;
/// anything else is refused with [`StoreError::InvalidQuery`], so a path can never inject.
#[derive(Debug, Clone, PartialEq)]
pub enum Cond {
    Eq(String, Value),
    Ne(String, Value),
    Gt(String, Value),
    Gte(String, Value),
    Lt(String, Value),
    Lte(String, Value),
    In(String, Vec<Value>),
    Exists(String, bool),
    /// Any of the paths (first) holds a value containing any of the texts (second), ignoring
    /// ASCII case: a search box's words, matched literally, never as a pattern. No path or
    /// no text: nothing matches.
    ContainsAny(Vec<String>, Vec<String>),
    /// None of the paths holds a value containing any of the texts (a search's `-word`s).
    ContainsNone(Vec<String>, Vec<String>),
}

/// Sort direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Order {
    Asc,
    Desc,
}

/// A find: all conditions must hold (AND); then sort, skip, limit.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Query {
    pub filter: Vec<Cond>,
    pub sort: Vec<(String, Order)>,
    pub skip: u64,
    pub limit: Option<u64>,
}

impl Query {
    pub fn new() -> Self {
        Query::default()
    }

    pub fn with(mut self, cond: Cond) -> Self {
        self.filter.push(cond);
        self
    }

    pub fn sort(mut self, path: &str, order: Order) -> Self {
        self.sort.push((path.to_string(), order));
        self
    }

    pub fn skip(mut self, n: u64) -> Self {
        self.skip = n;
        self
    }

    pub fn limit(mut self, n: u64) -> Self {
        self.limit = Some(n);
        self
    }
}

/// One stored PGN (a gzip member), without its bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgnInfo {
    /// Backend-specific handle for reading the bytes (opaque outside the backend).
    pub handle: PgnHandle,
    /// `"<run_id>-<task_id>"`.
    pub run_task: String,
    pub size: u64,
}

/// Where a backend finds a stored PGN's bytes. Opaque: only the backend that made it reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PgnHandle(String);

impl PgnHandle {
    /// For backends: wraps their own key.
    pub(crate) fn new(key: impl Into<String>) -> Self {
        PgnHandle(key.into())
    }

    /// For backends: their own key back.
    pub(crate) fn key(&self) -> &str {
        &self.0
    }
}

/// Where a walk over the finished runs stands: the `last_updated` (its ISO string) and the
/// `_id` of the last run looked at. Runs are walked in (`last_updated`, `_id`) order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct RunPosition {
    pub last_updated: String,
    pub id: String,
}

/// The runs a PGN retention walk looks at, each kept its own number of days (Fishtest's
/// `purge_pgns.py`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PgnClass {
    /// Finished, not deleted, short time control.
    Stc,
    /// Finished, not deleted, long time control: `args.tc` starts with a number from 20 up
    /// (Fishtest's `^([2-9][0-9])|([1-9][0-9][0-9])`).
    Ltc,
    /// Finished and deleted.
    Deleted,
    /// Not finished, not deleted.
    Unfinished,
}

impl PgnClass {
    pub const ALL: [PgnClass; 4] = [
        PgnClass::Stc,
        PgnClass::Ltc,
        PgnClass::Deleted,
        PgnClass::Unfinished,
    ];

    /// The name logs, replies and settings use.
    pub fn name(self) -> &'static str {
        match self {
            PgnClass::Stc => "stc",
            PgnClass::Ltc => "ltc",
            PgnClass::Deleted => "deleted",
            PgnClass::Unfinished => "unfinished",
        }
    }

    /// Whether the class's runs are finished ones.
    pub fn finished(self) -> bool {
        self != PgnClass::Unfinished
    }
}

/// Where PGN retention deletes: the runs of `class` whose `last_updated` is before `cutoff`
/// and, when `since` is set, not before `since` (Fishtest's job looks back that far only).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionWindow {
    pub class: PgnClass,
    pub cutoff: Date,
    pub since: Option<Date>,
}

/// A page of [`Store::expired_pgn_runs`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ExpiredRuns {
    /// The runs of the page that have PGNs, in walk order.
    pub with_pgns: Vec<String>,
    /// How many runs the page looked at.
    pub runs: u64,
    /// The last run of the page (with PGNs or not); `None` when no run was left.
    pub last: Option<RunPosition>,
}

/// What [`Store::pgn_delete_expired`] deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PgnsDeleted {
    /// PGN documents deleted.
    pub count: u64,
    /// Their stored (gzip) sizes, added up.
    pub bytes: u64,
    /// Whether the run has PGNs left (another batch is due).
    pub more: bool,
}

/// One acknowledged change to a run, made durable before the acknowledgement is sent and
/// folded into the run document by the next flush (see `rundb::journal`). A patch maps
/// top-level run fields, or `"tasks.<index>"`, to their new whole values, so applying it twice
/// is the same as applying it once.
#[derive(Debug, Clone, PartialEq)]
pub struct JournalEntry {
    pub seq: u64,
    pub run_id: String,
    pub patch: Doc,
}

/// What went wrong in the store. `is_transient` tells callers whether a retry may help.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// A failure reported by the backend (SQLite, MongoDB). `transient` is the backend's
    /// answer to "would the same call succeed later" (a busy or locked database).
    #[error("{backend}: {message}")]
    Backend {
        backend: &'static str,
        message: String,
        transient: bool,
    },
    #[error("document {collection}/{id} is not valid JSON: {source}")]
    Corrupt {
        collection: &'static str,
        id: String,
        source: serde_json::Error,
    },
    #[error("document has no string `_id`")]
    MissingId,
    #[error("invalid query: {0}")]
    InvalidQuery(String),
    #[error("duplicate key: {0}")]
    Duplicate(String),
    #[error("schema version {found} is newer than this build knows ({known}); upgrade shoal")]
    SchemaTooNew { found: i64, known: i64 },
    #[error("store backend `{0}` is not available in this build")]
    Unsupported(&'static str),
    #[error("store is closed")]
    Closed,
    #[error("i/o: {0}")]
    Io(#[from] std::io::Error),
}

impl StoreError {
    /// True for conditions that go away on their own (a busy or locked database file).
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Backend {
                transient: true,
                ..
            }
        )
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// The blocking storage interface. Implementations are internally synchronised: every
/// method may be called from many pool threads at once.
pub trait Store: Send + Sync + 'static {
    /// The document with this `_id`, if any.
    fn get(&self, coll: Collection, id: &str) -> StoreResult<Option<Doc>>;
    /// Inserts or wholly replaces the document with `doc["_id"]`.
    fn put(&self, coll: Collection, doc: &Doc) -> StoreResult<()>;
    /// Inserts or replaces several documents atomically, in one commit (group commit).
    fn put_many(&self, coll: Collection, docs: &[Doc]) -> StoreResult<()>;
    /// Inserts a new document, giving it a fresh ObjectId-style `_id` if it has none, and
    /// returns the id. Fails with [`StoreError::Duplicate`] if the id or a unique key exists.
    fn insert(&self, coll: Collection, doc: Doc) -> StoreResult<String>;
    /// Deletes by `_id`; true if something was deleted.
    fn delete(&self, coll: Collection, id: &str) -> StoreResult<bool>;
    /// Adds `by` to the numeric top-level `field` (absent: 0) of the document with this `_id`,
    /// atomically in the store (MongoDB's `$inc`, SQLite's `UPDATE … SET`): counters several
    /// instances update at once never lose a count. False when there is no such document.
    fn increment(&self, coll: Collection, id: &str, field: &str, by: i64) -> StoreResult<bool>;
    /// Documents matching the query.
    fn find(&self, coll: Collection, query: &Query) -> StoreResult<Vec<Doc>>;
    /// How many documents match the conditions.
    fn count(&self, coll: Collection, filter: &[Cond]) -> StoreResult<u64>;
    /// Stores one PGN gzip member for `"<run_id>-<task_id>"`. Duplicates are kept.
    fn pgn_put(&self, run_task: &str, gz: &[u8]) -> StoreResult<()>;
    /// The PGNs stored for exactly this `"<run_id>-<task_id>"`, oldest first.
    fn pgn_find(&self, run_task: &str) -> StoreResult<Vec<PgnInfo>>;
    /// Every PGN of a run, in task order.
    fn pgn_list_run(&self, run_id: &str) -> StoreResult<Vec<PgnInfo>>;
    /// Up to `len` bytes of a stored PGN from `offset` (empty at the end), for streaming.
    fn pgn_read(&self, handle: &PgnHandle, offset: u64, len: usize) -> StoreResult<Vec<u8>>;
    /// Stores a PGN carried over from another database under its document id (an ObjectId's
    /// hex form) unless a PGN with that id is stored already; true if it was stored. This is
    /// what makes importing the same dump twice add nothing.
    fn pgn_import(&self, id: &str, run_task: &str, gz: &[u8]) -> StoreResult<bool>;
    /// Up to `limit` stored PGNs after `after` (from the first when `None`), in storage order,
    /// each with its document id: the export's pages.
    fn pgn_scan(
        &self,
        after: Option<&PgnHandle>,
        limit: usize,
    ) -> StoreResult<Vec<(String, PgnInfo)>>;
    /// PGN retention's walk: up to `limit` runs, finished or not as `window`'s class is,
    /// whose `last_updated` is before its cutoff, in (`last_updated`, `_id`) order after
    /// `after` (from the oldest when `None`), and which of them still have PGNs and are of the
    /// class (deleted or not, the time control). Reads the runs' indexed fields, and the class
    /// of those with PGNs only.
    fn expired_pgn_runs(
        &self,
        window: &RetentionWindow,
        after: Option<&RunPosition>,
        limit: usize,
    ) -> StoreResult<ExpiredRuns>;
    /// Deletes a batch of `run_id`'s PGNs (oldest first): at most `limit` of them, and no more
    /// than `max_bytes` of stored bytes unless the first alone is larger; but only if the run
    /// is, when the batch is deleted, of `window`'s class with `last_updated` before its
    /// cutoff (a run revived or changed since the walk keeps its PGNs: nothing is deleted).
    fn pgn_delete_expired(
        &self,
        run_id: &str,
        window: &RetentionWindow,
        limit: usize,
        max_bytes: u64,
    ) -> StoreResult<PgnsDeleted>;
    /// Gives at most `max_pages` free pages of the store's files back to the file system and
    /// returns the bytes given back (0 when there is nothing to give back, or for a backend
    /// that manages its own space).
    fn reclaim_space(&self, max_pages: u32) -> StoreResult<u64>;
    /// Appends journal entries and writes action documents (each with its `_id`; written
    /// again on a retry, never twice) in one commit: the group commit of acknowledged changes
    /// and of the audit records made while a run was locked.
    fn journal_append(&self, entries: &[JournalEntry], actions: &[Doc]) -> StoreResult<()>;
    /// Every journal entry newer than its run's last flush, in `seq` order (for recovery at
    /// start-up), and the highest seq the store has seen in the journal or in a flush.
    /// An entry that reached the store after a flush that already contained it is skipped:
    /// replaying it would roll the run back.
    fn journal_pending(&self) -> StoreResult<(Vec<JournalEntry>, u64)>;
    /// Writes run documents and, in the same commit, records each run's flushed seq and drops
    /// its journal entries up to that seq (they are now part of the document).
    fn flush_runs(&self, runs: &[RunRecord]) -> StoreResult<()>;
    /// Makes everything durable and refuses further calls.
    fn close(&self) -> StoreResult<()>;
    /// Whether Fishtest itself may read and write this database while shoal runs (MongoDB):
    /// then shoal writes only documents Fishtest's schema accepts (docs/migrating-from-fishtest.md,
    /// "Running beside Fishtest").
    fn shared_with_fishtest(&self) -> bool {
        false
    }
}

pub type SharedStore = Arc<dyn Store>;

/// A run document as the write-behind hands it over: serialised once by the caller (straight
/// from its typed run, with no intermediate [`Doc`]), plus the fields the run queries are
/// indexed on, so the store neither re-serialises nor re-parses a document that can be
/// megabytes long (thousands of tasks).
#[derive(Debug, Clone, PartialEq)]
pub struct RunRecord {
    /// The run's `_id`.
    pub id: String,
    /// The whole document as JSON text; it must be a JSON object whose `_id` is `id`.
    pub json: String,
    /// The journal seq the document includes (see [`Store::flush_runs`]).
    pub seq: u64,
    /// `finished`, when it is a boolean.
    pub finished: Option<bool>,
    /// `last_updated` as its ISO string (the `$date`), when it is a date.
    pub last_updated: Option<String>,
    /// `args.username`, when it is a string.
    pub username: Option<String>,
}

impl RunRecord {
    /// The record of an untyped document (recovery, tests, `put` of a run).
    pub fn from_doc(doc: &Doc, seq: u64) -> StoreResult<RunRecord> {
        let id = doc
            .get("_id")
            .and_then(Value::as_str)
            .ok_or(StoreError::MissingId)?
            .to_string();
        let json = serde_json::to_string(doc).map_err(|source| StoreError::Corrupt {
            collection: Collection::Runs.name(),
            id: id.clone(),
            source,
        })?;
        let (finished, last_updated, username) = run_index_fields(doc);
        Ok(RunRecord {
            id,
            json,
            seq,
            finished,
            last_updated,
            username,
        })
    }
}

/// The indexed fields of a run document: `finished`, `last_updated`'s ISO string and
/// `args.username`.
pub fn run_index_fields(doc: &Doc) -> (Option<bool>, Option<String>, Option<String>) {
    let finished = doc.get("finished").and_then(Value::as_bool);
    let last_updated = doc
        .get("last_updated")
        .and_then(|d| d.get("$date"))
        .and_then(Value::as_str)
        .map(str::to_string);
    let username = doc
        .get("args")
        .and_then(|a| a.get("username"))
        .and_then(Value::as_str)
        .map(str::to_string);
    (finished, last_updated, username)
}

/// A fresh ObjectId-style id: 4 bytes of seconds, 5 random bytes, 3 bytes of counter, in hex.
/// Sorted by creation time like MongoDB's, so `_id` order is insertion order.
pub fn new_object_id() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    static PROCESS: std::sync::OnceLock<[u8; 5]> = std::sync::OnceLock::new();
    let process = PROCESS.get_or_init(rand::random);
    let secs = u32::try_from(Utc::now().timestamp()).unwrap_or(u32::MAX);
    let count = COUNTER.fetch_add(1, Ordering::Relaxed) & 0x00ff_ffff;
    let mut bytes = [0u8; 12];
    bytes[..4].copy_from_slice(&secs.to_be_bytes());
    bytes[4..9].copy_from_slice(process);
    bytes[9..].copy_from_slice(&count.to_be_bytes()[1..]);
    hex::encode(bytes)
}

/// A UTC timestamp stored as Extended JSON `{"$date": "<RFC 3339, milliseconds, Z>"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Date(pub DateTime<Utc>);

impl Date {
    pub fn now() -> Self {
        Date(Utc::now())
    }

    /// The stored string form (also what range queries compare against).
    pub fn to_iso(&self) -> String {
        self.0.to_rfc3339_opts(SecondsFormat::Millis, true)
    }

    /// The document value, for building query conditions.
    pub fn to_value(&self) -> Value {
        serde_json::json!({ "$date": self.to_iso() })
    }
}

impl Serialize for Date {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        // Straight to the serializer: run documents hold thousands of dates, and building a
        // `Map` per date was a measurable share of the write-behind flush.
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(1))?;
        m.serialize_entry("$date", &self.to_iso())?;
        m.end()
    }
}

impl<'de> Deserialize<'de> for Date {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::Error;
        // Accept the canonical forms MongoDB tools write too: an ISO string or
        // {"$numberLong": "<ms>"} inside "$date", and a bare ISO string.
        let v = Value::deserialize(d)?;
        let inner = match &v {
            Value::Object(m) => m.get("$date").cloned().unwrap_or(Value::Null),
            other => other.clone(),
        };
        let parsed = match &inner {
            Value::String(s) => DateTime::parse_from_rfc3339(s)
                .map(|t| t.with_timezone(&Utc))
                .map_err(|e| D::Error::custom(format!("bad date {s:?}: {e}"))),
            Value::Number(n) => n
                .as_i64()
                .and_then(DateTime::from_timestamp_millis)
                .ok_or_else(|| D::Error::custom("bad millisecond date")),
            Value::Object(m) => m
                .get("$numberLong")
                .and_then(Value::as_str)
                .and_then(|s| s.parse::<i64>().ok())
                .and_then(DateTime::from_timestamp_millis)
                .ok_or_else(|| D::Error::custom("bad $numberLong date")),
            _ => Err(D::Error::custom("expected an Extended JSON date")),
        }?;
        Ok(Date(parsed))
    }
}

/// Checks a dotted field path: `[A-Za-z0-9_]+` segments, at most 8 deep.
pub fn valid_path(path: &str) -> bool {
    let segments: Vec<&str> = path.split('.').collect();
    segments.len() <= 8
        && segments
            .iter()
            .all(|s| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
}

#[cfg(test)]
mod tests;

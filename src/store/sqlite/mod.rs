//! The embedded store: one SQLite file (bundled SQLite, WAL) in the data directory.
//!
//! Owns: the schema and its versioned migrations, the translation of [`Query`] into SQL over
//! JSON documents, and its connections (one writer, a few readers; WAL lets readers run
//! beside the writer). Each collection is a table `(id TEXT PRIMARY KEY, doc TEXT)` with
//! expression indexes on the fields the server queries; PGNs are blobs streamed with
//! incremental blob I/O.
//! Must not: be used outside the offload pool (every call blocks), or interpret documents
//! beyond the paths named in queries and indexes.
//!
//! Layout: this file holds [`SqliteStore`] (opening, the migrations, the connection pool,
//! the error mapping), the document writes and the [`Store`] impl with the collection
//! methods; `query.rs` translates a [`Query`] into SQL; `pgn.rs` stores and streams PGN
//! blobs (and deletes expired ones); `journal.rs` appends, replays and trims the journal and
//! flushes run records; `space.rs` gives free pages back (incremental vacuum) and converts an
//! older database to it (`shoal vacuum`); `backup.rs` is `shoal backup` (SQLite's online
//! backup). Only this directory names `rusqlite`.
//!
//! Space: a database created by this version has `auto_vacuum = INCREMENTAL`, so the pages a
//! deletion frees (PGN retention) can be given back to the file system in bounded steps
//! ([`Store::reclaim_space`]). A database created before keeps `auto_vacuum = NONE` (changing
//! it rewrites the whole file) until `shoal vacuum` converts it: until then freed pages are
//! reused for new data but the file does not shrink.
//!
//! Files:
//! - `mod.rs`: [`SqliteStore`]: opening, the schema, the [`Store`] trait.
//! - `query.rs`: shoal's queries as SQL.
//! - `journal.rs`: the journal and the run records.
//! - `pgn.rs`: PGN blobs, stored whole and read in chunks.
//! - `space.rs`: the file's free space given back in bounded steps.
//! - `backup.rs`: `shoal backup`, a consistent copy while the server runs.
//! - `tests.rs`: unit tests.

pub mod backup;
mod journal;
mod pgn;
mod query;
pub mod space;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params, params_from_iter};
use serde_json::Value;

use super::{
    Collection, Cond, Doc, ExpiredRuns, JournalEntry, PgnHandle, PgnInfo, PgnsDeleted, Query,
    RetentionWindow, RunPosition, RunRecord, Store, StoreError, StoreResult, new_object_id,
    run_index_fields,
};
use query::{count_sql, select_sql};

/// Schema migrations, applied in order; `PRAGMA user_version` records how many ran.
/// Never edit a released migration: append a new one.
const MIGRATIONS: &[&str] = &[
    // 1: the collections, PGN blobs and the indexes the server's queries use.
    r#"
    CREATE TABLE runs (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE users (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE actions (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE nns (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE workers (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE kvstore (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE pgns (
        handle INTEGER PRIMARY KEY,
        run_task TEXT NOT NULL,
        run_id TEXT NOT NULL,
        task_id INTEGER NOT NULL,
        size INTEGER NOT NULL,
        pgn_zip BLOB NOT NULL
    );
    CREATE INDEX pgns_run_task ON pgns(run_task);
    CREATE INDEX pgns_run ON pgns(run_id, task_id, handle);
    CREATE INDEX runs_finished ON runs(json_extract(doc, '$.finished'),
                                       json_extract(doc, '$.last_updated."$date"'));
    CREATE INDEX runs_user ON runs(json_extract(doc, '$.args.username'),
                                   json_extract(doc, '$.last_updated."$date"'));
    CREATE UNIQUE INDEX users_username ON users(json_extract(doc, '$.username'));
    CREATE INDEX actions_time ON actions(json_extract(doc, '$.time'));
    CREATE INDEX actions_username ON actions(json_extract(doc, '$.username'), id);
    CREATE INDEX actions_action ON actions(json_extract(doc, '$.action'), id);
    CREATE INDEX actions_run ON actions(json_extract(doc, '$.run_id'), id);
    CREATE INDEX nns_name ON nns(json_extract(doc, '$.name'));
    "#,
    // 2: the journal of acknowledged run changes not yet folded into run documents.
    r#"
    CREATE TABLE journal (seq INTEGER PRIMARY KEY, run_id TEXT NOT NULL, patch TEXT NOT NULL);
    CREATE INDEX journal_run ON journal(run_id, seq);
    CREATE TABLE run_seq (run_id TEXT PRIMARY KEY, seq INTEGER NOT NULL) WITHOUT ROWID;
    "#,
    // 3: the run queries' fields become real columns, written from the record the caller
    // already has. Expression indexes made SQLite parse every (megabyte-sized) run document
    // four times per write, plus four times for the old row: most of a flush's cost.
    r#"
    ALTER TABLE runs ADD COLUMN finished INTEGER;
    ALTER TABLE runs ADD COLUMN last_updated TEXT;
    ALTER TABLE runs ADD COLUMN username TEXT;
    DROP INDEX runs_finished;
    DROP INDEX runs_user;
    UPDATE runs SET finished = json_extract(doc, '$.finished'),
                    last_updated = json_extract(doc, '$.last_updated."$date"'),
                    username = json_extract(doc, '$.args.username');
    CREATE INDEX runs_finished ON runs(finished, last_updated);
    CREATE INDEX runs_user ON runs(username, last_updated);
    "#,
    // 4: Fishtest's contributor statistics, kept so a database moves to shoal and back whole;
    // every PGN gets its document id (an ObjectId's hex form: the one it had in Fishtest, or
    // a new one), so importing a dump twice stores each PGN once.
    r#"
    CREATE TABLE user_cache (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE top_month (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    CREATE TABLE deltas (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    ALTER TABLE pgns ADD COLUMN doc_id TEXT;
    UPDATE pgns SET doc_id = lower(hex(randomblob(12))) WHERE doc_id IS NULL;
    CREATE UNIQUE INDEX pgns_doc_id ON pgns(doc_id);
    "#,
    // 5: shoal's own documents move out of Fishtest's collections (so `kvstore` and `actions`
    // hold only what Fishtest's schemas accept, and an export carries nothing of shoal's):
    // every `kvstore` key Fishtest has no use for (store::FISHTEST_KV_KEYS) to
    // `shoal_kvstore`, the action kinds Fishtest does not know (store::SHOAL_ACTION_KINDS)
    // to `shoal_actions`.
    r#"
    CREATE TABLE shoal_kvstore (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    INSERT INTO shoal_kvstore (id, doc) SELECT id, doc FROM kvstore WHERE id NOT IN
        ('books', 'worker_runs', 'legacy_usernames', 'official_master_sha', 'github_api_cache');
    DELETE FROM kvstore WHERE id NOT IN
        ('books', 'worker_runs', 'legacy_usernames', 'official_master_sha', 'github_api_cache');
    CREATE TABLE shoal_actions (id TEXT PRIMARY KEY, doc TEXT NOT NULL) WITHOUT ROWID;
    CREATE INDEX shoal_actions_time ON shoal_actions(json_extract(doc, '$.time'));
    CREATE INDEX shoal_actions_username ON shoal_actions(json_extract(doc, '$.username'), id);
    INSERT INTO shoal_actions (id, doc) SELECT id, doc FROM actions
        WHERE json_extract(doc, '$.action') IN ('api_token', 'password_reset', 'set_limit');
    DELETE FROM actions WHERE json_extract(doc, '$.action') IN ('api_token', 'password_reset', 'set_limit');
    "#,
];

const READERS: usize = 4;

/// The database file's name inside the data directory.
pub const DB_FILE: &str = "shoal.db";

/// The SQLite-backed [`Store`].
pub struct SqliteStore {
    path: PathBuf,
    writer: Mutex<Connection>,
    readers: Vec<Mutex<Connection>>,
    next_reader: AtomicUsize,
    closed: AtomicBool,
}

fn table(coll: Collection) -> &'static str {
    coll.name()
}

/// SQLite's `synchronous` pragma. `normal` (with WAL) survives a killed process; `full` also
/// survives a power cut at the cost of one fsync per commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SqliteSync {
    Normal,
    Full,
}

fn configure(conn: &Connection, sync: SqliteSync) -> rusqlite::Result<()> {
    conn.busy_timeout(Duration::from_secs(5))?;
    conn.pragma_update(None, "journal_mode", "WAL")?;
    conn.pragma_update(
        None,
        "synchronous",
        match sync {
            SqliteSync::Normal => "NORMAL",
            SqliteSync::Full => "FULL",
        },
    )?;
    conn.pragma_update(None, "foreign_keys", "ON")?;
    Ok(())
}

fn observe(op: &'static str, coll: &'static str, started: Instant) {
    metrics::histogram!("shoal_store_op_seconds", "op" => op, "collection" => coll)
        .record(started.elapsed().as_secs_f64());
}

fn map_unique(e: rusqlite::Error, what: &str) -> StoreError {
    if let rusqlite::Error::SqliteFailure(f, _) = &e
        && f.code == rusqlite::ErrorCode::ConstraintViolation
    {
        return StoreError::Duplicate(what.to_string());
    }
    StoreError::from(e)
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        let transient = matches!(
            &e,
            rusqlite::Error::SqliteFailure(f, _)
                if matches!(
                    f.code,
                    rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
                )
        );
        StoreError::Backend {
            backend: "sqlite",
            message: e.to_string(),
            transient,
        }
    }
}

fn doc_id(doc: &Doc) -> StoreResult<&str> {
    doc.get("_id")
        .and_then(Value::as_str)
        .ok_or(StoreError::MissingId)
}

fn parse_doc(coll: Collection, id: &str, text: &str) -> StoreResult<Doc> {
    serde_json::from_str(text).map_err(|source| StoreError::Corrupt {
        collection: coll.name(),
        id: id.to_string(),
        source,
    })
}

/// The database holds password hashes, sessions and token hashes: a new file is created
/// readable by its owner only (0600; SQLite gives its `-wal` and `-shm` files the database's
/// mode), and an existing file (or `-wal`, `-shm`) that others may read is warned about,
/// not changed (the operator may have meant it).
fn owner_only(path: &Path) -> StoreResult<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut create = std::fs::OpenOptions::new();
    create.write(true).create_new(true).mode(0o600);
    match create.open(path) {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(e.into()),
    }
    for suffix in ["", "-wal", "-shm"] {
        let mut file = path.as_os_str().to_owned();
        file.push(suffix);
        let file = PathBuf::from(file);
        if let Ok(meta) = std::fs::metadata(&file)
            && meta.permissions().mode() & 0o077 != 0
        {
            tracing::warn!(
                path = %file.display(),
                mode = format!("{:o}", meta.permissions().mode() & 0o777),
                "the store file is readable by other users (it holds password hashes and \
                 sessions): chmod 600 it"
            );
        }
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating if needed) `<data_dir>/shoal.db`, applies pending migrations. A new
    /// database gets `auto_vacuum = INCREMENTAL` (it must be set before the first table).
    pub fn open(data_dir: &Path, sync: SqliteSync) -> StoreResult<SqliteStore> {
        std::fs::create_dir_all(data_dir)?;
        let path = data_dir.join(DB_FILE);
        owner_only(&path)?;
        let mut writer = Connection::open(&path)?;
        let pages: i64 = writer.pragma_query_value(None, "page_count", |r| r.get(0))?;
        if pages == 0 {
            writer.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
        }
        configure(&writer, sync)?;
        migrate(&mut writer)?;
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let conn = Connection::open_with_flags(
                &path,
                OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
            )?;
            configure(&conn, sync)?;
            conn.pragma_update(None, "query_only", "ON")?;
            readers.push(Mutex::new(conn));
        }
        tracing::info!(path = %path.display(), "sqlite store open");
        Ok(SqliteStore {
            path,
            writer: Mutex::new(writer),
            readers,
            next_reader: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check_open(&self) -> StoreResult<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(StoreError::Closed)
        } else {
            Ok(())
        }
    }

    /// Runs `f` on a reader connection: a free one if any, else waits for one in turn.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> StoreResult<T>) -> StoreResult<T> {
        self.check_open()?;
        let start = self.next_reader.fetch_add(1, Ordering::Relaxed);
        for i in 0..self.readers.len() {
            if let Some(conn) = self.readers[(start + i) % self.readers.len()].try_lock() {
                return f(&conn);
            }
        }
        let conn = self.readers[start % self.readers.len()].lock();
        f(&conn)
    }

    fn write<T>(&self, f: impl FnOnce(&mut Connection) -> StoreResult<T>) -> StoreResult<T> {
        self.check_open()?;
        let mut conn = self.writer.lock();
        f(&mut conn)
    }
}

fn migrate(conn: &mut Connection) -> StoreResult<()> {
    let known = MIGRATIONS.len() as i64;
    let found: i64 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found > known {
        return Err(StoreError::SchemaTooNew { found, known });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as i64)?;
        tx.commit()?;
        tracing::info!(version = i + 1, "applied store migration");
    }
    Ok(())
}

fn upsert(conn: &Connection, coll: Collection, doc: &Doc) -> StoreResult<()> {
    if coll == Collection::Runs {
        return upsert_run(conn, &RunRecord::from_doc(doc, 0)?);
    }
    let id = doc_id(doc)?;
    let text = serde_json::to_string(doc).map_err(|source| StoreError::Corrupt {
        collection: coll.name(),
        id: id.to_string(),
        source,
    })?;
    conn.prepare_cached(&format!(
        "INSERT INTO {} (id, doc) VALUES (?1, ?2) ON CONFLICT(id) DO UPDATE SET doc = excluded.doc",
        table(coll)
    ))?
    .execute(params![id, text])
    .map_err(|e| map_unique(e, id))?;
    Ok(())
}

/// Writes a run document with its indexed columns.
fn upsert_run(conn: &Connection, run: &RunRecord) -> StoreResult<()> {
    conn.prepare_cached(
        "INSERT INTO runs (id, doc, finished, last_updated, username) VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT(id) DO UPDATE SET doc = excluded.doc, finished = excluded.finished,
             last_updated = excluded.last_updated, username = excluded.username",
    )?
    .execute(params![
        run.id,
        run.json,
        run.finished,
        run.last_updated,
        run.username
    ])
    .map_err(|e| map_unique(e, &run.id))?;
    Ok(())
}

impl Store for SqliteStore {
    fn get(&self, coll: Collection, id: &str) -> StoreResult<Option<Doc>> {
        let started = Instant::now();
        let r = self.read(|c| {
            let text: Option<String> = c
                .prepare_cached(&format!("SELECT doc FROM {} WHERE id = ?1", table(coll)))?
                .query_row([id], |r| r.get(0))
                .optional()?;
            text.map(|t| parse_doc(coll, id, &t)).transpose()
        });
        observe("get", coll.name(), started);
        r
    }

    fn put(&self, coll: Collection, doc: &Doc) -> StoreResult<()> {
        let started = Instant::now();
        let r = self.write(|c| upsert(c, coll, doc));
        observe("put", coll.name(), started);
        r
    }

    fn put_many(&self, coll: Collection, docs: &[Doc]) -> StoreResult<()> {
        let started = Instant::now();
        let r = self.write(|c| {
            let tx = c.transaction()?;
            for doc in docs {
                upsert(&tx, coll, doc)?;
            }
            tx.commit()?;
            Ok(())
        });
        observe("put_many", coll.name(), started);
        r
    }

    fn insert(&self, coll: Collection, mut doc: Doc) -> StoreResult<String> {
        let started = Instant::now();
        let id = match doc.get("_id").and_then(Value::as_str) {
            Some(id) => id.to_string(),
            None => {
                let id = new_object_id();
                doc.insert("_id".into(), Value::String(id.clone()));
                id
            }
        };
        let text = serde_json::to_string(&doc).map_err(|source| StoreError::Corrupt {
            collection: coll.name(),
            id: id.clone(),
            source,
        })?;
        let r = self.write(|c| {
            if coll == Collection::Runs {
                let (finished, last_updated, username) = run_index_fields(&doc);
                c.prepare_cached(
                    "INSERT INTO runs (id, doc, finished, last_updated, username)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )?
                .execute(params![id, text, finished, last_updated, username])
            } else {
                c.prepare_cached(&format!(
                    "INSERT INTO {} (id, doc) VALUES (?1, ?2)",
                    table(coll)
                ))?
                .execute(params![id, text])
            }
            .map_err(|e| map_unique(e, &id))?;
            Ok(id.clone())
        });
        observe("insert", coll.name(), started);
        r
    }

    fn increment(&self, coll: Collection, id: &str, field: &str, by: i64) -> StoreResult<bool> {
        let sql = query::increment_sql(coll, field)?;
        self.write(|c| Ok(c.prepare_cached(&sql)?.execute(params![by, id])? > 0))
    }

    fn delete(&self, coll: Collection, id: &str) -> StoreResult<bool> {
        let started = Instant::now();
        let r = self.write(|c| {
            let n = c
                .prepare_cached(&format!("DELETE FROM {} WHERE id = ?1", table(coll)))?
                .execute([id])?;
            Ok(n > 0)
        });
        observe("delete", coll.name(), started);
        r
    }

    fn find(&self, coll: Collection, query: &Query) -> StoreResult<Vec<Doc>> {
        let started = Instant::now();
        let (sql, params) = select_sql(coll, query)?;
        let r = self.read(|c| {
            let mut stmt = c.prepare_cached(&sql)?;
            let rows = stmt.query_map(params_from_iter(params.iter()), |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (id, text) = row?;
                out.push(parse_doc(coll, &id, &text)?);
            }
            Ok(out)
        });
        observe("find", coll.name(), started);
        r
    }

    fn count(&self, coll: Collection, filter: &[Cond]) -> StoreResult<u64> {
        let started = Instant::now();
        let (sql, params) = count_sql(coll, filter)?;
        let r = self.read(|c| {
            let n: i64 = c
                .prepare_cached(&sql)?
                .query_row(params_from_iter(params.iter()), |r| r.get(0))?;
            Ok(u64::try_from(n).unwrap_or(0))
        });
        observe("count", coll.name(), started);
        r
    }

    fn pgn_put(&self, run_task: &str, gz: &[u8]) -> StoreResult<()> {
        pgn::put(self, run_task, gz)
    }

    fn pgn_find(&self, run_task: &str) -> StoreResult<Vec<PgnInfo>> {
        pgn::find(self, run_task)
    }

    fn pgn_list_run(&self, run_id: &str) -> StoreResult<Vec<PgnInfo>> {
        pgn::list_run(self, run_id)
    }

    fn pgn_read(&self, handle: &PgnHandle, offset: u64, len: usize) -> StoreResult<Vec<u8>> {
        pgn::read(self, handle, offset, len)
    }

    fn pgn_import(&self, id: &str, run_task: &str, gz: &[u8]) -> StoreResult<bool> {
        pgn::import(self, id, run_task, gz)
    }

    fn pgn_scan(
        &self,
        after: Option<&PgnHandle>,
        limit: usize,
    ) -> StoreResult<Vec<(String, PgnInfo)>> {
        pgn::scan(self, after, limit)
    }

    fn expired_pgn_runs(
        &self,
        window: &RetentionWindow,
        after: Option<&RunPosition>,
        limit: usize,
    ) -> StoreResult<ExpiredRuns> {
        pgn::expired_runs(self, window, after, limit)
    }

    fn pgn_delete_expired(
        &self,
        run_id: &str,
        window: &RetentionWindow,
        limit: usize,
        max_bytes: u64,
    ) -> StoreResult<PgnsDeleted> {
        pgn::delete_expired(self, run_id, window, limit, max_bytes)
    }

    fn reclaim_space(&self, max_pages: u32) -> StoreResult<u64> {
        space::reclaim(self, max_pages)
    }

    fn journal_append(&self, entries: &[JournalEntry], actions: &[Doc]) -> StoreResult<()> {
        journal::append(self, entries, actions)
    }

    fn journal_pending(&self) -> StoreResult<(Vec<JournalEntry>, u64)> {
        journal::pending(self)
    }

    fn flush_runs(&self, runs: &[RunRecord]) -> StoreResult<()> {
        journal::flush_runs(self, runs)
    }

    fn close(&self) -> StoreResult<()> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Wait for the writer (an in-flight write finishes first), then fold the WAL into the
        // main file so the database is one self-contained file at rest.
        let conn = self.writer.lock();
        conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
        tracing::info!(path = %self.path.display(), "sqlite store closed");
        Ok(())
    }
}

#[cfg(test)]
mod tests;

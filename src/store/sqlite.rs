//! The embedded store: one SQLite file (bundled SQLite, WAL) in the data directory.
//!
//! Owns: the schema and its versioned migrations, the translation of [`Query`] into SQL over
//! JSON documents, and its connections (one writer, a few readers; WAL lets readers run
//! beside the writer). Each collection is a table `(id TEXT PRIMARY KEY, doc TEXT)` with
//! expression indexes on the fields the server queries; PGNs are blobs streamed with
//! incremental blob I/O.
//! Must not: be used outside the offload pool (every call blocks), or interpret documents
//! beyond the paths named in queries and indexes.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rusqlite::types::Value as SqlValue;
use rusqlite::{Connection, OpenFlags, OptionalExtension, params, params_from_iter};
use serde_json::Value;

use super::{
    Collection, Cond, Doc, JournalEntry, Order, PgnHandle, PgnInfo, Query, RunRecord, Store,
    StoreError, StoreResult, new_object_id, run_index_fields, valid_path,
};
use crate::config::SqliteSync;

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
];

const READERS: usize = 4;

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

/// The SQL expression for a field path (literal, so SQLite can match expression indexes).
/// Dates are compared on their ISO string inside `$date`. The run fields that have their own
/// columns (migration 3) are read from them: `finished` (0/1), `last_updated` (ISO string,
/// meaningful with date values and for sorting), `args.username`.
fn field_expr(coll: Collection, path: &str, value_is_date: bool) -> StoreResult<String> {
    if !valid_path(path) {
        return Err(StoreError::InvalidQuery(format!("bad field path {path:?}")));
    }
    if path == "_id" {
        return Ok("id".to_string());
    }
    if coll == Collection::Runs {
        match path {
            "finished" => return Ok("finished".to_string()),
            "last_updated" => return Ok("last_updated".to_string()),
            "args.username" => return Ok("username".to_string()),
            _ => {}
        }
    }
    let suffix = if value_is_date { ".\"$date\"" } else { "" };
    Ok(format!("json_extract(doc, '$.{path}{suffix}')"))
}

/// A JSON scalar as an SQL parameter, and whether it was a `{"$date": ...}`.
fn sql_param(v: &Value) -> StoreResult<(SqlValue, bool)> {
    Ok(match v {
        Value::Bool(b) => (SqlValue::Integer(i64::from(*b)), false),
        Value::Number(n) => match n.as_i64() {
            Some(i) => (SqlValue::Integer(i), false),
            None => (SqlValue::Real(n.as_f64().unwrap_or(f64::NAN)), false),
        },
        Value::String(s) => (SqlValue::Text(s.clone()), false),
        Value::Object(m) if m.len() == 1 && m.get("$date").is_some_and(Value::is_string) => (
            SqlValue::Text(
                m.get("$date")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
            ),
            true,
        ),
        Value::Null => (SqlValue::Null, false),
        other => {
            return Err(StoreError::InvalidQuery(format!(
                "cannot compare with {other}"
            )));
        }
    })
}

/// `WHERE` clause and parameters for a filter.
fn where_clause(coll: Collection, filter: &[Cond]) -> StoreResult<(String, Vec<SqlValue>)> {
    let mut parts = Vec::new();
    let mut params = Vec::new();
    for cond in filter {
        let (path, op, value) = match cond {
            Cond::Eq(p, v) => (p, "=", v),
            Cond::Ne(p, v) => (p, "!=", v),
            Cond::Gt(p, v) => (p, ">", v),
            Cond::Gte(p, v) => (p, ">=", v),
            Cond::Lt(p, v) => (p, "<", v),
            Cond::Lte(p, v) => (p, "<=", v),
            Cond::In(p, values) => {
                let mut marks = Vec::new();
                let mut is_date = false;
                for v in values {
                    let (param, d) = sql_param(v)?;
                    is_date |= d;
                    params.push(param);
                    marks.push("?");
                }
                let expr = field_expr(coll, p, is_date)?;
                if marks.is_empty() {
                    parts.push("0".to_string());
                } else {
                    parts.push(format!("{expr} IN ({})", marks.join(", ")));
                }
                continue;
            }
            Cond::Exists(p, exists) => {
                if !valid_path(p) {
                    return Err(StoreError::InvalidQuery(format!("bad field path {p:?}")));
                }
                let not = if *exists { "NOT " } else { "" };
                parts.push(format!("json_type(doc, '$.{p}') IS {not}NULL"));
                continue;
            }
        };
        let (param, is_date) = sql_param(value)?;
        let expr = field_expr(coll, path, is_date)?;
        match (&param, op) {
            (SqlValue::Null, "=") => parts.push(format!("{expr} IS NULL")),
            (SqlValue::Null, "!=") => parts.push(format!("{expr} IS NOT NULL")),
            (SqlValue::Null, _) => {
                return Err(StoreError::InvalidQuery(format!(
                    "cannot order-compare {path} with null"
                )));
            }
            // Like MongoDB's $ne, a missing field is "not equal".
            (_, "!=") => {
                parts.push(format!("({expr} IS NULL OR {expr} != ?)"));
                params.push(param);
            }
            _ => {
                parts.push(format!("{expr} {op} ?"));
                params.push(param);
            }
        }
    }
    if parts.is_empty() {
        Ok((String::new(), params))
    } else {
        Ok((format!(" WHERE {}", parts.join(" AND ")), params))
    }
}

impl SqliteStore {
    /// Opens (creating if needed) `<data_dir>/shoal.db`, applies pending migrations.
    pub fn open(data_dir: &Path, sync: SqliteSync) -> StoreResult<SqliteStore> {
        std::fs::create_dir_all(data_dir)?;
        let path = data_dir.join("shoal.db");
        let mut writer = Connection::open(&path)?;
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
        let (clause, mut params) = where_clause(coll, &query.filter)?;
        let mut sql = format!("SELECT id, doc FROM {}{clause}", table(coll));
        if !query.sort.is_empty() {
            let mut keys = Vec::new();
            for (path, order) in &query.sort {
                let dir = match order {
                    Order::Asc => "ASC",
                    Order::Desc => "DESC",
                };
                keys.push(format!("{} {dir}", field_expr(coll, path, false)?));
            }
            sql.push_str(&format!(" ORDER BY {}", keys.join(", ")));
        }
        if query.limit.is_some() || query.skip > 0 {
            sql.push_str(" LIMIT ? OFFSET ?");
            let limit = query
                .limit
                .map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX));
            params.push(SqlValue::Integer(limit));
            params.push(SqlValue::Integer(
                i64::try_from(query.skip).unwrap_or(i64::MAX),
            ));
        }
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
        let (clause, params) = where_clause(coll, filter)?;
        let sql = format!("SELECT COUNT(*) FROM {}{clause}", table(coll));
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
        let started = Instant::now();
        let (run_id, task_id) = match run_task.rsplit_once('-') {
            Some((run, task)) => (run, task.parse::<i64>().unwrap_or(-1)),
            None => (run_task, -1),
        };
        let r = self.write(|c| {
            c.prepare_cached(
                "INSERT INTO pgns (run_task, run_id, task_id, size, pgn_zip) VALUES (?1, ?2, ?3, ?4, ?5)",
            )?
            .execute(params![run_task, run_id, task_id, gz.len() as i64, gz])?;
            Ok(())
        });
        observe("pgn_put", "pgns", started);
        r
    }

    fn pgn_find(&self, run_task: &str) -> StoreResult<Vec<PgnInfo>> {
        let started = Instant::now();
        let r = self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT handle, run_task, size FROM pgns WHERE run_task = ?1 ORDER BY handle",
            )?;
            let rows = stmt.query_map([run_task], pgn_info)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        });
        observe("pgn_find", "pgns", started);
        r
    }

    fn pgn_list_run(&self, run_id: &str) -> StoreResult<Vec<PgnInfo>> {
        let started = Instant::now();
        let r = self.read(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT handle, run_task, size FROM pgns WHERE run_id = ?1 ORDER BY task_id, handle",
            )?;
            let rows = stmt.query_map([run_id], pgn_info)?;
            Ok(rows.collect::<Result<Vec<_>, _>>()?)
        });
        observe("pgn_list_run", "pgns", started);
        r
    }

    fn pgn_read(&self, handle: &PgnHandle, offset: u64, len: usize) -> StoreResult<Vec<u8>> {
        let started = Instant::now();
        let handle: i64 = handle
            .key()
            .parse()
            .map_err(|_| StoreError::InvalidQuery(format!("not a PGN handle: {handle:?}")))?;
        let r = self.read(|c| {
            let blob = c.blob_open(rusqlite::MAIN_DB, "pgns", "pgn_zip", handle, true)?;
            let size = blob.len() as u64;
            if offset >= size {
                return Ok(Vec::new());
            }
            let n = len.min((size - offset) as usize);
            let mut buf = vec![0u8; n];
            blob.read_at_exact(&mut buf, offset as usize)?;
            Ok(buf)
        });
        observe("pgn_read", "pgns", started);
        r
    }

    fn journal_append(&self, entries: &[JournalEntry], actions: &[Doc]) -> StoreResult<()> {
        let started = Instant::now();
        let r = self.write(|c| {
            let tx = c.transaction()?;
            {
                let mut stmt = tx.prepare_cached(
                    "INSERT OR REPLACE INTO journal (seq, run_id, patch) VALUES (?1, ?2, ?3)",
                )?;
                for e in entries {
                    let text =
                        serde_json::to_string(&e.patch).map_err(|source| StoreError::Corrupt {
                            collection: "journal",
                            id: e.seq.to_string(),
                            source,
                        })?;
                    stmt.execute(params![e.seq as i64, e.run_id, text])?;
                }
            }
            for doc in actions {
                upsert(&tx, Collection::Actions, doc)?;
            }
            tx.commit()?;
            Ok(())
        });
        observe("journal_append", "journal", started);
        r
    }

    fn journal_pending(&self) -> StoreResult<(Vec<JournalEntry>, u64)> {
        self.read(|c| {
            let max: i64 = c.query_row(
                "SELECT MAX(COALESCE((SELECT MAX(seq) FROM journal), 0),
                            COALESCE((SELECT MAX(seq) FROM run_seq), 0))",
                [],
                |r| r.get(0),
            )?;
            let mut stmt = c.prepare(
                "SELECT j.seq, j.run_id, j.patch FROM journal j
                 LEFT JOIN run_seq r ON r.run_id = j.run_id
                 WHERE r.seq IS NULL OR j.seq > r.seq
                 ORDER BY j.seq",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, String>(2)?,
                ))
            })?;
            let mut out = Vec::new();
            for row in rows {
                let (seq, run_id, text) = row?;
                let patch = parse_doc(Collection::Runs, &run_id, &text)?;
                out.push(JournalEntry {
                    seq: u64::try_from(seq).unwrap_or(0),
                    run_id,
                    patch,
                });
            }
            Ok((out, u64::try_from(max).unwrap_or(0)))
        })
    }

    fn flush_runs(&self, runs: &[RunRecord]) -> StoreResult<()> {
        let started = Instant::now();
        let r = self.write(|c| {
            let tx = c.transaction()?;
            for run in runs {
                upsert_run(&tx, run)?;
                let seq = i64::try_from(run.seq).unwrap_or(i64::MAX);
                tx.prepare_cached("DELETE FROM journal WHERE run_id = ?1 AND seq <= ?2")?
                    .execute(params![run.id, seq])?;
                tx.prepare_cached(
                    "INSERT INTO run_seq (run_id, seq) VALUES (?1, ?2)
                     ON CONFLICT(run_id) DO UPDATE SET seq = MAX(seq, excluded.seq)",
                )?
                .execute(params![run.id, seq])?;
            }
            tx.commit()?;
            Ok(())
        });
        observe("flush_runs", "runs", started);
        r
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

fn pgn_info(r: &rusqlite::Row<'_>) -> rusqlite::Result<PgnInfo> {
    Ok(PgnInfo {
        handle: PgnHandle::new(r.get::<_, i64>(0)?.to_string()),
        run_task: r.get(1)?,
        size: u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::{Date, Store};
    use serde_json::json;

    fn store() -> (tempfile::TempDir, SqliteStore) {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = SqliteStore::open(dir.path(), SqliteSync::Normal).expect("open");
        (dir, s)
    }

    fn doc(v: Value) -> Doc {
        match v {
            Value::Object(m) => m,
            _ => panic!("not an object"),
        }
    }

    #[test]
    fn put_get_replace_delete() {
        let (_d, s) = store();
        let d = doc(json!({"_id": "k", "value": 1}));
        s.put(Collection::Kvstore, &d).expect("put");
        assert_eq!(s.get(Collection::Kvstore, "k").expect("get"), Some(d));
        s.put(Collection::Kvstore, &doc(json!({"_id": "k", "value": 2})))
            .expect("replace");
        let got = s.get(Collection::Kvstore, "k").expect("get").expect("some");
        assert_eq!(got["value"], json!(2));
        assert!(s.delete(Collection::Kvstore, "k").expect("delete"));
        assert!(!s.delete(Collection::Kvstore, "k").expect("delete again"));
        assert_eq!(s.get(Collection::Kvstore, "k").expect("get"), None);
    }

    #[test]
    fn insert_assigns_ids_and_refuses_duplicates() {
        let (_d, s) = store();
        let id = s
            .insert(Collection::Users, doc(json!({"username": "alice"})))
            .expect("insert");
        assert_eq!(id.len(), 24);
        let e = s
            .insert(Collection::Users, doc(json!({"username": "alice"})))
            .expect_err("unique username");
        assert!(matches!(e, StoreError::Duplicate(_)), "{e}");
        let e = s
            .insert(
                Collection::Users,
                doc(json!({"_id": id, "username": "bob"})),
            )
            .expect_err("unique id");
        assert!(matches!(e, StoreError::Duplicate(_)), "{e}");
    }

    #[test]
    fn queries_filter_sort_and_page() {
        let (_d, s) = store();
        let base = chrono::Utc::now();
        let mut docs = Vec::new();
        for i in 0..10i64 {
            let when = Date(base + chrono::Duration::seconds(i));
            docs.push(doc(json!({
                "_id": format!("{i:024}"),
                "finished": i % 2 == 0,
                "last_updated": when,
                "args": {"username": if i < 5 { "alice" } else { "bob" }},
                "cores": i,
            })));
        }
        s.put_many(Collection::Runs, &docs).expect("put_many");
        let q = Query::new()
            .with(Cond::Eq("finished".into(), json!(false)))
            .sort("last_updated", Order::Desc)
            .limit(3);
        let ids: Vec<_> = s
            .find(Collection::Runs, &q)
            .expect("find")
            .iter()
            .map(|d| d["cores"].as_i64().unwrap_or(-1))
            .collect();
        assert_eq!(ids, vec![9, 7, 5]);
        let cutoff = Date(base + chrono::Duration::seconds(6)).to_value();
        let n = s
            .count(
                Collection::Runs,
                &[
                    Cond::Gte("last_updated".into(), cutoff),
                    Cond::Eq("args.username".into(), json!("bob")),
                ],
            )
            .expect("count");
        assert_eq!(n, 4);
        let n = s
            .count(
                Collection::Runs,
                &[Cond::In(
                    "cores".into(),
                    vec![json!(1), json!(2), json!(30)],
                )],
            )
            .expect("count");
        assert_eq!(n, 2);
        let page = s
            .find(
                Collection::Runs,
                &Query::new().sort("cores", Order::Asc).skip(8),
            )
            .expect("page");
        assert_eq!(page.len(), 2);
        assert_eq!(
            s.count(Collection::Runs, &[Cond::Exists("nope".into(), true)])
                .expect("count"),
            0
        );
        assert_eq!(
            s.count(Collection::Runs, &[Cond::Ne("nope".into(), json!(1))])
                .expect("count"),
            10
        );
    }

    #[test]
    fn hostile_paths_and_values_are_refused() {
        let (_d, s) = store();
        let e = s
            .find(
                Collection::Runs,
                &Query::new().with(Cond::Eq("x') OR 1=1 --".into(), json!(1))),
            )
            .expect_err("refused");
        assert!(matches!(e, StoreError::InvalidQuery(_)));
        let e = s
            .count(Collection::Runs, &[Cond::Eq("a".into(), json!([1]))])
            .expect_err("refused");
        assert!(matches!(e, StoreError::InvalidQuery(_)));
    }

    #[test]
    fn pgns_stream_in_chunks_and_list_in_task_order() {
        let (_d, s) = store();
        let big: Vec<u8> = (0..100_000u32).map(|i| (i % 251) as u8).collect();
        s.pgn_put("abc-2", b"two").expect("put");
        s.pgn_put("abc-10", &big).expect("put");
        s.pgn_put("abc-1", b"one").expect("put");
        s.pgn_put("abd-0", b"other").expect("put");
        let list: Vec<_> = s
            .pgn_list_run("abc")
            .expect("list")
            .into_iter()
            .map(|p| p.run_task)
            .collect();
        assert_eq!(list, vec!["abc-1", "abc-2", "abc-10"]);
        let info = &s.pgn_find("abc-10").expect("find")[0];
        assert_eq!(info.size, 100_000);
        let mut out = Vec::new();
        loop {
            let chunk = s
                .pgn_read(&info.handle, out.len() as u64, 4096)
                .expect("read");
            if chunk.is_empty() {
                break;
            }
            out.extend(chunk);
        }
        assert_eq!(out, big);
    }

    #[test]
    fn reopen_keeps_data_and_schema_version() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let s = SqliteStore::open(dir.path(), SqliteSync::Full).expect("open");
            s.put(Collection::Kvstore, &doc(json!({"_id": "a", "value": 1})))
                .expect("put");
            s.close().expect("close");
            assert!(matches!(
                s.get(Collection::Kvstore, "a"),
                Err(StoreError::Closed)
            ));
        }
        let s = SqliteStore::open(dir.path(), SqliteSync::Normal).expect("reopen");
        assert!(s.get(Collection::Kvstore, "a").expect("get").is_some());
        let v: i64 = s
            .writer
            .lock()
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .expect("pragma");
        assert_eq!(v, MIGRATIONS.len() as i64);
    }

    #[test]
    fn journal_append_flush_and_trim() {
        let (_d, s) = store();
        let entry = |seq: u64, run: &str| JournalEntry {
            seq,
            run_id: run.into(),
            patch: doc(json!({"workers": seq})),
        };
        s.journal_append(&[entry(1, "a"), entry(2, "b"), entry(3, "a")], &[])
            .expect("append");
        assert_eq!(s.journal_pending().expect("all").0.len(), 3);
        s.flush_runs(&[
            RunRecord::from_doc(&doc(json!({"_id": "a", "workers": 3})), 3).expect("record"),
        ])
        .expect("flush");
        // A late entry for "a" (seq 1 <= its flushed seq 3, written after the flush) is stored
        // but never replayed.
        s.journal_append(&[entry(1, "a"), entry(5, "a")], &[])
            .expect("late");
        let (left, max) = s.journal_pending().expect("pending");
        let left: Vec<(u64, String)> = left.iter().map(|e| (e.seq, e.run_id.clone())).collect();
        assert_eq!(left, vec![(2, "b".to_string()), (5, "a".to_string())]);
        assert_eq!(max, 5);
        assert!(s.get(Collection::Runs, "a").expect("get").is_some());
    }

    #[test]
    fn newer_schema_is_refused() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            let c = Connection::open(dir.path().join("shoal.db")).expect("open");
            c.pragma_update(None, "user_version", 999).expect("pragma");
        }
        let e = SqliteStore::open(dir.path(), SqliteSync::Normal)
            .err()
            .expect("refused");
        assert!(matches!(e, StoreError::SchemaTooNew { found: 999, .. }));
    }

    #[test]
    fn corrupt_document_is_a_typed_error() {
        let (_d, s) = store();
        s.writer
            .lock()
            .execute(
                "INSERT INTO kvstore (id, doc) VALUES ('x', '{not json')",
                [],
            )
            .expect("raw insert");
        assert!(matches!(
            s.get(Collection::Kvstore, "x"),
            Err(StoreError::Corrupt { .. })
        ));
    }
}

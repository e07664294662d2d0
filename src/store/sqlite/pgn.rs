//! PGN blobs: a finished task's gzipped PGN stored whole (`pgns` table, keyed by
//! `<run_id>-<task_id>`), listed per task or per run in task order, and read back in chunks
//! with incremental blob I/O so a large file is never loaded at once. Each PGN has a
//! document id (`doc_id`, an ObjectId's hex form) so a Fishtest database's `pgns` move in and
//! out unchanged. PGN retention's two steps: the walk over one class's runs that are old
//! enough (`expired_runs`, on a reader) and the deletion of a bounded batch of one run's PGNs
//! (`delete_expired`, one short write transaction that checks the run again).
//!
//! Must not: decompress or parse the PGNs; keep a blob open between calls; delete a PGN of a
//! run that is not, inside the deleting transaction, of the class and old enough.

use std::time::Instant;

use rusqlite::{OptionalExtension, TransactionBehavior, params};

use super::{SqliteStore, observe};
use crate::store::{
    Date, ExpiredRuns, PgnClass, PgnHandle, PgnInfo, PgnsDeleted, RetentionWindow, RunPosition,
    StoreError, StoreResult, new_object_id,
};

/// `"<run_id>-<task_id>"` split; a malformed name keeps task id -1 (listed first).
fn split(run_task: &str) -> (&str, i64) {
    match run_task.rsplit_once('-') {
        Some((run, task)) => (run, task.parse::<i64>().unwrap_or(-1)),
        None => (run_task, -1),
    }
}

/// `Store::pgn_put`.
pub(super) fn put(store: &SqliteStore, run_task: &str, gz: &[u8]) -> StoreResult<()> {
    let started = Instant::now();
    let (run_id, task_id) = split(run_task);
    let oid = new_object_id();
    let r = store.write(|c| {
        c.prepare_cached(
            "INSERT INTO pgns (run_task, run_id, task_id, size, pgn_zip, doc_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?
        .execute(params![run_task, run_id, task_id, gz.len() as i64, gz, oid])?;
        Ok(())
    });
    observe("pgn_put", "pgns", started);
    r
}

/// `Store::pgn_import`.
pub(super) fn import(
    store: &SqliteStore,
    id: &str,
    run_task: &str,
    gz: &[u8],
) -> StoreResult<bool> {
    let started = Instant::now();
    let (run_id, task_id) = split(run_task);
    let r = store.write(|c| {
        let n = c
            .prepare_cached(
                "INSERT INTO pgns (run_task, run_id, task_id, size, pgn_zip, doc_id)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT(doc_id) DO NOTHING",
            )?
            .execute(params![run_task, run_id, task_id, gz.len() as i64, gz, id])?;
        Ok(n == 1)
    });
    observe("pgn_import", "pgns", started);
    r
}

/// `Store::pgn_scan`.
pub(super) fn scan(
    store: &SqliteStore,
    after: Option<&PgnHandle>,
    limit: usize,
) -> StoreResult<Vec<(String, PgnInfo)>> {
    let started = Instant::now();
    let after: i64 = match after {
        None => 0,
        Some(h) => h
            .key()
            .parse()
            .map_err(|_| StoreError::InvalidQuery(format!("not a PGN handle: {h:?}")))?,
    };
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let r = store.read(|c| {
        let mut stmt = c.prepare_cached(
            "SELECT handle, run_task, size, doc_id FROM pgns WHERE handle > ?1 ORDER BY handle LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![after, limit], |r| Ok((r.get(3)?, pgn_info(r)?)))?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    });
    observe("pgn_scan", "pgns", started);
    r
}

/// `Store::pgn_find`.
pub(super) fn find(store: &SqliteStore, run_task: &str) -> StoreResult<Vec<PgnInfo>> {
    let started = Instant::now();
    let r = store.read(|c| {
        let mut stmt = c.prepare_cached(
            "SELECT handle, run_task, size FROM pgns WHERE run_task = ?1 ORDER BY handle",
        )?;
        let rows = stmt.query_map([run_task], pgn_info)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    });
    observe("pgn_find", "pgns", started);
    r
}

/// `Store::pgn_list_run`.
pub(super) fn list_run(store: &SqliteStore, run_id: &str) -> StoreResult<Vec<PgnInfo>> {
    let started = Instant::now();
    let r = store.read(|c| {
        let mut stmt = c.prepare_cached(
            "SELECT handle, run_task, size FROM pgns WHERE run_id = ?1 ORDER BY task_id, handle",
        )?;
        let rows = stmt.query_map([run_id], pgn_info)?;
        Ok(rows.collect::<Result<Vec<_>, _>>()?)
    });
    observe("pgn_list_run", "pgns", started);
    r
}

/// `Store::pgn_read`.
pub(super) fn read(
    store: &SqliteStore,
    handle: &PgnHandle,
    offset: u64,
    len: usize,
) -> StoreResult<Vec<u8>> {
    let started = Instant::now();
    let handle: i64 = handle
        .key()
        .parse()
        .map_err(|_| StoreError::InvalidQuery(format!("not a PGN handle: {handle:?}")))?;
    let r = store.read(|c| {
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

/// The condition on a `runs` row that its run is of `class` (besides finished or not): read
/// from the document, so evaluated only for runs that have PGNs.
fn class_sql(class: PgnClass) -> &'static str {
    // Fishtest's LTC test on `args.tc`: `^([2-9][0-9])|([1-9][0-9][0-9])`.
    match class {
        PgnClass::Stc => {
            "coalesce(json_extract(doc, '$.deleted'), 0) = 0
             AND NOT (coalesce(json_extract(doc, '$.args.tc'), '') GLOB '[2-9][0-9]*'
                      OR coalesce(json_extract(doc, '$.args.tc'), '') GLOB '[1-9][0-9][0-9]*')"
        }
        PgnClass::Ltc => {
            "coalesce(json_extract(doc, '$.deleted'), 0) = 0
             AND (coalesce(json_extract(doc, '$.args.tc'), '') GLOB '[2-9][0-9]*'
                  OR coalesce(json_extract(doc, '$.args.tc'), '') GLOB '[1-9][0-9][0-9]*')"
        }
        PgnClass::Deleted => "coalesce(json_extract(doc, '$.deleted'), 0) = 1",
        PgnClass::Unfinished => "coalesce(json_extract(doc, '$.deleted'), 0) = 0",
    }
}

/// `Store::expired_pgn_runs`: an index range of `runs_finished` (finished, last_updated, id),
/// with one `pgns_run` probe per run, and the class read from the documents of the runs that
/// have PGNs.
pub(super) fn expired_runs(
    store: &SqliteStore,
    window: &RetentionWindow,
    after: Option<&RunPosition>,
    limit: usize,
) -> StoreResult<ExpiredRuns> {
    let started = Instant::now();
    let (after_updated, after_id) = after.map_or(("", ""), |p| (&*p.last_updated, &*p.id));
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let sql = format!(
        "SELECT id, last_updated,
                CASE WHEN EXISTS (SELECT 1 FROM pgns WHERE pgns.run_id = runs.id)
                     THEN ({}) ELSE 0 END
         FROM runs
         WHERE finished = ?5 AND last_updated < ?1 AND (last_updated, id) > (?2, ?3)
               AND (?6 IS NULL OR last_updated >= ?6)
         ORDER BY last_updated, id LIMIT ?4",
        class_sql(window.class)
    );
    let r = store.read(|c| {
        let mut stmt = c.prepare_cached(&sql)?;
        let rows = stmt.query_map(
            params![
                window.cutoff.to_iso(),
                after_updated,
                after_id,
                limit,
                window.class.finished(),
                window.since.as_ref().map(Date::to_iso)
            ],
            |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, String>(1)?,
                    r.get::<_, bool>(2)?,
                ))
            },
        )?;
        let mut page = ExpiredRuns::default();
        for row in rows {
            let (id, last_updated, has_pgns) = row?;
            if has_pgns {
                page.with_pgns.push(id.clone());
            }
            page.runs = page.runs.saturating_add(1);
            page.last = Some(RunPosition { last_updated, id });
        }
        Ok(page)
    });
    observe("expired_pgn_runs", "pgns", started);
    r
}

/// `Store::pgn_delete_expired`: one IMMEDIATE transaction (the run checked, the batch chosen
/// and deleted), so a run revived or changed between the walk and the deletion keeps its
/// PGNs.
pub(super) fn delete_expired(
    store: &SqliteStore,
    run_id: &str,
    window: &RetentionWindow,
    limit: usize,
    max_bytes: u64,
) -> StoreResult<PgnsDeleted> {
    let started = Instant::now();
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let check = format!(
        "SELECT 1 FROM runs WHERE id = ?1 AND finished = ?3 AND last_updated < ?2
                AND (?4 IS NULL OR last_updated >= ?4) AND ({})",
        class_sql(window.class)
    );
    let r = store.write(|c| {
        let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let expired: Option<i64> = tx
            .prepare_cached(&check)?
            .query_row(
                params![
                    run_id,
                    window.cutoff.to_iso(),
                    window.class.finished(),
                    window.since.as_ref().map(Date::to_iso)
                ],
                |r| r.get(0),
            )
            .optional()?;
        if expired.is_none() {
            return Ok(PgnsDeleted::default());
        }
        let batch: Vec<(i64, u64)> = {
            let mut stmt = tx.prepare_cached(
                "SELECT handle, size FROM pgns WHERE run_id = ?1 ORDER BY handle LIMIT ?2",
            )?;
            let rows = stmt.query_map(params![run_id, limit], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))
            })?;
            let mut batch = Vec::new();
            let mut bytes = 0u64;
            for row in rows {
                let (handle, size) = row?;
                let size = u64::try_from(size).unwrap_or(0);
                let total = bytes.saturating_add(size);
                if !batch.is_empty() && total > max_bytes {
                    break;
                }
                bytes = total;
                batch.push((handle, size));
            }
            batch
        };
        let mut done = PgnsDeleted::default();
        {
            let mut delete = tx.prepare_cached("DELETE FROM pgns WHERE handle = ?1")?;
            for (handle, size) in &batch {
                if delete.execute([handle])? == 1 {
                    done.count = done.count.saturating_add(1);
                    done.bytes = done.bytes.saturating_add(*size);
                }
            }
        }
        done.more = tx
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM pgns WHERE run_id = ?1)")?
            .query_row([run_id], |r| r.get(0))?;
        tx.commit()?;
        Ok(done)
    });
    observe("pgn_delete_expired", "pgns", started);
    r
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
    use crate::store::Store;
    use crate::store::sqlite::tests::store;

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
    fn imported_pgns_keep_their_id_and_are_stored_once() {
        let (_d, s) = store();
        s.pgn_put("abc-0", b"zero").expect("put");
        let id = "6a8b960a22dfea1c95740963";
        assert!(s.pgn_import(id, "abc-1", b"one").expect("import"));
        assert!(!s.pgn_import(id, "abc-1", b"one").expect("again"));
        assert_eq!(s.pgn_find("abc-1").expect("find").len(), 1);
        let first = s.pgn_scan(None, 1).expect("scan");
        assert_eq!(first.len(), 1);
        assert_eq!(first[0].0.len(), 24);
        let rest = s.pgn_scan(Some(&first[0].1.handle), 10).expect("scan");
        assert_eq!(rest.len(), 1);
        assert_eq!(rest[0].0, id);
        assert_eq!(rest[0].1.run_task, "abc-1");
    }
}

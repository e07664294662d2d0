//! PGN blobs: a finished task's gzipped PGN stored whole (`pgns` table, keyed by
//! `<run_id>-<task_id>`), listed per task or per run in task order, and read back in chunks
//! with incremental blob I/O so a large file is never loaded at once. Each PGN has a
//! document id (`doc_id`, an ObjectId's hex form) so a Fishtest database's `pgns` move in and
//! out unchanged.
//!
//! Must not: decompress or parse the PGNs; keep a blob open between calls.

use std::time::Instant;

use rusqlite::params;

use super::{SqliteStore, observe};
use crate::store::{PgnHandle, PgnInfo, StoreError, StoreResult, new_object_id};

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

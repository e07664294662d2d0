//! PGN blobs: a finished task's gzipped PGN stored whole (`pgns` table, keyed by
//! `<run_id>-<task_id>`), listed per task or per run in task order, and read back in chunks
//! with incremental blob I/O so a large file is never loaded at once.
//!
//! Must not: decompress or parse the PGNs; keep a blob open between calls.

use std::time::Instant;

use rusqlite::params;

use super::{SqliteStore, observe};
use crate::store::{PgnHandle, PgnInfo, StoreError, StoreResult};

/// `Store::pgn_put`.
pub(super) fn put(store: &SqliteStore, run_task: &str, gz: &[u8]) -> StoreResult<()> {
    let started = Instant::now();
    let (run_id, task_id) = match run_task.rsplit_once('-') {
        Some((run, task)) => (run, task.parse::<i64>().unwrap_or(-1)),
        None => (run_task, -1),
    };
    let r = store.write(|c| {
        c.prepare_cached(
            "INSERT INTO pgns (run_task, run_id, task_id, size, pgn_zip) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?
        .execute(params![run_task, run_id, task_id, gz.len() as i64, gz])?;
        Ok(())
    });
    observe("pgn_put", "pgns", started);
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
}

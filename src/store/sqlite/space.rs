//! The database file's free space: pages freed by deletions (PGN retention) given back to the
//! file system in bounded steps (`PRAGMA incremental_vacuum(N)`, [`reclaim`]), and the one-time
//! conversion of a database created before incremental vacuum (`shoal vacuum`, [`vacuum`]).
//!
//! Must not: run a whole-file `VACUUM` from the server (it rewrites the file and holds the
//! write lock throughout: only the `shoal vacuum` command does, with the server stopped);
//! give back more than the asked number of pages in one call.

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags};

use super::{DB_FILE, SqliteStore, observe};
use crate::store::{StoreError, StoreResult};

/// `PRAGMA auto_vacuum`'s value for INCREMENTAL.
const INCREMENTAL: i64 = 2;

/// Whether the "this database cannot give space back" notice was logged (once a process).
static NOT_INCREMENTAL_LOGGED: AtomicBool = AtomicBool::new(false);

fn pragma_i64(c: &Connection, name: &str) -> rusqlite::Result<i64> {
    c.pragma_query_value(None, name, |r| r.get(0))
}

/// The database's size in bytes (page count × page size).
fn size_bytes(c: &Connection) -> rusqlite::Result<u64> {
    let pages = u64::try_from(pragma_i64(c, "page_count")?).unwrap_or(0);
    let size = u64::try_from(pragma_i64(c, "page_size")?).unwrap_or(0);
    Ok(pages.saturating_mul(size))
}

/// `Store::reclaim_space`: at most `max_pages` free pages moved to the end of the file and cut
/// off, in one write transaction; the bytes the file shrank by. A database without incremental
/// vacuum gives nothing back (its free pages are reused for new data) and says so once.
pub(super) fn reclaim(store: &SqliteStore, max_pages: u32) -> StoreResult<u64> {
    let started = Instant::now();
    let r = store.write(|c| {
        let free = pragma_i64(c, "freelist_count")?;
        if free <= 0 {
            return Ok(0);
        }
        if pragma_i64(c, "auto_vacuum")? != INCREMENTAL {
            if !NOT_INCREMENTAL_LOGGED.swap(true, Ordering::Relaxed) {
                tracing::warn!(
                    free_pages = free,
                    "this database was created without incremental vacuum: freed pages are \
                     reused for new data but the file does not shrink; run `shoal vacuum` once \
                     with the server stopped to convert it"
                );
            }
            return Ok(0);
        }
        let before = size_bytes(c)?;
        // Each step of the statement frees one page: run it to the end.
        let mut stmt = c.prepare(&format!("PRAGMA incremental_vacuum({})", max_pages.max(1)))?;
        let mut rows = stmt.query([])?;
        while rows.next()?.is_some() {}
        drop(rows);
        drop(stmt);
        let given = before.saturating_sub(size_bytes(c)?);
        if pragma_i64(c, "freelist_count")? == 0 {
            // The file itself shrinks when the write-ahead log is checkpointed; do it now
            // (PASSIVE: it waits for nobody) rather than at the next automatic checkpoint.
            c.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))?;
        }
        Ok(given)
    });
    observe("reclaim_space", "sqlite", started);
    r
}

/// What `shoal vacuum` did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VacuumSummary {
    /// The database's size before and after, in bytes.
    pub before: u64,
    pub after: u64,
    /// Whether the database was switched to incremental vacuum (false: it already was).
    pub converted: bool,
}

/// `shoal vacuum`: sets `auto_vacuum = INCREMENTAL` on `<data_dir>/shoal.db` and rewrites the
/// file (`VACUUM`), which makes the setting take effect and gives every free page back. Run it
/// with the server stopped: it holds the write lock until it is done and needs free disk
/// space of about twice the database's size (the rewritten copy, then the write-ahead log).
pub fn vacuum(data_dir: &Path) -> StoreResult<VacuumSummary> {
    let path = data_dir.join(DB_FILE);
    if !path.is_file() {
        return Err(StoreError::Io(std::io::Error::new(
            std::io::ErrorKind::NotFound,
            format!("no SQLite store at {}", path.display()),
        )));
    }
    let c = Connection::open_with_flags(
        &path,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    c.busy_timeout(Duration::from_secs(5))?;
    let before = size_bytes(&c)?;
    let converted = pragma_i64(&c, "auto_vacuum")? != INCREMENTAL;
    c.pragma_update(None, "auto_vacuum", "INCREMENTAL")?;
    c.execute_batch("VACUUM")?;
    c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    if pragma_i64(&c, "auto_vacuum")? != INCREMENTAL {
        return Err(StoreError::Backend {
            backend: "sqlite",
            message: "VACUUM did not switch the database to incremental vacuum".into(),
            transient: false,
        });
    }
    let after = size_bytes(&c)?;
    Ok(VacuumSummary {
        before,
        after,
        converted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::sqlite::SqliteSync;

    fn mode(dir: &Path) -> i64 {
        let c = Connection::open(dir.join(DB_FILE)).expect("open");
        pragma_i64(&c, "auto_vacuum").expect("pragma")
    }

    #[test]
    fn new_stores_give_freed_pages_back() {
        let dir = tempfile::tempdir().expect("tempdir");
        let s = SqliteStore::open(dir.path(), SqliteSync::Normal).expect("open");
        assert_eq!(mode(dir.path()), INCREMENTAL);
        let blob = vec![7u8; 1 << 20];
        for t in 0..4 {
            s.pgn_put(&format!("abc-{t}"), &blob).expect("put");
        }
        let full = s.read(|c| Ok(size_bytes(c)?)).expect("size");
        s.write(|c| Ok(c.execute("DELETE FROM pgns", [])?))
            .expect("delete");
        let mut given = 0;
        loop {
            let n = s.reclaim_space(64).expect("reclaim");
            if n == 0 {
                break;
            }
            // The pages asked for, plus the pointer-map page the truncation drops with them.
            assert!(n <= 65 * 4096, "{n}");
            given += n;
        }
        assert!(given >= 4 << 20, "{given}");
        let free = s
            .read(|c| Ok(pragma_i64(c, "freelist_count")?))
            .expect("free");
        assert_eq!(free, 0);
        let now = s.read(|c| Ok(size_bytes(c)?)).expect("size");
        assert_eq!(full - now, given);
        let on_disk = std::fs::metadata(dir.path().join(DB_FILE))
            .expect("stat")
            .len();
        assert_eq!(on_disk, now, "the file itself shrank");
    }

    #[test]
    fn vacuum_converts_an_older_database() {
        let dir = tempfile::tempdir().expect("tempdir");
        {
            // A database as earlier versions created it: auto_vacuum NONE, fixed once the
            // file has a page.
            let c = Connection::open(dir.path().join(DB_FILE)).expect("open");
            c.pragma_update(None, "journal_mode", "WAL").expect("wal");
            c.execute_batch("CREATE TABLE scratch (x); DROP TABLE scratch;")
                .expect("first page");
            drop(c);
        }
        let s = SqliteStore::open(dir.path(), SqliteSync::Normal).expect("open");
        assert_eq!(mode(dir.path()), 0);
        s.pgn_put("abc-1", &vec![1u8; 1 << 20]).expect("put");
        s.write(|c| Ok(c.execute("DELETE FROM pgns", [])?))
            .expect("delete");
        assert_eq!(s.reclaim_space(1000).expect("reclaim"), 0);
        s.close().expect("close");
        drop(s);
        let done = vacuum(dir.path()).expect("vacuum");
        assert!(done.converted);
        assert!(done.after + (1 << 19) < done.before, "{done:?}");
        assert_eq!(mode(dir.path()), INCREMENTAL);
        let again = vacuum(dir.path()).expect("again");
        assert!(!again.converted);
        let s = SqliteStore::open(dir.path(), SqliteSync::Normal).expect("reopen");
        assert_eq!(s.pgn_list_run("abc").expect("list"), vec![]);
        assert!(vacuum(&dir.path().join("nowhere")).is_err());
    }
}

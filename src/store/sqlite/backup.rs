//! `shoal backup FILE`: a consistent copy of the embedded store taken while the server runs,
//! with SQLite's online backup API.
//!
//! Consistency: the source connection opens one read transaction before the first page is
//! copied and keeps it to the last, so every step copies pages of the same snapshot (in WAL
//! mode a reader never blocks the server's writer, and the copy is never restarted by the
//! server's commits). The snapshot holds every change the server had acknowledged when it
//! began: acknowledged changes are in the `journal` table of the same file until the
//! write-behind folds them into the run documents, and a server started on the copy replays
//! them like after a crash.
//!
//! Owns: the copy (stepped, [`STEP_PAGES`] pages a step), its temporary file next to `FILE`
//! (mode 0600: the store holds password hashes and session ids), the rename at the end, the
//! refusal to replace an existing `FILE` without `force`.
//! Must not: change the source database (its connection is `query_only`); write over the
//! store itself; leave a partial file under `FILE`'s name.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use rusqlite::backup::{Backup, StepResult};
use rusqlite::{Connection, OpenFlags};

use super::DB_FILE;

/// Pages copied per step of the online backup (4 MiB at SQLite's default page size).
pub const STEP_PAGES: i32 = 1024;

/// How long a busy source (SQLite recovering its WAL index) may hold up the copy.
const BUSY_FOR: Duration = Duration::from_secs(30);

/// What a backup wrote.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BackupSummary {
    pub file: PathBuf,
    /// The copy's size in bytes.
    pub bytes: u64,
    /// Acknowledged run changes in the copy not yet folded into their run documents (a server
    /// started on the copy replays them).
    pub journal_entries: u64,
}

/// Why a backup was not made. Nothing is left under `FILE`'s name.
#[derive(Debug, thiserror::Error)]
pub enum BackupError {
    #[error("{0} exists; pass --force to replace it")]
    Exists(PathBuf),
    #[error("no SQLite store at {0} (check data_dir)")]
    NoStore(PathBuf),
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("sqlite: {0}")]
    Sqlite(#[from] rusqlite::Error),
    #[error("the store stayed busy for {0:?}; try again")]
    Busy(Duration),
    #[error("{0} is the store itself (or one of its files); write the copy elsewhere")]
    SameFile(PathBuf),
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> BackupError + 'a {
    move |source| BackupError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// Removes the temporary copy (and SQLite's journal beside it) unless the backup completed.
struct Partial {
    path: PathBuf,
    done: bool,
}

impl Drop for Partial {
    fn drop(&mut self) {
        if !self.done {
            let _ = std::fs::remove_file(&self.path);
        }
        let mut journal = self.path.clone().into_os_string();
        journal.push("-journal");
        let _ = std::fs::remove_file(journal);
    }
}

/// Copies `<data_dir>/shoal.db` to `file` while the server may be running; refuses to replace
/// an existing `file` unless `force`.
pub fn backup(data_dir: &Path, file: &Path, force: bool) -> Result<BackupSummary, BackupError> {
    backup_in_steps(data_dir, file, force, STEP_PAGES)
}

fn backup_in_steps(
    data_dir: &Path,
    file: &Path,
    force: bool,
    step_pages: i32,
) -> Result<BackupSummary, BackupError> {
    let source = data_dir.join(DB_FILE);
    if !source.is_file() {
        return Err(BackupError::NoStore(source));
    }
    let exists = |f: &Path| f.try_exists().map_err(io("cannot check", f));
    if !force && exists(file)? {
        return Err(BackupError::Exists(file.to_path_buf()));
    }
    let name = file.file_name().ok_or_else(|| BackupError::Io {
        what: "not a file name:",
        path: file.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
    })?;
    let dir = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    if !dir.is_dir() {
        return Err(BackupError::Io {
            what: "no such directory:",
            path: dir,
            source: std::io::Error::from(std::io::ErrorKind::NotFound),
        });
    }
    // The copy must not land on the live database, its write-ahead log or its shared memory.
    if let (Ok(store_dir), Ok(target_dir)) = (data_dir.canonicalize(), dir.canonicalize())
        && store_dir == target_dir
        && name.to_string_lossy().starts_with(DB_FILE)
    {
        return Err(BackupError::SameFile(file.to_path_buf()));
    }
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".partial-{}", std::process::id()));
    let mut partial = Partial {
        path: dir.join(tmp_name),
        done: false,
    };
    let tmp = partial.path.clone();
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io("cannot remove", &tmp)(e));
        }
        _ => {}
    }
    let mut create = OpenOptions::new();
    create.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut create, 0o600);
    drop(create.open(&tmp).map_err(io("cannot create", &tmp))?);

    let src = Connection::open_with_flags(
        &source,
        OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    src.busy_timeout(Duration::from_secs(5))?;
    src.pragma_update(None, "query_only", "ON")?;
    // The snapshot: one read transaction from the first page to the last.
    src.execute_batch("BEGIN")?;
    src.query_row("SELECT count(*) FROM sqlite_schema", [], |r| {
        r.get::<_, i64>(0)
    })?;
    let journal_entries = src
        .query_row("SELECT count(*) FROM journal", [], |r| r.get::<_, i64>(0))
        .map_or(0, |n| u64::try_from(n).unwrap_or(0));
    let mut dst = Connection::open(&tmp)?;
    {
        let copy = Backup::new(&src, &mut dst)?;
        let mut busy_since: Option<Instant> = None;
        loop {
            match copy.step(step_pages)? {
                StepResult::Done => break,
                StepResult::More => busy_since = None,
                StepResult::Busy | StepResult::Locked => {
                    let since = *busy_since.get_or_insert_with(Instant::now);
                    if since.elapsed() > BUSY_FOR {
                        return Err(BackupError::Busy(BUSY_FOR));
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
                // A future variant: treat it as a failure rather than guess.
                _ => return Err(BackupError::Busy(Duration::ZERO)),
            }
        }
    }
    src.execute_batch("COMMIT")?;
    drop(src);
    dst.close().map_err(|(_, e)| BackupError::Sqlite(e))?;

    let copy = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&tmp)
        .map_err(io("cannot open", &tmp))?;
    copy.sync_all().map_err(io("cannot sync", &tmp))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        copy.set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(io("cannot set the mode of", &tmp))?;
    }
    let bytes = copy.metadata().map_err(io("cannot stat", &tmp))?.len();
    drop(copy);
    if !force && exists(file)? {
        return Err(BackupError::Exists(file.to_path_buf()));
    }
    std::fs::rename(&tmp, file).map_err(io("cannot rename the copy to", file))?;
    partial.done = true;
    // The rename itself is durable once the directory is.
    if let Ok(d) = std::fs::File::open(&dir) {
        let _ = d.sync_all();
    }
    Ok(BackupSummary {
        file: file.to_path_buf(),
        bytes,
        journal_entries,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::SqliteStore;
    use crate::store::sqlite::SqliteSync;
    use crate::store::{Doc, JournalEntry, Store};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    fn entry(seq: u64) -> JournalEntry {
        let mut patch = Doc::new();
        patch.insert("workers".into(), serde_json::json!(seq));
        JournalEntry {
            seq,
            run_id: format!("run{}", seq % 3),
            patch,
        }
    }

    #[test]
    fn a_copy_taken_under_writes_is_one_snapshot_with_its_journal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("data");
        let store = Arc::new(SqliteStore::open(&data, SqliteSync::Normal).expect("open"));
        for t in 0..8 {
            store
                .pgn_put(&format!("abc-{t}"), &vec![t as u8; 1 << 20])
                .expect("pgn");
        }
        store.journal_append(&[entry(1)], &[]).expect("first");
        // The server's writer keeps committing journal entries while the copy is taken, in
        // small steps (many steps, each after some of these commits).
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (store, stop) = (store.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut seq = 1;
                while !stop.load(Ordering::Relaxed) {
                    seq += 1;
                    store.journal_append(&[entry(seq)], &[]).expect("append");
                }
                seq
            })
        };
        let file = dir.path().join("copy.db");
        let done = backup_in_steps(&data, &file, false, 16).expect("backup");
        stop.store(true, Ordering::Relaxed);
        let last = writer.join().expect("writer");
        assert!(done.journal_entries >= 1);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&file).expect("stat").permissions().mode();
        assert_eq!(mode & 0o777, 0o600);

        // Restored: the copy as the database of a fresh data directory.
        let restored = dir.path().join("restored");
        std::fs::create_dir_all(&restored).expect("mkdir");
        std::fs::copy(&file, restored.join(DB_FILE)).expect("copy");
        let copy = SqliteStore::open(&restored, SqliteSync::Normal).expect("open copy");
        let (entries, max) = copy.journal_pending().expect("journal");
        let seqs: Vec<u64> = entries.iter().map(|e| e.seq).collect();
        let expected: Vec<u64> = (1..=max).collect();
        assert_eq!(seqs, expected, "a prefix of the commits, without a gap");
        assert_eq!(max, done.journal_entries);
        assert!(max <= last);
        assert_eq!(copy.pgn_list_run("abc").expect("pgns").len(), 8);
        let blob = copy.pgn_find("abc-7").expect("find");
        assert_eq!(
            copy.pgn_read(&blob[0].handle, 0, 10).expect("read"),
            vec![7u8; 10]
        );

        // An existing file is kept unless forced; nothing is left beside it.
        let e = backup(&data, &file, false).expect_err("exists");
        assert!(matches!(e, BackupError::Exists(_)), "{e}");
        assert!(e.to_string().contains("--force"), "{e}");
        backup(&data, &file, true).expect("forced");
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .expect("ls")
            .map(|d| d.expect("entry").file_name().to_string_lossy().into_owned())
            .collect();
        assert!(!names.iter().any(|n| n.contains("partial")), "{names:?}");
        let e = backup(&data, &data.join(DB_FILE), true).expect_err("itself");
        assert!(matches!(e, BackupError::SameFile(_)), "{e}");
        let e = backup(&data, &dir.path().join("no/such/dir.db"), false).expect_err("no dir");
        assert!(e.to_string().contains("no such directory"), "{e}");
        let e = backup(&dir.path().join("nothing"), &dir.path().join("x.db"), false)
            .expect_err("no store");
        assert!(matches!(e, BackupError::NoStore(_)), "{e}");
        assert!(!dir.path().join("x.db").exists());
    }
}

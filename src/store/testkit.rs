//! (tests only) A store for unit tests: an empty SQLite store in a temporary directory.
//!
//! Owns: nothing outside `#[cfg(test)]`.
//! Must not: be used by non-test code.

use std::sync::Arc;

use super::SharedStore;
use super::sqlite::SqliteStore;
use crate::store::sqlite::SqliteSync;

/// An empty SQLite store in a temporary directory; keep the directory until the store is dropped.
pub(crate) fn temp_store() -> (tempfile::TempDir, SharedStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let store: SharedStore =
        Arc::new(SqliteStore::open(dir.path(), SqliteSync::Normal).expect("store"));
    (dir, store)
}

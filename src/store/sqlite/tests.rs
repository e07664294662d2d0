//! Unit tests of the SQLite backend: the basic operations, ids and duplicates, the schema
//! version, a corrupt document.

use super::*;
use serde_json::json;

pub(super) fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = SqliteStore::open(dir.path(), SqliteSync::Normal).expect("open");
    (dir, s)
}

pub(super) fn doc(v: Value) -> Doc {
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

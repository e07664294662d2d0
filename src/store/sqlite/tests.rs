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

#[test]
fn shoal_documents_move_out_of_fishtest_collections() {
    let dir = tempfile::tempdir().expect("tempdir");
    {
        // A database as the version before migration 5 left it.
        let mut c = Connection::open(dir.path().join("shoal.db")).expect("open");
        let tx = c.transaction().expect("tx");
        for sql in &MIGRATIONS[..4] {
            tx.execute_batch(sql).expect("old migration");
        }
        tx.pragma_update(None, "user_version", 4).expect("pragma");
        for (id, doc) in [
            ("worker_runs", r#"{"_id":"worker_runs","value":{}}"#),
            (
                "legacy_usernames",
                r#"{"_id":"legacy_usernames","value":[]}"#,
            ),
            ("session:ab", r#"{"_id":"session:ab","user":"alice"}"#),
            (
                "cpu_hours:alice",
                r#"{"_id":"cpu_hours:alice","hours":1.5}"#,
            ),
        ] {
            tx.execute(
                "INSERT INTO kvstore (id, doc) VALUES (?1, ?2)",
                params![id, doc],
            )
            .expect("kv");
        }
        for (id, kind) in [
            ("a1", "api_token"),
            ("a2", "new_run"),
            ("a3", "password_reset"),
            ("a4", "set_limit"),
        ] {
            let doc = json!({"_id": id, "action": kind, "username": "alice", "time": 1.0});
            tx.execute(
                "INSERT INTO actions (id, doc) VALUES (?1, ?2)",
                params![id, doc.to_string()],
            )
            .expect("action");
        }
        tx.commit().expect("commit");
    }
    let s = SqliteStore::open(dir.path(), SqliteSync::Normal).expect("migrate");
    let ids = |coll| -> Vec<String> {
        s.find(coll, &Query::new().sort("_id", crate::store::Order::Asc))
            .expect("find")
            .iter()
            .map(|d| d["_id"].as_str().expect("id").to_string())
            .collect()
    };
    assert_eq!(
        ids(Collection::Kvstore),
        ["legacy_usernames", "worker_runs"]
    );
    assert_eq!(ids(Collection::ShoalKv), ["cpu_hours:alice", "session:ab"]);
    assert_eq!(ids(Collection::Actions), ["a2"]);
    assert_eq!(ids(Collection::ShoalActions), ["a1", "a3", "a4"]);
    assert_eq!(
        s.get(Collection::ShoalKv, "session:ab").expect("get"),
        Some(doc(json!({"_id": "session:ab", "user": "alice"})))
    );
}

#[test]
fn increment_adds_in_the_store_and_from_many_threads_loses_nothing() {
    let (_d, s) = store();
    let s = std::sync::Arc::new(s);
    s.put(
        Collection::Nns,
        &doc(json!({"_id": "nn-0123456789ab.nnue", "name": "nn-0123456789ab.nnue", "user": "a"})),
    )
    .expect("put");
    // Absent: counted from 0; the rest of the document kept.
    assert!(
        s.increment(Collection::Nns, "nn-0123456789ab.nnue", "downloads", 1)
            .expect("increment")
    );
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                for _ in 0..50 {
                    s.increment(Collection::Nns, "nn-0123456789ab.nnue", "downloads", 1)
                        .expect("increment");
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("thread");
    }
    let got = s
        .get(Collection::Nns, "nn-0123456789ab.nnue")
        .expect("get")
        .expect("some");
    assert_eq!(
        (got["downloads"].clone(), got["user"].clone()),
        (json!(401), json!("a"))
    );
    // No such document: false, nothing created.
    assert!(
        !s.increment(Collection::Nns, "nn-ffffffffffff.nnue", "downloads", 1)
            .expect("increment")
    );
    assert_eq!(s.count(Collection::Nns, &[]).expect("count"), 1);
    // Runs change only through the run core; a path that is not one field is refused.
    for (coll, field) in [
        (Collection::Runs, "downloads"),
        (Collection::Nns, "a.b"),
        (Collection::Nns, "_id"),
        (Collection::Nns, "x') , doc = ('"),
    ] {
        assert!(matches!(
            s.increment(coll, "nn-0123456789ab.nnue", field, 1),
            Err(StoreError::InvalidQuery(_))
        ));
    }
}

//! Unit tests of the dump: a dump file read in both layouts, bad documents skipped with a
//! reason and the rest imported, a store with data refused without `--merge`.

use super::read::{ReadError, for_each_document};
use super::*;
use crate::config::SqliteSync;
use crate::store::Store;
use crate::store::sqlite::SqliteStore;

fn store() -> (tempfile::TempDir, SqliteStore) {
    let dir = tempfile::tempdir().expect("tempdir");
    let s = SqliteStore::open(&dir.path().join("data"), SqliteSync::Normal).expect("open");
    (dir, s)
}

#[test]
fn reads_arrays_and_one_document_per_line() {
    for text in [
        "[\n{\"a\": 1},\n{\"a\": 2}\n]\n",
        "{\"a\": 1}\n{\"a\": 2}\n",
        "  [ ]",
        "",
    ] {
        let mut seen = Vec::new();
        let r = for_each_document(text.as_bytes(), |v| {
            seen.push(v["a"].as_i64().unwrap_or(0));
            Ok(())
        });
        assert!(r.is_ok(), "{text:?}");
        let want: Vec<i64> = if text.contains('1') {
            vec![1, 2]
        } else {
            vec![]
        };
        assert_eq!(seen, want, "{text:?}");
    }
    for bad in ["[{\"a\": 1},", "{\"a\": 1} nope", "[1, 2"] {
        let r = for_each_document(bad.as_bytes(), |_| Ok(()));
        assert!(matches!(r, Err(ReadError::Json(_))), "{bad:?}");
    }
}

#[test]
fn bad_documents_are_skipped_with_a_reason_and_the_rest_imported() {
    let (dir, s) = store();
    let dump = dir.path().join("dump");
    std::fs::create_dir_all(&dump).expect("mkdir");
    std::fs::write(
        dump.join("users.json"),
        concat!(
            r#"{"_id": {"$oid": "682df88022dfea1c9574079d"}, "username": "a", "password": "p", "registration_time": {"$date": {"$numberLong": "1747843200000"}}}"#,
            "\n",
            r#"{"username": "no-id"}"#,
            "\n",
            r#"[1]"#,
            "\n",
        ),
    )
    .expect("write");
    std::fs::write(
        dump.join("nns.json"),
        r#"[{"_id": {"$oid": "682df88022dfea1c9574079e"}, "user": "x"}]"#,
    )
    .expect("write");
    std::fs::write(dump.join("notes.txt"), "hello").expect("write");
    let summary = import(&s, &dump, false, false).expect("import");
    let users = &summary.collections[0];
    assert_eq!(
        (users.collection.as_str(), users.written, users.skipped),
        ("users", 1, 2)
    );
    assert!(users.skips[0].contains("no `_id`"), "{:?}", users.skips);
    let nns = &summary.collections[1];
    assert_eq!((nns.written, nns.skipped), (0, 1));
    assert!(nns.skips[0].contains("name"), "{:?}", nns.skips);
    assert_eq!(summary.ignored_files, vec!["notes.txt".to_string()]);
    assert!(summary.missing.contains(&"runs".to_string()));
    assert_eq!(summary.skipped(), 3);
    let text = summary.to_string();
    assert!(text.contains("users"), "{text}");
    assert!(text.contains("2 skipped"), "{text}");
    // Not empty any more: refused without --merge, and nothing changes.
    let again = import(&s, &dump, false, false);
    assert!(matches!(again, Err(DumpError::NotEmpty { .. })));
    assert_eq!(s.count(Collection::Users, &[]).expect("count"), 1);
}

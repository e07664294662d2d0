//! Unit tests of the MongoDB backend: replacements, chunks, retries, bulk replies, journal
//! documents, the write concern, an unreachable server.

use super::retry::{backend, transient};
use super::write::{check_bulk_reply, write_concern_doc};
use super::*;
use crate::store::bson_map::MONGO_ID;
use bson::oid::ObjectId;
use mongodb::error::{Error as MongoError, ErrorKind};
use mongodb::options::Acknowledgment;
use serde_json::json;

#[test]
fn replacements_keep_fishtest_ids() {
    let run: Doc = serde_json::from_value(
        json!({"_id": "6a5ef17522dfea1c957407ba", "finished": false, "args": {"tc": "10+0.1"}}),
    )
    .expect("doc");
    let (q, u) = replacement(Collection::Runs, &run).expect("run");
    let oid = ObjectId::parse_str("6a5ef17522dfea1c957407ba").expect("oid");
    assert_eq!(q, doc! {"_id": {"$eq": oid}});
    assert_eq!(u.get("_id"), Some(&Bson::ObjectId(oid)));
    // A worker read from MongoDB keeps its ObjectId; one shoal made gets none here
    // (the server gives it one on insert, and keeps the old one on a replace).
    let read: Doc =
        serde_json::from_value(json!({"_id": "w-8cores-1", "worker_name": "w-8cores-1",
        "_mongo_id": {"$oid": "6a72633822dfea1c9574090a"}, "blocked": true}))
        .expect("doc");
    let (q, u) = replacement(Collection::Workers, &read).expect("worker");
    assert_eq!(q, doc! {"worker_name": {"$eq": "w-8cores-1"}});
    assert_eq!(
        u.get_object_id("_id").expect("kept").to_hex(),
        "6a72633822dfea1c9574090a"
    );
    assert!(!u.contains_key(MONGO_ID));
    let mine: Doc = serde_json::from_value(
        json!({"_id": "w-8cores-2", "worker_name": "w-8cores-2", "blocked": false}),
    )
    .expect("doc");
    let (_, u) = replacement(Collection::Workers, &mine).expect("worker");
    assert!(!u.contains_key("_id"));
    assert!(replacement(Collection::Runs, &Doc::new()).is_err());
}

#[test]
fn chunks_are_clamped() {
    let b = [1u8, 2, 3, 4, 5];
    assert_eq!(chunk(&b, 0, 2), &[1, 2]);
    assert_eq!(chunk(&b, 3, 10), &[4, 5]);
    assert!(chunk(&b, 5, 1).is_empty());
    assert!(chunk(&b, u64::MAX, usize::MAX).is_empty());
}

#[test]
fn backoff_doubles_and_is_capped() {
    let r = Retry::default();
    assert!(r.backoff(0) >= Duration::from_millis(100));
    assert!(r.backoff(0) <= Duration::from_millis(125));
    assert!(r.backoff(2) >= Duration::from_millis(400));
    assert!(r.backoff(30) <= Duration::from_secs(2));
}

#[test]
fn transient_errors_are_told_apart() {
    assert!(is_transient_code(11600));
    assert!(is_transient_code(10107));
    assert!(!is_transient_code(11000));
    let io: MongoError = ErrorKind::Io(std::sync::Arc::new(std::io::Error::other("reset"))).into();
    assert!(transient(&io));
    let arg = MongoError::custom("not a server's answer");
    assert!(!transient(&arg));
    assert!(!backend(&arg).is_transient());
}

#[test]
fn bulk_replies_with_errors_fail() {
    assert!(check_bulk_reply(&doc! {"ok": 1, "n": 2}).is_ok());
    let dup = doc! {"ok": 1, "writeErrors": [{"index": 0, "code": 11000, "errmsg": "dup"}]};
    assert!(matches!(
        check_bulk_reply(&dup),
        Err(StoreError::Duplicate(_))
    ));
    let wce = doc! {"ok": 1, "writeConcernError": {"code": 91, "errmsg": "shutdown"}};
    assert!(check_bulk_reply(&wce).is_err_and(|e| e.is_transient()));
}

#[test]
fn journal_entries_round_trip_through_bson() {
    let mut patch = Doc::new();
    patch.insert("tasks.12".into(), json!({"active": true, "last_updated": {"$date": "2026-07-21T04:11:33.588Z"}, "stats": {"wins": 3}}));
    patch.insert("results".into(), json!({"wins": 3, "llr": 0.5}));
    let e = JournalEntry {
        seq: 42,
        run_id: "6a5ef17522dfea1c957407ba".into(),
        patch,
    };
    let d = journal_doc(&e).expect("doc");
    assert_eq!(d.get("_id"), Some(&Bson::Int64(42)));
    assert!(matches!(
        d.get_array("patch").expect("pairs")[0],
        Bson::Document(_)
    ));
    assert_eq!(journal_entry(&d).expect("entry"), e);
}

#[test]
fn write_concern_is_journaled_majority() {
    let wc = write_concern();
    assert_eq!(wc.journal, Some(true));
    assert_eq!(wc.w, Some(Acknowledgment::Majority));
    assert_eq!(write_concern_doc(), doc! {"w": "majority", "j": true});
}

#[test]
fn an_unreachable_server_is_a_start_up_error_naming_mongodb_uri() {
    // A closed port on loopback, with a short server selection timeout.
    let uri = SecretUri::new(
        "mongodb://shoal:hunter2@127.0.0.1:1/ft?serverSelectionTimeoutMS=300&connectTimeoutMS=300",
    );
    let err = MongoStore::open(&uri).err().expect("no server there");
    let text = err.to_string();
    assert!(text.contains("mongodb_uri"), "{text}");
    assert!(text.contains("cannot reach"), "{text}");
    assert!(!text.contains("hunter2"), "{text}");
    // From a blocking-pool thread of the server's runtime, as `Offload::run` calls it: the
    // driver's blocking API must not trip over the runtime around it.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let in_pool = rt
        .block_on(rt.spawn_blocking(move || MongoStore::open(&uri).err().map(|e| e.to_string())))
        .expect("no panic in the pool");
    assert!(in_pool.is_some_and(|t| t.contains("mongodb_uri")));
    let bad = SecretUri::new("postgres://nope");
    let text = MongoStore::open(&bad).err().expect("bad uri").to_string();
    assert!(text.contains("mongodb_uri"), "{text}");
}

#[test]
fn the_retries_wait_attempts_minus_one_times() {
    use backon::BackoffBuilder as _;
    let r = Retry {
        attempts: 3,
        first: Duration::from_millis(10),
        max: Duration::from_secs(1),
    };
    let waits: Vec<Duration> = r.build().collect();
    assert_eq!(waits.len(), 2, "{waits:?}");
    assert!(waits[0] >= Duration::from_millis(10) && waits[0] <= Duration::from_micros(12_500));
    assert!(waits[1] >= Duration::from_millis(20) && waits[1] <= Duration::from_millis(25));
    assert_eq!(Retry { attempts: 1, ..r }.build().count(), 0);
    assert_eq!(Retry::default().build().count(), 4);
}

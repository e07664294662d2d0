//! The store's shared pieces: object ids, dates, field paths.

use super::*;

#[test]
fn object_ids_are_24_hex_and_increase() {
    let a = new_object_id();
    let b = new_object_id();
    assert_eq!(a.len(), 24);
    assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
    assert!(b > a || b[..8] > a[..8]);
}

#[test]
fn date_round_trips_and_reads_mongo_forms() {
    let d = Date::now();
    let v = serde_json::to_value(d).expect("ser");
    let back: Date = serde_json::from_value(v).expect("de");
    assert_eq!(back.to_iso(), d.to_iso());
    let long: Date =
        serde_json::from_value(serde_json::json!({"$date": {"$numberLong": "1700000000000"}}))
            .expect("de");
    assert_eq!(long.0.timestamp(), 1_700_000_000);
    assert!(serde_json::from_value::<Date>(serde_json::json!({"$date": true})).is_err());
}

#[test]
fn paths_cannot_inject() {
    assert!(valid_path("args.username"));
    assert!(valid_path("_id"));
    assert!(!valid_path("a') OR 1=1 --"));
    assert!(!valid_path("a..b"));
    assert!(!valid_path(""));
    assert!(!valid_path("a.b.c.d.e.f.g.h.i"));
}

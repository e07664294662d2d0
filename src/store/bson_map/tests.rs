//! Unit tests of the BSON <-> JSON mapping: Fishtest's sample database comes back whole;
//! number types, dates, ids, binaries and PGN documents; bad values refused.

use super::*;
use bson::doc;

fn round_trip(coll: Collection, d: Document) -> (Doc, Document) {
    let shoal = to_doc(coll, d).expect("to shoal");
    // Through text, as the SQLite store keeps it.
    let text = serde_json::to_string(&shoal).expect("ser");
    let back: Doc = serde_json::from_str(&text).expect("de");
    assert_eq!(back, shoal);
    let bson = to_bson(coll, &back).expect("to bson");
    (shoal, bson)
}

/// Every document of the sample database Fishtest's code wrote (`tests/data/fishtest-db`),
/// through the mapping, through JSON text (as the SQLite store keeps it) and back: the
/// same document, BSON types included (canonical Extended JSON encodes every type).
#[test]
fn every_document_of_the_fishtest_sample_comes_back() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/fishtest-db");
    let canonical = |d: Document| Bson::Document(d).into_canonical_extjson();
    let mut seen = 0;
    for name in crate::dump::DUMP_COLLECTIONS {
        let docs = crate::dump::read_file(&dir.join(format!("{name}.json"))).expect(name);
        assert!(!docs.is_empty(), "{name}");
        for d in docs {
            let back = match Collection::ALL.into_iter().find(|c| c.name() == name) {
                Some(coll) => {
                    let shoal = to_doc(coll, d.clone()).expect("to shoal");
                    let text = serde_json::to_string(&shoal).expect("ser");
                    let reread: Doc = serde_json::from_str(&text).expect("de");
                    to_bson(coll, &reread).expect("to bson")
                }
                None => pgn_to_bson(&pgn_from_bson(&d).expect("pgn")).expect("pgn back"),
            };
            assert_eq!(
                canonical(back),
                canonical(d.clone()),
                "{name} {:?}",
                d.get("_id")
            );
            seen += 1;
        }
    }
    assert_eq!(seen, 16 + 13 + 100 + 105 + 5 + 2 + 5 + 10 + 9 + 1);
}

#[test]
fn numbers_keep_their_bson_type() {
    let d = doc! {
        "_id": ObjectId::parse_str("6a5ef17522dfea1c957407ba").expect("oid"),
        "small": 7_i32, "long_small": 7_i64, "long_big": 1_i64 << 40,
        "double_int": 2.0_f64, "double": 0.05_f64, "nan": f64::NAN, "inf": f64::NEG_INFINITY,
        "neg_zero": -0.0_f64, "min": i32::MIN, "max_long": i64::MAX,
    };
    let (shoal, back) = round_trip(Collection::Runs, d.clone());
    assert_eq!(shoal["_id"], json!("6a5ef17522dfea1c957407ba"));
    assert_eq!(shoal["small"], json!(7));
    assert_eq!(shoal["long_small"], json!({"$numberLong": "7"}));
    assert_eq!(shoal["double_int"].to_string(), "2.0");
    for (k, v) in &d {
        match (v, back.get(k).expect(k)) {
            (Bson::Double(a), Bson::Double(b)) if a.is_nan() => assert!(b.is_nan()),
            (Bson::Double(a), Bson::Double(b)) => {
                assert_eq!(a.to_bits(), b.to_bits(), "{k}")
            }
            (a, b) => assert_eq!(a, b, "{k}"),
        }
    }
}

#[test]
fn dates_ids_and_binaries_come_back() {
    let d = doc! {
        "_id": ObjectId::parse_str("6a5ef17522dfea1c957407ba").expect("oid"),
        "t": BsonDate::from_millis(1_784_607_093_588),
        "min": BsonDate::from_millis(-62_135_596_800_000),
        "far": BsonDate::from_millis(i64::MAX),
        "ref": ObjectId::parse_str("6a5ef17522dfea1c957407bb").expect("oid"),
        "blob": Binary { subtype: BinarySubtype::Md5, bytes: vec![1, 2, 3] },
        "tasks": [ { "spsa_params": { "packed_flips": Binary { subtype: BinarySubtype::Generic, bytes: vec![0x80, 0] } } } ],
        "dec": Bson::Decimal128("1.5".parse().expect("dec")),
    };
    let (shoal, back) = round_trip(Collection::Runs, d.clone());
    assert_eq!(shoal["t"], json!({"$date": "2026-07-21T04:11:33.588Z"}));
    assert_eq!(shoal["min"], json!({"$date": "0001-01-01T00:00:00.000Z"}));
    assert_eq!(
        shoal["tasks"][0]["spsa_params"]["packed_flips"],
        json!([128, 0])
    );
    // shoal's own date type reads what the mapping writes.
    let t: Date = serde_json::from_value(shoal["t"].clone()).expect("date");
    assert_eq!(t.0.timestamp_millis(), 1_784_607_093_588);
    assert_eq!(back, d);
}

#[test]
fn ids_per_collection() {
    let oid = ObjectId::parse_str("6a72633822dfea1c9574090a").expect("oid");
    let w = doc! {"_id": oid, "worker_name": "ashgrove-8cores-b6434352", "blocked": true};
    let (shoal, back) = round_trip(Collection::Workers, w.clone());
    assert_eq!(shoal["_id"], json!("ashgrove-8cores-b6434352"));
    assert_eq!(shoal[MONGO_ID], json!({"$oid": "6a72633822dfea1c9574090a"}));
    assert_eq!(back, w);
    let kv = doc! {"_id": "6a72633822dfea1c9574090a", "value": 1};
    let (shoal, back) = round_trip(Collection::Kvstore, kv.clone());
    assert_eq!(shoal["_id"], json!("6a72633822dfea1c9574090a"));
    assert_eq!(back, kv);
    let odd = doc! {"_id": 42, "x": 1};
    let (shoal, back) = round_trip(Collection::Runs, odd.clone());
    assert_eq!(shoal["_id"], json!("42"));
    assert_eq!(back, odd);
    assert!(matches!(
        to_doc(Collection::Nns, doc! {"_id": oid}),
        Err(MapError::MissingKey { .. })
    ));
    assert!(matches!(
        to_doc(Collection::Runs, doc! {"x": 1}),
        Err(MapError::MissingId)
    ));
    // A net shoal made itself gets an ObjectId on the way out.
    let mut mine = Doc::new();
    mine.insert("_id".into(), json!("nn-0123456789ab.nnue"));
    mine.insert("name".into(), json!("nn-0123456789ab.nnue"));
    let out = to_bson(Collection::Nns, &mine).expect("bson");
    assert!(matches!(out.get("_id"), Some(Bson::ObjectId(_))));
    assert_eq!(out.keys().next().map(String::as_str), Some("_id"));
}

#[test]
fn bad_values_are_refused() {
    let mut d = Doc::new();
    d.insert("_id".into(), json!("x"));
    d.insert("big".into(), json!(u64::MAX));
    assert!(to_bson(Collection::Kvstore, &d).is_err());
    let mut d = Doc::new();
    d.insert("_id".into(), json!("x"));
    d.insert("spsa_params".into(), json!({"packed_flips": [256]}));
    assert!(to_bson(Collection::Kvstore, &d).is_err());
    let mut d = Doc::new();
    d.insert("_id".into(), json!("x"));
    d.insert("t".into(), json!({"$date": "yesterday"}));
    assert!(to_bson(Collection::Kvstore, &d).is_err());
}

#[test]
fn pgn_documents() {
    let p = PgnDoc {
        id: "6a8b960a22dfea1c95740963".into(),
        run_task: "6a8b898022dfea1c95740958-0".into(),
        gz: vec![0x1f, 0x8b, 8],
    };
    let d = pgn_to_bson(&p).expect("bson");
    assert_eq!(d.get("size"), Some(&Bson::Int32(3)));
    assert_eq!(pgn_from_bson(&d).expect("pgn"), p);
    let mut wrong = d.clone();
    wrong.insert("size", 4);
    assert!(pgn_from_bson(&wrong).is_err());
    let mut extra = d;
    extra.insert("note", "x");
    assert!(pgn_from_bson(&extra).is_err());
}

#[test]
fn extjson_text_round_trips_in_order() {
    let d = doc! {"_id": ObjectId::parse_str("6a5ef17522dfea1c957407ba").expect("oid"),
    "z": 1, "a": [1.5, {"y": BsonDate::from_millis(5), "b": Bson::Null}]};
    let mut buf = Vec::new();
    write_extjson(&mut buf, &d).expect("write");
    let text = String::from_utf8(buf).expect("utf8");
    assert!(text.starts_with(r#"{"_id": {"$oid":"6a5ef17522dfea1c957407ba"}, "z": "#));
    let back = parse_extjson(serde_json::from_str(&text).expect("json")).expect("doc");
    assert_eq!(back, d);
    assert!(parse_extjson(json!([1])).is_err());
}

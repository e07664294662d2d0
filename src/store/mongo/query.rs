//! The translation of the store's query vocabulary ([`Query`], [`Cond`], [`Order`]) into
//! MongoDB filters, sorts and find options, over Fishtest's documents: values through the
//! BSON mapping (dates become BSON dates, hex `_id`s ObjectIds), shoal's `_id` of a net or a
//! worker becomes the field Fishtest keys it by (`name`, `worker_name`).
//!
//! Must not: talk to a server; accept a field path that `valid_path` refuses (so a path can
//! never carry an operator).

use bson::{Bson, Document, doc, oid::ObjectId};
use serde_json::Value;

use crate::store::bson_map::{self, key_field};
use crate::store::{Collection, Cond, Order, Query, StoreError, StoreResult, valid_path};

/// The Fishtest field for a shoal path (`_id` of nets and workers is their name).
fn field(coll: Collection, path: &str) -> StoreResult<String> {
    if !valid_path(path) {
        return Err(StoreError::InvalidQuery(format!("bad field path {path:?}")));
    }
    Ok(if path == "_id" {
        key_field(coll).to_string()
    } else {
        path.to_string()
    })
}

/// A shoal value as the BSON it is compared with. An `_id` spelled as 24 hex digits is an
/// ObjectId in the collections Fishtest keys by ObjectId.
fn value(coll: Collection, path: &str, v: &Value) -> StoreResult<Bson> {
    if path == "_id"
        && key_field(coll) == "_id"
        && !matches!(coll, Collection::Kvstore | Collection::ShoalKv)
        && let Value::String(s) = v
        && let Ok(oid) = ObjectId::parse_str(s)
        && s.len() == 24
        && s.bytes().all(|b| !b.is_ascii_uppercase())
    {
        return Ok(Bson::ObjectId(oid));
    }
    bson_map::from_value(v, path).map_err(|e| StoreError::InvalidQuery(e.to_string()))
}

/// The filter document: every condition must hold.
pub fn filter(coll: Collection, conds: &[Cond]) -> StoreResult<Document> {
    let mut parts: Vec<Document> = Vec::with_capacity(conds.len());
    for c in conds {
        let (path, op, v) = match c {
            Cond::Eq(p, v) => (p, "$eq", v),
            Cond::Ne(p, v) => (p, "$ne", v),
            Cond::Gt(p, v) => (p, "$gt", v),
            Cond::Gte(p, v) => (p, "$gte", v),
            Cond::Lt(p, v) => (p, "$lt", v),
            Cond::Lte(p, v) => (p, "$lte", v),
            Cond::In(p, values) => {
                let list = values
                    .iter()
                    .map(|v| value(coll, p, v))
                    .collect::<StoreResult<Vec<Bson>>>()?;
                parts.push(doc! { field(coll, p)?: { "$in": list } });
                continue;
            }
            Cond::Exists(p, exists) => {
                parts.push(doc! { field(coll, p)?: { "$exists": *exists } });
                continue;
            }
            Cond::ContainsAny(paths, texts) | Cond::ContainsNone(paths, texts) => {
                // Each text as a literal, case-insensitive pattern (ASCII case, as SQLite's).
                let mut any = Vec::new();
                for p in paths {
                    let f = field(coll, p)?;
                    for t in texts {
                        let pattern = regex::escape(t);
                        any.push(doc! { f.clone(): { "$regex": pattern, "$options": "i" } });
                    }
                }
                let none = matches!(c, Cond::ContainsNone(..));
                parts.push(match (any.is_empty(), none) {
                    // Nothing matches, as an empty `$in`; or everything.
                    (true, false) => doc! { "_id": { "$in": [] } },
                    (true, true) => doc! { "_id": { "$exists": true } },
                    (false, false) => doc! { "$or": any },
                    (false, true) => doc! { "$nor": any },
                });
                continue;
            }
        };
        if v.is_null() && !matches!(op, "$eq" | "$ne") {
            return Err(StoreError::InvalidQuery(format!(
                "cannot order-compare {path} with null"
            )));
        }
        let b = value(coll, path, v)?;
        parts.push(doc! { field(coll, path)?: { op: b } });
    }
    Ok(match parts.len() {
        0 => Document::new(),
        1 => parts.pop().unwrap_or_default(),
        _ => doc! { "$and": parts },
    })
}

/// The sort document, keys in the query's order.
pub fn sort(coll: Collection, q: &Query) -> StoreResult<Option<Document>> {
    if q.sort.is_empty() {
        return Ok(None);
    }
    let mut d = Document::new();
    for (path, order) in &q.sort {
        let dir = match order {
            Order::Asc => 1,
            Order::Desc => -1,
        };
        d.insert(field(coll, path)?, dir);
    }
    Ok(Some(d))
}

/// The filter selecting the document shoal knows by `id`.
pub fn by_id(coll: Collection, id: &str) -> StoreResult<Document> {
    filter(
        coll,
        &[Cond::Eq("_id".into(), Value::String(id.to_string()))],
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Date;
    use serde_json::json;

    #[test]
    fn conditions_become_mongodb_filters() {
        let since = Date(chrono::DateTime::from_timestamp(1_700_000_000, 0).expect("t"));
        let q = [
            Cond::Eq("finished".into(), json!(true)),
            Cond::Ne("deleted".into(), json!(true)),
            Cond::Gte("last_updated".into(), since.to_value()),
            Cond::In("args.username".into(), vec![json!("a"), json!("b")]),
            Cond::Exists("is_green".into(), false),
        ];
        let f = filter(Collection::Runs, &q).expect("filter");
        assert_eq!(
            f,
            doc! {"$and": [
                {"finished": {"$eq": true}},
                {"deleted": {"$ne": true}},
                {"last_updated": {"$gte": bson::DateTime::from_millis(1_700_000_000_000)}},
                {"args.username": {"$in": ["a", "b"]}},
                {"is_green": {"$exists": false}},
            ]}
        );
        assert_eq!(
            filter(Collection::Runs, &[Cond::Gt("tc_base".into(), json!(40))]).expect("f"),
            doc! {"tc_base": {"$gt": 40}}
        );
        assert_eq!(filter(Collection::Runs, &[]).expect("f"), doc! {});
    }

    #[test]
    fn ids_map_to_fishtest_keys() {
        let hex = "6a5ef17522dfea1c957407ba";
        let oid = ObjectId::parse_str(hex).expect("oid");
        assert_eq!(
            by_id(Collection::Runs, hex).expect("f"),
            doc! {"_id": {"$eq": oid}}
        );
        assert_eq!(
            by_id(Collection::Kvstore, hex).expect("f"),
            doc! {"_id": {"$eq": hex}}
        );
        assert_eq!(
            by_id(Collection::Kvstore, "session:ab").expect("f"),
            doc! {"_id": {"$eq": "session:ab"}}
        );
        assert_eq!(
            by_id(Collection::Nns, "nn-0123456789ab.nnue").expect("f"),
            doc! {"name": {"$eq": "nn-0123456789ab.nnue"}}
        );
        assert_eq!(
            by_id(Collection::Workers, "w-8cores-1").expect("f"),
            doc! {"worker_name": {"$eq": "w-8cores-1"}}
        );
        // Not an ObjectId: compared as the string it is.
        assert_eq!(
            by_id(Collection::Users, "not-hex").expect("f"),
            doc! {"_id": {"$eq": "not-hex"}}
        );
        let q = Query::new()
            .sort("_id", Order::Asc)
            .sort("last_updated", Order::Desc);
        assert_eq!(
            sort(Collection::Workers, &q).expect("s"),
            Some(doc! {"worker_name": 1, "last_updated": -1})
        );
    }

    #[test]
    fn hostile_paths_and_values_are_refused() {
        for bad in ["$where", "a.$gt", "a..b", ""] {
            assert!(filter(Collection::Runs, &[Cond::Eq(bad.into(), json!(1))]).is_err());
        }
        assert!(filter(Collection::Runs, &[Cond::Gt("x".into(), json!(null))]).is_err());
        assert!(filter(Collection::Runs, &[Cond::Eq("x".into(), json!(u64::MAX))]).is_err());
        let q = Query::new().sort("$natural", Order::Asc);
        assert!(sort(Collection::Runs, &q).is_err());
    }
}

//! Writes on MongoDB: the write concern, bulk `update`/`delete` commands cut to size and
//! checked for write errors, a shoal document as its Fishtest replacement, and shoal's own
//! run fields kept beside the run (`shoal_run_extras`).
//!
//! Must not: write with a weaker write concern than majority + journaled, or put a field
//! Fishtest's run schema does not know into `runs`.

use bson::{Bson, Document, doc};
use mongodb::options::{Acknowledgment, WriteConcern};
use serde_json::Value;

use super::indexes::RUN_EXTRAS;
use super::retry::{is_transient_code, mapping};
use super::{MongoStore, SHOAL_RUN_FIELDS, query};
use crate::store::bson_map::{self, MONGO_ID};
use crate::store::{Collection, Doc, StoreError, StoreResult, valid_path};

/// Statements per bulk `update`/`delete` command (well under MongoDB's 100,000 and 48 MB).
const BULK: usize = 500;
/// Bytes of documents per bulk command, roughly (run documents can be megabytes).
const BULK_BYTES: usize = 8 << 20;

/// The write concern of every write: acknowledged by a majority, journaled.
pub fn write_concern() -> WriteConcern {
    WriteConcern::builder()
        .w(Acknowledgment::Majority)
        .journal(true)
        .build()
}

pub(super) fn write_concern_doc() -> Document {
    doc! {"w": "majority", "j": true}
}

impl MongoStore {
    /// One bulk `update` command (ordered, journaled), checked for write errors.
    pub(super) fn bulk_update(&self, coll: &str, updates: Vec<Document>) -> StoreResult<()> {
        self.bulk(coll, "update", "updates", updates)
    }

    pub(super) fn bulk(
        &self,
        coll: &str,
        verb: &str,
        list: &str,
        mut ops: Vec<Document>,
    ) -> StoreResult<()> {
        while !ops.is_empty() {
            let mut take = 0;
            let mut bytes = 0usize;
            while take < ops.len() && take < BULK && (take == 0 || bytes < BULK_BYTES) {
                bytes = bytes.saturating_add(approx_bytes(&ops[take]));
                take += 1;
            }
            let rest = ops.split_off(take);
            let cmd = doc! {
                verb: coll, list: ops, "ordered": true, "writeConcern": write_concern_doc(),
            };
            let reply = self.retrying("bulk", || self.db.run_command(cmd.clone()).run())?;
            check_bulk_reply(&reply)?;
            ops = rest;
        }
        Ok(())
    }

    pub(super) fn replace_upsert(q: Document, u: Document) -> Document {
        doc! {"q": q, "u": u, "upsert": true}
    }

    /// Takes shoal's own fields out of a run document bound for `runs` (Fishtest validates
    /// run documents against a schema that knows no other field) and returns the update that
    /// keeps them in [`indexes::RUN_EXTRAS`], if the run has any.
    pub(super) fn split_run_extras(id: &str, run: &mut Document) -> Option<Document> {
        let mut extras = Document::new();
        for field in SHOAL_RUN_FIELDS {
            if let Some(v) = run.remove(*field) {
                extras.insert(*field, v);
            }
        }
        (!extras.is_empty()).then(|| doc! {"q": {"_id": id}, "u": {"$set": extras}, "upsert": true})
    }

    /// Puts shoal's own fields of these run documents back from [`indexes::RUN_EXTRAS`].
    pub(super) fn merge_run_extras(&self, runs: &mut [Doc]) -> StoreResult<()> {
        let ids: Vec<Bson> = runs
            .iter()
            .filter_map(|d| d.get("_id").and_then(Value::as_str))
            .map(|id| Bson::String(id.to_string()))
            .collect();
        if ids.is_empty() {
            return Ok(());
        }
        let c = self.named(RUN_EXTRAS);
        let extras: Vec<Document> = self.retrying("run_extras", || {
            c.find(doc! {"_id": {"$in": ids.clone()}}).run()?.collect()
        })?;
        if extras.is_empty() {
            return Ok(());
        }
        let mut by_id: std::collections::HashMap<String, Document> = extras
            .into_iter()
            .filter_map(|mut d| match d.remove("_id") {
                Some(Bson::String(id)) => Some((id, d)),
                _ => None,
            })
            .collect();
        for run in runs.iter_mut() {
            let Some(extra) = run
                .get("_id")
                .and_then(Value::as_str)
                .and_then(|id| by_id.remove(id))
            else {
                continue;
            };
            for (k, v) in extra {
                if SHOAL_RUN_FIELDS.contains(&k.as_str()) {
                    run.insert(k.clone(), bson_map::to_value(v, &k).map_err(mapping)?);
                }
            }
        }
        Ok(())
    }
}

/// A shoal document as the replacement of its Fishtest document, with its filter.
pub(super) fn replacement(coll: Collection, d: &Doc) -> StoreResult<(Document, Document)> {
    let id = d
        .get("_id")
        .and_then(Value::as_str)
        .ok_or(StoreError::MissingId)?;
    let mut b = bson_map::to_bson(coll, d).map_err(mapping)?;
    if bson_map::key_field(coll) != "_id" && !d.contains_key(MONGO_ID) {
        // A net or worker shoal made: MongoDB keeps (or gives) its ObjectId.
        b.remove("_id");
    }
    Ok((query::by_id(coll, id)?, b))
}

fn approx_bytes(d: &Document) -> usize {
    let mut n = 0usize;
    let mut stack: Vec<&Bson> = d.values().collect();
    while let Some(b) = stack.pop() {
        n = n.saturating_add(match b {
            Bson::String(s) => s.len() + 8,
            Bson::Binary(bin) => bin.bytes.len() + 8,
            Bson::Document(d) => {
                stack.extend(d.values());
                16
            }
            Bson::Array(a) => {
                stack.extend(a.iter());
                16
            }
            _ => 16,
        });
    }
    n
}

/// A bulk command's reply: `writeErrors` and `writeConcernError` are failures too.
pub(super) fn check_bulk_reply(reply: &Document) -> StoreResult<()> {
    if let Ok(errors) = reply.get_array("writeErrors")
        && let Some(Bson::Document(first)) = errors.first()
    {
        let code = first.get_i32("code").unwrap_or(0);
        let msg = first.get_str("errmsg").unwrap_or_default().to_string();
        if code == 11000 {
            return Err(StoreError::Duplicate(msg));
        }
        return Err(StoreError::Backend {
            backend: "mongodb",
            message: format!("write error {code}: {msg}"),
            transient: is_transient_code(code),
        });
    }
    if let Ok(wce) = reply.get_document("writeConcernError") {
        let code = wce.get_i32("code").unwrap_or(0);
        return Err(StoreError::Backend {
            backend: "mongodb",
            message: format!(
                "write concern error {code}: {}",
                wce.get_str("errmsg").unwrap_or_default()
            ),
            transient: is_transient_code(code),
        });
    }
    Ok(())
}

/// Adds `by` to `field` of the document with shoal id `id`, with MongoDB's `$inc` (atomic on
/// the server, so instances counting at once lose nothing). Retried like every call: a reply
/// lost after the server applied it may count twice, never zero times.
pub(super) fn increment(
    store: &MongoStore,
    coll: Collection,
    id: &str,
    field: &str,
    by: i64,
) -> StoreResult<bool> {
    if coll == Collection::Runs || field == "_id" || field.contains('.') || !valid_path(field) {
        return Err(StoreError::InvalidQuery(format!(
            "cannot increment {field:?} of {}",
            coll.name()
        )));
    }
    let filter = query::by_id(coll, id)?;
    let c = store.coll(coll);
    // An int32 step keeps an int32 field int32 (Fishtest's `downloads`; the server widens it
    // only past int32's range).
    let step = i32::try_from(by).map_or(Bson::Int64(by), Bson::Int32);
    let update = doc! {"$inc": {field: step}};
    let r = store.retrying("increment", || {
        c.update_one(filter.clone(), update.clone()).run()
    })?;
    Ok(r.matched_count > 0)
}

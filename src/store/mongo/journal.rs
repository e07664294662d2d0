//! The run journal's entries as MongoDB documents (`shoal_journal`), both ways.
//!
//! Must not: store a patch key as a field name (its dots would be paths to MongoDB).

use bson::{Bson, Document, doc};

use super::retry::mapping;
use crate::store::bson_map;
use crate::store::{Doc, JournalEntry, StoreError, StoreResult};

/// A journal entry as its MongoDB document: the patch as `[{k, v}]` pairs (its keys, like
/// `tasks.12`, hold dots, which MongoDB field names should not).
pub fn journal_doc(e: &JournalEntry) -> StoreResult<Document> {
    let seq = i64::try_from(e.seq)
        .map_err(|_| StoreError::InvalidQuery(format!("journal seq {} too large", e.seq)))?;
    let mut pairs = Vec::with_capacity(e.patch.len());
    for (k, v) in &e.patch {
        let v = bson_map::from_value(v, k).map_err(mapping)?;
        pairs.push(Bson::Document(doc! {"k": k.clone(), "v": v}));
    }
    Ok(doc! {"_id": seq, "run_id": e.run_id.clone(), "patch": pairs})
}

/// The inverse of [`journal_doc`].
pub fn journal_entry(d: &Document) -> StoreResult<JournalEntry> {
    let corrupt = |what: &str| StoreError::Backend {
        backend: "mongodb",
        message: format!("journal entry {:?}: {what}", d.get("_id")),
        transient: false,
    };
    let seq = match d.get("_id") {
        Some(Bson::Int64(n)) => u64::try_from(*n).map_err(|_| corrupt("negative seq"))?,
        Some(Bson::Int32(n)) => u64::try_from(*n).map_err(|_| corrupt("negative seq"))?,
        _ => return Err(corrupt("no seq")),
    };
    let run_id = d.get_str("run_id").map_err(|_| corrupt("no run_id"))?;
    let mut patch = Doc::new();
    for pair in d.get_array("patch").map_err(|_| corrupt("no patch"))? {
        let Bson::Document(p) = pair else {
            return Err(corrupt("patch pair"));
        };
        let k = p.get_str("k").map_err(|_| corrupt("patch key"))?;
        let v = p.get("v").cloned().unwrap_or(Bson::Null);
        patch.insert(k.to_string(), bson_map::to_value(v, k).map_err(mapping)?);
    }
    Ok(JournalEntry {
        seq,
        run_id: run_id.to_string(),
        patch,
    })
}

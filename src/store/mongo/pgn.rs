//! PGN reads on MongoDB: a PGN blob fetched whole and kept among the last few read (a
//! download reads it in chunks), and the PGN records of a run without their blobs.
//!
//! Must not: keep more than [`RECENT_PGNS`] blobs, or fetch a blob to list PGNs.

use std::sync::Arc;

use bson::{Bson, Document, doc, oid::ObjectId};

use super::MongoStore;
use crate::store::{PgnHandle, PgnInfo, StoreError, StoreResult};

/// How many PGN blobs [`MongoStore`] keeps for chunked reads (each at most Fishtest's 16 MB
/// document size).
const RECENT_PGNS: usize = 4;

impl MongoStore {
    /// A PGN's bytes: from the recent ones, else fetched whole (then kept).
    pub(super) fn pgn_blob(&self, handle: &PgnHandle) -> StoreResult<Arc<Vec<u8>>> {
        let key = handle.key();
        if let Some((_, b)) = self.recent_pgns.lock().iter().find(|(k, _)| k == key) {
            return Ok(b.clone());
        }
        let oid = ObjectId::parse_str(key)
            .map_err(|_| StoreError::InvalidQuery(format!("not a PGN handle: {handle:?}")))?;
        let coll = self.named("pgns");
        let found = self.retrying("pgn_read", || {
            coll.find_one(doc! {"_id": oid})
                .projection(doc! {"pgn_zip": 1})
                .run()
        })?;
        let bytes = match found.and_then(|mut d| d.remove("pgn_zip")) {
            Some(Bson::Binary(b)) => Arc::new(b.bytes),
            _ => return Ok(Arc::new(Vec::new())),
        };
        let mut recent = self.recent_pgns.lock();
        if recent.len() >= RECENT_PGNS {
            recent.pop_front();
        }
        recent.push_back((key.to_string(), bytes.clone()));
        Ok(bytes)
    }

    pub(super) fn pgn_doc_info(d: &Document) -> Option<(String, PgnInfo)> {
        let id = d.get_object_id("_id").ok()?.to_hex();
        let run_task = d.get_str("run_id").ok()?.to_string();
        let size = match d.get("size") {
            Some(Bson::Int32(n)) => u64::try_from(*n).ok()?,
            Some(Bson::Int64(n)) => u64::try_from(*n).ok()?,
            _ => 0,
        };
        Some((
            id.clone(),
            PgnInfo {
                handle: PgnHandle::new(id),
                run_task,
                size,
            },
        ))
    }

    pub(super) fn pgn_infos(&self, filter: Document) -> StoreResult<Vec<(String, PgnInfo)>> {
        let coll = self.named("pgns");
        let docs: Vec<Document> = self.retrying("pgn_find", || {
            coll.find(filter.clone())
                .projection(doc! {"pgn_zip": 0})
                .sort(doc! {"_id": 1})
                .run()?
                .collect()
        })?;
        Ok(docs.iter().filter_map(Self::pgn_doc_info).collect())
    }
}

/// `len` bytes of `bytes` from `offset`, clamped to its end.
pub(super) fn chunk(bytes: &[u8], offset: u64, len: usize) -> &[u8] {
    let start = usize::try_from(offset)
        .unwrap_or(usize::MAX)
        .min(bytes.len());
    let end = start.saturating_add(len).min(bytes.len());
    &bytes[start..end]
}

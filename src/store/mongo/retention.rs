//! PGN retention on MongoDB: the walk over one class's runs older than the cutoff (finished
//! or not, deleted or not, the time control; one indexed `run_id` prefix probe of `pgns` per
//! run) and the deletion of a bounded batch of one run's PGNs (`delete_many` over their
//! `_id`s), after the run is checked again.
//!
//! Must not: delete a PGN of a run that is not, when checked just before, of the class and
//! older than the cutoff; delete more than the batch it chose.

use bson::{Bson, Document, doc, oid::ObjectId};

use super::{MongoStore, query};
use crate::store::{
    Collection, Date, ExpiredRuns, PgnClass, PgnsDeleted, RetentionWindow, RunPosition, StoreError,
    StoreResult,
};

/// Fishtest's LTC test on `args.tc` (`re.match("^([2-9][0-9])|([1-9][0-9][0-9])", tc)`:
/// both branches anchored, as `re.match` anchors them).
const LTC_TC: &str = "^([2-9][0-9]|[1-9][0-9][0-9])";

/// `Store::expired_pgn_runs`.
pub(super) fn expired_runs(
    store: &MongoStore,
    window: &RetentionWindow,
    after: Option<&RunPosition>,
    limit: usize,
) -> StoreResult<ExpiredRuns> {
    let mut filter = expired_filter(window)?;
    if let Some(p) = after {
        let at = bson_date(&p.last_updated)?;
        // Run ids are ObjectIds (as `query::by_id` maps them), else strings.
        let id = match ObjectId::parse_str(&p.id) {
            Ok(o) if p.id.bytes().all(|b| !b.is_ascii_uppercase()) => Bson::ObjectId(o),
            _ => Bson::String(p.id.clone()),
        };
        filter.insert(
            "$or",
            vec![
                Bson::Document(doc! {"last_updated": {"$gt": at.clone()}}),
                Bson::Document(doc! {"last_updated": at, "_id": {"$gt": id}}),
            ],
        );
    }
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let runs = store.coll(Collection::Runs);
    let found: Vec<Document> = store.retrying("expired_pgn_runs", || {
        runs.find(filter.clone())
            .projection(doc! {"_id": 1, "last_updated": 1})
            .sort(doc! {"last_updated": 1, "_id": 1})
            .limit(limit)
            .run()?
            .collect()
    })?;
    let pgns = store.named("pgns");
    let mut page = ExpiredRuns::default();
    for d in &found {
        let id = match d.get("_id") {
            Some(Bson::ObjectId(o)) => o.to_hex(),
            Some(Bson::String(s)) => s.clone(),
            _ => continue,
        };
        let last_updated = match d.get("last_updated") {
            Some(Bson::DateTime(t)) => {
                match chrono::DateTime::from_timestamp_millis(t.timestamp_millis()) {
                    Some(t) => Date(t).to_iso(),
                    None => continue,
                }
            }
            _ => continue,
        };
        let prefix = format!("^{}-", regex::escape(&id));
        let one = store.retrying("expired_pgn_runs", || {
            pgns.find_one(doc! {"run_id": {"$regex": prefix.clone()}})
                .projection(doc! {"_id": 1})
                .run()
        })?;
        if one.is_some() {
            page.with_pgns.push(id.clone());
        }
        page.runs = page.runs.saturating_add(1);
        page.last = Some(RunPosition { last_updated, id });
    }
    Ok(page)
}

/// `Store::pgn_delete_expired`.
pub(super) fn delete_expired(
    store: &MongoStore,
    run_id: &str,
    window: &RetentionWindow,
    limit: usize,
    max_bytes: u64,
) -> StoreResult<PgnsDeleted> {
    // No multi-document transaction: the run is checked just before the batch is deleted
    // (a run revived in between, within milliseconds, could lose this one batch).
    let mut filter = expired_filter(window)?;
    filter.extend(query::by_id(Collection::Runs, run_id)?);
    let runs = store.coll(Collection::Runs);
    if store.retrying("pgn_delete_expired", || {
        runs.count_documents(filter.clone()).limit(1).run()
    })? == 0
    {
        return Ok(PgnsDeleted::default());
    }
    let pattern = format!("^{}-[0-9]+$", regex::escape(run_id));
    let pgns = store.named("pgns");
    let found: Vec<Document> = store.retrying("pgn_delete_expired", || {
        pgns.find(doc! {"run_id": {"$regex": pattern.clone()}})
            // `pgn_doc_info` reads all three (a document without `run_id` would be skipped).
            .projection(doc! {"_id": 1, "run_id": 1, "size": 1})
            .sort(doc! {"_id": 1})
            .limit(i64::try_from(limit).unwrap_or(i64::MAX))
            .run()?
            .collect()
    })?;
    let mut ids = Vec::new();
    let mut bytes = 0u64;
    for d in &found {
        let (Some(id), Some((_, info))) = (d.get("_id"), MongoStore::pgn_doc_info(d)) else {
            continue;
        };
        let total = bytes.saturating_add(info.size);
        if !ids.is_empty() && total > max_bytes {
            break;
        }
        bytes = total;
        ids.push(id.clone());
    }
    if ids.is_empty() {
        return Ok(PgnsDeleted::default());
    }
    let more = ids.len() < found.len() || found.len() >= limit;
    let selected = ids.len();
    let filter = doc! {"_id": {"$in": ids}};
    let deleted = store.retrying("pgn_delete_expired", || {
        pgns.delete_many(filter.clone()).run()
    })?;
    store.recent_pgns.lock().clear();
    if deleted.deleted_count < selected as u64 {
        // Some were deleted by someone else meanwhile: their sizes are not ours to count.
        bytes = bytes
            .saturating_mul(deleted.deleted_count)
            .checked_div(selected as u64)
            .unwrap_or(0);
    }
    Ok(PgnsDeleted {
        count: deleted.deleted_count,
        bytes,
        more,
    })
}

/// The runs PGN retention may empty: of the window's class, `last_updated` before its
/// cutoff (and not before `since`, when set).
fn expired_filter(window: &RetentionWindow) -> StoreResult<Document> {
    let mut f = Document::new();
    f.insert("finished", window.class.finished());
    let mut updated = doc! {"$lt": bson_date(&window.cutoff.to_iso())?};
    if let Some(since) = &window.since {
        updated.insert("$gte", bson_date(&since.to_iso())?);
    }
    f.insert("last_updated", updated);
    match window.class {
        PgnClass::Deleted => {
            f.insert("deleted", true);
        }
        class => {
            f.insert("deleted", doc! {"$ne": true});
            match class {
                PgnClass::Stc => {
                    f.insert("args.tc", doc! {"$not": {"$regex": LTC_TC}});
                }
                PgnClass::Ltc => {
                    f.insert("args.tc", doc! {"$regex": LTC_TC});
                }
                _ => {}
            }
        }
    }
    Ok(f)
}

/// An ISO date string (a [`Date`]'s form) as a BSON date.
fn bson_date(iso: &str) -> StoreResult<Bson> {
    let t = chrono::DateTime::parse_from_rfc3339(iso)
        .map_err(|e| StoreError::InvalidQuery(format!("bad date {iso:?}: {e}")))?;
    Ok(Bson::DateTime(bson::DateTime::from_millis(
        t.timestamp_millis(),
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_filter_names_finished_runs_before_the_cutoff_as_bson_dates() {
        let cutoff = Date(chrono::DateTime::from_timestamp(1_700_000_000, 0).expect("t"));
        let window = |class| RetentionWindow {
            class,
            cutoff,
            since: None,
        };
        let f = expired_filter(&window(PgnClass::Stc)).expect("filter");
        assert_eq!(f.get("finished"), Some(&Bson::Boolean(true)));
        assert!(f.get_document("args.tc").expect("stc").contains_key("$not"));
        let f = expired_filter(&window(PgnClass::Deleted)).expect("filter");
        assert_eq!(f.get("deleted"), Some(&Bson::Boolean(true)));
        let f = expired_filter(&window(PgnClass::Unfinished)).expect("filter");
        assert_eq!(f.get("finished"), Some(&Bson::Boolean(false)));
        assert!(f.get("args.tc").is_none());
        assert!(
            !f.get_document("last_updated")
                .expect("d")
                .contains_key("$gte")
        );
        let since = Date(chrono::DateTime::from_timestamp(1_600_000_000, 0).expect("t"));
        let f = expired_filter(&RetentionWindow {
            since: Some(since),
            ..window(PgnClass::Unfinished)
        })
        .expect("filter");
        let updated = f.get_document("last_updated").expect("last_updated");
        assert_eq!(
            updated.get("$gte"),
            Some(&Bson::DateTime(bson::DateTime::from_millis(
                1_600_000_000_000
            )))
        );
        let f = expired_filter(&window(PgnClass::Ltc)).expect("filter");
        let ltc = regex::Regex::new(LTC_TC).expect("regex");
        for (tc, is_ltc) in [
            ("60+0.6", true),
            ("20+0.2", true),
            ("10+0.1", false),
            ("100+1", true),
            ("9+0.1", false),
            ("40/10+0.1", true),
        ] {
            assert_eq!(ltc.is_match(tc), is_ltc, "{tc}");
        }
        assert_eq!(
            f.get_document("args.tc")
                .expect("ltc")
                .get_str("$regex")
                .ok(),
            Some(LTC_TC)
        );
        let lt = f.get_document("last_updated").expect("range");
        assert_eq!(
            lt.get("$lt"),
            Some(&Bson::DateTime(bson::DateTime::from_millis(
                1_700_000_000_000
            )))
        );
        assert!(bson_date("yesterday").is_err());
    }
}

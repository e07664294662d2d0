//! The journal and the run records: acknowledged run changes appended (with their actions, in
//! one transaction), the entries not yet folded into a run document read back at start, and
//! the write-behind's flush of whole run records, which trims the journal up to each run's
//! flushed sequence number (`run_seq`).
//!
//! Must not: interpret the patches (the run database replays them); replay an entry at or
//! below its run's flushed sequence number.

use std::time::Instant;

use rusqlite::params;

use super::{SqliteStore, observe, parse_doc, upsert, upsert_run};
use crate::store::{Collection, Doc, JournalEntry, RunRecord, StoreError, StoreResult};

/// `Store::journal_append`.
pub(super) fn append(
    store: &SqliteStore,
    entries: &[JournalEntry],
    actions: &[Doc],
) -> StoreResult<()> {
    let started = Instant::now();
    let r = store.write(|c| {
        let tx = c.transaction()?;
        {
            let mut stmt = tx.prepare_cached(
                "INSERT OR REPLACE INTO journal (seq, run_id, patch) VALUES (?1, ?2, ?3)",
            )?;
            for e in entries {
                let text =
                    serde_json::to_string(&e.patch).map_err(|source| StoreError::Corrupt {
                        collection: "journal",
                        id: e.seq.to_string(),
                        source,
                    })?;
                stmt.execute(params![e.seq as i64, e.run_id, text])?;
            }
        }
        for doc in actions {
            upsert(&tx, Collection::Actions, doc)?;
        }
        tx.commit()?;
        Ok(())
    });
    observe("journal_append", "journal", started);
    r
}

/// `Store::journal_pending`.
pub(super) fn pending(store: &SqliteStore) -> StoreResult<(Vec<JournalEntry>, u64)> {
    store.read(|c| {
        let max: i64 = c.query_row(
            "SELECT MAX(COALESCE((SELECT MAX(seq) FROM journal), 0),
                        COALESCE((SELECT MAX(seq) FROM run_seq), 0))",
            [],
            |r| r.get(0),
        )?;
        let mut stmt = c.prepare(
            "SELECT j.seq, j.run_id, j.patch FROM journal j
             LEFT JOIN run_seq r ON r.run_id = j.run_id
             WHERE r.seq IS NULL OR j.seq > r.seq
             ORDER BY j.seq",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, String>(2)?,
            ))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (seq, run_id, text) = row?;
            let patch = parse_doc(Collection::Runs, &run_id, &text)?;
            out.push(JournalEntry {
                seq: u64::try_from(seq).unwrap_or(0),
                run_id,
                patch,
            });
        }
        Ok((out, u64::try_from(max).unwrap_or(0)))
    })
}

/// `Store::flush_runs`.
pub(super) fn flush_runs(store: &SqliteStore, runs: &[RunRecord]) -> StoreResult<()> {
    let started = Instant::now();
    let r = store.write(|c| {
        let tx = c.transaction()?;
        for run in runs {
            upsert_run(&tx, run)?;
            let seq = i64::try_from(run.seq).unwrap_or(i64::MAX);
            tx.prepare_cached("DELETE FROM journal WHERE run_id = ?1 AND seq <= ?2")?
                .execute(params![run.id, seq])?;
            tx.prepare_cached(
                "INSERT INTO run_seq (run_id, seq) VALUES (?1, ?2)
                 ON CONFLICT(run_id) DO UPDATE SET seq = MAX(seq, excluded.seq)",
            )?
            .execute(params![run.id, seq])?;
        }
        tx.commit()?;
        Ok(())
    });
    observe("flush_runs", "runs", started);
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Store;
    use crate::store::sqlite::tests::{doc, store};
    use serde_json::json;

    #[test]
    fn journal_append_flush_and_trim() {
        let (_d, s) = store();
        let entry = |seq: u64, run: &str| JournalEntry {
            seq,
            run_id: run.into(),
            patch: doc(json!({"workers": seq})),
        };
        s.journal_append(&[entry(1, "a"), entry(2, "b"), entry(3, "a")], &[])
            .expect("append");
        assert_eq!(s.journal_pending().expect("all").0.len(), 3);
        s.flush_runs(&[
            RunRecord::from_doc(&doc(json!({"_id": "a", "workers": 3})), 3).expect("record"),
        ])
        .expect("flush");
        // A late entry for "a" (seq 1 <= its flushed seq 3, written after the flush) is stored
        // but never replayed.
        s.journal_append(&[entry(1, "a"), entry(5, "a")], &[])
            .expect("late");
        let (left, max) = s.journal_pending().expect("pending");
        let left: Vec<(u64, String)> = left.iter().map(|e| (e.seq, e.run_id.clone())).collect();
        assert_eq!(left, vec![(2, "b".to_string()), (5, "a".to_string())]);
        assert_eq!(max, 5);
        assert!(s.get(Collection::Runs, "a").expect("get").is_some());
    }
}

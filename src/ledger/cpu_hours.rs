//! The CPU-hour totals: what each user's finished tasks have cost (the figure stop_run's
//! 1000-hour rule reads).
//!
//! Owns: adding a finished task's hours in memory (the run database calls it under the run's
//! lock, where no store write may happen), the stored totals in `shoal_kvstore`
//! (`cpu_hours:<user>`), and `persist_cpu_hours`, which the write-behind calls each tick and at
//! shutdown.
//! Must not: write the store from `add_cpu_hours` (it runs under a run's lock).

use serde_json::{Value, json};

use super::{Ledger, LedgerResult};
use crate::store::{Collection, Doc};

impl Ledger {
    /// CPU hours a user has contributed (finished tasks' games × concurrency × game time).
    pub fn cpu_hours(&self, username: &str) -> LedgerResult<f64> {
        let pending = self
            .cpu_hours_pending
            .lock()
            .get(username)
            .copied()
            .unwrap_or(0.0);
        Ok(self.stored_cpu_hours(username)? + pending)
    }

    fn stored_cpu_hours(&self, username: &str) -> LedgerResult<f64> {
        if let Some(doc) = self
            .store
            .get(Collection::ShoalKv, &format!("cpu_hours:{username}"))?
        {
            return Ok(doc.get("value").and_then(Value::as_f64).unwrap_or(0.0));
        }
        Ok(0.0)
    }

    /// Adds a finished task's CPU time to its user. In memory: the caller may hold the run's
    /// lock; [`Ledger::persist_cpu_hours`] writes it.
    pub fn add_cpu_hours(&self, username: &str, hours: f64) {
        *self
            .cpu_hours_pending
            .lock()
            .entry(username.to_string())
            .or_insert(0.0) += hours;
    }

    /// Adds the pending CPU hours to the stored totals (write-behind job, shutdown). A user
    /// whose write fails keeps its hours pending for the next call.
    pub fn persist_cpu_hours(&self) -> LedgerResult<usize> {
        let pending = std::mem::take(&mut *self.cpu_hours_pending.lock());
        let mut written = 0;
        let mut failure = None;
        // Read-modify-write of one document per user: serialise so no increment is lost.
        let _guard = self.cpu_hours_lock.lock();
        for (username, hours) in pending {
            let result = self.stored_cpu_hours(&username).and_then(|total| {
                let mut doc = Doc::new();
                doc.insert("_id".into(), json!(format!("cpu_hours:{username}")));
                doc.insert("value".into(), json!(total + hours));
                self.store.put(Collection::ShoalKv, &doc)
            });
            match result {
                Ok(()) => written += 1,
                Err(e) => {
                    *self.cpu_hours_pending.lock().entry(username).or_insert(0.0) += hours;
                    failure = Some(e);
                }
            }
        }
        match failure {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }
}

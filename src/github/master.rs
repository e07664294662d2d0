//! Official master as shoal last saw it: its newest commit and the newest bench its messages
//! state (the base bench of a new test and the presets' default). Refreshed by a periodic job;
//! kept in the store (`shoal_kvstore` `shoal_official_master`) so a restart starts from it, and its
//! SHA in Fishtest's `kvstore` `official_master_sha` (`{_id, value: <40 hex>}`), which Fishtest
//! reads when it compares commits; a change is logged as a `system_event` and shown in
//! `/metrics`. A store write that fails is made again at the next refresh, master changed or
//! not.
//!
//! Must not: be awaited by a page or the worker API (they read [`Github::master`], memory).

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Github, GithubError};
use crate::store::{Collection, Doc};

const KEY: &str = "shoal_official_master";
/// Fishtest's key for official master's SHA.
pub const SHA_KEY: &str = "official_master_sha";

/// Official master, as last refreshed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Master {
    /// The newest commit.
    pub sha: String,
    pub subject: String,
    /// The newest bench master's messages state, and the commit stating it.
    pub bench: Option<u64>,
    pub bench_sha: Option<String>,
    /// When it was read from GitHub (Unix seconds).
    pub refreshed_at: i64,
}

/// What a refresh found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MasterRefresh {
    Unchanged,
    /// A new master (or the first one seen).
    Changed(Arc<Master>),
}

impl Github {
    /// Official master as last refreshed (memory; `None` before the first refresh and with
    /// nothing stored).
    pub fn master(&self) -> Option<Arc<Master>> {
        self.master.load_full()
    }

    /// Reads the stored master (at start-up, in the pool).
    pub fn load_master_blocking(&self) {
        match self.store.get(Collection::ShoalKv, KEY) {
            Ok(Some(doc)) => {
                match serde_json::from_value::<Master>(
                    doc.get("value").cloned().unwrap_or(Value::Null),
                ) {
                    Ok(m) => {
                        publish(&m);
                        // Stored as Fishtest reads it too? If not (a store written before
                        // shoal kept `official_master_sha`), the next refresh writes it.
                        let sha_stored = matches!(
                            self.store.get(Collection::Kvstore, SHA_KEY),
                            Ok(Some(d)) if d.get("value").and_then(Value::as_str) == Some(m.sha.as_str())
                        );
                        if sha_stored {
                            *self.master_stored.lock() = Some(m.sha.clone());
                        }
                        self.master.store(Some(Arc::new(m)));
                    }
                    Err(e) => tracing::warn!(error = %e, "stored official master unreadable"),
                }
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the stored official master"),
        }
    }

    /// Asks GitHub for master now; a change is stored and logged.
    pub async fn refresh_master(&self) -> Result<MasterRefresh, GithubError> {
        let result = self.master_bench().await;
        metrics::counter!("shoal_github_master_refresh_total",
            "result" => if result.is_ok() { "ok" } else { "failed" })
        .increment(1);
        let (head, bench) = result?;
        let m = Master {
            sha: head.sha.clone(),
            subject: head.subject().to_string(),
            bench: bench.as_ref().map(|(_, b)| *b),
            bench_sha: bench.map(|(c, _)| c.sha),
            refreshed_at: chrono::Utc::now().timestamp(),
        };
        let before = self.master();
        let unchanged = before
            .as_ref()
            .is_some_and(|b| b.sha == m.sha && b.bench == m.bench);
        let stored = self.master_stored.lock().as_deref() == Some(m.sha.as_str());
        if unchanged && stored {
            return Ok(MasterRefresh::Unchanged);
        }
        let m = match (unchanged, before) {
            (true, Some(b)) => b,
            _ => {
                let m = Arc::new(m);
                publish(&m);
                self.master.store(Some(Arc::clone(&m)));
                m
            }
        };
        let store = Arc::clone(&self.store);
        let ledger = Arc::clone(&self.ledger);
        let doc_m = Arc::clone(&m);
        let saved = self
            .offload
            .run(move || {
                let mut doc = Doc::new();
                doc.insert("_id".into(), json!(KEY));
                doc.insert("value".into(), json!(&*doc_m));
                store.put(Collection::ShoalKv, &doc)?;
                let mut doc = Doc::new();
                doc.insert("_id".into(), json!(SHA_KEY));
                doc.insert("value".into(), json!(doc_m.sha));
                store.put(Collection::Kvstore, &doc)?;
                if unchanged {
                    return Ok(());
                }
                ledger.log_system_event(format!(
                    "official master {}: {}{}",
                    &doc_m.sha[..doc_m.sha.len().min(10)],
                    doc_m.subject,
                    doc_m
                        .bench
                        .map(|b| format!(" (Bench: {b})"))
                        .unwrap_or_default()
                ))
            })
            .await;
        match saved {
            Ok(Ok(())) => *self.master_stored.lock() = Some(m.sha.clone()),
            Ok(Err(e)) => tracing::warn!(error = %e, "official master not stored"),
            Err(e) => tracing::warn!(error = %e, "official master not stored"),
        }
        if unchanged {
            Ok(MasterRefresh::Unchanged)
        } else {
            Ok(MasterRefresh::Changed(m))
        }
    }
}

fn publish(m: &Master) {
    metrics::gauge!("shoal_github_master_bench").set(m.bench.unwrap_or(0) as f64);
    metrics::gauge!("shoal_github_master_refreshed_seconds").set(m.refreshed_at as f64);
}

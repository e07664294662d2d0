//! The sampler of `GET /api/limits` during the storm: each key's peak holders against its
//! max.
//!
//! Must not: run past its deadline, or judge (the report does).

use std::collections::BTreeMap;
use std::time::Instant;

use hyper::Method;
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{EXAMPLES, SAMPLE_EVERY, UNLIMITED};
use crate::SimError;
use crate::client::Client;

/// One limit's peaks, as the sampler saw them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct LimitPeak {
    pub name: String,
    pub kind: String,
    pub key: String,
    /// The limit's max at the last sample (a key may have its own: a run's window).
    pub max: u64,
    /// The highest holders seen under one key, that key and its max then.
    pub peak_key_holders: u64,
    pub peak_key: String,
    pub peak_key_max: u64,
    /// The highest holders seen over all keys.
    pub peak_total_holders: u64,
    pub rejected: u64,
    /// Samples in which a key held more than its max (must be 0).
    pub over_max: u64,
    pub over_max_examples: Vec<String>,
}

/// What the sampler collects.
#[derive(Debug, Default)]
pub struct Peaks {
    pub samples: u64,
    pub failed_samples: u64,
    pub limits: BTreeMap<String, LimitPeak>,
}

pub(super) fn u(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

pub(super) fn s(v: &Value, k: &str) -> String {
    v.get(k).and_then(Value::as_str).unwrap_or("").to_string()
}

impl Peaks {
    /// Folds one `/api/limits` reply in.
    pub fn add(&mut self, reply: &Value) {
        let Some(limits) = reply.get("limits").and_then(Value::as_array) else {
            self.failed_samples += 1;
            return;
        };
        self.samples += 1;
        for l in limits {
            let name = s(l, "name");
            let p = self
                .limits
                .entry(name.clone())
                .or_insert_with(|| LimitPeak {
                    name,
                    kind: s(l, "kind"),
                    key: s(l, "key"),
                    ..LimitPeak::default()
                });
            p.max = u(l, "max");
            p.rejected = p.rejected.max(u(l, "rejected"));
            p.peak_total_holders = p.peak_total_holders.max(u(l, "holders"));
            for k in l
                .get("keys")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let (held, max) = (u(k, "holders"), u(k, "max"));
                if held > p.peak_key_holders || p.peak_key.is_empty() {
                    p.peak_key_holders = held;
                    p.peak_key = s(k, "key");
                    p.peak_key_max = max;
                }
                if max < UNLIMITED && held > max {
                    p.over_max += 1;
                    if p.over_max_examples.len() < EXAMPLES {
                        p.over_max_examples
                            .push(format!("{} held {held} > max {max}", s(k, "key")));
                    }
                }
            }
        }
    }
}

/// Reads `/api/limits` every 200 ms into `peaks` until `deadline`.
pub async fn sample(client: Client, peaks: std::sync::Arc<Mutex<Peaks>>, deadline: Instant) {
    for _ in 0..100_000_000u64 {
        let t = Instant::now();
        if t >= deadline {
            return;
        }
        match get_json(&client, "/api/limits").await {
            Ok(v) => peaks.lock().add(&v),
            Err(_) => peaks.lock().failed_samples += 1,
        }
        tokio::time::sleep_until((t + SAMPLE_EVERY).into()).await;
    }
}

pub(super) async fn get_json(client: &Client, path: &str) -> Result<Value, SimError> {
    let r = client
        .call(Method::GET, path, None)
        .await
        .map_err(|e| SimError::Server(format!("{path}: {e}")))?;
    serde_json::from_slice(&r.body).map_err(|e| SimError::Server(format!("{path}: {e}")))
}

//! The engine's read-only views: every limit with its keys (for `/api/limits`, the page and
//! the metrics), the totals, the units held, and the invariant the property tests check.
//!
//! Must not: change any state.

use std::collections::HashMap;
use std::time::Instant;

use serde::Serialize;

use super::{Engine, Holder, LimitId};
use crate::limits::def::{Kind, Source, Unit};

impl Engine {
    /// Units held per key of `limit` (the input of computations that look at current use).
    pub fn held(&self, limit: LimitId) -> Vec<(String, u64)> {
        let inner = self.inner.lock();
        inner
            .limits
            .get(limit)
            .map(|l| {
                l.keys
                    .iter()
                    .filter(|(_, k)| k.held > 0)
                    .map(|(key, k)| (key.to_string(), k.held))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Every limit with its keys, for `/api/limits`, the page and the metrics.
    pub fn view(&self, now: Instant) -> Vec<LimitView> {
        let inner = self.inner.lock();
        let mut tasks: HashMap<(LimitId, &str), Vec<String>> = HashMap::new();
        for (h, grants) in &inner.holders {
            for g in grants {
                let list = tasks.entry((g.limit, &*g.key)).or_default();
                if list.len() < 100 {
                    list.push(match h {
                        Holder::Task(r, t) => format!("{r}/{t}"),
                        Holder::Reservation(r) => format!("reservation {r}"),
                    });
                }
            }
        }
        inner
            .limits
            .iter()
            .enumerate()
            .map(|(id, l)| {
                let mut keys: Vec<KeyView> = if l.def.kind == Kind::Rate {
                    l.rate
                        .iter()
                        .filter(|(_, w)| now.saturating_duration_since(w.start) < l.def.window)
                        .map(|(k, w)| KeyView {
                            key: k.clone(),
                            max: l.max,
                            holders: w.count,
                            waiters: 0,
                            rejected: w.rejected,
                            held_by: Vec::new(),
                        })
                        .collect()
                } else {
                    l.keys
                        .iter()
                        .map(|(k, s)| KeyView {
                            key: k.to_string(),
                            max: l.effective_max(Some(s), s.max),
                            holders: s.held,
                            waiters: s.waiters.len(),
                            rejected: s.rejected,
                            held_by: tasks.remove(&(id, &**k)).unwrap_or_default(),
                        })
                        .collect()
                };
                keys.sort_by(|a, b| b.holders.cmp(&a.holders).then(a.key.cmp(&b.key)));
                LimitView {
                    name: l.def.name.clone(),
                    kind: l.def.kind,
                    key: l.def.key.to_string(),
                    unit: l.def.unit,
                    max: l.max,
                    builtin: l.def.builtin,
                    scope: l.def.scope.as_ref().map(ToString::to_string),
                    window_s: (l.def.kind == Kind::Rate).then_some(l.def.window.as_secs_f64()),
                    holders: keys.iter().map(|k| k.holders).sum(),
                    waiters: keys.iter().map(|k| k.waiters).sum(),
                    rejected: l.rejected,
                    floating: l.floating.as_ref().map(|f| FloatView {
                        source: l.def.source,
                        default_max: l.def.max,
                        current_max: l.max,
                        refresh_s: l.def.refresh.as_secs_f64(),
                        retries: f.retries,
                        next_refresh_in_s: f
                            .next_refresh
                            .saturating_duration_since(now)
                            .as_secs_f64(),
                        last_refresh_s_ago: f
                            .refreshed
                            .map(|r| now.saturating_duration_since(r).as_secs_f64()),
                        last_error: f.last_error.clone(),
                    }),
                    keys,
                }
            })
            .collect()
    }

    /// Per limit: (name, max, units held, waiters, rejected) — the metrics, without the
    /// per-key detail.
    pub fn totals(&self) -> Vec<(String, u64, u64, usize, u64)> {
        let inner = self.inner.lock();
        inner
            .limits
            .iter()
            .map(|l| {
                let (held, waiters) = if l.def.kind == Kind::Rate {
                    (l.rate.values().map(|w| w.count).sum(), 0)
                } else {
                    l.keys.values().fold((0u64, 0usize), |(h, w), k| {
                        (h.saturating_add(k.held), w + k.waiters.len())
                    })
                };
                (l.def.name.clone(), l.max, held, waiters, l.rejected)
            })
            .collect()
    }

    /// Units `limit` holds under `key` (tests, invariant checks).
    pub fn held_by_key(&self, limit: LimitId, key: &str) -> u64 {
        let inner = self.inner.lock();
        inner
            .limits
            .get(limit)
            .and_then(|l| l.keys.get(key))
            .map_or(0, |k| k.held)
    }

    /// The holders' total per (limit, key) recomputed from the holder records, against the
    /// counters: the invariant the property tests check.
    pub fn consistent(&self) -> bool {
        let inner = self.inner.lock();
        let mut sums: HashMap<(LimitId, &str), u64> = HashMap::new();
        for grants in inner.holders.values() {
            for g in grants {
                *sums.entry((g.limit, &*g.key)).or_default() += g.units;
            }
        }
        inner.limits.iter().enumerate().all(|(id, l)| {
            l.keys
                .iter()
                .all(|(k, s)| sums.get(&(id, &**k)).copied().unwrap_or(0) == s.held)
        }) && sums.iter().all(|((id, k), units)| {
            inner
                .limits
                .get(*id)
                .and_then(|l| l.keys.get(*k))
                .is_some_and(|s| s.held == *units)
        })
    }
}

/// One limit as `/api/limits` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct LimitView {
    pub name: String,
    pub kind: Kind,
    pub key: String,
    pub unit: Unit,
    pub max: u64,
    pub builtin: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub window_s: Option<f64>,
    pub holders: u64,
    pub waiters: usize,
    pub rejected: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub floating: Option<FloatView>,
    pub keys: Vec<KeyView>,
}

/// One key of a limit. For a rate limit `holders` is the calls counted in the current window.
#[derive(Debug, Clone, Serialize)]
pub struct KeyView {
    pub key: String,
    pub max: u64,
    pub holders: u64,
    pub waiters: usize,
    pub rejected: u64,
    /// Up to 100 holders (`run/task`, or a waiter's reservation).
    pub held_by: Vec<String>,
}

/// A floating limit's refresh state.
#[derive(Debug, Clone, Serialize)]
pub struct FloatView {
    pub source: Option<Source>,
    pub default_max: u64,
    pub current_max: u64,
    pub refresh_s: f64,
    pub retries: u32,
    pub next_refresh_in_s: f64,
    pub last_refresh_s_ago: Option<f64>,
    pub last_error: Option<String>,
}

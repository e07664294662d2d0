//! Floating limits: an approver's edit of a max, the refreshes that are due, a refresh's
//! result or failure (with its backoff, 1 s to 60 s, doubling).
//!
//! Must not: compute a limit's value (the computations in `compute.rs` do, off the lock).

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{Engine, LimitId, key_state};
use crate::limits::def::{MAX_MAX, Source};

/// First retry of a failed floating refresh.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);

/// Longest wait between retries of a failing floating refresh.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The delay before retry `retries` (1-based) of a failed refresh: 1 s, 2 s, 4 s … 60 s.
pub fn backoff(retries: u32) -> Duration {
    let exp = retries.saturating_sub(1).min(16);
    BACKOFF_FIRST.saturating_mul(1u32 << exp).min(BACKOFF_MAX)
}

impl Engine {
    /// Sets a limit's max (an approver's edit). Built-in limits take their maxima from users
    /// and runs and cannot be edited.
    pub fn set_max(&self, limit: LimitId, max: u64) -> Result<u64, String> {
        if max == 0 || max > MAX_MAX {
            return Err(format!("max must be between 1 and {MAX_MAX}"));
        }
        let mut inner = self.inner.lock();
        let l = inner
            .limits
            .get_mut(limit)
            .ok_or_else(|| "no such limit".to_string())?;
        if l.def.builtin {
            return Err(format!(
                "the built-in limit {} cannot be edited",
                l.def.name
            ));
        }
        let old = l.max;
        l.max = max;
        let keys: Vec<Arc<str>> = l.keys.keys().cloned().collect();
        for k in keys {
            inner.serve(limit, &k);
        }
        Ok(old)
    }

    /// Floating limits whose refresh is due at `now`.
    pub fn due(&self, now: Instant) -> Vec<(LimitId, Source)> {
        let inner = self.inner.lock();
        inner
            .limits
            .iter()
            .enumerate()
            .filter_map(|(i, l)| {
                let f = l.floating.as_ref()?;
                (f.next_refresh <= now).then_some((i, l.def.source?))
            })
            .collect()
    }

    /// A refresh succeeded: `global` (if any) becomes the limit's max, `per_key` the values of
    /// those keys (others fall back to the global one); retries reset; next refresh one period
    /// on. Values are clamped to 1..=u32::MAX.
    pub fn refreshed(
        &self,
        limit: LimitId,
        global: Option<u64>,
        per_key: Vec<(String, u64)>,
        now: Instant,
    ) {
        let mut inner = self.inner.lock();
        let Some(l) = inner.limits.get_mut(limit) else {
            return;
        };
        let Some(f) = l.floating.as_mut() else {
            return;
        };
        f.retries = 0;
        f.last_error = None;
        f.refreshed = Some(now);
        f.next_refresh = now + l.def.refresh;
        if let Some(g) = global {
            l.max = g.clamp(1, MAX_MAX);
        }
        for k in l.keys.values_mut() {
            k.floating = None;
        }
        for (key, v) in per_key {
            if let Some(k) = key_state(&mut l.keys, &key) {
                k.floating = Some(v.clamp(1, MAX_MAX));
            }
        }
        l.keys.retain(|_, k| !k.idle());
        let keys: Vec<Arc<str>> = l.keys.keys().cloned().collect();
        for k in keys {
            inner.serve(limit, &k);
        }
    }

    /// A refresh failed: the old values stay, the retry counter grows, the next try is
    /// [`backoff`] away.
    pub fn refresh_failed(&self, limit: LimitId, error: String, now: Instant) {
        let mut inner = self.inner.lock();
        if let Some(f) = inner
            .limits
            .get_mut(limit)
            .and_then(|l| l.floating.as_mut())
        {
            f.retries = f.retries.saturating_add(1);
            f.next_refresh = now + backoff(f.retries);
            f.last_error = Some(error);
        }
    }
}

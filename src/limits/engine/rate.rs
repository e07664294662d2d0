//! Rate limits: fixed windows per key, counted and checked.
//!
//! Must not: grow without bound: a limit remembers at most [`MAX_RATE_KEYS`] keys (expired
//! windows are dropped first).

use std::time::Instant;

use super::{Engine, KeyCtx, RateLimited, RateWindow};
use crate::limits::def::Scope;

/// Most keys a rate limit remembers; beyond it expired windows are dropped first.
const MAX_RATE_KEYS: usize = 100_000;

impl Engine {
    /// Whether any rate limit applies to `scope`.
    pub fn has_rate(&self, scope: &Scope) -> bool {
        self.rate_scopes.iter().any(|(_, s)| s == scope)
    }

    /// Counts one call of `scope` in every rate limit scoped to it, in order; the first full
    /// window refuses (and the call is not counted further).
    pub fn rate_check(
        &self,
        scope: &Scope,
        ctx: &KeyCtx<'_>,
        now: Instant,
    ) -> Result<(), RateLimited> {
        if !self.has_rate(scope) {
            return Ok(());
        }
        let mut inner = self.inner.lock();
        for (id, s) in &self.rate_scopes {
            if s != scope {
                continue;
            }
            let Some(l) = inner.limits.get_mut(*id) else {
                continue;
            };
            let Some(key) = l.def.key.value(ctx) else {
                continue;
            };
            let window = l.def.window;
            if l.rate.len() >= MAX_RATE_KEYS && !l.rate.contains_key(key.as_ref()) {
                l.rate
                    .retain(|_, w| now.saturating_duration_since(w.start) < window);
                if l.rate.len() >= MAX_RATE_KEYS {
                    l.rate.clear();
                }
            }
            let max = l.max;
            let w = l.rate.entry(key.to_string()).or_insert(RateWindow {
                start: now,
                count: 0,
                rejected: 0,
            });
            if now.saturating_duration_since(w.start) >= window {
                *w = RateWindow {
                    start: now,
                    count: 0,
                    rejected: w.rejected,
                };
            }
            if w.count >= max {
                w.rejected = w.rejected.saturating_add(1);
                l.rejected = l.rejected.saturating_add(1);
                let retry_after = (w.start + window).saturating_duration_since(now);
                return Err(RateLimited {
                    name: l.def.name.clone(),
                    key: key.to_string(),
                    retry_after,
                });
            }
            w.count = w.count.saturating_add(1);
        }
        Ok(())
    }

    /// Takes back one call of `scope` counted by [`Engine::rate_check`] in the limits whose
    /// key `ctx` gives (a call that turned out to do nothing, e.g. a signup whose name was
    /// taken: it must not fill everybody's window). A window that has restarted since is
    /// left alone.
    pub fn rate_refund(&self, scope: &Scope, ctx: &KeyCtx<'_>, now: Instant) {
        if !self.has_rate(scope) {
            return;
        }
        let mut inner = self.inner.lock();
        for (id, s) in &self.rate_scopes {
            if s != scope {
                continue;
            }
            let Some(l) = inner.limits.get_mut(*id) else {
                continue;
            };
            let Some(key) = l.def.key.value(ctx) else {
                continue;
            };
            let window = l.def.window;
            if let Some(w) = l.rate.get_mut(key.as_ref())
                && now.saturating_duration_since(w.start) < window
            {
                w.count = w.count.saturating_sub(1);
            }
        }
    }
}

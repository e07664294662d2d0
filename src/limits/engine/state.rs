//! The engine's bookkeeping under its lock: whether grants fit, recording and taking back a
//! holder's grants, and serving waiters when units are freed.
//!
//! Must not: take another lock or block (the engine's mutex is held throughout).

use std::borrow::Cow;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use super::{Full, GrantRef, Held, Holder, Inner, LimitId, key_state};
use crate::limits::def::Kind;

impl Inner {
    pub(super) fn fits(
        &self,
        g: &GrantRef<'_>,
        credits: &[Option<&Holder>],
        reserved: bool,
    ) -> Result<(), Full> {
        let Some(l) = self.limits.get(g.limit) else {
            return Ok(());
        };
        let ks = l.keys.get(&*g.key);
        let max = l.effective_max(ks, g.max);
        let mut held = ks.map_or(0, |k| k.held);
        for c in credits.iter().flatten() {
            if let Some(grants) = self.holders.get(*c) {
                for h in grants.iter().filter(|h| h.is(g.limit, &g.key)) {
                    held = held.saturating_sub(h.units);
                }
            }
        }
        // Waiters queue ahead of newcomers: a key with waiters is full to everyone else.
        let queued = !reserved && ks.is_some_and(|k| !k.waiters.is_empty());
        match held.checked_add(g.units) {
            Some(total) if total <= max && !queued => Ok(()),
            _ => Err(Full {
                limit: g.limit,
                name: l.def.name.clone(),
                key: g.key.to_string(),
                max,
                held,
            }),
        }
    }

    /// Counts `grants` as `holder`'s: each key's counter, and one record per grant that
    /// shares the key's name (nothing is allocated for a key that already has a state).
    pub(super) fn put(&mut self, holder: Holder, grants: &[GrantRef<'_>]) {
        let mut record = Vec::with_capacity(grants.len());
        for g in grants {
            let Some(l) = self.limits.get_mut(g.limit) else {
                continue;
            };
            let Some(k) = key_state(&mut l.keys, &g.key) else {
                continue;
            };
            k.held = k.held.saturating_add(g.units);
            if g.max.is_some() {
                k.max = g.max;
            }
            record.push(Held {
                limit: g.limit,
                key: Arc::clone(&k.name),
                units: g.units,
            });
        }
        match self.holders.entry(holder) {
            Entry::Occupied(mut e) => e.get_mut().extend(record),
            Entry::Vacant(e) => {
                e.insert(record);
            }
        }
    }

    pub(super) fn take(&mut self, holder: &Holder) -> Vec<Held> {
        let Some(grants) = self.holders.remove(holder) else {
            return Vec::new();
        };
        for h in &grants {
            if let Some(l) = self.limits.get_mut(h.limit)
                && let Some(k) = l.keys.get_mut(&*h.key)
            {
                k.held = k.held.saturating_sub(h.units);
                if k.idle() {
                    l.keys.remove(&*h.key);
                }
            }
        }
        grants
    }

    pub(super) fn serve_all(&mut self, freed: &[Held]) {
        for h in freed {
            self.serve(h.limit, &h.key);
        }
    }

    /// Serves the head waiters of one key while their units fit: each gets a reservation.
    pub(super) fn serve(&mut self, limit: LimitId, key: &str) {
        loop {
            let Some(l) = self.limits.get_mut(limit) else {
                return;
            };
            let max_global = l.max;
            let kind = l.def.kind;
            let Some(k) = l.keys.get_mut(key) else {
                return;
            };
            let Some(entry) = k.waiters.first_entry() else {
                return;
            };
            let w = entry.get();
            let max = match kind {
                Kind::Floating => k.floating.unwrap_or(max_global),
                _ => w.max.unwrap_or(max_global),
            };
            if k.held.checked_add(w.units).is_none_or(|t| t > max) {
                return;
            }
            let w = entry.remove();
            let id = self.next_reservation;
            self.next_reservation = self.next_reservation.wrapping_add(1);
            if w.tx.send(id).is_err() {
                // The waiter left: nothing reserved, try the next.
                continue;
            }
            let grant = GrantRef {
                limit,
                key: Cow::Borrowed(key),
                units: w.units,
                max: w.max,
            };
            self.put(Holder::Reservation(id), &[grant]);
        }
    }
}

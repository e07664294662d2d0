//! The limits engine: per-key state of every limit, grants, releases, waiters, floating
//! refreshes and rate windows, behind one mutex.
//!
//! Owns: [`Engine`]: for concurrency and floating limits, each key's holders (units held),
//! waiters (a queue ordered by priority, then arrival) and rejections; every holder's grants
//! (so one `release` gives back everything a task held, whatever ended it, and twice is once);
//! reservations (a waiter served when a holder leaves holds its units until it converts them
//! into a task or drops them, so a freed slot is never lost nor taken twice); floating state
//! (current max, retries, next refresh, backoff 1 s → 60 s, ×2); rate windows (fixed windows
//! per key); the read-only views.
//! Cheap on request_task's path: a key's name is stored once (an `Arc<str>` shared by its map
//! entry and every holder's record, so recording a grant allocates nothing for a key already
//! held), grants are asked for with borrowed keys ([`GrantRef`]), keys are looked up by
//! `&str`, and a run's checks stop at the first full key without building anything.
//! Must not: do I/O, know HTTP or the run database, block (its lock is held for a few map
//! operations; it is a leaf in the lock order: nothing else is taken while it is held).
//!
//! Files:
//! - `mod.rs`: the types, the state behind the mutex, [`Engine`]'s grants, releases, waiters.
//! - `state.rs`: the bookkeeping under the lock (fit, put, take, serve the waiters).
//! - `rate.rs`: rate windows.
//! - `floating.rs`: a max's edit, floating refreshes and their backoff.
//! - `view.rs`: the read-only views ([`LimitView`]) and the invariant check.

mod floating;
mod rate;
mod state;
mod view;

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::def::{KeyKind, Kind, LimitDef, Scope, Unit};

pub use floating::{BACKOFF_FIRST, BACKOFF_MAX, backoff};
pub use view::{FloatView, KeyView, LimitView};

/// A limit's index in the engine (built-ins first, then settings order).
pub type LimitId = usize;

/// Who holds units: a task, or a waiter's reservation.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Holder {
    Task(String, usize),
    Reservation(u64),
}

/// One grant asked for: `units` of `limit` under `key`, against `max` (None: the limit's own,
/// or for a floating limit its current value).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    pub limit: LimitId,
    pub key: String,
    pub units: u64,
    pub max: Option<u64>,
}

/// A grant whose key may be borrowed: what request_task asks for (no allocation per grant).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GrantRef<'a> {
    pub limit: LimitId,
    pub key: Cow<'a, str>,
    pub units: u64,
    pub max: Option<u64>,
}

impl Grant {
    /// This grant with its key borrowed.
    pub fn borrowed(&self) -> GrantRef<'_> {
        GrantRef {
            limit: self.limit,
            key: Cow::Borrowed(&self.key),
            units: self.units,
            max: self.max,
        }
    }
}

/// Why a grant was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Full {
    pub limit: LimitId,
    pub name: String,
    pub key: String,
    pub max: u64,
    pub held: u64,
}

/// A rate limit's refusal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimited {
    pub name: String,
    pub key: String,
    pub retry_after: Duration,
}

/// What the caller knows about the call being keyed.
#[derive(Debug, Clone, Copy, Default)]
pub struct KeyCtx<'a> {
    pub user: Option<&'a str>,
    pub ip: Option<&'a str>,
    pub worker: Option<&'a str>,
    pub run: Option<&'a str>,
}

impl KeyKind {
    /// This key's value for a call (None when the call lacks what the key is made of).
    pub fn value<'a>(&'a self, ctx: &KeyCtx<'a>) -> Option<Cow<'a, str>> {
        match self {
            KeyKind::User => ctx.user.map(Cow::Borrowed),
            KeyKind::Ip => ctx.ip.map(Cow::Borrowed),
            KeyKind::UserIp => match (ctx.user, ctx.ip) {
                (Some(u), Some(i)) => Some(Cow::Owned(format!("{u}@{i}"))),
                _ => None,
            },
            KeyKind::Worker => ctx.worker.map(Cow::Borrowed),
            KeyKind::Run => ctx.run.map(Cow::Borrowed),
            KeyKind::Resource(r) => Some(Cow::Borrowed(r.as_str())),
        }
    }
}

/// A queued waiter: await `rx` for a reservation id; `cancel` when giving up.
#[derive(Debug)]
pub struct WaitTicket {
    pub limit: LimitId,
    pub key: String,
    pub seq: u64,
    pub rx: oneshot::Receiver<u64>,
}

#[derive(Debug)]
struct Waiter {
    units: u64,
    max: Option<u64>,
    tx: oneshot::Sender<u64>,
}

#[derive(Debug)]
struct KeyState {
    /// The key, shared with the map entry and every holder's record.
    name: Arc<str>,
    held: u64,
    /// The max the last grant carried (per-key maxima: a user's machine limit, a run's window).
    max: Option<u64>,
    /// A floating limit's computed value for this key.
    floating: Option<u64>,
    rejected: u64,
    waiters: BTreeMap<(Reverse<i64>, u64), Waiter>,
}

impl KeyState {
    fn new(name: Arc<str>) -> KeyState {
        KeyState {
            name,
            held: 0,
            max: None,
            floating: None,
            rejected: 0,
            waiters: BTreeMap::new(),
        }
    }

    fn idle(&self) -> bool {
        self.held == 0 && self.waiters.is_empty() && self.floating.is_none()
    }
}

/// A floating limit's refresh state.
#[derive(Debug, Clone)]
struct FloatState {
    retries: u32,
    next_refresh: Instant,
    last_error: Option<String>,
    refreshed: Option<Instant>,
}

#[derive(Debug, Clone, Copy)]
struct RateWindow {
    start: Instant,
    count: u64,
    rejected: u64,
}

#[derive(Debug)]
struct LimitState {
    def: LimitDef,
    /// The current max: settings or an approver's edit; for a floating limit, the value of
    /// its last successful refresh for keys without their own.
    max: u64,
    keys: HashMap<Arc<str>, KeyState>,
    rejected: u64,
    floating: Option<FloatState>,
    rate: HashMap<String, RateWindow>,
}

impl LimitState {
    fn effective_max(&self, ks: Option<&KeyState>, asked: Option<u64>) -> u64 {
        match self.def.kind {
            Kind::Floating => ks.and_then(|k| k.floating).unwrap_or(self.max),
            _ => asked.unwrap_or(self.max),
        }
    }
}

/// `key`'s state in `keys`, created (its name allocated once) if new.
fn key_state<'k>(keys: &'k mut HashMap<Arc<str>, KeyState>, key: &str) -> Option<&'k mut KeyState> {
    if !keys.contains_key(key) {
        let name: Arc<str> = Arc::from(key);
        keys.insert(Arc::clone(&name), KeyState::new(name));
    }
    keys.get_mut(key)
}

/// One grant a holder holds: `units` of `limit` under `key`.
#[derive(Debug, Clone)]
struct Held {
    limit: LimitId,
    key: Arc<str>,
    units: u64,
}

impl Held {
    fn is(&self, limit: LimitId, key: &str) -> bool {
        self.limit == limit && *self.key == *key
    }
}

#[derive(Debug, Default)]
struct Inner {
    limits: Vec<LimitState>,
    holders: HashMap<Holder, Vec<Held>>,
    next_reservation: u64,
    next_seq: u64,
}

/// The engine. Cheap when unused: the rate check looks at an immutable list first.
#[derive(Debug)]
pub struct Engine {
    inner: Mutex<Inner>,
    /// (limit, scope) of every rate limit, fixed at start.
    rate_scopes: Vec<(LimitId, Scope)>,
    defs: Vec<LimitDef>,
}

impl Engine {
    /// An engine over `defs` (ids are their indices), at `now`.
    pub fn new(defs: Vec<LimitDef>, now: Instant) -> Engine {
        let rate_scopes = defs
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.scope.clone().map(|s| (i, s)))
            .collect();
        let limits = defs
            .iter()
            .map(|d| LimitState {
                def: d.clone(),
                max: d.max,
                keys: HashMap::new(),
                rejected: 0,
                floating: (d.kind == Kind::Floating).then_some(FloatState {
                    retries: 0,
                    next_refresh: now,
                    last_error: None,
                    refreshed: None,
                }),
                rate: HashMap::new(),
            })
            .collect();
        Engine {
            inner: Mutex::new(Inner {
                limits,
                ..Default::default()
            }),
            rate_scopes,
            defs,
        }
    }

    /// The definitions, by id.
    pub fn defs(&self) -> &[LimitDef] {
        &self.defs
    }

    /// The id of the limit named `name`.
    pub fn id(&self, name: &str) -> Option<LimitId> {
        self.defs.iter().position(|d| d.name == name)
    }

    /// Ids of the concurrency and floating limits whose key is made of `pred`'s key kinds.
    pub fn concurrency_ids(&self, pred: impl Fn(&KeyKind) -> bool) -> Vec<LimitId> {
        self.defs
            .iter()
            .enumerate()
            .filter(|(_, d)| d.kind != Kind::Rate && pred(&d.key))
            .map(|(i, _)| i)
            .collect()
    }

    /// Units a holder of `def` takes for a task of `concurrency` cores.
    pub fn units(&self, limit: LimitId, concurrency: u32) -> u64 {
        match self.defs.get(limit).map(|d| d.unit) {
            Some(Unit::Cores) => u64::from(concurrency),
            _ => 1,
        }
    }

    /// Whether `grant` would fit now (nothing is counted). `credit` is a holder whose units on
    /// the same key do not count (a worker's own task that its new request replaces).
    pub fn fits(&self, grant: &Grant, credit: Option<&Holder>) -> bool {
        self.check(grant, credit, None).is_ok()
    }

    /// Like `fits`, with the reason; a `reservation` of the same key counts as the caller's
    /// own (its units are credited and the key's queue is already passed).
    pub fn check(
        &self,
        grant: &Grant,
        credit: Option<&Holder>,
        reservation: Option<u64>,
    ) -> Result<(), Full> {
        self.check_all(&[grant.borrowed()], credit, reservation)
    }

    /// `check` for several grants under one lock: the first that does not fit.
    pub fn check_all(
        &self,
        grants: &[GrantRef<'_>],
        credit: Option<&Holder>,
        reservation: Option<u64>,
    ) -> Result<(), Full> {
        let inner = self.inner.lock();
        let res = reservation.map(Holder::Reservation);
        for grant in grants {
            let reserved = res.as_ref().is_some_and(|h| {
                inner
                    .holders
                    .get(h)
                    .is_some_and(|gs| gs.iter().any(|g| g.is(grant.limit, &grant.key)))
            });
            inner.fits(grant, &[credit, res.as_ref()], reserved)?;
        }
        Ok(())
    }

    /// Checks many grants under one lock: one answer per grant.
    pub fn fits_all(&self, grants: &[Grant]) -> Vec<bool> {
        let inner = self.inner.lock();
        grants
            .iter()
            .map(|g| inner.fits(&g.borrowed(), &[], false).is_ok())
            .collect()
    }

    /// Whether any of the items would not fit now, checked under one lock without building
    /// grants, stopping at the first full one: `(key, limit, units, max)` (request_task's
    /// per-run check).
    pub fn any_full<'a>(
        &self,
        items: impl IntoIterator<Item = (&'a str, LimitId, u64, Option<u64>)>,
    ) -> bool {
        let inner = self.inner.lock();
        items.into_iter().any(|(key, limit, units, asked)| {
            let Some(l) = inner.limits.get(limit) else {
                return false;
            };
            let ks = l.keys.get(key);
            let max = l.effective_max(ks, asked);
            let held = ks.map_or(0, |k| k.held);
            let queued = ks.is_some_and(|k| !k.waiters.is_empty());
            queued || held.checked_add(units).is_none_or(|t| t > max)
        })
    }

    /// Grants every one of `grants` to `holder`, or none. A `reservation` (from a served
    /// waiter) is given back first, inside the same lock, so its units are the holder's own.
    pub fn acquire(
        &self,
        holder: Holder,
        grants: &[GrantRef<'_>],
        credit: Option<&Holder>,
        reservation: Option<u64>,
    ) -> Result<(), Full> {
        let mut inner = self.inner.lock();
        let freed = match reservation {
            Some(r) => inner.take(&Holder::Reservation(r)),
            None => Vec::new(),
        };
        let mut refused = None;
        for g in grants {
            // The reserved key's queue was already passed.
            let reserved = freed.iter().any(|h| h.is(g.limit, &g.key));
            if let Err(full) = inner.fits(g, &[credit], reserved) {
                refused = Some(full);
                break;
            }
        }
        if let Some(full) = refused {
            if let Some(l) = inner.limits.get_mut(full.limit) {
                l.rejected = l.rejected.saturating_add(1);
                if let Some(k) = l.keys.get_mut(full.key.as_str()) {
                    k.rejected = k.rejected.saturating_add(1);
                }
            }
            inner.serve_all(&freed);
            return Err(full);
        }
        inner.put(holder, grants);
        inner.serve_all(&freed);
        Ok(())
    }

    /// Counts `grants` as `holder`'s whatever the maxima (start-up: the active tasks are
    /// holders already).
    pub fn rebuild(&self, holder: Holder, grants: &[GrantRef<'_>]) {
        let mut inner = self.inner.lock();
        inner.put(holder, grants);
    }

    /// Gives back everything `holder` holds and serves the waiters of those keys. Returns
    /// whether it held anything (a second release is a no-op).
    pub fn release(&self, holder: &Holder) -> bool {
        let mut inner = self.inner.lock();
        let freed = inner.take(holder);
        inner.serve_all(&freed);
        !freed.is_empty()
    }

    /// Queues for `grant`'s key; the receiver gets a reservation id once `grant.units` are
    /// free and every waiter before it (higher priority, then earlier) was served.
    pub fn wait(&self, grant: &Grant, priority: i64) -> WaitTicket {
        let (tx, rx) = oneshot::channel();
        let mut inner = self.inner.lock();
        let seq = inner.next_seq;
        inner.next_seq = inner.next_seq.wrapping_add(1);
        if let Some(l) = inner.limits.get_mut(grant.limit)
            && let Some(k) = key_state(&mut l.keys, &grant.key)
        {
            k.waiters.insert(
                (Reverse(priority), seq),
                Waiter {
                    units: grant.units,
                    max: grant.max,
                    tx,
                },
            );
        }
        inner.serve(grant.limit, &grant.key);
        WaitTicket {
            limit: grant.limit,
            key: grant.key.clone(),
            seq,
            rx,
        }
    }

    /// Leaves the queue. A reservation already sent is given back by the caller
    /// (`release(Holder::Reservation(id))`), or by `serve` when the receiver is gone.
    pub fn cancel(&self, ticket: &WaitTicket) {
        let mut inner = self.inner.lock();
        if let Some(l) = inner.limits.get_mut(ticket.limit)
            && let Some(k) = l.keys.get_mut(ticket.key.as_str())
        {
            k.waiters.retain(|(_, s), _| *s != ticket.seq);
            if k.idle() {
                l.keys.remove(ticket.key.as_str());
            }
        }
    }

    /// Counts a refusal that happened outside `acquire` (a waiter that gave up).
    pub fn count_rejection(&self, limit: LimitId, key: &str) {
        let mut inner = self.inner.lock();
        if let Some(l) = inner.limits.get_mut(limit) {
            l.rejected = l.rejected.saturating_add(1);
            if let Some(k) = l.keys.get_mut(key) {
                k.rejected = k.rejected.saturating_add(1);
            }
        }
    }
}

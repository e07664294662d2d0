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

use std::borrow::Cow;
use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use serde::Serialize;
use tokio::sync::oneshot;

use super::def::{KeyKind, Kind, LimitDef, MAX_MAX, Scope, Source, Unit};

/// A limit's index in the engine (built-ins first, then settings order).
pub type LimitId = usize;

/// Most keys a rate limit remembers; beyond it expired windows are dropped first.
const MAX_RATE_KEYS: usize = 100_000;
/// First retry of a failed floating refresh.
pub const BACKOFF_FIRST: Duration = Duration::from_secs(1);
/// Longest wait between retries of a failing floating refresh.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

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

/// The delay before retry `retries` (1-based) of a failed refresh: 1 s, 2 s, 4 s … 60 s.
pub fn backoff(retries: u32) -> Duration {
    let exp = retries.saturating_sub(1).min(16);
    BACKOFF_FIRST.saturating_mul(1u32 << exp).min(BACKOFF_MAX)
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

impl Inner {
    fn fits(
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
    fn put(&mut self, holder: Holder, grants: &[GrantRef<'_>]) {
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

    fn take(&mut self, holder: &Holder) -> Vec<Held> {
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

    fn serve_all(&mut self, freed: &[Held]) {
        for h in freed {
            self.serve(h.limit, &h.key);
        }
    }

    /// Serves the head waiters of one key while their units fit: each gets a reservation.
    fn serve(&mut self, limit: LimitId, key: &str) {
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

//! Throttling of failed authentications (password spraying, user enumeration).
//!
//! Owns: failure counters in fixed windows for three keys — a (user, client address) pair, a
//! client address, a user — and the verdict for the next attempt:
//! - a pair over its limit is refused outright until its window ends (at most
//!   `per_user_ip` guesses at one user's password per address and window);
//! - an address over its limit (spraying many user names) is allowed only passwords the
//!   credential cache has already verified: guesses are refused without argon2 work, and still
//!   count against their pair, while the real workers behind that address keep working;
//! - a user over its limit (sprayed from many addresses): an address that has already failed
//!   for that user is allowed only verified passwords; an address that has not still gets its
//!   check, so the real owner can log in from a new address, and each attacking address gets
//!   one password check per window.
//!
//! A client address is counted as `crate::limits::rate_addr` says: IPv4 as it is, IPv6 by its
//! /64 (one client's network).
//!
//! Refused attempts are not counted again: an attacker who keeps trying does not extend the
//! window, and cannot fill the counters of other keys.
//!
//! Must not: do I/O, know HTTP, or hold its lock for more than a few hash-map operations (it
//! is called on the event loop; the lock is never held across anything that can wait).
//! Memory is bounded: each map keeps at most [`MAX_KEYS`] entries, expired ones first out.

use std::collections::HashMap;
use std::hash::Hash;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

/// Most entries per key kind; beyond it expired entries are dropped, then the oldest.
pub const MAX_KEYS: usize = 100_000;

/// How many of the oldest entries a full map drops at once: a full map (a spray of new user
/// names) then costs one scan of the map per this many new keys, not one per key (the scan
/// runs on the event loop, under the lock every login takes).
const EVICT_BATCH: usize = MAX_KEYS / 10;

/// The limits, from settings.
#[derive(Debug, Clone, Copy)]
pub struct ThrottleConfig {
    pub window: Duration,
    pub per_user_ip: u32,
    pub per_ip: u32,
    pub per_user: u32,
}

/// What the next attempt may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Check the password as usual.
    Allow,
    /// Accept only a password the credential cache already knows to be right; refuse the
    /// rest without a slow check. `retry_after` is when the user's window ends.
    VerifiedOnly { retry_after: Duration },
    /// Refuse at once.
    Refuse { retry_after: Duration },
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    failures: u32,
}

impl Window {
    fn live(&self, now: Instant, window: Duration) -> bool {
        now.saturating_duration_since(self.start) < window
    }

    /// Time left in the window when it is over `limit`.
    fn over(&self, now: Instant, window: Duration, limit: u32) -> Option<Duration> {
        (self.live(now, window) && self.failures >= limit)
            .then(|| (self.start + window).saturating_duration_since(now))
    }
}

struct Counters<K> {
    map: HashMap<K, Window>,
}

impl<K: Hash + Eq + Clone> Counters<K> {
    fn new() -> Self {
        Counters {
            map: HashMap::new(),
        }
    }

    fn over(&self, key: &K, now: Instant, window: Duration, limit: u32) -> Option<Duration> {
        self.map.get(key).and_then(|w| w.over(now, window, limit))
    }

    fn fail(&mut self, key: &K, now: Instant, window: Duration) {
        if let Some(w) = self.map.get_mut(key) {
            if w.live(now, window) {
                w.failures = w.failures.saturating_add(1);
            } else {
                *w = Window {
                    start: now,
                    failures: 1,
                };
            }
            return;
        }
        if self.map.len() >= MAX_KEYS {
            self.map.retain(|_, w| w.live(now, window));
        }
        if self.map.len() >= MAX_KEYS {
            // Drop the EVICT_BATCH oldest: those older than the batch's newest, then as many
            // of that age as the batch still has room for.
            let full = self.map.len();
            let mut starts: Vec<Instant> = self.map.values().map(|w| w.start).collect();
            let batch = EVICT_BATCH.clamp(1, full);
            let (_, &mut cutoff, _) = starts.select_nth_unstable(batch - 1);
            self.map.retain(|_, w| w.start >= cutoff);
            let mut room = batch - (full - self.map.len());
            self.map.retain(|_, w| {
                if room > 0 && w.start == cutoff {
                    room -= 1;
                    false
                } else {
                    true
                }
            });
        }
        self.map.insert(
            key.clone(),
            Window {
                start: now,
                failures: 1,
            },
        );
    }
}

struct State {
    pairs: Counters<(String, String)>,
    ips: Counters<String>,
    users: Counters<String>,
}

/// The failure counters of one server process.
pub struct AuthThrottle {
    cfg: ThrottleConfig,
    state: Mutex<State>,
}

impl AuthThrottle {
    pub fn new(cfg: ThrottleConfig) -> Self {
        AuthThrottle {
            cfg,
            state: Mutex::new(State {
                pairs: Counters::new(),
                ips: Counters::new(),
                users: Counters::new(),
            }),
        }
    }

    /// The verdict for an attempt by `user` from `ip`.
    pub fn check(&self, user: &str, ip: &str) -> Verdict {
        self.check_at(user, &crate::limits::rate_addr(ip), Instant::now())
    }

    fn check_at(&self, user: &str, ip: &str, now: Instant) -> Verdict {
        let c = self.cfg;
        let s = self.state.lock();
        let pair = (user.to_string(), ip.to_string());
        if let Some(retry_after) = s.pairs.over(&pair, now, c.window, c.per_user_ip) {
            return Verdict::Refuse { retry_after };
        }
        if let Some(retry_after) = s.ips.over(&pair.1, now, c.window, c.per_ip) {
            return Verdict::VerifiedOnly { retry_after };
        }
        // A user sprayed from many addresses: an address that has not failed for this user
        // still gets its check (the real owner from a new address), one that has gets only
        // verified passwords.
        match s.users.over(&pair.0, now, c.window, c.per_user) {
            Some(retry_after) if s.pairs.over(&pair, now, c.window, 1).is_some() => {
                Verdict::VerifiedOnly { retry_after }
            }
            _ => Verdict::Allow,
        }
    }

    /// Records a wrong password (or an unknown user) for `user` from `ip`.
    pub fn failed(&self, user: &str, ip: &str) {
        self.failed_at(user, &crate::limits::rate_addr(ip), Instant::now());
    }

    fn failed_at(&self, user: &str, ip: &str, now: Instant) {
        let w = self.cfg.window;
        let mut s = self.state.lock();
        s.pairs.fail(&(user.to_string(), ip.to_string()), now, w);
        s.ips.fail(&ip.to_string(), now, w);
        s.users.fail(&user.to_string(), now, w);
    }

    /// Records a successful authentication: the pair's failures are forgiven (a volunteer who
    /// fixed a typo is not held to them); the address and user counters keep theirs.
    pub fn succeeded(&self, user: &str, ip: &str) {
        let mut s = self.state.lock();
        s.pairs
            .map
            .remove(&(user.to_string(), crate::limits::rate_addr(ip)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn throttle() -> AuthThrottle {
        AuthThrottle::new(ThrottleConfig {
            window: Duration::from_secs(60),
            per_user_ip: 3,
            per_ip: 5,
            per_user: 4,
        })
    }

    #[test]
    fn pair_limit_refuses_that_pair_only_until_the_window_ends() {
        let t = throttle();
        let now = Instant::now();
        for _ in 0..3 {
            assert_eq!(t.check_at("alice", "10.0.0.1", now), Verdict::Allow);
            t.failed_at("alice", "10.0.0.1", now);
        }
        assert!(matches!(
            t.check_at("alice", "10.0.0.1", now),
            Verdict::Refuse { retry_after } if retry_after == Duration::from_secs(60)
        ));
        // Another address, another user: unaffected.
        assert_eq!(t.check_at("alice", "10.0.0.2", now), Verdict::Allow);
        assert_eq!(t.check_at("bob", "10.0.0.1", now), Verdict::Allow);
        // The window ends.
        let later = now + Duration::from_secs(61);
        assert_eq!(t.check_at("alice", "10.0.0.1", later), Verdict::Allow);
    }

    #[test]
    fn address_limit_allows_only_verified_passwords_for_every_user_name() {
        let t = throttle();
        let now = Instant::now();
        for i in 0..5 {
            t.failed_at(&format!("user{i}"), "10.0.0.9", now);
        }
        assert!(matches!(
            t.check_at("carol", "10.0.0.9", now),
            Verdict::VerifiedOnly { .. }
        ));
        assert_eq!(t.check_at("carol", "10.0.0.8", now), Verdict::Allow);
    }

    #[test]
    fn user_limit_across_addresses_allows_only_verified_passwords() {
        let t = throttle();
        let now = Instant::now();
        for i in 0..4 {
            t.failed_at("dave", &format!("10.1.0.{i}"), now);
        }
        // An address that failed for dave: verified passwords only.
        assert!(matches!(
            t.check_at("dave", "10.1.0.1", now),
            Verdict::VerifiedOnly { .. }
        ));
        // A new address still gets its one check.
        assert_eq!(t.check_at("dave", "10.2.0.1", now), Verdict::Allow);
        assert_eq!(t.check_at("erin", "10.2.0.1", now), Verdict::Allow);
    }

    #[test]
    fn success_forgives_the_pair() {
        let t = throttle();
        let now = Instant::now();
        for _ in 0..3 {
            t.failed_at("frank", "10.0.0.3", now);
        }
        t.succeeded("frank", "10.0.0.3");
        assert_eq!(t.check_at("frank", "10.0.0.3", now), Verdict::Allow);
    }

    #[test]
    fn a_full_map_makes_room_for_many_new_keys_at_once() {
        let t = AuthThrottle::new(ThrottleConfig {
            window: Duration::from_secs(60),
            per_user_ip: 1_000_000,
            per_ip: 1_000_000,
            per_user: 1_000_000,
        });
        let now = Instant::now();
        let at = |i: usize| now + Duration::from_micros(i as u64);
        for i in 0..MAX_KEYS {
            t.failed_at(&format!("u{i}"), "10.0.0.1", at(i));
        }
        // One more name: the oldest batch goes, so the next new names need no scan.
        t.failed_at("newcomer", "10.0.0.1", at(MAX_KEYS));
        let s = t.state.lock();
        assert_eq!(s.users.map.len(), MAX_KEYS - EVICT_BATCH + 1);
        assert!(!s.users.map.contains_key("u0"));
        assert!(!s.users.map.contains_key(&format!("u{}", EVICT_BATCH - 1)));
        assert!(s.users.map.contains_key(&format!("u{EVICT_BATCH}")));
        assert!(s.users.map.contains_key("newcomer"));
    }

    #[test]
    fn memory_is_bounded() {
        let t = AuthThrottle::new(ThrottleConfig {
            window: Duration::from_secs(60),
            per_user_ip: 1_000_000,
            per_ip: 1_000_000,
            per_user: 1_000_000,
        });
        let now = Instant::now();
        for i in 0..(MAX_KEYS + 10) {
            t.failed_at(&format!("u{i}"), "10.0.0.1", now);
        }
        let s = t.state.lock();
        assert!(s.users.map.len() <= MAX_KEYS);
        assert!(s.pairs.map.len() <= MAX_KEYS);
    }
}

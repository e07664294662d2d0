//! Things good for one use, remembered until they expire: the nonces of the signup forms
//! already sent (a form is accepted once).
//!
//! Owns: the set of used nonces with their expiry (milliseconds since the epoch), bounded to
//! [`ONCE_MAX`]: past it the expired ones go first, then all of them (a replayed form is then
//! still bound to its session and held by the signup rate limits). In memory, per instance.
//! Must not: know what a nonce is made of (the HTTP layer makes and checks them), or be
//! waited for on the event loop (it is called in the pool).

use std::collections::HashMap;

use parking_lot::Mutex;

use super::Accounts;

/// The most nonces remembered.
pub const ONCE_MAX: usize = 100_000;

/// Used nonces and when each may be forgotten.
#[derive(Default)]
pub(super) struct OnceSet {
    used: Mutex<HashMap<String, u64>>,
}

impl OnceSet {
    /// Marks `nonce` used until `expires_ms`; false if it was used before.
    fn spend(&self, nonce: &str, expires_ms: u64, now_ms: u64) -> bool {
        let mut used = self.used.lock();
        if used.len() >= ONCE_MAX && !used.contains_key(nonce) {
            used.retain(|_, expires| *expires > now_ms);
            if used.len() >= ONCE_MAX {
                used.clear();
            }
        }
        used.insert(nonce.to_string(), expires_ms).is_none()
    }
}

impl Accounts {
    /// A signup form's nonce is used (until `expires_ms`, when the form would expire anyway);
    /// false if that form was sent before.
    pub fn signup_form_spend(&self, nonce: &str, expires_ms: u64, now_ms: u64) -> bool {
        self.signup_forms.spend(nonce, expires_ms, now_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nonce_is_used_once_and_the_set_stays_bounded() {
        let set = OnceSet::default();
        assert!(set.spend("a", 2_000, 1_000));
        assert!(!set.spend("a", 2_000, 1_500));
        assert!(set.spend("b", 2_000, 1_500));
        let fill = |expires: u64| {
            let mut used = set.used.lock();
            used.clear();
            used.extend((0..ONCE_MAX).map(|i| (format!("n{i}"), expires)));
        };
        // Full of expired nonces: they make room, the live one stays.
        fill(3_000);
        set.used.lock().insert("n0".into(), 9_000);
        assert!(set.spend("late", 10_000, 5_000));
        assert_eq!(set.used.lock().len(), 2);
        assert!(!set.spend("n0", 10_000, 5_000));
        // Full of live ones: forgotten whole rather than grown.
        fill(9_000);
        assert!(set.spend("later", 10_000, 5_000));
        assert_eq!(set.used.lock().len(), 1);
    }
}

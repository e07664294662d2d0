//! The signup form's bot checks, which need no outside service and no JavaScript: a honeypot
//! field people never see (a bot filling every field fills it), and a signed token of when
//! the form was shown, to whom, and which form it was, so a form harvested in one session is
//! worth nothing in another, a form is sent once, and one shown hours ago (a harvested form)
//! is refused. A form sent within seconds of being shown is not refused: its answer waits
//! until the form is old enough ([`Passed::wait`]), which a person (a password manager fills
//! the form at once) never notices and a script pays for in time. A refusal says why in words
//! a person understands, and the form comes back with a fresh token.
//!
//! Owns: the field names, the token's format (`v2.<unix ms>.<16 hex nonce>.<hex
//! HMAC-SHA256>` over the issue time, the nonce and the session's id, keyed by the server's
//! secret) and the checks. Must not: read the store, remember which forms were sent (the
//! accounts do: `Accounts::signup_form_spend`), count rate limits (the handler does, after
//! these cheap checks and the field checks) or decide anything about the account.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The hidden field carrying the signed issue time.
pub const FORM_TOKEN_FIELD: &str = "form_token";
/// The honeypot: hidden from people (off-screen, out of the tab order, labelled "leave
/// empty"), filled by bots that fill every field.
pub const HONEYPOT_FIELD: &str = "website";

const VERSION: &str = "v2";
/// What the MAC covers besides the time, so no other signed value of ours can pass for it.
const PURPOSE: &[u8] = b"shoal signup form v2:";

/// Why a signup form is refused before anything else is looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The honeypot holds text.
    Honeypot,
    /// No token, or one that is not ours (forged, altered, from another server or another
    /// session).
    BadToken,
    /// Shown longer ago than the form stays valid.
    Expired,
    /// This form was sent already.
    Used,
}

impl Refusal {
    /// The words the form shows.
    pub fn text(&self) -> String {
        match self {
            Refusal::Honeypot => "The form could not be accepted: a field that must stay empty \
                                  was filled in (some browser extensions do this). Please send \
                                  the form again."
                .into(),
            Refusal::BadToken => "The form could not be accepted: it was not shown by this \
                                  server, or it was changed. Please fill in this form and send \
                                  it again."
                .into(),
            Refusal::Expired => "The form was shown too long ago. Please fill in this fresh \
                                 form and send it again."
                .into(),
            Refusal::Used => "This form was sent already. Please fill in this fresh form and \
                              send it again."
                .into(),
        }
    }
}

/// A form that passed: how long its answer must still wait to make it `min` old, and its
/// nonce with the time it stays valid (for `Accounts::signup_form_spend`: used once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Passed {
    pub wait: Duration,
    pub nonce: String,
    /// When the form stops being valid (ms since the epoch): its nonce is kept until then.
    pub expires_ms: u64,
}

fn mac(secret: &[u8], issued_ms: u64, nonce: &str, session: &str) -> Option<Hmac<Sha256>> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    m.update(PURPOSE);
    m.update(issued_ms.to_string().as_bytes());
    m.update(b".");
    m.update(nonce.as_bytes());
    m.update(b".");
    m.update(session.as_bytes());
    Some(m)
}

/// A token for a form shown at `now_ms` (milliseconds since the epoch) in the session
/// `session` (its cookie id).
pub fn issue(secret: &[u8], session: &str, now_ms: u64) -> String {
    let nonce = hex::encode(rand::random::<[u8; 8]>());
    let tag = mac(secret, now_ms, &nonce, session)
        .map(|m| hex::encode(m.finalize().into_bytes()))
        .unwrap_or_default();
    format!("{VERSION}.{now_ms}.{nonce}.{tag}")
}

/// Checks a sent form's honeypot and token at `now_ms`, for the session `session`: shown in
/// that session at most `max` before. Younger than `min`: passes, with the wait left.
pub fn check(
    secret: &[u8],
    session: &str,
    honeypot: &str,
    token: &str,
    now_ms: u64,
    min: Duration,
    max: Duration,
) -> Result<Passed, Refusal> {
    if !honeypot.trim().is_empty() {
        return Err(Refusal::Honeypot);
    }
    let mut parts = token.trim().splitn(4, '.');
    let (Some(VERSION), Some(ms), Some(nonce), Some(tag)) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Refusal::BadToken);
    };
    let issued_ms: u64 = ms.parse().map_err(|_| Refusal::BadToken)?;
    if nonce.len() != 16 || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Refusal::BadToken);
    }
    let tag = hex::decode(tag).map_err(|_| Refusal::BadToken)?;
    // Constant-time comparison of the MAC.
    mac(secret, issued_ms, nonce, session)
        .ok_or(Refusal::BadToken)?
        .verify_slice(&tag)
        .map_err(|_| Refusal::BadToken)?;
    // A token from the future (clock changes) counts as just shown.
    let age = Duration::from_millis(now_ms.saturating_sub(issued_ms));
    if age > max {
        return Err(Refusal::Expired);
    }
    let max_ms = u64::try_from(max.as_millis()).unwrap_or(u64::MAX);
    Ok(Passed {
        wait: min.saturating_sub(age),
        nonce: nonce.to_ascii_lowercase(),
        expires_ms: issued_ms.saturating_add(max_ms),
    })
}

/// Milliseconds since the epoch, now.
pub fn now_ms() -> u64 {
    u64::try_from(chrono::Utc::now().timestamp_millis()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &[u8] = b"0123456789abcdef0123456789abcdef";
    const MIN: Duration = Duration::from_secs(3);
    const MAX: Duration = Duration::from_secs(6 * 3600);
    const SESSION: &str = "session-one";

    #[test]
    fn a_form_filled_by_a_person_passes_and_a_fast_one_only_waits() {
        let t = issue(KEY, SESSION, 1_000_000);
        let p = check(KEY, SESSION, "", &t, 1_000_000 + 20_000, MIN, MAX).expect("passes");
        assert_eq!(p.wait, Duration::ZERO);
        assert_eq!(p.expires_ms, 1_000_000 + 6 * 3600 * 1000);
        let p = check(KEY, SESSION, " ", &t, 1_000_500, MIN, MAX).expect("passes");
        assert_eq!(p.wait, Duration::from_millis(2500));
    }

    #[test]
    fn bots_are_refused_with_the_reason() {
        let t = issue(KEY, SESSION, 1_000_000);
        assert_eq!(
            check(KEY, SESSION, "http://spam", &t, 1_020_000, MIN, MAX),
            Err(Refusal::Honeypot)
        );
        assert_eq!(
            check(KEY, SESSION, "", &t, 1_000_000 + 7 * 3600 * 1000, MIN, MAX),
            Err(Refusal::Expired)
        );
        let other_server = issue(b"another server's secret, 32 bytes", SESSION, 1_000_000);
        for bad in [
            String::new(),
            "v2.1000000".into(),
            "v2.abc.00.00".into(),
            t.replace("v2.1000000", "v2.1000001"),
            other_server,
            format!("{t}00"),
            t.replacen("v2", "v1", 1),
        ] {
            assert_eq!(
                check(KEY, SESSION, "", &bad, 1_020_000, MIN, MAX),
                Err(Refusal::BadToken),
                "{bad}"
            );
        }
        // Harvested in one session, sent in another.
        assert_eq!(
            check(KEY, "session-two", "", &t, 1_020_000, MIN, MAX),
            Err(Refusal::BadToken)
        );
    }

    #[test]
    fn each_form_has_its_own_nonce() {
        let t = issue(KEY, SESSION, 1_000_000);
        let u = issue(KEY, SESSION, 1_000_000);
        let p = check(KEY, SESSION, "", &t, 1_020_000, MIN, MAX).expect("passes");
        let q = check(KEY, SESSION, "", &u, 1_020_000, MIN, MAX).expect("passes");
        assert_ne!(p.nonce, q.nonce);
        assert_eq!(p.nonce.len(), 16);
    }
}

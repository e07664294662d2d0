//! The signup form's bot checks, which need no outside service and no JavaScript: a honeypot
//! field people never see (a bot filling every field fills it), and a signed token of when
//! the form was shown, so a form sent within seconds of being shown (a script) or hours later
//! (a harvested form) is refused. A refusal says why in words a person understands, and the
//! form comes back with a fresh token.
//!
//! Owns: the field names, the token's format (`v1.<unix ms>.<hex HMAC-SHA256>` over the
//! issue time, keyed by the server's secret) and the checks. Must not: read the store, count
//! rate limits (the handler does, after these cheap checks) or decide anything about the
//! account.

use std::time::Duration;

use hmac::{Hmac, Mac};
use sha2::Sha256;

/// The hidden field carrying the signed issue time.
pub const FORM_TOKEN_FIELD: &str = "form_token";
/// The honeypot: hidden from people (off-screen, out of the tab order, labelled "leave
/// empty"), filled by bots that fill every field.
pub const HONEYPOT_FIELD: &str = "website";

const VERSION: &str = "v1";
/// What the MAC covers besides the time, so no other signed value of ours can pass for it.
const PURPOSE: &[u8] = b"shoal signup form v1:";

/// Why a signup form is refused before anything else is looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The honeypot holds text.
    Honeypot,
    /// No token, or one that is not ours (forged, altered, from another server).
    BadToken,
    /// Sent this soon after it was shown.
    TooFast { wait: Duration },
    /// Shown longer ago than the form stays valid.
    Expired,
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
            Refusal::TooFast { wait } => format!(
                "The form was sent too quickly after it was shown. Please wait {} second{} and \
                 send it again.",
                wait.as_secs().max(1),
                if wait.as_secs() > 1 { "s" } else { "" }
            ),
            Refusal::Expired => "The form was shown too long ago. Please fill in this fresh \
                                 form and send it again."
                .into(),
        }
    }
}

fn mac(secret: &[u8], issued_ms: u64) -> Option<Hmac<Sha256>> {
    let mut m = Hmac::<Sha256>::new_from_slice(secret).ok()?;
    m.update(PURPOSE);
    m.update(issued_ms.to_string().as_bytes());
    Some(m)
}

/// A token for a form shown at `now_ms` (milliseconds since the epoch).
pub fn issue(secret: &[u8], now_ms: u64) -> String {
    let tag = mac(secret, now_ms)
        .map(|m| hex::encode(m.finalize().into_bytes()))
        .unwrap_or_default();
    format!("{VERSION}.{now_ms}.{tag}")
}

/// Checks a sent form's honeypot and token at `now_ms`: shown at least `min` and at most
/// `max` before.
pub fn check(
    secret: &[u8],
    honeypot: &str,
    token: &str,
    now_ms: u64,
    min: Duration,
    max: Duration,
) -> Result<(), Refusal> {
    if !honeypot.trim().is_empty() {
        return Err(Refusal::Honeypot);
    }
    let mut parts = token.trim().splitn(3, '.');
    let (Some(VERSION), Some(ms), Some(tag)) = (parts.next(), parts.next(), parts.next()) else {
        return Err(Refusal::BadToken);
    };
    let issued_ms: u64 = ms.parse().map_err(|_| Refusal::BadToken)?;
    let tag = hex::decode(tag).map_err(|_| Refusal::BadToken)?;
    // Constant-time comparison of the MAC.
    mac(secret, issued_ms)
        .ok_or(Refusal::BadToken)?
        .verify_slice(&tag)
        .map_err(|_| Refusal::BadToken)?;
    // A token from the future (clock changes) counts as just shown.
    let age = Duration::from_millis(now_ms.saturating_sub(issued_ms));
    if age < min {
        let wait = min.saturating_sub(age);
        // Round up: "wait 1 second" even for 200 ms.
        let wait = Duration::from_secs(wait.as_millis().div_ceil(1000) as u64);
        return Err(Refusal::TooFast { wait });
    }
    if age > max {
        return Err(Refusal::Expired);
    }
    Ok(())
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

    #[test]
    fn a_form_filled_by_a_person_passes() {
        let t = issue(KEY, 1_000_000);
        assert_eq!(check(KEY, "", &t, 1_000_000 + 20_000, MIN, MAX), Ok(()));
        assert_eq!(check(KEY, " ", &t, 1_000_000 + 3_000, MIN, MAX), Ok(()));
    }

    #[test]
    fn bots_are_refused_with_the_reason() {
        let t = issue(KEY, 1_000_000);
        assert_eq!(
            check(KEY, "http://spam", &t, 1_020_000, MIN, MAX),
            Err(Refusal::Honeypot)
        );
        assert_eq!(
            check(KEY, "", &t, 1_000_500, MIN, MAX),
            Err(Refusal::TooFast {
                wait: Duration::from_secs(3)
            })
        );
        assert_eq!(
            check(KEY, "", &t, 1_000_000 + 7 * 3600 * 1000, MIN, MAX),
            Err(Refusal::Expired)
        );
        for bad in [
            String::new(),
            "v1.1000000".into(),
            "v1.abc.00".into(),
            t.replace("v1.1000000", "v1.1000001"),
            issue(b"another server's secret, 32 bytes", 1_000_000),
            format!("{t}00"),
        ] {
            assert_eq!(
                check(KEY, "", &bad, 1_020_000, MIN, MAX),
                Err(Refusal::BadToken),
                "{bad}"
            );
        }
        assert!(
            Refusal::TooFast {
                wait: Duration::from_secs(2)
            }
            .text()
            .contains("wait 2 seconds")
        );
    }
}

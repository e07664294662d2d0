//! Values that must not leak: the cookie secret, store credentials, passwords.
//!
//! Owns: [`Secret`] and [`SecretUri`], thin wrappers over [`secrecy::SecretString`] (wiped from
//! memory on drop). Neither shows its text through `Debug` or `Serialize`: a [`Secret`] prints
//! as [`REDACTED`]; a [`SecretUri`] prints with the password of its user information replaced
//! by [`REDACTED`] (the host and database stay readable). `shoal check-config` serializes the
//! configuration, so what it prints is what these impls write. The text is reached only through
//! `expose`, which makes every use visible in a grep.
//! Must not: implement `Display`, or serialize the text.

use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use subtle::ConstantTimeEq;

/// What a hidden value prints as.
pub const REDACTED: &str = "[REDACTED]";

/// A secret string: prints as [`REDACTED`] in `Debug` and when serialized.
#[derive(Clone)]
pub struct Secret(SecretString);

impl Secret {
    pub fn new(text: impl Into<String>) -> Secret {
        Secret(SecretString::from(text.into()))
    }

    /// The secret text. Every call is a place where the secret is used on purpose.
    pub fn expose(&self) -> &str {
        self.0.expose_secret()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(REDACTED)
    }
}

/// Equal texts (in constant time, so that a comparison reveals nothing through its duration).
impl PartialEq for Secret {
    fn eq(&self, other: &Secret) -> bool {
        self.expose()
            .as_bytes()
            .ct_eq(other.expose().as_bytes())
            .into()
    }
}

impl Serialize for Secret {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(REDACTED)
    }
}

impl<'de> Deserialize<'de> for Secret {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Secret, D::Error> {
        SecretString::deserialize(deserializer).map(Secret)
    }
}

impl From<&str> for Secret {
    fn from(text: &str) -> Secret {
        Secret::new(text)
    }
}

/// A URI that may carry a password (`mongodb://user:password@host/db`): `Debug` and `Serialize`
/// show it with the password replaced by [`REDACTED`]; [`SecretUri::expose`] gives it whole.
#[derive(Clone, PartialEq)]
pub struct SecretUri(Secret);

impl SecretUri {
    pub fn new(text: impl Into<String>) -> SecretUri {
        SecretUri(Secret::new(text))
    }

    /// The URI as configured, password included.
    pub fn expose(&self) -> &str {
        self.0.expose()
    }

    /// The URI with the password (if any) replaced by [`REDACTED`].
    pub fn redacted(&self) -> String {
        redact_uri_password(self.expose())
    }
}

impl fmt::Debug for SecretUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.redacted(), f)
    }
}

impl Serialize for SecretUri {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.redacted())
    }
}

impl<'de> Deserialize<'de> for SecretUri {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<SecretUri, D::Error> {
        Secret::deserialize(deserializer).map(SecretUri)
    }
}

impl From<&str> for SecretUri {
    fn from(text: &str) -> SecretUri {
        SecretUri::new(text)
    }
}

/// `scheme://user:password@rest` -> `scheme://user:[REDACTED]@rest`. The user information ends
/// at the last `@` (a password should percent-encode `@`, `/` and `:`, but one that does not
/// is still hidden whole); when in doubt, more is hidden, never less.
fn redact_uri_password(uri: &str) -> String {
    let start = uri.find("://").map_or(0, |i| i + 3);
    let rest = &uri[start..];
    let Some(at) = rest.rfind('@') else {
        return uri.to_string();
    };
    let user_info = &rest[..at];
    match user_info.find(':') {
        Some(colon) => format!(
            "{}{}:{REDACTED}{}",
            &uri[..start],
            &user_info[..colon],
            &rest[at..]
        ),
        None => uri.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_never_shows_its_text() {
        let s = Secret::new("hunter2-hunter2-hunter2-hunter2-x");
        assert_eq!(format!("{s:?}"), REDACTED);
        assert_eq!(
            format!("{:?}", Some(s.clone())),
            format!("Some({REDACTED})")
        );
        assert_eq!(
            serde_json::to_string(&s).expect("serializes"),
            format!("\"{REDACTED}\"")
        );
        assert_eq!(s.expose(), "hunter2-hunter2-hunter2-hunter2-x");
        let back: Secret = serde_json::from_str("\"abc\"").expect("deserializes");
        assert_eq!(back.expose(), "abc");
        assert_eq!(back, Secret::from("abc"));
        assert_ne!(back, Secret::from("abd"));
        assert_ne!(back, Secret::from("ab"));
    }

    #[test]
    fn uri_hides_only_the_password() {
        let cases = [
            (
                "mongodb://alice:pa55word@db.example.org:27017/fishtest?authSource=admin",
                "mongodb://alice:[REDACTED]@db.example.org:27017/fishtest?authSource=admin",
            ),
            (
                "mongodb://localhost:27017/fishtest_new",
                "mongodb://localhost:27017/fishtest_new",
            ),
            ("mongodb://alice@host/db", "mongodb://alice@host/db"),
            // An unencoded `@` or `/` in the password: all of it is still hidden.
            (
                "mongodb://bob:p@ss/w@host/db",
                "mongodb://bob:[REDACTED]@host/db",
            ),
            ("bob:pw@host", "bob:[REDACTED]@host"),
            ("", ""),
        ];
        for (uri, shown) in cases {
            let u = SecretUri::new(uri);
            assert_eq!(u.redacted(), shown, "{uri}");
            assert_eq!(format!("{u:?}"), format!("{shown:?}"));
            assert_eq!(
                serde_json::to_string(&u).expect("serializes"),
                format!("{shown:?}")
            );
            assert_eq!(u.expose(), uri);
        }
    }
}

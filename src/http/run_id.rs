//! A run's id as a request carries it (a path segment, a form or JSON field): 24 hex digits,
//! an ObjectId's. Checked once where the request enters, so a handler holds a [`RunId`] and
//! nothing after the edge looks at the string's shape again. Each route keeps its own answer
//! for a malformed id (the API's 400 or 404 text, the UI's 404 page).

use std::fmt;
use std::str::FromStr;

/// 24 hex digits (either case, as given: the worker API lowercases them itself).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RunId(String);

/// Not a run id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a run id: {0}")]
pub struct InvalidRunId(pub String);

impl RunId {
    /// The number of hex digits in a run id.
    pub const LEN: usize = 24;

    pub fn as_str(&self) -> &str {
        &self.0
    }

    pub fn into_string(self) -> String {
        self.0
    }
}

impl FromStr for RunId {
    type Err = InvalidRunId;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.len() == Self::LEN && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            Ok(RunId(s.to_string()))
        } else {
            Err(InvalidRunId(s.to_string()))
        }
    }
}

impl fmt::Display for RunId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for RunId {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn twenty_four_hex_digits() {
        let id: RunId = "0123456789abcdef01234567".parse().expect("an id");
        assert_eq!(id.as_str(), "0123456789abcdef01234567");
        assert!("0123456789ABCDEF01234567".parse::<RunId>().is_ok());
        for bad in [
            "",
            "zzz",
            "0123456789abcdef0123456",
            "0123456789abcdef012345678",
        ] {
            assert_eq!(bad.parse::<RunId>(), Err(InvalidRunId(bad.into())), "{bad}");
        }
        assert!("0123456789abcdef0123456g".parse::<RunId>().is_err());
        assert!("0123456789abcdef012345é".parse::<RunId>().is_err());
    }
}

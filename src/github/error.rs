//! What can go wrong talking to GitHub, said so that a developer at the form knows what
//! happened (the `Display` texts are shown next to the field; the form adds what to do).
//!
//! Must not: carry a token or a full request with its headers.

/// Why a GitHub call gave no answer shoal can use.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum GithubError {
    /// A branch, tag or repository name that cannot be asked for (checked before any call).
    #[error("{0}")]
    BadInput(String),
    /// The connection failed (after the one retry).
    #[error("GitHub could not be reached ({0})")]
    Unreachable(String),
    /// No answer within `github_timeout_s`.
    #[error("GitHub did not answer within {0} s")]
    Timeout(u64),
    /// GitHub's 422 "No commit found" (or a 404 for a commit): no such branch, tag or SHA.
    #[error("GitHub knows no branch, tag or commit \"{reference}\" in {repo}")]
    UnknownRef { repo: String, reference: String },
    /// A 404 for a repository: unknown, renamed away or private.
    #[error("GitHub knows no repository {0} (or it is private)")]
    NoRepository(String),
    /// The quota is used up (403 or 429 with no calls remaining); `reset` is when it refills
    /// (Unix seconds) if GitHub said.
    #[error("GitHub's rate limit is used up{}", reset_text(*.reset))]
    RateLimited { reset: Option<i64> },
    /// A 5xx after the one retry.
    #[error("GitHub answered with an error (HTTP {0})")]
    Server(u16),
    /// Another refusal (4xx) with GitHub's own message.
    #[error("GitHub refused the request (HTTP {status}: {message})")]
    Refused { status: u16, message: String },
    /// A reply that is not what GitHub documents.
    #[error("GitHub's reply could not be read ({0})")]
    Malformed(String),
}

fn reset_text(reset: Option<i64>) -> String {
    reset
        .and_then(|r| chrono::DateTime::from_timestamp(r, 0))
        .map(|t| format!(" until {} UTC", t.format("%H:%M:%S")))
        .unwrap_or_default()
}

impl GithubError {
    /// Whether GitHub itself failed (as opposed to saying "no such thing"): the form then
    /// keeps what was typed and points to the explicit fields.
    pub fn is_outage(&self) -> bool {
        matches!(
            self,
            GithubError::Unreachable(_)
                | GithubError::Timeout(_)
                | GithubError::RateLimited { .. }
                | GithubError::Server(_)
                | GithubError::Malformed(_)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_say_what_happened() {
        let e = GithubError::RateLimited {
            reset: Some(1_700_000_000),
        };
        assert!(e.to_string().contains("until 22:13:20 UTC"), "{e}");
        assert!(e.is_outage());
        let e = GithubError::UnknownRef {
            repo: "a/b".into(),
            reference: "nope".into(),
        };
        assert_eq!(
            e.to_string(),
            "GitHub knows no branch, tag or commit \"nope\" in a/b"
        );
        assert!(!e.is_outage());
    }
}

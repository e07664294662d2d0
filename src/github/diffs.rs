//! A run's diff: fetched from GitHub once, after the run is created, and kept in the store
//! beside the run (`shoal_kvstore` `run_diff:<run id>`), so the run page shows it while GitHub is
//! down and it costs the quota once.
//!
//! Must not: fetch while a page waits (the run page reads only what is kept), or keep more
//! than [`MAX_DIFF_BYTES`] of one diff.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Github, GithubError, RepoName, parse};
use crate::store::{Collection, Doc};

/// The most of one diff kept (a longer one is cut at a line, and says so).
pub const MAX_DIFF_BYTES: usize = 1 << 20;

/// A kept diff.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredDiff {
    /// `owner/name` of the repository compared in.
    pub repo: String,
    pub base: String,
    pub new: String,
    /// The unified diff (cut at [`MAX_DIFF_BYTES`] when `truncated`).
    pub diff: String,
    pub truncated: bool,
    /// When it was fetched (Unix seconds).
    pub fetched_at: i64,
}

fn key(run_id: &str) -> String {
    format!("run_diff:{run_id}")
}

impl Github {
    /// The diff kept for a run, if any (a blocking store read: call it in the pool).
    pub fn stored_diff_blocking(&self, run_id: &str) -> Option<StoredDiff> {
        let doc = self.store.get(Collection::ShoalKv, &key(run_id)).ok()??;
        serde_json::from_value(doc.get("value").cloned().unwrap_or(Value::Null)).ok()
    }

    /// Fetches and keeps a run's diff in the background (after the run is created).
    pub fn keep_diff_in_background(
        self: &Arc<Self>,
        run_id: String,
        tests_repo: String,
        base: String,
        new: String,
    ) {
        let github = Arc::clone(self);
        tokio::spawn(async move {
            if let Err(e) = github.keep_diff(&run_id, &tests_repo, &base, &new).await {
                tracing::info!(run = %run_id, error = %e, "no diff kept for the run");
            }
        });
    }

    /// Fetches a run's diff from GitHub and keeps it, unless one is kept already.
    pub async fn keep_diff(
        &self,
        run_id: &str,
        tests_repo: &str,
        base: &str,
        new: &str,
    ) -> Result<(), GithubError> {
        let repo = parse::repo_from_url(tests_repo)
            .or_else(|| RepoName::from_full(tests_repo))
            .ok_or_else(|| GithubError::BadInput(format!("not a repository: {tests_repo}")))?;
        let store = Arc::clone(&self.store);
        let id = key(run_id);
        let kept = self
            .offload
            .run(move || store.get(Collection::ShoalKv, &id))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        if kept.is_some() {
            return Ok(());
        }
        let text = self.diff(&repo, base, new).await?;
        let (diff, truncated) = cut(&text, MAX_DIFF_BYTES);
        let stored = StoredDiff {
            repo: repo.full(),
            base: base.to_string(),
            new: new.to_string(),
            diff: diff.to_string(),
            truncated,
            fetched_at: chrono::Utc::now().timestamp(),
        };
        let mut doc = Doc::new();
        doc.insert("_id".into(), json!(key(run_id)));
        doc.insert("value".into(), json!(stored));
        let store = Arc::clone(&self.store);
        match self
            .offload
            .run(move || store.put(Collection::ShoalKv, &doc))
            .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "run diff not stored");
                Ok(())
            }
            Err(e) => {
                tracing::warn!(error = %e, "run diff not stored");
                Ok(())
            }
        }
    }
}

/// `text` cut to at most `max` bytes at a line's end; whether it was cut.
fn cut(text: &str, max: usize) -> (&str, bool) {
    if text.len() <= max {
        return (text, false);
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let end = text[..end].rfind('\n').map_or(end, |i| i + 1);
    (&text[..end], true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_diff_is_cut_at_a_line() {
        assert_eq!(cut("a\nb\n", 10), ("a\nb\n", false));
        assert_eq!(cut("abc\ndef\nghi\n", 9), ("abc\ndef\n", true));
        assert_eq!(cut("ééé", 3), ("é", true));
    }
}

//! One GET to GitHub, done carefully: the timeout, one retry (`backon`) of what is safe to
//! retry (a failed connection, a 5xx: a GET changes nothing), the quota read from every API
//! reply's `X-RateLimit-*` headers, and conditional requests: a reply with an `ETag` is kept
//! (in memory and in the store's `shoal_kvstore`, so a restart does not spend the quota again) and
//! the next request for the same URL sends `If-None-Match`; GitHub's 304 does not count
//! against the quota. The stored replies are bounded: [`prune_replies`] deletes the oldest
//! kept beyond [`MAX_STORED_REPLIES`] (the periodic `prune_github` job).
//!
//! Must not: log or return the token; run on the worker API's paths (nothing there awaits
//! GitHub); touch the store but through the offload pool.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use backon::{ConstantBuilder, Retryable as _};
use parking_lot::Mutex;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, ETAG, HeaderMap, IF_NONE_MATCH, USER_AGENT};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use super::GithubError;
use crate::offload::Offload;
use crate::secret::Secret;
use crate::store::{Collection, Cond, Doc, Order, Query, SharedStore, Store, StoreResult};

/// Replies kept in memory (the store keeps them all; this bounds the process).
const MEMORY_ENTRIES: usize = 2_000;
/// Replies kept in the store at most (the oldest kept are deleted beyond it).
pub const MAX_STORED_REPLIES: u64 = 5_000;
/// A reply larger than this is not kept (a huge diff is stored with its run instead).
const MAX_KEPT_BYTES: usize = 2 << 20;
/// Wait before the one retry.
const RETRY_AFTER: Duration = Duration::from_millis(300);

/// GitHub's figures for the `core` resource, as its last reply stated them.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Quota {
    pub limit: u64,
    pub remaining: u64,
    pub used: u64,
    /// When the window refills, Unix seconds.
    pub reset: i64,
    pub resource: String,
}

impl Quota {
    fn from_headers(h: &HeaderMap) -> Option<Quota> {
        let num = |k: &str| h.get(k)?.to_str().ok()?.trim().parse::<i64>().ok();
        let limit = u64::try_from(num("x-ratelimit-limit")?).ok()?;
        let remaining = u64::try_from(num("x-ratelimit-remaining")?).ok()?;
        let reset = num("x-ratelimit-reset")?;
        let used = num("x-ratelimit-used")
            .and_then(|u| u64::try_from(u).ok())
            .unwrap_or(limit.saturating_sub(remaining));
        let resource = h
            .get("x-ratelimit-resource")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("core")
            .to_string();
        Some(Quota {
            limit,
            remaining,
            used,
            reset,
            resource,
        })
    }
}

/// A reply kept for a conditional request.
#[derive(Clone)]
struct Kept {
    etag: String,
    body: Arc<str>,
}

/// What a GET gave: the body, or "not there" (404), with whether it came from the cache.
pub(super) enum Got {
    Body(Arc<str>),
    Missing,
}

pub(super) struct Client {
    http: reqwest::Client,
    token: Option<Secret>,
    timeout: Duration,
    timeout_s: u64,
    /// When a call last failed to get any reply, timed out or unreachable (cleared by the
    /// next reply): GitHub is known slow or down.
    timed_out_at: Mutex<Option<std::time::Instant>>,
    /// The quota as the last API reply stated it, and when.
    quota: Mutex<Option<(Quota, std::time::Instant)>>,
    kept: Mutex<HashMap<String, Kept>>,
    store: SharedStore,
    offload: Offload,
}

impl Client {
    /// Whether a call got no reply (timed out, unreachable) within `window`, and no reply
    /// came since.
    pub(super) fn timed_out_within(&self, window: Duration) -> bool {
        self.timed_out_at
            .lock()
            .is_some_and(|at| at.elapsed() < window)
    }

    /// The timeout of one call (`github_timeout_s`).
    pub(super) fn timeout(&self) -> Duration {
        self.timeout
    }

    pub(super) fn new(
        timeout: Duration,
        token: Option<Secret>,
        store: SharedStore,
        offload: Offload,
    ) -> Result<Client, GithubError> {
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::limited(5))
            .build()
            .map_err(|e| GithubError::Unreachable(format!("HTTP client: {e}")))?;
        Ok(Client {
            http,
            token,
            timeout,
            timeout_s: timeout.as_secs().max(1),
            timed_out_at: Mutex::new(None),
            quota: Mutex::new(None),
            kept: Mutex::new(HashMap::new()),
            store,
            offload,
        })
    }

    pub(super) fn quota(&self) -> Option<Quota> {
        self.quota.lock().as_ref().map(|(q, _)| q.clone())
    }

    /// The quota if a reply stated it less than `max_age` ago.
    pub(super) fn quota_within(&self, max_age: Duration) -> Option<Quota> {
        self.quota
            .lock()
            .as_ref()
            .filter(|(_, at)| at.elapsed() < max_age)
            .map(|(q, _)| q.clone())
    }

    pub(super) fn set_quota(&self, q: Quota) {
        *self.quota.lock() = Some((q, std::time::Instant::now()));
    }

    /// Sends the GET `request` builds, and once more after [`RETRY_AFTER`] when that is safe
    /// (`backon`): a failed connection that did not time out, or a server error (a GET changes
    /// nothing). `seen` is told of every reply. The last reply is returned, a server error too.
    async fn send(
        &self,
        url: &str,
        request: impl Fn() -> reqwest::RequestBuilder,
        seen: impl Fn(&reqwest::Response),
    ) -> Result<reqwest::Response, reqwest::Error> {
        enum Attempt {
            Failed(reqwest::Error),
            ServerError(reqwest::Response),
        }
        let (request, seen) = (&request, &seen);
        let sent = (|| async move {
            let reply = request().send().await.map_err(Attempt::Failed)?;
            seen(&reply);
            if reply.status().is_server_error() {
                return Err(Attempt::ServerError(reply));
            }
            Ok(reply)
        })
        .retry(
            ConstantBuilder::new()
                .with_delay(RETRY_AFTER)
                .with_max_times(1),
        )
        .sleep(tokio::time::sleep)
        .when(|a| match a {
            Attempt::Failed(e) => !e.is_timeout(),
            Attempt::ServerError(_) => true,
        })
        .notify(|a, _| {
            if let Attempt::Failed(e) = a {
                tracing::debug!(url, error = %e, "GitHub call failed; retrying once");
            }
        })
        .await;
        match sent {
            Ok(reply) | Err(Attempt::ServerError(reply)) => Ok(reply),
            Err(Attempt::Failed(e)) => Err(e),
        }
    }

    /// GET `url` (`accept`: the media type). `api`: whether it counts against the quota (and
    /// carries the token); raw files do not.
    pub(super) async fn get(&self, url: &str, accept: &str, api: bool) -> Result<Got, GithubError> {
        let kept = self.kept_for(url).await;
        let request = || {
            let mut req = self
                .http
                .get(url)
                .header(USER_AGENT, "shoal")
                .header(ACCEPT, accept);
            if api {
                req = req.header("X-GitHub-Api-Version", "2022-11-28");
                if let Some(t) = &self.token {
                    req = req.bearer_auth(t.expose());
                }
            }
            if let Some(k) = &kept {
                req = req.header(IF_NONE_MATCH, k.etag.as_str());
            }
            req
        };
        let quota_of = |reply: &reqwest::Response| {
            if api {
                Quota::from_headers(reply.headers())
            } else {
                None
            }
        };
        let seen = |reply: &reqwest::Response| {
            metrics::counter!("shoal_github_requests_total", "status" => reply.status().as_u16().to_string())
                .increment(1);
            *self.timed_out_at.lock() = None;
            if let Some(q) = quota_of(reply)
                && q.resource == "core"
            {
                self.set_quota(q);
            }
        };
        let reply = match self.send(url, request, seen).await {
            Ok(r) => r,
            Err(e) => return Err(self.transport_error(&e)),
        };
        let status = reply.status();
        let quota = quota_of(&reply);
        if status == StatusCode::NOT_MODIFIED
            && let Some(k) = &kept
        {
            return Ok(Got::Body(Arc::clone(&k.body)));
        }
        if status == StatusCode::NOT_FOUND {
            return Ok(Got::Missing);
        }
        let etag = reply
            .headers()
            .get(ETAG)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let bytes = match reply.bytes().await {
            Ok(b) => b,
            Err(e) => return Err(self.transport_error(&e)),
        };
        let body: Arc<str> = Arc::from(String::from_utf8_lossy(&bytes).into_owned());
        if status.is_success() {
            if let Some(etag) = etag
                && body.len() <= MAX_KEPT_BYTES
            {
                self.keep(url, etag, Arc::clone(&body)).await;
            }
            return Ok(Got::Body(body));
        }
        Err(refusal(status, &body, quota.as_ref()))
    }

    /// GET a file's bytes (a raw file, no quota, not kept: a book archive is large and read
    /// once). `None` for a 404; at most `max` bytes.
    pub(super) async fn get_bytes(
        &self,
        url: &str,
        max: usize,
    ) -> Result<Option<Vec<u8>>, GithubError> {
        let request = || self.http.get(url).header(USER_AGENT, "shoal");
        let reply = match self.send(url, request, |_| {}).await {
            Ok(r) => r,
            Err(e) => return Err(self.transport_error(&e)),
        };
        let status = reply.status();
        if status == StatusCode::NOT_FOUND {
            return Ok(None);
        }
        if !status.is_success() {
            return Err(refusal(status, "", None));
        }
        if reply.content_length().is_some_and(|n| n > max as u64) {
            return Err(GithubError::Malformed(format!("a file over {max} bytes")));
        }
        let bytes = reply.bytes().await.map_err(|e| self.transport_error(&e))?;
        if bytes.len() > max {
            return Err(GithubError::Malformed(format!("a file over {max} bytes")));
        }
        Ok(Some(bytes.to_vec()))
    }

    fn transport_error(&self, e: &reqwest::Error) -> GithubError {
        *self.timed_out_at.lock() = Some(std::time::Instant::now());
        if e.is_timeout() {
            GithubError::Timeout(self.timeout_s)
        } else {
            // The URL is ours (no token in it); the error's source says what failed.
            let mut text = e.to_string();
            let mut source = std::error::Error::source(e);
            while let Some(s) = source {
                text = s.to_string();
                source = s.source();
            }
            GithubError::Unreachable(text)
        }
    }

    /// The kept reply for `url`: memory, else the store (through the pool).
    async fn kept_for(&self, url: &str) -> Option<Kept> {
        if let Some(k) = self.kept.lock().get(url) {
            return Some(k.clone());
        }
        let store = Arc::clone(&self.store);
        let id = cache_id(url);
        let doc = self
            .offload
            .run(move || store.get(Collection::ShoalKv, &id))
            .await
            .ok()?
            .ok()??;
        let stored_url = doc.get("url").and_then(Value::as_str)?;
        if stored_url != url {
            return None;
        }
        let kept = Kept {
            etag: doc.get("etag").and_then(Value::as_str)?.to_string(),
            body: Arc::from(doc.get("body").and_then(Value::as_str)?),
        };
        self.remember(url, kept.clone());
        Some(kept)
    }

    async fn keep(&self, url: &str, etag: String, body: Arc<str>) {
        let kept = Kept {
            etag: etag.clone(),
            body: Arc::clone(&body),
        };
        self.remember(url, kept);
        let mut doc = Doc::new();
        doc.insert("_id".into(), json!(cache_id(url)));
        doc.insert("url".into(), json!(url));
        doc.insert("etag".into(), json!(etag));
        doc.insert("body".into(), json!(&*body));
        doc.insert("kept_at".into(), json!(chrono::Utc::now().timestamp()));
        let store = Arc::clone(&self.store);
        match self
            .offload
            .run(move || store.put(Collection::ShoalKv, &doc))
            .await
        {
            Ok(Ok(())) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "GitHub reply not stored for reuse"),
            Err(e) => tracing::warn!(error = %e, "GitHub reply not stored for reuse"),
        }
    }

    fn remember(&self, url: &str, kept: Kept) {
        let mut map = self.kept.lock();
        if map.len() >= MEMORY_ENTRIES && !map.contains_key(url) {
            // Forget an arbitrary half: the store still has them, a miss costs one read.
            let drop: Vec<String> = map.keys().take(MEMORY_ENTRIES / 2).cloned().collect();
            for k in drop {
                map.remove(&k);
            }
        }
        map.insert(url.to_string(), kept);
    }
}

/// Deletes the stored replies kept longest ago beyond `max` (replies stored before they
/// carried `kept_at` count as the oldest); returns how many. Blocking: the pool's.
pub(super) fn prune_replies(store: &dyn Store, max: u64) -> StoreResult<u64> {
    let kept = [
        Cond::Exists("etag".into(), true),
        Cond::Exists("url".into(), true),
    ];
    let n = store.count(Collection::ShoalKv, &kept)?;
    let Some(excess) = n.checked_sub(max).filter(|e| *e > 0) else {
        return Ok(0);
    };
    let mut q = Query::new().sort("kept_at", Order::Asc).limit(excess);
    q.filter.extend(kept);
    let mut deleted = 0;
    for doc in store.find(Collection::ShoalKv, &q)? {
        if let Some(id) = doc.get("_id").and_then(Value::as_str)
            && id.starts_with("github_cache:")
            && store.delete(Collection::ShoalKv, id)?
        {
            deleted += 1;
        }
    }
    Ok(deleted)
}

/// The `shoal_kvstore` id a reply is kept under.
fn cache_id(url: &str) -> String {
    format!(
        "github_cache:{}",
        hex::encode(&Sha256::digest(url.as_bytes())[..16])
    )
}

/// A refusal in GitHub's documented shapes: `{"message": …}` with 4xx, the quota's headers.
fn refusal(status: StatusCode, body: &str, quota: Option<&Quota>) -> GithubError {
    let message = serde_json::from_str::<Value>(body)
        .ok()
        .and_then(|v| v.get("message").and_then(Value::as_str).map(str::to_string))
        .unwrap_or_default();
    let exhausted = quota.is_some_and(|q| q.remaining == 0);
    if status == StatusCode::TOO_MANY_REQUESTS
        || (status == StatusCode::FORBIDDEN
            && (exhausted || message.to_ascii_lowercase().contains("rate limit")))
    {
        return GithubError::RateLimited {
            reset: quota.map(|q| q.reset),
        };
    }
    if status.is_server_error() {
        return GithubError::Server(status.as_u16());
    }
    let mut message: String = message.chars().take(200).collect();
    if message.is_empty() {
        message = status.canonical_reason().unwrap_or("refused").to_string();
    }
    GithubError::Refused {
        status: status.as_u16(),
        message,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(store: &dyn Store, id: &str, kept_at: Option<i64>) {
        let mut doc = Doc::new();
        doc.insert("_id".into(), json!(id));
        doc.insert("url".into(), json!(format!("https://api.github.com/{id}")));
        doc.insert("etag".into(), json!("\"e\""));
        doc.insert("body".into(), json!("{}"));
        if let Some(t) = kept_at {
            doc.insert("kept_at".into(), json!(t));
        }
        store.put(Collection::ShoalKv, &doc).unwrap();
    }

    #[test]
    fn the_oldest_replies_beyond_the_cap_are_pruned() {
        let (_dir, store) = crate::store::testkit::temp_store();
        put(&*store, "github_cache:legacy", None);
        for i in 1..=6 {
            put(&*store, &format!("github_cache:{i}"), Some(1_000 + i));
        }
        let mut other = Doc::new();
        other.insert("_id".into(), json!("books"));
        other.insert("value".into(), json!({}));
        store.put(Collection::ShoalKv, &other).unwrap();

        assert_eq!(prune_replies(&*store, 3).unwrap(), 4);
        let left: Vec<String> = store
            .find(Collection::ShoalKv, &Query::new())
            .unwrap()
            .iter()
            .filter_map(|d| d.get("_id").and_then(Value::as_str).map(str::to_string))
            .collect();
        let mut left = left;
        left.sort();
        assert_eq!(
            left,
            [
                "books",
                "github_cache:4",
                "github_cache:5",
                "github_cache:6"
            ]
        );
        assert_eq!(prune_replies(&*store, 3).unwrap(), 0);
    }
}

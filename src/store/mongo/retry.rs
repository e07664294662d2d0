//! Errors and retries on MongoDB: which driver errors are transient (retried with backoff),
//! which are duplicates, and how the others become [`StoreError`]s.
//!
//! Must not: retry an error that is not transient (a duplicate key, a refused document), or
//! retry without bound (the attempts and the wait are capped by [`Retry`]).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use backon::{BackoffBuilder, BlockingRetryable as _};
use mongodb::error::{
    Error as MongoError, ErrorKind, RETRYABLE_ERROR, RETRYABLE_WRITE_ERROR,
    TRANSIENT_TRANSACTION_ERROR, WriteFailure,
};

use super::MongoStore;
use crate::store::bson_map;
use crate::store::{StoreError, StoreResult};

/// Retry policy for transient errors: attempts and the backoff between them.
#[derive(Debug, Clone, Copy)]
pub struct Retry {
    pub attempts: u32,
    pub first: Duration,
    pub max: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 5,
            first: Duration::from_millis(100),
            max: Duration::from_secs(2),
        }
    }
}

impl Retry {
    /// The wait before retry number `n` (0-based): doubling from `first`, capped at `max`,
    /// with up to 25% random jitter so a fleet of callers does not retry in step.
    pub fn backoff(&self, n: u32) -> Duration {
        let base = self
            .first
            .saturating_mul(1u32.checked_shl(n.min(16)).unwrap_or(u32::MAX))
            .min(self.max);
        let jitter = base.mul_f64(rand::random::<f64>() * 0.25);
        base.saturating_add(jitter).min(self.max)
    }
}

/// The waits between the attempts of one call, as `backon` takes them: `attempts - 1` of
/// [`Retry::backoff`].
pub struct Delays {
    retry: Retry,
    next: u32,
}

impl Iterator for Delays {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        if self.next.saturating_add(1) >= self.retry.attempts {
            return None;
        }
        let wait = self.retry.backoff(self.next);
        self.next += 1;
        Some(wait)
    }
}

impl BackoffBuilder for Retry {
    type Backoff = Delays;

    fn build(self) -> Delays {
        Delays {
            retry: self,
            next: 0,
        }
    }
}

/// Server error codes that mean "try again": a primary stepping down, a node shutting down
/// or unreachable, a network timeout (the set the drivers' retryable-writes spec lists).
pub fn is_transient_code(code: i32) -> bool {
    matches!(
        code,
        6 | 7 | 89 | 91 | 189 | 262 | 9001 | 10107 | 11600 | 11602 | 13435 | 13436 | 63 | 150
    )
}

/// Whether an error may go away on its own.
pub(super) fn transient(e: &MongoError) -> bool {
    if [
        RETRYABLE_WRITE_ERROR,
        RETRYABLE_ERROR,
        TRANSIENT_TRANSACTION_ERROR,
    ]
    .iter()
    .any(|l| e.contains_label(l))
    {
        return true;
    }
    match &*e.kind {
        ErrorKind::Io(_) | ErrorKind::ConnectionPoolCleared { .. } => true,
        ErrorKind::ServerSelection { .. } => true,
        ErrorKind::Command(c) => is_transient_code(c.code),
        ErrorKind::Write(WriteFailure::WriteConcernError(w)) => is_transient_code(w.code),
        _ => false,
    }
}

pub(super) fn duplicate(e: &MongoError) -> bool {
    match &*e.kind {
        ErrorKind::Write(WriteFailure::WriteError(w)) => w.code == 11000,
        ErrorKind::Command(c) => c.code == 11000,
        _ => false,
    }
}

pub(super) fn backend(e: &MongoError) -> StoreError {
    StoreError::Backend {
        backend: "mongodb",
        message: e.to_string(),
        transient: transient(e),
    }
}

pub(super) fn mapping(e: bson_map::MapError) -> StoreError {
    StoreError::Backend {
        backend: "mongodb",
        message: format!("document mapping: {e}"),
        transient: false,
    }
}

impl MongoStore {
    fn check_open(&self) -> StoreResult<()> {
        if self.closed.load(Ordering::Acquire) {
            Err(StoreError::Closed)
        } else {
            Ok(())
        }
    }

    /// Runs `f`, retrying transient failures with backoff (`backon`, on [`Retry`]'s delays).
    pub(super) fn retrying<T>(
        &self,
        op: &'static str,
        f: impl FnMut() -> mongodb::error::Result<T>,
    ) -> StoreResult<T> {
        self.check_open()?;
        let started = Instant::now();
        let mut attempt = 0;
        let r = f
            .retry(self.retry)
            .sleep(std::thread::sleep)
            .when(transient)
            .notify(|e, wait| {
                attempt += 1;
                tracing::warn!(op, attempt, error = %e, ?wait, "mongodb: transient error, retrying");
            })
            .call()
            .map_err(|e| {
                if duplicate(&e) {
                    StoreError::Duplicate(e.to_string())
                } else {
                    backend(&e)
                }
            });
        metrics::histogram!("shoal_store_op_seconds", "op" => op, "collection" => "mongodb")
            .record(started.elapsed().as_secs_f64());
        r
    }
}

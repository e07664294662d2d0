//! Limits: keyed concurrency limits, floating limits and rate limits (the design is in
//! docs/limits.md).
//!
//! - [`def`]: what `[[limits]]` in settings.toml may say, validated; the built-in limits that
//!   carry Fishtest's special cases (machine limit, the per-run window, the SPSA core cap);
//! - [`engine`]: the per-key state (holders, waiters, rejections), grant and release, waiting
//!   with reservations, floating refresh state with its backoff, rate windows, the views;
//! - [`compute`]: the built-in computations of floating limits, pure.
//!
//! Must not: know HTTP or the store: the run database decides what a task's keys are and when
//! it ends (and releases), the HTTP layer counts calls against rate limits and shows the views.

pub mod compute;
pub mod def;
pub mod engine;

pub use def::{KeyKind, Kind, LimitDef, LimitSpec, Scope, Source, Unit};
pub use engine::{Engine, Full, Grant, GrantRef, Holder, KeyCtx, LimitId, LimitView, RateLimited};

#[cfg(test)]
mod props;

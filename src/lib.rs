//! shoal: a Fishtest-compatible server.
//!
//! The crate map, in reading order:
//! - [`config`]: settings file + environment -> a validated [`config::Config`].
//! - [`secret`]: wrappers that keep secrets and passwords out of `Debug`, logs and printouts.
//! - [`telemetry`]: the `tracing` subscriber and the Prometheus recorder.
//! - [`process`], [`protocol`]: what the server and its clients share (the open-files limit;
//!   worker version, the stats shape, time controls, reference nps, game-count maxima): the
//!   crate `shoal-protocol` (`crates/shoal-protocol`), re-exported under these names.
//! - [`offload`]: the token pool, the only door to blocking threads.
//! - [`mail`]: outgoing mail over SMTP (password-reset links, when `smtp_url` is set).
//! - [`store`]: Fishtest's collections behind a blocking trait; the embedded SQLite backend
//!   and the MongoDB one (Fishtest's own database), and the mapping to Fishtest's documents.
//! - [`stats`]: Fishtest's statistics (Elo, LLR, SPRT), pure functions: the crate
//!   `shoal-stats` (`crates/shoal-stats`, which knows nothing of the server), re-exported.
//! - [`spsa`], [`purge`]: SPSA tuning and purge maths, pure functions.
//! - [`limits`]: keyed concurrency, floating and rate limits: their definitions from the
//!   settings and the engine that grants, releases and queues; no I/O, no HTTP, no store.
//! - [`ledger`]: the action log, CPU hours and contributors; told facts, knows no run.
//! - [`accounts`]: users, passwords and the credential cache, sessions, the login throttle and
//!   the login policy; typed refusals ([`accounts::AuthError`]).
//! - [`nets`]: the net directory and the `nns` records (uploads, downloads, the name rule, the
//!   import of Fishtest's net files).
//! - [`rundb`]: the run core: runs, tasks and the worker protocol's rules; the run cache and
//!   journal (it records into the [`ledger`] and takes checked [`accounts::User`]s).
//! - [`scheduler`]: request_task's whole path: the admission gate and its batches, the
//!   critical section and its memory, the limits' grants and waits, the blocked workers (over
//!   the [`rundb`] run core).
//! - [`groups`]: test groups (issue 39): several takes of one idea, the group's games spent on
//!   the takes most likely to pass, the others stopped as superseded (over [`scheduler`]).
//! - [`github`]: what shoal asks GitHub: a branch resolved to its commit, benches, nets, the
//!   fork check, diffs, official master, the quota (never on the worker API's paths).
//! - [`http`]: the router, the middleware stack, the handlers; the only module that knows HTTP
//!   (and Fishtest's texts for its refusals). It holds the components side by side in
//!   [`http::AppState`].
//! - [`jobs`]: the primary's periodic jobs, one table, run on a [`jobs::JobContext`] of
//!   components (by their periodic tasks, and by `POST /debug/job/{name}`).
//! - [`app`]: start-up, serving, orderly shutdown; it starts the [`jobs`].
//! - [`dump`]: `shoal import` / `shoal export`: a Fishtest dump directory into the store and
//!   back, streamed (and the net files of a Fishtest net directory).
//!
//! The fleet simulator and the demo (`shoal sim`, `shoal demo`) are the crate `shoal-sim`
//! (`crates/shoal-sim`): a client of the server over HTTP that shares only `shoal-protocol`
//! with it, so it cannot reach the server's internals. The `shoal` binary (`main.rs`, and its
//! commands in `cli/`) is a client of this library and of `shoal-sim`, not a part of either.
//!
//! See ARCHITECTURE.md for the execution domains, the request paths and the invariants.

pub mod accounts;
pub mod app;
pub mod config;
pub mod dump;
pub mod github;
pub mod groups;
pub mod http;
pub mod jobs;
pub mod ledger;
pub mod limits;
pub mod mail;
pub mod nets;
pub mod offload;
pub mod purge;
pub mod rundb;
pub mod scheduler;
pub mod secret;
pub mod spsa;
pub mod store;
pub mod telemetry;

pub use shoal_protocol::{self as protocol, process};
pub use shoal_stats as stats;

//! The one integration-test binary: real server processes, real HTTP, real SQLite.

mod core;
mod fleet;
mod fuzz;
mod hardening;
mod harness;
mod sim;
mod soak;
mod spsa_props;
mod stats_corpus;
mod stats_props;
mod tuning;
mod worker_api;

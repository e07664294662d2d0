//! The one integration-test binary: real server processes, real HTTP, real SQLite.

// Tests may panic on the unexpected: that is how they fail (Cargo.toml denies these in src/).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod api_shapes;
mod batches;
mod beside_fishtest;
mod browser;
mod browser_nets;
mod browser_record;
mod browser_stats;
mod browser_submit;
mod core;
mod fishtest_db;
mod fleet;
mod fuzz;
mod hardening;
mod harness;
mod instances;
mod layout;
mod limits;
mod mongo;
mod nets_store;
mod openapi;
mod sim;
mod soak;
mod spsa_props;
mod stats_corpus;
mod stats_pages;
mod stats_props;
mod store_ops;
mod tuning;
mod ui;
mod ui_charts;
mod ui_controls;
mod ui_lists;
mod ui_nets;
mod ui_record;
mod ui_run;
mod ui_stats;
mod ui_submit;
mod ui_users;
mod ui_workers;
mod update_fast;
mod web;
mod worker_api;

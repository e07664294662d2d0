//! The `shoal` binary's longer commands, beside `main.rs` (they belong to the binary, not to
//! the library: a client of the library like any other).
//!
//! Must not: hold logic the server needs (that lives in the library, which the binary only
//! calls).
//!
//! Files:
//! - `user.rs`: `shoal user` (accounts from the command line).
//! - `simulate_groups.rs`: `shoal simulate-groups` (test groups against independent tests).

pub mod simulate_groups;
pub mod user;

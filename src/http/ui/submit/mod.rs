//! The submit room: the new-run form (`/tests/run`), its fields, arguments and GitHub checks.

pub mod args;
pub mod form;
pub mod github;
pub mod page;

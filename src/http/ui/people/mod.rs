//! The people room: log in, sign up, profile, users, user management, tokens, password
//! reset, follows and notices.

pub mod accounts;
pub mod follows;
pub mod forgot;
pub mod notices;
pub mod pending_bulk;
pub mod profile;
pub mod reset;
pub mod signup_guard;
pub mod tokens;
pub mod user_management;

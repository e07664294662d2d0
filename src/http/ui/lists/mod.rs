//! The lists room: finished runs and the actions log.

pub mod actions;
pub mod finished;
pub mod user;

//! The dashboard room: `/tests` (its panels, filters, workers table and cache).

pub mod cache;
pub mod page;
pub mod workers;

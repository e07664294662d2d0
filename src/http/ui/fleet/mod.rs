//! The fleet room: machines, workers, limits, contributors and rate limits.

pub mod contributors;
pub mod limits;
pub mod machines;
pub mod rate_limits;
pub mod workers;

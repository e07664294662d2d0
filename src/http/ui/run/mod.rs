//! The run's room: the run page (arguments, tasks, results box, charts, detail, diff), its
//! statistics pages (stats, live Elo, the SPRT calculator) and the run controls.

pub mod args;
pub mod charts;
pub mod controls;
pub mod detail;
pub mod diff;
pub mod live_elo;
pub mod page;
pub mod sprt_calc;
pub mod stats;
pub mod stats_tables;
pub mod tasks;
pub mod tasks_view;

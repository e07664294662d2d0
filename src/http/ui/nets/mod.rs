//! The nets room: the net list (`/nns`) and the net upload (`/upload`).

pub mod page;
pub mod upload;

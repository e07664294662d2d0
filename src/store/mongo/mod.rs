//! The MongoDB store (work in progress).

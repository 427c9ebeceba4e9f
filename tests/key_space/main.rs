//! The key space: its bounds, eviction, and floods of new keys.

#[path = "../support/mod.rs"]
mod support;

mod flood;
mod limits;
mod room;
mod stress;

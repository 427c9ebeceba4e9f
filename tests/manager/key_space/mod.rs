//! The key space: its bounds, eviction, and floods of new keys.

mod flood;
mod forget;
mod limits;
mod room;
mod stress;

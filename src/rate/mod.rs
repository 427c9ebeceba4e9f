//! The adaptive rate: a per-key token bucket whose rate moves with outcomes.
//!
//! `config` is what users set, `gcra`, `aimd`, `usage` and `falls` are the
//! pure maths, `cell` enforces them on one key's atomics, and `line` is
//! where calls wait for their turn to take a token.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::architecture).

pub(crate) mod aimd;
pub(crate) mod cell;
pub(crate) mod config;
pub(crate) mod falls;
pub(crate) mod gcra;
pub(crate) mod line;
pub(crate) mod usage;

pub use config::{Decrease, MAX_RATE, RateConfig, slowest_rate};

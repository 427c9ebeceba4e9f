//! The adaptive rate: a per-key token bucket whose rate moves with outcomes.
//!
//! `config` is what users set, `gcra` and `aimd` are the pure maths,
//! `cell` enforces them on one key's atomics.

pub(crate) mod aimd;
pub(crate) mod cell;
pub(crate) mod config;
pub(crate) mod gcra;
pub(crate) mod usage;

pub use config::{MAX_RATE, RateConfig, ValidRateConfig, slowest_rate};

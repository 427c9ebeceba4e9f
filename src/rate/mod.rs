//! The adaptive rate: a per-key token bucket whose rate moves with outcomes.
//!
//! `config` is what users set, `gcra`, `aimd`, `usage` and `falls` are the
//! pure maths, `cell` enforces them on one key's atomics, and `line` is
//! where calls wait for their turn to take a token.
//!
//! # The contract (what the facade below promises the core)
//!
//! - **State**: a key's `RateCell` holds its rate, which way it last
//!   moved, its bucket (the time slot of the next free token, GCRA's
//!   theoretical arrival time), its line and its recent falls, all on
//!   atomics; `RateSettings` are the validated rules, shared by keys.
//! - **Invariants**: the rate stays within the settings' bounds (a fixed
//!   quota never moves); over any interval `T`, the tokens a cell hands
//!   out at a rate `r` are at most `r × T + burst`; the bucket owes at
//!   most its burst's intervals plus the longest pause asked of it; a
//!   token handed back (`cancel`) is as if never taken.
//! - **What a caller may assume**: every method is total (no panic, no
//!   lock) and takes the time as an argument, so the core's one clock is
//!   the only clock; a rate change reaches the calls in line at once
//!   (`HORIZON`); a change reports a `Reversal` when it reverses the
//!   rate's direction, for the events.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::guide::architecture).

mod aimd;
mod cell;
mod config;
mod falls;
mod gcra;
mod growth;
mod line;
mod usage;

pub use config::{Decrease, MAX_RATE, RateConfig, slowest_rate};

// The facade: all the core and the stores use of the rate.
pub(crate) use aimd::{MAX_RATE_OVER_USE, MAX_RATE_OVER_USE_WAITED};
pub(crate) use cell::{RateCell, RateChange, Reservation, Reversal, TakeMark};
pub(crate) use config::RateSettings;
pub(crate) use gcra::interval;
pub(crate) use line::{HORIZON, STORE_HORIZON, expected_wait, next_look};

/// The default longest pause a `Retry-After` can impose on a key
/// ([`max_defer`](crate::deadline::TimeLimits::max_defer)).
pub(crate) const DEFAULT_MAX_DEFER: std::time::Duration = std::time::Duration::from_secs(5 * 60);

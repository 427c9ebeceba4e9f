//! The adaptive throttle: client-side throttling in the style of the Google
//! SRE book ("Handling Overload"), per key and per priority.
//!
//! `config` is what users set, `probability` the pure maths, `window`
//! the per-key counters of the last window that feed it.
//!
//! # The contract (what the facade below promises the core)
//!
//! - **State**: a key's `ThrottleWindow` holds, per priority, its
//!   requests and accepts in ten buckets of a tenth of the window each, on
//!   atomics; `ThrottleSettings` are the validated rules.
//! - **Invariants**: a rejection probability is in `[0, max_rejection]`;
//!   an outcome counts for one window and no longer; a lower priority is
//!   shed before a higher one under a shared overload.
//! - **What a caller may assume**: `rejection` decides from the counts and
//!   a uniform draw (`random_unit`, or the manager's random source) and
//!   never blocks; `record` counts an outcome as a `Count`; a key whose
//!   backend recovered stops being shed within two windows.
//!
//! The rules, and why:
//! - **`window` means one window**: an outcome older than it no longer
//!   counts, and one younger than nine tenths of it counts in full (ten
//!   whole buckets, no fading), so "the last minute" is a minute a user can
//!   check.
//! - **Priority order is taken from the budget, not left to the dynamics.**
//!   The backend accepts calls whatever their priority, so the accepts of
//!   every priority are one SRE budget (`ratio × accepts`), taken by the
//!   priorities in order (`probability::rejections`). A priority judged
//!   by its own accepts alone has no pull back to 0 under a shared
//!   overload (the backend refuses its calls as often as anyone's, so any
//!   probability is an equilibrium); allowed what the priorities above it
//!   leave of the shared budget, it is not shed while its demand fits, and
//!   the priorities below carry the shedding.
//! - With one priority the rule is the SRE book's, with its `ratio`,
//!   `min_rate` and local rejections counted as requests, and with any,
//!   about `ratio` times what the backend accepts reaches it.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::guide::architecture).

mod config;
mod probability;
mod window;

pub use config::ThrottleConfig;

// The facade: all the core uses of the throttle.
pub(crate) use config::ThrottleSettings;
pub(crate) use window::{Count, ThrottleWindow};

use std::cell::Cell;
use std::hash::{BuildHasher, Hasher};

/// A uniform draw from `[0, 1)`, per thread, for shedding decisions: a
/// xorshift64* generator seeded from std's random hasher keys. Not for
/// cryptography; cheap, and only called when a key is shedding.
pub(crate) fn random_unit() -> f64 {
    thread_local! {
        static STATE: Cell<u64> = Cell::new({
            let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
            hasher.write_u64(0x9E37_79B9_7F4A_7C15);
            hasher.finish() | 1
        });
    }
    STATE.with(|state| {
        let mut x = state.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        state.set(x);
        // The top 53 bits of the scrambled state, as a fraction of 2^53.
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn draws_are_uniform_enough() {
        let draws: Vec<f64> = (0..100_000).map(|_| super::random_unit()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)));
        let below_quarter = draws.iter().filter(|d| **d < 0.25).count();
        assert!((24_000..26_000).contains(&below_quarter), "{below_quarter}");
    }
}

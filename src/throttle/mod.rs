//! The adaptive throttle: client-side throttling in the style of the Google
//! SRE book ("Handling Overload"), per key and per priority.
//!
//! `config` is what users set, `probability` the pure maths, `window`
//! the per-key sliding-window counters that feed it.
//!
//! The words used here (debt, fall, news, quiet, room, hold, ticket, ...)
//! are defined once, in [the architecture map](crate::architecture).

pub(crate) mod config;
pub(crate) mod probability;
pub(crate) mod window;

pub use config::ThrottleConfig;

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

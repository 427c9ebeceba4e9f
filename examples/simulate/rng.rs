//! A small seeded random source (SplitMix64): the same seed gives the same
//! arrivals, priorities and shedding decisions on every machine.

use std::sync::atomic::{AtomicU64, Ordering};

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// SplitMix64 over an atomic counter, so one generator can be shared with
/// the manager's `random_source` (which must be `Fn + Send + Sync`).
#[derive(Debug)]
pub(crate) struct SplitMix64 {
    state: AtomicU64,
}

impl SplitMix64 {
    pub(crate) fn new(seed: u64) -> Self {
        Self {
            state: AtomicU64::new(seed),
        }
    }

    pub(crate) fn next_u64(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(GAMMA, Ordering::Relaxed)
            .wrapping_add(GAMMA);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub(crate) fn next_f64(&self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An exponential variate with the given rate (mean `1 / rate`): the
    /// time to the next arrival of a Poisson process.
    pub(crate) fn exponential(&self, rate: f64) -> f64 {
        -(1.0 - self.next_f64()).ln() / rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_sequence_and_another_seed_another() {
        let (a, b, c) = (SplitMix64::new(7), SplitMix64::new(7), SplitMix64::new(8));
        let a: Vec<u64> = (0..5).map(|_| a.next_u64()).collect();
        let b: Vec<u64> = (0..5).map(|_| b.next_u64()).collect();
        let c: Vec<u64> = (0..5).map(|_| c.next_u64()).collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
    }

    #[test]
    fn uniform_and_exponential_have_the_right_means() {
        let rng = SplitMix64::new(1);
        let n = 100_000;
        let uniform: f64 = (0..n).map(|_| rng.next_f64()).sum::<f64>() / n as f64;
        assert!((uniform - 0.5).abs() < 0.01, "{uniform}");
        let exponential: f64 = (0..n).map(|_| rng.exponential(4.0)).sum::<f64>() / n as f64;
        assert!((exponential - 0.25).abs() < 0.005, "{exponential}");
        assert!((0..n).all(|_| (0.0..1.0).contains(&rng.next_f64())));
    }
}

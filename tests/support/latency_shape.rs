//! Backend latencies of several shapes, for the learned concurrency
//! limit's tests: on virtual time and from a real server. Each shape's
//! mean is about `mean` at no load.

use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Shape {
    Constant,
    /// Uniform within ±50 % of the mean.
    Uniform,
    Exponential,
    /// A tenth of the calls are cache hits, ten times faster.
    FastHits,
    /// Slower the more calls are in flight: `mean × (1 + (in_flight −
    /// 1) / workers)`.
    RisingWithLoad,
}

impl Shape {
    pub(crate) const EVERY: [Shape; 5] = [
        Shape::Constant,
        Shape::Uniform,
        Shape::Exponential,
        Shape::FastHits,
        Shape::RisingWithLoad,
    ];

    /// One call's latency, from a draw `u` in [0, 1), with `in_flight`
    /// calls (itself included) at a backend of `workers`.
    pub(crate) fn latency(self, mean: Duration, u: f64, in_flight: u32, workers: u32) -> Duration {
        let latency = match self {
            Shape::Constant => mean,
            Shape::Uniform => mean.mul_f64(0.5 + u),
            Shape::Exponential => mean.mul_f64(-(1.0 - u).ln()),
            Shape::FastHits if u < 0.1 => mean / 10,
            Shape::FastHits => mean.mul_f64(1.1),
            Shape::RisingWithLoad => {
                mean.mul_f64(1.0 + f64::from(in_flight.saturating_sub(1)) / f64::from(workers))
            }
        };
        latency.max(Duration::from_micros(50))
    }
}

/// splitmix64: a seeded source of draws in [0, 1).
pub(crate) struct Draws(pub(crate) u64);

impl Draws {
    pub(crate) fn next(&mut self) -> f64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    }
}

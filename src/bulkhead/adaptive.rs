//! A concurrency limit learned from latency, as pure maths: the state of one
//! key's limit and what one call's sample does to it. No clock, no atomics:
//! time comes in with the sample.
//!
//! Two algorithms, both from Netflix's concurrency-limits:
//!
//! - **Gradient** (in the style of its Gradient2, and of Envoy's adaptive
//!   concurrency filter): a long-run average of the latency is the
//!   baseline; `gradient = clamp(TOLERANCE × baseline / latency, 0.5, 1)`
//!   and the new limit is `limit × gradient + √limit`, smoothed. While the
//!   latency stays near its baseline the limit grows by about √limit a
//!   call; once calls queue at the backend the latency rises and the
//!   gradient pulls the limit down in proportion.
//! - **Vegas** (TCP Vegas): the lowest latency seen is the unloaded one,
//!   and `queue = limit × (1 − unloaded / latency)` estimates the calls
//!   waiting at the backend; the limit grows while that queue is short
//!   (under 3·log10(limit)) and shrinks once it is long (over
//!   6·log10(limit)).
//!
//! Both: an overload (a 429, a 503, a timeout) takes [`OVERLOAD_FACTOR`] off
//! the limit at once, at most once per baseline latency (the calls already
//! in flight when it fell report the same overload); and the limit grows
//! only while it is what holds the calls back, when calls queue or every
//! slot is taken, never while the key uses a fraction of it (the same
//! lesson as the rate's validation).

use crate::clock::Nanos;

/// How much latency above its baseline the gradient tolerates before it
/// lowers the limit (Gradient2's default).
pub(crate) const TOLERANCE: f64 = 1.5;

/// How much of each new estimate the gradient's limit takes (the rest is
/// the old limit).
const SMOOTHING: f64 = 0.2;

/// The weight of one sample in the gradient's long-run baseline: about
/// the last 100 calls.
const BASELINE_WEIGHT: f64 = 0.01;

/// What an overload leaves of the limit.
pub(crate) const OVERLOAD_FACTOR: f64 = 0.8;

/// Vegas forgets its unloaded latency every this many samples per unit of
/// limit, and takes the next sample as the new one: a backend that became
/// slower for good is otherwise measured against a latency it no longer
/// has.
const VEGAS_PROBE_EVERY: u32 = 30;

/// Which algorithm learns a key's concurrency limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Algorithm {
    /// A long-run latency baseline and a gradient (the default).
    #[default]
    Gradient,
    /// TCP Vegas: the unloaded latency and the queue it implies.
    Vegas,
}

/// What one key's limit has learned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Learned {
    /// The limit, before rounding down to whole calls.
    pub(crate) limit: f64,
    /// Gradient: the long-run latency (ns); Vegas: the lowest latency seen
    /// since the last probe (ns). 0 before the first sample.
    pub(crate) baseline: f64,
    /// When an overload last lowered the limit (0: never).
    pub(crate) decreased_at: Nanos,
    /// Samples since Vegas last probed for a new unloaded latency.
    pub(crate) samples: u32,
}

/// One call's outcome, as the limit sees it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Sample {
    /// When the call ended.
    pub(crate) at: Nanos,
    /// From its admission to its outcome (ns).
    pub(crate) latency: Nanos,
    /// Calls in flight when it ended, itself included.
    pub(crate) in_flight: u32,
    /// Calls waiting in the key's queue then.
    pub(crate) queued: u32,
    /// Whether it ended in overload.
    pub(crate) overloaded: bool,
}

/// The bounds a limit stays within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub(crate) min: u32,
    pub(crate) max: u32,
}

impl Bounds {
    fn clamp(self, limit: f64) -> f64 {
        limit.clamp(f64::from(self.min), f64::from(self.max))
    }
}

impl Learned {
    /// A fresh key's limit: `initial`, nothing learned yet.
    pub(crate) fn new(initial: u32) -> Self {
        Self {
            limit: f64::from(initial),
            baseline: 0.0,
            decreased_at: 0,
            samples: 0,
        }
    }

    /// The limit in whole calls.
    pub(crate) fn whole(&self) -> u32 {
        self.limit as u32
    }
}

/// What `sample` teaches a limit that has learned `learned`.
pub(crate) fn learn(
    learned: Learned,
    sample: Sample,
    algorithm: Algorithm,
    bounds: Bounds,
) -> Learned {
    if sample.overloaded {
        return overloaded(learned, sample, bounds);
    }
    let latency = (sample.latency as f64).max(1.0);
    let mut next = match algorithm {
        Algorithm::Gradient => gradient(learned, latency),
        Algorithm::Vegas => vegas(learned, latency),
    };
    // Grow only while the limit is what holds calls back.
    let limiting = sample.queued > 0 || sample.in_flight >= learned.whole();
    if next.limit > learned.limit && !limiting {
        next.limit = learned.limit;
    }
    next.limit = bounds.clamp(next.limit);
    next
}

/// An overload lowers the limit at once, unless it already fell within the
/// last baseline latency (the calls in flight then report the same
/// overload).
fn overloaded(learned: Learned, sample: Sample, bounds: Bounds) -> Learned {
    let recently = learned.decreased_at > 0
        && sample.at.saturating_sub(learned.decreased_at) < learned.baseline as Nanos;
    if recently {
        return learned;
    }
    Learned {
        limit: bounds.clamp(learned.limit * OVERLOAD_FACTOR),
        decreased_at: sample.at.max(1),
        ..learned
    }
}

fn gradient(learned: Learned, latency: f64) -> Learned {
    let mut baseline = if learned.baseline == 0.0 {
        latency
    } else {
        learned.baseline + BASELINE_WEIGHT * (latency - learned.baseline)
    };
    // A baseline far above what calls take now came from an overload that
    // has passed: let it fall faster than its average would (Gradient2).
    if baseline > 2.0 * latency {
        baseline *= 0.95;
    }
    let gradient = (TOLERANCE * baseline / latency).clamp(0.5, 1.0);
    let estimate = learned.limit * gradient + learned.limit.sqrt();
    Learned {
        limit: learned.limit * (1.0 - SMOOTHING) + estimate * SMOOTHING,
        baseline,
        ..learned
    }
}

fn vegas(learned: Learned, latency: f64) -> Learned {
    let probe_every = VEGAS_PROBE_EVERY.saturating_mul(learned.whole().max(1));
    let (unloaded, samples) = if learned.baseline == 0.0 || learned.samples >= probe_every {
        (latency, 0)
    } else {
        (learned.baseline.min(latency), learned.samples + 1)
    };
    let limit = learned.limit;
    let log = limit.max(1.0).log10().max(1.0);
    let queue = limit * (1.0 - unloaded / latency);
    let limit = if queue <= log {
        limit + 6.0 * log
    } else if queue < 3.0 * log {
        limit + log
    } else if queue > 6.0 * log {
        limit - log
    } else {
        limit
    };
    Learned {
        limit,
        baseline: unloaded,
        samples,
        ..learned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const BOUNDS: Bounds = Bounds { min: 1, max: 200 };

    fn sample(at: Nanos, latency: Nanos, in_flight: u32, queued: u32) -> Sample {
        Sample {
            at,
            latency,
            in_flight,
            queued,
            overloaded: false,
        }
    }

    /// Feeds `n` samples of `latency` with the limit full (every slot in
    /// use), one per millisecond from `from`.
    fn feed(
        mut learned: Learned,
        algorithm: Algorithm,
        from: Nanos,
        n: u64,
        latency: Nanos,
    ) -> Learned {
        for i in 0..n {
            let full = learned.whole();
            learned = learn(
                learned,
                sample(from + i * MS, latency, full, 1),
                algorithm,
                BOUNDS,
            );
        }
        learned
    }

    #[test]
    fn the_limit_rises_while_latency_is_low_and_calls_queue() {
        for algorithm in [Algorithm::Gradient, Algorithm::Vegas] {
            let learned = feed(Learned::new(10), algorithm, MS, 50, 10 * MS);
            assert!(learned.limit > 20.0, "{algorithm:?}: {learned:?}");
        }
    }

    #[test]
    fn the_limit_falls_when_latency_rises_past_the_tolerance() {
        for algorithm in [Algorithm::Gradient, Algorithm::Vegas] {
            let settled = feed(Learned::new(50), algorithm, MS, 200, 10 * MS);
            // The backend is saturated: calls now take three times as long.
            let loaded = feed(settled, algorithm, 300 * MS, 100, 30 * MS);
            assert!(
                loaded.limit < settled.limit * 0.7,
                "{algorithm:?}: {settled:?} -> {loaded:?}"
            );
        }
    }

    #[test]
    fn an_overload_lowers_the_limit_at_once_and_once_per_baseline() {
        let settled = feed(Learned::new(50), Algorithm::Gradient, MS, 100, 10 * MS);
        let at = 200 * MS;
        let failed = Sample {
            overloaded: true,
            ..sample(at, 10 * MS, 50, 0)
        };
        let once = learn(settled, failed, Algorithm::Gradient, BOUNDS);
        assert_eq!(once.limit, settled.limit * OVERLOAD_FACTOR);
        // The calls in flight with it fail too, within one latency: no more.
        let again = learn(
            once,
            Sample {
                at: at + 5 * MS,
                ..failed
            },
            Algorithm::Gradient,
            BOUNDS,
        );
        assert_eq!(again.limit, once.limit);
        let later = learn(
            once,
            Sample {
                at: at + 11 * MS,
                ..failed
            },
            Algorithm::Gradient,
            BOUNDS,
        );
        assert_eq!(later.limit, once.limit * OVERLOAD_FACTOR);
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let bounds = Bounds { min: 4, max: 16 };
        let mut learned = Learned::new(8);
        for i in 0..1_000 {
            let full = learned.whole();
            learned = learn(
                learned,
                sample(i * MS, MS, full, 3),
                Algorithm::Gradient,
                bounds,
            );
            assert!((4.0..=16.0).contains(&learned.limit));
        }
        assert_eq!(learned.whole(), 16);
        for i in 0..1_000 {
            let failed = Sample {
                overloaded: true,
                ..sample((2_000 + i * 10) * MS, MS, 1, 0)
            };
            learned = learn(learned, failed, Algorithm::Gradient, bounds);
            assert!((4.0..=16.0).contains(&learned.limit));
        }
        assert_eq!(learned.whole(), 4);
    }

    #[test]
    fn an_unused_limit_does_not_grow() {
        for algorithm in [Algorithm::Gradient, Algorithm::Vegas] {
            let mut learned = Learned::new(20);
            // Two calls in flight of twenty allowed, nobody waiting: however
            // fast they are, they say nothing about twenty-one.
            for i in 0..1_000 {
                learned = learn(learned, sample(i * MS, MS, 2, 0), algorithm, BOUNDS);
            }
            assert!(learned.limit <= 20.0, "{algorithm:?}: {learned:?}");
        }
    }

    #[test]
    fn vegas_probes_for_a_new_unloaded_latency() {
        // Unloaded at 1 ms; then the backend is slower for good (5 ms)
        // with nothing queueing at it.
        let fast = feed(Learned::new(10), Algorithm::Vegas, MS, 20, MS);
        let slow = feed(fast, Algorithm::Vegas, 100 * MS, 2_000, 5 * MS);
        assert_eq!(slow.baseline, (5 * MS) as f64);
    }
}

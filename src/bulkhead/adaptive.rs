//! A concurrency limit learned from latency, as pure maths: the state of one
//! key's limit and what a window of calls does to it. No clock, no atomics:
//! time comes in with the samples.
//!
//! The controller is a gradient one, in the style of Envoy's adaptive
//! concurrency filter (and of Netflix's Gradient2):
//!
//! - the **baseline** is the latency of calls made with almost nothing in
//!   flight: the limit is held low for a few calls now and then (a probe)
//!   and the fastest of them is the baseline. A baseline taken under load
//!   cannot tell a slow backend from a queueing one, and a limit that
//!   measures itself against it drifts up without end;
//! - every window of calls, `gradient = clamp((1 + BUFFER) × baseline /
//!   latency, 0.5, 2)` and the new limit is `limit × gradient`, plus
//!   `√limit` of room while the gradient is 1 or more: it grows while
//!   calls are as fast as the baseline allows and falls in proportion once
//!   the backend queues them, settling where calls take the baseline plus
//!   the buffer;
//! - an overload (a 429, a 503, a timeout) takes [`OVERLOAD_FACTOR`] off
//!   the limit at once, at most once per baseline latency (the calls in
//!   flight when it fell report the same overload); from then on it grows
//!   by at most [`CAREFUL_STEP`] a window (until the next probe): a
//!   backend that refuses beyond N in flight answers fast, and its latency
//!   never warns of the next refusal;
//! - the limit grows only while it is what holds calls back (calls queued,
//!   or every slot taken in the window), never while the key uses a
//!   fraction of it: the lesson of the rate's validation.

use crate::clock::Nanos;

/// How much latency above the baseline the gradient tolerates before it
/// lowers the limit.
pub(crate) const BUFFER: f64 = 0.2;

/// What an overload leaves of the limit.
pub(crate) const OVERLOAD_FACTOR: f64 = 0.9;

/// From an overload on (from where it left the limit, up), the limit
/// grows by at most this much a window: a backend that
/// refuses beyond N calls in flight answers those refusals fast, so its
/// latency never warns of the next one (TCP's congestion avoidance after a
/// loss).
const CAREFUL_STEP: f64 = 0.25;

/// Calls per window at least: the limit moves once per window, on the
/// window's mean latency.
const MIN_WINDOW: u32 = 10;

/// The calls of a probe: the baseline is the fastest of them.
pub(crate) const PROBE_CALLS: u32 = 10;

/// Calls in flight at most during a probe (or the lower bound, if higher).
pub(crate) const PROBE_LIMIT: u32 = 2;

/// Time between probes (ns): Envoy's filter measures its unloaded latency
/// every minute.
const PROBE_EVERY: Nanos = 30_000_000_000;

/// How much of each window's estimate the limit takes (the rest is its old
/// value): the window's latency lags the limit that caused it, and taking
/// all of it overshoots.
const SMOOTHING: f64 = 0.3;

/// What one key's limit has learned.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct LimitEstimate {
    /// The limit, before rounding down to whole calls (outside a probe).
    pub(crate) limit: f64,
    /// The unloaded latency (ns); 0 before the first probe ends.
    pub(crate) baseline: f64,
    /// When an overload last lowered the limit (0: never).
    pub(crate) decreased_at: Nanos,
    /// The limit when that overload came (0: none since the last probe).
    pub(crate) overloaded_at_limit: f64,
    /// When the last probe ended.
    pub(crate) probed_at: Nanos,
    /// During a probe, its calls still to come (0: not probing).
    pub(crate) probe_left: u32,
    /// During a probe, the fastest of its calls so far (ns).
    pub(crate) probe_best: Nanos,
}

/// The calls of one window, summed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Window {
    /// When it ended.
    pub(crate) end: Nanos,
    pub(crate) calls: u32,
    /// Their latencies, from admission to outcome, summed (ns).
    pub(crate) latency: Nanos,
    /// Whether the limit held calls back during it (some queued, or every
    /// slot taken).
    pub(crate) limiting: bool,
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

    /// The limit during a probe.
    pub(crate) fn probe_limit(self) -> u32 {
        PROBE_LIMIT.max(self.min)
    }
}

impl LimitEstimate {
    /// A fresh key's limit: probing first (its baseline is unknown), then
    /// `initial`.
    pub(crate) fn new(initial: u32) -> Self {
        Self {
            limit: f64::from(initial),
            baseline: 0.0,
            decreased_at: 0,
            overloaded_at_limit: 0.0,
            probed_at: 0,
            probe_left: PROBE_CALLS,
            probe_best: Nanos::MAX,
        }
    }

    /// The limit in whole calls now.
    pub(crate) fn whole(&self, bounds: Bounds) -> u32 {
        if self.probe_left > 0 {
            bounds.probe_limit().min(self.limit as u32)
        } else {
            self.limit as u32
        }
    }

    /// How many calls the current window takes.
    pub(crate) fn window_size(&self) -> u32 {
        MIN_WINDOW.max(self.limit as u32)
    }
}

/// A call of a probe ended `latency` after its admission with `in_flight`
/// calls in flight (itself included): the fastest of the probe's calls made
/// at the probe's concurrency becomes the baseline.
pub(crate) fn probed(
    learned: LimitEstimate,
    at: Nanos,
    latency: Nanos,
    in_flight: u32,
    bounds: Bounds,
) -> LimitEstimate {
    if learned.probe_left == 0 || in_flight > bounds.probe_limit() {
        return learned; // not a probe's call (one still finishing from before)
    }
    let best = learned.probe_best.min(latency.max(1));
    let left = learned.probe_left - 1;
    LimitEstimate {
        probe_left: left,
        probe_best: best,
        baseline: if left == 0 {
            best as f64
        } else {
            learned.baseline
        },
        probed_at: if left == 0 { at } else { learned.probed_at },
        // A new baseline, a new start: what overloaded before may not now.
        overloaded_at_limit: if left == 0 {
            0.0
        } else {
            learned.overloaded_at_limit
        },
        ..learned
    }
}

/// What a window of calls teaches a limit outside a probe.
pub(crate) fn learn(learned: LimitEstimate, window: Window, bounds: Bounds) -> LimitEstimate {
    if window.calls == 0 || learned.baseline == 0.0 {
        return learned;
    }
    let latency = (window.latency / u64::from(window.calls)).max(1) as f64;
    let gradient = ((1.0 + BUFFER) * learned.baseline / latency).clamp(0.5, 2.0);
    // Room to grow (√limit) only while calls are within the buffer: once
    // they wait beyond it, the limit shrinks in proportion, and settles
    // where the latency is the baseline plus the buffer.
    let headroom = if gradient >= 1.0 {
        learned.limit.sqrt()
    } else {
        0.0
    };
    let estimate = learned.limit * gradient + headroom;
    let mut limit = learned.limit * (1.0 - SMOOTHING) + estimate * SMOOTHING;
    if limit > learned.limit && !window.limiting {
        limit = learned.limit;
    }
    let careful = learned.overloaded_at_limit > 0.0
        && learned.limit >= OVERLOAD_FACTOR * learned.overloaded_at_limit;
    if careful {
        limit = limit.min(learned.limit + CAREFUL_STEP);
    }
    let probe = window.end.saturating_sub(learned.probed_at) >= PROBE_EVERY;
    LimitEstimate {
        limit: bounds.clamp(limit),
        probe_left: if probe { PROBE_CALLS } else { 0 },
        probe_best: Nanos::MAX,
        ..learned
    }
}

/// An overload at `at` lowers the limit at once, unless it already fell
/// within the last baseline latency.
pub(crate) fn overloaded(learned: LimitEstimate, at: Nanos, bounds: Bounds) -> LimitEstimate {
    let recently = learned.decreased_at > 0
        && at.saturating_sub(learned.decreased_at) < learned.baseline as Nanos;
    if recently {
        return learned;
    }
    LimitEstimate {
        limit: bounds.clamp(learned.limit * OVERLOAD_FACTOR),
        decreased_at: at.max(1),
        overloaded_at_limit: learned.limit,
        ..learned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const BOUNDS: Bounds = Bounds { min: 1, max: 200 };

    /// A limit whose baseline is `baseline`, past its first probe.
    fn probed_at(limit: u32, baseline: Nanos) -> LimitEstimate {
        let mut learned = LimitEstimate::new(limit);
        for _ in 0..PROBE_CALLS {
            learned = probed(learned, MS, baseline, 1, BOUNDS);
        }
        learned
    }

    fn window(latency: Nanos, limiting: bool) -> Window {
        Window {
            end: 2 * MS,
            calls: 10,
            latency: 10 * latency,
            limiting,
        }
    }

    #[test]
    fn a_fresh_limit_probes_for_its_baseline_first() {
        let learned = LimitEstimate::new(20);
        assert_eq!(learned.whole(BOUNDS), PROBE_LIMIT);
        // A call that ends with more in flight than the probe allows is
        // not one of the probe's.
        let ignored = probed(learned, MS, 50 * MS, 9, BOUNDS);
        assert_eq!(ignored, learned);
        let done = probed_at(20, 10 * MS);
        assert_eq!(done.baseline, (10 * MS) as f64);
        assert_eq!(done.whole(BOUNDS), 20);
    }

    #[test]
    fn the_baseline_is_the_fastest_call_of_its_probe_not_the_last() {
        let mut learned = LimitEstimate::new(20);
        for latency in [30, 12, 25, 18, 40, 22, 35, 15, 28, 33] {
            learned = probed(learned, MS, latency * MS, 1, BOUNDS);
        }
        assert_eq!(learned.probe_left, 0);
        assert_eq!(learned.baseline, (12 * MS) as f64);
    }

    #[test]
    fn the_limit_rises_while_latency_is_low_and_calls_queue() {
        let mut learned = probed_at(10, 10 * MS);
        for _ in 0..20 {
            learned = learn(learned, window(10 * MS, true), BOUNDS);
        }
        assert!(learned.limit > 40.0, "{learned:?}");
    }

    #[test]
    fn the_limit_falls_when_latency_rises_past_the_buffer() {
        let settled = probed_at(50, 10 * MS);
        // The backend queues: calls take three times the baseline.
        let loaded = learn(settled, window(30 * MS, true), BOUNDS);
        assert_eq!(
            loaded.limit,
            50.0 * (1.0 - SMOOTHING) + 50.0 * 0.5 * SMOOTHING
        );
        assert!(loaded.limit < settled.limit);
    }

    #[test]
    fn against_a_queueing_backend_the_limit_settles_near_its_workers() {
        // Ten workers of 10 ms: with more than ten in flight, calls wait.
        let mut learned = probed_at(1, 10 * MS);
        for _ in 0..90 {
            let limit = learned.limit.floor();
            let latency = (10.0 * MS as f64 * (limit / 10.0).max(1.0)) as Nanos;
            learned = learn(learned, window(latency, true), BOUNDS);
        }
        assert!((10.0..=14.0).contains(&learned.limit), "{learned:?}");
    }

    #[test]
    fn an_overload_lowers_the_limit_at_once_and_once_per_baseline() {
        let settled = probed_at(50, 10 * MS);
        let at = 200 * MS;
        let once = overloaded(settled, at, BOUNDS);
        assert_eq!(once.limit, 50.0 * OVERLOAD_FACTOR);
        // The calls in flight with it fail too, within one latency: no more.
        assert_eq!(overloaded(once, at + 5 * MS, BOUNDS).limit, once.limit);
        assert_eq!(
            overloaded(once, at + 11 * MS, BOUNDS).limit,
            once.limit * OVERLOAD_FACTOR
        );
    }

    #[test]
    fn after_an_overload_growth_is_careful() {
        let settled = probed_at(40, 10 * MS);
        let lowered = overloaded(settled, 100 * MS, BOUNDS);
        assert_eq!(lowered.limit, 40.0 * OVERLOAD_FACTOR);
        // Fast calls: a quarter of a call a window, not the gradient's pace.
        let next = learn(lowered, window(10 * MS, true), BOUNDS);
        assert_eq!(next.limit, lowered.limit + CAREFUL_STEP);
        // A probe starts over.
        let mut probing = LimitEstimate {
            probe_left: PROBE_CALLS,
            ..next
        };
        for _ in 0..PROBE_CALLS {
            probing = probed(probing, 50 * MS, 10 * MS, 1, BOUNDS);
        }
        let free = learn(probing, window(10 * MS, true), BOUNDS);
        assert!(free.limit > next.limit + 1.0, "{free:?}");
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let bounds = Bounds { min: 4, max: 16 };
        let mut learned = probed_at(8, MS);
        for _ in 0..100 {
            learned = learn(learned, window(MS, true), bounds);
            assert!((4.0..=16.0).contains(&learned.limit));
        }
        assert_eq!(learned.limit, 16.0);
        for i in 0..100 {
            learned = overloaded(learned, (1_000 + i * 10) * MS, bounds);
            assert!((4.0..=16.0).contains(&learned.limit));
        }
        assert_eq!(learned.limit, 4.0);
    }

    #[test]
    fn an_unused_limit_does_not_grow() {
        let mut learned = probed_at(20, 10 * MS);
        // Fast calls, but the limit held nothing back: they say nothing
        // about twenty-one.
        for _ in 0..50 {
            learned = learn(learned, window(MS, false), BOUNDS);
        }
        assert!(learned.limit <= 20.0, "{learned:?}");
    }

    #[test]
    fn a_probe_comes_back_every_thirty_seconds_and_rebases() {
        let mut learned = probed_at(20, 10 * MS);
        learned = learn(learned, window(10 * MS, false), BOUNDS);
        assert_eq!(learned.probe_left, 0);
        let later = Window {
            end: MS + PROBE_EVERY,
            ..window(10 * MS, false)
        };
        learned = learn(learned, later, BOUNDS);
        assert_eq!(learned.probe_left, PROBE_CALLS);
        assert_eq!(learned.whole(BOUNDS), PROBE_LIMIT);
        // The backend is slower for good now: the probe finds it.
        for _ in 0..PROBE_CALLS {
            learned = probed(learned, 40 * MS, 25 * MS, 2, BOUNDS);
        }
        assert_eq!(learned.baseline, (25 * MS) as f64);
        assert_eq!(learned.whole(BOUNDS), 20);
    }
}

//! A concurrency limit learned from latency, as pure maths: the state of one
//! key's limit and what a window of calls does to it. No clock, no atomics:
//! time comes in with the samples.
//!
//! The controller compares like with like, in the style of Netflix's
//! Vegas limit (and of Envoy's adaptive concurrency filter, whose probes
//! it shares):
//!
//! - the **baseline** is the mean latency of calls made with almost
//!   nothing in flight: the limit is held low for a few calls now
//!   and then (a probe, jittered; see [`LimitTuning`]). It is the same statistic as a window's (a mean of
//!   calls), so a backend whose latency varies (uniform, exponential, a
//!   few fast cache hits) shows a window's latency near its baseline, not
//!   always above it as against the fastest call. A baseline taken under
//!   load cannot tell a slow backend from a queueing one;
//! - every window of calls estimates how many of the calls in flight wait
//!   at the backend: `queued = limit × (1 − baseline / latency)`. Below
//!   [`ALPHA`] steps the limit grows a step, above [`BETA`] steps it falls
//!   one, between it holds; a step is `log10(limit)`, at least 1. A
//!   backend whose calls queue (more in flight than its workers) settles a
//!   few calls above its workers, where about `BETA` steps wait; the
//!   thresholds grow with the logarithm of the limit, so a large limit
//!   tolerates more waiting calls but a smaller share of its calls
//!   waiting. Latency that only varies, with nothing waiting, moves the
//!   estimate around zero, and the limit grows until the backend refuses;
//! - a fresh key's limit starts at its lower bound and doubles each window
//!   (TCP's slow start) until calls first queue or the backend first
//!   refuses one: a slow backend would otherwise take a window of calls at
//!   each step of the climb;
//! - an overload (a 429, a 503, a timeout) takes [`OVERLOAD_FACTOR`] off
//!   the limit at once, at most once per baseline latency (the calls in
//!   flight when it fell report the same overload); from then on it grows
//!   by at most [`CAREFUL_STEP`] a window, and not back to the whole limit
//!   that was refused (until the next probe): a backend that refuses
//!   beyond N in flight answers fast, and its latency never warns of the
//!   next refusal. An overload that ends the slow start halves the limit,
//!   back to where it last doubled from;
//! - the limit grows only while it is what holds calls back (calls queued,
//!   or every slot taken in the window), never while the key uses a
//!   fraction of it: the lesson of the rate's validation.

use crate::clock::Nanos;

/// Below this many calls queued at the backend (times the step,
/// `log10(limit)`, at least 1), the limit grows by a step.
const ALPHA: f64 = 2.0;

/// Above this many calls queued at the backend (times the step), the limit
/// falls by a step; between the two it holds.
const BETA: f64 = 4.0;

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

/// How a key's limit probes for its unloaded latency, and the bounds it
/// stays within: set on [`BulkheadConfig::adaptive`](crate::BulkheadConfig::adaptive),
/// validated there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LimitTuning {
    pub(crate) min: u32,
    pub(crate) max: u32,
    /// Calls in flight at most during a probe (or `min`, if higher).
    pub(crate) probe_limit: u32,
    /// The calls of a probe: the baseline is their mean latency.
    pub(crate) probe_calls: u32,
    /// Time between the end of a probe and the next (ns), before jitter.
    pub(crate) probe_every: Nanos,
    /// The next probe comes up to this much later (ns), drawn from the
    /// end of the last: keys (and the processes of a fleet) that started
    /// together do not all hold their limits low at once.
    pub(crate) probe_jitter: Nanos,
}

impl LimitTuning {
    fn clamp(self, limit: f64) -> f64 {
        limit.clamp(f64::from(self.min), f64::from(self.max))
    }

    /// The limit during a probe.
    pub(crate) fn probe_limit(self) -> u32 {
        self.probe_limit.max(self.min)
    }

    /// Whether a probe is due at `now`, the last one having ended at
    /// `probed_at`: `probe_every` later, plus a share of `probe_jitter`
    /// that `probed_at` draws (the same draw for the same end, so virtual
    /// time stays deterministic).
    fn probe_due(self, probed_at: Nanos, now: Nanos) -> bool {
        let share = spread(probed_at) as f64 / (u64::MAX as f64 + 1.0);
        let wait = self
            .probe_every
            .saturating_add((self.probe_jitter as f64 * share) as Nanos);
        now.saturating_sub(probed_at) >= wait
    }
}

/// splitmix64's finaliser: `x` scattered evenly over `u64`.
fn spread(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

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
    /// During a probe, its calls' latencies so far, summed (ns).
    pub(crate) probe_sum: Nanos,
    /// Whether the limit is still in its slow start: it doubles each
    /// window until calls first queue at the backend or it refuses one.
    pub(crate) slow_start: bool,
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

impl LimitEstimate {
    /// A fresh key's limit: probing first (its baseline is unknown), then
    /// `initial`.
    pub(crate) fn new(initial: u32, tuning: LimitTuning) -> Self {
        Self {
            limit: f64::from(initial),
            baseline: 0.0,
            decreased_at: 0,
            overloaded_at_limit: 0.0,
            probed_at: 0,
            probe_left: tuning.probe_calls,
            probe_sum: 0,
            slow_start: true,
        }
    }

    /// The limit in whole calls now.
    pub(crate) fn whole(&self, tuning: LimitTuning) -> u32 {
        if self.probe_left > 0 {
            tuning.probe_limit().min(self.limit as u32)
        } else {
            self.limit as u32
        }
    }

    /// How many calls the current window takes: in the slow start, one
    /// limit's worth (it doubles on each: a window of ten calls at a low
    /// limit takes ten latencies on a slow backend), else at least
    /// [`MIN_WINDOW`].
    pub(crate) fn window_size(&self) -> u32 {
        if self.slow_start {
            (self.limit as u32).max(1)
        } else {
            MIN_WINDOW.max(self.limit as u32)
        }
    }
}

/// A call of a probe ended `latency` after its admission with `in_flight`
/// calls in flight (itself included): once the probe has all its calls
/// made at its concurrency, their mean latency becomes the baseline.
pub(crate) fn probed(
    learned: LimitEstimate,
    at: Nanos,
    latency: Nanos,
    in_flight: u32,
    tuning: LimitTuning,
) -> LimitEstimate {
    if learned.probe_left == 0 || in_flight > tuning.probe_limit() {
        return learned; // not a probe's call (one still finishing from before)
    }
    let sum = learned.probe_sum.saturating_add(latency.max(1));
    let left = learned.probe_left - 1;
    LimitEstimate {
        probe_left: left,
        probe_sum: sum,
        baseline: if left == 0 {
            sum as f64 / f64::from(tuning.probe_calls)
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
pub(crate) fn learn(learned: LimitEstimate, window: Window, tuning: LimitTuning) -> LimitEstimate {
    if window.calls == 0 || learned.baseline == 0.0 {
        return learned;
    }
    let latency = (window.latency / u64::from(window.calls)).max(1) as f64;
    let queued = queued_at_backend(learned.limit, learned.baseline, latency);
    let step = learned.limit.log10().max(1.0);
    let congested = queued >= ALPHA * step;
    let slow_start = learned.slow_start && !congested;
    let mut limit = if slow_start {
        learned.limit * 2.0
    } else if !congested {
        learned.limit + step
    } else if queued > BETA * step {
        learned.limit - step
    } else {
        learned.limit
    };
    if limit > learned.limit && !window.limiting {
        limit = learned.limit;
    }
    let careful = learned.overloaded_at_limit > 0.0
        && learned.limit >= OVERLOAD_FACTOR * learned.overloaded_at_limit;
    if careful {
        // Careful, and never back to the whole limit that was refused.
        let refused = learned.overloaded_at_limit.floor();
        limit = limit
            .min(learned.limit + CAREFUL_STEP)
            .min((refused - CAREFUL_STEP).max(learned.limit));
    }
    let probe = tuning.probe_due(learned.probed_at, window.end);
    LimitEstimate {
        limit: tuning.clamp(limit),
        probe_left: if probe { tuning.probe_calls } else { 0 },
        probe_sum: 0,
        slow_start,
        ..learned
    }
}

/// How many of `limit` calls in flight wait at the backend rather than
/// being served, if calls served without waiting take `baseline` and they
/// take `latency` now (Vegas: the limit times the share of the latency
/// that is waiting).
fn queued_at_backend(limit: f64, baseline: f64, latency: f64) -> f64 {
    limit * (1.0 - baseline / latency).max(0.0)
}

/// An overload at `at` lowers the limit at once, unless it already fell
/// within the last baseline latency.
pub(crate) fn overloaded(learned: LimitEstimate, at: Nanos, tuning: LimitTuning) -> LimitEstimate {
    let recently = learned.decreased_at > 0
        && at.saturating_sub(learned.decreased_at) < learned.baseline as Nanos;
    if recently {
        return learned;
    }
    // In its slow start the limit has just doubled: the half it doubled
    // from had no refusal.
    let factor = if learned.slow_start {
        0.5
    } else {
        OVERLOAD_FACTOR
    };
    LimitEstimate {
        limit: tuning.clamp(learned.limit * factor),
        decreased_at: at.max(1),
        overloaded_at_limit: learned.limit,
        slow_start: false,
        ..learned
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Nanos = 1_000_000;
    const PROBE_CALLS: u32 = 20;
    const PROBE_LIMIT: u32 = 2;
    const PROBE_EVERY: Nanos = 30_000 * MS;
    const TUNING: LimitTuning = LimitTuning {
        min: 1,
        max: 200,
        probe_limit: PROBE_LIMIT,
        probe_calls: PROBE_CALLS,
        probe_every: PROBE_EVERY,
        probe_jitter: 0,
    };

    /// A settled limit (its slow start over) whose baseline is
    /// `baseline`, past its first probe.
    fn probed_at(limit: u32, baseline: Nanos) -> LimitEstimate {
        let mut learned = LimitEstimate::new(limit, TUNING);
        for _ in 0..PROBE_CALLS {
            learned = probed(learned, MS, baseline, 1, TUNING);
        }
        LimitEstimate {
            slow_start: false,
            ..learned
        }
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
        let learned = LimitEstimate::new(20, TUNING);
        assert_eq!(learned.whole(TUNING), PROBE_LIMIT);
        // A call that ends with more in flight than the probe allows is
        // not one of the probe's.
        let ignored = probed(learned, MS, 50 * MS, 9, TUNING);
        assert_eq!(ignored, learned);
        let done = probed_at(20, 10 * MS);
        assert_eq!(done.baseline, (10 * MS) as f64);
        assert_eq!(done.whole(TUNING), 20);
    }

    #[test]
    fn the_baseline_is_the_mean_of_its_probe_like_the_windows_it_is_compared_with() {
        let mut learned = LimitEstimate::new(20, TUNING);
        // Latencies that vary (a quarter fast, the rest slower), as a real
        // backend's do: the baseline is their mean, not the fastest, so a
        // window of the same calls under no load shows nothing queued.
        for i in 0..PROBE_CALLS {
            let latency = if i % 4 == 0 { 2 } else { 14 };
            learned = probed(learned, MS, latency * MS, 1, TUNING);
        }
        assert_eq!(learned.probe_left, 0);
        assert_eq!(learned.baseline, (11 * MS) as f64);
        assert_eq!(
            queued_at_backend(20.0, learned.baseline, learned.baseline),
            0.0
        );
    }

    #[test]
    fn the_queue_at_the_backend_is_the_share_of_latency_spent_waiting() {
        // Twice the unloaded latency: half of the calls in flight wait.
        assert_eq!(queued_at_backend(16.0, 10.0, 20.0), 8.0);
        // Faster than the baseline: nothing waits (never a negative queue).
        assert_eq!(queued_at_backend(16.0, 10.0, 8.0), 0.0);
    }

    #[test]
    fn the_limit_rises_while_nothing_queues_and_calls_are_held_back() {
        let mut learned = probed_at(10, 10 * MS);
        for _ in 0..20 {
            learned = learn(learned, window(10 * MS, true), TUNING);
        }
        // A step (log10 of the limit, at least 1) a window.
        assert!(learned.limit > 28.0, "{learned:?}");
    }

    #[test]
    fn the_limit_falls_a_step_when_more_than_beta_steps_queue_and_holds_between() {
        let settled = probed_at(50, 10 * MS);
        let step = 50f64.log10();
        // Three times the baseline: two thirds of 50 wait, past BETA steps.
        let loaded = learn(settled, window(30 * MS, true), TUNING);
        assert_eq!(loaded.limit, 50.0 - step);
        // A queue between ALPHA and BETA steps: the limit holds.
        let between = 10.0 * MS as f64 / (1.0 - 3.0 * step / 50.0);
        let held = learn(settled, window(between as Nanos, true), TUNING);
        assert_eq!(held.limit, 50.0);
    }

    #[test]
    fn against_a_queueing_backend_the_limit_settles_a_few_calls_above_its_workers() {
        // Ten workers of 10 ms: with more than ten in flight, calls wait.
        let mut learned = probed_at(1, 10 * MS);
        for _ in 0..90 {
            let limit = learned.limit.floor();
            let latency = (10.0 * MS as f64 * (limit / 10.0).max(1.0)) as Nanos;
            learned = learn(learned, window(latency, true), TUNING);
        }
        assert!((11.0..=15.0).contains(&learned.limit), "{learned:?}");
    }

    #[test]
    fn a_fresh_limit_doubles_each_window_until_calls_queue_or_are_refused() {
        let mut learned = LimitEstimate::new(1, TUNING);
        for _ in 0..PROBE_CALLS {
            learned = probed(learned, MS, 10 * MS, 1, TUNING);
        }
        for expected in [2.0, 4.0, 8.0, 16.0] {
            assert_eq!(learned.window_size(), learned.limit as u32);
            learned = learn(learned, window(10 * MS, true), TUNING);
            assert_eq!(learned.limit, expected);
        }
        // Calls queue (twice the baseline: half of 16 wait): the slow start
        // ends, and the limit steps as Vegas does from then on.
        let queued = learn(learned, window(20 * MS, true), TUNING);
        assert!(!queued.slow_start);
        assert_eq!(queued.limit, 16.0 - 16f64.log10());
        // Or a refusal ends it: back to the half it doubled from.
        let refused = overloaded(learned, 500 * MS, TUNING);
        assert!(!refused.slow_start);
        assert_eq!(refused.limit, 8.0);
    }

    #[test]
    fn after_an_overload_the_limit_stays_below_the_whole_limit_refused() {
        let settled = probed_at(5, 10 * MS);
        let lowered = overloaded(settled, 100 * MS, TUNING);
        let mut learned = lowered;
        for _ in 0..20 {
            learned = learn(learned, window(10 * MS, true), TUNING);
        }
        assert!(learned.limit < 5.0 && learned.limit >= 4.5, "{learned:?}");
        assert_eq!(learned.whole(TUNING), 4);
    }

    #[test]
    fn an_overload_lowers_the_limit_at_once_and_once_per_baseline() {
        let settled = probed_at(50, 10 * MS);
        let at = 200 * MS;
        let once = overloaded(settled, at, TUNING);
        assert_eq!(once.limit, 50.0 * OVERLOAD_FACTOR);
        // The calls in flight with it fail too, within one latency: no more.
        assert_eq!(overloaded(once, at + 5 * MS, TUNING).limit, once.limit);
        assert_eq!(
            overloaded(once, at + 11 * MS, TUNING).limit,
            once.limit * OVERLOAD_FACTOR
        );
    }

    #[test]
    fn after_an_overload_growth_is_careful() {
        let settled = probed_at(40, 10 * MS);
        let lowered = overloaded(settled, 100 * MS, TUNING);
        assert_eq!(lowered.limit, 40.0 * OVERLOAD_FACTOR);
        // Fast calls: a quarter of a call a window, not the gradient's pace.
        let next = learn(lowered, window(10 * MS, true), TUNING);
        assert_eq!(next.limit, lowered.limit + CAREFUL_STEP);
        // A probe starts over.
        let mut probing = LimitEstimate {
            probe_left: PROBE_CALLS,
            ..next
        };
        for _ in 0..PROBE_CALLS {
            probing = probed(probing, 50 * MS, 10 * MS, 1, TUNING);
        }
        let free = learn(probing, window(10 * MS, true), TUNING);
        assert!(free.limit > next.limit + 1.0, "{free:?}");
    }

    #[test]
    fn the_limit_stays_within_its_bounds() {
        let bounds = LimitTuning {
            min: 4,
            max: 16,
            ..TUNING
        };
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
            learned = learn(learned, window(MS, false), TUNING);
        }
        assert!(learned.limit <= 20.0, "{learned:?}");
    }

    #[test]
    fn a_probe_comes_back_every_thirty_seconds_and_rebases() {
        let mut learned = probed_at(20, 10 * MS);
        learned = learn(learned, window(10 * MS, false), TUNING);
        assert_eq!(learned.probe_left, 0);
        let later = Window {
            end: MS + PROBE_EVERY,
            ..window(10 * MS, false)
        };
        learned = learn(learned, later, TUNING);
        assert_eq!(learned.probe_left, PROBE_CALLS);
        assert_eq!(learned.whole(TUNING), PROBE_LIMIT);
        // The backend is slower for good now: the probe finds it.
        for _ in 0..PROBE_CALLS {
            learned = probed(learned, 40 * MS, 25 * MS, 2, TUNING);
        }
        assert_eq!(learned.baseline, (25 * MS) as f64);
        assert_eq!(learned.whole(TUNING), 20);
    }

    #[test]
    fn probes_are_jittered_so_keys_started_together_do_not_probe_together() {
        let jittered = LimitTuning {
            probe_jitter: 10_000 * MS,
            ..TUNING
        };
        // When each key's next probe falls due, for keys whose last probes
        // ended a millisecond apart.
        let due: Vec<Nanos> = (1..=200)
            .map(|end| {
                let end = end * MS;
                let wait = (0..=20)
                    .map(|tenth| PROBE_EVERY + tenth * 500 * MS)
                    .find(|&wait| jittered.probe_due(end, end + wait))
                    .expect("due within the interval and its jitter");
                assert!(!jittered.probe_due(end, end + PROBE_EVERY - 1));
                wait
            })
            .collect();
        // Spread over the whole jitter, not bunched at either end.
        let early = due
            .iter()
            .filter(|&&wait| wait < PROBE_EVERY + 5_000 * MS)
            .count();
        assert!(
            (60..=140).contains(&early),
            "{early} of 200 in the first half"
        );
        // Without jitter, every key is due at once.
        assert!(TUNING.probe_due(MS, MS + PROBE_EVERY));
    }

    #[test]
    fn a_probe_takes_as_many_calls_and_as_few_in_flight_as_tuned() {
        let tuning = LimitTuning {
            probe_limit: 3,
            probe_calls: 5,
            ..TUNING
        };
        let mut learned = LimitEstimate::new(20, tuning);
        assert_eq!(learned.whole(tuning), 3);
        for latency in [10, 20, 30, 40] {
            learned = probed(learned, MS, latency * MS, 3, tuning);
            assert_eq!(learned.baseline, 0.0);
        }
        learned = probed(learned, MS, 50 * MS, 3, tuning);
        assert_eq!(learned.baseline, (30 * MS) as f64);
        assert_eq!(learned.whole(tuning), 20);
        // The lower bound wins over a lower probe limit.
        let high_floor = LimitTuning { min: 6, ..tuning };
        assert_eq!(LimitEstimate::new(20, high_floor).whole(high_floor), 6);
    }
}

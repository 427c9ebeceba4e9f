//! What a user sets for the throttle, and its validation.

use std::time::Duration;

use crate::clock::{Nanos, nanos};
use crate::error::Problems;
use crate::throttle::window::SLOTS;

/// The longest window: a day. Outcomes older than that say little about a
/// backend now.
const MAX_WINDOW: Duration = Duration::from_secs(24 * 60 * 60);

/// The adaptive throttle of every key: rejects calls locally, by priority,
/// when the key's backend keeps failing.
///
/// Over the last `window`, per priority `p`, it counts the calls attempted
/// (`requests`) and the calls the backend accepted (`accepts`). The backend
/// accepts calls whatever their priority, so the accepts of every priority
/// are one budget, taken by the priorities in order; a new call of `p` is
/// rejected with probability
///
/// ```text
/// allowed_p = max(ratio * sum of accepts - sum over i < p of requests[i], 0)
/// seen_p    = requests[p] + sum over i < p of max(requests[i] - allowed_i, 0)
/// P(reject) = clamp((seen_p - allowed_p) / (seen_p + min_rate * window_secs), 0, 1)
/// ```
///
/// So a priority whose demand, with the demand above it, fits in the budget
/// is not shed: the priorities below it carry the shedding, the least
/// important first, and none is shed less than one above it. With one
/// priority it is the SRE rule. While the backend accepts more than
/// `1 / ratio` of the calls, the probability is 0: the throttle adds no
/// latency and no queueing. Calls it rejects count as requests too (the SRE
/// book's choice): a key that keeps failing is left with about `min_rate`
/// calls per second reaching its backend, enough to notice recovery. A call
/// that went through counts once its outcome is reported (a success or a
/// neutral outcome as an accept, a capacity failure as a request only), not
/// while it is in flight.
///
/// # Recovery
///
/// An outcome older than `window` no longer counts. Once the backend
/// accepts again, the budget grows with what gets through, about five-fold
/// a window (with `ratio` 2), from what `min_rate` lets through while
/// shedding: a key with a few calls a second per priority is back within
/// two windows at every priority, one with a hundred within about three,
/// the lower priorities a fraction of a window after the higher. A shorter
/// window recovers faster and forgets sooner.
///
/// Defaults: `ratio` 2, `min_rate` 1 per second, `window` 60 s, no minimum
/// sample, no cap on the probability.
///
/// # Example
///
/// ```
/// use portcullis::{ThrottleConfig, ThrottleManager};
/// use std::time::Duration;
///
/// let manager = ThrottleManager::<String>::builder()
///     .throttle(ThrottleConfig::new().ratio(2.0).min_rate(1.0).window(Duration::from_secs(60)))
///     .build()?;
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ThrottleConfig {
    ratio: f64,
    min_rate: f64,
    window: Duration,
    min_requests: u64,
    max_rejection: f64,
}

impl Default for ThrottleConfig {
    fn default() -> Self {
        Self::new()
    }
}

impl ThrottleConfig {
    /// The defaults: ratio 2, min_rate 1/s, window 60 s.
    ///
    /// ```
    /// # use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    /// # fn after(config: ThrottleConfig, failures: u32, successes: u32) -> f64 {
    /// #     let manager = ThrottleManager::<String>::builder().throttle(config).build().unwrap();
    /// #     (0..failures).for_each(|_| { manager.decrement("db"); });
    /// #     (0..successes).for_each(|_| { manager.increment("db"); });
    /// #     manager.key("db").rejection_probability(Priority::HIGH).unwrap()
    /// # }
    /// // 100 failures: (100 - 2 * 0) / (100 + 1/s * 60 s)
    /// assert_eq!(after(ThrottleConfig::new(), 100, 0), 0.625);
    /// ```
    pub fn new() -> Self {
        Self {
            ratio: 2.0,
            min_rate: 1.0,
            window: Duration::from_secs(60),
            min_requests: 0,
            max_rejection: 1.0,
        }
    }

    /// `K`, the SRE book's multiplier: shedding starts once requests exceed
    /// `ratio` times accepts. At least 1; lower values shed more eagerly
    /// (1 sheds as soon as anything fails), higher values let more load
    /// through to a struggling backend.
    ///
    /// ```
    /// # use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    /// # fn after(config: ThrottleConfig, failures: u32, successes: u32) -> f64 {
    /// #     let manager = ThrottleManager::<String>::builder().throttle(config).build().unwrap();
    /// #     (0..failures).for_each(|_| { manager.decrement("db"); });
    /// #     (0..successes).for_each(|_| { manager.increment("db"); });
    /// #     manager.key("db").rejection_probability(Priority::HIGH).unwrap()
    /// # }
    /// // 100 requests, 40 accepted: (100 - 1.5 * 40) / (100 + 60)
    /// assert_eq!(after(ThrottleConfig::new().ratio(1.5), 60, 40), 0.25);
    /// assert_eq!(after(ThrottleConfig::new(), 60, 40), 0.125); // ratio 2
    /// ```
    pub fn ratio(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// Calls per second a failing key still lets through, so that it can
    /// see its backend recover. Above 0: at 0 a failing key would lock itself
    /// out for good, since its window would never empty.
    ///
    /// ```
    /// # use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    /// # fn after(config: ThrottleConfig, failures: u32, successes: u32) -> f64 {
    /// #     let manager = ThrottleManager::<String>::builder().throttle(config).build().unwrap();
    /// #     (0..failures).for_each(|_| { manager.decrement("db"); });
    /// #     (0..successes).for_each(|_| { manager.increment("db"); });
    /// #     manager.key("db").rejection_probability(Priority::HIGH).unwrap()
    /// # }
    /// // 100 failures: 100 / (100 + 0.5/s * 60 s)
    /// assert_eq!(after(ThrottleConfig::new().min_rate(0.5), 100, 0), 100.0 / 130.0);
    /// ```
    pub fn min_rate(mut self, per_second: f64) -> Self {
        self.min_rate = per_second;
        self
    }

    /// How far back outcomes count: an outcome older than `window` no
    /// longer counts. The throttle keeps outcomes in ten buckets a tenth of
    /// the window long, aligned to multiples of that since the clock's
    /// origin, and reads the ten whole: an outcome counts in full for at
    /// least nine tenths of a window, and not once a window has passed.
    /// From 10 ms to a day.
    ///
    /// ```
    /// # use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    /// # fn after(config: ThrottleConfig, failures: u32, successes: u32) -> f64 {
    /// #     let manager = ThrottleManager::<String>::builder().throttle(config).build().unwrap();
    /// #     (0..failures).for_each(|_| { manager.decrement("db"); });
    /// #     (0..successes).for_each(|_| { manager.increment("db"); });
    /// #     manager.key("db").rejection_probability(Priority::HIGH).unwrap()
    /// # }
    /// use std::time::Duration;
    /// // 100 failures: 100 / (100 + 1/s * 10 s)
    /// let ten_seconds = ThrottleConfig::new().window(Duration::from_secs(10));
    /// assert_eq!(after(ten_seconds, 100, 0), 100.0 / 110.0);
    /// ```
    pub fn window(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }

    /// No shedding for a priority until its `requests_p` in the window
    /// reach `requests` (default 0): a few early failures on a quiet key
    /// then shed nothing.
    ///
    /// ```
    /// # use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    /// # fn after(config: ThrottleConfig, failures: u32, successes: u32) -> f64 {
    /// #     let manager = ThrottleManager::<String>::builder().throttle(config).build().unwrap();
    /// #     (0..failures).for_each(|_| { manager.decrement("db"); });
    /// #     (0..successes).for_each(|_| { manager.increment("db"); });
    /// #     manager.key("db").rejection_probability(Priority::HIGH).unwrap()
    /// # }
    /// assert_eq!(after(ThrottleConfig::new().min_requests(20), 19, 0), 0.0);
    /// assert!(after(ThrottleConfig::new().min_requests(20), 20, 0) > 0.0);
    /// ```
    pub fn min_requests(mut self, requests: u64) -> Self {
        self.min_requests = requests;
        self
    }

    /// The rejection probability never exceeds `probability` (default 1),
    /// so some calls always reach the backend, as in Envoy's admission
    /// control. In `(0, 1]`.
    ///
    /// ```
    /// # use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    /// # fn after(config: ThrottleConfig, failures: u32, successes: u32) -> f64 {
    /// #     let manager = ThrottleManager::<String>::builder().throttle(config).build().unwrap();
    /// #     (0..failures).for_each(|_| { manager.decrement("db"); });
    /// #     (0..successes).for_each(|_| { manager.increment("db"); });
    /// #     manager.key("db").rejection_probability(Priority::HIGH).unwrap()
    /// # }
    /// // 1,000 failures would give 1000 / 1060
    /// assert_eq!(after(ThrottleConfig::new().max_rejection(0.9), 1_000, 0), 0.9);
    /// ```
    pub fn max_rejection(mut self, probability: f64) -> Self {
        self.max_rejection = probability;
        self
    }

    /// Adds every problem to `problems`; returns the settings when there are none.
    pub(crate) fn check(&self, problems: &mut Problems<'_>) -> Option<ThrottleSettings> {
        let before = problems.len();
        if !(self.ratio.is_finite() && self.ratio >= 1.0) {
            problems.add(
                "ratio",
                format!("must be a finite number of at least 1, got {}", self.ratio),
            );
        }
        if !self.min_rate.is_finite() {
            problems.add(
                "min_rate",
                format!("must be a finite number, got {}", self.min_rate),
            );
        } else if self.min_rate <= 0.0 {
            problems.add(
                "min_rate",
                format!(
                    "must be above 0 (at 0 a failing key never recovers), got {}",
                    self.min_rate
                ),
            );
        }
        if self.window < Duration::from_millis(10) || self.window > MAX_WINDOW {
            problems.add(
                "window",
                format!("must be from 10ms to 1 day, got {:?}", self.window),
            );
        }
        if !(self.max_rejection > 0.0 && self.max_rejection <= 1.0) {
            problems.add(
                "max_rejection",
                format!("must be above 0 and at most 1, got {}", self.max_rejection),
            );
        }
        (problems.len() == before).then(|| ThrottleSettings {
            ratio: self.ratio,
            floor: self.min_rate * self.window.as_secs_f64(),
            bucket: nanos(self.window) / SLOTS as u64,
            min_requests: self.min_requests as f64,
            max_rejection: self.max_rejection,
        })
    }
}

/// Validated throttle settings, in the units the maths uses.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ThrottleSettings {
    pub(crate) ratio: f64,
    /// `min_rate * window_secs`: the formula's `m`.
    pub(crate) floor: f64,
    /// Length of one of the window's buckets, in nanoseconds: a tenth of
    /// the window (see [`ThrottleConfig::window`]).
    pub(crate) bucket: Nanos,
    pub(crate) min_requests: f64,
    pub(crate) max_rejection: f64,
}

#[cfg(test)]
impl ThrottleSettings {
    pub(crate) fn for_test(config: ThrottleConfig) -> Self {
        let mut found = Vec::new();
        config
            .check(&mut Problems::new("throttle", &mut found))
            .expect("valid test config")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(config: ThrottleConfig) -> Vec<String> {
        let mut found = Vec::new();
        assert!(
            config
                .check(&mut Problems::new("throttle", &mut found))
                .is_none()
        );
        found.iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn bad_values_are_named() {
        assert_eq!(
            problems(ThrottleConfig::new().min_rate(0.0)),
            ["throttle.min_rate: must be above 0 (at 0 a failing key never recovers), got 0"]
        );
        assert_eq!(
            problems(ThrottleConfig::new().ratio(0.5).max_rejection(0.0)),
            [
                "throttle.ratio: must be a finite number of at least 1, got 0.5",
                "throttle.max_rejection: must be above 0 and at most 1, got 0"
            ]
        );
        assert_eq!(
            problems(
                ThrottleConfig::new()
                    .window(Duration::from_millis(5))
                    .min_rate(f64::NAN)
            ),
            [
                "throttle.min_rate: must be a finite number, got NaN",
                "throttle.window: must be from 10ms to 1 day, got 5ms"
            ]
        );
    }

    /// The window's bounds are inclusive: 10 ms and a day are windows, a
    /// nanosecond less or more is not.
    #[test]
    fn the_window_is_from_10ms_to_a_day_inclusive() {
        let ns = Duration::from_nanos(1);
        let day = Duration::from_secs(86_400);
        for fine in [Duration::from_millis(10), day] {
            let mut found = Vec::new();
            let config = ThrottleConfig::new().window(fine);
            assert!(
                config
                    .check(&mut Problems::new("throttle", &mut found))
                    .is_some(),
                "{fine:?}"
            );
        }
        assert_eq!(
            problems(ThrottleConfig::new().window(Duration::from_millis(10) - ns)),
            ["throttle.window: must be from 10ms to 1 day, got 9.999999ms"]
        );
        assert_eq!(
            problems(ThrottleConfig::new().window(day + ns)),
            ["throttle.window: must be from 10ms to 1 day, got 86400.000000001s"]
        );
    }

    #[test]
    fn settings_are_in_the_units_of_the_maths() {
        let s = ThrottleSettings::for_test(ThrottleConfig::new());
        assert_eq!(s.floor, 60.0);
        assert_eq!(s.bucket, 6_000_000_000);
    }
}

//! A rate config checked: every field named when it is wrong, and the
//! validated [`RateSettings`] a key's rate cell obeys.

use std::time::Duration;

use super::{Decrease, MAX_RATE, RateConfig, slowest_rate};
use crate::clock::{Nanos, nanos};
use crate::error::{ConfigError, Problems};

/// # Validation
impl RateConfig {
    /// Checks every field as [`build`](crate::builder::ThrottleManagerBuilder::build)
    /// will: for a config read at start-up, refused before anything is
    /// built.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid field, named `rate.<field>`.
    ///
    /// ```
    /// use portcullis::RateConfig;
    ///
    /// assert!(RateConfig::adaptive(10.0).validate().is_ok());
    /// let err = RateConfig::adaptive(f64::NAN).validate().unwrap_err();
    /// assert!(err.to_string().contains("rate.starting_rate: must be a finite number, got NaN"));
    /// ```
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validated().map(drop)
    }

    /// The validated settings, or every problem, named `rate.<field>`.
    pub(crate) fn validated(&self) -> Result<RateSettings, ConfigError> {
        let mut found = Vec::new();
        let settings = self.check(&mut Problems::new("rate", &mut found));
        match settings {
            Some(settings) if found.is_empty() => Ok(settings),
            _ => Err(ConfigError::new(found)),
        }
    }

    /// Adds every problem to `problems`; returns the settings when there are none.
    pub(crate) fn check(&self, problems: &mut Problems<'_>) -> Option<RateSettings> {
        let before = problems.len();
        let lower = self.lower_bound();
        let upper = self.upper_bound();
        let finite_positive = |problems: &mut Problems<'_>, field: &str, value: f64| {
            if !value.is_finite() {
                problems.add(field, format!("must be a finite number, got {value}"));
            } else if value <= 0.0 {
                problems.add(field, format!("must be above 0, got {value}"));
            } else if value > MAX_RATE {
                problems.add(
                    field,
                    format!("must be at most {MAX_RATE} (one call per nanosecond), got {value}"),
                );
            }
        };
        let slowest = slowest_rate(self.burst);
        // Positive, finite, at most MAX_RATE, and countable with the burst.
        let valid_rate = |problems: &mut Problems<'_>, field: &str, value: f64| {
            let before = problems.len();
            finite_positive(problems, field, value);
            if problems.len() == before && value < slowest {
                problems.add(
                    field,
                    format!(
                        "must be at least {slowest:e} with burst {}: slower, the bucket's \
                         debt could not be counted in 64-bit nanoseconds, got {value:e}",
                        self.burst
                    ),
                );
            }
        };
        if let Some((calls, period)) = self.quota {
            self.check_quota(problems, calls, period);
            let quota_ok = problems.len() == before;
            if quota_ok {
                valid_rate(problems, "quota", self.starting_rate);
            }
            if self.burst == 0 {
                problems.add("burst", "must be at least 1, got 0");
            }
            return (problems.len() == before).then(|| self.settings());
        }
        valid_rate(problems, "starting_rate", self.starting_rate);
        // Defaults derive from the starting rate; when it is bad, only what
        // the user set is worth reporting.
        let starting_rate_ok = problems.len() == before;
        if self.burst == 0 {
            problems.add("burst", "must be at least 1, got 0");
        }
        if self.lower_bound.is_some() {
            valid_rate(problems, "lower_bound", lower);
        }
        if self.upper_bound.is_some() {
            valid_rate(problems, "upper_bound", upper);
        }
        let bounds_given = self.lower_bound.is_some() && self.upper_bound.is_some();
        if (bounds_given || starting_rate_ok) && lower > upper {
            problems.add(
                "bounds",
                format!("lower bound must not exceed upper bound, got [{lower}, {upper}]"),
            );
        } else if starting_rate_ok
            && lower.is_finite()
            && upper.is_finite()
            && !(lower..=upper).contains(&self.starting_rate)
        {
            problems.add(
                "starting_rate",
                format!(
                    "must lie within the bounds [{lower}, {upper}], got {}",
                    self.starting_rate
                ),
            );
        }
        let step = self.increment_step();
        if (self.increase_by.is_some() || starting_rate_ok) && (!step.is_finite() || step < 0.0) {
            problems.add(
                "increase_by",
                format!("must be a finite number of at least 0, got {step}"),
            );
        }
        if let (Some(step), Some(factor)) = (self.decrease_by, self.decrease_factor) {
            problems.add(
                "decrease_factor",
                format!(
                    "set one of decrease_by (additive) or decrease_factor (multiplicative), \
                     not both; got decrease_by {step} and decrease_factor {factor}"
                ),
            );
        }
        match self.decrease() {
            Decrease::Subtract(step) if !step.is_finite() || step < 0.0 => problems.add(
                "decrease_by",
                format!("must be a finite number of at least 0, got {step}"),
            ),
            Decrease::Multiply(factor) if !(factor > 0.0 && factor <= 1.0) => problems.add(
                "decrease_factor",
                format!("must be above 0 and at most 1, got {factor}"),
            ),
            _ => {}
        }
        (problems.len() == before).then(|| self.settings())
    }

    /// A fixed quota's own problems: no calls or no period, and every
    /// adaptive setting it was given (it could only be ignored).
    fn check_quota(&self, problems: &mut Problems<'_>, calls: u32, period: Duration) {
        let per = humantime::format_duration(period);
        if calls == 0 {
            problems.add(
                "quota",
                format!("must allow at least 1 call, got 0 per {per}"),
            );
        }
        if period.is_zero() {
            problems.add(
                "quota",
                format!("the period must be above 0, got {calls} per 0s"),
            );
        }
        let adaptive = [
            (
                "bounds",
                self.lower_bound.is_some() || self.upper_bound.is_some(),
            ),
            ("increase_by", self.increase_by.is_some()),
            ("decrease_by", self.decrease_by.is_some()),
            ("decrease_factor", self.decrease_factor.is_some()),
            ("decrease_cooldown", self.decrease_cooldown.is_some()),
        ];
        for (field, _) in adaptive.iter().filter(|(_, set)| *set) {
            problems.add(
                field,
                format!(
                    "a fixed quota ({calls} per {per}) never moves; an adaptive rate starts \
                     from RateConfig::adaptive(calls_per_second)"
                ),
            );
        }
    }

    /// The settings, with defaults applied; the fields are valid.
    fn settings(&self) -> RateSettings {
        RateSettings {
            starting_rate: self.starting_rate,
            burst: self.burst,
            lower_bound: self.lower_bound(),
            upper_bound: self.upper_bound(),
            increment: self.increment_step(),
            learns: self.learns(),
            learned_decrease: self.learns_decrease(),
            decrease: self.decrease(),
            cooldown: nanos(self.cooldown()),
        }
    }
}

/// Validated settings, with defaults applied: what a key's rate cell obeys.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RateSettings {
    pub(crate) starting_rate: f64,
    pub(crate) burst: u32,
    pub(crate) lower_bound: f64,
    pub(crate) upper_bound: f64,
    pub(crate) increment: f64,
    /// Whether the rate grows by time after a fall, with slow start
    /// before the first (`growth`), rather than by `increment` per success:
    /// an adaptive rate whose user set no `increase_by`.
    pub(crate) learns: bool,
    /// Whether the decrease is the default: then a fall with no call served
    /// since the last one falls twice (`cell`'s `decrease`).
    pub(crate) learned_decrease: bool,
    pub(crate) decrease: Decrease,
    pub(crate) cooldown: Nanos,
}

impl RateSettings {
    /// Whether the rate can never move (its bounds are one rate, as a
    /// fixed quota's are). Through a store, its calls book their tokens on
    /// arrival: there is no change for the key's line to pass on, and the
    /// processes of a fleet keep the store's first come, first served
    /// order (each process's line takes turns by polling, which favours
    /// the process whose calls are already coming).
    pub(crate) fn never_moves(&self) -> bool {
        self.lower_bound >= self.upper_bound
    }
}

#[cfg(test)]
impl RateSettings {
    /// Settings for tests of the pure maths.
    pub(crate) fn for_test(config: RateConfig) -> Self {
        let mut found = Vec::new();
        config
            .check(&mut Problems::new("rate", &mut found))
            .expect("valid test config")
    }
}

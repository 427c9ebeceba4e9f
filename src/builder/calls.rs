//! The builder's settings of how calls are judged: priorities, retries,
//! the randomness of shedding and backoff, the classifier, and how long
//! calls may wait.

use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use super::ThrottleManagerBuilder;
use crate::core::{CallRules, RandomSource};
use crate::deadline::TimeLimits;
use crate::error::{ConfigProblem, Problems};
use crate::outcome::{Classifier, Outcome};
use crate::priority::{OutOfRange, Priorities, Priority};
use crate::rate::DEFAULT_MAX_DEFER;
use crate::retry_budget::RetryPolicy;

/// The default number of priority levels: `Priority::HIGH` to `Priority::LOW`.
const DEFAULT_PRIORITY_LEVELS: u8 = 4;

/// The most priority levels a manager may have.
const MAX_PRIORITY_LEVELS: u8 = 16;

/// The wait to be admitted when the builder sets none: long enough for a
/// burst to queue behind a slow backend, short enough that a service's call
/// never hangs on a key that will not admit it.
const DEFAULT_MAX_WAIT: Duration = Duration::from_secs(30);

/// How calls are judged and how long they may wait, as set.
pub(super) struct CallParts {
    pub(super) priority_levels: u8,
    pub(super) out_of_range: OutOfRange,
    pub(super) random: Option<Box<RandomSource>>,
    pub(super) retry: Option<RetryPolicy>,
    pub(super) classifier: Option<Box<Classifier>>,
    pub(super) call_timeout: Option<Duration>,
    pub(super) max_defer: Duration,
    pub(super) max_wait: Option<Duration>,
    /// Per-priority `max_wait`s, by level, in the order given.
    pub(super) max_wait_for: Vec<(Priority, Duration)>,
}

impl Default for CallParts {
    fn default() -> Self {
        Self {
            priority_levels: DEFAULT_PRIORITY_LEVELS,
            out_of_range: OutOfRange::default(),
            random: None,
            retry: None,
            classifier: None,
            call_timeout: None,
            max_defer: DEFAULT_MAX_DEFER,
            max_wait: None,
            max_wait_for: Vec::new(),
        }
    }
}

impl fmt::Debug for CallParts {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallParts")
            .field("priority_levels", &self.priority_levels)
            .field("out_of_range", &self.out_of_range)
            .field("random", &self.random.is_some())
            .field("retry", &self.retry)
            .field("classifier", &self.classifier.is_some())
            .field("call_timeout", &self.call_timeout)
            .field("max_defer", &self.max_defer)
            .field("max_wait", &self.max_wait)
            .field("max_wait_for", &self.max_wait_for)
            .finish()
    }
}

impl CallParts {
    /// Checks the priority levels, the retry policy, the call timeout and
    /// that every per-priority wait names a level the manager has.
    pub(super) fn check(self, found: &mut Vec<ConfigProblem>) -> CallRules {
        let levels = self.priority_levels;
        if !(1..=MAX_PRIORITY_LEVELS).contains(&levels) {
            Problems::new("", found).add(
                "priority_levels",
                format!("must be from 1 to {MAX_PRIORITY_LEVELS}, got {levels}"),
            );
        }
        let retry = self
            .retry
            .as_ref()
            .and_then(|policy| policy.check(&mut Problems::new("retry", found)));
        if self.call_timeout == Some(Duration::ZERO) {
            Problems::new("", found).add("call_timeout", "must be above 0, got 0ns");
        }
        for (priority, _) in &self.max_wait_for {
            if priority.level() >= levels {
                Problems::new("", found).add(
                    "max_wait_for",
                    format!(
                        "{priority} is out of range: the manager has {levels} priority levels (0 to {})",
                        levels.saturating_sub(1)
                    ),
                );
            }
        }
        let max_wait_default = self.max_wait.unwrap_or(DEFAULT_MAX_WAIT);
        let mut max_wait = vec![Some(max_wait_default); usize::from(levels)];
        for (priority, max) in self.max_wait_for {
            if let Some(wait) = max_wait.get_mut(usize::from(priority.level())) {
                *wait = Some(max);
            }
        }
        CallRules {
            priorities: Priorities {
                levels,
                out_of_range: self.out_of_range,
            },
            random: self.random,
            retry,
            classifier: self.classifier,
            call_timeout: self.call_timeout,
            max_defer: self.max_defer,
            max_wait: max_wait.into_boxed_slice(),
        }
    }
}

/// # Calls: priorities, classification, waiting
impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// How many priority levels calls may have: `0 ..= levels - 1`
    /// (default 4, [`Priority::HIGH`](crate::Priority::HIGH) to
    /// [`Priority::LOW`](crate::Priority::LOW)). From 1 to 16; each level
    /// costs a throttled key 96 bytes.
    ///
    /// ```
    /// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .priority_levels(8)
    ///     .build()?;
    /// let permit = manager.try_acquire("api", Priority::new(7)).unwrap();
    /// assert_eq!(permit.priority(), Priority::new(7));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn priority_levels(mut self, levels: u8) -> Self {
        self.calls.priority_levels = levels;
        self
    }

    /// What happens to a priority beyond the levels (default
    /// [`OutOfRange::ClampToLowest`]).
    ///
    /// ```
    /// use portcullis::priority::OutOfRange;
    /// use portcullis::{ThrottleConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .out_of_range(OutOfRange::Reject)
    ///     .build()?;
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn out_of_range(mut self, policy: OutOfRange) -> Self {
        self.calls.out_of_range = policy;
        self
    }

    /// Retries calls whose outcome is overload, under `policy`: within each
    /// key's budget, with backoff, one priority level lower, before a
    /// deadline (see [`retry`](crate::retry)). [`call`](crate::ThrottleManager::call)
    /// and the client middleware retry by it, and every key keeps its
    /// budget (8 bytes). Whatever controls the manager has, retries work the
    /// same.
    ///
    /// ```
    /// use portcullis::retry::RetryPolicy;
    /// use portcullis::{BulkheadConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .bulkhead(BulkheadConfig::new(8))
    ///     .retry(RetryPolicy::new().budget(0.2))
    ///     .build()?;
    /// # let _ = manager;
    /// let bad = ThrottleManager::<String>::builder()
    ///     .bulkhead(BulkheadConfig::new(8))
    ///     .retry(RetryPolicy::new().budget(1.5))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(bad.problems()[0].field(), "retry.budget");
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.calls.retry = Some(policy);
        self
    }

    /// Where the throttle's shedding decisions and the retries' backoff draw
    /// their randomness: a
    /// function returning a uniform number in `[0, 1)`. For deterministic
    /// tests; the default is a fast per-thread generator.
    ///
    /// ```
    /// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::error::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .random_source(|| 0.5) // shed exactly when the probability is above 0.5
    ///     .build()?;
    /// for _ in 0..100 {
    ///     manager.decrement("db"); // probability 0.625
    /// }
    /// assert!(manager.try_acquire("db", Priority::HIGH).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn random_source(mut self, random: impl Fn() -> f64 + Send + Sync + 'static) -> Self {
        self.calls.random = Some(Box::new(random));
        self
    }

    /// Judges the errors of [`call`](crate::ThrottleManager::call) that were not
    /// marked with [`overloaded`](crate::overloaded): [`Outcome::Overloaded`]
    /// for errors that are capacity problems across a codebase (timeouts,
    /// refused or reset connections), [`Outcome::Neutral`] for the rest.
    /// Without one, unmarked errors are neutral. [`transport_overload`]
    /// covers `std::io` errors and tokio timeouts.
    ///
    /// [`transport_overload`]: crate::outcome::transport_overload
    ///
    /// ```
    /// use portcullis::outcome::transport_overload;
    /// use portcullis::outcome::Outcome;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     // With reqwest, add its own timeouts:
    ///     // .classifier(|e| match e.downcast_ref::<reqwest::Error>() {
    ///     //     Some(e) if e.is_timeout() || e.is_connect() => Outcome::Overloaded,
    ///     //     _ => transport_overload(e),
    ///     // })
    ///     .classifier(transport_overload)
    ///     .build()?;
    /// # let _ = Outcome::Neutral;
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn classifier(
        mut self,
        classify: impl Fn(&(dyn std::error::Error + 'static)) -> Outcome + Send + Sync + 'static,
    ) -> Self {
        self.calls.classifier = Some(Box::new(classify));
        self
    }

    /// `time_limits(TimeLimits::new().call_timeout(timeout))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `time_limits(TimeLimits::new().call_timeout(timeout))`"
    )]
    pub fn call_timeout(self, timeout: Duration) -> Self {
        self.time_limits(TimeLimits::new().call_timeout(timeout))
    }

    /// `time_limits(TimeLimits::new().max_defer(max))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `time_limits(TimeLimits::new().max_defer(max))`"
    )]
    pub fn max_defer(self, max: Duration) -> Self {
        self.time_limits(TimeLimits::new().max_defer(max))
    }

    /// `time_limits(TimeLimits::new().max_wait(max))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `time_limits(TimeLimits::new().max_wait(max))`"
    )]
    pub fn max_wait(self, max: Duration) -> Self {
        self.time_limits(TimeLimits::new().max_wait(max))
    }

    /// `time_limits(TimeLimits::new().max_wait_for(priority, max))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `time_limits(TimeLimits::new().max_wait_for(priority, max))`"
    )]
    pub fn max_wait_for(self, priority: Priority, max: Duration) -> Self {
        self.time_limits(TimeLimits::new().max_wait_for(priority, max))
    }
}

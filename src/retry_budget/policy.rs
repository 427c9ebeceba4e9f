//! A retry policy as a user sets it, and the settings it validates to.

use std::time::Duration;

use super::budget::{BudgetRules, MAX_THOUSANDTHS, TOKEN};
use crate::error::Problems;

/// The floor's reserve: a key's bucket holds at most this many seconds of
/// the floor, and never fewer than this many tokens.
const RESERVE_SECONDS: f64 = 10.0;

/// How a manager's calls are retried: how often, how long apart, and
/// within which budget and deadline. Given to the builder's
/// [`retry`](crate::builder::ThrottleManagerBuilder::retry); checked by
/// [`build`](crate::builder::ThrottleManagerBuilder::build), which names a bad field.
///
/// ```
/// use std::time::Duration;
/// use portcullis::retry::RetryPolicy;
/// use portcullis::{RateConfig, ThrottleManager};
///
/// let policy = RetryPolicy::new()
///     .max_retries(3)
///     .backoff(Duration::from_millis(50), Duration::from_secs(5))
///     .budget(0.1)
///     .deadline(Duration::from_secs(30));
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0))
///     .retry(policy)
///     .build()?;
/// # let _ = manager;
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct RetryPolicy {
    max_retries: u32,
    base: Duration,
    cap: Duration,
    ratio: f64,
    floor: f64,
    deadline: Option<Duration>,
    lower_by: u8,
    transport_errors: bool,
    any_method: bool,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl RetryPolicy {
    /// Three retries at most, backoff from 50 ms up to 5 s, a budget of
    /// 10 % of the key's calls with a floor of one retry a second, no
    /// deadline, retries one priority level down; transport errors and
    /// non-idempotent requests are not retried.
    ///
    /// ```
    /// use portcullis::retry::RetryPolicy;
    /// assert_eq!(RetryPolicy::new(), RetryPolicy::default());
    /// ```
    pub fn new() -> Self {
        Self {
            max_retries: 3,
            base: Duration::from_millis(50),
            cap: Duration::from_secs(5),
            ratio: 0.1,
            floor: 1.0,
            deadline: None,
            lower_by: 1,
            transport_errors: false,
            any_method: false,
        }
    }

    /// The most retries of one logical call (0: never retry).
    ///
    /// ```
    /// use portcullis::retry::RetryPolicy;
    /// let policy = RetryPolicy::new().max_retries(5);
    /// # let _ = policy;
    /// ```
    pub fn max_retries(mut self, retries: u32) -> Self {
        self.max_retries = retries;
        self
    }

    /// Exponential backoff with full jitter: retry `n` waits a random time
    /// below `min(cap, base × 2^(n-1))`. `base` must not exceed `cap`.
    ///
    /// ```
    /// use std::time::Duration;
    /// use portcullis::retry::RetryPolicy;
    /// let policy = RetryPolicy::new().backoff(Duration::from_millis(100), Duration::from_secs(10));
    /// # let _ = policy;
    /// ```
    pub fn backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.base = base;
        self.cap = cap;
        self
    }

    /// The share of a key's calls that may be retries, from 0 to 1 (each
    /// first attempt earns `ratio` of a retry). Over any run a key retries
    /// at most `ratio × its calls`, plus the floor
    /// ([`min_retries_per_second`](Self::min_retries_per_second)) and a
    /// reserve of ten seconds of it.
    ///
    /// ```
    /// use portcullis::retry::RetryPolicy;
    /// let policy = RetryPolicy::new().budget(0.2); // one retry per five calls
    /// # let _ = policy;
    /// ```
    pub fn budget(mut self, ratio: f64) -> Self {
        self.ratio = ratio;
        self
    }

    /// The floor of a key's budget: retries a second it may make however few
    /// calls it has, so that a quiet key can still retry a rare failure.
    /// From 0 to 1,000.
    ///
    /// ```
    /// use portcullis::retry::RetryPolicy;
    /// let policy = RetryPolicy::new().min_retries_per_second(0.5);
    /// # let _ = policy;
    /// ```
    pub fn min_retries_per_second(mut self, floor: f64) -> Self {
        self.floor = floor;
        self
    }

    /// How long one logical call may take in all: its first attempt, its
    /// waits and its retries. A retry whose wait would end past it is not
    /// made; the call's last failure is returned at once.
    ///
    /// How this limit meets the other six (what each bounds, on which
    /// clock, what its expiry counts as): the [time
    /// limits](crate::guide::getting_started#time-limits).
    ///
    /// ```
    /// use std::time::Duration;
    /// use portcullis::retry::RetryPolicy;
    /// let policy = RetryPolicy::new().deadline(Duration::from_secs(30));
    /// # let _ = policy;
    /// ```
    pub fn deadline(mut self, deadline: Duration) -> Self {
        self.deadline = Some(deadline);
        self
    }

    /// How many priority levels lower than its first attempt a retry goes
    /// in (1 by default; 0 keeps the first attempt's), clamped to the
    /// manager's lowest level: the throttle sheds retries before first
    /// attempts.
    ///
    /// ```
    /// use portcullis::retry::RetryPolicy;
    /// let policy = RetryPolicy::new().lower_priority_by(2);
    /// # let _ = policy;
    /// ```
    pub fn lower_priority_by(mut self, levels: u8) -> Self {
        self.lower_by = levels;
        self
    }

    /// Whether the client middleware retries transport errors (a refused
    /// connection, a reset, a timeout) besides overloaded answers. Off by
    /// default: a request whose connection broke may have reached the
    /// server.
    ///
    /// ```
    /// use portcullis::retry::RetryPolicy;
    /// let policy = RetryPolicy::new().retry_transport_errors(true);
    /// # let _ = policy;
    /// ```
    pub fn retry_transport_errors(mut self, retry: bool) -> Self {
        self.transport_errors = retry;
        self
    }

    /// Whether the client middleware retries requests whose method is not
    /// idempotent (POST, PATCH). Off by default: only GET, HEAD, OPTIONS,
    /// PUT, DELETE and TRACE are retried, and only when their body can be
    /// cloned.
    ///
    /// ```
    /// use portcullis::retry::RetryPolicy;
    /// let policy = RetryPolicy::new().retry_non_idempotent(true);
    /// # let _ = policy;
    /// ```
    pub fn retry_non_idempotent(mut self, retry: bool) -> Self {
        self.any_method = retry;
        self
    }

    /// Adds every problem to `problems`; the settings when there are none.
    pub(crate) fn check(&self, problems: &mut Problems<'_>) -> Option<RetrySettings> {
        let before = problems.len();
        if self.base > self.cap {
            problems.add(
                "backoff",
                format!(
                    "the base must not exceed the cap, got {:?} and {:?}",
                    self.base, self.cap
                ),
            );
        }
        if !(0.0..=1.0).contains(&self.ratio) {
            problems.add(
                "budget",
                format!(
                    "must be from 0 to 1 (a share of the key's calls), got {}",
                    self.ratio
                ),
            );
        }
        if !(0.0..=1_000.0).contains(&self.floor) {
            problems.add(
                "min_retries_per_second",
                format!("must be from 0 to 1000, got {}", self.floor),
            );
        }
        if self.deadline == Some(Duration::ZERO) {
            problems.add("deadline", "must be above 0, got 0ns");
        }
        if problems.len() > before {
            return None;
        }
        let cap = (RESERVE_SECONDS * self.floor).max(RESERVE_SECONDS) * f64::from(TOKEN);
        Some(RetrySettings {
            max_retries: self.max_retries,
            base: self.base,
            cap: self.cap,
            deadline: self.deadline,
            lower_by: self.lower_by,
            transport_errors: self.transport_errors,
            any_method: self.any_method,
            budget: BudgetRules {
                deposit: (self.ratio * f64::from(TOKEN)).round() as u32,
                refill_per_ms: self.floor * f64::from(TOKEN) / 1_000.0,
                cap: (cap as u32).min(MAX_THOUSANDTHS),
            },
        })
    }
}

/// A checked [`RetryPolicy`], as the manager keeps it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RetrySettings {
    pub(crate) max_retries: u32,
    pub(crate) base: Duration,
    pub(crate) cap: Duration,
    pub(crate) deadline: Option<Duration>,
    pub(crate) lower_by: u8,
    pub(crate) transport_errors: bool,
    pub(crate) any_method: bool,
    pub(crate) budget: BudgetRules,
}

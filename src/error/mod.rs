//! Rejections, a call's errors and configuration errors, as data.

use std::fmt;
use std::time::Duration;

use crate::priority::Priority;

mod call;
mod config;

pub use call::CallError;
pub(crate) use config::Problems;
pub use config::{ConfigError, ConfigProblem};

/// Why a call was refused locally, before it reached its backend.
///
/// # Example
///
/// ```
/// use portcullis::error::RejectReason;
///
/// let reason = RejectReason::Throttled;
/// assert_eq!(reason.to_string(), "throttled");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RejectReason {
    /// The key's backend has been failing, and the throttle shed this call
    /// (see [`ThrottleConfig`](crate::ThrottleConfig)).
    Throttled,
    /// The key's rate allows no call right now
    /// ([`retry_after`](Rejected::retry_after) says when).
    RateLimited,
    /// The key was new, and the manager already holds `max_keys` keys, none
    /// of which can be evicted yet (each still limits someone).
    ///
    /// ```
    /// use portcullis::builder::KeySpaceConfig;
    /// use portcullis::clock::ManualClock;
    /// use portcullis::error::RejectReason;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(1.0))
    ///     .key_space(KeySpaceConfig::new().max_keys(1))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// manager.check("first").unwrap(); // owes its token for one second
    /// let refused = manager.check("second").unwrap_err();
    /// assert_eq!(refused.reason(), RejectReason::KeySpaceFull);
    /// assert_eq!(refused.retry_after(), Some(std::time::Duration::from_secs(1)));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    KeySpaceFull,
    /// The priority was beyond the manager's levels and the policy is
    /// [`OutOfRange::Reject`](crate::priority::OutOfRange::Reject).
    InvalidPriority,
    /// The key's bulkhead had no free slot and no room in its queue (or, for
    /// `try_acquire`, no free slot). A capacity problem on the caller's
    /// side: an HTTP server would answer 503.
    Full,
    /// The call waited in the bulkhead's queue for the whole queue timeout.
    QueueTimeout,
    /// The bulkhead's queue was overloaded under CoDel
    /// ([`BulkheadConfig::codel`](crate::BulkheadConfig::codel)): its
    /// shortest wait stayed above the target for an interval, and this
    /// call had waited the target, so it was dropped rather than served
    /// late. A capacity problem on the caller's side, as
    /// [`Full`](Self::Full) is.
    QueueOverloaded,
    /// The call was waiting in the bulkhead's queue and was pushed out by a
    /// newcomer (see [`Overflow`](crate::bulkhead::Overflow)).
    Dropped,
    /// The key's rate is shared through a store that does not answer, and
    /// the store refuses calls meanwhile (`store::WhenUnavailable::Refuse`,
    /// feature `redis`); [`retry_after`](Rejected::retry_after) says when
    /// the store will be asked again.
    StoreUnavailable,
    /// The call cost more tokens than the key's rate holds at once (its
    /// burst): no wait could admit it, so it was refused at once. Split the
    /// call, or give the rate a larger
    /// [`burst`](crate::RateConfig::burst).
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(600).burst(20))
    ///     .build()?;
    /// let refused = manager.key("tenant-a").check(21).unwrap_err();
    /// assert_eq!(refused.reason(), RejectReason::CostAboveBurst);
    /// assert_eq!(refused.retry_after(), None); // never
    /// assert_eq!(
    ///     refused.to_string(),
    ///     "rejected locally (cost above the burst, priority 0); cost 21 > burst 20, which no wait can admit"
    /// );
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    CostAboveBurst,
    /// A call charged to several keys
    /// ([`acquire_all`](crate::ThrottleManager::acquire_all)) named one key
    /// twice: refused before any key counted it, since charging a key twice
    /// for one call is a mistake in the list (and, with a bulkhead of one
    /// slot, a wait for itself). The message names both places.
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::error::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(1)).build()?;
    /// let refused = manager.acquire_all(&["tenant-a", "user-7", "tenant-a"], Priority::HIGH).await.unwrap_err();
    /// assert_eq!(refused.reason(), RejectReason::DuplicateKey);
    /// assert_eq!(refused.to_string(), "rejected locally (duplicate key, priority 0); keys[0] and keys[2] are one key");
    /// # Ok(())
    /// # }
    /// ```
    DuplicateKey,
    /// The call could not start before its task's deadline
    /// ([`with_deadline`](crate::deadline::with_deadline)): its rate token, or room
    /// in the key space, lies beyond it, or it waited in the bulkhead's
    /// queue until the deadline. Refused at once where the wait is known,
    /// taking nothing; no [`retry_after`](Rejected::retry_after), since
    /// the caller has given up by then.
    Deadline,
    /// A call's [`Cost`](crate::metered::Cost) named a limit the manager does not
    /// have ([`limit`](crate::builder::ThrottleManagerBuilder::limit)): refused
    /// before any limit counted it, the name in a warning event.
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::metered::Cost;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60))
    ///     .limit("tokens", RateConfig::per_minute(10_000))
    ///     .build()?;
    /// let refused = manager.try_acquire_cost("model-a", Priority::HIGH, Cost::of("tokns", 10)).unwrap_err();
    /// assert_eq!(refused.reason(), RejectReason::UnknownLimit);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    UnknownLimit,
}

impl RejectReason {
    /// Whether a key's limits refused the call (its rate, throttle or
    /// bulkhead): what shadow mode lets through. The key space, the
    /// caller's priority, deadline or keys and a store that does not
    /// answer are enforced in shadow mode too.
    pub(crate) fn is_limit(self) -> bool {
        matches!(
            self,
            Self::Throttled
                | Self::RateLimited
                | Self::Full
                | Self::QueueTimeout
                | Self::QueueOverloaded
                | Self::Dropped
                | Self::CostAboveBurst
        )
    }

    /// Every reason, in the order a status page lists them.
    #[cfg_attr(not(any(feature = "metrics", feature = "status")), allow(dead_code))]
    pub(crate) const ALL: [Self; 13] = [
        Self::Throttled,
        Self::RateLimited,
        Self::Full,
        Self::QueueTimeout,
        Self::Dropped,
        Self::KeySpaceFull,
        Self::StoreUnavailable,
        Self::CostAboveBurst,
        Self::InvalidPriority,
        Self::DuplicateKey,
        Self::Deadline,
        Self::QueueOverloaded,
        Self::UnknownLimit,
    ];

    /// The reason's place in [`ALL`](Self::ALL): a match, so a new reason
    /// cannot be left out of the tallies that count by reason.
    #[cfg_attr(not(any(feature = "metrics", feature = "status")), allow(dead_code))]
    pub(crate) fn index(self) -> usize {
        match self {
            Self::Throttled => 0,
            Self::RateLimited => 1,
            Self::Full => 2,
            Self::QueueTimeout => 3,
            Self::Dropped => 4,
            Self::KeySpaceFull => 5,
            Self::StoreUnavailable => 6,
            Self::CostAboveBurst => 7,
            Self::InvalidPriority => 8,
            Self::DuplicateKey => 9,
            Self::Deadline => 10,
            Self::QueueOverloaded => 11,
            Self::UnknownLimit => 12,
        }
    }

    /// The reason's name in metrics labels and JSON: snake case, stable.
    #[cfg_attr(not(any(feature = "metrics", feature = "status")), allow(dead_code))]
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Throttled => "throttled",
            Self::RateLimited => "rate_limited",
            Self::KeySpaceFull => "key_space_full",
            Self::InvalidPriority => "invalid_priority",
            Self::Full => "full",
            Self::QueueTimeout => "queue_timeout",
            Self::Dropped => "dropped",
            Self::StoreUnavailable => "store_unavailable",
            Self::CostAboveBurst => "cost_above_burst",
            Self::DuplicateKey => "duplicate_key",
            Self::Deadline => "deadline",
            Self::QueueOverloaded => "queue_overloaded",
            Self::UnknownLimit => "unknown_limit",
        }
    }
}

impl fmt::Display for RejectReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Throttled => "throttled",
            Self::RateLimited => "rate limited",
            Self::KeySpaceFull => "key space full",
            Self::InvalidPriority => "priority out of range",
            Self::Full => "bulkhead full",
            Self::QueueTimeout => "queue timeout",
            Self::Dropped => "dropped from the queue",
            Self::StoreUnavailable => "rate store unavailable",
            Self::CostAboveBurst => "cost above the burst",
            Self::DuplicateKey => "duplicate key",
            Self::Deadline => "past the caller's deadline",
            Self::QueueOverloaded => "queue overloaded",
            Self::UnknownLimit => "cost names no limit of the manager",
        })
    }
}

/// A call refused locally: why, for which priority, and when it might go.
///
/// # Example
///
/// ```
/// use portcullis::error::RejectReason;
/// use portcullis::{Priority, RateConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), portcullis::error::ConfigError> {
/// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(1.0)).build()?;
/// let permit = manager.try_acquire("api", Priority::LOW).unwrap();
/// drop(permit); // no report: the rate stays at 1/s
/// let rejected = manager.try_acquire("api", Priority::LOW).unwrap_err();
/// assert_eq!(rejected.reason(), RejectReason::RateLimited);
/// assert_eq!(rejected.retry_after(), Some(std::time::Duration::from_secs(1)));
/// assert_eq!(rejected.priority(), Priority::LOW);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct Rejected {
    reason: RejectReason,
    priority: Priority,
    retry_after: Option<Duration>,
    load: Option<RefusalLoad>,
    /// For a call charged to several keys, the place in the list of the key
    /// that refused, plus one; 0 otherwise, or past 254 (a byte in the
    /// padding: no bigger a refusal).
    key_place: u8,
    /// For a call charged to a key's named limits, the index of the limit
    /// that refused, plus one; 0 otherwise (another byte of padding).
    limit_place: u8,
}

/// What the refusing control held when it refused, for the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RefusalLoad {
    /// A bulkhead's calls in flight and queued.
    Bulkhead { active: u32, queued: u32 },
    /// A call's cost, and the burst it did not fit in.
    Cost { cost: u32, burst: u32 },
    /// The two places in a call's list of keys that name one key.
    Duplicate { first: u32, again: u32 },
}

impl Rejected {
    pub(crate) fn new(
        reason: RejectReason,
        priority: Priority,
        retry_after: Option<Duration>,
    ) -> Self {
        Self {
            reason,
            priority,
            retry_after,
            load: None,
            key_place: 0,
            limit_place: 0,
        }
    }

    /// Refused by the rate, whose next token is `wait` nanoseconds away.
    pub(crate) fn rate_limited(wait: u64, priority: Priority) -> Self {
        Self::new(
            RejectReason::RateLimited,
            priority,
            Some(Duration::from_nanos(wait)),
        )
    }

    /// Refused by a bulkhead that had `active` calls in flight and
    /// `queued` waiting.
    pub(crate) fn with_load(
        reason: RejectReason,
        priority: Priority,
        active: u32,
        queued: u32,
    ) -> Self {
        Self {
            reason,
            priority,
            retry_after: None,
            load: Some(RefusalLoad::Bulkhead { active, queued }),
            key_place: 0,
            limit_place: 0,
        }
    }

    /// Refused because `cost` tokens never fit in a burst of `burst`.
    pub(crate) fn cost_above_burst(cost: u32, burst: u32, priority: Priority) -> Self {
        Self {
            reason: RejectReason::CostAboveBurst,
            priority,
            retry_after: None,
            load: Some(RefusalLoad::Cost { cost, burst }),
            key_place: 0,
            limit_place: 0,
        }
    }

    /// Refused because `keys[first]` and `keys[again]` are one key.
    pub(crate) fn duplicate_key(first: usize, again: usize, priority: Priority) -> Self {
        let place = |index: usize| u32::try_from(index).unwrap_or(u32::MAX);
        Self {
            reason: RejectReason::DuplicateKey,
            priority,
            retry_after: None,
            load: Some(RefusalLoad::Duplicate {
                first: place(first),
                again: place(again),
            }),
            key_place: 0,
            limit_place: 0,
        }
    }

    /// The same refusal, from the key at `index` of a call's list of keys.
    pub(crate) fn by_key_at(mut self, index: usize) -> Self {
        self.key_place = u8::try_from(index + 1).unwrap_or(0);
        self
    }

    /// The same refusal, from the key's named limit at `index`.
    pub(crate) fn by_limit_at(mut self, index: usize) -> Self {
        self.limit_place = u8::try_from(index + 1).unwrap_or(0);
        self
    }

    /// For a call charged to a key's named limits
    /// ([`acquire_cost`](crate::ThrottleManager::acquire_cost)), the index
    /// of the named limit that refused it, in the manager's
    /// [`limit_names`](crate::ThrottleManager::limit_names) (for up to 254
    /// limits); `None` when the key's rate or another control refused it.
    ///
    /// ```
    /// use portcullis::metered::Cost;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60))
    ///     .limit("input_tokens", RateConfig::per_minute(30_000).burst(1_000))
    ///     .limit("output_tokens", RateConfig::per_minute(8_000).burst(500))
    ///     .build()?;
    /// let cost = Cost::of("input_tokens", 100).and("output_tokens", 600);
    /// let refused = manager.try_acquire_cost("model-a", Priority::HIGH, cost).unwrap_err();
    /// assert_eq!(refused.limit_index(), Some(1)); // 600 output tokens never fit a burst of 500
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn limit_index(&self) -> Option<usize> {
        usize::from(self.limit_place).checked_sub(1)
    }

    /// For a call charged to several keys
    /// ([`acquire_all`](crate::ThrottleManager::acquire_all)), the place in
    /// its list of the key that refused it (for lists of up to 254 keys);
    /// `None` for a call to one key.
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::error::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(1)).build()?;
    /// let _busy = manager.try_acquire("tenant-a", Priority::HIGH).unwrap();
    /// let refused = manager.acquire_all(&["user-7", "tenant-a"], Priority::HIGH).await.unwrap_err();
    /// assert_eq!(refused.reason(), RejectReason::Full); // the tenant's one slot is taken
    /// assert_eq!(refused.key_index(), Some(1));
    /// # Ok(())
    /// # }
    /// ```
    pub fn key_index(&self) -> Option<usize> {
        usize::from(self.key_place).checked_sub(1)
    }

    /// For a bulkhead rejection, the calls of the key in flight at that
    /// moment; `None` for the other reasons.
    ///
    /// ```
    /// use portcullis::error::RejectReason;
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(1)).build()?;
    /// let _busy = manager.try_acquire("db", Priority::HIGH).unwrap();
    /// let rejected = manager.try_acquire("db", Priority::HIGH).unwrap_err();
    /// assert_eq!(rejected.reason(), RejectReason::Full);
    /// assert_eq!((rejected.active(), rejected.queued()), (Some(1), Some(0)));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn active(&self) -> Option<u32> {
        match self.load {
            Some(RefusalLoad::Bulkhead { active, .. }) => Some(active),
            _ => None,
        }
    }

    /// For a bulkhead rejection, the calls of the key waiting in its queue
    /// at that moment; `None` for the other reasons.
    ///
    /// ```
    /// # use portcullis::*;
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(1)).build()?;
    /// let _busy = manager.try_acquire("db", Priority::HIGH).unwrap();
    /// assert_eq!(manager.try_acquire("db", Priority::HIGH).unwrap_err().queued(), Some(0));
    /// # Ok::<(), ConfigError>(())
    /// ```
    pub fn queued(&self) -> Option<u32> {
        match self.load {
            Some(RefusalLoad::Bulkhead { queued, .. }) => Some(queued),
            _ => None,
        }
    }

    /// Why the call was refused.
    ///
    /// ```
    /// use portcullis::builder::KeySpaceConfig;
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(1.0)).key_space(KeySpaceConfig::new().max_keys(1)).clock(clock::ManualClock::new()).build().unwrap();
    /// # manager.check("a").unwrap();
    /// let rejected = manager.try_acquire("b", Priority::HIGH).unwrap_err();
    /// assert_eq!(rejected.reason(), RejectReason::KeySpaceFull);
    /// ```
    pub fn reason(&self) -> RejectReason {
        self.reason
    }

    /// The priority the call was judged at (after the task-local priority
    /// and the out-of-range policy).
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(1.0)).priority_levels(2).clock(clock::ManualClock::new()).build().unwrap();
    /// # manager.check("a").unwrap();
    /// let rejected = manager.try_acquire("a", Priority::LOW).unwrap_err();
    /// assert_eq!(rejected.priority(), Priority::MEDIUM_HIGH); // LOW clamped to the lowest of 2 levels
    /// ```
    pub fn priority(&self) -> Priority {
        self.priority
    }

    /// When the call could go, where that is known: the next token for
    /// [`RateLimited`](RejectReason::RateLimited), the first evictable key
    /// for [`KeySpaceFull`](RejectReason::KeySpaceFull), the next time a
    /// store is asked for [`StoreUnavailable`](RejectReason::StoreUnavailable);
    /// `None` for a throttled call, whose chances improve only as its
    /// backend recovers.
    ///
    /// ```
    /// # use portcullis::*;
    /// # let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(4.0)).clock(clock::ManualClock::new()).build().unwrap();
    /// # manager.check("a").unwrap();
    /// let rejected = manager.try_acquire("a", Priority::HIGH).unwrap_err();
    /// assert_eq!(rejected.retry_after(), Some(std::time::Duration::from_millis(250)));
    /// ```
    pub fn retry_after(&self) -> Option<Duration> {
        self.retry_after
    }
}

impl fmt::Display for Rejected {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "rejected locally ({}, {})", self.reason, self.priority)?;
        match self.load {
            Some(RefusalLoad::Bulkhead { active, queued }) => {
                write!(f, "; {active} active, {queued} queued")?;
            }
            Some(RefusalLoad::Cost { cost, burst }) => {
                write!(f, "; cost {cost} > burst {burst}, which no wait can admit")?;
            }
            Some(RefusalLoad::Duplicate { first, again }) => {
                write!(f, "; keys[{first}] and keys[{again}] are one key")?;
            }
            None => {}
        }
        if let Some(index) = self.limit_index() {
            write!(f, "; by the key's named limit {index}")?;
        }
        if let Some(after) = self.retry_after {
            write!(f, "; retry after {after:?}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Rejected {}

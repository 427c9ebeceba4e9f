//! The time limits a caller meets, as the builder takes them.

use std::time::Duration;

use crate::priority::Priority;

/// The time limits a caller meets, for
/// [`ThrottleManagerBuilder::time_limits`](crate::builder::ThrottleManagerBuilder::time_limits): how long a call may wait to be
/// admitted, and how long [`call`](crate::ThrottleManager::call) lets it
/// run. The third, the caller's own deadline, travels with the call
/// ([`with_deadline`](crate::deadline::with_deadline)).
///
/// | limit | bounds | default | when it runs out |
/// | --- | --- | --- | --- |
/// | [`max_wait`](Self::max_wait) | the wait to be admitted: for a rate token and in the bulkhead's queue, one budget | 30 s | refused ([`RateLimited`](crate::error::RejectReason::RateLimited) or [`QueueTimeout`](crate::error::RejectReason::QueueTimeout)), never run |
/// | [`call_timeout`](Self::call_timeout) | the call's own run | none | dropped, counted as overload ([`CallError::TimedOut`](crate::CallError::TimedOut)) |
/// | [`with_deadline`](crate::deadline::with_deadline) | the caller's whole budget: waits, runs, retries | none | refused or dropped, counted as neutral |
///
/// [`wait`](crate::ThrottleManager::wait), the rate alone, waits for its
/// token however far ahead it lies (within the caller's deadline): it is
/// the pacing of a loop, not a service's call.
///
/// ```
/// use portcullis::deadline::TimeLimits;
/// use portcullis::{BulkheadConfig, ThrottleManager};
/// use std::time::Duration;
///
/// let manager = ThrottleManager::<String>::builder()
///     .bulkhead(BulkheadConfig::new(8).queue(32))
///     .time_limits(
///         TimeLimits::new()
///             .max_wait(Duration::from_millis(500))
///             .call_timeout(Duration::from_secs(2)),
///     )
///     .build()?;
/// assert_eq!(manager.settings().call_timeout(), Some(Duration::from_secs(2)));
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TimeLimits {
    pub(crate) max_wait: Option<Duration>,
    pub(crate) max_wait_for: Vec<(Priority, Duration)>,
    pub(crate) call_timeout: Option<Duration>,
    pub(crate) max_defer: Option<Duration>,
}

impl TimeLimits {
    /// No limit set: each keeps the builder's (the defaults, or what an
    /// earlier setting chose).
    ///
    /// ```
    /// use portcullis::deadline::TimeLimits;
    /// assert_eq!(TimeLimits::new(), Default::default());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The longest a call waits to be admitted, for its rate token and in
    /// its bulkhead's queue together (default 30 s); one beyond it is
    /// refused at once when the wait is known (a token that far ahead), or
    /// when the budget runs out in the queue. A server layer's request,
    /// which waits for nothing but the queue, queues no longer than this
    /// either. `Duration::MAX` waits as long as it takes.
    ///
    /// ```
    /// use portcullis::deadline::TimeLimits;
    /// use portcullis::error::RejectReason;
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(1))
    ///     .time_limits(TimeLimits::new().max_wait(Duration::from_millis(500)))
    ///     .build()?;
    /// manager.acquire("api", Priority::HIGH).await?.success();
    /// // The next token is 1 s away, beyond the 500 ms budget: refused now.
    /// let refused = manager.acquire("api", Priority::HIGH).await.unwrap_err();
    /// assert_eq!(refused.reason(), RejectReason::RateLimited);
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_wait(mut self, max: Duration) -> Self {
        self.max_wait = Some(max);
        self
    }

    /// [`max_wait`](Self::max_wait) for calls of `priority` alone: a batch
    /// priority may wait minutes while a user's call gives up in a second.
    ///
    /// ```
    /// use portcullis::deadline::TimeLimits;
    /// use portcullis::Priority;
    /// use std::time::Duration;
    ///
    /// let limits = TimeLimits::new()
    ///     .max_wait(Duration::from_secs(1))
    ///     .max_wait_for(Priority::LOW, Duration::from_secs(300));
    /// # let _ = limits;
    /// ```
    pub fn max_wait_for(mut self, priority: Priority, max: Duration) -> Self {
        self.max_wait_for.push((priority, max));
        self
    }

    /// How long [`call`](crate::ThrottleManager::call) lets a call run
    /// (default: no limit). A call still running then is dropped, its slot
    /// freed, and it counts as overload: a hung backend is a struggling
    /// one. A call's own [`timeout`](crate::Priority::timeout) replaces it.
    ///
    /// ```
    /// use portcullis::deadline::TimeLimits;
    /// use std::time::Duration;
    ///
    /// let limits = TimeLimits::new().call_timeout(Duration::from_secs(10));
    /// # let _ = limits;
    /// ```
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// The longest pause a server may ask of a key
    /// ([`KeyHandle::defer`](crate::manager::KeyHandle::defer), a
    /// `Retry-After`); a longer one is cut to it (default 5 minutes).
    ///
    /// ```
    /// use portcullis::deadline::TimeLimits;
    /// use std::time::Duration;
    ///
    /// let limits = TimeLimits::new().max_defer(Duration::from_secs(60));
    /// # let _ = limits;
    /// ```
    pub fn max_defer(mut self, max: Duration) -> Self {
        self.max_defer = Some(max);
        self
    }
}

//! The handle on one key: what concerns one key (its readings, its rate
//! alone with a cost) is asked of [`ThrottleManager::key`], so the manager
//! itself keeps only the verbs a call goes through. Its own settings are
//! in `key_settings.rs`; the key space and the built settings in
//! `manager_views.rs`.

use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use super::{KeySnapshot, ThrottleManager};
use crate::error::Rejected;
use crate::priority::Priority;
use crate::registry::BorrowedKey;
use crate::retry::Retries;

/// One key of a manager: its readings, its own settings, its tier and its
/// state, from [`ThrottleManager::key`]. Cheap to make (two references); a
/// key the manager has not seen yet is made by the methods that need its
/// state, as a call would make it, and read as absent by the others.
///
/// ```
/// use portcullis::{RateConfig, ThrottleManager};
///
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0))
///     .build()?;
/// let acme = manager.key("acme");
/// acme.set_rate(RateConfig::adaptive(100.0))?;
/// assert_eq!(acme.rate(), None); // not live until its first call
/// manager.check("acme").unwrap();
/// assert_eq!(acme.rate(), Some(100.0));
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
pub struct KeyHandle<'m, K, Q: ?Sized> {
    pub(super) manager: &'m ThrottleManager<K>,
    pub(super) key: &'m Q,
}

impl<K, Q: ?Sized> Clone for KeyHandle<'_, K, Q> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<K, Q: ?Sized> Copy for KeyHandle<'_, K, Q> {}

impl<K, Q: ?Sized> fmt::Debug for KeyHandle<'_, K, Q> {
    // The key may be a secret (an API token): it is not printed.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeyHandle").finish_non_exhaustive()
    }
}

/// # One key
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// What concerns the key alone: its [`snapshot`](KeyHandle::snapshot)
    /// and readings, its overrides
    /// ([`set_rate`](KeyHandle::set_rate), …), its tier
    /// ([`retier`](KeyHandle::retier)), a provider's pause
    /// ([`defer`](KeyHandle::defer)), [`forget`](KeyHandle::forget).
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .build()?;
    /// assert_eq!(manager.key("never-seen").rate(), None);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn key<'m, Q: BorrowedKey<K> + ?Sized>(&'m self, key: &'m Q) -> KeyHandle<'m, K, Q> {
        KeyHandle { manager: self, key }
    }
}

/// # Readings
impl<K, Q> KeyHandle<'_, K, Q>
where
    K: Hash + Eq + Send + Sync + 'static,
    Q: BorrowedKey<K> + ?Sized,
{
    /// Everything the key's controls know now ([`KeySnapshot`]), or `None` if
    /// the key is not live. Does not create the key.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// assert!(manager.key("api").snapshot().is_none());
    /// manager.increment("api");
    /// assert_eq!(manager.key("api").snapshot().unwrap().rate, Some(11.0));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn snapshot(&self) -> Option<KeySnapshot> {
        self.manager.key_snapshot(self.key)
    }

    /// The key's current rate in calls per second, or `None` if the key is not
    /// live (never seen, or evicted). Does not create the key.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// assert_eq!(manager.key("api").rate(), None);
    /// manager.increment("api");
    /// assert_eq!(manager.key("api").rate(), Some(11.0));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn rate(&self) -> Option<f64> {
        self.manager.key_current_rate(self.key)
    }

    /// How many of the key's calls may be in flight now: its bulkhead's fixed
    /// limit, or what an adaptive one has learned. `None` if the key is not
    /// live or has no bulkhead. Does not create the key. A `u32`, as the
    /// snapshot's [`concurrency_limit`](KeySnapshot::concurrency_limit) and
    /// [`BulkheadConfig::new`](crate::BulkheadConfig::new) are.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .bulkhead(BulkheadConfig::adaptive().bounds(2, 50))
    ///     .build()?;
    /// assert_eq!(manager.key("db").concurrency_limit(), None); // not seen yet
    /// drop(manager.try_acquire("db", Priority::HIGH).unwrap());
    /// assert_eq!(manager.key("db").concurrency_limit(), Some(2)); // probing first, at 2
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn concurrency_limit(&self) -> Option<u32> {
        self.manager.key_concurrency_limit(self.key)
    }

    /// The probability that the key's throttle rejects a call at `priority`
    /// right now, or `None` if the manager has no throttle or the key is not
    /// live. Does not create the key.
    ///
    /// ```
    /// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::error::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// for _ in 0..100 {
    ///     manager.decrement("db"); // 100 capacity failures
    /// }
    /// // 100 requests, 0 accepts, ratio 2, min_rate 1/s over 60 s: 100 / 160.
    /// assert_eq!(manager.key("db").rejection_probability(Priority::LOW), Some(0.625));
    /// # Ok(())
    /// # }
    /// ```
    pub fn rejection_probability(&self, priority: Priority) -> Option<f64> {
        self.manager.key_rejection_probability(self.key, priority)
    }
}

/// # The rate alone, with a cost
impl<'m, K, Q> KeyHandle<'m, K, Q>
where
    K: Hash + Eq + Send + Sync + 'static,
    Q: BorrowedKey<K> + ?Sized,
{
    /// [`wait`](Self::wait) for a call that costs `cost` tokens (bytes,
    /// rows, an LLM's tokens): resolves when all of them are there, and
    /// takes them at once. A cost of 0 takes nothing. Without a rate
    /// configured, resolves at once.
    ///
    /// # Errors
    ///
    /// [`RejectReason::CostAboveBurst`](crate::error::RejectReason::CostAboveBurst) at once, taking nothing, when
    /// `cost` is above the key's burst: the bucket never holds that many;
    /// [`RejectReason::Deadline`](crate::error::RejectReason::Deadline) as for [`wait`](Self::wait).
    ///
    /// # Cancel safety
    ///
    /// As [`wait`](Self::wait): dropped before it resolves, it takes no
    /// token.
    ///
    /// # Panics
    ///
    /// As [`wait`](Self::wait).
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use tokio::time::{Duration, Instant};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// // 1 MB a second, 256 kB at once.
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(1_000_000).burst(256_000))
    ///     .build()?;
    /// let start = Instant::now();
    /// for _ in 0..3 {
    ///     manager.key("mirror.example").wait(200_000).await?;
    /// }
    /// // 600 kB: the first 256 kB at once, the rest at 1 MB a second.
    /// assert_eq!(start.elapsed(), Duration::from_millis(344));
    /// assert!(manager.key("mirror.example").wait(300_000).await.is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait(self, cost: u32) -> Result<(), Rejected> {
        self.manager.key_wait_n(self.key, cost).await
    }

    /// [`check`](Self::check) for a call that costs `cost` tokens: takes
    /// all of them if they are all there now, else none. A cost of 0 takes
    /// nothing. Without a rate configured, always `Ok`.
    ///
    /// # Errors
    ///
    /// As [`check`](Self::check), and
    /// [`RejectReason::CostAboveBurst`](crate::error::RejectReason::CostAboveBurst) (no
    /// [`retry_after`](Rejected::retry_after): never) when `cost` is above
    /// the key's burst.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(600).burst(20))
    ///     .clock(portcullis::clock::ManualClock::new())
    ///     .build()?;
    /// manager.key("tenant-a").check(15)?;
    /// assert_eq!(manager.peek("tenant-a").unwrap().remaining, 5);
    /// let refused = manager.key("tenant-a").check(6).unwrap_err(); // takes nothing
    /// assert_eq!(refused.retry_after(), Some(std::time::Duration::from_millis(100)));
    /// manager.key("tenant-a").check(5)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check(&self, cost: u32) -> Result<(), Rejected> {
        self.manager.key_check_n(self.key, cost)
    }

    /// Pauses the key's rate for `pause`, as a server's `Retry-After` asks:
    /// no call of the key starts before then (`wait` and `acquire` wait,
    /// `check` and `try_acquire` are refused with that `retry_after`), and
    /// the rate resumes after it with an empty bucket. Pauses longer than
    /// the manager's [maximum](crate::deadline::TimeLimits::max_defer) are
    /// cut to it. Returns the pause applied, or `None` if the manager has no
    /// rate or the key space had no room for the key.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(100.0)).build()?;
    /// // The server answered 429 with `Retry-After: 30`.
    /// assert_eq!(manager.key("api").defer(Duration::from_secs(30)), Some(Duration::from_secs(30)));
    /// assert_eq!(manager.check("api").unwrap_err().retry_after(), Some(Duration::from_secs(30)));
    /// let start = tokio::time::Instant::now();
    /// manager.wait("api").await?;
    /// assert_eq!(start.elapsed(), Duration::from_secs(30));
    /// # Ok(())
    /// # }
    /// ```
    pub fn defer(&self, pause: Duration) -> Option<Duration> {
        self.manager.key_defer(self.key, pause)
    }

    /// What the backend says remains of one of the key's limits (`limit`: a
    /// named limit, or [`"requests"`](crate::metered::REQUESTS) for the
    /// key's rate), as a metered API's headers say it after each answer
    /// ([`limit_readings`](crate::client::limit_readings) reads them; the
    /// reqwest middleware and the tower client layer apply them
    /// themselves). Returns whether the manager has such a limit.
    ///
    /// The limit is moved to match when the backend counts more spent than
    /// it does: it owes `burst − remaining` from now (calls of other
    /// processes on the same account, calls it never saw), and with nothing
    /// remaining it waits until `reset` (as [`defer`](Self::defer), up to
    /// [`max_defer`](crate::deadline::TimeLimits::max_defer)). A backend
    /// that says more remains than the limit holds is not believed: the
    /// limit's calls in flight are not in the backend's count yet. A reset
    /// of zero (now, or a time gone by) means the limit is whole again:
    /// the count moves nothing.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60).burst(10))
    ///     .limit("tokens", RateConfig::per_minute(6_000).burst(1_000))
    ///     .clock(portcullis::clock::ManualClock::new())
    ///     .build()?;
    /// // Another process on the account spent most of the tokens.
    /// assert!(manager.key("model-a").observe_remaining("tokens", 150, Some(Duration::from_secs(9))));
    /// assert_eq!(manager.limit("tokens").unwrap().peek("model-a").unwrap().remaining, 150);
    /// // Nothing left of the requests until the reset: the key waits for it.
    /// assert!(manager.key("model-a").observe_remaining("requests", 0, Some(Duration::from_secs(20))));
    /// assert_eq!(manager.peek("model-a").unwrap().next_in, Duration::from_secs(20));
    /// assert!(!manager.key("model-a").observe_remaining("images", 0, None));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn observe_remaining(&self, limit: &str, remaining: u64, reset: Option<Duration>) -> bool {
        self.manager
            .key_observe_remaining(self.key, limit, remaining, reset)
    }

    /// One logical call's retries under the manager's
    /// [`RetryPolicy`](crate::retry::RetryPolicy), its first attempt at
    /// `priority`: the way [`call`](ThrottleManager::call) and the client middleware
    /// retry, for edges of your own (see [`Retries`]). Counts the call in
    /// the key's retry budget. Without a policy, it never retries.
    ///
    /// ```
    /// use portcullis::retry::{GaveUp, RetryCause};
    /// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::error::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// let mut retries = manager.key("api").retries(Priority::HIGH);
    /// assert_eq!(retries.after(RetryCause::Overloaded { pause: None }).await, Err(GaveUp::NoPolicy));
    /// # Ok(())
    /// # }
    /// ```
    pub fn retries(self, priority: Priority) -> Retries<'m> {
        self.manager.key_retries(self.key, priority)
    }
}

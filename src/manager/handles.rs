//! Handles on one key and on the key space: what concerns one key (its
//! readings, its overrides, its tier, forgetting it) is asked of
//! [`ThrottleManager::key`], what concerns every key of the manager of
//! [`ThrottleManager::keys`] and [`ThrottleManager::settings`], so the
//! manager itself keeps only the verbs a call goes through.

use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use super::{KeySnapshot, ThrottleManager};
use crate::bulkhead::BulkheadConfig;
use crate::error::{ConfigError, Rejected};
use crate::priority::Priority;
use crate::rate::RateConfig;
use crate::registry::BorrowedKey;
use crate::retry::Retries;
use crate::throttle::ThrottleConfig;

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
    manager: &'m ThrottleManager<K>,
    key: &'m Q,
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
    /// What concerns `key` alone: its [`snapshot`](KeyHandle::snapshot)
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

    /// The key space as a whole: how many keys are live, and evicting the
    /// idle ones now.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// assert!(manager.keys().is_empty());
    /// manager.check("api").unwrap();
    /// assert_eq!(manager.keys().len(), 1);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn keys(&self) -> KeySpace<'_, K> {
        KeySpace { manager: self }
    }

    /// What the manager was built with that its edges and status pages
    /// read: its name, its priority levels, its call timeout, its named
    /// limits.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .name("users")
    ///     .build()?;
    /// assert_eq!(manager.settings().name(), Some("users"));
    /// assert_eq!(manager.settings().priority_levels(), 4);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn settings(&self) -> ManagerSettings<'_, K> {
        ManagerSettings { manager: self }
    }
}

/// # Readings
impl<K, Q> KeyHandle<'_, K, Q>
where
    K: Hash + Eq + Send + Sync + 'static,
    Q: BorrowedKey<K> + ?Sized,
{
    /// Everything `key`'s controls know now ([`KeySnapshot`]), or `None` if
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

    /// `key`'s current rate in calls per second, or `None` if the key is not
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

    /// How many of `key`'s calls may be in flight now: its bulkhead's fixed
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

    /// The probability that `key`'s throttle rejects a call at `priority`
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

    /// Pauses `key`'s rate for `pause`, as a server's `Retry-After` asks:
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

    /// What the backend says remains of one of `key`'s limits (`limit`: a
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

/// # Its own settings, its tier, its state
impl<K, Q> KeyHandle<'_, K, Q>
where
    K: Hash + Eq + Send + Sync + 'static,
    Q: BorrowedKey<K> + ?Sized,
{
    /// Gives `key` its own rate from now on, in place of its tier's or the
    /// default, keeping what the key's rate holds: its bucket is kept (no
    /// fresh burst, its debt rescaled to the new rate) and a rate it
    /// learned is clamped into the new bounds (a fixed quota's bounds are
    /// its rate). A key not live yet gets it when made.
    ///
    /// # Memory
    ///
    /// A key's own settings are kept until [`remove_overrides`](Self::remove_overrides)
    /// or a [`reload`](ThrottleManager::reload) drops them, whether the key is live or
    /// not: 150 to 250 bytes a key, not bounded by the key space's
    /// `max_keys`. Give them to keys the program knows (customers, hosts);
    /// for keys that come from the network, use a tier
    /// ([`tier_of`](crate::builder::ThrottleManagerBuilder::tier_of)) instead.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming each bad field under `rate_override` (with
    /// the key, if the manager names keys: `rate_override["KEY"]`); that
    /// the manager was built without a rate (a control cannot be added to a
    /// live manager); or, under `settings`, that it already holds half the
    /// 65,536 distinct settings it can.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(10).burst(5))
    ///     .build()?;
    /// manager.check("acme").unwrap(); // a live key: 10/s
    /// manager.key("acme").set_rate(RateConfig::per_second(50).burst(10))?;
    /// assert_eq!(manager.key("acme").rate(), Some(50.0));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn set_rate(&self, config: RateConfig) -> Result<(), ConfigError> {
        self.manager.key_set_rate_override(self.key, config)
    }

    /// Gives `key` its own throttle from now on. The key keeps its counts
    /// (a new ratio or floor applies to the counts it has), unless the
    /// window's length changed: then its counts start afresh.
    ///
    /// # Memory
    ///
    /// Kept as [`set_rate`](Self::set_rate) says (its
    /// "Memory"): not bounded by the key space.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming each bad field under `throttle_override`
    /// (with the key, if the manager names keys), or as
    /// [`set_rate`](Self::set_rate) for a manager without
    /// a throttle or with too many distinct settings.
    ///
    /// ```
    /// use portcullis::{ThrottleConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .build()?;
    /// manager.key("flaky.example").set_throttle(ThrottleConfig::new().ratio(3.0))?;
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn set_throttle(&self, config: ThrottleConfig) -> Result<(), ConfigError> {
        self.manager.key_set_throttle_override(self.key, config)
    }

    /// Gives `key` its own bulkhead from now on. Lowered, the calls in
    /// flight finish and none is admitted until fewer than the new limit
    /// remain; raised, waiters are admitted at once. A shorter queue keeps
    /// the waiters it has (none is dropped) and takes no newcomer until it
    /// is below its new length. A key keeps the kind of limit it was made
    /// with (fixed or learned, with CoDel or without) until it is
    /// [forgotten](Self::forget).
    ///
    /// # Memory
    ///
    /// Kept as [`set_rate`](Self::set_rate) says (its
    /// "Memory"): not bounded by the key space.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming each bad field under `bulkhead_override`
    /// (with the key, if the manager names keys), or as
    /// [`set_rate`](Self::set_rate) for a manager without
    /// a bulkhead or with too many distinct settings.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .bulkhead(BulkheadConfig::new(8))
    ///     .build()?;
    /// let _first = manager.try_acquire("db", Priority::HIGH).unwrap();
    /// manager.key("db").set_bulkhead(BulkheadConfig::new(1))?;
    /// assert!(manager.try_acquire("db", Priority::HIGH).is_err()); // one in flight already
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn set_bulkhead(&self, config: BulkheadConfig) -> Result<(), ConfigError> {
        self.manager.key_set_bulkhead_override(self.key, config)
    }

    /// Shadows `key` (`true`) or enforces its decisions (`false`) from its
    /// next call, whatever its tier and the manager say: see
    /// [`set_shadow`](Self::set_shadow).
    ///
    /// # Memory
    ///
    /// Kept as [`set_rate`](Self::set_rate) says (its
    /// "Memory"): not bounded by the key space.
    ///
    /// ```
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(1))
    ///     .build()?;
    /// manager.key("trial").set_shadow(true);
    /// assert!(manager.try_acquire("trial", Priority::HIGH).is_ok());
    /// assert!(manager.try_acquire("trial", Priority::HIGH).is_ok()); // would refuse: counted, let through
    /// assert!(manager.try_acquire("other", Priority::HIGH).is_ok());
    /// assert!(manager.try_acquire("other", Priority::HIGH).is_err());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn set_shadow(&self, shadow: bool) {
        self.manager.key_set_shadow_override(self.key, shadow)
    }

    /// Takes away every setting `key` was given for itself (in code or in
    /// the file): from its next call it has its tier's, else the defaults,
    /// kept across as any change keeps them.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(10))
    ///     .key_override("acme", Tier::new().rate(RateConfig::per_second(50)))
    ///     .build()?;
    /// manager.check("acme").unwrap();
    /// assert_eq!(manager.key("acme").rate(), Some(50.0));
    /// manager.key("acme").remove_overrides();
    /// assert_eq!(manager.key("acme").rate(), Some(10.0));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn remove_overrides(&self) {
        self.manager.key_remove_overrides(self.key)
    }

    /// Asks [`tier_of`](crate::builder::ThrottleManagerBuilder::tier_of) again which
    /// tier `key` is in, and moves the key there now (a customer changed
    /// plans), keeping its state as any change does; its named limits
    /// move with it. `tier_of` is asked
    /// when a key is made, by `retier`, and after a
    /// [`reload`](ThrottleManager::reload) or [`set_shadow`](Self::set_shadow), at the
    /// key's next call.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::sync::atomic::{AtomicBool, Ordering};
    ///
    /// static PREMIUM: AtomicBool = AtomicBool::new(false);
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(10))
    ///     .tier("premium", Tier::new().rate(RateConfig::per_second(100)))
    ///     .tier_of(|_| PREMIUM.load(Ordering::Relaxed).then_some("premium"))
    ///     .build()?;
    /// manager.check("acme").unwrap();
    /// assert_eq!(manager.key("acme").rate(), Some(10.0));
    /// PREMIUM.store(true, Ordering::Relaxed); // acme upgraded
    /// manager.key("acme").retier();
    /// assert_eq!(manager.key("acme").rate(), Some(100.0));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn retier(&self) {
        self.manager.key_retier(self.key)
    }

    /// Forgets `key` now: its next call starts afresh, as a new key's does
    /// (a full bucket, its rate at its start, an empty throttle window, an
    /// empty bulkhead, its tier read again). Returns whether the key was
    /// live. Its room in the key space is free at once. Its named limits
    /// ([`limit`](crate::builder::ThrottleManagerBuilder::limit)) are forgotten
    /// with it.
    ///
    /// Calls already admitted, and callers waiting, end on the state they
    /// started with: their outcomes count there and are neither lost nor
    /// applied to the new state. So for as long as they run, they are not
    /// counted against the new state's bulkhead: the key may have up to
    /// twice its limit in flight. A rate shared through a store is the
    /// fleet's and stays (see `RedisStore::reset`
    /// for that). Forgetting loosens the key's limits: it is for the
    /// program's own decisions (a tenant's plan changed, an operator's
    /// reset), not for input from the network.
    ///
    /// ```
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(1))
    ///     .clock(portcullis::clock::ManualClock::new())
    ///     .build()?;
    /// manager.try_acquire("acme", Priority::HIGH).unwrap().success();
    /// assert!(manager.try_acquire("acme", Priority::HIGH).is_err()); // a minute to wait
    /// assert!(manager.key("acme").forget());
    /// assert!(manager.try_acquire("acme", Priority::HIGH).is_ok()); // afresh
    /// assert!(!manager.key("nobody").forget());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn forget(&self) -> bool {
        self.manager.key_forget(self.key)
    }
}

/// The key space of a manager, from [`ThrottleManager::keys`].
#[derive(Clone, Copy)]
pub struct KeySpace<'m, K> {
    manager: &'m ThrottleManager<K>,
}

impl<K> fmt::Debug for KeySpace<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KeySpace").finish_non_exhaustive()
    }
}

impl<K> KeySpace<'_, K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// The number of live keys.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// manager.increment("a");
    /// manager.increment("b");
    /// assert_eq!(manager.keys().len(), 2);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.manager.key_count()
    }

    /// True when no key is live.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// assert!(manager.keys().is_empty());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every key that has been quiet for the idle TTL now, instead of
    /// waiting for the next new key to trigger a sweep. Returns how many keys
    /// went. Does nothing without an idle TTL.
    ///
    /// ```
    /// use portcullis::builder::KeySpaceConfig;
    /// use portcullis::clock::ManualClock;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .key_space(KeySpaceConfig::new().idle_ttl(Duration::from_secs(60)))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// manager.check("api").unwrap();
    /// clock.advance(Duration::from_secs(61));
    /// assert_eq!(manager.keys().evict_idle(), 1);
    /// assert!(manager.keys().is_empty());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn evict_idle(&self) -> usize {
        self.manager.evict_idle_keys()
    }
}

/// What a manager was built with, from [`ThrottleManager::settings`].
#[derive(Clone, Copy)]
pub struct ManagerSettings<'m, K> {
    manager: &'m ThrottleManager<K>,
}

impl<K> fmt::Debug for ManagerSettings<'_, K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManagerSettings").finish_non_exhaustive()
    }
}

impl<'m, K> ManagerSettings<'m, K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// The manager's [`name`](crate::builder::ThrottleManagerBuilder::name), if it
    /// has one.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(1.0)).build()?;
    /// assert_eq!(manager.settings().name(), None);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn name(&self) -> Option<&'m str> {
        self.manager.manager_name()
    }

    /// How many priority levels the manager tells apart
    /// ([`priority_levels`](crate::builder::ThrottleManagerBuilder::priority_levels)):
    /// priorities 0 to `priority_levels() - 1` are in range. For an edge
    /// that reads a priority from a request and must refuse one out of
    /// range as the client's mistake.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .priority_levels(2)
    ///     .build()?;
    /// assert_eq!(manager.settings().priority_levels(), 2);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn priority_levels(&self) -> u8 {
        self.manager.levels()
    }

    /// How long a call may run before it is dropped and counted as
    /// overload ([`call_timeout`](crate::deadline::TimeLimits::call_timeout));
    /// `None`: no limit. `call` applies it; an edge that runs the call
    /// itself (the client middleware) applies it too.
    ///
    /// ```
    /// use portcullis::deadline::TimeLimits;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .time_limits(TimeLimits::new().call_timeout(Duration::from_secs(5)))
    ///     .build()?;
    /// assert_eq!(manager.settings().call_timeout(), Some(Duration::from_secs(5)));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn call_timeout(&self) -> Option<Duration> {
        self.manager.configured_call_timeout()
    }

    /// The names of the manager's named limits, in the order declared.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(60))
    ///     .limit("input_tokens", RateConfig::per_minute(30_000))
    ///     .limit("output_tokens", RateConfig::per_minute(8_000))
    ///     .build()?;
    /// assert_eq!(manager.settings().limit_names().collect::<Vec<_>>(), ["input_tokens", "output_tokens"]);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn limit_names(&self) -> impl Iterator<Item = &'m str> + use<'m, K> {
        self.manager.named_limit_names()
    }
}

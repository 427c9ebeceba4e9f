//! One key's own settings through its handle: overrides, its tier,
//! forgetting it.

use std::hash::Hash;

use super::KeyHandle;
#[cfg(doc)]
use super::ThrottleManager;
use crate::bulkhead::BulkheadConfig;
use crate::error::ConfigError;
use crate::rate::RateConfig;
use crate::registry::BorrowedKey;
use crate::throttle::ThrottleConfig;

/// # Its own settings, its tier, its state
impl<K, Q> KeyHandle<'_, K, Q>
where
    K: Hash + Eq + Send + Sync + 'static,
    Q: BorrowedKey<K> + ?Sized,
{
    /// Gives the key its own rate from now on, in place of its tier's or the
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

    /// Gives the key its own throttle from now on. The key keeps its counts
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

    /// Gives the key its own bulkhead from now on. Lowered, the calls in
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

    /// Shadows the key (`true`) or enforces its decisions (`false`) from its
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

    /// Takes away every setting the key was given for itself (in code or in
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
    /// tier the key is in, and moves the key there now (a customer changed
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

    /// Forgets the key now: its next call starts afresh, as a new key's does
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

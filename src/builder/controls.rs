//! The builder's settings of the three controls: the defaults every key
//! gets, and the keys that get their own.

use std::fmt;
use std::hash::Hash;

use super::ThrottleManagerBuilder;
use crate::bulkhead::BulkheadConfig;
use crate::rate::RateConfig;
use crate::throttle::ThrottleConfig;

/// # The controls
impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Every key gets an adaptive rate with these settings, unless an
    /// override gives it others.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// assert_eq!(manager.increment("api"), Some(10.3));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn rate(mut self, config: RateConfig) -> Self {
        self.rate = Some(config);
        self
    }

    /// `key` gets its own rate settings. Checked by `build` like the default,
    /// under the name `rate_override[KEY]`.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .rate_override("slow.example", RateConfig::new(1.0).bounds(0.5, 2.0).increment(0.25))
    ///     .build()?;
    /// assert_eq!(manager.increment("slow.example"), Some(1.25));
    /// assert_eq!(manager.increment("fast.example"), Some(10.3));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn rate_override(mut self, key: impl Into<K>, config: RateConfig) -> Self
    where
        K: fmt::Debug,
    {
        let key = key.into();
        let name = format!("rate_override[{key:?}]");
        self.rate_overrides.push((key, name, config));
        self
    }

    /// `key` gets its own throttle settings (a throttle even if other keys
    /// have none). Checked by `build` like the default, under the name
    /// `throttle_override[KEY]`.
    ///
    /// ```
    /// use portcullis::{ThrottleConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .throttle_override("flaky.example", ThrottleConfig::new().window(Duration::from_secs(10)))
    ///     .build()?;
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn throttle_override(mut self, key: impl Into<K>, config: ThrottleConfig) -> Self
    where
        K: fmt::Debug,
    {
        let key = key.into();
        let name = format!("throttle_override[{key:?}]");
        self.throttle_overrides.push((key, name, config));
        self
    }

    /// `key` gets its own bulkhead settings (a bulkhead even if other keys
    /// have none). Checked by `build` like the default, under the name
    /// `bulkhead_override[KEY]`.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .bulkhead(BulkheadConfig::new(100))
    ///     .bulkhead_override("api.github.com", BulkheadConfig::new(1))
    ///     .build()?;
    /// let _one = manager.try_acquire("api.github.com", Priority::HIGH).unwrap();
    /// assert!(manager.try_acquire("api.github.com", Priority::HIGH).is_err());
    /// assert!(manager.try_acquire("example.com", Priority::HIGH).is_ok());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn bulkhead_override(mut self, key: impl Into<K>, config: BulkheadConfig) -> Self
    where
        K: fmt::Debug,
    {
        let key = key.into();
        let name = format!("bulkhead_override[{key:?}]");
        self.bulkhead_overrides.push((key, name, config));
        self
    }

    /// Every key gets an adaptive throttle with these settings: calls are
    /// shed locally, by priority, while the key's backend keeps failing.
    ///
    /// ```
    /// use portcullis::{ThrottleConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// assert_eq!(manager.rejection_probability("api", portcullis::Priority::LOW), None); // not live yet
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn throttle(mut self, config: ThrottleConfig) -> Self {
        self.throttle = Some(config);
        self
    }

    /// Every key gets a bulkhead with these settings: a limit on its calls
    /// in flight, with a small priority queue.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, Priority, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().bulkhead(BulkheadConfig::new(1)).build()?;
    /// let permit = manager.try_acquire("db", Priority::HIGH).unwrap();
    /// assert!(manager.try_acquire("db", Priority::HIGH).is_err()); // one at a time
    /// drop(permit);
    /// assert!(manager.try_acquire("db", Priority::HIGH).is_ok());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn bulkhead(mut self, config: BulkheadConfig) -> Self {
        self.bulkhead = Some(config);
        self
    }
}

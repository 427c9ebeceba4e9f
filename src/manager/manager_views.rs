//! Views of the whole manager: its key space ([`KeySpace`]) and what it
//! was built with ([`ManagerSettings`]).

use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use super::ThrottleManager;

/// # The key space and the built settings
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
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

    /// The clock the manager reads ([`clock`](crate::builder::ThrottleManagerBuilder::clock),
    /// else [`default_clock`](crate::clock::default_clock)'s): for an edge
    /// that builds a manager of its own beside this one and must keep time
    /// with it (the server layer's service guard does).
    ///
    /// ```
    /// use portcullis::clock::ManualClock;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// let beside = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(1))
    ///     .clock(manager.settings().clock())
    ///     .build()?;
    /// beside.check("api").unwrap();
    /// assert!(beside.check("api").is_err());
    /// clock.advance(Duration::from_secs(1)); // moves both managers' time
    /// assert!(beside.check("api").is_ok());
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn clock(&self) -> std::sync::Arc<dyn crate::clock::Clock> {
        std::sync::Arc::clone(self.manager.core().clock())
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

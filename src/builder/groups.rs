//! The builder's settings that come in groups: the time limits a caller
//! meets ([`TimeLimits`], which the deadlines' module holds), and the key
//! space's bounds. Each group is a value whose fields
//! are set or left alone; the builder takes the ones set, so a group never
//! undoes a setting made before it.

use std::fmt;
use std::hash::Hash;
use std::time::Duration;

use super::{ThrottleManagerBuilder, Tier};
use crate::deadline::TimeLimits;

/// The key space's bounds, for [`ThrottleManagerBuilder::key_space`]: how
/// many keys it holds, how long an idle one is kept, and how long a pause
/// may hold a place in a full one.
///
/// ```
/// use portcullis::builder::KeySpaceConfig;
/// use portcullis::{RateConfig, ThrottleManager};
/// use std::time::Duration;
///
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0))
///     .key_space(KeySpaceConfig::new().max_keys(10_000).idle_ttl(Duration::from_secs(300)))
///     .build()?;
/// # let _ = manager;
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeySpaceConfig {
    pub(crate) max_keys: Option<usize>,
    pub(crate) idle_ttl: Option<Duration>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) keep_idle_keys: bool,
}

impl KeySpaceConfig {
    /// No bound set: each keeps the builder's.
    ///
    /// ```
    /// use portcullis::builder::KeySpaceConfig;
    /// assert_eq!(KeySpaceConfig::new(), Default::default());
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// At most `max_keys` keys live at once (default 1,000,000). A new key
    /// in a full key space evicts an idle one, or waits for room within
    /// the call's [`max_wait`](TimeLimits::max_wait) (a `try_` call is
    /// refused with [`KeySpaceFull`](crate::error::RejectReason::KeySpaceFull)).
    ///
    /// ```
    /// use portcullis::builder::KeySpaceConfig;
    /// let bounds = KeySpaceConfig::new().max_keys(2);
    /// # let _ = bounds;
    /// ```
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = Some(max_keys);
        self
    }

    /// A key whose bucket has been full for `ttl` (no call admitted, no
    /// debt left) is forgotten, learned rate included (default 10 minutes,
    /// at least 1 s).
    ///
    /// ```
    /// use portcullis::builder::KeySpaceConfig;
    /// use std::time::Duration;
    ///
    /// let bounds = KeySpaceConfig::new().idle_ttl(Duration::from_secs(30));
    /// # let _ = bounds;
    /// ```
    pub fn idle_ttl(mut self, ttl: Duration) -> Self {
        self.idle_ttl = Some(ttl);
        self
    }

    /// In a full key space, the longest a pause or shedding may hold a
    /// key's place (default 60 s); `Duration::MAX`: never.
    ///
    /// ```
    /// use portcullis::builder::KeySpaceConfig;
    /// use std::time::Duration;
    ///
    /// let bounds = KeySpaceConfig::new().max_hold(Duration::from_secs(30));
    /// # let _ = bounds;
    /// ```
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.max_hold = Some(hold);
        self
    }

    /// Keeps keys until the key cap needs their room: no idle TTL. Not with
    /// [`idle_ttl`](Self::idle_ttl): `build()` names both.
    ///
    /// ```
    /// use portcullis::builder::KeySpaceConfig;
    /// let bounds = KeySpaceConfig::new().keep_idle_keys();
    /// # let _ = bounds;
    /// ```
    pub fn keep_idle_keys(mut self) -> Self {
        self.keep_idle_keys = true;
        self
    }
}

/// # Groups of settings
impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// The time limits a caller meets ([`TimeLimits`]: the wait to be
    /// admitted, the call's run); each limit set replaces the builder's,
    /// each left alone keeps it.
    ///
    /// ```
    /// use portcullis::deadline::TimeLimits;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .time_limits(TimeLimits::new().max_wait(Duration::from_secs(2)))
    ///     .build()?;
    /// # let _ = manager;
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn time_limits(mut self, limits: TimeLimits) -> Self {
        if let Some(max) = limits.max_wait {
            self.calls.max_wait = Some(max);
        }
        self.calls.max_wait_for.extend(limits.max_wait_for);
        if let Some(timeout) = limits.call_timeout {
            self.calls.call_timeout = Some(timeout);
        }
        if let Some(max) = limits.max_defer {
            self.calls.max_defer = max;
        }
        self
    }

    /// The key space's bounds ([`KeySpaceConfig`]); each bound set
    /// replaces the builder's, each left alone keeps it.
    ///
    /// ```
    /// use portcullis::builder::KeySpaceConfig;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .key_space(KeySpaceConfig::new().max_keys(1))
    ///     .build()?;
    /// manager.check("a").unwrap();
    /// assert!(manager.check("b").is_err()); // "a" still owes its token
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn key_space(mut self, bounds: KeySpaceConfig) -> Self {
        if let Some(max_keys) = bounds.max_keys {
            self.key_space.max_keys = max_keys;
        }
        if let Some(ttl) = bounds.idle_ttl {
            self.key_space.idle_ttl = Some(ttl);
        }
        if let Some(hold) = bounds.max_hold {
            self.key_space.max_hold = hold;
        }
        self.key_space.keep_idle_keys |= bounds.keep_idle_keys;
        self
    }

    /// Settings of one key over its tier's and the defaults (a partner
    /// with a contract, a host known to be slow): what `settings` sets
    /// replaces, for `key` alone, what the key would have; what it leaves
    /// alone keeps it. At run time,
    /// [`KeyHandle::set_rate`](crate::manager::KeyHandle::set_rate) and
    /// its siblings do the same.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// use portcullis::{BulkheadConfig, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .key_override("partner", Tier::new().rate(RateConfig::adaptive(100.0)).bulkhead(BulkheadConfig::new(50)))
    ///     .build()?;
    /// manager.check("partner").unwrap();
    /// assert_eq!(manager.key("partner").rate(), Some(100.0));
    /// assert_eq!(manager.key("partner").concurrency_limit(), Some(50));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn key_override(mut self, key: impl Into<K>, settings: Tier) -> Self
    where
        K: fmt::Debug + Clone,
    {
        let key = key.into();
        let Tier {
            rate,
            throttle,
            bulkhead,
            shadow,
            limits,
            ..
        } = settings;
        let path = |what: &str| format!("{what}_override[{key:?}]");
        if let Some(config) = rate {
            let name = path("rate");
            self.controls
                .rate_overrides
                .push((key.clone(), name, config));
        }
        if let Some(config) = throttle {
            let name = path("throttle");
            self.controls
                .throttle_overrides
                .push((key.clone(), name, config));
        }
        if let Some(config) = bulkhead {
            let name = path("bulkhead");
            self.controls
                .bulkhead_overrides
                .push((key.clone(), name, config));
        }
        if let Some(shadow) = shadow {
            self.controls.shadow_overrides.push((key.clone(), shadow));
        }
        for (limit, config) in limits {
            let name = format!("limit_override[{limit:?}]");
            self.limits
                .overrides
                .push((key.clone(), limit, name, config));
        }
        self
    }
}

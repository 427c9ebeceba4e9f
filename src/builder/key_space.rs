//! The builder's settings of the key space and of time: how many keys, how
//! long an idle key is kept, how keys are named outside, and the clock.

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::ThrottleManagerBuilder;
use crate::clock::Clock;

/// # The key space, telemetry and time
impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// How events and per-key metrics name a key. Without it they do not:
    /// keys can be secrets (API tokens, session ids) that must never reach
    /// a log, and a key type need not be `Debug`. Events then carry the
    /// priority and the numbers, not the key.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .key_names(|host: &String| host.clone()) // hosts are fine to log
    ///     .build()?;
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn key_names(mut self, name: impl Fn(&K) -> String + Send + Sync + 'static) -> Self {
        self.key_names = Some(Box::new(name));
        self
    }

    /// Labels every metric with the key's name (from
    /// [`key_names`](Self::key_names), which must be set). Off by default:
    /// keys from untrusted input would give a metric unbounded cardinality,
    /// and the label costs a formatted string per call. Needs feature
    /// `metrics`; [the guide](crate::guide::observability) lists the
    /// metrics.
    ///
    /// ```
    /// use portcullis::{BulkheadConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .bulkhead(BulkheadConfig::new(16))
    ///     .key_names(|host: &String| host.clone())
    ///     .metrics_per_key(true) // a few known hosts: bounded cardinality
    ///     .build()?;
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_per_key(mut self, per_key: bool) -> Self {
        self.metrics_per_key = per_key;
        self
    }

    /// Names the manager: the `manager` label on every metric it records
    /// (feature `metrics`) and the title of its
    /// [status page](crate::status) (feature `status`), so that two
    /// managers of one process (hosts, and a database) keep apart. 1 to 64
    /// bytes, no control characters.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let hosts = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .name("hosts")
    ///     .build()?;
    /// assert_eq!(hosts.name(), Some("hosts"));
    /// let refused = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .name("")
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(refused.problems()[0].field(), "name");
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// At most this many keys are live at once (default 1,000,000). At the
    /// cap, a new key is refused with
    /// [`RejectReason::KeySpaceFull`](crate::RejectReason::KeySpaceFull)
    /// while no live key can be evicted (each still limits someone);
    /// [`retry_after`](crate::Rejected::retry_after) is then the time until
    /// the first of them can be.
    ///
    /// ```
    /// use portcullis::clock::ManualClock;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<u32>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .max_keys(2)
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// manager.check(&1).unwrap();
    /// manager.check(&2).unwrap();
    /// assert_eq!(manager.check(&3).unwrap_err().reason(), portcullis::RejectReason::KeySpaceFull); // 1 and 2 still owe tokens
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// A key whose bucket has been full for `ttl` (no call admitted, no debt
    /// left) is forgotten, learned rate included (default 10 minutes, at
    /// least 1 s). Each new key evicts, in passing, up to 64 idle keys, the
    /// longest unvisited first, so no call pays for a sweep of the whole key
    /// space; [`ThrottleManager::evict_idle`](crate::ThrottleManager::evict_idle)
    /// sweeps it all at once.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .idle_ttl(Duration::from_secs(30))
    ///     .build()?;
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn idle_ttl(mut self, ttl: Duration) -> Self {
        self.idle_ttl = Some(ttl);
        self
    }

    /// In a full key space, the longest a pause or shedding may hold a
    /// key's place (default 60 s): a key whose debt is paid, but whose
    /// pause ([`defer`](crate::ThrottleManager::defer), a server's
    /// `Retry-After`) or throttle's shedding would last longer than this
    /// from now, may be evicted to make room, and goes first. So hosts that
    /// answer every request with `Retry-After: 300` cannot hold the key
    /// space for minutes. Forgetting a pause costs one more request to a
    /// host that will ask again; forgetting shedding, a few calls to a
    /// backend that fails them. `Duration::MAX`: never.
    ///
    /// Debt is never forgiven this way: calls a key's rate admitted hold it
    /// until paid, at most `burst` intervals of its rate. (A server with
    /// quotas per day therefore holds a key per active client for a day:
    /// size `max_keys` for them.) Among the keys that may go, those whose
    /// rate never moved go before those that learned one.
    ///
    /// ```
    /// use portcullis::clock::ManualClock;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .max_keys(1)
    ///     .max_hold(Duration::from_secs(30))
    ///     .clock(ManualClock::new())
    ///     .build()?;
    /// manager.defer("slow.example", Duration::from_secs(300)); // Retry-After: 300
    /// manager.check("other.example").unwrap(); // room made: the pause was too long to hold it
    /// assert_eq!(manager.rate("slow.example"), None);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn max_hold(mut self, hold: Duration) -> Self {
        self.max_hold = hold;
        self
    }

    /// Keeps keys until the key cap needs their room.
    ///
    /// ```
    /// use portcullis::clock::ManualClock;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .keep_idle_keys()
    ///     .clock(clock.clone())
    ///     .build()?;
    /// manager.increment("api");
    /// clock.advance(Duration::from_secs(86_400));
    /// assert_eq!(manager.evict_idle(), 0);
    /// assert_eq!(manager.rate("api"), Some(10.3)); // still learned
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn keep_idle_keys(mut self) -> Self {
        self.idle_ttl = None;
        self
    }

    /// The time source for every control. Default: [`default_clock`](crate::clock::default_clock), chosen
    /// when `build` runs ([`QuantaClock`](crate::clock::QuantaClock), or
    /// [`TokioClock`](crate::clock::TokioClock) inside paused tokio time).
    ///
    /// ```
    /// use portcullis::clock::ManualClock;
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(1.0))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// manager.check("api").unwrap();
    /// assert!(manager.check("api").is_err());
    /// clock.advance(Duration::from_secs(1));
    /// assert!(manager.check("api").is_ok());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }
}

//! [`ThrottleManagerBuilder`]: how a [`ThrottleManager`] is configured.

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crate::bulkhead::BulkheadConfig;
use crate::clock::{Clock, Nanos, default_clock, nanos};
use crate::core::{Control, Core, RandomSource};
use crate::error::{ConfigError, ConfigProblem, Problems};
use crate::key::KeyState;
use crate::manager::{ControlOverrides, KeyNames, Overrides, Shared, ThrottleManager};
use crate::outcome::{Classifier, Outcome};
use crate::priority::{OutOfRange, Priorities, Priority};
use crate::rate::{RateConfig, ValidRateConfig};
use crate::registry::Registry;
use crate::throttle::ThrottleConfig;

type RatePerKey<K> = dyn Fn(&K) -> Option<ValidRateConfig> + Send + Sync;

/// The default cap on live keys.
const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// The default idle TTL: a key quiet this long is forgotten.
const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(10 * 60);

/// The default number of priority levels: `Priority::HIGH` to `Priority::LOW`.
const DEFAULT_PRIORITY_LEVELS: u8 = 4;

/// The default longest pause a `Retry-After` can impose on a key.
const DEFAULT_MAX_DEFER: Duration = Duration::from_secs(5 * 60);

/// The most priority levels a manager may have.
const MAX_PRIORITY_LEVELS: u8 = 16;

/// Configures a [`ThrottleManager`]: its controls, per-key overrides, the
/// bounds of its key space and its clock.
///
/// Nothing is checked until [`build`](ThrottleManagerBuilder::build), which
/// reports every problem at once.
///
/// # Example
///
/// ```
/// use portcullis::{RateConfig, ThrottleManager};
/// use std::time::Duration;
///
/// let premium = RateConfig::new(100.0).bounds(10.0, 1_000.0).validate()?;
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::new(10.0).bounds(1.0, 100.0))
///     .rate_override("api.github.com", RateConfig::new(5.0).bounds(1.0, 10.0))
///     .rate_per_key(move |key: &String| key.starts_with("premium-").then(|| premium.clone()))
///     .max_keys(10_000)
///     .idle_ttl(Duration::from_secs(300))
///     .build()?;
/// manager.increment("api.github.com");
/// manager.increment("premium-42");
/// assert_eq!(manager.rate("api.github.com"), Some(5.25));
/// assert_eq!(manager.rate("premium-42"), Some(105.0));
/// # Ok::<(), portcullis::ConfigError>(())
/// ```
pub struct ThrottleManagerBuilder<K> {
    pub(crate) rate: Option<RateConfig>,
    pub(crate) rate_overrides: Vec<(K, String, RateConfig)>,
    pub(crate) throttle_overrides: Vec<(K, String, ThrottleConfig)>,
    pub(crate) bulkhead_overrides: Vec<(K, String, BulkheadConfig)>,
    pub(crate) rate_per_key: Option<Box<RatePerKey<K>>>,
    pub(crate) throttle: Option<ThrottleConfig>,
    pub(crate) bulkhead: Option<BulkheadConfig>,
    pub(crate) priority_levels: u8,
    pub(crate) out_of_range: OutOfRange,
    pub(crate) random: Option<Box<RandomSource>>,
    pub(crate) classifier: Option<Box<Classifier>>,
    pub(crate) call_timeout: Option<Duration>,
    pub(crate) max_defer: Duration,
    pub(crate) max_wait: Option<Duration>,
    /// Per-priority `max_wait`s, by level, in the order given.
    pub(crate) max_wait_for: Vec<(Priority, Duration)>,
    pub(crate) max_keys: usize,
    pub(crate) idle_ttl: Option<Duration>,
    pub(crate) clock: Option<Arc<dyn Clock>>,
    /// How events and per-key metrics name a key.
    pub(crate) key_names: Option<Box<KeyNames<K>>>,
    /// Whether metrics carry a `key` label.
    pub(crate) metrics_per_key: bool,
    /// Where each default control is named in errors: `rate` when set in
    /// code (`rate.burst`), `default.rate` when read from a file
    /// (`default.rate.burst`).
    pub(crate) paths: ControlPaths,
    /// Problems found while reading a [`ManagerConfig`], reported by `build`.
    pub(crate) config_problems: Vec<ConfigProblem>,
}

impl<K> fmt::Debug for ThrottleManagerBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleManagerBuilder")
            .field("rate", &self.rate)
            .field("rate_overrides", &self.rate_overrides.len())
            .field("throttle_overrides", &self.throttle_overrides.len())
            .field("bulkhead_overrides", &self.bulkhead_overrides.len())
            .field("rate_per_key", &self.rate_per_key.is_some())
            .field("throttle", &self.throttle)
            .field("bulkhead", &self.bulkhead)
            .field("priority_levels", &self.priority_levels)
            .field("out_of_range", &self.out_of_range)
            .field("random", &self.random.is_some())
            .field("classifier", &self.classifier.is_some())
            .field("call_timeout", &self.call_timeout)
            .field("max_defer", &self.max_defer)
            .field("max_wait", &self.max_wait)
            .field("max_wait_for", &self.max_wait_for)
            .field("max_keys", &self.max_keys)
            .field("idle_ttl", &self.idle_ttl)
            .field("clock", &self.clock)
            .field("key_names", &self.key_names.is_some())
            .field("metrics_per_key", &self.metrics_per_key)
            .finish()
    }
}

impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Starts configuring a manager.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<u64>::builder().rate(RateConfig::new(5.0)).build()?;
    /// assert!(manager.is_empty());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn builder() -> ThrottleManagerBuilder<K> {
        ThrottleManagerBuilder::new()
    }
}

impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    pub(crate) fn new() -> Self {
        Self {
            rate: None,
            rate_overrides: Vec::new(),
            throttle_overrides: Vec::new(),
            bulkhead_overrides: Vec::new(),
            rate_per_key: None,
            throttle: None,
            bulkhead: None,
            priority_levels: DEFAULT_PRIORITY_LEVELS,
            out_of_range: OutOfRange::default(),
            random: None,
            classifier: None,
            call_timeout: None,
            max_defer: DEFAULT_MAX_DEFER,
            max_wait: None,
            max_wait_for: Vec::new(),
            max_keys: DEFAULT_MAX_KEYS,
            idle_ttl: Some(DEFAULT_IDLE_TTL),
            clock: None,
            key_names: None,
            metrics_per_key: false,
            paths: ControlPaths::default(),
            config_problems: Vec::new(),
        }
    }

    /// Every key gets an adaptive rate with these settings, unless an
    /// override gives it others.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// assert_eq!(manager.increment("api"), Some(10.5));
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
    ///     .rate_override("slow.example", RateConfig::new(1.0).bounds(0.5, 2.0).increment(1.0))
    ///     .build()?;
    /// assert_eq!(manager.increment("slow.example"), Some(2.0));
    /// assert_eq!(manager.increment("fast.example"), Some(10.5));
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

    /// Consulted once per new key that has no exact override: `Some` gives
    /// the key those settings, `None` the default. Configs must be validated
    /// up front ([`RateConfig::validate`]), so a bad one can't surface on a
    /// hot path.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let internal = RateConfig::new(1_000.0).validate()?;
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .rate_per_key(move |host: &String| host.ends_with(".internal").then(|| internal.clone()))
    ///     .build()?;
    /// assert_eq!(manager.increment("db.internal"), Some(1_050.0));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn rate_per_key(
        mut self,
        settings: impl Fn(&K) -> Option<ValidRateConfig> + Send + Sync + 'static,
    ) -> Self {
        self.rate_per_key = Some(Box::new(settings));
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

    /// How many priority levels calls may have: `0 ..= levels - 1`
    /// (default 4, [`Priority::HIGH`](crate::Priority::HIGH) to
    /// [`Priority::LOW`](crate::Priority::LOW)). From 1 to 16; each level
    /// costs a throttled key 96 bytes.
    ///
    /// ```
    /// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .priority_levels(8)
    ///     .build()?;
    /// let permit = manager.try_acquire("api", Priority::new(7)).unwrap();
    /// assert_eq!(permit.priority(), Priority::new(7));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn priority_levels(mut self, levels: u8) -> Self {
        self.priority_levels = levels;
        self
    }

    /// What happens to a priority beyond the levels (default
    /// [`OutOfRange::ClampToLowest`]).
    ///
    /// ```
    /// use portcullis::priority::OutOfRange;
    /// use portcullis::{ThrottleConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .out_of_range(OutOfRange::Reject)
    ///     .build()?;
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn out_of_range(mut self, policy: OutOfRange) -> Self {
        self.out_of_range = policy;
        self
    }

    /// Where the throttle's shedding decisions draw their randomness: a
    /// function returning a uniform number in `[0, 1)`. For deterministic
    /// tests; the default is a fast per-thread generator.
    ///
    /// ```
    /// use portcullis::{Priority, ThrottleConfig, ThrottleManager};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .throttle(ThrottleConfig::new())
    ///     .random_source(|| 0.5) // shed exactly when the probability is above 0.5
    ///     .build()?;
    /// for _ in 0..100 {
    ///     manager.decrement("db"); // probability 0.625
    /// }
    /// assert!(manager.try_acquire("db", Priority::HIGH).is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub fn random_source(mut self, random: impl Fn() -> f64 + Send + Sync + 'static) -> Self {
        self.random = Some(Box::new(random));
        self
    }

    /// Judges the errors of [`call`](ThrottleManager::call) that were not
    /// marked with [`overloaded`](crate::overloaded): [`Outcome::Overloaded`]
    /// for errors that are capacity problems across a codebase (timeouts,
    /// refused or reset connections), [`Outcome::Neutral`] for the rest.
    /// Without one, unmarked errors are neutral. [`transport_overload`]
    /// covers `std::io` errors and tokio timeouts.
    ///
    /// [`transport_overload`]: crate::outcome::transport_overload
    ///
    /// ```
    /// use portcullis::outcome::transport_overload;
    /// use portcullis::{Outcome, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     // With reqwest, add its own timeouts:
    ///     // .classifier(|e| match e.downcast_ref::<reqwest::Error>() {
    ///     //     Some(e) if e.is_timeout() || e.is_connect() => Outcome::Overloaded,
    ///     //     _ => transport_overload(e),
    ///     // })
    ///     .classifier(transport_overload)
    ///     .build()?;
    /// # let _ = Outcome::Neutral;
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn classifier(
        mut self,
        classify: impl Fn(&(dyn std::error::Error + 'static)) -> Outcome + Send + Sync + 'static,
    ) -> Self {
        self.classifier = Some(Box::new(classify));
        self
    }

    /// Every [`call`](ThrottleManager::call) still running after `timeout`
    /// is dropped and counted as a capacity failure (default: none). Above 0.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .call_timeout(Duration::from_secs(10))
    ///     .build()?;
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = Some(timeout);
        self
    }

    /// The longest pause [`defer`](ThrottleManager::defer) applies (default
    /// 5 minutes): a server asking for an absurd `Retry-After`
    /// gets this instead.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .max_defer(Duration::from_secs(60))
    ///     .build()?;
    /// assert_eq!(manager.defer("api", Duration::from_secs(86_400)), Some(Duration::from_secs(60)));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn max_defer(mut self, max: Duration) -> Self {
        self.max_defer = max;
        self
    }

    /// The longest [`acquire`](ThrottleManager::acquire) and
    /// [`call`](ThrottleManager::call) wait for a rate token (default: no
    /// limit). A call whose token lies further ahead is rejected at once
    /// with [`RateLimited`](crate::RejectReason::RateLimited) and the wait it
    /// would have had as its `retry_after`, and takes no token.
    ///
    /// Set it when demand can outrun the rate for long (a service answering
    /// users, rather than a crawler working through a list): unbounded, the
    /// queue of waiters and their latency grow without end. Wrapping
    /// `acquire` in a timeout instead is worse: each waiter that gives up
    /// leaves its reserved slot empty whenever someone has reserved after
    /// it, so under sustained overload the rate's slots are spent on calls
    /// that never happen. `Duration::ZERO` never waits (as
    /// [`try_acquire`](ThrottleManager::try_acquire)). [`wait`](ThrottleManager::wait)
    /// always waits.
    ///
    /// ```
    /// use portcullis::{Priority, RateConfig, RejectReason, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0)) // a token every 100 ms
    ///     .max_wait(Duration::from_millis(150))
    ///     .build()?;
    /// // (Permits dropped unreported are neutral: the rate stays 10/s.)
    /// drop(manager.acquire("api", Priority::LOW).await.unwrap()); // at once
    /// drop(manager.acquire("api", Priority::LOW).await.unwrap()); // after 100 ms
    /// // The next token would be 100 ms away, then one 200 ms away: too far.
    /// let a = manager.acquire("api", Priority::LOW);
    /// let b = manager.acquire("api", Priority::LOW);
    /// let (a, b) = tokio::join!(a, b);
    /// assert!(a.is_ok());
    /// let rejected = b.unwrap_err();
    /// assert_eq!(rejected.reason(), RejectReason::RateLimited);
    /// assert_eq!(rejected.retry_after(), Some(Duration::from_millis(200)));
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_wait(mut self, max: Duration) -> Self {
        self.max_wait = Some(max);
        self
    }

    /// The longest a call at `priority` waits for a rate token, in place of
    /// [`max_wait`](Self::max_wait) for that priority.
    ///
    /// The rate's queue is first come, first served, whatever the priority.
    /// Under sustained overload it fills with whatever arrives most, and an
    /// important call gives up as often as any other. A shorter wait for
    /// less important calls keeps the queue shallow enough for the important
    /// ones: they wait behind at most that much, and the others take the
    /// tokens they leave. The priority must be one of the manager's levels
    /// (checked by [`build`](Self::build)).
    ///
    /// ```
    /// use portcullis::{Priority, RateConfig, RejectReason, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0)) // a token every 100 ms
    ///     .max_wait(Duration::from_secs(1))
    ///     .max_wait_for(Priority::LOW, Duration::from_millis(150))
    ///     .build()?;
    /// drop(manager.acquire("api", Priority::LOW).await.unwrap()); // at once
    /// let (low, high) = tokio::join!(
    ///     async {
    ///         let first = manager.acquire("api", Priority::LOW).await; // waits 100 ms
    ///         let second = manager.acquire("api", Priority::LOW).await; // would wait 200 ms
    ///         (first.is_ok(), second.map(drop).map_err(|r| r.reason()))
    ///     },
    ///     manager.acquire("api", Priority::HIGH), // waits 200 ms: within its 1 s
    /// );
    /// assert_eq!(low, (true, Err(RejectReason::RateLimited)));
    /// assert!(high.is_ok());
    /// # Ok(())
    /// # }
    /// ```
    pub fn max_wait_for(mut self, priority: Priority, max: Duration) -> Self {
        self.max_wait_for.push((priority, max));
        self
    }

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
    /// `metrics`; see the crate's metrics table in its README.
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
    pub fn metrics_per_key(mut self, per_key: bool) -> Self {
        self.metrics_per_key = per_key;
        self
    }

    /// At most this many keys are live at once (default
    /// 1,000,000). See [`RateLimited::key_space_full`](crate::RateLimited::key_space_full) for what a
    /// new key meets at the cap.
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
    /// assert!(manager.check(&3).unwrap_err().key_space_full()); // 1 and 2 still owe tokens
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn max_keys(mut self, max_keys: usize) -> Self {
        self.max_keys = max_keys;
        self
    }

    /// A key whose bucket has been full for `ttl` (no call admitted, no debt
    /// left) is forgotten, learned rate included (default
    /// 10 minutes). Sweeps run as new keys arrive, at most twice
    /// per `ttl`, or on [`ThrottleManager::evict_idle`].
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
    /// assert_eq!(manager.rate("api"), Some(10.5)); // still learned
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn keep_idle_keys(mut self) -> Self {
        self.idle_ttl = None;
        self
    }

    /// The time source for every control. Default: [`default_clock`], chosen
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

    /// Checks every setting and builds the manager.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] listing every invalid field: no control configured,
    /// a bad rate or throttle config (default or override), `max_keys` of 0,
    /// priority levels outside 1 to 16.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// assert!(ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build().is_ok());
    /// let err = ThrottleManager::<String>::builder().build().unwrap_err();
    /// assert_eq!(err.problems()[0].field(), "controls");
    /// ```
    pub fn build(self) -> Result<ThrottleManager<K>, ConfigError> {
        let mut found = self.config_problems;
        let no_control = self.rate.is_none() && self.throttle.is_none() && self.bulkhead.is_none();
        let no_override = self.rate_overrides.is_empty()
            && self.throttle_overrides.is_empty()
            && self.bulkhead_overrides.is_empty();
        if no_control && no_override {
            Problems::new("", &mut found).add(
                "controls",
                "no control configured; call .rate(...), .throttle(...) or .bulkhead(...)",
            );
        }
        let (rate, mut rate_overrides) = control(
            self.paths.rate,
            self.rate.as_ref(),
            self.rate_overrides,
            RateConfig::check,
            &mut found,
        );
        let (throttle, throttle_overrides) = control(
            self.paths.throttle,
            self.throttle.as_ref(),
            self.throttle_overrides,
            ThrottleConfig::check,
            &mut found,
        );
        let (bulkhead, bulkhead_overrides) = control(
            self.paths.bulkhead,
            self.bulkhead.as_ref(),
            self.bulkhead_overrides,
            BulkheadConfig::check,
            &mut found,
        );
        if !(1..=MAX_PRIORITY_LEVELS).contains(&self.priority_levels) {
            Problems::new("", &mut found).add(
                "priority_levels",
                format!(
                    "must be from 1 to {MAX_PRIORITY_LEVELS}, got {}",
                    self.priority_levels
                ),
            );
        }
        if self.call_timeout == Some(Duration::ZERO) {
            Problems::new("", &mut found).add("call_timeout", "must be above 0, got 0ns");
        }
        for (priority, _) in &self.max_wait_for {
            if priority.level() >= self.priority_levels {
                Problems::new("", &mut found).add(
                    "max_wait_for",
                    format!(
                        "{priority} is out of range: the manager has {} priority levels (0 to {})",
                        self.priority_levels,
                        self.priority_levels.saturating_sub(1)
                    ),
                );
            }
        }
        if self.max_keys == 0 {
            Problems::new("", &mut found).add("max_keys", "must be at least 1, got 0");
        }
        if self.metrics_per_key && self.key_names.is_none() {
            Problems::new("", &mut found).add(
                "metrics_per_key",
                "needs key names for the label; call .key_names(...) too",
            );
        }
        if !found.is_empty() {
            return Err(ConfigError::new(found));
        }
        if let (Some(_), Some(per_key)) = (&rate, self.rate_per_key) {
            rate_overrides.per_key =
                Some(Box::new(move |key: &K| per_key(key).map(|valid| valid.0)));
        }
        let quiet_throttle = throttle
            .as_ref()
            .and_then(|control| control.default.clone());
        let quiet_from = Box::new(move |state: &KeyState, _now: Nanos| {
            Some(state.quiet_from(quiet_throttle.as_deref()))
        });
        let max_wait = {
            let mut by_level = vec![self.max_wait; usize::from(self.priority_levels)];
            for (priority, max) in self.max_wait_for {
                by_level[usize::from(priority.level())] = Some(max);
            }
            by_level.into_boxed_slice()
        };
        let core = Core {
            clock: self.clock.unwrap_or_else(default_clock),
            rate,
            throttle,
            bulkhead,
            priorities: Priorities {
                levels: self.priority_levels,
                out_of_range: self.out_of_range,
            },
            random: self.random,
            classifier: self.classifier,
            call_timeout: self.call_timeout,
            max_defer: self.max_defer,
            max_wait,
        };
        Ok(ThrottleManager::from_shared(Shared {
            core: Arc::new(core),
            keys: Registry::new(self.max_keys, self.idle_ttl.map(nanos), quiet_from),
            overrides: Overrides {
                rate: rate_overrides,
                throttle: throttle_overrides,
                bulkhead: bulkhead_overrides,
            },
            key_names: self.key_names,
            metrics_per_key: self.metrics_per_key,
        }))
    }
}

/// Where each default control is named in errors.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ControlPaths {
    pub(crate) rate: &'static str,
    pub(crate) throttle: &'static str,
    pub(crate) bulkhead: &'static str,
}

impl Default for ControlPaths {
    fn default() -> Self {
        Self {
            rate: "rate",
            throttle: "throttle",
            bulkhead: "bulkhead",
        }
    }
}

/// One control from its default config and its overrides, each checked
/// under its own name: `None` when neither is there.
fn control<K: Hash + Eq, C, S>(
    default_path: &str,
    default: Option<&C>,
    overrides: Vec<(K, String, C)>,
    check: impl Fn(&C, &mut Problems<'_>) -> Option<S>,
    found: &mut Vec<ConfigProblem>,
) -> (Option<Control<S>>, ControlOverrides<K, S>) {
    let mut by_key = ControlOverrides::default();
    if default.is_none() && overrides.is_empty() {
        return (None, by_key);
    }
    let default = default.and_then(|config| check(config, &mut Problems::new(default_path, found)));
    for (key, name, config) in overrides {
        if let Some(settings) = check(&config, &mut Problems::new(&name, found)) {
            by_key.exact.insert(key, Arc::new(settings));
        }
    }
    let control = Control {
        default: default.map(Arc::new),
    };
    (Some(control), by_key)
}

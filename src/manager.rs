//! [`ThrottleManager`]: the facade that owns the key space and applies each
//! key's controls.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use dashmap::mapref::one::Ref;

use crate::clock::{Clock, Nanos, default_clock, nanos};
use crate::error::{ConfigError, Problems, RateLimited};
use crate::rate::cell::{RateCell, Reservation};
use crate::rate::config::RateSettings;
use crate::rate::{RateConfig, ValidRateConfig};
use crate::registry::{Full, KeyLife, Registry};

/// The default cap on live keys.
///
/// ```
/// assert_eq!(portcullis::DEFAULT_MAX_KEYS, 1_000_000);
/// ```
pub const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// The default idle TTL: a key quiet this long is forgotten.
///
/// ```
/// assert_eq!(portcullis::DEFAULT_IDLE_TTL, std::time::Duration::from_secs(600));
/// ```
pub const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(10 * 60);

type RatePerKey<K> = dyn Fn(&K) -> Option<ValidRateConfig> + Send + Sync;

/// Guards calls to many keys (hosts, users, tenants) at once: for each key it
/// sees, it lazily creates an adaptive rate whose speed follows the outcomes
/// you report.
///
/// Clones share all state. Keys are looked up by their borrowed form: a
/// `ThrottleManager<String>` takes `&str`.
///
/// # Example
///
/// ```
/// use portcullis::{RateConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::new(10.0).burst(5).bounds(1.0, 200.0).increment(2.0).decrement(1.0))
///     .build()?;
/// manager.wait("example.com").await; // before each call to example.com
/// let ok = true; // ... make the call ...
/// if ok {
///     manager.increment("example.com");
/// } else {
///     manager.decrement("example.com");
/// }
/// assert_eq!(manager.rate("example.com"), Some(12.0));
/// # Ok(())
/// # }
/// ```
pub struct ThrottleManager<K> {
    shared: Arc<Shared<K>>,
}

struct Shared<K> {
    keys: Registry<K, KeyState>,
    clock: Arc<dyn Clock>,
    rate: RatePolicy<K>,
}

/// Which rate settings a new key gets.
struct RatePolicy<K> {
    default: Arc<RateSettings>,
    overrides: HashMap<K, Arc<RateSettings>, foldhash::fast::RandomState>,
    per_key: Option<Box<RatePerKey<K>>>,
}

impl<K: Hash + Eq> RatePolicy<K> {
    /// `None` means the default (which costs a key nothing to point at).
    fn settings_for(&self, key: &K) -> Option<Arc<RateSettings>> {
        if let Some(settings) = self.overrides.get(key) {
            return Some(Arc::clone(settings));
        }
        self.per_key.as_ref()?(key).map(|valid| valid.0)
    }
}

/// Everything one key holds.
#[derive(Debug)]
struct KeyState {
    rate: RateCell,
    /// `None`: the manager's default rate settings.
    rate_settings: Option<Arc<RateSettings>>,
}

impl KeyLife for KeyState {
    fn quiet_from(&self) -> Option<Nanos> {
        Some(self.rate.full_from())
    }
}

impl<K> Clone for ThrottleManager<K> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<K: Hash + Eq> fmt::Debug for ThrottleManager<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleManager")
            .field("keys", &self.shared.keys.len())
            .field("rate", &self.shared.rate.default)
            .field("clock", &self.shared.clock)
            .finish_non_exhaustive()
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

    /// Resolves when one call to `key` may start under the key's current
    /// rate, and counts that call.
    ///
    /// Waiters of one key start in the order they called `wait`, one
    /// interval apart; waiters of other keys are never delayed by it. If the
    /// key is new and the key space is at `max_keys` with no key evictable,
    /// it first waits for room.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe. A `wait` dropped before it resolves takes no token: if no
    /// later call has taken a token since, its token goes back to the bucket;
    /// otherwise its slot stays empty. Waiters already queued keep their
    /// times either way, so a cancelled wait never delays anyone, and it never
    /// cancels anyone else's wait.
    ///
    /// # Panics
    ///
    /// When it has to sleep outside a tokio runtime with the time driver
    /// enabled (as `tokio::time::sleep` does), unless the manager's clock
    /// sleeps some other way ([`ManualClock`](crate::ManualClock) does).
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    /// use tokio::time::{Duration, Instant};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), portcullis::ConfigError> {
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(4.0)).build()?;
    /// let start = Instant::now();
    /// for _ in 0..5 {
    ///     manager.wait("api").await;
    /// }
    /// assert_eq!(start.elapsed(), Duration::from_secs(1)); // 4 intervals of 250 ms
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait<Q>(&self, key: &Q)
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        loop {
            let now = self.now();
            let reservation = match self.entry(key, now) {
                Ok(state) => state.rate.reserve(now, self.rate_settings(&state).burst),
                Err(full) => {
                    let retry_at = now.saturating_add(full.retry_after);
                    self.shared
                        .clock
                        .sleep_until(Duration::from_nanos(retry_at))
                        .await;
                    continue;
                }
            };
            if reservation.slot.start <= now {
                return;
            }
            let pending = PendingWait {
                manager: self,
                key,
                reservation: Some(reservation),
            };
            self.shared
                .clock
                .sleep_until(Duration::from_nanos(reservation.slot.start))
                .await;
            pending.started();
            return;
        }
    }

    /// Takes a token for one call to `key` if one is there now.
    ///
    /// # Errors
    ///
    /// [`RateLimited`] when the call may not start yet; it takes nothing and
    /// says how long until it could ([`RateLimited::retry_after`]), or that
    /// the key is new and the key space is full
    /// ([`RateLimited::key_space_full`]).
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(1.0).burst(2)).build()?;
    /// assert!(manager.check("api").is_ok());
    /// assert!(manager.check("api").is_ok()); // the burst
    /// assert!(manager.check("api").is_err());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn check<Q>(&self, key: &Q) -> Result<(), RateLimited>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.now();
        let state = self
            .entry(key, now)
            .map_err(|full| RateLimited::full(Duration::from_nanos(full.retry_after)))?;
        state
            .rate
            .check(now, self.rate_settings(&state).burst)
            .map_err(|wait| RateLimited::rate(Duration::from_nanos(wait)))
    }

    /// Reports a success: `key`'s rate rises by its increment, up to its
    /// upper bound. Returns the new rate, or `None` if the key was not live
    /// and the key space had no room for it.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0).bounds(1.0, 11.0).increment(2.0))
    ///     .build()?;
    /// assert_eq!(manager.increment("api"), Some(11.0));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn increment<Q>(&self, key: &Q) -> Option<f64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.now();
        let state = self.entry(key, now).ok()?;
        Some(state.rate.increase(now, self.rate_settings(&state)))
    }

    /// Reports a capacity failure (a 429, a 503, a timeout): `key`'s rate
    /// falls by its decrement (or factor), down to its lower bound, unless a
    /// decrease happened within the cooldown. Returns the new rate, or `None`
    /// if the key was not live and the key space had no room for it.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0).decrease_factor(0.5))
    ///     .build()?;
    /// assert_eq!(manager.decrement("api"), Some(5.0));
    /// assert_eq!(manager.decrement("api"), Some(5.0)); // within the one-second cooldown
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn decrement<Q>(&self, key: &Q) -> Option<f64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let now = self.now();
        let state = self.entry(key, now).ok()?;
        Some(state.rate.decrease(now, self.rate_settings(&state)))
    }

    /// `key`'s current rate in calls per second, or `None` if the key is not
    /// live (never seen, or evicted). Does not create the key.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// assert_eq!(manager.rate("api"), None);
    /// manager.increment("api");
    /// assert_eq!(manager.rate("api"), Some(10.5));
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn rate<Q>(&self, key: &Q) -> Option<f64>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shared.keys.get(key).map(|state| state.rate.rate())
    }

    /// The number of live keys.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// manager.increment("a");
    /// manager.increment("b");
    /// assert_eq!(manager.len(), 2);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn len(&self) -> usize {
        self.shared.keys.len()
    }

    /// True when no key is live.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// assert!(manager.is_empty());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forgets every key that has been quiet for the idle TTL now, instead of
    /// waiting for the next new key to trigger a sweep. Returns how many keys
    /// went. Does nothing without an idle TTL.
    ///
    /// ```
    /// use portcullis::{ManualClock, RateConfig, ThrottleManager};
    /// use std::time::Duration;
    ///
    /// let clock = ManualClock::new();
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::new(10.0))
    ///     .idle_ttl(Duration::from_secs(60))
    ///     .clock(clock.clone())
    ///     .build()?;
    /// manager.check("api").unwrap();
    /// clock.advance(Duration::from_secs(61));
    /// assert_eq!(manager.evict_idle(), 1);
    /// assert!(manager.is_empty());
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn evict_idle(&self) -> usize {
        self.shared.keys.evict_idle(self.now())
    }

    /// Calls `visit` with every live key and its current rate.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build()?;
    /// manager.decrement("api");
    /// let mut rates = Vec::new();
    /// manager.for_each_rate(|key, rate| rates.push((key.clone(), rate)));
    /// assert_eq!(rates, [("api".to_string(), 5.0)]);
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn for_each_rate(&self, mut visit: impl FnMut(&K, f64)) {
        self.shared
            .keys
            .for_each(|key, state| visit(key, state.rate.rate()));
    }

    fn now(&self) -> Nanos {
        self.shared.clock.now_nanos()
    }

    fn entry<Q>(&self, key: &Q, now: Nanos) -> Result<Ref<'_, K, KeyState>, Full>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let shared = &*self.shared;
        shared.keys.get_or_insert_with(key, now, |key| {
            let rate_settings = shared.rate.settings_for(key);
            let settings = rate_settings.as_deref().unwrap_or(&shared.rate.default);
            KeyState {
                rate: RateCell::new(settings, now),
                rate_settings,
            }
        })
    }

    fn rate_settings<'s>(&'s self, state: &'s KeyState) -> &'s RateSettings {
        state
            .rate_settings
            .as_deref()
            .unwrap_or(&self.shared.rate.default)
    }
}

/// A `wait` asleep on its reserved slot: if dropped before the slot comes,
/// hands the token back.
struct PendingWait<'a, K, Q: ?Sized>
where
    K: Borrow<Q> + Hash + Eq + Send + Sync + 'static,
    Q: Hash + Eq + ToOwned<Owned = K>,
{
    manager: &'a ThrottleManager<K>,
    key: &'a Q,
    reservation: Option<Reservation>,
}

impl<K, Q: ?Sized> PendingWait<'_, K, Q>
where
    K: Borrow<Q> + Hash + Eq + Send + Sync + 'static,
    Q: Hash + Eq + ToOwned<Owned = K>,
{
    fn started(mut self) {
        self.reservation = None;
    }
}

impl<K, Q: ?Sized> Drop for PendingWait<'_, K, Q>
where
    K: Borrow<Q> + Hash + Eq + Send + Sync + 'static,
    Q: Hash + Eq + ToOwned<Owned = K>,
{
    fn drop(&mut self) {
        if let Some(reservation) = self.reservation.take() {
            // The key owes at least this token, so it has not been evicted.
            if let Some(state) = self.manager.shared.keys.get(self.key) {
                state.rate.cancel(reservation);
            }
        }
    }
}

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
    rate: Option<RateConfig>,
    rate_overrides: Vec<(K, String, RateConfig)>,
    rate_per_key: Option<Box<RatePerKey<K>>>,
    max_keys: usize,
    idle_ttl: Option<Duration>,
    clock: Option<Arc<dyn Clock>>,
}

impl<K> fmt::Debug for ThrottleManagerBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleManagerBuilder")
            .field("rate", &self.rate)
            .field("rate_overrides", &self.rate_overrides.len())
            .field("rate_per_key", &self.rate_per_key.is_some())
            .field("max_keys", &self.max_keys)
            .field("idle_ttl", &self.idle_ttl)
            .field("clock", &self.clock)
            .finish()
    }
}

impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    fn new() -> Self {
        Self {
            rate: None,
            rate_overrides: Vec::new(),
            rate_per_key: None,
            max_keys: DEFAULT_MAX_KEYS,
            idle_ttl: Some(DEFAULT_IDLE_TTL),
            clock: None,
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

    /// At most this many keys are live at once (default
    /// [`DEFAULT_MAX_KEYS`]). See [`RateLimited::key_space_full`] for what a
    /// new key meets at the cap.
    ///
    /// ```
    /// use portcullis::{ManualClock, RateConfig, ThrottleManager};
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
    /// [`DEFAULT_IDLE_TTL`]). Sweeps run as new keys arrive, at most twice
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
    /// use portcullis::{ManualClock, RateConfig, ThrottleManager};
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
    /// when `build` runs ([`QuantaClock`](crate::QuantaClock), or
    /// [`TokioClock`](crate::TokioClock) inside paused tokio time).
    ///
    /// ```
    /// use portcullis::{ManualClock, RateConfig, ThrottleManager};
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
    /// a bad rate config (default or override), `max_keys` of 0.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// assert!(ThrottleManager::<String>::builder().rate(RateConfig::new(10.0)).build().is_ok());
    /// let err = ThrottleManager::<String>::builder().build().unwrap_err();
    /// assert_eq!(err.problems()[0].field(), "rate");
    /// ```
    pub fn build(self) -> Result<ThrottleManager<K>, ConfigError> {
        let mut found = Vec::new();
        let default = match &self.rate {
            Some(config) => config.check(&mut Problems::new("rate", &mut found)),
            None => {
                Problems::new("", &mut found).add(
                    "rate",
                    "no control configured; call .rate(RateConfig::new(calls_per_second))",
                );
                None
            }
        };
        let mut overrides = HashMap::with_hasher(foldhash::fast::RandomState::default());
        for (key, name, config) in self.rate_overrides {
            if let Some(settings) = config.check(&mut Problems::new(&name, &mut found)) {
                overrides.insert(key, Arc::new(settings));
            }
        }
        if self.max_keys == 0 {
            Problems::new("", &mut found).add("max_keys", "must be at least 1, got 0");
        }
        let Some(default) = default.filter(|_| found.is_empty()) else {
            return Err(ConfigError::new(found));
        };
        let clock = self.clock.unwrap_or_else(default_clock);
        Ok(ThrottleManager {
            shared: Arc::new(Shared {
                keys: Registry::new(self.max_keys, self.idle_ttl.map(nanos)),
                clock,
                rate: RatePolicy {
                    default: Arc::new(default),
                    overrides,
                    per_key: self.rate_per_key,
                },
            }),
        })
    }
}

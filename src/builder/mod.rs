//! [`ThrottleManagerBuilder`]: how a [`ThrottleManager`] is configured.
//!
//! This file holds the builder and `build`, which checks everything at once
//! and assembles the manager; the setters are grouped by what they set:
//! `controls` (rate, throttle, bulkhead and per-key overrides), `calls`
//! (priorities, classification, waiting), `keys` (the key space, telemetry,
//! the clock). Files become settings in `crate::config`.

mod calls;
mod controls;
mod key_space;
mod rate_store;
mod tiers;

pub use tiers::Tier;

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use crate::bulkhead::BulkheadConfig;
use crate::clock::{Clock, Nanos, default_clock, nanos};
use crate::core::{Control, Core, RandomSource};
use crate::error::{ConfigError, ConfigProblem, Problems};
use crate::key::KeyState;
use crate::manager::{
    ControlOverrides, KeyNamer, KeyNames, ManagerState, Overrides, ThrottleManager, TierOf,
};
use crate::outcome::Classifier;
use crate::priority::{OutOfRange, Priorities, Priority};
use crate::rate::{DEFAULT_MAX_DEFER, RateConfig};
use crate::registry::{Quiet, Registry, RoomSignal};
use crate::store::StoreHandle;
use crate::throttle::ThrottleConfig;

/// The default cap on live keys.
const DEFAULT_MAX_KEYS: usize = 1_000_000;

/// The default idle TTL: a key quiet this long is forgotten.
const DEFAULT_IDLE_TTL: Duration = Duration::from_secs(10 * 60);

/// The default number of priority levels: `Priority::HIGH` to `Priority::LOW`.
const DEFAULT_PRIORITY_LEVELS: u8 = 4;

/// Under pressure, the longest a key's debt, pause or shedding holds its
/// place in a full key space (see `max_hold`).
const DEFAULT_MAX_HOLD: Duration = Duration::from_secs(60);

/// The shortest `idle_ttl`: below it, sweeps of the whole key space would
/// run on nearly every new key (at `idle_ttl(0)`, on every one: quadratic).
const MIN_IDLE_TTL: Duration = Duration::from_secs(1);

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
/// use portcullis::{RateConfig, ThrottleManager, Tier};
/// use std::time::Duration;
///
/// let premium = Tier::new().rate(RateConfig::new(100.0).bounds(10.0, 1_000.0));
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::new(10.0).bounds(1.0, 100.0))
///     .rate_override("api.github.com", RateConfig::new(5.0).bounds(1.0, 10.0))
///     .tier("premium", premium)
///     .tier_of(|key: &String| key.starts_with("premium-").then_some("premium"))
///     .max_keys(10_000)
///     .idle_ttl(Duration::from_secs(300))
///     .build()?;
/// manager.increment("api.github.com");
/// manager.increment("premium-42");
/// assert_eq!(manager.rate("api.github.com"), Some(5.15));
/// assert_eq!(manager.rate("premium-42"), Some(103.0));
/// # Ok::<(), portcullis::ConfigError>(())
/// ```
pub struct ThrottleManagerBuilder<K> {
    pub(crate) rate: Option<RateConfig>,
    pub(crate) rate_overrides: Vec<(K, String, RateConfig)>,
    pub(crate) throttle_overrides: Vec<(K, String, ThrottleConfig)>,
    pub(crate) bulkhead_overrides: Vec<(K, String, BulkheadConfig)>,
    /// Tiers by name, in the order declared.
    pub(crate) tiers: Vec<(String, Tier)>,
    pub(crate) tier_of: Option<Box<TierOf<K>>>,
    pub(crate) throttle: Option<ThrottleConfig>,
    pub(crate) bulkhead: Option<BulkheadConfig>,
    pub(crate) priority_levels: u8,
    pub(crate) out_of_range: OutOfRange,
    pub(crate) random: Option<Box<RandomSource>>,
    pub(crate) retry: Option<crate::retry_budget::RetryPolicy>,
    pub(crate) classifier: Option<Box<Classifier>>,
    pub(crate) call_timeout: Option<Duration>,
    pub(crate) max_defer: Duration,
    pub(crate) max_wait: Option<Duration>,
    /// Per-priority `max_wait`s, by level, in the order given.
    pub(crate) max_wait_for: Vec<(Priority, Duration)>,
    pub(crate) max_keys: usize,
    pub(crate) idle_ttl: Option<Duration>,
    pub(crate) max_hold: Duration,
    pub(crate) clock: Option<Arc<dyn Clock>>,
    /// How events and per-key metrics name a key.
    pub(crate) key_names: Option<Box<KeyNames<K>>>,
    /// Whether metrics carry a `key` label.
    pub(crate) metrics_per_key: bool,
    /// The manager's name: the `manager` label of its metrics.
    pub(crate) name: Option<String>,
    /// Where each default control is named in errors: `rate` when set in
    /// code (`rate.burst`), `default.rate` when read from a file
    /// (`default.rate.burst`).
    pub(crate) paths: ControlPaths,
    /// Problems found while reading a [`ManagerConfig`](crate::ManagerConfig), reported by `build`.
    pub(crate) config_problems: Vec<ConfigProblem>,
    /// Where rates are shared, and how the store names a key.
    pub(crate) store: Option<StoreWithNames<K>>,
}

impl<K> fmt::Debug for ThrottleManagerBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleManagerBuilder")
            .field("rate", &self.rate)
            .field("rate_overrides", &self.rate_overrides.len())
            .field("throttle_overrides", &self.throttle_overrides.len())
            .field("bulkhead_overrides", &self.bulkhead_overrides.len())
            .field("tiers", &self.tiers)
            .field("tier_of", &self.tier_of.is_some())
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
            .field("max_hold", &self.max_hold)
            .field("clock", &self.clock)
            .field("key_names", &self.key_names.is_some())
            .field("metrics_per_key", &self.metrics_per_key)
            .field("name", &self.name)
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
            tiers: Vec::new(),
            tier_of: None,
            throttle: None,
            bulkhead: None,
            priority_levels: DEFAULT_PRIORITY_LEVELS,
            out_of_range: OutOfRange::default(),
            random: None,
            retry: None,
            classifier: None,
            call_timeout: None,
            max_defer: DEFAULT_MAX_DEFER,
            max_wait: None,
            max_wait_for: Vec::new(),
            max_keys: DEFAULT_MAX_KEYS,
            idle_ttl: Some(DEFAULT_IDLE_TTL),
            max_hold: DEFAULT_MAX_HOLD,
            clock: None,
            key_names: None,
            metrics_per_key: false,
            name: None,
            paths: ControlPaths::default(),
            config_problems: Vec::new(),
            store: None,
        }
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
            && self.bulkhead_overrides.is_empty()
            && self.tiers.is_empty();
        if no_control && no_override {
            Problems::new("", &mut found).add(
                "controls",
                "no control configured; call .rate(...), .throttle(...) or .bulkhead(...)",
            );
        }
        match (self.tiers.is_empty(), self.tier_of.is_some()) {
            (false, false) => Problems::new("", &mut found).add(
                "tier_of",
                "tiers are declared, and nothing maps keys to them; call .tier_of(...)",
            ),
            (true, true) => Problems::new("", &mut found).add(
                "tier_of",
                "maps keys to tiers, and none is declared; call .tier(...)",
            ),
            _ => {}
        }
        let (rate, rate_overrides) = control(
            self.paths.rate,
            self.rate.as_ref(),
            self.rate_overrides,
            self.tiers.iter().filter_map(|(name, tier)| {
                Some((name.as_str(), tier.path.as_deref(), tier.rate.as_ref()?))
            }),
            RateConfig::check,
            &mut found,
        );
        let (throttle, throttle_overrides) = control(
            self.paths.throttle,
            self.throttle.as_ref(),
            self.throttle_overrides,
            self.tiers.iter().filter_map(|(name, tier)| {
                Some((name.as_str(), tier.path.as_deref(), tier.throttle.as_ref()?))
            }),
            ThrottleConfig::check,
            &mut found,
        );
        let (bulkhead, bulkhead_overrides) = control(
            self.paths.bulkhead,
            self.bulkhead.as_ref(),
            self.bulkhead_overrides,
            self.tiers.iter().filter_map(|(name, tier)| {
                Some((name.as_str(), tier.path.as_deref(), tier.bulkhead.as_ref()?))
            }),
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
        if let Some(ttl) = self.idle_ttl.filter(|&ttl| ttl < MIN_IDLE_TTL) {
            Problems::new(self.paths.keys, &mut found).add(
                "idle_ttl",
                format!(
                    "must be at least 1s (a shorter one forgets a key's learned rate \
                     between two of its calls), got {ttl:?}"
                ),
            );
        }
        let retry = self
            .retry
            .as_ref()
            .and_then(|policy| policy.check(&mut Problems::new("retry", &mut found)));
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
            Problems::new(self.paths.keys, &mut found).add("max_keys", "must be at least 1, got 0");
        }
        if let Some(name) = &self.name {
            if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
                Problems::new("", &mut found).add(
                    "name",
                    format!("must be 1 to 64 bytes without control characters, got {name:?}"),
                );
            }
        }
        if self.metrics_per_key && self.key_names.is_none() {
            Problems::new("", &mut found).add(
                "metrics_per_key",
                "needs key names for the label; call .key_names(...) too",
            );
        }
        if let Some((store, _)) = &self.store {
            rate_store::check(
                store.as_ref(),
                rate.is_some(),
                &mut Problems::new("", &mut found),
            );
        }
        if !found.is_empty() {
            return Err(ConfigError::new(found));
        }
        let (store, store_names) = self.store.map_or((None, None), |(store, names)| {
            (Some(Arc::new(StoreHandle::new(store))), Some(names))
        });
        let quiet_throttle = throttle
            .as_ref()
            .and_then(|control| control.default.clone());
        let default_rate = rate.as_ref().and_then(|control| control.default.clone());
        let quiet_from = Box::new(move |state: &KeyState, now: Nanos| {
            Some(Quiet {
                from: state.quiet_from(quiet_throttle.as_deref()),
                debt_until: state.debt_until(now, default_rate.as_deref()),
                rate_moved: state.rate_moved(default_rate.as_deref()),
            })
        });
        let max_wait = {
            let mut by_level = vec![self.max_wait; usize::from(self.priority_levels)];
            for (priority, max) in self.max_wait_for {
                by_level[usize::from(priority.level())] = Some(max);
            }
            by_level.into_boxed_slice()
        };
        let room = Arc::new(RoomSignal::default());
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
            retry,
            classifier: self.classifier,
            call_timeout: self.call_timeout,
            max_defer: self.max_defer,
            max_wait,
            room: Arc::clone(&room),
            store,
            metrics: crate::metrics::ManagerMetrics::named(self.name.clone()),
        };
        Ok(ThrottleManager::from_state(ManagerState {
            core: Arc::new(core),
            keys: Registry::new(
                self.max_keys,
                self.idle_ttl.map(nanos),
                nanos(self.max_hold),
                quiet_from,
                room,
            ),
            overrides: Overrides {
                rate: rate_overrides,
                throttle: throttle_overrides,
                bulkhead: bulkhead_overrides,
                tier_of: self.tier_of,
            },
            key_names: self.key_names.map(KeyNamer::new),
            metrics_per_key: self.metrics_per_key,
            name: self.name,
            store_names,
            refusal_watcher: Default::default(),
        }))
    }
}

/// A rate store, and how it names the manager's keys.
pub(crate) type StoreWithNames<K> = (Box<dyn crate::store::RateStore>, Box<KeyNames<K>>);

/// Where each default control, and the key space's settings, are named in
/// errors: as the builder's methods, or as a configuration file's sections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ControlPaths {
    pub(crate) rate: &'static str,
    pub(crate) throttle: &'static str,
    pub(crate) bulkhead: &'static str,
    /// The prefix of `max_keys` and `idle_ttl`: none, or `keys`.
    pub(crate) keys: &'static str,
}

impl Default for ControlPaths {
    fn default() -> Self {
        Self {
            rate: "rate",
            throttle: "throttle",
            bulkhead: "bulkhead",
            keys: "",
        }
    }
}

/// One control from its default config and its overrides, each checked
/// under its own name: `None` when neither is there.
fn control<'t, K: Hash + Eq, C: 't, S>(
    default_path: &str,
    default: Option<&C>,
    overrides: Vec<(K, String, C)>,
    tiers: impl Iterator<Item = (&'t str, Option<&'t str>, &'t C)>,
    check: impl Fn(&C, &mut Problems<'_>) -> Option<S>,
    found: &mut Vec<ConfigProblem>,
) -> (Option<Control<S>>, ControlOverrides<K, S>) {
    let mut by_key = ControlOverrides::default();
    let mut tiers = tiers.peekable();
    if default.is_none() && overrides.is_empty() && tiers.peek().is_none() {
        return (None, by_key);
    }
    let default = default.and_then(|config| check(config, &mut Problems::new(default_path, found)));
    for (key, name, config) in overrides {
        if let Some(settings) = check(&config, &mut Problems::new(&name, found)) {
            by_key.exact.insert(key, Arc::new(settings));
        }
    }
    for (tier, declared_at, config) in tiers {
        // The control's own name ends the path: `tier["premium"].rate`,
        // or where a file declared it, `tiers."premium".rate`.
        let control = default_path.rsplit('.').next().unwrap_or(default_path);
        let path = match declared_at {
            Some(at) => format!("{at}.{control}"),
            None => format!("tier[{tier:?}].{control}"),
        };
        if let Some(settings) = check(config, &mut Problems::new(&path, found)) {
            by_key.by_tier.insert(tier.to_owned(), Arc::new(settings));
        }
    }
    let control = Control {
        default: default.map(Arc::new),
    };
    (Some(control), by_key)
}

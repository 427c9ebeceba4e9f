//! How a manager is built: [`ThrottleManagerBuilder`] (from
//! [`ThrottleManager::builder`](crate::ThrottleManager::builder)), the
//! groups of settings it takes ([`TimeLimits`](crate::deadline::TimeLimits)
//! lives with the deadlines; [`KeySpaceConfig`], [`Tier`]), and a
//! configuration file's form ([`ManagerConfig`] and its sections), read by
//! [`ThrottleManagerBuilder::config`].
//!
//! ```
//! use portcullis::builder::{KeySpaceConfig, Tier};
//! use portcullis::{RateConfig, ThrottleManager};
//!
//! let manager = ThrottleManager::<String>::builder()
//!     .rate(RateConfig::adaptive(10.0))
//!     .tier("premium", Tier::new().rate(RateConfig::adaptive(100.0)))
//!     .tier_of(|key: &String| key.starts_with("premium-").then_some("premium"))
//!     .key_space(KeySpaceConfig::new().max_keys(10_000))
//!     .build()?;
//! # let _ = manager;
//! # Ok::<(), portcullis::error::ConfigError>(())
//! ```
//!
// [`ThrottleManagerBuilder`]: how a [`ThrottleManager`] is configured.
//
// The builder holds its settings in typed parts, one per file, each with
// its setters and its `check`, which names every bad field and returns the
// validated settings: `controls` ([`ControlParts`]: rate, throttle,
// bulkhead, tiers and per-key overrides), `calls` ([`CallParts`]:
// priorities, classification, retries, waiting), `key_space`
// ([`KeySpaceParts`]: the cap, idle keys, the clock), `telemetry`
// ([`TelemetryParts`]: names in events and metrics), `rate_store`; and
// `from_file`, a [`ManagerConfig`](crate::config::ManagerConfig) read into the
// parts. `build` checks the parts in that order and assembles the manager.

mod calls;
pub(crate) mod controls;
mod from_file;
mod groups;
mod key_space;
mod limits;
mod rate_store;
mod reload;
mod telemetry;
mod tiers;

pub use crate::config::{
    BulkheadSection, Controls, KeysSection, ManagerConfig, PriorityWait, Quota, RateSection,
    ThrottleSection,
};
pub use groups::KeySpaceConfig;
pub use tiers::Tier;

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;

use crate::core::Core;
use crate::error::{ConfigError, ConfigProblem, Problems};
use crate::manager::{ManagerState, ThrottleManager};
use crate::registry::RoomSignal;
use crate::store::StoreHandle;
use calls::CallParts;
use controls::ControlParts;
use key_space::KeySpaceParts;
use limits::{LimitHome, LimitParts};
use rate_store::StoreWithNames;
use telemetry::TelemetryParts;
/// Configures a [`ThrottleManager`]: its controls, per-key overrides, the
/// bounds of its key space and its clock.
///
/// Nothing is checked until [`build`](ThrottleManagerBuilder::build), which
/// reports every problem at once.
///
/// # Example
///
/// ```
/// use portcullis::builder::{KeySpaceConfig, Tier};
/// use portcullis::{RateConfig, ThrottleManager};
/// use std::time::Duration;
///
/// let premium = Tier::new().rate(RateConfig::adaptive(100.0).bounds(10.0, 1_000.0));
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0).bounds(1.0, 100.0))
///     .key_override("api.github.com", Tier::new().rate(RateConfig::adaptive(5.0).bounds(1.0, 10.0)))
///     .tier("premium", premium)
///     .tier_of(|key: &String| key.starts_with("premium-").then_some("premium"))
///     .key_space(KeySpaceConfig::new().max_keys(10_000).idle_ttl(Duration::from_secs(300)))
///     .build()?;
/// manager.increment("api.github.com");
/// manager.increment("premium-42");
/// assert_eq!(manager.key("api.github.com").rate(), Some(6.0));
/// assert_eq!(manager.key("premium-42").rate(), Some(101.0));
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
pub struct ThrottleManagerBuilder<K> {
    /// The default controls, the tiers and the per-key overrides.
    controls: ControlParts<K>,
    /// How calls are judged and how long they may wait.
    calls: CallParts,
    /// The key space's bounds, and the clock.
    key_space: KeySpaceParts,
    /// How the manager and its keys are named in events and metrics.
    telemetry: TelemetryParts<K>,
    /// Where rates are shared, and how the store names a key.
    store: Option<StoreWithNames<K>>,
    /// Further limits of every key beside its rate.
    limits: LimitParts<K>,
    /// Problems found while reading a [`ManagerConfig`], reported by `build`.
    file_problems: Vec<ConfigProblem>,
}

impl<K> fmt::Debug for ThrottleManagerBuilder<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ThrottleManagerBuilder")
            .field("controls", &self.controls)
            .field("calls", &self.calls)
            .field("key_space", &self.key_space)
            .field("telemetry", &self.telemetry)
            .field("store", &self.store.is_some())
            .field("limits", &self.limits)
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
    /// let manager = ThrottleManager::<u64>::builder().rate(RateConfig::adaptive(5.0)).build()?;
    /// assert!(manager.keys().is_empty());
    /// # Ok::<(), portcullis::error::ConfigError>(())
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
            controls: ControlParts::default(),
            calls: CallParts::default(),
            key_space: KeySpaceParts::default(),
            telemetry: TelemetryParts::default(),
            store: None,
            limits: LimitParts::default(),
            file_problems: Vec::new(),
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
    /// assert!(ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build().is_ok());
    /// let err = ThrottleManager::<String>::builder().build().unwrap_err();
    /// assert_eq!(err.problems()[0].field(), "controls");
    /// ```
    pub fn build(self) -> Result<ThrottleManager<K>, ConfigError> {
        let mut found = self.file_problems;
        // The tiers' own settings of named limits, for the limits' managers.
        let tiers = self.controls.tiers.clone();
        let controls = self.controls.check(&mut found, false);
        let calls = self.calls.check(&mut found);
        let key_space = self.key_space.check(&mut found);
        let telemetry = self.telemetry.check(&mut found);
        if let Some((store, _)) = &self.store {
            let has_rate = controls.controls.rate;
            rate_store::check(store.as_ref(), has_rate, &mut Problems::new("", &mut found));
        }
        if !self.limits.limits.is_empty() && !controls.controls.rate {
            let problem = "named limits count beside the key's rate: set .rate(...) too";
            Problems::new("", &mut found).add("limit", problem);
        }
        let limits = self.limits.build(
            &LimitHome {
                clock: &key_space.clock,
                max_keys: key_space.max_keys,
                idle_ttl: key_space.idle_ttl,
                name: telemetry.name.as_deref(),
                tiers: &tiers,
                tier_of: controls.tier_of.as_ref(),
            },
            &mut found,
        );
        if let Some(error) = ConfigError::from_problems(found) {
            return Err(error);
        }
        let (store, store_names) = self.store.map_or((None, None), |(store, names)| {
            (Some(Arc::new(StoreHandle::new(store))), Some(names))
        });
        let room = Arc::new(RoomSignal::default());
        let core_of_keys = Arc::new(std::sync::OnceLock::new());
        let keys = key_space.registry(
            controls::quiet_from(Arc::clone(&core_of_keys)),
            Arc::clone(&room),
        );
        let core = Core::new(
            key_space.clock,
            controls.controls,
            calls,
            room,
            store,
            crate::metrics::ManagerMetrics::named(telemetry.name.clone()),
        );
        let core = Arc::new(core);
        let _ = core_of_keys.set(Arc::downgrade(&core));
        Ok(ThrottleManager::from_state(ManagerState {
            core,
            keys,
            book: std::sync::RwLock::new(controls.book),
            tier_of: controls.tier_of,
            changes: std::sync::Mutex::new(()),
            own_changes: std::sync::atomic::AtomicU64::new(0),
            settings_set_by_reloads: std::sync::atomic::AtomicUsize::new(0),
            key_names: telemetry.key_names,
            metrics_per_key: telemetry.metrics_per_key,
            name: telemetry.name,
            store_names,
            limits,
            refusal_watcher: Default::default(),
        }))
    }
}

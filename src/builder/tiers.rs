//! Tiers: named sets of controls that some keys get instead of the
//! defaults (a premium tenant, an internal host), chosen per key by a
//! function.

use std::hash::Hash;

use super::ThrottleManagerBuilder;
use crate::bulkhead::BulkheadConfig;
use crate::rate::RateConfig;
use crate::throttle::ThrottleConfig;

/// A named set of controls for the keys a manager's
/// [`tier_of`](ThrottleManagerBuilder::tier_of) puts in it: each control
/// it sets replaces the manager's default for those keys; a control it
/// leaves out stays the default. Validated with everything else at
/// [`build`](ThrottleManagerBuilder::build).
///
/// ```
/// use portcullis::builder::Tier;
/// use portcullis::{BulkheadConfig, RateConfig, ThrottleConfig};
///
/// let premium = Tier::new()
///     .rate(RateConfig::per_second(100))
///     .throttle(ThrottleConfig::new().ratio(3.0))
///     .bulkhead(BulkheadConfig::new(32));
/// # drop(premium);
/// ```
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Tier {
    pub(crate) rate: Option<RateConfig>,
    pub(crate) throttle: Option<ThrottleConfig>,
    pub(crate) bulkhead: Option<BulkheadConfig>,
    /// Shadow mode for the tier's keys; `None`: the manager's.
    pub(crate) shadow: Option<bool>,
    /// The tier's keys' own settings of named limits, by name.
    pub(crate) limits: Vec<(String, RateConfig)>,
    /// Where a file declared it (`tiers."premium"`), for its errors; a
    /// tier made in code is named `tier["premium"]`.
    pub(crate) path: Option<String>,
}

impl Tier {
    /// A tier that changes nothing yet.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// let tier = Tier::new();
    /// # drop(tier);
    /// ```
    pub fn new() -> Self {
        Self::default()
    }

    /// The rate of the tier's keys.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// use portcullis::RateConfig;
    ///
    /// let internal = Tier::new().rate(RateConfig::adaptive(1_000.0));
    /// # drop(internal);
    /// ```
    #[must_use]
    pub fn rate(mut self, config: RateConfig) -> Self {
        self.rate = Some(config);
        self
    }

    /// The named limit `name` of the tier's keys (declared on the builder
    /// with [`limit`](ThrottleManagerBuilder::limit), whose settings it
    /// replaces for them). Setting a name twice keeps the last.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(500))
    ///     .limit("tokens", RateConfig::per_minute(30_000))
    ///     .tier("scale", Tier::new().limit("tokens", RateConfig::per_minute(2_000_000)))
    ///     .tier_of(|account: &String| account.starts_with("scale-").then_some("scale"))
    ///     .build()?;
    /// let tokens = manager.limit("tokens").unwrap();
    /// assert_eq!(tokens.key("scale-1").rate(), None); // not seen yet
    /// tokens.check("scale-1").unwrap();
    /// assert!(tokens.key("scale-1").rate().unwrap() > 33_000.0);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[must_use]
    pub fn limit(mut self, name: impl Into<String>, config: RateConfig) -> Self {
        let name = name.into();
        self.limits.retain(|(declared, _)| *declared != name);
        self.limits.push((name, config));
        self
    }

    /// The throttle of the tier's keys.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// use portcullis::ThrottleConfig;
    ///
    /// let patient = Tier::new().throttle(ThrottleConfig::new().ratio(4.0));
    /// # drop(patient);
    /// ```
    #[must_use]
    pub fn throttle(mut self, config: ThrottleConfig) -> Self {
        self.throttle = Some(config);
        self
    }

    /// The bulkhead of the tier's keys.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// use portcullis::BulkheadConfig;
    ///
    /// let wide = Tier::new().bulkhead(BulkheadConfig::new(64));
    /// # drop(wide);
    /// ```
    #[must_use]
    pub fn bulkhead(mut self, config: BulkheadConfig) -> Self {
        self.bulkhead = Some(config);
        self
    }

    /// Shadow mode for the tier's keys (`true`: decisions counted, none
    /// enforced; see [`ThrottleManager::set_shadow`](crate::ThrottleManager::set_shadow)),
    /// whatever the manager's.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// use portcullis::RateConfig;
    ///
    /// let trial = Tier::new().rate(RateConfig::per_second(5)).shadow(true);
    /// # drop(trial);
    /// ```
    #[must_use]
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.shadow = Some(shadow);
        self
    }
}

/// # Tiers
impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Declares tier `name`: the keys [`tier_of`](Self::tier_of) puts in
    /// it get `tier`'s controls instead of the defaults. An exact override
    /// ([`rate_override`](Self::rate_override), ...) still wins for its
    /// key. Declaring a name twice keeps the last.
    ///
    /// A tier may have a control the manager has no default for: then only
    /// the tier's keys (and overridden keys) have that control.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// use portcullis::{BulkheadConfig, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .tier("premium", Tier::new().rate(RateConfig::adaptive(100.0)).bulkhead(BulkheadConfig::new(16)))
    ///     .tier_of(|tenant: &String| tenant.starts_with("premium-").then_some("premium"))
    ///     .build()?;
    /// assert_eq!(manager.increment("premium-42"), Some(101.0));
    /// assert_eq!(manager.increment("free-7"), Some(11.0));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn tier(mut self, name: impl Into<String>, tier: Tier) -> Self {
        let name = name.into();
        self.controls
            .tiers
            .retain(|(declared, _)| *declared != name);
        self.controls.tiers.push((name, tier));
        self
    }

    /// Which tier each key is in: the name of a tier declared with
    /// [`tier`](Self::tier), or `None` for the defaults. Consulted when a
    /// key is made (twice, rarely, when two threads create the same key at
    /// once), when [`retier`](crate::manager::KeyHandle::retier) asks, and at
    /// a key's first call after a
    /// [`reload`](crate::ThrottleManager::reload) or
    /// [`set_shadow`](crate::ThrottleManager::set_shadow); not when the
    /// key's own settings set every control and shadow mode, so no tier
    /// could apply. It runs outside the key space's
    /// locks: it may call the manager, and if it panics, the panic reaches
    /// the caller and the key takes no room. A name no tier has gives the
    /// key the defaults, with a `warn` event naming it.
    ///
    /// [`build`](Self::build) refuses tiers without `tier_of`, and
    /// `tier_of` without tiers.
    ///
    /// ```
    /// use portcullis::builder::Tier;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .tier("internal", Tier::new().rate(RateConfig::adaptive(1_000.0)))
    ///     .tier_of(|host: &String| host.ends_with(".internal").then_some("internal"))
    ///     .build()?;
    /// assert_eq!(manager.increment("db.internal"), Some(1_001.0));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn tier_of<F>(mut self, tier_of: F) -> Self
    where
        F: for<'k> Fn(&'k K) -> Option<&'k str> + Send + Sync + 'static,
    {
        self.controls.tier_of = Some(std::sync::Arc::new(tier_of));
        self
    }
}

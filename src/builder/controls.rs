//! The builder's settings of the three controls: the defaults every key
//! gets, the tiers, and the keys that get their own.

use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, OnceLock, Weak};

use super::{ThrottleManagerBuilder, Tier};
use crate::bulkhead::BulkheadConfig;
use crate::clock::Nanos;
use crate::core::{BuiltControls, Core};
use crate::error::{ConfigProblem, Problems};
use crate::key::KeyState;
use crate::manager::{Layer, SettingsBook, TierOf};
use crate::rate::RateConfig;
use crate::registry::{Quiet, QuietFrom};
use crate::throttle::ThrottleConfig;

/// The controls as set: the defaults, the tiers and the overrides, each
/// override with the name `build` reports its problems under.
pub(super) struct ControlParts<K> {
    pub(super) rate: Option<RateConfig>,
    pub(super) throttle: Option<ThrottleConfig>,
    pub(super) bulkhead: Option<BulkheadConfig>,
    pub(super) rate_overrides: Vec<(K, String, RateConfig)>,
    pub(super) throttle_overrides: Vec<(K, String, ThrottleConfig)>,
    pub(super) bulkhead_overrides: Vec<(K, String, BulkheadConfig)>,
    /// Shadow mode: for every key (`None`: off), and for some keys.
    pub(super) shadow: Option<bool>,
    pub(super) shadow_overrides: Vec<(K, bool)>,
    /// Tiers by name, in the order declared.
    pub(super) tiers: Vec<(String, Tier)>,
    pub(super) tier_of: Option<Arc<TierOf<K>>>,
    /// `tier_of` may come without tiers: a named limit's manager shares its
    /// manager's, for the tiers a reload may give the limit.
    pub(super) tier_of_alone: bool,
    /// Where each default is named in errors.
    pub(super) paths: ControlPaths,
}

impl<K> Default for ControlParts<K> {
    fn default() -> Self {
        Self {
            rate: None,
            throttle: None,
            bulkhead: None,
            rate_overrides: Vec::new(),
            throttle_overrides: Vec::new(),
            bulkhead_overrides: Vec::new(),
            shadow: None,
            shadow_overrides: Vec::new(),
            tiers: Vec::new(),
            tier_of: None,
            tier_of_alone: false,
            paths: ControlPaths::default(),
        }
    }
}

impl<K> fmt::Debug for ControlParts<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControlParts")
            .field("rate", &self.rate)
            .field("throttle", &self.throttle)
            .field("bulkhead", &self.bulkhead)
            .field("rate_overrides", &self.rate_overrides.len())
            .field("throttle_overrides", &self.throttle_overrides.len())
            .field("bulkhead_overrides", &self.bulkhead_overrides.len())
            .field("shadow", &self.shadow)
            .field("shadow_overrides", &self.shadow_overrides.len())
            .field("tiers", &self.tiers)
            .field("tier_of", &self.tier_of.is_some())
            .finish()
    }
}

/// The controls, checked: which ones the manager has, and the settings of
/// every level (defaults, tiers, keys).
pub(crate) struct CheckedControls<K> {
    pub(crate) controls: BuiltControls,
    pub(crate) book: SettingsBook<K>,
    pub(crate) tier_of: Option<Arc<TierOf<K>>>,
}

impl<K: Hash + Eq> ControlParts<K> {
    /// Checks every control, default, tier and override, each under its
    /// own name, and that tiers and `tier_of` come together (for a new
    /// manager: a reload keeps the live manager's `tier_of`, and may set no
    /// control).
    pub(crate) fn check(self, found: &mut Vec<ConfigProblem>, reload: bool) -> CheckedControls<K> {
        if !reload {
            self.check_whole(found);
        }
        let mut book = SettingsBook::default();
        let rate = control(
            self.paths.rate,
            self.rate.as_ref(),
            self.rate_overrides,
            &self.tiers,
            |tier| tier.rate.as_ref(),
            RateConfig::check,
            found,
            (&mut book, |layer| &mut layer.rate),
        );
        let throttle = control(
            self.paths.throttle,
            self.throttle.as_ref(),
            self.throttle_overrides,
            &self.tiers,
            |tier| tier.throttle.as_ref(),
            ThrottleConfig::check,
            found,
            (&mut book, |layer| &mut layer.throttle),
        );
        let bulkhead = control(
            self.paths.bulkhead,
            self.bulkhead.as_ref(),
            self.bulkhead_overrides,
            &self.tiers,
            |tier| tier.bulkhead.as_ref(),
            BulkheadConfig::check,
            found,
            (&mut book, |layer| &mut layer.bulkhead),
        );
        let controls = BuiltControls {
            rate,
            throttle,
            bulkhead,
        };
        book.defaults.shadow = self.shadow;
        for (key, on) in self.shadow_overrides {
            book.own(key).shadow = Some(on);
        }
        for (name, tier) in &self.tiers {
            if tier.shadow.is_some() {
                book.tiers.entry(name.clone()).or_default().shadow = tier.shadow;
            }
        }
        CheckedControls {
            controls,
            book,
            tier_of: self.tier_of,
        }
    }

    /// What a new manager needs and a reload does not: a control, and a
    /// `tier_of` with tiers.
    fn check_whole(&self, found: &mut Vec<ConfigProblem>) {
        let no_control = self.rate.is_none() && self.throttle.is_none() && self.bulkhead.is_none();
        let no_override = self.rate_overrides.is_empty()
            && self.throttle_overrides.is_empty()
            && self.bulkhead_overrides.is_empty()
            && self.tiers.is_empty();
        if no_control && no_override {
            Problems::new("", found).add(
                "controls",
                "no control configured; call .rate(...), .throttle(...) or .bulkhead(...)",
            );
        }
        match (self.tiers.is_empty(), self.tier_of.is_some()) {
            (false, false) => Problems::new("", found).add(
                "tier_of",
                "tiers are declared, and nothing maps keys to them; call .tier_of(...)",
            ),
            (true, true) if !self.tier_of_alone => Problems::new("", found).add(
                "tier_of",
                "maps keys to tiers, and none is declared; call .tier(...)",
            ),
            _ => {}
        }
    }
}

/// When a key is quiet, as the key space asks before it forgets one: under
/// the key's settings in the manager's core, once `core` holds it (the key
/// space is built first; the core does not keep the key space alive).
pub(super) fn quiet_from(core: Arc<OnceLock<Weak<Core>>>) -> Box<QuietFrom<KeyState>> {
    Box::new(move |state: &KeyState, now: Nanos| {
        let core = core.get()?.upgrade()?;
        let settings = core.settings_of(state);
        let (rate, throttle) = (settings.rate.as_ref(), settings.throttle.as_ref());
        Some(Quiet {
            from: state.quiet_from(throttle),
            debt_until: state.debt_until(now, rate),
            rate_moved: state.rate_moved(rate),
        })
    })
}

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
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// assert_eq!(manager.increment("api"), Some(11.0));
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn rate(mut self, config: RateConfig) -> Self {
        self.controls.rate = Some(config);
        self
    }

    /// `key_override(key, Tier::new().rate(config))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `key_override(key, Tier::new().rate(config))`"
    )]
    pub fn rate_override(mut self, key: impl Into<K>, config: RateConfig) -> Self
    where
        K: fmt::Debug,
    {
        let key = key.into();
        let name = format!("rate_override[{key:?}]");
        self.controls.rate_overrides.push((key, name, config));
        self
    }

    /// `key_override(key, Tier::new().throttle(config))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `key_override(key, Tier::new().throttle(config))`"
    )]
    pub fn throttle_override(mut self, key: impl Into<K>, config: ThrottleConfig) -> Self
    where
        K: fmt::Debug,
    {
        let key = key.into();
        let name = format!("throttle_override[{key:?}]");
        self.controls.throttle_overrides.push((key, name, config));
        self
    }

    /// `key_override(key, Tier::new().bulkhead(config))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `key_override(key, Tier::new().bulkhead(config))`"
    )]
    pub fn bulkhead_override(mut self, key: impl Into<K>, config: BulkheadConfig) -> Self
    where
        K: fmt::Debug,
    {
        let key = key.into();
        let name = format!("bulkhead_override[{key:?}]");
        self.controls.bulkhead_overrides.push((key, name, config));
        self
    }

    /// Shadow mode for every key (`true`): each decision is made and
    /// counted, and none enforced; for trying a limit on real traffic
    /// before enforcing it. A tier's or a key's own setting wins. See
    /// [`ThrottleManager::set_shadow`](crate::ThrottleManager::set_shadow).
    ///
    /// ```
    /// use portcullis::{Priority, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(1))
    ///     .shadow(true)
    ///     .build()?;
    /// assert!(manager.try_acquire("api", Priority::HIGH).is_ok());
    /// assert!(manager.try_acquire("api", Priority::HIGH).is_ok()); // would refuse
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn shadow(mut self, shadow: bool) -> Self {
        self.controls.shadow = Some(shadow);
        self
    }

    /// `key_override(key, Tier::new().shadow(shadow))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `key_override(key, Tier::new().shadow(shadow))`"
    )]
    pub fn shadow_override(mut self, key: impl Into<K>, shadow: bool) -> Self {
        self.controls.shadow_overrides.push((key.into(), shadow));
        self
    }

    /// Every key gets an adaptive throttle with these settings: calls are
    /// shed locally, by priority, while the key's backend keeps failing.
    ///
    /// ```
    /// use portcullis::{ThrottleConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
    /// assert_eq!(manager.key("api").rejection_probability(portcullis::Priority::LOW), None); // not live yet
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn throttle(mut self, config: ThrottleConfig) -> Self {
        self.controls.throttle = Some(config);
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
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn bulkhead(mut self, config: BulkheadConfig) -> Self {
        self.controls.bulkhead = Some(config);
        self
    }
}

/// Where each default control is named in errors: as the builder's
/// method (`rate.burst`), or as a configuration file's section
/// (`default.rate.burst`).
#[derive(Debug, Clone, Copy)]
pub(super) struct ControlPaths {
    pub(super) rate: &'static str,
    pub(super) throttle: &'static str,
    pub(super) bulkhead: &'static str,
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

/// Where a control's settings go in a [`Layer`].
type LayerPlace<S> = fn(&mut Layer) -> &mut Option<Arc<S>>;

/// One control from its default config, its tiers' (`of_tier` picks it
/// from a tier) and its overrides, each checked under its own name and put
/// in its `slot` of each level of `book`: `false` when none of them has it.
#[allow(clippy::too_many_arguments)]
fn control<K: Hash + Eq, C, S>(
    default_path: &str,
    default: Option<&C>,
    overrides: Vec<(K, String, C)>,
    tiers: &[(String, Tier)],
    of_tier: impl Fn(&Tier) -> Option<&C>,
    check: impl Fn(&C, &mut Problems<'_>) -> Option<S>,
    found: &mut Vec<ConfigProblem>,
    (book, slot): (&mut SettingsBook<K>, LayerPlace<S>),
) -> bool {
    let mut tiers = tiers
        .iter()
        .filter_map(|(name, tier)| Some((name.as_str(), tier.path.as_deref(), of_tier(tier)?)))
        .peekable();
    if default.is_none() && overrides.is_empty() && tiers.peek().is_none() {
        return false;
    }
    if let Some(config) = default {
        let settings = check(config, &mut Problems::new(default_path, found));
        *slot(&mut book.defaults) = settings.map(Arc::new);
    }
    for (key, name, config) in overrides {
        if let Some(settings) = check(&config, &mut Problems::new(&name, found)) {
            *slot(book.own(key)) = Some(Arc::new(settings));
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
            *slot(book.tiers.entry(tier.to_owned()).or_default()) = Some(Arc::new(settings));
        }
    }
    true
}

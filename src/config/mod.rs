//! Configuration from a file: every control's defaults and per-key
//! overrides, as plain data that serde reads and writes in any format.

use std::collections::BTreeMap;
use std::time::Duration;

use std::hash::Hash;

use serde::{Deserialize, Serialize};

use crate::error::{ConfigError, ConfigProblem};
use crate::manager::ThrottleManager;

mod quota;
mod sections;

pub use quota::Quota;
pub use sections::{BulkheadSection, RateSection, ThrottleSection};

/// # Configuration from a file
impl<K> ThrottleManager<K> where K: Hash + Eq + Send + Sync + 'static {}

/// A whole manager's configuration, as read from a file.
///
/// Durations are humantime strings (`"250ms"`, `"1m"`, `"1h 30m"`). Unknown
/// fields are errors, not silently ignored. Loading is the caller's choice
/// of format (TOML, YAML, JSON, ...); [`ThrottleManager::from_config`]
/// checks everything at once and names every problem by its path.
///
/// ///
/// # Example
///
/// ```
/// use portcullis::builder::ManagerConfig;
/// use portcullis::ThrottleManager;
///
/// let config: ManagerConfig = toml::from_str(r#"
///     [default.rate]
///     starting_rate = 10
///     burst = 5
///     bounds = [1, 200]
///     increase_by = 1
///     decrease_by = 5
///     [default.throttle]
///     ratio = 2.0
///     window = "1m"
///     [default.bulkhead]
///     max_concurrent = 32
///     [overrides."api.github.com".bulkhead]
///     max_concurrent = 4
///     queue = 16
///     queue_timeout = "250ms"
/// "#)?;
/// let manager = ThrottleManager::<String>::builder().config(config).build()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ManagerConfig {
    /// The controls every key gets.
    #[serde(default)]
    pub default: Controls,
    /// Per exact key, settings that replace the default's, control by
    /// control. An override may also give its key a control the default
    /// lacks: only that key then has it.
    #[serde(
        default,
        deserialize_with = "sections::unique_names::deserialize",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub overrides: BTreeMap<String, Controls>,
    /// Named sets of controls ([`Tier`](crate::builder::Tier)s): a key the builder's
    /// [`tier_of`](crate::builder::ThrottleManagerBuilder::tier_of) puts in one
    /// gets its controls in place of the default's, control by control.
    /// Which key is in which tier is code's to say: a file declaring tiers
    /// needs `tier_of` set on the builder.
    #[serde(
        default,
        deserialize_with = "sections::unique_names::deserialize",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub tiers: BTreeMap<String, Controls>,
    /// The key space: `max_keys` and `idle_ttl`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keys: Option<KeysSection>,
    /// Priority levels (default 4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_levels: Option<u8>,
    /// The default timeout of `call`.
    #[serde(
        default,
        with = "sections::opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub call_timeout: Option<Duration>,
    /// The longest pause a `Retry-After` can impose.
    #[serde(
        default,
        with = "sections::opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_defer: Option<Duration>,
    /// The longest `acquire` and `call` wait for a rate token.
    #[serde(
        default,
        with = "sections::opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_wait: Option<Duration>,
    /// Per priority, a `max_wait` in place of the one above (see
    /// [`ThrottleManagerBuilder::max_wait_for`](crate::deadline::TimeLimits::max_wait_for)).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub max_wait_for: Vec<PriorityWait>,
}

impl ManagerConfig {
    /// Reads a configuration from any serde deserializer, naming the path
    /// of the field in every error: `default.rate.starting_rate: invalid
    /// type: string "ten", expected f64`. (`serde_json` alone says only
    /// "line 1, column 40"; the error here names the field the same way
    /// [`ThrottleManager::from_config`] names a bad value.)
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] whose one problem's [`field`](crate::error::ConfigProblem::field)
    /// is the path, and whose message is the format's.
    ///
    /// ```
    /// use portcullis::builder::ManagerConfig;
    ///
    /// let json = r#"{"default": {"rate": {"starting_rate": "ten"}}}"#;
    /// let error = ManagerConfig::from_deserializer(&mut serde_json::Deserializer::from_str(json))
    ///     .unwrap_err();
    /// assert_eq!(error.problems()[0].field(), "default.rate.starting_rate");
    ///
    /// let toml = "[default.rate]\nstarting_rate = 10\nbounds = [1, 20, 30]";
    /// let error = ManagerConfig::from_deserializer(toml::Deserializer::parse(toml)?).unwrap_err();
    /// assert_eq!(error.problems()[0].field(), "default.rate.bounds");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_deserializer<'de, D>(deserializer: D) -> Result<Self, ConfigError>
    where
        D: serde::Deserializer<'de>,
    {
        serde_path_to_error::deserialize(deserializer).map_err(|error| {
            let field = error.path().to_string();
            let message = error.into_inner().to_string();
            ConfigError::new(vec![ConfigProblem::new(field, message)])
        })
    }
}

/// The longest calls at one priority wait for a rate token: an entry of
/// `max_wait_for` in a file.
///
/// ```
/// let config: portcullis::builder::ManagerConfig = toml::from_str(r#"
///     max_wait = "1s"
///     max_wait_for = [{ priority = 3, max_wait = "100ms" }]
/// "#)?;
/// assert_eq!(config.max_wait_for[0].priority, 3);
/// assert_eq!(config.max_wait_for[0].max_wait, std::time::Duration::from_millis(100));
/// # Ok::<(), toml::de::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct PriorityWait {
    /// The priority level: 0 is the most important.
    pub priority: u8,
    /// The longest a call at this priority waits.
    #[serde(with = "sections::duration")]
    pub max_wait: Duration,
}

/// The controls of a key: each one present or not.
///
/// ```
/// let controls = portcullis::builder::Controls::default();
/// assert!(controls.rate.is_none());
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Controls {
    /// The adaptive rate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<RateSection>,
    /// The adaptive throttle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle: Option<ThrottleSection>,
    /// The bulkhead.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulkhead: Option<BulkheadSection>,
    /// Shadow mode: every decision counted and none enforced (see
    /// [`ThrottleManager::set_shadow`](crate::ThrottleManager::set_shadow));
    /// unset, the next level's (a key's, then its tier's, then the
    /// default's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<bool>,
    /// Named limits beside the rate, by name
    /// ([`limit`](crate::builder::ThrottleManagerBuilder::limit)): `default`'s
    /// declare them, a tier's or a key's replace the default's settings.
    #[serde(
        default,
        deserialize_with = "sections::unique_names::deserialize",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub limits: BTreeMap<String, RateSection>,
}

/// The key space's bounds.
///
/// ```
/// let keys: portcullis::builder::KeysSection = toml::from_str(r#"max_keys = 10000
/// idle_ttl = "5m"
/// max_hold = "30s""#).unwrap();
/// assert_eq!(keys.max_keys, Some(10_000));
/// assert_eq!(keys.max_hold, Some(std::time::Duration::from_secs(30)));
/// ```
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct KeysSection {
    /// See [`ThrottleManagerBuilder::max_keys`](crate::builder::KeySpaceConfig::max_keys).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_keys: Option<usize>,
    /// See [`ThrottleManagerBuilder::idle_ttl`](crate::builder::KeySpaceConfig::idle_ttl).
    #[serde(
        default,
        with = "sections::opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub idle_ttl: Option<Duration>,
    /// See [`ThrottleManagerBuilder::max_hold`](crate::builder::KeySpaceConfig::max_hold).
    #[serde(
        default,
        with = "sections::opt_duration",
        skip_serializing_if = "Option::is_none"
    )]
    pub max_hold: Option<Duration>,
}

/// # Deprecated 0.3 names
impl<K> crate::ThrottleManager<K>
where
    K: std::hash::Hash + Eq + Send + Sync + 'static,
{
    /// `builder().config(config).build()`.
    #[deprecated(
        since = "0.4.0",
        note = "use `ThrottleManager::builder().config(config).build()`"
    )]
    pub fn from_config(config: ManagerConfig) -> Result<Self, ConfigError>
    where
        K: From<String>,
    {
        Self::builder().config(config).build()
    }
}

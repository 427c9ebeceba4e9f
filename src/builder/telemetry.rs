//! The builder's settings of what the manager tells the outside: how its
//! keys are named in events and metrics, and its own name.

use std::fmt;
use std::hash::Hash;

use super::ThrottleManagerBuilder;
use crate::error::{ConfigProblem, Problems};
use crate::manager::{KeyNamer, KeyNames};

/// The names as set.
pub(super) struct TelemetryParts<K> {
    /// How events and per-key metrics name a key.
    pub(super) key_names: Option<Box<KeyNames<K>>>,
    /// Whether metrics carry a `key` label.
    pub(super) metrics_per_key: bool,
    /// The manager's name: the `manager` label of its metrics.
    pub(super) name: Option<String>,
}

impl<K> Default for TelemetryParts<K> {
    fn default() -> Self {
        Self {
            key_names: None,
            metrics_per_key: false,
            name: None,
        }
    }
}

impl<K> fmt::Debug for TelemetryParts<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryParts")
            .field("key_names", &self.key_names.is_some())
            .field("metrics_per_key", &self.metrics_per_key)
            .field("name", &self.name)
            .finish()
    }
}

/// The names, checked.
pub(super) struct CheckedTelemetry<K> {
    pub(super) key_names: Option<KeyNamer<K>>,
    pub(super) metrics_per_key: bool,
    pub(super) name: Option<String>,
}

impl<K> TelemetryParts<K> {
    /// Checks the manager's name, and that per-key metrics have key names.
    pub(super) fn check(self, found: &mut Vec<ConfigProblem>) -> CheckedTelemetry<K> {
        if let Some(name) = &self.name {
            if name.is_empty() || name.len() > 64 || name.chars().any(char::is_control) {
                Problems::new("", found).add(
                    "name",
                    format!("must be 1 to 64 bytes without control characters, got {name:?}"),
                );
            }
        }
        if self.metrics_per_key && self.key_names.is_none() {
            Problems::new("", found).add(
                "metrics_per_key",
                "needs key names for the label; call .key_names(...) too",
            );
        }
        CheckedTelemetry {
            key_names: self.key_names.map(KeyNamer::new),
            metrics_per_key: self.metrics_per_key,
            name: self.name,
        }
    }
}

/// # Telemetry: names in events and metrics
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
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .key_names(|host: &String| host.clone()) // hosts are fine to log
    ///     .build()?;
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn key_names(mut self, name: impl Fn(&K) -> String + Send + Sync + 'static) -> Self {
        self.telemetry.key_names = Some(Box::new(name));
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
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    #[cfg(feature = "metrics")]
    #[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
    pub fn metrics_per_key(mut self, per_key: bool) -> Self {
        self.telemetry.metrics_per_key = per_key;
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
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .name("hosts")
    ///     .build()?;
    /// assert_eq!(hosts.settings().name(), Some("hosts"));
    /// let refused = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::adaptive(10.0))
    ///     .name("")
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(refused.problems()[0].field(), "name");
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.telemetry.name = Some(name.into());
        self
    }
}

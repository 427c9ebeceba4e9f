//! A [`ManagerConfig`] read into the builder's parts: the one way a file
//! reaches a manager. Each section's problems are kept under its path in
//! the file, for `build` to report with the rest.

use std::hash::Hash;

use super::controls::CheckedControls;
use super::{ThrottleManagerBuilder, Tier};
use crate::config::ManagerConfig;
use crate::error::ConfigProblem;
use crate::priority::Priority;

/// # Configuration from a file
impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// A file section's config (`made`, from its `to_config`), or `None`
    /// with its problem noted under `path` for `build` to report.
    fn section<T>(&mut self, made: Result<T, String>, path: &str) -> Option<T> {
        made.map_err(|problem| self.file_problems.push(ConfigProblem::new(path, problem)))
            .ok()
    }

    /// Takes every setting `config` has: the default controls, the per-key
    /// overrides, the key space, the priority levels and the timeouts. What
    /// the file does not set keeps what was set in code before; settings
    /// made in code afterwards win. Nothing is checked until
    /// [`build`](ThrottleManagerBuilder::build), which names every problem by its path in
    /// the file (`overrides."api".bulkhead.queue`).
    ///
    /// ```
    /// use portcullis::outcome::transport_overload;
    /// use portcullis::builder::ManagerConfig;
    /// use portcullis::ThrottleManager;
    ///
    /// let config: ManagerConfig = toml::from_str("[default.rate]\nstarting_rate = 10")?;
    /// let manager = ThrottleManager::<String>::builder()
    ///     .config(config)
    ///     .classifier(transport_overload) // what a file cannot say
    ///     .build()?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn config(mut self, config: ManagerConfig) -> Self
    where
        K: From<String>,
    {
        let default = config.default;
        if default.shadow.is_some() {
            self.controls.shadow = default.shadow;
        }
        if let Some(rate) = &default.rate {
            self.controls.paths.rate = "default.rate";
            if let Some(rate) = self.section(rate.to_config(), "default.rate") {
                self.controls.rate = Some(rate);
            }
        }
        if let Some(throttle) = &default.throttle {
            self.controls.paths.throttle = "default.throttle";
            self.controls.throttle = Some(throttle.to_config());
        }
        if let Some(bulkhead) = &default.bulkhead {
            self.controls.paths.bulkhead = "default.bulkhead";
            if let Some(bulkhead) = self.section(bulkhead.to_config(), "default.bulkhead") {
                self.controls.bulkhead = Some(bulkhead);
            }
        }
        for (name, limit) in &default.limits {
            let path = format!("default.limits.{name:?}");
            if let Some(limit) = self.section(limit.to_config(), &path) {
                self.limits.limits.push((name.clone(), path, limit));
            }
        }
        for (name, controls) in config.tiers {
            let at = format!("tiers.{name:?}");
            let mut tier = Tier::new();
            if let Some(rate) = &controls.rate {
                if let Some(rate) = self.section(rate.to_config(), &format!("{at}.rate")) {
                    tier = tier.rate(rate);
                }
            }
            if let Some(throttle) = &controls.throttle {
                tier = tier.throttle(throttle.to_config());
            }
            if let Some(bulkhead) = &controls.bulkhead {
                if let Some(bulkhead) =
                    self.section(bulkhead.to_config(), &format!("{at}.bulkhead"))
                {
                    tier = tier.bulkhead(bulkhead);
                }
            }
            for (limit, section) in &controls.limits {
                let path = format!("{at}.limits.{limit:?}");
                if let Some(config) = self.section(section.to_config(), &path) {
                    tier = tier.limit(limit.clone(), config);
                }
            }
            tier.shadow = controls.shadow;
            tier.path = Some(at);
            self = self.tier(name, tier);
        }
        for (key, controls) in config.overrides {
            let path = |control: &str| format!("overrides.{key:?}.{control}");
            if let Some(shadow) = controls.shadow {
                self.controls
                    .shadow_overrides
                    .push((key.clone().into(), shadow));
            }
            if let Some(rate) = &controls.rate {
                if let Some(rate) = self.section(rate.to_config(), &path("rate")) {
                    self.controls
                        .rate_overrides
                        .push((key.clone().into(), path("rate"), rate));
                }
            }
            if let Some(throttle) = &controls.throttle {
                let entry = (key.clone().into(), path("throttle"), throttle.to_config());
                self.controls.throttle_overrides.push(entry);
            }
            for (limit, section) in &controls.limits {
                let at = path(&format!("limits.{limit:?}"));
                if let Some(config) = self.section(section.to_config(), &at) {
                    let entry = (key.clone().into(), limit.clone(), at, config);
                    self.limits.overrides.push(entry);
                }
            }
            if let Some(bulkhead) = &controls.bulkhead {
                if let Some(bulkhead) = self.section(bulkhead.to_config(), &path("bulkhead")) {
                    self.controls.bulkhead_overrides.push((
                        key.clone().into(),
                        path("bulkhead"),
                        bulkhead,
                    ));
                }
            }
        }
        if let Some(keys) = config.keys {
            self.key_space.path = "keys";
            if let Some(max_keys) = keys.max_keys {
                self.key_space.max_keys = max_keys;
            }
            if let Some(ttl) = keys.idle_ttl {
                self.key_space.idle_ttl = Some(ttl);
            }
            if let Some(hold) = keys.max_hold {
                self.key_space.max_hold = hold;
            }
        }
        if let Some(levels) = config.priority_levels {
            self.calls.priority_levels = levels;
        }
        if let Some(timeout) = config.call_timeout {
            self.calls.call_timeout = Some(timeout);
        }
        if let Some(max) = config.max_defer {
            self.calls.max_defer = max;
        }
        if let Some(max) = config.max_wait {
            self.calls.max_wait = Some(max);
        }
        for wait in config.max_wait_for {
            self.calls
                .max_wait_for
                .push((Priority::new(wait.priority), wait.max_wait));
        }
        self
    }

    /// The controls of a file being reloaded into a live manager, checked,
    /// with the file's problems.
    pub(crate) fn reload_parts(self, found: &mut Vec<ConfigProblem>) -> CheckedControls<K> {
        found.extend(self.file_problems);
        self.controls.check(found, true)
    }
}

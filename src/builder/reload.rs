//! A whole configuration file applied to a live manager.

use std::hash::Hash;
use std::time::Duration;

use crate::config::ManagerConfig;
use crate::core::Controls;
use crate::error::{ConfigError, ConfigProblem};
use crate::manager::{Layer, SettingsBook, ThrottleManager};

/// # Reloading the configuration file
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Applies `config` (the manager's file, read again) to the live
    /// manager, all of it or none: each default control the file sets
    /// replaces the manager's, each tier the file declares replaces the
    /// tier of that name whole, and the per-key overrides become the
    /// file's (overrides made with `set_*_override` since are dropped; a
    /// default or a tier the file leaves out keeps what it was). Every key
    /// moves to its new settings at its next call (after asking `tier_of`
    /// again), keeping what it learned as any change does (see
    /// [`set_rate_override`](Self::set_rate_override),
    /// [`set_bulkhead_override`](Self::set_bulkhead_override)). Applying an
    /// unchanged file changes nothing.
    ///
    /// # Errors
    ///
    /// A [`ConfigError`] naming by its path in the file every bad value,
    /// and every setting a live manager cannot change: a control the
    /// manager was built without, `priority_levels`, `call_timeout`,
    /// `max_defer`, `max_wait`, `max_wait_for` and the `keys` section, each
    /// refused only when the file's value differs from the manager's; tiers
    /// when the manager has no `tier_of`. Nothing is applied then.
    ///
    /// ```
    /// use portcullis::{ManagerConfig, RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(10).burst(5))
    ///     .build()?;
    /// manager.check("api").unwrap();
    /// let config: ManagerConfig = toml::from_str("[default.rate]\nquota = \"20/s\"\nburst = 5\n")?;
    /// manager.reload(config)?;
    /// assert_eq!(manager.current_rate("api"), Some(10.0)); // until its next call
    /// let _ = manager.check("api");
    /// assert_eq!(manager.current_rate("api"), Some(20.0));
    ///
    /// let config: ManagerConfig = toml::from_str("priority_levels = 8")?;
    /// let error = manager.reload(config).unwrap_err();
    /// assert_eq!(error.problems()[0].field(), "priority_levels");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn reload(&self, config: ManagerConfig) -> Result<(), ConfigError>
    where
        K: From<String>,
    {
        let mut found = Vec::new();
        self.refuse_fixed(&config, &mut found);
        if !config.tiers.is_empty() && !self.has_tier_of() {
            found.push(ConfigProblem::new(
                "tiers",
                "declared, and the manager was built without tier_of, which puts keys in them",
            ));
        }
        let checked = ThrottleManager::<K>::builder()
            .config(config)
            .reload_parts(&mut found);
        refuse_new_controls(
            self.core().controls,
            checked.controls,
            &checked.book,
            &mut found,
        );
        if let Some(error) = ConfigError::from_problems(found) {
            return Err(error);
        }
        self.apply_file(checked.book);
        Ok(())
    }

    /// Notes each setting in `config` that a live manager cannot change,
    /// where the file gives it a value other than the manager's.
    fn refuse_fixed(&self, config: &ManagerConfig, found: &mut Vec<ConfigProblem>) {
        let core = self.core();
        let mut refuse = |path: &str, now: String, file: String| {
            found.push(ConfigProblem::new(
                path,
                format!("cannot change on a live manager ({now} now, {file} in the file)"),
            ));
        };
        let levels = core.priorities.levels;
        if let Some(file) = config.priority_levels.filter(|&file| file != levels) {
            refuse("priority_levels", levels.to_string(), file.to_string());
        }
        let mut durations = [
            ("call_timeout", core.call_timeout, config.call_timeout),
            ("max_defer", Some(core.max_defer), config.max_defer),
        ];
        for (path, now, file) in &mut durations {
            if file.is_some() && file != now {
                refuse(path, shown(*now), shown(*file));
            }
        }
        for (level, now) in core.max_wait.iter().enumerate() {
            let for_level = config.max_wait_for.iter().rev();
            let mut for_level = for_level.filter(|wait| usize::from(wait.priority) == level);
            let file = match for_level.next() {
                Some(wait) => Some(wait.max_wait),
                None if config.max_wait.is_some() => config.max_wait,
                None => continue,
            };
            if file != *now {
                let path = format!("max_wait (priority {level})");
                refuse(&path, shown(*now), shown(file));
            }
        }
        let Some(keys) = &config.keys else {
            return;
        };
        let (max_keys, idle_ttl, max_hold) = self.key_space_bounds();
        if let Some(file) = keys.max_keys.filter(|&file| file != max_keys) {
            refuse("keys.max_keys", max_keys.to_string(), file.to_string());
        }
        let idle_ttl = idle_ttl.map(Duration::from_nanos);
        if keys.idle_ttl.is_some() && keys.idle_ttl != idle_ttl {
            refuse("keys.idle_ttl", shown(idle_ttl), shown(keys.idle_ttl));
        }
        let max_hold = Some(Duration::from_nanos(max_hold));
        if keys.max_hold.is_some() && keys.max_hold != max_hold {
            refuse("keys.max_hold", shown(max_hold), shown(keys.max_hold));
        }
    }
}

/// A duration as a file writes it; `none` for no limit.
fn shown(duration: Option<Duration>) -> String {
    duration.map_or_else(
        || "none".to_owned(),
        |d| humantime::format_duration(d).to_string(),
    )
}

/// Notes each control the file sets that the manager was built without,
/// at the first place the file sets it.
fn refuse_new_controls<K>(
    live: Controls,
    file: Controls,
    book: &SettingsBook<K>,
    found: &mut Vec<ConfigProblem>,
) {
    let missing = [
        ("rate", file.rate && !live.rate, "a rate"),
        ("throttle", file.throttle && !live.throttle, "a throttle"),
        ("bulkhead", file.bulkhead && !live.bulkhead, "a bulkhead"),
    ];
    for (control, _, what) in missing.into_iter().filter(|(_, missing, _)| *missing) {
        let sets = |layer: &Layer| match control {
            "rate" => layer.rate.is_some(),
            "throttle" => layer.throttle.is_some(),
            _ => layer.bulkhead.is_some(),
        };
        let place = if sets(&book.defaults) {
            "default".to_owned()
        } else if let Some((name, _)) = book.tiers.iter().find(|(_, tier)| sets(tier)) {
            format!("tiers.{name:?}")
        } else {
            "overrides".to_owned()
        };
        found.push(ConfigProblem::new(
            format!("{place}.{control}"),
            format!(
                "the manager was built without {what}; a control cannot be added to a live manager"
            ),
        ));
    }
}

//! A whole configuration file applied to a live manager.

use std::hash::Hash;
use std::time::Duration;

use crate::config::{self, ManagerConfig};
use crate::core::BuiltControls;
use crate::error::{ConfigError, ConfigProblem};
use crate::manager::{Layer, NamedLimit, SettingsBook, ThrottleManager};

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
    /// when the manager has no `tier_of`; a named limit (`limits`) the
    /// manager was built without. Nothing is applied then. The named limits
    /// the file sets move as the rate does.
    ///
    /// ```
    /// use portcullis::builder::ManagerConfig;
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_second(10).burst(5))
    ///     .build()?;
    /// manager.check("api").unwrap();
    /// let config: ManagerConfig = toml::from_str("[default.rate]\nquota = \"20/s\"\nburst = 5\n")?;
    /// manager.reload(config)?;
    /// assert_eq!(manager.key("api").rate(), Some(10.0)); // until its next call
    /// let _ = manager.check("api");
    /// assert_eq!(manager.key("api").rate(), Some(20.0));
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
        let limits = self.limit_files(&config, &mut found);
        let book = self.checked_file(config, &mut found);
        let limits: Vec<_> = (limits.into_iter())
            .map(|(limit, file)| {
                let mut own = Vec::new();
                let book = limit.manager.checked_file(file, &mut own);
                found.extend(own.iter().map(|problem| {
                    let field = in_limit(problem.field(), &limit.name);
                    ConfigProblem::new(field, problem.message())
                }));
                (limit, book)
            })
            .collect();
        if let Some(error) = ConfigError::from_problems(found) {
            return Err(error);
        }
        self.room_for_settings(self.levels_changed_by(&book))?;
        for (limit, book) in &limits {
            let added = limit.manager.levels_changed_by(book);
            limit.manager.room_for_settings(added).map_err(|error| {
                let problems = error.problems().iter().map(|problem| {
                    ConfigProblem::new(in_limit(problem.field(), &limit.name), problem.message())
                });
                ConfigError::new(problems.collect())
            })?;
        }
        self.apply_file(book);
        for (limit, book) in limits {
            limit.manager.apply_file(book);
        }
        Ok(())
    }

    /// `config` checked as a live manager can take it: the settings to
    /// apply, every problem into `found`.
    fn checked_file(&self, config: ManagerConfig, found: &mut Vec<ConfigProblem>) -> SettingsBook<K>
    where
        K: From<String>,
    {
        self.refuse_fixed(&config, found);
        if !config.tiers.is_empty() && !self.has_tier_of() {
            found.push(ConfigProblem::new(
                "tiers",
                "declared, and the manager was built without tier_of, which puts keys in them",
            ));
        }
        let checked = ThrottleManager::<K>::builder()
            .config(config)
            .reload_parts(found);
        refuse_new_controls(
            self.core().controls(),
            checked.controls,
            &checked.book,
            found,
        );
        checked.book
    }

    /// Each named limit's part of `config`, as a file of its own manager
    /// (the limit's settings as its rate); every limit the file names that
    /// the manager was built without into `found`. A limit the file leaves
    /// out keeps what it was, as a default does.
    fn limit_files(
        &self,
        config: &ManagerConfig,
        found: &mut Vec<ConfigProblem>,
    ) -> Vec<(&NamedLimit<K>, ManagerConfig)> {
        let places = std::iter::once(("default".to_owned(), &config.default))
            .chain(
                config
                    .tiers
                    .iter()
                    .map(|(name, tier)| (format!("tiers.{name:?}"), tier)),
            )
            .chain(
                config
                    .overrides
                    .iter()
                    .map(|(key, own)| (format!("overrides.{key:?}"), own)),
            );
        for (place, controls) in places {
            for name in controls.limits.keys() {
                if self.limit(name).is_none() {
                    found.push(ConfigProblem::new(
                        format!("{place}.limits.{name:?}"),
                        "the manager was built without this limit; a limit cannot be added to a live manager",
                    ));
                }
            }
        }
        let as_rate = |controls: &config::Controls, name: &str| {
            Some(config::Controls {
                rate: Some(controls.limits.get(name)?.clone()),
                ..Default::default()
            })
        };
        (self.named_limits().iter())
            .map(|limit| {
                let mut file = ManagerConfig::default();
                if let Some(own) = as_rate(&config.default, &limit.name) {
                    file.default = own;
                }
                for (name, tier) in &config.tiers {
                    if let Some(own) = as_rate(tier, &limit.name) {
                        file.tiers.insert(name.clone(), own);
                    }
                }
                for (key, controls) in &config.overrides {
                    if let Some(own) = as_rate(controls, &limit.name) {
                        file.overrides.insert(key.clone(), own);
                    }
                }
                (limit, file)
            })
            .collect()
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
        let levels = core.priorities().levels;
        if let Some(file) = config.priority_levels.filter(|&file| file != levels) {
            refuse("priority_levels", levels.to_string(), file.to_string());
        }
        let mut durations = [
            ("call_timeout", core.call_timeout(), config.call_timeout),
            ("max_defer", Some(core.max_defer()), config.max_defer),
        ];
        for (path, now, file) in &mut durations {
            if file.is_some() && file != now {
                refuse(path, shown(*now), shown(*file));
            }
        }
        for (level, now) in core.max_waits().iter().enumerate() {
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

/// Where a problem of a limit's file (`field`, its settings as a rate) is
/// in the manager's file: `tiers."pro".rate.burst` is
/// `tiers."pro".limits."tokens".burst`.
fn in_limit(field: &str, limit: &str) -> String {
    // No field of a rate's section has `.rate` in its name: the last one
    // is the section's, whatever a key's name holds.
    match field.rfind(".rate") {
        Some(at) => format!("{}.limits.{limit:?}{}", &field[..at], &field[at + 5..]),
        None => field.to_owned(),
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
    live: BuiltControls,
    file: BuiltControls,
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

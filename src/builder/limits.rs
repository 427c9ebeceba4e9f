//! The builder's named limits: further rates of every key beside its own
//! (tokens a minute beside requests a minute), each kept by a manager of
//! its own with a rate alone (see `manager/metered.rs`).

use std::fmt;
use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::{KeySpaceConfig, ThrottleManagerBuilder, Tier};
use crate::clock::Clock;
use crate::error::{ConfigProblem, Problems};
use crate::manager::{NamedLimit, ThrottleManager, TierOf};
use crate::metered::REQUESTS;
use crate::rate::RateConfig;

/// The longest name of a limit: it is a metric's label.
const MAX_NAME: usize = 64;

/// The named limits as declared, in order, each with where `build` names
/// its problems (`limit["tokens"]`, or a file's `default.limits."tokens"`),
/// and the keys that have their own.
pub(super) struct LimitParts<K> {
    pub(super) limits: Vec<(String, String, RateConfig)>,
    /// A key's own settings of a limit: the key, the limit, the path.
    pub(super) overrides: Vec<(K, String, String, RateConfig)>,
}

impl<K> Default for LimitParts<K> {
    fn default() -> Self {
        Self {
            limits: Vec::new(),
            overrides: Vec::new(),
        }
    }
}

impl<K> fmt::Debug for LimitParts<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LimitParts")
            .field("limits", &self.limits)
            .field("overrides", &self.overrides.len())
            .finish()
    }
}

/// What a named limit's manager shares with the manager it belongs to.
pub(super) struct LimitHome<'a, K> {
    pub(super) clock: &'a Arc<dyn Clock>,
    pub(super) max_keys: usize,
    /// `None`: idle keys are kept.
    pub(super) idle_ttl: Option<Duration>,
    pub(super) name: Option<&'a str>,
    /// The manager's tiers, whose keys may have their own limits.
    pub(super) tiers: &'a [(String, Tier)],
    pub(super) tier_of: Option<&'a Arc<TierOf<K>>>,
}

impl<K> LimitParts<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Each limit's manager, built on `home`'s clock and key space bounds,
    /// with the tiers' and the keys' own settings of it; every bad name or
    /// setting reported under its path.
    pub(super) fn build(
        self,
        home: &LimitHome<'_, K>,
        found: &mut Vec<ConfigProblem>,
    ) -> Box<[NamedLimit<K>]> {
        let declared: Vec<&str> = self.limits.iter().map(|(name, ..)| name.as_str()).collect();
        for (tier, settings) in home.tiers {
            for (limit, _) in &settings.limits {
                if !declared.contains(&limit.as_str()) {
                    undeclared(&tier_path(tier, settings, limit), found);
                }
            }
        }
        let mut overrides = self.overrides;
        overrides.retain(|(_, limit, path, _)| {
            let known = declared.contains(&limit.as_str());
            if !known {
                undeclared(path, found);
            }
            known
        });
        let mut built: Vec<NamedLimit<K>> = Vec::with_capacity(self.limits.len());
        for (name, path, config) in self.limits {
            if let Some(problem) = name_problem(&name) {
                Problems::new("", found).add(&path, problem);
                continue;
            }
            if built.iter().any(|limit| *limit.name == *name) {
                let problem = "declared twice; a key has one limit by each name";
                Problems::new("", found).add(&path, problem);
                continue;
            }
            let mut builder = ThrottleManager::<K>::builder()
                .rate(config)
                .shared_clock(Arc::clone(home.clock))
                .key_space(match home.idle_ttl {
                    Some(ttl) => KeySpaceConfig::new().max_keys(home.max_keys).idle_ttl(ttl),
                    None => KeySpaceConfig::new()
                        .max_keys(home.max_keys)
                        .keep_idle_keys(),
                })
                .name(match home.name {
                    Some(manager) => format!("{manager}.{name}"),
                    None => format!("limit.{name}"),
                });
            for (tier, settings) in home.tiers {
                let Some((_, config)) = settings.limits.iter().find(|(limit, _)| *limit == name)
                else {
                    continue;
                };
                let mut own = Tier::new().rate(config.clone());
                own.path = Some(tier_path(tier, settings, &name));
                builder = builder.tier(tier.clone(), own);
            }
            if let Some(tier_of) = home.tier_of {
                builder.controls.tier_of = Some(Arc::clone(tier_of));
                builder.controls.tier_of_alone = true;
            }
            for (key, _, path, config) in extract(&mut overrides, &name) {
                builder.controls.rate_overrides.push((key, path, config));
            }
            match builder.build() {
                Ok(manager) => built.push(NamedLimit {
                    name: name.into(),
                    manager,
                }),
                Err(error) => found.extend(error.problems().iter().map(|problem| {
                    ConfigProblem::new(named(problem.field(), &path), problem.message())
                })),
            }
        }
        built.into_boxed_slice()
    }
}

/// Takes out of `overrides` those of the limit `name`.
fn extract<K>(
    overrides: &mut Vec<(K, String, String, RateConfig)>,
    name: &str,
) -> Vec<(K, String, String, RateConfig)> {
    let (ours, rest) = std::mem::take(overrides)
        .into_iter()
        .partition(|(_, limit, ..)| limit == name);
    *overrides = rest;
    ours
}

/// Where a problem a limit's manager found (`field`) is in the manager's
/// settings: its default's (`rate...`) under the limit's `path`; a tier's
/// or a key's own already name their place, but for the `.rate` of the
/// limit's manager.
fn named(field: &str, path: &str) -> String {
    match field.strip_prefix("rate") {
        Some(rest) => format!("{path}{rest}"),
        None => field.replace(".rate", ""),
    }
}

/// Where the tier `name`'s (`tier`'s) own settings of `limit` are: in a
/// file, `tiers."pro".limits."tokens"`; in code, `tier["pro"].limit["tokens"]`.
fn tier_path(name: &str, tier: &Tier, limit: &str) -> String {
    match &tier.path {
        Some(at) => format!("{at}.limits.{limit:?}"),
        None => format!("tier[{name:?}].limit[{limit:?}]"),
    }
}

fn undeclared(path: &str, found: &mut Vec<ConfigProblem>) {
    let problem =
        "no such limit: declare it for every key with .limit(name, config) on the builder";
    Problems::new("", found).add(path, problem);
}

/// What is wrong with `name` as a limit's name, if anything.
fn name_problem(name: &str) -> Option<String> {
    if name == REQUESTS {
        return Some(format!(
            "{REQUESTS:?} is the key's own rate: set it with .rate(...), and charge it with \
             Cost::requests(n)"
        ));
    }
    let valid = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    if name.is_empty() || name.len() > MAX_NAME || !name.chars().all(valid) {
        return Some(format!(
            "a limit's name is 1 to {MAX_NAME} ASCII letters, digits, '_', '-' or '.', got \
             {name:?}"
        ));
    }
    None
}

/// # Named limits: further rates of every key
impl<K> ThrottleManagerBuilder<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Gives every key a further limit named `name` beside its rate: a
    /// fixed quota or an adaptive rate of its own (tokens a minute beside
    /// the rate's requests a minute). A call states what it costs in each
    /// limit ([`Cost`](crate::metered::Cost)) through
    /// [`acquire_cost`](ThrottleManager::acquire_cost), and is admitted
    /// once every limit has room; [`limit`](ThrottleManager::limit) hands
    /// out the limit's own manager, to inspect or override a key's.
    ///
    /// The manager needs a [`rate`](Self::rate) (the requests) for its
    /// named limits to count: `build` says so otherwise.
    ///
    /// # Errors (at `build`)
    ///
    /// A name declared twice, named `"requests"` (the key's own rate), or
    /// not 1 to 64 ASCII letters, digits, `_`, `-` or `.`; a bad
    /// `config`, named `limit["name"].field`.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(500)) // requests
    ///     .limit("input_tokens", RateConfig::per_minute(30_000).burst(5_000))
    ///     .limit("output_tokens", RateConfig::per_minute(8_000).burst(2_000))
    ///     .build()?;
    /// # drop(manager);
    /// let error = ThrottleManager::<String>::builder()
    ///     .rate(RateConfig::per_minute(500))
    ///     .limit("tokens", RateConfig::per_minute(10_000).burst(0))
    ///     .build()
    ///     .unwrap_err();
    /// assert_eq!(error.problems()[0].field(), "limit[\"tokens\"].burst");
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn limit(mut self, name: impl Into<String>, config: RateConfig) -> Self {
        let name = name.into();
        let path = format!("limit[{name:?}]");
        self.limits.limits.push((name, path, config));
        self
    }

    /// `key_override(key, Tier::new().limit(limit, config))`.
    #[deprecated(
        since = "0.4.0",
        note = "replaced by `key_override(key, Tier::new().limit(limit, config))`"
    )]
    pub fn limit_override(mut self, key: K, limit: impl Into<String>, config: RateConfig) -> Self {
        let limit = limit.into();
        let path = format!("limit_override[{limit:?}]");
        self.limits.overrides.push((key, limit, path, config));
        self
    }
}

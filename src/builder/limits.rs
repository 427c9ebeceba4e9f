//! The builder's named limits: further rates of every key beside its own
//! (tokens a minute beside requests a minute), each kept by a manager of
//! its own with a rate alone (see `manager/metered.rs`).

use std::hash::Hash;
use std::sync::Arc;
use std::time::Duration;

use super::ThrottleManagerBuilder;
use crate::clock::Clock;
use crate::error::{ConfigProblem, Problems};
use crate::manager::{NamedLimit, ThrottleManager};
use crate::metered::REQUESTS;
use crate::rate::RateConfig;

/// The longest name of a limit: it is a metric's label.
const MAX_NAME: usize = 64;

/// The named limits as declared, in order.
#[derive(Debug, Default)]
pub(super) struct LimitParts {
    pub(super) limits: Vec<(String, RateConfig)>,
}

/// What a named limit's manager shares with the manager it belongs to.
pub(super) struct LimitHome<'a> {
    pub(super) clock: &'a Arc<dyn Clock>,
    pub(super) max_keys: usize,
    /// `None`: idle keys are kept.
    pub(super) idle_ttl: Option<Duration>,
    pub(super) name: Option<&'a str>,
}

impl LimitParts {
    /// Each limit's manager, built on `home`'s clock and key space bounds;
    /// every bad name or setting reported as `limit["name"].field`.
    pub(super) fn build<K>(
        self,
        home: &LimitHome<'_>,
        found: &mut Vec<ConfigProblem>,
    ) -> Box<[NamedLimit<K>]>
    where
        K: Hash + Eq + Send + Sync + 'static,
    {
        let mut built: Vec<NamedLimit<K>> = Vec::with_capacity(self.limits.len());
        for (name, config) in self.limits {
            let path = format!("limit[{name:?}]");
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
                .max_keys(home.max_keys)
                .name(match home.name {
                    Some(manager) => format!("{manager}.{name}"),
                    None => format!("limit.{name}"),
                });
            builder = match home.idle_ttl {
                Some(ttl) => builder.idle_ttl(ttl),
                None => builder.keep_idle_keys(),
            };
            match builder.build() {
                Ok(manager) => built.push(NamedLimit {
                    name: name.into_boxed_str(),
                    manager,
                }),
                Err(error) => found.extend(error.problems().iter().map(|problem| {
                    let field = problem
                        .field()
                        .strip_prefix("rate")
                        .unwrap_or(problem.field());
                    ConfigProblem::new(format!("{path}{field}"), problem.message())
                })),
            }
        }
        built.into_boxed_slice()
    }
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
    /// limit ([`Cost`](crate::Cost)) through
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
    /// # Ok::<(), portcullis::ConfigError>(())
    /// ```
    pub fn limit(mut self, name: impl Into<String>, config: RateConfig) -> Self {
        self.limits.limits.push((name.into(), config));
        self
    }
}

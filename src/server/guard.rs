//! The service guard: one concurrency limit for the whole service (or one
//! per route group), in front of the handler and behind each client's own
//! controls, shedding the least important requests first.

use super::key::LayerKey;
use crate::ThrottleManager;
use crate::bulkhead::{BulkheadConfig, Overflow};
use crate::error::ConfigProblem;

/// The guard's key for requests no route group takes: the whole service.
pub(super) const WHOLE_SERVICE: &str = "/";

/// The guard of a layer: a manager of its own, whose keys are the route
/// groups (`/` for the whole service), each with its bulkhead.
#[derive(Debug, Clone)]
pub(super) struct ServiceGuard {
    pub(super) manager: ThrottleManager<String>,
    /// The groups' prefixes, longest first; `/` last, if the whole service
    /// is guarded.
    groups: Vec<String>,
}

impl ServiceGuard {
    /// The group a request to `path` is guarded by, if any: the longest
    /// prefix it is at or under.
    pub(super) fn key_for(&self, path: &str) -> Option<&str> {
        self.groups
            .iter()
            .find(|prefix| under(path, prefix))
            .map(String::as_str)
    }

    /// The guard of `groups` (prefix and limit, `/` the whole service),
    /// judging priorities as `clients` does and on its clock; `None` with
    /// the problems added to `problems` if a limit is invalid.
    pub(super) fn build<K: LayerKey>(
        groups: &[(String, BulkheadConfig)],
        clients: &ThrottleManager<K>,
        problems: &mut Vec<ConfigProblem>,
    ) -> Option<Self> {
        let before = problems.len();
        for (prefix, config) in groups {
            if let Err(error) = config.validate() {
                let field = |inner: &str| match prefix.as_str() {
                    WHOLE_SERVICE => format!("service_guard{inner}"),
                    group => format!("service_guard_for[{group:?}]{inner}"),
                };
                problems.extend(error.problems().iter().map(|problem| {
                    let inner = problem.field().strip_prefix("bulkhead").unwrap_or("");
                    ConfigProblem::new(field(inner), problem.message())
                }));
            }
        }
        let (_, first) = groups.first()?;
        if problems.len() > before {
            return None;
        }
        let manager = ThrottleManager::<String>::builder()
            .bulkhead(by_priority(first))
            .priority_levels(clients.settings().priority_levels())
            .name("service_guard")
            .key_names(String::clone)
            .clock(clients.settings().clock())
            .build()
            .expect("the guard's limits were checked");
        for (prefix, config) in &groups[1..] {
            manager
                .key(prefix.as_str())
                .set_bulkhead(by_priority(config))
                .expect("a checked limit, on a manager with a bulkhead");
        }
        // Longest first; `/` is the shortest of all.
        let mut groups: Vec<String> = groups.iter().map(|(prefix, _)| prefix.clone()).collect();
        groups.sort_by_key(|prefix| std::cmp::Reverse(prefix.len()));
        Some(Self { manager, groups })
    }
}

/// `config` as the guard applies it: a full queue makes room for a more
/// important request by refusing the least important waiter
/// ([`Overflow::DropLowestPriority`]) unless the config asks for
/// [`Overflow::DropOldest`].
fn by_priority(config: &BulkheadConfig) -> BulkheadConfig {
    match config.overflow_policy() {
        Overflow::DropOldest => config.clone(),
        _ => config.clone().overflow(Overflow::DropLowestPriority),
    }
}

/// Whether `path` is `prefix` or under it (`/login` takes `/login` and
/// `/login/sso`, not `/logins`; `/` takes every path).
pub(super) fn under(path: &str, prefix: &str) -> bool {
    prefix == WHOLE_SERVICE
        || path
            .strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}

//! The 0.3 names of the manager, kept for one release (0.4) so that code
//! written against them still builds, each a line that calls its new
//! name. The CHANGELOG's migration table lists them; 0.5 removes this file.

use std::future::Future;
use std::hash::Hash;
use std::time::Duration;

use super::{KeySnapshot, ThrottleManager};
use crate::bulkhead::BulkheadConfig;
use crate::error::{CallError, ConfigError, Rejected};
use crate::outcome::CallFailure;
use crate::permit::{JointPermit, OwnedPermit, Permit};
use crate::priority::Priority;
use crate::rate::RateConfig;
use crate::registry::BorrowedKey;
use crate::retry::Retries;
use crate::throttle::ThrottleConfig;

/// # Deprecated 0.3 names
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// `call(key, priority.cost(cost), call)`.
    #[deprecated(since = "0.4.0", note = "use `call(key, priority.cost(cost), call)`")]
    pub fn call_n<Q: BorrowedKey<K> + ?Sized, F, Fut, T, E, Via>(
        &self,
        key: &Q,
        priority: Priority,
        cost: u32,
        call: F,
    ) -> impl Future<Output = Result<T, CallError<E>>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure<Via>,
    {
        self.call(key, priority.cost(cost), call)
    }

    /// `call(key, priority.timeout(timeout), call)`.
    #[deprecated(
        since = "0.4.0",
        note = "use `call(key, priority.timeout(timeout), call)`"
    )]
    pub fn call_with_timeout<Q: BorrowedKey<K> + ?Sized, F, Fut, T, E, Via>(
        &self,
        key: &Q,
        priority: Priority,
        timeout: Duration,
        call: F,
    ) -> impl Future<Output = Result<T, CallError<E>>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure<Via>,
    {
        self.call(key, priority.timeout(timeout), call)
    }

    /// `call(key, priority.cost(cost).timeout(timeout), call)`.
    #[deprecated(
        since = "0.4.0",
        note = "use `call(key, priority.cost(cost).timeout(timeout), call)`"
    )]
    pub fn call_n_with_timeout<Q: BorrowedKey<K> + ?Sized, F, Fut, T, E, Via>(
        &self,
        key: &Q,
        priority: Priority,
        cost: u32,
        timeout: Duration,
        call: F,
    ) -> impl Future<Output = Result<T, CallError<E>>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure<Via>,
    {
        self.call(key, priority.cost(cost).timeout(timeout), call)
    }

    /// `call`, then `fallback` with its error.
    #[deprecated(
        since = "0.4.0",
        note = "use `call(..).await` and match its error (`CallError::is_local` tells a refusal)"
    )]
    pub async fn call_with_fallback<Q: BorrowedKey<K> + ?Sized, F, Fut, T, E, Via, G, GFut>(
        &self,
        key: &Q,
        priority: Priority,
        call: F,
        fallback: G,
    ) -> Result<T, CallError<E>>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, E>>,
        E: CallFailure<Via>,
        G: FnOnce(CallError<E>) -> GFut,
        GFut: Future<Output = Result<T, CallError<E>>>,
    {
        match self.call(key, priority, call).await {
            Ok(value) => Ok(value),
            Err(error) => fallback(error).await,
        }
    }

    /// `acquire(key, priority.cost(cost))`.
    #[deprecated(since = "0.4.0", note = "use `acquire(key, priority.cost(cost))`")]
    pub async fn acquire_n<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        cost: u32,
    ) -> Result<Permit<'_>, Rejected> {
        self.acquire(key, priority.cost(cost)).await
    }

    /// `acquire_owned(key, priority.cost(cost))`.
    #[deprecated(
        since = "0.4.0",
        note = "use `acquire_owned(key, priority.cost(cost))`"
    )]
    pub async fn acquire_owned_n<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        cost: u32,
    ) -> Result<OwnedPermit, Rejected> {
        self.acquire_owned(key, priority.cost(cost)).await
    }

    /// `try_acquire(key, priority.cost(cost))`.
    #[deprecated(since = "0.4.0", note = "use `try_acquire(key, priority.cost(cost))`")]
    pub fn try_acquire_n<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        cost: u32,
    ) -> Result<Permit<'_>, Rejected> {
        self.try_acquire(key, priority.cost(cost))
    }

    /// `try_acquire_owned(key, priority.cost(cost))`.
    #[deprecated(
        since = "0.4.0",
        note = "use `try_acquire_owned(key, priority.cost(cost))`"
    )]
    pub fn try_acquire_owned_n<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
        cost: u32,
    ) -> Result<OwnedPermit, Rejected> {
        self.try_acquire_owned(key, priority.cost(cost))
    }

    /// `acquire_all(keys, priority.cost(cost))`.
    #[deprecated(since = "0.4.0", note = "use `acquire_all(keys, priority.cost(cost))`")]
    pub async fn acquire_all_n<Q: BorrowedKey<K> + ?Sized>(
        &self,
        keys: &[&Q],
        priority: Priority,
        cost: u32,
    ) -> Result<JointPermit<'_>, Rejected> {
        self.acquire_all(keys, priority.cost(cost)).await
    }

    /// `try_acquire_all(keys, priority.cost(cost))`.
    #[deprecated(
        since = "0.4.0",
        note = "use `try_acquire_all(keys, priority.cost(cost))`"
    )]
    pub fn try_acquire_all_n<Q: BorrowedKey<K> + ?Sized>(
        &self,
        keys: &[&Q],
        priority: Priority,
        cost: u32,
    ) -> Result<JointPermit<'_>, Rejected> {
        self.try_acquire_all(keys, priority.cost(cost))
    }

    /// `key(key).wait(cost)`.
    #[deprecated(since = "0.4.0", note = "use `key(key).wait(cost)`")]
    pub async fn wait_n<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        cost: u32,
    ) -> Result<(), Rejected> {
        self.key(key).wait(cost).await
    }

    /// `key(key).check(cost)`.
    #[deprecated(since = "0.4.0", note = "use `key(key).check(cost)`")]
    pub fn check_n<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q, cost: u32) -> Result<(), Rejected> {
        self.key(key).check(cost)
    }

    /// `key(key).rate()`.
    #[deprecated(since = "0.4.0", note = "use `key(key).rate()`")]
    pub fn current_rate<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<f64> {
        self.key(key).rate()
    }

    /// `key(key).defer(pause)`.
    #[deprecated(since = "0.4.0", note = "use `key(key).defer(pause)`")]
    pub fn defer<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q, pause: Duration) -> Option<Duration> {
        self.key(key).defer(pause)
    }

    /// `key(key).snapshot()`.
    #[deprecated(since = "0.4.0", note = "use `key(key).snapshot()`")]
    pub fn snapshot<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<KeySnapshot> {
        self.key(key).snapshot()
    }

    /// `key(key).concurrency_limit()`.
    #[deprecated(since = "0.4.0", note = "use `key(key).concurrency_limit()`")]
    pub fn concurrency_limit<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<u32> {
        self.key(key).concurrency_limit()
    }

    /// `key(key).rejection_probability(priority)`.
    #[deprecated(
        since = "0.4.0",
        note = "use `key(key).rejection_probability(priority)`"
    )]
    pub fn rejection_probability<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
    ) -> Option<f64> {
        self.key(key).rejection_probability(priority)
    }

    /// `key(key).set_rate(config)`.
    #[deprecated(since = "0.4.0", note = "use `key(key).set_rate(config)`")]
    pub fn set_rate_override<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        config: RateConfig,
    ) -> Result<(), ConfigError> {
        self.key(key).set_rate(config)
    }

    /// `key(key).set_throttle(config)`.
    #[deprecated(since = "0.4.0", note = "use `key(key).set_throttle(config)`")]
    pub fn set_throttle_override<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        config: ThrottleConfig,
    ) -> Result<(), ConfigError> {
        self.key(key).set_throttle(config)
    }

    /// `key(key).set_bulkhead(config)`.
    #[deprecated(since = "0.4.0", note = "use `key(key).set_bulkhead(config)`")]
    pub fn set_bulkhead_override<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        config: BulkheadConfig,
    ) -> Result<(), ConfigError> {
        self.key(key).set_bulkhead(config)
    }

    /// `key(key).set_shadow(shadow)`.
    #[deprecated(since = "0.4.0", note = "use `key(key).set_shadow(shadow)`")]
    pub fn set_shadow_override<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q, shadow: bool) {
        self.key(key).set_shadow(shadow)
    }

    /// `key(key).remove_overrides()`.
    #[deprecated(since = "0.4.0", note = "use `key(key).remove_overrides()`")]
    pub fn remove_overrides<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) {
        self.key(key).remove_overrides()
    }

    /// `key(key).retier()`.
    #[deprecated(since = "0.4.0", note = "use `key(key).retier()`")]
    pub fn retier<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) {
        self.key(key).retier()
    }

    /// `key(key).forget()`.
    #[deprecated(since = "0.4.0", note = "use `key(key).forget()`")]
    pub fn forget<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> bool {
        self.key(key).forget()
    }

    /// `key(key).key(limit).observe_remaining(remaining, reset)`.
    #[deprecated(
        since = "0.4.0",
        note = "use `key(key).observe_remaining(limit, remaining, reset)`"
    )]
    pub fn observe_remaining<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        limit: &str,
        remaining: u64,
        reset: Option<Duration>,
    ) -> bool {
        self.key(key).observe_remaining(limit, remaining, reset)
    }

    /// `key(key).retries(priority)`.
    #[deprecated(since = "0.4.0", note = "use `key(key).retries(priority)`")]
    pub fn retries<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q, priority: Priority) -> Retries<'_> {
        self.key_retries(key, priority)
    }

    /// `keys().len()`.
    #[deprecated(since = "0.4.0", note = "use `keys().len()`")]
    pub fn len(&self) -> usize {
        self.keys().len()
    }

    /// `keys().is_empty()`.
    #[deprecated(since = "0.4.0", note = "use `keys().is_empty()`")]
    pub fn is_empty(&self) -> bool {
        self.keys().is_empty()
    }

    /// `keys().keys().evict_idle()`.
    #[deprecated(since = "0.4.0", note = "use `keys().evict_idle()`")]
    pub fn evict_idle(&self) -> usize {
        self.keys().evict_idle()
    }

    /// `settings().name()`.
    #[deprecated(since = "0.4.0", note = "use `settings().name()`")]
    pub fn name(&self) -> Option<&str> {
        self.manager_name()
    }

    /// `settings().settings().priority_levels()`.
    #[deprecated(since = "0.4.0", note = "use `settings().priority_levels()`")]
    pub fn priority_levels(&self) -> u8 {
        self.levels()
    }

    /// `settings().settings().call_timeout()`.
    #[deprecated(since = "0.4.0", note = "use `settings().call_timeout()`")]
    pub fn call_timeout(&self) -> Option<Duration> {
        self.configured_call_timeout()
    }

    /// `settings().settings().limit_names()`.
    #[deprecated(since = "0.4.0", note = "use `settings().limit_names()`")]
    pub fn limit_names(&self) -> impl Iterator<Item = &str> {
        self.named_limit_names()
    }
}

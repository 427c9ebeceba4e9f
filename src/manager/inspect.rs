//! What the manager knows about its keys, for health endpoints and
//! dashboards. Nothing here creates a key.

use std::hash::Hash;

use super::ThrottleManager;
use crate::key::KeyState;
use crate::priority::Priority;
use crate::registry::BorrowedKey;

/// Everything a key's controls know, for a health endpoint or a dashboard:
/// `Serialize`, so it can be returned as JSON.
///
/// # Example
///
/// ```
/// use portcullis::{Priority, RateConfig, ThrottleConfig, ThrottleManager};
///
/// # #[tokio::main(flavor = "current_thread", start_paused = true)]
/// # async fn main() -> Result<(), portcullis::error::ConfigError> {
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0).burst(2))
///     .throttle(ThrottleConfig::new())
///     .build()?;
/// manager.try_acquire("db", Priority::HIGH).unwrap().success();
/// manager.try_acquire("db", Priority::LOW).unwrap().overloaded();
/// let snapshot = manager.key("db").snapshot().unwrap();
/// assert_eq!(snapshot.priorities[0].requests, 1);
/// assert_eq!(snapshot.priorities[0].accepts, 1);
/// assert_eq!(snapshot.priorities[3].requests, 1);
/// // HIGH's accept is every priority's budget (2 calls): LOW's one fits.
/// assert_eq!(snapshot.priorities[3].rejection_probability, 0.0);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct KeySnapshot {
    /// The key's current rate, in calls per second, if it has a rate.
    pub rate: Option<f64>,
    /// Calls in flight, if the key has a bulkhead.
    pub active: Option<u32>,
    /// Calls waiting in the bulkhead's queue, if the key has a bulkhead.
    pub queued: Option<u32>,
    /// How many calls may be in flight now, if the key has a bulkhead: its
    /// fixed limit, or what it has learned
    /// ([`BulkheadConfig::adaptive`](crate::BulkheadConfig::adaptive)).
    pub concurrency_limit: Option<u32>,
    /// Per priority level (index 0 is `Priority::HIGH`), the throttle's
    /// window; empty if the key has no throttle.
    pub priorities: Vec<PrioritySnapshot>,
    /// The tokens in the key's retry budget (each retry takes one), if the
    /// manager retries ([`retry`](crate::builder::ThrottleManagerBuilder::retry)).
    pub retry_tokens: Option<f64>,
}

/// One priority's view of a key's throttle window.
///
/// ```
/// # use portcullis::*;
/// let manager = ThrottleManager::<String>::builder().throttle(ThrottleConfig::new()).build()?;
/// manager.decrement("db");
/// let high = &manager.key("db").snapshot().unwrap().priorities[0];
/// assert_eq!((high.requests, high.accepts), (1, 0));
/// # Ok::<(), ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct PrioritySnapshot {
    /// Calls of this priority counted over the window (shed ones
    /// included; see [`ThrottleConfig::window`](crate::ThrottleConfig::window)).
    pub requests: u64,
    /// Calls of this priority the backend accepted over the window.
    pub accepts: u64,
    /// The probability that a call of this priority is shed now.
    pub rejection_probability: f64,
}

/// What a key's rate holds now ([`peek`](ThrottleManager::peek)): how many
/// calls could start at once, and when there will be more. What a server
/// advertises in its `RateLimit` headers, and a dashboard shows.
///
/// ```
/// use portcullis::clock::ManualClock;
/// use portcullis::{RateConfig, ThrottleManager};
/// use std::time::Duration;
///
/// let clock = ManualClock::new();
/// let manager = ThrottleManager::<String>::builder()
///     .rate(RateConfig::adaptive(10.0).burst(5))
///     .clock(clock.clone())
///     .build()?;
/// for _ in 0..2 {
///     manager.check("api").unwrap();
/// }
/// let left = manager.peek("api").unwrap();
/// assert_eq!((left.rate, left.burst, left.remaining), (10.0, 5, 3));
/// assert_eq!(left.next_in, Duration::from_millis(100));
/// assert_eq!(left.full_in, Duration::from_millis(200));
/// # Ok::<(), portcullis::error::ConfigError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
#[non_exhaustive]
pub struct RateRemaining {
    /// The key's rate now, calls a second.
    pub rate: f64,
    /// The most calls that may start at once.
    pub burst: u32,
    /// Calls that could start now.
    pub remaining: u32,
    /// Until one more could start (zero: the bucket is full).
    pub next_in: std::time::Duration,
    /// Until the bucket is full again, `burst` calls at once (zero: it is).
    pub full_in: std::time::Duration,
}

/// # Inspection
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// The work of [`KeyHandle::snapshot`](super::KeyHandle::snapshot).
    pub(crate) fn key_snapshot<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<KeySnapshot> {
        let state = self.inner.keys.state(key)?;
        Some(self.snapshot_of(&state))
    }

    /// What `key`'s rate holds now ([`RateRemaining`]): calls that could
    /// start at once, until one more could, until the bucket is full.
    /// Takes nothing and does not create the key: `None` if the key is not
    /// live or has no rate. A rate in a [store](crate::store) has its
    /// bucket there, a round trip away: `None` for it too.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0).burst(3)).build()?;
    /// assert!(manager.peek("api").is_none()); // not live yet
    /// manager.check("api").unwrap();
    /// assert_eq!(manager.peek("api").unwrap().remaining, 2);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn peek<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<RateRemaining> {
        let state = self.inner.keys.state(key)?;
        if self.core().shared_rate(&state).is_some() {
            return None;
        }
        let settings = self.core().rate_of(&state)?;
        let left = state.rate.remaining(self.core().now(), settings.burst);
        Some(RateRemaining {
            rate: state.rate.rate(),
            burst: settings.burst,
            remaining: left.available,
            next_in: std::time::Duration::from_nanos(left.next_in),
            full_in: std::time::Duration::from_nanos(left.full_in),
        })
    }

    /// The work of [`KeyHandle::concurrency_limit`](super::KeyHandle::concurrency_limit).
    pub(crate) fn key_concurrency_limit<Q: BorrowedKey<K> + ?Sized>(&self, key: &Q) -> Option<u32> {
        let state = self.inner.keys.state(key)?;
        let (bulkhead, settings) = self.core().bulkhead_of(&state)?;
        Some(bulkhead.limit(settings))
    }

    /// Every live key with its [`KeySnapshot`], for a health endpoint.
    /// Visits the key space shard by shard; keys created or evicted
    /// meanwhile may or may not appear.
    ///
    /// ```
    /// use portcullis::{RateConfig, ThrottleManager};
    ///
    /// let manager = ThrottleManager::<String>::builder().rate(RateConfig::adaptive(10.0)).build()?;
    /// manager.increment("a");
    /// manager.decrement("b");
    /// let mut rates: Vec<(String, Option<f64>)> =
    ///     manager.snapshots().map(|(key, snapshot)| (key, snapshot.rate)).collect();
    /// rates.sort_by(|a, b| a.0.cmp(&b.0));
    /// assert_eq!(rates, [("a".to_string(), Some(11.0)), ("b".to_string(), Some(7.0))]);
    /// # Ok::<(), portcullis::error::ConfigError>(())
    /// ```
    pub fn snapshots(&self) -> impl Iterator<Item = (K, KeySnapshot)>
    where
        K: Clone,
    {
        let mut all = Vec::with_capacity(self.keys().len());
        self.inner
            .keys
            .for_each(|key, state| all.push((key.clone(), self.snapshot_of(state))));
        all.into_iter()
    }

    pub(super) fn snapshot_of(&self, state: &KeyState) -> KeySnapshot {
        let core = self.core();
        let load = core.bulkhead_of(state).map(|(bulkhead, _)| bulkhead.load());
        let priorities = core
            .throttle_of(state)
            .map(|(window, settings)| {
                window
                    .report(core.now(), core.priorities().levels, settings)
                    .into_iter()
                    .map(|(counts, probability)| PrioritySnapshot {
                        requests: counts.requests.round() as u64,
                        accepts: counts.accepts.round() as u64,
                        rejection_probability: probability,
                    })
                    .collect()
            })
            .unwrap_or_default();
        KeySnapshot {
            rate: core.rate_of(state).map(|_| core.rate_in_force(state)),
            active: load.map(|load| load.active),
            queued: load.map(|load| load.queued),
            concurrency_limit: core
                .bulkhead_of(state)
                .map(|(bulkhead, settings)| bulkhead.limit(settings)),
            priorities,
            retry_tokens: core.retry_settings().and_then(|settings| {
                let budget = state.retry_budget()?;
                Some(budget.tokens(core.now(), &settings.budget))
            }),
        }
    }

    /// The work of [`KeyHandle::rejection_probability`](super::KeyHandle::rejection_probability).
    pub(crate) fn key_rejection_probability<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
        priority: Priority,
    ) -> Option<f64> {
        let core = self.core();
        let priority = core.priorities().clamp(priority);
        let state = self.inner.keys.state(key)?;
        let (window, settings) = core.throttle_of(&state)?;
        Some(window.rejection(core.now(), usize::from(priority.level()), settings))
    }
}

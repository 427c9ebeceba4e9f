//! What a [status page](crate::status) reads of the key space each time it
//! samples: every key's load in one pass, one key's view, names.

use std::hash::Hash;
use std::time::Duration;

use super::{KeySnapshot, ThrottleManager};
use crate::key::KeyState;
use crate::registry::BorrowedKey;

/// How loaded one key is now: what the page ranks keys by.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct KeyLoad {
    /// Until the key's rate lets one more call start (zero: now, or the
    /// rate is in a store, a round trip away).
    pub(crate) wait: Duration,
    /// Calls holding a bulkhead slot.
    pub(crate) in_flight: u32,
    /// Calls waiting in the bulkhead's queue.
    pub(crate) queued: u32,
}

/// # Status page
impl<K> ThrottleManager<K>
where
    K: Hash + Eq + Send + Sync + 'static,
{
    /// Visits every live key with its load; holds each shard's read lock
    /// while visiting it, so `visit` must be short.
    pub(crate) fn visit_loads(&self, mut visit: impl FnMut(&K, KeyLoad)) {
        self.inner
            .keys
            .for_each(|key, state| visit(key, self.load_of(state)));
    }

    /// `key`'s snapshot and load, and its successes per second as its
    /// adaptive rate measures them; `None` if the key is not live.
    pub(crate) fn watch_sample<Q: BorrowedKey<K> + ?Sized>(
        &self,
        key: &Q,
    ) -> Option<(KeySnapshot, KeyLoad, Option<f64>)> {
        let state = self.inner.keys.state(key)?;
        let core = self.core();
        let served = core
            .rate_of(&state)
            .filter(|settings| !settings.never_moves() && core.shared_rate(&state).is_none())
            .map(|_| state.rate.used_per_second(core.now()));
        Some((self.snapshot_of(&state), self.load_of(&state), served))
    }

    fn load_of(&self, state: &KeyState) -> KeyLoad {
        let core = self.core();
        let wait = match core.rate_of(state) {
            Some(settings) if core.shared_rate(state).is_none() => {
                state.rate.remaining(core.now(), settings.burst).next_in
            }
            _ => 0,
        };
        let load = core.bulkhead_of(state).map(|(bulkhead, _)| bulkhead.load());
        KeyLoad {
            wait: Duration::from_nanos(wait),
            in_flight: load.map_or(0, |load| load.active),
            queued: load.map_or(0, |load| load.queued),
        }
    }

    /// The name the manager gives `key` ([`key_names`]); `None` without
    /// key names.
    ///
    /// [`key_names`]: crate::builder::ThrottleManagerBuilder::key_names
    pub(crate) fn name_of(&self, key: &K) -> Option<String> {
        self.inner.key_names.as_ref().map(|names| names.name(key))
    }

    /// Whether the manager names its keys.
    pub(crate) fn names_keys(&self) -> bool {
        self.inner.key_names.is_some()
    }

    /// The cap on live keys, and keys evicted so far.
    pub(crate) fn key_space_totals(&self) -> (usize, u64) {
        (self.inner.keys.max_keys(), self.inner.keys.evicted())
    }
}

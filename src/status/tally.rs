//! Who is being refused: the manager's refusals counted by reason, and the
//! keys refused most recently, in a sketch of bounded size whatever the
//! key space (the Space-Saving algorithm of Metwally, Agrawal and El
//! Abbadi, with counts that decay).
//!
//! Invariant of the sketch: it holds at most [`SKETCH_KEYS`] keys; a key it
//! holds has a count at least its true decayed count (a key that took a
//! place inherits the count of the one it replaced, so it may be
//! overstated by at most that); any key whose true count exceeds the
//! smallest count held is in the sketch. So the keys refused most are
//! found without a counter per key.

use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::error::RejectReason;
use crate::manager::{RefusalWatcher, RefusedKey};

/// How many keys the sketch holds: the keys a status page can rank by
/// refusals.
pub(crate) const SKETCH_KEYS: usize = 64;

/// How many reasons a call may be refused for.
const REASONS: usize = RejectReason::ALL.len();

/// The refusals a manager has made since a status page was built for it,
/// fed by the manager's refusal hook.
#[derive(Debug)]
pub(crate) struct RefusalTally<K> {
    by_reason: [AtomicU64; REASONS],
    /// The calls of shadowed keys that would have been refused, by reason.
    would_refuse: [AtomicU64; REASONS],
    keys: Mutex<RefusalSketch<K>>,
}

impl<K> Default for RefusalTally<K> {
    fn default() -> Self {
        Self {
            by_reason: Default::default(),
            would_refuse: Default::default(),
            keys: Mutex::new(RefusalSketch::default()),
        }
    }
}

impl<K: Send + 'static> RefusalWatcher<K> for RefusalTally<K> {
    /// Counts a refusal of `key` for `reason`. While another thread holds
    /// the sketch, the refusal is counted by reason only: a flood of
    /// refusals never queues on this lock. A call shadow mode let through
    /// is counted by reason apart, and ranks no key.
    fn refused(&self, key: RefusedKey<'_, K>, reason: RejectReason, shadow: bool) {
        if shadow {
            self.would_refuse[reason.index()].fetch_add(1, Ordering::Relaxed);
            return;
        }
        self.by_reason[reason.index()].fetch_add(1, Ordering::Relaxed);
        if let Ok(mut keys) = self.keys.try_lock() {
            keys.count(key.is, key.owned);
        }
    }

    fn into_any(self: Arc<Self>) -> Arc<dyn Any + Send + Sync> {
        self
    }
}

impl<K> RefusalTally<K> {
    /// Refusals since a page was built, by reason (only reasons
    /// that occurred).
    pub(crate) fn totals(&self) -> Vec<(&'static str, u64)> {
        by_reason(&self.by_reason)
    }

    /// Calls of shadowed keys that would have been refused since a page was
    /// built, by reason (only reasons that occurred).
    pub(crate) fn would_refuse(&self) -> Vec<(&'static str, u64)> {
        by_reason(&self.would_refuse)
    }

    /// Decays every key's count by `factor` and returns the keys with their
    /// counts, highest first.
    pub(crate) fn decay_and_rank(&self, factor: f64) -> Vec<(K, f64)>
    where
        K: Clone,
    {
        let mut keys = self
            .keys
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        keys.decay(factor);
        keys.ranked()
    }
}

/// The counts that are not 0, with their reasons' labels.
fn by_reason(counts: &[AtomicU64; REASONS]) -> Vec<(&'static str, u64)> {
    RejectReason::ALL
        .iter()
        .zip(counts)
        .map(|(reason, count)| (reason.label(), count.load(Ordering::Relaxed)))
        .filter(|(_, count)| *count > 0)
        .collect()
}

/// The Space-Saving sketch: at most [`SKETCH_KEYS`] keys with their counts.
#[derive(Debug)]
pub(crate) struct RefusalSketch<K> {
    entries: Vec<(K, f64)>,
}

impl<K> Default for RefusalSketch<K> {
    fn default() -> Self {
        Self {
            entries: Vec::new(),
        }
    }
}

impl<K> RefusalSketch<K> {
    /// Counts one refusal of the key `is` recognizes: its count grows by
    /// one; a key not held takes a free place (`owned` makes its value),
    /// or else the place of the key with the smallest count, whose count
    /// it inherits.
    pub(crate) fn count(&mut self, is: impl Fn(&K) -> bool, owned: impl FnOnce() -> K) {
        if let Some(entry) = self.entries.iter_mut().find(|(held, _)| is(held)) {
            entry.1 += 1.0;
            return;
        }
        if self.entries.len() < SKETCH_KEYS {
            self.entries.push((owned(), 1.0));
            return;
        }
        let smallest = self
            .entries
            .iter_mut()
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("the sketch is full, so not empty");
        *smallest = (owned(), smallest.1 + 1.0);
    }

    /// Multiplies every count by `factor`, forgetting keys whose count
    /// falls below a hundredth of a refusal.
    pub(crate) fn decay(&mut self, factor: f64) {
        for entry in &mut self.entries {
            entry.1 *= factor;
        }
        self.entries.retain(|(_, count)| *count >= 0.01);
    }

    /// The keys with their counts, highest first.
    pub(crate) fn ranked(&self) -> Vec<(K, f64)>
    where
        K: Clone,
    {
        let mut ranked = self.entries.clone();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1));
        ranked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[test]
    fn every_reason_has_its_own_place() {
        for (at, reason) in RejectReason::ALL.iter().enumerate() {
            assert_eq!(reason.index(), at, "{reason:?}");
        }
    }

    #[test]
    fn refusals_are_counted_by_reason_and_by_key() {
        let tally = RefusalTally::<String>::default();
        let refuse = |key: &str, reason| {
            let refused = RefusedKey {
                is: &|held: &String| held == key,
                owned: &|| key.to_owned(),
            };
            tally.refused(refused, reason, false);
        };
        assert!(tally.totals().is_empty());
        refuse("a", RejectReason::Throttled);
        refuse("b", RejectReason::Full);
        refuse("a", RejectReason::Throttled);
        assert_eq!(tally.totals(), [("throttled", 2), ("full", 1)]);
        assert_eq!(
            tally.decay_and_rank(1.0),
            [("a".to_owned(), 2.0), ("b".to_owned(), 1.0)]
        );
    }

    #[test]
    fn counts_decay_and_forgotten_keys_leave() {
        let mut sketch = RefusalSketch::<u32>::default();
        for _ in 0..4 {
            sketch.count(|held| *held == 1, || 1);
        }
        sketch.count(|held| *held == 2, || 2);
        sketch.decay(0.5);
        assert_eq!(sketch.ranked(), [(1, 2.0), (2, 0.5)]);
        sketch.decay(0.01);
        assert_eq!(sketch.ranked(), [(1, 0.02)]);
    }

    proptest! {
        /// Space-Saving's guarantees: at most SKETCH_KEYS keys; every
        /// count held at least the key's true count; and every key refused
        /// more often than the smallest count held is in the sketch, so a
        /// heavy key is never lost among many light ones.
        #[test]
        fn the_sketch_keeps_every_heavy_key(keys in proptest::collection::vec(0u32..200, 0..2_000)) {
            let mut sketch = RefusalSketch::default();
            let mut truth: HashMap<u32, f64> = HashMap::new();
            for key in &keys {
                sketch.count(|held| held == key, || *key);
                *truth.entry(*key).or_default() += 1.0;
            }
            let held = sketch.ranked();
            prop_assert!(held.len() <= SKETCH_KEYS);
            for (key, count) in &held {
                prop_assert!(*count >= truth[key]);
            }
            let smallest = held.iter().map(|(_, count)| *count).fold(f64::INFINITY, f64::min);
            for (key, count) in &truth {
                if held.len() == SKETCH_KEYS && *count > smallest {
                    prop_assert!(held.iter().any(|(k, _)| k == key), "key {key} ({count}) lost");
                }
            }
        }
    }
}

//! One key's requests and accepts per priority over the last window: a few
//! words while the key is healthy, ten buckets a priority while a failure
//! is in its window.
//!
//! Most keys, most of the time, have no failure in their window, and then
//! every priority's requests equal its accepts and no call is shed: all the
//! rule needs is how many calls were accepted, the budget that a first
//! failure is judged against. So a healthy key keeps [`HealthyCounts`]
//! (two half-window counts a priority, 24 bytes), and the [`BucketWindow`]
//! that the rule reads exactly (344 bytes for four priorities) exists only
//! while a failure is in the window:
//!
//! - a key's first failure makes its bucket window, and seeds each
//!   priority's buckets with its healthy counts, spread over the epochs
//!   they came in (so they leave the window about when they would have);
//! - a call that finds the bucket window with no failure left in it (a
//!   window has passed since the last) folds its accepts back into healthy
//!   counts and gives the buckets back.
//!
//! The rule, the meaning of `window` and the priorities' order are the
//! bucket window's, while a failure is in the window; outside it nothing
//! is shed, as before. What the healthy counts cannot say is where in its
//! half-window an accept came, and accepts older than the last half-window
//! to a whole one: the first failure meets a budget of between half a
//! window's and a window's accepts (levels past the first four, none).
//!
//! The bucket window sits behind a lock that a healthy call never takes:
//! a call reads the epoch's word, whose [`FAILING`] flag says where its
//! key's outcomes go. A failing key's calls share the lock to read and
//! count (on atomics, as before); making and giving back the buckets take
//! it alone. An accept counted into the healthy counts while the buckets
//! are being made may be missed by their seed: one call's worth of budget.

mod buckets;
pub(crate) use buckets::SLOTS;
mod healthy;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{RwLock, RwLockReadGuard};

use buckets::BucketWindow;
use healthy::{EPOCH_BUCKETS, FAILING, HealthyCounts};

use super::config::ThrottleSettings;
use super::probability::Counts;
use crate::clock::Nanos;

/// Priorities whose counts a window holds in itself: the default number
/// of levels.
const NEAR_LEVELS: usize = 4;

/// In a window's position word (the bucket window's newest bucket, the
/// healthy counts' epoch): set while a call clears what left the window.
const ROTATING: u64 = 1 << 63;

/// Claims the move of the position in `word` (its `position` bits) on to
/// `to`, for the calling window to clear what left and then publish `to`:
/// `Ok(seen)`, the word as it was when this call set [`ROTATING`];
/// `Err(seen)` when another call is moving it (the position before stays
/// this call's) or has moved it to `to` or later.
fn claim_rotation(word: &AtomicU64, mut seen: u64, position: u64, to: u64) -> Result<u64, u64> {
    loop {
        if seen & ROTATING != 0 || seen & position >= to {
            return Err(seen);
        }
        match word.compare_exchange(seen, seen | ROTATING, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(seen),
            Err(newer) => seen = newer,
        }
    }
}

/// The buckets of the epoch before the one that starts at bucket
/// `current`; `None` in the first epoch, which has none before it (a range
/// saturated at 0 would be the first epoch's own first bucket, counted
/// twice).
fn epoch_before(current: u64) -> Option<std::ops::RangeInclusive<u64>> {
    let last = current.checked_sub(1)?;
    Some(current.saturating_sub(EPOCH_BUCKETS)..=last)
}

/// What one outcome adds to a priority's counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Count {
    /// A call attempted and not accepted (failed, or shed locally).
    Request,
    /// A call attempted and accepted (or ended in a way that says nothing
    /// about overload).
    Accepted,
}

/// Requests and accepts per priority over the last window (see the
/// [module](self)): 48 bytes, and the buckets while a failure is in the
/// window.
#[derive(Debug, Default)]
pub(crate) struct ThrottleWindow {
    healthy: HealthyCounts,
    /// The buckets, while [`FAILING`] is set.
    failing: RwLock<Option<Box<BucketWindow>>>,
}

impl ThrottleWindow {
    /// An empty, healthy window, its epoch `now`'s.
    pub(crate) fn new(now: Nanos, settings: &ThrottleSettings) -> Self {
        Self {
            healthy: HealthyCounts::new(now, epoch_length(settings)),
            failing: RwLock::default(),
        }
    }

    /// The probability of rejecting a call of `priority` at `now`, of
    /// `levels` priorities.
    #[inline]
    pub(crate) fn rejection(
        &self,
        now: Nanos,
        priority: usize,
        settings: &ThrottleSettings,
    ) -> f64 {
        let word = self.healthy.word_at(now, epoch_length(settings));
        if word & FAILING == 0 {
            return 0.0; // nothing failed in the window: the common case
        }
        self.failing_rejection(now, priority, settings)
    }

    #[cold]
    fn failing_rejection(&self, now: Nanos, priority: usize, settings: &ThrottleSettings) -> f64 {
        let (rejection, clean) = match &*self.buckets() {
            Some(buckets) => (
                buckets.rejection(now, priority, settings),
                buckets.is_clean(now, settings),
            ),
            None => (0.0, false),
        };
        if clean {
            self.recover(now, settings);
        }
        rejection
    }

    /// Counts one outcome of `priority` at `now`, of a manager of `levels`
    /// priorities.
    #[inline]
    pub(crate) fn record(
        &self,
        now: Nanos,
        priority: usize,
        count: Count,
        levels: u8,
        settings: &ThrottleSettings,
    ) {
        let word = self.healthy.word_at(now, epoch_length(settings));
        if word & FAILING == 0 && count == Count::Accepted {
            self.healthy.accept(word, priority);
            return;
        }
        self.record_failing(now, priority, count, levels, settings);
    }

    /// [`record`](Self::record) of a failure, or of any outcome of a key
    /// whose buckets count.
    #[cold]
    fn record_failing(
        &self,
        now: Nanos,
        priority: usize,
        count: Count,
        levels: u8,
        settings: &ThrottleSettings,
    ) {
        loop {
            if let Some(buckets) = &*self.buckets() {
                buckets.record(now, priority, count, settings);
                if count == Count::Accepted && buckets.is_clean(now, settings) {
                    break;
                }
                return;
            }
            // The buckets were given back meanwhile: an accept counts as a
            // healthy one, a failure makes them again.
            if count == Count::Accepted {
                let word = self.healthy.word_at(now, epoch_length(settings));
                if word & FAILING == 0 {
                    self.healthy.accept(word, priority);
                    return;
                }
            }
            self.start_failing(now, levels, settings);
        }
        self.recover(now, settings);
    }

    /// Makes the buckets for a key's first failure, seeded with its healthy
    /// counts, unless another call has.
    #[cold]
    fn start_failing(&self, now: Nanos, levels: u8, settings: &ThrottleSettings) {
        // Flagged first: calls that see the flag wait for the buckets at the
        // lock, and those that did not may still count into the healthy
        // counts the seed reads next.
        self.healthy.set_failing(true);
        let mut slot = self.failing.write().unwrap_or_else(|e| e.into_inner());
        if slot.is_some() {
            return;
        }
        let length = epoch_length(settings);
        let word = self.healthy.word_at(now, length);
        let buckets = BucketWindow::new(levels, now, settings);
        let epoch = HealthyCounts::epoch(word);
        let current = epoch * EPOCH_BUCKETS;
        for priority in 0..usize::from(levels).min(NEAR_LEVELS) {
            let (now_count, before) = self.healthy.counts(word, priority);
            if let Some(earlier) = epoch_before(current) {
                buckets.seed(priority, earlier, before);
            }
            buckets.seed(priority, current..=current + EPOCH_BUCKETS - 1, now_count);
        }
        *slot = Some(Box::new(buckets));
    }

    /// Gives the buckets back once no failure is left in them, folding
    /// their accepts into the healthy counts; unless another call has, or
    /// a failure came meanwhile.
    #[cold]
    fn recover(&self, now: Nanos, settings: &ThrottleSettings) {
        let mut slot = self.failing.write().unwrap_or_else(|e| e.into_inner());
        let Some(buckets) = slot.as_deref() else {
            return;
        };
        if !buckets.is_clean(now, settings) {
            return;
        }
        let word = self.healthy.word_at(now, epoch_length(settings));
        let current = HealthyCounts::epoch(word) * EPOCH_BUCKETS;
        for priority in 0..NEAR_LEVELS {
            let now_count = buckets.accepts_in(priority, current..=u64::MAX);
            let before =
                epoch_before(current).map_or(0, |earlier| buckets.accepts_in(priority, earlier));
            self.healthy.set(word, priority, now_count, before);
        }
        let given_back = slot.take();
        self.healthy.set_failing(false);
        drop(slot);
        drop(given_back);
    }

    /// The buckets, read-locked.
    fn buckets(&self) -> RwLockReadGuard<'_, Option<Box<BucketWindow>>> {
        self.failing.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the counts afresh at `now`, for a window whose length
    /// changed: counts of epochs of another length mean nothing in the new.
    pub(crate) fn restart(&self, now: Nanos, settings: &ThrottleSettings) {
        let mut slot = self.failing.write().unwrap_or_else(|e| e.into_inner());
        *slot = None;
        self.healthy.restart(now, epoch_length(settings));
    }

    /// Records whether the key is shedding; true if that changed.
    #[inline]
    pub(crate) fn note_shedding(&self, shedding: bool) -> bool {
        self.healthy.note_shedding(shedding)
    }

    /// Per priority of `levels`, its counts and its rejection probability
    /// at `now`: for introspection.
    pub(crate) fn report(
        &self,
        now: Nanos,
        levels: u8,
        settings: &ThrottleSettings,
    ) -> Vec<(Counts, f64)> {
        let word = self.healthy.word_at(now, epoch_length(settings));
        if word & FAILING != 0 {
            if let Some(buckets) = &*self.buckets() {
                return buckets.report(now, settings);
            }
        }
        (0..usize::from(levels))
            .map(|priority| {
                let (current, before) = self.healthy.counts(word, priority);
                let accepted = (current + before) as f64;
                let counts = Counts {
                    requests: accepted,
                    accepts: accepted,
                };
                (counts, 0.0)
            })
            .collect()
    }

    /// The time from which forgetting this window loses nothing: a healthy
    /// window's epoch start (nothing is shed), else the buckets'.
    pub(crate) fn quiet_from(&self, settings: &ThrottleSettings) -> Nanos {
        if let Some(buckets) = &*self.buckets() {
            return buckets.quiet_from(settings);
        }
        HealthyCounts::epoch(self.healthy.word()).saturating_mul(epoch_length(settings))
    }

    /// Whether the key holds its buckets: for the tests of its size.
    #[cfg(test)]
    pub(crate) fn is_failing(&self) -> bool {
        self.buckets().is_some()
    }
}

/// An epoch's length: half the window, five buckets.
#[inline]
fn epoch_length(settings: &ThrottleSettings) -> Nanos {
    settings.bucket.saturating_mul(EPOCH_BUCKETS)
}

#[cfg(test)]
mod tests;

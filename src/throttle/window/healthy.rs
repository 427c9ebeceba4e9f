//! A healthy key's throttle: per priority, how many calls the backend
//! accepted in the current half-window and the one before, in two 16-bit
//! counts a priority. What the key knows of its calls while none failed.
//!
//! Time is cut into epochs of half a window (five of the ten buckets of a
//! [`BucketWindow`](super::buckets::BucketWindow), aligned to them). A
//! priority's word holds two counts, one per epoch slot (`epoch % 2`): the
//! current epoch's and the one before. So the counts cover between half a
//! window and a whole one of the key's calls. When time crosses into a new
//! epoch, the first call to notice claims the rotation (a bit in the word
//! of the epoch), clears the slots of the epochs that left, and publishes
//! the new epoch; a call that meanwhile sees the claim counts into the
//! epoch before, which stays (as the buckets do).
//!
//! Counts saturate near 65,535 an epoch: a healthy key's accepts are the
//! budget its first failures are judged against (`K ×` them), and a budget
//! of that many is already more than any burst of failures in one window
//! needs to be told apart from an overload.
//!
//! The epoch's word also holds the flags the key's window needs on every
//! call, so that a healthy call reads one word: whether a bucket window
//! holds the key's outcomes ([`FAILING`]), and whether the key is shedding.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::buckets::SLOTS;
use super::{NEAR_LEVELS, claim_rotation};
use crate::clock::Nanos;

/// Buckets an epoch spans: half a window.
pub(super) const EPOCH_BUCKETS: u64 = SLOTS as u64 / 2;

/// In the word: the key's outcomes go to its bucket window (a failure is
/// in the window, or about to be).
pub(super) const FAILING: u64 = 1 << 62;
/// In the word: the last decision shed a call.
const SHEDDING: u64 = 1 << 61;
/// In the word: the current epoch's number (from the clock's origin).
const EPOCH: u64 = SHEDDING - 1;

/// A count's bits, and where a count saturates.
const COUNT: u32 = 0xFFFF;
const SATURATED: u32 = 0xF000;

/// Per priority, the calls accepted in the last two epochs.
#[derive(Debug, Default)]
pub(super) struct HealthyCounts {
    /// The current epoch ([`EPOCH`]), with [`ROTATING`](super::ROTATING), [`FAILING`] and
    /// [`SHEDDING`].
    word: AtomicU64,
    /// By priority (the first [`NEAR_LEVELS`]), the counts of the two epoch
    /// slots: slot 0 in the low half, slot 1 in the high.
    counts: [AtomicU32; NEAR_LEVELS],
}

/// The epoch of `now`, epochs being `length` long.
#[inline]
pub(super) fn epoch_of(now: Nanos, length: Nanos) -> u64 {
    now / length
}

/// The shift of `epoch`'s count in a priority's word.
#[inline]
fn shift(epoch: u64) -> u32 {
    16 * (epoch % 2) as u32
}

impl HealthyCounts {
    /// Counts from `now`'s epoch on, epochs being `length` long.
    pub(super) fn new(now: Nanos, length: Nanos) -> Self {
        Self {
            word: AtomicU64::new(epoch_of(now, length) & EPOCH),
            counts: Default::default(),
        }
    }

    /// Counts from `now`'s epoch on, as if new: no failing, no shedding.
    pub(super) fn restart(&self, now: Nanos, length: Nanos) {
        self.word
            .store(epoch_of(now, length) & EPOCH, Ordering::Release);
        for count in &self.counts {
            count.store(0, Ordering::Release);
        }
    }

    /// The word at `now`, epochs being `length` long: moves the epochs on
    /// first if time has crossed into a new one. While it has not, one load
    /// and one multiplication.
    #[inline]
    pub(super) fn word_at(&self, now: Nanos, length: Nanos) -> u64 {
        let word = self.word.load(Ordering::Acquire);
        if now < ((word & EPOCH) + 1).saturating_mul(length) {
            return word;
        }
        self.rotate_to(word, epoch_of(now, length))
    }

    /// Counts one accepted call of `priority` into the epoch of `word`.
    #[inline]
    pub(super) fn accept(&self, word: u64, priority: usize) {
        let Some(count) = self.counts.get(priority) else {
            return; // levels past the near ones are not remembered
        };
        let shift = shift(word & EPOCH);
        let before = count.fetch_add(1 << shift, Ordering::AcqRel);
        if (before >> shift) & COUNT >= SATURATED {
            count.fetch_sub(1 << shift, Ordering::AcqRel);
        }
    }

    /// `priority`'s counts: (the current epoch's, the one before's), as of
    /// `word`.
    pub(super) fn counts(&self, word: u64, priority: usize) -> (u64, u64) {
        let Some(count) = self.counts.get(priority) else {
            return (0, 0);
        };
        let packed = count.load(Ordering::Acquire);
        let epoch = word & EPOCH;
        let of = |epoch: u64| u64::from((packed >> shift(epoch)) & COUNT);
        (of(epoch), of(epoch.wrapping_sub(1)))
    }

    /// Sets `priority`'s counts, as of `word`: (the current epoch's, the
    /// one before's), saturating. Only while no call counts into them
    /// (the key's outcomes go to its bucket window).
    pub(super) fn set(&self, word: u64, priority: usize, current: u64, before: u64) {
        let Some(count) = self.counts.get(priority) else {
            return;
        };
        let epoch = word & EPOCH;
        let clamp = |count: u64| u32::try_from(count.min(u64::from(SATURATED))).unwrap_or(0);
        let packed = clamp(current) << shift(epoch) | clamp(before) << shift(epoch.wrapping_sub(1));
        count.store(packed, Ordering::Release);
    }

    /// The word as it is, without moving the epochs on.
    pub(super) fn word(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// The current epoch's number in `word`.
    #[inline]
    pub(super) fn epoch(word: u64) -> u64 {
        word & EPOCH
    }

    /// Sets or clears [`FAILING`]; returns the word before.
    pub(super) fn set_failing(&self, failing: bool) -> u64 {
        match failing {
            true => self.word.fetch_or(FAILING, Ordering::AcqRel),
            false => self.word.fetch_and(!FAILING, Ordering::AcqRel),
        }
    }

    /// Records whether the key is shedding; true if that changed.
    #[inline]
    pub(super) fn note_shedding(&self, shedding: bool) -> bool {
        let word = self.word.load(Ordering::Relaxed);
        if (word & SHEDDING != 0) == shedding {
            return false;
        }
        let before = match shedding {
            true => self.word.fetch_or(SHEDDING, Ordering::AcqRel),
            false => self.word.fetch_and(!SHEDDING, Ordering::AcqRel),
        };
        (before & SHEDDING != 0) != shedding
    }

    /// Makes `epoch` the current one, clearing the slots of the epochs that
    /// left, unless another call is doing so (then the epoch before stays
    /// current for this call) or has done it; returns the word.
    #[cold]
    fn rotate_to(&self, seen: u64, epoch: u64) -> u64 {
        let seen = match claim_rotation(&self.word, seen, EPOCH, epoch) {
            Ok(claimed) => claimed,
            Err(seen) => return seen,
        };
        // The slots of epochs from+1 ..= epoch hold epochs that have left:
        // at most both. No call counts into them meanwhile: until the
        // rotation is published, every call sees `from` as current.
        let from = seen & EPOCH;
        let first = (from + 1).max(epoch.saturating_sub(1));
        for count in &self.counts {
            for left in first..=epoch {
                count.fetch_and(!(COUNT << shift(left)), Ordering::AcqRel);
            }
        }
        let rotated = |word: u64| (word & (FAILING | SHEDDING)) | (epoch & EPOCH);
        match self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |word| {
                Some(rotated(word))
            }) {
            Ok(word) | Err(word) => rotated(word),
        }
    }
}
